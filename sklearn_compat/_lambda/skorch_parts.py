"""skorch-ready parts: lambda-orthogonality for your own skorch nets.

skorch already turns a torch module into a scikit-learn estimator; what it lacks is the
regulariser.  :class:`LambdaOrthMixin` adds ``lambda_orth_penalty`` of chosen weights to any
net's loss (with ``lam`` a plain hyper-parameter, so GridSearchCV tunes it), the
:class:`OrthogonalityGap` callback logs ``N`` in the net's history, and
:class:`AlignmentLoss` is the aligner's data loss as a criterion.  The adapter module is
:class:`~sklearn_compat.lambda_orth.AffineAdapter`.

``LambdaOrthAligner`` itself does not train through skorch: its loop keeps the data on the
device and avoids per-step host syncs, which skorch's DataLoader-based loop cannot.
"""

import math
from fnmatch import fnmatchcase

import torch
from skorch import NeuralNetRegressor
from skorch.callbacks import Callback
from torch import nn

from .adapter import AffineAdapter
from .losses import contrastive_loss, lambda_orth_penalty, orthogonality_gap

__all__ = [
    "AffineAdapter",
    "AlignmentLoss",
    "LambdaOrthMixin",
    "LambdaOrthRegressor",
    "OrthogonalityGap",
]


def _regularised(module, pattern):
    """The 2-d parameters of ``module`` whose names match the glob ``pattern``."""
    return [
        (name, p)
        for name, p in module.named_parameters()
        if p.ndim == 2 and "parametrizations." not in name and fnmatchcase(name, pattern)
    ]


class LambdaOrthMixin:
    """Mixin for skorch nets: adds the lambda-orthogonality penalty to the loss.

    Put it before the skorch class: ``class Net(LambdaOrthMixin, NeuralNetRegressor)``.
    The penalty ``sigmoid(lam_sharpness * (N - lam)) * N`` is added for every 2-d
    parameter whose name matches ``lam_parameters`` (a glob; weights stored through a
    torch parametrisation are skipped, they are constrained already).

    Beyond ``lam`` the penalty grows like ``N`` with unit weight, so how far the data loss
    can push ``N`` past ``lam`` depends on the scale of that loss: train on embeddings
    scaled to unit RMS row norm (as :class:`~sklearn_compat.LambdaOrthAligner` does
    internally) for ``lam`` to mean the same on every data set.

    Parameters
    ----------
    lam : float, default=inf
        Threshold on ``N = ||W W^T - I||_F`` (smaller side); ``inf`` adds nothing.
    lam_sharpness : float, default=10.0
        Slope of the sigmoid switch.
    lam_parameters : str, default="*weight"
        Glob over ``module_.named_parameters()`` names, e.g. ``"0.weight"``.
    *args, **kwargs
        Passed on to the skorch net.
    """

    def __init__(
        self, *args, lam=math.inf, lam_sharpness=10.0, lam_parameters="*weight", **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.lam = lam
        self.lam_sharpness = lam_sharpness
        self.lam_parameters = lam_parameters

    def get_loss(self, y_pred, y_true, X=None, training=False):
        loss = super().get_loss(y_pred, y_true, X=X, training=training)
        if math.isinf(self.lam):
            return loss
        for _, weight in _regularised(self.module_, self.lam_parameters):
            loss = loss + lambda_orth_penalty(weight, self.lam, self.lam_sharpness)
        return loss


class LambdaOrthRegressor(LambdaOrthMixin, NeuralNetRegressor):
    """``skorch.NeuralNetRegressor`` with the lambda-orthogonality penalty.

    See :class:`LambdaOrthMixin` for the extra parameters ``lam``, ``lam_sharpness`` and
    ``lam_parameters``; everything else is skorch's.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.lambda_orth import AffineAdapter, LambdaOrthRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(256, 8)).astype(np.float32)
    >>> net = LambdaOrthRegressor(
    ...     AffineAdapter, module__in_features=8, module__out_features=8, lam=0.0,
    ...     max_epochs=2, train_split=None, verbose=0,
    ... ).fit(X, 3 * X)
    >>> net.predict(X).shape
    (256, 8)
    """


class OrthogonalityGap(Callback):
    """Record ``N = ||W W^T - I||_F`` of a module's weight in the history every epoch.

    Parameters
    ----------
    parameter : str, default="weight"
        Name of the parameter in ``net.module_`` (as in ``named_parameters``, or the
        attribute name of a parametrised weight such as ``"weight"``).
    name : str, default="orthogonality_gap"
        History key.
    """

    def __init__(self, parameter="weight", name="orthogonality_gap"):
        self.parameter = parameter
        self.name = name

    def on_epoch_end(self, net, **kwargs):
        module = net.module_
        *path, leaf = self.parameter.split(".")
        for part in path:
            module = getattr(module, part)
        with torch.no_grad():
            value = orthogonality_gap(getattr(module, leaf).detach())
        net.history.record(self.name, float(value))


class AlignmentLoss(nn.Module):
    """Criterion ``mean ||z - y||^2 + contrastive_weight * InfoNCE(z, y)`` (paired).

    The data part of :class:`~sklearn_compat.LambdaOrthAligner`'s objective, for skorch
    nets: ``criterion=AlignmentLoss, criterion__contrastive_weight=0.1``.

    Parameters
    ----------
    contrastive_weight : float, default=0.0
    temperature : float, default=0.1
    """

    def __init__(self, contrastive_weight=0.0, temperature=0.1):
        super().__init__()
        self.contrastive_weight = contrastive_weight
        self.temperature = temperature

    def forward(self, z, y):
        loss = (z - y).pow(2).sum(dim=1).mean()
        if self.contrastive_weight > 0:
            loss = loss + self.contrastive_weight * contrastive_loss(
                z, y, temperature=self.temperature
            )
        return loss

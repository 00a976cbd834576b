"""Lambda-orthogonality in your own skorch net
===========================================

Add lambda-orthogonality to your own skorch net.

``LambdaOrthAligner`` trains one affine adapter.  When your model is something else -- an
adapter followed by a small head, several layers, your own loss -- build it as a skorch
net and mix in :class:`~sklearn_compat.lambda_orth.LambdaOrthMixin`: it adds
``sigmoid(alpha (N - lam)) N`` for the weights you name to the net's loss, and ``lam``
becomes an ordinary hyper-parameter (``set_params``, ``clone``, GridSearchCV).  The
:class:`~sklearn_compat.lambda_orth.OrthogonalityGap` callback logs ``N`` every epoch.

Here: map new-model features into the old space with an adapter followed by a residual
non-linear correction, regularise only the adapter, and compare lam values. Data:
:func:`~sklearn_compat.datasets.load_mnist_features` (old model: the MLP ``mlp_s0``, new
model: the conv net ``cnn_s0``).
"""

# %%
# The module: an adapter and a correction
# ---------------------------------------
# ``AffineAdapter`` is the adapter :class:`~sklearn_compat.LambdaOrthAligner` trains; the
# correction starts at zero, so the net starts as the plain adapter.

import math

import numpy as np
import torch
from skorch import NeuralNetRegressor
from torch import nn

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.datasets import load_mnist_features
from sklearn_compat.lambda_orth import (
    AffineAdapter,
    AlignmentLoss,
    LambdaOrthMixin,
    OrthogonalityGap,
)
from sklearn_compat.metrics import cmc_topk_accuracy


class AdapterWithCorrection(nn.Module):
    """``z = A(x) + g(A(x))``: an affine adapter plus a small residual MLP."""

    def __init__(self, d_in, d_out, hidden=32, init_weight=None):
        super().__init__()
        self.adapter = AffineAdapter(d_in, d_out, weight=init_weight)
        self.correction = nn.Sequential(
            nn.Linear(d_out, hidden), nn.ReLU(), nn.Linear(hidden, d_out)
        )
        nn.init.zeros_(self.correction[2].weight)  # start as the plain adapter
        nn.init.zeros_(self.correction[2].bias)

    def forward(self, x):
        z = self.adapter(x)
        return z + self.correction(z)


# %%
# The net: one line of mixin
# --------------------------
# Any skorch net becomes lambda-orthogonality regularised by listing the mixin first.


class LambdaOrthNet(LambdaOrthMixin, NeuralNetRegressor):
    """A skorch regressor whose loss adds the lambda-orthogonality penalty."""


# %%
# The data
# --------
# The penalty grows like ``N`` beyond ``lam`` with unit weight: train at unit RMS row norm
# so that ``lam`` means what it means for ``LambdaOrthAligner``.


def unit_rms(M):
    return (M / np.sqrt((M.astype(np.float64) ** 2).sum(1).mean())).astype(np.float32)


data = load_mnist_features()
X, Y, labels = unit_rms(data.cnn_s0), unit_rms(data.mlp_s0), data.labels
train, test = data.train_idx[:1500], data.test_idx
print(f"old/old CMC top-1 {cmc_topk_accuracy(Y[test], Y[test], labels[test]):.3f}")

# %%
# Three values of lam
# -------------------
# The adapter starts at the orthogonal Procrustes map, as ``LambdaOrthAligner`` does; only
# ``adapter.weight`` is regularised, and the ``OrthogonalityGap`` callback logs its gap.

start = OrthogonalProcrustesAligner().fit(X[train], Y[train]).W_
for lam in (0.0, 4.0, math.inf):
    torch.manual_seed(0)
    net = LambdaOrthNet(
        AdapterWithCorrection,
        module__d_in=X.shape[1],
        module__d_out=Y.shape[1],
        module__init_weight=start,
        criterion=AlignmentLoss,
        criterion__contrastive_weight=0.1,
        optimizer=torch.optim.Adam,
        lr=1e-3,
        batch_size=256,
        max_epochs=10,
        train_split=None,
        lam=lam,
        lam_parameters="adapter.weight",  # regularise the adapter only
        callbacks=[OrthogonalityGap("adapter.weight")],
        verbose=0,
    )
    net.fit(X[train], Y[train])
    Z = net.predict(X[test])
    gaps = net.history[:, "orthogonality_gap"]
    print(
        f"lam={lam:>4}: gap after epoch 1 {gaps[0]:.2f}, final {gaps[-1]:.2f}; "
        f"B(new)/old CMC top-1 {cmc_topk_accuracy(Z, Y[test], labels[test]):.3f}, "
        f"B/B {cmc_topk_accuracy(Z, Z, labels[test]):.3f}"
    )

"""lambda-orthogonality regularised alignment (Ricci et al., NeurIPS 2025).

``LambdaOrthAligner`` learns an affine adapter from the new model's space into the old
one's, kept within a tunable distance ``lam`` of orthogonality.  The regulariser itself,
:func:`lambda_orth_penalty`, and the adapter module, :class:`AffineAdapter`, are public so
they can be used on other layers; :class:`LambdaOrthMixin`, :class:`LambdaOrthRegressor`,
:class:`AlignmentLoss` and the :class:`OrthogonalityGap` callback bring the regulariser to your
own skorch nets.
"""

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
import scipy.linalg
import torch
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._core.backend import (
    apply_affine,
    no_tf32,
    resolve_device,
    to_torch,
    torch_generator,
)
from ._core.base import BaseAligner
from ._core.validation import check_row_labels, pick_target
from ._lambda.adapter import AffineAdapter
from ._lambda.losses import contrastive_loss, lambda_orth_penalty, orthogonality_gap
from ._lambda.skorch_parts import (
    AlignmentLoss,
    LambdaOrthMixin,
    LambdaOrthRegressor,
    OrthogonalityGap,
)
from ._lambda.training import SMALL_STEP_MACS, TrainConfig, small_problem_threads, train_adapters
from .procrustes import procrustes_from_cross

__all__ = [
    "LambdaOrthAligner",
    "AffineAdapter",
    "AlignmentLoss",
    "LambdaOrthMixin",
    "LambdaOrthRegressor",
    "OrthogonalityGap",
    "lambda_orth_penalty",
    "orthogonality_gap",
    "contrastive_loss",
]

# Below this many rows the default early stopping watches the training loss instead of
# holding rows out: 10% of 2,000 rows is the smallest validation set whose loss is a
# steadier signal than the training loss itself.
_AUTO_EARLY_STOPPING_ROWS = 2000
_CHUNK_ROWS = 65536


class LambdaOrthAligner(BaseAligner):
    """Affine map from X's space into Y's, kept within ``lam`` of orthogonality.

    Trains an affine adapter ``B(x) = x W + b`` (``W`` of shape (d_x, d_y)) with Adam on
    minibatches to minimise

        ``w_B ||B(x) - y||^2 + w_C L_C + lambda_orth_penalty(W, lam)``

    where ``lambda_orth_penalty = sigmoid(sharpness * (N - lam)) * N`` and
    ``N = ||W W^T - I||_F`` on the smaller side of ``W``.  ``lam`` is a threshold on the
    distance from orthogonality: ``lam = 0`` gives a (softly) orthogonal map that keeps
    the new model's own geometry, like :class:`OrthogonalProcrustesAligner`, and
    ``lam = inf`` an unconstrained affine map that fits the old space best but distorts the
    new one most.  In between, the fitted ``orthogonality_gap_`` rises to a little below
    ``lam`` (by up to about 0.5 with the default ``sharpness``) when the data pull ``W``
    away from orthogonality, or stays at the affine fit's own gap when that is smaller.

    The method is Ricci et al.'s [1]_; read more in docs/methods.md, section
    "lambda-orthogonality".

    Parameters
    ----------
    lam : float in [0, inf] or "auto", default="auto"
        Threshold on ``N``.  ``N / sqrt(d)`` with ``d = min(d_x, d_y)`` is the RMS
        deviation of the squared singular values of ``W`` from 1, so a given ``lam`` allows
        less distortion in a larger space.  ``"auto"`` uses ``0.5 * sqrt(d)``, the relative
        distortion of the paper's ``lam = 12`` at ``d = 512``, in any dimension.
        ``np.inf`` removes the regulariser.
    sharpness : float, default=10.0
        Slope ``alpha`` of the sigmoid switch; not given in the paper.  The penalty never
        quite vanishes below ``lam``: its slope there is about
        ``exp(-alpha (lam - N)) alpha N``, and in the unit-RMS coordinates the squared
        error changes little per unit of ``N`` (about 1e-3 between the orthogonal and
        affine fits of real features), so with ``alpha = 1`` the leftover pull holds ``N``
        far below ``lam`` (1.7 at ``lam = 8`` on the MNIST features).  ``alpha = 10``
        makes the switch close to a hinge: ``N`` rises to about ``lam - 1`` there, or to
        the affine fit's own gap when that is smaller.
    strict : bool, default=False
        Keep ``W`` exactly orthogonal (up to the unit conversion ``y_scale_ / x_scale_``)
        through a parametrisation, the paper's strict variant; ``lam`` is then unused and
        ``orthogonality_gap_`` is 0 to rounding.
    alignment_weight : float, default=1.0
        Weight ``w_B`` of the squared error ``||B(x) - y||^2``.
    contrastive_weight : float, default=0.1
        Weight ``w_C`` of the contrastive term: symmetric InfoNCE between ``B(x)`` and
        ``y`` over each minibatch with the pair as the positive, or, when ``labels`` are
        passed to ``fit``, the multi-positive supervised form (every item of the same
        class is a positive).  0 turns it off.
    temperature : float, default=0.1
        Temperature of the contrastive softmax.
    bidirectional : bool, default=False
        Also train a forward adapter ``F(y) = y V + c`` (d_y, d_y) jointly, with the
        paper's ``L_F = ||F(y) - B(x)||^2`` and ``L_C = C(F(y), B(x)) + C(F(y), y)``;
        ``transform_target`` then maps old embeddings into the shared space, for partial
        backfilling.
    forward_weight : float, default=1.0
        Weight ``w_F`` of ``L_F`` (used only when ``bidirectional``).
    init : {"procrustes", "identity", "orthogonal"}, default="procrustes"
        Start of ``W``.  "procrustes" is the orthogonal Procrustes solution (centred when
        ``fit_intercept``) of the training rows: the best orthogonal map, so training
        starts where ``lam = 0`` ends and only moves away from orthogonality as far as the
        data ask and ``lam`` allows; it also makes few epochs enough.  "identity" is only
        meaningful when both spaces share a basis (e.g. a fine-tuned model), and
        "orthogonal" (random) starts far from any good map.
    fit_intercept : bool, default=True
        Learn the bias ``b``.
    rescale : bool, default=True
        Divide X and Y by their RMS row norms (``x_scale_``, ``y_scale_``) before training
        and fold the scales back into ``W_`` and ``bias_``.  The losses, ``lr``, ``lam``
        and ``temperature`` then mean the same for embeddings of any scale, and
        orthogonality is measured in these unit-RMS coordinates, which for the
        L2-normalised embeddings of the paper are the user's own.
    max_epochs : int, default=200
        Maximum passes over the training rows.  Training starts at the Procrustes
        solution, so a few epochs already give a good map; moving away from it by ``lam``
        at ``lr = 1e-3`` takes on the order of a thousand Adam steps.
    batch_size : int, default=256
        Rows per minibatch (the last one of an epoch may be smaller).
    lr : float, default=1e-3
        Adam learning rate (the paper's value).
    early_stopping : bool or "auto", default="auto"
        Hold out ``validation_fraction`` of the rows, stop when their loss has not
        improved by ``tol`` for ``n_iter_no_change`` epochs and keep the best epoch's
        weights.  "auto" does so when there are at least 2,000 rows; otherwise (and with
        False) training stops when the training loss stalls in the same way.
    validation_fraction : float in (0, 1), default=0.1
        Share of the rows held out for early stopping.
    n_iter_no_change : int, default=10
        Epochs without improvement before stopping.
    tol : float, default=1e-5
        Smallest improvement of the monitored loss that counts.  The losses are in
        unit-RMS coordinates, where the squared error of a good map is typically 0.01-0.5,
        so the same ``tol`` suits embeddings of any scale.
    warm_start : bool, default=False
        Continue from the previous fit's adapters and scales (with a fresh optimizer);
        ``history_`` and ``n_epochs_`` then accumulate.
    random_state : int, RandomState instance or None, default=None
        Seeds the validation split, the "orthogonal" init and the minibatch order; an int
        makes fits repeatable on the CPU (CUDA kernels may still differ in the last bits).
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to train and transform.
    verbose : int, default=0
        Show a progress bar over epochs when > 0.

    Attributes
    ----------
    W_ : ndarray of shape (n_features_in_, n_targets_)
        The linear part of the map, in the user's units (float64).
    bias_ : ndarray of shape (n_targets_,)
        The bias (zeros unless ``fit_intercept``).
    orthogonality_gap_ : float
        ``N = ||Q Q^T - I||_F`` on the smaller side, for ``Q = W_ * x_scale_ / y_scale_``,
        the matrix the regulariser acted on.
    lam_ : float
        The threshold used (``lam``, or its "auto" value).
    x_scale_, y_scale_ : float
        RMS row norms of X and Y (1.0 unless ``rescale``).
    history_ : dict of lists
        Per-epoch means on the training rows of ``loss`` and its parts (``alignment``,
        ``contrastive``, ``forward``, ``penalty`` when used), ``orthogonality_gap`` and,
        with early stopping on held-out rows, ``valid_loss``.  ``pandas.DataFrame(history_)``
        tabulates it.
    n_epochs_ : int
        Epochs run.
    best_epoch_ : int or None
        The epoch whose weights were kept (held-out early stopping), else None.
    forward_W_ : ndarray of shape (n_targets_, n_targets_)
        Linear part of the forward adapter (``bidirectional`` only).
    forward_bias_ : ndarray of shape (n_targets_,)
        Its bias (``bidirectional`` only).
    n_features_in_ : int
        Width of X.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, when X was a DataFrame with string columns.

    See Also
    --------
    OrthogonalProcrustesAligner : the closed-form ``lam = 0`` end.
    AffineAligner : the closed-form ``lam = inf`` end (least squares).
    lambda_orth_penalty : the regulariser, for your own layers.

    Notes
    -----
    Units.  With ``rescale`` the adapter is trained on ``X / x_scale_`` and
    ``Y / y_scale_``; the fitted map in user units is ``W_ = (y_scale_ / x_scale_) Q`` and
    ``bias_ = y_scale_ c``.  Orthogonality therefore means "a rotation/reflection up to the
    global unit conversion between the two spaces": a conformal map, which is what keeps
    cosine neighbourhoods, and ``orthogonality_gap_`` is computed on exactly the ``Q`` the
    regulariser saw.

    Training runs in float32 on ``device`` whatever the input dtype (the adapters gain
    nothing from float64 under Adam); the fitted attributes are float64 and ``transform``
    returns X's dtype (float64 input beyond float32's range is first brought into it by an
    exact power of two, folded into ``x_scale_``/``y_scale_``).  A diverging fit (a
    non-finite epoch loss, or one more than 10 times above the larger of its starting loss
    and the zero map's squared error, measured on the monitored rows) raises
    ``FloatingPointError`` naming ``lr`` and ``lam`` instead of returning a wrecked map,
    and leaves the estimator as it was.  The strict variant's final ``W`` is projected
    onto the orthogonal matrices in float64, so its gap is at rounding level.  Its
    parametrisation moves continuously, so it keeps the determinant sign of its start: one
    more reason to start at the Procrustes solution, which picks the right one (a square
    "identity" start reaches rotations only).

    Small CPU problems (``batch_size * d_x * d_y`` up to about a million) train with one
    torch thread, restored afterwards: at that size thread synchronisation costs more
    than it saves, and on a loaded machine it is many times slower.

    References
    ----------
    .. [1] Ricci, Biondi, Pernici, Patras, Del Bimbo, "lambda-Orthogonality Regularization
       for Compatible Representation Learning", NeurIPS 2025, arXiv:2509.16664.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import ortho_group
    >>> from sklearn_compat import LambdaOrthAligner
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 16))
    >>> Y = X @ ortho_group.rvs(16, random_state=0)
    >>> aligner = LambdaOrthAligner(lam=2.0, max_epochs=5, random_state=0).fit(X, Y)
    >>> aligner.score(X, Y)
    1.0
    >>> aligner.orthogonality_gap_ < 0.1
    True
    """

    _parameter_constraints: dict = {
        "lam": [Interval(Real, 0, math.inf, closed="both"), StrOptions({"auto"})],
        "sharpness": [Interval(Real, 0, None, closed="neither")],
        "strict": ["boolean"],
        "alignment_weight": [Interval(Real, 0, None, closed="left")],
        "contrastive_weight": [Interval(Real, 0, None, closed="left")],
        "temperature": [Interval(Real, 0, None, closed="neither")],
        "bidirectional": ["boolean"],
        "forward_weight": [Interval(Real, 0, None, closed="left")],
        "init": [StrOptions({"procrustes", "identity", "orthogonal"})],
        "fit_intercept": ["boolean"],
        "rescale": ["boolean"],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "early_stopping": ["boolean", StrOptions({"auto"})],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "random_state": ["random_state"],
        "device": [str, torch.device],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        lam="auto",
        *,
        sharpness=10.0,
        strict=False,
        alignment_weight=1.0,
        contrastive_weight=0.1,
        temperature=0.1,
        bidirectional=False,
        forward_weight=1.0,
        init="procrustes",
        fit_intercept=True,
        rescale=True,
        max_epochs=200,
        batch_size=256,
        lr=1e-3,
        early_stopping="auto",
        validation_fraction=0.1,
        n_iter_no_change=10,
        tol=1e-5,
        warm_start=False,
        random_state=None,
        device="auto",
        verbose=0,
    ):
        self.lam = lam
        self.sharpness = sharpness
        self.strict = strict
        self.alignment_weight = alignment_weight
        self.contrastive_weight = contrastive_weight
        self.temperature = temperature
        self.bidirectional = bidirectional
        self.forward_weight = forward_weight
        self.init = init
        self.fit_intercept = fit_intercept
        self.rescale = rescale
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.warm_start = warm_start
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, Y=None, labels=None, *, y=None):
        """Train the adapter on paired rows.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Source embeddings (the new model's).
        Y : array-like or torch.Tensor of shape (n_samples, n_targets)
            Target embeddings of the same items in the same row order (the old model's).
        labels : array-like of shape (n_samples,), default=None
            Class labels of the items.  When given, the contrastive term becomes the
            supervised multi-positive form.  Route them through a Pipeline or
            GridSearchCV with ``set_fit_request(labels=True)`` and metadata routing on.
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.

        Returns
        -------
        self : object
            Fitted aligner.
        """
        Y = pick_target(Y, y)
        refuse_bool_numbers(self)
        warm = bool(self.warm_start) and hasattr(self, "W_")
        if warm and self.bidirectional and not hasattr(self, "forward_W_"):
            raise ValueError(
                "warm_start with bidirectional=True needs a previous bidirectional fit; "
                "set warm_start=False to start over."
            )
        rng = check_random_state(self.random_state)
        data = self._prepare(X, Y, labels, rng, reset=not warm)
        start = self._fitted_map() if warm else None
        return self._train(data, rng, start=start, accumulate=warm)

    # The fit in two steps, so that LambdaOrthAlignerCV can prepare a fold's rows once and
    # train many lam values on them: ``_prepare`` validates, splits, rescales and moves the
    # rows to the device; ``_train`` trains from a given map (or the ``init`` start).
    def _prepare(self, X, Y, labels, rng, *, reset):
        """Validated, split and rescaled training rows on the device (a ``_FitData``).

        A warm start (``reset=False``) keeps the previous fit's unit scales; a cold one
        measures the training rows'.
        """
        X, Y = self._validate_pair(X, Y, reset=reset)
        n = X.shape[0]
        codes = self._encode_labels(labels, n)
        device = resolve_device(self.device)

        early = self.early_stopping
        if early == "auto":
            early = n >= _AUTO_EARLY_STOPPING_ROWS
        n_valid = int(round(self.validation_fraction * n)) if early else 0
        if early and (n_valid < 1 or n - n_valid < 1):
            raise ValueError(
                f"early_stopping with validation_fraction={self.validation_fraction} "
                f"leaves no training or validation rows out of {n}; pass more rows or "
                "early_stopping=False."
            )
        order = rng.permutation(n) if early else None

        # Training runs in float32: float64 input beyond its range is brought into it by an
        # exact power-of-two factor first, folded into the unit scales below.
        x_pre, y_pre = _float32_prescale(X, "X", self.rescale), _float32_prescale(
            Y, "Y", self.rescale
        )
        Xt = to_torch(X if x_pre == 1.0 else X / x_pre, device, torch.float32)
        Yt = to_torch(Y if y_pre == 1.0 else Y / y_pre, device, torch.float32)
        Lt = None if codes is None else torch.as_tensor(codes, device=device)
        if early:
            valid_idx = torch.as_tensor(order[:n_valid], device=device)
            train_idx = torch.as_tensor(order[n_valid:], device=device)
            valid = (Xt[valid_idx], Yt[valid_idx], None if Lt is None else Lt[valid_idx])
            train = (Xt[train_idx], Yt[train_idx], None if Lt is None else Lt[train_idx])
        else:
            train, valid = (Xt, Yt, Lt), None
        del Xt, Yt, Lt

        if not reset:
            x_scale, y_scale = self.x_scale_, self.y_scale_
        elif self.rescale:
            x_scale = _rms_norm(train[0]) * x_pre
            y_scale = _rms_norm(train[1]) * y_pre
        else:
            x_scale = y_scale = 1.0
        # New tensors (never in place: on the CPU they may share memory with the input).
        train = _scaled(train, x_scale / x_pre, y_scale / y_pre)
        valid = None if valid is None else _scaled(valid, x_scale / x_pre, y_scale / y_pre)
        return _FitData(train, valid, float(x_scale), float(y_scale), device)

    def _fitted_map(self):
        """This fit's adapters in user units, the start of a warm-started fit."""
        forward = (self.forward_W_, self.forward_bias_) if self.bidirectional else None
        return _StartMap(self.W_, self.bias_, forward)

    def _train(self, data, rng, *, start=None, accumulate=False):
        """Train on prepared ``data`` from ``start`` (a ``_StartMap``, None: ``init``).

        With ``accumulate`` the history and epoch count continue the current fit's.
        """
        (X_train, Y_train, _), device = data.train, data.device
        d_x, d_y = X_train.shape[1], Y_train.shape[1]
        x_scale, y_scale = data.x_scale, data.y_scale
        lam = 0.5 * math.sqrt(min(d_x, d_y)) if self.lam == "auto" else float(self.lam)
        if start is not None:
            W0 = start.W * (x_scale / y_scale)
            b0 = start.bias / y_scale
            if self.strict:
                W0 = _polar(W0)  # a non-strict start: begin at its nearest isometry
        else:
            W0, b0 = self._initial_map(X_train, Y_train, rng)
        # torch's orthogonal parametrisation completes a rectangular start to a square
        # matrix with torch.randn: seed it from random_state, without touching the
        # caller's global torch RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(rng.randint(0, 2**31 - 1)))
            backward = AffineAdapter(
                d_x, d_y, bias=self.fit_intercept, strict=self.strict, weight=W0, bias_init=b0
            ).to(device)
        forward = None
        if self.bidirectional:
            warm_forward = start is not None and start.forward is not None
            V0 = start.forward[0] if warm_forward else np.eye(d_y)
            c0 = start.forward[1] / y_scale if warm_forward else np.zeros(d_y)
            forward = AffineAdapter(d_y, d_y, weight=V0, bias_init=c0).to(device)

        config = TrainConfig(
            lam=lam,
            sharpness=float(self.sharpness),
            strict=bool(self.strict),
            alignment_weight=float(self.alignment_weight),
            contrastive_weight=float(self.contrastive_weight),
            forward_weight=float(self.forward_weight),
            temperature=float(self.temperature),
            bidirectional=bool(self.bidirectional),
            max_epochs=int(self.max_epochs),
            batch_size=int(self.batch_size),
            lr=float(self.lr),
            n_iter_no_change=int(self.n_iter_no_change),
            tol=float(self.tol),
            verbose=int(self.verbose),
        )
        generator = torch_generator(rng, device)
        with small_problem_threads(self._is_small(device, d_x, d_y)):
            history, n_epochs, best_epoch = train_adapters(
                backward,
                forward,
                data.train,
                data.valid,
                config,
                generator,
                desc=type(self).__name__,
            )

        Q = backward.weight.detach().cpu().double().numpy()
        if self.strict:
            Q = _polar(Q)
        c = (
            np.zeros(d_y)
            if backward.bias is None
            else backward.bias.detach().cpu().double().numpy()
        )
        if accumulate and hasattr(self, "history_"):
            history = _concat_history(self.history_, history, self.n_epochs_)
            n_epochs += self.n_epochs_
        self.lam_ = lam
        self.x_scale_ = x_scale
        self.y_scale_ = y_scale
        self.W_ = Q * (y_scale / x_scale)
        self.bias_ = c * y_scale
        self.orthogonality_gap_ = orthogonality_gap(Q)
        self.history_ = history
        self.n_epochs_ = int(n_epochs)
        self.best_epoch_ = best_epoch
        if self.bidirectional:
            self.forward_W_ = forward.weight.detach().cpu().double().numpy()
            self.forward_bias_ = forward.bias.detach().cpu().double().numpy() * y_scale
        else:
            for attr in ("forward_W_", "forward_bias_"):
                self.__dict__.pop(attr, None)
        return self

    def _is_small(self, device, d_x, d_y):
        """Whether one minibatch step is small enough to train single-threaded (Notes)."""
        return device.type == "cpu" and self.batch_size * d_x * d_y <= SMALL_STEP_MACS

    def _encode_labels(self, labels, n):
        return None if labels is None else check_row_labels(labels, n)

    def _initial_map(self, X, Y, rng):
        """Start of the adapter in normalised units: (W0, b0) as float64 numpy."""
        d_x, d_y = X.shape[1], Y.shape[1]
        centre = self.fit_intercept and X.shape[0] > 0
        mean_x = X.mean(dim=0, dtype=torch.float64) if centre else None
        mean_y = Y.mean(dim=0, dtype=torch.float64) if centre else None
        if self.init == "procrustes":
            W0 = procrustes_from_cross(_cross(X, Y, mean_x, mean_y))[0]
        elif self.init == "identity":
            W0 = np.eye(d_x, d_y)
        else:
            G = rng.standard_normal((max(d_x, d_y), min(d_x, d_y)))
            W0 = np.linalg.qr(G)[0]
            W0 = W0 if d_x >= d_y else W0.T
        if mean_x is None:
            return W0, np.zeros(d_y)
        return W0, mean_y.cpu().numpy() - mean_x.cpu().numpy() @ W0

    # ------------------------------------------------------------------ transforms
    def _affine_map(self):
        return self.W_, self.bias_

    def transform_target(self, Y):
        """Map target (old-model) embeddings into the shared space with the forward adapter.

        Needs ``bidirectional=True``.  Used for partial backfilling: the gallery holds
        ``transform_target(old)`` items until they are re-embedded as ``transform(new)``.

        Parameters
        ----------
        Y : array-like of shape (n_samples, n_targets_)
            Embeddings in Y's space.

        Returns
        -------
        ndarray of shape (n_samples, n_targets_)
            In Y's float dtype.
        """
        check_is_fitted(self)
        if not hasattr(self, "forward_W_"):
            raise ValueError(
                "transform_target needs the forward adapter: fit with bidirectional=True."
            )
        Y = self._validate_target(Y, name="Y")
        return apply_affine(Y, self.forward_W_, self.forward_bias_, self._compute_device())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


@dataclass
class _FitData:
    """A training set ready for ``LambdaOrthAligner._train``: (X, Y, labels) tensors on
    ``device`` in unit-RMS coordinates, the held-out part for early stopping (or None)
    and the scales that convert back to user units."""

    train: tuple
    valid: tuple | None
    x_scale: float
    y_scale: float
    device: torch.device


class _StartMap(NamedTuple):
    """Adapters to start training from, in user units: ``x W + bias`` and, for the
    forward adapter, ``forward = (V, c)`` or None."""

    W: np.ndarray
    bias: np.ndarray
    forward: tuple | None = None


def refuse_bool_numbers(estimator):
    """Refuse True/False given for a numeric hyper-parameter (Python counts them as 1/0).

    scikit-learn's ``Interval(Real, ...)`` constraint accepts ``lam=True`` as 1.0, which
    is never what the caller meant.
    """
    for name, constraints in estimator._parameter_constraints.items():
        value = getattr(estimator, name)
        numeric = any(isinstance(c, Interval) for c in constraints)
        if numeric and "boolean" not in constraints and isinstance(value, bool | np.bool_):
            raise InvalidParameterError(
                f"The {name!r} parameter of {type(estimator).__name__} must be a number, "
                f"got {value!r} (a bool)."
            )


def _concat_history(previous, new, n_previous):
    """Join two fits' histories; a key missing from one fit is NaN over its epochs."""
    n_new = len(next(iter(new.values())))
    keys = list(previous) + [k for k in new if k not in previous]
    return {
        k: previous.get(k, [math.nan] * n_previous) + new.get(k, [math.nan] * n_new) for k in keys
    }


def _rms_norm(T):
    """Root-mean-square row norm (1.0 for an all-zero or empty matrix)."""
    if T.shape[0] == 0:
        return 1.0
    # In float64: squared norms of float32 rows overflow from about 1e19 and underflow
    # below 1e-19, which would silently turn the rescaling off for such embeddings.
    value = float(torch.linalg.vector_norm(T, dim=1, dtype=torch.float64).pow(2).mean().sqrt())
    return value if value > 0 and math.isfinite(value) else 1.0


# Entries beyond these powers of two lose float32's range (overflow near 2**128, squares
# near 2**64) or its precision (subnormals below 2**-126).
_FLOAT32_SAFE = (2.0**-60, 2.0**60)


def _float32_prescale(A, name, rescale):
    """An exact power of two that brings ``A``'s largest entry near 1 when float32 would
    overflow or underflow on it, else 1.0; refuses when ``rescale`` is off."""
    if A.dtype == np.float32 or A.size == 0:
        return 1.0  # float32 input is already representable; the kernels handle its scale
    peak = float(np.abs(A).max())
    if peak == 0 or _FLOAT32_SAFE[0] <= peak <= _FLOAT32_SAFE[1]:
        return 1.0
    if not rescale:
        raise ValueError(
            f"LambdaOrthAligner trains in float32, and {name} holds values of size "
            f"{peak:.3g}, outside its safe range: pass rescale=True or rescale {name}."
        )
    return math.ldexp(1.0, math.frexp(peak)[1])


def _scaled(part, x_scale, y_scale):
    X, Y, L = part
    if x_scale != 1.0:
        X = X * (1.0 / x_scale)
    if y_scale != 1.0:
        Y = Y * (1.0 / y_scale)
    return X, Y, L


def _cross(X, Y, mean_x, mean_y):
    """``(X - m_x)^T (Y - m_y)`` in float64, accumulated over row chunks (TF32 off)."""
    cross = torch.zeros(X.shape[1], Y.shape[1], dtype=torch.float64, device=X.device)
    with no_tf32():
        for start in range(0, X.shape[0], _CHUNK_ROWS):
            xc = X[start : start + _CHUNK_ROWS].double()
            yc = Y[start : start + _CHUNK_ROWS].double()
            if mean_x is not None:
                xc, yc = xc - mean_x, yc - mean_y
            cross += xc.T @ yc
    return cross.cpu().numpy()


def _polar(W):
    """The nearest matrix with orthonormal rows/columns (float64 SVD)."""
    U, _, Vt = scipy.linalg.svd(W, full_matrices=False)
    return U @ Vt

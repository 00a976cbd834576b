"""One lambda-orthogonality fit in two steps, shared by LambdaOrthAligner and the lam path.

``prepare_fit_data`` validates the labels, holds rows out for early stopping, rescales
and moves the rows to the device; ``train_map`` trains one adapter on such prepared rows
from a given start (or the estimator's ``init``) and returns the fitted map in user
units; ``store_fit`` writes a fitted map onto an estimator as its fitted attributes.
:class:`~sklearn_compat.LambdaOrthAligner` runs the three once; ``lambda_orth_path``
prepares a training set once and trains many ``lam`` values on it.

The training settings are read from a :class:`~sklearn_compat.LambdaOrthAligner`'s public
parameters (``settings``), which these functions never modify.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.linalg
import torch

from .._core.backend import no_tf32, resolve_device, to_torch, torch_generator
from .._core.polar import procrustes_from_cross
from .._core.validation import check_row_labels
from .adapter import AffineAdapter
from .losses import orthogonality_gap
from .training import SMALL_STEP_MACS, TrainConfig, small_problem_threads, train_adapters

__all__ = [
    "FitData",
    "StartMap",
    "FittedMap",
    "resolve_lam",
    "encode_fit_labels",
    "prepare_fit_data",
    "train_map",
    "store_fit",
    "is_small_problem",
]

# Below this many rows the default early stopping watches the training loss instead of
# holding rows out: 10% of 2,000 rows is the smallest validation set whose loss is a
# steadier signal than the training loss itself.
AUTO_EARLY_STOPPING_ROWS = 2000
_CHUNK_ROWS = 65536


@dataclass
class FitData:
    """A training set ready for :func:`train_map`: (X, Y, labels) tensors on ``device`` in
    unit-RMS coordinates, the held-out part for early stopping (or None) and the scales
    that convert back to user units."""

    train: tuple
    valid: tuple | None
    x_scale: float
    y_scale: float
    device: torch.device


class StartMap(NamedTuple):
    """Adapters to start training from, in user units: ``x W + bias`` and, for the
    forward adapter, ``forward = (V, c)`` or None."""

    W: np.ndarray
    bias: np.ndarray
    forward: tuple | None = None


@dataclass
class FittedMap:
    """The outcome of one :func:`train_map`, in user units (float64).

    ``W``, ``bias``: the map ``x W + bias``; ``forward``: ``(V, c)`` of the forward
    adapter or None; ``orthogonality_gap``: ``N`` of the unit-RMS matrix the regulariser
    acted on; ``history``, ``n_epochs``, ``best_epoch``: as the estimator's attributes.
    """

    W: np.ndarray
    bias: np.ndarray
    forward: tuple | None
    lam: float
    x_scale: float
    y_scale: float
    orthogonality_gap: float
    history: dict
    n_epochs: int
    best_epoch: int | None

    def start(self):
        """This map as the start of another fit."""
        return StartMap(self.W, self.bias, self.forward)

    mlp: list | None = None  # weights of a residual MLP (ResidualAdapterAligner)


def resolve_lam(lam, d_x, d_y):
    """The threshold a ``lam`` parameter means: "auto" is ``0.5 * sqrt(min(d_x, d_y))``."""
    return 0.5 * math.sqrt(min(d_x, d_y)) if lam == "auto" else float(lam)


def is_small_problem(settings, device, d_x, d_y):
    """Whether one minibatch step is small enough to train single-threaded on the CPU."""
    return device.type == "cpu" and settings.batch_size * d_x * d_y <= SMALL_STEP_MACS


def encode_fit_labels(labels, n):
    """Integer codes of ``labels`` (one per row of X), or None; one-line errors."""
    return None if labels is None else check_row_labels(labels, n)


def prepare_fit_data(settings, X, Y, codes, rng, *, scales=None):
    """Validated numpy rows -> a :class:`FitData` on ``settings.device``.

    ``codes`` are the rows' label codes (or None).  ``rng`` draws the early-stopping split
    (the first draw of a fit).  ``scales = (x_scale, y_scale)`` keeps given unit scales (a
    warm start); None measures the training rows' (or 1.0 without ``rescale``).
    """
    n = X.shape[0]
    device = resolve_device(settings.device)
    early = settings.early_stopping
    if early == "auto":
        early = n >= AUTO_EARLY_STOPPING_ROWS
    n_valid = int(round(settings.validation_fraction * n)) if early else 0
    if early and (n_valid < 1 or n - n_valid < 1):
        raise ValueError(
            f"early_stopping with validation_fraction={settings.validation_fraction} leaves "
            f"no training or validation rows out of {n}; pass more rows or "
            "early_stopping=False."
        )
    order = rng.permutation(n) if early else None

    # Training runs in float32: float64 input beyond its range is brought into it by an
    # exact power-of-two factor first, folded into the unit scales below.
    x_pre = _float32_prescale(X, "X", settings.rescale)
    y_pre = _float32_prescale(Y, "Y", settings.rescale)
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

    if scales is not None:
        x_scale, y_scale = scales
    elif settings.rescale:
        x_scale, y_scale = _rms_norm(train[0]) * x_pre, _rms_norm(train[1]) * y_pre
    else:
        x_scale = y_scale = 1.0
    # New tensors (never in place: on the CPU they may share memory with the input).
    train = _scaled(train, x_scale / x_pre, y_scale / y_pre)
    valid = None if valid is None else _scaled(valid, x_scale / x_pre, y_scale / y_pre)
    return FitData(train, valid, float(x_scale), float(y_scale), device)


def train_map(
    settings,
    data,
    rng,
    *,
    lam=None,
    n_iter_no_change=None,
    start=None,
    rel_tol=0.0,
    readings_per_epoch=1,
    bound_patience=None,
):
    """Train one adapter on prepared ``data``; returns a :class:`FittedMap`.

    ``lam`` and ``n_iter_no_change`` default to the settings' own; ``rel_tol``,
    ``readings_per_epoch`` and ``bound_patience`` refine early stopping (see
    ``TrainConfig``); ``start`` is a
    :class:`StartMap` in user units, None for the settings' ``init``.  Raises
    ``FloatingPointError`` when training diverges.
    """
    (X_train, Y_train, _), device = data.train, data.device
    d_x, d_y = X_train.shape[1], Y_train.shape[1]
    x_scale, y_scale = data.x_scale, data.y_scale
    lam = resolve_lam(settings.lam if lam is None else lam, d_x, d_y)
    patience = settings.n_iter_no_change if n_iter_no_change is None else n_iter_no_change
    if start is not None:
        W0 = start.W * (x_scale / y_scale)
        b0 = start.bias / y_scale
        if settings.strict:
            W0 = _polar(W0)  # a non-strict start: begin at its nearest isometry
    else:
        W0, b0 = _initial_map(settings, X_train, Y_train, rng)
    # torch's orthogonal parametrisation completes a rectangular start to a square
    # matrix with torch.randn: seed it from random_state, without touching the
    # caller's global torch RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(rng.randint(0, 2**31 - 1)))
        # A subclass may add to the affine adapter (ResidualAdapterAligner: a residual MLP).
        make = getattr(settings, "_backward_adapter", None)
        if make is not None:
            backward = make(d_x, d_y, W0, b0).to(device)
        else:
            backward = AffineAdapter(
                d_x,
                d_y,
                bias=fitted_intercept(settings),
                strict=settings.strict,
                weight=W0,
                bias_init=b0,
            ).to(device)
    forward = None
    if settings.bidirectional:
        warm_forward = start is not None and start.forward is not None
        V0 = start.forward[0] if warm_forward else np.eye(d_y)
        c0 = start.forward[1] / y_scale if warm_forward else np.zeros(d_y)
        forward = AffineAdapter(d_y, d_y, weight=V0, bias_init=c0).to(device)

    config = TrainConfig(
        lam=lam,
        sharpness=float(settings.sharpness),
        strict=bool(settings.strict),
        alignment_weight=float(settings.alignment_weight),
        contrastive_weight=float(settings.contrastive_weight),
        forward_weight=float(settings.forward_weight),
        temperature=float(settings.temperature),
        bidirectional=bool(settings.bidirectional),
        max_epochs=int(settings.max_epochs),
        batch_size=int(settings.batch_size),
        lr=float(settings.lr),
        n_iter_no_change=int(patience),
        tol=float(settings.tol),
        verbose=int(settings.verbose),
        rel_tol=float(rel_tol),
        readings_per_epoch=int(readings_per_epoch),
        bound_patience=bound_patience,
    )
    generator = torch_generator(rng, device)
    with small_problem_threads(is_small_problem(settings, device, d_x, d_y)):
        history, n_epochs, best_epoch = train_adapters(
            backward,
            forward,
            data.train,
            data.valid,
            config,
            generator,
            desc=type(settings).__name__,
        )

    Q = backward.weight.detach().cpu().double().numpy()
    if settings.strict:
        Q = _polar(Q)
    c = np.zeros(d_y) if backward.bias is None else backward.bias.detach().cpu().double().numpy()
    fitted_forward = None
    if settings.bidirectional:
        fitted_forward = (
            forward.weight.detach().cpu().double().numpy(),
            forward.bias.detach().cpu().double().numpy() * y_scale,
        )
    residual = getattr(backward, "residual", None)
    mlp = None
    if residual is not None:
        # The MLP saw x / x_scale and produced units of y / y_scale: fold both in.
        first, last = residual[0], residual[2]
        mlp = [
            first.weight.detach().cpu().double().numpy().T / x_scale,
            first.bias.detach().cpu().double().numpy(),
            last.weight.detach().cpu().double().numpy().T * y_scale,
            last.bias.detach().cpu().double().numpy() * y_scale,
        ]
    return FittedMap(
        mlp=mlp,
        W=Q * (y_scale / x_scale),
        bias=c * y_scale,
        forward=fitted_forward,
        lam=lam,
        x_scale=x_scale,
        y_scale=y_scale,
        orthogonality_gap=orthogonality_gap(Q),
        history=history,
        n_epochs=int(n_epochs),
        best_epoch=best_epoch,
    )


def store_fit(estimator, fitted, *, accumulate=False):
    """Write ``fitted`` (a :class:`FittedMap`) onto ``estimator``'s fitted attributes.

    With ``accumulate`` the history and epoch count continue the estimator's current fit.
    """
    history, n_epochs = fitted.history, fitted.n_epochs
    if accumulate and hasattr(estimator, "history_"):
        history = _concat_history(estimator.history_, history, estimator.n_epochs_)
        n_epochs += estimator.n_epochs_
    estimator.lam_ = fitted.lam
    estimator.x_scale_ = fitted.x_scale
    estimator.y_scale_ = fitted.y_scale
    estimator.W_ = fitted.W
    estimator.bias_ = fitted.bias
    estimator.orthogonality_gap_ = fitted.orthogonality_gap
    estimator.history_ = history
    estimator.n_epochs_ = int(n_epochs)
    estimator.best_epoch_ = fitted.best_epoch
    if hasattr(estimator, "_backward_adapter"):  # ResidualAdapterAligner
        estimator.mlp_weights_ = [] if fitted.mlp is None else fitted.mlp
    if fitted.forward is not None:
        estimator.forward_W_, estimator.forward_bias_ = fitted.forward
    else:
        for attr in ("forward_W_", "forward_bias_"):
            estimator.__dict__.pop(attr, None)
    return estimator


def fitted_intercept(settings):
    """The ``fit_intercept`` in force: the fitted choice where the parameter is "auto"."""
    value = settings.fit_intercept
    if isinstance(value, str) and value == "auto":
        return bool(getattr(settings, "center_", True))
    return bool(value)


def _initial_map(settings, X, Y, rng):
    """Start of the adapter in normalised units: (W0, b0) as float64 numpy."""
    d_x, d_y = X.shape[1], Y.shape[1]
    centre = fitted_intercept(settings) and X.shape[0] > 0
    mean_x = X.mean(dim=0, dtype=torch.float64) if centre else None
    mean_y = Y.mean(dim=0, dtype=torch.float64) if centre else None
    if settings.init == "procrustes":
        W0 = procrustes_from_cross(_cross(X, Y, mean_x, mean_y))[0]
    elif settings.init == "identity":
        W0 = np.eye(d_x, d_y)
    else:
        G = rng.standard_normal((max(d_x, d_y), min(d_x, d_y)))
        W0 = np.linalg.qr(G)[0]
        W0 = W0 if d_x >= d_y else W0.T
    if mean_x is None:
        return W0, np.zeros(d_y)
    return W0, mean_y.cpu().numpy() - mean_x.cpu().numpy() @ W0


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


# Entries beyond these powers of two lose float32's range (overflow near 2**128, squares
# near 2**64) or its precision (subnormals below 2**-126).
_FLOAT32_SAFE = (2.0**-60, 2.0**60)


def _float32_prescale(A, name, rescale):
    """An exact power of two that brings ``A``'s largest entry near 1 when float32 would
    overflow or underflow on it, else 1.0; refuses when ``rescale`` is off."""
    if A.dtype == np.float32 or A.size == 0:
        return 1.0  # float32 input is already representable; the kernels handle its scale
    peak = max(float(A.max()), -float(A.min()))  # no |A| temporary of A's size
    if peak == 0 or _FLOAT32_SAFE[0] <= peak <= _FLOAT32_SAFE[1]:
        return 1.0
    if not rescale:
        raise ValueError(
            f"LambdaOrthAligner trains in float32, and {name} holds values of size "
            f"{peak:.3g}, outside its safe range: pass rescale=True or rescale {name}."
        )
    return math.ldexp(1.0, math.frexp(peak)[1])

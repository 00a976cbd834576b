"""Whether a trained map beats the orthogonal map it starts from (``lam="auto"``,
``hidden="auto"``).

:class:`~sklearn_compat.LambdaOrthAligner` and
:class:`~sklearn_compat.ResidualAdapterAligner` start from the orthogonal Procrustes map
of the training rows and train away from it (a non-orthogonal part, a residual MLP).  With
their ``"auto"`` default the trained map and that start are scored by paired top-1 on the
same held-out rows (:mod:`.._core.step_choice`): the early-stopping rows when the fit
holds some out (they are never trained on), else a held-out fold of the rows, on which a
second training runs on the rest.  Where training does not win by more than one paired
standard error, the fit is the Procrustes start of all rows.
"""

import numpy as np
import torch
from sklearn.utils import check_random_state

from .._core import holdout, step_choice
from .._core.polar import procrustes_from_cross
from .fitting import FittedMap, _cross, fitted_intercept, prepare_fit_data, train_map
from .losses import orthogonality_gap


def orthogonal_start(settings, X, Y, x_scale, y_scale):
    """The Procrustes start (centred when the intercept is fitted) of unit-RMS rows, in
    user units: ``(W, bias)``."""
    centre = fitted_intercept(settings) and X.shape[0] > 0
    mean_x = X.mean(dim=0, dtype=torch.float64) if centre else None
    mean_y = Y.mean(dim=0, dtype=torch.float64) if centre else None
    Q = procrustes_from_cross(_cross(X, Y, mean_x, mean_y))[0]
    c = np.zeros(Y.shape[1])
    if centre:
        c = mean_y.cpu().numpy() - mean_x.cpu().numpy() @ Q
    return Q * (y_scale / x_scale), c * y_scale


def mapped(fitted, X):
    """``X`` (user units, float64 numpy) through a :class:`FittedMap`."""
    out = X @ fitted.W + fitted.bias
    if fitted.mlp:
        W1, b1, W2, b2 = fitted.mlp
        out = out + np.maximum(X @ W1 + b1, 0) @ W2 + b2
    return out


def _user_rows(part, data):
    X, Y, _ = part
    return (
        X.detach().cpu().double().numpy() * data.x_scale,
        Y.detach().cpu().double().numpy() * data.y_scale,
    )


def _start_map(settings, data, part):
    W, b = orthogonal_start(settings, part[0], part[1], data.x_scale, data.y_scale)
    return FittedMap(
        W=W,
        bias=b,
        forward=None,
        lam=0.0,
        x_scale=data.x_scale,
        y_scale=data.y_scale,
        orthogonality_gap=0.0,
        history={},
        n_epochs=0,
        best_epoch=None,
    )


def decide_trained_step(settings, X, Y, codes, data, fitted, rng, *, step, parameter):
    """The map to keep: ``fitted`` (the trained one) or the Procrustes start of all rows.

    ``X``, ``Y``: the validated training rows; ``codes``: their label codes or None;
    ``data``: the prepared rows ``fitted`` was trained on; ``rng``: draws the second
    training's minibatches where one is needed.  Sets ``settings.step_choice_``.
    """
    if settings.bidirectional:
        step_choice.no_evidence(
            settings, step, "bidirectional: the forward adapter is trained with the map"
        )
        return fitted
    if data.valid is not None:
        # The early-stopping rows: never trained on (only their loss picked the epoch).
        X_held, Y_held = _user_rows(data.valid, data)
        trained, start = fitted, _start_map(settings, data, data.train)
    else:
        folds = holdout.holdout_folds(X.shape[0], settings.random_state)
        if folds is None:
            step_choice.no_evidence(settings, step, "too few rows for a held-out slice")
            return fitted
        held = folds[0]
        keep = np.setdiff1d(np.arange(X.shape[0]), held)
        second = check_random_state(rng.randint(0, 2**31 - 1))
        kept_codes = None if codes is None else codes[keep]
        part = prepare_fit_data(settings, X[keep], Y[keep], kept_codes, second)
        trained = train_map(settings, part, second)
        start = _start_map(settings, part, part.train)
        X_held, Y_held = np.asarray(X[held], np.float64), np.asarray(Y[held], np.float64)
    kept = step_choice.decide_step(
        settings,
        step,
        holdout.paired_hits(mapped(trained, X_held), Y_held),
        holdout.paired_hits(mapped(start, X_held), Y_held),
        parameter=parameter,
        base="the orthogonal Procrustes map it starts from",
    )
    if kept:
        return fitted
    rows = data.train
    if data.valid is not None:
        rows = tuple(
            None if a is None else torch.cat([a, b])
            for a, b in zip(data.train, data.valid, strict=True)
        )
    fallback = _start_map(settings, data, rows)
    fallback.history, fallback.n_epochs = fitted.history, fitted.n_epochs
    fallback.orthogonality_gap = float(
        orthogonality_gap(fallback.W * (data.x_scale / data.y_scale))
    )
    return fallback

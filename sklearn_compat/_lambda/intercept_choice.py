"""``LambdaOrthAligner(fit_intercept="auto")``: the choice read from the starts of training.

Training starts from the orthogonal Procrustes map of the rescaled rows, centred when the
bias is fitted, and moves away from it only as far as ``lam`` allows.  Scoring those two
starts on a held-out slice carries the evidence for the bias at the cost of two SVDs of a
``d_x x d_y`` cross product, where training both settings cost more than the fit itself;
and it reads the rows alone, never ``lam``, so every fit of a search over ``lam`` on the
same rows makes the same choice.
"""

import numpy as np

from .._core.holdout import holdout_folds, paired_top1, pick, take_rows
from .._core.polar import procrustes_from_cross
from .._core.refit_choice import TRAINED_MARGIN

__all__ = ["choose_intercept"]

# Rows per chunk of the float64 cross product (bounded memory on float32 input).
_CHUNK_ROWS = 65536


def choose_intercept(X, Y, random_state, *, rescale):
    """Whether to fit the bias, from the two Procrustes starts on one held-out slice.

    Parameters
    ----------
    X, Y : array-like, tensor or Dask array of shape (n_samples, d_x), (n_samples, d_y)
        The validated training rows (read by row chunks, in float64).
    random_state : None, int or RandomState
        Draws the held-out slice (:func:`~sklearn_compat._core.holdout.holdout_folds`).
    rescale : bool
        The estimator's ``rescale``: the starts are computed in its unit-RMS units.

    Returns
    -------
    bool or None, dict
        True to fit the bias (kept unless leaving it out wins by more than
        ``TRAINED_MARGIN``), None when the rows are too few for a slice; and each
        setting's held-out paired top-1 keyed ``"fit_intercept=<value>"``.
    """
    n_rows = int(X.shape[0])
    folds = holdout_folds(n_rows, random_state)
    if folds is None:
        return None, {}
    held = folds[0]
    kept = np.setdiff1d(np.arange(n_rows), held)
    if rescale:
        x_scale, y_scale = _rms_row_norm(X, kept), _rms_row_norm(Y, kept)
    else:
        # One common unit for both sides keeps the raw start's geometry (every mapped row
        # is scaled alike, which cosine retrieval ignores) while keeping the cross product
        # finite for rows near the ends of float64's range.
        x_scale = y_scale = max(_peak(X, kept), _peak(Y, kept))
    X_held = take_rows(X, held) / x_scale
    Y_held = take_rows(Y, held)
    scores = {}
    for centre in (True, False):
        mean_x = _mean(X, kept) / x_scale if centre else np.zeros(X.shape[1])
        mean_y = _mean(Y, kept) / y_scale if centre else np.zeros(Y.shape[1])
        cross = _cross(X, Y, kept, x_scale, y_scale, mean_x, mean_y)
        W = procrustes_from_cross(cross)[0]
        # The start's map in Y's unit-RMS units; cosine retrieval ignores Y's own scale.
        Z = (X_held - mean_x) @ W + mean_y
        scores[f"fit_intercept={centre}"] = [paired_top1(Z, Y_held)]
    chosen = pick(scores, margin=TRAINED_MARGIN) == "fit_intercept=True"
    return chosen, {label: float(value[0]) for label, value in scores.items()}


def _chunks(rows):
    for start in range(0, len(rows), _CHUNK_ROWS):
        yield rows[start : start + _CHUNK_ROWS]


def _peak(A, rows):
    """The largest absolute entry of ``A[rows]``, or 1.0 for rows all zero."""
    value = max(float(np.abs(np.asarray(take_rows(A, part))).max()) for part in _chunks(rows))
    return value if value > 0 and np.isfinite(value) else 1.0


def _rms_row_norm(A, rows):
    # Squares taken of A / peak: rows near 1e200 (or 1e-200) would overflow (underflow).
    peak = _peak(A, rows)
    total = sum(
        float(np.square(np.asarray(take_rows(A, part)) / peak).sum()) for part in _chunks(rows)
    )
    value = peak * np.sqrt(total / max(len(rows), 1))
    return float(value) if value > 0 and np.isfinite(value) else 1.0


def _mean(A, rows):
    total = sum(take_rows(A, part).sum(axis=0) for part in _chunks(rows))
    return total / max(len(rows), 1)


def _cross(X, Y, rows, x_scale, y_scale, mean_x, mean_y):
    """``(X/s_x - m_x)^T (Y/s_y - m_y)`` over ``rows``, in float64 chunks."""
    cross = np.zeros((X.shape[1], Y.shape[1]))
    for part in _chunks(rows):
        xc = take_rows(X, part) / x_scale - mean_x
        yc = take_rows(Y, part) / y_scale - mean_y
        cross += xc.T @ yc
    return cross

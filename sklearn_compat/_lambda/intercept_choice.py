"""``LambdaOrthAligner(fit_intercept="auto")``: the choice read from the starts of training.

Training starts from the orthogonal Procrustes map of the rescaled rows, centred when the
bias is fitted, and moves away from it only as far as ``lam`` allows.  Scoring those two
starts on a held-out slice carries the evidence for the bias at the cost of two SVDs of a
``d_x x d_y`` cross product, where training both settings cost more than the fit itself;
and it reads the rows alone, never ``lam``, so every fit of a search over ``lam`` on the
same rows makes the same choice.  Both starts come from one pass over the rows (the column
sums, the sums of squares and one cross product), on the GPU when the fit runs there, after
each side's peak is read from its stored values.
"""

import numpy as np
import torch

from .._core.holdout import holdout_folds, paired_top1, pick, take_rows
from .._core.polar import procrustes_from_cross
from .._core.refit_choice import TRAINED_MARGIN

__all__ = ["choose_intercept"]

# Rows per chunk of the float64 cross product (bounded memory on float32 input).
_CHUNK_ROWS = 65536


def choose_intercept(X, Y, random_state, *, rescale, device=None):
    """Whether to fit the bias, from the two Procrustes starts on one held-out slice.

    Parameters
    ----------
    X, Y : array-like, tensor or Dask array of shape (n_samples, d_x), (n_samples, d_y)
        The validated training rows (read by row chunks, in float64).
    random_state : None, int or RandomState
        Draws the held-out slice (:func:`~sklearn_compat._core.holdout.holdout_folds`).
    rescale : bool
        The estimator's ``rescale``: the starts are computed in its unit-RMS units.
    device : torch.device, default=None
        Where the rows' moments are computed: a CUDA device takes the one pass over the
        rows off the host (the fit copies them there anyway); None or a CPU: numpy.

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
    kept = n_rows - len(held)
    mx, my = _Moments(X), _Moments(Y)
    cross = _shifted_cross(X, Y, held, mx, my, device)
    # Units of the starts, as multiples of each side's peak (the moments' unit).
    if rescale:
        ux, uy = mx.rms(kept), my.rms(kept)
    else:
        # One common unit for both sides keeps the raw start's geometry (every mapped row
        # is scaled alike, which cosine retrieval ignores).
        common = max(mx.peak, my.peak)
        ux, uy = common / mx.peak, common / my.peak
    mean_x, mean_y = mx.sum / kept, my.sum / kept
    X_held = take_rows(X, held) / (mx.peak * ux)
    Y_held = take_rows(Y, held)
    offset_x, offset_y = mean_x - mx.shift, mean_y - my.shift
    scores = {}
    for centre in (True, False):
        if centre:  # sum (x - mean_x)(y - mean_y)^T
            about_means = cross - kept * np.outer(offset_x, offset_y)
        else:  # sum x y^T
            about_means = cross + kept * (
                np.outer(mx.shift, mean_y) + np.outer(mean_x, my.shift)
                - np.outer(mx.shift, my.shift)
            )  # fmt: skip
        W = procrustes_from_cross(about_means / (ux * uy))[0]
        # The start's map in Y's unit-RMS units; cosine retrieval ignores Y's own scale.
        if centre:
            Z = (X_held - mean_x / ux) @ W + mean_y / uy
        else:
            Z = X_held @ W
        scores[f"fit_intercept={centre}"] = [paired_top1(Z, Y_held)]
    chosen = pick(scores, margin=TRAINED_MARGIN) == "fit_intercept=True"
    return chosen, {label: float(value[0]) for label, value in scores.items()}


def _blocks(A, device=None):
    """Consecutive rows of ``A`` in float64, ``_CHUNK_ROWS`` at a time: numpy arrays, or
    tensors on ``device`` when it is a CUDA device."""
    n = int(A.shape[0])
    on_gpu = device is not None and device.type == "cuda"
    for start in range(0, n, _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, n)
        if isinstance(A, np.ndarray):  # a slice is a view: one copy, the float64 one
            rows = A[start:stop]
            if on_gpu:  # converted there, not on the host
                yield torch.from_numpy(np.ascontiguousarray(rows)).to(device).double()
            else:
                yield np.asarray(rows, dtype=np.float64)
        else:
            rows = take_rows(A, np.arange(start, stop))
            yield torch.from_numpy(rows).to(device) if on_gpu else rows


class _Moments:
    """One side's peak (the unit of the others, so no square over- or underflows), and,
    filled in by :func:`_shifted_cross`, its column sums and sum of squares over the kept
    rows in that unit, and the shift its cross product was taken about."""

    def __init__(self, A):
        if isinstance(A, np.ndarray):  # max and min of the stored values, no copy
            peak = max(float(A.max(initial=0.0)), -float(A.min(initial=0.0)))
        else:
            peak = max((float(np.abs(rows).max(initial=0.0)) for rows in _blocks(A)),
                       default=0.0)  # fmt: skip
        self.peak = peak if peak > 0 and np.isfinite(peak) else 1.0
        self.sum = 0.0
        self.squares = 0.0
        self.shift = None

    def add(self, rows, sign):
        self.sum = self.sum + sign * rows.sum(axis=0)
        self.squares += sign * float((rows * rows).sum())

    def rms(self, kept):
        """The RMS row norm of the kept rows, in units of the peak (1.0 when zero)."""
        value = np.sqrt(max(self.squares, 0.0) / max(kept, 1))
        return float(value) if value > 0 and np.isfinite(value) else 1.0


def _shifted_cross(X, Y, held, mx, my, device):
    """``sum (x - a)(y - b)^T`` over the rows not in ``held``, in peak units, in one pass.

    ``a`` and ``b`` (stored as the moments' ``shift``) are the first chunk's means: close
    to the kept rows' means, so recentring the product afterwards cancels nothing large,
    while the chunk is read once for the product and the moments of both starts.  The
    held-out rows are taken out afterwards (they are few).
    """
    cross = 0.0
    for x, y in zip(_blocks(X, device), _blocks(Y, device), strict=True):
        x, y = x / mx.peak, y / my.peak
        if mx.shift is None:
            mx.shift, my.shift = x.mean(axis=0), y.mean(axis=0)
        mx.add(x, 1.0)
        my.add(y, 1.0)
        cross = cross + (x - mx.shift).T @ (y - my.shift)
    x, y = take_rows(X, held) / mx.peak, take_rows(Y, held) / my.peak
    if isinstance(cross, torch.Tensor):  # back to the host, where the rest is small
        cross, mx.shift, my.shift = (t.cpu().numpy() for t in (cross, mx.shift, my.shift))
        mx.sum, my.sum = mx.sum.cpu().numpy(), my.sum.cpu().numpy()
    mx.add(x, -1.0)
    my.add(y, -1.0)
    cross -= (x - mx.shift).T @ (y - my.shift)
    return cross

"""Sufficient statistics of paired embeddings, computed on a device and merged stably.

The closed-form aligners (Procrustes, affine) only need the weighted means of X and Y, the
cross co-moment ``sum_i w_i (x_i - mean_x)(y_i - mean_y)^T`` and, for least squares, the
co-moment of X with itself.  Those come from one pass over the rows, so a fit can be split
into chunks (``partial_fit``, Dask blocks, file batches) and the pieces merged with the
pairwise update of Chan, Golub and LeVeque, which never forms the cancelling difference
``X^T Y - n mean_x mean_y^T``.

Each chunk's GEMM runs in the input dtype on the chosen device (float32 stays float32 for
speed) and is accumulated in float64; the statistics are returned in float64.  Within one
call, centred statistics use one shift for all chunks (a rough mean taken from the first
rows): every chunk is shifted before its GEMM, so float32 never sees the large common offset
that would cancel, and the small remaining offset is removed exactly in float64 at the end.
"""

from dataclasses import dataclass

import numpy as np
import torch

from .backend import no_tf32, to_torch

__all__ = ["PairMoments", "compute_moments", "moments_in_dtype"]

# Rows per GEMM chunk: bounds the shifted temporaries to a few hundred MB at d = 1024, and
# the length of each float32 accumulation, while keeping each GEMM large enough to run at
# full speed.  Chunks are summed in float64 (a d_x x d_y add each).
_CHUNK_ROWS = 65536

# Rows per chunk when the chunks are shifted (centred statistics of rows with a common
# offset): the two shifted buffers are reused by every chunk, and buffers this small come
# back from the allocator already mapped, where chunk-sized ones (268 MB at d = 512) are
# page-faulted in afresh by every fit (the subtraction then cost more than the GEMM).
_SHIFTED_ROWS = 8192

# Rows whose mean is used as the shift of centred statistics.  Any point inside the data
# cloud removes the common offset; more rows would only cost time.
_SHIFT_ROWS = 1024


@dataclass
class PairMoments:
    """Weighted first and second moments of paired rows (x_i, y_i).

    Attributes
    ----------
    weight : float
        Sum of the row weights (the row count when unweighted).
    mean_x, mean_y : ndarray of shape (d_x,), (d_y,)
        Weighted column means (NaN when they were not requested; only uncentred
        statistics can skip them).
    cross : ndarray of shape (d_x, d_y)
        ``sum_i w_i (x_i - m_x)(y_i - m_y)^T`` when ``centered`` else ``sum_i w_i x_i y_i^T``.
    sq_x : float
        ``sum_i w_i ||x_i - m_x||^2`` when ``centered`` else ``sum_i w_i ||x_i||^2`` (NaN
        when it was not requested).
    sq_y : float
        The same sum of squares for Y (NaN when it was not requested, and in the state of
        models saved before it existed).
    gram_x : ndarray of shape (d_x, d_x) or None
        ``sum_i w_i (x_i - m_x)(x_i - m_x)^T`` (or the raw version); only when requested.
    centered : bool
        Which of the two forms above the statistics take.
    """

    weight: float
    mean_x: np.ndarray
    mean_y: np.ndarray
    cross: np.ndarray
    sq_x: float
    gram_x: np.ndarray | None
    centered: bool
    sq_y: float = float("nan")

    def merge(self, other):
        """Statistics of the union of both row sets (exact, order independent)."""
        if self.centered != other.centered or (self.gram_x is None) != (other.gram_x is None):
            raise ValueError("Cannot merge moments computed with different options.")
        if self.mean_x.shape != other.mean_x.shape or self.mean_y.shape != other.mean_y.shape:
            raise ValueError(
                f"Cannot merge moments of shapes ({self.mean_x.shape[0]}, "
                f"{self.mean_y.shape[0]}) and ({other.mean_x.shape[0]}, "
                f"{other.mean_y.shape[0]})."
            )
        if other.weight == 0:
            return self
        if self.weight == 0:
            return other
        total = self.weight + other.weight
        share = other.weight / total
        delta_x = other.mean_x - self.mean_x
        delta_y = other.mean_y - self.mean_y
        cross = self.cross + other.cross
        sq_x = self.sq_x + other.sq_x
        sq_y = self.sq_y + other.sq_y
        gram_x = None if self.gram_x is None else self.gram_x + other.gram_x
        if self.centered:
            # Chan et al.: the co-moment of the union gains the spread between the means.
            factor = self.weight * share
            cross = cross + factor * np.outer(delta_x, delta_y)
            sq_x = sq_x + factor * float(delta_x @ delta_x)
            sq_y = sq_y + factor * float(delta_y @ delta_y)
            if gram_x is not None:
                gram_x = gram_x + factor * np.outer(delta_x, delta_x)
        return PairMoments(
            weight=total,
            mean_x=self.mean_x + share * delta_x,
            mean_y=self.mean_y + share * delta_y,
            cross=cross,
            sq_x=sq_x,
            gram_x=gram_x,
            centered=self.centered,
            sq_y=sq_y,
        )

    def is_finite(self):
        """Whether the requested statistics are finite (NaN/inf input shows up here)."""
        parts = [self.cross] if self.gram_x is None else [self.cross, self.gram_x]
        if self.centered:
            parts += [self.mean_x, self.mean_y]
        return all(np.isfinite(part).all() for part in parts) and not (
            np.isinf(self.sq_x) or np.isinf(self.sq_y)
        )


def _shift(X, w):
    """A rough mean of the first rows (float64), used as the common shift of all chunks."""
    head = X[:_SHIFT_ROWS].double()
    if w is not None:
        w_head = w[:_SHIFT_ROWS].double()
        if float(w_head.sum()) > 0:
            return (w_head @ head) / w_head.sum()
    return head.mean(dim=0)


def _offset_matters(rows, shift):
    """Whether the common offset of ``rows`` is as large as their spread about it."""
    head = rows[:_SHIFT_ROWS].double()
    spread = float(torch.linalg.vector_norm(head - shift.double(), dim=1).square().mean())
    return float(shift.double() @ shift.double()) > spread


def _rows(data, start, stop, device, dtype):
    """Rows ``start:stop`` of a numpy array or torch tensor as a tensor on ``device``."""
    if isinstance(data, torch.Tensor):
        return data[start:stop].to(device=device, dtype=dtype)
    return to_torch(data[start:stop], device, dtype)


def compute_moments(
    X,
    Y,
    sample_weight=None,
    *,
    centered,
    need_gram=False,
    device,
    need_means=True,
    need_sq_x=True,
    need_sq_y=True,
    need_cross=True,
):
    """Moments of validated numpy arrays ``X`` (n, d_x) and ``Y`` (n, d_y) on ``device``.

    Rows are processed in chunks of ``_CHUNK_ROWS``, which bounds the memory of the shifted
    temporaries and the length of each float32 accumulation.  No finiteness check is made
    here: NaN or inf in the input make ``cross`` non-finite (see ``PairMoments.is_finite``).

    Parameters
    ----------
    X, Y : ndarray or torch.Tensor of shape (n, d_x), (n, d_y)
        Paired rows, same float dtype (the GEMMs run in it).  Tensors are read where
        they are, chunk by chunk.
    sample_weight : ndarray of shape (n,) or None
        Non-negative row weights.
    centered : bool
        Centre both sides on their weighted means (co-moments) or not (raw products).
    need_gram : bool, default=False
        Also compute ``gram_x``.
    device : torch.device
        Where the GEMMs run.
    need_means : bool, default=True
        Compute the means of uncentred statistics (centred ones always have them).
        Skipping them saves a pass over the data; they are NaN then.
    need_sq_x, need_sq_y : bool, default=True
        Compute ``sq_x`` / ``sq_y`` (NaN otherwise).
    need_cross : bool, default=True
        Compute ``cross`` (zeros otherwise): a pass that only wants ``gram_x`` (the
        target side's covariance of whitening) skips one GEMM of two.

    Returns
    -------
    PairMoments
    """
    n, d_x = X.shape
    d_y = Y.shape[1]
    need_means = need_means or centered
    dtype = torch.float64 if X.dtype in (np.float64, torch.float64) else torch.float32
    f64 = {"dtype": torch.float64, "device": device}
    weight = 0.0
    cross = torch.zeros((d_x, d_y), **f64)
    gram = torch.zeros((d_x, d_x), **f64) if need_gram else None
    sum_x = torch.zeros(d_x, **f64)
    sum_y = torch.zeros(d_y, **f64)
    sq_x = torch.zeros((), **f64)
    sq_y = torch.zeros((), **f64)
    shift_x = shift_y = buffer_x = buffer_y = None
    shifted = False
    step = _CHUNK_ROWS
    if centered:
        head = min(_SHIFT_ROWS, n)
        Xh, Yh = _rows(X, 0, head, device, dtype), _rows(Y, 0, head, device, dtype)
        wh = None if sample_weight is None else _rows(sample_weight, 0, head, device, None)
        # Round the shift to the input dtype so that the value subtracted is exactly the
        # value added back to the means.
        shift_x, shift_y = _shift(Xh, wh).to(dtype), _shift(Yh, wh).to(dtype)
        # No common offset to speak of (|shift| below the rows' spread about it): float32
        # products lose at most a few units in the last place to the exact float64
        # correction below, so skip the shift pass.
        shifted = _offset_matters(Xh, shift_x) or _offset_matters(Yh, shift_y)
        if not shifted:
            shift_x, shift_y = torch.zeros_like(shift_x), torch.zeros_like(shift_y)
        else:
            step = _SHIFTED_ROWS
            rows = min(step, n)
            buffer_x = torch.empty((rows, d_x), dtype=dtype, device=device)
            buffer_y = torch.empty((rows, d_y), dtype=dtype, device=device)
    with no_tf32():
        for start in range(0, n, step):
            stop = min(start + step, n)
            Xc = _rows(X, start, stop, device, dtype)
            Yc = _rows(Y, start, stop, device, dtype)
            wc = None if sample_weight is None else _rows(sample_weight, start, stop, device, None)
            if centered:
                if shifted:
                    Xc = torch.sub(Xc, shift_x, out=buffer_x[: stop - start])
                    Yc = torch.sub(Yc, shift_y, out=buffer_y[: stop - start])
            if need_sq_y:
                # Before the weighting below, which may scale the shifted Y rows in place.
                row_sq_y = torch.linalg.vector_norm(Yc, dim=1).double().square()
                sq_y += row_sq_y.sum() if wc is None else row_sq_y @ wc.double()
            if wc is None:
                weight += stop - start
                Yw = Yc
                if need_means:
                    # Column sums as GEMVs: faster than a strided reduction over rows.
                    ones = torch.ones(stop - start, dtype=dtype, device=device)
                    sum_x += (ones @ Xc).double()
                    sum_y += (ones @ Yc).double()
            else:
                wc64 = wc.double()
                weight += float(wc64.sum())
                wcol = wc.to(dtype)[:, None]
                # The shifted Y buffer is ours to scale in place; raw input is not.
                Yw = Yc.mul_(wcol) if shifted else Yc * wcol
                if need_means:
                    sum_x += (wc.to(dtype) @ Xc).double()
                    sum_y += Yw.sum(dim=0).double()
            if need_cross:
                cross += (Xc.T @ Yw).double()
            if need_sq_x:
                # Row norms keep each float32 sum short; the rows are summed in float64.
                row_sq = torch.linalg.vector_norm(Xc, dim=1).double().square()
                sq_x += row_sq.sum() if wc is None else row_sq @ wc64
            if need_gram:
                Xw = Xc if wc is None else Xc * wcol
                gram += (Xc.T @ Xw).double()
    nan = float("nan")
    if not need_means:
        mean_x = torch.full((d_x,), nan, **f64)
        mean_y = torch.full((d_y,), nan, **f64)
    elif weight > 0:
        mean_x = sum_x / weight
        mean_y = sum_y / weight
    else:
        mean_x = torch.zeros(d_x, **f64)
        mean_y = torch.zeros(d_y, **f64)
    if centered:
        # The chunks were centred on the shift, not on the mean: remove the remaining
        # (small) offset exactly, then express the means in the original coordinates.
        cross -= weight * torch.outer(mean_x, mean_y)
        sq_x -= weight * (mean_x @ mean_x)
        sq_y -= weight * (mean_y @ mean_y)
        if need_gram:
            gram -= weight * torch.outer(mean_x, mean_x)
        mean_x = mean_x + shift_x.double() if shift_x is not None else mean_x
        mean_y = mean_y + shift_y.double() if shift_y is not None else mean_y
    return PairMoments(
        weight=float(weight),
        mean_x=mean_x.cpu().numpy(),
        mean_y=mean_y.cpu().numpy(),
        cross=cross.cpu().numpy(),
        sq_x=float(sq_x) if need_sq_x else nan,
        sq_y=float(sq_y) if need_sq_y else nan,
        gram_x=None if gram is None else gram.cpu().numpy(),
        centered=centered,
    )


def moments_in_dtype(X, Y, sample_weight, *, stats_dtype=None, **options):
    """:func:`compute_moments` with the GEMMs run in ``stats_dtype`` instead of X's dtype.

    ``stats_dtype=None`` keeps X's dtype (the fast path).  A wider ``stats_dtype`` is cast
    chunk by chunk, so a float32 input is never copied whole into float64.  ``X`` and
    ``Y`` may be numpy arrays or torch tensors; ``options`` go to :func:`compute_moments`.
    """
    if stats_dtype is None or _same_dtype(X, stats_dtype):
        return compute_moments(X, Y, sample_weight, **options)
    result = None
    for start in range(0, max(X.shape[0], 1), _CHUNK_ROWS):
        stop = start + _CHUNK_ROWS
        part = compute_moments(
            _cast(X[start:stop], stats_dtype),
            _cast(Y[start:stop], stats_dtype),
            None if sample_weight is None else _cast(sample_weight[start:stop], stats_dtype),
            **options,
        )
        result = part if result is None else result.merge(part)
    return result


def _same_dtype(A, dtype):
    if isinstance(A, torch.Tensor):
        return str(A.dtype).removeprefix("torch.") == np.dtype(dtype).name
    return A.dtype == dtype


def _cast(A, dtype):
    if isinstance(A, torch.Tensor):
        return A.to(getattr(torch, np.dtype(dtype).name))
    return A.astype(dtype)

"""Sufficient statistics of paired embeddings, computed on a device and merged stably.

The closed-form aligners (Procrustes, affine) only need the weighted means of X and Y, the
cross co-moment ``sum_i w_i (x_i - mean_x)(y_i - mean_y)^T`` and, for least squares, the
co-moment of X with itself.  Those come from one pass over the rows, so a fit can be split
into chunks (``partial_fit``, Dask blocks, file batches) and the pieces merged with the
pairwise update of Chan, Golub and LeVeque, which never forms the cancelling difference
``X^T Y - n mean_x mean_y^T``.

Each chunk's GEMM runs in the input dtype on the chosen device (float32 stays float32 for
speed); the merged statistics are kept in float64.
"""

from dataclasses import dataclass

import numpy as np
import torch

from ._backend import no_tf32, to_torch

__all__ = ["PairMoments", "compute_moments"]

# Rows per GEMM chunk: bounds the centred temporaries to a few hundred MB at d = 1024
# while keeping each GEMM large enough to run at full speed.
_CHUNK_ROWS = 65536


@dataclass
class PairMoments:
    """Weighted first and second moments of paired rows (x_i, y_i).

    Attributes
    ----------
    weight : float
        Sum of the row weights (the row count when unweighted).
    mean_x, mean_y : ndarray of shape (d_x,), (d_y,)
        Weighted column means.
    cross : ndarray of shape (d_x, d_y)
        ``sum_i w_i (x_i - m_x)(y_i - m_y)^T`` when ``centered`` else ``sum_i w_i x_i y_i^T``.
    sq_x : float
        ``sum_i w_i ||x_i - m_x||^2`` when ``centered`` else ``sum_i w_i ||x_i||^2``.
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
        gram_x = None if self.gram_x is None else self.gram_x + other.gram_x
        if self.centered:
            # Chan et al.: the co-moment of the union gains the spread between the means.
            factor = self.weight * share
            cross = cross + factor * np.outer(delta_x, delta_y)
            sq_x = sq_x + factor * float(delta_x @ delta_x)
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
        )


def _chunk_moments(X, Y, w, centered, need_gram):
    """Moments of one chunk of torch rows (input dtype), returned in float64 numpy."""
    if w is None:
        weight = float(X.shape[0])
        mean_x = torch.sum(X, dim=0, dtype=torch.float64) / weight
        mean_y = torch.sum(Y, dim=0, dtype=torch.float64) / weight
    else:
        weight = float(torch.sum(w, dtype=torch.float64))
        w64 = w.double()
        mean_x = (w64 @ X.double()) / weight if weight > 0 else X.new_zeros(X.shape[1]).double()
        mean_y = (w64 @ Y.double()) / weight if weight > 0 else Y.new_zeros(Y.shape[1]).double()
    if centered:
        X = X - mean_x.to(X.dtype)
        Y = Y - mean_y.to(Y.dtype)
    Yw = Y if w is None else Y * w[:, None]
    Xw = X if w is None else X * w[:, None]
    with no_tf32():
        cross = (X.T @ Yw).double()
        gram = (X.T @ Xw).double() if need_gram else None
    sq_x = float(torch.sum(X * Xw, dtype=torch.float64))
    return PairMoments(
        weight=weight,
        mean_x=mean_x.cpu().numpy(),
        mean_y=mean_y.cpu().numpy(),
        cross=cross.cpu().numpy(),
        sq_x=sq_x,
        gram_x=None if gram is None else gram.cpu().numpy(),
        centered=centered,
    )


def compute_moments(X, Y, sample_weight=None, *, centered, need_gram=False, device):
    """Moments of validated numpy arrays ``X`` (n, d_x) and ``Y`` (n, d_y) on ``device``.

    Rows are processed in chunks whose statistics are merged, which bounds the memory of
    the centred temporaries and improves the float32 accumulation over very many rows.
    """
    dtype = torch.float64 if X.dtype == np.float64 else torch.float32
    result = None
    for start in range(0, max(X.shape[0], 1), _CHUNK_ROWS):
        stop = start + _CHUNK_ROWS
        Xt = to_torch(X[start:stop], device, dtype)
        Yt = to_torch(Y[start:stop], device, dtype)
        wt = None if sample_weight is None else to_torch(sample_weight[start:stop], device, dtype)
        part = _chunk_moments(Xt, Yt, wt, centered, need_gram)
        result = part if result is None else result.merge(part)
    return result

"""Shared pieces of unpaired alignment: the common form of rows, Procrustes, CSLS.

Every function works on torch tensors of rows already put in the common form of
:func:`unit_centered` (unit rows, centred, unit again: vecmap's normalisation), on one
device, and returns tensors there.
"""

import torch

from .._core.ranking import knn_mean_similarity, similarity_blocks

__all__ = [
    "csls_neighbours",
    "mutual_pairs",
    "nearest_means",
    "orthogonal_fit",
    "random_orthogonal",
    "unit_centered",
    "unit_rows",
]


def unit_rows(T):
    """Rows scaled to unit norm (all-zero rows stay zero)."""
    norms = torch.linalg.vector_norm(T, dim=1, keepdim=True)
    return T / torch.clamp(norms, min=torch.finfo(T.dtype).tiny)


def unit_centered(T):
    """Unit rows, centred, unit again: a space's common offset (anisotropy) removed, so
    that cosines measure what differs between items."""
    T = unit_rows(T)
    return unit_rows(T - T.mean(dim=0, keepdim=True))


def orthogonal_fit(A, B):
    """The orthogonal ``W`` minimising ``||A W - B||_F`` (thin SVD of ``A^T B``).

    Returned in float64 on ``A``'s device: the fitted map keeps full precision, and the
    searches cast it to the rows' dtype.
    """
    cross = (A.T.double() @ B.double()).cpu()
    U, _, Vt = torch.linalg.svd(cross, full_matrices=False)
    return (U @ Vt).to(device=A.device)


def csls_neighbours(A, B, k):
    """CSLS nearest neighbours both ways between two sets of unit rows.

    Returns ``(forward, backward, forward_score)``: the best row of ``B`` for each row of
    ``A``, the best row of ``A`` for each row of ``B``, and the CSLS of each forward match.
    """
    r_A, r_B = _hubness(A, B, k)
    forward, score = _best(A, B, r_A, r_B)
    backward, _ = _best(B, A, r_B, r_A)
    return forward, backward, score


def _hubness(A, B, k):
    """CSLS's ``(r_A, r_B)``: each row's mean cosine to its ``k`` nearest rows of the
    other set (``k`` clipped to the smaller set)."""
    k = max(1, min(k, A.shape[0], B.shape[0]))
    return knn_mean_similarity(A, B, k), knn_mean_similarity(B, A, k)


def _csls_blocks(A, B, r_A, r_B):
    """Yield ``(start, stop, CSLS of A[start:stop] against every row of B)``."""
    for start, stop, sims in similarity_blocks(A, B):
        yield start, stop, 2 * sims - r_B[None, :] - r_A[start:stop, None]


def _best(A, B, r_A, r_B):
    index = torch.empty(A.shape[0], dtype=torch.int64, device=A.device)
    value = torch.empty(A.shape[0], dtype=A.dtype, device=A.device)
    for start, stop, sims in _csls_blocks(A, B, r_A, r_B):
        value[start:stop], index[start:stop] = sims.max(dim=1)
    return index, value


def mutual_pairs(A, B, k):
    """Rows ``(i, j)`` that are each other's CSLS nearest neighbour, best CSLS first."""
    forward, backward, score = csls_neighbours(A, B, k)
    rows = torch.arange(A.shape[0], device=A.device)
    mutual = backward[forward] == rows
    order = torch.argsort(score[mutual], descending=True, stable=True)
    return rows[mutual][order], forward[mutual][order]


def random_orthogonal(d_x, d_y, generator):
    """A random ``(d_x, d_y)`` map with orthonormal rows or columns (Haar, seeded)."""
    G = torch.randn(max(d_x, d_y), min(d_x, d_y), generator=generator, dtype=torch.float64)
    Q = torch.linalg.qr(G).Q  # orthonormal columns
    return Q if d_x >= d_y else Q.T


def nearest_means(A, B, values, n_neighbors):
    """For each row of ``A``: the mean of ``values`` over its nearest rows of ``B``."""
    k = max(1, min(n_neighbors, B.shape[0]))
    means = torch.empty((A.shape[0], values.shape[1]), dtype=values.dtype, device=A.device)
    for start, stop, sims in similarity_blocks(A, B):
        means[start:stop] = values[torch.topk(sims, k, dim=1).indices].mean(dim=1)
    return means

"""Blockwise cosine ranking kernels shared by ``score`` and :mod:`sklearn_compat.metrics`.

A full (n, n) similarity matrix of a 100k-row fold is 40 GB in float32, so queries are
processed in row blocks whose similarity slab stays under a fixed memory budget.
"""

import numpy as np
import torch

from ._backend import as_numpy_input, resolve_device, to_torch

__all__ = ["as_float_tensor", "block_rows", "l2_normalize", "paired_ranks"]

# Bytes of similarity slab per block; 128 MB keeps a block's GEMM large but bounded.
_SLAB_BYTES = 128 * 2**20


def block_rows(n_gallery, itemsize=4, budget=_SLAB_BYTES):
    """Number of query rows whose similarity slab against ``n_gallery`` items fits."""
    return int(max(1, budget // max(1, n_gallery * itemsize)))


def l2_normalize(T):
    """Rows scaled to unit norm; all-zero rows stay zero (and so match nothing)."""
    norms = torch.linalg.vector_norm(T, dim=1, keepdim=True)
    return T / torch.clamp(norms, min=torch.finfo(T.dtype).tiny)


def as_float_tensor(A, device):
    """Numpy, pandas or torch input as a float tensor on ``device`` (float64 kept)."""
    A = np.asarray(as_numpy_input(A))
    if A.dtype not in (np.float32, np.float64):
        A = A.astype(np.float64)
    dtype = torch.float64 if A.dtype == np.float64 else torch.float32
    return to_torch(A, device, dtype)


def paired_ranks(queries, gallery, *, device="auto", budget=_SLAB_BYTES):
    """Rank of each query's own gallery row among all gallery rows, by cosine similarity.

    ``rank[i]`` is the number of gallery rows ``j != i`` whose similarity to query ``i`` is
    at least that of row ``i``.  Ties count against the query, so a degenerate map that sends
    everything to one point scores 0 rather than 1.

    Parameters
    ----------
    queries, gallery : array-like of shape (n, d)
        Row ``i`` of ``gallery`` is the partner of row ``i`` of ``queries``.
    device : str, default="auto"
        Where to compute.
    budget : int
        Bytes of similarity slab per block of queries.

    Returns
    -------
    ranks : ndarray of shape (n,), dtype int64
    """
    dev = resolve_device(device, for_inference=True)
    Q = l2_normalize(as_float_tensor(queries, dev))
    G = l2_normalize(as_float_tensor(gallery, dev))
    if Q.shape != G.shape:
        raise ValueError(
            f"queries and gallery must have the same shape, got {tuple(Q.shape)} and "
            f"{tuple(G.shape)}."
        )
    G = G.to(Q.dtype)
    n = Q.shape[0]
    step = block_rows(n, Q.element_size(), budget)
    ranks = torch.empty(n, dtype=torch.int64, device=dev)
    for start in range(0, n, step):
        stop = min(start + step, n)
        sims = Q[start:stop] @ G.T
        rows = torch.arange(stop - start, device=dev)
        # The own similarity is read from the same GEMM result, so rounding cannot make
        # a row beat or miss itself.
        own = sims[rows, rows + start]
        ranks[start:stop] = (sims >= own[:, None]).sum(dim=1) - 1
    return ranks.cpu().numpy()

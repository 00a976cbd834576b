"""CSLS nearest neighbours between two sets of rows (Conneau et al., ICLR 2018).

``CSLS(q, g) = 2 cos(q, g) - r_G(q) - r_Q(g)``, where ``r_G(q)`` is the mean cosine of
``q`` to its ``k`` nearest gallery rows and ``r_Q(g)`` that of ``g`` to its ``k`` nearest
queries: "hub" rows that are near to everything are demoted.  Computed in blocks of rows,
so no ``n_q x n_g`` matrix is ever formed whole.
"""

import torch

from .backend import resolve_device
from .ranking import check_embeddings, knn_mean_similarity, normalized_tensors, similarity_blocks

__all__ = ["csls_nearest", "mutual_csls_pairs"]


def _best(A, B, r_A, r_B, budget):
    """For each row of A, the index of the row of B with the highest CSLS."""
    out = torch.empty(A.shape[0], dtype=torch.int64, device=A.device)
    for start, stop, sims in similarity_blocks(A, B, budget=budget):
        sims = 2 * sims - r_B[None, :]
        if r_A is not None:
            sims -= r_A[start:stop, None]
        out[start:stop] = sims.argmax(dim=1)
    return out


def _prepared(queries, gallery, k, device):
    dev = resolve_device(device, for_inference=True)
    queries = check_embeddings(queries, "queries")
    gallery = check_embeddings(gallery, "gallery")
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(
            f"queries and gallery must have the same width, got {queries.shape[1]} and "
            f"{gallery.shape[1]}."
        )
    k = int(k)
    if not 1 <= k <= min(len(queries), len(gallery)):
        raise ValueError(
            f"csls_k={k} must be between 1 and the smaller number of rows "
            f"({min(len(queries), len(gallery))})."
        )
    Q, G = normalized_tensors([queries, gallery], dev)
    return Q, G, k


def csls_nearest(queries, gallery, k=10, *, device="auto", budget=None):
    """Index of the gallery row with the highest CSLS for each query (int64 numpy).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat._core.csls import csls_nearest
    >>> csls_nearest(np.eye(3), np.eye(3)[::-1], k=1)
    array([2, 1, 0])
    """
    Q, G, k = _prepared(queries, gallery, k, device)
    r_Q = knn_mean_similarity(G, Q, k, budget=budget)  # r_G(q) does not change q's order
    return _best(Q, G, None, r_Q, budget).cpu().numpy()


def mutual_csls_pairs(queries, gallery, k=10, *, device="auto", budget=None):
    """Pairs ``(i, j)`` that are each other's CSLS nearest neighbour (int64, shape (m, 2)).

    The dictionary induction of Conneau et al.: query ``i``'s best gallery row is ``j``
    and gallery row ``j``'s best query is ``i``.
    """
    Q, G, k = _prepared(queries, gallery, k, device)
    r_G = knn_mean_similarity(Q, G, k, budget=budget)
    r_Q = knn_mean_similarity(G, Q, k, budget=budget)
    forward = _best(Q, G, r_G, r_Q, budget)
    backward = _best(G, Q, r_Q, r_G, budget)
    rows = torch.arange(Q.shape[0], device=forward.device)
    mutual = backward[forward] == rows
    return torch.stack([rows[mutual], forward[mutual]], dim=1).cpu().numpy()

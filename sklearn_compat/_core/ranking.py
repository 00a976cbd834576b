"""Blockwise cosine ranking kernels shared by ``score`` and :mod:`sklearn_compat.metrics`.

A full (n, n) similarity matrix of a 100k-row fold is 40 GB in float32, so queries are
processed in row blocks whose similarity slab stays under a fixed memory budget.

Conventions of every kernel here:

- similarity is cosine: rows are L2-normalised first, and an all-zero row has similarity 0
  to everything (it matches nothing better than anything else);
- ties count *against* the query: a relevant item tied with an irrelevant one is ranked
  after it, so a gallery collapsed to one point retrieves nothing (scores 0, not 1);
- a query can be excluded from its own gallery (``exclude_self``): gallery row ``i`` is then
  removed from the list of query row ``i`` (the same item embedded by another model, or the
  same row when query set and gallery set coincide).
"""

import numpy as np
import torch

from .backend import as_numpy_input, is_dask_collection, resolve_device, to_torch
from .validation import check_embeddings, query_weights

__all__ = [
    "as_float_tensor",
    "average_precision_rows",
    "block_rows",
    "count_true",
    "first_positive_ranks",
    "knn_mean_similarity",
    "knn_mean_similarity_excluding_self",
    "l2_normalize",
    "label_rank_stats",
    "mask_self",
    "max_abs_scaled",
    "safe_row_norms",
    "scaled_l2_normalize",
    "scaled_row_norms",
    "normalized_tensors",
    "paired_ranks",
    "paired_topk_share",
    "similarity_blocks",
    "target_ranks",
    "topk_indices",
    "topk_mask",
    "unit_rows",
]

# Bytes of similarity slab per block; 128 MB keeps a block's GEMM large but bounded.
_SLAB_BYTES = 128 * 2**20
# Peak bytes per entry of average_precision_rows' buffers (values, int64 order and ends,
# int32 cumsum and indices, masks, float64 precisions).
AP_BYTES_PER_ENTRY = 40


def block_rows(n_gallery, itemsize=4, budget=_SLAB_BYTES):
    """Number of query rows whose similarity slab against ``n_gallery`` items fits."""
    budget = _SLAB_BYTES if budget is None else budget
    return int(max(1, budget // max(1, n_gallery * itemsize)))


def l2_normalize(T):
    """Rows scaled to unit norm; all-zero rows stay zero (and so match nothing).

    Squaring float32 entries above about 1e19 overflows and below about 1e-19 underflows,
    which would turn a row into zeros or give cosines far above 1: such rows are divided
    by their largest absolute entry first (:func:`safe_row_norms`), every other row by
    its norm from one pass.
    """
    norms, rows = _plain_norms(T)
    unit = T / torch.clamp(norms, min=torch.finfo(T.dtype).tiny)
    if rows is not None:
        unit = unit.index_put((rows,), scaled_l2_normalize(T[rows]))
    return unit


def unit_rows(A):
    """Rows of ``A`` scaled to unit L2 norm (all-zero rows stay zero), in ``A``'s type.

    The one unit-rows rule of the package.  A torch tensor goes through
    :func:`l2_normalize` (exact at any finite scale; reads the device once); a numpy or
    Dask array is divided by its rows' norms in its own dtype, floored at the dtype's
    smallest normal number.  Training steps, which must stay differentiable and never wait
    on the device, use :func:`scaled_l2_normalize` instead.
    """
    if isinstance(A, torch.Tensor):
        return l2_normalize(A)
    if is_dask_collection(A):
        import dask.array as da

        norms = da.sqrt((A * A).sum(axis=1, keepdims=True))
        return A / da.maximum(norms, np.finfo(A.dtype).tiny)
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    return A / np.maximum(norms, np.finfo(A.dtype).tiny)


def max_abs_scaled(T, *, return_peak=False):
    """Rows divided by their largest absolute entry (all-zero rows unchanged).

    The safe first step of any norm or cosine of rows of arbitrary (finite) scale.  With
    ``return_peak`` also returns the (n, 1) divisors.
    """
    peak = T.abs().amax(dim=1, keepdim=True) if T.shape[1] else T.new_ones((T.shape[0], 1))
    peak = torch.where(peak > 0, peak, torch.ones_like(peak))
    return (T / peak, peak) if return_peak else T / peak


def _smallest_plain_norm(T):
    """The smallest row norm that one pass of squares gets right to rounding.

    Squares below ``tiny`` flush to zero, at most ``m`` of them; against a sum of squares
    above ``m * tiny / eps`` they change nothing.
    """
    info = torch.finfo(T.dtype)
    return float(np.sqrt(max(T.shape[1], 1) * info.tiny / info.eps))


def _plain_norms(T):
    """Row norms from one pass of squares, and the rows (indices, or None) where that pass
    is not to be trusted: overflowed, below the underflow bound, zero or not finite."""
    norms = torch.linalg.vector_norm(T, dim=1, keepdim=True)
    suspect = ~torch.isfinite(norms) | (norms < _smallest_plain_norm(T))
    if not bool(suspect.any()):
        return norms, None
    return norms, torch.nonzero(suspect[:, 0]).flatten()


def scaled_row_norms(T):
    """(n, 1) L2 norms of rows each divided by its largest entry first: exact at any
    finite scale, differentiable, with no host synchronisation (for training steps), but
    about 20x the cost of one pass of squares."""
    scaled, peak = max_abs_scaled(T, return_peak=True)
    return torch.linalg.vector_norm(scaled, dim=1, keepdim=True) * peak


def scaled_l2_normalize(T):
    """:func:`l2_normalize` through :func:`scaled_row_norms`'s route for every row (for
    training steps: differentiable, no host synchronisation)."""
    return _unit_rows(max_abs_scaled(T))


def safe_row_norms(T):
    """(n, 1) L2 norms of the rows, exact at any finite scale (no square over/underflows).

    One pass of squares gives every ordinary row; the others (overflowed, tiny or zero)
    go through :func:`scaled_row_norms`.  Reading which rows those are synchronises
    with the device once.
    """
    norms, rows = _plain_norms(T)
    if rows is not None:
        norms = norms.index_put((rows,), scaled_row_norms(T[rows]))
    return norms


def _unit_rows(T):
    norms = torch.linalg.vector_norm(T, dim=1, keepdim=True)
    return T / torch.clamp(norms, min=torch.finfo(T.dtype).tiny)


def as_float_tensor(A, device):
    """Numpy, pandas or torch input as a float tensor on ``device`` (float64 kept)."""
    A = np.asarray(as_numpy_input(A))
    if A.dtype not in (np.float32, np.float64):
        A = A.astype(np.float64)
    dtype = torch.float64 if A.dtype == np.float64 else torch.float32
    return to_torch(A, device, dtype)


def normalized_tensors(arrays, device):
    """Normalised tensors on ``device`` in one dtype (float64 when any input is)."""
    dtype = torch.float64 if any(a.dtype == np.float64 for a in arrays) else torch.float32
    return [l2_normalize(to_torch(a, device, dtype)) for a in arrays]


def similarity_blocks(Q, G, *, budget=None, bytes_per_entry=None):
    """Yield ``(start, stop, Q[start:stop] @ G.T)`` over row blocks of ``Q``.

    ``bytes_per_entry`` is what the caller keeps per slab entry (the similarity itself plus
    any masks or sort buffers), so the block height respects ``budget`` for all of it.
    """
    per_entry = bytes_per_entry or Q.element_size()
    step = block_rows(G.shape[0], per_entry, budget)
    for start in range(0, Q.shape[0], step):
        stop = min(start + step, Q.shape[0])
        yield start, stop, Q[start:stop] @ G.T


def count_true(mask):
    """Row counts of a boolean matrix (int32 accumulation: about twice as fast on CPU)."""
    return mask.sum(dim=1, dtype=torch.int32).to(torch.int64)


def mask_self(sims, start, fill):
    """Set entry ``(r, start + r)`` of a block to ``fill`` (the query's own item)."""
    rows = torch.arange(sims.shape[0], device=sims.device)
    sims[rows, rows + start] = fill


def knn_mean_similarity(A, B, k, *, budget=None):
    """Mean cosine of each row of ``A`` to its ``k`` most similar rows of ``B``.

    This is the hubness correction ``r`` of CSLS (Conneau et al., 2018).  ``A`` and ``B``
    must already be L2-normalised tensors on one device.
    """
    out = torch.empty(A.shape[0], dtype=A.dtype, device=A.device)
    for start, stop, sims in similarity_blocks(A, B, budget=budget):
        out[start:stop] = torch.topk(sims, k, dim=1, sorted=False).values.mean(dim=1)
    return out


def knn_mean_similarity_excluding_self(G, reference, k, *, budget=None):
    """Mean cosine of each row of ``G`` to its ``k`` most similar rows ``G[reference]``.

    A row that is itself among the reference rows is left out of its own neighbourhood
    (its cosine to itself, 1, says nothing about how crowded its surroundings are).
    ``G`` must be an L2-normalised tensor; ``reference`` a 1-d int64 tensor of distinct
    rows of ``G`` with more than ``k`` entries.
    """
    R = G[reference]
    # position of each row of G within the reference rows, -1 when it is not one of them
    position = torch.full((G.shape[0],), -1, dtype=torch.int64, device=G.device)
    position[reference] = torch.arange(reference.shape[0], device=G.device)
    out = torch.empty(G.shape[0], dtype=G.dtype, device=G.device)
    for start, stop, sims in similarity_blocks(G, R, budget=budget):
        own = position[start:stop]
        rows = torch.nonzero(own >= 0).flatten()
        sims[rows, own[rows]] = -torch.inf
        out[start:stop] = torch.topk(sims, k, dim=1, sorted=False).values.mean(dim=1)
    return out


def paired_ranks(queries, gallery, *, device="auto", budget=_SLAB_BYTES, csls_k=None):
    """Rank of each query's own gallery row among all gallery rows, by cosine similarity.

    ``rank[i]`` is the number of gallery rows ``j != i`` whose similarity to query ``i`` is
    at least that of row ``i``.  Ties count against the query, so a gallery collapsed to one
    point gives every query the worst rank rather than the best.

    Parameters
    ----------
    queries, gallery : array-like of shape (n, d)
        Row ``i`` of ``gallery`` is the partner of row ``i`` of ``queries``.
    device : str, default="auto"
        Where to compute.
    budget : int
        Bytes of similarity slab per block of queries.
    csls_k : int, default=None
        Rank by CSLS, ``2 cos(q, g) - r_G(q) - r_Q(g)``, instead of cosine, where
        ``r_G(q)`` is the mean cosine of ``q`` to its ``csls_k`` nearest gallery rows and
        ``r_Q(g)`` that of ``g`` to its ``csls_k`` nearest queries.

    Returns
    -------
    ranks : ndarray of shape (n,), dtype int64
    """
    dev = resolve_device(device, for_inference=True)
    queries = check_embeddings(queries, "queries")
    gallery = check_embeddings(gallery, "gallery")
    if queries.shape != gallery.shape:
        raise ValueError(
            f"queries and gallery must have the same shape, got {queries.shape} and "
            f"{gallery.shape}."
        )
    n = queries.shape[0]
    if csls_k is not None and csls_k > n:
        raise ValueError(f"csls_k={csls_k} exceeds the number of gallery rows ({n}).")
    Q, G = normalized_tensors([queries, gallery], dev)
    # r_G(q) is constant along a query's row, so only the gallery-side penalty r_Q(g)
    # can change the order; it is subtracted from twice the cosine.
    penalty = None if csls_k is None else knn_mean_similarity(G, Q, csls_k, budget=budget)
    ranks = torch.empty(n, dtype=torch.int64, device=dev)
    for start, stop, sims in similarity_blocks(Q, G, budget=budget):
        if penalty is not None:
            sims = 2 * sims - penalty[None, :]
        rows = torch.arange(stop - start, device=dev)
        # The own similarity is read from the same GEMM result, so rounding cannot make
        # a row beat or miss itself.
        own = sims[rows, rows + start]
        ranks[start:stop] = count_true(sims >= own[:, None]) - 1
    return ranks.cpu().numpy()


def paired_topk_share(queries, gallery, k=1, *, sample_weight=None, device="auto", **ranks):
    """Weighted share of queries whose own gallery row is among their ``k`` nearest.

    The one paired top-k rule of the package (the aligners' ``score`` is ``k=1``): the
    ranks of :func:`paired_ranks` (ties count against the query), ``ranks`` passed on to
    it (``csls_k``, ``budget``).
    """
    ranks = paired_ranks(queries, gallery, device=device, **ranks)
    return float(np.average(ranks < k, weights=query_weights(sample_weight, len(ranks))))


def first_positive_ranks(sims, positive):
    """Per row, the 0-based rank of the best relevant item, ties counted against it.

    Equals the number of irrelevant items whose similarity is at least that of the most
    similar relevant one; ``-1`` where a row has no relevant item.
    """
    best = torch.where(positive, sims, -torch.inf).max(dim=1).values
    ranks = count_true((sims >= best[:, None]) & ~positive)
    return torch.where(positive.any(dim=1), ranks, -1)


def average_precision_rows(sims, positive):
    """Average precision of each row's ranking; NaN where a row has no relevant item.

    Items are ranked by decreasing similarity with irrelevant items first among ties (ties
    count against the query).  An excluded item must be given similarity ``-inf`` and
    marked irrelevant: it then sorts last and changes no precision.

    One sort per row: in that pessimistic order the ``j``-th relevant item sits at position
    ``j + (number of irrelevant items at least as similar)``, and the latter is read off the
    end of the item's tie group, so the tie order of the sort itself does not matter.
    """
    m = sims.shape[1]
    values, order = torch.sort(sims, dim=1, descending=True)
    hits = torch.gather(positive, 1, order)
    del order
    cum_hits = torch.cumsum(hits, dim=1, dtype=torch.int32)
    ties = values[:, :-1] == values[:, 1:]
    if ties.any():
        # Index of the last member of each item's tie group: the first group end at or
        # after it, found by a reverse running minimum.
        columns = torch.arange(m, device=sims.device, dtype=torch.int32)
        group_end = torch.ones_like(hits)
        group_end[:, :-1] = ~ties
        end = torch.where(group_end, columns, m).flip(1)
        end = torch.cummin(end, dim=1).values.flip(1).to(torch.int64)
        # Irrelevant items at least as similar: everything up to the group end, minus the
        # relevant items among them.
        position = cum_hits + (end + 1 - torch.gather(cum_hits, 1, end))
    else:
        # No ties: the position is the sorted position itself.
        position = torch.arange(1, m + 1, device=sims.device, dtype=torch.int32)
    del values, ties
    precision = torch.where(hits, cum_hits / position.to(torch.float64), 0.0)
    n_pos = count_true(hits)
    return torch.where(n_pos > 0, precision.sum(dim=1) / n_pos.clamp(min=1), torch.nan)


def topk_mask(sims, k):
    """Boolean mask of each row's ``k`` most similar items; ties go to the lower index.

    Deterministic (unlike :func:`torch.topk` among ties) at the cost of one elementwise
    pass: all items above the k-th largest value, then the lowest-indexed items equal to it.
    """
    kth = torch.topk(sims, k, dim=1, sorted=True).values[:, -1:]
    above = sims > kth
    equal = sims == kth
    room = k - above.sum(dim=1, keepdim=True)
    return above | (equal & (torch.cumsum(equal, dim=1) <= room))


def label_rank_stats(
    queries,
    gallery,
    query_codes,
    gallery_codes,
    *,
    exclude_self,
    want,
    device,
    budget=None,
):
    """Label-aware retrieval statistics of every query, blockwise.

    Parameters
    ----------
    queries, gallery : ndarray
        Validated embeddings with the same width.
    query_codes, gallery_codes : ndarray of int64
        Class codes; a gallery item is relevant to a query when the codes match.
    exclude_self : bool
        Remove gallery row ``i`` from query ``i``'s list (same items, same row order).
    want : {"rank", "ap"}
        ``"rank"``: 0-based rank of the first relevant item (-1: none);
        ``"ap"``: average precision (NaN: no relevant item).

    Returns
    -------
    ndarray of shape (n_queries,)
    """
    dev = resolve_device(device, for_inference=True)
    Q, G = normalized_tensors([queries, gallery], dev)
    qc = torch.as_tensor(query_codes, device=dev)
    gc = torch.as_tensor(gallery_codes, device=dev)
    # Bytes kept per slab entry: the similarity, the relevance mask and, for AP, the
    # buffers of average_precision_rows (sorted values, int64 order and tie-group ends).
    per_entry = Q.element_size() + 1 + (AP_BYTES_PER_ENTRY if want == "ap" else 0)
    dtype = torch.int64 if want == "rank" else torch.float64
    out = torch.empty(Q.shape[0], dtype=dtype, device=dev)
    for start, stop, sims in similarity_blocks(Q, G, budget=budget, bytes_per_entry=per_entry):
        positive = qc[start:stop, None] == gc[None, :]
        if exclude_self:
            mask_self(sims, start, -torch.inf)
            rows = torch.arange(stop - start, device=dev)
            positive[rows, rows + start] = False
        if want == "rank":
            out[start:stop] = first_positive_ranks(sims, positive)
        else:
            out[start:stop] = average_precision_rows(sims, positive)
    return out.cpu().numpy()


def target_ranks(queries, gallery, targets, *, device="auto", budget=None):
    """Rank of gallery row ``targets[i]`` among all gallery rows for query ``i`` (cosine).

    ``rank[i]`` counts the other gallery rows at least as similar as the target (ties count
    against the query); :func:`paired_ranks` is the case ``targets = arange(n)``.
    """
    dev = resolve_device(device, for_inference=True)
    Q, G = normalized_tensors([queries, gallery], dev)
    targets = torch.as_tensor(np.asarray(targets, dtype=np.int64), device=dev)
    ranks = torch.empty(Q.shape[0], dtype=torch.int64, device=dev)
    for start, stop, sims in similarity_blocks(Q, G, budget=budget):
        rows = torch.arange(stop - start, device=dev)
        own = sims[rows, targets[start:stop]]
        ranks[start:stop] = count_true(sims >= own[:, None]) - 1
    return ranks.cpu().numpy()


def topk_indices(queries, gallery, ks, *, exclude_self=False, device="auto", budget=None):
    """Each query's ``k`` nearest gallery rows (cosine), as sets, for every ``k`` in ``ks``.

    Returns ``{k: ndarray (n_queries, k) of int64}``, each row in increasing index order
    (a set: ties at the k-th place go to the lower index, as in :func:`topk_mask`).  With
    ``exclude_self`` gallery row ``i`` is never among query ``i``'s results.
    """
    dev = resolve_device(device, for_inference=True)
    Q, G = normalized_tensors([queries, gallery], dev)
    out = {k: np.empty((Q.shape[0], k), dtype=np.int64) for k in ks}
    # Per entry: the similarity, two masks and topk_mask's int64 running count.
    per_entry = Q.element_size() + 2 + 8
    for start, stop, sims in similarity_blocks(Q, G, budget=budget, bytes_per_entry=per_entry):
        if exclude_self:
            mask_self(sims, start, -torch.inf)
        for k in ks:
            columns = topk_mask(sims, k).nonzero()[:, 1]
            out[k][start:stop] = columns.reshape(stop - start, k).cpu().numpy()
    return out

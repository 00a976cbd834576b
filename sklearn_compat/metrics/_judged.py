"""Retrieval metrics against relevance judgements: nDCG@k and recall@k.

Public through :mod:`sklearn_compat.metrics`.  The judgements are held as a sparse matrix of
gains (a dense one is made sparse; per-query item collections too), so a query set of 100k
rows against a gallery of 100k never forms an ``n x n`` similarity matrix: queries go
through row blocks, only each block's top ``k`` items are looked up in the judgements, and
the ideal DCG comes from the judgements alone.
"""

from collections.abc import Mapping

import numpy as np
import scipy.sparse as sp
import torch

from .._core.backend import resolve_device, to_torch
from .._core.ranking import (
    count_true,
    normalized_tensors,
    safe_row_norms,
    similarity_blocks,
)
from .._core.validation import (
    check_embeddings,
    check_positive_int,
    check_row_labels,
    check_same_width,
    query_weights,
)

__all__ = ["ndcg_at_k", "recall_at_k"]

_SIMILARITIES = ("cosine", "dot")


# ---------------------------------------------------------------------- judgements
# Every error about the form of the judgements names the forms accepted, in one line.
FORMS = (
    "a scipy.sparse matrix or a dense 2-D array of gains of shape (n_queries, n_gallery), "
    "or a list with one entry per query: a collection of gallery indices or a mapping "
    "{index: gain}"
)


def _as_csr(judgements, shape, name, *, binary):
    """``judgements`` as a canonical CSR matrix of non-negative gains of ``shape``.

    Accepts a scipy.sparse matrix or array, a dense 2-D array (numpy, or anything with
    ``__array__``: a tensor, a DataFrame) of the same shape, or a sequence with one entry
    per query: a collection of gallery indices (gain 1 each) or a mapping ``{index: gain}``.
    A 2-D array is always a gain matrix, never rows of indices: a 0/1 matrix read as
    indices would silently judge items 0 and 1 only.
    """
    if sp.issparse(judgements):
        _check_shape(judgements.shape, shape, name)
        matrix = sp.csr_matrix(judgements, dtype=np.float64)
    elif isinstance(judgements, (str, bytes, Mapping)) or not hasattr(judgements, "__len__"):
        raise TypeError(f"{name} must be {FORMS}; got {type(judgements).__name__}.")
    elif hasattr(judgements, "__array__") and not isinstance(judgements, (list, tuple)):
        matrix = _dense_to_csr(np.asarray(judgements), shape, name)
    else:
        matrix = _collections_to_csr(judgements, shape, name)
    matrix.sum_duplicates()
    if not np.all(np.isfinite(matrix.data)):
        raise ValueError(f"{name} holds NaN or infinite gains.")
    if (matrix.data < 0).any():
        what = "values" if binary else "gains"
        raise ValueError(f"{name} holds negative {what} (min {matrix.data.min():g}).")
    if binary:
        matrix.data = (matrix.data != 0).astype(np.float64)
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix


def _check_shape(got, shape, name):
    if tuple(got) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(got)}, but queries x gallery is {shape}.")


def _dense_to_csr(array, shape, name):
    """A dense array of gains (bool, integer or float) as CSR; nothing else is an array."""
    if array.ndim == 1 and array.dtype == object:
        # A ragged array of per-query index arrays: the per-query form.
        return _collections_to_csr(array, shape, name)
    if array.ndim != 2 or array.dtype.kind not in "biuf":
        raise ValueError(
            f"{name} is a {array.ndim}-D array of {array.dtype} values; it must be {FORMS}."
        )
    if array.shape != tuple(shape):
        raise ValueError(
            f"{name} is a dense array of shape {array.shape}, but queries x gallery is "
            f"{shape}; a 2-D array holds gains, not indices: it must be {FORMS}."
        )
    return sp.csr_matrix(array, dtype=np.float64)


def _looks_dense(entries, n_gallery):
    """Whether per-query entries are rather the rows of a dense matrix (``dense.tolist()``).

    Every entry an ordered sequence of exactly ``n_gallery`` values reads both ways, as
    the indices of every gallery item or as a row of gains; index lists never need it.
    """
    if not len(entries) or n_gallery < 2:
        return False
    for entry in entries:
        if isinstance(entry, (set, frozenset, range, Mapping)) or entry is None:
            return False
        if not hasattr(entry, "__len__") or len(entry) != n_gallery:
            return False
    return True


def _collections_to_csr(entries, shape, name):
    n_queries, n_gallery = shape
    if len(entries) != n_queries:
        raise ValueError(f"{name} has {len(entries)} entries but queries has {n_queries} rows.")
    if _looks_dense(entries, n_gallery):
        raise ValueError(
            f"{name} is ambiguous: each of its {n_queries} entries has {n_gallery} values, one "
            f"per gallery item, so it may be rows of gains or lists of indices; it must be "
            f"{FORMS} (for gains, pass numpy.asarray({name}))."
        )
    indptr = [0]
    columns, gains = [], []
    for row, entry in enumerate(entries):
        if isinstance(entry, Mapping):
            items, values = list(entry.keys()), list(entry.values())
        elif entry is None:
            items, values = [], []
        elif not hasattr(entry, "__iter__"):
            raise ValueError(
                f"{name}[{row}] is {entry!r}, not a collection of gallery indices; {name} "
                f"must be {FORMS}."
            )
        else:
            # A set or list counts each item once, whatever its multiplicity.
            items = list(dict.fromkeys(np.asarray(list(entry)).ravel().tolist()))
            values = [1.0] * len(items)
        items = np.asarray(items)
        if items.size and (items.dtype.kind not in "iu"):
            raise ValueError(
                f"{name}[{row}] must hold integer gallery indices, got {items.dtype} values."
            )
        if items.size and (items.min() < 0 or items.max() >= n_gallery):
            bad = items[(items < 0) | (items >= n_gallery)][0]
            raise ValueError(
                f"{name}[{row}] holds item {bad}, outside the gallery's {n_gallery} rows."
            )
        try:
            values = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{name}[{row}] holds gains that are not numbers.") from None
        columns.append(items.astype(np.int64))
        gains.append(values)
        indptr.append(indptr[-1] + items.size)
    columns = np.concatenate(columns) if columns else np.empty(0, np.int64)
    gains = np.concatenate(gains) if gains else np.empty(0)
    return sp.csr_matrix((gains, columns, np.asarray(indptr)), shape=shape)


def check_judgements(relevance, exclude, shape):
    """Validated gains (CSR) and excluded items (CSR pattern); excluded items lose their gain.

    An excluded item is never ranked, so a relevant item that is also excluded cannot be
    retrieved: it leaves the judgement (and the ideal DCG) instead of capping the score.
    """
    gains = _as_csr(relevance, shape, "relevance", binary=False)
    if exclude is None:
        return gains, None
    excluded = _as_csr(exclude, shape, "exclude", binary=True)
    overlap = gains.multiply(excluded).tocsr()
    if overlap.nnz:
        gains = (gains - overlap).tocsr()
        gains.eliminate_zeros()
        gains.sort_indices()
    return gains, excluded


def ideal_dcg(gains, k):
    """Per query, the DCG of the best possible ranking cut at ``k``.

    The relevant items sorted by decreasing gain, discounted by ``log2(position + 1)``.
    """
    rows = np.repeat(np.arange(gains.shape[0]), np.diff(gains.indptr))
    order = np.lexsort((-gains.data, rows))
    position = np.arange(gains.nnz) - gains.indptr[rows[order]]
    keep = position < k
    discounted = gains.data[order][keep] / np.log2(position[keep] + 2.0)
    return np.bincount(rows[order][keep], weights=discounted, minlength=gains.shape[0])


# ---------------------------------------------------------------------- the ranked head
class SparseGains:
    """Gain of any (query, gallery item) pair, looked up in a CSR matrix on a device."""

    def __init__(self, gains, device):
        self.n_gallery = gains.shape[1]
        rows = np.repeat(np.arange(gains.shape[0], dtype=np.int64), np.diff(gains.indptr))
        # Canonical CSR is row-major with sorted columns, so these keys are sorted.
        self.keys = to_torch(rows * self.n_gallery + gains.indices, device, torch.int64)
        self.values = to_torch(gains.data, device, torch.float64)

    def at(self, start, items):
        """Gains of ``items`` (b, m) for the queries ``start, start + 1, ...``."""
        if not self.keys.numel():
            return torch.zeros(items.shape, dtype=torch.float64, device=items.device)
        rows = torch.arange(start, start + items.shape[0], device=items.device)
        wanted = rows[:, None] * self.n_gallery + items
        where = torch.searchsorted(self.keys, wanted).clamp(max=self.keys.numel() - 1)
        return torch.where(self.keys[where] == wanted, self.values[where], 0.0)


class LabelGains:
    """Gain 1 for a gallery item of the query's class, 0 otherwise."""

    def __init__(self, query_codes, gallery_codes, device):
        self.query_codes = torch.as_tensor(query_codes, device=device)
        self.gallery_codes = torch.as_tensor(gallery_codes, device=device)

    def at(self, start, items):
        own = self.query_codes[start : start + items.shape[0], None]
        return (self.gallery_codes[items] == own).to(torch.float64)


def _mask_excluded(sims, excluded, start):
    """Give the block's excluded (query, item) pairs similarity ``-inf``."""
    block = excluded[start : start + sims.shape[0]].tocoo()
    if block.nnz:
        rows = torch.as_tensor(block.row, dtype=torch.int64, device=sims.device)
        cols = torch.as_tensor(block.col, dtype=torch.int64, device=sims.device)
        sims[rows, cols] = -torch.inf


def _pessimistic_order(values, gains):
    """Permutation sorting by decreasing similarity, lower gain first among ties."""
    by_gain = torch.argsort(gains, dim=1, stable=True)
    by_value = torch.argsort(torch.gather(values, 1, by_gain), dim=1, descending=True, stable=True)
    return torch.gather(by_gain, 1, by_value)


def head_gains(Q, G, k, gain_lookup, *, excluded=None, exclude_self=False, budget=None):
    """Gains of each query's ``k`` top-ranked gallery items, in rank order.

    Ranking is by decreasing similarity ``Q @ G.T``; ties count against the query: among
    items of equal similarity the lower gain ranks first, also across the cut at ``k`` (a
    tie group straddling the cut fills the remaining places with its lowest gains).
    Excluded items get similarity ``-inf``; they rank last and carry gain 0.

    Returns a float64 tensor of shape (n_queries, min(k, n_gallery)).
    """
    k = min(k, G.shape[0])
    out = torch.empty((Q.shape[0], k), dtype=torch.float64, device=Q.device)
    # Per slab entry: the similarity and one boolean mask of the tie test.
    per_entry = Q.element_size() + 1
    for start, stop, sims in similarity_blocks(Q, G, budget=budget, bytes_per_entry=per_entry):
        if excluded is not None:
            _mask_excluded(sims, excluded, start)
        if exclude_self:
            rows = torch.arange(stop - start, device=sims.device)
            sims[rows, rows + start] = -torch.inf
        values, items = torch.topk(sims, k, dim=1, sorted=True)
        gains = gain_lookup.at(start, items)
        if excluded is not None or exclude_self:
            gains = torch.where(torch.isfinite(values), gains, 0.0)
        order = _pessimistic_order(values, gains)
        out[start:stop] = torch.gather(gains, 1, order)
        # A tie group at the cut that reaches outside the top k: topk picked its members
        # arbitrarily, so rank those rows in full (rare: duplicate or zero vectors).
        cut = values[:, -1:]
        straddles = count_true(sims == cut) > count_true(values == cut)
        straddles &= torch.isfinite(cut[:, 0])
        for row in torch.nonzero(straddles).flatten().tolist():
            every = torch.arange(G.shape[0], device=sims.device)[None, :]
            row_gains = gain_lookup.at(start + row, every)
            row_gains = torch.where(torch.isfinite(sims[row : row + 1]), row_gains, 0.0)
            full = _pessimistic_order(sims[row : row + 1], row_gains)
            out[start + row] = row_gains[0, full[0, :k]]
    return out


def dcg_from_head(head):
    """Discounted cumulative gain of ranked head gains, ``sum_r g_r / log2(r + 1)``."""
    positions = torch.arange(1, head.shape[1] + 1, dtype=torch.float64, device=head.device)
    return (head / torch.log2(positions + 1.0)).sum(dim=1)


# ---------------------------------------------------------------------- public metrics
def _dot_tensors(queries, gallery, device):
    """Raw tensors in one dtype; refuses vectors whose dot products could overflow."""
    dtype = torch.float64 if np.float64 in (queries.dtype, gallery.dtype) else torch.float32
    Q, G = (to_torch(a, device, dtype) for a in (queries, gallery))
    # Cauchy-Schwarz: no dot product exceeds the product of the largest norms.
    largest = float(safe_row_norms(Q).max()) * float(safe_row_norms(G).max())
    if not largest < torch.finfo(dtype).max:
        raise ValueError(
            "queries @ gallery.T could overflow with similarity='dot' (norms near "
            f"{largest:.3g}); rescale the embeddings or pass float64."
        )
    return Q, G


def _judged_scores(queries, gallery, relevance, k, exclude, similarity, device, memory_budget):
    """Per-query ranked head gains and the validated judgements."""
    k = check_positive_int(k, "k")
    if similarity not in _SIMILARITIES:
        raise ValueError(f"similarity must be 'cosine' or 'dot', got {similarity!r}.")
    queries = check_embeddings(queries, "queries")
    gallery = check_embeddings(gallery, "gallery")
    check_same_width(queries, gallery, ("queries", "gallery"))
    gains, excluded = check_judgements(relevance, exclude, (queries.shape[0], gallery.shape[0]))
    dev = resolve_device(device, for_inference=True)
    if similarity == "cosine":
        Q, G = normalized_tensors([queries, gallery], dev)
    else:
        Q, G = _dot_tensors(queries, gallery, dev)
    lookup = SparseGains(gains, dev)
    head = head_gains(Q, G, k, lookup, excluded=excluded, budget=memory_budget)
    return head.cpu().numpy(), gains, k


def mean_over_judged(values, n_relevant, sample_weight, what):
    """Weighted mean over the queries with at least one relevant item."""
    judged = n_relevant > 0
    if not judged.any():
        raise ValueError(f"No query has a relevant item in the gallery, so {what} is undefined.")
    weights = query_weights(sample_weight, len(values))[judged]
    if weights.sum() <= 0:
        raise ValueError("sample_weight is zero on every query with a relevant item.")
    return float(np.average(values[judged], weights=weights))


def ndcg_at_k(
    queries,
    gallery,
    relevance,
    *,
    k=10,
    exclude=None,
    similarity="cosine",
    sample_weight=None,
    device="auto",
    memory_budget=None,
):
    """Normalised discounted cumulative gain of the top ``k`` gallery items, nDCG@k.

    Each query ranks the gallery by decreasing similarity.  With ``g_r`` the gain of the
    item at rank ``r`` (0 for an item without a judgement),

    ``DCG@k = sum_{r=1}^{k} g_r / log2(r + 1)``  (linear gains, log2 discount, the
    definition of Järvelin & Kekäläinen, 2002, used by trec_eval's ``ndcg_cut``), and
    ``nDCG@k = DCG@k / IDCG@k``, where ``IDCG@k`` is the DCG of the query's relevant items
    sorted by decreasing gain (all of them, not only those retrieved) cut at ``k``.  The
    result is the mean over queries with at least one relevant item; the others are left
    out.

    Ties count against the query, as in every metric of this package: among gallery items
    of equal similarity the one with the lower gain is ranked first (also across the cut
    at ``k``), so a gallery collapsed to one point scores 0, not the mean gain.  Excluded
    items are never ranked; a relevant item that is also excluded leaves the judgement
    (it could never be retrieved).

    Parameters
    ----------
    queries : array-like or torch.Tensor of shape (n_queries, n_features)
        Query embeddings (user vectors, mapped queries).
    gallery : array-like or torch.Tensor of shape (n_gallery, n_features)
        Gallery embeddings in the same space (item vectors, documents).
    relevance : sparse matrix or array of shape (n_queries, n_gallery), or list
        The judgements, in one of three forms:

        - a scipy.sparse matrix or array of non-negative gains (graded relevance; an
          explicit zero is "not relevant");
        - a dense 2-D array of the same shape (numpy, or anything numpy can convert: a
          tensor, a DataFrame) of bool, integer or float gains, read exactly as
          ``scipy.sparse.csr_matrix(relevance)``;
        - a list (or tuple) with one entry per query: a collection of gallery row indices
          (each of gain 1) or a mapping ``{index: gain}``.

        A 2-D array is always a gain matrix, never rows of indices; pass per-query indices
        as a list.  A list whose every entry is an ordered sequence of ``n_gallery`` values
        (what ``dense.tolist()`` gives) reads both ways and is refused.

        .. versionchanged:: 0.1.0
           A dense 2-D array is read as gains; it used to be read as rows of indices.
    k : int, default=10
        Rank cut-off.
    exclude : scipy.sparse matrix or sequence, default=None
        Items never ranked for a query, in the forms of ``relevance`` (any non-zero entry
        excludes): the items a user has already seen, or the query itself when query set
        and gallery hold the same items (``scipy.sparse.eye(n)``).
    similarity : {"cosine", "dot"}, default="cosine"
        How items are scored: cosine, or the raw dot product (matrix factorisation scores,
        where the norm of an item vector carries its popularity).
    sample_weight : array-like of shape (n_queries,), default=None
        Weights of the queries in the mean.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to compute.
    memory_budget : int, default=None
        Bytes of similarity block held at once (None: 128 MiB).

    Returns
    -------
    float
        In [0, 1].

    See Also
    --------
    recall_at_k : the share of relevant items in the top ``k``.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.sparse import csr_matrix
    >>> from sklearn_compat.metrics import ndcg_at_k
    >>> items = np.eye(4)
    >>> users = np.array([[1.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.2, 1.0]])
    >>> ndcg_at_k(users, items, [[0, 1], [3]], k=2)
    1.0
    >>> ndcg_at_k(users, items, [[1], [2]], k=2)  # each relevant item ranked second
    0.6309297535714575
    >>> ndcg_at_k(users, items, [[1], [2]], k=2, exclude=[[0], [3]])  # seen items removed
    1.0
    >>> graded = csr_matrix(([1.0, 3.0], ([0, 0], [0, 1])), shape=(2, 4))  # user 1 unjudged
    >>> round(ndcg_at_k(users, items, graded, k=2), 4)
    0.7967
    >>> dense = np.array([[1, 3, 0, 0], [0, 0, 0, 0]])  # the same gains, dense
    >>> round(ndcg_at_k(users, items, dense, k=2), 4)
    0.7967
    """
    head, gains, k = _judged_scores(
        queries, gallery, relevance, k, exclude, similarity, device, memory_budget
    )
    dcg = dcg_from_head(torch.from_numpy(head)).numpy()
    ideal = ideal_dcg(gains, k)
    n_relevant = np.diff(gains.indptr)
    scores = np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)
    return mean_over_judged(scores, n_relevant, sample_weight, "nDCG")


def recall_at_k(
    queries,
    gallery,
    relevance,
    *,
    k=10,
    exclude=None,
    similarity="cosine",
    sample_weight=None,
    device="auto",
    memory_budget=None,
):
    """Share of each query's relevant items found in its top ``k``, recall@k.

    ``|relevant ∩ top k| / |relevant|`` (any positive gain is relevant), averaged over the
    queries with at least one relevant item.  Ranking, ties (counted against the query) and
    ``exclude`` work as in :func:`ndcg_at_k`, whose parameters this takes.  A query with
    more than ``k`` relevant items cannot reach 1.

    Parameters
    ----------
    queries, gallery, relevance, k, exclude, similarity, sample_weight, device, memory_budget
        As in :func:`ndcg_at_k`.

    Returns
    -------
    float
        In [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import recall_at_k
    >>> items = np.eye(4)
    >>> users = np.array([[1.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.2, 1.0]])
    >>> recall_at_k(users, items, [[0, 2], [3]], k=1)
    0.75
    """
    head, gains, _ = _judged_scores(
        queries, gallery, relevance, k, exclude, similarity, device, memory_budget
    )
    n_relevant = np.diff(gains.indptr)
    found = (head > 0).sum(axis=1)
    scores = found / np.maximum(n_relevant, 1)
    return mean_over_judged(scores, n_relevant, sample_weight, "recall")


def label_ndcg(queries, gallery, labels, *, k, sample_weight=None, device, memory_budget):
    """nDCG@k of a labelled fold: row ``i`` of both sets is one item, same class = gain 1.

    The scorer's protocol (as for CMC and mAP): each query is excluded from its own
    gallery, so a query's relevant items are the other members of its class.  Nothing of
    size ``n x n`` is formed: gains come from the class codes.
    """
    k = check_positive_int(k, "k")
    queries = check_embeddings(queries, "queries")
    gallery = check_embeddings(gallery, "gallery")
    check_same_width(queries, gallery, ("queries", "gallery"))
    if queries.shape[0] != gallery.shape[0]:
        raise ValueError(
            f"queries has {queries.shape[0]} rows and gallery {gallery.shape[0]}; a labelled "
            "fold holds the same items in both."
        )
    codes = check_row_labels(labels, queries.shape[0])
    dev = resolve_device(device, for_inference=True)
    Q, G = normalized_tensors([queries, gallery], dev)
    lookup = LabelGains(codes, codes, dev)
    head = head_gains(Q, G, k, lookup, exclude_self=True, budget=memory_budget)
    dcg = dcg_from_head(head).cpu().numpy()
    n_relevant = np.bincount(codes)[codes] - 1
    discounts = np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(2, k + 2)))])
    ideal = discounts[np.minimum(n_relevant, k)]
    scores = np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)
    return mean_over_judged(scores, n_relevant, sample_weight, "nDCG")

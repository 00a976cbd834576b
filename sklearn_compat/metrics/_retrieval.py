"""Retrieval metrics: paired top-k (cosine or CSLS), mean cosine, CMC top-k, mAP, and
neighbourhood preservation.  Public through :mod:`sklearn_compat.metrics`."""

import numpy as np
import torch

from .._core.backend import resolve_device
from .._core.ranking import (
    count_true,
    label_rank_stats,
    mask_self,
    normalized_tensors,
    paired_topk_share,
    similarity_blocks,
    topk_mask,
)
from .._core.validation import (
    check_embeddings,
    check_positive_int,
    check_same_rows,
    check_same_width,
    encode_labels,
    query_weights,
)

__all__ = [
    "cmc_topk_accuracy",
    "mean_average_precision",
    "mean_cosine_similarity",
    "neighbourhood_preservation",
    "paired_topk_accuracy",
]


def resolve_query_gallery(queries, gallery, labels, gallery_labels, exclude_self):
    """Validate a labelled query/gallery pair; returns arrays, class codes and exclusion.

    ``gallery_labels=None`` means the gallery holds the same items as the queries, row for
    row (e.g. the same test split embedded by the old model), so ``labels`` serve both and
    the query's own item is excluded by default.
    """
    queries = check_embeddings(queries, "queries")
    gallery = check_embeddings(gallery, "gallery")
    check_same_width(queries, gallery, ("queries", "gallery"))
    same_items = gallery_labels is None
    if exclude_self == "auto":
        exclude_self = same_items
    elif not isinstance(exclude_self, (bool, np.bool_)):
        raise ValueError(f"exclude_self must be 'auto', True or False, got {exclude_self!r}.")
    if labels is None:
        raise ValueError("labels (the class of each query) are required.")
    if same_items:
        (codes,) = encode_labels(labels, names=["labels"])
        if not (len(codes) == queries.shape[0] == gallery.shape[0]):
            raise ValueError(
                f"labels has {len(codes)} entries, queries {queries.shape[0]} rows and "
                f"gallery {gallery.shape[0]} rows; without gallery_labels the gallery must "
                "hold the same items as the queries (pass gallery_labels for a gallery of "
                "other items)."
            )
        query_codes = gallery_codes = codes
    else:
        query_codes, gallery_codes = encode_labels(
            labels, gallery_labels, names=["labels", "gallery_labels"]
        )
        if len(query_codes) != queries.shape[0]:
            raise ValueError(
                f"labels has {len(query_codes)} entries but queries has {queries.shape[0]} rows."
            )
        if len(gallery_codes) != gallery.shape[0]:
            raise ValueError(
                f"gallery_labels has {len(gallery_codes)} entries but gallery has "
                f"{gallery.shape[0]} rows."
            )
    if exclude_self and queries.shape[0] != gallery.shape[0]:
        raise ValueError(
            "exclude_self=True needs the gallery to hold the query items row for row, but "
            f"queries has {queries.shape[0]} rows and gallery {gallery.shape[0]}."
        )
    return queries, gallery, query_codes, gallery_codes, bool(exclude_self)


def weighted_mean_over_valid(values, valid, sample_weight, what):
    """Weighted mean of ``values[valid]``; a ValueError when no query is valid."""
    if not valid.any():
        raise ValueError(
            f"No query has a relevant item (same class) in the gallery, so {what} is undefined."
        )
    weights = query_weights(sample_weight, len(values))[valid]
    if weights.sum() <= 0:
        raise ValueError("sample_weight is zero on every query with a relevant item.")
    return float(np.average(values[valid], weights=weights))


# ---------------------------------------------------------------------- paired metrics
def paired_topk_accuracy(
    queries,
    gallery,
    k=1,
    *,
    csls_k=None,
    sample_weight=None,
    device="auto",
    memory_budget=None,
):
    """Share of queries whose own gallery row is among their ``k`` nearest by cosine.

    Row ``i`` of ``gallery`` is the partner of row ``i`` of ``queries`` (for an aligner:
    ``queries = aligner.transform(X)``, ``gallery = Y``); every gallery row competes.
    Ties count against the query, so a gallery collapsed to one point scores 0, not 1.

    Parameters
    ----------
    queries, gallery : array-like or torch.Tensor of shape (n_samples, n_features)
        Paired rows in one space.
    k : int, default=1
        How many nearest gallery rows count as a hit.
    csls_k : int, default=None
        When given, rank by CSLS (Conneau et al., 2018, "Word translation without parallel
        data"), ``2 cos(q, g) - r_G(q) - r_Q(g)``, instead of plain cosine: ``r_G(q)`` is
        the mean cosine of ``q`` to its ``csls_k`` nearest gallery rows and ``r_Q(g)`` that
        of ``g`` to its ``csls_k`` nearest queries (10 is the usual choice).  It demotes
        "hub" gallery rows that are near to everything.
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the queries in the average.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to compute.
    memory_budget : int, default=None
        Bytes of similarity block held at once (None: 128 MiB).  Lower it on a small GPU.

    Returns
    -------
    float
        Weighted share of hits, in [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import paired_topk_accuracy
    >>> Y = np.eye(4)
    >>> paired_topk_accuracy(Y, Y)
    1.0
    >>> paired_topk_accuracy(Y[::-1], Y)
    0.0
    >>> paired_topk_accuracy(Y, Y, csls_k=2)
    1.0
    """
    k = check_positive_int(k, "k")
    csls_k = check_positive_int(csls_k, "csls_k", allow_none=True)
    kwargs = {} if memory_budget is None else {"budget": memory_budget}
    return paired_topk_share(
        queries, gallery, k, sample_weight=sample_weight, device=device, csls_k=csls_k, **kwargs
    )


def mean_cosine_similarity(queries, gallery, *, sample_weight=None, device="auto"):
    """Mean cosine similarity of paired rows, ``mean_i cos(queries_i, gallery_i)``.

    An all-zero row has cosine 0 to its partner.

    Parameters
    ----------
    queries, gallery : array-like or torch.Tensor of shape (n_samples, n_features)
        Paired rows in one space.
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the pairs in the average.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to compute.

    Returns
    -------
    float
        In [-1, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import mean_cosine_similarity
    >>> mean_cosine_similarity([[1.0, 0.0], [0.0, 2.0]], [[3.0, 0.0], [0.0, -1.0]])
    0.0
    """
    queries = check_embeddings(queries, "queries")
    gallery = check_embeddings(gallery, "gallery")
    check_same_width(queries, gallery, ("queries", "gallery"))
    check_same_rows(queries, gallery, ("queries", "gallery"))
    dev = resolve_device(device, for_inference=True)
    Q, G = normalized_tensors([queries, gallery], dev)
    cosines = (Q * G).sum(dim=1).cpu().numpy()
    weights = query_weights(sample_weight, len(cosines))
    return float(np.average(cosines, weights=weights))


# ---------------------------------------------------------------------- class-label metrics


def cmc_topk_accuracy(
    queries,
    gallery,
    labels,
    *,
    gallery_labels=None,
    k=1,
    exclude_self="auto",
    sample_weight=None,
    device="auto",
    memory_budget=None,
):
    """CMC top-k: share of queries with an item of their class among the k nearest.

    Cumulative matching characteristic at rank ``k`` under cosine similarity, the
    retrieval accuracy reported for compatible representations (query set = gallery set
    = the test split, each query removed from its own gallery).  Ties count against the
    query.  Queries whose class has no item in the gallery are left out of the average
    (the usual person re-identification protocol).

    Parameters
    ----------
    queries : array-like or torch.Tensor of shape (n_queries, n_features)
        Query embeddings (e.g. the adapted new model's, ``B(new)``).
    gallery : array-like or torch.Tensor of shape (n_gallery, n_features)
        Gallery embeddings in the same space (e.g. the old model's).
    labels : array-like of shape (n_queries,)
        Class of each query.  A gallery item is relevant when it has the query's class.
    gallery_labels : array-like of shape (n_gallery,), default=None
        Class of each gallery item.  None (the paper's protocol) means the gallery holds
        the *same items* as the queries, row for row, so ``labels`` serve both sets.
    k : int, default=1
        Rank cut-off.
    exclude_self : "auto" or bool, default="auto"
        Remove gallery row ``i`` from query ``i``'s list: the query must not find itself
        (or its own item embedded by the other model).  "auto" is True when
        ``gallery_labels`` is None and False for a separate gallery.
    sample_weight : array-like of shape (n_queries,), default=None
        Weights of the queries in the average.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to compute.
    memory_budget : int, default=None
        Bytes of working memory per block of queries (None: 128 MiB).

    Returns
    -------
    float
        In [0, 1].

    See Also
    --------
    mean_average_precision : the whole ranking, not only its head.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import cmc_topk_accuracy
    >>> old = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> labels = [0, 0, 1, 1]
    >>> cmc_topk_accuracy(old, old, labels)  # old/old, each query excluded from its gallery
    1.0
    >>> new = old[:, ::-1]  # a model whose space is flipped
    >>> cmc_topk_accuracy(new, old, labels)  # new/old without alignment
    0.0
    """
    k = check_positive_int(k, "k")
    queries, gallery, qc, gc, exclude = resolve_query_gallery(
        queries, gallery, labels, gallery_labels, exclude_self
    )
    ranks = label_rank_stats(
        queries,
        gallery,
        qc,
        gc,
        exclude_self=exclude,
        want="rank",
        device=device,
        budget=memory_budget,
    )
    return weighted_mean_over_valid(ranks < k, ranks >= 0, sample_weight, "CMC")


def mean_average_precision(
    queries,
    gallery,
    labels,
    *,
    gallery_labels=None,
    exclude_self="auto",
    sample_weight=None,
    device="auto",
    memory_budget=None,
):
    """Mean average precision of class-label retrieval under cosine similarity.

    For each query, the gallery is ranked by decreasing cosine similarity (irrelevant items
    first among ties: ties count against the query) and the precision at the position of
    every relevant item (same class) is averaged; the result is averaged over queries.
    Queries whose class has no item in the gallery are left out.

    Parameters
    ----------
    queries : array-like or torch.Tensor of shape (n_queries, n_features)
        Query embeddings (e.g. the adapted new model's, ``B(new)``).
    gallery : array-like or torch.Tensor of shape (n_gallery, n_features)
        Gallery embeddings in the same space (e.g. the old model's).
    labels : array-like of shape (n_queries,)
        Class of each query.  A gallery item is relevant when it has the query's class.
    gallery_labels : array-like of shape (n_gallery,), default=None
        Class of each gallery item.  None (the paper's protocol) means the gallery holds
        the *same items* as the queries, row for row, so ``labels`` serve both sets.
    exclude_self : "auto" or bool, default="auto"
        Remove gallery row ``i`` from query ``i``'s list: the query must not find itself
        (or its own item embedded by the other model).  "auto" is True when
        ``gallery_labels`` is None and False for a separate gallery.
    sample_weight : array-like of shape (n_queries,), default=None
        Weights of the queries in the average.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to compute.
    memory_budget : int, default=None
        Bytes of working memory per block of queries (None: 128 MiB); each block is
        sorted row by row, so it needs about 45 bytes per similarity.

    Returns
    -------
    float
        In [0, 1].

    See Also
    --------
    cmc_topk_accuracy : only the head of the ranking.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import mean_average_precision
    >>> old = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> mean_average_precision(old, old, [0, 0, 1, 1])
    1.0
    >>> mean_average_precision(old, old, [0, 1, 0, 1])  # each relevant item 2nd or 3rd
    0.41666666666666663
    """
    queries, gallery, qc, gc, exclude = resolve_query_gallery(
        queries, gallery, labels, gallery_labels, exclude_self
    )
    ap = label_rank_stats(
        queries,
        gallery,
        qc,
        gc,
        exclude_self=exclude,
        want="ap",
        device=device,
        budget=memory_budget,
    )
    return weighted_mean_over_valid(ap, ~np.isnan(ap), sample_weight, "mAP")


# ---------------------------------------------------------------------- geometry
def neighbourhood_preservation(
    reference, mapped, k=10, *, kind="overlap", device="auto", memory_budget=None
):
    """How much of each item's cosine k-neighbourhood survives a change of space.

    For every row ``i``, ``N_ref(i)`` is the set of its ``k`` nearest other rows in
    ``reference`` and ``N_map(i)`` the same in ``mapped`` (the item itself is excluded; ties
    go to the lower row index).  The result averages over rows either the overlap
    ``|N_ref ∩ N_map| / k`` (``kind="overlap"``, "overlap@k", the default) or the Jaccard
    index ``|N_ref ∩ N_map| / |N_ref ∪ N_map|`` (``kind="jaccard"``).  1 means every
    neighbourhood is kept; a random map gives about ``k / n``.

    Use it to check that an adapter keeps the new model's own geometry: ``reference`` =
    the new embeddings, ``mapped`` = their adapted version.  Any map that preserves
    cosines (orthogonal, isotropic scale) scores exactly 1.

    Parameters
    ----------
    reference : array-like or torch.Tensor of shape (n_samples, n_features_ref)
        Embeddings in the reference space.
    mapped : array-like or torch.Tensor of shape (n_samples, n_features_map)
        The same items in the other space, row for row (the widths may differ).
    k : int, default=10
        Neighbourhood size, at most ``n_samples - 1``.
    kind : {"overlap", "jaccard"}, default="overlap"
        How two neighbourhoods are compared.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to compute.
    memory_budget : int, default=None
        Bytes of working memory per block of rows (None: 128 MiB).

    Returns
    -------
    float
        In [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import neighbourhood_preservation
    >>> X = np.random.default_rng(0).normal(size=(50, 8))
    >>> neighbourhood_preservation(X, 3.0 * X[:, ::-1], k=5)
    1.0
    """
    k = check_positive_int(k, "k")
    if kind not in ("overlap", "jaccard"):
        raise ValueError(f"kind must be 'overlap' or 'jaccard', got {kind!r}.")
    reference = check_embeddings(reference, "reference", ensure_min_samples=2)
    mapped = check_embeddings(mapped, "mapped", ensure_min_samples=2)
    check_same_rows(reference, mapped, ("reference", "mapped"))
    n = reference.shape[0]
    if k > n - 1:
        raise ValueError(f"k={k} must be at most n_samples - 1 = {n - 1}.")
    dev = resolve_device(device, for_inference=True)
    R, M = normalized_tensors([reference, mapped], dev)
    # Per entry: both similarity slabs, two masks and the int64 cumsum of topk_mask.
    per_entry = 2 * R.element_size() + 2 + 8
    shared = torch.empty(n, dtype=torch.float64, device=dev)
    for start, stop, sims_ref in similarity_blocks(
        R, R, budget=memory_budget, bytes_per_entry=per_entry
    ):
        sims_map = M[start:stop] @ M.T
        mask_self(sims_ref, start, -torch.inf)
        mask_self(sims_map, start, -torch.inf)
        both = topk_mask(sims_ref, k) & topk_mask(sims_map, k)
        shared[start:stop] = count_true(both)
    shared = shared.cpu().numpy()
    if kind == "overlap":
        return float(np.mean(shared / k))
    return float(np.mean(shared / (2 * k - shared)))

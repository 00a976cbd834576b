"""Partial backfilling: the retrieval metric while the gallery is re-embedded bit by bit.

After a model upgrade the gallery still holds old embeddings (``F(old)``, or raw old ones);
re-embedding it with the new model (``B(new)``) is done in stages.  The backfilling curve
is the metric of new-model queries against the mixed gallery as a function of the
re-embedded share ``beta``; its area (the mean over ``beta`` in [0, 1]) summarises how
well old and new embeddings coexist (Ricci, Biondi, Pernici, Patras, Del Bimbo,
"lambda-Orthogonality Regularization for Compatible Representation Learning", NeurIPS 2025,
arXiv:2509.16664; see docs/methods.md, section "Metrics").
"""

import re

import numpy as np
import torch
from sklearn.utils import check_random_state

from .._core.backend import resolve_device
from .._core.ranking import (
    AP_BYTES_PER_ENTRY,
    average_precision_rows,
    first_positive_ranks,
    mask_self,
    normalized_tensors,
    similarity_blocks,
    unit_rows,
)
from .._core.validation import (
    check_embeddings,
    check_positive_int,
    check_same_width,
    encode_labels,
    query_weights,
)

__all__ = ["backfilling_auc", "backfilling_curve", "backfilling_order"]

_METRIC_PATTERN = re.compile(r"^cmc_top(\d+)$")


def _parse_metric(metric):
    """``"map"`` or ``"cmc_top<k>"`` -> ("map", None) or ("cmc", k)."""
    if metric == "map":
        return "map", None
    match = _METRIC_PATTERN.match(metric) if isinstance(metric, str) else None
    if match is None or int(match.group(1)) < 1:
        raise ValueError(
            f"metric must be 'map' or 'cmc_top<k>' such as 'cmc_top1', got {metric!r}."
        )
    return "cmc", int(match.group(1))


def backfilling_order(old_gallery, labels=None, *, order="farthest", random_state=None):
    """The order in which gallery items get re-embedded (first = backfilled first).

    Parameters
    ----------
    old_gallery : array-like or torch.Tensor of shape (n_gallery, n_features)
        The gallery's current (old-model, or ``F(old)``) embeddings.
    labels : array-like of shape (n_gallery,), default=None
        Class of each gallery item; required by ``order="farthest"``.
    order : {"farthest", "random"} or array-like of shape (n_gallery,), default="farthest"
        ``"farthest"`` (the paper's order): within each class, items sorted by the
        distance of their L2-normalised old embedding from the class mean of those,
        farthest first, i.e. the items the old model places worst go first.  Classes are
        interleaved so that at every stage each class has the same share backfilled
        (up to rounding).  ``"random"``: a random permutation from ``random_state``.
        An array is taken as the order itself and must be a permutation of
        ``range(n_gallery)``.
    random_state : int, RandomState instance or None, default=None
        Seeds ``order="random"`` (and breaks nothing else).

    Returns
    -------
    ndarray of shape (n_gallery,), int64
        Gallery row indices, backfilled first to last.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import backfilling_order
    >>> old = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.1]])
    >>> backfilling_order(old, [0, 0, 1, 0]).tolist()  # class 0's outlier (row 1) first
    [1, 2, 0, 3]
    """
    old_gallery = check_embeddings(old_gallery, "old_gallery")
    n = old_gallery.shape[0]
    if isinstance(order, str):
        if order == "random":
            return check_random_state(random_state).permutation(n).astype(np.int64)
        if order != "farthest":
            raise ValueError(
                f"order must be 'farthest', 'random' or a permutation array, got {order!r}."
            )
        if labels is None:
            raise ValueError("order='farthest' needs the class labels of the gallery.")
        (codes,) = encode_labels(labels, names=["labels"])
        if len(codes) != n:
            raise ValueError(f"labels has {len(codes)} entries but old_gallery has {n} rows.")
        unit = unit_rows(old_gallery).astype(np.float64)
        # Position of each item inside its class (0 = farthest), then as a share of the
        # class size, so that sorting on it interleaves the classes proportionally.
        share = np.empty(n)
        distance = np.empty(n)
        for code in np.unique(codes):
            members = np.flatnonzero(codes == code)
            dist = np.linalg.norm(unit[members] - unit[members].mean(axis=0), axis=1)
            within = members[np.argsort(-dist, kind="stable")]
            share[within] = np.arange(len(members)) / len(members)
            distance[members] = dist
        # lexsort: last key first; ties in share go to the farther item, then lower index.
        return np.lexsort((np.arange(n), -distance, share)).astype(np.int64)
    order = np.asarray(order)
    if (
        order.shape != (n,)
        or order.dtype.kind not in "iu"
        or not np.array_equal(np.sort(order), np.arange(n))
    ):
        raise ValueError(
            f"order must be 'farthest', 'random' or a permutation of range({n}) (one entry "
            "per gallery row)."
        )
    return order.astype(np.int64)


def backfilling_curve(
    new_gallery,
    old_gallery,
    queries,
    labels,
    *,
    query_labels=None,
    order="farthest",
    n_steps=10,
    metric="cmc_top1",
    random_state=None,
    sample_weight=None,
    device="auto",
    memory_budget=None,
):
    """Retrieval metric of new-model queries while the gallery is backfilled.

    The gallery starts with every item's old embedding (``old_gallery``, e.g. ``F(old)`` or
    the raw old model's) and, in ``order``, the first ``beta`` share of items is replaced
    by their new embedding (``new_gallery``, e.g. ``B(new)``).  At each ``beta`` in
    ``0, 1/n_steps, ..., 1`` the class-label metric of ``queries`` against that mixed
    gallery is computed (cosine similarity, ties count against the query).  ``beta = 0``
    is the cross-model score ``B(new)/old``; ``beta = 1`` is ``B(new)/B(new)``.

    Parameters
    ----------
    new_gallery : array-like or torch.Tensor of shape (n_gallery, n_features)
        New embeddings of the gallery items, in the shared space (e.g. the adapter's
        ``transform`` of the new model's embeddings).
    old_gallery : array-like or torch.Tensor of shape (n_gallery, n_features)
        Old embeddings of the same items, row for row, in the same space.
    queries : array-like or torch.Tensor of shape (n_queries, n_features) or None
        Query embeddings in the shared space.  None uses ``new_gallery``: the paper's
        protocol, where the queries are the gallery items themselves (each excluded from
        its own gallery).
    labels : array-like of shape (n_gallery,)
        Class of each gallery item; a gallery item is relevant to a query of its class.
    query_labels : array-like of shape (n_queries,), default=None
        Class of each query when the queries are *other* items than the gallery's (no
        exclusion then).  None: the queries are the gallery items, row for row, and query
        ``i`` never retrieves gallery item ``i`` (in either its old or new version).
    order : {"farthest", "random"} or array-like, default="farthest"
        Backfilling order, see :func:`backfilling_order`.
    n_steps : int, default=10
        The curve has ``n_steps + 1`` equally spaced points from ``beta = 0`` to 1; at each,
        ``round(beta * n_gallery)`` items are backfilled.
    metric : {"cmc_top1", "cmc_top<k>", "map"}, default="cmc_top1"
        CMC top-k accuracy or mean average precision (see :func:`cmc_topk_accuracy` and
        :func:`mean_average_precision`).
    random_state : int, RandomState instance or None, default=None
        Seeds ``order="random"``.
    sample_weight : array-like of shape (n_queries,), default=None
        Weights of the queries.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to compute.
    memory_budget : int, default=None
        Bytes of working memory per block of queries (None: 128 MiB).

    Returns
    -------
    betas : ndarray of shape (n_steps + 1,)
        Backfilled shares, from 0 to 1.
    values : ndarray of shape (n_steps + 1,)
        The metric at each share.

    See Also
    --------
    backfilling_auc : the area under this curve.

    Notes
    -----
    The similarities of each block of queries to the old and to the new gallery are
    computed once and shared by all ``beta`` steps, so the whole curve costs two GEMM
    passes; a step only selects, per gallery item, which of the two similarities counts.
    Queries whose class has no other item in the gallery are left out.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import backfilling_curve
    >>> rng = np.random.default_rng(0)
    >>> labels = np.repeat([0, 1], 10)
    >>> centres = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    >>> new = centres[labels] + 0.1 * rng.normal(size=(20, 3))
    >>> old = new[:, [1, 0, 2]]  # an incompatible old space: two axes swapped
    >>> betas, values = backfilling_curve(new, old, None, labels, n_steps=4)
    >>> betas.tolist(), values.round(2).tolist()
    ([0.0, 0.25, 0.5, 0.75, 1.0], [0.0, 0.2, 0.65, 0.9, 1.0])
    """
    kind, k = _parse_metric(metric)
    n_steps = check_positive_int(n_steps, "n_steps")
    new_gallery = check_embeddings(new_gallery, "new_gallery")
    old_gallery = check_embeddings(old_gallery, "old_gallery")
    if new_gallery.shape != old_gallery.shape:
        raise ValueError(
            "new_gallery and old_gallery must hold the same items in one space (same "
            f"shape), got {new_gallery.shape} and {old_gallery.shape}."
        )
    same_items = query_labels is None
    queries = new_gallery if queries is None else check_embeddings(queries, "queries")
    check_same_width(queries, new_gallery, ("queries", "new_gallery"))
    if labels is None:
        raise ValueError("labels (the class of each gallery item) are required.")
    if same_items:
        (gallery_codes,) = encode_labels(labels, names=["labels"])
        query_codes = gallery_codes
        if queries.shape[0] != new_gallery.shape[0]:
            raise ValueError(
                f"queries has {queries.shape[0]} rows but the gallery {new_gallery.shape[0]};"
                " pass query_labels when the queries are other items than the gallery's."
            )
    else:
        gallery_codes, query_codes = encode_labels(
            labels, query_labels, names=["labels", "query_labels"]
        )
        if len(query_codes) != queries.shape[0]:
            raise ValueError(
                f"query_labels has {len(query_codes)} entries but queries has "
                f"{queries.shape[0]} rows."
            )
    n_gallery = new_gallery.shape[0]
    if len(gallery_codes) != n_gallery:
        raise ValueError(
            f"labels has {len(gallery_codes)} entries but the gallery has {n_gallery} rows."
        )
    order = backfilling_order(old_gallery, gallery_codes, order=order, random_state=random_state)
    weights = query_weights(sample_weight, queries.shape[0])

    betas = np.linspace(0.0, 1.0, n_steps + 1)
    n_backfilled = np.rint(betas * n_gallery).astype(np.int64)
    dev = resolve_device(device, for_inference=True)
    Q, G_old, G_new = normalized_tensors([queries, old_gallery, new_gallery], dev)
    position = torch.empty(n_gallery, dtype=torch.int64, device=dev)
    position[torch.as_tensor(order, device=dev)] = torch.arange(n_gallery, device=dev)
    qc = torch.as_tensor(query_codes, device=dev)
    gc = torch.as_tensor(gallery_codes, device=dev)
    w = torch.as_tensor(weights, device=dev)

    # Per entry: two similarity slabs, the selected one, the relevance mask, and for AP
    # the buffers of average_precision_rows.
    itemsize = Q.element_size()
    per_entry = 3 * itemsize + 1 + (AP_BYTES_PER_ENTRY if kind == "map" else 0)
    totals = torch.zeros(n_steps + 1, dtype=torch.float64, device=dev)
    weight_sums = torch.zeros(n_steps + 1, dtype=torch.float64, device=dev)
    for start, stop, sims_old in similarity_blocks(
        Q, G_old, budget=memory_budget, bytes_per_entry=per_entry
    ):
        sims_new = Q[start:stop] @ G_new.T
        positive = qc[start:stop, None] == gc[None, :]
        if same_items:
            mask_self(sims_old, start, -torch.inf)
            mask_self(sims_new, start, -torch.inf)
            rows = torch.arange(stop - start, device=dev)
            positive[rows, rows + start] = False
        valid = positive.any(dim=1)
        block_w = torch.where(valid, w[start:stop], 0.0)
        for step, count in enumerate(n_backfilled.tolist()):
            sims = torch.where(position[None, :] < count, sims_new, sims_old)
            if kind == "cmc":
                score = (first_positive_ranks(sims, positive) < k).to(torch.float64)
            else:
                score = torch.nan_to_num(average_precision_rows(sims, positive), nan=0.0)
            totals[step] += (score * block_w).sum()
            weight_sums[step] += block_w.sum()
    weight_sums = weight_sums.cpu().numpy()
    if weight_sums[0] <= 0:
        raise ValueError(
            "No query has a relevant item (same class) in the gallery, or all such "
            "queries have zero weight: the backfilling curve is undefined."
        )
    return betas, totals.cpu().numpy() / weight_sums


def backfilling_auc(new_gallery, old_gallery, queries, labels, **kwargs):
    """Area under the backfilling curve: the metric averaged over ``beta`` in [0, 1].

    Trapezoidal rule over the ``n_steps + 1`` points of :func:`backfilling_curve`, which
    takes the same arguments.  Higher is better; it lies between the worst and the best
    point of the curve.

    Parameters
    ----------
    new_gallery, old_gallery, queries, labels
        As in :func:`backfilling_curve`.
    **kwargs
        Keyword arguments of :func:`backfilling_curve` (``order``, ``n_steps``,
        ``metric``, ``query_labels``, ``random_state``, ``sample_weight``, ``device``,
        ``memory_budget``).

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import backfilling_auc
    >>> labels = np.repeat([0, 1], 5)
    >>> new = np.eye(2)[labels] + 0.01 * np.arange(10)[:, None]
    >>> backfilling_auc(new, new, None, labels)  # compatible already: flat curve at 1
    1.0
    """
    betas, values = backfilling_curve(new_gallery, old_gallery, queries, labels, **kwargs)
    return float(np.sum(np.diff(betas) * (values[1:] + values[:-1]) / 2))

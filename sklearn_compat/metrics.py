"""Retrieval and compatibility metrics for aligned embeddings, and scorers.

All similarity-based metrics use cosine similarity and run blockwise, so folds of 100k rows
stay memory-bounded.
"""

import numpy as np

from ._ranking import paired_ranks

__all__ = ["paired_topk_accuracy"]


def paired_topk_accuracy(queries, gallery, k=1, *, sample_weight=None, device="auto"):
    """Share of queries whose own gallery row is among their ``k`` nearest by cosine.

    Row ``i`` of ``gallery`` is the partner of row ``i`` of ``queries`` (for an aligner:
    ``queries = aligner.transform(X)``, ``gallery = Y``).  Ties count against the query.

    Parameters
    ----------
    queries, gallery : array-like of shape (n, d)
        Paired rows.
    k : int, default=1
        How many nearest gallery rows count as a hit.
    sample_weight : array-like of shape (n,), default=None
        Weights of the queries in the average.
    device : str, default="auto"
        Where to compute.

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
    """
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    hits = paired_ranks(queries, gallery, device=device) < k
    return float(np.average(hits, weights=sample_weight))

"""Scorers for model selection: ``scoring=`` of GridSearchCV, cross_validate, ...

A scorer is called as ``scorer(estimator, X, Y)`` on a held-out fold: it maps ``X`` with
``estimator.transform`` once and compares the result with ``Y`` (paired rows).
"""

import re

from sklearn.utils.metadata_routing import MetadataRequest

from .._core.validation import check_positive_int
from ._judged import label_ndcg
from ._retrieval import (
    cmc_topk_accuracy,
    mean_average_precision,
    mean_cosine_similarity,
    neighbourhood_preservation,
    paired_topk_accuracy,
)

__all__ = [
    "get_retrieval_scorer_names",
    "make_multi_retrieval_scorer",
    "make_retrieval_scorer",
]

_TOPK = re.compile(r"^(csls_)?top(\d+)$")
_CMC = re.compile(r"^cmc_top(\d+)$")
_NDCG = re.compile(r"^ndcg(\d+)$")
_FIXED_NAMES = ("mean_cosine", "neighbourhood_preservation")
_EXAMPLE_NAMES = ("top1", "top5", "top10", "csls_top1", "csls_top5", "csls_top10")
_LABEL_NAMES = ("cmc_top1", "cmc_top5", "map", "ndcg10")
_NEEDS_LABELS = (
    "needs the class labels of the rows: call it as scorer(estimator, X, Y, labels=...), or "
    "in GridSearchCV/cross_validate turn on metadata routing "
    "(sklearn.set_config(enable_metadata_routing=True)) and pass labels=... to fit."
)


def get_retrieval_scorer_names():
    """Names accepted by :func:`make_retrieval_scorer`.

    ``"top<k>"``, ``"csls_top<k>"``, ``"cmc_top<k>"`` and ``"ndcg<k>"`` work for any
    positive ``k``; the list shows the common ones.  ``"cmc_top<k>"``, ``"map"`` and
    ``"ndcg<k>"`` need class labels.

    Returns
    -------
    list of str

    Examples
    --------
    >>> from sklearn_compat.metrics import get_retrieval_scorer_names
    >>> get_retrieval_scorer_names()[:3]
    ['top1', 'top5', 'top10']
    """
    return [*_EXAMPLE_NAMES, *_FIXED_NAMES, *_LABEL_NAMES]


def _needs_labels(metric):
    return metric == "map" or bool(_CMC.match(metric) or _NDCG.match(metric))


def _metric_function(metric, *, csls_k=10, k=10, device="auto", memory_budget=None):
    """``fn(mapped, X, Y, sample_weight, labels) -> float`` for a scorer name."""
    if not isinstance(metric, str):
        raise ValueError(f"metric must be a string, got {metric!r}.")
    common = {"device": device}
    match = _TOPK.match(metric)
    if match and int(match.group(2)) >= 1:
        top = int(match.group(2))
        csls = check_positive_int(csls_k, "csls_k") if match.group(1) else None

        def score(mapped, X, Y, sample_weight, labels):
            return paired_topk_accuracy(
                mapped,
                Y,
                top,
                csls_k=csls,
                sample_weight=sample_weight,
                memory_budget=memory_budget,
                **common,
            )

        return score
    if metric == "mean_cosine":

        def score(mapped, X, Y, sample_weight, labels):
            return mean_cosine_similarity(mapped, Y, sample_weight=sample_weight, **common)

        return score
    if metric in ("neighbourhood_preservation", "neighborhood_preservation"):
        k = check_positive_int(k, "k")

        def score(mapped, X, Y, sample_weight, labels):
            if sample_weight is not None:
                raise ValueError("neighbourhood_preservation does not take sample_weight.")
            return neighbourhood_preservation(
                X, mapped, k=k, memory_budget=memory_budget, **common
            )

        return score
    match = _CMC.match(metric)
    if (match and int(match.group(1)) >= 1) or metric == "map":
        top = int(match.group(1)) if match else None

        def score(mapped, X, Y, sample_weight, labels):
            if labels is None:
                raise ValueError(f"The {metric!r} scorer {_NEEDS_LABELS}")
            # The fold's rows are both the queries (mapped X) and the gallery (Y): the
            # paper's protocol, each query excluded from its own gallery.
            options = {"sample_weight": sample_weight, "memory_budget": memory_budget}
            if top is None:
                return mean_average_precision(mapped, Y, labels, **options, **common)
            return cmc_topk_accuracy(mapped, Y, labels, k=top, **options, **common)

        return score
    match = _NDCG.match(metric)
    if match and int(match.group(1)) >= 1:
        cut = int(match.group(1))

        def score(mapped, X, Y, sample_weight, labels):
            if labels is None:
                raise ValueError(f"The {metric!r} scorer {_NEEDS_LABELS}")
            return label_ndcg(
                mapped,
                Y,
                labels,
                k=cut,
                sample_weight=sample_weight,
                memory_budget=memory_budget,
                **common,
            )

        return score
    raise ValueError(
        f"Unknown retrieval metric {metric!r}; use 'top<k>', 'csls_top<k>', "
        "'mean_cosine', 'neighbourhood_preservation', 'cmc_top<k>', 'map' or 'ndcg<k>'."
    )


class _RetrievalScorer:
    """Callable ``scorer(estimator, X, Y, sample_weight=None, labels=None)``.

    Greater is better for every metric.  It takes part in scikit-learn's metadata routing:
    ``labels`` are requested by default when a metric needs them, ``sample_weight`` only
    after ``set_score_request(sample_weight=True)``.
    """

    def __init__(self, metrics, kwargs, single):
        self._metrics = metrics
        self._kwargs = kwargs
        self._single = single
        self._functions = {name: _metric_function(name, **kwargs) for name in metrics}
        needs_labels = any(_needs_labels(name) for name in metrics)
        self._requests = {"labels": needs_labels, "sample_weight": None}

    def __call__(self, estimator, X, Y=None, sample_weight=None, *, y=None, labels=None):
        if Y is None:
            Y = y
        if Y is None:
            raise ValueError("A retrieval scorer needs Y, the paired target embeddings.")
        # One transform shared by every metric of this scorer.
        mapped = estimator.transform(X)
        scores = {
            name: fn(mapped, X, Y, sample_weight, labels) for name, fn in self._functions.items()
        }
        return scores[self._metrics[0]] if self._single else scores

    def set_score_request(self, *, labels=None, sample_weight=None):
        """Choose which metadata GridSearchCV and friends route to this scorer.

        Only relevant with ``sklearn.set_config(enable_metadata_routing=True)``.

        Parameters
        ----------
        labels, sample_weight : bool or None, default=None
            True: route it here; False: do not; None: leave the current setting.

        Returns
        -------
        self
        """
        for param, value in (("labels", labels), ("sample_weight", sample_weight)):
            if value is not None:
                self._requests[param] = bool(value)
        return self

    def get_metadata_routing(self):
        """The scorer's metadata request (scikit-learn's routing protocol)."""
        request = MetadataRequest(owner=type(self).__name__)
        for param, value in self._requests.items():
            request.score.add_request(param=param, alias=value)
        return request

    def __repr__(self):
        args = [repr(self._metrics[0] if self._single else list(self._metrics))]
        args += [f"{key}={value!r}" for key, value in self._kwargs.items()]
        factory = "make_retrieval_scorer" if self._single else "make_multi_retrieval_scorer"
        return f"{factory}({', '.join(args)})"


def _scorer_kwargs(csls_k, k, device, memory_budget):
    kwargs = {"csls_k": csls_k, "k": k, "device": device, "memory_budget": memory_budget}
    return kwargs


def make_retrieval_scorer(metric="top1", *, csls_k=10, k=10, device="auto", memory_budget=None):
    """A scorer for ``scoring=`` in GridSearchCV, cross_validate and friends.

    ``scorer(estimator, X, Y)`` computes ``estimator.transform(X)`` and compares it with the
    paired rows of ``Y``.  Every metric is greater-is-better.

    Parameters
    ----------
    metric : str, default="top1"
        - ``"top<k>"`` (``"top1"``, ``"top5"``, ...): paired top-k retrieval accuracy,
          :func:`paired_topk_accuracy`; ``"top1"`` is what ``estimator.score`` returns;
        - ``"csls_top<k>"``: the same ranked by CSLS with ``csls_k`` neighbours;
        - ``"mean_cosine"``: :func:`mean_cosine_similarity` of the mapped rows and ``Y``;
        - ``"neighbourhood_preservation"``: :func:`neighbourhood_preservation` of ``X``'s
          ``k``-neighbourhoods in the mapped space (does the map keep the source model's
          own geometry?);
        - ``"cmc_top<k>"``, ``"map"``: :func:`cmc_topk_accuracy` and
          :func:`mean_average_precision` of the mapped rows (queries) against ``Y``
          (gallery), the fold's own items, each query excluded from its own gallery.
          They need the rows' class labels: ``scorer(estimator, X, Y, labels=...)``, or
          through metadata routing in model selection (the scorer requests ``labels``);
        - ``"ndcg<k>"`` (``"ndcg10"``): :func:`ndcg_at_k` of the same protocol, the items
          of the query's class being relevant (gain 1), each query excluded from its own
          gallery; it needs ``labels`` like ``"map"``.
    csls_k : int, default=10
        Neighbours of the CSLS hubness correction (``csls_top<k>`` only).
    k : int, default=10
        Neighbourhood size of ``neighbourhood_preservation``.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the metric is computed (``transform`` uses the estimator's own device).
    memory_budget : int, default=None
        Bytes of similarity block held at once (None: 128 MiB).

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, Y, sample_weight=None, labels=None) -> float``, with
        ``set_score_request`` for metadata routing (``sample_weight`` is routed only once
        requested).

    See Also
    --------
    make_multi_retrieval_scorer : several metrics from one ``transform``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.model_selection import GridSearchCV
    >>> from sklearn_compat import OrthogonalProcrustesAligner
    >>> from sklearn_compat.metrics import make_retrieval_scorer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(120, 6))
    >>> Y = X[:, ::-1] + 0.05 * rng.normal(size=(120, 6)) + 2.0
    >>> search = GridSearchCV(
    ...     OrthogonalProcrustesAligner(), {"center": [False, True]},
    ...     scoring=make_retrieval_scorer("csls_top1"), cv=3,
    ... ).fit(X, Y)
    >>> search.best_params_
    {'center': True}
    """
    kwargs = _scorer_kwargs(csls_k, k, device, memory_budget)
    return _RetrievalScorer((metric,), kwargs, single=True)


def make_multi_retrieval_scorer(
    metrics=("top1", "top5", "mean_cosine"),
    *,
    csls_k=10,
    k=10,
    device="auto",
    memory_budget=None,
):
    """One scorer that returns several metrics from a single ``transform``.

    Pass it as ``scoring=`` with ``refit="<metric name>"``; scikit-learn accepts a callable
    returning a dict and reports each entry as ``mean_test_<name>`` in ``cv_results_``.
    Unlike a dict of single scorers, the fold is mapped once for all metrics.

    Parameters
    ----------
    metrics : sequence of str, default=("top1", "top5", "mean_cosine")
        Names as in :func:`make_retrieval_scorer`, each used as the key of its score.
    csls_k, k, device, memory_budget
        As in :func:`make_retrieval_scorer`.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, Y, sample_weight=None, labels=None) -> dict[str, float]``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.model_selection import GridSearchCV
    >>> from sklearn_compat import OrthogonalProcrustesAligner
    >>> from sklearn_compat.metrics import make_multi_retrieval_scorer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(120, 6))
    >>> Y = X[:, ::-1] + 0.05 * rng.normal(size=(120, 6)) + 2.0
    >>> search = GridSearchCV(
    ...     OrthogonalProcrustesAligner(), {"center": [False, True]},
    ...     scoring=make_multi_retrieval_scorer(["top1", "mean_cosine"]),
    ...     refit="mean_cosine", cv=3,
    ... ).fit(X, Y)
    >>> search.best_params_, sorted(k for k in search.cv_results_ if k.startswith("mean_test"))
    ({'center': True}, ['mean_test_mean_cosine', 'mean_test_top1'])
    """
    if isinstance(metrics, str):
        metrics = (metrics,)
    metrics = tuple(metrics)
    if not metrics:
        raise ValueError("metrics must name at least one metric.")
    if len(set(metrics)) != len(metrics):
        raise ValueError(f"metrics has duplicate names: {list(metrics)}.")
    kwargs = _scorer_kwargs(csls_k, k, device, memory_budget)
    return _RetrievalScorer(metrics, kwargs, single=False)

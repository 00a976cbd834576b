"""Scorers for model selection: ``scoring=`` of GridSearchCV, cross_validate, ...

A scorer is called as ``scorer(estimator, X, Y)`` on a held-out fold: it maps ``X`` with
``estimator.transform`` once and compares the result with ``Y`` (paired rows).
"""

import re

from ._retrieval import (
    check_positive_int,
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
_FIXED_NAMES = ("mean_cosine", "neighbourhood_preservation")
_EXAMPLE_NAMES = ("top1", "top5", "top10", "csls_top1", "csls_top5", "csls_top10")


def get_retrieval_scorer_names():
    """Names accepted by :func:`make_retrieval_scorer`.

    ``"top<k>"`` and ``"csls_top<k>"`` work for any positive ``k``; the list shows the
    common ones.

    Returns
    -------
    list of str

    Examples
    --------
    >>> from sklearn_compat.metrics import get_retrieval_scorer_names
    >>> get_retrieval_scorer_names()[:3]
    ['top1', 'top5', 'top10']
    """
    return [*_EXAMPLE_NAMES, *_FIXED_NAMES]


def _metric_function(metric, *, csls_k=10, k=10, device="auto", memory_budget=None):
    """``fn(mapped, X, Y, sample_weight) -> float`` for a scorer name."""
    if not isinstance(metric, str):
        raise ValueError(f"metric must be a string, got {metric!r}.")
    common = {"device": device}
    match = _TOPK.match(metric)
    if match and int(match.group(2)) >= 1:
        top = int(match.group(2))
        csls = check_positive_int(csls_k, "csls_k") if match.group(1) else None

        def score(mapped, X, Y, sample_weight):
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

        def score(mapped, X, Y, sample_weight):
            return mean_cosine_similarity(mapped, Y, sample_weight=sample_weight, **common)

        return score
    if metric in ("neighbourhood_preservation", "neighborhood_preservation"):
        k = check_positive_int(k, "k")

        def score(mapped, X, Y, sample_weight):
            if sample_weight is not None:
                raise ValueError("neighbourhood_preservation does not take sample_weight.")
            return neighbourhood_preservation(
                X, mapped, k=k, memory_budget=memory_budget, **common
            )

        return score
    raise ValueError(
        f"Unknown retrieval metric {metric!r}; use 'top<k>', 'csls_top<k>', "
        "'mean_cosine' or 'neighbourhood_preservation'."
    )


class _RetrievalScorer:
    """Callable ``scorer(estimator, X, Y, sample_weight=None)``; greater is better."""

    def __init__(self, metrics, kwargs, single):
        self._metrics = metrics
        self._kwargs = kwargs
        self._single = single
        self._functions = {name: _metric_function(name, **kwargs) for name in metrics}

    def __call__(self, estimator, X, Y=None, sample_weight=None, *, y=None):
        if Y is None:
            Y = y
        if Y is None:
            raise ValueError("A retrieval scorer needs Y, the paired target embeddings.")
        # One transform shared by every metric of this scorer.
        mapped = estimator.transform(X)
        scores = {name: fn(mapped, X, Y, sample_weight) for name, fn in self._functions.items()}
        return scores[self._metrics[0]] if self._single else scores

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
          own geometry?).
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
        ``scorer(estimator, X, Y, sample_weight=None) -> float``.

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
        ``scorer(estimator, X, Y, sample_weight=None) -> dict[str, float]``.

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

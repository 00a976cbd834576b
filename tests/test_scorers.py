"""Retrieval scorers in real model selection (GridSearchCV, cross_validate)."""

import numpy as np
import pytest
from scipy.stats import ortho_group
from sklearn import config_context
from sklearn.model_selection import GridSearchCV, KFold, cross_validate

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.metrics import (
    cmc_topk_accuracy,
    get_retrieval_scorer_names,
    make_multi_retrieval_scorer,
    make_retrieval_scorer,
    mean_average_precision,
    mean_cosine_similarity,
    neighbourhood_preservation,
    paired_topk_accuracy,
)


@pytest.fixture
def offset_pair(rng):
    """Y is a rotated X plus a large common offset: centring is what makes it align."""
    X = rng.normal(size=(150, 6))
    Q = ortho_group.rvs(6, random_state=0)
    Y = X @ Q + 0.3 * rng.normal(size=X.shape) + 4.0
    return X, Y


class CountingAligner(OrthogonalProcrustesAligner):
    """Counts transform calls (class-level, so clones share the counter)."""

    calls = 0

    def transform(self, X):
        type(self).calls += 1
        return super().transform(X)


@pytest.mark.parametrize(
    "name, reference",
    [
        ("top1", lambda Z, X, Y: paired_topk_accuracy(Z, Y, 1)),
        ("top5", lambda Z, X, Y: paired_topk_accuracy(Z, Y, 5)),
        ("csls_top1", lambda Z, X, Y: paired_topk_accuracy(Z, Y, 1, csls_k=10)),
        ("csls_top3", lambda Z, X, Y: paired_topk_accuracy(Z, Y, 3, csls_k=10)),
        ("mean_cosine", lambda Z, X, Y: mean_cosine_similarity(Z, Y)),
        ("neighbourhood_preservation", lambda Z, X, Y: neighbourhood_preservation(X, Z, 10)),
    ],
)
def test_scorer_equals_metric_on_transform(offset_pair, name, reference):
    X, Y = offset_pair
    aligner = OrthogonalProcrustesAligner().fit(X[:100], Y[:100])
    scorer = make_retrieval_scorer(name)
    Z = aligner.transform(X[100:])
    assert scorer(aligner, X[100:], Y[100:]) == pytest.approx(reference(Z, X[100:], Y[100:]))


def test_top1_scorer_equals_estimator_score(offset_pair):
    X, Y = offset_pair
    aligner = OrthogonalProcrustesAligner(center=True).fit(X, Y)
    assert make_retrieval_scorer("top1")(aligner, X, Y) == aligner.score(X, Y)


def test_scorer_options_are_used(offset_pair):
    X, Y = offset_pair
    aligner = OrthogonalProcrustesAligner().fit(X, Y)
    scorer = make_retrieval_scorer("csls_top1", csls_k=3, memory_budget=64)
    assert scorer(aligner, X, Y) == paired_topk_accuracy(aligner.transform(X), Y, csls_k=3)
    scorer = make_retrieval_scorer("neighbourhood_preservation", k=4)
    assert scorer(aligner, X, Y) == neighbourhood_preservation(X, aligner.transform(X), 4)
    assert "csls_k=3" in repr(make_retrieval_scorer("csls_top1", csls_k=3))


def test_grid_search_single_metric(offset_pair):
    X, Y = offset_pair
    search = GridSearchCV(
        OrthogonalProcrustesAligner(),
        {"center": [False, True]},
        scoring=make_retrieval_scorer("top1"),
        cv=KFold(3, shuffle=True, random_state=0),
    ).fit(X, Y)
    assert search.best_params_ == {"center": True}
    # scoring=None uses estimator.score, the same metric: identical results.
    default = GridSearchCV(
        OrthogonalProcrustesAligner(),
        {"center": [False, True]},
        cv=KFold(3, shuffle=True, random_state=0),
    ).fit(X, Y)
    np.testing.assert_array_equal(
        search.cv_results_["mean_test_score"], default.cv_results_["mean_test_score"]
    )
    assert search.cv_results_["mean_test_score"][1] > search.cv_results_["mean_test_score"][0]


def test_grid_search_dict_of_scorers_with_refit(offset_pair):
    X, Y = offset_pair
    scoring = {name: make_retrieval_scorer(name) for name in ("top1", "mean_cosine")}
    search = GridSearchCV(
        OrthogonalProcrustesAligner(),
        {"center": [False, True]},
        scoring=scoring,
        refit="mean_cosine",
        cv=3,
    ).fit(X, Y)
    assert search.best_params_ == {"center": True}
    assert {"mean_test_top1", "mean_test_mean_cosine"} <= set(search.cv_results_)
    assert search.best_estimator_.center is True
    assert search.score(X, Y) == pytest.approx(
        mean_cosine_similarity(search.best_estimator_.transform(X), Y)
    )


def test_multi_metric_scorer_shares_one_transform(offset_pair):
    X, Y = offset_pair
    names = ["top1", "top5", "csls_top1", "mean_cosine"]
    scorer = make_multi_retrieval_scorer(names)
    aligner = CountingAligner(center=True).fit(X, Y)
    CountingAligner.calls = 0
    scores = scorer(aligner, X, Y)
    assert CountingAligner.calls == 1
    assert list(scores) == names
    for name in names:
        assert scores[name] == make_retrieval_scorer(name)(aligner, X, Y)


def test_grid_search_multi_metric_scorer_with_refit(offset_pair):
    X, Y = offset_pair
    CountingAligner.calls = 0
    search = GridSearchCV(
        CountingAligner(),
        {"center": [False, True]},
        scoring=make_multi_retrieval_scorer(["top1", "mean_cosine", "csls_top1"]),
        refit="top1",
        cv=3,
    ).fit(X, Y)
    # 2 candidates x 3 folds, one transform per test fold (no train scores).
    assert CountingAligner.calls == 6
    assert search.best_params_ == {"center": True}
    assert search.best_index_ == int(np.argmax(search.cv_results_["mean_test_top1"]))
    for name in ("top1", "mean_cosine", "csls_top1"):
        assert f"rank_test_{name}" in search.cv_results_


def test_cross_validate_with_multi_scorer(offset_pair):
    X, Y = offset_pair
    scoring = make_multi_retrieval_scorer(["top1", "neighbourhood_preservation"])
    plain = cross_validate(OrthogonalProcrustesAligner(center=False), X, Y, scoring=scoring, cv=3)
    centred = cross_validate(OrthogonalProcrustesAligner(), X, Y, scoring=scoring, cv=3)
    assert plain["test_top1"].shape == (3,)
    # Without centring the map is a rotation: cosine neighbourhoods are kept exactly.
    # Centring adds Y's mean after rotating, which moves the cosine neighbourhoods.
    np.testing.assert_array_equal(plain["test_neighbourhood_preservation"], 1.0)
    assert np.all(centred["test_neighbourhood_preservation"] < 0.9)
    assert np.all(centred["test_top1"] > plain["test_top1"])


def test_scorer_names_and_bad_names():
    names = get_retrieval_scorer_names()
    assert {"top1", "csls_top1", "mean_cosine", "neighbourhood_preservation"} <= set(names)
    assert {"cmc_top1", "map"} <= set(names)
    for name in names:
        make_retrieval_scorer(name)
    for bad in ("top0", "top", "accuracy", "cmc_top0", "map5", 3):
        with pytest.raises(ValueError, match="metric"):
            make_retrieval_scorer(bad)
    with pytest.raises(ValueError, match="csls_k must be a positive integer"):
        make_retrieval_scorer("csls_top1", csls_k=0)
    with pytest.raises(ValueError, match="duplicate"):
        make_multi_retrieval_scorer(["top1", "top1"])
    with pytest.raises(ValueError, match="at least one"):
        make_multi_retrieval_scorer([])


def test_scorer_needs_y(offset_pair):
    X, Y = offset_pair
    aligner = OrthogonalProcrustesAligner().fit(X, Y)
    with pytest.raises(ValueError, match="needs Y"):
        make_retrieval_scorer("top1")(aligner, X)
    assert make_retrieval_scorer("top1")(aligner, X, y=Y) == aligner.score(X, Y)


# ---------------------------------------------------------------------- class labels
@pytest.fixture
def labelled_pair(rng):
    """Clustered X with labels; Y a rotated, offset, noisy copy."""
    labels = rng.integers(0, 4, size=150)
    X = 2.0 * rng.normal(size=(4, 6))[labels] + rng.normal(size=(150, 6))
    Q = ortho_group.rvs(6, random_state=1)
    Y = X @ Q + 0.5 * rng.normal(size=X.shape) + 3.0
    return X, Y, labels


def test_label_scorers_called_directly(labelled_pair):
    X, Y, labels = labelled_pair
    aligner = OrthogonalProcrustesAligner(center=True).fit(X, Y)
    Z = aligner.transform(X)
    assert make_retrieval_scorer("cmc_top1")(aligner, X, Y, labels=labels) == (
        cmc_topk_accuracy(Z, Y, labels)
    )
    assert make_retrieval_scorer("cmc_top3")(aligner, X, Y, labels=labels) == (
        cmc_topk_accuracy(Z, Y, labels, k=3)
    )
    assert make_retrieval_scorer("map")(aligner, X, Y, labels=labels) == (
        mean_average_precision(Z, Y, labels)
    )
    with pytest.raises(ValueError, match="enable_metadata_routing=True"):
        make_retrieval_scorer("map")(aligner, X, Y)


def test_grid_search_routes_labels_to_label_scorers(labelled_pair):
    X, Y, labels = labelled_pair
    cv = KFold(3, shuffle=True, random_state=0)
    scorer = make_multi_retrieval_scorer(["top1", "cmc_top1", "map"])
    with config_context(enable_metadata_routing=True):
        search = GridSearchCV(
            OrthogonalProcrustesAligner(),
            {"center": [False, True]},
            scoring=scorer,
            refit="map",
            cv=cv,
        ).fit(X, Y, labels=labels)
    assert search.best_index_ == int(np.argmax(search.cv_results_["mean_test_map"]))
    # The fold scores are the metrics on each test fold's own rows and labels.
    for candidate, center in enumerate([False, True]):
        for fold, (train, test) in enumerate(cv.split(X)):
            aligner = OrthogonalProcrustesAligner(center=center).fit(X[train], Y[train])
            Z = aligner.transform(X[test])
            got = search.cv_results_[f"split{fold}_test_map"][candidate]
            assert got == pytest.approx(mean_average_precision(Z, Y[test], labels[test]))
            got = search.cv_results_[f"split{fold}_test_cmc_top1"][candidate]
            assert got == pytest.approx(cmc_topk_accuracy(Z, Y[test], labels[test]))


def test_sample_weight_routing_is_opt_in(labelled_pair):
    X, Y, labels = labelled_pair
    w = np.random.default_rng(3).uniform(size=len(X))
    cv = KFold(3)
    scorer = make_retrieval_scorer("top1").set_score_request(sample_weight=True)
    with config_context(enable_metadata_routing=True):
        aligner = OrthogonalProcrustesAligner().set_fit_request(sample_weight=False)
        result = cross_validate(aligner, X, Y, scoring=scorer, cv=cv, params={"sample_weight": w})
    for fold, (train, test) in enumerate(cv.split(X)):
        fitted = OrthogonalProcrustesAligner().fit(X[train], Y[train])
        expected = paired_topk_accuracy(fitted.transform(X[test]), Y[test], sample_weight=w[test])
        assert result["test_score"][fold] == pytest.approx(expected)
    # Label scorers request labels by default; others do not (so labels meant for a
    # LambdaOrthAligner's fit never reach them).
    assert make_retrieval_scorer("map").get_metadata_routing().score.requests["labels"]
    assert not make_retrieval_scorer("top1").get_metadata_routing().score.requests["labels"]

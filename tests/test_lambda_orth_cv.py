"""LambdaOrthAlignerCV: the warm-started lam path against GridSearchCV, results layout, refit."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ortho_group
from sklearn.exceptions import FitFailedWarning, NotFittedError
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold

from sklearn_compat import (
    LambdaOrthAligner,
    LambdaOrthAlignerCV,
    OrthogonalProcrustesAligner,
    lambda_orth_path,
)
from sklearn_compat import lambda_orth as lambda_orth_module
from sklearn_compat._lambda import path as path_module
from sklearn_compat.lambda_orth import orthogonality_gap
from sklearn_compat.metrics import make_multi_retrieval_scorer

LAMS = [0.0, 0.5, 2.0, np.inf]
CV = KFold(3, shuffle=True, random_state=0)


def small_aligner(**params):
    defaults = dict(max_epochs=15, batch_size=64, lr=1e-2, random_state=0)
    return LambdaOrthAligner(**{**defaults, **params})


@pytest.fixture(scope="module")
def problem():
    """A pair whose best map is clearly not orthogonal: Y = X A + noise, A stretched."""
    rng = np.random.default_rng(0)
    n, d = 360, 6
    X = rng.normal(size=(n, d))
    stretch = np.diag(np.linspace(0.4, 1.6, d))
    A = ortho_group.rvs(d, random_state=0) @ stretch @ ortho_group.rvs(d, random_state=1)
    Y = X @ A + 0.3 * rng.normal(size=(n, d))
    return X, Y


@pytest.fixture(scope="module")
def grid_search(problem):
    X, Y = problem
    return GridSearchCV(small_aligner(), {"lam": LAMS}, cv=CV).fit(X, Y)


@pytest.fixture(scope="module")
def path_searches(problem):
    X, Y = problem
    return {
        direction: LambdaOrthAlignerCV(
            LAMS, estimator=small_aligner(), cv=CV, direction=direction
        ).fit(X, Y)
        for direction in ("increasing", "decreasing")
    }


@pytest.mark.parametrize("direction", ["increasing", "decreasing"])
def test_pick_scores_as_well_as_grid_search(grid_search, path_searches, direction):
    search = path_searches[direction]
    grid_scores = grid_search.cv_results_["mean_test_score"]
    # The grid matters on this problem (orthogonal is clearly worse than the best), and
    # the pick is one GridSearchCV rates best, up to one test row per fold of 120.
    assert grid_scores.max() - grid_scores[0] > 0.05
    assert grid_scores[search.best_index_] >= grid_search.best_score_ - 1 / 120
    assert search.best_score_ >= grid_search.best_score_ - 1 / 120
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], grid_scores, atol=0.03)


@pytest.mark.parametrize("direction", ["increasing", "decreasing"])
def test_first_lam_of_the_path_is_the_cold_fit(grid_search, path_searches, direction):
    # Each fold's path starts with a cold fit, identical to GridSearchCV's fit of that lam.
    first = 0 if direction == "increasing" else len(LAMS) - 1
    search = path_searches[direction]
    for k in range(3):
        key = f"split{k}_test_score"
        assert search.cv_results_[key][first] == grid_search.cv_results_[key][first]


def test_cv_results_layout(problem, path_searches, grid_search):
    search = path_searches["increasing"]
    results = search.cv_results_
    expected = {key for key in grid_search.cv_results_ if "train" not in key}
    assert expected <= set(results)
    assert {"mean_n_epochs", "mean_orthogonality_gap"} <= set(results)
    np.testing.assert_array_equal(results["param_lam"], LAMS)
    assert results["params"] == [{"lam": lam} for lam in LAMS]
    splits = np.array([results[f"split{k}_test_score"] for k in range(3)])
    np.testing.assert_allclose(results["mean_test_score"], splits.mean(axis=0))
    np.testing.assert_allclose(results["std_test_score"], splits.std(axis=0))
    assert results["rank_test_score"][search.best_index_] == 1
    assert search.best_score_ == results["mean_test_score"].max()
    assert search.lam_ == LAMS[search.best_index_]
    assert search.n_splits_ == 3
    frame = pd.DataFrame(results)
    assert frame.shape[0] == len(LAMS)
    # The gap grows along the path (up to training noise) and lam = 0 stays orthogonal.
    gaps = results["mean_orthogonality_gap"]
    assert gaps[0] < 0.1 < gaps[2]


def test_grid_order_is_kept_and_ties_rank_like_grid_search(problem):
    X, Y = problem
    lams = [2.0, 0.0, 1e3, np.inf]
    search = LambdaOrthAlignerCV(lams, estimator=small_aligner(), cv=CV).fit(X, Y)
    np.testing.assert_array_equal(search.cv_results_["param_lam"], lams)
    # Nothing pulls W anywhere near N = 1000: lam=inf reuses the lam=1e3 fit (no epochs)
    # and ties with it; the first of the tied values in the grid wins.
    results = search.cv_results_
    assert results["mean_n_epochs"][3] == 0 and results["mean_n_epochs"][2] > 0
    assert results["mean_test_score"][3] == results["mean_test_score"][2]
    assert results["rank_test_score"][3] == results["rank_test_score"][2]
    # Ties rank as GridSearchCV ranks them: all share the best rank, the first listed
    # wins.  (This used to be checked only if lam=1e3 happened to rank first; it does not.)
    tied = dict(estimator=small_aligner(max_epochs=2), cv=2, scoring=lambda e, X, Y: 0.5)
    search = LambdaOrthAlignerCV(lams, **tied).fit(X, Y)
    grid = GridSearchCV(tied["estimator"], {"lam": lams}, cv=2, scoring=tied["scoring"])
    grid.fit(X, Y)
    np.testing.assert_array_equal(
        search.cv_results_["rank_test_score"], grid.cv_results_["rank_test_score"]
    )
    assert search.lam_ == grid.best_params_["lam"] == 2.0


def test_refit_is_grid_search_cold_refit(problem, path_searches):
    # The refit is GridSearchCV's: the estimator at lam_, fitted from scratch on all rows.
    X, Y = problem
    search = path_searches["increasing"]
    cold = small_aligner(lam=search.lam_).fit(X, Y)
    refit = search.best_estimator_
    assert refit.lam == search.lam_ and refit.get_params() == cold.get_params()
    np.testing.assert_array_equal(refit.W_, cold.W_)
    np.testing.assert_array_equal(refit.bias_, cold.bias_)
    assert refit.history_ == cold.history_
    np.testing.assert_array_equal(search.W_, refit.W_)
    np.testing.assert_array_equal(search.bias_, refit.bias_)
    assert search.orthogonality_gap_ == refit.orthogonality_gap_
    np.testing.assert_array_equal(search.transform(X), cold.transform(X))


@pytest.fixture
def runs(monkeypatch):
    """(lam, patience, start map, fitted map, (x/y scale, gap)) of every training run."""
    recorded = []
    original = path_module.train_map

    def train_map(settings, data, rng, *, lam=None, n_iter_no_change=None, start=None, **kw):
        fit = original(
            settings, data, rng, lam=lam, n_iter_no_change=n_iter_no_change, start=start, **kw
        )
        unit = (fit.x_scale / fit.y_scale, fit.orthogonality_gap)
        recorded.append((lam, n_iter_no_change, start, fit.start(), unit))
        return fit

    monkeypatch.setattr(path_module, "train_map", train_map)
    return recorded


@pytest.mark.parametrize("warm_patience", ["auto", 3])
def test_warm_fits_use_the_shorter_patience(problem, runs, warm_patience):
    X, Y = problem
    estimator = LambdaOrthAligner(max_epochs=4, batch_size=64, n_iter_no_change=7)
    search = LambdaOrthAlignerCV(
        [0.0, 0.5, 1.0], estimator=estimator, cv=2, warm_n_iter_no_change=warm_patience
    ).fit(X, Y)
    warm = 4 if warm_patience == "auto" else 3  # "auto": ceil(7 / 2)
    patience = [run[1] for run in runs]
    # Per fold: the cold first lam with the estimator's patience, then the warm ones (the
    # refit is a plain fit of the estimator).  The estimator itself is left untouched.
    assert patience == [7, warm, warm, 7, warm, warm]
    assert search.best_estimator_.n_iter_no_change == estimator.n_iter_no_change == 7


def test_increasing_path_starts_each_fit_on_the_secant(problem, runs):
    X, Y = problem
    lams = [0.0, 0.5, 1.0, 2.0, 4.0]
    estimator = LambdaOrthAligner(max_epochs=10, batch_size=64, lr=1e-2, random_state=0)
    LambdaOrthAlignerCV(lams, estimator=estimator, cv=2, refit=False).fit(X, Y)
    fold = runs[: len(lams)]
    assert [run[0] for run in fold] == lams and fold[0][2] is None
    # The second fit starts where the first ended; from the third on, the start is
    # W_k + beta (W_k - W_{k-1}) with beta = min(1, step ratio) / 2^j, inside N <= lam - 1
    # or no further out than W_k.
    np.testing.assert_array_equal(fold[1][2].W, fold[0][3].W)
    moved = 0
    for k in range(2, len(lams)):
        before, last, start = fold[k - 2][3], fold[k - 1][3], fold[k][2]
        step = last.W - before.W
        beta = np.sum((start.W - last.W) * step) / np.sum(step * step)
        np.testing.assert_allclose(start.W, last.W + beta * step, atol=1e-12)
        np.testing.assert_allclose(start.bias, last.bias + beta * (last.bias - before.bias))
        ratio = min(1.0, (lams[k] - lams[k - 1]) / (lams[k - 1] - lams[k - 2]))
        assert beta == 0 or np.log2(ratio / beta) == pytest.approx(round(np.log2(ratio / beta)))
        to_unit, last_gap = fold[k - 1][4]
        allowed = max(lams[k] - 1.0, last_gap)
        assert orthogonality_gap(start.W * to_unit) <= allowed + 1e-9
        moved += beta > 0
    assert moved >= 2


def test_decreasing_path_starts_each_fit_at_the_last_one(problem, runs):
    X, Y = problem
    lams = [4.0, 2.0, 1.0, 0.0]
    estimator = LambdaOrthAligner(max_epochs=5, batch_size=64, lr=1e-2, random_state=0)
    LambdaOrthAlignerCV(lams, estimator=estimator, cv=2, direction="decreasing").fit(X, Y)
    fold = runs[: len(lams)]
    for k in range(1, len(lams)):
        np.testing.assert_array_equal(fold[k][2].W, fold[k - 1][3].W)


def test_strict_reuses_the_first_fit_for_every_lam(problem):
    X, Y = problem
    search = LambdaOrthAlignerCV(
        [0.0, 1.0, np.inf], estimator=small_aligner(strict=True), cv=2
    ).fit(X, Y)
    results = search.cv_results_
    np.testing.assert_array_equal(results["mean_n_epochs"][1:], 0)
    assert len(set(results["mean_test_score"])) == 1
    assert search.lam_ == 0.0


def test_callable_scoring_sees_each_lam(problem):
    X, Y = problem
    seen = []

    def scoring(estimator, X_test, Y_test):
        seen.append(estimator.lam)
        return -estimator.orthogonality_gap_  # prefer the most orthogonal fit

    search = LambdaOrthAlignerCV(LAMS, estimator=small_aligner(), cv=2, scoring=scoring)
    search.fit(X, Y)
    assert seen == LAMS * 2
    assert search.lam_ == 0.0
    np.testing.assert_allclose(
        search.cv_results_["mean_test_score"], -search.cv_results_["mean_orthogonality_gap"]
    )


def test_string_scoring(problem):
    X, Y = problem
    params = dict(estimator=small_aligner(), cv=2)
    default = LambdaOrthAlignerCV([0.0, np.inf], **params).fit(X, Y)
    top1 = LambdaOrthAlignerCV([0.0, np.inf], scoring="top1", **params).fit(X, Y)
    np.testing.assert_allclose(
        top1.cv_results_["mean_test_score"], default.cv_results_["mean_test_score"]
    )
    with pytest.raises(ValueError, match="no_such_metric"):
        LambdaOrthAlignerCV([0.0], scoring="no_such_metric", **params).fit(X, Y)
    several = make_multi_retrieval_scorer(["top1", "mean_cosine"])
    with pytest.raises(TypeError, match="scoring must return one number, got dict"):
        LambdaOrthAlignerCV([0.0], scoring=several, **params).fit(X, Y)


def test_a_diverging_lam_scores_nan_and_the_path_goes_on(problem, monkeypatch):
    X, Y = problem
    original = path_module.train_map

    def fails_at_one(settings, data, rng, *, lam=None, **kwargs):
        # Diverges (as a too-large lr would) whenever lam == 1.
        if lam == 1.0:
            raise FloatingPointError("Training diverged (test double)")
        return original(settings, data, rng, lam=lam, **kwargs)

    monkeypatch.setattr(path_module, "train_map", fails_at_one)
    estimator = LambdaOrthAligner(max_epochs=5, random_state=0)
    with pytest.warns(FitFailedWarning, match="lam=1"):
        search = LambdaOrthAlignerCV([0.0, 1.0, 2.0], estimator=estimator, cv=2).fit(X, Y)
    scores = search.cv_results_["mean_test_score"]
    assert np.isnan(scores[1]) and np.all(np.isfinite(scores[[0, 2]]))
    assert search.cv_results_["rank_test_score"][1] == 3
    assert search.lam_ != 1.0
    with pytest.warns(FitFailedWarning), pytest.raises(ValueError, match="Every fit"):
        LambdaOrthAlignerCV([1.0], estimator=estimator, cv=2).fit(X, Y)


def test_labels_and_groups_are_passed_on(problem, monkeypatch):
    X, Y = problem
    labels = np.arange(X.shape[0]) % 4
    groups = np.arange(X.shape[0]) % 3
    seen = []  # the label codes each training set was prepared with
    original = path_module.prepare_fit_data

    def prepare_fit_data(settings, X, Y, codes, rng, **kwargs):
        seen.append(None if codes is None else np.asarray(codes).copy())
        return original(settings, X, Y, codes, rng, **kwargs)

    monkeypatch.setattr(path_module, "prepare_fit_data", prepare_fit_data)
    monkeypatch.setattr(lambda_orth_module, "prepare_fit_data", prepare_fit_data)  # the refit
    estimator = LambdaOrthAligner(max_epochs=3, batch_size=64, random_state=0)
    search = LambdaOrthAlignerCV([0.0, np.inf], estimator=estimator, cv=GroupKFold(3))
    search.fit(X, Y, labels=labels, groups=groups)
    assert search.n_splits_ == 3
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    # Each fold's training rows come with their own labels, the refit with all of them.
    splits = list(GroupKFold(3).split(X, Y, groups))
    assert len(seen) == 4
    for codes, (train, _) in zip(seen, splits, strict=False):
        np.testing.assert_array_equal(codes, labels[train])
    np.testing.assert_array_equal(seen[-1], labels)
    with pytest.raises(ValueError, match="labels must be 1-d with one entry per row"):
        search.fit(X, Y, labels=labels[:-1], groups=groups)


def test_default_grid_scales_with_the_dimension(problem):
    X, Y = problem
    search = LambdaOrthAlignerCV(estimator=small_aligner(max_epochs=2), cv=2).fit(X, Y[:, :4])
    lams = search.lams_
    assert lams[0] == 0.0 and np.isinf(lams[-1])
    np.testing.assert_allclose(lams[4], 0.5 * np.sqrt(4))  # LambdaOrthAligner's "auto"
    assert np.all(np.diff(lams) > 0)


def test_refit_false_has_no_map(problem):
    X, Y = problem
    search = LambdaOrthAlignerCV([0.0, 1.0], estimator=small_aligner(), cv=2, refit=False)
    search.fit(X, Y)
    assert search.lam_ in (0.0, 1.0)
    assert not hasattr(search, "best_estimator_") and not hasattr(search, "W_")
    with pytest.raises(NotFittedError, match="refit=False"):
        search.transform(X)


@pytest.mark.parametrize(
    "params, error, match",
    [
        ({"lams": []}, ValueError, "non-empty"),
        ({"lams": [[0.0, 1.0]]}, ValueError, "1-d"),
        ({"lams": [1.0, -1.0]}, ValueError, r"\[0, inf\]"),
        ({"lams": [1.0, np.nan]}, ValueError, r"\[0, inf\]"),
        ({"lams": [1.0, 2.0, 1.0]}, ValueError, "repeated"),
        ({"lams": ["a", "b"]}, TypeError, "array of numbers"),
        ({"lams": "0 1"}, ValueError, "'lams' parameter"),
        ({"estimator": OrthogonalProcrustesAligner()}, ValueError, "'estimator' parameter"),
        ({"direction": "up"}, ValueError, "'direction' parameter"),
        ({"warm_n_iter_no_change": 0}, ValueError, "'warm_n_iter_no_change' parameter"),
        ({"warm_n_iter_no_change": "half"}, ValueError, "'warm_n_iter_no_change' parameter"),
        ({"cv": "five"}, ValueError, "'cv' parameter"),
        ({"estimator": LambdaOrthAligner(lr=-1.0)}, ValueError, "'lr' parameter"),
    ],
)
def test_bad_params(problem, params, error, match):
    X, Y = problem
    with pytest.raises(error, match=match):
        LambdaOrthAlignerCV(**params).fit(X[:40], Y[:40])


def test_y_alias_and_mismatched_rows(problem):
    X, Y = problem
    params = dict(lams=[0.0], estimator=small_aligner(max_epochs=2), cv=2)
    a = LambdaOrthAlignerCV(**params).fit(X, Y)
    b = LambdaOrthAlignerCV(**params).fit(X, y=Y)
    np.testing.assert_array_equal(a.W_, b.W_)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        LambdaOrthAlignerCV(**params).fit(X, Y[:-1])


def test_label_scoring_gets_the_held_out_labels_like_grid_search(problem):
    # scoring="cmc_top1" used to be called without labels and failed on every fit; the
    # held-out rows' labels now go to it, as GridSearchCV's metadata routing sends them.
    from sklearn import config_context

    from sklearn_compat.metrics import make_retrieval_scorer

    X, Y = problem
    labels = np.arange(X.shape[0]) % 5
    search = LambdaOrthAlignerCV(
        [0.0, np.inf], estimator=small_aligner(), cv=CV, scoring="cmc_top1"
    ).fit(X, Y, labels=labels)
    with config_context(enable_metadata_routing=True):
        grid = GridSearchCV(
            small_aligner().set_fit_request(labels=True),
            {"lam": [0.0]},
            cv=CV,
            scoring=make_retrieval_scorer("cmc_top1"),
        ).fit(X, Y, labels=labels)
    for k in range(3):
        key = f"split{k}_test_score"
        assert search.cv_results_[key][0] == grid.cv_results_[key][0]
    with pytest.raises(ValueError, match="scoring='map' needs the class labels"):
        LambdaOrthAlignerCV([0.0], estimator=small_aligner(), cv=2, scoring="map").fit(X, Y)


def test_inside_a_pipeline_with_routed_labels(problem):
    from sklearn import config_context
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, Y = problem
    labels = np.arange(X.shape[0]) % 4
    params = dict(lams=[0.0, np.inf], estimator=small_aligner(max_epochs=3), cv=2)
    with config_context(enable_metadata_routing=True):
        pipe = make_pipeline(
            StandardScaler(), LambdaOrthAlignerCV(**params).set_fit_request(labels=True)
        ).fit(X, Y, labels=labels)
    direct = LambdaOrthAlignerCV(**params).fit(StandardScaler().fit_transform(X), Y, labels=labels)
    np.testing.assert_array_equal(pipe[-1].W_, direct.W_)
    assert pipe.score(X, Y) == direct.score(StandardScaler().fit_transform(X), Y)


def test_transform_target_only_with_a_forward_adapter(problem):
    X, Y = problem
    params = dict(lams=[0.0, np.inf], cv=2)
    plain = LambdaOrthAlignerCV(estimator=small_aligner(max_epochs=2), **params).fit(X, Y)
    assert not hasattr(plain, "transform_target")
    both = LambdaOrthAlignerCV(
        estimator=small_aligner(max_epochs=2, bidirectional=True), **params
    ).fit(X, Y)
    np.testing.assert_array_equal(
        both.transform_target(Y), both.best_estimator_.transform_target(Y)
    )


def test_tensor_grid_saves_with_skops(problem, tmp_path):
    torch = pytest.importorskip("torch")
    sio = pytest.importorskip("skops.io")
    X, Y = problem
    search = LambdaOrthAlignerCV(
        torch.tensor([0.0, float("inf")]), estimator=small_aligner(max_epochs=2), cv=2
    ).fit(X, Y)
    path = tmp_path / "search.skops"
    sio.dump(search, path)  # used to fail: skops cannot save a tensor
    names = sorted(
        f"sklearn_compat.{m}"
        for m in ("lambda_orth.LambdaOrthAligner", "lambda_orth_cv.LambdaOrthAlignerCV")
    )
    assert sio.get_untrusted_types(file=path) == names
    loaded = sio.load(path, trusted=names)
    np.testing.assert_array_equal(loaded.transform(X), search.transform(X))
    np.testing.assert_array_equal(loaded.lams, [0.0, np.inf])


@pytest.mark.parametrize("lams", [[True, 2.0], np.array([True, False])])
def test_boolean_lams_are_refused(lams):
    from sklearn_compat import LambdaOrthAlignerCV

    X = np.random.default_rng(0).normal(size=(40, 3))
    with pytest.raises(TypeError, match="lams must be numbers, not booleans"):
        LambdaOrthAlignerCV(lams=lams, cv=2).fit(X, X)


def test_stop_at_bound_trains_less_and_still_picks_well(problem, grid_search):
    X, Y = problem
    # As in GridSearchCV's fits, 240 training rows: early stopping watches the training
    # loss, read here over the minibatches since the last reading.
    fast = LambdaOrthAlignerCV(
        LAMS, estimator=small_aligner(), cv=CV, stop_at_bound=True, warm_n_iter_no_change=2
    ).fit(X, Y)
    plain = LambdaOrthAlignerCV(
        LAMS, estimator=small_aligner(), cv=CV, warm_n_iter_no_change=2
    ).fit(X, Y)
    assert fast.cv_results_["mean_n_epochs"].sum() < plain.cv_results_["mean_n_epochs"].sum()
    grid_scores = grid_search.cv_results_["mean_test_score"]
    assert grid_scores[fast.best_index_] >= grid_search.best_score_ - 1 / 120
    # The fast search's refit reads its held-out loss within epochs too (more history
    # than epochs); the default search refits GridSearchCV's cold fit.
    assert len(fast.best_estimator_.history_["loss"]) > fast.best_estimator_.n_epochs_
    cold = small_aligner(lam=plain.lam_).fit(X, Y)
    np.testing.assert_array_equal(plain.best_estimator_.W_, cold.W_)
    with pytest.raises(ValueError, match="'stop_at_bound' parameter"):
        LambdaOrthAlignerCV(LAMS, stop_at_bound="yes").fit(X, Y)


def _digits_pair():
    """Two "models" of sklearn's handwritten digits: fixed projections of the pixels, the
    new one through a tanh and off the origin (so that the bias is a real choice)."""
    from sklearn.datasets import load_digits

    pixels = load_digits().data
    pixels = (pixels - pixels.mean(0)) / (pixels.std(0) + 1e-9)
    rng = np.random.default_rng(0)
    X = np.tanh(pixels @ rng.normal(size=(64, 16)) / 8) + 0.3
    Y = pixels @ rng.normal(size=(64, 16)) / 8
    test = np.arange(len(pixels)) % 4 == 0
    return X[~test].astype(np.float32), Y[~test], X[test].astype(np.float32), Y[test]


def test_intercept_choice_reads_the_rows_not_lam():
    # GridSearchCV fits a fresh LambdaOrthAligner at every lam: each must decide
    # fit_intercept="auto" as the search's path does for the same rows.
    X, Y, _, _ = _digits_pair()
    fits = [LambdaOrthAligner(lam=lam, max_epochs=1, random_state=0).fit(X, Y) for lam in LAMS]
    assert len({(f.center_, tuple(f.auto_scores_.items())) for f in fits}) == 1
    path = lambda_orth_path(X, Y, LAMS, estimator=LambdaOrthAligner(max_epochs=1, random_state=0))
    assert (path.center, path.auto_scores) == (fits[0].center_, fits[0].auto_scores_)


@pytest.mark.parametrize("stop_at_bound", [False, True])
def test_cv_fits_what_grid_search_fits(stop_at_bound):
    X, Y, X_test, Y_test = _digits_pair()
    base = LambdaOrthAligner(max_epochs=3, random_state=0)
    grid = GridSearchCV(base, {"lam": LAMS}, cv=3).fit(X, Y)
    # fallback=False: GridSearchCV's refit, without the default's check of the refit
    # against its Procrustes start.
    search = LambdaOrthAlignerCV(
        lams=LAMS, cv=3, estimator=base, stop_at_bound=stop_at_bound, fallback=False
    ).fit(X, Y)
    # The same intercept choice as the plain estimator on the same rows, held by the
    # refitted map as GridSearchCV's best_estimator_ holds it.
    assert search.best_estimator_.center_ == grid.best_estimator_.center_
    assert search.best_estimator_.auto_scores_ == grid.best_estimator_.auto_scores_
    # Where both pick the same lam, the default refit is the same cold fit: the same map.
    if search.lam_ == grid.best_params_["lam"] and not stop_at_bound:
        np.testing.assert_array_equal(search.W_, grid.best_estimator_.W_)
    assert search.score(X_test, Y_test) >= grid.score(X_test, Y_test) - 0.01


@pytest.mark.parametrize("stop_at_bound", [False, True])
def test_cv_fits_what_grid_search_fits_on_a_real_pair(mnist_features, stop_at_bound):
    # Two independently trained networks' features of the same MNIST digits (a sample, so
    # that GridSearchCV runs in seconds): the default search returns GridSearchCV's map
    # wherever it picks GridSearchCV's lam, and either search maps as well within 0.01
    # top-1.
    from sklearn_compat.metrics import paired_topk_accuracy

    unit = [f / np.linalg.norm(f, axis=1, keepdims=True) for f in
            (mnist_features["cnn_s0"], mnist_features["mlp_s0"])]  # fmt: skip
    train, test = mnist_features["train_idx"][:900], mnist_features["test_idx"]
    X, Y = unit[0][train], unit[1][train]
    lams = [0.0, 8.0, np.inf]
    base = LambdaOrthAligner(random_state=0, max_epochs=40)
    grid = GridSearchCV(base, {"lam": lams}, cv=3).fit(X, Y)
    search = LambdaOrthAlignerCV(
        lams=lams, cv=3, estimator=base, stop_at_bound=stop_at_bound, fallback=False
    )
    search.fit(X, Y)
    top1 = [
        paired_topk_accuracy(m.transform(unit[0][test]), unit[1][test]) for m in (grid, search)
    ]
    if search.lam_ == grid.best_params_["lam"] and not stop_at_bound:
        np.testing.assert_array_equal(search.W_, grid.best_estimator_.W_)
    assert abs(top1[1] - top1[0]) <= 0.01, (search.lam_, grid.best_params_, top1)


def test_stop_at_bound_shortens_the_auto_warm_patience(problem, runs):
    # Walking upwards with stop_at_bound, "auto" waits 2 epochs at each warm fit; walking
    # downwards (where stop_at_bound does not apply) it is half the estimator's patience.
    X, Y = problem
    estimator = LambdaOrthAligner(max_epochs=4, batch_size=64, n_iter_no_change=7)
    for direction, warm in (("increasing", 2), ("decreasing", 4)):
        runs.clear()
        LambdaOrthAlignerCV([0.0, 0.5, 1.0], estimator=estimator, cv=2, refit=False,
                            stop_at_bound=True, direction=direction).fit(X, Y)  # fmt: skip
        assert [run[1] for run in runs] == [7, warm, warm] * 2, direction

"""lambda_orth_path: the warm-started lam path as a public function."""

import numpy as np
import pytest
from scipy.stats import ortho_group
from sklearn.exceptions import FitFailedWarning

from sklearn_compat import LambdaOrthAligner, OrthogonalProcrustesAligner, lambda_orth_path
from sklearn_compat._lambda import path as path_module
from sklearn_compat._lambda.path import aligner_at
from sklearn_compat.lambda_orth_cv import lambda_orth_path as from_cv_module


def small_aligner(**params):
    defaults = dict(max_epochs=15, batch_size=64, lr=1e-2, random_state=0)
    return LambdaOrthAligner(**{**defaults, **params})


@pytest.fixture(scope="module")
def problem():
    """Y = X A + noise with A stretched: the best map is clearly not orthogonal."""
    rng = np.random.default_rng(0)
    n, d = 300, 6
    X = rng.normal(size=(n, d))
    stretch = np.diag(np.linspace(0.4, 1.6, d))
    A = ortho_group.rvs(d, random_state=0) @ stretch @ ortho_group.rvs(d, random_state=1)
    return X, X @ A + 0.3 * rng.normal(size=(n, d))


def test_public_names():
    assert from_cv_module is lambda_orth_path


@pytest.mark.parametrize("direction", ["increasing", "decreasing"])
def test_first_lam_is_the_cold_fit_and_the_rest_follow(problem, direction):
    X, Y = problem
    lams = [0.0, 1.0, np.inf]
    path = lambda_orth_path(X, Y, lams, estimator=small_aligner(), direction=direction)
    first = 0 if direction == "increasing" else 2
    cold = small_aligner(lam=lams[first]).fit(X, Y)
    np.testing.assert_array_equal(path.coefs[first], cold.W_)
    np.testing.assert_array_equal(path.intercepts[first], cold.bias_)
    assert path.n_epochs[first] == cold.n_epochs_
    assert path.orthogonality_gaps[first] == cold.orthogonality_gap_
    assert (path.x_scale, path.y_scale) == (cold.x_scale_, cold.y_scale_)
    assert path.coefs.shape == (3, 6, 6) and path.intercepts.shape == (3, 6)
    np.testing.assert_array_equal(path.lams, lams)
    # Orthogonal at lam = 0, far from it without the regulariser, and the unregularised
    # end fits the training rows better.
    assert path.orthogonality_gaps[0] < 0.1 < 1.0 < path.orthogonality_gaps[2]
    mse = [np.mean((X @ W + b - Y) ** 2) for W, b in zip(path.coefs, path.intercepts, strict=True)]
    assert mse[2] < mse[0]
    assert path.forward_coefs is None and not path.reused.any()
    assert all(error is None for error in path.errors)


def test_aligner_at_transforms_with_the_path_map(problem):
    X, Y = problem
    path = lambda_orth_path(X, Y, [0.0, 2.0], estimator=small_aligner())
    aligner = aligner_at(path, 1, small_aligner())
    assert aligner.lam == 2.0 and aligner.n_epochs_ == path.n_epochs[1]
    np.testing.assert_allclose(aligner.transform(X), X @ path.coefs[1] + path.intercepts[1])


def test_coef_init_starts_the_first_fit(problem):
    X, Y = problem
    rng = np.random.default_rng(1)
    W0, b0 = rng.normal(size=(6, 6)), rng.normal(size=6)
    # One epoch at a negligible lr leaves the map where it started.
    # The bias is fitted (a centred pair: "auto" may leave it out, and a start's bias then
    # counts for nothing).
    frozen = small_aligner(max_epochs=1, lr=1e-12, init="identity", fit_intercept=True)
    path = lambda_orth_path(X, Y, [0.0], estimator=frozen, coef_init=(W0, b0))
    np.testing.assert_allclose(path.coefs[0], W0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(path.intercepts[0], b0, rtol=1e-5, atol=1e-6)
    cold = lambda_orth_path(X, Y, [0.0], estimator=frozen)
    np.testing.assert_allclose(
        cold.coefs[0], np.eye(6) * (path.y_scale / path.x_scale), rtol=1e-5, atol=1e-6
    )


def test_strict_reuses_the_first_fit(problem):
    X, Y = problem
    path = lambda_orth_path(X, Y, [0.0, 1.0, np.inf], estimator=small_aligner(strict=True))
    np.testing.assert_array_equal(path.reused, [False, True, True])
    np.testing.assert_array_equal(path.n_epochs[1:], 0)
    np.testing.assert_array_equal(path.coefs[2], path.coefs[0])


def test_a_diverging_fit_raises_or_is_nan(problem, monkeypatch):
    X, Y = problem
    original = path_module.train_map

    def fails_at_one(settings, data, rng, *, lam=None, **kwargs):
        if lam == 1.0:
            raise FloatingPointError("Training diverged (test double)")
        return original(settings, data, rng, lam=lam, **kwargs)

    monkeypatch.setattr(path_module, "train_map", fails_at_one)
    with pytest.raises(FloatingPointError, match="test double"):
        lambda_orth_path(X, Y, [0.0, 1.0], estimator=small_aligner())
    with pytest.warns(FitFailedWarning, match="lam=1"):
        path = lambda_orth_path(
            X, Y, [0.0, 1.0, 2.0], estimator=small_aligner(), error_score=np.nan
        )
    assert np.isnan(path.coefs[1]).all() and np.isnan(path.orthogonality_gaps[1])
    assert "test double" in path.errors[1]
    assert np.isfinite(path.coefs[[0, 2]]).all()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"estimator": OrthogonalProcrustesAligner()}, TypeError, "must be a LambdaOrthAligner"),
        ({"lams": [1.0, 1.0]}, ValueError, "repeated"),
        ({"lams": [-1.0]}, ValueError, r"\[0, inf\]"),
        ({"direction": "up"}, ValueError, "'direction' parameter"),
        ({"coef_init": (1, 2, 3, 4)}, ValueError, "coef_init must be"),
        ({"estimator": LambdaOrthAligner(lr=-1.0)}, ValueError, "'lr' parameter"),
        ({"labels": [0, 1]}, ValueError, "labels has 2 entries"),
    ],
)
def test_bad_input(problem, kwargs, error, match):
    X, Y = problem
    kwargs = {"lams": [0.0], **kwargs}
    with pytest.raises(error, match=match):
        lambda_orth_path(X[:40], Y[:40], **kwargs)


def test_warm_tol_shortens_only_the_warm_fits(problem):
    X, Y = problem
    lams = [0.0, 0.5, 1.0, 2.0]
    estimator = small_aligner(max_epochs=40, n_iter_no_change=4)
    plain = lambda_orth_path(X, Y, lams, estimator=estimator, warm_n_iter_no_change=2)
    loose = lambda_orth_path(
        X, Y, lams, estimator=estimator, warm_n_iter_no_change=2, warm_tol=0.5
    )
    # The cold first fit is untouched; a warm fit whose loss cannot halve in one epoch
    # stops after its first epoch plus the patience.
    np.testing.assert_array_equal(loose.coefs[0], plain.coefs[0])
    np.testing.assert_array_equal(loose.n_epochs[1:], 3)
    assert plain.n_epochs[1:].sum() > loose.n_epochs[1:].sum()
    with pytest.raises(ValueError, match="'warm_tol' parameter"):
        lambda_orth_path(X, Y, lams, estimator=estimator, warm_tol=1.0)


def test_stop_at_bound_reads_four_times_per_epoch_and_stops_on_the_wall(problem):
    X, Y = problem
    lams = [0.0, 1.0, np.inf]
    estimator = small_aligner(max_epochs=30, n_iter_no_change=6, early_stopping=True)
    plain = lambda_orth_path(X, Y, lams, estimator=estimator)
    fast = lambda_orth_path(X, Y, lams, estimator=estimator, stop_at_bound=True)
    # 270 training rows in batches of 64: 5 steps per epoch, read after steps 2, 4 and 5.
    for k in range(3):
        assert len(plain.histories[k]["valid_loss"]) == plain.n_epochs[k]
        readings = len(fast.histories[k]["valid_loss"])
        assert 3 * (fast.n_epochs[k] - 1) < readings <= 3 * fast.n_epochs[k]
    # lam = 0 and 1 end on their wall (N within [lam - 1, lam + 0.5]) and stop two readings
    # after their best one; lam = inf has no wall and keeps the path's warm patience.
    for k in (0, 1):
        gaps = fast.histories[k]["orthogonality_gap"]
        assert lams[k] - 1 <= gaps[-1] <= lams[k] + 0.5
        best = int(np.argmin(fast.histories[k]["valid_loss"]))
        assert len(gaps) - 1 - best == path_module.BOUND_PATIENCE
    losses = fast.histories[2]["valid_loss"]
    waited = len(losses) - 1 - int(np.argmin(losses))
    # (the warm patience that "auto" gives with stop_at_bound: 2 epochs of 3 readings)
    assert waited == 3 * path_module.warm_patience("auto", 6, True) == 6 or fast.n_epochs[2] == 30
    assert fast.n_epochs[:2].sum() < plain.n_epochs[:2].sum()


def test_stop_at_bound_restores_the_best_reading(problem):
    X, Y = problem
    fast = lambda_orth_path(
        X, Y, [0.5], estimator=small_aligner(max_epochs=8, early_stopping=True), stop_at_bound=True
    )
    # The map kept is the one of the lowest held-out loss read, not the last one trained:
    # its gap is the one recorded at that reading.
    history = fast.histories[0]
    best = int(np.argmin(history["valid_loss"]))
    assert fast.orthogonality_gaps[0] == pytest.approx(history["orthogonality_gap"][best])


def test_stop_at_bound_does_not_apply_walking_downwards(problem):
    X, Y = problem
    estimator = small_aligner(max_epochs=10)
    plain = lambda_orth_path(X, Y, [0.0, 2.0], estimator=estimator, direction="decreasing")
    asked = lambda_orth_path(
        X, Y, [0.0, 2.0], estimator=estimator, direction="decreasing", stop_at_bound=True
    )
    np.testing.assert_array_equal(asked.coefs, plain.coefs)
    np.testing.assert_array_equal(asked.n_epochs, plain.n_epochs)


@pytest.mark.parametrize(
    ("gap", "lam", "sharpness", "binds"),
    [
        (0.0, 0.0, 10.0, True),
        (0.5, 0.0, 10.0, True),
        (0.51, 0.0, 10.0, False),  # beyond the wall: the penalty still pulls W in
        (2.99, 4.0, 10.0, False),  # inside: the penalty no longer acts
        (3.0, 4.0, 10.0, True),
        (3.4, 4.0, 10.0, True),  # where a fit pulled outwards settles (lam - 6 / s)
        (0.0, 4.0, 1.0, True),  # a gentler sigmoid has a wider wall
        (9.5, 4.0, 1.0, False),
        (1.0, np.inf, 10.0, False),
    ],
)
def test_constraint_binds_on_the_sigmoid_rise(gap, lam, sharpness, binds):
    from sklearn_compat._lambda.training import constraint_binds

    assert constraint_binds(gap, lam, sharpness) is binds

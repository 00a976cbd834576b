"""The "auto" step of the stronger aligners: kept where it wins on held-out pairs, left
out (with one StepDeclinedWarning) where it loses to the orthogonal map it builds on."""

import warnings

import numpy as np
import pytest
from scipy.stats import ortho_group

from sklearn_compat import (
    LambdaOrthAligner,
    LambdaOrthAlignerCV,
    OrthogonalProcrustesAligner,
    RCSLSAligner,
    RefinedProcrustesAligner,
    ResidualAdapterAligner,
    WhitenedProcrustesAligner,
)
from sklearn_compat._core.holdout import paired_gain
from sklearn_compat.exceptions import StepDeclinedWarning


def noisy_directions(seed, n=300, k=8, d_x=40, d_y=48):
    """Eight shared directions; X also has 32 weak directions that nothing in Y follows:
    whitening gives them unit weight, the orthogonal map leaves them small."""
    rng = np.random.default_rng(seed)
    S = rng.normal(size=(n, k))
    X = np.hstack([S + 0.5 * rng.normal(size=(n, k)), 0.05 * rng.normal(size=(n, d_x - k))])
    X = X @ ortho_group.rvs(d_x, random_state=seed)
    Y = S @ ortho_group.rvs(d_y, random_state=seed + 1)[:k] + 0.5 * rng.normal(size=(n, d_y))
    return X, Y


def stretched(seed, n=400, d_x=16, d_y=24):
    """Y a noisy non-orthogonal linear image of an anisotropic X: whitening recovers it."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d_x)) * np.logspace(0, -1.5, d_x)
    Y = X @ rng.normal(size=(d_x, d_y))
    return X, Y + 0.3 * Y.std() * rng.normal(size=Y.shape)


def test_paired_gain_is_the_mean_and_se_of_per_row_differences():
    hits = np.array([1, 1, 0, 1, 0, 1], bool)
    base = np.array([1, 0, 0, 1, 1, 0], bool)
    d = hits.astype(float) - base
    gain, se = paired_gain(hits, base)
    assert gain == pytest.approx(d.mean())
    assert se == pytest.approx(d.std(ddof=1) / np.sqrt(6))


@pytest.mark.parametrize("seed", [0, 1])
def test_whitening_that_loses_is_left_out_with_one_warning(seed):
    X, Y = noisy_directions(seed, n=800)
    (X, X_test), (Y, Y_test) = np.split(X, [300]), np.split(Y, [300])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        aligner = WhitenedProcrustesAligner().fit(X, Y)
    declined = [w for w in caught if issubclass(w.category, StepDeclinedWarning)]
    assert len(declined) == 1 and "whiten=True" in str(declined[0].message)
    assert aligner.whiten_ is False
    choice = aligner.step_choice_
    assert choice["kept"] is False and choice["gain"] < 0 and choice["n_rows"] == 300
    # The fitted map is the unwhitened one, and retrieves held-out rows at least as well.
    forced = WhitenedProcrustesAligner(whiten=True, random_state=0).fit(X, Y)
    assert aligner.score(X_test, Y_test) > forced.score(X_test, Y_test)


@pytest.mark.parametrize("seed", [0, 1])
def test_whitening_that_wins_is_kept_silently(seed):
    X, Y = stretched(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StepDeclinedWarning)
        aligner = WhitenedProcrustesAligner().fit(X, Y)
    assert aligner.whiten_ is True
    choice = aligner.step_choice_
    assert choice["kept"] is True and choice["gain"] > choice["se"]


def test_explicit_whitening_means_what_it_says():
    X, Y = noisy_directions(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StepDeclinedWarning)
        on = WhitenedProcrustesAligner(whiten=True, dewhiten="target").fit(X, Y)
        off = WhitenedProcrustesAligner(whiten=False).fit(X, Y)
    assert on.whiten_ is True and on.dewhiten_ == "target" and on.step_choice_ is None
    assert off.whiten_ is False and off.step_choice_ is None


def rotated_with_unpaired(seed, n=600, d=12, noise=0.3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Y = X @ ortho_group.rvs(d, random_state=seed) + noise * rng.normal(size=(n, d))
    return X, Y


def test_refinement_never_pairs_a_row_whose_partner_is_given():
    X, Y = rotated_with_unpaired(0, noise=1.0)
    aligner = RefinedProcrustesAligner(n_refinements=3).fit(
        X[:200], Y[:200], X_unpaired=X[200:], Y_unpaired=Y[200:][::-1]
    )
    assert len(aligner.induced_pairs_) and (aligner.induced_pairs_ >= 200).all()


def test_refinement_without_unpaired_rows_runs_no_round():
    X, Y = rotated_with_unpaired(0)
    aligner = RefinedProcrustesAligner().fit(X, Y)
    assert aligner.n_refinements_ == 0 and aligner.step_choice_["kept"] is None


def test_refinement_rounds_that_help_are_kept():
    # 100 pairs of a noisy rotation in 80 dimensions and 900 unpaired rows per side:
    # the rounds add the unpaired rows' pairs, which the held-out slice rewards.
    X, Y = rotated_with_unpaired(1, n=1000, d=80, noise=1.2)
    aligner = RefinedProcrustesAligner(OrthogonalProcrustesAligner()).fit(
        X[:100], Y[:100], X_unpaired=X[100:], Y_unpaired=Y[100:][::-1]
    )
    assert aligner.step_choice_["kept"] is True and aligner.n_refinements_ > 0
    plain = OrthogonalProcrustesAligner().fit(X[:100], Y[:100])
    assert aligner.score(X[100:], Y[100:]) > plain.score(X[100:], Y[100:]) + 0.2


def rotation(seed, n=600, d=16, noise=0.5):
    """A noisy rotation: nothing for training to add to the Procrustes start."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ ortho_group.rvs(d, random_state=seed) + noise * rng.normal(size=(n, d))


def stretch(seed, n=600, d=16, noise=0.5):
    """A noisy map that stretches one direction 100 times more than another."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Y = X @ (ortho_group.rvs(d, random_state=seed) * np.logspace(1, -1, d))
    return X, Y + noise * Y.std() * rng.normal(size=Y.shape)


TRAINED = {
    "lambda": lambda: LambdaOrthAligner(max_epochs=30, random_state=0),
    "residual": lambda: ResidualAdapterAligner(hidden="auto", max_epochs=30, random_state=0),
    "rcsls": lambda: RCSLSAligner(random_state=0),
}


@pytest.mark.parametrize("name", list(TRAINED))
def test_trained_step_that_wins_is_kept(name):
    X, Y = stretch(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StepDeclinedWarning)
        aligner = TRAINED[name]().fit(X, Y)
    choice = aligner.step_choice_
    assert choice["kept"] is True and choice["gain"] > choice["se"]
    assert choice["n_rows"] == 120  # a fifth of the rows, held out from a second training


@pytest.mark.parametrize("name", list(TRAINED))
def test_trained_step_that_does_not_win_falls_back_to_its_procrustes_start(name):
    X, Y = rotation(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        aligner = TRAINED[name]().fit(X, Y)
    assert aligner.step_choice_["kept"] is False
    assert sum(issubclass(w.category, StepDeclinedWarning) for w in caught) <= 1
    W = aligner.W_ / np.linalg.norm(aligner.W_, 2)
    # Orthogonal up to scale (RCSLS trains in float32).
    np.testing.assert_allclose(W @ W.T, np.eye(16), atol=1e-6)
    if name == "lambda":
        assert aligner.lam_ == 0.0
    if name == "residual":
        assert aligner.mlp_weights_ == []
    if name == "rcsls":
        assert aligner.n_iter_ == 0


def test_explicit_training_settings_mean_what_they_say():
    X, Y = rotation(0)
    for aligner in (
        LambdaOrthAligner(lam=2.0, max_epochs=3, random_state=0),
        ResidualAdapterAligner(hidden=8, max_epochs=3, random_state=0),
        RCSLSAligner(max_iter=4, random_state=0),
    ):
        aligner.fit(X, Y)
        assert aligner.step_choice_ is None
    assert len(aligner.loss_curve_) > 1


def test_cv_refit_is_judged_against_its_procrustes_start():
    X, Y = rotation(0)
    base = LambdaOrthAligner(max_epochs=5, random_state=0)
    search = LambdaOrthAlignerCV(lams=[0.0, np.inf], cv=2, estimator=base).fit(X, Y)
    assert search.step_choice_["n_rows"] == 120
    if not search.step_choice_["kept"]:
        assert search.best_estimator_.lam_ == 0.0
    plain = LambdaOrthAlignerCV(lams=[0.0, np.inf], cv=2, estimator=base, fallback=False)
    assert plain.fit(X, Y).step_choice_ is None


def test_inspect_shows_the_step_choice(tmp_path, capsys):
    from sklearn_compat.io import model_fingerprint

    X, Y = noisy_directions(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StepDeclinedWarning)
        aligner = WhitenedProcrustesAligner().fit(X, Y)
    chosen = model_fingerprint(aligner)["chosen"]
    assert chosen["whiten_"] is False and chosen["dewhiten_"] in ("target", "source")
    step = chosen["step_choice_"]
    assert step["step"] == "whitening" and step["kept"] is False and step["n_rows"] == 300
    assert isinstance(step["gain"], float) and isinstance(step["se"], float)


def test_whitening_is_kept_where_it_wins_on_real_features(mnist_features):
    # Two independently trained networks' features of the same digits: far from a
    # rotation apart, where whitening gains about 0.1 of held-out top-1.
    features = (mnist_features["cnn_s0"], mnist_features["mlp_s0"])
    unit = [f / np.linalg.norm(f, axis=1, keepdims=True) for f in map(np.float64, features)]
    train, test = mnist_features["train_idx"][:1000], mnist_features["test_idx"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", StepDeclinedWarning)
        aligner = WhitenedProcrustesAligner().fit(unit[0][train], unit[1][train])
    assert aligner.whiten_ is True and aligner.step_choice_["gain"] > 0.05
    plain = OrthogonalProcrustesAligner().fit(unit[0][train], unit[1][train])
    assert aligner.score(unit[0][test], unit[1][test]) > plain.score(unit[0][test], unit[1][test])

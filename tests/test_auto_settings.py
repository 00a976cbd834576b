"""Settings chosen from the data at fit (issue 22): center="auto", scale="auto" and friends."""

import warnings

import numpy as np
import pytest
from scipy.stats import ortho_group

from sklearn_compat import (
    AffineAligner,
    AlignedNeighbors,
    LambdaOrthAligner,
    OrthogonalProcrustesAligner,
    RCSLSAligner,
    RefinedProcrustesAligner,
    ResidualAdapterAligner,
    WhitenedProcrustesAligner,
)
from sklearn_compat._core.holdout import holdout_folds, paired_top1, top1_of_similarities
from sklearn_compat._core.query_policy import query_comparison_form
from sklearn_compat._core.refit_choice import TRAINED_MARGIN
from sklearn_compat.exceptions import AutoSettingWarning
from sklearn_compat.io import model_fingerprint


def _anisotropic_pair(rng, n=600, d=12, offset=4.0, noise=0.3):
    """Y = rotated X plus noise, both sitting far from the origin (one common direction):
    an uncentred map spends itself on the two means, a centred one retrieves."""
    Z = rng.normal(size=(n, d))
    Q = ortho_group.rvs(d, random_state=1)
    X = Z + offset
    Y = Z @ Q + noise * rng.normal(size=(n, d)) - offset * np.ones(d) @ Q.T
    return X, Y


def _offset_is_the_signal(rng, n=600, d=12):
    """Rows whose common offset is shared by both spaces through the same rotation, with a
    per-row magnitude: centring removes part of what identifies each row."""
    Q = ortho_group.rvs(d, random_state=2)
    direction = np.zeros(d)
    direction[0] = 1.0
    X = rng.normal(size=(n, d)) * 0.2 + rng.uniform(1.0, 6.0, size=(n, 1)) * direction
    Y = X @ Q + 0.05 * rng.normal(size=(n, d))
    return X, Y


def test_procrustes_auto_centres_an_anisotropic_pair(rng):
    X, Y = _anisotropic_pair(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clear choice: no warning of any kind
        auto = OrthogonalProcrustesAligner().fit(X, Y)
    assert auto.center_ is True or auto.center_ == np.True_
    assert max(auto.auto_scores_, key=auto.auto_scores_.get).startswith("center=True")
    explicit = OrthogonalProcrustesAligner(center=True, scale=auto.scale_mode_).fit(X, Y)
    # The chosen setting refitted on all rows: the very map of the explicit setting.
    np.testing.assert_allclose(auto.W_, explicit.W_, atol=1e-12)
    assert auto.scale_ == pytest.approx(explicit.scale_, rel=1e-12)
    uncentred = OrthogonalProcrustesAligner(center=False, scale=False).fit(X, Y)
    assert auto.score(X, Y) > uncentred.score(X, Y) + 0.1  # 1.0 against 0.82


def test_procrustes_auto_keeps_the_offset_when_it_carries_the_rows(rng):
    X, Y = _offset_is_the_signal(rng)
    auto = OrthogonalProcrustesAligner().fit(X, Y)
    best = max(auto.auto_scores_, key=auto.auto_scores_.get)
    assert f"center={auto.center_}, scale={auto.scale_mode_!r}" == best
    assert auto.center_ == (not best.startswith("center=False"))


@pytest.mark.parametrize(
    "params", [{"center": False, "scale": False}, {"center": True, "scale": "spread"}]
)
def test_explicit_settings_are_kept_exactly(rng, params):
    X, Y = _anisotropic_pair(rng, n=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aligner = OrthogonalProcrustesAligner(**params).fit(X, Y)
    assert aligner.center_ == params["center"]
    assert aligner.scale_mode_ == params["scale"]
    assert aligner.auto_scores_ is None
    assert bool(np.any(aligner.mean_y_)) == params["center"]


def test_choice_is_deterministic_given_random_state(rng):
    X, Y = _anisotropic_pair(rng)
    for seed in (None, 0):
        a = OrthogonalProcrustesAligner(random_state=seed).fit(X, Y)
        b = OrthogonalProcrustesAligner(random_state=seed).fit(X, Y)
        assert a.auto_scores_ == b.auto_scores_
        np.testing.assert_array_equal(a.W_, b.W_)


def test_holdout_folds_are_disjoint_and_sized():
    assert holdout_folds(99, None) is None
    folds = holdout_folds(4000, None)
    assert len(folds) == 5 and all(len(f) == 800 for f in folds)
    assert len(np.unique(np.concatenate(folds))) == 4000
    seeded = holdout_folds(100_000, 0)
    assert len(seeded) == 1 and len(np.unique(seeded[0])) == 1000


def test_paired_top1_matches_the_aligners_score(rng):
    X, Y = _anisotropic_pair(rng, n=200)
    aligner = OrthogonalProcrustesAligner(center=True, scale=False).fit(X, Y)
    assert paired_top1(aligner.transform(X), Y) == aligner.score(X, Y)


def test_too_few_rows_warn_and_fall_back(rng):
    X, Y = _anisotropic_pair(rng, n=60)
    with pytest.warns(AutoSettingWarning, match="60 rows, fewer than the 100"):
        aligner = OrthogonalProcrustesAligner().fit(X, Y)
    assert aligner.center_ is True and aligner.scale_mode_ == "spread"
    with pytest.warns(AutoSettingWarning, match="fewer than the 100"):
        affine = AffineAligner().fit(X, Y)
    assert affine.center_ is True


@pytest.mark.parametrize(
    "cls", [OrthogonalProcrustesAligner, AffineAligner, WhitenedProcrustesAligner]
)
@pytest.mark.parametrize("constant", ["X", "Y"])
def test_constant_columns_warn(rng, cls, constant):
    # Every closed form's "auto" says so, by Procrustes' rule (Affine and Whitened used to
    # take their first candidate silently).
    C = np.tile(rng.normal(size=(1, 5)), (300, 1)) + 1.0
    V = rng.normal(size=(300, 5))
    X, Y = (C, V) if constant == "X" else (V, C)
    with pytest.warns(AutoSettingWarning, match="every column of X or of Y is constant") as got:
        cls().fit(X, Y)
    assert not [w for w in got if issubclass(w.category, RuntimeWarning)]  # no NaN scale
    # An explicit setting is not a choice: nothing to warn about.
    explicit = {"fit_intercept": True} if cls is AffineAligner else {"center": True}
    if cls is WhitenedProcrustesAligner:
        explicit.update(normalize=True, whiten=True, dewhiten="target")
    if cls is OrthogonalProcrustesAligner:
        explicit["scale"] = "spread"
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutoSettingWarning)
        cls(**explicit).fit(X, Y)


def test_constant_columns_warn_through_rounding(rng):
    # A GPU's reductions leave a unit in the last place where the CPU's cancel exactly:
    # the same constant columns, every other row one float32 ulp up, still warn.
    X = np.tile(rng.normal(size=(1, 5)), (300, 1)).astype(np.float32) + np.float32(1.0)
    X[::2] = np.nextafter(X[::2], np.float32(np.inf))
    Y = rng.normal(size=(300, 5)).astype(np.float32)
    with pytest.warns(AutoSettingWarning, match="every column of X or of Y is constant"):
        OrthogonalProcrustesAligner().fit(X, Y)
    # Columns with a spread a thousand ulps wide are data, not rounding.
    X[::2] += 1000 * np.spacing(X[::2])
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutoSettingWarning)
        OrthogonalProcrustesAligner().fit(X, Y)


def test_partial_fit_resolves_on_the_first_batch(rng):
    X, Y = _anisotropic_pair(rng, n=900)
    aligner = OrthogonalProcrustesAligner().partial_fit(X[:600], Y[:600])
    first = (aligner.center_, aligner.scale_mode_)
    aligner.partial_fit(X[600:], Y[600:])
    assert (aligner.center_, aligner.scale_mode_) == first
    whole = OrthogonalProcrustesAligner(center=first[0], scale=first[1]).fit(X, Y)
    np.testing.assert_allclose(aligner.W_, whole.W_, atol=1e-10)


@pytest.mark.parametrize("cls", [AffineAligner, WhitenedProcrustesAligner])
def test_closed_forms_choose_the_best_held_out_setting(rng, cls):
    X, Y = _anisotropic_pair(rng, n=500)
    aligner = cls().fit(X, Y)
    assert isinstance(aligner.center_, bool)
    best = max(aligner.auto_scores_, key=aligner.auto_scores_.get)
    assert f"center={aligner.center_}" in best.replace("fit_intercept", "center")
    explicit = (
        {"fit_intercept": aligner.center_}
        if cls is AffineAligner
        else {
            "center": aligner.center_,
            "normalize": aligner.normalize_,
        }
    )
    np.testing.assert_allclose(aligner.W_, cls(**explicit).fit(X, Y).W_, atol=1e-10)


def test_aligned_neighbors_follows_the_fitted_centring(rng):
    X, Y = _anisotropic_pair(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the uncentred fit's anisotropy advice
        centred = OrthogonalProcrustesAligner(center=True).fit(X[:400], Y[:400])
        uncentred = OrthogonalProcrustesAligner(center=False).fit(X[:400], Y[:400])
    assert AlignedNeighbors(centred).fit(Y[400:]).centered_
    assert not AlignedNeighbors(uncentred).fit(Y[400:]).centered_
    assert not AlignedNeighbors(centred, gallery="raw").fit(Y[400:]).centered_
    auto = OrthogonalProcrustesAligner().fit(X[:400], Y[:400])
    assert AlignedNeighbors(auto).fit(Y[400:]).centered_ == auto.center_


class _Map:
    """Only what the comparison form reads."""

    def __init__(self, **attributes):
        vars(self).update(attributes)


@pytest.mark.parametrize(
    "attributes, auto, centered",
    [
        ({"center_": False, "center": "auto"}, False, False),
        ({"center_": True, "center": False}, True, True),  # the fitted choice wins
        ({"fit_intercept": True}, True, True),  # LambdaOrth, Residual
        ({"fit_intercept": False}, False, False),
        ({}, False, True),  # no notion of centring: auto compares raw
    ],
)
def test_query_comparison_form(attributes, auto, centered):
    assert query_comparison_form(_Map(**attributes), "auto") == (auto, False)
    assert query_comparison_form(_Map(**attributes), "centered") == (centered, False)
    assert query_comparison_form(_Map(**attributes), "raw") == (False, False)


def test_fingerprint_records_the_choice(rng):
    X, Y = _anisotropic_pair(rng, n=300)
    fingerprint = model_fingerprint(OrthogonalProcrustesAligner().fit(X, Y))
    chosen = fingerprint["chosen"]
    assert chosen["center_"] is True and chosen["scale_mode_"] in ("spread", True, False)
    assert set(chosen["auto_scores_"]) >= {"center=True, scale='spread'"}


@pytest.mark.parametrize("method, cls", [("procrustes", OrthogonalProcrustesAligner)])
def test_cli_fit_then_transform_gives_the_python_default(tmp_path, rng, method, cls):
    from sklearn_compat.cli import main
    from sklearn_compat.io import ColumnSpec, OutputLayout, load_model, read_table, write_table

    X, Y = _anisotropic_pair(rng, n=400)
    X, Y = X.astype(np.float32), Y.astype(np.float32)
    ids = np.array([f"item{i:03d}" for i in range(len(X))])
    src, tgt = tmp_path / "src.parquet", tmp_path / "tgt.parquet"
    write_table(src, ids, X, OutputLayout("list", X.shape[1], "id", id_dtype=ids.dtype))
    write_table(tgt, ids, Y, OutputLayout("list", Y.shape[1], "id", id_dtype=ids.dtype))
    model, out = tmp_path / "model.skops", tmp_path / "out.parquet"
    common = ["--id-column", "id"]
    assert main(["fit", "--method", method, "--source", str(src), "--target", str(tgt),
                 "--model", str(model), *common]) == 0  # fmt: skip
    assert main(["transform", "--model", str(model), "--input", str(src), "--output",
                 str(out), *common]) == 0  # fmt: skip
    python = cls().fit(X, Y)
    saved = load_model(model)
    assert (saved.center_, saved.scale_mode_) == (python.center_, python.scale_mode_)
    _, table = read_table(out, ColumnSpec("id"))
    np.testing.assert_allclose(table.X, python.transform(X), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- the trained aligners


def _trained(cls, **params):
    short = {
        RCSLSAligner: {"max_iter": 4},
        LambdaOrthAligner: {"max_epochs": 20, "random_state": 0},
        ResidualAdapterAligner: {"hidden": 8, "max_epochs": 20, "random_state": 0},
    }[cls]
    return cls(**short, **params)


@pytest.mark.parametrize("cls", [RCSLSAligner, LambdaOrthAligner, ResidualAdapterAligner])
def test_trained_aligners_choose_by_held_out_top1_and_refit_the_winner(rng, cls):
    X, Y = _anisotropic_pair(rng, n=400)
    name = "center" if cls is RCSLSAligner else "fit_intercept"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ordinary data: no advice of any kind
        auto = _trained(cls).fit(X, Y)
    assert isinstance(auto.center_, bool)
    scores = auto.auto_scores_
    first, best = next(iter(scores)), max(scores, key=scores.get)
    # The first-listed setting stays unless another wins by more than the margin.
    expected = best if scores[best] > scores[first] + TRAINED_MARGIN else first
    assert expected == f"{name}={auto.center_}"
    explicit = _trained(cls, **{name: auto.center_}).fit(X, Y)
    # The winner is refitted on all rows: exactly the explicit setting's fit.
    np.testing.assert_allclose(auto.W_, explicit.W_, atol=1e-6)
    assert explicit.auto_scores_ is None and explicit.center_ == auto.center_
    assert model_fingerprint(auto)["chosen"]["center_"] == auto.center_


def test_rcsls_auto_centres_an_anisotropic_pair(rng):
    X, Y = _anisotropic_pair(rng, n=400)
    auto = _trained(RCSLSAligner).fit(X, Y)
    assert auto.center_ is True and np.any(auto.mean_y_)
    assert auto.auto_scores_["center=True"] > auto.auto_scores_["center=False"]


def test_trained_aligners_warn_when_too_few_rows_to_choose(rng):
    X, Y = _anisotropic_pair(rng, n=60)
    with pytest.warns(AutoSettingWarning, match="using center=False"):
        assert _trained(RCSLSAligner).fit(X, Y).center_ is False
    with pytest.warns(AutoSettingWarning, match="using fit_intercept=True"):
        assert _trained(LambdaOrthAligner).fit(X, Y).center_ is True


def test_lambda_orth_warm_start_keeps_the_choice(rng):
    X, Y = _anisotropic_pair(rng, n=400)
    aligner = _trained(LambdaOrthAligner, warm_start=True).fit(X, Y)
    first, scores = aligner.center_, aligner.auto_scores_
    aligner.fit(X, Y)
    assert aligner.center_ == first and aligner.auto_scores_ == scores


def test_refined_decides_once_and_keeps_the_choice_in_every_round(rng):
    X, Y = _anisotropic_pair(rng, n=400)
    # Unpaired rows to induce pairs from (rows with a given partner are never re-paired).
    refined = RefinedProcrustesAligner(n_refinements=2).fit(
        X[:200], Y[:200], X_unpaired=X[200:300], Y_unpaired=Y[200:300][::-1]
    )
    assert refined.n_refinements_ >= 1
    last = refined.estimator_.get_params()
    chosen = (refined.center_, refined.normalize_, refined.whiten_, refined.dewhiten_)
    assert (last["center"], last["normalize"], last["whiten"], last["dewhiten"]) == chosen
    assert set(refined.auto_scores_) >= {
        f"center={c}, normalize={n}, whiten=True, dewhiten='target'"
        for c in (True, False)
        for n in (True, False)
    }
    assert AlignedNeighbors(refined).fit(Y[300:]).centered_ == refined.center_


def _top1_by_transform(aligner, X, Y):
    Z = aligner.transform(X)
    Z = Z / np.linalg.norm(Z, axis=1, keepdims=True)
    G = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    return float(np.mean(np.argmax(Z @ G.T, axis=1) == np.arange(len(Y))))


@pytest.mark.parametrize(
    "make",
    [
        OrthogonalProcrustesAligner,
        AffineAligner,
        WhitenedProcrustesAligner,
        lambda: RefinedProcrustesAligner(n_refinements=1),
        lambda: _trained(RCSLSAligner),
        lambda: _trained(LambdaOrthAligner),
        lambda: _trained(ResidualAdapterAligner),
    ],
)
def test_query_path_ranks_at_least_as_well_as_transform(rng, make):
    # Two differently noisy, offset views of the same items: the query path must not
    # undo what the map learned (issue 22).
    X, Y = _anisotropic_pair(rng, n=700, noise=0.8)
    aligner = make().fit(X[:500], Y[:500])
    search = AlignedNeighbors(aligner, n_neighbors=1).fit(Y[500:])
    by_query = float(
        np.mean(search.kneighbors(X[500:], return_distance=False)[:, 0] == np.arange(200))
    )
    assert by_query >= _top1_by_transform(aligner, X[500:], Y[500:]) - 0.005


def test_query_path_follows_each_map_and_explicit_settings_are_kept(rng):
    X, Y = _anisotropic_pair(rng, n=400)
    rcsls = _trained(RCSLSAligner).fit(X[:300], Y[:300])
    search = AlignedNeighbors(rcsls).fit(Y[300:])
    # RCSLS's loss already demotes crowding targets: ranked by the cosine it trained for.
    assert search.csls_k_ is None and search.centered_ == rcsls.center_
    assert AlignedNeighbors(rcsls, csls_k=10).fit(Y[300:]).csls_k_ == 10
    lam = _trained(LambdaOrthAligner, fit_intercept=True).fit(X[:300], Y[:300])
    # Its bias places the queries for the raw gallery; "centered" still centres.
    assert not AlignedNeighbors(lam).fit(Y[300:]).centered_
    assert AlignedNeighbors(lam).fit(Y[300:]).csls_k_ == 10
    assert AlignedNeighbors(lam, gallery="centered").fit(Y[300:]).centered_
    procrustes = OrthogonalProcrustesAligner().fit(X[:300], Y[:300])
    assert AlignedNeighbors(procrustes).fit(Y[300:]).csls_k_ == 10


@pytest.mark.parametrize(
    "make, n_train",
    [
        (lambda: RCSLSAligner(center=False), 4000),
        (lambda: LambdaOrthAligner(fit_intercept=True, max_epochs=10, random_state=0), 2000),
    ],
)
def test_query_path_is_faithful_on_real_features(mnist_features, make, n_train):
    # MNIST cnn -> mlp: where the gallery's CSLS on RCSLS, and centring the LambdaOrth map
    # on the gallery's mean, ranked below transform (0.434 against 0.450; 0.445 against
    # 0.462 with these settings).
    d = mnist_features
    train, test = d["train_idx"][:n_train], d["test_idx"]
    X, Y = d["cnn_s0"], d["mlp_s0"]
    aligner = make().fit(X[train], Y[train])
    search = AlignedNeighbors(aligner, n_neighbors=1).fit(Y[test])
    hits = search.kneighbors(X[test], return_distance=False)[:, 0] == np.arange(len(test))
    assert float(np.mean(hits)) >= _top1_by_transform(aligner, X[test], Y[test]) - 0.005


def test_the_former_auto_settings_module_still_names_what_it_held():
    # Split by idea (issue 33); code and citations that import the old path keep working.
    from sklearn_compat._core import auto_settings, fitted_choices, holdout, moment_choice
    from sklearn_compat._core import query_policy as _neighbors_policy

    assert auto_settings.holdout_folds is holdout.holdout_folds
    assert auto_settings.choose_procrustes_setting is moment_choice.choose_procrustes_setting
    assert auto_settings.query_path_scores is _neighbors_policy.query_path_scores
    assert auto_settings.fitted_choices is fitted_choices.fitted_choices
    assert auto_settings.AutoSettingWarning is AutoSettingWarning
    for name in auto_settings.__all__:
        assert getattr(auto_settings, name) is not None


@pytest.mark.parametrize(
    "cls", [OrthogonalProcrustesAligner, AffineAligner, WhitenedProcrustesAligner]
)
def test_duplicated_rows_do_not_blind_the_choice(rng, cls):
    """A table exported twice: held-out rows tie with their own copies.  The copies of a
    row's target are its answer, not competitors, so the candidates keep their scores
    (they used to fall to about 0, and the first was taken whatever its merit)."""
    X, Y = _anisotropic_pair(rng, n=300)
    once = cls().fit(X, Y)
    thrice = cls().fit(np.concatenate([X, X, X]), np.concatenate([Y, Y, Y]))
    assert thrice.auto_scores_.keys() == once.auto_scores_.keys()
    for label, score in once.auto_scores_.items():
        assert thrice.auto_scores_[label] == pytest.approx(score, abs=0.05), label
    assert max(thrice.auto_scores_.values()) > 0.9
    chosen = [name for name in ("center_", "fit_intercept_", "scale_mode_", "normalize_")
              if name in vars(once)]  # fmt: skip
    assert {n: vars(thrice)[n] for n in chosen} == {n: vars(once)[n] for n in chosen}


def test_copies_of_a_target_are_not_its_competitors():
    sims = np.array([[0.9, 0.9, 0.1], [0.9, 0.9, 0.1], [0.2, 0.3, 0.8]])
    assert top1_of_similarities(sims) == pytest.approx(1 / 3)  # rows 0 and 1 tie
    targets = np.array([[1.0, 2.0], [1.0, 2.0], [3.0, 4.0]])  # rows 0 and 1: one target
    assert top1_of_similarities(sims, targets) == 1.0
    # A distinct target that ties still counts against the row.
    assert top1_of_similarities(sims, targets + [[0, 0], [0, 1e-9], [0, 0]]) == pytest.approx(
        1 / 3
    )

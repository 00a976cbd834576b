"""Wide data (fewer pairs than dimensions) solved in the row space equals the dense route.

The dense references are computed here from the d x d statistics with the package's own
dense solvers (themselves checked against numpy/scipy in their test files).
"""

import ast
import warnings

import numpy as np
import pytest
from scipy.stats import ortho_group

from sklearn_compat import AffineAligner, OrthogonalProcrustesAligner, WhitenedProcrustesAligner
from sklearn_compat._core.ranking import unit_rows
from sklearn_compat._core.row_space import _rotation_onto
from sklearn_compat._core.whitening import multi_step_map
from sklearn_compat.affine import least_squares_from_gram
from sklearn_compat.procrustes import procrustes_from_cross

from _helpers import planted_pair

SHAPES = [(30, 50, 50), (30, 50, 40), (30, 40, 50), (20, 60, 12), (20, 12, 60), (70, 40, 30)]


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def weighted_pair(n, d_x, d_y, seed=0):
    """A planted pair with decaying column scales, an offset and per-row weights."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(1.0, 0.1, d_x)
    X, Y, _ = planted_pair(rng, n, d_x, d_y, map_seed=seed, scales=scales, offset=0.5, noise=0.05)
    return X, Y, rng.uniform(0.5, 2.0, size=n)


def rows(X, Y, w, centred):
    mx = w @ X / w.sum() if centred else np.zeros(X.shape[1])
    my = w @ Y / w.sum() if centred else np.zeros(Y.shape[1])
    root = np.sqrt(w)[:, None]
    return (X - mx) * root, (Y - my) * root, X - mx


@pytest.mark.parametrize("n, d_x, d_y", SHAPES)
@pytest.mark.parametrize(
    "params", [{}, {"center": False}, {"scale": True}, {"scale": False, "allow_reflection": False}]
)
def test_procrustes_equals_the_dense_route(n, d_x, d_y, params):
    X, Y, w = weighted_pair(n, d_x, d_y)
    aligner = OrthogonalProcrustesAligner(**params).fit(X, Y, sample_weight=w)
    A, B, Xc = rows(X, Y, w, aligner.center_)
    W, S, signs = procrustes_from_cross(A.T @ B, allow_reflection=aligner.allow_reflection)
    np.testing.assert_allclose(aligner.singular_values_, S, atol=1e-9 * S[0])
    # The pairs fix the map on the rows' span: equal there; orthonormal everywhere.
    np.testing.assert_allclose(Xc @ aligner.W_, Xc @ W, atol=1e-8)
    small = min(d_x, d_y)
    gram = aligner.W_ @ aligner.W_.T if d_x <= d_y else aligner.W_.T @ aligner.W_
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-10)
    if d_x == d_y and not aligner.allow_reflection:
        assert np.linalg.det(aligner.W_) == pytest.approx(1.0)
    sq = (A * A).sum()
    expected = {"spread": np.sqrt((B * B).sum() / sq), True: (signs @ S) / sq, False: 1.0}
    assert aligner.scale_ == pytest.approx(expected[aligner.scale_mode_], rel=1e-9)


def test_procrustes_recovers_a_planted_rotation_from_few_pairs():
    X, _, _ = weighted_pair(40, 64, 64)
    Q = ortho_group.rvs(64, random_state=3)
    aligner = OrthogonalProcrustesAligner(center=False, scale=False).fit(X, X @ Q)
    np.testing.assert_allclose(aligner.transform(X), X @ Q, atol=1e-9)


def test_directions_no_pair_spans_are_left_in_place():
    X, Y, _ = weighted_pair(10, 30, 30)
    aligner = OrthogonalProcrustesAligner(center=False).fit(X, Y)
    # A direction orthogonal to both spans is mapped by the identity.
    basis = np.linalg.qr(np.vstack([X, Y]).T, mode="complete")[0][:, 20:]
    np.testing.assert_allclose(basis.T @ aligner.W_, basis.T, atol=1e-10)


def test_rotation_onto_handles_shared_directions():
    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.normal(size=(9, 6)))[0]
    U, V = Q[:, :3], np.column_stack([Q[:, 0], Q[:, 3:5]])  # first column shared
    W = _rotation_onto(U, V, 9, 9, proper=True)
    np.testing.assert_allclose(U.T @ W, V.T, atol=1e-12)
    np.testing.assert_allclose(W @ W.T, np.eye(9), atol=1e-12)
    assert np.linalg.det(W) == pytest.approx(1.0)


@pytest.mark.parametrize("n, d_x, d_y", SHAPES)
@pytest.mark.parametrize(
    "params",
    [{}, {"normalize": False, "center": False}, {"reweight": 0.5, "dewhiten": "source"}],
)
def test_whitening_equals_the_dense_route(n, d_x, d_y, params):
    X, Y, w = weighted_pair(n, d_x, d_y, seed=1)
    # The whitened map itself (the default decides whitening from held-out pairs).
    params = {"whiten": True, "dewhiten": "target", **params}
    aligner = WhitenedProcrustesAligner(**params).fit(X, Y, sample_weight=w)
    Xn, Yn = (unit_rows(X), unit_rows(Y)) if aligner.normalize else (X, Y)
    A, B, _ = rows(Xn, Yn, w, aligner.center)
    rtol = np.finfo(np.float64).eps * max(d_x, d_y, np.sqrt(n))
    ref = multi_step_map(
        A.T @ A, B.T @ B, A.T @ B, whiten=True, reweight=aligner.reweight,
        dewhiten=aligner.dewhiten, n_components=None, rtol=rtol,
    )  # fmt: skip
    np.testing.assert_allclose(aligner.W_, ref.W, atol=1e-8 * np.abs(ref.W).max())
    np.testing.assert_allclose(aligner.singular_values_, ref.singular_values, atol=1e-8)


@pytest.mark.parametrize("n, d_x, d_y", SHAPES)
@pytest.mark.parametrize("params", [{}, {"alpha": 0.5}, {"fit_intercept": False}])
def test_ridge_equals_the_dense_route(n, d_x, d_y, params):
    X, Y, w = weighted_pair(n, d_x, d_y, seed=2)
    aligner = AffineAligner(**params).fit(X, Y, sample_weight=w)
    A, B, _ = rows(X, Y, w, aligner.fit_intercept)
    rtol = np.finfo(np.float64).eps * max(d_x, np.sqrt(n))
    W = least_squares_from_gram(A.T @ A, A.T @ B, aligner.alpha, rtol=rtol)
    np.testing.assert_allclose(aligner.W_, W, atol=1e-8 * np.abs(W).max())


@pytest.mark.parametrize("cls", [OrthogonalProcrustesAligner, AffineAligner])
def test_partial_fit_after_a_wide_fit_merges_exactly(cls):
    X, Y, _ = weighted_pair(60, 40, 30)
    merged = cls().fit(X[:20], Y[:20]).partial_fit(X[20:], Y[20:])
    whole = cls().fit(X, Y)
    np.testing.assert_allclose(merged.W_, whole.W_, atol=1e-9)
    np.testing.assert_allclose(merged.transform(X), whole.transform(X), atol=1e-9)


def test_partial_fit_of_wide_batches_stays_thin_and_equals_fit():
    X, Y, w = weighted_pair(40, 64, 48)
    aligner = OrthogonalProcrustesAligner()
    for start in range(0, 40, 8):
        rows = slice(start, start + 8)
        aligner.partial_fit(X[rows], Y[rows], sample_weight=w[rows])
    assert aligner._moments_state["cross"] is None  # no d x d statistic was formed
    whole = OrthogonalProcrustesAligner().fit(X, Y, sample_weight=w)
    np.testing.assert_allclose(aligner.transform(X), whole.transform(X), atol=1e-9)
    np.testing.assert_allclose(aligner.singular_values_, whole.singular_values_, atol=1e-9)
    assert aligner.scale_ == pytest.approx(whole.scale_, rel=1e-12)
    with pytest.raises(ValueError, match="features"):
        aligner.partial_fit(X[:8, :10], Y[:8])


def test_auto_settings_on_wide_data_choose_in_the_row_space():
    # Offsets unrelated by the rotation: only a centred map recovers it, and "auto" must
    # see that from a row-space fit (no d x d statistic) and refit with that setting.
    rng = np.random.default_rng(5)
    n, d = 250, 400
    S = rng.normal(size=(n, d))
    Q = ortho_group.rvs(d, random_state=1)
    X = S + 8.0 * rng.normal(size=d)
    Y = S @ Q + 8.0 * rng.normal(size=d) + rng.normal(size=(n, d))
    aligner = OrthogonalProcrustesAligner(random_state=0).fit(X, Y)
    assert aligner.center_ is True
    scores = aligner.auto_scores_
    assert scores["center=True, scale='spread'"] > scores["center=False, scale='spread'"]
    explicit = OrthogonalProcrustesAligner(center=True, scale=aligner.scale_mode_).fit(X, Y)
    np.testing.assert_allclose(aligner.W_, explicit.W_, atol=1e-12)
    # No common offset on either side: nothing to score, the first candidate is taken.
    plain = OrthogonalProcrustesAligner(random_state=0).fit(S, S @ Q)
    assert plain.auto_scores_ is None and (plain.center_, plain.scale_mode_) == (True, "spread")


def test_whitened_auto_on_wide_data_scores_as_explicit_refits_would():
    # The wide chooser maps the held-out rows through the candidates' thin factors; each
    # score must be the one an explicit refit on the kept rows gets through ``transform``.
    from sklearn_compat._core.holdout import holdout_folds, paired_top1

    rng = np.random.default_rng(7)
    n, d = 150, 300
    S = rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0, size=(n, 1))  # norms vary
    X = S + 4.0 * rng.normal(size=d)
    Y = S @ ortho_group.rvs(d, random_state=2) + 0.5 * rng.normal(size=(n, d))
    aligner = WhitenedProcrustesAligner(random_state=0).fit(X, Y)
    assert len(aligner.auto_scores_) > 1
    held = holdout_folds(n, 0)[0]
    keep = np.setdiff1d(np.arange(n), held)
    for label, score in aligner.auto_scores_.items():
        params = {k: ast.literal_eval(v) for k, v in (p.split("=") for p in label.split(", "))}
        refit = WhitenedProcrustesAligner(**params).fit(X[keep], Y[keep])
        assert score == pytest.approx(paired_top1(refit.transform(X[held]), Y[held]), abs=1e-12)
    # The best of the whitened or of the unwhitened candidates, as the step rule decided.
    chosen = (
        f"center={aligner.center_}, normalize={aligner.normalize_}, "
        f"whiten={aligner.whiten_}, dewhiten={aligner.dewhiten_!r}"
    )
    group = {k: v for k, v in aligner.auto_scores_.items() if f"whiten={aligner.whiten_}," in k}
    assert chosen == max(group, key=group.get)


@pytest.mark.parametrize("shape", [(150, 300, 300), (150, 300, 120), (150, 120, 300)])
def test_procrustes_auto_on_wide_data_scores_as_explicit_refits_would(shape):
    # Both centrings are scored from one QR per side, the held-out rows mapped through the
    # thin factors of the rotation: each score is that of an explicit refit's transform.
    from sklearn_compat._core.holdout import holdout_folds, paired_top1

    n, d_x, d_y = shape
    rng = np.random.default_rng(8)
    S = rng.normal(size=(n, d_x))
    X = S + 3.0 * rng.normal(size=d_x)
    Y = S @ ortho_group.rvs(max(d_x, d_y), random_state=3)[:d_x, :d_y]
    Y = Y + 2.0 * rng.normal(size=d_y) + 0.5 * rng.normal(size=(n, d_y))
    aligner = OrthogonalProcrustesAligner(random_state=0).fit(X, Y)
    assert len(aligner.auto_scores_) == 4
    held = holdout_folds(n, 0)[0]
    keep = np.setdiff1d(np.arange(n), held)
    for label, score in aligner.auto_scores_.items():
        center, scale = (part.split("=")[1] for part in label.split(", "))
        scale = {"True": True, "False": False}.get(scale, scale.strip("'"))
        refit = OrthogonalProcrustesAligner(center=center == "True", scale=scale)
        refit.fit(X[keep], Y[keep])
        assert score == pytest.approx(paired_top1(refit.transform(X[held]), Y[held]), abs=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("center", [True, False])
def test_factored_maps_equal_the_formed_maps(shape, center):
    from sklearn_compat._core.row_space import row_stats, thin_procrustes, thin_whitened
    from sklearn_compat._core.wide_choice import (
        KeptRows,
        candidate_stats,
        procrustes_mapped,
        whitened_mapped,
    )

    X, Y, w = weighted_pair(*shape)
    P = np.random.default_rng(1).normal(size=(7, shape[1]))
    stats = candidate_stats(KeptRows(X, Y, w), normalize=False, center=center)
    formed = row_stats(OrthogonalProcrustesAligner(), X, Y, w, centered=center)
    np.testing.assert_allclose(stats.mean_x, formed.mean_x, atol=1e-12)
    assert stats.sq_y == pytest.approx(formed.sq_y, rel=1e-12)
    mapped, values, _ = procrustes_mapped(P, stats, allow_reflection=True)
    W, formed_values, _ = thin_procrustes(formed, allow_reflection=True)
    assert mapped is not None
    np.testing.assert_allclose(mapped, P @ W, atol=1e-9)
    np.testing.assert_allclose(values, formed_values, atol=1e-9)
    options = dict(whiten=True, reweight=0.5, dewhiten="source", n_components=None, rtol=1e-12)
    W = thin_whitened(formed, **options)[0]
    np.testing.assert_allclose(whitened_mapped(P, stats, **options), P @ W, atol=1e-8)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("normalize", [True, False])
def test_held_out_products_from_one_factorisation_equal_the_formed_maps(shape, center, normalize):
    # One QR of every row (kept rows first): the kept rows' maps come from its leading
    # blocks and the held-out rows are scored in its reduced coordinates.  The products
    # must equal those of maps formed from the kept rows themselves.
    from sklearn_compat._core.row_space import row_stats, thin_procrustes, thin_whitened
    from sklearn_compat._core.wide_choice import (
        SplitRows,
        candidate_stats,
        held_offset,
        procrustes_held_products,
        whitened_held_products,
    )

    X, Y, w = weighted_pair(*shape)
    held = np.arange(1, shape[0], 4)
    keep = np.setdiff1d(np.arange(shape[0]), held)
    split = SplitRows(X, Y, w, keep, held)
    units = (unit_rows(X), unit_rows(Y)) if normalize else (X, Y)
    formed = row_stats(
        OrthogonalProcrustesAligner(), *(a[keep] for a in units), w[keep], centered=center
    )
    queries, targets = units[0][held] - formed.mean_x, Y[held]
    stats = candidate_stats(split.kept, normalize=normalize, center=center)
    options = dict(whiten=True, reweight=0.5, dewhiten="source", n_components=None, rtol=1e-12)
    W = thin_whitened(formed, **options)[0]
    expected = (queries @ W + formed.mean_y) @ targets.T
    got = whitened_held_products(split, stats, normalize=normalize, center=center, **options)
    np.testing.assert_allclose(got, expected, atol=1e-8)
    if normalize:
        return
    W = thin_procrustes(formed, allow_reflection=True)[0]
    mean_x = held_offset(split, normalize=False, center=center)[0]
    for dtype, tol in ((np.float64, 1e-8), (np.float32, 1e-3)):
        got, _, _ = procrustes_held_products(
            split, stats, mean_x, allow_reflection=True, dtype=dtype
        )
        assert got is not None and got.dtype == np.float64
        np.testing.assert_allclose(got, (queries @ W) @ targets.T, atol=tol * np.abs(got).max())


def test_wide_fits_reuse_the_choice_factorisation_and_equal_explicit_fits():
    # With a common offset "auto" scores its candidates; the final fit then centres the
    # choice's factorisation instead of factoring again: the map equals an explicit fit.
    rng = np.random.default_rng(3)
    X, Y, _ = weighted_pair(150, 300, 300)
    X, Y = X + 2.0 * rng.normal(size=300), Y + 2.0 * rng.normal(size=300)
    for cls in (OrthogonalProcrustesAligner, WhitenedProcrustesAligner):
        auto = cls(random_state=0).fit(X, Y)
        assert auto.auto_scores_  # the candidates were scored
        chosen = {
            k.rstrip("_").replace("scale_mode", "scale"): v
            for k, v in vars(auto).items()
            if k in ("center_", "scale_mode_", "normalize_")
        }
        explicit = cls(**chosen).fit(X, Y)
        np.testing.assert_allclose(auto.transform(X), explicit.transform(X), atol=1e-8)


def test_holdout_folds_take_one_fold_from_the_wide_solve_width():
    from sklearn_compat._core.holdout import WIDE_SOLVE, holdout_folds

    assert len(holdout_folds(5000, None)) == 5
    assert len(holdout_folds(5000, None, WIDE_SOLVE - 1)) == 5
    assert len(holdout_folds(5000, None, WIDE_SOLVE)) == 1
    assert len(holdout_folds(30000, None, 10)) == 1


def test_procrustes_from_cross_in_float32_is_the_float64_map_to_its_rounding():
    rng = np.random.default_rng(0)
    cross = rng.normal(size=(60, 40)) * np.geomspace(1.0, 0.01, 40)
    W64, S64, _ = procrustes_from_cross(cross)
    W32, S32, signs = procrustes_from_cross(cross, dtype=np.float32)
    assert W32.dtype == S32.dtype == signs.dtype == np.float64
    np.testing.assert_allclose(W32, W64, atol=1e-3)
    np.testing.assert_allclose(S32, S64, rtol=1e-5)


@pytest.mark.parametrize("cls", [OrthogonalProcrustesAligner, WhitenedProcrustesAligner])
def test_wide_solves_choose_on_a_row_sample_and_fit_every_row(monkeypatch, cls):
    # From WIDE_SOLVE columns on (lowered here), with more rows than columns, "auto"
    # scores its candidates in the row space on a sample of d/2 rows; the chosen setting is
    # then fitted on every row, exactly as given explicitly.
    from sklearn_compat._core import holdout

    monkeypatch.setattr(holdout, "WIDE_SOLVE", 256)
    rng = np.random.default_rng(4)
    d = 300
    R = ortho_group.rvs(d, random_state=4)
    Z = rng.normal(size=(700, d)) * np.geomspace(1.0, 0.2, d)
    X = Z + 3.0 * rng.normal(size=d) * np.geomspace(1.0, 0.2, d)
    Y = Z @ R + 0.05 * rng.normal(size=Z.shape) - 2.0 * rng.normal(size=d)
    calls = []
    real = holdout.holdout_folds
    monkeypatch.setattr(holdout, "holdout_folds", lambda n, *a: calls.append(n) or real(n, *a))
    auto = cls(random_state=0).fit(X, Y)
    assert calls == [d // 2]  # the candidates saw the sample only
    assert auto.center_ is True  # offsets unrelated by the map: centring wins
    chosen = {"center": auto.center_}
    chosen.update(
        {"scale": auto.scale_mode_}
        if cls is OrthogonalProcrustesAligner
        else {"normalize": auto.normalize_}
    )
    explicit = cls(**chosen).fit(X, Y)
    assert auto.n_samples_seen_ == 700
    np.testing.assert_allclose(auto.transform(X), explicit.transform(X), atol=1e-8)
    again = cls(random_state=0).fit(X, Y)
    assert again.auto_scores_ == auto.auto_scores_

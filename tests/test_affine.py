"""AffineAligner: planted maps, agreement with numpy's lstsq and sklearn's Ridge, streaming."""

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge

from sklearn_compat import AffineAligner
from sklearn_compat.affine import least_squares_from_gram


def lstsq_reference(X, Y, sample_weight=None, fit_intercept=True):
    """Weighted minimum-norm least squares with an unpenalised intercept, in numpy."""
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    w = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, float)
    if fit_intercept:
        mx = w @ X / w.sum()
        my = w @ Y / w.sum()
    else:
        mx, my = np.zeros(X.shape[1]), np.zeros(Y.shape[1])
    root = np.sqrt(w)[:, None]
    W = np.linalg.lstsq(root * (X - mx), root * (Y - my), rcond=None)[0]
    return W, my - mx @ W


def conditioned(rng, n, d, kappa, offset=0.0):
    """Rows with singular values spread log-uniformly over [1/kappa, 1], randomly rotated."""
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    return (rng.normal(size=(n, d)) * np.logspace(0, -np.log10(kappa), d)) @ Q.T + offset


@pytest.mark.parametrize("d_x, d_y", [(5, 9), (9, 5), (7, 7)])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_recovers_planted_affine_map(rng, d_x, d_y, fit_intercept):
    X = rng.normal(size=(60, d_x)) + 2.0
    A = rng.normal(size=(d_x, d_y))
    b = rng.normal(size=d_y) if fit_intercept else np.zeros(d_y)
    aligner = AffineAligner(fit_intercept=fit_intercept, device="cpu").fit(X, X @ A + b)
    np.testing.assert_allclose(aligner.W_, A, atol=1e-10)
    np.testing.assert_allclose(aligner.bias_, b, atol=1e-10)
    np.testing.assert_allclose(aligner.transform(X), X @ A + b, atol=1e-10)
    assert aligner.n_samples_seen_ == 60


def test_no_intercept_does_not_fit_an_offset(rng):
    X = rng.normal(size=(80, 4))
    Y = X @ rng.normal(size=(4, 3)) + 5.0
    aligner = AffineAligner(fit_intercept=False).fit(X, Y)
    np.testing.assert_array_equal(aligner.bias_, np.zeros(3))
    W_ref = np.linalg.lstsq(X, Y, rcond=None)[0]
    np.testing.assert_allclose(aligner.W_, W_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_agrees_with_numpy_lstsq(rng, fit_intercept, weighted):
    X = rng.normal(size=(300, 12)) * rng.uniform(0.5, 3, size=12) + 1.5
    Y = X @ rng.normal(size=(12, 7)) + rng.normal(size=(300, 7)) + 0.3
    w = rng.uniform(0, 3, size=300) if weighted else None
    aligner = AffineAligner(fit_intercept=fit_intercept).fit(X, Y, sample_weight=w)
    W_ref, b_ref = lstsq_reference(X, Y, w, fit_intercept)
    np.testing.assert_allclose(aligner.W_, W_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(aligner.bias_, b_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("alpha", [0.1, 10.0, 1e3])
def test_agrees_with_sklearn_ridge(rng, fit_intercept, alpha):
    X = rng.normal(size=(150, 10)) + 1.0
    Y = X @ rng.normal(size=(10, 4)) + rng.normal(size=(150, 4)) + 2.0
    w = rng.uniform(0.1, 2, size=150)
    aligner = AffineAligner(fit_intercept=fit_intercept, alpha=alpha).fit(X, Y, sample_weight=w)
    ridge = Ridge(alpha=alpha, fit_intercept=fit_intercept, solver="svd").fit(X, Y, w)
    np.testing.assert_allclose(aligner.W_, ridge.coef_.T, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(aligner.bias_, np.broadcast_to(ridge.intercept_, 4), atol=1e-9)
    # alpha > 0 really shrinks: the ridge map is smaller than the least-squares one.
    plain = AffineAligner(fit_intercept=fit_intercept).fit(X, Y, sample_weight=w)
    assert np.linalg.norm(aligner.W_) < np.linalg.norm(plain.W_)


@pytest.mark.parametrize("kappa", [1e2, 1e4, 1e5])
def test_ill_conditioned_x_matches_lstsq(rng, kappa):
    # The normal equations square the condition number; in float64 that still leaves
    # about 1e-16 * kappa**2 relative error, far inside these tolerances.
    X = conditioned(rng, 2000, 24, kappa, offset=4.0)
    Y = X @ rng.normal(size=(24, 6)) + 0.01 * rng.normal(size=(2000, 6)) + 1.0
    aligner = AffineAligner().fit(X, Y)
    W_ref, b_ref = lstsq_reference(X, Y)
    tol = 1e-15 * kappa**2 * 20
    assert np.linalg.norm(aligner.W_ - W_ref) <= tol * np.linalg.norm(W_ref)
    np.testing.assert_allclose(aligner.transform(X), X @ W_ref + b_ref, atol=1e-8)
    ridge = Ridge(alpha=1e-3, solver="svd").fit(X, Y)
    W_ridge = AffineAligner(alpha=1e-3).fit(X, Y).W_
    assert np.linalg.norm(W_ridge - ridge.coef_.T) <= tol * np.linalg.norm(ridge.coef_)


def test_float32_input_keeps_float64_statistics(rng):
    # kappa = 1e3: a float32 Gram would be off by ~1e-2 here; the float64 route is exact
    # up to rounding of the float32 data itself.
    X = conditioned(rng, 3000, 32, 1e3, offset=3.0).astype(np.float32)
    Y = (X @ rng.normal(size=(32, 8)) + 0.1 * rng.normal(size=(3000, 8)) + 1).astype(np.float32)
    aligner = AffineAligner().fit(X, Y)
    W_ref, b_ref = lstsq_reference(X, Y)
    assert aligner.W_.dtype == np.float64
    np.testing.assert_allclose(aligner.W_, W_ref, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(aligner.bias_, b_ref, rtol=1e-7, atol=1e-7)
    Z = aligner.transform(X)
    assert Z.dtype == np.float32
    assert aligner.inverse_transform(Z).dtype == np.float32
    assert aligner.transform(X.astype(np.float64)).dtype == np.float64


def test_integer_weights_equal_repeated_rows(rng):
    X = rng.normal(size=(40, 5))
    Y = rng.normal(size=(40, 3))
    counts = rng.integers(0, 4, size=40)
    weighted = AffineAligner(alpha=0.5).fit(X, Y, sample_weight=counts)
    repeated = AffineAligner(alpha=0.5).fit(np.repeat(X, counts, 0), np.repeat(Y, counts, 0))
    np.testing.assert_allclose(weighted.W_, repeated.W_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weighted.bias_, repeated.bias_, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_partial_fit_equals_fit(rng, fit_intercept):
    X = rng.normal(size=(500, 8)) * 3 + 10.0
    Y = X @ rng.normal(size=(8, 5)) + rng.normal(size=(500, 5))
    w = rng.uniform(0, 2, size=500)
    full = AffineAligner(fit_intercept=fit_intercept, alpha=2.0).fit(X, Y, sample_weight=w)
    streamed = AffineAligner(fit_intercept=fit_intercept, alpha=2.0)
    for rows in np.array_split(np.arange(500), [7, 200, 201]):
        streamed.partial_fit(X[rows], Y[rows], sample_weight=w[rows])
    np.testing.assert_allclose(streamed.W_, full.W_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(streamed.bias_, full.bias_, rtol=1e-10, atol=1e-10)
    assert streamed.n_samples_seen_ == 500
    # fit starts over instead of merging.
    refit = streamed.fit(X[:100], Y[:100])
    assert refit.n_samples_seen_ == 100


def test_partial_fit_rejects_changed_fit_intercept(rng):
    X, Y = rng.normal(size=(20, 3)), rng.normal(size=(20, 2))
    aligner = AffineAligner().partial_fit(X, Y)
    aligner.set_params(fit_intercept=False)
    with pytest.raises(ValueError, match="fit_intercept was changed"):
        aligner.partial_fit(X, Y)


def test_inverse_transform_round_trip_when_w_has_full_rank(rng):
    X = rng.normal(size=(100, 6))
    Y = X @ rng.normal(size=(6, 10)) + rng.normal(size=(100, 10)) + 1.0
    aligner = AffineAligner().fit(X, Y)
    np.testing.assert_allclose(aligner.inverse_transform(aligner.transform(X)), X, atol=1e-10)


def test_inverse_transform_is_least_squares_preimage(rng):
    # d_x > d_y: W cannot be inverted; each row goes to its minimum-norm preimage.
    X = rng.normal(size=(100, 10))
    Y = X @ rng.normal(size=(10, 4)) + rng.normal(size=(100, 4)) + 1.0
    aligner = AffineAligner().fit(X, Y)
    Z = rng.normal(size=(30, 4))
    expected = np.linalg.lstsq(aligner.W_.T, (Z - aligner.bias_).T, rcond=None)[0].T
    np.testing.assert_allclose(aligner.inverse_transform(Z), expected, atol=1e-10)
    # Mapping the preimage forward lands back on Z (W has full column rank d_y here).
    np.testing.assert_allclose(aligner.transform(aligner.inverse_transform(Z)), Z, atol=1e-10)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_rank_deficient_x_gives_minimum_norm_solution(rng, fit_intercept):
    X = rng.normal(size=(50, 6))
    X[:, 3] = X[:, 0]  # duplicated column
    X[:, 4] = 2 * X[:, 1] - X[:, 2]  # linear combination
    X[:, 5] = 0.0  # dead unit
    Y = X @ rng.normal(size=(6, 3)) + 0.1 * rng.normal(size=(50, 3)) + 1.0
    aligner = AffineAligner(fit_intercept=fit_intercept).fit(X, Y)
    W_ref, b_ref = lstsq_reference(X, Y, fit_intercept=fit_intercept)
    np.testing.assert_allclose(aligner.W_, W_ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(aligner.bias_, b_ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_array_equal(aligner.W_[5], 0.0)


def test_fewer_rows_than_features_gives_minimum_norm_solution(rng):
    X = rng.normal(size=(8, 20))
    Y = rng.normal(size=(8, 5))
    aligner = AffineAligner().fit(X, Y)
    W_ref, b_ref = lstsq_reference(X, Y)
    np.testing.assert_allclose(aligner.W_, W_ref, rtol=1e-9, atol=1e-10)
    # Interpolates the training rows exactly.
    np.testing.assert_allclose(aligner.transform(X), Y, atol=1e-9)


def test_solver_cholesky_and_eigen_routes_agree(rng):
    X = rng.normal(size=(100, 7))
    G, C = X.T @ X, X.T @ rng.normal(size=(100, 3))
    via_cholesky = least_squares_from_gram(G, C, alpha=0.3)
    via_eigh = least_squares_from_gram(G - 1e9 * np.eye(7), C, alpha=1e9 + 0.3)
    np.testing.assert_allclose(via_cholesky, np.linalg.solve(G + 0.3 * np.eye(7), C))
    np.testing.assert_allclose(via_eigh, via_cholesky, rtol=1e-5)
    np.testing.assert_array_equal(least_squares_from_gram(G, C, alpha=np.inf), 0.0)


def test_torch_and_pandas_inputs(rng):
    pd = pytest.importorskip("pandas")
    X = rng.normal(size=(50, 4))
    Y = X @ rng.normal(size=(4, 3)) + 1.0
    from_torch = AffineAligner().fit(torch.from_numpy(X), torch.from_numpy(Y))
    from_pandas = AffineAligner().fit(
        pd.DataFrame(X, columns=list("abcd")), pd.DataFrame(Y, columns=["u", "v", "w"])
    )
    np.testing.assert_allclose(from_torch.W_, from_pandas.W_)
    assert list(from_pandas.get_feature_names_out()) == ["u", "v", "w"]


def test_real_features_agree_with_lstsq(mnist_features):
    # ReLU features: some units are dead on the training rows, so X is rank deficient.
    train = mnist_features["train_idx"]
    X, Y = mnist_features["cnn_s0"][train], mnist_features["cnn_s1"][train]
    aligner = AffineAligner().fit(X, Y)
    W_ref, b_ref = lstsq_reference(X, Y)
    np.testing.assert_allclose(aligner.W_, W_ref, rtol=1e-6, atol=1e-7)
    test = mnist_features["test_idx"]
    Xt = mnist_features["cnn_s0"][test]
    np.testing.assert_allclose(aligner.transform(Xt), Xt @ W_ref + b_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "params, fit_args, error, match",
    [
        ({"alpha": -1.0}, {}, ValueError, "alpha"),
        ({"fit_intercept": "yes"}, {}, ValueError, "fit_intercept"),
        ({"device": "gpu"}, {}, ValueError, "device must be"),
        ({}, {"Y": np.ones((9, 2))}, ValueError, "inconsistent numbers of samples"),
        ({}, {"X": np.full((10, 3), np.nan)}, ValueError, "NaN"),
        ({}, {"sample_weight": -np.ones(10)}, ValueError, "Negative values"),
        ({}, {"sample_weight": np.zeros(10)}, ValueError, "non-zero"),
        ({}, {"Y": None}, ValueError, "requires y"),
    ],
)
def test_bad_input_is_rejected_clearly(rng, params, fit_args, error, match):
    args = {"X": rng.normal(size=(10, 3)), "Y": rng.normal(size=(10, 2)), **fit_args}
    with pytest.raises(error, match=match):
        AffineAligner(**params).fit(**args)


def test_bad_input_after_fit_is_rejected_clearly(rng):
    aligner = AffineAligner().fit(rng.normal(size=(20, 3)), rng.normal(size=(20, 2)))
    with pytest.raises(ValueError, match="3 features"):
        aligner.transform(rng.normal(size=(5, 4)))
    with pytest.raises(ValueError, match="Z has 3 features"):
        aligner.inverse_transform(rng.normal(size=(5, 3)))
    with pytest.raises(ValueError, match="target features"):
        aligner.partial_fit(rng.normal(size=(5, 3)), rng.normal(size=(5, 4)))


@pytest.mark.parametrize("rank", [1, 3])
def test_reduced_rank_recovers_a_planted_map_of_that_rank(rng, rank):
    X = rng.normal(size=(200, 7)) * rng.uniform(0.2, 3, 7) + 1.0
    A = rng.normal(size=(7, rank)) @ rng.normal(size=(rank, 5))
    b = rng.normal(size=5)
    aligner = AffineAligner(rank=rank, device="cpu").fit(X, X @ A + b)
    np.testing.assert_allclose(aligner.W_, A, atol=1e-9)
    np.testing.assert_allclose(aligner.bias_, b, atol=1e-9)
    assert np.linalg.matrix_rank(aligner.W_) == rank


def test_reduced_rank_is_the_best_fit_of_that_rank(rng):
    """Reduced-rank regression: projecting the fitted values on their top principal
    directions beats every other rank-r projection of the least-squares W (here: of W's
    own top singular directions)."""
    X = rng.normal(size=(300, 6))
    Y = X @ rng.normal(size=(6, 6)) + 0.5 * rng.normal(size=(300, 6))
    W = AffineAligner(fit_intercept=False).fit(X, Y).W_
    low = AffineAligner(fit_intercept=False, rank=2).fit(X, Y)
    U, _, Vt = np.linalg.svd(W)
    naive = W @ Vt[:2].T @ Vt[:2]
    assert np.linalg.matrix_rank(low.W_) == 2
    assert np.sum((X @ low.W_ - Y) ** 2) <= np.sum((X @ naive - Y) ** 2) + 1e-9


def test_the_intercept_choice_is_fit_intercept_(rng, tmp_path):
    """The parameter is fit_intercept, so its fitted choice is fit_intercept_; center_
    stays an alias, and models that saved the choice as center_ still load and map."""
    import pickle

    import skops.io

    from sklearn_compat.io import load_model, model_fingerprint

    X = rng.normal(size=(300, 5)) + 3.0
    Y = X @ rng.normal(size=(5, 4)) + 2.0 + 0.1 * rng.normal(size=(300, 4))
    auto = AffineAligner().fit(X, Y)
    assert isinstance(auto.fit_intercept_, bool) and auto.center_ is auto.fit_intercept_
    assert AffineAligner(fit_intercept=False).fit(X, Y).fit_intercept_ is False
    chosen = model_fingerprint(auto)["chosen"]
    assert chosen["fit_intercept_"] == auto.fit_intercept_ and "center_" not in chosen
    assert not hasattr(AffineAligner(), "center_")
    # A model saved by an earlier release: its state holds center_ only.
    for chose in (True, False):
        old = AffineAligner(fit_intercept=chose).fit(X, Y).set_params(fit_intercept="auto")
        old.__dict__["center_"] = old.__dict__.pop("fit_intercept_")
        skops.io.dump(old, tmp_path / "old.skops")
        for loaded in (pickle.loads(pickle.dumps(old)), load_model(tmp_path / "old.skops")):
            assert loaded.fit_intercept_ is chose and loaded.center_ is chose
            assert "center_" not in vars(loaded)
            np.testing.assert_allclose(loaded.transform(X[:5]), X[:5] @ old.W_ + old.bias_)
            # partial_fit continues with the choice the old model made.
            loaded.partial_fit(X[:50], Y[:50])
            assert loaded.fit_intercept_ is chose

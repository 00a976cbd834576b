"""OrthogonalProcrustesAligner: planted maps, references, weights, streaming, bad input."""

import numpy as np
import pandas as pd
import pytest
import scipy.linalg
import torch
from scipy.spatial.transform import Rotation
from scipy.stats import ortho_group
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat._core import moments as _moments
from sklearn_compat._core.moments import compute_moments
from sklearn_compat.procrustes import procrustes_from_cross


def _orthonormal_rows(rng, rows, cols):
    """A (rows, cols) matrix with orthonormal rows (rows <= cols)."""
    return np.linalg.qr(rng.normal(size=(cols, rows)))[0].T


def _planted(rng, n=300, d=6, det=1.0):
    Q = ortho_group.rvs(d, random_state=int(rng.integers(1 << 30)))
    if np.sign(np.linalg.det(Q)) != det:
        Q[:, 0] *= -1
    return rng.normal(size=(n, d)), Q


# --------------------------------------------------------------------- exact recovery
def test_recovers_scaled_rotated_shifted_map_with_center_and_scale(rng):
    X, Q = _planted(rng)
    X = X + rng.normal(size=X.shape[1]) * 5
    s, t = 2.5, rng.normal(size=X.shape[1]) * 3
    Y = s * X @ Q + t
    aligner = OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y)
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-10)
    assert aligner.scale_ == pytest.approx(s, rel=1e-12)
    np.testing.assert_allclose(aligner.mean_x_, X.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(aligner.mean_y_, Y.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(aligner.transform(X), Y, atol=1e-10)
    assert aligner.score(X, Y) == 1.0


def test_uncentred_map_has_no_offset_and_unit_scale(rng):
    X, Q = _planted(rng)
    aligner = OrthogonalProcrustesAligner(center=False, scale=False).fit(X, X @ Q + 1.0)
    assert aligner.scale_ == 1.0
    np.testing.assert_array_equal(aligner.mean_x_, np.zeros(6))
    np.testing.assert_array_equal(aligner.mean_y_, np.zeros(6))
    np.testing.assert_allclose(aligner.transform(X), X @ aligner.W_, atol=1e-12)


@pytest.mark.parametrize("center", [False, True])
def test_spread_scale_matches_the_two_spreads(rng, center):
    X = rng.normal(size=(120, 5)) * 0.2 + 3.0
    Y = rng.normal(size=(120, 7)) * 4.0 - 1.0
    aligner = OrthogonalProcrustesAligner(center=center, scale="spread").fit(X, Y)
    Xc = X - X.mean(axis=0) if center else X
    Yc = Y - Y.mean(axis=0) if center else Y
    assert aligner.scale == "spread"
    assert aligner.scale_ == pytest.approx(np.linalg.norm(Yc) / np.linalg.norm(Xc), rel=1e-12)
    # The mapped rows spread around Y's mean exactly as much as Y's rows do (W keeps
    # norms when d_x <= d_y).
    Z = aligner.transform(X)
    spread = np.linalg.norm(Z - Z.mean(axis=0)) if center else np.linalg.norm(Z)
    assert spread == pytest.approx(np.linalg.norm(Yc), rel=1e-10)


def test_spread_scale_recovers_a_planted_similarity_map(rng):
    X, Q = _planted(rng)
    X = X + 4.0
    Y = 0.25 * X @ Q + 7.0
    aligner = OrthogonalProcrustesAligner().fit(X, Y)
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-10)
    assert aligner.scale_ == pytest.approx(0.25, rel=1e-12)
    np.testing.assert_allclose(aligner.transform(X), Y, atol=1e-10)


def test_spread_scale_keeps_a_narrow_space_off_the_target_mean(rng):
    # A centred map of a narrow (anisotropic) space into a wide one: with s = 1 every
    # mapped row lands near Y's mean and cosine retrieval collapses; matching the
    # spreads keeps the mean's weight as in Y.
    from sklearn_compat.metrics import paired_topk_accuracy

    n, d = 600, 16
    Q = ortho_group.rvs(d, random_state=3)
    latent = rng.normal(size=(n, d))
    Y = latent + 6.0 * np.ones(d) / np.sqrt(d) * 3
    X = 0.05 * (latent @ Q.T + 0.3 * rng.normal(size=(n, d))) + 1.0
    unit = OrthogonalProcrustesAligner(scale=False).fit(X[:400], Y[:400])
    spread = OrthogonalProcrustesAligner().fit(X[:400], Y[:400])
    top1_unit = paired_topk_accuracy(unit.transform(X[400:]), Y[400:])
    top1_spread = paired_topk_accuracy(spread.transform(X[400:]), Y[400:])
    assert top1_unit < 0.2
    assert top1_spread > 0.6


def test_scale_without_center_is_least_squares_optimal(rng):
    X, Q = _planted(rng)
    Y = 0.3 * X @ Q + 0.05 * rng.normal(size=X.shape)
    aligner = OrthogonalProcrustesAligner(center=False, scale=True).fit(X, Y)
    XW = X @ aligner.W_
    # For fixed W, the best s of ||s X W - Y|| is <XW, Y> / ||XW||^2.
    assert aligner.scale_ == pytest.approx(np.sum(XW * Y) / np.sum(XW * XW), rel=1e-10)


def test_singular_values_are_those_of_the_centred_cross_product(rng):
    X = rng.normal(size=(100, 5)) + 3
    Y = rng.normal(size=(100, 4)) - 2
    aligner = OrthogonalProcrustesAligner(center=True).fit(X, Y)
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    expected = np.linalg.svd(Xc.T @ Yc, compute_uv=False)
    np.testing.assert_allclose(aligner.singular_values_, expected, rtol=1e-10)
    assert aligner.singular_values_.shape == (4,)


# --------------------------------------------------------------------- reflections
def test_reflection_found_when_allowed(rng):
    X, Q = _planted(rng, det=-1.0)
    aligner = OrthogonalProcrustesAligner().fit(X, X @ Q)
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-10)
    assert np.linalg.det(aligner.W_) == pytest.approx(-1.0)


def test_rotation_only_matches_kabsch_reference(rng):
    # scipy's Rotation.align_vectors solves the 3-d rotation-only problem independently.
    X, Q = _planted(rng, n=50, d=3, det=-1.0)
    Y = X @ Q + 0.01 * rng.normal(size=X.shape)
    aligner = OrthogonalProcrustesAligner(center=False, allow_reflection=False).fit(X, Y)
    assert np.linalg.det(aligner.W_) == pytest.approx(1.0)
    rotation, _ = Rotation.align_vectors(Y, X)  # y_i ~ R x_i, i.e. Y ~ X R^T
    np.testing.assert_allclose(aligner.W_, rotation.as_matrix().T, atol=1e-8)


def test_rotation_only_changes_nothing_for_a_proper_rotation(rng):
    X, Q = _planted(rng, det=1.0)
    a = OrthogonalProcrustesAligner(allow_reflection=False).fit(X, X @ Q)
    np.testing.assert_allclose(a.W_, Q, atol=1e-10)


# --------------------------------------------------------------------- rectangular
def test_rectangular_narrow_to_wide_recovers_orthonormal_rows(rng):
    X = rng.normal(size=(200, 5))
    W = _orthonormal_rows(rng, 5, 8)
    aligner = OrthogonalProcrustesAligner().fit(X, X @ W)
    assert aligner.W_.shape == (5, 8)
    np.testing.assert_allclose(aligner.W_, W, atol=1e-10)
    np.testing.assert_allclose(aligner.W_ @ aligner.W_.T, np.eye(5), atol=1e-12)
    # Norms are kept.
    np.testing.assert_allclose(
        np.linalg.norm(aligner.transform(X), axis=1), np.linalg.norm(X, axis=1), rtol=1e-10
    )


def test_rectangular_wide_to_narrow_recovers_projection(rng):
    Z = rng.normal(size=(200, 4))
    P = _orthonormal_rows(rng, 4, 9).T  # (9, 4), orthonormal columns
    X = Z @ P.T  # X lies in the span of P
    aligner = OrthogonalProcrustesAligner().fit(X, Z)
    np.testing.assert_allclose(aligner.W_, P, atol=1e-10)
    np.testing.assert_allclose(aligner.W_.T @ aligner.W_, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(aligner.transform(X), Z, atol=1e-10)


@pytest.mark.parametrize("shape", [(4, 7), (7, 4)])
def test_rectangular_equals_zero_padded_square_problem(rng, shape):
    d_x, d_y = shape
    d = max(shape)
    X = rng.normal(size=(100, d_x))
    Y = rng.normal(size=(100, d_y))
    aligner = OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y)
    Xp = np.hstack([X, np.zeros((100, d - d_x))])
    Yp = np.hstack([Y, np.zeros((100, d - d_y))])
    padded = OrthogonalProcrustesAligner(center=True, scale=True).fit(Xp, Yp)
    np.testing.assert_allclose(aligner.transform(X), padded.transform(Xp)[:, :d_y], atol=1e-10)
    assert aligner.scale_ == pytest.approx(padded.scale_, rel=1e-10)


# --------------------------------------------------------------------- references
@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_agrees_with_scipy_orthogonal_procrustes(rng, dtype, center):
    X = rng.normal(size=(150, 7)).astype(dtype)
    Y = rng.normal(size=(150, 7)).astype(dtype)
    X64, Y64 = X.astype(np.float64), Y.astype(np.float64)
    if center:
        X64, Y64 = X64 - X64.mean(axis=0), Y64 - Y64.mean(axis=0)
    R, _ = scipy.linalg.orthogonal_procrustes(X64, Y64)
    aligner = OrthogonalProcrustesAligner(center=center).fit(X, Y)
    np.testing.assert_allclose(aligner.W_, R, atol=1e-10 if dtype == np.float64 else 1e-5)


def test_procrustes_from_cross_signs_and_orthogonality(rng):
    M = rng.normal(size=(5, 5))
    W, S, signs = procrustes_from_cross(M, allow_reflection=False)
    assert np.linalg.det(W) == pytest.approx(1.0)
    np.testing.assert_allclose(W.T @ W, np.eye(5), atol=1e-12)
    np.testing.assert_allclose(S, np.linalg.svd(M, compute_uv=False), rtol=1e-12)
    # The rotation maximises trace(W^T M) over rotations: its value is sum(signs * S).
    assert np.trace(W.T @ M) == pytest.approx(np.dot(signs, S))


# --------------------------------------------------------------------- weights
@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("scale", [True, "spread"])
def test_integer_weights_equal_repeated_rows(rng, center, scale):
    X = rng.normal(size=(40, 5)) + 2
    Y = rng.normal(size=(40, 6)) - 1
    w = rng.integers(0, 4, size=40)
    weighted = OrthogonalProcrustesAligner(center=center, scale=scale).fit(X, Y, w)
    repeated = OrthogonalProcrustesAligner(center=center, scale=scale).fit(
        np.repeat(X, w, axis=0), np.repeat(Y, w, axis=0)
    )
    for attr in ("W_", "mean_x_", "mean_y_", "singular_values_"):
        np.testing.assert_allclose(getattr(weighted, attr), getattr(repeated, attr), atol=1e-10)
    assert weighted.scale_ == pytest.approx(repeated.scale_, rel=1e-10)


def test_weighted_fit_matches_closed_form(rng):
    X = rng.normal(size=(60, 4))
    Y = rng.normal(size=(60, 4))
    w = rng.uniform(0.1, 2.0, size=60)
    aligner = OrthogonalProcrustesAligner(center=True).fit(X, Y, sample_weight=w)
    mx, my = np.average(X, axis=0, weights=w), np.average(Y, axis=0, weights=w)
    M = (X - mx).T @ (w[:, None] * (Y - my))
    U, _, Vt = np.linalg.svd(M)
    np.testing.assert_allclose(aligner.W_, U @ Vt, atol=1e-10)
    np.testing.assert_allclose(aligner.mean_x_, mx, atol=1e-12)


def test_zero_sum_weights_raise(rng):
    X = rng.normal(size=(10, 3))
    with pytest.raises(ValueError, match="at least one non-zero"):
        OrthogonalProcrustesAligner().fit(X, X, sample_weight=np.zeros(10))


def test_negative_weights_raise(rng):
    X = rng.normal(size=(10, 3))
    with pytest.raises(ValueError, match="[Nn]egative"):
        OrthogonalProcrustesAligner().fit(X, X, sample_weight=-np.ones(10))


# --------------------------------------------------------------------- partial_fit
@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("scale", [True, "spread"])
def test_partial_fit_equals_fit_on_concatenation(rng, center, weighted, scale):
    X = rng.normal(size=(90, 5)) * 3 + 10
    Y = X @ ortho_group.rvs(5, random_state=1) + rng.normal(size=(90, 5)) - 4
    w = rng.uniform(0.5, 2.0, size=90) if weighted else None
    full = OrthogonalProcrustesAligner(center=center, scale=scale).fit(X, Y, w)
    streamed = OrthogonalProcrustesAligner(center=center, scale=scale)
    for rows in np.array_split(np.arange(90), [7, 40, 41]):
        streamed.partial_fit(X[rows], Y[rows], None if w is None else w[rows])
    for attr in ("W_", "mean_x_", "mean_y_", "singular_values_"):
        np.testing.assert_allclose(getattr(streamed, attr), getattr(full, attr), atol=1e-10)
    assert streamed.scale_ == pytest.approx(full.scale_, rel=1e-12)
    assert streamed.n_samples_seen_ == full.n_samples_seen_ == 90


def test_fit_after_partial_fit_starts_over(rng):
    X, Q = _planted(rng)
    aligner = OrthogonalProcrustesAligner().partial_fit(X[:50], rng.normal(size=(50, 6)))
    aligner.fit(X, X @ Q)
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-10)
    assert aligner.n_samples_seen_ == X.shape[0]


def test_center_change_between_partial_fits_raises(rng):
    X = rng.normal(size=(20, 3))
    aligner = OrthogonalProcrustesAligner(center=False).partial_fit(X, X)
    aligner.set_params(center=True)
    with pytest.raises(ValueError, match="center was False in earlier partial_fit"):
        aligner.partial_fit(X, X)


@pytest.mark.parametrize("scale", [True, "spread"])
def test_scale_switched_on_between_partial_fits_raises(rng, scale):
    X = rng.normal(size=(20, 3))
    aligner = OrthogonalProcrustesAligner(center=True, scale=False).partial_fit(X, X)
    aligner.set_params(scale=scale)
    with pytest.raises(ValueError, match=f"scale={scale!r} needs sums of squares"):
        aligner.partial_fit(X, X)


def test_partial_fit_width_change_raises(rng):
    aligner = OrthogonalProcrustesAligner().partial_fit(rng.normal(size=(9, 3)), np.ones((9, 2)))
    with pytest.raises(ValueError, match="Y has 4 features, but .* 2 target"):
        aligner.partial_fit(rng.normal(size=(9, 3)), np.ones((9, 4)))
    with pytest.raises(ValueError, match="X has 4 features"):
        aligner.partial_fit(rng.normal(size=(9, 4)), np.ones((9, 2)))


# --------------------------------------------------------------------- numerics
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("center", [False, True])
def test_chunked_moments_agree_with_one_shot(rng, monkeypatch, center, weighted):
    X = rng.normal(size=(103, 4)) + 5
    Y = rng.normal(size=(103, 3)) - 7
    w = rng.uniform(0, 2, size=103) if weighted else None
    one_shot = compute_moments(X, Y, w, centered=center, need_gram=True, device="cpu")
    monkeypatch.setattr(_moments, "_CHUNK_ROWS", 10)
    monkeypatch.setattr(_moments, "_SHIFTED_ROWS", 7)  # shifted chunks: their own size
    monkeypatch.setattr(_moments, "_SHIFT_ROWS", 3)
    chunked = compute_moments(X, Y, w, centered=center, need_gram=True, device="cpu")
    for key, value in vars(one_shot).items():
        np.testing.assert_allclose(vars(chunked)[key], value, rtol=1e-12, atol=1e-10)
    # And both against numpy.
    w_ = np.ones(103) if w is None else w
    mx, my = np.average(X, 0, w_), np.average(Y, 0, w_)
    Xc, Yc = (X - mx, Y - my) if center else (X, Y)
    np.testing.assert_allclose(chunked.cross, Xc.T @ (w_[:, None] * Yc), rtol=1e-12)
    np.testing.assert_allclose(chunked.gram_x, Xc.T @ (w_[:, None] * Xc), rtol=1e-12)
    np.testing.assert_allclose(chunked.sq_x, np.sum(w_[:, None] * Xc**2), rtol=1e-12)
    np.testing.assert_allclose(chunked.mean_x, mx, rtol=1e-12)


def test_chunked_fit_equals_one_shot_fit(rng, monkeypatch):
    X = rng.normal(size=(100, 5)) + 3
    Y = rng.normal(size=(100, 5))
    one_shot = OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y)
    monkeypatch.setattr(_moments, "_CHUNK_ROWS", 16)
    monkeypatch.setattr(_moments, "_SHIFTED_ROWS", 16)
    chunked = OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y)
    np.testing.assert_allclose(chunked.W_, one_shot.W_, atol=1e-10)
    assert chunked.scale_ == pytest.approx(one_shot.scale_, rel=1e-12)


def test_float32_with_large_common_offset_matches_float64(rng, monkeypatch):
    # Mean 1e3, spread 1: X^T Y - n m_x m_y^T would cancel ~7 digits in float32.
    monkeypatch.setattr(_moments, "_CHUNK_ROWS", 1000)  # several chunks and a merge
    monkeypatch.setattr(_moments, "_SHIFTED_ROWS", 700)
    X = rng.normal(size=(3000, 8)) + 1e3
    Q = ortho_group.rvs(8, random_state=3)
    Y = (X - 1e3) @ Q + 0.3 * rng.normal(size=X.shape) - 2e3
    ref = OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y)
    got = OrthogonalProcrustesAligner(center=True, scale=True).fit(
        X.astype(np.float32), Y.astype(np.float32)
    )
    np.testing.assert_allclose(got.W_, ref.W_, atol=2e-4)
    assert got.scale_ == pytest.approx(ref.scale_, rel=1e-4)
    np.testing.assert_allclose(got.mean_x_, ref.mean_x_, rtol=1e-6)
    np.testing.assert_allclose(got.singular_values_, ref.singular_values_, rtol=1e-4)


def test_float32_stays_float32(rng):
    X = rng.normal(size=(50, 4)).astype(np.float32)
    Y = rng.normal(size=(50, 3)).astype(np.float32)
    aligner = OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y)
    Z = aligner.transform(X)
    assert Z.dtype == np.float32
    assert aligner.inverse_transform(Z).dtype == np.float32
    assert aligner.W_.dtype == np.float64  # fitted state is float64
    ref = OrthogonalProcrustesAligner(center=True, scale=True).fit(
        X.astype(np.float64), Y.astype(np.float64)
    )
    np.testing.assert_allclose(aligner.W_, ref.W_, atol=1e-5)
    assert aligner.transform(X.astype(np.float64)).dtype == np.float64


# --------------------------------------------------------------------- inverse_transform
def test_inverse_transform_square_is_exact(rng):
    X = rng.normal(size=(80, 6)) + 1
    Y = rng.normal(size=(80, 6))
    aligner = OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y)
    np.testing.assert_allclose(aligner.inverse_transform(aligner.transform(X)), X, atol=1e-10)
    np.testing.assert_allclose(aligner.transform(aligner.inverse_transform(Y)), Y, atol=1e-10)


def test_inverse_transform_narrow_to_wide_recovers_x(rng):
    X = rng.normal(size=(80, 4)) + 1
    Y = rng.normal(size=(80, 7))
    aligner = OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y)
    np.testing.assert_allclose(aligner.inverse_transform(aligner.transform(X)), X, atol=1e-10)


def test_inverse_transform_wide_to_narrow_recovers_y(rng):
    X = rng.normal(size=(80, 7))
    Y = rng.normal(size=(80, 4)) + 2
    aligner = OrthogonalProcrustesAligner(center=True).fit(X, Y)
    np.testing.assert_allclose(aligner.transform(aligner.inverse_transform(Y)), Y, atol=1e-10)


def test_inverse_transform_checks_width(rng):
    aligner = OrthogonalProcrustesAligner().fit(rng.normal(size=(20, 3)), rng.normal(size=(20, 5)))
    with pytest.raises(ValueError, match="Z has 3 features, but .* space of 5 features"):
        aligner.inverse_transform(rng.normal(size=(4, 3)))


# --------------------------------------------------------------------- inputs
def test_y_keyword_alias(rng):
    X, Q = _planted(rng)
    a = OrthogonalProcrustesAligner().fit(X, y=X @ Q)
    np.testing.assert_allclose(a.W_, Q, atol=1e-10)
    b = OrthogonalProcrustesAligner().partial_fit(X, y=X @ Q)
    np.testing.assert_allclose(b.W_, Q, atol=1e-10)
    assert a.score(X, y=X @ Q) == 1.0
    with pytest.raises(TypeError, match="not both"):
        OrthogonalProcrustesAligner().fit(X, X, y=X)


def test_torch_tensor_inputs(rng):
    X, Q = _planted(rng)
    Xt = torch.from_numpy(X).float().requires_grad_(True)
    Yt = torch.from_numpy(X @ Q).float()
    aligner = OrthogonalProcrustesAligner().fit(Xt, Yt)
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-5)
    Z = aligner.transform(Xt)
    assert isinstance(Z, np.ndarray) and Z.dtype == np.float32
    half = aligner.transform(Xt.detach().to(torch.bfloat16))
    assert half.dtype == np.float32  # numpy has no bfloat16: widened
    assert aligner.score(Xt, Yt) == 1.0


@pytest.mark.parametrize("center", [False, True])
def test_tensor_pair_equals_numpy_pair(rng, center):
    X = rng.normal(size=(70, 5)) + 2
    Y = rng.normal(size=(70, 4))
    w = rng.uniform(0.5, 2, size=70)
    ref = OrthogonalProcrustesAligner(center=center, scale=True).fit(X, Y, w)
    got = OrthogonalProcrustesAligner(center=center, scale=True).fit(
        torch.from_numpy(X), torch.from_numpy(Y), torch.from_numpy(w)
    )
    for attr in ("W_", "mean_x_", "mean_y_", "singular_values_"):
        np.testing.assert_allclose(getattr(got, attr), getattr(ref, attr), atol=1e-12)
    assert got.n_features_in_ == 5 and got.n_targets_ == 4
    # Mixed streams: tensors, then arrays, equal one fit.
    mixed = OrthogonalProcrustesAligner(center=center, scale=True)
    mixed.partial_fit(torch.from_numpy(X[:30]), torch.from_numpy(Y[:30]), w[:30])
    mixed.partial_fit(X[30:], Y[30:], w[30:])
    np.testing.assert_allclose(mixed.W_, ref.W_, atol=1e-12)


def test_tensor_dtypes_follow_array_rules(rng):
    X = torch.from_numpy(rng.normal(size=(30, 3)))
    as_int = OrthogonalProcrustesAligner().fit(X.round().to(torch.int64), X)
    assert as_int.W_.shape == (3, 3)
    half = OrthogonalProcrustesAligner().fit(X.half(), X.half())
    assert half.transform(X.half()).dtype == np.float32
    one_column = OrthogonalProcrustesAligner().fit(X, X[:, 0])
    assert one_column.n_targets_ == 1


def test_tensor_bad_input_raises(rng):
    X = torch.from_numpy(rng.normal(size=(10, 3)))
    aligner = OrthogonalProcrustesAligner()
    bad = X.clone()
    bad[2, 2] = float("nan")
    with pytest.raises(ValueError, match="Input X contains NaN"):
        aligner.fit(bad, X)
    bad[2, 2] = float("inf")
    with pytest.raises(ValueError, match="Input Y contains infinity"):
        aligner.fit(X, bad)
    with pytest.raises(ValueError, match="inconsistent numbers of samples: \\[10, 9\\]"):
        aligner.fit(X, X[:9])
    with pytest.raises(ValueError, match="Expected a 2D tensor for X, got a 3D tensor"):
        aligner.fit(X[None], X)
    with pytest.raises(ValueError, match="0 sample\\(s\\)"):
        aligner.fit(X[:0], X[:0])
    with pytest.raises(ValueError, match="Complex data not supported"):
        aligner.fit(X.to(torch.complex64), X)
    aligner.fit(X, X)
    with pytest.raises(ValueError, match="X has 2 features, but .* expecting 3"):
        aligner.partial_fit(X[:, :2], X)
    with pytest.raises(ValueError, match="Y has 2 features, but .* 3 target"):
        aligner.partial_fit(X, X[:, :2])


def test_tensor_fit_forgets_dataframe_feature_names(rng):
    X = rng.normal(size=(20, 3))
    aligner = OrthogonalProcrustesAligner().fit(pd.DataFrame(X, columns=list("abc")), X)
    assert hasattr(aligner, "feature_names_in_")
    aligner.fit(torch.from_numpy(X), torch.from_numpy(X))
    assert not hasattr(aligner, "feature_names_in_")


def test_pandas_inputs_and_pandas_output_names(rng):
    X, Q = _planted(rng, d=4)
    Xdf = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    Ydf = pd.DataFrame(X @ Q, columns=["old0", "old1", "old2", "old3"])
    aligner = OrthogonalProcrustesAligner().set_output(transform="pandas").fit(Xdf, Ydf)
    np.testing.assert_array_equal(aligner.feature_names_in_, ["a", "b", "c", "d"])
    out = aligner.transform(Xdf)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == ["old0", "old1", "old2", "old3"]
    np.testing.assert_allclose(out.to_numpy(), Ydf.to_numpy(), atol=1e-10)
    assert list(out.index) == list(Xdf.index)


def test_in_a_pipeline(rng):
    X, Q = _planted(rng)
    Xs = X * 4 + 2
    pipe = make_pipeline(StandardScaler(), OrthogonalProcrustesAligner(center=True, scale=True))
    pipe.fit(Xs, X @ Q)
    manual = OrthogonalProcrustesAligner(center=True, scale=True).fit(
        StandardScaler().fit_transform(Xs), X @ Q
    )
    np.testing.assert_allclose(pipe[-1].W_, manual.W_, atol=1e-12)
    assert pipe.score(Xs, X @ Q) == 1.0


# --------------------------------------------------------------------- bad input
@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("center", [False, True])
def test_nan_and_inf_raise(rng, bad, center):
    X = rng.normal(size=(20, 3))
    Xbad = X.copy()
    Xbad[4, 1] = bad
    word = "NaN" if np.isnan(bad) else "infinity"
    aligner = OrthogonalProcrustesAligner(center=center)
    with pytest.raises(ValueError, match=f"Input X contains {word}"):
        aligner.fit(Xbad, X)
    with pytest.raises(ValueError, match=f"Input Y contains {word}"):
        aligner.fit(X, Xbad)
    with pytest.raises(ValueError, match=f"Input X contains {word}"):
        aligner.fit(X, X).transform(Xbad)


def test_nan_in_later_partial_fit_leaves_model_unchanged(rng):
    X = rng.normal(size=(20, 3))
    aligner = OrthogonalProcrustesAligner().partial_fit(X, X)
    W = aligner.W_.copy()
    Xbad = X.copy()
    Xbad[0, 0] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        aligner.partial_fit(Xbad, X)
    np.testing.assert_array_equal(aligner.W_, W)
    assert aligner.n_samples_seen_ == 20


@pytest.mark.parametrize("scale", [1e-25, 1e20, 1e30])
def test_float32_beyond_its_product_range_is_fitted_in_float64(rng, scale):
    # float32 products overflow above ~1e19 and underflow below ~1e-19: the statistics
    # fall back to float64 and the planted rotation is recovered (it used to be off by
    # 1.48 at 1e-25, and an error at 1e20).
    X = rng.normal(size=(200, 8))
    Q = ortho_group.rvs(8, random_state=0)
    Xs, Ys = (X * scale).astype(np.float32), (X @ Q * scale).astype(np.float32)
    aligner = OrthogonalProcrustesAligner().fit(Xs, Ys)
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-5)
    assert aligner.transform(Xs).dtype == np.float32
    assert aligner.score(Xs, Ys) == 1.0


@pytest.mark.parametrize("scale, what", [(1e200, "overflow float64"), (1e-200, "too small")])
def test_float64_beyond_its_product_range_is_refused(rng, scale, what):
    X = rng.normal(size=(20, 3)) * scale
    with pytest.raises(ValueError, match=what) as info:
        OrthogonalProcrustesAligner().fit(X, X)
    assert "pass float64" not in str(info.value) and "rescale" in str(info.value).lower()


def test_row_count_mismatch_raises(rng):
    with pytest.raises(ValueError, match="inconsistent numbers of samples: \\[10, 9\\]"):
        OrthogonalProcrustesAligner().fit(rng.normal(size=(10, 3)), rng.normal(size=(9, 3)))


def test_missing_y_raises(rng):
    with pytest.raises(ValueError, match="requires y to be passed.*pass Y"):
        OrthogonalProcrustesAligner().fit(rng.normal(size=(10, 3)))


def test_wrong_width_at_transform_raises(rng):
    aligner = OrthogonalProcrustesAligner().fit(rng.normal(size=(10, 3)), rng.normal(size=(10, 3)))
    with pytest.raises(ValueError, match="X has 4 features, but .* expecting 3 features"):
        aligner.transform(rng.normal(size=(5, 4)))


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "gpu"])
def test_unknown_device_raises(rng, device):
    X = rng.normal(size=(10, 3))
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"):
        OrthogonalProcrustesAligner(device=device).fit(X, X)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_unavailable_cuda_raises_at_fit(rng):
    X = rng.normal(size=(10, 3))
    with pytest.raises(ValueError, match="device='cuda' is not available"):
        OrthogonalProcrustesAligner(device="cuda").fit(X, X)


def test_empty_input_raises():
    with pytest.raises(ValueError, match="0 sample"):
        OrthogonalProcrustesAligner().fit(np.empty((0, 3)), np.empty((0, 3)))
    with pytest.raises(ValueError, match="0 feature"):
        OrthogonalProcrustesAligner().fit(np.empty((5, 0)), np.ones((5, 2)))


def test_non_numeric_input_raises():
    with pytest.raises(ValueError, match="could not convert|Unable to convert"):
        OrthogonalProcrustesAligner().fit([["a", "b"], ["c", "d"]], np.ones((2, 2)))


@pytest.mark.parametrize(
    "param, value", [("center", "yes"), ("scale", 1.5), ("allow_reflection", None)]
)
def test_bad_parameters_raise(rng, param, value):
    X = rng.normal(size=(10, 3))
    with pytest.raises(ValueError, match=f"The '{param}' parameter"):
        OrthogonalProcrustesAligner(**{param: value}).fit(X, X)


def test_torch_device_object_is_accepted(rng):
    X, Q = _planted(rng)
    aligner = OrthogonalProcrustesAligner(device=torch.device("cpu")).fit(X, X @ Q)
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-10)

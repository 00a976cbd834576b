"""WhitenedProcrustesAligner: planted maps recovered exactly, reference formulas, invariances."""

import numpy as np
import pytest
import scipy.linalg
import torch
from scipy.stats import ortho_group

from sklearn_compat import OrthogonalProcrustesAligner, WhitenedProcrustesAligner

RAW = {"normalize": False, "center": False, "device": "cpu"}
# The whitened map itself (the default decides whitening from held-out pairs).
WHITE = {"whiten": True, "dewhiten": "target"}


def anisotropic(rng, n, d):
    """Rows whose covariance spreads over two orders of magnitude, randomly rotated."""
    Q = ortho_group.rvs(d, random_state=int(rng.integers(1 << 31)))
    return (rng.normal(size=(n, d)) * np.logspace(0, -2, d)) @ Q


def whitened(rng, n, d):
    """Rows with ``X^T X = I`` exactly."""
    return np.linalg.qr(rng.normal(size=(n, d)))[0]


@pytest.mark.parametrize("d_x, d_y", [(6, 6), (8, 5), (5, 8)])
def test_recovers_any_full_rank_map_on_whitened_data(rng, d_x, d_y):
    X = whitened(rng, 200, d_x)
    A = rng.normal(size=(d_x, d_y))
    aligner = WhitenedProcrustesAligner(**RAW, **WHITE).fit(X, X @ A)
    # Exact whenever Y determines A: d_x <= d_y, or the planted A has full column rank.
    np.testing.assert_allclose(aligner.W_, A, atol=1e-10)
    assert aligner.singular_values_ == pytest.approx(np.ones(min(d_x, d_y)))


def test_recovers_a_non_orthogonal_map_that_procrustes_cannot(rng):
    X = anisotropic(rng, 400, 7)
    A = rng.normal(size=(7, 7))
    Y = X @ A + 2.0
    whitened_fit = WhitenedProcrustesAligner(normalize=False, center=True, **WHITE).fit(X, Y)
    np.testing.assert_allclose(whitened_fit.W_, A, atol=1e-8)
    np.testing.assert_allclose(whitened_fit.transform(X), Y, atol=1e-8)
    procrustes = OrthogonalProcrustesAligner(center=True).fit(X, Y)
    assert np.abs(procrustes.transform(X) - Y).max() > 0.1


@pytest.mark.parametrize("rank", [1, 3])
def test_reduced_rank_recovers_a_map_of_that_rank(rng, rank):
    X = anisotropic(rng, 300, 8)
    A = rng.normal(size=(8, rank)) @ rng.normal(size=(rank, 6))
    aligner = WhitenedProcrustesAligner(n_components=rank, **RAW, **WHITE).fit(X, X @ A)
    assert aligner.n_components_ == rank
    np.testing.assert_allclose(aligner.W_, A, atol=1e-8)
    assert np.linalg.matrix_rank(aligner.W_, tol=1e-8) == rank
    # Keeping fewer directions than the map has loses part of it.
    short = WhitenedProcrustesAligner(n_components=rank, **RAW, **WHITE).fit(
        X, X @ (A + np.eye(8, 6))
    )
    assert np.abs(short.transform(X) - X @ (A + np.eye(8, 6))).max() > 1e-3


def test_matches_the_steps_written_out(rng):
    """Whiten, SVD, re-weight, de-whiten (source), reduce: the paper's formulas in numpy."""
    X, Y = anisotropic(rng, 300, 6), anisotropic(rng, 300, 6) + 0.1 * rng.normal(size=(300, 6))
    Y = Y + X @ rng.normal(size=(6, 6))

    def power(C, p):
        w, V = np.linalg.eigh(C)
        return (V * w**p) @ V.T

    Cx, Cy = X.T @ X, Y.T @ Y
    U, S, Vt = np.linalg.svd(power(Cx, -0.5) @ X.T @ Y @ power(Cy, -0.5))
    k = 4
    U, S, V = U[:, :k], S[:k], Vt[:k].T
    source = power(Cx, -0.5) @ U * S**0.5 @ (U.T @ power(Cx, 0.5) @ U)
    expected = source @ V.T
    aligner = WhitenedProcrustesAligner(
        whiten=True, reweight=0.5, dewhiten="source", n_components=k, **RAW
    ).fit(X, Y)
    np.testing.assert_allclose(aligner.W_, expected, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(aligner.singular_values_, S, rtol=1e-10)


def test_without_whitening_it_is_procrustes(rng):
    X, Y = anisotropic(rng, 200, 5), anisotropic(rng, 200, 5)
    plain = WhitenedProcrustesAligner(whiten=False, **RAW).fit(X, Y)
    procrustes = OrthogonalProcrustesAligner(center=False).fit(X, Y)
    np.testing.assert_allclose(plain.W_, procrustes.W_, atol=1e-12)


def test_normalize_makes_the_map_blind_to_row_norms(rng):
    X = anisotropic(rng, 200, 6)
    Y = X @ rng.normal(size=(6, 4))
    scales = rng.uniform(0.1, 10, size=(200, 1))
    a = WhitenedProcrustesAligner(normalize=True, center=True, **WHITE).fit(X, Y)
    b = WhitenedProcrustesAligner(normalize=True, center=True, **WHITE).fit(
        X * scales, Y * scales[::-1]
    )
    np.testing.assert_allclose(a.W_, b.W_, atol=1e-10)
    np.testing.assert_allclose(a.transform(X), b.transform(X * 3.0), atol=1e-10)


def test_integer_weights_equal_repeated_rows(rng):
    X, Y = anisotropic(rng, 60, 5), anisotropic(rng, 60, 4)
    w = rng.integers(0, 4, size=60)
    weighted = WhitenedProcrustesAligner().fit(X, Y, sample_weight=w)
    repeated = WhitenedProcrustesAligner().fit(np.repeat(X, w, 0), np.repeat(Y, w, 0))
    np.testing.assert_allclose(weighted.W_, repeated.W_, atol=1e-9)
    np.testing.assert_allclose(weighted.mean_y_, repeated.mean_y_, atol=1e-12)


def test_torch_float32_input_keeps_dtype_and_agrees(rng):
    X, Y = anisotropic(rng, 200, 6), anisotropic(rng, 200, 6)
    reference = WhitenedProcrustesAligner().fit(X, Y)
    aligner = WhitenedProcrustesAligner().fit(
        torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(Y, dtype=torch.float32)
    )
    out = aligner.transform(torch.as_tensor(X[:5], dtype=torch.float32))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, reference.transform(X[:5]), atol=1e-3)


def test_fewer_rows_than_features_is_no_error(rng):
    X, Y = rng.normal(size=(5, 20)), rng.normal(size=(5, 12))
    aligner = WhitenedProcrustesAligner(**RAW, **WHITE).fit(X, Y)
    # Five pairs determine the map on their span exactly.
    np.testing.assert_allclose(aligner.transform(X), Y, atol=1e-8)
    assert scipy.linalg.norm(aligner.W_) < 1e3


def test_bad_parameters_are_refused(rng):
    X = rng.normal(size=(20, 3))
    with pytest.raises(ValueError, match="dewhiten"):
        WhitenedProcrustesAligner(dewhiten="none").fit(X, X)
    with pytest.raises(ValueError, match="n_components"):
        WhitenedProcrustesAligner(n_components=0).fit(X, X)

"""Linear CKA and SVCCA on planted cases, against direct numpy formulas."""

import numpy as np
import pytest
import torch

from sklearn_compat.metrics import linear_cka, svcca


def _gram_cka(X, Y):
    """CKA as normalised HSIC of the n x n linear kernels (Kornblith et al., 2019, eq. 4)."""
    n = X.shape[0]
    H = np.eye(n) - 1.0 / n
    K, L = H @ X @ X.T @ H, H @ Y @ Y.T @ H
    return np.sum(K * L) / (np.linalg.norm(K) * np.linalg.norm(L))


def _covariance_cca(X, Y):
    """Mean canonical correlation from covariances: eigenvalues of Sxx^-1 Sxy Syy^-1 Syx."""
    X, Y = X - X.mean(0), Y - Y.mean(0)
    Sxx, Syy, Sxy = X.T @ X, Y.T @ Y, X.T @ Y
    squared = np.linalg.eigvals(np.linalg.solve(Sxx, Sxy) @ np.linalg.solve(Syy, Sxy.T))
    squared = np.sort(squared.real)[::-1][: min(X.shape[1], Y.shape[1])]
    return np.sqrt(np.clip(squared, 0, 1)).mean()


@pytest.fixture
def related_pair():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 10)) * np.linspace(3, 0.5, 10)
    Y = np.tanh(X @ rng.normal(size=(10, 7))) + 0.3 * rng.normal(size=(150, 7))
    return X, Y


def test_linear_cka_agrees_with_the_gram_formula(related_pair):
    X, Y = related_pair
    got = linear_cka(X, Y)
    assert 0.2 < got < 0.95
    assert got == pytest.approx(_gram_cka(X, Y), abs=1e-10)
    assert linear_cka(Y, X) == pytest.approx(got, abs=1e-12)


def test_linear_cka_invariances(related_pair):
    X, Y = related_pair
    rng = np.random.default_rng(1)
    rotation = np.linalg.qr(rng.normal(size=(10, 10)))[0]
    base = linear_cka(X, Y)
    assert linear_cka(X, X) == pytest.approx(1.0, abs=1e-12)
    assert linear_cka(X @ rotation, Y) == pytest.approx(base, abs=1e-10)
    assert linear_cka(1e-8 * X + 5e-8, 1e8 * Y) == pytest.approx(base, abs=1e-10)
    # Float32 and torch inputs give the same value.
    tensor = torch.from_numpy(X.astype(np.float32))
    assert linear_cka(tensor, Y) == pytest.approx(base, abs=1e-5)
    # Not invariant to an anisotropic rescaling (CKA is not a CCA).
    assert abs(linear_cka(X * np.linspace(1, 20, 10), Y) - base) > 0.01
    assert linear_cka(X, rng.normal(size=(150, 7))) < 0.15


def test_svcca_agrees_with_covariance_cca(related_pair):
    X, Y = related_pair
    got = svcca(X, Y, keep_variance=1.0)
    assert got == pytest.approx(_covariance_cca(X, Y), abs=1e-8)
    # Any invertible linear map of one side leaves it unchanged; identical spaces give 1.
    mixing = np.random.default_rng(2).normal(size=(10, 10))
    assert svcca(X @ mixing + 3.0, Y, keep_variance=1.0) == pytest.approx(got, abs=1e-8)
    assert svcca(X, X) == pytest.approx(1.0, abs=1e-10)


def test_svcca_keeps_the_leading_directions():
    rng = np.random.default_rng(3)
    signal = rng.normal(size=(400, 3))
    X = np.hstack([10 * signal, 0.01 * rng.normal(size=(400, 20))])
    Y = np.hstack([10 * signal @ rng.normal(size=(3, 3)), 0.01 * rng.normal(size=(400, 20))])
    # The low-variance noise directions are dropped at 0.99 and correlate by chance at 1.0.
    assert svcca(X, Y) == pytest.approx(1.0, abs=1e-6)
    assert svcca(X, Y, keep_variance=1.0) < 0.5


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda X: linear_cka(X, X[:-1]), "same number of rows"),
        (lambda X: linear_cka(np.ones((5, 3)), X[:5]), "X has no variance"),
        (lambda X: svcca(X, X, keep_variance=0), r"keep_variance must be a number in \(0, 1\]"),
        (lambda X: linear_cka(X[:1], X[:1]), "minimum of 2"),
    ],
)
def test_bad_input(call, message):
    X = np.random.default_rng(4).normal(size=(20, 3))
    with pytest.raises(ValueError, match=message):
        call(X)

"""What the Procrustes map is when d_x > d_y (docs/methods.md, "Rectangular maps").

``U V^T`` maximises ``trace(W^T X^T Y)`` over orthonormal columns; it is not the
least-squares map with orthonormal columns (unbalanced Procrustes) unless X is isotropic.
"""

import warnings

import numpy as np
import pytest

from sklearn_compat import OrthogonalProcrustesAligner, WhitenedProcrustesAligner

from _helpers import planted_pair

PLAIN = {"center": False, "scale": False}


@pytest.fixture
def anisotropic_pair():
    rng = np.random.default_rng(0)
    X, Y, R = planted_pair(rng, 200, 16, 7, scales=np.geomspace(3.0, 0.3, 16))
    return X, R, Y  # R has orthonormal columns


def residual(X, W, Y):
    return float(np.linalg.norm(X @ W - Y))


def test_the_map_is_not_the_least_squares_minimiser_for_anisotropic_x(anisotropic_pair):
    X, R, Y = anisotropic_pair
    W = OrthogonalProcrustesAligner(**PLAIN).fit(X, Y).W_
    np.testing.assert_allclose(W.T @ W, np.eye(7), atol=1e-12)
    assert residual(X, R, Y) < 1e-10
    assert residual(X, W, Y) > 1.0  # documented: not the minimiser here


def test_what_the_map_does_solve(anisotropic_pair):
    X, R, Y = anisotropic_pair
    W = OrthogonalProcrustesAligner(**PLAIN).fit(X, Y).W_
    # It maximises the trace criterion (R, feasible, does no better) ...
    assert np.trace(W.T @ X.T @ Y) >= np.trace(R.T @ X.T @ Y) - 1e-9
    # ... and it is the transpose of the reverse Procrustes map (Y's space into X's).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reverse = OrthogonalProcrustesAligner(**PLAIN).fit(Y, X).W_
    np.testing.assert_allclose(W, reverse.T, atol=1e-10)


def test_isotropic_x_makes_it_the_minimiser(anisotropic_pair):
    _, R, _ = anisotropic_pair
    X = np.linalg.qr(np.random.default_rng(1).normal(size=(200, 16)))[0] * 5.0
    W = OrthogonalProcrustesAligner(**PLAIN).fit(X, X @ R).W_
    np.testing.assert_allclose(W, R, atol=1e-10)


def test_whitening_recovers_the_planted_map(anisotropic_pair):
    X, R, Y = anisotropic_pair
    aligner = WhitenedProcrustesAligner(normalize=False, center=False).fit(X, Y)
    np.testing.assert_allclose(aligner.transform(X), Y, atol=1e-8)

"""Row norms and unit rows at every scale, one pass of squares where it is exact."""

import numpy as np
import pytest
import torch

from sklearn_compat._core.ranking import (
    l2_normalize,
    safe_row_norms,
    scaled_l2_normalize,
    scaled_row_norms,
)


def _rows(rng, dtype):
    base = rng.normal(size=(9, 64))
    scales = [1.0, 1e-30, 1e30, 1e-19, 1e19, 1e-42, 3.0, 1e-5, 1e5]
    if dtype == np.float64:
        scales = [1.0, 1e-300, 1e300, 1e-160, 1e160, 1e-315, 3.0, 1e-5, 1e5]
    X = (base * np.array(scales)[:, None]).astype(dtype)
    return np.vstack([X, np.zeros((1, 64), dtype=dtype)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_norms_match_a_float64_reference_at_every_scale(rng, dtype):
    X = _rows(rng, dtype)
    # Reference: each row divided by its largest entry in exact float64 arithmetic.
    ref = []
    for row in X.astype(np.float64):
        peak = np.abs(row).max()
        ref.append(0.0 if peak == 0 else peak * np.linalg.norm(row / peak))
    # A subnormal norm (the 1e-42 / 1e-315 row) is only as fine as the subnormal grid.
    tol = dict(
        rtol=2e-6 if dtype == np.float32 else 1e-12,
        atol=64 * float(np.finfo(dtype).smallest_subnormal),
    )
    got = safe_row_norms(torch.from_numpy(X))[:, 0].double().numpy()
    np.testing.assert_allclose(got, ref, **tol)
    scaled = scaled_row_norms(torch.from_numpy(X))[:, 0].double().numpy()
    np.testing.assert_allclose(scaled, ref, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unit_rows_at_every_scale(rng, dtype):
    X = _rows(rng, dtype)
    for normalize in (l2_normalize, scaled_l2_normalize):
        U = normalize(torch.from_numpy(X)).double().numpy()
        norms = np.linalg.norm(U, axis=1)
        # Denormal rows keep fewer mantissa bits: their unit rows are coarser.
        np.testing.assert_allclose(norms[:-1], 1.0, rtol=1e-5)
        assert not U[-1].any()  # the zero row stays zero
        ordinary = [0, 6, 7, 8]
        expected = X[ordinary].astype(np.float64)
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        np.testing.assert_allclose(U[ordinary], expected, atol=1e-6)


def test_ordinary_rows_take_one_pass_of_squares(rng):
    # Within the float32 range where no square over- or underflows the result is the
    # plain norm itself, bit for bit: no row went through the slower route.
    T = torch.from_numpy(rng.normal(size=(500, 32)).astype(np.float32)) * 1e-10
    assert torch.equal(safe_row_norms(T), torch.linalg.vector_norm(T, dim=1, keepdim=True))


def test_gradients_pass_through_the_slower_route(rng):
    # A zero row takes the slower route; the result still carries gradients.
    T = torch.from_numpy(rng.normal(size=(6, 8))).requires_grad_(True)
    with torch.no_grad():
        T[2] = 0.0
    l2_normalize(T).sum().backward()
    assert torch.isfinite(T.grad).all()
    S = torch.from_numpy(rng.normal(size=(6, 8))).requires_grad_(True)
    safe_row_norms(S * torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])[:, None]).sum().backward()
    assert torch.isfinite(S.grad).all()

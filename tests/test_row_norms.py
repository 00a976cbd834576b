"""Row norms and unit rows at every scale, one pass of squares where it is exact."""

import numpy as np
import pytest
import torch

from sklearn_compat._core.holdout import paired_top1, unit_rows_float32
from sklearn_compat._core.ranking import (
    l2_normalize,
    paired_ranks,
    paired_topk_share,
    safe_row_norms,
    scaled_l2_normalize,
    scaled_row_norms,
    unit_rows,
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


# The package's one unit-rows rule replaced six hand-written ones (issue 33): on the rows
# those were exact for, its result is theirs bit for bit.
def _ordinary_rows(rng, dtype):
    X = rng.normal(size=(50, 24)) * rng.uniform(1e-3, 1e3, size=(50, 1)) + 0.5
    X[7] = 0.0
    return X.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unit_rows_is_the_former_numpy_formula_bit_for_bit(rng, dtype):
    X = _ordinary_rows(rng, dtype)
    former = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), np.finfo(dtype).tiny)
    out = unit_rows(X)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, former)
    assert not out[7].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unit_rows_of_a_tensor_is_torch_normalize_bit_for_bit(rng, dtype):
    T = torch.as_tensor(_ordinary_rows(rng, np.float64), dtype=dtype)
    torch.testing.assert_close(
        unit_rows(T), torch.nn.functional.normalize(T, dim=1), rtol=0, atol=0
    )
    # Where a plain norm overflows, the rule still gives unit rows (normalize gives zeros).
    huge = torch.full((1, 24), 1e30 if dtype == torch.float32 else 1e300, dtype=dtype)
    assert float(torch.linalg.vector_norm(unit_rows(huge))) == pytest.approx(1.0)


def test_unit_rows_of_a_dask_array_is_the_numpy_result(rng):
    da = pytest.importorskip("dask.array")
    X = _ordinary_rows(rng, np.float64)
    np.testing.assert_allclose(unit_rows(da.from_array(X, chunks=10)).compute(), unit_rows(X))


def test_held_out_fold_rows_are_the_former_float32_operands_bit_for_bit(rng):
    X = _ordinary_rows(rng, np.float64)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    former = (X / np.where(norms > 0, norms, 1.0)).astype(np.float32)
    np.testing.assert_array_equal(unit_rows_float32(X), former)


def test_paired_topk_share_is_the_former_scores(rng):
    Y = rng.normal(size=(60, 8))
    Z = Y + 0.8 * rng.normal(size=Y.shape)
    ranks = paired_ranks(Z, Y, device="cpu")
    weights = rng.uniform(size=60)
    # The aligners' score and RCSLS's validation score, as they were written before.
    assert paired_topk_share(Z, Y, device="cpu") == float(np.mean(ranks == 0))
    assert paired_topk_share(Z, Y, sample_weight=weights, device="cpu") == float(
        np.average(ranks < 1, weights=weights)
    )
    assert paired_topk_share(Z, Y, 3, device="cpu") == float(np.mean(ranks < 3))
    # The held-out folds' float32 scorer applies the same rule (ties with another target
    # count against a row) ...
    assert paired_top1(Z, Y) == paired_topk_share(Z, Y, device="cpu")
    assert paired_top1(np.ones((2, 2)), np.eye(2)) == 0.0
    # ... except that copies of a row's own target are its answer, not competitors
    # (duplicated rows must not score every candidate of an "auto" choice 0).
    assert paired_top1(np.ones((5, 3)), np.ones((5, 3))) == 1.0

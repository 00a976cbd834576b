"""The small-input path of transform: same results and same errors as the full path."""

import threading

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn import config_context

from sklearn_compat import AffineAligner, OrthogonalProcrustesAligner
from sklearn_compat._core import backend as _backend


def _full(model, X):
    # A tensor is not taken by the small-input path: it is validated and converted in full.
    return model.transform(torch.from_numpy(X.copy()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_path_matches_full_path_and_keeps_dtype(rng, dtype):
    X = rng.normal(size=(50, 6)).astype(dtype)
    Y = (X @ rng.normal(size=(6, 4)) + 1.0).astype(dtype)
    model = OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y)
    out = model.transform(X[:3])
    assert out.dtype == dtype and out.shape == (3, 4)
    W, b = model._affine_map()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, X[:3].astype(np.float64) @ W + b, rtol=tol, atol=tol)
    np.testing.assert_array_equal(out, _full(model, X[:3]))
    # A refit (new fitted arrays) is seen at once: the cached map is not reused.
    model.fit(X, -Y)
    np.testing.assert_array_equal(model.transform(X[:3]), _full(model, X[:3]))
    np.testing.assert_allclose(model.transform(X[:3]), -out, rtol=tol, atol=tol)


def test_small_path_keeps_the_full_validation(rng):
    X = rng.normal(size=(30, 5))
    model = AffineAligner().fit(X, X[:, :3])
    bad = X[:1].copy()
    bad[0, 2] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        model.transform(bad)
    bad[0, 2] = np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        model.transform(bad)
    with pytest.raises(ValueError, match="X has 4 features, but AffineAligner is expecting 5"):
        model.transform(X[:1, :4].copy())
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array"):
        model.transform(X[0])
    # A model fitted on a DataFrame still warns about input without feature names.
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(5)])
    named = AffineAligner().fit(frame, X[:, :3])
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        named.transform(X[:1])


@pytest.fixture(params=[np.float32, np.float64], ids=["float32", "float64"])
def mapped_in_bulk(rng, request):
    """``(X, model, model.transform(X))``: 3,000 rows, mapped in bulk by torch's pool."""
    X = rng.normal(size=(3000, 256)).astype(request.param)
    Y = (X @ rng.normal(size=(256, 256))).astype(request.param)
    model = OrthogonalProcrustesAligner(center=True, device="cpu").fit(X, Y)
    return X, model, model.transform(X)


def test_rows_equal_their_rows_in_a_large_threaded_batch(mapped_in_bulk):
    # Two rows or more mapped together (small-input path, calling thread only) equal the
    # same items mapped in bulk (full path, torch's thread pool), bit for bit.
    X, model, bulk = mapped_in_bulk
    for start, stop in ((0, 2), (5, 8), (2997, 3000), (3, 40)):
        np.testing.assert_array_equal(model.transform(X[start:stop]), bulk[start:stop])


def test_one_query_agrees_with_its_batch_value_to_rounding(mapped_in_bulk):
    # One row takes the matrix-vector product: its value is the batch's up to the rounding
    # of a sum of 256 products (the dot product's forward error bound), and inside
    # batch_invariant_rows (the command line's mode) it is the batch's bit for bit.
    X, model, bulk = mapped_in_bulk
    dtype = X.dtype
    A, b = model._affine_map()
    eps = np.finfo(dtype).eps
    for i in (0, 5, 8, 2999):
        single = model.transform(X[i : i + 1])
        assert single.dtype == dtype
        bound = 2 * 257 * eps * (np.abs(X[i : i + 1]) @ np.abs(A) + np.abs(b))
        assert np.all(np.abs(single - bulk[i : i + 1]) <= bound), i
        with _backend.batch_invariant_rows():
            np.testing.assert_array_equal(model.transform(X[i : i + 1]), bulk[i : i + 1])
    assert _backend.single_row_kernel_allowed()  # the context is left as it was found


def test_batch_invariant_rows_is_per_thread():
    seen = []
    with _backend.batch_invariant_rows():
        worker = threading.Thread(target=lambda: seen.append(_backend.single_row_kernel_allowed()))
        worker.start()
        worker.join()
        assert not _backend.single_row_kernel_allowed()
        with _backend.batch_invariant_rows():
            pass
        assert not _backend.single_row_kernel_allowed()  # nested exit keeps the outer mode
    assert seen == [True] and _backend.single_row_kernel_allowed()


def test_small_path_restores_torch_threads(rng):
    X = rng.normal(size=(50, 6))
    model = OrthogonalProcrustesAligner().fit(X, X)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model.transform(X[:1])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_small_input_honours_set_output(rng):
    # The small-input path returns before scikit-learn's output wrapper only when that
    # wrapper would return the array unchanged.
    X = rng.normal(size=(50, 6))
    model = OrthogonalProcrustesAligner(center=True, scale=False).fit(X, X[:, ::-1])
    expected = model.transform(X[:1])
    assert type(expected) is np.ndarray
    with config_context(transform_output="pandas"):
        frame = model.transform(X[:1])
        assert isinstance(frame, pd.DataFrame) and frame.shape == (1, 6)
        model.set_output(transform="default")  # the estimator's own setting comes first
        assert type(model.transform(X[:1])) is np.ndarray
    model.set_output(transform="pandas")
    frame = model.transform(X[:1])
    assert isinstance(frame, pd.DataFrame)
    np.testing.assert_array_equal(frame.to_numpy(), expected)
    assert list(frame.columns) == list(model.get_feature_names_out())

"""OrthogonalProcrustesAligner on a CUDA device (skipped without one, see conftest.py)."""

import pickle

import numpy as np
import pytest
import torch

from sklearn_compat import OrthogonalProcrustesAligner

pytestmark = pytest.mark.cuda


def _data(rng, n=5000, d_x=48, d_y=40, dtype=np.float32):
    X = (rng.normal(size=(n, d_x)) + 3).astype(dtype)
    Y = (X @ rng.normal(size=(d_x, d_y)) / np.sqrt(d_x) + rng.normal(size=(n, d_y))).astype(dtype)
    return X, Y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("params", [{}, {"center": True, "scale": True}])
def test_fit_on_cuda_equals_fit_on_cpu(rng, dtype, params):
    X, Y = _data(rng, dtype=dtype)
    w = rng.uniform(0.5, 2.0, size=X.shape[0])
    cpu = OrthogonalProcrustesAligner(device="cpu", **params).fit(X, Y, w)
    gpu = OrthogonalProcrustesAligner(device="cuda", **params).fit(X, Y, w)
    # TF32 would leave ~1e-3 here; the moments are computed with it off.
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(gpu.W_, cpu.W_, atol=tol)
    np.testing.assert_allclose(gpu.singular_values_, cpu.singular_values_, rtol=tol)
    assert gpu.scale_ == pytest.approx(cpu.scale_, rel=tol)
    Z = gpu.transform(X)
    assert isinstance(Z, np.ndarray) and Z.dtype == dtype
    np.testing.assert_allclose(Z, cpu.transform(X), atol=50 * tol)


def test_partial_fit_on_cuda_equals_fit(rng):
    X, Y = _data(rng, dtype=np.float64)
    full = OrthogonalProcrustesAligner(device="cuda", center=True).fit(X, Y)
    streamed = OrthogonalProcrustesAligner(device="cuda", center=True)
    for rows in np.array_split(np.arange(X.shape[0]), 3):
        streamed.partial_fit(X[rows], Y[rows])
    np.testing.assert_allclose(streamed.W_, full.W_, atol=1e-10)


def test_cuda_tensor_input(rng):
    X, Y = _data(rng)
    Xt = torch.from_numpy(X).cuda()
    Yt = torch.from_numpy(Y).cuda()
    on_tensors = OrthogonalProcrustesAligner(device="cuda", center=True).fit(Xt, Yt)
    on_arrays = OrthogonalProcrustesAligner(device="cuda", center=True).fit(X, Y)
    np.testing.assert_allclose(on_tensors.W_, on_arrays.W_, atol=1e-6)
    assert isinstance(on_tensors.W_, np.ndarray)
    Z = on_tensors.transform(Xt)
    assert isinstance(Z, np.ndarray) and Z.dtype == np.float32
    assert on_tensors.score(Xt, Yt) == on_arrays.score(X, Y)


def test_model_fitted_on_cuda_pickles_and_transforms_on_cpu(rng, monkeypatch):
    X, Y = _data(rng)
    gpu = OrthogonalProcrustesAligner(device="cuda", center=True, scale=True).fit(X, Y)
    expected = gpu.transform(X)
    loaded = pickle.loads(pickle.dumps(gpu))
    for attr in ("W_", "mean_x_", "mean_y_", "singular_values_"):
        assert isinstance(getattr(loaded, attr), np.ndarray)  # CPU state, no tensors
    np.testing.assert_allclose(loaded.set_params(device="cpu").transform(X), expected, atol=1e-4)
    # On a machine where torch sees no GPU, device="cuda" falls back for inference.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    cpu_only = pickle.loads(pickle.dumps(gpu))
    with pytest.warns(RuntimeWarning, match="running on the CPU"):
        Z = cpu_only.transform(X)
    np.testing.assert_allclose(Z, expected, atol=1e-4)


def test_lambda_path_keeps_fold_rows_on_the_device(rng, monkeypatch):
    from sklearn_compat import LambdaOrthAligner, LambdaOrthAlignerCV

    X, Y = _data(rng, n=2400, d_x=16, d_y=16)
    from sklearn_compat._lambda import path as path_module

    devices = []
    original = path_module.prepare_fit_data

    def prepare(*args, **kwargs):
        data = original(*args, **kwargs)
        devices.append(data.train[0].device.type)
        return data

    monkeypatch.setattr(path_module, "prepare_fit_data", prepare)
    searches = {
        device: LambdaOrthAlignerCV(
            [0.0, 2.0, np.inf],
            estimator=LambdaOrthAligner(max_epochs=5, random_state=0, device=device),
            cv=3,
        ).fit(X, Y)
        for device in ("cpu", "cuda")
    }
    # One preparation per fold, on each search's device (the refit prepares its own rows).
    assert devices == ["cpu"] * 3 + ["cuda"] * 3
    cpu, gpu = searches["cpu"], searches["cuda"]
    # The minibatch orders differ between the devices' generators: results agree to
    # training noise (different seeds on the CPU differ by about 0.01 here).
    np.testing.assert_allclose(
        gpu.cv_results_["mean_test_score"], cpu.cv_results_["mean_test_score"], atol=0.05
    )
    Z_gpu, Z_cpu = gpu.transform(X), cpu.transform(X)
    assert np.linalg.norm(Z_gpu - Z_cpu) <= 0.1 * np.linalg.norm(Z_cpu)


def test_rcsls_on_cuda_matches_cpu(rng):
    from sklearn_compat import RCSLSAligner

    X, Y = _data(rng, n=1500, dtype=np.float64)
    cpu = RCSLSAligner(device="cpu", max_iter=4).fit(X, Y)
    gpu = RCSLSAligner(device="cuda", max_iter=4).fit(X, Y)
    # float32 training: sums in another order may swap near-tied neighbours.
    np.testing.assert_allclose(gpu.W_, cpu.W_, atol=1e-2)
    assert abs(gpu.score(X, Y) - cpu.score(X, Y)) < 0.02


def test_aligned_neighbors_on_cuda_matches_cpu(rng):
    from sklearn_compat import AlignedNeighbors

    X, Y = _data(rng, n=2000, dtype=np.float64)
    aligner = OrthogonalProcrustesAligner().fit(X[:1000], Y[:1000])
    cpu = AlignedNeighbors(aligner, device="cpu").fit(Y[1000:]).kneighbors(X[1000:])
    gpu = AlignedNeighbors(aligner, device="cuda").fit(Y[1000:]).kneighbors(X[1000:])
    np.testing.assert_array_equal(gpu[1], cpu[1])
    np.testing.assert_allclose(gpu[0], cpu[0], atol=1e-10)

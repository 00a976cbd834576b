"""Device resolution, numpy <-> torch conversion, seeded generators, TF32 switch."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from sklearn_compat._core import backend as _backend
from sklearn_compat._core.backend import (
    apply_affine,
    as_numpy_input,
    no_tf32,
    resolve_device,
    to_numpy,
    to_torch,
    torch_generator,
)
from sklearn_compat._core.validation import pick_target

HAS_CUDA = torch.cuda.is_available()


# --------------------------------------------------------------------- resolve_device
def test_resolve_device_cpu_and_auto():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if HAS_CUDA else "cpu")


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "cuda:", "cuda:-1", "mps", "", 3, None])
def test_resolve_device_rejects_unknown_names(bad):
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"):
        resolve_device(bad)


@pytest.mark.skipif(HAS_CUDA, reason="needs a machine without CUDA")
def test_resolve_device_missing_cuda_raises_for_training():
    with pytest.raises(ValueError, match="device='cuda:0' is not available: torch sees no"):
        resolve_device("cuda:0")


@pytest.mark.skipif(HAS_CUDA, reason="needs a machine without CUDA")
def test_resolve_device_missing_cuda_falls_back_for_inference():
    with pytest.warns(RuntimeWarning, match="not available .* running on the CPU"):
        assert resolve_device("cuda", for_inference=True) == torch.device("cpu")


# --------------------------------------------------------------------- conversions
def test_as_numpy_input_converts_tensors_only():
    array = np.ones((2, 3))
    assert as_numpy_input(array) is array
    assert as_numpy_input([[1, 2]]) == [[1, 2]]
    tensor = torch.ones(2, 3, requires_grad=True)
    out = as_numpy_input(tensor)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    for dtype in (torch.float16, torch.bfloat16):
        assert as_numpy_input(torch.ones(2, dtype=dtype)).dtype == np.float32
    assert as_numpy_input(torch.ones(2, dtype=torch.float64)).dtype == np.float64


def test_to_torch_shares_memory_when_it_can():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor = to_torch(array, torch.device("cpu"), torch.float32)
    assert tensor.data_ptr() == array.__array_interface__["data"][0]
    converted = to_torch(array, "cpu", torch.float64)
    assert converted.dtype == torch.float64
    np.testing.assert_array_equal(converted.numpy(), array)
    # Non-contiguous input is made contiguous, not rejected.
    np.testing.assert_array_equal(to_torch(array.T, "cpu").numpy(), array.T)


def test_to_torch_read_only_array_without_warning():
    array = np.ones((3, 2))
    array.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tensor = to_torch(array, "cpu")
    assert tensor.shape == (3, 2)


def test_to_numpy_owns_its_memory():
    tensor = torch.arange(4.0)
    out = to_numpy(tensor)
    tensor += 1
    np.testing.assert_array_equal(out, [0.0, 1.0, 2.0, 3.0])


# --------------------------------------------------------------------- generators, TF32
def test_torch_generator_repeats_for_an_int_seed():
    a = torch.rand(5, generator=torch_generator(7, "cpu"))
    b = torch.rand(5, generator=torch_generator(7, "cpu"))
    c = torch.rand(5, generator=torch_generator(8, "cpu"))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_torch_generator_advances_a_random_state():
    rs = np.random.RandomState(0)
    a = torch.rand(5, generator=torch_generator(rs, "cpu"))
    b = torch.rand(5, generator=torch_generator(rs, "cpu"))
    assert not torch.equal(a, b)


def test_no_tf32_restores_flags():
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with no_tf32():
            assert torch.backends.cuda.matmul.allow_tf32 is False
            assert torch.backends.cudnn.allow_tf32 is False
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


NEW_TF32_API = """
import numpy as np, torch
from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat._core.backend import no_tf32
torch.backends.cuda.matmul.fp32_precision = "tf32"   # torch's newer switch
with no_tf32():
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
assert torch.backends.cuda.matmul.fp32_precision == "tf32"
X = np.random.default_rng(0).normal(size=(20, 3))
OrthogonalProcrustesAligner().fit(X, X)  # used to raise: torch refuses mixing the two APIs
print("ok")
"""


@pytest.mark.skipif(
    not hasattr(torch.backends.cuda.matmul, "fp32_precision"), reason="torch < 2.9"
)
def test_no_tf32_works_with_torchs_newer_precision_switch():
    # A fresh interpreter: the switch is process-wide and torch remembers which API set it.
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root))
    result = subprocess.run(
        [sys.executable, "-c", NEW_TF32_API], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# --------------------------------------------------------------------- base helpers
def test_apply_affine_dtype_and_empty_input():
    A = np.arange(6, dtype=np.float64).reshape(2, 3)
    b = np.ones(3)
    X = np.array([[1.0, 2.0]], dtype=np.float32)
    out = apply_affine(X, A, b, torch.device("cpu"))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, X @ A + b)
    assert apply_affine(np.empty((0, 2)), A, b, torch.device("cpu")).shape == (0, 3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_apply_affine_works_in_row_chunks(monkeypatch, dtype):
    # The device sees one chunk at a time (a large X is never copied to a GPU whole);
    # the chunks must tile the output exactly.
    monkeypatch.setattr(_backend, "_TRANSFORM_CHUNK_ROWS", 3)
    rng = np.random.default_rng(0)
    X = np.asfortranarray(rng.normal(size=(10, 4)).astype(dtype))
    A, b = rng.normal(size=(4, 2)), rng.normal(size=2)
    out = apply_affine(X, A, b, torch.device("cpu"))
    assert out.dtype == dtype and out.shape == (10, 2)
    np.testing.assert_allclose(
        out, X.astype(np.float64) @ A + b, rtol=1e-5 if dtype == np.float32 else 1e-12
    )


def test_pick_target():
    assert pick_target(1, None) == 1
    assert pick_target(None, 2) == 2
    with pytest.raises(TypeError, match="not both"):
        pick_target(1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_affine_rows_value_of_a_row_does_not_depend_on_how_many_came_with_it(dtype):
    # BLAS rounds leftover rows (and products of one to three rows) differently; the command
    # line maps a table in batches of any size and must write the same digits.
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(50, 24, generator=gen, dtype=dtype)
    A = torch.randn(24, 16, generator=gen, dtype=dtype)
    b = torch.randn(16, generator=gen, dtype=dtype)
    whole = _backend.affine_rows(b, X, A)
    torch.testing.assert_close(whole, X @ A + b)
    for rows in (1, 2, 3, 5, 7, 13, 49):
        parts = torch.cat(
            [_backend.affine_rows(b, X[i : i + rows], A) for i in range(0, 50, rows)]
        )
        assert torch.equal(parts, whole), rows


def test_gpu_products_are_all_of_one_shape(monkeypatch):
    # cuBLAS picks kernels by shape: on a GPU every product must have the same shape, so
    # that a row's value does not depend on its batch.  Checked here on CPU tensors (the
    # GPU itself is exercised by the cuda tests).
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(50, 12, generator=gen)
    A = torch.randn(12, 5, generator=gen)
    b = torch.randn(5, generator=gen)
    shapes = []
    addmm = torch.addmm

    def recording(bias, mat1, mat2):
        shapes.append(tuple(mat1.shape))
        return addmm(bias, mat1, mat2)

    monkeypatch.setattr(torch, "addmm", recording)
    whole = _backend.fixed_blocks_addmm(b, X, A, 16)
    torch.testing.assert_close(whole, X @ A + b)
    for rows in (1, 7, 16, 33):
        parts = torch.cat(
            [_backend.fixed_blocks_addmm(b, X[i : i + rows], A, 16) for i in range(0, 50, rows)]
        )
        torch.testing.assert_close(parts, whole)
        if rows % 16 == 0:  # every row at the same place in a block of the same shape
            assert torch.equal(parts, whole), rows
    assert set(shapes) == {(16, 12)}

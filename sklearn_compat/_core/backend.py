"""Device and dtype resolution, numpy <-> torch conversion, seeded generators.

Every estimator computes with torch on the device named by its ``device`` parameter and
keeps its fitted state as CPU numpy arrays, so a model fitted on a GPU loads and runs on a
machine without one.
"""

import contextlib
import re
import sys
import threading
import warnings

import numpy as np
import torch
from sklearn.utils import check_random_state

__all__ = [
    "SMALL_INPUT_ROWS",
    "batch_invariant_rows",
    "single_row_kernel_allowed",
    "is_dask_collection",
    "resolve_device",
    "as_numpy_input",
    "check_tensor",
    "checked_input",
    "one_line_errors",
    "to_torch",
    "to_numpy",
    "torch_generator",
    "no_tf32",
]

_DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def resolve_device(device, *, for_inference=False):
    """Turn a ``device`` parameter into a :class:`torch.device`.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda", "cuda:N"} or torch.device
        ``"auto"`` picks CUDA when torch sees a GPU, else the CPU.
    for_inference : bool, default=False
        When True, a CUDA device that is not available falls back to the CPU with a
        warning instead of raising, so a model fitted with ``device="cuda"`` still
        transforms on a CPU-only machine.

    Returns
    -------
    torch.device
    """
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str) or not _DEVICE_PATTERN.match(device):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}.")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return torch.device("cpu")
    index = int(device.split(":")[1]) if ":" in device else 0
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index < available:
        return torch.device(device)
    reason = (
        "torch sees no CUDA device"
        if available == 0
        else f"torch sees only {available} CUDA device(s)"
    )
    if for_inference:
        warnings.warn(
            f"device={device!r} is not available ({reason}); running on the CPU.",
            RuntimeWarning,
            stacklevel=3,
        )
        return torch.device("cpu")
    raise ValueError(f"device={device!r} is not available: {reason}.")


def as_numpy_input(data):
    """Return ``data`` unchanged unless it is a torch tensor, which becomes CPU numpy.

    Tensors on any device are accepted; half and bfloat16 tensors are widened to float32
    because numpy has no bfloat16.  pandas DataFrames and everything else pass through
    for scikit-learn's own validation.
    """
    if isinstance(data, torch.Tensor):
        tensor = data.detach()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.float()
        return tensor.cpu().numpy()
    return data


def to_torch(array, device, dtype=None):
    """Wrap a numpy array as a tensor on ``device`` without copying when it can."""
    array = np.ascontiguousarray(array)
    with warnings.catch_warnings():
        # Read-only inputs (memory maps, joblib's shared arrays) are only ever read here,
        # so torch's warning about writing to them does not apply.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tensor = torch.as_tensor(array)
    if dtype is not None and tensor.dtype != dtype:
        tensor = tensor.to(dtype)
    return tensor.to(device, non_blocking=False)


def to_numpy(tensor):
    """Return a CPU numpy array that owns its memory (safe to keep as fitted state)."""
    return tensor.detach().cpu().numpy().copy()


def torch_generator(random_state, device):
    """A :class:`torch.Generator` on ``device`` seeded from a scikit-learn random_state.

    ``None`` draws a fresh seed, an int is used as given (so fits repeat), and a
    ``RandomState`` instance advances, as scikit-learn does everywhere.
    """
    rng = check_random_state(random_state)
    seed = int(rng.randint(0, 2**31 - 1))
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def _tf32_off(legacy_owner, new_owner):
    """Turn TF32 off through whichever of torch's two switches the process uses.

    torch 2.9+ added ``fp32_precision`` next to the older ``allow_tf32`` and raises when a
    process reads one after setting the other, so the switch the user's code set is the
    one flipped (and restored).  Returns the function that restores it.
    """
    try:
        previous = legacy_owner.allow_tf32
    except RuntimeError:
        previous = new_owner.fp32_precision
        new_owner.fp32_precision = "ieee"
        return lambda: setattr(new_owner, "fp32_precision", previous)
    legacy_owner.allow_tf32 = False
    return lambda: setattr(legacy_owner, "allow_tf32", previous)


class no_tf32:
    """Context manager that turns TF32 matmuls (and cuDNN convolutions) off on CUDA.

    Sufficient statistics such as ``X.T @ Y`` lose about three decimal digits under TF32,
    which shows up directly in the fitted map; the speed gain is not worth it there.  The
    user's settings are restored on exit, through the same torch API they were made with.
    """

    def __enter__(self):
        cudnn = torch.backends.cudnn
        self._undo = [
            _tf32_off(torch.backends.cuda.matmul, torch.backends.cuda.matmul),
            _tf32_off(cudnn, getattr(cudnn, "conv", cudnn)),
        ]
        return self

    def __exit__(self, *exc):
        for undo in reversed(self._undo):
            undo()
        return False


def is_dask_collection(*objects):
    """Whether any of ``objects`` is a Dask array, without importing Dask.

    A Dask array can only exist once ``dask.array`` has been imported, so looking the
    module up in ``sys.modules`` costs nothing for users who do not have Dask.
    """
    dask_array = sys.modules.get("dask.array")
    if dask_array is None:
        return False
    return any(isinstance(obj, dask_array.Array) for obj in objects)


def checked_input(data, name):
    """``as_numpy_input`` plus the refusals scikit-learn words badly for our inputs.

    ``None`` would otherwise be reported as "a scalar array nan", and complex data with the
    whole array printed after the message.
    """
    if data is None:
        raise ValueError(
            f"{name} is None: pass a 2-d array of embeddings (n_samples, n_features)."
        )
    if isinstance(data, torch.Tensor):
        check_tensor(data, name)
        if data.is_complex():
            raise ValueError(f"Complex data not supported: {name} is a {data.dtype} tensor.")
    data = as_numpy_input(data)
    if hasattr(data, "columns"):  # a DataFrame: its columns' dtypes
        dtypes = list(data.dtypes)
    else:
        dtypes = [getattr(data, "dtype", None)]
    for dtype in dtypes:
        if isinstance(dtype, np.dtype) and dtype.kind == "c":
            raise ValueError(f"Complex data not supported: {name} has dtype {dtype}.")
    # pandas' nullable "Float32" and Arrow "float32[pyarrow]" columns (Parquet read with
    # dtype_backend) are float32 data: scikit-learn would widen them to float64.
    numpy_dtypes = [getattr(d, "numpy_dtype", d) for d in dtypes]
    if hasattr(data, "columns") and dtypes and all(d == np.float32 for d in numpy_dtypes):
        if any(not isinstance(d, np.dtype) for d in dtypes):
            data = data.astype(np.float32)  # missing values become NaN (then refused)
    return data


def check_tensor(data, name):
    """Refuse tensors that hold no dense data to read (sparse layouts, the meta device)."""
    if data.layout != torch.strided:
        raise TypeError(
            f"{name} is a sparse tensor ({data.layout}), but dense data is required: "
            "pass it through .to_dense()."
        )
    if data.is_meta:
        raise ValueError(f"{name} is a tensor on the meta device, which holds no data.")


@contextlib.contextmanager
def one_line_errors():
    """Cut scikit-learn's multi-line validation messages down to their first line.

    Its messages go on to print the offending array, or to recommend estimators that
    handle missing values natively, neither of which helps with an embedding map; the
    first line says what is wrong (and keeps the words its estimator checks look for).
    """
    try:
        yield
    except ValueError as exc:
        message = str(exc).strip()
        first = message.splitlines()[0].rstrip(":") if message else message
        if first.startswith("The feature names should match"):
            # The lines after it name the columns: keep them, on one line.
            first = message.replace(":\n- ", ": ").replace("\n- ", ", ").replace(".\n", ". ")
            first = first.replace("\n", "; ")
        if first.startswith("Expected 2D array, got 1D array"):
            first += ": Reshape your data with .reshape(1, -1) if it holds a single row"
        # DESIGN names the target Y; scikit-learn's check_X_y calls it y.
        first = first.replace("Input y ", "Input Y ")
        if first == message:
            raise
        raise ValueError(first) from None


# Rows per transform chunk: the device holds one chunk of input and output at a time, so
# a 10M-row X is never copied to a GPU whole (and the host keeps only the output).
_TRANSFORM_CHUNK_ROWS = 65536


# Inputs of at most this many rows take BaseAligner.transform's small-input path (light
# checks, a cached map); larger ones are validated in full and mapped in chunks.
SMALL_INPUT_ROWS = 1024


# BLAS kernels work on blocks of rows and take other kernels for the rows left over (and a
# matrix-vector path for one to three rows), whose sums round differently: a row's mapped
# value would depend on how many rows came with it (seen with MKL on AMD EPYC: float64 rows
# in blocks of 4).  Products are therefore made only of whole blocks of this many rows, the
# leftover rows padded to one more block, so the command line's batch size never changes
# its output.
_ROW_BLOCK = 8


# A CPU product of at most this many multiply-adds runs on the calling thread alone: it takes
# less time than handing work to torch's intra-op thread pool, and when the machine's other
# cores are busy (a serving process rarely runs alone) the pool's threads wait to be
# scheduled, which turns a query of tens of microseconds into milliseconds.  The thread
# count leaves every value as it is (torch's CPU BLAS splits a product's rows and columns
# among its threads, not the sums), which test_backend checks against a large threaded batch.
_CALLING_THREAD_MACS = 1 << 22

# One row (a single query) is multiplied by numpy's matrix-vector product on the calling
# thread: a fraction of the cost of the smallest whole block, which is what a retrieval
# service pays per request.  BLAS rounds a matrix-vector product differently from a block
# product, so a row mapped alone may differ from the same row mapped in a batch in its
# last bits.  Code that writes a table batch by batch (the command line) maps inside
# ``batch_invariant_rows``, so a last batch of one row gets the bits of any other batch.
_ROW_MODE = threading.local()


@contextlib.contextmanager
def batch_invariant_rows():
    """Inside this context ``transform`` gives a one-row input its batch value too."""
    previous = getattr(_ROW_MODE, "batch_invariant", False)
    _ROW_MODE.batch_invariant = True
    try:
        yield
    finally:
        _ROW_MODE.batch_invariant = previous


def single_row_kernel_allowed():
    """Whether a one-row input may take the matrix-vector product (outside the context)."""
    return not getattr(_ROW_MODE, "batch_invariant", False)


# torch's thread count is one setting for the whole process: the lock keeps concurrent
# small products from restoring each other's setting.
_THREADS_LOCK = threading.Lock()


@contextlib.contextmanager
def calling_thread_only():
    """Run torch's CPU kernels on the calling thread (no intra-op thread pool)."""
    with _THREADS_LOCK:
        threads = torch.get_num_threads()
        if threads == 1:
            yield
            return
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


# cuBLAS picks its kernel (tile shape, split of the shared dimension) from the whole
# product's shape, so on a GPU a row's value would depend on the batch it came in: every
# GPU product is made of blocks of exactly this many rows (the last one padded), one
# kernel for all of them.  Within one kernel a GPU thread block runs the same loop over the
# shared dimension for every tile, wherever the tile lies (an expectation from how cuBLAS
# kernels are built, not yet measured on a device; CPU BLAS does not promise it).
_GPU_BLOCK = 1024


def affine_rows(b, X, A):
    """``X @ A + b`` for torch operands, each row's value independent of the row count.

    On the CPU rows go through the product in whole blocks of ``_ROW_BLOCK`` (the last
    one padded with zero rows), and a small product runs on the calling thread only; on
    a GPU every product has the same shape, ``_GPU_BLOCK`` rows.
    """
    if X.device.type != "cpu":
        return fixed_blocks_addmm(b, X, A, _GPU_BLOCK)
    n = X.shape[0]
    padded = -(-n // _ROW_BLOCK) * _ROW_BLOCK
    if X.device.type == "cpu" and padded * X.shape[1] * A.shape[1] <= _CALLING_THREAD_MACS:
        with calling_thread_only():
            return _blocked_addmm(b, X, A)
    return _blocked_addmm(b, X, A)


def fixed_blocks_addmm(b, X, A, rows):
    """``X @ A + b`` as products of exactly ``rows`` rows each (the last one zero-padded)."""
    n = X.shape[0]
    out = X.new_empty((n, A.shape[1]))
    for start in range(0, n, rows):
        block = X[start : start + rows]
        if block.shape[0] < rows:
            padded = X.new_zeros((rows, X.shape[1]))
            padded[: block.shape[0]] = block
            block = padded
        out[start : start + rows] = torch.addmm(b, block, A)[: n - start]
    return out


def _blocked_addmm(b, X, A):
    n = X.shape[0]
    whole = n - n % _ROW_BLOCK
    if whole == n:
        return torch.addmm(b, X, A)
    tail = X.new_zeros((_ROW_BLOCK, X.shape[1]))
    tail[: n - whole] = X[whole:]
    tail = torch.addmm(b, tail, A)[: n - whole]
    return tail if whole == 0 else torch.cat([torch.addmm(b, X[:whole], A), tail])


def apply_affine(X, A, b, device):
    """``X @ A + b`` computed with torch on ``device`` in X's dtype; returns numpy.

    Computed in row chunks written into one output array, so device memory stays bounded
    whatever the number of rows.
    """
    dtype = torch.float64 if X.dtype == np.float64 else torch.float32
    At = to_torch(A, device, dtype)
    bt = to_torch(b, device, dtype)
    out = np.empty(
        (X.shape[0], At.shape[1]), dtype=np.float64 if dtype == torch.float64 else np.float32
    )
    for start in range(0, X.shape[0], _TRANSFORM_CHUNK_ROWS):
        stop = start + _TRANSFORM_CHUNK_ROWS
        Xt = to_torch(X[start:stop], device, dtype)
        out[start:stop] = affine_rows(bt, Xt, At).cpu().numpy()
    return out

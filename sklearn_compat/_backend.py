"""Device and dtype resolution, numpy <-> torch conversion, seeded generators.

Every estimator computes with torch on the device named by its ``device`` parameter and
keeps its fitted state as CPU numpy arrays, so a model fitted on a GPU loads and runs on a
machine without one.
"""

import re
import warnings

import numpy as np
import torch
from sklearn.utils import check_random_state

__all__ = [
    "resolve_device",
    "as_numpy_input",
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


class no_tf32:
    """Context manager that turns TF32 matmuls off on CUDA.

    Sufficient statistics such as ``X.T @ Y`` lose about three decimal digits under TF32,
    which shows up directly in the fitted map; the speed gain is not worth it there.
    """

    def __enter__(self):
        self._matmul = torch.backends.cuda.matmul.allow_tf32
        self._cudnn = torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        return self

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self._matmul
        torch.backends.cudnn.allow_tf32 = self._cudnn
        return False

"""One batch of paired rows -> validated sufficient statistics (numpy or Dask input).

The closed-form aligners (Procrustes, affine) fit from :class:`~._moments.PairMoments`
alone.  This module is their single entry point for a batch: it validates the batch,
computes its moments on the estimator's device and, when the input is a Dask array, hands
the work to the cluster (``_dask``) so that only the small statistics come back.  The
estimators therefore hold no Dask-specific code beyond calling :func:`batch_moments`.
"""

import sys

import numpy as np
from sklearn.utils.validation import _check_sample_weight

from ._backend import resolve_device
from ._moments import _CHUNK_ROWS, compute_moments

__all__ = ["batch_moments", "is_dask_collection", "moments_in_dtype"]


def is_dask_collection(*objects):
    """Whether any of ``objects`` is a Dask array, without importing Dask.

    A Dask array can only exist once ``dask.array`` has been imported, so looking the
    module up in ``sys.modules`` costs nothing for users who do not have Dask.
    """
    dask_array = sys.modules.get("dask.array")
    if dask_array is None:
        return False
    return any(isinstance(obj, dask_array.Array) for obj in objects)


def moments_in_dtype(X, Y, sample_weight, *, centered, need_gram, device, stats_dtype=None):
    """:func:`compute_moments` with the GEMMs run in ``stats_dtype`` instead of X's dtype.

    ``stats_dtype=None`` keeps X's dtype (the fast path).  A wider ``stats_dtype`` is cast
    chunk by chunk, so a float32 input is never copied whole into float64.
    """
    if stats_dtype is None or X.dtype == stats_dtype:
        return compute_moments(
            X, Y, sample_weight, centered=centered, need_gram=need_gram, device=device
        )
    result = None
    for start in range(0, max(X.shape[0], 1), _CHUNK_ROWS):
        stop = start + _CHUNK_ROWS
        part = compute_moments(
            X[start:stop].astype(stats_dtype),
            Y[start:stop].astype(stats_dtype),
            None if sample_weight is None else sample_weight[start:stop].astype(stats_dtype),
            centered=centered,
            need_gram=need_gram,
            device=device,
        )
        result = part if result is None else result.merge(part)
    return result


def batch_moments(
    estimator, X, Y, sample_weight, *, reset, centered, need_gram=False, stats_dtype=None
):
    """Validate a batch of paired rows for ``estimator`` and return its moments.

    Parameters
    ----------
    estimator : BaseAligner
        Its ``device`` is used, and its ``n_features_in_`` / feature names are set
        (``reset=True``) or checked (``reset=False``).
    X, Y : array-like, torch.Tensor or dask.array.Array
        The paired rows; ``Y`` is required.
    sample_weight : array-like of shape (n_samples,) or None
    reset : bool
        True for ``fit`` and the first ``partial_fit``.
    centered, need_gram : bool
        Passed to :func:`compute_moments`.
    stats_dtype : numpy dtype or None
        Run the GEMMs in this dtype (``None``: X's dtype).

    Returns
    -------
    moments : PairMoments
    n_rows : int
        Number of rows in the batch.
    """
    if is_dask_collection(X, Y, sample_weight):
        from ._dask import dask_batch_moments

        return dask_batch_moments(
            estimator,
            X,
            Y,
            sample_weight,
            reset=reset,
            centered=centered,
            need_gram=need_gram,
            stats_dtype=stats_dtype,
        )
    X, Y = estimator._validate_pair(X, Y, reset=reset)
    if sample_weight is not None:
        sample_weight = _check_sample_weight(
            sample_weight, X, dtype=X.dtype, ensure_non_negative=True
        )
    moments = moments_in_dtype(
        X,
        Y,
        sample_weight,
        centered=centered,
        need_gram=need_gram,
        device=resolve_device(estimator.device),
        stats_dtype=stats_dtype,
    )
    return moments, int(X.shape[0])


def check_float_dtype(dtype, name):
    """The float dtype a validated array of ``dtype`` gets (float32 stays, else float64).

    Mirrors ``check_array(dtype=(float64, float32))`` for arrays that must not be
    materialised (Dask), with the same refusal of complex and non-numeric data.
    """
    dtype = np.dtype(dtype)
    if dtype == np.float32 or dtype == np.float64:
        return dtype
    if dtype.kind in "biuf":
        return np.dtype(np.float64)
    if dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {dtype}.")
    raise ValueError(f"{name} must hold real numbers, got dtype {dtype}.")

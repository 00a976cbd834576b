"""One batch of paired rows -> validated sufficient statistics (numpy or Dask input).

The closed-form aligners (Procrustes, affine) fit from :class:`~.moments.PairMoments`
alone.  This module is their single entry point for a batch: it validates the batch,
computes its moments on the estimator's device and, when the input is a Dask array, hands
the work to the cluster (``dask``) so that only the small statistics come back.  The
estimators therefore hold no Dask-specific code beyond calling :func:`batch_moments`.
"""

import numpy as np
import torch
from sklearn.utils.validation import _check_sample_weight

from .backend import as_numpy_input, is_dask_collection, resolve_device
from .moments import moments_in_dtype
from .validation import largest_abs, raise_not_finite

__all__ = ["batch_moments", "is_dask_collection"]


def batch_moments(
    estimator,
    X,
    Y,
    sample_weight,
    *,
    reset,
    centered,
    need_gram=False,
    need_means=True,
    need_sq_x=True,
    need_sq_y=False,
    need_cross=True,
    stats_dtype=None,
):
    """Validate a batch of paired rows for ``estimator`` and return its moments.

    The NaN/inf scan of in-memory input is left to the statistics themselves (non-finite
    input makes ``X^T Y`` non-finite), which saves two passes over the data; only then are
    the inputs scanned, for scikit-learn's usual message.  Torch tensors are reduced on
    their own device (a GPU tensor is not copied to the host and back).

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
    centered, need_gram, need_means, need_sq_x, need_sq_y, need_cross : bool
        Passed to :func:`compute_moments` (Dask input always computes the means, ``sq_x``,
        ``sq_y`` and ``cross``).
    stats_dtype : numpy dtype or None
        Run the GEMMs in this dtype (``None``: X's dtype).

    Returns
    -------
    moments : PairMoments
    n_rows : int
        Number of rows in the batch.
    """
    if is_dask_collection(X, Y, sample_weight):
        from .dask import dask_batch_moments

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
    X, Y = estimator._validate_pair(X, Y, reset=reset, ensure_all_finite=False, keep_tensors=True)
    if sample_weight is not None:
        float64 = X.dtype in (np.float64, torch.float64)
        sample_weight = _check_sample_weight(
            as_numpy_input(sample_weight),
            X,
            dtype=np.float64 if float64 else np.float32,
            ensure_non_negative=True,
        )
    options = {
        "centered": centered,
        "need_gram": need_gram,
        "need_means": need_means,
        "need_sq_x": need_sq_x,
        "need_sq_y": need_sq_y,
        "need_cross": need_cross,
        "device": resolve_device(estimator.device),
    }
    moments = moments_in_dtype(X, Y, sample_weight, stats_dtype=stats_dtype, **options)
    wide = X.dtype in (np.float64, torch.float64)
    gemm_dtype = np.dtype(stats_dtype or (np.float64 if wide else np.float32))
    if gemm_dtype == np.float32 and not (
        moments.is_finite() and not _underflows(moments, X, Y, np.float32)
    ):
        # float32 products overflow from about 1e19 and lose all precision below about
        # 1e-19: the same statistics in float64 are right up to 1e154 (rare, so the slower
        # pass is paid only here).
        moments = moments_in_dtype(X, Y, sample_weight, stats_dtype=np.float64, **options)
    if not moments.is_finite():
        raise_not_finite(X, Y)
    if _underflows(moments, X, Y, np.float64):
        raise ValueError(
            f"The values of X and Y are too small for float64 products (largest "
            f"|X| {largest_abs(X):.3g}, |Y| {largest_abs(Y):.3g}): their products underflow "
            "to zero. Rescale them (e.g. divide by their largest value) before fitting."
        )
    return moments, int(X.shape[0])


def _underflows(moments, X, Y, dtype):
    """Whether products of X and Y entries fall where ``dtype`` has lost its precision.

    Products below 2**24 times the smallest normal number keep fewer than 24 bits.  The
    inputs are scanned only when the statistics are that small (they are also small, and
    rightly so, for a single centred row or all-zero data).
    """
    limit = np.finfo(dtype).tiny * 2.0**24
    largest = np.abs(moments.cross).max(initial=0.0)
    if not np.isnan(moments.sq_x):
        largest = max(largest, abs(moments.sq_x))
    if largest >= limit:
        return False
    peak_x, peak_y = largest_abs(X), largest_abs(Y)
    return peak_x > 0 and peak_y > 0 and peak_x * peak_y < limit

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
from .validation import raise_not_finite

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
    centered, need_gram, need_means, need_sq_x : bool
        Passed to :func:`compute_moments` (Dask input always computes the means and
        ``sq_x``).
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
    moments = moments_in_dtype(
        X,
        Y,
        sample_weight,
        centered=centered,
        need_gram=need_gram,
        need_means=need_means,
        need_sq_x=need_sq_x,
        device=resolve_device(estimator.device),
        stats_dtype=stats_dtype,
    )
    if not moments.is_finite():
        raise_not_finite(X, Y)
    return moments, int(X.shape[0])



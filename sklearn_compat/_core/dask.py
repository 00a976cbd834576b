"""Dask arrays: sufficient statistics reduced on the cluster, lazy transforms.

Only imported once a Dask array has been seen (see ``_backend.is_dask_collection``), so
Dask stays an optional extra.

Fitting: X and Y are given one column chunk each and the same row chunks; every pair of
blocks is validated (finite values, matching rows, non-negative weights) and reduced to a
:class:`~.moments.PairMoments` on the worker that holds it, and the per-block statistics
are merged on the cluster along a fixed binary tree with the same exact merge as
``partial_fit``.  Only the merged statistics (a few (d, d) matrices) reach the client, so
the rows never leave the workers.

Transforming: ``X.map_blocks`` with the fitted ``(A, b)``, a lazy Dask array with X's row
chunks.
"""

import warnings

import numpy as np
from sklearn.utils import check_array
from sklearn.utils.validation import _check_feature_names, _check_n_features, check_is_fitted

from .backend import apply_affine, as_numpy_input, resolve_device
from .moments import moments_in_dtype
from .validation import check_float_dtype, check_target_width

__all__ = ["checked_dask_pair", "dask_batch_moments", "dask_transform"]


def _as_dask_2d(data, name, row_chunks=None):
    """``data`` as a 2-d Dask array with a single column chunk (1-d becomes one column)."""
    import dask.array as da

    if data is None:
        raise ValueError(
            "This estimator requires y to be passed, but the target y is None: pass Y, "
            "the target embeddings of the same rows."
        )
    if not isinstance(data, da.Array):
        data = np.asarray(as_numpy_input(data))
        if row_chunks is None or np.isnan(sum(row_chunks)):
            data = da.from_array(data)
        else:
            data = da.from_array(data, chunks=(row_chunks,) + data.shape[1:])
    if name != "X" and data.ndim == 1:
        data = data[:, None]
    if data.ndim != 2:
        raise ValueError(f"{name} must be 2-d, got a Dask array with {data.ndim} dimension(s).")
    if np.isnan(data.shape[1]):
        raise ValueError(f"{name} has an unknown number of columns; call compute_chunk_sizes().")
    return data.rechunk({1: -1})


def _align_rows(data, X, name):
    """Give ``data`` X's row chunks (checking the row count when both are known)."""
    known = not (np.isnan(X.shape[0]) or np.isnan(data.shape[0]))
    if known and data.shape[0] != X.shape[0]:
        raise ValueError(
            f"X and {name} must have the same number of rows, got {X.shape[0]} and "
            f"{data.shape[0]}."
        )
    if data.chunks[0] == X.chunks[0]:
        return data
    if known and not any(np.isnan(c) for c in X.chunks[0] + data.chunks[0]):
        return data.rechunk({0: X.chunks[0]})
    if data.numblocks[0] == X.numblocks[0]:
        return data  # unknown sizes: each block pair is checked on its worker
    raise ValueError(
        f"X and {name} have unknown row chunk sizes and different numbers of row blocks; "
        "call compute_chunk_sizes() on them or give them the same chunks."
    )


def _block_moments(x, y, w, *, dtype, centered, need_gram, stats_dtype, device):
    """Validate one block pair and reduce it to ``(PairMoments, n_rows)`` (runs on a worker)."""
    x = check_array(x, dtype=dtype, ensure_min_samples=0, input_name="X")
    y = check_array(y, dtype=dtype, ensure_min_samples=0, input_name="Y")
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"X and Y must have the same number of rows, but a block pair has {x.shape[0]} "
            f"and {y.shape[0]}; give X and Y the same row chunks."
        )
    if w is not None:
        w = check_array(w, dtype=dtype, ensure_2d=False, ensure_min_samples=0, input_name="w")
        if w.shape != (x.shape[0],):
            raise ValueError(
                f"sample_weight must have one value per row: a block of X has {x.shape[0]} "
                f"rows but its weights have shape {w.shape}."
            )
        if np.any(w < 0):
            raise ValueError("Negative values in data passed to sample_weight.")
    moments = moments_in_dtype(
        x,
        y,
        w,
        centered=centered,
        need_gram=need_gram,
        device=resolve_device(device),
        stats_dtype=stats_dtype,
    )
    return moments, x.shape[0]


def _merge(left, right):
    return left[0].merge(right[0]), left[1] + right[1]


def checked_dask_pair(X, Y, sample_weight):
    """Dask ``(X, Y, sample_weight)`` with the checks that need no data made (shapes,
    dtypes), and known row chunk sizes, so that rows can be taken by index (a choice of
    settings reads held-out rows before the fit's reduction)."""
    X = _as_dask_2d(X, "X")
    Y = _align_rows(_as_dask_2d(Y, "Y", X.chunks[0]), X, "Y")
    check_float_dtype(X.dtype, "X")
    check_float_dtype(Y.dtype, "Y")
    if sample_weight is not None:
        sample_weight = _align_rows(
            _as_dask_2d(sample_weight, "sample_weight", X.chunks[0]), X, "sample_weight"
        )[:, 0]
    if np.isnan(X.shape[0]):
        # Unknown sizes (e.g. after boolean masking): one pass computes them.
        X, Y = X.compute_chunk_sizes(), Y.compute_chunk_sizes()
        if sample_weight is not None:
            sample_weight = sample_weight.compute_chunk_sizes()
        _align_rows(Y, X, "Y")
    return X, Y, sample_weight


def dask_batch_moments(estimator, X, Y, sample_weight, *, reset, centered, need_gram, stats_dtype):
    """:func:`~.pair_stats.batch_moments` for Dask input; computes on the current scheduler.

    With a ``dask.distributed`` client active the blocks are reduced on its workers.
    """
    import dask

    # Checks that need no data: shapes, dtypes, parameters.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        resolve_device(estimator.device, for_inference=True)  # validates the spelling
    X = _as_dask_2d(X, "X")
    Y = _align_rows(_as_dask_2d(Y, "Y", X.chunks[0]), X, "Y")
    dtype = check_float_dtype(X.dtype, "X")
    check_float_dtype(Y.dtype, "Y")
    if sample_weight is not None:
        sample_weight = _as_dask_2d(sample_weight, "sample_weight", X.chunks[0])
        if sample_weight.shape[1] != 1:
            raise ValueError(f"sample_weight must be 1-d, got shape {sample_weight.shape}.")
        sample_weight = _align_rows(sample_weight, X, "sample_weight")[:, 0]
        check_float_dtype(sample_weight.dtype, "sample_weight")
    if not np.isnan(X.shape[0]) and X.shape[0] == 0:
        raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
    _check_n_features(estimator, X, reset=reset)
    _check_feature_names(estimator, X, reset=reset)
    if reset:
        estimator._target_names = None
    else:
        check_target_width(estimator, Y.shape[1])

    options = dict(
        dtype=dtype,
        centered=centered,
        need_gram=need_gram,
        stats_dtype=stats_dtype,
        device=str(estimator.device),
    )
    block = dask.delayed(_block_moments, pure=True)
    merge = dask.delayed(_merge, pure=True)
    x_blocks = X.to_delayed().ravel()
    y_blocks = Y.to_delayed().ravel()
    w_blocks = (
        [None] * len(x_blocks) if sample_weight is None else sample_weight.to_delayed().ravel()
    )
    parts = [
        block(x, y, w, **options) for x, y, w in zip(x_blocks, y_blocks, w_blocks, strict=True)
    ]
    # A fixed binary tree: the merge order (hence the rounding) does not depend on timing.
    while len(parts) > 1:
        pairs = [merge(a, b) for a, b in zip(parts[::2], parts[1::2], strict=False)]
        parts = pairs + ([parts[-1]] if len(parts) % 2 else [])
    ((moments, n_rows),) = dask.compute(parts[0])
    if n_rows == 0:
        raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
    return moments, int(n_rows)


def _transform_block(x, A, b, *, out_dtype, device):
    x = check_array(x, dtype=out_dtype, ensure_min_samples=0, input_name="X")
    return apply_affine(x, A, b, resolve_device(device, for_inference=True))


def dask_transform(estimator, X):
    """``estimator.transform`` of a Dask array: a lazy Dask array (nothing is computed)."""
    check_is_fitted(estimator)
    X = _as_dask_2d(X, "X")
    dtype = check_float_dtype(X.dtype, "X")
    _check_n_features(estimator, X, reset=False)
    _check_feature_names(estimator, X, reset=False)
    A, b = estimator._affine_map()
    d_out = A.shape[1]
    return X.map_blocks(
        _transform_block,
        A,
        b,
        out_dtype=dtype,
        device=str(estimator.device),
        dtype=dtype,
        chunks=(X.chunks[0], (d_out,)),
        meta=np.empty((0, 0), dtype=dtype),
    )

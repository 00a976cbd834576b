"""The aligner base class: validation of paired inputs, tags, score and feature names."""

import functools
import math
import operator
import warnings
import weakref

import numpy as np
import torch
from sklearn import config_context, get_config
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_array
from sklearn.utils.validation import (
    _check_feature_names,
    _check_feature_names_in,
    _check_n_features,
    check_is_fitted,
    validate_data,
)

from . import backend
from .backend import (
    apply_affine,
    check_tensor,
    checked_input,
    is_dask_collection,
    one_line_errors,
    resolve_device,
    to_torch,
)
from .ranking import paired_topk_share
from .validation import (
    FLOAT_DTYPES,
    NumbersNotBoolsMixin,
    check_target_width,
    pick_target,
    raise_not_finite,
)

__all__ = ["BaseAligner"]

# The arguments of ``fit`` (and ``partial_fit`` and ``score``), one convention for every
# public estimator, checked by tests/test_fit_signatures.py:
#   fit(X, Y=None, <per-row argument>=None, *, y=None, <anything else>=None)
# - the data are positional: X, then Y (``y``, scikit-learn's name, is a keyword-only
#   alias); an estimator of one space takes ``y`` second, as scikit-learn's transformers;
# - at most one per-row argument follows, positional or keyword as scikit-learn's own
#   ``fit(X, y=None, sample_weight=None)``: ``sample_weight``, or ``labels`` for the
#   aligners trained on classes (the two are what metadata routing passes per row);
# - everything else (unpaired pools, seed ``pairs``, ``groups``, ``queries``, ``parallel``)
#   is keyword-only, so that a positional argument never lands in the wrong slot.


class BaseAligner(NumbersNotBoolsMixin, TransformerMixin, BaseEstimator):
    """Common machinery of the estimators that map X's space into Y's space.

    Subclasses implement ``fit`` and set ``W_`` (d_x, d_y); a subclass whose map is affine
    implements :meth:`_affine_map` and inherits :meth:`transform`.

    Conventions shared by every aligner:

    - ``fit(X, Y)`` takes paired rows; ``Y`` is required (a 1-d ``Y`` is one column).
    - numpy arrays, pandas DataFrames and torch tensors on any device are accepted.
    - float32 input gives float32 output, anything else float64.
    - ``score(X, Y)`` is paired top-1 cosine retrieval of ``transform(X)`` against ``Y``.
    - output feature names are ``Y``'s column names when ``Y`` was a DataFrame with string
      columns, else ``<classname>0 ... <classname>{d_y-1}``.
    """

    # ------------------------------------------------------------------ validation
    def _validate_pair(self, X, Y, *, reset, ensure_all_finite=True, keep_tensors=False):
        """Validate paired inputs; returns numpy arrays, Y cast to X's dtype and 2-d.

        ``ensure_all_finite=False`` skips the NaN/inf scan (two extra passes over the
        data) for callers whose own statistics reveal non-finite input, which then call
        :func:`raise_not_finite` for the usual message.  ``keep_tensors=True`` returns a
        pair of torch tensors as (detached) tensors where they are, so that data already
        on a GPU is not copied to the host and back; the checks are the same.
        """
        if Y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None: "
                "pass Y, the target embeddings paired row by row with X."
            )
        if keep_tensors and isinstance(X, torch.Tensor) and isinstance(Y, torch.Tensor):
            return self._validate_tensor_pair(
                X, Y, reset=reset, ensure_all_finite=ensure_all_finite
            )
        X = checked_input(X, "X")
        Y = checked_input(Y, "Y")
        target_names = None
        if reset and hasattr(Y, "columns"):
            columns = np.asarray(Y.columns, dtype=object)
            if len(columns) and all(isinstance(c, str) for c in columns):
                target_names = columns
        # scikit-learn always scans y for NaN/inf; assume_finite is its switch for both
        # (None leaves the user's setting as it is).
        with (
            config_context(assume_finite=None if ensure_all_finite else True),
            one_line_errors(),
        ):
            X, Y = validate_data(
                self,
                X,
                Y,
                reset=reset,
                dtype=FLOAT_DTYPES,
                multi_output=True,
                y_numeric=True,
            )
        Y = np.asarray(Y)
        if Y.ndim == 1:
            Y = Y.reshape(-1, 1)
        Y = Y.astype(X.dtype, copy=False)
        if reset:
            self._target_names = target_names
        else:
            check_target_width(self, Y.shape[1])
        return X, Y

    def _validate_tensor_pair(self, X, Y, *, reset, ensure_all_finite):
        """``_validate_pair`` for two torch tensors, done on their device."""
        name = type(self).__name__
        X = _float_tensor(X, "X")
        Y = _float_tensor(Y, "Y", dtype=X.dtype, allow_1d=True)
        if Y.ndim == 1:
            Y = Y[:, None]
        for label, data in (("X", X), ("Y", Y)):
            if data.shape[0] < 1 or data.shape[1] < 1:
                raise ValueError(
                    f"Found array with {data.shape[0]} sample(s) and {data.shape[1]} "
                    f"feature(s) (shape={tuple(data.shape)}) in {label}, while a minimum of "
                    f"1 of each is required by {name}."
                )
        if X.shape[0] != Y.shape[0]:
            raise ValueError(
                "Found input variables with inconsistent numbers of samples: "
                f"[{X.shape[0]}, {Y.shape[0]}]"
            )
        if ensure_all_finite and not bool(torch.isfinite(X).all() & torch.isfinite(Y).all()):
            raise_not_finite(X, Y)
        # scikit-learn's own bookkeeping of n_features_in_ and (absent) feature names.
        _check_n_features(self, X, reset=reset)
        _check_feature_names(self, X, reset=reset)
        if reset:
            self._target_names = None
        else:
            check_target_width(self, Y.shape[1])
        return X, Y

    def _validate_X(self, X):
        """Validate input of an already-fitted aligner (width must match fit)."""
        check_is_fitted(self)
        with one_line_errors():
            return validate_data(self, checked_input(X, "X"), reset=False, dtype=FLOAT_DTYPES)

    def _validate_target(self, Y, name="Y"):
        """Validate a matrix that lives in Y's space (width ``n_targets_``)."""
        check_is_fitted(self)
        if Y is None:
            raise ValueError(f"{type(self).__name__} needs {name}, the target embeddings.")
        with one_line_errors():
            Y = check_array(
                checked_input(Y, name), dtype=FLOAT_DTYPES, ensure_2d=False, input_name=name
            )
        if Y.ndim == 1:
            Y = Y.reshape(-1, 1)
        check_target_width(self, Y.shape[1], name)
        return Y

    def _compute_device(self):
        """The torch device for transform-time work (falls back to CPU if CUDA is gone)."""
        return resolve_device(self.device, for_inference=True)

    # ------------------------------------------------------------------ transform
    def _affine_map(self):
        """Return ``(A, b)`` with ``transform(X) = X @ A + b`` as float64 numpy arrays."""
        raise NotImplementedError

    def transform(self, X):
        """Map X into Y's space.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features_in_)
            Source embeddings.

        Returns
        -------
        ndarray of shape (n_samples, n_targets_)
            X mapped into Y's space, in X's float dtype (a lazy Dask array with X's row
            chunks when X is a Dask array).

        Notes
        -----
        A row's value does not depend on how many rows come with it, bit for bit, for
        inputs of two rows or more. A single numpy row on a CPU model is mapped by the
        matrix-vector product on the calling thread, which agrees with its batch value to
        within the rounding of a dot product; the command line and Dask keep every batch,
        one row included, bit-identical. See :ref:`one-query-latency`.

        .. versionchanged:: 0.1.0
           A single row takes the matrix-vector product (before: a padded block).
        """
        fast = _small_transform(self, X)
        if fast is not None:
            return fast
        if is_dask_collection(X):
            from .dask import dask_transform

            return dask_transform(self, X)
        X = self._validate_X(X)
        A, b = self._affine_map()
        return apply_affine(X, A, b, self._compute_device())

    # ------------------------------------------------------------------ scoring
    def score(self, X, Y=None, sample_weight=None, *, y=None):
        """Paired top-1 retrieval accuracy of ``transform(X)`` against ``Y`` (cosine).

        The share of rows whose nearest row of ``Y`` is their own partner; ties count
        against the row.  Computed blockwise, so memory stays bounded on large folds.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
            Source embeddings.
        Y : array-like of shape (n_samples, n_targets_)
            Target embeddings of the same items, same row order.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the rows in the average.
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.

        Returns
        -------
        float
        """
        Y = pick_target(Y, y)
        Z = self.transform(X)
        Y = self._validate_target(Y)
        if Y.shape[0] != Z.shape[0]:
            raise ValueError(
                f"X and Y must have the same number of rows, got {Z.shape[0]} and {Y.shape[0]}."
            )
        return paired_topk_share(Z, Y, sample_weight=sample_weight, device=self._compute_device())

    # ------------------------------------------------------------------ feature names
    @property
    def n_targets_(self):
        """Dimension of Y's space (the width of ``transform``'s output)."""
        check_is_fitted(self)
        return self.W_.shape[1]

    def get_feature_names_out(self, input_features=None):
        """Names of the output columns: Y's column names when Y was a DataFrame.

        Parameters
        ----------
        input_features : array-like of str, default=None
            Checked against ``feature_names_in_`` when given.

        Returns
        -------
        ndarray of str objects
        """
        check_is_fitted(self)
        _check_feature_names_in(self, input_features, generate_names=False)
        names = getattr(self, "_target_names", None)
        if names is not None and len(names) == self.n_targets_:
            return np.asarray(names, dtype=object)
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}{i}" for i in range(self.n_targets_)], dtype=object)

    def __getstate__(self):
        # A torch.device parameter is saved as its string ("cuda:0"), which every method
        # accepts alike: skops then loads the model trusting only the estimator's class.
        state = super().__getstate__()
        if isinstance(state.get("device"), torch.device):
            state = {**state, "device": str(state["device"])}
        return state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.target_tags.multi_output = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def _returns_small_input_before_output_wrapping(wrapped):
    """``transform`` that returns the small-input path's array before scikit-learn's
    ``set_output`` wrapper runs, when that wrapper would return it unchanged: for one query
    the wrapper's configuration lookups cost about as much as the product."""

    @functools.wraps(wrapped)
    def transform(self, X):
        if _output_is_default(self):
            fast = _small_transform(self, X)
            if fast is not None:
                return fast
        return wrapped(self, X)

    return transform


def _output_is_default(model):
    """Whether ``set_output`` leaves transform's array as it is (scikit-learn's own rule:
    the estimator's setting, else the global ``transform_output``)."""
    config = model.__dict__.get("_sklearn_output_config")
    if config and "transform" in config:
        return config["transform"] == "default"
    return get_config()["transform_output"] == "default"


BaseAligner.transform = _returns_small_input_before_output_wrapping(BaseAligner.transform)


# The query path: a retrieval service maps a handful of rows per request, where the full
# validation and conversions cost far more than the product itself.  Clean small numpy
# input on a CPU model is checked lightly (type, width, dtype, finiteness) and multiplied
# by a cached copy of the map in its dtype; anything else (other types, a wrong
# width, NaN/inf, a model fitted with feature names, a GPU model) takes the full path,
# which validates and words its errors as always.
# Per model: the state the cached map was derived from, and the map per input dtype.  Kept
# outside the estimator, so it is never pickled and transform leaves __dict__ unchanged.
_FAST_MAPS = weakref.WeakKeyDictionary()


def _small_transform(model, X):
    """``X @ A + b`` in numpy for small clean CPU input, else None (use the full path)."""
    if (
        type(X) is not np.ndarray
        or X.ndim != 2
        or not 0 < X.shape[0] <= backend.SMALL_INPUT_ROWS
        or X.dtype not in FLOAT_DTYPES
        or not (X.flags.c_contiguous and X.flags.writeable)
    ):
        return None
    state = _model_state(model)
    entry = _FAST_MAPS.get(model)
    if entry is None or len(entry[0]) != len(state) or not all(map(operator.is_, entry[0], state)):
        entry = _fast_entry(model, state)
        if entry is None:
            return None
    maps = entry[1]
    if X.shape[1] != maps["n_features"]:
        return None
    # NaN and inf survive a sum; a finite sum that overflows sends clean data to the full
    # path, which then checks element by element.
    if not math.isfinite(X.sum()):
        return None
    A, b, A_numpy, b_numpy = maps.get(X.dtype) or maps.setdefault(X.dtype, _cpu_map(maps, X.dtype))
    if X.shape[0] == 1 and backend.single_row_kernel_allowed():
        # One query: numpy's matrix-vector product on the calling thread (see
        # backend.batch_invariant_rows for what that costs in the last bits).
        out = X @ A_numpy
        out += b_numpy
        return out
    # torch's kernel on the same operands as apply_affine, so this path returns exactly
    # what the full path does (the command line's batch size never changes its output).
    return backend.affine_rows(b, torch.from_numpy(X), A).numpy()


def _cpu_map(maps, dtype):
    """The map in ``dtype`` as CPU tensors and as numpy views of the same memory."""
    torch_dtype = torch.float64 if dtype == np.float64 else torch.float32
    A = to_torch(maps["A"], "cpu", torch_dtype)
    b = to_torch(maps["b"], "cpu", torch_dtype)
    return A, b, A.numpy(), b.numpy()


def _model_state(model):
    """The objects a model's map derives from: any reassignment (refit, set_params, a
    device changed on a search's ``best_estimator_``) invalidates the cached map."""
    state = tuple(vars(model).values())
    best = getattr(model, "best_estimator_", None)
    return state if best is None else state + tuple(vars(best).values())


def _fast_entry(model, state):
    """Cache the float64 map of a fitted CPU model; None when the fast path does not apply."""
    try:
        check_is_fitted(model)
        if hasattr(model, "feature_names_in_"):
            return None
        # A model asking for a device it cannot have warns on every call: leave that
        # (and any GPU model) to the full path.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            device = model._compute_device()
        if caught or device.type != "cpu":
            return None
        A, b = model._affine_map()
        n_features = model.n_features_in_
    except Exception:  # noqa: BLE001 - the full path raises the proper error
        return None
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    entry = (state, {"A": A, "b": b, "n_features": n_features})
    _FAST_MAPS[model] = entry
    return entry


def _float_tensor(data, name, dtype=None, allow_1d=False):
    """A detached floating tensor (float32/float64) on its own device, or a clear error."""
    check_tensor(data, name)
    data = data.detach()
    if data.is_complex():
        raise ValueError(f"Complex data not supported: {name} is a {data.dtype} tensor.")
    if data.ndim != 2 and not (allow_1d and data.ndim == 1):
        raise ValueError(
            f"Expected a 2D tensor for {name}, got a {data.ndim}D tensor of shape "
            f"{tuple(data.shape)} instead."
        )
    if dtype is None:
        # As for arrays: float32 stays float32 (half precisions widen to it), anything
        # else becomes float64.
        if data.dtype in (torch.float16, torch.bfloat16):
            dtype = torch.float32
        elif data.dtype not in (torch.float32, torch.float64):
            dtype = torch.float64
        else:
            dtype = data.dtype
    return data.to(dtype)

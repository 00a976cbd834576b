"""Validation helpers shared by the estimators, the metrics and the query path.

Each raises a one-line ``ValueError`` or ``TypeError`` that names the offending input, so
bad data never surfaces as an error from deep inside torch.
"""

import numbers

import numpy as np
from sklearn import config_context
from sklearn.utils import assert_all_finite, check_array, column_or_1d
from sklearn.utils._param_validation import Interval, InvalidParameterError
from sklearn.utils.validation import _check_sample_weight

from .backend import as_numpy_input, checked_input, one_line_errors

__all__ = [
    "FLOAT_DTYPES",
    "check_embeddings",
    "check_float_dtype",
    "check_positive_int",
    "check_row_labels",
    "check_same_rows",
    "check_same_width",
    "check_target_width",
    "encode_labels",
    "largest_abs",
    "pick_target",
    "query_weights",
    "raise_not_finite",
    "NumbersNotBoolsMixin",
    "is_numeric_constraint",
    "refuse_bool_numbers",
    "refuse_bool_params",
    "stack_unpaired",
]


FLOAT_DTYPES = (np.float64, np.float32)


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


def check_embeddings(A, name, *, ensure_min_samples=1):
    """Validate an embedding matrix: 2-d, float32/float64, finite; returns numpy.

    Torch tensors on any device and pandas DataFrames are accepted.  NaN or infinite
    entries raise a ValueError that names the input.
    """
    if A is None:
        raise ValueError(f"{name} is required, got None.")
    with one_line_errors():
        return check_array(
            checked_input(A, name),
            dtype=(np.float64, np.float32),
            ensure_2d=True,
            ensure_min_samples=ensure_min_samples,
            input_name=name,
        )


# ---------------------------------------------------------------------- validation helpers
def check_positive_int(value, name, *, allow_none=False):
    """``value`` as an int >= 1 (a clear ValueError otherwise)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def check_same_width(A, B, names):
    """Both matrices live in one space: same number of columns."""
    if A.shape[1] != B.shape[1]:
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same number of features (one shared "
            f"space), got {A.shape[1]} and {B.shape[1]}."
        )


def check_same_rows(A, B, names):
    """Row ``i`` of one matrix is the partner of row ``i`` of the other."""
    if A.shape[0] != B.shape[0]:
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same number of rows (paired items), "
            f"got {A.shape[0]} and {B.shape[0]}."
        )


def query_weights(sample_weight, n_queries):
    """Validated non-negative query weights (ones when None)."""
    return _check_sample_weight(
        sample_weight, np.empty((n_queries, 0)), dtype=np.float64, ensure_non_negative=True
    )


def encode_labels(*label_arrays, names=None):
    """Integer codes for one or more label arrays over their shared set of classes."""
    names = names or [f"labels{i}" for i in range(len(label_arrays))]
    arrays = []
    for labels, name in zip(label_arrays, names, strict=True):
        labels = np.asarray(as_numpy_input(labels))
        if labels.ndim != 1:
            raise ValueError(f"{name} must be 1-d, got shape {labels.shape}.")
        if labels.dtype.kind == "f" and np.isnan(labels).any():
            raise ValueError(f"{name} contains NaN.")
        arrays.append(labels)
    try:
        _, codes = np.unique(np.concatenate(arrays), return_inverse=True)
    except TypeError as exc:
        raise TypeError(f"class labels must be mutually comparable: {exc}") from None
    splits = np.cumsum([len(a) for a in arrays])[:-1]
    return [c.astype(np.int64) for c in np.split(codes.ravel(), splits)]


def raise_not_finite(X, Y):
    """Raise scikit-learn's message for the array that holds NaN or infinity.

    Called when statistics computed without a prior scan came out non-finite; if neither
    input holds NaN/inf, the float arithmetic itself overflowed.  Accepts numpy arrays
    or torch tensors (this error path may copy them to the host).
    """
    with config_context(assume_finite=False):
        assert_all_finite(as_numpy_input(X), input_name="X")
        assert_all_finite(as_numpy_input(Y), input_name="Y")
    dtype = str(X.dtype).removeprefix("torch.")
    # Only float32 gains from float64 (range 1e19 -> 1e154); float64 input must be rescaled.
    wider = ", or pass float64" if dtype == "float32" else ""
    raise ValueError(
        f"The products of X and Y overflow {dtype}: the values are too large (largest "
        f"|X| {largest_abs(X):.3g}, |Y| {largest_abs(Y):.3g}); rescale them (e.g. divide by "
        f"their largest value){wider} before fitting."
    )


def largest_abs(A):
    """Largest absolute entry of an array or tensor (0.0 when empty), for messages."""
    A = as_numpy_input(A)
    return float(np.abs(A).max()) if A.size else 0.0


def pick_target(Y, y):
    """The target passed as ``Y`` (our name) or ``y`` (scikit-learn's), not both."""
    if y is None:
        return Y
    if Y is not None:
        raise TypeError("Pass the target embeddings as Y or as y, not both.")
    return y


def check_row_labels(labels, n_rows, name="labels"):
    """Class labels of ``n_rows`` rows as integer codes (a clear error otherwise).

    Lists, Series and tensors on any device are accepted; a column vector is accepted with
    scikit-learn's warning, anything else must be 1-d.  NaN is not a class and is refused,
    as in the label metrics.
    """
    labels = np.asarray(as_numpy_input(labels))
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = column_or_1d(labels, warn=True)
    if labels.ndim != 1:
        raise ValueError(f"{name} must be 1-d, one class label per row; got shape {labels.shape}.")
    if labels.shape[0] != n_rows:
        raise ValueError(
            f"{name} has {labels.shape[0]} entries, but X has {n_rows} rows; pass one class "
            "label per row."
        )
    (codes,) = encode_labels(labels, names=[name])
    return codes


def check_target_width(estimator, width, name="Y"):
    """``width`` columns must match the target space ``estimator`` maps into."""
    if width != estimator.n_targets_:
        raise ValueError(
            f"{name} has {width} features, but {type(estimator).__name__} maps into a space "
            f"of {estimator.n_targets_} features (it was fitted with {estimator.n_targets_} "
            "target features)."
        )


def is_numeric_constraint(constraints):
    """Whether a parameter's constraints make it a number (True/False not among them).

    A number is an ``Interval``, a number type (``Real``) or a ``"random_state"`` seed; a
    parameter that also lists ``"boolean"`` takes True/False on purpose (``center="auto"``
    or a bool).
    """
    numeric = any(
        isinstance(c, Interval)
        or (isinstance(c, type) and issubclass(c, numbers.Number))
        or (isinstance(c, str) and c == "random_state")
        for c in constraints
    )
    return numeric and "boolean" not in constraints


def refuse_bool_params(params, constraints, owner):
    """Refuse True/False given for any numeric parameter of ``constraints``.

    Python counts a bool as the integer 1 or 0, so scikit-learn's ``Interval(Real, ...)``
    and ``Interval(Integral, ...)`` accept ``alpha=True`` as 1 (checked with scikit-learn
    1.9), which is never what the caller meant.  ``owner`` names the estimator or function
    in the message.
    """
    for name, value in params.items():
        if name in constraints and isinstance(value, bool | np.bool_):
            if is_numeric_constraint(constraints[name]):
                raise InvalidParameterError(
                    f"The {name!r} parameter of {owner} must be a number, got {value!r} (a bool)."
                )


def refuse_bool_numbers(estimator):
    """:func:`refuse_bool_params` of an estimator's parameters."""
    refuse_bool_params(
        estimator.get_params(deep=False),
        estimator._parameter_constraints,
        type(estimator).__name__,
    )


class NumbersNotBoolsMixin:
    """Estimators whose parameter validation also refuses a bool given for a number.

    scikit-learn runs ``_validate_params`` at the start of ``fit`` and ``partial_fit``
    (``_fit_context``); this adds :func:`refuse_bool_numbers` to it, so that every public
    estimator applies the one rule.  List it before ``BaseEstimator``.
    """

    def _validate_params(self):
        super()._validate_params()
        refuse_bool_numbers(self)


def stack_unpaired(paired, unpaired, name):
    """The paired rows followed by the unpaired ones (same width and dtype)."""
    if unpaired is None:
        return paired
    extra = check_embeddings(checked_input(unpaired, name), name).astype(paired.dtype)
    if extra.shape[1] != paired.shape[1]:
        raise ValueError(
            f"{name} has {extra.shape[1]} features, but the paired rows have {paired.shape[1]}."
        )
    return np.concatenate([paired, extra])

"""One rule for every public estimator: True/False is never taken for a number (issue 33).

Python counts a bool as 1 or 0, and scikit-learn's ``Interval`` constraints accept it, so
``AffineAligner(alpha=True)`` fitted with ``alpha=1`` while ``LambdaOrthAligner(lam=True)``
was refused.  Every numeric parameter of every public estimator is now refused alike.
"""

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

import sklearn_compat
from sklearn_compat import AlignedNeighbors, OrthogonalProcrustesAligner, lambda_orth_path
from sklearn_compat._core.validation import is_numeric_constraint

from _helpers import public_estimators

ESTIMATORS = public_estimators()


def _numeric_params(cls):
    return sorted(
        name
        for name, constraints in cls._parameter_constraints.items()
        if is_numeric_constraint(constraints)
    )


CASES = [(cls, name) for cls in ESTIMATORS for name in _numeric_params(cls)]


def _fit(cls, params):
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(40, 4)), rng.normal(size=(40, 4))
    if cls is AlignedNeighbors:
        aligner = OrthogonalProcrustesAligner(center=True, scale=False).fit(X, Y)
        return cls(aligner, **params).fit(Y)
    if cls is sklearn_compat.RelativeAnchorEncoder:
        return cls(**params).fit(X)
    return cls(**params).fit(X, Y)


def test_every_public_estimator_and_its_numbers_are_covered():
    names = {cls.__name__ for cls in ESTIMATORS}
    assert {"AffineAligner", "AlignedNeighbors", "LambdaOrthAligner"} <= names
    assert len(ESTIMATORS) >= 10
    assert ("alpha" in _numeric_params(sklearn_compat.AffineAligner)) and (
        "n_neighbors" in _numeric_params(AlignedNeighbors)
    )
    # A parameter that takes True/False on purpose is not a number.
    assert "center" not in _numeric_params(OrthogonalProcrustesAligner)


@pytest.mark.parametrize("value", [True, False, np.True_])
@pytest.mark.parametrize("cls, name", CASES, ids=[f"{cls.__name__}-{name}" for cls, name in CASES])
def test_a_bool_given_for_a_number_is_refused_at_fit(cls, name, value):
    with pytest.raises(InvalidParameterError, match=f"'{name}' parameter of {cls.__name__}"):
        _fit(cls, {name: value})


def test_lambda_orth_path_refuses_a_bool_for_its_numbers():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(30, 3)), rng.normal(size=(30, 3))
    for name in ("warm_tol", "warm_n_iter_no_change", "error_score"):
        with pytest.raises(InvalidParameterError, match=f"'{name}' parameter of lambda_orth_path"):
            lambda_orth_path(X, Y, [0.0, 1.0], **{name: True})

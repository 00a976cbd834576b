"""scikit-learn's estimator checks over every public estimator, discovered.

Every class exported by ``sklearn_compat`` that is a scikit-learn estimator is checked, so a
new estimator cannot miss ``check_estimator``: with no entry in ``PARAMS`` it is checked
with its defaults.  ``PARAMS`` lists, per class, the parameter sets checked (defaults
first, then the variants whose code paths differ, and settings that keep the checks fast).
Expected failures are listed in ``EXPECTED_FAILED_CHECKS`` with their reasons; the list is
empty when every check passes.
"""

import inspect

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.estimator_checks import parametrize_with_checks

import sklearn_compat
from sklearn_compat import LambdaOrthAligner, OrthogonalProcrustesAligner


def public_estimators():
    """``(name, class)`` of every estimator class in ``sklearn_compat.__all__``, sorted."""
    found = []
    for name in sklearn_compat.__all__:
        obj = getattr(sklearn_compat, name)
        if inspect.isclass(obj) and issubclass(obj, BaseEstimator):
            found.append((name, obj))
    return sorted(found)


# {class name: [parameter sets]}; a class without an entry is checked with its defaults.
PARAMS = {
    "AffineAligner": [{}, {"fit_intercept": False, "alpha": 0.5}, {"rank": 1}],
    "OrthogonalProcrustesAligner": [
        {},
        {"center": True, "scale": True, "allow_reflection": False},
    ],
    "LambdaOrthAligner": [
        {},
        {"lam": 0.0, "strict": True, "bidirectional": True, "fit_intercept": False},
    ],
    "LambdaOrthAlignerCV": [
        {
            "lams": [0.0, np.inf],
            "estimator": LambdaOrthAligner(max_epochs=2, random_state=0),
            "cv": 2,
        }
    ],
    "RelativeAnchorEncoder": [
        {"random_state": 0},
        {"n_anchors": 3, "center": False, "random_state": 0},
        {"n_anchors": 3, "anchors": "stratified", "random_state": 0},
        {"n_anchors": 3, "anchors": "kmeans", "similarity": "euclidean", "random_state": 0},
        {"n_anchors": 3, "anchors": "fps", "similarity": "wip", "normalize": "standard"},
        {
            "n_anchors": 3,
            "anchors": "param",
            "similarity": "wip",
            "max_epochs": 2,
            "random_state": 0,
        },
        {
            "n_anchors": 3,
            "anchors": "kmeans_mixture",
            "similarity": "dot",
            "normalize": "l2",
            "random_state": 0,
        },
    ],
    "WhitenedProcrustesAligner": [
        {},
        {"normalize": False, "center": False, "reweight": 0.5, "n_components": 1},
    ],
    "RefinedProcrustesAligner": [
        {},
        {"estimator": OrthogonalProcrustesAligner(), "n_refinements": 1, "csls_k": 2},
    ],
    "ResidualAdapterAligner": [{"hidden": 4, "max_epochs": 2, "random_state": 0}],
    "UnpairedProcrustesAligner": [
        {"random_state": 0},
        {"init": "cluster_match", "n_init": 1, "max_iter": 2, "random_state": 0},
    ],
    "RCSLSAligner": [
        {"max_iter": 3, "random_state": 0},
        {"center": False, "spectral_clip": False, "validation_fraction": 0.0, "max_iter": 2},
    ],
}

# {class name: reason} of estimators that check_estimator cannot construct or feed.
NOT_CHECKED = {
    "AlignedNeighbors": "wraps an already fitted aligner, and fit takes a gallery of that "
    "aligner's width, which the checks' data of other widths cannot match; its interface "
    "is tested in tests/test_neighbors.py",
}

ESTIMATORS = [
    cls(**params)
    for name, cls in public_estimators()
    if name not in NOT_CHECKED
    for params in PARAMS.get(name, [{}])
]

# {estimator class name: {check name: reason}}
EXPECTED_FAILED_CHECKS: dict = {}


def _expected_failed_checks(estimator):
    return EXPECTED_FAILED_CHECKS.get(type(estimator).__name__, {})


def test_discovery_finds_every_estimator_in_the_params_table():
    # The table names only classes that exist, and discovery finds at least those (a
    # typo in the table, or an estimator dropped from __all__, fails here).
    names = {name for name, _ in public_estimators()}
    assert set(PARAMS) <= names


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)

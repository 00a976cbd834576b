"""scikit-learn's estimator checks over every public estimator.

Expected failures are listed in ``EXPECTED_FAILED_CHECKS`` with their reasons; the list is
empty when every check passes.
"""

import numpy as np
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_compat import (
    AffineAligner,
    LambdaOrthAligner,
    LambdaOrthAlignerCV,
    OrthogonalProcrustesAligner,
    RefinedProcrustesAligner,
    RelativeAnchorEncoder,
    ResidualAdapterAligner,
    WhitenedProcrustesAligner,
)

ESTIMATORS = [
    AffineAligner(),
    AffineAligner(fit_intercept=False, alpha=0.5),
    AffineAligner(rank=1),
    OrthogonalProcrustesAligner(),
    OrthogonalProcrustesAligner(center=True, scale=True, allow_reflection=False),
    LambdaOrthAligner(),
    LambdaOrthAligner(lam=0.0, strict=True, bidirectional=True, fit_intercept=False),
    RelativeAnchorEncoder(n_anchors=3, random_state=0),
    RelativeAnchorEncoder(n_anchors=3, anchors="stratified", random_state=0),
    RelativeAnchorEncoder(n_anchors=3, anchors="kmeans", similarity="euclidean", random_state=0),
    RelativeAnchorEncoder(n_anchors=3, anchors="fps", similarity="wip", normalize="standard"),
    RelativeAnchorEncoder(
        n_anchors=3, anchors="param", similarity="wip", max_epochs=2, random_state=0
    ),
    RelativeAnchorEncoder(
        n_anchors=3, anchors="kmeans_mixture", similarity="dot", normalize="l2", random_state=0
    ),
    LambdaOrthAlignerCV(
        lams=[0.0, np.inf], estimator=LambdaOrthAligner(max_epochs=2, random_state=0), cv=2
    ),
    WhitenedProcrustesAligner(),
    RefinedProcrustesAligner(),
    ResidualAdapterAligner(hidden=4, max_epochs=2, random_state=0),
    RefinedProcrustesAligner(OrthogonalProcrustesAligner(), n_refinements=1, csls_k=2),
    WhitenedProcrustesAligner(normalize=False, center=False, reweight=0.5, n_components=1),
]

# {estimator class name: {check name: reason}}
EXPECTED_FAILED_CHECKS: dict = {}


def _expected_failed_checks(estimator):
    return EXPECTED_FAILED_CHECKS.get(type(estimator).__name__, {})


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)

"""Property: at any finite scale from 1e-30 to 1e30, in float32 and float64, every metric
and every estimator's ``score`` gives the scale-free answer, or refuses with a clear error.

Cosines and ranks do not depend on the scale of the embeddings, so the answer at scale 1 is
the right answer at every scale.  Seeded draws of the scale (log-uniform) plus the ends and
the float32 danger zones (squares overflow above ~1e19, underflow below ~1e-19).
"""

import re

import numpy as np
import pytest
from scipy.stats import ortho_group

from sklearn_compat import (
    AffineAligner,
    LambdaOrthAligner,
    OrthogonalProcrustesAligner,
    RelativeAnchorEncoder,
)
from sklearn_compat.metrics import (
    cmc_topk_accuracy,
    mean_average_precision,
    mean_cosine_similarity,
    neighbourhood_preservation,
    paired_topk_accuracy,
)

N, D = 120, 6
SCALES = sorted(
    {1e-30, 1e-25, 1e-20, 1e20, 1e25, 1e30}
    | set(10.0 ** np.random.default_rng(14).uniform(-30, 30, size=6))
)
DTYPES = [np.float32, np.float64]
# A refusal must say what is wrong and what to do.
CLEAR_ERROR = r"(too large|too small|overflow|underflow).*(rescale|Rescale)"


@pytest.fixture(scope="module")
def pair():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D))
    Y = X @ ortho_group.rvs(D, random_state=0) + 0.3 * rng.normal(size=(N, D))
    labels = rng.integers(0, 4, size=N)
    return X, Y, labels


METRICS = {
    "mean_cosine": lambda X, Y, lab: mean_cosine_similarity(X, Y),
    "top1": lambda X, Y, lab: paired_topk_accuracy(X, Y, k=1),
    "top5_csls": lambda X, Y, lab: paired_topk_accuracy(X, Y, k=5, csls_k=5),
    "cmc": lambda X, Y, lab: cmc_topk_accuracy(X, Y, lab, k=1),
    "map": lambda X, Y, lab: mean_average_precision(X, Y, lab),
    "neighbourhoods": lambda X, Y, lab: neighbourhood_preservation(X, Y, k=5),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("name", sorted(METRICS))
def test_metrics_do_not_depend_on_the_scale(pair, name, dtype):
    X, Y, labels = pair
    metric = METRICS[name]
    expected = metric(X.astype(dtype), Y.astype(dtype), labels)
    for scale in SCALES:
        got = metric((X * scale).astype(dtype), (Y * scale).astype(dtype), labels)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        assert got == pytest.approx(expected, abs=tol), (name, scale)
    # The very case of the report: a cosine of a row with itself is 1, never 1e16.
    tiny = (Y * 1e-30).astype(dtype)
    assert mean_cosine_similarity(tiny, tiny) == pytest.approx(1.0, abs=1e-6)


ESTIMATORS = {
    "procrustes": lambda: OrthogonalProcrustesAligner(),
    "procrustes_centred": lambda: OrthogonalProcrustesAligner(center=True, scale=True),
    "affine": lambda: AffineAligner(),
    "lambda_orth": lambda: LambdaOrthAligner(max_epochs=2, random_state=0),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_score_is_right_or_a_clear_error(pair, name, dtype):
    X, Y, _ = pair
    expected = ESTIMATORS[name]().fit(X.astype(dtype), Y.astype(dtype)).score(X, Y)
    assert expected > 0.9
    for scale in SCALES:
        Xs, Ys = (X * scale).astype(dtype), (Y * scale).astype(dtype)
        try:
            est = ESTIMATORS[name]().fit(Xs, Ys)
        except ValueError as exc:
            assert "pass float64" not in str(exc) and re.search(CLEAR_ERROR, str(exc)), exc
            continue
        assert est.score(Xs, Ys) == pytest.approx(expected, abs=0.02), (name, scale)
        assert est.transform(Xs).dtype == dtype


@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_float64_far_beyond_1e154_is_refused_clearly_or_fitted(pair, scale):
    X, Y, _ = pair
    for make in ESTIMATORS.values():
        try:
            est = make().fit(X * scale, Y * scale)
        except ValueError as exc:
            assert "pass float64" not in str(exc) and re.search(CLEAR_ERROR, str(exc)), exc
        else:
            assert est.score(X * scale, Y * scale) > 0.9


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("anchors", ["random", "kmeans", "fps"])
def test_relative_cosine_representation_does_not_depend_on_the_scale(pair, dtype, anchors):
    X = pair[0].astype(dtype)
    expected = RelativeAnchorEncoder(n_anchors=8, anchors=anchors, random_state=0).fit_transform(X)
    for scale in (1e-30, 1e-20, 1e20, 1e30):
        Xs = (pair[0] * scale).astype(dtype)
        got = RelativeAnchorEncoder(n_anchors=8, anchors=anchors, random_state=0).fit_transform(Xs)
        np.testing.assert_allclose(got, expected, atol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("similarity", ["dot", "euclidean"])
def test_scale_dependent_similarities_refuse_float32_beyond_its_range(pair, similarity):
    for scale in (1e-30, 1e30):
        Xs = (pair[0] * scale).astype(np.float32)
        with pytest.raises(ValueError, match="rescale X, or pass float64"):
            RelativeAnchorEncoder(n_anchors=8, similarity=similarity).fit(Xs)
        # float64 holds these products: the representation is finite and exact.
        R = RelativeAnchorEncoder(n_anchors=8, similarity=similarity, random_state=0)
        assert np.isfinite(R.fit_transform(Xs.astype(np.float64))).all()

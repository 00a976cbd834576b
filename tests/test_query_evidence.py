"""The query path's form decided by the aligner's held-out fold (issue 22).

``OrthogonalProcrustesAligner``'s ``"auto"`` fit scores its held-out fold through every
form the query path can use (``query_scores_``); ``AlignedNeighbors`` with its ``"auto"``
settings ranks by the form that beats the default there by more than the margin.
"""

import numpy as np
import pytest
from scipy.stats import ortho_group

from sklearn_compat import AlignedNeighbors, OrthogonalProcrustesAligner
from sklearn_compat._core.query_policy import (
    QUERY_MARGIN,
    query_comparison_form,
    query_csls_k,
    query_evidence,
    query_path_scores,
)

from _helpers import brute_force_top1


def test_query_path_scores_agree_with_a_brute_force_reference():
    rng = np.random.default_rng(0)
    G = rng.normal(size=(60, 5)) + 1.5
    Z = G + 0.8 * rng.normal(size=G.shape)
    center = G.mean(axis=0)
    scores = query_path_scores(Z, G, center=center, k=4)
    assert set(scores) == {"raw", "raw+csls", "centered", "centered+csls"}
    for name, (A, B) in {"raw": (Z, G), "centered": (Z - center, G - center)}.items():
        assert scores[name] == pytest.approx(brute_force_top1(A, B, 4, csls=False))
        assert scores[name + "+csls"] == pytest.approx(brute_force_top1(A, B, 4, csls=True))
    # Too few rows for the CSLS neighbourhood: only the cosine forms.
    assert set(query_path_scores(Z[:4], G[:4], k=4)) == {"raw"}


class _Fitted:
    """Only what the query path's decisions read."""

    def __init__(self, **attributes):
        vars(self).update(attributes)


@pytest.mark.parametrize(
    "scores, expected",
    [
        # The default (CSLS in the map's own form) keeps its place within the margin...
        (
            {"raw": 0.5, "raw+csls": 0.5, "centered": 0.5 + QUERY_MARGIN, "centered+csls": 0.5},
            (True, True),
        ),
        # ... and yields to a form that beats it by more.
        ({"raw": 0.6, "raw+csls": 0.5, "centered": 0.55, "centered+csls": 0.5}, (False, False)),
        ({"raw": 0.5, "raw+csls": 0.5, "centered": 0.6, "centered+csls": 0.5}, (True, False)),
        ({"raw": 0.5, "raw+csls": 0.4}, (False, False)),  # an uncentred map: raw forms only
        ({"raw": 0.4, "raw+csls": 0.5}, (False, True)),
    ],
)
def test_query_evidence_keeps_the_default_unless_beaten_by_the_margin(scores, expected):
    aligner = _Fitted(query_scores_=scores, center_=True)
    assert query_evidence(aligner) == expected
    assert query_csls_k(aligner, "auto") == (10 if expected[1] else None)
    assert query_comparison_form(aligner, "auto") == (expected[0], False)
    # Explicit settings are what they say.
    assert query_csls_k(aligner, 5) == 5 and query_csls_k(aligner, None) is None
    assert query_comparison_form(aligner, "raw") == (False, False)
    assert query_comparison_form(aligner, "centered") == (True, False)


def test_no_evidence_keeps_the_documented_defaults():
    assert query_evidence(_Fitted(center_=True)) is None
    assert query_evidence(_Fitted(center_=True, query_scores_=None)) is None
    assert query_csls_k(_Fitted(center_=True), "auto") == 10
    assert query_comparison_form(_Fitted(center_=True), "auto") == (True, False)


def _offset_pair(rng, n=800, d=10):
    Q = ortho_group.rvs(d, random_state=3)
    X = rng.normal(size=(n, d)) + 3.0
    Y = (X - 3.0) @ Q + 0.4 * rng.normal(size=(n, d)) - 2.0
    return X, Y


def test_procrustes_records_its_fold_through_the_query_path_and_search_follows_it():
    rng = np.random.default_rng(1)
    X, Y = _offset_pair(rng)
    aligner = OrthogonalProcrustesAligner().fit(X[:600], Y[:600])
    assert aligner.auto_scores_  # the candidates were scored on held-out folds
    scores = aligner.query_scores_
    assert set(scores) == {"raw", "raw+csls", "centered", "centered+csls"}
    assert all(0.0 <= v <= 1.0 for v in scores.values())
    # The fold's "raw" form is the transform's own score of the chosen setting.
    chosen = f"center={aligner.center_}, scale={aligner.scale_mode_!r}"
    assert scores["raw"] == pytest.approx(aligner.auto_scores_[chosen], abs=2e-3)
    search = AlignedNeighbors(aligner).fit(Y[600:])
    centered, csls = query_evidence(aligner)
    assert search.centered_ == centered
    assert search.csls_k_ == (10 if csls else None)
    # Explicit settings record nothing and keep the documented defaults.
    explicit = OrthogonalProcrustesAligner(center=True, scale="spread").fit(X[:600], Y[:600])
    assert explicit.query_scores_ is None
    assert AlignedNeighbors(explicit).fit(Y[600:]).csls_k_ == 10


def test_search_uses_the_form_the_fold_favours():
    # A fitted map whose fold says plain cosine wins: the query path then ranks exactly
    # as transform does (raw cosine against the raw gallery).
    rng = np.random.default_rng(2)
    X, Y = _offset_pair(rng)
    aligner = OrthogonalProcrustesAligner().fit(X[:600], Y[:600])
    aligner.query_scores_ = {"raw": 0.9, "raw+csls": 0.5, "centered": 0.5, "centered+csls": 0.5}
    search = AlignedNeighbors(aligner, n_neighbors=1).fit(Y[600:])
    assert search.csls_k_ is None and not search.centered_
    Z = aligner.transform(X[600:])
    cos = (Z / np.linalg.norm(Z, axis=1, keepdims=True)) @ (
        Y[600:] / np.linalg.norm(Y[600:], axis=1, keepdims=True)
    ).T
    np.testing.assert_array_equal(
        search.kneighbors(X[600:], return_distance=False)[:, 0], cos.argmax(axis=1)
    )

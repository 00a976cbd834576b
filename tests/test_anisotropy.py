"""Anisotropic spaces: the metric, the fit-time warning, and defaults that survive them.

The planted pair shares a rotated signal; the new space sits around a strong common direction
(a large offset, as E5-style models and ReLU features do), the old one around a weaker one,
like the multilingual-e5-small -> all-MiniLM-L6-v2 upgrade.
"""

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import ortho_group

from sklearn_compat import OrthogonalProcrustesAligner, RelativeAnchorEncoder
from sklearn_compat.metrics import AnisotropyWarning, anisotropy, paired_topk_accuracy

from _helpers import brute_force_anisotropy


def _planted_pair(rng, n=600, d=24, offset_new=6.0, offset_old=0.5, noise=0.05):
    """X (new) and Y (old): Y - b = (X - a) Q + noise, |a| far above the spread."""
    S = rng.normal(size=(n, d))
    Q = ortho_group.rvs(d, random_state=3)
    a = offset_new * np.abs(rng.normal(size=d))
    b = offset_old * np.abs(rng.normal(size=d))
    X = S + a
    Y = S @ Q + b + noise * rng.normal(size=(n, d))
    return X, Y, Q


# ----------------------------------------------------------------------------- the metric
@pytest.mark.parametrize("shift", [0.0, 0.5, 3.0])
def test_anisotropy_matches_brute_force(rng, shift):
    X = rng.normal(size=(300, 10)) + shift
    X[7] = 0.0  # an all-zero row: cosine 0 to everything
    mean_norm, mean_cosine = brute_force_anisotropy(X)
    stats = anisotropy(X)
    assert set(stats) == {"mean_norm", "mean_cosine"}
    assert stats["mean_norm"] == pytest.approx(mean_norm, abs=1e-12)
    assert stats["mean_cosine"] == pytest.approx(mean_cosine, abs=1e-12)


def test_anisotropy_sample_is_exact_for_the_rows_drawn(rng):
    X = rng.normal(size=(500, 6)) + 1.0
    stats = anisotropy(X, n_samples=100, random_state=4)
    rows = np.sort(np.random.RandomState(4).choice(500, size=100, replace=False))
    assert stats["mean_cosine"] == pytest.approx(brute_force_anisotropy(X[rows])[1], abs=1e-12)
    assert anisotropy(X, n_samples=100, random_state=4) == stats
    assert stats != anisotropy(X, n_samples=None)


def test_anisotropy_accepts_pandas_and_torch_float32(rng):
    X = (rng.normal(size=(200, 5)) + 2.0).astype(np.float32)
    ref = anisotropy(X.astype(np.float64))
    for data in (pd.DataFrame(X), torch.from_numpy(X)):
        got = anisotropy(data)
        assert got["mean_norm"] == pytest.approx(ref["mean_norm"], abs=1e-6)
        assert got["mean_cosine"] == pytest.approx(ref["mean_cosine"], abs=1e-6)


@pytest.mark.parametrize(
    "X, kwargs, match",
    [
        (np.ones((1, 3)), {}, "minimum of 2"),
        (np.ones((5, 3)), {"n_samples": 1}, "n_samples must be an integer >= 2"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), {}, "X contains NaN"),
    ],
)
def test_anisotropy_bad_input(X, kwargs, match):
    with pytest.raises(ValueError, match=match):
        anisotropy(X, **kwargs)


# ----------------------------------------------------------------------------- the warning
def test_uncentred_procrustes_warns_on_anisotropic_data_naming_the_fix(rng):
    X, Y, _ = _planted_pair(rng)
    assert anisotropy(X)["mean_norm"] > 0.5
    with pytest.warns(AnisotropyWarning, match=r"X is anisotropic.*set center=True"):
        OrthogonalProcrustesAligner(center=False).fit(X, Y)


def test_uncentred_cosine_anchors_warn_at_fit_and_rebase(rng):
    X, Y, _ = _planted_pair(rng)
    with pytest.warns(AnisotropyWarning, match=r"X is anisotropic.*set center=True"):
        enc = RelativeAnchorEncoder(n_anchors=16, center=False, random_state=0).fit(X)
    with pytest.warns(AnisotropyWarning, match=r"X_parallel is anisotropic"):
        enc.rebase(Y + 5.0)


def test_no_warning_with_defaults_or_isotropic_data(rng):
    X, Y, _ = _planted_pair(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AnisotropyWarning)
        OrthogonalProcrustesAligner().fit(X, Y)
        RelativeAnchorEncoder(random_state=0).fit(X).rebase(Y)
        # Euclidean anchors are translation invariant: nothing to warn about.
        RelativeAnchorEncoder(center=False, similarity="euclidean", random_state=0).fit(X)
        Xi, Yi = X - X.mean(axis=0), Y - Y.mean(axis=0)
        OrthogonalProcrustesAligner(center=False).fit(Xi, Yi)


# ----------------------------------------------------------------------------- the defaults
def test_default_procrustes_recovers_the_map_despite_large_offsets(rng):
    X, Y, Q = _planted_pair(rng)
    aligner = OrthogonalProcrustesAligner().fit(X[:500], Y[:500])
    np.testing.assert_allclose(aligner.W_, Q, atol=0.02)
    assert aligner.score(X[500:], Y[500:]) == 1.0
    # The uncentred map fails on the same data (the guard that makes this test bite).
    with pytest.warns(AnisotropyWarning):
        plain = OrthogonalProcrustesAligner(center=False).fit(X[:500], Y[:500])
    assert np.abs(plain.W_ - Q).max() > 0.2
    assert plain.score(X[500:], Y[500:]) < 0.2  # 0.08 measured


def test_default_relative_vectors_stay_comparable_across_spaces(rng):
    X, Y, _ = _planted_pair(rng)
    enc_old = RelativeAnchorEncoder(random_state=0).fit(Y[:500])
    assert enc_old.n_anchors_ == 2 * Y.shape[1]  # n_anchors="auto"
    enc_new = enc_old.rebase(X[:500])
    paired = paired_topk_accuracy(enc_new.transform(X[500:]), enc_old.transform(Y[500:]))
    assert paired > 0.95
    with pytest.warns(AnisotropyWarning):
        # 0.1.0's defaults: uncentred, 128 anchors, raw similarities.
        old = RelativeAnchorEncoder(
            n_anchors=128, center=False, normalize=None, random_state=0
        ).fit(Y[:500])
    with pytest.warns(AnisotropyWarning):
        new = old.rebase(X[:500])
    # 0.01 measured: uncentred cosines to anchors are all about 1 in the new space.
    assert paired_topk_accuracy(new.transform(X[500:]), old.transform(Y[500:])) < 0.1

"""RelativeAnchorEncoder: invariances, anchor strategies, similarities, rebase, errors."""

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import ortho_group
from sklearn.base import clone
from sklearn.covariance import OAS, LedoitWolf

from sklearn_compat import RelativeAnchorEncoder
from sklearn_compat._relative.anchors import stratified_counts
from sklearn_compat._relative.similarity import whitening

from _helpers import brute_force_similarities


def _data(rng, n=120, d=6):
    # Anisotropic, shifted cloud: WIP and the strategies see a non-trivial geometry.
    return rng.normal(size=(n, d)) * np.linspace(0.5, 3.0, d) + 2.0


def _anisotropic_affine(rng, d):
    M = rng.normal(size=(d, d)) + 3.0 * np.eye(d)
    assert abs(np.linalg.det(M)) > 1e-3
    return M, rng.normal(size=d) * 5.0


# ----------------------------------------------------------------------------- invariances
@pytest.mark.parametrize("anchors", ["random", "kmeans", "fps", "kmeans_mixture"])
def test_cosine_invariant_to_rotation_and_scale(rng, anchors):
    X = _data(rng)
    Q = ortho_group.rvs(X.shape[1], random_state=1)
    X2 = 7.5 * X @ Q
    enc = RelativeAnchorEncoder(n_anchors=10, anchors=anchors, random_state=0).fit(X)
    enc2 = RelativeAnchorEncoder(n_anchors=10, anchors=anchors, random_state=0).fit(X2)
    # The geometry the strategies see is invariant too, so they pick the same items.
    np.testing.assert_allclose(enc2.anchors_, 7.5 * enc.anchors_ @ Q, atol=1e-9)
    np.testing.assert_allclose(enc.transform(X), enc2.transform(X2), atol=1e-10)


def test_uncentred_cosine_not_invariant_to_translation(rng):
    # Guard against a test that cannot fail: a shift does change uncentred relative vectors.
    X = _data(rng)
    enc = RelativeAnchorEncoder(n_anchors=10, center=False, random_state=0).fit(X)
    shifted = enc.rebase(X + 3.0)
    assert not np.allclose(enc.transform(X), shifted.transform(X + 3.0), atol=1e-3)


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_centred_relative_vectors_invariant_to_translation(rng, similarity):
    # Each space is centred by its own mean (rebase computes the other space's), so a
    # rotation plus a large common offset in the other space changes nothing.
    X = _data(rng)
    Q = ortho_group.rvs(X.shape[1], random_state=2)
    X2 = X @ Q + 40.0
    enc = RelativeAnchorEncoder(n_anchors=10, similarity=similarity, random_state=0).fit(X)
    other = enc.rebase(X2)
    np.testing.assert_allclose(other.center_, X2.mean(axis=0), atol=1e-10)
    np.testing.assert_allclose(enc.transform(X), other.transform(X2), atol=1e-9)


@pytest.mark.parametrize("anchors", ["random", "fps", "kmeans"])
def test_wip_zero_shrinkage_invariant_to_invertible_affine(rng, anchors):
    X = _data(rng)
    M, t = _anisotropic_affine(rng, X.shape[1])
    X2 = X @ M + t
    kw = dict(n_anchors=12, anchors=anchors, similarity="wip", shrinkage=0.0, eps=0.0)
    enc = RelativeAnchorEncoder(random_state=0, **kw).fit(X)
    enc2 = RelativeAnchorEncoder(random_state=0, **kw).fit(X2)
    np.testing.assert_array_equal(enc.anchor_indices_, enc2.anchor_indices_)
    np.testing.assert_allclose(enc.transform(X), enc2.transform(X2), atol=1e-8)
    # ... and rebase onto the mapped space gives the same relative vectors.
    np.testing.assert_allclose(enc.transform(X), enc.rebase(X2).transform(X2), atol=1e-8)


def test_wip_with_shrinkage_is_not_affine_invariant(rng):
    X = _data(rng)
    M, t = _anisotropic_affine(rng, X.shape[1])
    enc = RelativeAnchorEncoder(n_anchors=12, similarity="wip", shrinkage=0.5, random_state=0)
    enc.fit(X)
    assert not np.allclose(enc.transform(X), enc.rebase(X @ M + t).transform(X @ M + t))


@pytest.mark.parametrize("anchors", ["random", "kmeans_mixture", "param"])
@pytest.mark.parametrize("normalize", [None, "standard", "l2"])
def test_rebase_round_trip(rng, anchors, normalize):
    X = _data(rng)
    enc = RelativeAnchorEncoder(
        n_anchors=8,
        anchors=anchors,
        similarity="wip",
        normalize=normalize,
        max_epochs=2,
        random_state=0,
    ).fit(X)
    same = enc.rebase(X)
    assert same is not enc
    np.testing.assert_array_equal(same.transform(X), enc.transform(X))
    np.testing.assert_array_equal(same.anchors_, enc.anchors_)


def test_rebase_builds_same_items_with_own_statistics(rng):
    X = _data(rng)
    Y = np.tanh(X @ rng.normal(size=(6, 9)))  # another "model", different width
    enc = RelativeAnchorEncoder(n_anchors=8, similarity="wip", normalize="standard")
    enc.set_params(random_state=0).fit(X)
    other = enc.rebase(Y)
    np.testing.assert_array_equal(other.anchor_indices_, enc.anchor_indices_)
    np.testing.assert_allclose(other.anchors_, Y[enc.anchor_indices_])
    ref_mean, ref_L, _ = whitening(Y, "ledoit_wolf", 1e-6)
    np.testing.assert_allclose(other.mean_, ref_mean)
    np.testing.assert_allclose(other.whitening_, ref_L)
    assert other.n_features_in_ == 9
    R = other.transform(Y)
    np.testing.assert_allclose(R.mean(0), 0.0, atol=1e-9)
    np.testing.assert_allclose(R.std(0), 1.0, atol=1e-9)


def test_rebase_param_uses_mixture(rng):
    X = _data(rng)
    Y = X @ rng.normal(size=(6, 4))
    enc = RelativeAnchorEncoder(n_anchors=6, anchors="param", max_epochs=3, random_state=0).fit(
        X, parallel=[Y]
    )
    other = enc.rebase(Y)
    np.testing.assert_allclose(other.anchors_, enc.mixture_ @ Y[enc.support_indices_])


# ----------------------------------------------------------------------------- strategies
def test_random_anchors_distinct_and_repeatable(rng):
    X = _data(rng)
    a = RelativeAnchorEncoder(n_anchors=30, random_state=3).fit(X).anchor_indices_
    b = RelativeAnchorEncoder(n_anchors=30, random_state=3).fit(X).anchor_indices_
    c = RelativeAnchorEncoder(n_anchors=30, random_state=4).fit(X).anchor_indices_
    assert len(np.unique(a)) == 30
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_stratified_per_class_counts(rng):
    X = _data(rng, n=200)
    y = np.repeat(["a", "b", "c", "d"], [100, 60, 30, 10])
    enc = RelativeAnchorEncoder(n_anchors=23, anchors="stratified", random_state=0).fit(X, y)
    labels, counts = np.unique(y[enc.anchor_indices_], return_counts=True)
    got = dict(zip(labels, counts, strict=True))
    # Exact shares 11.5, 6.9, 3.45, 1.15: floors 11, 6, 3, 1 and the two leftover anchors go to
    # the largest remainders (b: 0.9, a: 0.5).
    assert got == {"a": 12, "b": 7, "c": 3, "d": 1}
    assert len(np.unique(enc.anchor_indices_)) == 23


def test_stratified_counts_capped_by_class_size():
    counts = stratified_counts([50, 2, 1], 20)
    assert counts.sum() == 20
    assert np.all(counts <= [50, 2, 1])


def test_fps_matches_brute_force(rng):
    X = _data(rng, n=80)
    enc = RelativeAnchorEncoder(
        n_anchors=15, anchors="fps", similarity="euclidean", random_state=0
    ).fit(X)
    picked = enc.anchor_indices_
    D = np.linalg.norm(X[:, None, :] - X[None, :, :], axis=2)
    for i in range(1, len(picked)):
        nearest = D[:, picked[:i]].min(axis=1)
        assert picked[i] == np.argmax(nearest), i


@pytest.mark.parametrize("center", [False, True])
def test_fps_uses_cosine_geometry(rng, center):
    X = _data(rng, n=60)
    enc = RelativeAnchorEncoder(n_anchors=10, anchors="fps", center=center, random_state=1)
    enc.fit(X)
    Xc = X - X.mean(axis=0) if center else X
    U = Xc / np.linalg.norm(Xc, axis=1, keepdims=True)
    D = np.linalg.norm(U[:, None, :] - U[None, :, :], axis=2)
    picked = enc.anchor_indices_
    for i in range(1, len(picked)):
        assert picked[i] == np.argmax(D[:, picked[:i]].min(axis=1))


def test_kmeans_picks_member_nearest_each_centroid(rng):
    from sklearn.cluster import KMeans

    X = _data(rng, n=150)
    enc = RelativeAnchorEncoder(
        n_anchors=7, anchors="kmeans", similarity="euclidean", random_state=0
    ).fit(X)
    # Re-run the same k-means (same seed derivation) as an independent reference.
    seed = np.random.RandomState(0).randint(2**31 - 1)
    km = KMeans(n_clusters=7, n_init=1, random_state=seed).fit(X)
    for c, idx in enumerate(enc.anchor_indices_):
        members = np.flatnonzero(km.labels_ == c)
        dist = np.linalg.norm(X[members] - km.cluster_centers_[c], axis=1)
        assert idx == members[np.argmin(dist)]
        # Real items: the anchor is exactly a row of X.
        np.testing.assert_array_equal(enc.anchors_[c], X[idx])


def test_kmeans_mixture_is_local_mean(rng):
    X = _data(rng, n=150)
    enc = RelativeAnchorEncoder(
        n_anchors=5,
        anchors="kmeans_mixture",
        n_support=5 * 150,
        similarity="euclidean",
        random_state=0,  # the test used to draw a fresh k-means start on every run
    ).fit(X)
    # n_support >= m n: each anchor averages its whole cluster, i.e. is the centroid.
    np.testing.assert_allclose(enc.mixture_.sum(axis=1), 1.0)
    assert enc.support_indices_.size == 150
    labels = np.argmin(np.linalg.norm(X[:, None, :] - enc.anchors_[None, :, :], axis=2), axis=1)
    for c in range(5):
        np.testing.assert_allclose(enc.anchors_[c], X[labels == c].mean(axis=0), atol=1e-8)


def test_explicit_indices_honoured(rng):
    X = _data(rng)
    idx = [17, 3, 99, 42]
    enc = RelativeAnchorEncoder(anchors=idx).fit(X)
    np.testing.assert_array_equal(enc.anchor_indices_, idx)
    np.testing.assert_array_equal(enc.anchors_, X[idx])
    assert enc.transform(X).shape == (X.shape[0], 4)
    assert list(enc.get_feature_names_out()) == ["anchor0", "anchor1", "anchor2", "anchor3"]


def test_param_mixture_rows_stochastic_and_reproducible(rng):
    X = _data(rng)
    Y = np.tanh(X @ rng.normal(size=(6, 5)))
    kw = dict(n_anchors=6, anchors="param", similarity="wip", max_epochs=3, random_state=7)
    a = RelativeAnchorEncoder(**kw).fit(X, parallel=[Y])
    b = RelativeAnchorEncoder(**kw).fit(X, parallel=[Y])
    assert a.mixture_.shape == (6, a.support_indices_.size)
    assert np.all(a.mixture_ >= 0)
    np.testing.assert_allclose(a.mixture_.sum(axis=1), 1.0)
    np.testing.assert_array_equal(a.mixture_, b.mixture_)
    np.testing.assert_allclose(a.anchors_, a.mixture_ @ X[a.support_indices_])
    assert a.n_epochs_ == 3 and a.history_.shape == (3,)
    c = RelativeAnchorEncoder(**{**kw, "random_state": 8}).fit(X, parallel=[Y])
    assert not np.allclose(a.mixture_, c.mixture_)


def test_param_training_improves_cross_space_agreement(rng):
    # Two spaces related by a non-linear map: learning the mixture must lower the loss and
    # make the relative vectors of the same items agree better than at initialisation.
    X = _data(rng, n=300)
    Y = np.tanh(X @ rng.normal(size=(6, 8)) / 3.0)
    kw = dict(n_anchors=12, anchors="param", similarity="wip", random_state=0, lr=0.05)
    start = RelativeAnchorEncoder(max_epochs=0, **kw).fit(X, parallel=[Y])
    trained = RelativeAnchorEncoder(max_epochs=40, **kw).fit(X, parallel=[Y])
    assert trained.history_[-1] < trained.history_[0]

    def agreement(enc):
        A = enc.transform(X)
        B = enc.rebase(Y).transform(Y)
        A = (A - A.mean(0)) / A.std(0)
        B = (B - B.mean(0)) / B.std(0)
        return np.mean(A * B)  # mean per-anchor correlation across spaces

    assert agreement(trained) > agreement(start) + 0.02


# ----------------------------------------------------------------------------- similarities
@pytest.mark.parametrize("similarity", ["cosine", "euclidean", "dot", "wip"])
@pytest.mark.parametrize("center", [False, True])
def test_similarities_match_brute_force(rng, similarity, center):
    X = _data(rng, n=40)
    enc = RelativeAnchorEncoder(
        n_anchors=9, similarity=similarity, center=center, normalize=None, random_state=0
    ).fit(X)
    Xt = _data(rng, n=15)
    kw = {}
    if similarity == "wip":
        kw = dict(mean=enc.mean_, L=enc.whitening_)
    A = enc.anchors_
    if center and similarity in ("cosine", "dot"):
        # The fit rows' own mean, from fit, never from the rows being transformed.
        Xt, A = Xt - X.mean(axis=0), A - X.mean(axis=0)
    else:
        assert not hasattr(enc, "center_")
    np.testing.assert_allclose(
        enc.transform(Xt if not hasattr(enc, "center_") else Xt + X.mean(axis=0)),
        brute_force_similarities(similarity, Xt, A, **kw),
        atol=1e-9,
    )


@pytest.mark.parametrize(
    "shrinkage, estimator", [("ledoit_wolf", LedoitWolf), ("oas", OAS), (0.3, None)]
)
def test_wip_whitening_matches_sklearn_covariance(rng, shrinkage, estimator):
    X = _data(rng, n=50, d=8)
    enc = RelativeAnchorEncoder(
        n_anchors=5, similarity="wip", shrinkage=shrinkage, eps=0.0, random_state=0
    ).fit(X)
    if estimator is None:
        emp = np.cov(X.T, bias=True)
        cov = 0.7 * emp + 0.3 * np.trace(emp) / 8 * np.eye(8)
        assert enc.shrinkage_ == 0.3
    else:
        fitted = estimator().fit(X)
        cov = fitted.covariance_
        assert enc.shrinkage_ == pytest.approx(fitted.shrinkage_)
    # L is the symmetric inverse square root: L Sigma L = I.
    np.testing.assert_allclose(enc.whitening_ @ cov @ enc.whitening_, np.eye(8), atol=1e-8)
    np.testing.assert_allclose(enc.whitening_, enc.whitening_.T, atol=1e-12)
    np.testing.assert_allclose(enc.mean_, X.mean(0))


def test_wip_eps_is_relative_to_scale(rng):
    X = _data(rng, n=50)
    a = RelativeAnchorEncoder(n_anchors=5, similarity="wip", eps=0.1, random_state=0).fit(X)
    b = RelativeAnchorEncoder(n_anchors=5, similarity="wip", eps=0.1, random_state=0)
    b.fit(1e4 * X)
    np.testing.assert_allclose(a.transform(X), b.transform(1e4 * X), rtol=1e-8)


def test_wip_handles_constant_features(rng):
    # Dead ReLU units give exactly singular covariances; zero shrinkage must not blow up.
    X = _data(rng, n=60)
    X[:, 2] = 0.0
    enc = RelativeAnchorEncoder(
        n_anchors=6, similarity="wip", shrinkage=0.0, eps=0.0, random_state=0
    ).fit(X)
    R = enc.transform(X)
    assert np.all(np.isfinite(R))
    keep = [0, 1, 3, 4, 5]
    ref = RelativeAnchorEncoder(
        n_anchors=6, similarity="wip", shrinkage=0.0, eps=0.0, random_state=0
    ).fit(X[:, keep])
    np.testing.assert_allclose(R, ref.transform(X[:, keep]), atol=1e-8)


@pytest.mark.parametrize("normalize", ["l2", "standard"])
def test_normalize(rng, normalize):
    X = _data(rng)
    enc = RelativeAnchorEncoder(n_anchors=10, normalize=normalize, random_state=0).fit(X)
    raw = clone(enc).set_params(normalize=None).fit(X).transform(X)
    R = enc.transform(X)
    if normalize == "l2":
        np.testing.assert_allclose(R, raw / np.linalg.norm(raw, axis=1, keepdims=True))
    else:
        np.testing.assert_allclose(R, (raw - raw.mean(0)) / raw.std(0), atol=1e-9)


# ----------------------------------------------------------------------------- transform
@pytest.mark.parametrize("similarity", ["cosine", "euclidean", "dot", "wip"])
def test_blockwise_equals_unblocked(rng, similarity):
    X = _data(rng, n=101)
    enc = RelativeAnchorEncoder(
        n_anchors=7, similarity=similarity, normalize="standard", random_state=0
    ).fit(X)
    full = enc.transform(X)
    tiny = enc._relative(X, budget=1)  # one row per block
    several = enc._relative(X, budget=10 * (6 + 14) * 8)  # ten rows per block
    # A distance near zero (an anchor against itself) is the square root of a cancelled
    # difference: another blocking may sum it in another order (cuBLAS does), which moves
    # it by up to about sqrt(eps64) times the rows' norm.  Other entries agree to 1e-12.
    atol = 1e-6 if similarity == "euclidean" else 1e-12
    np.testing.assert_allclose(tiny, full, rtol=1e-12, atol=atol)
    np.testing.assert_allclose(several, full, rtol=1e-12, atol=atol)


@pytest.mark.parametrize("normalize", [None, "standard", "l2"])
def test_statistics_from_fit_not_batch(rng, normalize):
    X = _data(rng)
    enc = RelativeAnchorEncoder(
        n_anchors=10, similarity="wip", normalize=normalize, random_state=0
    ).fit(X)
    Xt = _data(rng, n=20) + 1.0
    full = enc.transform(Xt)
    for i in (0, 7, 19):
        np.testing.assert_allclose(enc.transform(Xt[i : i + 1])[0], full[i], atol=1e-12)


def test_dtype_preserved_and_inputs(rng):
    X = _data(rng).astype(np.float32)
    enc = RelativeAnchorEncoder(n_anchors=8, similarity="wip", random_state=0).fit(X)
    R32 = enc.transform(X)
    assert R32.dtype == np.float32
    R64 = enc.transform(X.astype(np.float64))
    assert R64.dtype == np.float64
    np.testing.assert_allclose(R32, R64, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(enc.transform(torch.from_numpy(X)), R32)
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    out = clone(enc).set_output(transform="pandas").fit(df).transform(df)
    assert list(out.columns) == [f"anchor{i}" for i in range(8)]
    np.testing.assert_allclose(out.to_numpy(), R32, rtol=1e-6)


# ----------------------------------------------------------------------------- bad input
def test_too_many_anchors(rng):
    with pytest.raises(ValueError, match=r"n_anchors=50 exceeds .*n_samples=20"):
        RelativeAnchorEncoder(n_anchors=50).fit(_data(rng, n=20))


def test_stratified_needs_labels(rng):
    X = _data(rng)
    with pytest.raises(ValueError, match="needs the class labels y"):
        RelativeAnchorEncoder(n_anchors=5, anchors="stratified").fit(X)
    with pytest.raises(ValueError, match="y has 3 entries, but X has 120 rows"):
        RelativeAnchorEncoder(n_anchors=5, anchors="stratified").fit(X, [0, 1, 2])


@pytest.mark.parametrize(
    "indices, error, message",
    [
        ([0, 200], ValueError, r"must lie in \[0, 120\)"),
        ([-1, 3], ValueError, r"must lie in \[0, 120\).*from -1"),
        ([True, False], TypeError, "integers, got dtype bool"),
        ([], ValueError, "non-empty"),
        ([1, 1, 2], ValueError, "distinct"),
        ([0.5, 1.0], TypeError, "integers"),
        ([[0, 1]], ValueError, "1-d"),
    ],
)
def test_bad_indices(rng, indices, error, message):
    with pytest.raises(error, match=message):
        RelativeAnchorEncoder(anchors=indices).fit(_data(rng))


def test_bad_parallel(rng):
    X = _data(rng)
    enc = RelativeAnchorEncoder(n_anchors=5, anchors="param", max_epochs=1)
    with pytest.raises(ValueError, match=r"parallel\[0\] has 10 rows, but X has 120"):
        enc.fit(X, parallel=[X[:10]])
    with pytest.raises(TypeError, match="list of arrays"):
        enc.fit(X, parallel=X)
    with pytest.raises(ValueError, match="only used by anchors='param'"):
        RelativeAnchorEncoder(n_anchors=5).fit(X, parallel=[X])
    with pytest.raises(ValueError, match="unknown keys"):
        enc.set_params(loss_weights={"jacard": 1.0}).fit(X, parallel=[X])


def test_bad_params_and_rebase(rng):
    X = _data(rng)
    with pytest.raises(ValueError, match="similarity"):
        RelativeAnchorEncoder(similarity="cos").fit(X)
    with pytest.raises(ValueError, match="shrinkage"):
        RelativeAnchorEncoder(similarity="wip", shrinkage=1.5).fit(X)
    enc = RelativeAnchorEncoder(n_anchors=5, random_state=0).fit(X)
    with pytest.raises(ValueError, match="X_parallel has 119 rows, but .* fitted on 120"):
        enc.rebase(X[:-1])
    with pytest.raises(ValueError, match="features"):
        enc.transform(X[:, :3])


def test_zero_shot_stitching_on_real_features(mnist_features):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    d = mnist_features
    train, test, y = d["train_idx"], d["test_idx"], d["labels"]
    strong, other = d["cnn_s0"], d["cnn_s1"]
    # Centred cosine, n_anchors="auto" (2 d = 128 anchors), standardised columns.
    enc = RelativeAnchorEncoder(normalize="standard", random_state=0)
    enc.fit(strong[train])
    assert enc.n_anchors_ == 128

    def head():
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=300))

    relative = head().fit(enc.transform(strong[train]), y[train])
    stitched = relative.score(enc.rebase(other[train]).transform(other[test]), y[test])
    # Absolute features of a different network mean nothing to a head trained on another.
    absolute = head().fit(strong[train], y[train]).score(other[test], y[test])
    # 0.912 measured (0.926 uncentred; 0.866 centred with 64 anchors); own-space heads
    # score about 0.95.
    assert stitched > 0.9
    assert absolute < 0.3


def test_default_unit_rows_for_a_plain_head(mnist_features):
    # normalize="l2" by default (issue 22): a plain LogisticRegression head trained on one
    # network's relative vectors classifies another network's, which it never saw.
    from sklearn.linear_model import LogisticRegression

    d = mnist_features
    train, test, y = d["train_idx"], d["test_idx"], d["labels"]
    strong, other = d["cnn_s0"], d["cnn_s1"]
    enc = RelativeAnchorEncoder(random_state=0).fit(strong[train])
    assert enc.normalize == "l2" and not hasattr(enc, "output_mean_")
    R = enc.transform(strong[train])
    np.testing.assert_allclose(np.linalg.norm(R, axis=1), 1.0, rtol=1e-6)
    # The unit rows are the centred cosines, rescaled.
    raw = clone(enc).set_params(normalize=None).fit(strong[train]).transform(strong[train])
    np.testing.assert_allclose(R, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)
    head = LogisticRegression(max_iter=1000).fit(R, y[train])
    stitched = head.score(enc.rebase(other[train]).transform(other[test]), y[test])
    assert stitched > 0.9


def test_default_undoes_a_length_mismatch_between_spaces(rng):
    # The failure None had on the GloVe pairs: the other space's relative vectors are
    # longer.  Here a rotated space 3x wider gives dot products 9x larger; unit rows make
    # the two spaces' vectors of the same items equal again.
    X = rng.normal(size=(400, 16))
    Q = ortho_group.rvs(16, random_state=0)
    enc = RelativeAnchorEncoder(n_anchors=12, similarity="dot", random_state=0).fit(X)
    other = enc.rebase(3.0 * X @ Q)
    np.testing.assert_allclose(other.transform(3.0 * X @ Q), enc.transform(X), atol=1e-8)
    raw = clone(enc).set_params(normalize=None).fit(X)
    assert not np.allclose(raw.rebase(3.0 * X @ Q).transform(3.0 * X @ Q), raw.transform(X))


@pytest.mark.parametrize("similarity", ["wip", "euclidean", "cosine"])
def test_float32_accuracy_with_large_offset(rng, similarity):
    # ReLU-like features sit far from the origin; float32 transforms must stay accurate
    # (WIP folds the mean into a bias, euclidean expands the norm).
    X = (_data(rng, n=400, d=32) + 20.0).astype(np.float32)
    enc = RelativeAnchorEncoder(n_anchors=16, similarity=similarity, random_state=0).fit(X)
    R32 = enc.transform(X)
    R64 = enc.transform(X.astype(np.float64))
    scale = np.abs(R64).max()
    # Euclidean distances near zero (an anchor against itself) carry the square root of
    # the rounding of the squared distance, about sqrt(eps32) * spread: a looser bound.
    tol = 1e-3 if similarity == "euclidean" else 1e-4
    assert np.abs(R32 - R64).max() < tol * scale


@pytest.mark.cuda
@pytest.mark.parametrize("similarity", ["cosine", "euclidean", "dot", "wip"])
def test_cuda_matches_cpu(rng, similarity):
    X = _data(rng).astype(np.float32)
    cpu = RelativeAnchorEncoder(n_anchors=8, similarity=similarity, device="cpu")
    cpu.set_params(random_state=0).fit(X)
    gpu = clone(cpu).set_params(device="cuda").fit(X)
    np.testing.assert_array_equal(gpu.anchor_indices_, cpu.anchor_indices_)
    # Euclidean distances near zero carry sqrt(eps32) times the spread (see the float32
    # test above): measured 1e-3 on an H200 where the CPU's clamp gives exactly 0.
    atol = 3e-3 if similarity == "euclidean" else 1e-4
    np.testing.assert_allclose(gpu.transform(X), cpu.transform(X), rtol=1e-4, atol=atol)
    param = RelativeAnchorEncoder(
        n_anchors=8, anchors="param", similarity=similarity, max_epochs=2, device="cuda"
    ).fit(X, parallel=[np.tanh(X)])
    assert isinstance(param.mixture_, np.ndarray)
    np.testing.assert_allclose(param.mixture_.sum(axis=1), 1.0)


# ----------------------------------------------------------------------------- contract
def _bad_inputs(rng, width):
    Z = rng.normal(size=(40, width))
    T = torch.as_tensor(Z)
    return {
        "NaN": (np.where(Z > 1, np.nan, Z), ValueError, "contains NaN"),
        "1-d": (Z[:, 0], ValueError, "1D array"),
        "3-d": (Z[:, :, None], ValueError, "dim 3"),
        "complex": (Z + 1j, ValueError, "Complex data not supported"),
        "complex tensor": (torch.as_tensor(Z + 1j), ValueError, "Complex data not supported"),
        "strings": (np.full((40, width), "a"), ValueError, "could not convert string"),
        "None": (None, ValueError, "is None"),
        "empty": (Z[:0], ValueError, "0 sample"),
        "sparse tensor": (T.to_sparse(), TypeError, r"sparse tensor .*to_dense"),
        "meta tensor": (T.to("meta"), ValueError, "meta device"),
    }


@pytest.mark.parametrize("case", list(_bad_inputs(np.random.default_rng(0), 6)))
def test_bad_input_is_a_one_line_error_everywhere(rng, case):
    # fit, transform, rebase and the parallel banks all go through the shared checks:
    # no array dumps, no errors from deep inside torch (meta tensors used to raise
    # NotImplementedError, complex ones printed the whole array).
    X = _data(rng, n=40)
    data, error, match = _bad_inputs(rng, 6)[case]
    fitted = RelativeAnchorEncoder(n_anchors=4, random_state=0).fit(X)
    param = RelativeAnchorEncoder(n_anchors=4, anchors="param", max_epochs=1)
    calls = {
        "fit": lambda: RelativeAnchorEncoder(n_anchors=4).fit(data),
        "transform": lambda: fitted.transform(data),
        "rebase": lambda: fitted.rebase(data),
        "parallel": lambda: param.fit(X, parallel=[data]),
    }
    for name, call in calls.items():
        with pytest.raises(error, match=match) as info:
            call()
        assert "\n" not in str(info.value), name


def test_rebase_errors_name_x_parallel(rng):
    X = _data(rng, n=40)
    fitted = RelativeAnchorEncoder(n_anchors=4, random_state=0).fit(X)
    with pytest.raises(ValueError, match="^Input X_parallel contains NaN"):
        fitted.rebase(np.where(X > 3, np.nan, X))


def test_stratified_labels_are_checked_like_the_metrics(rng):
    X = _data(rng, n=40)
    enc = RelativeAnchorEncoder(n_anchors=4, anchors="stratified", random_state=0)
    y = np.arange(40) % 4
    with pytest.raises(ValueError, match="y contains NaN"):
        enc.fit(X, np.where(y == 0, np.nan, y))  # NaN used to be a class of its own
    with pytest.raises(ValueError, match=r"y must be 1-d.*\(40, 2\)"):
        enc.fit(X, np.ones((40, 2)))
    # Tensors of labels are accepted, and give the anchors the same labels would.
    a = clone(enc).fit(X, torch.as_tensor(y)).anchor_indices_
    np.testing.assert_array_equal(a, clone(enc).fit(X, y).anchor_indices_)


def test_skops_trusts_only_the_encoder_with_torch_parameters(rng, tmp_path):
    # A torch.device parameter and anchors given as an index tensor are saved as their
    # plain equivalents: skops used to need torch.device trusted, and could not save a
    # tensor at all.
    sio = pytest.importorskip("skops.io")
    X = _data(rng, n=40)
    name = "sklearn_compat.relative.RelativeAnchorEncoder"
    for params in (
        dict(n_anchors=4, device=torch.device("cpu")),
        dict(anchors=torch.tensor([3, 1, 7])),
    ):
        fitted = RelativeAnchorEncoder(random_state=0, **params).fit(X)
        path = tmp_path / "enc.skops"
        sio.dump(fitted, path)
        assert sio.get_untrusted_types(file=path) == [name]
        loaded = sio.load(path, trusted=[name])
        np.testing.assert_array_equal(loaded.transform(X), fitted.transform(X))
        assert isinstance(fitted.get_params()["anchors"], (str, torch.Tensor))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_fitted_encoder_transforms_on_cpu_with_a_warning(rng):
    X = _data(rng, n=40).astype(np.float32)
    fitted = RelativeAnchorEncoder(n_anchors=4, similarity="wip", random_state=0).fit(X)
    expected = fitted.transform(X)
    fitted.set_params(device="cuda")  # as loaded from a GPU machine
    with pytest.warns(RuntimeWarning, match="running on the CPU"):
        out = fitted.transform(X)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, expected)

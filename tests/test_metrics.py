"""sklearn_compat.metrics against brute-force numpy references.

Every reference below builds the full similarity matrix in float64 and ranks with plain
Python/numpy, independently of the blockwise torch kernels; ties count against the query.
"""

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.linalg import orthogonal_procrustes
from scipy.stats import ortho_group

from sklearn_compat import metrics
from sklearn_compat._core.ranking import paired_ranks
from sklearn_compat.metrics import (
    alignability,
    backfilling_auc,
    backfilling_curve,
    backfilling_order,
    cmc_topk_accuracy,
    mean_average_precision,
    mean_cosine_similarity,
    neighbourhood_preservation,
    paired_topk_accuracy,
)


# ---------------------------------------------------------------------- references
def ref_unit(A):
    A = np.asarray(A, dtype=np.float64)
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    return np.divide(A, norms, out=np.zeros_like(A), where=norms > 0)


def ref_sims(Q, G):
    return ref_unit(Q) @ ref_unit(G).T


def ref_paired_ranks(Q, G, csls_k=None):
    S = ref_sims(Q, G)
    if csls_k is not None:
        r_g = np.sort(S, axis=1)[:, ::-1][:, :csls_k].mean(axis=1)
        r_q = np.sort(S, axis=0)[::-1, :][:csls_k, :].mean(axis=0)
        S = 2 * S - r_g[:, None] - r_q[None, :]
    n = len(S)
    return np.array([sum(S[i, j] >= S[i, i] for j in range(n) if j != i) for i in range(n)])


def ref_lists(Q, G, lq, lg, exclude):
    """Per query: the (similarity, relevant) list of its gallery, own item removed."""
    S = ref_sims(Q, G)
    for i in range(len(Q)):
        items = [(S[i, j], lq[i] == lg[j]) for j in range(len(G)) if not (exclude and i == j)]
        yield i, items


def ref_cmc(Q, G, lq, lg, k, exclude):
    hits = []
    for _, items in ref_lists(Q, G, lq, lg, exclude):
        relevant = [s for s, r in items if r]
        if not relevant:
            continue
        best = max(relevant)
        hits.append(sum(1 for s, r in items if not r and s >= best) < k)
    return np.mean(hits)


def ref_map(Q, G, lq, lg, exclude):
    aps = []
    for _, items in ref_lists(Q, G, lq, lg, exclude):
        if not any(r for _, r in items):
            continue
        # Decreasing similarity; among ties the irrelevant items first.
        ranked = sorted(items, key=lambda t: (-t[0], t[1]))
        found, precisions = 0, []
        for position, (_, relevant) in enumerate(ranked, start=1):
            if relevant:
                found += 1
                precisions.append(found / position)
        aps.append(np.mean(precisions))
    return np.mean(aps)


def ref_knn(A, k):
    S = ref_sims(A, A)
    sets = []
    for i in range(len(A)):
        others = sorted((j for j in range(len(A)) if j != i), key=lambda j: (-S[i, j], j))
        sets.append(set(others[:k]))
    return sets


def ref_neighbourhood(A, B, k, kind):
    values = []
    for a, b in zip(ref_knn(A, k), ref_knn(B, k), strict=True):
        shared = len(a & b)
        values.append(shared / k if kind == "overlap" else shared / len(a | b))
    return np.mean(values)


def ref_farthest_order(old, labels):
    unit = ref_unit(old)
    entries = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        dist = np.linalg.norm(unit[members] - unit[members].mean(axis=0), axis=1)
        ranked = sorted(zip(-dist, members, strict=True))
        for position, (neg_dist, idx) in enumerate(ranked):
            entries.append((position / len(members), neg_dist, idx))
    return np.array([idx for _, _, idx in sorted(entries)])


def ref_backfill(new, old, queries, labels, order, n_steps, metric):
    values = []
    for beta in np.linspace(0, 1, n_steps + 1):
        gallery = old.copy()
        chosen = order[: int(np.rint(beta * len(old)))]
        gallery[chosen] = new[chosen]
        if metric == "map":
            values.append(ref_map(queries, gallery, labels, labels, True))
        else:
            values.append(ref_cmc(queries, gallery, labels, labels, 1, True))
    return np.array(values)


# ---------------------------------------------------------------------- data
def clustered(rng, n=60, d=8, n_classes=4, noise=0.6, dtype=np.float64):
    labels = rng.integers(0, n_classes, size=n)
    centres = rng.normal(size=(n_classes, d))
    X = centres[labels] + noise * rng.normal(size=(n, d))
    return X.astype(dtype), labels


def tied(rng, n=40, d=3):
    """Rows that are scaled coordinate vectors or zero: cosines exactly 0 or 1, many ties."""
    X = np.zeros((n, d))
    hot = rng.integers(0, d + 1, size=n)  # d means an all-zero row
    for i, h in enumerate(hot):
        if h < d:
            X[i, h] = rng.uniform(0.5, 2.0)
    return X


# ---------------------------------------------------------------------- paired top-k
@pytest.mark.parametrize("csls_k", [None, 1, 3])
@pytest.mark.parametrize("k", [1, 3])
def test_paired_topk_matches_reference(rng, k, csls_k):
    Q = rng.normal(size=(50, 6))
    G = Q + 0.8 * rng.normal(size=(50, 6))
    expected = np.mean(ref_paired_ranks(Q, G, csls_k) < k)
    assert paired_topk_accuracy(Q, G, k, csls_k=csls_k) == pytest.approx(expected)


@pytest.mark.parametrize("csls_k", [None, 2])
def test_paired_ranks_with_ties_and_zero_rows(rng, csls_k):
    Q, G = tied(rng), tied(rng)
    np.testing.assert_array_equal(
        paired_ranks(Q, G, csls_k=csls_k), ref_paired_ranks(Q, G, csls_k)
    )


def test_paired_topk_collapsed_space_scores_zero():
    # All gallery rows tie for every query, and ties count against the query.
    Q = np.random.default_rng(1).normal(size=(10, 4))
    assert paired_topk_accuracy(Q, np.ones((10, 4))) == 0.0
    assert paired_topk_accuracy(Q, np.zeros((10, 4))) == 0.0
    assert paired_topk_accuracy(np.zeros((10, 4)), Q) == 0.0


def test_csls_demotes_hubs():
    # Queries share a common offset along u and five gallery rows lie along u: those
    # rows are near every query ("hubs") and steal plain-cosine matches; CSLS corrects it.
    rng = np.random.default_rng(0)
    u = np.eye(16)[0]
    G = rng.normal(size=(60, 16))
    G[:5] += 3 * u
    Q = G + 0.9 * rng.normal(size=G.shape) + 1.5 * u
    plain = paired_topk_accuracy(Q, G)
    csls = paired_topk_accuracy(Q, G, csls_k=3)
    assert csls > plain + 0.05
    assert csls == pytest.approx(np.mean(ref_paired_ranks(Q, G, 3) < 1))


def test_paired_topk_sample_weight(rng):
    Q = rng.normal(size=(30, 5))
    G = Q + rng.normal(size=(30, 5))
    w = rng.uniform(size=30)
    expected = np.average(ref_paired_ranks(Q, G) < 1, weights=w)
    assert paired_topk_accuracy(Q, G, sample_weight=w) == pytest.approx(expected)


def test_mean_cosine_matches_reference(rng):
    Q = rng.normal(size=(40, 5))
    G = rng.normal(size=(40, 5))
    Q[3] = 0.0
    expected = np.mean(np.sum(ref_unit(Q) * ref_unit(G), axis=1))
    assert mean_cosine_similarity(Q, G) == pytest.approx(expected)
    w = rng.uniform(size=40)
    expected_w = np.average(np.sum(ref_unit(Q) * ref_unit(G), axis=1), weights=w)
    assert mean_cosine_similarity(Q, G, sample_weight=w) == pytest.approx(expected_w)


# ---------------------------------------------------------------------- CMC and mAP
@pytest.mark.parametrize("k", [1, 2, 5])
def test_cmc_matches_reference(rng, k):
    X, labels = clustered(rng)
    Y = X @ rng.normal(size=(8, 8)) + rng.normal(size=X.shape)
    for Q, G in [(X, X), (X, Y)]:
        expected = ref_cmc(Q, G, labels, labels, k, exclude=True)
        assert cmc_topk_accuracy(Q, G, labels, k=k) == pytest.approx(expected)


def test_map_matches_reference(rng):
    X, labels = clustered(rng)
    Y = X @ rng.normal(size=(8, 8)) + rng.normal(size=X.shape)
    for Q, G in [(X, X), (X, Y)]:
        expected = ref_map(Q, G, labels, labels, exclude=True)
        assert mean_average_precision(Q, G, labels) == pytest.approx(expected)


def test_cmc_and_map_with_ties_and_zero_rows(rng):
    Q, G = tied(rng), tied(rng)
    labels = rng.integers(0, 3, size=len(Q))
    for k in (1, 2):
        assert cmc_topk_accuracy(Q, G, labels, k=k) == pytest.approx(
            ref_cmc(Q, G, labels, labels, k, True)
        )
    assert mean_average_precision(Q, G, labels) == pytest.approx(
        ref_map(Q, G, labels, labels, True)
    )


def test_query_is_excluded_from_its_own_gallery(rng):
    X, labels = clustered(rng, noise=3.0)
    # Without exclusion every query finds itself first.
    assert cmc_topk_accuracy(X, X, labels, exclude_self=False) == 1.0
    excluded = cmc_topk_accuracy(X, X, labels)
    assert excluded < 1.0
    assert excluded == pytest.approx(ref_cmc(X, X, labels, labels, 1, True))


def test_separate_gallery_with_its_own_labels(rng):
    Q, lq = clustered(rng, n=30)
    G, lg = clustered(rng, n=45)
    assert cmc_topk_accuracy(Q, G, lq, gallery_labels=lg, k=2) == pytest.approx(
        ref_cmc(Q, G, lq, lg, 2, False)
    )
    assert mean_average_precision(Q, G, lq, gallery_labels=lg) == pytest.approx(
        ref_map(Q, G, lq, lg, False)
    )


def test_string_labels_and_queries_without_relevant_items(rng):
    X, codes = clustered(rng, n=30)
    labels = np.array(["cat", "dog", "emu", "fox"])[codes]
    labels[0] = "yak"  # a class with a single item: nothing to retrieve, left out
    expected = ref_cmc(X, X, labels, labels, 1, True)
    assert cmc_topk_accuracy(X, X, labels) == pytest.approx(expected)
    assert mean_average_precision(X, X, labels) == pytest.approx(
        ref_map(X, X, labels, labels, True)
    )


def test_map_is_one_for_perfect_clusters(rng):
    labels = np.repeat(np.arange(3), 5)
    X = np.eye(3)[labels] + 1e-3 * rng.normal(size=(15, 3))
    assert mean_average_precision(X, X, labels) == pytest.approx(1.0)
    assert cmc_topk_accuracy(X, X, labels) == 1.0


def test_cmc_and_map_sample_weight(rng):
    Q, lq = clustered(rng, n=30)
    G, lg = clustered(rng, n=40)
    w = rng.uniform(size=30)
    hits = [ref_cmc(Q[[i]], G, lq[[i]], lg, 1, False) for i in range(30)]
    aps = [ref_map(Q[[i]], G, lq[[i]], lg, False) for i in range(30)]
    got = cmc_topk_accuracy(Q, G, lq, gallery_labels=lg, sample_weight=w)
    assert got == pytest.approx(np.average(hits, weights=w))
    got = mean_average_precision(Q, G, lq, gallery_labels=lg, sample_weight=w)
    assert got == pytest.approx(np.average(aps, weights=w))


# ---------------------------------------------------------------------- blockwise == whole
@pytest.mark.parametrize("budget", [1, 200, 1000])
def test_blockwise_equals_whole(rng, budget):
    X, labels = clustered(rng, n=37)
    Y = X + rng.normal(size=X.shape)
    tiny = {"memory_budget": budget}
    assert paired_topk_accuracy(X, Y, 3, csls_k=4, **tiny) == paired_topk_accuracy(
        X, Y, 3, csls_k=4
    )
    assert cmc_topk_accuracy(X, Y, labels, k=2, **tiny) == cmc_topk_accuracy(X, Y, labels, k=2)
    assert mean_average_precision(X, Y, labels, **tiny) == pytest.approx(
        mean_average_precision(X, Y, labels), abs=1e-15
    )
    assert neighbourhood_preservation(X, Y, 4, **tiny) == neighbourhood_preservation(X, Y, 4)
    np.testing.assert_allclose(
        backfilling_curve(Y, X, None, labels, metric="map", **tiny)[1],
        backfilling_curve(Y, X, None, labels, metric="map")[1],
        atol=1e-15,
    )


# ---------------------------------------------------------------------- float32, inputs
def test_float32_agrees_with_float64_reference(rng):
    X, labels = clustered(rng, n=50, dtype=np.float32)
    Y = (X + rng.normal(size=X.shape)).astype(np.float32)
    assert paired_topk_accuracy(X, Y, 2) == pytest.approx(np.mean(ref_paired_ranks(X, Y) < 2))
    assert cmc_topk_accuracy(X, Y, labels) == pytest.approx(ref_cmc(X, Y, labels, labels, 1, True))
    assert mean_average_precision(X, Y, labels) == pytest.approx(
        ref_map(X, Y, labels, labels, True), rel=1e-6
    )
    assert neighbourhood_preservation(X, Y, 5) == pytest.approx(
        ref_neighbourhood(X, Y, 5, "overlap")
    )


def test_pandas_and_torch_inputs(rng):
    X, labels = clustered(rng, n=30)
    Y = X + rng.normal(size=X.shape)
    expected = cmc_topk_accuracy(X, Y, labels)
    assert cmc_topk_accuracy(pd.DataFrame(X), torch.from_numpy(Y), pd.Series(labels)) == expected
    assert paired_topk_accuracy(torch.from_numpy(X), pd.DataFrame(Y)) == paired_topk_accuracy(X, Y)


# ---------------------------------------------------------------------- invariances
def test_cosine_metrics_invariant_to_rotating_both_sets(rng):
    X, labels = clustered(rng, n=50)
    Y = X + rng.normal(size=X.shape)
    R = ortho_group.rvs(8, random_state=1)
    for fn in (
        lambda A, B: paired_topk_accuracy(A, B, 2, csls_k=3),
        mean_cosine_similarity,
        lambda A, B: cmc_topk_accuracy(A, B, labels, k=2),
        lambda A, B: mean_average_precision(A, B, labels),
        lambda A, B: backfilling_auc(A, B, None, labels, metric="map"),
    ):
        assert fn(X @ R, Y @ R) == pytest.approx(fn(X, Y), rel=1e-12)
    # Positive per-row scaling changes nothing either (cosine).
    s = rng.uniform(0.1, 10.0, size=(50, 1))
    assert mean_average_precision(X * s, Y, labels) == pytest.approx(
        mean_average_precision(X, Y, labels)
    )


# ---------------------------------------------------------------------- neighbourhoods
@pytest.mark.parametrize("kind", ["overlap", "jaccard"])
def test_neighbourhood_preservation_matches_reference(rng, kind):
    A = rng.normal(size=(40, 6))
    B = A @ rng.normal(size=(6, 4)) + 0.5 * rng.normal(size=(40, 4))
    got = neighbourhood_preservation(A, B, 5, kind=kind)
    assert got == pytest.approx(ref_neighbourhood(A, B, 5, kind))
    # Ties (and zero rows) go to the lower index in both.
    T, U = tied(rng), tied(rng)
    got = neighbourhood_preservation(T, U, 4, kind=kind)
    assert got == pytest.approx(ref_neighbourhood(T, U, 4, kind))


def test_neighbourhood_preservation_of_isometries_and_random_maps(rng):
    A = rng.normal(size=(60, 8))
    Q = ortho_group.rvs(8, random_state=0)
    assert neighbourhood_preservation(A, 2.5 * A @ Q, 7) == 1.0
    # An unrelated space keeps about k / (n - 1) of each neighbourhood.
    assert neighbourhood_preservation(A, rng.normal(size=(60, 8)), 7) < 0.3


# ---------------------------------------------------------------------- alignability
def test_alignability_matches_reference(rng):
    X = rng.normal(size=(30, 5))
    Y = rng.normal(size=(30, 7))
    for normalize in (False, True):
        for center in (False, True):
            A, B = (ref_unit(X), ref_unit(Y)) if normalize else (X, Y)
            if center:
                A, B = A - A.mean(axis=0), B - B.mean(axis=0)
            result = alignability(X, Y, normalize=normalize, center=center)
            gap = np.linalg.norm(A @ A.T - B @ B.T)
            delta = np.sqrt(np.mean((A @ A.T - B @ B.T) ** 2))
            Apad = np.hstack([A, np.zeros((30, 2))])  # zero-pad to D = 7
            Q, _ = orthogonal_procrustes(Apad, B)
            error = np.linalg.norm(Apad @ Q - B)
            assert result.gram_gap == pytest.approx(gap, rel=1e-10)
            assert result.delta == pytest.approx(delta, rel=1e-10)
            assert result.procrustes_error == pytest.approx(error, rel=1e-8)
            assert result.procrustes_error_bound == pytest.approx(14**0.25 * np.sqrt(gap))
            assert result.mean_sq_error_bound == pytest.approx(np.sqrt(14) * delta)
            # The theorem: the achieved error never exceeds the bound.
            assert result.procrustes_error <= result.procrustes_error_bound
            assert result.mean_sq_error <= result.mean_sq_error_bound
            assert result.dim == 7 and result.n_samples == 30


def test_alignability_of_a_rotation_is_zero_and_sampling_estimates_delta(rng):
    X = rng.normal(size=(200, 6))
    Q = ortho_group.rvs(6, random_state=3)
    exact = alignability(X, X @ Q)
    assert exact.delta == pytest.approx(0.0, abs=1e-12)
    assert exact.procrustes_error == pytest.approx(0.0, abs=1e-6)
    Y = X @ Q + 0.5 * rng.normal(size=X.shape)
    exact = alignability(Y, X)
    sampled = alignability(Y, X, max_pairs=200_000, random_state=0)
    assert sampled.delta == pytest.approx(exact.delta, rel=0.03)
    assert sampled.procrustes_error == exact.procrustes_error
    again = alignability(Y, X, max_pairs=200_000, random_state=0)
    assert again.delta == sampled.delta


# ---------------------------------------------------------------------- backfilling
def test_backfilling_order_farthest_matches_reference(rng):
    X, labels = clustered(rng, n=45)
    np.testing.assert_array_equal(backfilling_order(X, labels), ref_farthest_order(X, labels))
    order = backfilling_order(X, labels, order="random", random_state=0)
    np.testing.assert_array_equal(np.sort(order), np.arange(45))
    np.testing.assert_array_equal(
        order, backfilling_order(X, labels, order="random", random_state=0)
    )


def test_backfilling_order_is_class_balanced(rng):
    X, labels = clustered(rng, n=80, n_classes=4)
    order = backfilling_order(X, labels)
    counts = np.bincount(labels)
    for share in (0.25, 0.5, 0.75):
        head = labels[order[: int(share * 80)]]
        np.testing.assert_allclose(np.bincount(head, minlength=4), share * counts, atol=1.01)


@pytest.mark.parametrize("metric", ["cmc_top1", "map"])
@pytest.mark.parametrize("order", ["farthest", "random", "array"])
def test_backfilling_curve_matches_reference(rng, metric, order):
    new, labels = clustered(rng, n=36, d=6, n_classes=3)
    old = new @ rng.normal(size=(6, 6)) + rng.normal(size=new.shape)
    if order == "array":
        order = rng.permutation(36)
        expected_order = order
    elif order == "random":
        expected_order = np.random.RandomState(5).permutation(36)
    else:
        expected_order = ref_farthest_order(old, labels)
    betas, values = backfilling_curve(
        new, old, None, labels, order=order, n_steps=6, metric=metric, random_state=5
    )
    np.testing.assert_allclose(betas, np.linspace(0, 1, 7))
    expected = ref_backfill(new, old, new, labels, expected_order, 6, metric)
    np.testing.assert_allclose(values, expected, rtol=1e-12)
    # The ends are the cross-model and the new/new scores.
    fn = cmc_topk_accuracy if metric == "cmc_top1" else mean_average_precision
    assert values[0] == pytest.approx(fn(new, old, labels))
    assert values[-1] == pytest.approx(fn(new, new, labels))
    auc = backfilling_auc(
        new, old, None, labels, order=order, n_steps=6, metric=metric, random_state=5
    )
    assert auc == pytest.approx(np.sum((expected[1:] + expected[:-1]) / 2) / 6)


def test_backfilling_with_separate_queries(rng):
    gallery, labels = clustered(rng, n=30, d=5, n_classes=3)
    old = gallery + rng.normal(size=gallery.shape)
    queries, query_labels = clustered(rng, n=12, d=5, n_classes=3)
    betas, values = backfilling_curve(
        gallery, old, queries, labels, query_labels=query_labels, n_steps=2, metric="cmc_top3"
    )
    assert values[0] == pytest.approx(
        cmc_topk_accuracy(queries, old, query_labels, gallery_labels=labels, k=3)
    )
    assert values[-1] == pytest.approx(
        cmc_topk_accuracy(queries, gallery, query_labels, gallery_labels=labels, k=3)
    )


# ---------------------------------------------------------------------- bad input
def test_bad_inputs_raise_clear_errors(rng):
    X, labels = clustered(rng, n=20)
    Y = X + 1
    with pytest.raises(ValueError, match="same shape"):
        paired_topk_accuracy(X, Y[:-1])
    with pytest.raises(ValueError, match="same number of features"):
        cmc_topk_accuracy(X, Y[:, :-1], labels)
    with pytest.raises(ValueError, match="same number of rows"):
        mean_cosine_similarity(X, Y[:-1])
    for bad_k in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="k must be a positive integer"):
            paired_topk_accuracy(X, Y, bad_k)
        with pytest.raises(ValueError, match="k must be a positive integer"):
            cmc_topk_accuracy(X, Y, labels, k=bad_k)
        with pytest.raises(ValueError, match="k must be a positive integer"):
            neighbourhood_preservation(X, Y, bad_k)
    with pytest.raises(ValueError, match="csls_k"):
        paired_topk_accuracy(X, Y, csls_k=0)
    with pytest.raises(ValueError, match="csls_k=50 exceeds"):
        paired_topk_accuracy(X, Y, csls_k=50)
    with pytest.raises(ValueError, match="at most n_samples - 1"):
        neighbourhood_preservation(X, Y, 20)
    with pytest.raises(ValueError, match="labels has 19 entries"):
        cmc_topk_accuracy(X, Y, labels[:-1])
    with pytest.raises(ValueError, match="gallery_labels has 19 entries"):
        mean_average_precision(X, Y, labels, gallery_labels=labels[:-1])
    with pytest.raises(ValueError, match="exclude_self=True needs"):
        cmc_topk_accuracy(X, Y[:10], labels, gallery_labels=labels[:10], exclude_self=True)
    with pytest.raises(ValueError, match="labels has 5 entries"):
        backfilling_curve(X, Y, None, labels[:5])
    X_nan = X.copy()
    X_nan[2, 3] = np.nan
    for call in (
        lambda: paired_topk_accuracy(X_nan, Y),
        lambda: cmc_topk_accuracy(X_nan, Y, labels),
        lambda: mean_average_precision(Y, X_nan, labels),
        lambda: neighbourhood_preservation(X_nan, Y),
        lambda: alignability(X_nan, Y),
        lambda: backfilling_curve(X_nan, Y, None, labels),
    ):
        with pytest.raises(ValueError, match="NaN"):
            call()
    with pytest.raises(ValueError, match="labels contains NaN"):
        cmc_topk_accuracy(X, Y, np.where(labels == 0, np.nan, labels))
    with pytest.raises(ValueError, match="No query has a relevant item"):
        cmc_topk_accuracy(X, Y, np.arange(20))
    with pytest.raises(ValueError, match="kind must be"):
        neighbourhood_preservation(X, Y, kind="iou")
    with pytest.raises(ValueError, match="device must be"):
        paired_topk_accuracy(X, Y, device="gpu")


def test_bad_backfilling_arguments(rng):
    X, labels = clustered(rng, n=20)
    Y = X + 1
    with pytest.raises(ValueError, match="metric must be 'map' or 'cmc_top<k>'"):
        backfilling_curve(X, Y, None, labels, metric="top1")
    with pytest.raises(ValueError, match="metric must be"):
        backfilling_curve(X, Y, None, labels, metric="cmc_top0")
    with pytest.raises(ValueError, match="permutation of range"):
        backfilling_curve(X, Y, None, labels, order=np.zeros(20, dtype=int))
    with pytest.raises(ValueError, match="order must be"):
        backfilling_curve(X, Y, None, labels, order="nearest")
    with pytest.raises(ValueError, match="same shape"):
        backfilling_curve(X, Y[:-1], None, labels)
    with pytest.raises(ValueError, match="n_steps must be a positive integer"):
        backfilling_curve(X, Y, None, labels, n_steps=0)
    with pytest.raises(ValueError, match="pass query_labels"):
        backfilling_curve(X, Y, X[:5], labels)
    with pytest.raises(ValueError, match="query_labels has 3 entries"):
        backfilling_curve(X, Y, X[:5], labels, query_labels=labels[:3])


def test_public_names():
    for name in metrics.__all__:
        assert callable(getattr(metrics, name))
        assert getattr(metrics, name).__doc__


@pytest.mark.cuda
def test_cuda_matches_cpu(rng):
    X, labels = clustered(rng, n=50)
    Y = X + rng.normal(size=X.shape)
    for fn in (
        lambda d: paired_topk_accuracy(X, Y, 2, csls_k=3, device=d),
        lambda d: cmc_topk_accuracy(X, Y, labels, device=d),
        lambda d: mean_average_precision(X, Y, labels, device=d),
        lambda d: neighbourhood_preservation(X, Y, 5, device=d),
        lambda d: backfilling_auc(Y, X, None, labels, device=d),
        lambda d: alignability(X, Y, device=d).delta,
    ):
        assert fn("cuda") == pytest.approx(fn("cpu"), rel=1e-9)


# ---------------------------------------------------------------------- real features
def test_real_features_cross_model_retrieval(mnist_features):
    from sklearn_compat import OrthogonalProcrustesAligner

    data = mnist_features
    train, test = data["train_idx"], data["test_idx"]
    labels = data["labels"][test]
    X, Y = ref_unit(data["cnn_s0"]), ref_unit(data["cnn_s1"])
    old_old = cmc_topk_accuracy(Y[test], Y[test], labels)
    raw = cmc_topk_accuracy(X[test], Y[test], labels)
    aligner = OrthogonalProcrustesAligner(center=True).fit(X[train], Y[train])
    mapped = aligner.transform(X[test])
    aligned = cmc_topk_accuracy(mapped, Y[test], labels)
    # Two independently trained nets: unrelated spaces until aligned, then class
    # retrieval across models is close to the old model's own (benchmarks/RESULTS.md).
    assert old_old > 0.9
    assert raw < 0.3
    assert aligned > old_old - 0.03
    assert mean_average_precision(mapped, Y[test], labels) > 0.8
    assert paired_topk_accuracy(mapped, Y[test]) == aligner.score(X[test], Y[test])
    betas, values = backfilling_curve(mapped, Y[test], None, labels, n_steps=4)
    assert values[0] == pytest.approx(aligned)
    assert values[-1] == pytest.approx(cmc_topk_accuracy(mapped, mapped, labels))


# ------------------------------------------------------------------ one-line errors
_Q = np.random.default_rng(3).normal(size=(12, 4))
_LABELS = np.arange(12) % 3
_METRIC_CALLS = {
    "paired_topk_accuracy": lambda A: metrics.paired_topk_accuracy(A, _Q),
    "mean_cosine_similarity": lambda A: metrics.mean_cosine_similarity(A, _Q),
    "cmc_topk_accuracy": lambda A: metrics.cmc_topk_accuracy(A, _Q, _LABELS),
    "neighbourhood_preservation": lambda A: metrics.neighbourhood_preservation(A, _Q, k=2),
    "alignability": lambda A: metrics.alignability(A, _Q),
}
_BAD_EMBEDDINGS = {
    "complex": (_Q + 1j, "Complex data not supported: "),
    "complex tensor": (torch.as_tensor(_Q + 1j), "Complex data not supported: "),
    "1-d": (_Q[0], "Expected 2D array"),
    "NaN": (np.where(_Q > 1, np.nan, _Q), "NaN"),
}


@pytest.mark.parametrize("bad", list(_BAD_EMBEDDINGS))
@pytest.mark.parametrize("metric", list(_METRIC_CALLS))
def test_bad_embeddings_are_one_line_errors(metric, bad):
    data, match = _BAD_EMBEDDINGS[bad]
    with pytest.raises(ValueError, match=match) as info:
        _METRIC_CALLS[metric](data)
    assert "\n" not in str(info.value)

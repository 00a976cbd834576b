"""UnpairedProcrustesAligner: recovery from unpaired rows, seed pairs, determinism, warnings."""

import json
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import ortho_group

from sklearn_compat import OrthogonalProcrustesAligner, UnpairedProcrustesAligner
from sklearn_compat.exceptions import UnreliableAlignmentWarning


def clustered(n, d, seed=0, n_centres=12):
    """Rows around a few centres, with a spread that falls along the axes (anisotropic)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_centres, d)) * np.linspace(3, 0.5, d)
    return centres[rng.integers(n_centres, size=n)] + 0.3 * rng.normal(size=(n, d))


def _unpaired_parts():
    """The private room's functions under one name (common form, CSLS, refiners)."""
    from sklearn_compat._unpaired import common, refine

    return SimpleNamespace(
        **{name: getattr(m, name) for m in (common, refine) for name in dir(m) if name[:2] != "__"}
    )


def fit_quietly(aligner, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreliableAlignmentWarning)
        return aligner.fit(*args, **kwargs)


@pytest.mark.parametrize("init", ["auto", "sorted_profile"])
def test_recovers_a_planted_rotation_from_shuffled_rows(init):
    X = clustered(500, 16)
    Q = ortho_group.rvs(16, random_state=1)
    order = np.random.default_rng(2).permutation(500)
    Y = (X @ Q)[order]
    aligner = fit_quietly(UnpairedProcrustesAligner(init=init, random_state=0), X, Y)
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-6)
    assert aligner.confidence_ > 0.7  # a lower bound on the share beyond the null
    # every induced pair is a true pair: Y row j is X row order[j]
    i, j = aligner.matches_.T
    np.testing.assert_array_equal(order[j], i)
    # the fitted affine map sends every row onto its own partner
    assert aligner.score(X, X @ Q) == 1.0


def test_recovers_a_rectangular_map_with_different_row_counts():
    X = clustered(1000, 12, seed=3)
    Q = ortho_group.rvs(20, random_state=4)[:12]  # orthonormal rows: 12 -> 20
    kept = np.random.default_rng(5).permutation(1000)[:700]  # Y holds 700 of the items
    Y = X[kept] @ Q
    aligner = UnpairedProcrustesAligner(init="sorted_profile", random_state=0)
    fit_quietly(aligner, X, Y)
    np.testing.assert_allclose(aligner.W_ @ aligner.W_.T, np.eye(12), atol=1e-10)
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-6)
    i, j = aligner.matches_.T
    np.testing.assert_array_equal(kept[j], i)
    np.testing.assert_allclose(aligner.inverse_transform(aligner.transform(X)), X, atol=1e-8)


def test_seed_pairs_start_the_fit_and_stay_in_it():
    # Noise-free structureless rows: the seed pairs alone already give the exact map.
    rng = np.random.default_rng(6)
    X = rng.normal(size=(300, 8))
    Q = ortho_group.rvs(8, random_state=7)
    order = rng.permutation(300)
    Y = (X @ Q)[order]
    position = np.argsort(order)
    pairs = np.stack([np.arange(10), position[:10]], axis=1)
    aligner = fit_quietly(UnpairedProcrustesAligner(random_state=0), X, Y, pairs=pairs)
    assert aligner.start_scores_["seed_pairs"] == max(aligner.start_scores_.values())
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-8)


def test_seed_pairs_pull_the_map_where_the_rows_give_no_signal():
    # Unrelated clouds except for 40 known pairs related by Q: without them the map cannot
    # know those rows; with them, kept in every round, it maps most of them home.
    rng = np.random.default_rng(6)
    X, Y = rng.normal(size=(300, 8)), rng.normal(size=(260, 8))
    Y[100:140] = X[:40] @ ortho_group.rvs(8, random_state=7)
    pairs = np.stack([np.arange(40), np.arange(40) + 100], axis=1)
    params = {"random_state": 0, "min_confidence": 0, "n_init": 2}
    seeded = UnpairedProcrustesAligner(**params).fit(X, Y, pairs=pairs)
    blind = UnpairedProcrustesAligner(**params).fit(X, Y)
    assert seeded.score(X[:40], Y[100:140]) > 0.5 > blind.score(X[:40], Y[100:140]) + 0.3


def test_final_map_is_procrustes_with_auto_settings_on_the_induced_pairs():
    # Y far from its origin (a large common offset, as in bag-of-words spaces): the final
    # map takes its centring and scale from OrthogonalProcrustesAligner's held-out choice
    # on the pairs self-learning induced, seed pairs first.
    X = clustered(600, 16, seed=6)
    Q = ortho_group.rvs(16, random_state=7)
    order = np.random.default_rng(8).permutation(600)
    noise = 0.05 * np.random.default_rng(9).normal(size=(600, 16))
    Y = (0.4 * X @ Q + 6.0 + noise)[order]
    position = np.argsort(order)
    pairs = np.stack([np.arange(20), position[:20]], axis=1)
    aligner = fit_quietly(UnpairedProcrustesAligner(random_state=0), X, Y, pairs=pairs)
    dictionary = np.concatenate([pairs, aligner.matches_])
    assert len(dictionary) >= 100
    reference = OrthogonalProcrustesAligner().fit(X[dictionary[:, 0]], Y[dictionary[:, 1]])
    np.testing.assert_allclose(aligner.W_, reference.W_, atol=1e-12)
    assert aligner.scale_ == pytest.approx(reference.scale_, rel=1e-12)
    np.testing.assert_allclose(aligner.mean_y_, reference.mean_y_, atol=1e-12)
    assert (aligner.center_, aligner.scale_mode_) == (reference.center_, reference.scale_mode_)
    assert aligner.score(X, Y[position]) > 0.95


def test_same_random_state_gives_the_same_fit():
    X = clustered(200, 10, seed=8)
    rng = np.random.default_rng(9)
    Y = (X @ ortho_group.rvs(10, random_state=9) + 0.3 * rng.normal(size=X.shape))[
        rng.permutation(200)
    ]
    params = {"init": "cluster_match", "n_init": 2, "random_state": 3, "min_confidence": 0}
    first = UnpairedProcrustesAligner(**params).fit(X, Y)
    second = UnpairedProcrustesAligner(**params).fit(X, Y)
    np.testing.assert_array_equal(first.W_, second.W_)
    np.testing.assert_array_equal(first.matches_, second.matches_)
    assert first.start_scores_ == second.start_scores_
    assert first.n_iter_ == second.n_iter_


@pytest.mark.parametrize(("n", "d", "seed"), [(12, 4, 0), (40, 32, 1), (150, 4, 2), (300, 16, 3)])
def test_warns_on_independent_random_clouds(n, d, seed):
    # Two independent Gaussian clouds share nothing: below 100 rows a side the fit says it
    # cannot judge, above it the held-out share does not beat the null's.  (Fewer restarts
    # than the default keep the test fast; benchmarks/unpaired.py runs the defaults.)
    rng = np.random.default_rng(seed)
    X, Y = rng.normal(size=(n, d)), rng.normal(size=(n + 5, d))
    with pytest.warns(UnreliableAlignmentWarning, match="looks unreliable") as caught:
        aligner = UnpairedProcrustesAligner(n_init=3, random_state=seed).fit(X, Y)
    assert aligner.confidence_ < aligner.min_confidence
    if n < 100:
        assert aligner.confidence_ == 0 and "below 100 rows a side" in str(caught[0].message)


def test_warns_on_unrelated_clustered_data():
    # Clusters on both sides, but not the same items nor the same clusters: a null with no
    # structure would call the cluster-to-cluster map aligned; Y's own clusters do not.
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(300, 8, centers=5, random_state=0)
    Y, _ = make_blobs(313, 8, centers=5, random_state=100)
    with pytest.warns(UnreliableAlignmentWarning, match=r"confidence_=0\.\d+ .*pairs="):
        aligner = UnpairedProcrustesAligner(n_init=3, random_state=0).fit(X, Y)
    assert aligner.confidence_ < aligner.min_confidence
    # min_confidence=0 never warns on a size that can be judged
    fit_quietly(UnpairedProcrustesAligner(n_init=1, min_confidence=0, random_state=0), X, Y)


def test_confidence_is_the_held_out_share_beyond_the_structured_null():
    X = clustered(500, 16)
    Y = (X @ ortho_group.rvs(16, random_state=1))[::-1]
    aligner = fit_quietly(UnpairedProcrustesAligner(random_state=0), X, Y)
    n_held = round(0.2 * 500)
    share, chance = aligner.mutual_share_, aligner.chance_share_
    error = np.sqrt((share * (1 - share) + chance * (1 - chance)) / n_held)
    expected = (share - chance - 2 * error) / (1 - chance)
    assert aligner.confidence_ == pytest.approx(min(1, max(0.0, expected)))
    # a right map gives every held-out row its partner; a cloud with Y's clusters but no
    # items, far fewer
    assert share == 1.0
    assert 0 <= chance < 0.7
    assert aligner.confidence_ > 0.5


def test_cluster_start_recovers_a_noisy_rotation_from_shuffled_rows():
    # Not an isometry: Y is a rotation of X plus noise, so no similarity profile matches
    # exactly; the clusters still correspond, and the cluster start finds the map.
    rng = np.random.default_rng(13)
    X = clustered(800, 24, seed=13)
    Q = ortho_group.rvs(24, random_state=13)
    order = rng.permutation(800)
    Y = (X @ Q + 0.2 * rng.normal(size=X.shape))[order]
    aligner = UnpairedProcrustesAligner(init="cluster_match", random_state=0)
    fit_quietly(aligner, X, Y)
    assert aligner.init_.startswith("cluster_match")
    assert np.abs(aligner.W_ - Q).max() < 0.05
    i, j = aligner.matches_.T
    assert np.mean(order[j] == i) > 0.95


def test_start_sample_keeps_its_partners_when_the_sides_exceed_start_rows():
    # 1,000 shuffled rows per side, candidates compared on 200 of X's. Refined onto all of
    # Y's rows, every sampled row has its partner, and the first cluster start is clearly
    # right (every held-out row of the sample finds it: the cluster start itself
    # partitions all 1,000 rows, see the next test). Refined onto an independent
    # sample of 200 of Y's rows, only a fifth would, and no candidate would stand out.
    rng = np.random.default_rng(5)
    X = clustered(1000, 24, seed=5)
    Q = ortho_group.rvs(24, random_state=5)
    Y = (X @ Q + 0.1 * rng.normal(size=X.shape))[rng.permutation(1000)]
    aligner = fit_quietly(UnpairedProcrustesAligner(start_rows=200, random_state=0), X, Y)
    assert max(aligner.start_scores_.values()) == 1.0
    # the search stopped at the first restart (either direction)
    assert aligner.init_ in ("cluster_match (X->Y, 0)", "cluster_match (Y->X, 0)")
    assert np.abs(aligner.W_ - Q).max() < 0.05


def test_cluster_start_partitions_more_rows_than_start_rows(monkeypatch):
    # The cluster start's partitions correspond across spaces far more often on a few
    # thousand rows than on start_rows (2,000): it partitions up to 4,000 rows of its
    # side, all of them here, while the candidates are still refined and compared from
    # the 200-row start sample of X onto all of Y's rows.
    from sklearn_compat._unpaired import start

    real, seen = start.cluster_match_start, []

    def recording(P, Q, **kwargs):
        seen.append((P.shape[0], Q.shape[0]))
        return real(P, Q, **kwargs)

    monkeypatch.setattr(start, "cluster_match_start", recording)
    rng = np.random.default_rng(5)
    X = clustered(1000, 24, seed=5)
    Q = ortho_group.rvs(24, random_state=5)
    Y = (X @ Q + 0.1 * rng.normal(size=X.shape))[rng.permutation(1000)]
    aligner = UnpairedProcrustesAligner(init="cluster_match", start_rows=200, random_state=0)
    fit_quietly(aligner, X, Y)
    assert seen and all(rows == (1000, 1000) for rows in seen)
    assert np.abs(aligner.W_ - Q).max() < 0.05


def test_stochastic_induction_brings_home_starts_that_mutual_self_learning_loses(
    mnist_features,
):
    # Real features of two networks (cnn -> mlp, the same 1,000 digits): from weak starts
    # (the supervised map blurred by noise), stochastic dictionary induction reaches 0.9 of
    # the supervised map's top-1 from every start that mutual-neighbour self-learning
    # brings there, and from at least twice as many.
    u = _unpaired_parts()

    train = mnist_features["train_idx"][:1000]
    Xs = u.unit_centered(torch.as_tensor(mnist_features["cnn_s0"][train], dtype=torch.float32))
    Ys = u.unit_centered(torch.as_tensor(mnist_features["mlp_s0"][train], dtype=torch.float32))

    def top1(W):
        hits = (u.unit_rows(Xs @ W.float()) @ Ys.T).argmax(dim=1) == torch.arange(len(Xs))
        return float(hits.float().mean())

    supervised = u.orthogonal_fit(Xs, Ys)
    home = 0.9 * top1(supervised)
    d = Xs.shape[1]
    mutual, stochastic = set(), set()
    for seed in range(8):
        noise = torch.randn(
            d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
        )
        start = u.orthogonal_fit(
            torch.eye(d, dtype=torch.float64), supervised + 4 * noise / d**0.5
        )
        assert top1(start) < 0.1 * home  # a weak start
        if top1(u.self_learn(Xs, Ys, start)[0]) >= home:
            mutual.add(seed)
        W, _ = u.stochastic_self_learn(Xs, Ys, start, generator=torch.Generator().manual_seed(0))
        if top1(u.self_learn(Xs, Ys, W)[0]) >= home:
            stochastic.add(seed)
    assert mutual <= stochastic
    assert len(stochastic) >= 2 * len(mutual) > 0


def test_stochastic_induction_is_repeatable_and_ends_on_the_exact_map():
    u = _unpaired_parts()

    X = clustered(300, 12, seed=3)
    Q = ortho_group.rvs(12, random_state=3)
    Xs = u.unit_centered(torch.as_tensor(X, dtype=torch.float32))
    Ys = u.unit_centered(torch.as_tensor(X @ Q, dtype=torch.float32)).flip(0)
    start = torch.as_tensor(Q)
    runs = [
        u.stochastic_self_learn(Xs, Ys, start, generator=torch.Generator().manual_seed(5))
        for _ in range(2)
    ]
    np.testing.assert_array_equal(runs[0][0].numpy(), runs[1][0].numpy())
    # dropout moves the dictionary off the true pairs while keep < 1; the last rounds,
    # with every similarity kept, return to the planted map
    assert runs[0][1] > 4 * 10  # patience rounds at each of the keep levels 0.1 ... 1
    np.testing.assert_allclose(runs[0][0].numpy(), Q, atol=1e-5)


def test_dropout_neighbours_pair_only_through_kept_similarities():
    u = _unpaired_parts()

    rng = np.random.default_rng(4)
    A = u.unit_rows(torch.as_tensor(rng.normal(size=(6, 5)), dtype=torch.float32))
    B = u.unit_rows(torch.as_tensor(rng.normal(size=(7, 5)), dtype=torch.float32))
    # everything kept: the CSLS nearest neighbours both ways
    forward, backward, _ = u._dropout_neighbours(A, B, 3, 1.0, torch.Generator())
    expected_forward, expected_backward, _ = u.csls_neighbours(A, B, 3)
    np.testing.assert_array_equal(forward[1].numpy(), expected_forward.numpy())
    np.testing.assert_array_equal(backward[0].numpy(), expected_backward.numpy())
    # a fifth kept: every pair goes through a kept entry, and a row or column with none
    # kept gets no partner (not row 0 by default)
    forward, backward, _ = u._dropout_neighbours(A, B, 3, 0.2, torch.Generator().manual_seed(9))
    kept = torch.rand((6, 7), generator=torch.Generator().manual_seed(9)) < 0.2
    np.testing.assert_array_equal(forward[0].numpy(), np.flatnonzero(kept.any(dim=1)))
    np.testing.assert_array_equal(backward[1].numpy(), np.flatnonzero(kept.any(dim=0)))
    assert kept[forward].all() and kept[backward].all()
    assert not kept.any(dim=1).all()  # the draw does leave a row without a partner


def mixture(n, d, seed, n_centres=24):
    """Rows of one fixed mixture (centres from seed 0), drawn with their own seed: two
    calls with different seeds give different items of the same distribution."""
    centres = np.random.default_rng(0).normal(size=(n_centres, d)) * np.linspace(3, 0.5, d)
    rng = np.random.default_rng(seed)
    return centres[rng.integers(n_centres, size=n)] + 0.3 * rng.normal(size=(n, d))


def test_disjoint_fit_recovers_a_rotation_between_different_items(monkeypatch):
    # No item on both sides: X and Y are different draws of one mixture, Y rotated by Q.
    # The fit is confident, and maps new items of X onto their images.
    import sklearn_compat.unpaired as module

    monkeypatch.setattr(module, "_DISJOINT_QAP_RESTARTS", 30)  # fewer: a fast test
    monkeypatch.setattr(module, "_DISJOINT_RUNS", 4)
    monkeypatch.setattr(module, "_CANDIDATE_PATIENCE", 5)
    monkeypatch.setattr(module, "_CANDIDATE_ROUNDS", 40)
    d = 16
    Q = ortho_group.rvs(d, random_state=1)
    X, Y = mixture(500, d, 1), mixture(500, d, 2) @ Q
    aligner = UnpairedProcrustesAligner(init="disjoint", n_init=3, random_state=0)
    fit_quietly(aligner, X, Y)
    assert aligner.init_.startswith("disjoint (")
    assert len(aligner.start_scores_) == 3  # the fewest restarts: confident after them
    # two of the three restarts found the same map (the third did not): that agreement,
    # not a criterion standing out (three restarts are too few to tell), is the evidence
    assert aligner.agreement_ > 0.9 and aligner.stand_out_ == 0
    assert aligner.confidence_ >= 0.5
    assert np.isnan(aligner.mutual_share_)
    X_new = mixture(200, d, 3)
    assert aligner.score(X_new, X_new @ Q) > 0.9


def test_null_keeps_the_clusters_and_the_seed_rows_but_no_item():
    from sklearn_compat._unpaired.common import unit_centered
    from sklearn_compat._unpaired.confidence import clustered_surrogate

    Y = unit_centered(torch.as_tensor(mixture(600, 16, 4, n_centres=6), dtype=torch.float32))
    null = clustered_surrogate(Y, torch.Generator().manual_seed(0), 6, keep=torch.arange(5))
    assert null.shape == Y.shape
    np.testing.assert_array_equal(null[:5].numpy(), Y[:5].numpy())  # seed targets kept
    # every row of the null lies in one of Y's clusters (its nearest Y row is close) ...
    nearest = (null[5:] @ Y.T).max(dim=1).values
    assert float(nearest.median()) > 0.8
    # ... but is no row of Y
    assert float(nearest.max()) < 1 - 1e-4


def test_disjoint_refiners_move_a_rough_map_towards_the_right_one():
    from sklearn_compat._unpaired import refine
    from sklearn_compat._unpaired.common import orthogonal_fit, unit_centered
    from sklearn_compat._unpaired.confidence import agreement

    d = 16
    Q = torch.as_tensor(ortho_group.rvs(d, random_state=2))
    Xs, Ys = (
        unit_centered(torch.as_tensor(A, dtype=torch.float32))
        for A in (mixture(600, d, 5), mixture(600, d, 6) @ Q.numpy())
    )
    noise = torch.as_tensor(np.random.default_rng(0).normal(size=(d, d)))
    rough = orthogonal_fit(torch.eye(d, dtype=torch.float64), Q + 0.15 * noise)
    refined = refine.neighbour_mean_refine(Xs, Ys, rough, n_rounds=20)
    final, rounds = refine.union_self_learn(Xs, Ys, refined)
    assert agreement(rough, Q) < agreement(refined, Q) and agreement(final, Q) > 0.95
    assert rounds >= 1


def _planted_disjoint(d=16, n=600):
    """Unit-centred rows of two different draws of one mixture, the second rotated by Q."""
    from sklearn_compat._unpaired.common import unit_centered

    Q = torch.as_tensor(ortho_group.rvs(d, random_state=2))
    Xs, Ys = (
        unit_centered(torch.as_tensor(A, dtype=torch.float32))
        for A in (mixture(n, d, 5), mixture(n, d, 6) @ Q.numpy())
    )
    return Xs, Ys, Q


def test_disjoint_refine_leaves_a_start_right_only_along_the_leading_directions():
    # The disjoint start maps the rows' leading directions right and the rest at random;
    # such a map is a fixed point of neighbour means and self-learning, and stochastic
    # self-learning leaves it.  Here: Q on the 4 leading coordinates (the mixture's
    # centres spread most along them), a random rotation of Q on the other 12.
    from sklearn_compat._unpaired import refine
    from sklearn_compat._unpaired.confidence import agreement

    Xs, Ys, Q = _planted_disjoint()
    R = torch.eye(16, dtype=torch.float64)
    R[4:, 4:] = torch.as_tensor(ortho_group.rvs(12, random_state=11))
    start = R @ Q
    assert agreement(start, Q) < 0.3
    kept = refine.union_self_learn(Xs, Ys, refine.neighbour_mean_refine(Xs, Ys, start))[0]
    assert agreement(kept, Q) < 0.8  # the deterministic refiners keep the wrong block
    reached = [
        agreement(
            refine.disjoint_refine(
                Xs, Ys, start, generator=torch.Generator().manual_seed(seed), patience=10
            )[0],
            Q,
        )
        for seed in (0, 2)
    ]
    assert max(reached) > 0.99  # a restart's draws find the whole map


def test_disjoint_fit_last_stage_leaves_a_candidate_right_only_along_leading_directions(
    monkeypatch,
):
    # The kept candidate maps the leading directions right and the rest at random (every
    # restart starts there, the candidates' refinement left out).  Union self-learning on
    # the working rows (the old last stage) keeps that map; the last disjoint_refine pass
    # finds the whole rotation.
    import sklearn_compat.unpaired as module

    d = 16
    Q = ortho_group.rvs(d, random_state=2)
    R = np.eye(d)
    R[4:, 4:] = ortho_group.rvs(12, random_state=11)
    start = torch.as_tensor(R @ Q)
    monkeypatch.setattr(
        module._starts, "oriented_disjoint_start", lambda A, B, **kw: (start.clone(), 0.0)
    )
    monkeypatch.setattr(module, "_refine_candidate", lambda A, B, W, generator: W)
    X, Y = mixture(600, d, 5), mixture(600, d, 6) @ Q
    aligner = UnpairedProcrustesAligner(init="disjoint", n_init=4, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreliableAlignmentWarning)
        aligner.fit(X, Y)
    X_new = mixture(200, d, 3)
    assert aligner.score(X_new, X_new @ Q) > 0.95  # the old last stage: 0.70


def test_disjoint_refine_passes_again_only_while_the_criterion_rises(monkeypatch):
    from sklearn_compat._unpaired import refine
    from sklearn_compat._unpaired.confidence import agreement

    Xs, Ys, Q = _planted_disjoint(n=400)
    calls = []
    stochastic = refine.stochastic_self_learn
    monkeypatch.setattr(
        refine, "stochastic_self_learn", lambda *a, **k: calls.append(1) or stochastic(*a, **k)
    )
    # from the right map the second pass gains nothing: it stops there, of 5 allowed
    W, _ = refine.disjoint_refine(
        Xs, Ys, Q, generator=torch.Generator().manual_seed(0), patience=5, max_passes=5
    )
    assert len(calls) == 2 and agreement(W, Q) > 0.99
    calls.clear()
    refine.disjoint_refine(Xs, Ys, Q, generator=torch.Generator().manual_seed(0), patience=5)
    assert len(calls) == 1


def test_disjoint_refine_recovers_a_planted_map_whatever_the_row_order():
    from sklearn_compat._unpaired import refine
    from sklearn_compat._unpaired.common import orthogonal_fit, random_orthogonal
    from sklearn_compat._unpaired.confidence import agreement

    Xs, Ys, Q = _planted_disjoint(n=400)
    noise = random_orthogonal(16, 16, torch.Generator().manual_seed(3))
    start = orthogonal_fit(torch.eye(16, dtype=torch.float64), 0.5 * Q + 0.5 * noise)
    assert agreement(start, Q) < 0.8
    order_x = torch.as_tensor(np.random.default_rng(7).permutation(len(Xs)))
    order_y = torch.as_tensor(np.random.default_rng(8).permutation(len(Ys)))
    maps = []
    for A, B in ((Xs, Ys), (Xs[order_x], Ys[order_y])):
        W, rounds = refine.disjoint_refine(
            A, B, start, generator=torch.Generator().manual_seed(0), patience=10
        )
        assert W.shape == (16, 16) and rounds >= 10
        maps.append(W)
    assert agreement(maps[0], Q) > 0.99 and agreement(maps[1], Q) > 0.99
    # the deterministic stage alone is exactly invariant to the order of the rows
    one, two = (
        refine.neighbour_mean_refine(A, B, start, n_rounds=5)
        for A, B in ((Xs, Ys), (Xs[order_x], Ys[order_y]))
    )
    np.testing.assert_allclose(one.numpy(), two.numpy(), atol=1e-5)


def test_disjoint_confidence_needs_two_refined_restarts_that_agree():
    from sklearn_compat.unpaired import _disjoint_confidence

    rng = np.random.default_rng(0)
    maps = {i: torch.as_tensor(ortho_group.rvs(64, random_state=i)) for i in range(4)}
    alike = {0: 0.0731, 1: 0.0724, 2: 0.0729, 3: 0.0726}
    # unrelated refined maps: nothing to trust; the highest refined criterion is kept
    confidence, stand, agree, kept = _disjoint_confidence(alike, maps, dict(alike))
    assert confidence == 0 and stand < 1 and abs(agree) < 0.3 and kept == 0
    # a start whose criterion stands far above the others' is reported, not trusted:
    # such a start was refined to 0.46 of supervised on real glosses
    confidence, stand, _, _ = _disjoint_confidence({**alike, 2: 0.0840}, maps, dict(alike))
    assert stand > 8 and confidence == 0
    # two refined maps are the same map: trusted, whatever the criteria, and the better
    # of the two is kept even when a third, unrelated one scores higher
    same = dict(maps)
    same[1] = maps[0] + 0.01 * torch.as_tensor(rng.normal(size=(64, 64)))
    confidence, _, agree, kept = _disjoint_confidence(alike, same, {0: 0.1, 1: 0.19, 2: 0.2})
    assert agree > 0.9 and confidence > 0.5 and kept == 1
    # one refined candidate, or none: no evidence yet
    assert _disjoint_confidence(alike, maps, {0: 0.2})[::3] == (0, 0)
    assert _disjoint_confidence(alike, maps, {})[::3] == (0, 0)


def test_disjoint_confidence_counts_a_candidate_its_second_refinement_reached_again():
    from sklearn_compat.unpaired import _disjoint_confidence

    rng = np.random.default_rng(0)
    maps = {i: torch.as_tensor(ortho_group.rvs(64, random_state=i)) for i in range(3)}
    crits = {0: 0.13, 1: 0.15, 2: 0.14}
    # the second refinement of candidate 1's start reached the same map: one right
    # candidate is evidence enough, and it is the one kept
    near = {1: maps[1] + 0.01 * torch.as_tensor(rng.normal(size=(64, 64)))}
    confidence, _, agree, kept = _disjoint_confidence(crits, maps, crits, near)
    assert agree > 0.9 and confidence > 0.5 and kept == 1
    # a second refinement that ended at an unrelated map (a wrong start): no evidence,
    # whichever candidate it belongs to
    far = {1: torch.as_tensor(ortho_group.rvs(64, random_state=9))}
    assert _disjoint_confidence(crits, maps, crits, far)[0] == 0
    assert _disjoint_confidence(crits, maps, crits, {})[0] == 0


def _planted_starts(monkeypatch, d, right_restarts):
    """X and Y different draws of one mixture (more centres than dimensions, so that the
    rows pin the whole map down), Y rotated by Q; the disjoint start replaced
    by Q itself for the restarts in ``right_restarts`` and by unrelated rotations (ranked
    below it) for the others; the candidates' refinement kept short."""
    import sklearn_compat.unpaired as module
    from sklearn_compat._unpaired import start

    monkeypatch.setattr(module, "_CANDIDATE_PATIENCE", 5)
    monkeypatch.setattr(module, "_CANDIDATE_ROUNDS", 40)
    Q = ortho_group.rvs(d, random_state=1)
    calls = []

    def planted(Xs, Ys, *, reverse, **kwargs):
        r = len(calls)
        calls.append(r)
        W = Q if r in right_restarts else ortho_group.rvs(d, random_state=100 + r)
        W = torch.as_tensor(W)
        return W, start.mean_best_csls(Xs, Ys, W) + (1.0 if r in right_restarts else 0.0)

    monkeypatch.setattr(module._starts, "oriented_disjoint_start", planted)
    X, Y = mixture(600, d, 1, n_centres=160), mixture(600, d, 2, n_centres=160) @ Q
    return Q, X, Y, calls


def test_disjoint_fit_confirms_a_single_right_candidate_without_a_second_start(monkeypatch):
    # One right restart among eight: no second candidate agrees with it (before, such a
    # fit always warned and ran all eight).  Its start refined again with fresh draws
    # reaches the same map: the fit is confident, stops after the first four restarts,
    # and keeps the right map.
    Q, X, Y, calls = _planted_starts(monkeypatch, 64, right_restarts={1})
    aligner = UnpairedProcrustesAligner(init="disjoint", n_init=8, random_state=0)
    fit_quietly(aligner, X, Y)
    assert len(calls) == 4 and aligner.init_ == "disjoint (1)"
    assert aligner.reproduced_["disjoint (1)"] > 0.9 and aligner.confidence_ >= 0.5
    X_new = mixture(200, 64, 3, n_centres=160)
    assert aligner.score(X_new, X_new @ Q) > 0.9


def test_disjoint_fit_does_not_confirm_wrong_starts_refined_twice(monkeypatch):
    # Every start is wrong: each best candidate's second refinement ends elsewhere (a
    # shared start is not counted as agreement), so all restarts run and the fit warns.
    import sklearn_compat.unpaired as module

    _, X, Y, calls = _planted_starts(monkeypatch, 64, right_restarts=set())
    monkeypatch.setattr(module, "_CANDIDATE_ROUNDS", 15)  # shorter: closer to the start
    with pytest.warns(UnreliableAlignmentWarning, match="second refinement"):
        aligner = UnpairedProcrustesAligner(init="disjoint", n_init=5, random_state=0).fit(X, Y)
    assert len(calls) == 5 and aligner.confidence_ == 0
    # the chance level of a pair from one start in 64 dimensions: 6 / sqrt(64)
    assert len(aligner.reproduced_) >= 1 and max(aligner.reproduced_.values()) < 0.75


def test_disjoint_restarts_alternate_their_source_side():
    from sklearn_compat._unpaired import start

    calls = []

    def fake(Xs, Ys, **kwargs):
        calls.append(Xs.shape[1])
        return torch.eye(Xs.shape[1], Ys.shape[1], dtype=torch.float64), 0.0

    X, Y = torch.randn(40, 6), torch.randn(50, 4)
    original = start.disjoint_start
    start.disjoint_start = fake
    try:
        W, _ = start.oriented_disjoint_start(X, Y, reverse=False)
        assert W.shape == (6, 4)
        W, criterion = start.oriented_disjoint_start(X, Y, reverse=True)
        assert W.shape == (6, 4)  # started from Y, returned as a map from X into Y
        assert criterion == start.mean_best_csls(X, Y, W)
    finally:
        start.disjoint_start = original
    assert calls == [6, 4]


def test_disjoint_fit_warns_on_random_clouds(monkeypatch):
    import sklearn_compat.unpaired as module

    monkeypatch.setattr(module, "_DISJOINT_RUNS", 2)
    monkeypatch.setattr(module, "_DISJOINT_QAP_RESTARTS", 5)
    monkeypatch.setattr(module, "_CANDIDATE_PATIENCE", 5)
    monkeypatch.setattr(module, "_CANDIDATE_ROUNDS", 40)
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(200, 16)), rng.normal(size=(210, 16))
    with pytest.warns(UnreliableAlignmentWarning, match="disjoint restarts"):
        aligner = UnpairedProcrustesAligner(init="disjoint", n_init=4, random_state=0).fit(X, Y)
    assert len(aligner.start_scores_) == 4  # no restart stood out: all were tried
    assert aligner.confidence_ < aligner.min_confidence
    # the best candidate's start, refined again, ends at another map
    assert aligner.reproduced_ and max(aligner.reproduced_.values()) < 0.75


def test_disjoint_fit_warns_on_unrelated_clustered_data(monkeypatch):
    # Clusters laid onto clusters are not a map: the refined candidates of unrelated
    # blobs do not agree, so the fit warns.
    from sklearn.datasets import make_blobs

    import sklearn_compat.unpaired as module

    monkeypatch.setattr(module, "_DISJOINT_RUNS", 3)
    monkeypatch.setattr(module, "_DISJOINT_QAP_RESTARTS", 10)
    monkeypatch.setattr(module, "_CANDIDATE_PATIENCE", 5)
    monkeypatch.setattr(module, "_CANDIDATE_ROUNDS", 40)
    X, _ = make_blobs(200, 16, centers=5, random_state=0)
    Y, _ = make_blobs(210, 16, centers=5, random_state=1)
    with pytest.warns(UnreliableAlignmentWarning, match="disjoint restarts"):
        aligner = UnpairedProcrustesAligner(init="disjoint", n_init=4, random_state=0).fit(X, Y)
    # below chance: 3 / sqrt(16), three times the spread two random maps agree by
    assert aligner.confidence_ == 0 and aligner.agreement_ < 0.75
    assert len(aligner.refined_scores_) >= 2
    assert aligner.reproduced_ and max(aligner.reproduced_.values()) < 0.75


@pytest.mark.parametrize("k", [6, 10])
def test_centroid_match_finds_a_planted_permutation(k):
    # Exact search up to eight centroids, FAQ beyond: both must find a permutation whose
    # Gram structure is planted exactly (a rotated, reordered copy).
    from sklearn_compat._unpaired.common import unit_rows
    from sklearn_compat._unpaired.start import match_centroids

    C = unit_rows(torch.as_tensor(np.random.default_rng(k).normal(size=(k, 5))))
    Q = torch.as_tensor(ortho_group.rvs(5, random_state=k))
    perm = np.random.default_rng(k + 1).permutation(k)
    found = match_centroids(C, (C @ Q)[np.argsort(perm)], np.random.RandomState(0))
    np.testing.assert_array_equal(np.argsort(perm)[found.numpy()], np.arange(k))


def test_float32_in_float32_out():
    X = clustered(200, 8, seed=11).astype(np.float32)
    Y = X @ ortho_group.rvs(8, random_state=11).astype(np.float32)
    aligner = UnpairedProcrustesAligner(random_state=0).fit(X, Y[::-1])
    assert aligner.transform(X).dtype == np.float32


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (np.zeros((3, 3), dtype=int), r"pairs must have shape \(n_pairs, 2\)"),
        (np.array([[0, 1], [5, 90]]), r"pairs\[1\] = \[5, 90\] names row 90 of Y, which has 80"),
        (np.array([[-1, 0]]), r"names row -1 of X"),
        (np.array([[0.5, 1.0]]), "integer row indices"),
        ([["a", "b"]], r"pairs\[0, 0\] = 'a' is not a row index: .* not str values"),
        ([[0, "b"]], r"pairs\[0, 1\] = 'b' is not a row index"),
        ([["0", "1"]], r"pairs\[0, 0\] = '0' is not a row index: .* not str values"),
        ([[3, None]], r"pairs\[0, 1\] = None is not a row index"),
        ([[True, False]], r"pairs\[0, 0\] = True is not a row index: .* not bool values"),
        (np.array([[1, 0]], dtype=bool), r"= True is not a row index"),
        (
            [[2, 0], [1e30, 0]],
            r"pairs\[1\] = \[1e\+30, 0.0\] names row 1e\+30 of X, which has 100",
        ),
        ([[2, 0], [0, -(2**70)]], r"names row -1.18059e\+21 of Y"),
        ([[np.inf, 0]], r"inf is not an integer row index"),
        ([[np.nan, 0]], r"nan is not an integer row index"),
    ],
)
def test_bad_pairs_are_named(pairs, message):
    X, Y = clustered(100, 4), clustered(80, 5)
    with pytest.raises(ValueError, match=message) as error:
        UnpairedProcrustesAligner().fit(X, Y, pairs=pairs)
    assert "\n" not in str(error.value)


def test_integral_floats_and_objects_are_row_indices():
    # 3.0 names row 3 exactly as 3 does; only the values' meaning counts, not their type
    X = clustered(300, 8, seed=2)
    Q = ortho_group.rvs(8, random_state=2)
    params = {"random_state": 0, "init": "sorted_profile", "min_confidence": 0}
    as_int = UnpairedProcrustesAligner(**params).fit(X, X @ Q, pairs=[[3, 3], [5, 5]])
    as_float = UnpairedProcrustesAligner(**params).fit(X, X @ Q, pairs=[[3.0, 3], [5, 5.0]])
    np.testing.assert_array_equal(as_int.W_, as_float.W_)


@pytest.mark.parametrize("n", [1, 3, 9])
def test_tiny_inputs_get_one_line_errors(n):
    rng = np.random.default_rng(n)
    big, small = rng.normal(size=(50, 4)), rng.normal(size=(n, 4))
    for X, Y, side in ((small, big, "X"), (big, small, "Y")):
        with pytest.raises(ValueError) as error:
            UnpairedProcrustesAligner(random_state=0).fit(X, Y)
        message = str(error.value)
        assert "\n" not in message
        if n == 1:
            assert "1 sample" in message  # scikit-learn's own wording for one row
        else:
            assert (
                f"at least 10 rows on each side to learn a map without pairs; {side} has {n}"
                in message
            )


def test_missing_target_and_too_few_rows_are_named():
    X = clustered(50, 4)
    with pytest.raises(ValueError, match="requires y to be passed"):
        UnpairedProcrustesAligner().fit(X)
    with pytest.raises(ValueError, match="1 sample"):
        UnpairedProcrustesAligner().fit(X, X[:1])
    with pytest.raises(TypeError, match="not both"):
        UnpairedProcrustesAligner().fit(X, X, y=X)


# ------------------------------------------------------------------------- command line
def _run(capsys, *args):
    from sklearn_compat.cli import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_command_line_fits_without_an_id_join(tmp_path, capsys):
    from sklearn_compat.io import load_model

    X = clustered(400, 8, seed=12)
    Q = ortho_group.rvs(8, random_state=12)
    order = np.random.default_rng(12).permutation(400)
    src = pd.DataFrame(X, columns=[f"e{i}" for i in range(8)])
    src.insert(0, "id", [f"s{i}" for i in range(400)])
    tgt = pd.DataFrame((X @ Q)[order], columns=[f"e{i}" for i in range(8)])
    tgt.insert(0, "id", [f"t{i}" for i in range(400)])  # no id in common
    src.to_csv(tmp_path / "src.csv", index=False)
    tgt.to_csv(tmp_path / "tgt.csv", index=False)
    pd.DataFrame({"source": ["s3", "s7"], "target": [f"t{np.argsort(order)[3]}", "t0"]}).iloc[
        :1
    ].to_csv(tmp_path / "seeds.csv", index=False)
    model = tmp_path / "m.skops"
    common = ["--source", tmp_path / "src.csv", "--target", tmp_path / "tgt.csv"]
    code, out, err = _run(
        capsys,
        "fit",
        "--method",
        "unpaired",
        *common,
        "--id-column",
        "id",
        "--seed-pairs",
        tmp_path / "seeds.csv",
        "--seed",
        0,
        "--model",
        model,
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["n_seed_pairs"] == 1 and report["confidence"] > 0.7
    np.testing.assert_allclose(load_model(model).W_, Q, atol=1e-6)

    # A seed id that is in neither table is named, with its line.
    pd.DataFrame({"source": ["s1", "nope"], "target": ["t1", "t2"]}).to_csv(
        tmp_path / "bad.csv", index=False
    )
    bad = ["--seed-pairs", tmp_path / "bad.csv", "--model", tmp_path / "b.skops"]
    code, _, err = _run(capsys, "fit", "--method", "unpaired", *common, "--id-column", "id", *bad)
    assert code == 1
    assert "bad.csv: line 3, column 'source': source id 'nope' is not in" in err
    code, _, err = _run(
        capsys, "fit", "--method", "procrustes", *common, "--id-column", "id", *bad
    )
    assert code == 1 and "--seed-pairs does not apply to --method procrustes" in err


def test_command_line_warns_in_its_own_terms(tmp_path, capsys):
    rng = np.random.default_rng(3)
    for name, rows in (("src", 40), ("tgt", 30)):  # two unrelated random tables
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(rows, 6)))
    common = ["--source", tmp_path / "src.npy", "--target", tmp_path / "tgt.npy"]
    model = ["--model", tmp_path / "m.skops", "--seed", 0]
    code, _, err = _run(capsys, "fit", "--method", "unpaired", *common, *model)
    assert code == 0, err
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "looks unreliable" in warning[0]
    assert "--seed-pairs FILE" in warning[0] and "pairs=" not in warning[0]
    # too few rows: one line, in the command line's terms too, and nothing saved
    np.save(tmp_path / "tiny.npy", rng.normal(size=(3, 6)))
    tiny = ["--source", tmp_path / "tiny.npy", "--target", tmp_path / "tgt.npy"]
    code, _, err = _run(
        capsys, "fit", "--method", "unpaired", *tiny, "--model", tmp_path / "t.skops"
    )
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "X has 3" in err and "Traceback" not in err
    assert not (tmp_path / "t.skops").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_fit_recovers_the_same_rotation():
    X = clustered(500, 16)
    Q = ortho_group.rvs(16, random_state=1)
    Y = (X @ Q)[np.random.default_rng(2).permutation(500)]
    aligner = UnpairedProcrustesAligner(device="cuda", random_state=0)
    fit_quietly(aligner, torch.as_tensor(X, device="cuda"), torch.as_tensor(Y, device="cuda"))
    np.testing.assert_allclose(aligner.W_, Q, atol=1e-6)
    assert isinstance(aligner.W_, np.ndarray)

"""RefinedProcrustesAligner and the CSLS searches: induced pairs on planted problems."""

import numpy as np
import pytest

from sklearn_compat import OrthogonalProcrustesAligner, RefinedProcrustesAligner
from sklearn_compat._core.csls import csls_nearest, mutual_csls_pairs

from _helpers import planted_pair


def csls_reference(Q, G, k):
    Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    G = G / np.linalg.norm(G, axis=1, keepdims=True)
    S = Q @ G.T
    r_q = np.sort(S, axis=1)[:, -k:].mean(axis=1)
    r_g = np.sort(S, axis=0)[-k:].mean(axis=0)
    return 2 * S - r_q[:, None] - r_g[None, :]


def test_csls_searches_match_numpy(rng):
    Q, G = rng.normal(size=(40, 6)), rng.normal(size=(55, 6))
    C = csls_reference(Q, G, 5)
    np.testing.assert_array_equal(csls_nearest(Q, G, 5, device="cpu"), C.argmax(axis=1))
    forward, backward = C.argmax(axis=1), C.argmax(axis=0)
    expected = [(i, j) for i, j in enumerate(forward) if backward[j] == i]
    np.testing.assert_array_equal(mutual_csls_pairs(Q, G, 5, device="cpu"), expected)


def rotated_pair(rng, n=600, d=12, noise=0.05):
    return planted_pair(rng, n, d, d, map_seed=int(rng.integers(1 << 31)), noise=noise)


@pytest.mark.parametrize("estimator", [None, OrthogonalProcrustesAligner()], ids=repr)
def test_refinement_adds_true_pairs_and_recovers_the_map(rng, estimator):
    X, Y, Q = rotated_pair(rng)
    n_seed = 25
    order = rng.permutation(len(X) - n_seed)  # the unpaired targets, shuffled
    X_extra, Y_extra = X[n_seed:], Y[n_seed:][order]
    aligner = RefinedProcrustesAligner(estimator, n_refinements=4).fit(
        X[:n_seed], Y[:n_seed], X_unpaired=X_extra, Y_unpaired=Y_extra
    )
    src, tgt = aligner.induced_pairs_.T
    # Source row s (>= n_seed) is X[s]; its true partner sits where order put it.
    true_target = np.empty(len(X), dtype=np.int64)
    true_target[:n_seed] = np.arange(n_seed)
    true_target[n_seed + order] = n_seed + np.arange(len(order))
    correct = true_target[src] == tgt
    assert len(src) > 0.9 * len(X)
    assert correct.mean() > 0.99
    seed_only = (estimator or RefinedProcrustesAligner().set_params(n_refinements=0)).fit(
        X[:n_seed], Y[:n_seed]
    )
    X_test = rng.normal(size=(300, X.shape[1]))
    Y_test = X_test @ Q
    assert aligner.score(X_test, Y_test) >= seed_only.score(X_test, Y_test)
    if estimator is not None:
        assert np.abs(aligner.W_ - Q).max() < 0.5 * np.abs(seed_only.W_ - Q).max()


def test_zero_rounds_is_the_estimator_on_the_pairs(rng):
    X, Y, _ = rotated_pair(rng, n=100)
    refined = RefinedProcrustesAligner(OrthogonalProcrustesAligner(), n_refinements=0).fit(
        X, Y, X_unpaired=X[:10]
    )
    plain = OrthogonalProcrustesAligner().fit(X, Y)
    np.testing.assert_allclose(refined.W_, plain.W_)
    assert refined.n_refinements_ == 0 and len(refined.induced_pairs_) == 0


def test_rounds_stop_once_the_dictionary_repeats(rng):
    X, Y, _ = rotated_pair(rng, n=200, noise=0.0)
    aligner = RefinedProcrustesAligner(n_refinements=10, keep_pairs=False).fit(X, Y)
    assert aligner.n_refinements_ < 10
    assert aligner.n_induced_[-1] == len(X)


def test_float32_and_unpaired_width_checks(rng):
    X, Y, _ = rotated_pair(rng, n=100)
    aligner = RefinedProcrustesAligner(n_refinements=1).fit(
        X.astype(np.float32), Y.astype(np.float32), Y_unpaired=Y[:5]
    )
    assert aligner.transform(X[:3].astype(np.float32)).dtype == np.float32
    with pytest.raises(ValueError, match="Y_unpaired has 3 features"):
        RefinedProcrustesAligner().fit(X, Y, Y_unpaired=Y[:, :3])
    with pytest.raises(ValueError, match="X_unpaired"):
        RefinedProcrustesAligner().fit(X, Y, X_unpaired=np.full((2, X.shape[1]), np.nan))

"""RCSLSAligner: the loss against autograd, planted maps, the step rule, pools, bad input."""

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import ortho_group

from sklearn_compat import OrthogonalProcrustesAligner, RCSLSAligner
from sklearn_compat._core.rcsls import clip_spectral_norm, rcsls_loss_and_gradient
from sklearn_compat.metrics import paired_topk_accuracy

from _helpers import unit

F = torch.nn.functional


def test_loss_and_gradient_match_autograd_with_the_neighbour_sets_fixed(rng):
    n, d_x, d_y, k = 40, 5, 7, 3
    X, Y = (
        torch.as_tensor(unit(rng.normal(size=(n, d_x)))),
        torch.as_tensor(unit(rng.normal(size=(n, d_y)))),
    )
    sources = torch.cat([X, torch.as_tensor(unit(rng.normal(size=(15, d_x))))])
    targets = torch.cat([Y, torch.as_tensor(unit(rng.normal(size=(25, d_y))))])
    W = torch.as_tensor(rng.normal(size=(d_x, d_y))) * 0.4
    loss, gradient = rcsls_loss_and_gradient(W, X, Y, sources, targets, k, budget=64)
    # Independent reference: the loss written out with explicit neighbour indices.
    near_t = torch.topk((X @ W) @ targets.T, k, dim=1).indices
    near_s = torch.topk(Y @ (sources @ W).T, k, dim=1).indices
    V = W.clone().requires_grad_(True)
    mapped = X @ V
    reference = (
        -2 * (mapped * Y).sum()
        + (mapped[:, None, :] * targets[near_t]).sum(dim=2).mean(dim=1).sum()
        + ((sources[near_s] @ V) * Y[:, None, :]).sum(dim=2).mean(dim=1).sum()
    ) / n
    reference.backward()
    assert loss == pytest.approx(reference.item(), rel=1e-12)
    np.testing.assert_allclose(gradient.numpy(), V.grad.numpy(), atol=1e-12)


def test_spectral_clip_caps_singular_values_and_keeps_directions(rng):
    W = torch.as_tensor(rng.normal(size=(6, 9)))
    clipped = clip_spectral_norm(W)
    U, S, Vt = torch.linalg.svd(W, full_matrices=False)
    np.testing.assert_allclose(
        torch.linalg.svdvals(clipped).numpy(), S.clamp(max=1).numpy(), atol=1e-12
    )
    np.testing.assert_allclose(clipped.numpy(), ((U * S.clamp(max=1)) @ Vt).numpy(), atol=1e-12)
    small = W / (2 * S[0])
    assert clip_spectral_norm(small) is small


def test_planted_rotation_is_retrieved_perfectly(rng):
    X = rng.normal(size=(300, 12))
    Q = ortho_group.rvs(12, random_state=0)
    aligner = RCSLSAligner(random_state=0).fit(X[:200], X[:200] @ Q)
    assert aligner.score(X[200:], X[200:] @ Q) == 1.0
    # Starting at the exact rotation, every step the rule keeps lowers the loss.
    assert np.all(np.diff(aligner.loss_curve_) <= 1e-12)


def test_beats_procrustes_when_the_spaces_differ_by_more_than_a_rotation(rng):
    # Y = X A + noise with a badly conditioned A: a rotation cannot absorb the
    # stretching, the retrieval loss learns to undo part of it.
    n, d = 900, 16
    X = rng.normal(size=(n, d))
    A = ortho_group.rvs(d, random_state=1) * np.geomspace(0.05, 3.0, d)
    Y = X @ A + 0.8 * rng.normal(size=(n, d))
    train, test = slice(0, 600), slice(600, None)
    procrustes = OrthogonalProcrustesAligner().fit(X[train], Y[train])
    rcsls = RCSLSAligner(random_state=0).fit(X[train], Y[train])
    base = paired_topk_accuracy(procrustes.transform(X[test]), Y[test])
    ours = paired_topk_accuracy(rcsls.transform(X[test]), Y[test])
    assert ours > base + 0.08, (base, ours)  # 0.26 and 0.39 measured


def test_held_out_pairs_choose_the_kept_step(rng):
    X = rng.normal(size=(400, 10))
    A = rng.normal(size=(10, 10))
    Y = X @ A + 0.5 * rng.normal(size=(400, 10))
    aligner = RCSLSAligner(validation_fraction=0.25, max_iter=8, random_state=0).fit(X, Y)
    scores = aligner.validation_scores_
    assert 1 <= len(scores) == aligner.n_iter_ <= 8
    if aligner.best_iter_ > 0:
        assert scores[aligner.best_iter_ - 1] == max(scores)
    without = RCSLSAligner(validation_fraction=0.0, max_iter=3).fit(X, Y)
    assert without.validation_scores_ == [] and without.best_iter_ == without.n_iter_ == 3


def test_unpaired_rows_join_the_pools(rng):
    X = rng.normal(size=(120, 8))
    Y = X @ ortho_group.rvs(8, random_state=2) + 0.8 * rng.normal(size=(120, 8))
    extra_y = rng.normal(size=(300, 8))
    kwargs = {"validation_fraction": 0.0, "max_iter": 3}
    alone = RCSLSAligner(**kwargs).fit(X, Y)
    pooled = RCSLSAligner(**kwargs).fit(X, Y, Y_unpaired=extra_y)
    assert not np.allclose(alone.W_, pooled.W_)
    with pytest.raises(ValueError, match="Y_unpaired has 5 features, but the paired rows have 8"):
        RCSLSAligner().fit(X, Y, Y_unpaired=extra_y[:, :5])


def test_output_lives_with_the_unit_target_rows(rng):
    X = rng.normal(size=(200, 6)) * 40.0 + 3.0
    Y = rng.normal(size=(200, 6)) * 0.01 + 0.05
    for center in (False, True):
        aligner = RCSLSAligner(center=center, max_iter=2, random_state=0).fit(X, Y)
        Z = aligner.transform(X)
        assert Z.shape == (200, 6)
        # Rows of about the norm of Y's unit rows, whatever the scales of X and Y.
        assert 0.3 < np.median(np.linalg.norm(Z, axis=1)) < 1.01


def test_dtype_and_input_types(rng):
    X = rng.normal(size=(80, 5))
    Y = X @ ortho_group.rvs(5, random_state=3)
    aligner = RCSLSAligner(max_iter=2, random_state=0).fit(X, Y)
    Z = aligner.transform(X)
    assert Z.dtype == np.float64
    assert aligner.transform(X.astype(np.float32)).dtype == np.float32
    np.testing.assert_allclose(aligner.transform(pd.DataFrame(X)), Z)
    np.testing.assert_allclose(aligner.transform(torch.from_numpy(X)), Z)


def test_bad_input_errors(rng):
    X = rng.normal(size=(50, 4))
    with pytest.raises(ValueError, match="'lr' parameter"):
        RCSLSAligner(lr=0.0).fit(X, X)
    with pytest.raises(ValueError, match="'validation_fraction' parameter"):
        RCSLSAligner(validation_fraction=1.0).fit(X, X)
    with pytest.raises(ValueError, match="needs Y|Y is required|target"):
        RCSLSAligner().fit(X)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        RCSLSAligner().fit(bad, X)


def test_real_pair_mnist(mnist_features):
    # cnn_s0 -> mlp_s0, two architectures: Procrustes 0.37 paired top-1 (defaults).
    d = mnist_features
    train, test = d["train_idx"][:2000], d["test_idx"]
    X, Y = d["cnn_s0"], d["mlp_s0"]
    procrustes = OrthogonalProcrustesAligner().fit(X[train], Y[train]).score(X[test], Y[test])
    rcsls = RCSLSAligner(random_state=0).fit(X[train], Y[train]).score(X[test], Y[test])
    assert rcsls > procrustes + 0.03, (procrustes, rcsls)


def test_skops_round_trip_trusts_only_our_class(rng, tmp_path):
    sio = pytest.importorskip("skops.io")
    X = rng.normal(size=(80, 5))
    Y = X @ ortho_group.rvs(5, random_state=4) + 0.1 * rng.normal(size=(80, 5))
    aligner = RCSLSAligner(center=True, max_iter=2).fit(X, Y)
    path = tmp_path / "model.skops"
    sio.dump(aligner, path)
    assert sio.get_untrusted_types(file=path) == ["sklearn_compat.rcsls.RCSLSAligner"]
    loaded = sio.load(path, trusted=["sklearn_compat.rcsls.RCSLSAligner"])
    np.testing.assert_array_equal(loaded.transform(X), aligner.transform(X))

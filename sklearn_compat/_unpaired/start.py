"""Unsupervised starts: a first orthogonal map from nothing but the two sets of rows.

- :func:`sorted_profile_start` (Artetxe, Labaka and Agirre, ACL 2018, "vecmap"): two
  isometric spaces give every item the same multiset of similarities to the other items,
  so the rows of the square-rooted Gram matrix, each sorted, are comparable across spaces
  whatever the rotation; their nearest neighbours form a first dictionary.
- :func:`cluster_match_start` (after Dar, 2025, "mini-vec2vec"): k-means on each side, the
  two sets of centroids matched by the structure of their Gram matrices (a quadratic
  assignment), then every row described by its similarities to its side's matched
  centroids, and rows with similar descriptions taken as pseudo-pairs.
"""

import itertools

import numpy as np
import torch
from scipy.optimize import quadratic_assignment

from .common import csls_neighbours, nearest_means, orthogonal_fit, unit_centered, unit_rows

__all__ = [
    "ANCHOR_ROUNDS",
    "anchor_round",
    "cluster_match_start",
    "disjoint_start",
    "oriented_disjoint_start",
    "mean_best_csls",
    "kmeans",
    "match_centroids",
    "sorted_profile_start",
]


def sorted_profile_start(Xs, Ys, *, csls_k=10):
    """Initial dictionary from sorted similarity profiles (vecmap's unsupervised start).

    ``Xs`` and ``Ys`` must have the same number of rows (a sample of each side).  Returns
    the map fitted on the pairs that are each other's CSLS nearest neighbour in profile
    space (both directions' neighbours when there are too few mutual ones).
    """
    Px, Py = _sorted_profile(Xs), _sorted_profile(Ys)
    forward, backward, _ = csls_neighbours(Px, Py, csls_k)
    rows = torch.arange(Px.shape[0], device=Px.device)
    src = torch.cat([rows, backward])
    tgt = torch.cat([forward, rows])
    return orthogonal_fit(Xs[src], Ys[tgt])


def _sorted_profile(S):
    # The square root of the Gram matrix S S^T (= U diag(s) U^T) has the Gram matrix's
    # neighbourhoods with a flatter spectrum, which vecmap found to compare better.
    U, s, _ = torch.linalg.svd(S.double(), full_matrices=False)
    root = (U * s) @ U.T
    profile = torch.sort(root, dim=1, descending=True).values
    return unit_centered(profile.to(S.dtype))


def kmeans(S, n_clusters, generator, n_iter=25, n_runs=1):
    """Spherical k-means (k-means++ seeding from ``generator``), the best of ``n_runs``
    (highest total similarity of rows to their centroid); unit centroids.

    Several runs make the partition a property of the rows rather than of one seeding,
    which is what lets two spaces' partitions be matched at all."""
    best, best_fit = None, -float("inf")
    for _ in range(n_runs):
        centroids = _kmeans_once(S, n_clusters, generator, n_iter)
        fit = float((S @ centroids.T).max(dim=1).values.sum())
        if fit > best_fit:
            best, best_fit = centroids, fit
    return best


def _kmeans_once(S, n_clusters, generator, n_iter):
    n = S.shape[0]
    first = int(torch.randint(n, (1,), generator=generator, device="cpu"))
    chosen = [first]
    closest = 1.0 - S @ S[first]
    for _ in range(1, n_clusters):
        weights = torch.clamp(closest, min=0).double().cpu()
        if float(weights.sum()) <= 0:
            weights = torch.ones(n, dtype=torch.float64)
        pick = int(torch.multinomial(weights, 1, generator=generator))
        chosen.append(pick)
        closest = torch.minimum(closest, 1.0 - S @ S[pick])
    return _kmeans_from(S, S[chosen].clone(), n_iter, until_still=True)


# Largest number of centroids matched by trying every permutation (8! = 40,320 of them,
# scored in one pass); beyond it FAQ's local search, which can miss the optimum.
_EXACT_MATCH_MAX = 8


def match_centroids(Cx, Cy, rng, n_init=8):
    """Permutation ``p`` with ``Cx[i]`` matched to ``Cy[p[i]]``, maximising the agreement
    of the two centroid Gram matrices: exact up to eight centroids, otherwise FAQ
    quadratic assignment (best of ``n_init``)."""
    Gx = _standardised_offdiagonal((Cx @ Cx.T).double().cpu().numpy())
    Gy = _standardised_offdiagonal((Cy @ Cy.T).double().cpu().numpy())
    k = len(Gx)
    if k <= _EXACT_MATCH_MAX:
        perms = np.array(list(itertools.permutations(range(k))))
        values = np.einsum("ij,pij->p", Gx, Gy[perms[:, :, None], perms[:, None, :]])
        return torch.as_tensor(perms[int(np.argmax(values))], device=Cx.device)
    best, best_value = None, -np.inf
    for attempt in range(n_init):
        options = {"maximize": True, "P0": "barycenter" if attempt == 0 else "randomized"}
        options["rng"] = np.random.default_rng(int(rng.randint(0, 2**31 - 1)))
        result = quadratic_assignment(Gx, Gy, method="faq", options=options)
        if result.fun > best_value:
            best, best_value = result.col_ind, result.fun
    return torch.as_tensor(best, device=Cx.device)


def _standardised_offdiagonal(G):
    """Off-diagonal entries standardised, diagonal zero: the quadratic assignment then
    maximises the correlation of the two similarity structures, not their common level
    (a unit diagonal and mostly positive cosines leave it a flat landscape)."""
    G = G.copy()
    off = ~np.eye(len(G), dtype=bool)
    spread = G[off].std() if off.any() else 0.0
    G[off] = (G[off] - G[off].mean()) / (spread if spread > 0 else 1.0)
    G[~off] = 0.0
    return G


def cluster_match_start(
    Xs, Ys, *, n_clusters, rng, generator, n_neighbors=10, anchor_clusters=(32, 64)
):
    """A map from matched cluster structure (after mini-vec2vec), refined through finer
    anchors.

    1. ``n_clusters`` centroids per side (the best of several k-means runs, so that each
       side's partition is stable) are matched by :func:`match_centroids`; every row is
       described by its (unit-centred) cosines to its side's centroids in matched order,
       and each source row is paired with the mean of its ``n_neighbors`` nearest target
       rows in that description (a soft pseudo-pair that averages out wrong neighbours).
    2. A few rounds pair each mapped source row with the mean of its nearest target rows.
    3. For each count in ``anchor_clusters``: k-means on the target side only, the
       centroids carried into the source space by the current map (so that the anchors of
       the two sides correspond by construction), pseudo-pairs from the descriptions by
       those anchors, then 2. again.  Few coarse clusters are matched reliably but describe
       rows crudely; the finer anchors sharpen a map that is roughly right.
    """
    Cx = kmeans(Xs, n_clusters, generator, n_runs=5)
    Cy = kmeans(Ys, n_clusters, generator, n_runs=5)
    perm = match_centroids(Cx, Cy, rng)
    W = _anchor_pseudo_pairs(Xs, Ys, Cx, Cy[perm], n_neighbors)
    W = _nearest_mean_rounds(Xs, Ys, W, n_neighbors)
    for count in anchor_clusters:
        count = min(count, Ys.shape[0] // 4)
        if count < 2:
            continue
        Cy = kmeans(Ys, count, generator)
        Cx = unit_rows(Cy @ W.to(Cy.dtype).T)
        W = _anchor_pseudo_pairs(Xs, Ys, Cx, Cy, n_neighbors)
        W = _nearest_mean_rounds(Xs, Ys, W, n_neighbors)
    return W


def _anchor_pseudo_pairs(Xs, Ys, Cx, Cy, n_neighbors):
    """Procrustes from each source row to the mean of the target rows whose cosines to
    the anchors ``Cy`` are nearest its own cosines to the matching anchors ``Cx``."""
    Rx = unit_centered(Xs @ Cx.T)
    Ry = unit_centered(Ys @ Cy.T)
    return orthogonal_fit(Xs, nearest_means(Rx, Ry, Ys, n_neighbors))


def _nearest_mean_rounds(Xs, Ys, W, n_neighbors, rounds=5):
    """Procrustes from each source row to the mean of its mapped nearest target rows."""
    for _ in range(rounds):
        W = orthogonal_fit(Xs, nearest_means(unit_rows(Xs @ W.to(Xs.dtype)), Ys, Ys, n_neighbors))
    return W


# The disjoint start's anchor schedule: clusters per round, coarse to fine.  Each round
# matches clusters through the current map, so a map that is roughly right gets finer
# anchors to sharpen it; a map that is wrong gains nothing (the restarts' ranking).
ANCHOR_ROUNDS = (64, 64, 64, 128, 128, 256, 256, 256, 512, 512, 512)


def disjoint_start(
    Xs,
    Ys,
    *,
    rng,
    generator,
    n_runs=10,
    n_clusters=32,
    n_neighbors=50,
    qap_restarts=100,
    anchor_rounds=ANCHOR_ROUNDS,
):
    """A map between sides that share no item: matched clusters, then anchor rounds.

    1. ``n_runs`` k-means partitions of ``n_clusters`` on each side; the unit centroids of
       run ``r`` on X matched to those of run ``r`` on Y by :func:`match_centroids` (FAQ,
       best of ``qap_restarts``, on standardised similarity matrices); every row is
       described by its cosines to its side's matched centroids, all runs concatenated,
       and each X row's target is the mean of the ``n_neighbors`` Y rows nearest in that
       description; Procrustes from the rows to their targets.
    2. :func:`anchor_round` for each count of ``anchor_rounds``.

    No item needs to be on both sides: rows are only ever paired with means of similar
    rows.  Returns ``(W, criterion)``, where ``criterion`` is :func:`mean_best_csls` of
    the map, the figure that ranks restarts.
    """
    blocks_x, blocks_y = [], []
    for _ in range(n_runs):
        Cx = kmeans(Xs, n_clusters, generator)
        Cy = kmeans(Ys, n_clusters, generator)
        perm = match_centroids(Cx, Cy, rng, n_init=qap_restarts)
        blocks_x.append(unit_centered(Xs @ Cx.T))
        blocks_y.append(unit_centered(Ys @ Cy[perm].T))
    W = _description_fit(Xs, Ys, blocks_x, blocks_y, n_neighbors)
    for count in anchor_rounds:
        W = anchor_round(Xs, Ys, W, count, generator, n_neighbors=n_neighbors)
    return W, mean_best_csls(Xs, Ys, W)


def oriented_disjoint_start(Xs, Ys, *, reverse, **kwargs):
    """:func:`disjoint_start` from ``Xs`` onto ``Ys``, or (``reverse=True``) from ``Ys``
    onto ``Xs`` and transposed; either way ``(W, criterion)`` with ``W`` mapping X's
    space into Y's and ``criterion`` the :func:`mean_best_csls` of that map.

    The start is not symmetric in its two sides (each source row's target is a mean of
    target rows), and which side makes the better source depends on the pair of spaces
    (see :ref:`benchmarks`); restarts therefore alternate the two orientations.
    """
    if not reverse:
        return disjoint_start(Xs, Ys, **kwargs)
    W, _ = disjoint_start(Ys, Xs, **kwargs)
    W = W.T
    return W, mean_best_csls(Xs, Ys, W)


def anchor_round(Xs, Ys, W, count, generator, *, n_neighbors=50):
    """One round of anchors carried by the map ``W``, in both directions.

    k-means on Y, then k-means on X started from Y's centroids carried back by ``W`` (so
    anchor ``i`` of X lies where the map says anchor ``i`` of Y does), and the symmetric
    pass from X; rows are described by their cosines to both sets of anchors and each X
    row's target is the mean of the ``n_neighbors`` Y rows nearest in that description.
    """
    count = max(2, min(count, Xs.shape[0] // 4, Ys.shape[0] // 4))
    Wt = W.to(Xs.dtype)
    Cy = kmeans(Ys, count, generator)
    Cx = _kmeans_from(Xs, unit_rows(Cy @ Wt.T))
    Dx = kmeans(Xs, count, generator)
    Dy = _kmeans_from(Ys, unit_rows(Dx @ Wt))
    blocks_x = [unit_centered(Xs @ Cx.T), unit_centered(Xs @ Dx.T)]
    blocks_y = [unit_centered(Ys @ Cy.T), unit_centered(Ys @ Dy.T)]
    return _description_fit(Xs, Ys, blocks_x, blocks_y, n_neighbors)


def _description_fit(Xs, Ys, blocks_x, blocks_y, n_neighbors):
    Rx = unit_rows(torch.cat(blocks_x, dim=1))
    Ry = unit_rows(torch.cat(blocks_y, dim=1))
    return orthogonal_fit(Xs, nearest_means(Rx, Ry, Ys, n_neighbors))


def _kmeans_from(S, centroids, n_iter=10, until_still=False):
    """Spherical k-means from the given centroids (a cluster left empty keeps its start):
    ``n_iter`` rounds, or fewer with ``until_still`` once a round no longer moves them."""
    for _ in range(n_iter):
        labels = (S @ centroids.T).argmax(dim=1)
        sums = torch.zeros_like(centroids).index_add_(0, labels, S)
        empty = torch.linalg.vector_norm(sums, dim=1) == 0
        sums[empty] = centroids[empty]
        updated = unit_rows(sums)
        if until_still and torch.allclose(updated, centroids):
            break
        centroids = updated
    return centroids


def mean_best_csls(Xs, Ys, W, k=10):
    """Mean best CSLS of the mapped X rows against Y and of Y's rows against them: how
    tightly the map lays one cloud onto the other.  It ranks restarts within one fit (a
    right map stands clearly above the wrong ones, which sit close together); its value
    across pairs of spaces means little."""
    A = unit_rows(Xs @ W.to(Xs.dtype))
    forward, backward, score = csls_neighbours(A, Ys, k)
    _, _, back_score = csls_neighbours(Ys, A, k)
    return 0.5 * (float(score.mean()) + float(back_score.mean()))

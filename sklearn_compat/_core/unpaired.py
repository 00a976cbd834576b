"""Matching two embedding spaces without pairs: unsupervised starts, self-learning, confidence.

Every function works on torch tensors of rows already put in the common form of
:func:`unit_centered` (unit rows, centred, unit again: vecmap's normalisation), on one
device, and returns tensors there.  The estimator (:mod:`sklearn_compat.unpaired`) owns
validation, sampling and the choice among candidate starts.

Two unsupervised starts propose an orthogonal map from nothing but the two sets of rows:

- :func:`sorted_profile_start` (Artetxe, Labaka and Agirre, ACL 2018, "vecmap"): two
  isometric spaces give every item the same multiset of similarities to the other items,
  so the rows of the square-rooted Gram matrix, each sorted, are comparable across spaces
  whatever the rotation; their nearest neighbours form a first dictionary.
- :func:`cluster_match_start` (after Dar, 2025, "mini-vec2vec"): k-means on each side, the
  two sets of centroids matched by the structure of their Gram matrices (a quadratic
  assignment), then every row described by its similarities to its side's matched
  centroids, and rows with similar descriptions taken as pseudo-pairs.

:func:`self_learn` then alternates Procrustes and dictionary induction by mutual CSLS
nearest neighbours (Conneau et al., ICLR 2018), keeping any seed pairs;
:func:`stochastic_self_learn` is vecmap's variant for weak starts (both directions'
neighbours, each similarity kept only with a probability that grows as the objective
stalls, so that the dictionary can leave a poor start's basin); :func:`heldout_share`
is the unsupervised figure of merit (the share of rows left out of self-learning that are
in a mutual CSLS nearest-neighbour pair under the map), and :func:`structureless_cloud`
the target on which it measures what self-learning reaches by chance.
"""

import itertools

import numpy as np
import torch
from scipy.optimize import quadratic_assignment

from .ranking import knn_mean_similarity, similarity_blocks

__all__ = [
    "cluster_match_start",
    "csls_neighbours",
    "heldout_share",
    "kmeans",
    "match_centroids",
    "orthogonal_fit",
    "random_orthogonal",
    "self_learn",
    "sorted_profile_start",
    "stochastic_self_learn",
    "structureless_cloud",
    "unit_centered",
    "unit_rows",
]


def unit_rows(T):
    """Rows scaled to unit norm (all-zero rows stay zero)."""
    norms = torch.linalg.vector_norm(T, dim=1, keepdim=True)
    return T / torch.clamp(norms, min=torch.finfo(T.dtype).tiny)


def unit_centered(T):
    """Unit rows, centred, unit again: a space's common offset (anisotropy) removed, so
    that cosines measure what differs between items."""
    T = unit_rows(T)
    return unit_rows(T - T.mean(dim=0, keepdim=True))


def orthogonal_fit(A, B):
    """The orthogonal ``W`` minimising ``||A W - B||_F`` (thin SVD of ``A^T B``).

    Returned in float64 on ``A``'s device: the fitted map keeps full precision, and the
    searches cast it to the rows' dtype.
    """
    cross = (A.T.double() @ B.double()).cpu()
    U, _, Vt = torch.linalg.svd(cross, full_matrices=False)
    return (U @ Vt).to(device=A.device)


def csls_neighbours(A, B, k):
    """CSLS nearest neighbours both ways between two sets of unit rows.

    Returns ``(forward, backward, forward_score)``: the best row of ``B`` for each row of
    ``A``, the best row of ``A`` for each row of ``B``, and the CSLS of each forward match.
    """
    r_A, r_B = _hubness(A, B, k)
    forward, score = _best(A, B, r_A, r_B)
    backward, _ = _best(B, A, r_B, r_A)
    return forward, backward, score


def _hubness(A, B, k):
    """CSLS's ``(r_A, r_B)``: each row's mean cosine to its ``k`` nearest rows of the
    other set (``k`` clipped to the smaller set)."""
    k = max(1, min(k, A.shape[0], B.shape[0]))
    return knn_mean_similarity(A, B, k), knn_mean_similarity(B, A, k)


def _csls_blocks(A, B, r_A, r_B):
    """Yield ``(start, stop, CSLS of A[start:stop] against every row of B)``."""
    for start, stop, sims in similarity_blocks(A, B):
        yield start, stop, 2 * sims - r_B[None, :] - r_A[start:stop, None]


def _best(A, B, r_A, r_B):
    index = torch.empty(A.shape[0], dtype=torch.int64, device=A.device)
    value = torch.empty(A.shape[0], dtype=A.dtype, device=A.device)
    for start, stop, sims in _csls_blocks(A, B, r_A, r_B):
        value[start:stop], index[start:stop] = sims.max(dim=1)
    return index, value


def mutual_pairs(A, B, k):
    """Rows ``(i, j)`` that are each other's CSLS nearest neighbour, best CSLS first."""
    forward, backward, score = csls_neighbours(A, B, k)
    rows = torch.arange(A.shape[0], device=A.device)
    mutual = backward[forward] == rows
    order = torch.argsort(score[mutual], descending=True, stable=True)
    return rows[mutual][order], forward[mutual][order]


def structureless_cloud(Ys, generator):
    """Gaussian rows with the mean and covariance of ``Ys`` (its row count), in the common
    form: a target with ``Ys``'s shape and spread but no structure that any map can match.
    """
    mean = Ys.double().mean(dim=0)
    _, spread, basis = torch.linalg.svd(Ys.double() - mean, full_matrices=False)
    noise = torch.randn(Ys.shape[0], len(spread), generator=generator, dtype=torch.float64)
    cloud = mean + (noise * (spread / np.sqrt(Ys.shape[0])).cpu()).to(Ys.device) @ basis
    return unit_centered(cloud.to(Ys.dtype))


def random_orthogonal(d_x, d_y, generator):
    """A random ``(d_x, d_y)`` map with orthonormal rows or columns (Haar, seeded)."""
    G = torch.randn(max(d_x, d_y), min(d_x, d_y), generator=generator, dtype=torch.float64)
    Q = torch.linalg.qr(G).Q  # orthonormal columns
    return Q if d_x >= d_y else Q.T


def self_learn(Xs, Ys, W, *, seeds=None, n_iter=10, csls_k=10, tol=0.0):
    """Alternate dictionary induction (mutual CSLS neighbours) and Procrustes.

    Parameters
    ----------
    Xs, Ys : tensors of unit-centred rows
    W : tensor of shape (d_x, d_y)
        The starting map.
    seeds : tensor of shape (m, 2) or None
        Pairs known to match: kept in every round's dictionary.
    n_iter : int
        Rounds at most; the loop stops early once the induced dictionary repeats.
    csls_k : int
        CSLS neighbourhood size.
    tol : float
        Stop once fewer than this share of the smaller side's rows changed partner.

    Returns
    -------
    W, matches (int64 tensor (n_matches, 2)), rounds run
    """
    n = min(Xs.shape[0], Ys.shape[0])
    partner = None
    rounds = 0
    matches = torch.empty((0, 2), dtype=torch.int64, device=Xs.device)
    for _ in range(n_iter):
        i, j = mutual_pairs(unit_rows(Xs @ W.to(Xs.dtype)), Ys, csls_k)
        rounds += 1
        matches = torch.stack([i, j], dim=1)
        current = torch.full((Xs.shape[0],), -1, dtype=torch.int64, device=Xs.device)
        current[i] = j
        if partner is not None and int((current != partner).sum()) <= tol * n:
            break
        partner = current
        dictionary = matches if seeds is None else torch.cat([seeds, matches])
        if len(dictionary) == 0:
            break
        W = orthogonal_fit(Xs[dictionary[:, 0]], Ys[dictionary[:, 1]])
    return W, matches, rounds


def stochastic_self_learn(
    Xs, Ys, W, *, generator, seeds=None, csls_k=10, keep=0.1, patience=10, max_rounds=200
):
    """Self-learning with stochastic dictionary induction (Artetxe et al., ACL 2018).

    Each round pairs every row of ``Xs`` with its best row of ``Ys`` and every row of
    ``Ys`` with its best row of ``Xs`` by CSLS, after dropping each similarity with
    probability ``1 - keep``, and refits the map on the union (plus ``seeds``).  The
    dropped entries let the dictionary move away from the matches a weak start favours;
    whenever the objective (mean best CSLS both ways, without dropout) has not improved
    for ``patience`` rounds, ``keep`` doubles, until it reaches 1 and the objective stalls
    once more.

    Parameters
    ----------
    Xs, Ys : tensors of unit-centred rows
    W : tensor of shape (d_x, d_y)
        The starting map.
    generator : torch.Generator
        Draws the dropout masks; on the rows' device.
    seeds : tensor of shape (m, 2) or None
        Pairs known to match: kept in every round's dictionary.
    csls_k : int
        CSLS neighbourhood size.
    keep : float
        First share of similarities kept (vecmap's 0.1).
    patience : int
        Rounds without improvement before ``keep`` doubles.
    max_rounds : int
        Rounds at most.

    Returns
    -------
    W, rounds run
    """
    best, since, rounds = -float("inf"), 0, 0
    while rounds < max_rounds:
        rounds += 1
        forward, backward, objective = _dropout_neighbours(
            unit_rows(Xs @ W.to(Xs.dtype)), Ys, csls_k, keep, generator
        )
        if objective > best + _MIN_GAIN:
            best, since = objective, 0
        else:
            since += 1
            if since >= patience:
                if keep >= 1.0:
                    break
                keep, since = min(1.0, 2.0 * keep), 0
        source, target = torch.cat([forward[0], backward[0]]), torch.cat([forward[1], backward[1]])
        if seeds is not None:
            source, target = torch.cat([seeds[:, 0], source]), torch.cat([seeds[:, 1], target])
        W = orthogonal_fit(Xs[source], Ys[target])
    return W, rounds


# Smallest rise of the stochastic objective (a mean CSLS, in [-2, 2]) that counts as
# progress; vecmap's threshold is of this order.
_MIN_GAIN = 1e-4


def _dropout_neighbours(A, B, k, keep, generator):
    """CSLS best matches both ways with each similarity kept with probability ``keep``.

    Returns ``(forward, backward, objective)``: the forward pairs ``(rows of A, their best
    kept rows of B)``, the backward pairs ``(best kept rows of A, rows of B)``, and the
    mean best CSLS of the two directions before dropout (the quantity self-learning
    raises).
    """
    r_A, r_B = _hubness(A, B, k)
    forward = torch.empty(A.shape[0], dtype=torch.int64, device=A.device)
    column_best = torch.full((B.shape[0],), -torch.inf, dtype=A.dtype, device=A.device)
    column_kept = column_best.clone()
    backward = torch.zeros(B.shape[0], dtype=torch.int64, device=A.device)
    row_kept = torch.empty(A.shape[0], dtype=torch.bool, device=A.device)
    row_best = torch.empty(A.shape[0], dtype=A.dtype, device=A.device)
    for start, stop, sims in _csls_blocks(A, B, r_A, r_B):
        row_best[start:stop] = sims.max(dim=1).values
        column_best = torch.maximum(column_best, sims.max(dim=0).values)
        if keep < 1.0:
            dropped = torch.rand(sims.shape, generator=generator, device=generator.device)
            sims.masked_fill_(dropped.to(sims.device) >= keep, -torch.inf)
        value, forward[start:stop] = sims.max(dim=1)
        row_kept[start:stop] = value > -torch.inf
        value, index = sims.max(dim=0)
        better = value > column_kept
        column_kept = torch.where(better, value, column_kept)
        backward = torch.where(better, index + start, backward)
    # read once per round, not once per block
    objective = 0.5 * (float(row_best.sum()) / A.shape[0] + float(column_best.mean()))
    # A row whose similarities were all dropped (likely only among a handful of rows)
    # has no match this round rather than an arbitrary one.
    rows_a, rows_b = torch.nonzero(row_kept).flatten(), torch.nonzero(column_kept > -torch.inf)
    rows_b = rows_b.flatten()
    return (rows_a, forward[rows_a]), (backward[rows_b], rows_b), objective


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
    centroids = S[chosen].clone()
    for _ in range(n_iter):
        labels = (S @ centroids.T).argmax(dim=1)
        sums = torch.zeros_like(centroids).index_add_(0, labels, S)
        empty = torch.linalg.vector_norm(sums, dim=1) == 0
        sums[empty] = centroids[empty]
        updated = unit_rows(sums)
        if torch.allclose(updated, centroids):
            break
        centroids = updated
    return centroids


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
    return orthogonal_fit(Xs, _nearest_means(Rx, Ry, Ys, n_neighbors))


def _nearest_mean_rounds(Xs, Ys, W, n_neighbors, rounds=5):
    """Procrustes from each source row to the mean of its mapped nearest target rows."""
    for _ in range(rounds):
        W = orthogonal_fit(Xs, _nearest_means(unit_rows(Xs @ W.to(Xs.dtype)), Ys, Ys, n_neighbors))
    return W


def _nearest_means(A, B, values, n_neighbors):
    """For each row of ``A``: the mean of ``values`` over its nearest rows of ``B``."""
    k = max(1, min(n_neighbors, B.shape[0]))
    means = torch.empty((A.shape[0], values.shape[1]), dtype=values.dtype, device=A.device)
    for start, stop, sims in similarity_blocks(A, B):
        means[start:stop] = values[torch.topk(sims, k, dim=1).indices].mean(dim=1)
    return means


def heldout_share(Xs, Ys, W, held, k):
    """Share of the ``held`` source rows that are in a mutual CSLS pair under ``W``.

    The rows in ``held`` must have taken no part in fitting ``W``: a map self-learned on
    its own matches finds mutual partners for many of them even when it is wrong, but
    only a right map generalises to rows it has not seen.
    """
    i, _ = mutual_pairs(unit_rows(Xs @ W.to(Xs.dtype)), Ys, k)
    is_held = torch.zeros(Xs.shape[0], dtype=torch.bool, device=Xs.device)
    is_held[held] = True
    return float(is_held[i].sum()) / max(1, len(held))

"""Refiners: from a rough map to the map, by self-learning.

:func:`self_learn` alternates Procrustes and dictionary induction by mutual CSLS nearest
neighbours (Conneau et al., ICLR 2018), keeping any seed pairs; :func:`stochastic_self_learn`
is vecmap's variant for weak starts (both directions' neighbours, each similarity kept only
with a probability that grows as the objective stalls, so that the dictionary can leave a
poor start's basin).  :func:`disjoint_refine` is the refiner for sides that share no
item: stochastic self-learning to leave the start's basin, then :func:`neighbour_mean_refine`
to settle.
"""

import torch

from .common import (
    _csls_blocks,
    _hubness,
    csls_neighbours,
    mutual_pairs,
    nearest_means,
    orthogonal_fit,
    unit_rows,
)

__all__ = [
    "disjoint_refine",
    "neighbour_mean_refine",
    "self_learn",
    "stochastic_self_learn",
    "union_self_learn",
]


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


def neighbour_mean_refine(Xs, Ys, W, *, n_rounds=40, n_neighbors=10):
    """Pull the map towards the mean of each mapped row's nearest target rows.

    Each round: the target of every X row is the mean of the ``n_neighbors`` Y rows
    nearest its image; the map moves half-way to the Procrustes map onto those targets
    (and back onto the orthogonal maps).  Means of neighbours need no item on both sides,
    and the half step keeps a roughly right map from jumping to a wrong one.
    """
    for _ in range(n_rounds):
        targets = nearest_means(unit_rows(Xs @ W.to(Xs.dtype)), Ys, Ys, n_neighbors)
        step = orthogonal_fit(Xs, targets)
        W = _nearest_orthogonal(0.5 * (W.double() + step.double()))
    return W


def _nearest_orthogonal(M):
    U, _, Vt = torch.linalg.svd(M.cpu(), full_matrices=False)
    return (U @ Vt).to(M.device)


def union_self_learn(Xs, Ys, W, *, n_iter=20, csls_k=10, tol=0.005):
    """Self-learning on the union of both directions' CSLS best matches.

    Each X row's best Y row and each Y row's best X row form the dictionary (not only the
    mutual pairs, which are few when the two sides hold different items); Procrustes on
    it; repeat until fewer than ``tol`` of the X rows change partner.  Returns
    ``(W, rounds)``.
    """
    previous = None
    rounds = 0
    for _ in range(n_iter):
        rounds += 1
        forward, backward, _ = csls_neighbours(unit_rows(Xs @ W.to(Xs.dtype)), Ys, csls_k)
        if previous is not None and int((forward != previous).sum()) <= tol * len(forward):
            break
        previous = forward
        rows_x = torch.arange(Xs.shape[0], device=Xs.device)
        rows_y = torch.arange(Ys.shape[0], device=Ys.device)
        source = torch.cat([rows_x, backward])
        target = torch.cat([forward, rows_y])
        W = orthogonal_fit(Xs[source], Ys[target])
    return W, rounds


def disjoint_refine(
    Xs,
    Ys,
    W,
    *,
    generator,
    csls_k=10,
    keep=0.1,
    patience=30,
    max_rounds=400,
    n_rounds=30,
    n_neighbors=10,
    max_passes=1,
):
    """From a rough map to the map when the two sides hold different items.

    The starts of :func:`~sklearn_compat._unpaired.start.disjoint_start` are right along
    the leading directions of the rows (their cluster structure) and close to random in
    the rest, and such a map is a fixed point of deterministic refiners: neighbour means
    and self-learning keep it, since the nearest rows under it are chosen by the
    directions it already maps right.  :func:`stochastic_self_learn` (a random share of
    the similarities dropped, ``keep`` doubling after ``patience`` rounds without gain)
    leaves that fixed point; :func:`neighbour_mean_refine` then settles the map on the
    means of each row's ``n_neighbors`` nearest target rows, which holds a right map
    better than self-learning on pseudo-pairs (no row has its true partner on the other
    side).  The draws decide whether a weak start is caught (another ``generator`` seed
    may catch what one misses), and a right start is not kept as it is: the stochastic
    stage moves it to a nearby map that the unsupervised objectives score alike.

    A start that one pass only half catches is caught by the next: with ``max_passes``
    above 1, passes repeat while each raises the map's mean best CSLS
    (:func:`~sklearn_compat._unpaired.start.mean_best_csls`) by at least ``1e-3``, and the
    best-scored map is returned.

    Parameters
    ----------
    Xs, Ys : tensors of unit-centred rows
    W : tensor of shape (d_x, d_y)
        The starting map.
    generator : torch.Generator
        Draws the dropout masks; on the rows' device.
    csls_k : int
        CSLS neighbourhood size of the stochastic stage.
    keep, patience, max_rounds : float, int, int
        The stochastic stage's first share of similarities kept, rounds without gain
        before it doubles, and rounds at most.
    n_rounds, n_neighbors : int
        Rounds of neighbour means, and the nearest rows averaged.
    max_passes : int
        Passes (stochastic stage, then neighbour means) at most.

    Returns
    -------
    W, rounds of the stochastic stages (all passes)
    """
    from .start import mean_best_csls

    best, best_score, total = W, None, 0
    for _ in range(max_passes):
        W, rounds = stochastic_self_learn(
            Xs,
            Ys,
            W,
            generator=generator,
            csls_k=csls_k,
            keep=keep,
            patience=patience,
            max_rounds=max_rounds,
        )
        W = neighbour_mean_refine(Xs, Ys, W, n_rounds=n_rounds, n_neighbors=n_neighbors)
        total += rounds
        if max_passes == 1:
            return W, total
        score = mean_best_csls(Xs, Ys, W, csls_k)
        gained = best_score is None or score >= best_score + _PASS_GAIN
        if best_score is None or score > best_score:
            best, best_score = W, score
        if not gained:
            break
    return best, total


# Least rise of the mean best CSLS (in [-2, 2]) for which disjoint_refine runs another pass:
# a caught map's next pass moves it by a few ten-thousandths, a half-caught one's by
# about 2e-3.
_PASS_GAIN = 1e-3

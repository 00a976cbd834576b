"""Held-out folds of the training rows, and the paired top-1 they are scored by.

The ``"auto"`` settings are decided by what the user will measure: a slice of the training
rows is held out, each candidate setting is fitted on the other rows and scored by paired
top-1 cosine retrieval on the held-out rows (the aligners' ``score``).  This module says
which rows are held out (:func:`holdout_folds`, :func:`wide_solve_sample`), reads them
from any supported input (:func:`take_rows`) and scores a candidate on them
(:func:`paired_top1`, :func:`pick`).  Width also sets the number of folds and the
precision of the candidates' solves (:data:`WIDE_SOLVE`).
"""

import numpy as np
import torch
from sklearn.utils import _safe_indexing, check_random_state

from .backend import is_dask_collection
from .ranking import unit_rows

#: Fewest training rows from which ``"auto"`` is decided (a held-out slice of 20).
MIN_ROWS = 100

#: Rows of one held-out fold at most (its paired top-1 is a 1-in-1000 retrieval task).
FOLD_ROWS = 1000

#: Rows scored in all at most: up to 5 folds on small data, 1 fold from 25,000 rows on,
#: where the extra SVDs would cost more than the fit.
MAX_SCORED_ROWS = 5000
LARGE_N = 25000

#: Width from which a candidate's (d, d) solve costs as much as a pass over thousands of
#: rows (one float64 SVD of 4,096 x 4,096: about 20 s on one core, the cross product of
#: 20,000 rows as long): one held-out fold, and whitening candidates solved in float32
#: (a score, not the map: the chosen setting is refitted in float64).
WIDE_SOLVE = 2048


def holdout_folds(n_rows, random_state, width=None):
    """Held-out folds of row indices (list of sorted int arrays), or None when too few.

    Each fold has ``min(1000, n_rows // 5)`` rows; up to 5 folds (all rows scored) below
    25,000 rows, one above, and one when the candidates' solves have ``width`` of
    :data:`WIDE_SOLVE` or more.  ``random_state=None`` takes evenly spaced rows (every fold a
    stride through the data, so sorted input is sampled evenly and the choice is
    reproducible); an int or a RandomState takes a seeded random permutation.
    """
    if n_rows < MIN_ROWS:
        return None
    size = min(FOLD_ROWS, n_rows // 5)
    wide = width is not None and width >= WIDE_SOLVE
    n_folds = 1 if n_rows >= LARGE_N or wide else max(1, min(5, MAX_SCORED_ROWS // size))
    if random_state is None:
        # Fold f: evenly spaced among the rows f, f + 5, f + 10, ... (disjoint folds).
        folds = []
        for fold in range(n_folds):
            pool = np.arange(fold, n_rows, 5)
            folds.append(pool[np.linspace(0, len(pool) - 1, size).round().astype(np.int64)])
        return folds
    order = check_random_state(random_state).permutation(n_rows)
    return [np.sort(order[i * size : (i + 1) * size]) for i in range(n_folds)]


def wide_solve_sample(X, Y, sample_weight, random_state):
    """Rows from which ``"auto"`` scores its candidates in the row space, or None.

    From :data:`WIDE_SOLVE` columns on, a candidate's (d, d) SVD or whitening solve costs
    more than the cross product of all rows (two float32 SVDs of 4,096 x 4,096 doubled a
    20,000-row Procrustes fit): with more rows than columns the candidates are then
    fitted on a sample of ``min(d_x, d_y) // 2`` rows in the row space (one QR per side,
    n x n problems) and scored on a held-out fold of it; the chosen setting is fitted on
    every row.  Evenly spaced rows for ``random_state=None``, else a seeded draw.  None
    below that width, for wide data (already solved in the row space) and for Dask input.
    """
    from .row_space import is_wide

    if is_dask_collection(X, Y, sample_weight) or is_wide(X, Y, sample_weight):
        return None
    shape_x, shape_y = getattr(X, "shape", None), getattr(Y, "shape", None)
    if shape_x is None or shape_y is None or len(shape_x) != 2 or len(shape_y) != 2:
        return None  # validation will say what is wrong
    n_rows = int(shape_x[0])
    width = min(int(shape_x[1]), int(shape_y[1]))
    if width < WIDE_SOLVE or n_rows <= width // 2:
        return None
    size = width // 2
    if random_state is None:
        return np.linspace(0, n_rows - 1, size).round().astype(np.int64)
    return np.sort(check_random_state(random_state).permutation(n_rows)[:size])


def scoring_dtype(width, statistic=None):
    """Precision of candidate solves that are only scored: float32 from
    :data:`WIDE_SOLVE` columns on, float64 below and where ``statistic``'s entries are
    beyond float32's comfortable range (above 1e30 or below 1e-30 in size)."""
    if width < WIDE_SOLVE:
        return np.float64
    if statistic is not None:
        peak = float(np.abs(statistic).max(initial=0.0))
        if peak > 1e30 or 0 < peak < 1e-30:
            return np.float64
    return np.float32


def take_rows(data, rows):
    """Rows of an array, DataFrame, tensor or Dask array, as a float64 numpy array."""
    if is_dask_collection(data):
        data = data[rows].compute()
    elif isinstance(data, torch.Tensor):
        data = data.detach()[torch.as_tensor(rows, device=data.device)].cpu().double().numpy()
    else:
        data = _safe_indexing(data, rows)
    out = np.asarray(data, dtype=np.float64)
    return out.reshape(-1, 1) if out.ndim == 1 else out


def all_rows(data):
    """Every row as :func:`take_rows` gives them; a float64 numpy array is used as it is
    (no copy of what may be the largest array of the fit)."""
    if isinstance(data, np.ndarray) and data.dtype == np.float64 and data.ndim == 2:
        return data
    return take_rows(data, np.arange(np.shape(data)[0]))


def unit_rows_float32(rows):
    """Rows scaled to unit length in float64, returned in float32 (zero rows stay zero):
    the operands of the held-out folds' float32 similarity products."""
    return unit_rows(np.asarray(rows, dtype=np.float64)).astype(np.float32)


def same_target_groups(targets):
    """Per row, the group of rows holding the very same target (None when all differ)."""
    if targets is None:
        return None
    rows = np.ascontiguousarray(np.asarray(targets).reshape(len(targets), -1))
    _, groups, counts = np.unique(rows, axis=0, return_inverse=True, return_counts=True)
    return None if counts.max(initial=1) == 1 else groups.ravel()


def top1_of_similarities(sims, targets=None):
    """Share of rows whose own target is their strict nearest: the mean of
    :func:`top1_hits` (see there)."""
    return float(np.mean(top1_hits(sims, targets)))


def top1_hits(sims, targets=None):
    """Per row of a square similarity matrix, whether its diagonal entry is the row's
    strict maximum (ties count against the row, as in the aligners' ``score``).  A query's
    own normalisation does not change its row's order, so ``sims`` may use raw queries.

    ``targets`` (the fold's target rows): other rows holding the very same target as a
    row's own are copies of its answer, not competitors, and are left out of its row.
    Without that, duplicated training rows (a table exported twice) make every query tie
    with its own copies and every candidate score near 0, whatever its merit.
    """
    own = np.diagonal(sims).copy()
    sims = sims.copy()
    np.fill_diagonal(sims, -np.inf)
    groups = same_target_groups(targets)
    if groups is not None:
        sims[groups[:, None] == groups[None, :]] = -np.inf
    return sims.max(axis=1) < own


def paired_top1(Z, Y):
    """Paired top-1 cosine retrieval of ``Z`` against ``Y`` (the aligners' ``score``) on a
    held-out fold of at most 1,000 rows: one float32 GEMM in numpy.  Identical rows of
    ``Y`` count as one target (see :func:`top1_of_similarities`).

    The rule of :func:`~.ranking.paired_topk_share`, kept on the host: the candidates are
    scored many times per fit, on folds small enough that the blockwise device search
    costs more than the product, and the choosers that solve from statistics hold a
    similarity matrix, not rows (:func:`top1_of_similarities`).
    """
    return float(np.mean(paired_hits(Z, Y)))


def paired_hits(Z, Y, distractors=None):
    """Per row of a held-out fold, whether :func:`paired_top1` counts it retrieved (the
    rows' outcomes, from which :func:`paired_gain` reads a paired standard error).

    ``distractors``: more target rows (no row's answer, e.g. unpaired target rows) that
    each row's own target must also beat, so a small fold still ranks among many.
    """
    Z, Y = unit_rows_float32(Z), unit_rows_float32(Y)
    hits = top1_hits(Z @ Y.T, targets=Y)
    if distractors is not None and len(distractors):
        own = np.einsum("ij,ij->i", Z, Y)
        hits &= (Z @ unit_rows_float32(distractors).T).max(axis=1) < own
    return hits


def paired_gain(hits, base_hits):
    """Mean and standard error of the per-row difference of two candidates' outcomes on
    the same held-out rows (``hits - base_hits``, each a boolean or 0/1 array).

    The two candidates are scored on the very same rows, so the error of their
    difference is the paired one: ``std(d) / sqrt(n)`` of the per-row differences ``d``,
    which only the rows where the two disagree move.
    """
    d = np.asarray(hits, dtype=np.float64) - np.asarray(base_hits, dtype=np.float64)
    if d.size < 2:
        return float(d.mean()) if d.size else 0.0, float("inf")
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size))


def pick(scores, margin=0.0):
    """The key with the best mean score; the first listed wins ties, and keeps its place
    unless another beats it by more than ``margin``."""
    labels = list(scores)
    means = [float(np.mean(scores[label])) for label in labels]
    best = int(np.argmax(means))
    return labels[best] if means[best] > means[0] + margin else labels[0]


def params_label(params):
    """``"name=value, ..."``: how a candidate setting is keyed in ``auto_scores_``."""
    return ", ".join(f"{k}={v!r}" for k, v in params.items())

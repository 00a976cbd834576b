"""Choosing ``"auto"`` settings of the closed forms from sufficient statistics.

Every fold's map is solved from the statistics of the rows outside it (the whole set's
minus the fold's, Chan's merge run backwards), so scoring a candidate costs small solves,
not refits:

- :func:`choose_procrustes_setting` works on the :class:`~.moments.PairMoments` of the one
  pass that the Procrustes fit makes anyway (a candidate costs one small SVD), so the
  default fit stays near the GEMM + SVD floor;
- :func:`choose_from_moments` serves the other closed forms (Affine, Whitened) from the
  first and second moments of a sample of at most :data:`SAMPLE_ROWS` rows.

The candidates' maps are only scored, never kept: Procrustes' candidate SVDs run in float32
(a fifth of the float64 time at 512 x 512; the polar factor moves by about 1e-6, which
moves a held-out top-1 only where two targets tie to that precision), and so do the
whitening candidates from :data:`~.holdout.WIDE_SOLVE` columns on; the chosen setting is
then fitted in float64.
"""

from types import SimpleNamespace

import numpy as np
import torch
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from .holdout import (
    LARGE_N,
    WIDE_SOLVE,
    holdout_folds,
    paired_hits,
    params_label,
    pick,
    take_rows,
    top1_of_similarities,
    unit_rows_float32,
)
from .query_policy import query_path_scores


def negligible_offsets(moments, share=0.01):
    """Whether both sides' means are tiny beside their spread (``w |m|^2 < 1 % sq``).

    The uncentred cross product then differs from the centred one by a rank-one term of
    relative size below 1 %, and the mean a centred map adds back is as small beside the
    mapped rows: centring and scale change the cosines by next to nothing, so there is
    nothing to score.
    """
    w = moments.weight
    return bool(
        w * float(moments.mean_x @ moments.mean_x) < share * moments.sq_x
        and w * float(moments.mean_y @ moments.mean_y) < share * moments.sq_y
    )


def constant_side(moments):
    """Whether every column of X, or every column of Y, is constant to rounding.

    The centred sums of squares of constant columns are zero only where the shift and the
    mean were rounded alike; a GPU's reductions leave a few units in the last place of
    float32 (the precision the products run in), so a side counts as constant when its
    spread about the mean is below 8 float32 units of its size.
    """
    bound = (8 * np.finfo(np.float32).eps) ** 2
    w = moments.weight
    return bool(
        moments.sq_x <= bound * (moments.sq_x + w * float(moments.mean_x @ moments.mean_x))
        or moments.sq_y <= bound * (moments.sq_y + w * float(moments.mean_y @ moments.mean_y))
    )


def _row_moments(X, Y, weights=None):
    """The means and centred sums of squares of rows in memory, as the moments hold them."""
    w = np.ones(len(X)) if weights is None else np.asarray(weights, dtype=np.float64)
    weight = float(w.sum())
    mean_x, mean_y = w @ X / weight, w @ Y / weight
    return SimpleNamespace(
        weight=weight,
        mean_x=mean_x,
        mean_y=mean_y,
        sq_x=float(w @ np.einsum("ij,ij->i", X - mean_x, X - mean_x)),
        sq_y=float(w @ np.einsum("ij,ij->i", Y - mean_y, Y - mean_y)),
    )


def negligible_row_offsets(X, Y, weights=None):
    """:func:`negligible_offsets` of rows in memory (float64 numpy, ``weights`` or None)."""
    return negligible_offsets(_row_moments(X, Y, weights))


def constant_row_side(X, Y, weights=None):
    """:func:`constant_side` of rows in memory (float64 numpy, ``weights`` or None)."""
    return constant_side(_row_moments(X, Y, weights))


def _unmerge(total, part):
    """Moments of the rows of ``total`` not in ``part`` (Chan's update run backwards)."""
    from .moments import PairMoments

    rest = total.weight - part.weight
    mean_x = (total.weight * total.mean_x - part.weight * part.mean_x) / rest
    mean_y = (total.weight * total.mean_y - part.weight * part.mean_y) / rest
    factor = rest * part.weight / total.weight
    delta_x, delta_y = part.mean_x - mean_x, part.mean_y - mean_y
    return PairMoments(
        weight=rest,
        mean_x=mean_x,
        mean_y=mean_y,
        cross=total.cross - part.cross - factor * np.outer(delta_x, delta_y),
        sq_x=total.sq_x - part.sq_x - factor * float(delta_x @ delta_x),
        sq_y=total.sq_y - part.sq_y - factor * float(delta_y @ delta_y),
        gram_x=None,
        centered=True,
    )


def uncentred(moments):
    """The uncentred statistics ``sum w x y^T`` of centred ones (exact in float64)."""
    from .moments import PairMoments

    w = moments.weight
    return PairMoments(
        weight=w,
        mean_x=moments.mean_x,
        mean_y=moments.mean_y,
        cross=moments.cross + w * np.outer(moments.mean_x, moments.mean_y),
        sq_x=moments.sq_x + w * float(moments.mean_x @ moments.mean_x),
        sq_y=moments.sq_y + w * float(moments.mean_y @ moments.mean_y),
        gram_x=None,
        centered=False,
    )


def _fold_moments(X_fold, Y_fold, w_fold):
    from .moments import PairMoments

    w = np.ones(len(X_fold)) if w_fold is None else np.asarray(w_fold, dtype=np.float64)
    weight = float(w.sum())
    mean_x, mean_y = w @ X_fold / weight, w @ Y_fold / weight
    Xc, Yc = X_fold - mean_x, Y_fold - mean_y
    return PairMoments(
        weight=weight,
        mean_x=mean_x,
        mean_y=mean_y,
        cross=(Xc * w[:, None]).T @ Yc,
        sq_x=float(w @ (Xc * Xc).sum(axis=1)),
        sq_y=float(w @ (Yc * Yc).sum(axis=1)),
        gram_x=None,
        centered=True,
    )


def choose_procrustes_setting(estimator, moments, X, Y, sample_weight, candidates, solve):
    """Choose among Procrustes settings from the centred statistics of all rows.

    Parameters
    ----------
    estimator : OrthogonalProcrustesAligner
        Its ``random_state`` picks the held-out rows; its name goes into messages.
    moments : PairMoments
        Centred statistics (means, cross, ``sq_x``, ``sq_y``) of all training rows.
    X, Y, sample_weight :
        The training input as given to ``fit`` (held-out rows are read from it).
    candidates : list of (center, scale)
        In order of preference.
    solve : callable
        ``solve(moments, center, cache, dtype) -> (W, scale_of)``: the orthogonal factor
        and a function of the ``scale`` setting giving the scale factor; ``cache`` (a dict
        per set of statistics) keeps one SVD per centring; ``dtype`` the precision of the
        SVD: float32, as the candidates' maps are only scored (a float32 SVD of 512 x 512
        takes a fifth of a float64 one, and its polar factor differs by about 1e-6; the
        chosen setting is then fitted in float64).

    Returns
    -------
    choice : (center, scale) or None
        None when the data could not decide.
    scores : dict
        Each candidate's mean held-out top-1, keyed by ``"center=..., scale=..."``.
    query_scores : dict or None
        :func:`query_path_scores` of the chosen setting, averaged over the folds.

    From 25,000 rows on the candidates are solved from the statistics of all rows (the
    held-out fold is then at most 4 % of them): no fold statistics to subtract.
    """
    width = min(moments.cross.shape)
    folds = holdout_folds(int(np.shape(X)[0]), getattr(estimator, "random_state", None), width)
    if folds is None:
        return None, {}, None
    whole = len(folds) == 1 and np.shape(X)[0] >= LARGE_N
    scores = {candidate: [] for candidate in candidates}
    seen = []  # per fold and centring: what the query path's scores need
    for rows in folds:
        X_fold, Y_fold = take_rows(X, rows), take_rows(Y, rows)
        w_fold = None if sample_weight is None else np.asarray(sample_weight)[rows]
        rest = moments if whole else _unmerge(moments, _fold_moments(X_fold, Y_fold, w_fold))
        forms = {True: rest, False: uncentred(rest)}
        cache = {}
        Y_unit = unit_rows_float32(Y_fold)
        for center in dict.fromkeys(c for c, _ in candidates):
            # x -> s (x - m_x) W + m_y: one GEMM per centring serves every scale, as
            # s (P Y^T) + m_y Y^T, P the mapped deviations.
            W, scale_of = solve(forms[center], center, cache, np.float32)
            shift = forms[center].mean_x if center else 0.0
            deviations = torch.from_numpy((X_fold - shift).astype(np.float32))
            W32 = torch.from_numpy(W.astype(np.float32))
            projected = (deviations @ W32).numpy()
            mapped = projected @ Y_unit.T
            offset = (forms[center].mean_y @ Y_unit.T).astype(np.float32) if center else 0.0
            for c, scale in candidates:
                if c == center:
                    sims = scale_of(scale) * mapped + offset
                    scores[(center, scale)].append(top1_of_similarities(sims, Y_fold))
            seen.append((center, projected, scale_of, forms[center].mean_y, Y_fold))
    chosen = pick(scores)
    query = [
        query_path_scores(
            scale_of(chosen[1]) * projected + (mean_y if center else 0.0),
            Y_fold,
            center=mean_y if center else None,
        )
        for center, projected, scale_of, mean_y, Y_fold in seen
        if center == chosen[0]
    ]
    query = {key: float(np.mean([q[key] for q in query])) for key in query[0]} if query else None
    return chosen, {label(c): float(np.mean(s)) for c, s in scores.items()}, query


def label(candidate):
    center, scale = candidate
    return f"center={center}, scale={scale!r}"


#: Rows from which the moment-based choosers (Affine, Whitened) decide: a larger training
#: set is sampled (evenly spaced rows, or seeded by ``random_state``) for the decision only.
SAMPLE_ROWS = 20000


def _sample_rows(n_rows, random_state):
    if n_rows <= SAMPLE_ROWS:
        return np.arange(n_rows)
    if random_state is None:
        return np.linspace(0, n_rows - 1, SAMPLE_ROWS).round().astype(np.int64)
    return np.sort(check_random_state(random_state).permutation(n_rows)[:SAMPLE_ROWS])


def _stats(X, Y, w):
    """Centred first and second moments (with both Gram matrices), float64 numpy."""
    unweighted = w is None
    w = np.ones(len(X)) if w is None else w
    weight = float(w.sum())
    mean_x, mean_y = w @ X / weight, w @ Y / weight
    Xc, Yc = X - mean_x, Y - mean_y
    # Unweighted, A.T @ A of one array: numpy computes half of it (a symmetric rank-k
    # update), half the work of the general product.
    Xw = Xc if unweighted else Xc * w[:, None]
    return {
        "weight": weight,
        "mean_x": mean_x,
        "mean_y": mean_y,
        "cross": Xw.T @ Yc,
        "gram_x": Xw.T @ Xc,
        "gram_y": (Yc if unweighted else Yc * w[:, None]).T @ Yc,
    }


def _stats_without(total, part):
    """Statistics of the rows of ``total`` not in ``part`` (Chan's merge run backwards)."""
    rest = total["weight"] - part["weight"]
    mean_x = (total["weight"] * total["mean_x"] - part["weight"] * part["mean_x"]) / rest
    mean_y = (total["weight"] * total["mean_y"] - part["weight"] * part["mean_y"]) / rest
    factor = rest * part["weight"] / total["weight"]
    dx, dy = part["mean_x"] - mean_x, part["mean_y"] - mean_y
    return {
        "weight": rest,
        "mean_x": mean_x,
        "mean_y": mean_y,
        "cross": total["cross"] - part["cross"] - factor * np.outer(dx, dy),
        "gram_x": total["gram_x"] - part["gram_x"] - factor * np.outer(dx, dx),
        "gram_y": total["gram_y"] - part["gram_y"] - factor * np.outer(dy, dy),
    }


def uncentred_stats(stats):
    """``sum w x y^T`` and the raw Gram matrices from centred statistics (exact)."""
    w, mean_x, mean_y = stats["weight"], stats["mean_x"], stats["mean_y"]
    return dict(
        stats,
        cross=stats["cross"] + w * np.outer(mean_x, mean_y),
        gram_x=stats["gram_x"] + w * np.outer(mean_x, mean_x),
        gram_y=stats["gram_y"] + w * np.outer(mean_y, mean_y),
    )


def choose_from_moments(
    estimator, X, Y, sample_weight, options, *, prepare, solve, statistics=None, hits=None
):
    """Choose among closed-form settings by k-fold held-out top-1 from moments.

    Every fold's map is solved from the statistics of the other rows (the whole set's
    minus the fold's), so five folds cost five small solves per candidate, not refits.

    Parameters
    ----------
    options : list of dict
        Candidate settings, preferred first.
    prepare : callable
        ``prepare(option)`` -> (key, function applied to the raw rows before the map),
        e.g. ``("unit", unit_rows)``; statistics are computed once per key.
    solve : callable
        ``solve(stats, option)`` -> ``(A, b)``, the affine map of the prepared rows, from
        centred statistics (``uncentred_stats`` gives the raw ones).
    statistics : dict, default=None
        Filled with ``{key: centred statistics of all rows}`` when the decision read every
        row (no larger than :data:`SAMPLE_ROWS`): the final fit need not read them again.
    hits : dict, default=None
        Filled with ``{label: per-row outcomes over every fold}`` (booleans, the folds'
        rows in order), from which :mod:`.step_choice` reads paired standard errors.

    Returns
    -------
    dict or None, scores
        None when the data are too few for a held-out fold.
    """
    random_state = getattr(estimator, "random_state", None)
    sample = _sample_rows(int(np.shape(X)[0]), random_state)
    X_s, Y_s = take_rows(X, sample), take_rows(Y, sample)
    w_s = None if sample_weight is None else np.asarray(sample_weight, np.float64)[sample]
    folds = holdout_folds(len(sample), random_state, min(X_s.shape[1], Y_s.shape[1]))
    if folds is None:
        return None, {}
    prepared, scores = {}, {}
    # Many small (d x d) eigen- and singular-value problems: one BLAS thread each runs them
    # fastest, and avoids the spin-waits of threaded LAPACK on a busy machine.  From
    # WIDE_SOLVE columns on the problems are large and one fold has few: threads pay.
    small = min(X_s.shape[1], Y_s.shape[1]) < WIDE_SOLVE
    with threadpool_limits(limits=1 if small else None, user_api="blas"):
        for option in options:
            outcomes = _score_option(
                option, prepare, solve, prepared, scores, X_s, Y_s, w_s, folds
            )
            if hits is not None:
                hits[params_label(option)] = outcomes
    if statistics is not None and len(sample) == int(np.shape(X)[0]):
        statistics.update({key: stats for key, (_, _, stats) in prepared.items()})
    by_label = dict(zip(scores, options, strict=True))
    return by_label[pick(scores)], {k: float(np.mean(v)) for k, v in scores.items()}


def _score_option(option, prepare, solve, prepared, scores, X_s, Y_s, w_s, folds):
    """Held-out top-1 of one candidate per fold (into ``scores``); returns its per-row
    outcomes over the folds."""
    key, function = prepare(option)
    if key not in prepared:
        X_p, Y_p = function(X_s), function(Y_s)
        prepared[key] = (X_p, Y_p, _stats(X_p, Y_p, w_s))
    X_p, Y_p, total = prepared[key]
    label = params_label(option)
    scores[label] = []
    outcomes = []
    for rows in folds:
        w_fold = None if w_s is None else w_s[rows]
        rest = _stats_without(total, _stats(X_p[rows], Y_p[rows], w_fold))
        A, b = solve(rest, option)
        outcomes.append(paired_hits(X_p[rows] @ A + b, Y_s[rows]))
        scores[label].append(float(np.mean(outcomes[-1])))
    return np.concatenate(outcomes)

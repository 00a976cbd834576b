"""Settings chosen from the training pairs at ``fit`` (``center="auto"`` and friends).

No fixed centring or scale is right for every pair of models: centring rescues anisotropic
models and costs on ordinary ones (the user guide's :ref:`centring` shows both).  So the
``"auto"`` settings are decided by what the user will measure: a slice
of the training rows is held out, each candidate setting is fitted on the other rows and
scored by paired top-1 cosine retrieval on the held-out rows (the aligners' ``score``);
the best one is refitted on all rows.  Ties go to the candidate listed first.

Two paths share the slicing and the scoring:

- :func:`choose_procrustes_setting` works on the sufficient statistics of the one pass
  that the fit makes anyway (a candidate costs one small SVD), so the default Procrustes
  fit stays near the GEMM + SVD floor;
- :func:`choose_by_refit` clones the estimator with each candidate's explicit parameters
  and fits it on the kept rows (the other closed forms and the trained aligners).

When the data cannot decide (fewer than :data:`MIN_ROWS` rows, or a held-out slice on
which every candidate scores the same), the documented fallback of each estimator is used
and :class:`AutoSettingWarning` says so, once per fit.

The candidates' maps are only scored, never kept: Procrustes' candidate SVDs run in float32
(a fifth of the float64 time at 512 x 512; the polar factor moves by about 1e-6, which
moves a held-out top-1 only where two targets tie to that precision), and so do the
whitening candidates from :data:`WIDE_SOLVE` columns on; the chosen setting is then fitted
in float64.  Width also sets the number of folds (:func:`holdout_folds`).
"""

import warnings
from types import SimpleNamespace

import numpy as np
import torch
from sklearn.base import clone
from sklearn.utils import _safe_indexing, check_random_state
from sklearn.utils.validation import _check_sample_weight
from threadpoolctl import threadpool_limits

from ..exceptions import AutoSettingWarning
from .backend import is_dask_collection

__all__ = [
    "AutoSettingWarning",
    "MIN_ROWS",
    "choose_by_refit",
    "choose_procrustes_setting",
    "holdout_folds",
    "resolve",
    "resolve_by_refit",
]

#: Fewest training rows from which ``"auto"`` is decided (a held-out slice of 20).
MIN_ROWS = 100
#: Held-out top-1 by which a trained aligner's candidate must beat the first-listed
#: setting to replace it: a 1 % difference on a slice of at most 1,000 rows is within what
#: the candidates' short training and the slice's draw move (RCSLS on MNIST cnn -> mlp:
#: centred won one seeded slice by 0.005 and lost three by 0.006-0.016).
TRAINED_MARGIN = 0.01
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


def resolve(value, fitted_name, estimator, default):
    """The setting in force: the fitted choice for ``"auto"``, else the parameter."""
    if isinstance(value, str) and value == "auto":
        return getattr(estimator, fitted_name, default)
    return value


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


def sampled_chooser(chooser, sample):
    """``chooser`` (``(options, X, Y, sample_weight)`` of validated input) run on the
    rows ``sample`` only (float64 numpy)."""

    def choose(options, X, Y, sample_weight):
        weights = None if sample_weight is None else np.asarray(sample_weight)[sample]
        return chooser(options, take_rows(X, sample), take_rows(Y, sample), weights)

    return choose


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


def unit_rows(rows):
    """Rows scaled to unit length in float64, returned in float32 (zero rows stay zero)."""
    rows = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def top1_of_similarities(sims):
    """Share of rows of a square similarity matrix whose diagonal entry is the row's
    strict maximum (ties count against the row, as in the aligners' ``score``).  A query's
    own normalisation does not change its row's order, so ``sims`` may use raw queries."""
    own = np.diagonal(sims).copy()
    sims = sims.copy()
    np.fill_diagonal(sims, -np.inf)
    return float(np.mean(sims.max(axis=1) < own))


def paired_top1(Z, Y):
    """Paired top-1 cosine retrieval of ``Z`` against ``Y`` (the aligners' ``score``) on a
    held-out fold of at most 1,000 rows: one float32 GEMM in numpy."""
    return top1_of_similarities(unit_rows(Z) @ unit_rows(Y).T)


def pick(scores, margin=0.0):
    """The key with the best mean score; the first listed wins ties, and keeps its place
    unless another beats it by more than ``margin``."""
    labels = list(scores)
    means = [float(np.mean(scores[label])) for label in labels]
    best = int(np.argmax(means))
    return labels[best] if means[best] > means[0] + margin else labels[0]


def warn_undecided(estimator_name, why, fallback):
    warnings.warn(
        f"{estimator_name}: 'auto' could not choose from the data ({why}); using "
        f"{fallback}. Set the parameter explicitly to silence this.",
        AutoSettingWarning,
        stacklevel=4,
    )


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


def negligible_row_offsets(X, Y, weights=None):
    """:func:`negligible_offsets` of rows in memory (float64 numpy, ``weights`` or None)."""
    w = np.ones(len(X)) if weights is None else np.asarray(weights, dtype=np.float64)
    weight = float(w.sum())
    mean_x, mean_y = w @ X / weight, w @ Y / weight
    return negligible_offsets(
        SimpleNamespace(
            weight=weight,
            mean_x=mean_x,
            mean_y=mean_y,
            # Centred sums of squares, as the moments hold them.
            sq_x=float(w @ np.einsum("ij,ij->i", X, X)) - weight * float(mean_x @ mean_x),
            sq_y=float(w @ np.einsum("ij,ij->i", Y, Y)) - weight * float(mean_y @ mean_y),
        )
    )


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
        Y_unit = unit_rows(Y_fold)
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
                    scores[(center, scale)].append(top1_of_similarities(sims))
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


def query_path_scores(mapped, targets, *, center=None, unit_first=False, k=None):
    """Paired top-1 of a held-out fold ranked as :class:`~sklearn_compat.neighbors.
    AlignedNeighbors` would rank it, in each comparison form it can use.

    The fold's target rows stand in for the gallery.  ``"raw"``: the cosine of the mapped
    rows to the raw target rows (what ``transform`` is scored by); ``"centered"`` (only
    with ``center``, the map's target mean): both sides shifted by it first, after
    scaling to unit length where the map works on unit rows (``unit_first``); each with
    ``"+csls"``: ranked by ``2 cos - r(g)``, ``r(g)`` the mean cosine of target ``g`` to its
    ``k`` nearest other targets (CSLS, Conneau et al. 2018, with the gallery itself as the
    reference, as the query path without ``queries``).

    Returns
    -------
    dict
        ``{form: top-1}``; the CSLS forms are left out when the fold has ``k`` rows or
        fewer.
    """
    k = QUERY_CSLS_K if k is None else k
    mapped = np.asarray(mapped, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    forms = {"raw": (mapped, targets)}
    if center is not None:
        Z, G = (unit_rows(mapped), unit_rows(targets)) if unit_first else (mapped, targets)
        forms["centered"] = (Z - center, G - center)
    out = {}
    for name, (Z, G) in forms.items():
        Z, G = unit_rows(Z), unit_rows(G)
        sims = Z @ G.T
        out[name] = top1_of_similarities(sims)
        if G.shape[0] > k:
            among = G @ G.T
            np.fill_diagonal(among, -np.inf)
            crowding = np.partition(among, -k, axis=1)[:, -k:].mean(axis=1)
            out[name + "+csls"] = top1_of_similarities(2.0 * sims - crowding[None, :])
    return out


#: Held-out top-1 by which another form of the query path must beat the default form
#: (CSLS in the form the map was fitted for) on the fold before the query path uses it.
QUERY_MARGIN = 0.005


def query_evidence(aligner):
    """``(centered, csls)`` that the aligner's held-out fold favours for the query path, or
    None where the aligner measured none (``query_scores_`` absent or None)."""
    scores = getattr(aligner, "query_scores_", None)
    if not isinstance(scores, dict) or not scores:
        return None
    default = "centered+csls" if "centered+csls" in scores else "raw+csls"
    if default not in scores:
        return None
    best = max(scores, key=scores.get)
    if scores[best] <= scores[default] + QUERY_MARGIN:
        best = default
    return best.startswith("centered"), best.endswith("+csls")


def params_label(params):
    """``"name=value, ..."``: how a candidate setting is keyed in ``auto_scores_``."""
    return ", ".join(f"{k}={v!r}" for k, v in params.items())


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
    estimator, X, Y, sample_weight, options, *, prepare, solve, statistics=None
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
            _score_option(option, prepare, solve, prepared, scores, X_s, Y_s, w_s, folds)
    if statistics is not None and len(sample) == int(np.shape(X)[0]):
        statistics.update({key: stats for key, (_, _, stats) in prepared.items()})
    by_label = dict(zip(scores, options, strict=True))
    return by_label[pick(scores)], {k: float(np.mean(v)) for k, v in scores.items()}


def _score_option(option, prepare, solve, prepared, scores, X_s, Y_s, w_s, folds):
    """Mean held-out top-1 of one candidate over the folds (into ``scores``)."""
    key, function = prepare(option)
    if key not in prepared:
        X_p, Y_p = function(X_s), function(Y_s)
        prepared[key] = (X_p, Y_p, _stats(X_p, Y_p, w_s))
    X_p, Y_p, total = prepared[key]
    label = params_label(option)
    scores[label] = []
    for rows in folds:
        w_fold = None if w_s is None else w_s[rows]
        rest = _stats_without(total, _stats(X_p[rows], Y_p[rows], w_fold))
        A, b = solve(rest, option)
        scores[label].append(paired_top1(X_p[rows] @ A + b, Y_s[rows]))


def choose_by_refit(
    estimator,
    X,
    Y,
    grid,
    *,
    sample_weight=None,
    shared_params=None,
    fit_params=None,
    row_params=None,
    margin=0.0,
):
    """Choose among parameter settings by refitting clones on the kept rows.

    Parameters
    ----------
    estimator : aligner
        Cloned for each candidate, with the candidate's parameters set explicitly; its
        ``random_state`` picks the held-out rows (one fold: a refit costs a fit).
    X, Y : the training input
    grid : list of dict
        Candidate parameter settings, in order of preference.
    sample_weight : array-like of shape (n_samples,), default=None
        Passed to the refits (the kept rows' weights).
    shared_params : dict, default=None
        Parameters set on every candidate's clone besides its own (e.g. a shorter
        training for the trained aligners, whose candidates are scored after a fraction
        of the full fit's steps); the label and the returned setting leave them out.
    fit_params : dict, default=None
        More keyword arguments of every candidate's ``fit`` (e.g. unpaired pools).
    row_params : dict, default=None
        Keyword arguments of ``fit`` with one entry per row (e.g. labels): the kept
        rows' entries are passed; None values are left out.
    margin : float, default=0.0
        The first candidate is kept unless another beats its held-out top-1 by more
        than this (the trained aligners: differences within the spread of their own
        training noise are no evidence).

    Returns
    -------
    dict or None, scores
        The chosen setting (None: too few rows), and each candidate's held-out top-1
        keyed by its ``"name=value, ..."`` label.
    """
    n_rows = int(np.shape(X)[0])
    folds = holdout_folds(n_rows, getattr(estimator, "random_state", None))
    if folds is None:
        return None, {}
    rows = folds[0]
    keep = np.setdiff1d(np.arange(n_rows), rows)
    X_keep, Y_keep = take_rows(X, keep), take_rows(Y, keep)
    X_fold, Y_fold = take_rows(X, rows), take_rows(Y, rows)
    if getattr(X, "dtype", None) in (np.float32, torch.float32):
        X_keep, Y_keep = X_keep.astype(np.float32), Y_keep.astype(np.float32)
    fit_params = dict(fit_params or {})
    if sample_weight is not None:
        fit_params["sample_weight"] = np.asarray(sample_weight)[keep]
    for name, values in (row_params or {}).items():
        if values is not None:
            fit_params[name] = np.asarray(values)[keep]
    scores = {}
    for params in grid:
        label = params_label(params)
        model = clone(estimator).set_params(**{**(shared_params or {}), **params})
        with warnings.catch_warnings():
            # The candidates' own advice (e.g. anisotropy warnings) is what is being
            # measured here; the user sees the chosen setting instead.
            warnings.simplefilter("ignore")
            model.fit(X_keep, Y_keep, **fit_params)
        scores[label] = [paired_top1(model.transform(X_fold), Y_fold)]
    by_label = dict(zip(scores, grid, strict=True))
    return by_label[pick(scores, margin)], {k: float(v[0]) for k, v in scores.items()}


def checked_input(estimator, X, Y, sample_weight):
    """``(X, Y, sample_weight)`` validated as ``fit`` will (one-line errors first), so that
    the choice reads clean rows; Dask input is passed through (read lazily by rows)."""
    if is_dask_collection(X, Y, sample_weight):
        from .dask import checked_dask_pair

        return checked_dask_pair(X, Y, sample_weight)
    X, Y = estimator._validate_pair(X, Y, reset=True, keep_tensors=True)
    if sample_weight is not None:
        sample_weight = _check_sample_weight(
            np.asarray(sample_weight), X, dtype=np.float64, ensure_non_negative=True
        )
        if not sample_weight.sum() > 0:
            raise ValueError("sample_weight sums to zero: there is nothing to fit.")
    return X, Y, sample_weight


def resolve_by_refit(estimator, X, Y, names, grid, fallback, *, sample_weight=None, chooser=None):
    """Decide the ``"auto"`` parameters of ``estimator`` and set their fitted attributes.

    Parameters
    ----------
    names : dict
        ``{parameter: fitted attribute}``; an explicit parameter is copied as it is.
    grid : list of dict
        Candidate values of the parameters, preferred first (explicit ones override).
    fallback : dict
        The values used, with an :class:`AutoSettingWarning`, when the data are too few.
    chooser : callable, default=None
        ``chooser(options, X, Y, sample_weight) -> (setting or None, scores)``, given the
        validated input; by default
        :func:`choose_by_refit` (one held-out fold, one refit per candidate).

    Returns
    -------
    dict
        ``{parameter: value in force}``.  ``auto_scores_`` is set to the candidates'
        held-out top-1 (None when nothing was scored).
    """
    auto = [name for name in names if _is_auto(getattr(estimator, name))]
    fixed = {name: getattr(estimator, name) for name in names if name not in auto}
    estimator.auto_scores_ = None
    setting = dict(fixed)
    if auto:
        X, Y, sample_weight = checked_input(estimator, X, Y, sample_weight)
        options = {}
        for values in grid:
            option = {**values, **fixed}
            options.setdefault(tuple(sorted(option.items())), option)
        options = list(options.values())
        setting = options[0]
        if len(options) > 1:
            if chooser is None:
                chosen, scores = choose_by_refit(
                    estimator, X, Y, options, sample_weight=sample_weight
                )
            else:
                chosen, scores = chooser(options, X, Y, sample_weight)
            if chosen is None:
                chosen = {**fallback, **fixed}
                warn_undecided(
                    type(estimator).__name__,
                    f"{int(np.shape(X)[0])} rows, fewer than the {MIN_ROWS} needed for a "
                    "held-out slice",
                    ", ".join(f"{name}={chosen[name]!r}" for name in auto),
                )
            setting, estimator.auto_scores_ = chosen, scores or None
    for name, attribute in names.items():
        setattr(estimator, attribute, setting[name])
    return setting


def _is_auto(value):
    return isinstance(value, str) and value == "auto"


def query_comparison_form(aligner, gallery):
    """How ``AlignedNeighbors`` compares mapped queries with the gallery.

    Returns ``(centered, unit_rows)``.  ``unit_rows``: the aligner maps into the space of
    Y's unit rows (both sides are scaled to unit length first).  ``centered``: both sides
    are shifted by the target mean before the cosine, which is right exactly when the map
    was fitted to centred rows (its queries then sit around Y's mean); the aligner's
    fitted ``center_`` says so where it has one, else its ``center`` or ``fit_intercept``
    parameter.  ``gallery="auto"`` centres only such maps; ``"centered"`` centres every
    map not fitted uncentred (the behaviour before ``"auto"``); ``"raw"`` never centres.
    """
    unit_rows = bool(getattr(aligner, "_maps_unit_rows", lambda: False)())
    if gallery == "raw":
        return False, unit_rows
    fitted = None
    for name in ("center_", "center", "fit_intercept"):
        value = getattr(aligner, name, None)
        if isinstance(value, (bool, np.bool_)):
            fitted = bool(value)
            break
    if gallery == "centered":
        return fitted is not False, unit_rows
    evidence = query_evidence(aligner)
    if evidence is not None:
        # The aligner measured the query path's forms on its held-out fold.
        return evidence[0], unit_rows
    hook = getattr(aligner, "_query_centred", None)
    if hook is not None:
        # The map says how its queries are compared (e.g. one trained for raw cosine).
        return bool(hook()), unit_rows
    return fitted is True, unit_rows


#: CSLS neighbourhood of the query path where the map does not say otherwise.
QUERY_CSLS_K = 10


def query_csls_k(aligner, csls_k):
    """The CSLS neighbourhood ``AlignedNeighbors`` ranks with (None: plain cosine).

    ``"auto"`` gives 10 (CSLS, Conneau et al. 2018), except for maps trained on a
    criterion that already demotes crowding targets (the aligner's ``_query_csls()``
    returns False: RCSLS's loss), on which the gallery's crowding over-corrects; those
    are ranked by the cosine that ``transform`` is trained for.  A number or None is
    kept as it is.
    """
    if not (isinstance(csls_k, str) and csls_k == "auto"):
        return csls_k
    evidence = query_evidence(aligner)
    if evidence is not None:
        return QUERY_CSLS_K if evidence[1] else None
    wants = getattr(aligner, "_query_csls", None)
    return QUERY_CSLS_K if wants is None or wants() else None


#: Fitted attributes that record what an "auto" parameter resolved to.
CHOICE_ATTRIBUTES = ("center_", "scale_mode_", "normalize_", "auto_scores_", "query_scores_")


def fitted_choices(model):
    """``{attribute: value}`` of the settings chosen at fit, as plain builtins."""
    out = {}
    for name in CHOICE_ATTRIBUTES:
        value = getattr(model, name, None)
        if isinstance(value, (bool, np.bool_, str)):
            out[name] = value if isinstance(value, str) else bool(value)
        elif name in ("auto_scores_", "query_scores_") and isinstance(value, dict):
            out[name] = {str(k): round(float(v), 4) for k, v in value.items()}
    return out

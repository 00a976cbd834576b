"""Settings chosen from the training pairs at ``fit`` (``center="auto"`` and friends).

No fixed centring or scale is right for every pair of models (issue 22, measured on real
pairs): centring rescues anisotropic models (e5 -> MiniLM: paired top-1 0.12 uncentred,
0.97 centred) and costs on ordinary ones (WordLlama -> MiniLM: 0.92 uncentred, 0.88
centred).  So the ``"auto"`` settings are decided by what the user will measure: a slice
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
"""

import warnings

import numpy as np
import torch
from sklearn.base import clone
from sklearn.utils import _safe_indexing, check_random_state

from .backend import is_dask_collection

__all__ = [
    "AutoSettingWarning",
    "MIN_ROWS",
    "choose_by_refit",
    "choose_procrustes_setting",
    "holdout_folds",
    "resolve",
]

#: Fewest training rows from which ``"auto"`` is decided (a held-out slice of 20).
MIN_ROWS = 100
#: Rows of one held-out fold at most (its paired top-1 is a 1-in-1000 retrieval task).
FOLD_ROWS = 1000
#: Rows scored in all at most: up to 5 folds on small data, 1 fold from 25,000 rows on,
#: where the extra SVDs would cost more than the fit.
MAX_SCORED_ROWS = 5000
LARGE_N = 25000


class AutoSettingWarning(UserWarning):
    """``"auto"`` could not decide from the data and used the documented fallback."""


def resolve(value, fitted_name, estimator, default):
    """The setting in force: the fitted choice for ``"auto"``, else the parameter."""
    if isinstance(value, str) and value == "auto":
        return getattr(estimator, fitted_name, default)
    return value


def holdout_folds(n_rows, random_state):
    """Held-out folds of row indices (list of sorted int arrays), or None when too few.

    Each fold has ``min(1000, n_rows // 5)`` rows; up to 5 folds (all rows scored) below
    25,000 rows, one above.  ``random_state=None`` takes evenly spaced rows (every fold a
    stride through the data, so sorted input is sampled evenly and the choice is
    reproducible); an int or a RandomState takes a seeded random permutation.
    """
    if n_rows < MIN_ROWS:
        return None
    size = min(FOLD_ROWS, n_rows // 5)
    n_folds = 1 if n_rows >= LARGE_N else max(1, min(5, MAX_SCORED_ROWS // size))
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


def pick(scores):
    """The key with the best mean score; the first listed wins ties."""
    labels = list(scores)
    means = [float(np.mean(scores[label])) for label in labels]
    return labels[int(np.argmax(means))]


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
        ``solve(moments, center, cache) -> (W, scale_of)``: the orthogonal factor and a
        function of the ``scale`` setting giving the scale factor; ``cache`` (a dict per
        set of statistics) keeps one SVD per centring.

    Returns
    -------
    choice : (center, scale) or None
        None when the data could not decide.
    scores : dict
        Each candidate's mean held-out top-1, keyed by ``"center=..., scale=..."``.
    cache : dict
        The SVDs of the statistics of all rows, when the candidates were solved from
        them (from 25,000 rows on: the held-out fold is then at most 4 % of the rows, and
        the chosen map's SVD is not computed twice), else empty.
    """
    folds = holdout_folds(int(np.shape(X)[0]), getattr(estimator, "random_state", None))
    if folds is None:
        return None, {}, {}
    whole = len(folds) == 1 and np.shape(X)[0] >= LARGE_N
    shared = {}
    scores = {candidate: [] for candidate in candidates}
    for rows in folds:
        X_fold, Y_fold = take_rows(X, rows), take_rows(Y, rows)
        w_fold = None if sample_weight is None else np.asarray(sample_weight)[rows]
        rest = moments if whole else _unmerge(moments, _fold_moments(X_fold, Y_fold, w_fold))
        forms = {True: rest, False: uncentred(rest)}
        cache = shared if whole else {}
        Y_unit = unit_rows(Y_fold)
        for center in dict.fromkeys(c for c, _ in candidates):
            # x -> s (x - m_x) W + m_y: one GEMM per centring serves every scale, as
            # s (P Y^T) + m_y Y^T, P the mapped deviations.
            W, scale_of = solve(forms[center], center, cache)
            shift = forms[center].mean_x if center else 0.0
            deviations = torch.from_numpy((X_fold - shift).astype(np.float32))
            W32 = torch.from_numpy(W.astype(np.float32))
            mapped = ((deviations @ W32) @ torch.from_numpy(Y_unit).T).numpy()
            offset = (forms[center].mean_y @ Y_unit.T).astype(np.float32) if center else 0.0
            for c, scale in candidates:
                if c == center:
                    sims = scale_of(scale) * mapped + offset
                    scores[(center, scale)].append(top1_of_similarities(sims))
    chosen = pick(scores)
    return chosen, {_label(c): float(np.mean(s)) for c, s in scores.items()}, shared


def _label(candidate):
    center, scale = candidate
    return f"center={center}, scale={scale!r}"


def choose_by_refit(estimator, X, Y, grid, *, random_state=None, fit_params=None):
    """Choose among parameter settings by refitting clones on the kept rows.

    Parameters
    ----------
    estimator : aligner
        Cloned for each candidate, with the candidate's parameters set explicitly.
    X, Y : the training input
    grid : list of dict
        Candidate parameter settings, in order of preference.
    random_state : see :func:`holdout_folds`; one fold is used (a refit costs a fit).

    Returns
    -------
    dict or None, scores
        The chosen setting (None: too few rows), and each candidate's held-out top-1
        keyed by its ``"name=value, ..."`` label.
    """
    n_rows = int(np.shape(X)[0])
    folds = holdout_folds(n_rows, random_state)
    if folds is None:
        return None, {}
    rows = folds[0]
    keep = np.setdiff1d(np.arange(n_rows), rows)
    X_keep, Y_keep = take_rows(X, keep), take_rows(Y, keep)
    X_fold, Y_fold = take_rows(X, rows), take_rows(Y, rows)
    if isinstance(X, np.ndarray) and X.dtype == np.float32:
        X_keep, Y_keep = X_keep.astype(np.float32), Y_keep.astype(np.float32)
    scores = {}
    for params in grid:
        label = ", ".join(f"{k}={v!r}" for k, v in params.items())
        model = clone(estimator).set_params(**params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X_keep, Y_keep, **(fit_params or {}))
        scores[label] = [paired_top1(model.transform(X_fold), Y_fold)]
    chosen = pick(scores)
    by_label = dict(zip(scores, grid, strict=True))
    return by_label[chosen], {
        k: float(v[0]) for k, v in scores.items()
    }

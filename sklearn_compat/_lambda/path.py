"""The lam path: one training set, many ``lam`` values, each warm-started from the last."""

import copy
import math
import time
import warnings
from numbers import Integral, Real

import numpy as np
from scipy.special import expit
from sklearn.base import clone
from sklearn.exceptions import FitFailedWarning
from sklearn.utils import Bunch, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions

from .._core.backend import resolve_device
from .fitting import (
    FittedMap,
    StartMap,
    encode_fit_labels,
    fitted_intercept,
    is_small_problem,
    prepare_fit_data,
    store_fit,
    train_map,
)
from .losses import orthogonality_gap
from .training import small_problem_threads

__all__ = ["walk_lams"]


# The walking options, validated the same way here and in LambdaOrthAlignerCV.
PATH_CONSTRAINTS = {
    "direction": [StrOptions({"increasing", "decreasing"})],
    "warm_n_iter_no_change": [
        Interval(Integral, 1, None, closed="left"),
        StrOptions({"auto"}),
    ],
    "warm_tol": [Interval(Real, 0, 1, closed="left")],
    "stop_at_bound": ["boolean"],
}

# With ``stop_at_bound``: every fit reads its held-out loss this many times per epoch, and
# a fit whose orthogonality constraint binds stops after this many readings (half an
# epoch) without improvement.  Measured on a real text pair (256-d -> 384-d, 2,400 rows
# per fold): a warm fit at a binding lam has its best held-out loss within its first
# epoch and then only moves with the minibatch noise (see the benchmarks page).
READINGS_PER_EPOCH = 4
BOUND_PATIENCE = 2


def walk_lams(
    estimator,
    X,
    Y,
    lams,
    *,
    labels,
    direction,
    warm_n_iter_no_change,
    warm_tol,
    stop_at_bound,
    secant,
    coef_init,
    error_score,
    verbose,
):
    """:func:`~sklearn_compat.lambda_orth_cv.lambda_orth_path` for a checked
    ``LambdaOrthAligner`` (never modified): prepare the rows once, walk the grid."""
    settings = clone(estimator)  # a RandomState instance is copied, not consumed
    settings._validate_params()  # a bool given for a number is refused too
    # fit_intercept="auto" is decided once on these rows, as the estimator's fit would.
    settings._resolve_intercept(X, Y, labels)
    X, Y = settings._validate_pair(X, Y, reset=True)
    lams = check_lams(lams)
    codes = encode_fit_labels(labels, X.shape[0])
    order = np.argsort(-lams if direction == "decreasing" else lams, kind="stable")
    bound_stops = stop_at_bound and direction == "increasing"
    patience = warm_patience(warm_n_iter_no_change, settings.n_iter_no_change, bound_stops)
    # Only walking upwards: each fit then starts inside its constraint and the data pull W
    # out onto the wall, where it stays.  Walking downwards the wall pushes W inwards, and
    # that contraction goes on under the minibatch noise (measured: stopped early, it
    # leaves the smallest lams' maps short of orthogonal).
    readings = READINGS_PER_EPOCH if bound_stops else 1
    d_x, d_y = X.shape[1], Y.shape[1]
    with small_problem_threads(
        is_small_problem(settings, resolve_device(settings.device), d_x, d_y)
    ):
        return _walk(
            settings,
            X,
            Y,
            codes,
            lams,
            order,
            patience,
            extrapolate=secant and direction == "increasing",
            warm_tol=warm_tol,
            readings=readings,
            coef_init=_as_start(coef_init),
            error_score=error_score,
            verbose=verbose,
        )


def check_lams(lams):
    """``lams`` as a float64 grid: non-empty, 1-d, distinct, in [0, inf]."""
    if any(isinstance(v, bool | np.bool_) for v in np.asarray(lams, dtype=object).flat):
        raise TypeError(f"lams must be numbers, not booleans: got {lams!r}.")
    try:
        grid = np.asarray(lams, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"lams must be an array of numbers, got {lams!r}.") from None
    if grid.ndim != 1 or grid.size == 0:
        raise ValueError(f"lams must be a non-empty 1-d list of numbers, got {lams!r}.")
    if np.any(np.isnan(grid)) or np.any(grid < 0):
        raise ValueError(f"lams must lie in [0, inf], got {lams!r}.")
    if np.unique(grid).size != grid.size:
        raise ValueError(f"lams has repeated values: {lams!r}.")
    return grid


def warm_patience(warm_n_iter_no_change, n_iter_no_change, bound_stops=False):
    """The warm fits' patience: "auto" is half the cold one, rounded up (at least 1), or
    2 where fits stop at the bound (``bound_stops``): a fit off its wall then carries on
    at the next lam, so waiting out a long patience mostly repeats work."""
    if warm_n_iter_no_change == "auto":
        return min(2, n_iter_no_change) if bound_stops else math.ceil(n_iter_no_change / 2)
    return int(warm_n_iter_no_change)


def _as_start(coef_init):
    if coef_init is None or isinstance(coef_init, StartMap):
        return coef_init
    if len(coef_init) not in (2, 3):
        raise ValueError(
            "coef_init must be (W, bias) or (W, bias, (V, c)), got a tuple of "
            f"{len(coef_init)} items."
        )
    W, bias, *forward = coef_init
    forward = tuple(np.asarray(a, dtype=np.float64) for a in forward[0]) if forward else None
    return StartMap(np.asarray(W, dtype=np.float64), np.asarray(bias, dtype=np.float64), forward)


def _walk(
    settings,
    X,
    Y,
    codes,
    lams,
    order,
    patience,
    *,
    extrapolate,
    coef_init,
    error_score,
    verbose,
    warm_tol,
    readings,
):
    """Train ``lams[order]`` in turn on rows prepared once; per-lam results in grid order."""
    n_lams, d_x, d_y = len(lams), X.shape[1], Y.shape[1]
    nan_map = (np.full((d_x, d_y), np.nan), np.full(d_y, np.nan))
    fits = [None] * n_lams  # FittedMap per lam (None: failed)
    reused = np.zeros(n_lams, dtype=bool)
    fit_times = np.zeros(n_lams)
    n_epochs = np.zeros(n_lams, dtype=np.int64)
    errors = [None] * n_lams

    start_clock = time.perf_counter()
    rng = check_random_state(settings.random_state)
    data = prepare_fit_data(settings, X, Y, codes, rng)
    prepare_time = time.perf_counter() - start_clock
    last = None  # index of the fit the next one starts from
    fitted = []  # (lam, FittedMap) of the fits so far along the path
    for i in order:
        lam = float(lams[i])
        if last is not None and _reusable(settings, fits[last], lam):
            fits[i], reused[i] = fits[last], True
            _report(verbose, lam, "reused")
            continue
        if last is None:
            start, fit_patience, rel_tol = coef_init, settings.n_iter_no_change, 0.0
        else:
            start, fit_patience = _path_start(fitted, lam, extrapolate), patience
            rel_tol = warm_tol
        clock = time.perf_counter()
        try:
            # A copy of the generator as it stands after the split: every lam draws the
            # minibatch orders a cold fit would.
            fit = train_map(
                settings,
                data,
                copy.deepcopy(rng),
                lam=lam,
                n_iter_no_change=fit_patience,
                start=start,
                rel_tol=rel_tol,
                readings_per_epoch=readings,
                bound_patience=BOUND_PATIENCE if readings > 1 else None,
            )
        except FloatingPointError as exc:
            if error_score == "raise":
                raise
            # As GridSearchCV's error_score: the path goes on from the last good map.
            errors[i] = str(exc)
            fit_times[i] = time.perf_counter() - clock
            warnings.warn(
                f"The fit at lam={lam:g} failed; it scores {error_score} and the path goes "
                f"on from the last good map: {exc}",
                FitFailedWarning,
                stacklevel=3,
            )
            continue
        fit_times[i] = time.perf_counter() - clock + prepare_time
        prepare_time = 0.0  # charged to the first fit
        fits[i], n_epochs[i], last = fit, fit.n_epochs, i
        fitted.append((lam, fit))
        _report(verbose, lam, f"{fit.n_epochs} epochs, gap {fit.orthogonality_gap:.3g}")

    def stack(get, fallback):
        return np.stack([fallback if fit is None else get(fit) for fit in fits])

    bidirectional = any(fit is not None and fit.forward is not None for fit in fits)
    nan_forward = (np.full((d_y, d_y), np.nan), np.full(d_y, np.nan))
    return Bunch(
        lams=lams,
        coefs=stack(lambda f: f.W, nan_map[0]),
        intercepts=stack(lambda f: f.bias, nan_map[1]),
        forward_coefs=stack(lambda f: f.forward[0], nan_forward[0]) if bidirectional else None,
        forward_intercepts=(
            stack(lambda f: f.forward[1], nan_forward[1]) if bidirectional else None
        ),
        orthogonality_gaps=np.array(
            [np.nan if fit is None else fit.orthogonality_gap for fit in fits]
        ),
        n_epochs=n_epochs,
        best_epochs=[None if fit is None else fit.best_epoch for fit in fits],
        histories=[None if fit is None else fit.history for fit in fits],
        reused=reused,
        fit_times=fit_times,
        errors=errors,
        x_scale=data.x_scale,
        y_scale=data.y_scale,
        center=fitted_intercept(settings),
        auto_scores=getattr(settings, "auto_scores_", None),
    )


def aligner_at(path, index, estimator):
    """A fitted clone of ``estimator`` holding the path's map at ``lams[index]``.

    The estimator's fitted attributes (``W_``, ``bias_``, ``orthogonality_gap_``,
    ``history_``, ...) are those a fit at that ``lam`` on the path's rows would set; the
    map must not be a failed one.
    """
    forward = None
    if path.forward_coefs is not None:
        forward = (path.forward_coefs[index], path.forward_intercepts[index])
    lam = float(path.lams[index])
    fitted = FittedMap(
        W=path.coefs[index],
        bias=path.intercepts[index],
        forward=forward,
        lam=lam,
        x_scale=path.x_scale,
        y_scale=path.y_scale,
        orthogonality_gap=float(path.orthogonality_gaps[index]),
        history=path.histories[index],
        n_epochs=int(path.n_epochs[index]),
        best_epoch=path.best_epochs[index],
    )
    aligner = clone(estimator).set_params(lam=lam)
    aligner.n_features_in_ = path.coefs.shape[1]
    aligner.center_, aligner.auto_scores_ = path.center, path.auto_scores
    return store_fit(aligner, fitted)


def _report(verbose, lam, how):
    if verbose:
        print(f"[lambda_orth_path] lam={lam:g}: {how}")


def _reusable(settings, fit, lam):
    """Whether ``fit`` (of an earlier lam) is also a fit for ``lam``."""
    gap, sharpness, tol = fit.orthogonality_gap, settings.sharpness, settings.tol
    if settings.strict:
        return True  # lam is unused
    # The penalty sigmoid(s (N - lam)) N and its slope (at most about s times the value)
    # must both be negligible against the smallest loss change early stopping counts.
    return all(
        math.isinf(value) or expit(sharpness * (gap - value)) * gap * max(1.0, sharpness) <= tol
        for value in (fit.lam, lam)
    )


def _path_start(fitted, lam, extrapolate):
    """Where the fit of ``lam`` starts: the last fit's map, moved on along the path.

    Walking upwards, ``W`` travels along a smooth curve from the orthogonal map towards
    the unregularised one, and each fit stops a little short of where its ``lam`` would
    let it go.  The secant through the last two fits predicts the next point:
    ``W_k + beta (W_k - W_{k-1})`` with ``beta`` the ratio of the coming step in ``lam``
    to the last one, at most 1, halved until the start lies inside the new constraint
    (``N <= lam - 1``, where the fitted ``N`` settles with the default sharpness) or no
    further from orthogonality than the last fit.  The forward adapter (``bidirectional``)
    starts where it ended.
    """
    last = fitted[-1][1]
    if not extrapolate or len(fitted) < 2 or last.forward is not None:
        return last.start()
    (lam_before, before), (lam_last, _) = fitted[-2], fitted[-1]
    beta = 1.0 if math.isinf(lam) else min(1.0, (lam - lam_last) / (lam_last - lam_before))
    to_unit = last.x_scale / last.y_scale
    allowed = max(lam - 1.0, last.orthogonality_gap)
    while beta > 1 / 64:
        W = last.W + beta * (last.W - before.W)
        if orthogonality_gap(W * to_unit) <= allowed:
            return StartMap(W, last.bias + beta * (last.bias - before.bias), last.forward)
        beta /= 2
    return last.start()

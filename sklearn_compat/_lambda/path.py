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
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from .._core.backend import resolve_device
from .._core.validation import refuse_bool_numbers

# The estimator module does not import this one (no circle): the path is public through
# sklearn_compat and sklearn_compat.lambda_orth_cv.
from ..lambda_orth import LambdaOrthAligner
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

__all__ = ["lambda_orth_path"]


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
# epoch and then only moves with the minibatch noise (RESULTS.md).
READINGS_PER_EPOCH = 4
BOUND_PATIENCE = 2


@validate_params(
    {
        "X": ["array-like"],
        "Y": ["array-like"],
        "lams": ["array-like"],
        "estimator": "no_validation",
        "labels": ["array-like", None],
        **PATH_CONSTRAINTS,
        "secant": ["boolean"],
        "coef_init": [tuple, None],
        "error_score": [StrOptions({"raise"}), Real],
        "verbose": ["verbose"],
    },
    prefer_skip_nested_validation=True,
)
def lambda_orth_path(
    X,
    Y,
    lams,
    *,
    estimator=None,
    labels=None,
    direction="increasing",
    warm_n_iter_no_change="auto",
    warm_tol=0.0,
    stop_at_bound=False,
    secant=True,
    coef_init=None,
    error_score="raise",
    verbose=0,
):
    """Train :class:`~sklearn_compat.LambdaOrthAligner` maps along a grid of ``lam``.

    The rows are prepared once (validated, split for early stopping, rescaled, moved to
    the device) and the ``lam`` values are trained in turn, in increasing (or decreasing)
    order, each from the previous one's map with a fresh optimizer: what ``enet_path`` is
    to ``Lasso``.  The first ``lam`` is a cold fit, identical to
    ``LambdaOrthAligner(lam=lams[first]).fit(X, Y)`` (unless ``stop_at_bound``); every
    ``lam`` draws the same
    minibatch orders as that cold fit would.  :class:`~sklearn_compat.LambdaOrthAlignerCV`
    runs this path on each fold.

    Parameters
    ----------
    X : array-like or torch.Tensor of shape (n_samples, n_features)
        Source embeddings (the new model's).
    Y : array-like or torch.Tensor of shape (n_samples, n_targets)
        Target embeddings of the same items in the same row order (the old model's).
    lams : array-like of float in [0, inf] of shape (n_lams,)
        The grid, in any order (the results keep it); distinct values.
    estimator : LambdaOrthAligner, default=None
        The training settings (every parameter but ``lam``); None is
        ``LambdaOrthAligner()``.  Never modified.  Fix its ``random_state`` for
        repeatable paths.
    labels : array-like of shape (n_samples,), default=None
        Class labels of the rows, for the supervised contrastive term.
    direction : {"increasing", "decreasing"}, default="increasing"
        The order in which the grid is walked.  "increasing" (from orthogonal towards
        the unregularised end) trains fewer epochs: each relaxation lets ``W`` move on
        along the data's own gradient from a map that already has the right shape.
    warm_n_iter_no_change : int or "auto", default="auto"
        Early-stopping patience of every fit but the first (a cold fit with the
        estimator's own ``n_iter_no_change``).  "auto" is half the estimator's value,
        rounded up: the next ``lam`` carries on from where a fit stopped, so waiting
        longer at each step mostly repeats work.
    warm_tol : float in [0, 1), default=0.0
        Relative tolerance of the warm fits' early stopping: an epoch whose monitored loss
        improves on the best by less than ``warm_tol`` times the best (or less than the
        estimator's ``tol``) counts as no improvement.  A warm fit starts next to its
        optimum and mostly gains minibatch noise after a few epochs; on a real text pair
        (256-d -> 384-d) ``3e-3`` ended those fits after 3-6 epochs instead of 9-17.  Where
        the fits travel far (cold fits of a hundred epochs and more), a warm fit stopped
        that early stays short of its ``lam`` and the larger values then reuse it: keep 0
        there.
    stop_at_bound : bool, default=False
        Walking upwards, end a fit as soon as it has settled on its constraint.  Every fit
        (the first included) then reads its held-out loss four times per epoch (the
        history holds one entry per reading); while its map sits on the penalty's wall,
        ``lam - 10 / sharpness <= N <= lam + 5 / sharpness`` (the data pull ``W`` out to
        ``lam`` and the penalty holds it there), two readings without improvement end
        the fit, elsewhere its usual patience does.  The first fit is then no longer the
        cold fit of GridSearchCV.  It pays where fits settle at once and misleads where
        one slides along its wall for long; see
        the Notes (Text pairs) of :class:`~sklearn_compat.LambdaOrthAlignerCV` for both cases
        measured.  Walking downwards it has no effect.
    secant : bool, default=True
        Walking upwards, start each fit (from the third on) at the secant prediction
        through the last two fits, ``W_k + beta (W_k - W_{k-1})`` with ``beta`` the ratio
        of the coming step in ``lam`` to the last one (at most 1), halved until the start
        lies inside the new constraint ``N <= lam - 1`` or no further from orthogonality
        than ``W_k``.  False starts each fit at the previous map.
    coef_init : tuple (W, bias) or (W, bias, (V, c)), default=None
        Start of the first fit in user units (``V, c``: the forward adapter's, with
        ``bidirectional``); None is the estimator's ``init``.
    error_score : "raise" or float, default="raise"
        What a diverging fit (``FloatingPointError``) does: "raise" re-raises it; a number
        (e.g. ``np.nan``) issues a ``FitFailedWarning``, fills that ``lam``'s map and gap
        with NaN and goes on from the last good map, as GridSearchCV's ``error_score``.
    verbose : int, default=0
        Print one line per ``lam`` when > 0.

    Returns
    -------
    path : Bunch
        One entry per ``lam``, in the order of ``lams``:

        - ``lams`` : ndarray of shape (n_lams,), the grid as float64.
        - ``coefs`` : ndarray of shape (n_lams, n_features, n_targets), ``W`` in user
          units (``transform(X) = X @ W + bias``).
        - ``intercepts`` : ndarray of shape (n_lams, n_targets), ``bias``.
        - ``forward_coefs``, ``forward_intercepts`` : the forward adapter's ``(V, c)``
          per ``lam`` (``bidirectional``), else None.
        - ``orthogonality_gaps`` : ndarray of shape (n_lams,), ``N`` of each map in unit
          RMS coordinates (the ``orthogonality_gap_`` a fit would report).
        - ``n_epochs`` : ndarray of int of shape (n_lams,), epochs trained (0 where
          reused or failed).
        - ``best_epochs`` : list, each fit's ``best_epoch_`` (the reused fit's where
          reused; None without held-out early stopping or where failed).
        - ``histories`` : list of dict, each fit's ``history_`` (the reused fit's where
          reused, None where failed).
        - ``reused`` : ndarray of bool of shape (n_lams,), where the previous fit was
          reused without training: the penalty, at its ``W``, is negligible (its value
          times ``sharpness`` below the estimator's ``tol``) both at the previous ``lam``
          and at this one, so the two problems coincide near ``W``.  This covers large
          ``lam`` values (and ``inf``) beyond the gap the data ask for, and every ``lam``
          with ``strict=True``.
        - ``fit_times`` : ndarray of shape (n_lams,), seconds per fit (the preparation is
          charged to the first).
        - ``errors`` : list of str or None, the message of each failed fit.
        - ``center``, ``auto_scores`` : whether the bias is fitted (one choice for the
          whole path: ``fit_intercept="auto"`` reads the rows, not ``lam``) and the
          choice's held-out scores (None unless ``"auto"`` scored them), which the
          fitted clones of :func:`aligner_at` hold as ``center_`` and ``auto_scores_``.
        - ``x_scale``, ``y_scale`` : float, the unit scales of the rows (as the
          estimator's ``x_scale_``, ``y_scale_``).

    See Also
    --------
    LambdaOrthAlignerCV : chooses ``lam`` by cross-validation along this path.
    LambdaOrthAligner : one fit at one ``lam``.

    Notes
    -----
    Ricci et al. (NeurIPS 2025) fit one ``lam`` at a time.  The path is an engineering
    shortcut with the same fixed points: each fit is a full fit of its own ``lam`` (the
    same objective, early stopping and minibatch orders), started closer to its optimum.
    Early stopping ends a warm-started fit at a different point than a cold one, so the
    maps are close to, not equal to, cold fits.  Carrying Adam's moments from one ``lam``
    to the next was measured to train more epochs, so each fit has a fresh optimizer.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat import LambdaOrthAligner
    >>> from sklearn_compat import lambda_orth_path
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 6))
    >>> Y = X @ np.diag([0.5, 0.8, 1.0, 1.0, 1.2, 1.5]) + 0.05 * rng.normal(size=(400, 6))
    >>> path = lambda_orth_path(
    ...     X, Y, [0.0, 1.0, np.inf], estimator=LambdaOrthAligner(max_epochs=30, random_state=0)
    ... )
    >>> path.coefs.shape
    (3, 6, 6)
    >>> bool(path.orthogonality_gaps[0] < 0.3 < path.orthogonality_gaps[2])
    True
    >>> Z = X @ path.coefs[2] + path.intercepts[2]  # the map at lam=inf
    >>> bool(np.mean((Z - Y) ** 2) < np.mean((X @ path.coefs[0] + path.intercepts[0] - Y) ** 2))
    True
    """
    if estimator is None:
        estimator = LambdaOrthAligner()
    elif not isinstance(estimator, LambdaOrthAligner):
        raise TypeError(f"estimator must be a LambdaOrthAligner, got {type(estimator).__name__}.")
    settings = clone(estimator)  # a RandomState instance is copied, not consumed
    settings._validate_params()
    refuse_bool_numbers(settings)
    # fit_intercept="auto" is decided once on these rows, as the estimator's fit would.
    settings._resolve_intercept(X, Y, labels)
    X, Y = settings._validate_pair(X, Y, reset=True)
    lams = check_lams(lams)
    codes = encode_fit_labels(labels, X.shape[0])
    order = np.argsort(-lams if direction == "decreasing" else lams, kind="stable")
    patience = warm_patience(warm_n_iter_no_change, settings.n_iter_no_change)
    # Only walking upwards: each fit then starts inside its constraint and the data pull W
    # out onto the wall, where it stays.  Walking downwards the wall pushes W inwards, and
    # that contraction goes on under the minibatch noise (measured: stopped early, it
    # leaves the smallest lams' maps short of orthogonal).
    readings = READINGS_PER_EPOCH if stop_at_bound and direction == "increasing" else 1
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


def warm_patience(warm_n_iter_no_change, n_iter_no_change):
    """The warm fits' patience: "auto" is half the cold one, rounded up (at least 1)."""
    if warm_n_iter_no_change == "auto":
        return math.ceil(n_iter_no_change / 2)
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

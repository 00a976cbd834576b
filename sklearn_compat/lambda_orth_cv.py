"""Cross-validated choice of ``lam`` for LambdaOrthAligner along a warm-started path.

``LambdaOrthAlignerCV`` is to ``GridSearchCV(LambdaOrthAligner(), {"lam": lams})`` what
``LassoCV`` is to a grid search over ``alpha``: per fold it trains one aligner through the
whole ``lam`` path, each ``lam`` starting from the previous one's weights, then refits on
all rows with the best ``lam``.
"""

import math
import time
from numbers import Real

import numpy as np
from scipy.stats import rankdata
from sklearn.base import _fit_context, clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import check_cv
from sklearn.utils._param_validation import StrOptions, validate_params
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ._core.backend import as_numpy_input
from ._core.base import BaseAligner
from ._core.validation import pick_target, refuse_bool_params
from ._lambda.path import PATH_CONSTRAINTS, aligner_at, check_lams, walk_lams
from .lambda_orth import LambdaOrthAligner
from .metrics import make_retrieval_scorer

__all__ = ["LambdaOrthAlignerCV", "lambda_orth_path"]

# The default grid in units of sqrt(d), d = min(d_x, d_y): ``N / sqrt(d)`` is the RMS
# deviation of the squared singular values of W from 1, so these allow the same relative
# distortion in any dimension.  0.5 is LambdaOrthAligner's "auto" and close to the
# paper's lam = 12 at d = 512 (0.53); 2 is beyond what real feature pairs ask for, and inf
# is the unregularised end.
_DEFAULT_RELATIVE_LAMS = (0.0, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, math.inf)


class LambdaOrthAlignerCV(BaseAligner):
    """LambdaOrthAligner with ``lam`` chosen by cross-validation along a warm-started path.

    For each fold, :func:`~sklearn_compat.lambda_orth_cv.lambda_orth_path` trains a
    :class:`LambdaOrthAligner` through every ``lam`` of the grid in turn on the fold's
    training rows, prepared (validated, split for early stopping, rescaled, moved to the
    device) once, as ``LassoCV`` runs ``enet_path``.  Each ``lam`` starts from the previous one's
    weights, moved on along the path (see Notes), with a fresh optimizer and the
    estimator's early stopping at a shorter patience, and is scored on the held-out rows.
    The ``lam`` with the best mean score is then refitted on all rows from scratch, as
    GridSearchCV refits; this object transforms with that map.
    ``cv_results_`` has the layout of :class:`~sklearn.model_selection.GridSearchCV`'s.

    The method is Ricci et al.'s [1]_; read more in docs/methods.md, section
    "lambda-orthogonality".

    Parameters
    ----------
    lams : array-like of float in [0, inf], default=None
        The grid, in any order (``cv_results_`` keeps it); distinct values.  None uses
        ``sqrt(d) * (0, 1/16, 1/8, 1/4, 1/2, 1, 2)`` and ``inf``, with
        ``d = min(d_x, d_y)``: from orthogonal to unregularised, through
        LambdaOrthAligner's ``"auto"`` value ``0.5 * sqrt(d)``.
    estimator : LambdaOrthAligner, default=None
        The training settings (every parameter but ``lam``, which the grid sets); None is
        ``LambdaOrthAligner()``.  Cloned, never modified.  Fix its ``random_state`` for
        repeatable results: every fit of a fold then holds out the same rows for early
        stopping.
    cv : int, cross-validation generator or iterable, default=None
        As in :func:`~sklearn.model_selection.check_cv`: None is 5-fold ``KFold``, an int
        the number of ``KFold`` folds.
    scoring : None, str or callable, default=None
        None is the estimator's ``score`` (paired top-1 cosine retrieval of the held-out
        rows).  A callable is called as ``scoring(estimator, X_test, Y_test)`` and must
        return a float, greater is better (e.g. a scorer from
        ``sklearn_compat.metrics.make_retrieval_scorer``).  A str is a metric name of
        ``sklearn_compat.metrics.make_retrieval_scorer`` such as ``"top5"``, or
        ``"cmc_top1"`` and ``"map"``, which score with the ``labels`` given to ``fit``.
    direction : {"increasing", "decreasing"}, default="increasing"
        The order in which each fold walks the grid.  "increasing" (from orthogonal
        towards the unregularised end) converges faster; see Notes.
    warm_n_iter_no_change : int or "auto", default="auto"
        Early-stopping patience of the warm-started fits (every ``lam`` of a fold's path but
        the first, which is a cold fit with the estimator's own ``n_iter_no_change``).
        "auto" is half the estimator's ``n_iter_no_change``, rounded up, and 2 where
        ``stop_at_bound`` applies (walking upwards); the estimator's own value makes every
        fit as patient as GridSearchCV's.  The refit always uses the estimator's.  See
        Notes.

        .. versionchanged:: 0.1.0
           "auto" is 2 with ``stop_at_bound=True`` (before: half the estimator's).
    refit : bool, default=True
        Refit the best ``lam`` on all rows.  With False only ``cv_results_``, ``lam_``,
        ``best_index_`` and ``best_score_`` are set and the object cannot transform.
    verbose : int, default=0
        Print one line per fold and ``lam`` when > 0.
    warm_tol : float in [0, 1), default=0.0
        Relative tolerance of the warm-started fits' early stopping: an epoch that improves
        the monitored loss by less than ``warm_tol`` times its best so far counts as no
        improvement (on top of the estimator's absolute ``tol``).  See Notes (Speed).
    stop_at_bound : bool, default=False
        Walking upwards, end each fit (the refit included, which then starts from the
        mean of the folds' maps at ``lam_``) as soon as it has settled on
        its constraint: the held-out loss is read four times per epoch, and while the
        map sits on the penalty's wall (``N`` within ``lam - 10 / sharpness`` and
        ``lam + 5 / sharpness``) two readings without improvement end the fit.  The
        first fit of each fold is then no longer GridSearchCV's.  Fast on pairs whose
        fits settle at once, misleading on pairs whose fits slide along the wall for
        long: see Notes (Text pairs).
    fallback : "auto" or bool, default="auto"
        Whether the refitted map must beat :class:`OrthogonalProcrustesAligner` with its
        defaults.  ``"auto"`` scores the two on held-out rows by
        :class:`LambdaOrthAligner`'s ``lam="auto"`` rule (the refit's early-stopping rows,
        or a held-out fifth and a second training on the rest; more than one paired
        standard error of paired top-1) and keeps the Procrustes map where training does
        not win, with one :class:`~sklearn_compat.exceptions.StepDeclinedWarning` where it
        lost: the grid's ``lam = 0`` is a trained, softly orthogonal map, not Procrustes,
        and cross-validated scores of close ``lam`` values differ by less than their noise.
        ``step_choice_`` holds the evidence; True means the same.  False keeps the refit
        as it is (GridSearchCV's refit).  Unused without ``refit``, and with
        ``stop_at_bound`` (whose refit is warm-started from the folds' maps).

        .. versionadded:: 0.1

    Attributes
    ----------
    lam_ : float
        The chosen ``lam``.
    best_index_ : int
        Its index in ``lams_`` and ``cv_results_``.
    best_score_ : float
        Its mean held-out score.
    best_estimator_ : LambdaOrthAligner
        ``clone(estimator).set_params(lam=lam_)`` fitted on all rows (``refit`` only;
        with ``stop_at_bound=True`` warm-started from the folds' maps, see Notes).
    W_ : ndarray of shape (n_features_in_, n_targets_)
        ``best_estimator_.W_`` (``refit`` only).
    bias_ : ndarray of shape (n_targets_,)
        ``best_estimator_.bias_`` (``refit`` only).
    orthogonality_gap_ : float
        ``best_estimator_.orthogonality_gap_`` (``refit`` only).
    step_choice_ : dict or None
        With ``fallback="auto"`` and ``refit``: the refit's held-out evidence against
        Procrustes (see :class:`LambdaOrthAligner`); None otherwise.  Where it
        declined, ``best_estimator_`` holds the Procrustes map (its ``lam_`` 0).
    lams_ : ndarray of shape (n_lams,)
        The grid used (the default one resolved).
    cv_results_ : dict of ndarrays
        As GridSearchCV's (``pandas.DataFrame(cv_results_)`` tabulates it), one row per
        ``lam`` in the order of ``lams_``: ``param_lam``, ``params``,
        ``split{k}_test_score``, ``mean_test_score``, ``std_test_score``,
        ``rank_test_score``, ``mean_fit_time``, ``std_fit_time``, ``mean_score_time``,
        ``std_score_time``, and ``mean_n_epochs`` (epochs trained at that ``lam`` per
        fold, 0 where the previous fit was reused, see Notes) and
        ``mean_orthogonality_gap``.
    n_splits_ : int
        Number of folds.
    refit_time_ : float
        Seconds spent refitting (``refit`` only).
    n_features_in_ : int
        Width of X.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, when X was a DataFrame with string columns.

    See Also
    --------
    LambdaOrthAligner : the aligner with a fixed ``lam``.
    sklearn_compat.lambda_orth_cv.lambda_orth_path : the path one fold trains.
    sklearn.model_selection.GridSearchCV : the same search, one cold fit per ``lam``.

    Notes
    -----
    Direction.  ``lam`` bounds the distance ``N = ||W W^T - I||_F`` from orthogonality;
    training starts at the orthogonal Procrustes map (the ``lam = 0`` end), and the fitted
    ``N`` grows with ``lam`` until the data ask for no more.  Walking the grid upwards,
    each relaxation lets ``W`` move on along the data's own gradient, from the optimum of
    the tighter problem, which already has the right shape; the penalty wall trails
    behind.  Walking downwards, the wall pushes ``W`` back inside within a few epochs, but
    along the gradient of ``N`` (shrinking the most stretched directions, whatever the
    data prefer), and ``W`` then has to slide along the constraint surface to the shape
    the data prefer, driven only by the weak data gradient against the steep wall, so the
    increasing path trains fewer epochs.  Carrying Adam's moments from one ``lam`` to the
    next slows the increasing path down, so each ``lam`` starts with a fresh optimizer.

    Reuse.  When the penalty, at the current ``W``, is negligible both at the ``lam`` it
    was fitted with and at the next one (its value times ``sharpness`` below the
    estimator's ``tol``), the two problems coincide near ``W`` and the next ``lam`` reuses
    the fit and its scores instead of training again.  This covers the large ``lam``
    values (and ``inf``) beyond the gap the data ask for, and every ``lam`` when
    ``strict=True``.  Tied mean scores are ranked as GridSearchCV ranks them (the first in
    ``lams_`` wins), so list the grid in increasing order to prefer the more orthogonal
    map among equals.

    Speed.  A warm start saves fewer epochs than one might hope: ``W`` moves along the
    path at the pace Adam allows, so a fit from the previous ``lam``'s weights, stopped
    short of its own optimum by early stopping, still has most of the way to travel, and
    each fit ends with ``n_iter_no_change`` epochs without improvement.  Three things make
    the path fast:

    - The warm-started fits stop after ``warm_n_iter_no_change`` (by default 5 instead of
      10) epochs without improvement: the next ``lam`` carries on from where a fit
      stopped, so waiting longer at each step mostly repeats work.
    - Walking upwards, each fit starts at the secant prediction through the last two fits,
      ``W_k + beta (W_k - W_{k-1})`` (``beta`` the ratio of the coming step in ``lam`` to
      the last one, at most 1), shrunk until it lies inside the new constraint
      ``N <= lam - 1``: the path's curve is smooth, and the prediction starts the fit
      most of the way to where it will stop.

    The refit is GridSearchCV's: ``clone(estimator).set_params(lam=lam_).fit(X, Y)``, a
    cold fit on all rows, so where the two searches pick the same ``lam`` they return the
    same map.  With ``stop_at_bound=True`` it is instead warm-started from the mean of the
    folds' maps at ``lam_`` and ended at the bound, which is faster and not GridSearchCV's.

    .. versionchanged:: 0.1.0
       The default refit is a cold fit (before: warm-started from the mean of the folds'
       maps, as ``stop_at_bound=True`` still does).

    The search therefore trains fewer epochs than GridSearchCV over the same grid and
    folds, for a pick GridSearchCV itself scores close to its best (:ref:`lam_tradeoff`).
    The scores of one ``lam`` are not GridSearchCV's: early stopping ends a warm-started
    fit at a different point than a cold one.  Set ``warm_n_iter_no_change`` to the
    estimator's ``n_iter_no_change`` to give the path GridSearchCV's patience, for a
    smaller speed-up.

    Text pairs.  Where the fits are short (a cold fit from the Procrustes start is at its
    best held-out loss after a few epochs, as on many pairs of text models), a
    warm-started fit gains only minibatch noise after its first epoch yet waits out its
    patience, and the path saves little.  ``stop_at_bound=True`` (whose ``"auto"`` warm
    patience is 2) ends such fits on their wall half an epoch after their best.  It is not
    a default because a fit may also slide along its wall for many epochs; stopped early,
    it scores lower and can mislead the search.  Compare ``mean_n_epochs`` with a default
    search on a subsample before relying on it.  ``warm_tol`` (e.g. ``3e-3``) is an older, cruder
    shortcut that picks worse where fits travel far, which is why it is 0 by default.
    Measured speed-ups and picks on real pairs: :ref:`benchmarks`.

    A fit that diverges (a
    ``FloatingPointError`` from the estimator) scores NaN with a ``FitFailedWarning``,
    as in GridSearchCV, and the path goes on from the last good weights.

    References
    ----------
    .. [1] Ricci, Biondi, Pernici, Patras, Del Bimbo, "lambda-Orthogonality Regularization
       for Compatible Representation Learning", NeurIPS 2025, arXiv:2509.16664.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat import LambdaOrthAligner, LambdaOrthAlignerCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 8))
    >>> A = np.eye(8) + 0.5 * rng.normal(size=(8, 8))
    >>> Y = X @ A + 0.05 * rng.normal(size=(600, 8))
    >>> search = LambdaOrthAlignerCV(
    ...     lams=[0.0, 1.0, np.inf],
    ...     estimator=LambdaOrthAligner(max_epochs=20, random_state=0),
    ...     cv=3,
    ... ).fit(X, Y)
    >>> search.lam_
    inf
    >>> sorted(search.cv_results_)[:4]
    ['mean_fit_time', 'mean_n_epochs', 'mean_orthogonality_gap', 'mean_score_time']
    >>> search.transform(X).shape
    (600, 8)
    """

    _parameter_constraints: dict = {
        "lams": ["array-like", None],
        "estimator": [LambdaOrthAligner, None],
        "cv": ["cv_object"],
        "scoring": [None, str, callable],
        **PATH_CONSTRAINTS,
        "refit": ["boolean"],
        "verbose": ["verbose"],
        "fallback": ["boolean", StrOptions({"auto"})],
    }

    def __init__(
        self,
        lams=None,
        *,
        estimator=None,
        cv=None,
        scoring=None,
        direction="increasing",
        warm_n_iter_no_change="auto",
        refit=True,
        verbose=0,
        warm_tol=0.0,
        stop_at_bound=False,
        fallback="auto",
    ):
        self.lams = lams
        self.estimator = estimator
        self.cv = cv
        self.scoring = scoring
        self.direction = direction
        self.warm_n_iter_no_change = warm_n_iter_no_change
        self.refit = refit
        self.verbose = verbose
        self.warm_tol = warm_tol
        self.stop_at_bound = stop_at_bound
        self.fallback = fallback

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, Y=None, labels=None, *, y=None, groups=None):
        """Score every ``lam`` on every fold along the path, then refit the best.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Source embeddings (the new model's).
        Y : array-like or torch.Tensor of shape (n_samples, n_targets)
            Target embeddings of the same items in the same row order (the old model's).
        labels : array-like of shape (n_samples,), default=None
            Class labels passed on to every ``LambdaOrthAligner.fit`` (supervised
            contrastive term), split with the folds; the held-out rows' labels also go to a
            ``scoring`` that requests them (``"cmc_top1"``, ``"map"``).
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.
        groups : array-like of shape (n_samples,), default=None
            Group labels for a group-aware ``cv`` splitter.

        Returns
        -------
        self : object
            Fitted search.
        """
        Y = pick_target(Y, y)
        X, Y = self._validate_pair(X, Y, reset=True)
        if labels is not None:
            labels = np.asarray(as_numpy_input(labels))
            if labels.ndim != 1 or labels.shape[0] != X.shape[0]:
                raise ValueError(
                    f"labels must be 1-d with one entry per row of X ({X.shape[0]}), got "
                    f"shape {labels.shape}."
                )
        base = LambdaOrthAligner() if self.estimator is None else self.estimator
        lams = self._check_lams(min(X.shape[1], Y.shape[1]))
        scorer = _get_scorer(self.scoring)
        score_labels = _scorer_wants_labels(scorer)
        if score_labels and labels is None:
            raise ValueError(
                f"scoring={self.scoring!r} needs the class labels of the rows: pass "
                "labels=... to fit."
            )
        cv = check_cv(self.cv, Y, classifier=False)
        splits = list(cv.split(X, Y, groups))
        path_params = dict(
            estimator=base,
            direction=self.direction,
            warm_n_iter_no_change=self.warm_n_iter_no_change,
            warm_tol=self.warm_tol,
            stop_at_bound=self.stop_at_bound,
            error_score=np.nan,
        )
        folds = []
        # With stop_at_bound, per lam, the sum of the folds' maps (the refit's start), kept
        # as running sums so that only one fold's maps are held at a time.
        map_sums = [_MapSum() for _ in lams] if self.stop_at_bound else None
        for k, (train, test) in enumerate(splits):
            path = lambda_orth_path(
                X[train],
                Y[train],
                lams,
                labels=None if labels is None else labels[train],
                **path_params,
            )
            fold = self._score_path(
                path,
                base,
                (X[test], Y[test], labels[test] if score_labels else None),
                scorer,
                fold=f"{k + 1}/{len(splits)}",
            )
            for i, total in enumerate(map_sums or ()):
                if path.errors[i] is None:
                    total.add(path, i)
            folds.append(fold)
        # (n_splits, n_lams) arrays of each recorded quantity
        record = {key: np.array([fold[key] for fold in folds]) for key in folds[0]}
        scores = record["score"]

        if np.all(np.isnan(scores)):
            raise ValueError(
                "Every fit of the path failed (see the FitFailedWarning messages); lower "
                "the estimator's lr or check the inputs."
            )
        self.lams_ = lams
        self.n_splits_ = len(splits)
        self.cv_results_ = _cv_results(lams, record)
        self.best_index_ = int(np.argmin(self.cv_results_["rank_test_score"]))
        self.lam_ = float(lams[self.best_index_])
        self.best_score_ = float(self.cv_results_["mean_test_score"][self.best_index_])

        self.step_choice_ = None
        for attr in ("best_estimator_", "W_", "bias_", "orthogonality_gap_", "refit_time_"):
            self.__dict__.pop(attr, None)
        if self.refit:
            start = time.perf_counter()
            if self.stop_at_bound:
                # The fast search's refit: a one-lam path from the folds' mean map at lam_,
                # ended at the bound like the path's fits.
                path = lambda_orth_path(
                    X,
                    Y,
                    [self.lam_],
                    estimator=base,
                    labels=labels,
                    coef_init=map_sums[self.best_index_].mean(),
                    direction=self.direction,  # decides whether stop_at_bound applies
                    stop_at_bound=True,
                )
                best = aligner_at(path, 0, base)
            else:
                # GridSearchCV's own refit, cold: where both searches pick the same lam
                # they return the same map.
                best = clone(base).set_params(lam=self.lam_)
                # fallback="auto": the refit is judged against its Procrustes start.
                best._judge_step = self.fallback is True or self.fallback == "auto"
                best.fit(X, Y, **({} if labels is None else {"labels": labels}))
                best.__dict__.pop("_judge_step", None)
            self.refit_time_ = time.perf_counter() - start
            self.best_estimator_ = best
            self.step_choice_ = getattr(best, "step_choice_", None)
            self.W_ = best.W_
            self.bias_ = best.bias_
            self.orthogonality_gap_ = best.orthogonality_gap_
        return self

    def _check_lams(self, d):
        if self.lams is None:
            return np.sqrt(d) * np.asarray(_DEFAULT_RELATIVE_LAMS)
        return check_lams(self.lams)

    def _score_path(self, path, base, test, scorer, *, fold):
        """Score one fold's path on its held-out rows; per-lam arrays in grid order.

        Each ``lam`` is scored as a fitted ``LambdaOrthAligner`` holding its map, in the
        order the path trained them; a reused fit keeps the scores of the fit it reuses,
        a failed one scores NaN.
        """
        n_lams = len(path.lams)
        out = {
            "score": np.full(n_lams, np.nan),
            "fit_time": path.fit_times.copy(),
            "score_time": np.zeros(n_lams),
            "n_epochs": path.n_epochs.astype(np.float64),
            "orthogonality_gap": path.orthogonality_gaps.copy(),
        }
        descending = self.direction == "decreasing"
        last_score = np.nan
        for i in np.argsort(-path.lams if descending else path.lams, kind="stable"):
            lam = float(path.lams[i])
            if path.errors[i] is not None:
                continue
            if path.reused[i]:
                # The fit reused is the last one trained before it along the path.
                out["score"][i] = last_score
                self._report(fold, lam, last_score, "reused")
                continue
            model = aligner_at(path, i, base)
            start = time.perf_counter()
            extra = {} if test[2] is None else {"labels": test[2]}
            score = scorer(model, test[0], test[1], **extra)
            out["score_time"][i] = time.perf_counter() - start
            if not isinstance(score, Real):
                raise TypeError(
                    f"scoring must return one number, got {type(score).__name__}; for "
                    "several metrics at once use GridSearchCV with refit=<metric name>."
                )
            out["score"][i] = last_score = score
            self._report(fold, lam, score, f"{int(path.n_epochs[i])} epochs")
        return out

    def _report(self, fold, lam, score, how):
        if self.verbose:
            print(f"[LambdaOrthAlignerCV] fold {fold} lam={lam:g}: score={score:.4f} ({how})")

    # ------------------------------------------------------------------ transforms
    def _affine_map(self):
        if not hasattr(self, "W_"):
            raise NotFittedError(
                "This LambdaOrthAlignerCV was fitted with refit=False, so it has no map; "
                "fit LambdaOrthAligner(lam=search.lam_) or use refit=True."
            )
        return self.W_, self.bias_

    def _compute_device(self):
        check_is_fitted(self)
        if hasattr(self, "best_estimator_"):
            return self.best_estimator_._compute_device()
        return super()._compute_device()

    @available_if(lambda self: getattr(self.estimator, "bidirectional", False))
    def transform_target(self, Y):
        """``best_estimator_.transform_target``: Y into the shared space (forward adapter).

        Available when ``estimator`` has ``bidirectional=True``.

        Parameters
        ----------
        Y : array-like of shape (n_samples, n_targets_)
            Embeddings in Y's space.

        Returns
        -------
        ndarray of shape (n_samples, n_targets_)
            In Y's float dtype.
        """
        check_is_fitted(self)
        self._affine_map()  # the refit=False message
        return self.best_estimator_.transform_target(Y)

    @property
    def n_targets_(self):
        """Dimension of Y's space (the width of ``transform``'s output)."""
        check_is_fitted(self)
        self._affine_map()
        return self.W_.shape[1]

    def __getstate__(self):
        # A grid given as a tensor is saved as the float64 array it means: skops then
        # loads the search trusting only our classes (it cannot save a tensor at all).
        state = super().__getstate__()
        lams = state.get("lams")
        if lams is not None and type(lams).__module__.startswith("torch"):
            state = {**state, "lams": as_numpy_input(lams).astype(np.float64)}
        return state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


_PATH_PARAMETER_CONSTRAINTS = {
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
}


@validate_params(_PATH_PARAMETER_CONSTRAINTS, prefer_skip_nested_validation=True)
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
        rounded up, and 2 where ``stop_at_bound`` applies: the next ``lam`` carries on
        from where a fit stopped, so waiting longer at each step mostly repeats work.
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
    walking = {"warm_n_iter_no_change": warm_n_iter_no_change, "warm_tol": warm_tol}
    refuse_bool_params(
        {**walking, "error_score": error_score}, _PATH_PARAMETER_CONSTRAINTS, "lambda_orth_path"
    )
    if estimator is None:
        estimator = LambdaOrthAligner()
    elif not isinstance(estimator, LambdaOrthAligner):
        raise TypeError(f"estimator must be a LambdaOrthAligner, got {type(estimator).__name__}.")
    return walk_lams(
        estimator,
        X,
        Y,
        lams,
        labels=labels,
        direction=direction,
        warm_n_iter_no_change=warm_n_iter_no_change,
        warm_tol=warm_tol,
        stop_at_bound=stop_at_bound,
        secant=secant,
        coef_init=coef_init,
        error_score=error_score,
        verbose=verbose,
    )


class _MapSum:
    """Running sum of the folds' fitted maps at one lam; ``mean()`` starts the refit."""

    def __init__(self):
        self.count, self.W, self.bias, self.forward = 0, 0.0, 0.0, None

    def add(self, path, index):
        """Add a fold's map at ``path.lams[index]`` (a fitted one)."""
        self.count += 1
        self.W = self.W + path.coefs[index]
        self.bias = self.bias + path.intercepts[index]
        if path.forward_coefs is not None:
            previous = self.forward or (0.0, 0.0)
            current = (path.forward_coefs[index], path.forward_intercepts[index])
            self.forward = tuple(a + b for a, b in zip(previous, current, strict=True))

    def mean(self):
        """``(W, bias)`` or ``(W, bias, (V, c))``: a ``coef_init`` of the path."""
        W, bias = self.W / self.count, self.bias / self.count
        if self.forward is None:
            return W, bias
        return W, bias, tuple(a / self.count for a in self.forward)


def _get_scorer(scoring):
    if scoring is None:
        return lambda estimator, X, Y: estimator.score(X, Y)
    if callable(scoring):
        return scoring
    return make_retrieval_scorer(scoring)


def _scorer_wants_labels(scorer):
    """Whether ``scorer`` asks for the rows' class labels (cmc_top<k>, map, ...).

    Read from its metadata request, as GridSearchCV's routing would: the held-out rows'
    labels are then passed to it with each fold's test split.
    """
    if not hasattr(scorer, "get_metadata_routing"):
        return False
    request = scorer.get_metadata_routing().score.requests
    return request.get("labels") is True


def _cv_results(lams, record):
    """GridSearchCV's ``cv_results_`` layout for one parameter, from (n_splits, n_lams)."""
    scores = record["score"]
    results = {
        "param_lam": np.ma.MaskedArray(lams.copy(), mask=False),
        "params": [{"lam": float(lam)} for lam in lams],
    }
    for k in range(scores.shape[0]):
        results[f"split{k}_test_score"] = scores[k]
    mean = scores.mean(axis=0)
    results["mean_test_score"] = mean
    results["std_test_score"] = scores.std(axis=0)
    # As GridSearchCV: ties share the best rank, NaN ranks last.
    filled = np.where(np.isnan(mean), -np.inf, mean)
    results["rank_test_score"] = rankdata(-filled, method="min").astype(np.int32)
    for name in ("fit_time", "score_time"):
        results[f"mean_{name}"] = record[name].mean(axis=0)
        results[f"std_{name}"] = record[name].std(axis=0)
    results["mean_n_epochs"] = record["n_epochs"].mean(axis=0)
    results["mean_orthogonality_gap"] = record["orthogonality_gap"].mean(axis=0)
    return results

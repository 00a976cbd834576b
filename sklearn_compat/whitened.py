"""Whitened orthogonal mapping: the multi-step framework of Artetxe et al. (AAAI 2018)."""

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._core import auto_choice, holdout, moment_choice, step_choice
from ._core.backend import apply_affine, is_dask_collection
from ._core.base import BaseAligner
from ._core.few_pairs import warn_if_few_pairs
from ._core.pair_stats import batch_moments
from ._core.ranking import unit_rows
from ._core.row_space import is_wide, row_stats, thin_whitened
from ._core.validation import pick_target
from ._core.whitening import multi_step_map
from ._core.wide_choice import SplitRows, candidate_stats, whitened_held_products

__all__ = ["WhitenedProcrustesAligner"]


class WhitenedProcrustesAligner(BaseAligner):
    """Whiten both spaces, map orthogonally, re-weight and de-whiten (vecmap's framework).

    Artetxe, Labaka and Agirre, "Generalizing and improving bilingual word embedding
    mappings with a multi-step framework of linear transformations", AAAI 2018, show that
    many linear cross-space maps are one sequence of optional steps: normalisation,
    whitening of each side, an orthogonal map between the whitened spaces, re-weighting by
    the singular values, de-whitening and dimensionality reduction.  This estimator fits
    that sequence in closed form from the covariances and the cross product of the paired
    rows and returns the composed map into Y's coordinates.

    The target side is kept orthogonal (not re-weighted, de-whitened with respect to
    itself), so ``transform(X)`` can be compared with the raw Y rows, the old index, as
    they are.  With the default settings the map is ``C_x^(-1/2) U V^T C_y^(1/2)``, with
    ``U S V^T`` the SVD of the whitened cross-covariance (``S`` are the canonical
    correlations): it whitens X, rotates it onto whitened Y and gives it Y's covariance.
    For noise-free ``Y = X A`` with any invertible ``A`` it recovers ``A`` exactly, where
    plain Procrustes recovers only orthogonal maps, so it suits pairs of differently
    trained models whose spaces differ by more than a rotation (:ref:`choosing_a_method`).

    Parameters
    ----------
    normalize : "auto" or bool, default="auto"
        Scale the rows of X and Y to unit length before everything else (the first step
        of the paper's recommended normalisation).  ``transform`` normalises X's rows
        too, so the map is then no longer affine in the raw X.  ``"auto"`` decides with
        ``center`` at ``fit`` (see there); ``normalize_`` holds the choice.
    center : "auto" or bool, default="auto"
        Subtract the (weighted) column means after normalising; ``transform`` adds Y's
        mean back, so its output lives where the (normalised) Y rows do.  ``"auto"``
        scores the four combinations with ``normalize`` by paired top-1 cosine retrieval
        on held-out training rows (five folds of up to 1,000 rows, each map solved from
        the statistics of the other rows: no refits) and fits on all rows with the best;
        ``center_`` holds the choice.  The paper's setting (both on) is not best on every
        pair, hence the choice (:ref:`centring`).  Fewer than 100 rows: both True, with an
        :class:`~sklearn_compat.exceptions.AutoSettingWarning`.
    whiten : "auto" or bool, default="auto"
        Whiten each side by the inverse square root of its covariance.  False reduces the
        map to Procrustes' orthogonal map (with ``reweight=0``; no scale).  Whitening
        recovers any invertible linear relation, but it also gives every direction of X,
        the noisy ones included, unit weight, and on some pairs of real models it costs
        retrieval (a static 256-d model mapped into a 384-d transformer's space: 0.82
        paired top-1 against Procrustes' 0.92; :ref:`choosing_a_method`).  ``"auto"``
        scores the whitened candidates (with ``dewhiten``, ``center`` and ``normalize``)
        and the unwhitened ones on the same held-out folds (see ``center``) and keeps
        whitening only when its best candidate beats the best unwhitened one by more than
        one paired standard error of the per-row difference; ``whiten_`` holds the choice,
        ``step_choice_`` the evidence, and a whitening that lost is left out with one
        :class:`~sklearn_compat.exceptions.StepDeclinedWarning`.  ``True``/``False`` are
        used as given.

        .. versionchanged:: 0.1
           The default became ``"auto"`` (was True).
    reweight : float >= 0, default=0.0
        Power of the singular values ``S`` that re-weights the source side.  0 gives the
        exact recovery above; 0.5 and 1 are the paper's other settings (they stretch the
        more correlated directions).
    dewhiten : {"auto", "target", "source"}, default="auto"
        De-whiten the source side with respect to Y's covariance (the map then gives Y's
        covariance, right for retrieval against the raw Y rows) or X's own (keeps more of
        X's geometry).  Unused without whitening.  "target" re-colours every canonical
        direction with Y's variance, the noisy ones with little correlation included: that
        is what cost most where a smaller space is mapped into a larger one (on planted
        pairs "source" kept within 0.015 of Procrustes where "target" lost 0.02-0.17).
        ``"auto"`` scores both with the other settings (see ``whiten``); ``dewhiten_``
        holds the choice.  (The paper's third choice, no de-whitening, leaves the output
        whitened, which only makes sense against whitened Y rows, so it is not offered.)

        .. versionchanged:: 0.1
           The default became ``"auto"`` (was "target").
    n_components : int or None, default=None
        Keep only the ``n_components`` most correlated directions (dimensionality
        reduction, the last step); ``None`` keeps ``min(d_x, d_y)``.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the covariances and transforms are computed.  The small (d, d) algebra
        runs in float64 on the CPU.
    random_state : int, RandomState instance or None, default=None
        Which training rows ``"auto"`` holds out: None takes evenly spaced rows (the
        choice is reproducible), an int a seeded random sample.

    Attributes
    ----------
    W_ : ndarray of shape (n_features_in_, n_targets_)
        The composed linear map (on normalised, centred rows), float64.
    mean_x_ : ndarray of shape (n_features_in_,)
        Mean of the (normalised) X rows, zeros unless centred.
    mean_y_ : ndarray of shape (n_targets_,)
        Mean of the (normalised) Y rows, zeros unless centred.
    center_, normalize_, whiten_ : bool
        The settings in force: the parameters, or what ``"auto"`` chose.
    dewhiten_ : {"target", "source"}
        The de-whitening in force (the parameter, or what ``"auto"`` chose).
    step_choice_ : dict or None
        With ``whiten="auto"`` and enough rows: the held-out evidence for whitening
        (``kept``, the best candidates' top-1 ``with_step`` and ``without_step``, their
        ``gain`` and its paired ``se``, ``n_rows`` scored); None otherwise.
    auto_scores_ : dict or None
        Held-out paired top-1 of each candidate that ``"auto"`` scored (None otherwise).
    singular_values_ : ndarray of shape (n_components_,)
        Singular values of the (whitened) cross-covariance: the canonical correlations
        when ``whiten``.
    n_components_ : int
        Directions kept.
    n_features_in_ : int
        Width of X.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, when X was a DataFrame with string columns.

    See Also
    --------
    OrthogonalProcrustesAligner : the orthogonal map alone (``whiten=False``).
    AffineAligner : least squares, which also fits Y's covariance but not its geometry.
    RefinedProcrustesAligner : adds pairs induced from unpaired rows.

    Notes
    -----
    The statistics are the means, ``X^T X``, ``Y^T Y`` and ``X^T Y`` of the (normalised,
    centred) rows, accumulated on ``device`` in float64 (whitening takes inverse square
    roots, which need the precision) chunk by chunk, so Dask arrays are reduced blockwise
    on the cluster like :class:`AffineAligner`'s.  Directions whose covariance eigenvalue
    is at most ``max(d, sqrt(n)) * eps`` times the largest count as absent (the
    pseudo-inverse square root), so fewer rows than features are no error: with
    ``whiten=True`` such fits are solved in the row space (thin QR factors, n x n
    algebra, no d x d covariance), and fewer pairs than ``d_x + d_y`` (+1 when centred)
    warn with :class:`~sklearn_compat.UnderdeterminedFitWarning`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat import WhitenedProcrustesAligner
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 5)) * [5.0, 2.0, 1.0, 0.5, 0.1]
    >>> A = rng.normal(size=(5, 4))
    >>> aligner = WhitenedProcrustesAligner(normalize=False, center=False).fit(X, X @ A)
    >>> bool(np.allclose(aligner.W_, np.linalg.lstsq(X, X @ A, rcond=None)[0]))
    True
    >>> aligner.score(X, X @ A)
    1.0
    """

    _parameter_constraints: dict = {
        "normalize": ["boolean", StrOptions({"auto"})],
        "center": ["boolean", StrOptions({"auto"})],
        "whiten": ["boolean", StrOptions({"auto"})],
        "reweight": [Interval(Real, 0, None, closed="left")],
        "dewhiten": [StrOptions({"auto", "target", "source"})],
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "device": [str, torch.device],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        normalize="auto",
        center="auto",
        whiten="auto",
        reweight=0.0,
        dewhiten="auto",
        n_components=None,
        device="auto",
        random_state=None,
    ):
        self.normalize = normalize
        self.center = center
        self.whiten = whiten
        self.reweight = reweight
        self.dewhiten = dewhiten
        self.n_components = n_components
        self.device = device
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, Y=None, sample_weight=None, *, y=None):
        """Fit the map from paired rows.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask array of shape (n_samples, n_features)
            Source embeddings (the space to map from).
        Y : array-like, torch.Tensor or dask array of shape (n_samples, n_targets)
            Target embeddings of the same items in the same row order.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights; integer weights equal repeating rows.
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.

        Returns
        -------
        self : object
            Fitted aligner.
        """
        Y = pick_target(Y, y)
        self.__dict__.pop("whiten_", None)
        self.__dict__.pop("dewhiten_", None)
        self.step_choice_ = None
        # Fewer rows than dimensions: solved in the row space, with or without whitening
        # (directions no pair spans are left in place, as Procrustes does).
        wide = is_wide(X, Y, sample_weight)
        chooser = self._choose_wide if wide else self._choose_from_moments
        sample = holdout.wide_solve_sample(X, Y, sample_weight, self.random_state)
        if self.whiten is not False and sample is not None:
            # Wide solves, more rows than columns: candidates scored in the row space on a
            # sample of rows; the chosen setting is fitted on every row below.
            chooser = auto_choice.sampled_chooser(self._choose_wide, sample)
        setting = auto_choice.resolve_by_refit(
            self,
            X,
            Y,
            {
                "center": "center_",
                "normalize": "normalize_",
                "whiten": "whiten_",
                "dewhiten": "dewhiten_",
            },
            [
                {"center": c, "normalize": n, "whiten": w, "dewhiten": dw}
                for w, dw in self._step_grid()
                for n in (True, False)
                for c in (True, False)
            ],
            {"center": True, "normalize": True, "whiten": True, "dewhiten": "target"},
            sample_weight=sample_weight,
            # Wide data form no (d, d) statistic: the candidates are then refitted in the
            # row space on the kept rows instead of solved from moments.
            chooser=self._step_chooser(chooser),
        )
        center, normalize = setting["center"], setting["normalize"]
        split = self.__dict__.pop("_split", None)
        statistics = self.__dict__.pop("_statistics", {}).get(normalize)
        if wide:
            return self._fit_wide(X, Y, sample_weight, center, normalize, split)
        if statistics is not None and not is_dask_collection(X, Y, sample_weight):
            # The choice read every row: its statistics of the chosen form are the fit's
            # (Dask input keeps its own pass, which also records its feature names).
            if not center:
                statistics = moment_choice.uncentred_stats(statistics)
            return self._fit_statistics(statistics, center, int(np.shape(X)[0]))
        options = {"centered": center, "need_gram": True, "stats_dtype": np.float64}
        # A second, throwaway aligner reduces (Y, X) for Y's covariance, so that both
        # passes share the validated, device- and Dask-aware statistics code.
        helper = BaseAligner()
        helper.device = self.device
        if is_dask_collection(X, Y, sample_weight):
            from ._core.dask import _as_dask_2d

            X, Y = _as_dask_2d(X, "X"), _as_dask_2d(Y, "Y")
            if normalize:
                X, Y = unit_rows(X), unit_rows(Y)
            xy, n_rows = batch_moments(self, X, Y, sample_weight, reset=True, **options)
        else:
            X, Y = self._validate_pair(X, Y, reset=True, keep_tensors=True)
            if normalize:
                X, Y = unit_rows(X), unit_rows(Y)
            xy, n_rows = batch_moments(helper, X, Y, sample_weight, reset=True, **options)
        # Only Y's covariance is read from this pass: its cross product is not formed.
        yy, _ = batch_moments(helper, Y, X, sample_weight, reset=True, need_cross=False, **options)
        if xy.weight <= 0:
            raise ValueError("sample_weight sums to zero: there is nothing to fit.")
        stats = {"gram_x": xy.gram_x, "gram_y": yy.gram_x, "cross": xy.cross}
        stats.update(mean_x=xy.mean_x, mean_y=xy.mean_y)
        return self._fit_statistics(stats, center, int(n_rows), stacklevel=6)

    def _fit_statistics(self, stats, center, n_rows, stacklevel=5):
        """The map from the statistics of every row in the form ``center`` says
        (float64 numpy: ``gram_x``, ``gram_y``, ``cross``, ``mean_x``, ``mean_y``)."""
        d_x, d_y = stats["cross"].shape
        fitted = self._multi_step(stats["gram_x"], stats["gram_y"], stats["cross"], n_rows)
        self.W_ = fitted.W
        self.singular_values_ = fitted.singular_values
        self.n_components_ = int(fitted.singular_values.shape[0])
        self.mean_x_ = stats["mean_x"].copy() if center else np.zeros(d_x)
        self.mean_y_ = stats["mean_y"].copy() if center else np.zeros(d_y)
        self.n_samples_seen_ = n_rows
        warn_if_few_pairs(self, self.n_samples_seen_, stacklevel=stacklevel)
        return self

    def _step_grid(self):
        """(whiten, dewhiten) candidates: de-whitening is moot without whitening."""
        grid = [(True, "target"), (True, "source"), (False, "target")]
        return [(w, dw) for w, dw in grid if self.whiten == "auto" or w == bool(self.whiten)]

    def _step_chooser(self, chooser):
        """``chooser`` with whitening decided as a step (see ``whiten``): the best
        whitened and the best unwhitened candidate are compared by
        :func:`~._core.step_choice.decide_step` on the same held-out rows."""

        def choose(options, X, Y, sample_weight):
            hits = {}
            chosen, scores = chooser(options, X, Y, sample_weight, hits=hits)
            steps = [o for o in options if o["whiten"]]
            bases = [o for o in options if not o["whiten"]]
            if chosen is None or not steps or not bases:
                return chosen, scores
            labels = {holdout.params_label(o): o for o in options}
            best = {}
            for group, name in ((steps, "step"), (bases, "base")):
                group_scores = {
                    holdout.params_label(o): [scores[holdout.params_label(o)]]
                    for o in group
                    if holdout.params_label(o) in scores
                }
                best[name] = holdout.pick(group_scores) if group_scores else None
            if best["step"] is None or best["base"] is None:
                return chosen, scores
            kept = step_choice.decide_step(
                self,
                "whitening",
                hits[best["step"]],
                hits[best["base"]],
                parameter="whiten=True",
                base="the unwhitened orthogonal map",
            )
            return labels[best["step" if kept else "base"]], scores

        return choose

    def _choose_wide(self, options, X, Y, sample_weight, hits=None):
        """``"auto"`` on wide data: one held-out fold; each candidate is solved on the kept
        rows in the row space from one shared QR per side and applied through its factors
        (no d_x x d_y map is formed), then scored by paired top-1.  Uncentred candidates
        are dropped where the rows they would see have no common offset (centring then
        changes nothing)."""
        X, Y = holdout.all_rows(X), holdout.all_rows(Y)
        w = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, float)
        flat = {
            normalize: moment_choice.negligible_row_offsets(
                *((unit_rows(X), unit_rows(Y)) if normalize else (X, Y)), w
            )
            for normalize in {option["normalize"] for option in options}
        }
        kept = [o for o in options if o["center"] or not flat[o["normalize"]]] or options
        if hits is None:
            hits = {}
        if len(kept) == 1:
            return kept[0], {}
        folds = holdout.holdout_folds(len(X), self.random_state)
        if folds is None:
            return None, {}
        held = folds[0]
        keep = np.setdiff1d(np.arange(len(X)), held)
        # One QR per side of every row (kept rows first) for every candidate and the final
        # fit (kept in self._split for fit).
        split = SplitRows(X, Y, w, keep, held)
        norms = np.linalg.norm(split.held_y, axis=1)
        norms[norms == 0] = 1.0
        scores = {}
        for option in kept:
            solver = self._solver_options(X.shape[1], Y.shape[1], len(keep), option)
            shape = {"center": option["center"], "normalize": option["normalize"]}
            stats = candidate_stats(split.kept, **shape)
            # A score, not the map: float32 halves the candidates' solves.
            products = whitened_held_products(split, stats, **shape, **solver, dtype=np.float32)
            label = holdout.params_label(option)
            hits[label] = holdout.top1_hits(products / norms, Y[held])
            scores[label] = [float(np.mean(hits[label]))]
        self._split = split
        by_label = {holdout.params_label(o): o for o in kept}
        return by_label[holdout.pick(scores)], {k: v[0] for k, v in scores.items()}

    def _choose_from_moments(self, options, X, Y, sample_weight, hits=None):
        return moment_choice.choose_from_moments(
            self,
            X,
            Y,
            sample_weight,
            options,
            prepare=lambda option: (
                option["normalize"],
                unit_rows if option["normalize"] else (lambda rows: rows),
            ),
            solve=self._candidate_map,
            statistics=self.__dict__.setdefault("_statistics", {}),
            hits=hits,
        )

    def _solver_options(self, d_x, d_y, n_rows, option=None):
        """The multi-step parameters (the settings in force, or a candidate ``option``'s
        ``whiten`` and ``dewhiten``), and the rank tolerance (rounding level of the
        statistics of ``n_rows`` rows of widths ``d_x``, ``d_y``)."""
        option = option or {}
        return {
            "whiten": bool(option.get("whiten", self._whiten())),
            "reweight": float(self.reweight),
            "dewhiten": option.get("dewhiten", self._dewhiten()),
            "n_components": self.n_components,
            "rtol": np.finfo(np.float64).eps * max(d_x, d_y, np.sqrt(n_rows)),
        }

    def _multi_step(self, gram_x, gram_y, cross, n_rows):
        return multi_step_map(gram_x, gram_y, cross, **self._solver_options(*cross.shape, n_rows))

    def _candidate_map(self, stats, option):
        """The map of one candidate setting from centred statistics (see moment_choice):
        in float32 from :data:`~._core.holdout.WIDE_SOLVE` columns on (a score, not
        the map; the chosen setting is refitted in float64)."""
        if not option["center"]:
            stats = moment_choice.uncentred_stats(stats)
        cross = stats["cross"]
        W = multi_step_map(
            stats["gram_x"],
            stats["gram_y"],
            cross,
            **self._solver_options(*cross.shape, stats["weight"], option),
            dtype=holdout.scoring_dtype(min(cross.shape), cross),
        ).W
        if not option["center"]:
            return W, np.zeros(W.shape[1])
        return W, stats["mean_y"] - stats["mean_x"] @ W

    def _whiten(self):
        # Models saved before "auto" existed have no whiten_: they whitened.
        return bool(auto_choice.resolve(self.whiten, "whiten_", self, True))

    def _dewhiten(self):
        return auto_choice.resolve(self.dewhiten, "dewhiten_", self, "target")

    def _normalize(self):
        # The setting in force (models saved before "auto" existed have no normalize_).
        return bool(auto_choice.resolve(self.normalize, "normalize_", self, True))

    def _fit_wide(self, X, Y, sample_weight, center, normalize, split=None):
        """Fewer rows than dimensions: the same map, solved in the row space (from the
        factorisation of the ``"auto"`` choice, ``split``, when it made one)."""
        if split is None:
            stats = row_stats(self, X, Y, sample_weight, centered=center, normalize=normalize)
        else:
            stats = candidate_stats(split.whole(), normalize=normalize, center=center)
        d_x, d_y = stats.mean_x.shape[0], stats.mean_y.shape[0]
        self.W_, S = thin_whitened(stats, **self._solver_options(d_x, d_y, stats.n_rows))
        # As many values as the dense route gives: the directions the rows do not span
        # have singular value 0.
        k = min(d_x, d_y) if self.n_components is None else min(self.n_components, d_x, d_y)
        self.singular_values_ = np.concatenate([S, np.zeros(max(k - S.shape[0], 0))])[:k]
        self.n_components_ = int(k)
        self.mean_x_ = stats.mean_x.copy()
        self.mean_y_ = stats.mean_y.copy()
        self.n_samples_seen_ = stats.n_rows
        warn_if_few_pairs(self, self.n_samples_seen_, stacklevel=5)
        return self

    def _maps_unit_rows(self):
        """Whether ``transform`` maps into the space of Y's unit rows (see AlignedNeighbors)."""
        return self._normalize()

    def _affine_map(self):
        """The affine part, applied to X's rows after the (optional) normalisation."""
        return self.W_, self.mean_y_ - self.mean_x_ @ self.W_

    def transform(self, X):
        """Map X into Y's space: normalise the rows (if ``normalize``), then ``x W + b``.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask array of shape (n_samples, n_features_in_)
            Source embeddings.

        Returns
        -------
        ndarray of shape (n_samples, n_targets_)
            In X's float dtype (a lazy Dask array for Dask input).
        """
        if is_dask_collection(X):
            from ._core.dask import _as_dask_2d, dask_transform

            check_is_fitted(self)
            X = _as_dask_2d(X, "X")
            return dask_transform(self, unit_rows(X) if self._normalize() else X)
        X = self._validate_X(X)
        if self._normalize():
            X = unit_rows(X)
        A, b = self._affine_map()
        return apply_affine(X, A, b, self._compute_device())

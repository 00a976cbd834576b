"""Orthogonal Procrustes alignment between two embedding spaces."""

import numpy as np
import torch
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from ._core import auto_choice, holdout, moment_choice
from ._core.backend import apply_affine
from ._core.closed_form import ClosedFormAligner
from ._core.pair_stats import batch_moments
from ._core.polar import procrustes_from_cross
from ._core.row_space import RowStats, is_wide, thin_procrustes
from ._core.wide_choice import (
    SplitRows,
    candidate_stats,
    held_offset,
    procrustes_held_products,
)
from .metrics._anisotropy import warn_if_anisotropic

__all__ = ["OrthogonalProcrustesAligner", "procrustes_from_cross"]


class OrthogonalProcrustesAligner(ClosedFormAligner):
    """Map X's embedding space into Y's with an orthogonal matrix (Procrustes).

    Solves ``min_W ||s (X - m_x) W + m_y - Y||_F`` over orthogonal ``W`` (d_x, d_y) in
    closed form from the thin SVD of ``X^T Y``.  An orthogonal map keeps the new model's
    own geometry (angles and norms) while putting its embeddings where the old model's
    are.  Rectangular maps need no padding: when d_x < d_y, ``W`` has orthonormal rows and
    keeps norms; when d_x > d_y, it has orthonormal columns (a projection).

    Read more in docs/methods.md, section "Orthogonal Procrustes" ([1]_, [2]_).

    Parameters
    ----------
    center : "auto" or bool, default="auto"
        Subtract the (weighted) column means of X and Y before solving and add Y's mean back in
        ``transform`` (which stays a faithful map into Y's space).  No fixed setting is right for
        every pair of models: centring rescues anisotropic models, whose embeddings share one
        common direction, and can cost a little on others (:ref:`centring`).  ``"auto"`` decides
        at ``fit``, with ``scale``, by what a user measures: every candidate setting is fitted on
        the training rows less a held-out fold and scored by paired top-1 cosine retrieval
        (:meth:`score`) on the fold (five folds of up to 1,000 rows below 25,000 rows, one
        above), and the best is refitted on all rows.  This costs no extra pass over the data:
        the folds' maps are solved from the statistics of the one pass the fit makes (their SVDs
        in float32: they are only scored).  Wide data (fewer rows than columns) are scored on one
        fold in the row space; from 2,048 columns on with more rows, where one candidate's SVD
        costs as much as the fit, the candidates are fitted in the row space on a sample of half
        as many rows as columns (:ref:`scaling_up`).  When neither X nor Y has a common offset
        (``n |mean|^2`` below one hundredth of the sum of squared deviations) centring and scale
        change no cosine, and the first candidate, ``center=True, scale="spread"``, is taken
        unscored.  ``center_`` holds the choice; ``fit`` warns with
        :class:`~sklearn_compat.exceptions.AutoSettingWarning` and falls back to
        ``center=True, scale="spread"`` when there are fewer than 100 rows.  How the choice
        compares with every fixed setting on real pairs: :ref:`benchmarks`.  ``True``/``False``
        are used as given; ``fit`` then warns with
        :class:`~sklearn_compat.exceptions.AnisotropyWarning` when ``center=False`` meets a space
        whose :func:`~sklearn_compat.metrics.anisotropy` ``mean_norm`` exceeds one half.  Models
        saved with an explicit setting keep it when loaded.
    scale : "auto", "spread" or bool, default="auto"
        Isotropic scale ``s`` of the map.  ``"spread"``: ``s = ||Y_c||_F / ||X_c||_F``, so
        the mapped rows spread around Y's mean as much as Y's own rows do (``X_c``, ``Y_c``:
        the centred rows when centred, else the rows).  ``True``: the least-squares
        scale ``s = trace(S) / ||X_c||_F^2`` (Umeyama), which shrinks toward 0 as the fit
        worsens.  ``False``: ``s = 1``.  The scale decides how much weight the added-back
        mean has against the mapped deviations: without it a centred map of a space with
        a narrower spread sends every row close to Y's mean, and cosine retrieval against
        Y's rows collapses; where the spreads match, ``s = 1`` can be best.  ``"auto"``
        chooses among the three with ``center`` (see there; uncentred maps take ``"spread"``,
        since no scale changes an uncentred map's cosines); ``scale_mode_`` holds the choice.
        Cosines between mapped rows, and :class:`~sklearn_compat.neighbors.AlignedNeighbors`
        with its centred gallery, do not depend on it.

        .. versionchanged:: 0.1
           ``"spread"`` was added and made ``"auto"``'s fallback; models saved before it
           existed keep ``scale=False`` when loaded.
    allow_reflection : bool, default=True
        Allow ``det(W) = -1``.  Reflections are legitimate for embeddings (similarities
        are invariant to them); set False for rotations only (Kabsch).  Only square maps
        are affected: a rectangular map can always be completed into a rotation.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the cross product and transforms are computed.  The SVD of the small
        (d_x, d_y) matrix always runs in float64 on the CPU.
    random_state : int, RandomState instance or None, default=None
        Which training rows ``"auto"`` holds out: None takes evenly spaced rows (so the
        choice is reproducible and sorted input is sampled evenly), an int a seeded
        random sample.

    Attributes
    ----------
    W_ : ndarray of shape (n_features_in_, n_targets_)
        The orthogonal map, float64.
    mean_x_ : ndarray of shape (n_features_in_,)
        Weighted column means of X (zeros unless centred).
    mean_y_ : ndarray of shape (n_targets_,)
        Weighted column means of Y (zeros unless centred).
    scale_ : float
        Isotropic scale ``s`` (1.0 when the scale setting is False).
    center_ : bool
        The centring in force: the parameter, or what ``"auto"`` chose.
    scale_mode_ : {"spread", True, False}
        The scale setting in force: the parameter, or what ``"auto"`` chose.
    auto_scores_ : dict or None
        Held-out paired top-1 of each candidate setting that ``"auto"`` scored (empty
        when there was nothing to score, None for explicit settings).
    query_scores_ : dict or None
        Where ``"auto"`` scored its candidates from the statistics: paired top-1 of the
        held-out fold through each form of the query path (raw or centred cosine, with
        or without CSLS).  :class:`~sklearn_compat.neighbors.AlignedNeighbors` with its
        ``"auto"`` settings ranks by the form the default (CSLS in the map's own form) loses
        to by more than ``0.005`` there, if any (:ref:`query_path`).  None otherwise
        (explicit settings, wide data, nothing scored).
    singular_values_ : ndarray of shape (min(n_features_in_, n_targets_),)
        Singular values of the (centred, weighted) cross product ``X^T Y``, descending.
    n_samples_seen_ : int
        Rows seen by ``fit`` or by all ``partial_fit`` calls since the last ``fit``.
    n_features_in_ : int
        Width of X.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, when X was a DataFrame with string columns.

    See Also
    --------
    AffineAligner : unconstrained least-squares map.
    LambdaOrthAligner : affine map kept close to orthogonal by a tunable threshold.
    scipy.linalg.orthogonal_procrustes : the square, unweighted, uncentred special case.

    Notes
    -----
    ``fit`` accumulates the cross product ``X^T diag(w) Y`` over chunks of 65,536 rows,
    each GEMM in the input dtype on ``device`` (TF32 off), summed in float64.  Centred
    statistics shift every chunk by a rough mean of the first rows when that mean is
    larger than the rows' spread about it, so a float32 GEMM never sees a large common
    offset (the shortcut ``X^T Y - n m_x m_y^T`` cancels badly in float32 then); the
    small remaining offset is removed exactly in float64.  ``"auto"`` works on those
    centred statistics: the uncentred ones follow exactly in float64, and a held-out
    fold's statistics are subtracted from the whole set's (Chan's update run backwards).
    ``partial_fit`` merges batches with Chan et al.'s pairwise update, so a sequence of
    ``partial_fit`` calls gives the same map as one ``fit`` on all rows; ``"auto"`` is
    decided on the first batch and kept by the later ones (``center_``, ``scale_mode_``).
    Sample weights enter exactly (weighted means and ``X_c^T diag(w) Y_c``), so integer
    weights equal repeated rows.  NaN or infinity in the input are found from the statistics (no
    separate scan over the data) and reported like scikit-learn does.

    The fitted state is plain numpy arrays and builtins (also for a fit on a GPU), so a
    model pickles, and loads with skops trusting only this class:
    ``skops.io.load(path, trusted=["sklearn_compat.procrustes.OrthogonalProcrustesAligner"])``.

    When d_x != d_y, the map solves the problem with the smaller side zero-padded to
    the larger width; the scale is optimal for that problem.

    With fewer rows than dimensions (n < d_x or n < d_y), ``fit`` and ``partial_fit``
    solve in the row space (thin QR factors, an n x n SVD; no d x d matrix), and
    directions that no pair spans are left in place by the map (docs/methods.md, "Wide
    data").  Fewer pairs than ``min(d_x, d_y)`` (+1 when centred) warn with
    :class:`~sklearn_compat.UnderdeterminedFitWarning`.  When d_x > d_y,
    ``inverse_transform`` recovers the part of X that the map keeps.

    References
    ----------
    .. [1] Maystre, Ortega Gonzalez, Park, Dolga, Berariu, Zhao, Ciosek, "When Embedding
       Models Meet: Procrustes Bounds and Applications", arXiv:2510.13406, 2025.
    .. [2] Schonemann, "A generalized solution of the orthogonal Procrustes problem",
       Psychometrika 31, 1966.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import ortho_group
    >>> from sklearn_compat import OrthogonalProcrustesAligner
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 8))
    >>> Q = ortho_group.rvs(8, random_state=0)
    >>> aligner = OrthogonalProcrustesAligner().fit(X, X @ Q)
    >>> bool(np.allclose(aligner.W_, Q))
    True
    >>> aligner.score(X, X @ Q)
    1.0
    >>> Z = aligner.transform(X)
    >>> bool(np.allclose(aligner.inverse_transform(Z), X))
    True
    """

    _parameter_constraints: dict = {
        "center": ["boolean", StrOptions({"auto"})],
        "scale": ["boolean", StrOptions({"spread", "auto"})],
        "allow_reflection": ["boolean"],
        "device": [str, torch.device],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        center="auto",
        scale="auto",
        allow_reflection=True,
        device="auto",
        random_state=None,
    ):
        self.center = center
        self.scale = scale
        self.allow_reflection = allow_reflection
        self.device = device
        self.random_state = random_state

    # The settings in force: the fitted choice where the parameter is "auto".
    def _center(self):
        return auto_choice.resolve(self.center, "center_", self, True)

    def _scale(self):
        return auto_choice.resolve(self.scale, "scale_mode_", self, "spread")

    def _update(self, X, Y, sample_weight, *, reset):
        if not reset:
            return super()._update(X, Y, sample_weight, reset=False)
        for name in ("center_", "scale_mode_", "auto_scores_", "query_scores_"):
            self.__dict__.pop(name, None)
        candidates = self._auto_candidates()
        self.query_scores_ = None
        if candidates is None:
            self.center_, self.scale_mode_ = self._center(), self._scale()
            self.auto_scores_ = None
            return super()._update(X, Y, sample_weight, reset=True)
        sample = holdout.wide_solve_sample(X, Y, sample_weight, self.random_state)
        if sample is not None:
            # Wide solves, more rows than columns: candidates scored in the row space on a
            # sample of rows, the chosen setting fitted on every row.
            self._resolve_in_row_space(X, Y, sample_weight, candidates, sample=sample)
            self.__dict__.pop("_split", None)
            return super()._update(X, Y, sample_weight, reset=True)
        if is_wide(X, Y, sample_weight):
            # Fewer rows than dimensions: no (d_x, d_y) statistic is formed, so the
            # candidates are scored by row-space fits on the kept rows.
            self._resolve_in_row_space(X, Y, sample_weight, candidates)
            split = self.__dict__.pop("_split", None)
            if split is None:
                return super()._update(X, Y, sample_weight, reset=True)
            # The choice factored every row: the final fit centres that factorisation.
            stats = candidate_stats(split.whole(), normalize=False, center=self.center_)
            return self._fit_row_stats(stats, X, Y)
        rows = (X, Y, sample_weight)
        if not isinstance(X, np.ndarray):
            # Held-out rows are read by index: array-likes, tensors and Dask arrays are
            # validated (and Dask row sizes made known) first; the fit reads the input as
            # given (its column names).
            rows = auto_choice.checked_input(self, X, Y, sample_weight)
        moments, n_rows = batch_moments(
            self, X, Y, sample_weight, reset=True, centered=True, need_sq_y=True
        )
        if moments.weight <= 0:
            raise ValueError("sample_weight sums to zero: there is nothing to fit.")
        query = None
        if moment_choice.negligible_offsets(moments):
            # Neither side has a common offset: centring and scale change no cosine.
            choice, self.auto_scores_ = candidates[0], {}
        else:
            choice, self.auto_scores_, query = moment_choice.choose_procrustes_setting(
                self, moments, *rows, candidates, self._candidate_map
            )
        self.query_scores_ = query
        if choice is None:
            choice = candidates[0]
            auto_choice.warn_undecided(
                type(self).__name__,
                f"{n_rows} rows, fewer than the {holdout.MIN_ROWS} needed for a held-out slice",
                f"center={choice[0]}, scale={choice[1]!r}",
            )
        elif moment_choice.constant_side(moments):
            auto_choice.warn_undecided(
                type(self).__name__,
                "every column of X or of Y is constant",
                f"center={choice[0]}, scale={choice[1]!r}",
            )
        self.center_, self.scale_mode_ = choice
        if not self.center_:
            moments = moment_choice.uncentred(moments)
        self._solve(moments, n_rows)
        self._moments_state = vars(moments).copy()
        self.n_samples_seen_ = n_rows
        return self

    def _resolve_in_row_space(self, X, Y, sample_weight, candidates, sample=None):
        """Set ``center_``, ``scale_mode_`` (and ``auto_scores_``) from row-space fits of
        the candidates, on the rows ``sample`` only when given."""
        chooser = self._choose_wide
        if sample is not None:
            chooser = auto_choice.sampled_chooser(chooser, sample)
        auto_choice.resolve_by_refit(
            self,
            X,
            Y,
            {"center": "center_", "scale": "scale_mode_"},
            [{"center": c, "scale": s} for c, s in candidates],
            {"center": candidates[0][0], "scale": candidates[0][1]},
            sample_weight=sample_weight,
            chooser=chooser,
        )

    def _choose_wide(self, options, X, Y, sample_weight):
        """``"auto"`` on wide data: one held-out fold, one row-space solve per centring on
        the kept rows, scored by paired top-1.  Every row is factored once (kept rows
        first, :class:`~._core.wide_choice.SplitRows`): the candidates use the leading
        blocks, the held-out rows are scored in the reduced coordinates, and the final
        fit reuses the factorisation (kept in ``self._split`` for ``_update``)."""
        X, Y = holdout.all_rows(X), holdout.all_rows(Y)
        w = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, float)
        folds = holdout.holdout_folds(len(X), self.random_state)
        if folds is None:
            return None, {}
        if moment_choice.negligible_row_offsets(X, Y, w):
            # Neither side has a common offset: centring and scale change no cosine.
            return options[0], {}
        held = folds[0]
        keep = np.setdiff1d(np.arange(len(X)), held)
        split = SplitRows(X, Y, w, keep, held)
        target_norms = np.linalg.norm(split.held_y, axis=1)
        target_norms[target_norms == 0] = 1.0
        scores = {}
        for center in dict.fromkeys(option["center"] for option in options):
            stats = candidate_stats(split.kept, normalize=False, center=center)
            means = held_offset(split, normalize=False, center=center)
            products, values, signs = procrustes_held_products(
                split,
                stats,
                means[0],
                allow_reflection=self.allow_reflection,
                dtype=np.float32,  # a score, not the map: float32 halves the choice
            )
            offset = split.held_y[:, : split.kept.y.L.shape[1]] @ means[1] if center else 0.0
            svd = (None, values, signs)
            if products is None:  # only the formed map can say (see procrustes_mapped)
                svd = thin_procrustes(stats, allow_reflection=self.allow_reflection)
                products = ((X[held] - stats.mean_x) @ svd[0]) @ Y[held].T
                offset = Y[held] @ stats.mean_y
            for option in options:
                if option["center"] == center:
                    scale = self._fit_map(stats, option["scale"], svd)[2]
                    label = moment_choice.label((center, option["scale"]))
                    sims = (scale * products + offset) / target_norms
                    scores[label] = [holdout.top1_of_similarities(sims, Y[held])]
        self._split = split
        by_label = {moment_choice.label((o["center"], o["scale"])): o for o in options}
        return by_label[holdout.pick(scores)], {k: v[0] for k, v in scores.items()}

    def _auto_candidates(self):
        """(center, scale) settings to choose from, preferred first; None: nothing to choose.

        Without centring the scale changes no cosine, so ``"spread"`` is taken unscored.
        """
        centers = [True, False] if self.center == "auto" else [self.center]
        scales = ["spread", True, False] if self.scale == "auto" else [self.scale]
        candidates = [(c, s) for c in centers for s in (scales if c else scales[:1])]
        return candidates if len(candidates) > 1 else None

    def _candidate_map(self, moments, center, cache, dtype=np.float64):
        if center not in cache:
            cache[center] = procrustes_from_cross(
                moments.cross, allow_reflection=self.allow_reflection, dtype=dtype
            )
        svd = cache[center]
        return svd[0], lambda scale: self._fit_map(moments, scale, svd)[2]

    def _fit_map(self, moments, scale, svd=None):
        """``(W, singular values, s)`` from the statistics (``svd``: their SVD, if known)."""
        if svd is None and isinstance(moments, RowStats):
            svd = thin_procrustes(moments, allow_reflection=self.allow_reflection)
        W, S, signs = svd or procrustes_from_cross(
            moments.cross, allow_reflection=self.allow_reflection
        )
        scale_factor = 1.0
        if scale == "spread":
            if moments.sq_x > 0:
                # A constant Y's spread, taken from a fold's statistics, may round below 0.
                scale_factor = float(np.sqrt(max(moments.sq_y, 0.0) / moments.sq_x))
        elif scale and moments.sq_x > 0:
            scale_factor = float(np.dot(signs, S) / moments.sq_x)
        return W, S, scale_factor

    def _check_fit_inputs(self, X, Y):
        if self.center is False:
            warn_if_anisotropic(
                {"X": X, "Y": Y},
                estimator=type(self).__name__,
                fix="center=True",
                consequence="an uncentred orthogonal map mostly matches the two spaces' "
                "means and retrieves poorly",
                stacklevel=6,
            )

    def _solves_wide(self):
        return True

    def _moment_options(self):
        # Uncentred fits need no means; ||X||^2 and ||Y||^2 only serve the scale.
        center, scale = self._center(), self._scale()
        return {
            "centered": center,
            "need_means": center,
            "need_sq_x": scale is not False,
            "need_sq_y": scale == "spread",
        }

    def _check_continuation(self, previous):
        center, scale = self._center(), self._scale()
        if previous.centered != center:
            raise ValueError(
                f"center was {previous.centered} in earlier partial_fit calls and is "
                f"{center} now; call fit to start over."
            )
        if (scale is not False and np.isnan(previous.sq_x)) or (
            scale == "spread" and np.isnan(previous.sq_y)
        ):
            raise ValueError(
                f"scale={scale!r} needs sums of squares that earlier partial_fit calls "
                "did not collect (they ran with another scale); call fit to start over."
            )

    def _solve(self, moments, n_samples_seen, svd=None):
        W, S, scale = self._fit_map(moments, self._scale(), svd)
        if self._center():
            self.mean_x_ = moments.mean_x.copy()
            self.mean_y_ = moments.mean_y.copy()
        else:
            self.mean_x_ = np.zeros(W.shape[0])
            self.mean_y_ = np.zeros(W.shape[1])
        self.W_ = W
        self.scale_ = scale
        self.singular_values_ = S

    def _affine_map(self):
        A = self.scale_ * self.W_
        return A, self.mean_y_ - self.mean_x_ @ A

    def inverse_transform(self, Z):
        """Map embeddings from Y's space back into X's space.

        Uses ``W^T / scale_``, the exact inverse when d_x == d_y.  When d_x < d_y it
        recovers X exactly from ``transform(X)``; when d_x > d_y it is the least-squares
        (pseudo-) inverse and recovers the part of X that the map keeps.

        Parameters
        ----------
        Z : array-like or torch.Tensor of shape (n_samples, n_targets_)
            Embeddings in Y's space, e.g. the output of ``transform``.

        Returns
        -------
        ndarray of shape (n_samples, n_features_in_)
            In Z's float dtype.
        """
        check_is_fitted(self)
        Z = self._validate_target(Z, name="Z")
        if self.scale_ == 0:
            raise ValueError("The fitted scale_ is 0, so the map has no inverse.")
        A = self.W_.T / self.scale_
        return apply_affine(Z, A, self.mean_x_ - self.mean_y_ @ A, self._compute_device())

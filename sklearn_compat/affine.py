"""Affine (least-squares / ridge) alignment between two embedding spaces."""

from numbers import Integral, Real

import numpy as np
import scipy.linalg
import torch
from sklearn.base import clone
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._core import auto_choice, moment_choice
from ._core.backend import apply_affine
from ._core.closed_form import ClosedFormAligner
from ._core.moments import PairMoments
from ._core.row_space import RowStats, is_wide, thin_ridge

__all__ = ["AffineAligner", "least_squares_from_gram"]


def least_squares_from_gram(gram, cross, alpha=0.0, *, rtol=None):
    """Solve the (ridge) normal equations ``(G + alpha I) W = C`` in float64.

    Parameters
    ----------
    gram : ndarray of shape (d_x, d_x)
        ``G = X^T X`` (centred and weighted as the caller wants).
    cross : ndarray of shape (d_x, d_y)
        ``C = X^T Y``.
    alpha : float, default=0.0
        Ridge penalty; ``np.inf`` gives ``W = 0``.
    rtol : float, default=None
        Relative cut-off on the eigenvalues of ``G + alpha I``: directions whose eigenvalue
        is at most ``rtol * largest`` are treated as exactly singular.  ``None`` means
        ``d_x * eps``, the tolerance :func:`numpy.linalg.matrix_rank` uses for ``G``.

    Returns
    -------
    W : ndarray of shape (d_x, d_y), float64
        The ridge solution; for ``alpha=0`` the minimum-norm least-squares solution, the
        answer of :func:`numpy.linalg.lstsq` even when X is rank deficient.

    Notes
    -----
    With ``alpha > 0`` a Cholesky factorisation of ``G + alpha I`` is tried first (it is
    the cheapest and, for a penalty above the rounding level of ``G``, safe).  Otherwise,
    and whenever Cholesky fails, ``G`` is diagonalised with ``eigh`` and
    ``W = V diag(1 / (lambda + alpha)) V^T C`` over the eigenvalues above the cut-off.
    Since ``pinv(X) = pinv(X^T X) X^T``, this truncated inverse of the Gram gives the
    minimum-norm least-squares answer when ``alpha = 0``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.affine import least_squares_from_gram
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.normal(size=(50, 3)), rng.normal(size=(50, 2))
    >>> W = least_squares_from_gram(X.T @ X, X.T @ Y)
    >>> bool(np.allclose(W, np.linalg.lstsq(X, Y, rcond=None)[0]))
    True
    >>> ridge = least_squares_from_gram(X.T @ X, X.T @ Y, alpha=10.0)
    >>> bool(np.allclose(ridge, np.linalg.solve(X.T @ X + 10 * np.eye(3), X.T @ Y)))
    True
    """
    gram = np.asarray(gram, dtype=np.float64)
    cross = np.asarray(cross, dtype=np.float64)
    d_x = gram.shape[0]
    if not np.isfinite(alpha):
        return np.zeros_like(cross)
    if alpha > 0:
        try:
            factor = scipy.linalg.cho_factor(
                gram + alpha * np.eye(d_x), lower=True, check_finite=False
            )
            return scipy.linalg.cho_solve(factor, cross, check_finite=False)
        except np.linalg.LinAlgError:
            pass  # alpha is below G's rounding level: the eigen route copes with that
    if rtol is None:
        rtol = d_x * np.finfo(np.float64).eps
    evals, evecs = scipy.linalg.eigh(gram, check_finite=False)
    evals = evals + alpha
    if d_x == 0 or evals[-1] <= 0:
        return np.zeros_like(cross)
    keep = evals > rtol * evals[-1]
    V = evecs[:, keep]
    return V @ ((V.T @ cross) / evals[keep][:, None])


class AffineAligner(ClosedFormAligner):
    """Map X's embedding space into Y's with an affine map fitted by least squares.

    Solves ``min_{W, b} sum_i w_i ||x_i W + b - y_i||^2 + alpha ||W||_F^2`` in closed
    form from the sufficient statistics of the rows.  Of the aligners it fits Y's
    distribution best, at the price of distorting X's own geometry most (see
    :class:`OrthogonalProcrustesAligner` for the opposite end).

    Read more in docs/methods.md, section "Affine and ridge alignment".

    Parameters
    ----------
    fit_intercept : "auto" or bool, default="auto"
        Fit the bias ``b`` (the data are centred), or not (``b = 0``).  ``"auto"`` decides
        at ``fit`` by paired top-1 cosine retrieval on held-out training rows (five folds
        of up to 1,000 rows, each map solved from the statistics of the other rows, so no
        refit), then fits on all rows with the winner; ``fit_intercept_`` holds it.
        Neither is right everywhere: the bias can cost raw-gallery retrieval on one pair of
        models and gain on another (:ref:`centring`).  Fewer than 100 rows: ``True``, with
        an :class:`~sklearn_compat.exceptions.AutoSettingWarning`.  With
        ``partial_fit``, ``"auto"`` is decided on the first batch.
    alpha : float, default=0.0
        Ridge penalty on ``W`` (not on the intercept, as in
        :class:`sklearn.linear_model.Ridge`).  Like Ridge's, it is added to a Gram matrix
        that is a *sum* over rows, so its effect shrinks as more rows are seen.
        ``alpha=0`` gives the minimum-norm least-squares solution, well defined even when
        X is rank deficient (fewer rows than features, duplicated columns).
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the Gram and cross products and the transforms are computed.  The small
        (d_x, d_x) solve always runs in float64 on the CPU.
    rank : int or None, default=None
        Constrain ``W`` to this rank: reduced-rank regression (Izenman, 1975), the
        low-rank affine adapter of Drift-Adapter (Vejendla, EMNLP 2025).  The least-squares
        ``W`` is projected onto the ``rank`` leading principal directions of its fitted
        values ``X_c W``, which is the best rank-``rank`` fit in squared error.  ``None``
        keeps full rank.
    random_state : int, RandomState instance or None, default=None
        Which training rows ``"auto"`` holds out: None takes evenly spaced rows (the
        choice is reproducible), an int a seeded random sample.

    Attributes
    ----------
    W_ : ndarray of shape (n_features_in_, n_targets_)
        The linear part, float64.
    bias_ : ndarray of shape (n_targets_,)
        The intercept (zeros unless an intercept was fitted), float64.
    fit_intercept_ : bool
        Whether the intercept was fitted: the parameter, or what ``"auto"`` chose.

        .. versionchanged:: 0.1.0
           Formerly recorded as ``center_``, which stays readable (an alias) and is
           read from models saved under that name.
    center_ : bool
        Alias of ``fit_intercept_``, the name other aligners give their centring.
    auto_scores_ : dict or None
        Held-out paired top-1 of each candidate that ``"auto"`` scored (None otherwise).
    n_samples_seen_ : int
        Rows seen by ``fit`` or all ``partial_fit`` calls.
    n_features_in_ : int
        Width of X.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, when X was a DataFrame with string columns.

    See Also
    --------
    OrthogonalProcrustesAligner : the orthogonal map (keeps X's geometry).
    LambdaOrthAligner : affine map kept close to orthogonal by a tunable threshold.
    sklearn.linear_model.Ridge : the same estimate, as a regressor.

    Notes
    -----
    The estimate comes from the normal equations: ``fit`` accumulates the weighted means,
    the centred Gram matrix ``X_c^T diag(w) X_c`` and the cross product
    ``X_c^T diag(w) Y_c`` chunk by chunk and merges the chunks exactly (Chan et al.), so
    ``partial_fit`` on batches gives the same map as ``fit`` on all rows, and Dask arrays
    are reduced blockwise on the cluster.  The intercept is then
    ``b = mean_y - mean_x W``.

    The normal equations square the condition number of X.  They are therefore always
    accumulated and solved in float64, also for float32 input (float32 is only the
    transform's dtype): the error of the normal equations grows like ``eps * cond(X)**2``,
    which float32's ``eps`` makes large from a condition number of about 1e3 on, and
    float64's keeps near :func:`numpy.linalg.lstsq`'s well beyond.  Directions whose
    eigenvalue of the Gram matrix lies below ``eps * max(n_features_in_,
    sqrt(n_samples_seen_))`` times the largest are at the rounding level of the Gram and
    treated as exactly singular (they get no weight, which is what makes rank-deficient X
    give the minimum-norm answer); that cut-off sits near cond(X) ~ 1e6.  For X worse
    conditioned than that, whiten or reduce X first, or use ``alpha > 0``.

    With fewer rows than X has columns (and ``rank=None``), ``fit`` solves in the row
    space instead: ``X_c^T (X_c X_c^T + alpha I)^-1 Y_c`` from thin QR factors, the same
    answer with n x n algebra.  Without ridge, fewer pairs than ``max(d_x, d_y)`` (+1
    with an intercept) warn with :class:`~sklearn_compat.UnderdeterminedFitWarning`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat import AffineAligner
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 6))
    >>> A, b = rng.normal(size=(6, 4)), rng.normal(size=4)
    >>> aligner = AffineAligner().fit(X, X @ A + b)
    >>> bool(np.allclose(aligner.W_, A)), bool(np.allclose(aligner.bias_, b))
    (True, True)
    >>> aligner.transform(X[:2]).shape
    (2, 4)
    """

    _parameter_constraints: dict = {
        "fit_intercept": ["boolean", StrOptions({"auto"})],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "device": [str, torch.device],
        "rank": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": ["random_state"],
    }

    def __init__(
        self, fit_intercept="auto", alpha=0.0, device="auto", rank=None, random_state=None
    ):
        self.fit_intercept = fit_intercept
        self.alpha = alpha
        self.device = device
        self.rank = rank
        self.random_state = random_state

    def _update(self, X, Y, sample_weight, *, reset):
        if reset:
            # fit_intercept="auto" (and the first partial_fit batch) decides fit_intercept_:
            # from (d_x, d_x) moments, or on wide data (no such statistic is formed) by
            # refits in the row space.
            wide = self._solves_wide() and is_wide(X, Y, sample_weight)
            auto_choice.resolve_by_refit(
                self,
                X,
                Y,
                {"fit_intercept": "fit_intercept_"},
                [{"fit_intercept": True}, {"fit_intercept": False}],
                {"fit_intercept": True},
                sample_weight=sample_weight,
                chooser=None if wide else self._choose_from_moments,
            )
        return super()._update(X, Y, sample_weight, reset=reset)

    def _choose_from_moments(self, options, X, Y, sample_weight):
        return moment_choice.choose_from_moments(
            self,
            X,
            Y,
            sample_weight,
            options,
            prepare=lambda option: ("raw", lambda rows: rows),
            solve=self._candidate_map,
        )

    def _candidate_map(self, stats, option):
        """The map of one candidate setting from centred statistics (see moment_choice)."""
        centered = option["fit_intercept"]
        stats = stats if centered else moment_choice.uncentred_stats(stats)
        moments = PairMoments(
            weight=stats["weight"],
            mean_x=stats["mean_x"],
            mean_y=stats["mean_y"],
            cross=stats["cross"],
            sq_x=float("nan"),
            gram_x=stats["gram_x"],
            centered=centered,
        )
        candidate = clone(self).set_params(**option)
        candidate._solve(moments, int(stats["weight"]))
        return candidate._affine_map()

    def _fit_intercept(self):
        return bool(auto_choice.resolve(self.fit_intercept, "fit_intercept_", self, True))

    @property
    def center_(self):
        """Alias of ``fit_intercept_`` (whether the map was fitted to centred rows)."""
        try:
            return self.__dict__["fit_intercept_"]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no attribute 'center_' (it is not fitted)"
            ) from None

    def __setstate__(self, state):
        # Models saved before fit_intercept_ existed recorded the choice as center_.
        if "center_" in state:
            state = dict(state)
            state.setdefault("fit_intercept_", state.pop("center_"))
        super().__setstate__(state)

    def _moment_options(self):
        # The normal equations square the condition number of X: float64 statistics.
        return {"centered": self._fit_intercept(), "need_gram": True, "stats_dtype": np.float64}

    def _check_continuation(self, previous):
        if previous.centered != self._fit_intercept():
            raise ValueError(
                "fit_intercept was changed between partial_fit calls; call fit to start over."
            )

    def _solves_wide(self):
        return self.rank is None

    def _solve(self, moments, n_samples_seen):
        d_x = moments.mean_x.shape[0]
        rtol = np.finfo(np.float64).eps * max(d_x, np.sqrt(n_samples_seen))
        if isinstance(moments, RowStats):
            W = thin_ridge(moments, self.alpha, rtol)
        else:
            W = least_squares_from_gram(moments.gram_x, moments.cross, self.alpha, rtol=rtol)
        if self.rank is not None and self.rank < min(W.shape):
            # Principal directions of the fitted values X_c W (their covariance W^T G W).
            _, evecs = scipy.linalg.eigh(W.T @ moments.gram_x @ W, check_finite=False)
            V = evecs[:, ::-1][:, : self.rank]
            W = (W @ V) @ V.T
        if self._fit_intercept():
            bias = moments.mean_y - moments.mean_x @ W
        else:
            bias = np.zeros(W.shape[1])
        self.W_ = W
        self.bias_ = bias

    def _affine_map(self):
        return self.W_, self.bias_

    def inverse_transform(self, Z):
        """Map embeddings from Y's space back into X's space (pseudo-inverse).

        Returns ``(Z - bias_) @ pinv(W_)``: the least-squares preimage of each row.  When
        ``W_`` has rank ``n_features_in_`` (which needs d_x <= d_y), this undoes
        ``transform`` exactly; otherwise it returns the minimum-norm preimage.

        Parameters
        ----------
        Z : array-like of shape (n_samples, n_targets_)
            Embeddings in Y's space, e.g. the output of ``transform``.

        Returns
        -------
        ndarray of shape (n_samples, n_features_in_)
        """
        check_is_fitted(self)
        Z = self._validate_target(Z, name="Z")
        # scipy's default cut-off (max(d_x, d_y) * eps relative) drops only rounding noise.
        P = scipy.linalg.pinv(self.W_)
        return apply_affine(Z, P, -self.bias_ @ P, self._compute_device())

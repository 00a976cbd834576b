"""Orthogonal Procrustes alignment between two embedding spaces."""

import numpy as np
import scipy.linalg
import torch
from sklearn.base import _fit_context
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from ._backend import resolve_device
from ._base import BaseAligner, apply_affine, pick_target
from ._moments import PairMoments, compute_moments

__all__ = ["OrthogonalProcrustesAligner", "procrustes_from_cross"]


def procrustes_from_cross(cross, *, allow_reflection=True):
    """Orthogonal factor of ``cross = X^T Y``: ``W = U V^T`` from its thin SVD.

    Parameters
    ----------
    cross : ndarray of shape (d_x, d_y)
        The (optionally centred and weighted) cross product ``X^T Y``.
    allow_reflection : bool, default=True
        When False and the map is square, flip the last singular direction if needed so
        that ``det(W) = +1`` (Kabsch).  Rectangular maps have no determinant; the flag
        has no effect on them.

    Returns
    -------
    W : ndarray of shape (d_x, d_y), float64
        Orthonormal columns when d_x <= d_y, orthonormal rows otherwise.
    singular_values : ndarray of shape (min(d_x, d_y),)
    signs : ndarray of shape (min(d_x, d_y),)
        +1, or -1 for the flipped direction; ``sum(signs * singular_values)`` is the
        trace that the optimal isotropic scale is computed from.
    """
    cross = np.asarray(cross, dtype=np.float64)
    try:
        U, S, Vt = scipy.linalg.svd(cross, full_matrices=False, lapack_driver="gesdd")
    except np.linalg.LinAlgError:
        # gesdd occasionally fails to converge on badly scaled input; gesvd is slower
        # but robust.
        U, S, Vt = scipy.linalg.svd(cross, full_matrices=False, lapack_driver="gesvd")
    signs = np.ones_like(S)
    square = cross.shape[0] == cross.shape[1]
    if not allow_reflection and square and np.linalg.det(U) * np.linalg.det(Vt) < 0:
        signs[-1] = -1.0
    return (U * signs) @ Vt, S, signs


class OrthogonalProcrustesAligner(BaseAligner):
    """Map X's embedding space into Y's with an orthogonal matrix (Procrustes).

    Solves ``min_W ||s (X - m_x) W + m_y - Y||_F`` over matrices ``W`` (d_x, d_y) with
    orthonormal columns (d_x <= d_y) or rows (d_x > d_y), in closed form from the thin
    SVD of ``X^T Y``.  An orthogonal map keeps the new model's own geometry (angles and,
    when d_x <= d_y, norms) while putting its embeddings where the old model's are.

    Read more in METHODS.md, section 1.

    Parameters
    ----------
    center : bool, default=False
        Subtract the (weighted) column means of X and Y before solving and add Y's mean
        back in ``transform``.  Off by default: on real text embedding pairs the
        uncentred map often retrieves better, since norms and offsets carry signal.
    scale : bool, default=False
        Also fit an isotropic scale ``s = trace(S) / ||X_c||_F^2``.
    allow_reflection : bool, default=True
        Allow ``det(W) = -1``.  Reflections are legitimate for embeddings (similarities
        are invariant to them); set False for rotations only (square maps).
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the cross product and transforms are computed.  The SVD of the small
        (d_x, d_y) matrix always runs in float64 on the CPU.

    Attributes
    ----------
    W_ : ndarray of shape (n_features_in_, n_targets_)
        The orthogonal map, float64.
    mean_x_ : ndarray of shape (n_features_in_,)
        Column means of X (zeros unless ``center``).
    mean_y_ : ndarray of shape (n_targets_,)
        Column means of Y (zeros unless ``center``).
    scale_ : float
        Isotropic scale (1.0 unless ``scale``).
    singular_values_ : ndarray of shape (min(n_features_in_, n_targets_),)
        Singular values of the (centred, weighted) cross product ``X^T Y``.
    n_samples_seen_ : int
        Rows seen by ``fit`` or all ``partial_fit`` calls.
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
    ``fit`` accumulates the weighted means and the centred cross product chunk by chunk
    with the GEMM in the input dtype on ``device`` (TF32 off), and merges the chunks with
    Chan et al.'s pairwise update; ``partial_fit`` merges batches the same way, so a
    sequence of ``partial_fit`` calls gives the same map as one ``fit`` on all rows.

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
    """

    _parameter_constraints: dict = {
        "center": ["boolean"],
        "scale": ["boolean"],
        "allow_reflection": ["boolean"],
        "device": [str, torch.device],
    }

    def __init__(self, center=False, scale=False, allow_reflection=True, device="auto"):
        self.center = center
        self.scale = scale
        self.allow_reflection = allow_reflection
        self.device = device

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, Y=None, sample_weight=None, *, y=None):
        """Fit the orthogonal map from paired rows.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Source embeddings (the space to map from).
        Y : array-like or torch.Tensor of shape (n_samples, n_targets)
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
        for attr in ("_moments_state", "n_samples_seen_"):
            self.__dict__.pop(attr, None)
        return self._update(X, pick_target(Y, y), sample_weight, reset=True)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, Y=None, sample_weight=None, *, y=None):
        """Update the map with a batch of paired rows.

        The sufficient statistics of all batches so far are merged exactly, so the result
        equals ``fit`` on the concatenation of the batches.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Source embeddings.
        Y : array-like or torch.Tensor of shape (n_samples, n_targets)
            Target embeddings of the same items.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights.
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.

        Returns
        -------
        self : object
            Updated aligner.
        """
        first = not hasattr(self, "_moments_state")
        return self._update(X, pick_target(Y, y), sample_weight, reset=first)

    def _update(self, X, Y, sample_weight, *, reset):
        X, Y = self._validate_pair(X, Y, reset=reset)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=X.dtype, ensure_non_negative=True
            )
        device = resolve_device(self.device)
        batch = compute_moments(X, Y, sample_weight, centered=self.center, device=device)
        if not reset:
            previous = PairMoments(**self._moments_state)
            if previous.centered != self.center:
                raise ValueError(
                    "center was changed between partial_fit calls; call fit to start over."
                )
            batch = previous.merge(batch)
        if batch.weight <= 0:
            raise ValueError("sample_weight sums to zero: there is nothing to fit.")
        self._moments_state = vars(batch).copy()
        self.n_samples_seen_ = X.shape[0] + (0 if reset else self.n_samples_seen_)
        self._solve(batch)
        return self

    def _solve(self, moments):
        W, S, signs = procrustes_from_cross(moments.cross, allow_reflection=self.allow_reflection)
        if self.scale:
            scale = float(np.dot(signs, S) / moments.sq_x) if moments.sq_x > 0 else 1.0
        else:
            scale = 1.0
        if self.center:
            self.mean_x_ = moments.mean_x.copy()
            self.mean_y_ = moments.mean_y.copy()
        else:
            self.mean_x_ = np.zeros_like(moments.mean_x)
            self.mean_y_ = np.zeros_like(moments.mean_y)
        self.W_ = W
        self.scale_ = scale
        self.singular_values_ = S

    def _affine_map(self):
        A = self.scale_ * self.W_
        return A, self.mean_y_ - self.mean_x_ @ A

    def inverse_transform(self, Z):
        """Map embeddings from Y's space back into X's space.

        Uses ``W^T``, which is the exact inverse when d_x == d_y and the least-squares
        (pseudo-) inverse otherwise.

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
        if self.scale_ == 0:
            raise ValueError("The fitted scale_ is 0, so the map has no inverse.")
        A = self.W_.T / self.scale_
        return apply_affine(Z, A, self.mean_x_ - self.mean_y_ @ A, self._compute_device())

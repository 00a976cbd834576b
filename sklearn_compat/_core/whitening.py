"""The multi-step linear map of Artetxe et al. (AAAI 2018) from sufficient statistics.

Everything here is small float64 linear algebra on (d, d) matrices: the covariances and the
cross product of the paired rows go in, the (d_x, d_y) map comes out.
"""

import numpy as np
import scipy.linalg

__all__ = ["MultiStepMap", "multi_step_map", "psd_power"]


def psd_power(C, power, *, rtol=None):
    """``C ** power`` of a symmetric positive semi-definite matrix (float64).

    Eigenvalues at or below ``rtol * largest`` count as exactly zero, so a negative power
    is the Moore-Penrose (pseudo-) power: rank-deficient covariances (fewer rows than
    features, duplicated columns) whiten the directions they have and drop the rest.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat._core.whitening import psd_power
    >>> psd_power(np.diag([4.0, 0.0]), -0.5)
    array([[0.5, 0. ],
           [0. , 0. ]])
    """
    C = np.asarray(C, dtype=np.float64)
    return _power_of(_eigh(C), power, rtol)


def _eigh(C):
    """Eigen-decomposition of the symmetric part of ``C`` (both powers of whitening share it)."""
    return scipy.linalg.eigh((C + C.T) / 2, check_finite=False)


def _power_of(eig, power, rtol):
    evals, evecs = eig
    d = evals.shape[0]
    if rtol is None:
        rtol = d * np.finfo(np.float64).eps
    if d == 0 or evals[-1] <= 0:
        return np.zeros((d, d), dtype=evecs.dtype)
    keep = evals > rtol * evals[-1]
    V = evecs[:, keep]
    return (V * evals[keep] ** power) @ V.T


def _svd(M):
    try:
        return scipy.linalg.svd(M, full_matrices=False, check_finite=False)
    except np.linalg.LinAlgError:
        # The divide-and-conquer driver can fail to converge on badly scaled input;
        # gesvd is slower but robust.
        return scipy.linalg.svd(M, full_matrices=False, lapack_driver="gesvd")


class MultiStepMap:
    """The pieces of the fitted map: ``W`` (d_x, d_y) and the singular values."""

    def __init__(self, W, singular_values):
        self.W = W
        self.singular_values = singular_values


def multi_step_map(
    gram_x, gram_y, cross, *, whiten, reweight, dewhiten, n_components, rtol, dtype=np.float64
):
    """The map ``x -> x W`` into Y's coordinates of Artetxe et al.'s framework.

    Steps (with ``C_x = X^T X``, ``C_y = Y^T Y``, ``C_xy = X^T Y``):

    1. whitening ``W_x1 = C_x^(-1/2)``, ``W_y1 = C_y^(-1/2)`` (identity if not ``whiten``);
    2. orthogonal mapping: ``W_x1 C_xy W_y1 = U S V^T`` (thin SVD; with whitening, ``S``
       are the canonical correlations);
    3. re-weighting of the source side by ``S ** reweight``;
    4. de-whitening of the source side by ``U^T C_x^(1/2) U`` ("source") or
       ``V^T C_y^(1/2) V`` ("target"), or not at all ("none");
    5. dimensionality reduction: the first ``n_components`` directions.

    The target side is left orthogonal (``V``, not re-weighted, de-whitened with respect
    to itself), so the shared space is a rotation of Y's own: ``W = W_x V_k^T`` maps into
    Y's coordinates and cosine retrieval against the raw Y rows equals retrieval in the
    shared space.

    ``dtype=np.float32`` runs the eigen- and singular-value problems in single precision
    (about half the time; eigenvalues below 1e-6 of the largest then count as zero, as
    float32's rounding reaches them): for candidate maps that are only scored.  The
    results are float64 either way.
    """
    if np.dtype(dtype) != np.float64:
        gram_x, gram_y = np.asarray(gram_x, dtype), np.asarray(gram_y, dtype)
        cross = np.asarray(cross, dtype)
        rtol = max(rtol or 0.0, 1e-6)
    eig_x = eig_y = None
    if whiten:
        eig_x = _eigh(np.asarray(gram_x, dtype=dtype))
        eig_y = _eigh(np.asarray(gram_y, dtype=dtype))
        Wx1 = _power_of(eig_x, -0.5, rtol)
        Wy1 = _power_of(eig_y, -0.5, rtol)
        M = Wx1 @ cross @ Wy1
    else:
        Wx1 = np.eye(gram_x.shape[0], dtype=dtype)
        M = np.asarray(cross, dtype=dtype)
    U, S, Vt = _svd(M)
    k = S.shape[0] if n_components is None else min(int(n_components), S.shape[0])
    U, S, V = U[:, :k], S[:k], Vt[:k].T
    source = Wx1 @ U
    if reweight:
        # Zero singular values stay zero whatever the power (0 ** 0 would give 1).
        source = source * np.where(S > 0, S, 0.0) ** reweight
    if whiten and dewhiten == "source":
        source = source @ (U.T @ _power_of(eig_x, 0.5, rtol) @ U)
    elif whiten and dewhiten == "target":
        source = source @ (V.T @ _power_of(eig_y, 0.5, rtol) @ V)
    return MultiStepMap((source @ V.T).astype(np.float64), S.astype(np.float64))

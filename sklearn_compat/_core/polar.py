"""The orthogonal factor of a cross product: the solve every Procrustes map shares."""

import numpy as np
import scipy.linalg
import torch

__all__ = ["procrustes_from_cross"]


def procrustes_from_cross(cross, *, allow_reflection=True, dtype=np.float64):
    """Orthogonal factor of ``cross = X^T Y``: ``W = U V^T`` from its thin SVD (float64).

    Parameters
    ----------
    cross : ndarray of shape (d_x, d_y)
        The (optionally centred and weighted) cross product ``X^T Y``.
    allow_reflection : bool, default=True
        When False and the map is square, flip the last singular direction if needed so
        that ``det(W) = +1`` (Kabsch).  A rectangular map is the restriction of a square
        one on the zero-padded problem, which can always be made a rotation by flipping a
        padded direction without changing the map, so the flag does not change it.
    dtype : numpy dtype, default=np.float64
        Precision of the SVD (float32: about half the time, for maps that are only
        scored); the results are float64 either way.

    Returns
    -------
    W : ndarray of shape (d_x, d_y), float64
        Orthonormal rows (``W W^T = I``, norms kept) when d_x <= d_y, orthonormal
        columns (``W^T W = I``, a projection) otherwise.
    singular_values : ndarray of shape (min(d_x, d_y),)
    signs : ndarray of shape (min(d_x, d_y),)
        +1, or -1 for the flipped direction; ``sum(signs * singular_values)`` is the
        trace that the optimal isotropic scale is computed from.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.procrustes import procrustes_from_cross
    >>> W, S, signs = procrustes_from_cross(np.diag([3.0, -2.0]), allow_reflection=False)
    >>> W
    array([[1., 0.],
           [0., 1.]])
    >>> S, signs
    (array([3., 2.]), array([ 1., -1.]))
    """
    cross = np.asarray(cross, dtype=np.float64)
    # The factor W does not depend on the scale of ``cross``: in a narrower dtype it is
    # taken of cross / max|cross| (no overflow, no underflow), S scaled back in float64.
    unit = 1.0
    if np.dtype(dtype) != np.float64:
        peak = float(np.abs(cross).max(initial=0.0))
        unit = peak if np.isfinite(peak) and peak > 0 else 1.0
    cross = torch.as_tensor((cross / unit).astype(dtype))
    try:
        U, S, Vt = torch.linalg.svd(cross, full_matrices=False)
    except torch.linalg.LinAlgError:
        # The default driver (gesdd) can fail to converge on badly scaled input; gesvd
        # is slower but robust.
        U, S, Vt = (
            torch.as_tensor(a)
            for a in scipy.linalg.svd(cross.numpy(), full_matrices=False, lapack_driver="gesvd")
        )
    signs = torch.ones_like(S)
    square = cross.shape[0] == cross.shape[1]
    if not allow_reflection and square and torch.linalg.det(U) * torch.linalg.det(Vt) < 0:
        signs[-1] = -1.0
    W = (U * signs) @ Vt
    return W.double().numpy(), S.double().numpy() * unit, signs.double().numpy()

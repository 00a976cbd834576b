"""Closed-form maps of wide data (fewer pairs than dimensions) solved in the row space.

When ``n < d`` the statistics ``X_c^T Y_c`` (d_x, d_y), ``X_c^T X_c`` and ``Y_c^T Y_c``
have rank at most ``n``: a thin QR of each side, ``A^T = Q_a L_a^T`` with ``A`` the
centred, weighted rows, writes every one of them as ``Q_a (small n x n matrix) Q_b^T``.
The SVD, the inverse square roots of whitening and the ridge solve then run on ``n x n``
matrices, and the ``(d_x, d_y)`` map is formed once from thin factors: O(n^2 d + n d_x d_y)
instead of the O(d^3) of the dense route, and no ``d x d`` statistic is ever formed.

The answers equal the dense route's wherever the dense route's are defined.  Where the
pairs leave an orthogonal map undetermined (directions no pair spans), Procrustes takes
the rotation that moves only the directions the data fix (:func:`_rotation_onto`): every
direction orthogonal to both spans is left where it is (the zero-padded identity).
"""

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import torch
from sklearn.utils.validation import _check_sample_weight

from .backend import as_numpy_input, is_dask_collection
from .ranking import unit_rows

__all__ = [
    "RowStats",
    "is_wide",
    "row_stats",
    "thin_procrustes",
    "thin_ridge",
    "thin_whitened",
    "moments_state",
    "full_moments",
    "merge_thin",
    "state_stats",
    "thin_width",
]

# Relative size below which a singular value counts as zero (rounding level of float64
# factors of well-scaled data).
_RTOL = 1e-10


def is_wide(X, Y, sample_weight=None):
    """Whether ``(X, Y)`` is an in-memory pair with fewer rows than one side's width."""
    if is_dask_collection(X, Y, sample_weight):
        return False
    shape_x, shape_y = getattr(X, "shape", None), getattr(Y, "shape", None)
    if shape_x is None or shape_y is None or len(shape_x) != 2 or len(shape_y) != 2:
        return False
    return shape_x[0] < max(shape_x[1], shape_y[1])


def _thin_qr(M):
    """Economic QR of a tall float64 matrix.  torch's LAPACK (MKL in its CPU wheels) runs
    it in about 0.8x the time of scipy's on the same core, and both are Householder QR of
    the same matrix (equal to rounding)."""
    Q, R = torch.linalg.qr(torch.from_numpy(np.asarray(M, dtype=np.float64)))
    return Q.numpy(), R.numpy()


@dataclass
class Side:
    """One side's centred, weighted rows ``A`` (n, d) as ``L @ Q.T``.

    ``Q`` (d, k) has orthonormal columns and ``L`` is (n, k), ``k = min(n, d)``; when
    ``n >= d`` no factorisation is made (``Q`` is None and ``L = A``).
    """

    L: np.ndarray
    Q: np.ndarray | None
    width: int

    @classmethod
    def of(cls, A):
        n, d = A.shape
        if n >= d:
            return cls(A, None, d)
        Q, R = _thin_qr(A.T)
        return cls(R.T, Q, d)

    def lift(self, M):
        """``Q @ M`` (rows of M in this side's reduced coordinates -> full width)."""
        return M if self.Q is None else self.Q @ M


@dataclass
class RowStats:
    """What the row-space solvers need: both sides and the moments the scale uses."""

    x: Side
    y: Side
    weight: float
    mean_x: np.ndarray
    mean_y: np.ndarray
    sq_x: float
    sq_y: float
    centered: bool
    n_rows: int
    cross_factors: tuple | None = None


def row_stats(estimator, X, Y, sample_weight, *, centered, normalize=False, reset=True):
    """Validate a wide pair for ``estimator`` and factor its rows (float64)."""
    X, Y = estimator._validate_pair(X, Y, reset=reset)
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if normalize:
        X, Y = unit_rows(X), unit_rows(Y)
    n = X.shape[0]
    if sample_weight is None:
        w = np.ones(n)
    else:
        w = _check_sample_weight(
            as_numpy_input(sample_weight), X, dtype=np.float64, ensure_non_negative=True
        )
    weight = float(w.sum())
    if weight <= 0:
        raise ValueError("sample_weight sums to zero: there is nothing to fit.")
    if centered:
        mean_x, mean_y = (w @ X) / weight, (w @ Y) / weight
        X, Y = X - mean_x, Y - mean_y
    else:
        mean_x, mean_y = np.zeros(X.shape[1]), np.zeros(Y.shape[1])
    root = np.sqrt(w)[:, None]
    A, B = X * root, Y * root
    return RowStats(
        Side.of(A),
        Side.of(B),
        weight,
        mean_x,
        mean_y,
        float(np.einsum("ij,ij->", A, A)),
        float(np.einsum("ij,ij->", B, B)),
        centered,
        n,
    )


def _svd(M):
    try:
        return scipy.linalg.svd(M, full_matrices=False, check_finite=False)
    except np.linalg.LinAlgError:
        return scipy.linalg.svd(M, full_matrices=False, lapack_driver="gesvd")


def _pad_rows(M, rows):
    return np.vstack([M, np.zeros((rows - M.shape[0], M.shape[1]))]) if M.shape[0] < rows else M


def _well_moved(C):
    """Whether ``D^T D = 2 I - C - C^T`` (``C = U^T V``) has every eigenvalue above 1e-4,
    where the short form of :func:`_rotation_onto` holds.  Its Cholesky factorisation
    after shifting by 1e-4 says so at a fraction of the cost of ``eigvalsh``."""
    shifted = (2.0 - 1e-4) * np.eye(len(C), dtype=C.dtype) - C - C.T
    try:
        scipy.linalg.cholesky(shifted, check_finite=False)
    except np.linalg.LinAlgError:
        return False
    return True


def _rotation_onto(U, V, d_x, d_y, *, proper):
    """The (d_x, d_y) map with orthonormal rows or columns that sends ``U``'s columns to
    ``V``'s and moves nothing orthogonal to both (both zero-padded to ``max(d_x, d_y)``).

    With ``D = V - U = P S R^T``, the orthogonal ``G^T = I + P M P^T`` with
    ``M = (S^-1 K S^-1 - I/2)^-1``, ``K`` the skew part of ``R^T D^T U R``, satisfies
    ``G^T U = V`` (directions with ``S = 0`` are shared by U and V and stay in place) and
    is orthogonal for any skew ``K``; it equals ``I + D (U^T D)^-1 D^T``.  When the
    eigenvalues of ``D^T D = 2 I - U^T V - V^T U`` are all well above rounding (the
    common case) that short form is used (an r x r inverse); when U and V nearly share a
    direction, ``P``, ``S``, ``R`` come from the SVD of ``D`` itself, which keeps those
    directions exact.  ``G`` is then formed with one rank-r product.  ``det(G) = (-1)^r``
    (r the directions moved); ``proper`` (a square map) adds a reflection orthogonal to
    ``U`` when that is -1.
    """
    size, r = max(d_x, d_y), U.shape[1]
    D = _pad_rows(V, size) - _pad_rows(U, size)
    C = U[: min(d_x, d_y)].T @ V[: min(d_x, d_y)]  # U^T V of the padded bases
    if r and _well_moved(C):
        # Well conditioned: the formula collapses to Z = (U^T D)^-1 = (C - I)^-1, and
        # D Z is one LU solve with D's rows (0.6x the time of the inverse and its GEMM).
        lu = scipy.linalg.lu_factor(C - np.eye(r), check_finite=False)
        DZ = scipy.linalg.lu_solve(lu, D[:d_x].T, trans=1, check_finite=False).T
        moved = r
    else:
        _, S, Rt = _svd(D)
        keep = S > 1e-9
        S, R = S[keep], Rt[keep].T
        N = R.T @ (C.T - np.eye(r)) @ R  # R^T D^T U R, as D^T U = V^T U - I
        K = (N - N.T) / 2
        M = np.linalg.inv(K / S[:, None] / S[None, :] - np.eye(len(S)) / 2)
        Z = (R / S) @ M.T @ (R / S).T
        DZ = D[:d_x] @ Z
        moved = len(S)
    # G = I + D Z D^T (= I + P M^T P^T with P = D R / S): the map is its top-left block.
    W = DZ @ D[:d_y].T
    W[np.arange(min(d_x, d_y)), np.arange(min(d_x, d_y))] += 1.0
    if proper and d_x == d_y and moved % 2 == 1:
        # A reflection of a direction e orthogonal to U (one exists: U has fewer columns
        # than rows here) keeps G^T U = V and makes det(W) = +1.
        j = int(np.argmin(np.einsum("ij,ij->i", U, U)))
        e = -U @ U[j]
        e[j] += 1.0
        e /= np.linalg.norm(e)
        W -= 2.0 * np.outer(e, e @ W)
    return W


def thin_procrustes(stats, *, allow_reflection):
    """Procrustes from :class:`RowStats`: ``(W, singular_values, signs)`` as
    :func:`~sklearn_compat.procrustes.procrustes_from_cross` returns them."""
    x, y = stats.x, stats.y
    Uk, S, Vkt = _svd(x.L.T @ y.L)
    rank = int(np.sum(S > _RTOL * S[0])) if S.size and S[0] > 0 else 0
    U, V = x.lift(Uk[:, :rank]), y.lift(Vkt[:rank].T)
    stats.cross_factors = (U * S[:rank], V)  # the cross product, for moments_state
    W = _rotation_onto(U, V, x.width, y.width, proper=not allow_reflection)
    values = np.zeros(min(x.width, y.width))
    values[: S.size] = S[: values.size]
    return W, values, np.ones_like(values)


def _psd_power(L, power, rtol, svd=None):
    """``(L^T L) ** power`` (pseudo-power below ``rtol`` times the largest eigenvalue);
    ``svd``: ``_svd(L)`` when already at hand (whitening takes two powers of one side)."""
    _, s, Vt = _svd(L) if svd is None else svd
    evals = s**2
    keep = evals > rtol * evals[0] if evals.size and evals[0] > 0 else np.zeros(0, bool)
    V = Vt[keep].T
    return (V * evals[keep] ** power) @ V.T


def thin_whitened(
    stats, *, whiten, reweight, dewhiten, n_components, rtol, factored=False, dtype=None
):
    """:func:`~.whitening.multi_step_map` from :class:`RowStats` (same steps, n x n).

    Returns ``(W, S)``; with ``factored``, ``((A, B), S)`` with ``W = Q_x A B Q_y^T``
    (``A`` k_x x k, ``B`` k x k_y in the sides' reduced coordinates): mapping a few rows
    through the factors skips the lifts and the d_x x d_y product, which are most of a
    wide fit (the ``"auto"`` choice scores candidates this way, with ``dtype=float32``:
    half the work, and a rank tolerance no finer than 1e-10 on the eigenvalues, where
    float32's rounding of the singular values is still below 1 %).
    """
    x, y = stats.x, stats.y
    Lx, Ly = x.L, y.L
    if dtype is not None and np.dtype(dtype) != np.float64:
        Lx, Ly = Lx.astype(dtype), Ly.astype(dtype)
        rtol = max(rtol, 1e-10)
    cross = Lx.T @ Ly
    svd_x = svd_y = None
    if whiten:
        svd_x, svd_y = _svd(Lx), _svd(Ly)
        Wx1 = _psd_power(Lx, -0.5, rtol, svd_x)
        Wy1 = _psd_power(Ly, -0.5, rtol, svd_y)
        M = Wx1 @ cross @ Wy1
    else:
        Wx1, M = np.eye(cross.shape[0]), cross
    U, S, Vt = _svd(M)
    k = S.shape[0] if n_components is None else min(int(n_components), S.shape[0])
    k = min(k, min(x.width, y.width))
    U, S, V = U[:, :k], S[:k], Vt[:k].T
    source = Wx1 @ U
    if reweight:
        source = source * np.where(S > 0, S, 0.0) ** reweight
    if whiten and dewhiten == "source":
        source = source @ (U.T @ _psd_power(Lx, 0.5, rtol, svd_x) @ U)
    elif whiten and dewhiten == "target":
        source = source @ (V.T @ _psd_power(Ly, 0.5, rtol, svd_y) @ V)
    if factored:
        return (source.astype(np.float64), V.T.astype(np.float64)), S.astype(np.float64)
    return x.lift(source) @ y.lift(V).T, S


def thin_ridge(stats, alpha, rtol):
    """Ridge / minimum-norm least squares from :class:`RowStats` via the push-through
    identity ``(A^T A + alpha I)^-1 A^T B = A^T (A A^T + alpha I)^-1 B`` (n x n)."""
    x, y = stats.x, stats.y
    if not np.isfinite(alpha):
        return np.zeros((x.width, y.width))
    _, s, Vt = _svd(x.L)  # A = L Q^T = (U s Vt) Q^T: eigenvalues s^2 of A^T A
    evals = s**2 + alpha
    keep = evals > rtol * evals[0] if evals.size and evals[0] > 0 else np.zeros(0, bool)
    V = Vt[keep].T
    # W = Q V diag(1 / evals) V^T L^T B
    core = x.lift((V / evals[keep]) @ (V.T @ (x.L.T @ y.L)))
    return core if y.Q is None else core @ y.Q.T


def moments_state(stats, *, need_gram):
    """``_moments_state`` of a row-space fit: the moments with the cross product (and
    Gram) kept as thin factors ``left @ right.T``, so that no d x d matrix is formed
    unless a later ``partial_fit`` merges more rows (see :func:`full_moments`)."""
    x, y = stats.x, stats.y
    if stats.cross_factors is None:
        right = y.Q if y.Q is not None else np.eye(y.width)
        stats.cross_factors = (x.lift(x.L.T @ y.L), right)
    state = {
        "weight": stats.weight,
        "mean_x": stats.mean_x,
        "mean_y": stats.mean_y,
        "sq_x": stats.sq_x,
        "sq_y": stats.sq_y,
        "centered": stats.centered,
        "cross": None,
        "gram_x": None,
        "cross_left": stats.cross_factors[0],
        "cross_right": stats.cross_factors[1],
    }
    if need_gram:
        _, s, Vt = _svd(x.L)
        state["gram_root"] = x.lift(Vt.T * s)
    return state


def merge_thin(state, batch):
    """Chan et al.'s merge of two thin states (see :func:`moments_state`), kept thin: the
    factors of the union's cross product are the two sets of factors side by side, plus
    one rank-one term for the spread between the means."""
    total = state["weight"] + batch["weight"]
    share = batch["weight"] / total
    delta_x, delta_y = batch["mean_x"] - state["mean_x"], batch["mean_y"] - state["mean_y"]
    merged = dict(state)
    merged.update(
        weight=total,
        mean_x=state["mean_x"] + share * delta_x,
        mean_y=state["mean_y"] + share * delta_y,
        sq_x=state["sq_x"] + batch["sq_x"],
        sq_y=state["sq_y"] + batch["sq_y"],
    )
    left = [state["cross_left"], batch["cross_left"]]
    right = [state["cross_right"], batch["cross_right"]]
    if state["centered"]:
        factor = state["weight"] * share
        left.append(factor * delta_x[:, None])
        right.append(delta_y[:, None])
        merged["sq_x"] += factor * float(delta_x @ delta_x)
        merged["sq_y"] += factor * float(delta_y @ delta_y)
    merged["cross_left"], merged["cross_right"] = np.hstack(left), np.hstack(right)
    return merged


def state_stats(state, n_rows):
    """:class:`RowStats` whose cross product is a thin state's ``left @ right.T`` (what
    :func:`thin_procrustes` needs; not the rows themselves)."""
    sides = []
    for factor in (state["cross_left"], state["cross_right"]):
        Q, T = scipy.linalg.qr(factor, mode="economic", check_finite=False)
        sides.append(Side(T.T, Q, factor.shape[0]))
    fields = ("weight", "mean_x", "mean_y", "sq_x", "sq_y", "centered")
    return RowStats(*sides, *(state[f] for f in fields), n_rows)


def thin_width(state):
    """Columns of a thin state's cross factors (None for a dense state)."""
    left = state.get("cross_left")
    return None if left is None else left.shape[1]


def full_moments(state):
    """The keyword arguments of :class:`~.moments.PairMoments` from a state, thin or not."""
    state = dict(state)
    left, right = state.pop("cross_left", None), state.pop("cross_right", None)
    root = state.pop("gram_root", None)
    if left is not None:
        state["cross"] = left @ right.T
    if root is not None:
        state["gram_x"] = root @ root.T
    return state

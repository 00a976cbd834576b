"""Scoring ``"auto"`` candidates on wide data without a thin fit per candidate.

On wide data (fewer pairs than dimensions) a row-space fit costs two thin QR
factorisations and, to return ``W_``, a ``(d_x, d_y)`` product: the candidates of an
``"auto"`` choice would each pay both.  Neither is needed to score them:

- the candidates differ only by operations on the rows (normalising, centring, weighting),
  which are left multiplications of the kept rows ``A = L Q^T``: they change ``L``, never
  the orthonormal basis ``Q``.  One QR of each side's raw kept rows serves every candidate;
- the held-out rows are mapped through the thin factors of ``W`` (``P Q_x``, small
  products, ``Q_y^T``), never through ``W`` itself.

Scores equal those of explicit refits on the kept rows (tested against them).
"""

import numpy as np
import scipy.linalg

from .ranking import unit_rows
from .row_space import _RTOL, RowStats, Side, _svd, _well_moved, thin_whitened

__all__ = [
    "KeptRows",
    "SplitRows",
    "candidate_stats",
    "held_offset",
    "procrustes_held_products",
    "procrustes_mapped",
    "whitened_held_products",
    "whitened_mapped",
]


class KeptRows:
    """The kept rows of both sides, factored once (``A = L Q^T``, ``Q`` None when the
    side has at least as many rows as columns)."""

    def __init__(self, X, Y, weights):
        self.x, self.y = Side.of(np.asarray(X, np.float64)), Side.of(np.asarray(Y, np.float64))
        self.weights = np.asarray(weights, dtype=np.float64)
        self._overlap = None

    @classmethod
    def of_sides(cls, x, y, weights, overlap=None):
        rows = cls.__new__(cls)
        rows.x, rows.y = x, y
        rows.weights = np.asarray(weights, dtype=np.float64)
        rows._overlap = overlap
        return rows

    def overlap(self):
        """``Q_x[:m]^T Q_y[:m]`` (``m = min(d_x, d_y)``): the same for every candidate."""
        if self._overlap is None:
            m = min(self.x.width, self.y.width)
            self._overlap = _basis_rows(self.x, m).T @ _basis_rows(self.y, m)
        return self._overlap


def _leading(side, rows):
    """The side of its first ``rows`` rows.  ``L`` is lower triangular (``R^T`` of the QR
    of ``A^T``), so the first rows involve only the first ``rows`` columns of ``Q``."""
    if side.Q is None:
        return Side(side.L[:rows], None, side.width)
    return Side(side.L[:rows, :rows], side.Q[:, :rows], side.width)


class SplitRows:
    """Every row of both sides factored once, the kept rows first.

    The kept rows' factors are the leading blocks of the whole factorisation
    (:func:`_leading`) and the held-out rows' coordinates in the whole basis are the
    trailing rows of ``L``: one QR per side serves the candidates of an ``"auto"`` choice,
    their scoring (:func:`procrustes_held_products`, no product of width d) and the
    final fit on all rows (:meth:`whole`).
    """

    def __init__(self, X, Y, weights, keep, held):
        order = np.concatenate([keep, held])
        weights = np.asarray(weights, dtype=np.float64)
        self.x = Side.of(np.asarray(X, np.float64)[order])
        self.y = Side.of(np.asarray(Y, np.float64)[order])
        self.weights = weights[order]
        k = len(keep)
        self.kept = KeptRows.of_sides(_leading(self.x, k), _leading(self.y, k), weights[keep])
        self.held_x, self.held_y = self.x.L[k:], self.y.L[k:]
        self._overlap = None

    def overlap(self, dtype=np.float64):
        """``Q_x[:m]^T Q_y[:m]`` of the whole bases (``m = min(d_x, d_y)``) in ``dtype``;
        its leading block is the kept rows' :meth:`KeptRows.overlap`."""
        if self._overlap is None or self._overlap.dtype != dtype:
            m = min(self.x.width, self.y.width)
            self._overlap = _basis_rows(self.x, m).astype(dtype, copy=False).T @ _basis_rows(
                self.y, m
            ).astype(dtype, copy=False)
        return self._overlap

    def whole(self):
        """:class:`KeptRows` of every row (in kept-then-held order)."""
        return KeptRows.of_sides(self.x, self.y, self.weights)


def _reduced_mean(raw, weights, normalize):
    """The weighted mean of a side's rows (unit rows with ``normalize``), reduced coordinates."""
    return weights @ (unit_rows(raw.L) if normalize else raw.L) / weights.sum()


def _candidate_side(raw, weights, *, normalize, center):
    L = unit_rows(raw.L) if normalize else raw.L
    mean = np.zeros(L.shape[1])
    if center:
        mean = weights @ L / weights.sum()  # = _reduced_mean, L already prepared
        L = L - mean
    L = L * np.sqrt(weights)[:, None]
    full_mean = raw.lift(mean) if center else np.zeros(raw.width)
    return Side(L, raw.Q, raw.width), full_mean, float(np.einsum("ij,ij->", L, L))


def candidate_stats(kept, *, normalize, center):
    """:class:`RowStats` of the kept rows under one candidate setting (no new QR)."""
    x, mean_x, sq_x = _candidate_side(kept.x, kept.weights, normalize=normalize, center=center)
    y, mean_y, sq_y = _candidate_side(kept.y, kept.weights, normalize=normalize, center=center)
    n = x.L.shape[0]
    return RowStats(x, y, float(kept.weights.sum()), mean_x, mean_y, sq_x, sq_y, center, n)


def _reduce(side, P):
    """``P Q`` (rows in the side's reduced coordinates)."""
    return P if side.Q is None else P @ side.Q


def _expand(side, M):
    """``M Q^T`` (rows from the side's reduced coordinates back to full width)."""
    return M if side.Q is None else M @ side.Q.T


def _basis_rows(side, rows):
    """The first ``rows`` rows of the side's basis ``Q`` (the identity when Q is None)."""
    return np.eye(side.width)[:rows] if side.Q is None else side.Q[:rows]


def whitened_mapped(P, stats, **options):
    """``P W`` for the whitened map of ``stats`` (``P`` centred held-out rows)."""
    (A, B), _ = thin_whitened(stats, factored=True, **options)
    return _expand(stats.y, (_reduce(stats.x, P) @ A) @ B)


def _safe_dtype(dtype, *arrays):
    """``dtype``, or float64 where float32 products of these arrays could overflow or
    underflow (entries beyond 1e9 or below 1e-9 in size)."""
    if np.dtype(dtype) == np.float64:
        return dtype
    peaks = [float(np.abs(a).max(initial=0.0)) for a in arrays]
    nonzero = [p for p in peaks if p > 0]
    if nonzero and (max(nonzero) > 1e9 or min(nonzero) < 1e-9):
        return np.float64
    return dtype


def held_offset(split, normalize, center):
    """The candidate's reduced means ``(m_x, m_y)`` (zeros uncentred) of the kept rows."""
    if not center:
        return 0.0, 0.0
    kept = split.kept
    return tuple(_reduced_mean(side, kept.weights, normalize) for side in (kept.x, kept.y))


def whitened_held_products(split, stats, *, normalize, center, dtype=np.float64, **options):
    """``(P W + m_y) Y_h^T`` of the held-out rows of ``split`` for the whitened map of
    ``stats`` (a candidate on the kept rows), against the raw held-out target rows, in
    reduced coordinates: with ``W = Q_x A B Q_y^T`` on the kept bases,
    ``P W Y_h^T = (L_p A B) L_h^T`` over the kept blocks.  ``dtype``: the precision of
    the solve (see :func:`~.row_space.thin_whitened`)."""
    dtype = _safe_dtype(dtype, stats.x.L, stats.y.L)
    (A, B), _ = thin_whitened(stats, factored=True, dtype=dtype, **options)
    mean_x, mean_y = held_offset(split, normalize, center)
    kx, ky = A.shape[0], B.shape[1]
    queries = unit_rows(split.held_x) if normalize else split.held_x
    targets = split.held_y[:, :ky]
    return ((queries[:, :kx] - mean_x) @ A @ B + mean_y) @ targets.T


def procrustes_held_products(split, stats, mean_x, *, allow_reflection, dtype=np.float64):
    """``(P W Y_h^T, singular values, signs)``: the held-out rows of ``split`` mapped by the
    orthogonal map of ``stats`` (a candidate on its kept rows) against the raw held-out
    target rows, computed in the reduced coordinates of the whole factorisation.

    With ``W = I + D Z D^T`` (see :func:`procrustes_mapped`), ``P = L_p Q_x^T`` and
    ``Y_h = L_h Q_y^T``: ``P Y_h^T = L_p O L_h^T`` (``O`` the bases' overlap),
    ``P D = L_p O V_k - L_p U_k`` and ``D^T Y_h^T = V_k^T L_h^T - U_k^T O L_h^T`` (kept
    blocks), so no product has width d.  ``mean_x``: the candidate's mean in the reduced
    coordinates of the kept rows (zeros uncentred).  ``dtype``: the precision of the
    work; float32 halves it, and moves a score only where two targets tie to within its
    rounding (its rank tolerance is then 1e-6, float32's rounding of the singular values).
    None where only the formed map can say, as in :func:`procrustes_mapped`.
    """
    x, y = stats.x, stats.y
    dtype = _safe_dtype(dtype, x.L, y.L, split.held_x, split.held_y)
    Lx, Ly = x.L.astype(dtype, copy=False), y.L.astype(dtype, copy=False)
    Uk, S, Vkt = _svd(Lx.T @ Ly)
    rtol = _RTOL if np.dtype(dtype) == np.float64 else 1e-6
    rank = int(np.sum(S > rtol * S[0])) if S.size and S[0] > 0 else 0
    values = np.zeros(min(x.width, y.width))
    values[: S.size] = S[: values.size]
    signs = np.ones_like(values)
    if rank == 0 or (not allow_reflection and x.width == y.width and rank % 2 == 1):
        return None, values, signs
    Uk, Vk = Uk[:, :rank], Vkt[:rank].T
    kx, ky = Lx.shape[1], Ly.shape[1]
    overlap = split.overlap(dtype)
    C = Uk.T @ overlap[:kx, :ky] @ Vk
    if not _well_moved(C):
        return None, values, signs
    Lp = split.held_x.astype(dtype)
    Lp[:, :kx] -= mean_x
    Lh = split.held_y.astype(dtype, copy=False)
    LpO = Lp @ overlap
    PD = LpO[:, :ky] @ Vk - Lp[:, :kx] @ Uk
    # T = P D Z with Z = (C - I)^-1, as one solve.
    T = scipy.linalg.solve((C - np.eye(rank, dtype=dtype)).T, PD.T, check_finite=False).T
    DY = Vk.T @ Lh[:, :ky].T - Uk.T @ (overlap[:kx] @ Lh.T)
    return (LpO @ Lh.T + T @ DY).astype(np.float64), values, signs


def procrustes_mapped(P, stats, *, allow_reflection, overlap=None):
    """``(P W, singular values, signs)`` for the orthogonal map of ``stats`` that
    :func:`~.row_space.thin_procrustes` forms; ``P W`` is None where only the formed map
    can say (nearly shared directions, or a proper rotation of odd rank).  ``overlap``:
    :meth:`KeptRows.overlap` of the rows ``stats`` came from, when at hand."""
    x, y = stats.x, stats.y
    Uk, S, Vkt = _svd(x.L.T @ y.L)
    rank = int(np.sum(S > _RTOL * S[0])) if S.size and S[0] > 0 else 0
    values = np.zeros(min(x.width, y.width))
    values[: S.size] = S[: values.size]
    signs = np.ones_like(values)
    if rank == 0:
        return None, values, signs
    Uk, Vk = Uk[:, :rank], Vkt[:rank].T
    d_x, d_y = x.width, y.width
    m = min(d_x, d_y)
    # W = I (padded) + D[:d_x] Z D[:d_y]^T with D = V - U, U = Q_x Uk, V = Q_y Vk, both
    # zero-padded to max(d_x, d_y) rows (see _rotation_onto, short form).
    Qx_top, Qy_top = _basis_rows(x, m), _basis_rows(y, m)
    if overlap is None:
        overlap = Qx_top.T @ Qy_top
    C = Uk.T @ overlap @ Vk
    if not _well_moved(C):
        return None, values, signs
    if not allow_reflection and d_x == d_y and rank % 2 == 1:
        return None, values, signs
    Z = np.linalg.inv(C - np.eye(rank))
    PD = (P[:, :m] @ Qy_top) @ Vk - _reduce(x, P) @ Uk
    T = PD @ Z
    mapped = _expand(y, T @ Vk.T)
    mapped[:, :m] += P[:, :m] - (T @ Uk.T) @ Qx_top.T
    return mapped, values, signs

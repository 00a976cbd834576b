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

from .row_space import _RTOL, RowStats, Side, _svd, thin_whitened

__all__ = ["KeptRows", "candidate_stats", "procrustes_mapped", "whitened_mapped"]


class KeptRows:
    """The kept rows of both sides, factored once (``A = L Q^T``, ``Q`` None when the
    side has at least as many rows as columns)."""

    def __init__(self, X, Y, weights):
        self.x, self.y = Side.of(np.asarray(X, np.float64)), Side.of(np.asarray(Y, np.float64))
        self.weights = np.asarray(weights, dtype=np.float64)
        self._overlap = None

    def overlap(self):
        """``Q_x[:m]^T Q_y[:m]`` (``m = min(d_x, d_y)``): the same for every candidate."""
        if self._overlap is None:
            m = min(self.x.width, self.y.width)
            self._overlap = _basis_rows(self.x, m).T @ _basis_rows(self.y, m)
        return self._overlap


def _candidate_side(raw, weights, *, normalize, center):
    L = raw.L
    if normalize:
        # Q has orthonormal columns: a row's norm is its norm in the reduced coordinates.
        L = L / np.maximum(np.linalg.norm(L, axis=1, keepdims=True), np.finfo(float).tiny)
    mean = np.zeros(L.shape[1])
    if center:
        mean = weights @ L / weights.sum()
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
    gram = 2.0 * np.eye(rank) - C - C.T
    if scipy.linalg.eigvalsh(gram, check_finite=False)[0] <= 1e-4:
        return None, values, signs
    if not allow_reflection and d_x == d_y and rank % 2 == 1:
        return None, values, signs
    Z = np.linalg.inv(C - np.eye(rank))
    PD = (P[:, :m] @ Qy_top) @ Vk - _reduce(x, P) @ Uk
    T = PD @ Z
    mapped = _expand(y, T @ Vk.T)
    mapped[:, :m] += P[:, :m] - (T @ Uk.T) @ Qx_top.T
    return mapped, values, signs

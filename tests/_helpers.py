"""Helpers shared by the tests: planted pairs, unit rows and brute-force references.

The references are written the slow, obvious way (explicit loops, plain numpy) and never
call the package, so that a test compares the package with something independent of it.
"""

import numpy as np
from scipy.stats import ortho_group
from sklearn.base import BaseEstimator

import sklearn_compat


def public_estimators():
    """The estimator classes that ``sklearn_compat.__all__`` names, by name."""
    found = (getattr(sklearn_compat, name) for name in sklearn_compat.__all__)
    estimators = (obj for obj in found if isinstance(obj, type) and issubclass(obj, BaseEstimator))
    return sorted(estimators, key=lambda cls: cls.__name__)


def planted_map(d_x, d_y, random_state):
    """A (d_x, d_y) block of a random orthogonal matrix: orthonormal rows when
    ``d_x <= d_y`` (norms kept), orthonormal columns otherwise (a projection)."""
    return ortho_group.rvs(max(d_x, d_y), random_state=random_state)[:d_x, :d_y]


def planted_pair(
    rng, n, d_x, d_y, *, map_seed=0, scales=None, offset=0.0, noise=None, dtype=np.float64
):
    """``(X, Y, R)``: rows ``X`` and ``Y = X @ R`` (plus ``noise`` times Gaussian noise), ``R``
    from :func:`planted_map`.

    ``X`` is standard normal times ``scales`` (per column) plus ``offset``, cast to
    ``dtype`` before ``Y`` is computed from it in float64.  Draws from ``rng``: ``X``, then
    the noise (only when ``noise`` is given, 0.0 included).
    """
    X = rng.normal(size=(n, d_x))
    if scales is not None:
        X = X * scales
    X = (X + offset).astype(dtype)
    R = planted_map(d_x, d_y, map_seed)
    Y = X.astype(np.float64) @ R
    if noise is not None:
        Y = Y + noise * rng.normal(size=(n, d_y))
    return X, Y.astype(dtype), R


def unit(A):
    """Rows of ``A`` divided by their norms (no row may be zero)."""
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def brute_force_top1(Z, G, k, csls):
    """Paired top-1 of ``Z`` against ``G`` by explicit loops over rows, by cosine or by
    CSLS with the gallery as its own reference (``2 cos - r(g)``); ties count against."""
    Z, G = unit(Z), unit(G)
    n = len(G)
    crowding = np.zeros(n)
    if csls:
        for j in range(n):
            others = sorted((G[j] @ G[i] for i in range(n) if i != j), reverse=True)
            crowding[j] = np.mean(others[:k])
    hits = 0
    for i in range(len(Z)):
        scores = [(2.0 if csls else 1.0) * (Z[i] @ G[j]) - crowding[j] for j in range(n)]
        rivals = [s for j, s in enumerate(scores) if j != i]
        hits += scores[i] > max(rivals)
    return hits / len(Z)


def brute_force_similarities(similarity, X, A, mean=None, L=None):
    """Similarities of every row of ``X`` to every anchor row of ``A``, one pair at a time
    (``"wip"``: the inner product whitened by ``mean`` and ``L``)."""
    out = np.empty((X.shape[0], A.shape[0]))
    for i, x in enumerate(X):
        for j, a in enumerate(A):
            if similarity == "cosine":
                out[i, j] = x @ a / (np.linalg.norm(x) * np.linalg.norm(a))
            elif similarity == "dot":
                out[i, j] = x @ a
            elif similarity == "euclidean":
                out[i, j] = -np.linalg.norm(x - a)
            else:
                out[i, j] = ((x - mean) @ L) @ ((a - mean) @ L)
    return out


def brute_force_anisotropy(X):
    """``(|mean unit row|, mean cosine between distinct rows)`` from the full cosine
    matrix; zero rows count as zero vectors."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    U = np.where(norms > 0, X / np.where(norms > 0, norms, 1.0), 0.0)
    C = U @ U.T
    n = len(X)
    return np.linalg.norm(U.mean(axis=0)), (C.sum() - np.trace(C)) / (n * (n - 1))


def brute_force_ndcg_recall(scores, gains, excluded, k):
    """Mean nDCG@k and recall@k by a full sort per query: decreasing score, lower gain
    first among ties; queries without a relevant item are left out."""
    ndcg, recall = [], []
    for q in range(scores.shape[0]):
        keep = ~excluded[q]
        g, s = gains[q][keep], scores[q][keep]
        if not (g > 0).any():
            continue
        order = np.lexsort((g, -s))[:k]
        discount = 1 / np.log2(np.arange(2, len(order) + 2))
        ideal = np.sort(g)[::-1][:k]
        ndcg.append((g[order] * discount).sum() / (ideal * discount[: len(ideal)]).sum())
        recall.append((g[order] > 0).sum() / (g > 0).sum())
    return np.mean(ndcg), np.mean(recall)

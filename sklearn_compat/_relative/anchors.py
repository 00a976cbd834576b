"""Anchor selection strategies: which real items (or mixtures of them) become anchors.

Every strategy returns row indices of the X given to ``fit`` (and, for mixtures, the weights),
never coordinates alone: ``rebase`` rebuilds the same anchors in another model's space from
those rows.
"""

import numpy as np
import torch
from sklearn.cluster import KMeans

from .._core.backend import to_torch

# Elements of the (rows, d) difference block in farthest point sampling.
_FPS_BLOCK_ELEMENTS = 2**24

__all__ = [
    "random_anchors",
    "stratified_anchors",
    "kmeans_anchors",
    "kmeans_mixture_anchors",
    "stratified_counts",
    "farthest_point_anchors",
]


def random_anchors(n_samples, n_anchors, rng):
    """``n_anchors`` distinct rows drawn uniformly (the original recipe's anchors)."""
    return np.sort(rng.choice(n_samples, size=n_anchors, replace=False)).astype(np.int64)


def stratified_counts(class_sizes, n_anchors):
    """Per-class anchor counts proportional to class frequency (largest remainder).

    ``n_anchors * size / n`` rounded by Hamilton's largest-remainder method, so every count
    is within one of its exact share and they sum to ``n_anchors``; a class never gets more
    anchors than it has items (the excess goes to the classes with room, largest share
    first).  Ties in the remainders go to the earlier class in sorted label order.
    """
    sizes = np.asarray(class_sizes, dtype=np.int64)
    quota = n_anchors * sizes / sizes.sum()
    counts = np.minimum(np.floor(quota).astype(np.int64), sizes)
    order = np.argsort(-(quota - np.floor(quota)), kind="stable")
    while counts.sum() < n_anchors:
        for c in order:
            if counts.sum() == n_anchors:
                break
            if counts[c] < sizes[c]:
                counts[c] += 1
    return counts


def stratified_anchors(y, n_anchors, rng):
    """Random rows drawn within each class, counts from :func:`stratified_counts`."""
    classes, inverse, sizes = np.unique(y, return_inverse=True, return_counts=True)
    counts = stratified_counts(sizes, n_anchors)
    chosen = [
        rng.choice(np.flatnonzero(inverse == c), size=k, replace=False)
        for c, k in enumerate(counts)
        if k
    ]
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def _kmeans(X, n_anchors, rng):
    km = KMeans(n_clusters=n_anchors, n_init=1, random_state=rng.randint(2**31 - 1))
    labels = km.fit_predict(X)
    return km.cluster_centers_, labels


def _members_by_distance(X, centers, labels):
    """For each cluster, its member rows sorted by distance to the centroid."""
    out = []
    for c, center in enumerate(centers):
        members = np.flatnonzero(labels == c)
        dist = np.einsum("ij,ij->i", X[members] - center, X[members] - center)
        out.append(members[np.argsort(dist, kind="stable")])
    return out


def _fill_empty(picked, n_samples, rng):
    """Replace the ``-1`` of empty clusters (duplicate points) by unused random rows."""
    missing = picked < 0
    if missing.any():
        unused = np.setdiff1d(np.arange(n_samples), picked[~missing])
        picked[missing] = rng.choice(unused, size=int(missing.sum()), replace=False)
    return picked


def kmeans_anchors(X, n_anchors, rng):
    """The member of each k-means cluster nearest its centroid.

    Restricting the search to the cluster's own members makes the anchors distinct by
    construction; it is the item nearest the centroid overall except in the rare case where
    that item was assigned to a neighbouring cluster.  k-means runs once (``n_init=1``) in
    Euclidean geometry on X as given.
    """
    centers, labels = _kmeans(X, n_anchors, rng)
    members = _members_by_distance(X, centers, labels)
    picked = np.array([m[0] if len(m) else -1 for m in members], dtype=np.int64)
    return _fill_empty(picked, X.shape[0], rng)


def kmeans_mixture_anchors(X, n_anchors, n_per_anchor, rng):
    """Each anchor = the mean of (up to) ``n_per_anchor`` members nearest its centroid.

    A convex mixture of real items, hence rebuildable in any parallel space; with
    ``n_per_anchor`` at least the cluster size it is the centroid itself.

    Returns
    -------
    support : ndarray of shape (k,), int64
        Rows used by some anchor.
    mixture : ndarray of shape (n_anchors, k), float64
        Row-stochastic weights (uniform over each anchor's members).
    """
    centers, labels = _kmeans(X, n_anchors, rng)
    members = _members_by_distance(X, centers, labels)
    groups = [m[:n_per_anchor] for m in members]
    if any(len(g) == 0 for g in groups):
        nearest = _fill_empty(
            np.array([g[0] if len(g) else -1 for g in groups], dtype=np.int64),
            X.shape[0],
            rng,
        )
        groups = [g if len(g) else nearest[i : i + 1] for i, g in enumerate(groups)]
    support = np.concatenate(groups).astype(np.int64)
    mixture = np.zeros((n_anchors, support.size))
    start = 0
    for i, g in enumerate(groups):
        mixture[i, start : start + len(g)] = 1.0 / len(g)
        start += len(g)
    return support, mixture


def farthest_point_anchors(Z, n_anchors, rng, device):
    """Greedy farthest point sampling in the rows of ``Z`` (Euclidean).

    The first anchor is a random row; each next one is the row whose distance to its
    nearest chosen anchor is largest (ties: the lowest row index).  O(n m d) on ``device``
    with one running minimum of squared distances.
    """
    dtype = torch.float64 if Z.dtype == np.float64 else torch.float32
    Zt = to_torch(Z, device, dtype)
    n, d = Z.shape
    step = max(1, _FPS_BLOCK_ELEMENTS // max(1, d))
    picked = np.empty(n_anchors, dtype=np.int64)
    picked[0] = rng.randint(n)
    nearest = torch.full((n,), float("inf"), dtype=dtype, device=device)
    for i in range(1, n_anchors):
        z = Zt[picked[i - 1]]
        # Direct differences rather than the norm expansion: FPS compares distances
        # between nearby points, where the expansion loses the digits that decide.
        for start in range(0, n, step):
            diff = Zt[start : start + step] - z
            dist = torch.einsum("ij,ij->i", diff, diff)
            nearest[start : start + step] = torch.minimum(nearest[start : start + step], dist)
        nearest[torch.as_tensor(picked[:i], device=device)] = -1.0
        picked[i] = int(torch.argmax(nearest))
    return picked

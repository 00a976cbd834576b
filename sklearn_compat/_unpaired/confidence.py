"""Judging a map without true pairs.

:func:`heldout_share` is the unsupervised figure of merit (the share of rows left out of
self-learning that are in a mutual CSLS nearest-neighbour pair under the map);
:func:`clustered_surrogate` is the null it is compared with (a cloud with the target's
clusters and nothing finer, on which the same search runs), :func:`beyond_chance` turns
the two shares into a conservative confidence, and :func:`agreement` compares the maps of
independent restarts.
"""

import numpy as np
import torch

from .common import mutual_pairs, unit_centered, unit_rows
from .start import kmeans

__all__ = [
    "agreement",
    "beyond_chance",
    "clustered_surrogate",
    "heldout_share",
    "stand_out",
]


def heldout_share(Xs, Ys, W, held, k):
    """Share of the ``held`` source rows that are in a mutual CSLS pair under ``W``.

    The rows in ``held`` must have taken no part in fitting ``W``: a map self-learned on
    its own matches finds mutual partners for many of them even when it is wrong, but
    only a right map generalises to rows it has not seen.
    """
    i, _ = mutual_pairs(unit_rows(Xs @ W.to(Xs.dtype)), Ys, k)
    is_held = torch.zeros(Xs.shape[0], dtype=torch.bool, device=Xs.device)
    is_held[held] = True
    return float(is_held[i].sum()) / max(1, len(held))


def clustered_surrogate(Ys, generator, n_clusters, keep=None):
    """A second cloud with ``Ys``'s clusters and nothing finer, in the common form.

    ``Ys`` is partitioned by k-means into ``n_clusters``; each cluster is replaced by as
    many Gaussian rows with the cluster's mean and covariance (drawn independently, so no
    row keeps a relation to any row of ``Ys``).  An unrelated data set that merely has
    clusters too aligns with this surrogate as well as with ``Ys``; only a map that
    matches items, not just clusters, does better on ``Ys``.  Rows in ``keep`` (seed pairs'
    targets) stay as they are.
    """
    n_clusters = max(1, min(n_clusters, Ys.shape[0] // 2))
    centroids = kmeans(Ys, n_clusters, generator)
    labels = (Ys @ centroids.T).argmax(dim=1)
    out = torch.empty_like(Ys, dtype=torch.float64)
    for c in torch.unique(labels):
        members = torch.nonzero(labels == c).flatten()
        rows = Ys[members].double()
        mean = rows.mean(dim=0)
        spread = rows - mean
        # rows with the cluster's covariance: Gaussian weights on its right singular basis
        _, s, basis = torch.linalg.svd(spread, full_matrices=False)
        scale = (s / np.sqrt(max(1, len(members) - 1))).cpu()
        noise = torch.randn(len(members), len(s), generator=generator, dtype=torch.float64)
        out[members] = mean + (noise * scale).to(Ys.device) @ basis
    out = unit_centered(out.to(Ys.dtype))
    if keep is not None and len(keep):
        out[keep] = Ys[keep]  # after the common form: the seed rows exactly as Y's
    return out


def beyond_chance(share, chance, n_held, z=2.0):
    """The share of held-out rows matched beyond ``chance``, less ``z`` standard errors of
    the difference of the two binomial shares (on ``n_held`` rows each), over the room
    chance leaves, clipped to [0, 1]: a lower bound, so that a handful of held-out rows
    cannot make a difference of luck look like an alignment."""
    error = np.sqrt((share * (1 - share) + chance * (1 - chance)) / max(1, n_held))
    room = max(1e-12, 1.0 - chance)
    return float(min(1.0, max(0.0, (share - chance - z * error) / room)))


def agreement(W1, W2):
    """``trace(W1^T W2) / min(d_x, d_y)``: 1 for the same map, about 0 for unrelated ones
    (two random orthogonal maps agree to about ``1 / sqrt(d)``)."""
    return float((W1.double() * W2.double()).sum()) / min(W1.shape)


# Smallest spread of the losing restarts' criteria (mean best CSLS) that stand_out divides
# by: restarts that fail alike can agree to a ten-thousandth.
_MIN_SPREAD = 1e-3


def stand_out(criteria):
    """How far the best of several restarts' criteria stands above the rest: its margin
    over their median, in units of their robust spread (1.4826 times the median absolute
    deviation, at least ``1e-3``).  0 with fewer than two criteria."""
    values = np.sort(np.asarray(criteria, dtype=float))[::-1]
    if len(values) < 2:
        return 0.0
    others = values[1:]
    centre = np.median(others)
    spread = max(_MIN_SPREAD, 1.4826 * float(np.median(np.abs(others - centre))))
    return float((values[0] - centre) / spread)

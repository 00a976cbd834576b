"""Judging a map without true pairs.

:func:`heldout_share` is the unsupervised figure of merit (the share of rows left out of
self-learning that are in a mutual CSLS nearest-neighbour pair under the map), and
:func:`structureless_cloud` a target on which to measure what self-learning reaches by
chance.
"""

import numpy as np
import torch

from .common import mutual_pairs, unit_centered, unit_rows

__all__ = ["heldout_share", "structureless_cloud"]


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


def structureless_cloud(Ys, generator):
    """Gaussian rows with the mean and covariance of ``Ys`` (its row count), in the common
    form: a target with ``Ys``'s shape and spread but no structure that any map can match.
    """
    mean = Ys.double().mean(dim=0)
    _, spread, basis = torch.linalg.svd(Ys.double() - mean, full_matrices=False)
    noise = torch.randn(Ys.shape[0], len(spread), generator=generator, dtype=torch.float64)
    cloud = mean + (noise * (spread / np.sqrt(Ys.shape[0])).cpu()).to(Ys.device) @ basis
    return unit_centered(cloud.to(Ys.dtype))

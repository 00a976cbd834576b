"""The RCSLS objective of Joulin et al. (EMNLP 2018) and its gradient steps.

For unit rows ``x_i`` (source) and ``y_i`` (target) of the n training pairs and a linear map
``W``, the relaxed CSLS loss is::

    L(W) = 1/n sum_i [ -2 x_i W y_i^T
                       + 1/k sum_{t in N_T(x_i W)} x_i W t^T
                       + 1/k sum_{s in N_S(y_i)} s W y_i^T ]

``N_T(x_i W)``: the k target-pool rows most similar to the mapped source row; ``N_S(y_i)``:
the k source-pool rows whose images are most similar to ``y_i``.  The neighbour sets are
recomputed at every step and held fixed for its gradient, which is then linear in them::

    dL/dW = 1/n [ -2 X^T Y + X^T M_T + M_S^T Y ]

with ``M_T[i]`` the mean of ``N_T(x_i W)`` and ``M_S[i]`` the mean of ``N_S(y_i)`` (in the
source space).  Everything is computed in row blocks under a memory budget.
"""

import torch

from .ranking import similarity_blocks

__all__ = ["rcsls_loss_and_gradient", "clip_spectral_norm"]


def _neighbour_means(queries, pool, mapped_pool, k, budget):
    """Mean of each query's ``k`` most similar ``mapped_pool`` rows, taken in ``pool``.

    Returns the means ``(n, pool.shape[1])`` and the sum over queries of the mean
    similarities (a term of the loss).
    """
    means = torch.empty((queries.shape[0], pool.shape[1]), dtype=pool.dtype, device=pool.device)
    total = torch.zeros((), dtype=torch.float64, device=pool.device)
    for start, stop, sims in similarity_blocks(queries, mapped_pool, budget=budget):
        top = torch.topk(sims, k, dim=1, sorted=False)
        total += top.values.double().sum() / k
        means[start:stop] = pool[top.indices].mean(dim=1)
    return means, total


def rcsls_loss_and_gradient(W, X, Y, source_pool, target_pool, k, *, budget=None):
    """The loss and its gradient at ``W`` (neighbour sets held fixed).

    Parameters
    ----------
    W : torch.Tensor of shape (d_x, d_y)
    X, Y : torch.Tensor of shape (n, d_x), (n, d_y)
        The training pairs, unit rows.
    source_pool, target_pool : torch.Tensor
        Rows the neighbour sets are drawn from (the pairs' own rows and any unpaired ones).
    k : int
        Neighbours per set.
    budget : int, optional
        Bytes of similarity slab per block.

    Returns
    -------
    loss : float
    gradient : torch.Tensor of shape (d_x, d_y)
    """
    n = X.shape[0]
    mapped = X @ W
    fit = (mapped * Y).sum(dtype=torch.float64)
    near_targets, crowd_t = _neighbour_means(mapped, target_pool, target_pool, k, budget)
    near_sources, crowd_s = _neighbour_means(Y, source_pool, source_pool @ W, k, budget)
    loss = float((-2 * fit + crowd_t + crowd_s) / n)
    gradient = (X.T @ (near_targets - 2 * Y) + near_sources.T @ Y) / n
    return loss, gradient


def clip_spectral_norm(W, limit=1.0):
    """``W`` with its singular values clipped at ``limit`` (the paper's unit-ball constraint)."""
    U, S, Vt = torch.linalg.svd(W, full_matrices=False)
    if float(S[0]) <= limit:
        return W
    return (U * S.clamp(max=limit)) @ Vt

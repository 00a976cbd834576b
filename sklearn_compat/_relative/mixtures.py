"""PARAM: anchors as learned convex mixtures of support items, shared across spaces.

Anchors are ``A_b = P S_b`` in every space ("bank") ``b``, where ``S_b`` holds the same ``k``
support items embedded by model ``b`` and ``P = softmax(logits / temperature)`` row-wise is a
(m, k) row-stochastic mixture shared by all banks.  The logits are trained with Adam on
minibatches of the parallel rows so that the relative representations of the same item agree
across banks.  The paper (Svendsen, Jakobsen, Nassar, Mager, Technical University of Denmark,
2025-26) names the loss terms but publishes no formulas; each is written here from its original
definition (Barlow Twins: Zbontar et al., ICML 2021, arXiv:2103.03230; alignment and uniformity:
Wang & Isola, ICML 2020, arXiv:2005.10242); see also docs/methods.md, section "Relative
representations and PARAM":

soft Jaccard (weight ``"jaccard"``, default ``1.0``)
    ``p = softmax(z / 0.5)`` of each row-standardised relative vector ``z``; for two banks,
    ``1 - mean_i sum_j min(p_ij, q_ij) / sum_j max(p_ij, q_ij)`` (soft intersection over union).
Barlow Twins (``"barlow"``, default ``1.0``)
    Columns standardised over the batch, ``C = Z_b^T Z_c / B`` (m, m);
    ``(sum_j (1 - C_jj)^2 + (1/m) sum_{j != l} C_jl^2) / m``: the cross-correlation is driven
    to the identity, off-diagonal weight 1/m; divided by m to keep it O(1).
alignment + uniformity (``"align_uniform"``, default ``1.0``)
    Wang & Isola (2020) on L2-normalised relative vectors ``u``: alignment
    ``mean_i ||u_b,i - u_c,i||^2`` plus uniformity ``log mean_{i != j} exp(-2 ||u_i - u_j||^2)``
    within each bank (t = 2, weight 1 between them, as in the original).
anchor cohesion (``"cohesion"``, default ``0.1``)
    ``sum_ij P_ij ||(a_i - s_j) L||^2 / (m d)`` with ``L`` the bank's whitening: each anchor
    stays near the support items it mixes (a local prototype, not a blur of far-apart items).
    It equals the P-weighted whitened variance of each mixture, so it rewards sparse rows.

Pairwise terms average over all pairs of banks, per-bank terms over banks.  With a single bank
(no ``parallel`` spaces) only uniformity and cohesion apply: the anchors then spread the
relative vectors out while staying local.
"""

import numpy as np
import torch

from .._core.backend import to_numpy, to_torch, torch_generator
from .._core.ranking import scaled_l2_normalize
from .similarity import torch_similarity

__all__ = ["DEFAULT_LOSS_WEIGHTS", "initial_logits", "train_mixture"]

DEFAULT_LOSS_WEIGHTS = {"jaccard": 1.0, "barlow": 1.0, "align_uniform": 1.0, "cohesion": 0.1}

# Softmax temperature of the soft Jaccard term, applied to row-standardised relative vectors.
_JACCARD_TEMPERATURE = 0.5
# Neighbour whose whitened distance sets the bandwidth of the initial mixtures.
_INIT_NEIGHBOUR = 8


def initial_logits(S_white, seeds, temperature):
    """Logits whose softmax is a Gaussian kernel around each seed support item.

    ``P_ij ~ exp(-||s_seed(i) - s_j||^2 / h)`` in whitened coordinates, ``h`` the median
    squared distance of a support item to its ``_INIT_NEIGHBOUR``-th neighbour, so every
    anchor starts as a local prototype near a distinct item rather than as the mean of
    the support (all-equal logits would make every anchor the same point).
    """
    S = np.asarray(S_white, dtype=np.float64)
    sq = np.einsum("ij,ij->i", S, S)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * S @ S.T, 0.0)
    k = S.shape[0]
    if k > 1:
        kth = np.sort(d2, axis=1)[:, min(_INIT_NEIGHBOUR, k - 1)]
        h = float(np.median(kth))
    else:
        h = 0.0
    h = h if h > 0 else 1.0
    return -temperature * d2[seeds] / h


def _standardize(R, dim):
    mean = R.mean(dim=dim, keepdim=True)
    std = R.std(dim=dim, keepdim=True, unbiased=False)
    return (R - mean) / torch.clamp(std, min=1e-6)


def _soft_jaccard(Rb, Rc):
    p = torch.softmax(_standardize(Rb, 1) / _JACCARD_TEMPERATURE, dim=1)
    q = torch.softmax(_standardize(Rc, 1) / _JACCARD_TEMPERATURE, dim=1)
    return 1.0 - (torch.minimum(p, q).sum(1) / torch.maximum(p, q).sum(1)).mean()


def _barlow(Rb, Rc):
    B, m = Rb.shape
    C = _standardize(Rb, 0).T @ _standardize(Rc, 0) / B
    diag = torch.diagonal(C)
    off = (C * C).sum() - (diag * diag).sum()
    return (((1.0 - diag) ** 2).sum() + off / m) / m


def _uniformity(u):
    B = u.shape[0]
    if B < 2:
        return u.new_zeros(())
    d2 = torch.cdist(u, u).pow(2)
    mask = ~torch.eye(B, dtype=torch.bool, device=u.device)
    return torch.logsumexp(-2.0 * d2[mask], dim=0) - np.log(B * (B - 1))


def train_mixture(
    banks,
    whitenings,
    support,
    logits0,
    similarity,
    *,
    temperature,
    weights,
    max_epochs,
    batch_size,
    lr,
    random_state,
    device,
    verbose,
):
    """Learn the mixture logits; returns ``(logits, history)`` as float64 numpy.

    Parameters
    ----------
    banks : list of ndarray, each (n, d_b)
        The same n items in every space; ``banks[0]`` is the encoder's own space.
    whitenings : list of (mean, L)
        Each bank's fitted mean and whitening (float64 numpy).
    support : ndarray of shape (k,)
        Rows of every bank that the anchors mix.
    logits0 : ndarray of shape (m, k)
        Initial logits.
    similarity : {"cosine", "euclidean", "dot", "wip"}
        The encoder's similarity.
    """
    dtype = torch.float32
    gen = torch_generator(random_state, device)
    stats = [(to_torch(mu, device, dtype), to_torch(L, device, dtype)) for mu, L in whitenings]
    sup = torch.as_tensor(support, device=device)
    wip = similarity == "wip"
    Xs, Ss, Sw, Sw_sq = [], [], [], []
    for B, (mu, L) in zip(banks, stats, strict=True):
        X = to_torch(B, device, dtype)
        # Rows of P sum to one, so (P S - mu) L = P ((S - mu) L): whitening the rows once
        # up front makes every WIP step a plain product with the whitened anchors.
        Xw = (X - mu) @ L if wip else X
        W = Xw[sup] if wip else (X[sup] - mu) @ L
        Xs.append(Xw)
        Ss.append(X[sup])
        Sw.append(W)
        Sw_sq.append((W * W).sum(1))
    logits = torch.nn.Parameter(to_torch(logits0, device, dtype))
    optimizer = torch.optim.Adam([logits], lr=lr)
    n = Xs[0].shape[0]
    batch = max(2, min(batch_size, n)) if n >= 2 else n
    pairs = [(b, c) for b in range(len(Xs)) for c in range(b + 1, len(Xs))]
    history = []
    for epoch in range(max_epochs):
        order = torch.randperm(n, generator=gen, device=device)
        total, steps = 0.0, 0
        for start in range(0, n, batch):
            idx = order[start : start + batch]
            if idx.numel() < 2 and n >= 2:
                continue  # a one-row tail has no batch statistics
            P = torch.softmax(logits / temperature, dim=1)
            R = []
            cohesion = logits.new_zeros(())
            for X, S, W, W_sq in zip(Xs, Ss, Sw, Sw_sq, strict=True):
                Aw = P @ W
                if wip:
                    R.append(X[idx] @ Aw.T)
                else:
                    R.append(torch_similarity(similarity, X[idx], P @ S, None, None))
                # sum_j P_ij ||Aw_i - W_j||^2 = sum_j P_ij ||W_j||^2 - ||Aw_i||^2
                spread = P @ W_sq - (Aw * Aw).sum(1)
                cohesion = cohesion + spread.mean() / W.shape[1]
            cohesion = cohesion / len(Xs)
            # A training step: differentiable, and no wait on the device to find the rows
            # whose plain norm overflows (which unit_rows reads once per call).
            units = [scaled_l2_normalize(r) for r in R]
            uniform = sum(_uniformity(u) for u in units) / len(units)
            loss = weights["cohesion"] * cohesion + weights["align_uniform"] * uniform
            if pairs:
                jac = sum(_soft_jaccard(R[b], R[c]) for b, c in pairs) / len(pairs)
                bt = sum(_barlow(R[b], R[c]) for b, c in pairs) / len(pairs)
                gaps = [(units[b] - units[c]).pow(2).sum(1).mean() for b, c in pairs]
                align = sum(gaps) / len(pairs)
                loss = (
                    loss
                    + weights["jaccard"] * jac
                    + weights["barlow"] * bt
                    + weights["align_uniform"] * align
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
            steps += 1
        history.append(total / max(steps, 1))
        if verbose:
            print(f"[PARAM] epoch {epoch + 1}/{max_epochs} loss {history[-1]:.5f}")
    return to_numpy(logits).astype(np.float64), np.asarray(history)

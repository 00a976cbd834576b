"""Similarity kernels of relative representations and the whitened inner product (WIP).

A relative representation of ``x`` is the vector of its similarities to ``m`` anchors.  Every
kernel here is one GEMM against a (d, m) matrix prepared once from the anchors and the fitted
statistics, so ``transform`` costs a matrix product plus O(n (d + m)) elementwise work, done in
row blocks whose working set stays under a fixed memory budget.

Whitened inner product (WIP, from PARAM: Svendsen, Jakobsen, Nassar, Mager, 2025-26):
``s(x, a) = <(x - mu) L, (a - mu) L>`` with ``L = Sigma_lam^(-1/2)`` and
``Sigma_lam = (1 - lam) Sigma + lam tr(Sigma)/d I + eps tr(Sigma)/d I``, where ``mu`` and
``Sigma`` are the mean and covariance of the space (from the rows given to ``fit``, never from a
transform batch) and ``lam`` in [0, 1] shrinks ``Sigma`` towards a multiple of the identity.
With ``lam = eps = 0``, ``s`` is unchanged by every invertible affine map of the space
(translation, rotation, anisotropic scale); the shrinkage and the ridge ``eps`` (relative to
``tr(Sigma)/d``, so scale-free) keep ``L`` well conditioned.  See docs/methods.md, section
"Relative representations and PARAM".
"""

import numpy as np
import torch
from sklearn.covariance import ledoit_wolf_shrinkage, oas

from .._core.backend import to_torch
from .._core.ranking import l2_normalize, safe_row_norms, scaled_l2_normalize

__all__ = [
    "SIMILARITIES",
    "whitening",
    "prepare_kernel",
    "relative_block",
    "relative_blockwise",
    "torch_similarity",
]

SIMILARITIES = ("cosine", "euclidean", "dot", "wip")

# Bytes of device working set per transform block (input block + output block).
_BLOCK_BYTES = 64 * 2**20
# Rows per float64 block when accumulating the covariance.
_STATS_ROWS = 16384


def whitening(X, shrinkage, eps):
    """Mean, inverse square root of the shrunk covariance, and the shrinkage used.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        The space's embeddings (all rows given to ``fit``; never a transform batch).
    shrinkage : float in [0, 1], "ledoit_wolf" or "oas"
        ``lam`` in ``(1 - lam) Sigma + lam tr(Sigma)/d I``; the strings estimate it with
        scikit-learn's Ledoit-Wolf or OAS formulas (the same target, ``tr(Sigma)/d I``).
    eps : float
        Ridge added to every eigenvalue, relative to ``tr(Sigma)/d`` so that it means the
        same thing in spaces of any scale.

    Returns
    -------
    mean : ndarray of shape (n_features,), float64
    L : ndarray of shape (n_features, n_features), float64
        Symmetric ``Sigma_lam^(-1/2)``.  Directions whose eigenvalue is zero to working
        precision (constant features, fewer samples than features) get 0 instead of an
        infinite gain: the pseudo-inverse square root, which is exact whenever
        ``Sigma_lam`` is invertible.
    shrinkage : float
        The shrinkage actually used.
    """
    n, d = X.shape
    mean = X.mean(axis=0, dtype=np.float64)
    # Centre before multiplying (the shortcut X^T X - n mu mu^T cancels badly), in float64
    # row blocks so that no full float64 copy of X is made.
    cov = np.zeros((d, d))
    for start in range(0, n, _STATS_ROWS):
        Xc = np.asarray(X[start : start + _STATS_ROWS], dtype=np.float64) - mean
        cov += Xc.T @ Xc
    cov /= n  # maximum-likelihood estimate, as sklearn.covariance uses
    if isinstance(shrinkage, str):
        if n < 2:
            lam = 1.0  # one row carries no covariance; fall back to the isotropic target
        elif shrinkage == "ledoit_wolf":
            lam = float(ledoit_wolf_shrinkage(X - mean, assume_centered=True))
        else:
            lam = float(oas(X - mean, assume_centered=True)[1])
    else:
        lam = float(shrinkage)
    scale = np.trace(cov) / d
    shrunk = (1.0 - lam) * cov
    shrunk[np.diag_indices(d)] += (lam + eps) * scale
    evals, evecs = np.linalg.eigh(shrunk)
    floor = max(evals.max(initial=0.0), 0.0) * d * np.finfo(np.float64).eps
    keep = evals > floor
    gains = np.zeros_like(evals)
    gains[keep] = 1.0 / np.sqrt(evals[keep])
    L = (evecs * gains) @ evecs.T
    return mean, L, lam


def prepare_kernel(similarity, anchors, mean=None, L=None):
    """Everything ``transform`` needs, so that one GEMM per block gives the similarities.

    Returns a dict of float64 numpy arrays (callers cast to the working dtype):

    - ``K`` (d, m): normalised anchors^T (cosine), anchors^T (dot), centred anchors^T
      (euclidean) or ``L ((A - mu) L)^T`` (wip);
    - ``bias`` (m,): wip's ``-mu K``, so that ``(x - mu) K = x K + bias`` is one fused GEMM;
    - ``center`` (d,) and ``anchor_sq`` (m,): euclidean works on rows translated by the
      anchors' mean (distances do not change; the norm expansion
      ``|x|^2 + |a|^2 - 2 x.a`` then cancels far less for clouds far from the origin).
    """
    A = np.asarray(anchors, dtype=np.float64)
    kernel = {"K": None, "bias": None, "center": None, "anchor_sq": None}
    if similarity == "cosine":
        kernel["K"] = l2_normalize(torch.from_numpy(A)).numpy().T
    elif similarity == "dot":
        kernel["K"] = A.T.copy()
    elif similarity == "euclidean":
        center = A.mean(axis=0)
        Ac = A - center
        kernel.update(K=Ac.T.copy(), center=center, anchor_sq=np.einsum("ij,ij->i", Ac, Ac))
    else:
        K = L @ ((A - mean) @ L).T
        kernel.update(K=K, bias=-(np.asarray(mean, dtype=np.float64) @ K))
    return kernel


def relative_block(Xb, similarity, kernel, out=None):
    """Similarities of a block of rows (torch, any device) to the prepared anchors.

    ``kernel`` holds :func:`prepare_kernel`'s arrays as tensors on Xb's device and dtype.
    ``out``, when given, is a tensor on the same device that receives the result (the GEMM
    writes straight into it and the rest is done in place), which saves a pass over the
    output when the host buffer itself can be written to.
    """
    K = kernel["K"]
    if similarity == "wip":
        # (x - mu) K = x K - mu K: one fused GEMM instead of a centred copy of the block.
        # Rounding grows with |x| / |x - mu| per row of d products; nothing accumulates
        # over rows (tested in float32 on clouds far from the origin).
        return torch.addmm(kernel["bias"], Xb, K, out=out)
    if similarity == "euclidean":
        Xc = Xb - kernel["center"]
        R = torch.matmul(Xc, K, out=out)
        # -||x - a|| from the GEMM; the clamp removes rounding below zero.
        R.mul_(-2.0).add_(torch.einsum("ij,ij->i", Xc, Xc)[:, None]).add_(kernel["anchor_sq"])
        return R.clamp_(min=0.0).sqrt_().neg_()
    R = torch.matmul(Xb, K, out=out)
    if similarity == "cosine":
        R.div_(torch.clamp(safe_row_norms(Xb), min=torch.finfo(Xb.dtype).tiny))
    return R


def relative_blockwise(
    X,
    similarity,
    kernel,
    device,
    *,
    l2=False,
    offset=None,
    shift=None,
    scale=None,
    budget=_BLOCK_BYTES,
):
    """Relative representation of every row of ``X`` (numpy), block by block on ``device``.

    ``kernel`` comes from :func:`prepare_kernel`.  The output is filled in place on the
    host, so device memory holds one block of input and output at a time whatever the
    number of rows.  ``offset`` (d,) is subtracted from every row first (the fitted
    centre; ``kernel`` must then be prepared from anchors centred alike).  ``l2`` scales
    each output row to unit norm; ``shift``/``scale`` standardise each output column
    (fitted statistics).

    Returns
    -------
    ndarray of shape (n_samples, n_anchors), in X's float dtype.
    """
    n, d = X.shape
    dtype = torch.float64 if X.dtype == np.float64 else torch.float32

    def put(a):
        return None if a is None else to_torch(a, device, dtype)

    tensors = {key: put(value) for key, value in kernel.items()}
    shift_t, scale_t, offset_t = put(shift), put(scale), put(offset)
    m = kernel["K"].shape[1]
    out = np.empty((n, m), dtype=X.dtype)
    host = torch.from_numpy(out)
    on_host = device.type == "cpu"
    step = int(max(1, budget // max(1, (d + 2 * m) * X.itemsize)))
    for start in range(0, n, step):
        stop = min(start + step, n)
        Xb = to_torch(X[start:stop], device, dtype)
        if offset_t is not None:
            Xb = Xb - offset_t
        # On the CPU the result is computed in place in the output array itself.
        R = relative_block(Xb, similarity, tensors, out=host[start:stop] if on_host else None)
        if l2:
            R.div_(torch.clamp(safe_row_norms(R), min=torch.finfo(R.dtype).tiny))
        if shift_t is not None:
            R.sub_(shift_t).div_(scale_t)
        if not on_host:
            host[start:stop].copy_(R)
    return out


def torch_similarity(similarity, X, A, mean, L):
    """Differentiable similarities of rows ``X`` to anchors ``A`` (both torch tensors).

    Used while learning anchors; ``mean`` and ``L`` are the space's whitening statistics.
    """
    if similarity == "wip":
        return ((X - mean) @ L) @ ((A - mean) @ L).T
    if similarity == "cosine":
        # Training steps: differentiable and without a host synchronisation per step.
        return scaled_l2_normalize(X) @ scaled_l2_normalize(A).T
    if similarity == "dot":
        return X @ A.T
    sq = (X * X).sum(1)[:, None] + (A * A).sum(1)[None, :] - 2.0 * X @ A.T
    # The floor keeps the gradient of the square root finite at zero distance.
    return -torch.sqrt(torch.clamp(sq, min=1e-12))

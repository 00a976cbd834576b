"""Representational similarity of two embedding spaces: linear CKA and SVCCA.

Both compare the same items embedded by two models (row ``i`` of ``X`` and of ``Y`` is one
item; the widths may differ) without fitting a map between them.  Public through
:mod:`sklearn_compat.metrics`.
"""

import numpy as np
import torch

from .._core.backend import resolve_device, to_torch
from .._core.validation import check_embeddings, check_same_rows

__all__ = ["linear_cka", "svcca"]


def _centred_pair(X, Y, device, min_rows=2):
    X = check_embeddings(X, "X", ensure_min_samples=min_rows)
    Y = check_embeddings(Y, "Y", ensure_min_samples=min_rows)
    check_same_rows(X, Y, ("X", "Y"))
    dev = resolve_device(device, for_inference=True)
    out = []
    for name, A in (("X", X), ("Y", Y)):
        T = to_torch(A, dev, torch.float64)
        T = T - T.mean(dim=0, keepdim=True)
        # Both measures are invariant to isotropic scale: bring entries near 1 so the
        # products below neither overflow nor underflow.
        peak = T.abs().max()
        if not peak > 0:
            raise ValueError(f"{name} has no variance (all rows are equal): nothing to compare.")
        out.append(T / peak)
    return out


def linear_cka(X, Y, *, device="auto"):
    """Linear centred kernel alignment (CKA) of two embeddings of the same items.

    With column-centred ``X`` and ``Y`` (Kornblith, Norouzi, Lee & Hinton, 2019,
    "Similarity of Neural Network Representations Revisited"),

    ``CKA = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)``,

    the normalised HSIC of the linear kernels ``X X^T`` and ``Y Y^T``, computed in feature
    space so no ``n x n`` matrix is formed.  It is 1 for identical spaces, invariant to any
    orthogonal map and isotropic scale of either side (not to general linear maps), and
    near 0 for unrelated ones.  A high CKA says the two models organise the items alike;
    :func:`alignability` says how well one orthogonal map can carry one onto the other.

    Parameters
    ----------
    X : array-like or torch.Tensor of shape (n_samples, n_features_x)
        The items in one space.
    Y : array-like or torch.Tensor of shape (n_samples, n_features_y)
        The same items, row for row, in the other space (widths may differ).
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to compute (float64 throughout).

    Returns
    -------
    float
        In [0, 1].

    See Also
    --------
    svcca : the mean canonical correlation after an SVD reduction.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import linear_cka
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 8))
    >>> rotation = np.linalg.qr(rng.normal(size=(8, 8)))[0]
    >>> round(linear_cka(X, 3.0 * X @ rotation + 1.0), 6)
    1.0
    >>> linear_cka(X, rng.normal(size=(200, 8))) < 0.1
    True
    """
    Xc, Yc = _centred_pair(X, Y, device)
    cross = torch.linalg.matrix_norm(Yc.T @ Xc) ** 2
    own = torch.linalg.matrix_norm(Xc.T @ Xc) * torch.linalg.matrix_norm(Yc.T @ Yc)
    return float(torch.clamp(cross / own, 0.0, 1.0))


def _leading_basis(T, keep_variance):
    """Orthonormal basis (n, r) of the fewest principal directions holding the variance."""
    U, S, _ = torch.linalg.svd(T, full_matrices=False)
    energy = torch.cumsum(S**2, dim=0) / (S**2).sum()
    wanted = int(
        torch.searchsorted(
            energy, torch.tensor(keep_variance - 1e-12, dtype=S.dtype, device=S.device)
        )
    )
    # Directions of numerically zero variance are arbitrary: never keep them.
    numerical_rank = int((S > S[0] * torch.finfo(S.dtype).eps * max(T.shape)).sum())
    return U[:, : min(wanted + 1, numerical_rank)]


def svcca(X, Y, *, keep_variance=0.99, device="auto"):
    """Singular vector canonical correlation analysis (SVCCA) of two embeddings.

    Following Raghu, Gilmer, Yosinski & Sohl-Dickstein (2017), "SVCCA: Singular Vector
    Canonical Correlation Analysis for Deep Learning Dynamics and Interpretability": each
    column-centred side is reduced by SVD to the fewest directions holding
    ``keep_variance`` of its variance, then the canonical correlations of the two reduced
    spaces (the singular values of ``U_X^T U_Y``, the cosines of their principal angles)
    are averaged.  Invariant to any invertible linear map of the reduced spaces, so to
    rotations and scales; 1 for identical spaces.

    CCA finds correlated directions by chance when the kept dimensions approach the
    number of items: use many more rows than the two reduced widths together.

    Parameters
    ----------
    X : array-like or torch.Tensor of shape (n_samples, n_features_x)
        The items in one space.
    Y : array-like or torch.Tensor of shape (n_samples, n_features_y)
        The same items, row for row, in the other space (widths may differ).
    keep_variance : float in (0, 1], default=0.99
        Share of each side's variance its SVD reduction keeps.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to compute (float64 throughout).

    Returns
    -------
    float
        Mean canonical correlation, in [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import svcca
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 6))
    >>> mixing = rng.normal(size=(6, 6))  # any invertible linear map
    >>> round(svcca(X, X @ mixing, keep_variance=1.0), 6)
    1.0
    """
    if isinstance(keep_variance, (bool, np.bool_)) or not (
        isinstance(keep_variance, (int, float, np.number)) and 0 < keep_variance <= 1
    ):
        raise ValueError(f"keep_variance must be a number in (0, 1], got {keep_variance!r}.")
    Xc, Yc = _centred_pair(X, Y, device, min_rows=3)
    Ux = _leading_basis(Xc, float(keep_variance))
    Uy = _leading_basis(Yc, float(keep_variance))
    correlations = torch.linalg.svdvals(Ux.T @ Uy).clamp(0.0, 1.0)
    return float(correlations.mean())

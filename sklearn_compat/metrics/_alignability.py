"""How alignable two embedding spaces are, measured from their Gram matrices alone.

From Maystre, Ortega Gonzalez, Park, Dolga, Berariu, Zhao, Ciosek, "When Embedding Models
Meet: Procrustes Bounds and Applications", arXiv:2510.13406 (2025); see also docs/methods.md,
section "Orthogonal Procrustes".  If the Gram matrices of the same items are
close, ``||X X^T - Y Y^T||_F <= eps``, an orthogonal ``Q`` exists with
``||X Q - Y||_F <= (2D)^(1/4) sqrt(eps)``; per item, ``E||Q x_i - y_i||^2 <= sqrt(2D) delta``
where ``delta^2 = E_ij[(x_i.x_j - y_i.y_j)^2]``.  Nothing has to be fitted to know this.
"""

import numpy as np
import torch
from sklearn.utils import Bunch, check_random_state

from .._core.backend import no_tf32, resolve_device, to_torch
from .._core.validation import check_embeddings, check_positive_int, check_same_rows

__all__ = ["alignability"]

# Rows of sampled pairs processed at once by the max_pairs estimate.
_PAIR_CHUNK = 1 << 16


def alignability(
    X,
    Y,
    *,
    normalize=True,
    center=False,
    max_pairs=None,
    random_state=None,
    device="auto",
):
    """Gram-matrix diagnostic of how well an orthogonal map can align ``X`` with ``Y``.

    Compares the pairwise dot products of the same items in the two spaces,
    ``delta = E_ij[(x_i.x_j - y_i.y_j)^2]^(1/2)`` over all ordered pairs (the diagonal
    included), so ``||X X^T - Y Y^T||_F = n delta``, and turns it into the Procrustes
    bounds of Maystre et al. (2025).  It also reports the residual the best orthogonal
    map actually reaches, so the bound's slack can be read off.  Small ``delta`` (compared
    with the typical dot product, 1 for normalised rows) means the spaces differ by little
    more than a rotation.

    Parameters
    ----------
    X : array-like or torch.Tensor of shape (n_samples, n_features_x)
        Embeddings of the items in one space.
    Y : array-like or torch.Tensor of shape (n_samples, n_features_y)
        The same items, row for row, in the other space (the widths may differ; the
        smaller side is thought of as zero-padded to ``D = max(n_features_x,
        n_features_y)``).
    normalize : bool, default=True
        L2-normalise rows first, so dot products are cosines and the two models' norm
        scales do not dominate ``delta``.  Set False to diagnose the raw vectors.
    center : bool, default=False
        Subtract each side's column mean (after normalising), matching
        ``OrthogonalProcrustesAligner(center=True)``.
    max_pairs : int, default=None
        None computes everything exactly.  An int estimates ``delta`` and the Gram gap from
        that many pairs ``(i, j)`` drawn uniformly with replacement instead (the exact path
        is already ``O(n D^2)`` and rarely worth replacing; the estimate is unbiased for
        ``delta^2``).  The achieved ``procrustes_error`` is always exact.
    random_state : int, RandomState instance or None, default=None
        Seeds the pair sample of ``max_pairs``.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to compute (float64 throughout).

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        With float fields:

        - ``delta``: RMS difference of the dot products over all pairs;
        - ``gram_gap``: ``||X X^T - Y Y^T||_F`` (``= n * delta``);
        - ``procrustes_error_bound``: ``(2D)^(1/4) sqrt(gram_gap)``, a bound on
          ``min_Q ||X Q - Y||_F`` over orthogonal ``Q``;
        - ``procrustes_error``: that minimum, computed exactly from the SVD of ``X^T Y``;
        - ``mean_sq_error_bound``: ``sqrt(2D) * delta``, a bound on the per-item
          ``E||Q x_i - y_i||^2``;
        - ``mean_sq_error``: ``procrustes_error^2 / n``, the achieved per-item value;

        and ``n_samples``, ``dim`` (``D``) as ints.

    Notes
    -----
    No ``n x n`` matrix is formed: with ``A = X^T X``, ``B = Y^T Y``, ``C = X^T Y``,
    ``||X X^T - Y Y^T||_F^2 = ||A||_F^2 + ||B||_F^2 - 2 ||C||_F^2`` (trace identities), in
    float64.  The subtraction loses relative accuracy only when ``delta`` is below about
    ``1e-6`` of the typical dot product.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import ortho_group
    >>> from sklearn_compat.metrics import alignability
    >>> X = np.random.default_rng(0).normal(size=(100, 8))
    >>> Q = ortho_group.rvs(8, random_state=0)
    >>> result = alignability(X, X @ Q)  # a rotation: perfectly alignable
    >>> round(result.delta, 12), round(result.procrustes_error, 6)
    (0.0, 0.0)
    >>> noisy = alignability(X, X @ Q + 0.3 * np.random.default_rng(1).normal(size=(100, 8)))
    >>> bool(noisy.procrustes_error <= noisy.procrustes_error_bound)
    True
    """
    X = check_embeddings(X, "X")
    Y = check_embeddings(Y, "Y")
    check_same_rows(X, Y, ("X", "Y"))
    max_pairs = check_positive_int(max_pairs, "max_pairs", allow_none=True)
    n = X.shape[0]
    dim = max(X.shape[1], Y.shape[1])
    dev = resolve_device(device, for_inference=True)
    Xt = _prepare(to_torch(X, dev, torch.float64), normalize, center)
    Yt = _prepare(to_torch(Y, dev, torch.float64), normalize, center)

    with no_tf32():
        cross = Xt.T @ Yt
        if max_pairs is None:
            gap_sq = (
                torch.linalg.matrix_norm(Xt.T @ Xt) ** 2
                + torch.linalg.matrix_norm(Yt.T @ Yt) ** 2
                - 2 * torch.linalg.matrix_norm(cross) ** 2
            ).item()
            delta = float(np.sqrt(max(gap_sq, 0.0))) / n
        else:
            delta = _sampled_delta(Xt, Yt, max_pairs, random_state)
    # min over orthogonal Q (zero-padded to D) of ||X Q - Y||_F^2
    # = ||X||^2 + ||Y||^2 - 2 * nuclear norm of X^T Y.
    nuclear = float(np.linalg.svd(cross.cpu().numpy(), compute_uv=False).sum())
    sq_error = (Xt.square().sum() + Yt.square().sum()).item() - 2 * nuclear
    procrustes_error = float(np.sqrt(max(sq_error, 0.0)))
    gram_gap = n * delta
    return Bunch(
        delta=delta,
        gram_gap=gram_gap,
        procrustes_error_bound=float((2 * dim) ** 0.25 * np.sqrt(gram_gap)),
        procrustes_error=procrustes_error,
        mean_sq_error_bound=float(np.sqrt(2 * dim) * delta),
        mean_sq_error=procrustes_error**2 / n,
        n_samples=int(n),
        dim=int(dim),
    )


def _prepare(T, normalize, center):
    if normalize:
        norms = torch.linalg.vector_norm(T, dim=1, keepdim=True)
        T = T / torch.clamp(norms, min=torch.finfo(T.dtype).tiny)
    if center:
        T = T - T.mean(dim=0, keepdim=True)
    return T


def _sampled_delta(Xt, Yt, n_pairs, random_state):
    """RMS of ``x_i.x_j - y_i.y_j`` over ``n_pairs`` uniformly drawn ordered pairs."""
    rng = check_random_state(random_state)
    n = Xt.shape[0]
    total = 0.0
    for start in range(0, n_pairs, _PAIR_CHUNK):
        size = min(_PAIR_CHUNK, n_pairs - start)
        i = torch.as_tensor(rng.randint(0, n, size), device=Xt.device)
        j = torch.as_tensor(rng.randint(0, n, size), device=Xt.device)
        diff = (Xt[i] * Xt[j]).sum(dim=1) - (Yt[i] * Yt[j]).sum(dim=1)
        total += diff.square().sum().item()
    return float(np.sqrt(total / n_pairs))

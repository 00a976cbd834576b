"""Anisotropy of an embedding space: how strongly its rows share one common direction.

Many retrieval models put every embedding in a narrow cone around one direction (Ethayarajh,
2019, "How contextual are contextualized word representations?"; the E5, BGE and GTE
families among them).  Uncentred cosine similarities and uncentred orthogonal maps are then
dominated by that direction: anchors all look alike and a rotation fitted between two spaces
must mostly match their means.  :func:`anisotropy` measures it, and
:func:`warn_if_anisotropic` is the cheap check that estimators run at ``fit``.

Both figures come from the unit-normalised rows ``u_i`` (an all-zero row stays zero, as in
the ranking kernels).  With their mean ``m``, the mean cosine over distinct pairs is exact in
O(n d)::

    sum_{i != j} u_i . u_j = |sum_i u_i|^2 - sum_i |u_i|^2

so no pairwise matrix is ever formed; rows are processed in chunks.
"""

import numbers
import warnings

import numpy as np
import torch
from sklearn.utils import check_random_state

from .._core.backend import as_numpy_input, is_dask_collection, resolve_device, to_torch
from .._core.ranking import check_embeddings, l2_normalize
from ..exceptions import AnisotropyWarning

__all__ = ["ANISOTROPY_THRESHOLD", "AnisotropyWarning", "anisotropy", "warn_if_anisotropic"]

# A space whose unit-normalised rows have a mean of norm above this shares one common
# direction strongly enough (mean pairwise cosine about its square, 0.25) for uncentred
# cosine anchors and uncentred Procrustes to lose most of their accuracy on real pairs
# (multilingual-e5-small: 0.89; MNIST CNN features: 0.82-0.87; MiniLM, WordLlama: 0.14-0.28).
ANISOTROPY_THRESHOLD = 0.5
# Rows sampled by the fit-time check: the mean of 1,024 unit vectors is within about
# 1/sqrt(1024) = 0.03 of the full mean, far below the threshold's margin.
_CHECK_ROWS = 1024
_CHUNK_ROWS = 65536


def anisotropy(X, *, n_samples=100_000, random_state=None, device="auto"):
    """Mean direction strength and mean pairwise cosine of an embedding space.

    Parameters
    ----------
    X : array-like or torch.Tensor of shape (n_rows, n_features)
        Embeddings (numpy, pandas or torch on any device); at least 2 rows.
    n_samples : int or None, default=100_000
        Rows drawn at random without replacement when X has more; None uses every row.
        Both figures are exact for the rows used.
    random_state : int, RandomState instance or None, default=None
        Seeds the row sample (only used when X has more than ``n_samples`` rows).
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the row normalisation runs (chunks of 65,536 rows, memory-bounded).

    Returns
    -------
    dict
        ``mean_norm``: norm of the mean of the unit-normalised rows, in [0, 1] (0: no
        common direction, 1: every row points the same way);
        ``mean_cosine``: mean cosine similarity over all pairs of distinct rows, in
        [-1, 1].  Both are Python floats.

    Notes
    -----
    ``mean_cosine = (n^2 mean_norm^2 - n_nonzero) / (n (n - 1))``: the sum of all pairwise
    cosines is the squared norm of the sum of the unit rows minus their own squared norms,
    so the statistic costs one pass over the rows.  An all-zero row counts as a unit row of
    cosine 0 to everything.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.metrics import anisotropy
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(2000, 64))
    >>> round(anisotropy(X)["mean_norm"], 1)
    0.0
    >>> stats = anisotropy(X + 1.0)  # a common offset: every row leans toward (1, ..., 1)
    >>> stats["mean_norm"] > 0.6, stats["mean_cosine"] > 0.4
    (True, True)
    """
    if n_samples is not None and (
        not isinstance(n_samples, numbers.Integral) or isinstance(n_samples, bool) or n_samples < 2
    ):
        raise ValueError(f"n_samples must be an integer >= 2 or None, got {n_samples!r}.")
    X = check_embeddings(X, "X", ensure_min_samples=2)
    n = X.shape[0]
    if n_samples is not None and n > n_samples:
        rows = check_random_state(random_state).choice(n, size=n_samples, replace=False)
        X = X[np.sort(rows)]
    return _unit_mean_stats(X, resolve_device(device, for_inference=True))


def _unit_mean_stats(X, device):
    n = X.shape[0]
    dtype = torch.float64 if X.dtype == np.float64 else torch.float32
    total = torch.zeros(X.shape[1], dtype=torch.float64, device=device)
    nonzero = 0
    for start in range(0, n, _CHUNK_ROWS):
        U = l2_normalize(to_torch(X[start : start + _CHUNK_ROWS], device, dtype))
        total += U.sum(dim=0, dtype=torch.float64)
        nonzero += int(torch.count_nonzero(U.abs().sum(dim=1)))
    sq_sum = float(total @ total)
    return {
        "mean_norm": float(np.sqrt(sq_sum) / n),
        "mean_cosine": float((sq_sum - nonzero) / (n * (n - 1))),
    }


def sample_rows(X, n_rows=_CHECK_ROWS):
    """Up to ``n_rows`` evenly spaced rows of X as numpy (numpy, pandas, torch or Dask).

    Evenly spaced rather than random so that the check repeats exactly and reads a Dask
    array's chunks once; only the sampled rows leave a GPU.
    """
    n = X.shape[0]
    rows = np.unique(np.linspace(0, n - 1, num=min(n, n_rows)).astype(np.int64))
    if isinstance(X, torch.Tensor):
        return as_numpy_input(X.detach()[torch.as_tensor(rows, device=X.device)])
    if is_dask_collection(X):
        return np.asarray(X[rows].compute())
    if hasattr(X, "iloc"):
        return np.asarray(X.iloc[rows])
    return np.asarray(X)[rows]


def warn_if_anisotropic(arrays, *, estimator, fix, consequence, stacklevel=3):
    """Warn when one of ``arrays`` shares a common direction above the threshold.

    Parameters
    ----------
    arrays : dict of name -> array
        The fitted inputs (validated or not); up to 1,024 evenly spaced rows of each are
        checked, so the cost is negligible next to any fit.
    estimator : str
        Class name used in the message.
    fix : str
        The parameter setting that fixes it, e.g. ``"center=True"``.
    consequence : str
        What goes wrong, completing "an uncentred ... ".
    """
    for name, X in arrays.items():
        sample = np.asarray(sample_rows(X), dtype=np.float64)
        if sample.shape[0] < 2 or not np.isfinite(sample).all():
            continue  # validation reports it, or there is nothing to measure
        stats = _unit_mean_stats(sample, torch.device("cpu"))
        if stats["mean_norm"] > ANISOTROPY_THRESHOLD:
            warnings.warn(
                f"{estimator}: {name} is anisotropic (its rows share one common direction: "
                f"mean_norm={stats['mean_norm']:.2f} > {ANISOTROPY_THRESHOLD}, mean pairwise "
                f"cosine {stats['mean_cosine']:.2f}), so {consequence}; set {fix}.",
                AnisotropyWarning,
                stacklevel=stacklevel,
            )
            return

"""A warning when a fit has fewer pairs than the widths of the two spaces need.

The floors, with ``c = 1`` when the fit centres the rows (a centred fit loses one rank:
``n`` centred rows span at most ``n - 1`` directions) and ``c = 0`` otherwise:

- least squares (``AffineAligner`` without ridge, ``LambdaOrthAligner(lam=inf)``):
  ``max(d_x, d_y) + c``.  Below ``d_x + c`` the normal equations are singular and many
  maps fit the pairs exactly (the minimum-norm one is returned, sending every direction
  of X that no pair spans to zero); below ``d_y + c`` the mapped rows span only part of
  Y's space.  A ridge penalty (``alpha > 0``) makes the problem well posed: no warning.
- whitening (``WhitenedProcrustesAligner(whiten=True)``): ``d_x + d_y + c``.  With
  fewer pairs, the whitened X and Y rows each span up to ``n - c`` directions of the same
  ``(n - c)``-dimensional row space, so they share directions and some canonical
  correlations are exactly 1 whatever the data: the map fits the pairs exactly (noise
  included) and says nothing about other rows.
- orthogonal maps (Procrustes, its refined and RCSLS forms, the lambda-orthogonal and
  residual adapters): ``min(d_x, d_y) + c``.  The map comes from the cross product
  ``X_c^T Y_c``, of rank at most ``n - c``; below ``min(d_x, d_y)`` the pairs fix it only
  on the directions they span and the rest is a choice the data do not make.

These are the counts at which the map stops being determined by the pairs at all; a map
that also generalises needs several times more.
"""

import warnings

import numpy as np

from ..exceptions import UnderdeterminedFitWarning

__all__ = ["UnderdeterminedFitWarning", "pairs_needed", "warn_if_few_pairs"]


def _centred(estimator):
    fitted = getattr(estimator, "center_", None)
    if fitted is not None:
        return bool(fitted)
    params = estimator.get_params(deep=False)
    for name in ("center", "fit_intercept"):
        if name in params:
            return bool(params[name])
    return True


def pairs_needed(estimator, d_x, d_y):
    """``(pairs, consequence)`` below which ``estimator``'s map is underdetermined, or
    ``None`` when any number of pairs determines it (a ridge penalty)."""
    params = estimator.get_params(deep=False)
    c = int(_centred(estimator))
    lam = params.get("lam")
    affine = "alpha" in params or (isinstance(lam, float) and np.isinf(lam))
    if affine:
        if params.get("alpha", 0.0) > 0:
            return None
        return max(d_x, d_y) + c, (
            "many maps fit the pairs equally well; the minimum-norm one is returned, which "
            "maps every direction of X that no pair spans to zero"
        )
    if params.get("whiten", False):
        return d_x + d_y + c, (
            "after whitening some canonical correlations are 1 whatever the data, so the "
            "map fits the pairs exactly (noise included) and generalises poorly"
        )
    return min(d_x, d_y) + c, (
        "the pairs fix the map only on the directions they span; on the others it is "
        "a choice the data do not make"
    )


def warn_if_few_pairs(estimator, n_pairs, stacklevel=3):
    """Warn with :class:`UnderdeterminedFitWarning` when ``n_pairs`` is below the floor."""
    d_x, d_y = int(estimator.n_features_in_), int(estimator.n_targets_)
    floor = pairs_needed(estimator, d_x, d_y)
    if floor is None or n_pairs >= floor[0]:
        return
    needed, consequence = floor
    warnings.warn(
        f"{type(estimator).__name__} was fitted on {n_pairs} pairs, fewer than the "
        f"{needed} that {d_x} -> {d_y} dimensions need: the map is underdetermined: "
        f"{consequence}. Fit on more pairs"
        + (" or use alpha > 0." if "alpha" in estimator.get_params(deep=False) else "."),
        UnderdeterminedFitWarning,
        stacklevel=stacklevel,
    )

"""Detect the unrelated ``sklearn-compat`` distribution that shares our import name."""

import warnings
from importlib import metadata

__all__ = ["CLASHING_DISTRIBUTION", "warn_if_clashing_distribution"]

# The PyPI project ``sklearn-compat`` (a compatibility shim used by imbalanced-learn and
# scikit-lego) also installs a top-level ``sklearn_compat`` package.  Installing both in
# one environment silently overwrites one with the other.
CLASHING_DISTRIBUTION = "sklearn-compat"
OUR_DISTRIBUTION = "sklearn-embedding-compat"


def warn_if_clashing_distribution():
    """Warn when the unrelated ``sklearn-compat`` distribution is installed too.

    Returns
    -------
    bool
        True when the clashing distribution was found (and a warning issued).
    """
    try:
        version = metadata.version(CLASHING_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return False
    warnings.warn(
        f"The unrelated distribution '{CLASHING_DISTRIBUTION}' (version {version}) is "
        f"installed in this environment and uses the same import name 'sklearn_compat' as "
        f"'{OUR_DISTRIBUTION}'; one has overwritten the other's files.  Install them in "
        f"separate environments.",
        UserWarning,
        stacklevel=2,
    )
    return True

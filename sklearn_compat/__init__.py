"""sklearn_compat: make embedding models interoperable with scikit-learn estimators.

Learn maps between the embedding spaces of two models (orthogonal Procrustes, affine, the
lambda-orthogonality regularised adapter) and relative "anchor" representations, as
scikit-learn estimators trained with torch on CUDA when available, else on the CPU.

The distribution is called ``sklearn-embedding-compat``; the PyPI name ``sklearn-compat``
belongs to an unrelated project with the same import name (see README.md).
"""

from ._clash import warn_if_clashing_distribution
from ._lazy import lazy_exports

# Imported on first use, so that the command line starts without torch (see _lazy).
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AffineAligner": ".affine",
        "AlignedNeighbors": ".neighbors",
        "AutoSettingWarning": ".exceptions",
        "LambdaOrthAligner": ".lambda_orth",
        "LambdaOrthAlignerCV": ".lambda_orth_cv",
        "OrthogonalProcrustesAligner": ".procrustes",
        "RCSLSAligner": ".rcsls",
        "RefinedProcrustesAligner": ".refined",
        "RelativeAnchorEncoder": ".relative",
        "ResidualAdapterAligner": ".residual",
        "UnderdeterminedFitWarning": ".exceptions",
        "UnpairedProcrustesAligner": ".unpaired",
        "UnreliableAlignmentWarning": ".exceptions",
        "WhitenedProcrustesAligner": ".whitened",
        "lambda_orth_path": ".lambda_orth_cv",
        "lambda_orth_penalty": ".lambda_orth",
        "exceptions": ".exceptions",
        "metrics": ".metrics",
    },
)

__version__ = "0.1.0"

__all__ = [
    "AffineAligner",
    "AlignedNeighbors",
    "AutoSettingWarning",
    "LambdaOrthAligner",
    "LambdaOrthAlignerCV",
    "OrthogonalProcrustesAligner",
    "RCSLSAligner",
    "RefinedProcrustesAligner",
    "RelativeAnchorEncoder",
    "ResidualAdapterAligner",
    "UnderdeterminedFitWarning",
    "UnpairedProcrustesAligner",
    "UnreliableAlignmentWarning",
    "WhitenedProcrustesAligner",
    "__version__",
    "exceptions",
    "lambda_orth_penalty",
    "lambda_orth_path",
    "metrics",
]

warn_if_clashing_distribution()

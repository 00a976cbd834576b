"""sklearn_compat: make embedding models interoperable with scikit-learn estimators.

Learn maps between the embedding spaces of two models (orthogonal Procrustes, affine, the
lambda-orthogonality regularised adapter) and relative "anchor" representations, as
scikit-learn estimators trained with torch on CUDA when available, else on the CPU.

The distribution is called ``sklearn-embedding-compat``; the PyPI name ``sklearn-compat``
belongs to an unrelated project with the same import name (see README.md).
"""

from . import metrics
from ._clash import warn_if_clashing_distribution
from .affine import AffineAligner
from .lambda_orth import LambdaOrthAligner, lambda_orth_path, lambda_orth_penalty
from .lambda_orth_cv import LambdaOrthAlignerCV
from .neighbors import AlignedNeighbors
from .procrustes import OrthogonalProcrustesAligner
from .relative import RelativeAnchorEncoder

__version__ = "0.1.0"

__all__ = [
    "AffineAligner",
    "AlignedNeighbors",
    "LambdaOrthAligner",
    "LambdaOrthAlignerCV",
    "OrthogonalProcrustesAligner",
    "RelativeAnchorEncoder",
    "__version__",
    "lambda_orth_penalty",
    "metrics",
    "lambda_orth_path",
]

warn_if_clashing_distribution()

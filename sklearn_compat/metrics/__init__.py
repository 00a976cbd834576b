"""Retrieval and compatibility metrics for aligned embeddings, and scorers.

Every similarity-based metric uses cosine similarity, runs with torch on ``device``
("auto": CUDA when present) and works through blocks of queries under a memory budget, so
folds of 100k rows never form an ``n x n`` matrix.  Ties count against the query
throughout.  Inputs may be numpy arrays, pandas DataFrames or torch tensors.

Paired retrieval (row ``i`` of one set is the partner of row ``i`` of the other):

- :func:`paired_topk_accuracy` (optionally CSLS-ranked), :func:`mean_cosine_similarity`.

Class-label retrieval (the protocol of compatible representation learning):

- :func:`cmc_topk_accuracy`, :func:`mean_average_precision`: a query is excluded from its
  own gallery when query set and gallery hold the same items;
- :func:`backfilling_curve`, :func:`backfilling_auc`, :func:`backfilling_order`: the
  metric while the gallery is re-embedded in stages.

Judged retrieval (relevance judgements: qrels, held-out interactions; cosine or dot):

- :func:`ndcg_at_k`, :func:`recall_at_k`: graded gains (a sparse or dense queries x gallery
  matrix) or per-query item lists, with items excluded from ranking (seen items, the query
  itself).

Geometry:

- :func:`neighbourhood_preservation`: k-neighbourhoods kept by a map;
- :func:`alignability`: the Gram-matrix diagnostic and Procrustes bounds;
- :func:`anisotropy`: how strongly a space's rows share one common direction;
- :func:`linear_cka`, :func:`svcca`: representational similarity of the same items in two
  spaces, without fitting a map.

Deciding an upgrade:

- :func:`compatibility_report`: old, bridged and re-indexed retrieval side by side, the
  bridge's retention with confidence intervals, and a one-line decision.

Model selection:

- :func:`make_retrieval_scorer`, :func:`make_multi_retrieval_scorer`,
  :func:`get_retrieval_scorer_names`.
"""

from ._alignability import alignability
from ._anisotropy import AnisotropyWarning, anisotropy
from ._backfill import backfilling_auc, backfilling_curve, backfilling_order
from ._judged import ndcg_at_k, recall_at_k
from ._report import CompatibilityReport, compatibility_report
from ._representational import linear_cka, svcca
from ._retrieval import (
    cmc_topk_accuracy,
    mean_average_precision,
    mean_cosine_similarity,
    neighbourhood_preservation,
    paired_topk_accuracy,
)
from ._scorers import (
    get_retrieval_scorer_names,
    make_multi_retrieval_scorer,
    make_retrieval_scorer,
)

__all__ = [
    "CompatibilityReport",
    "alignability",
    "anisotropy",
    "AnisotropyWarning",
    "backfilling_auc",
    "backfilling_curve",
    "backfilling_order",
    "cmc_topk_accuracy",
    "compatibility_report",
    "get_retrieval_scorer_names",
    "linear_cka",
    "make_multi_retrieval_scorer",
    "make_retrieval_scorer",
    "mean_average_precision",
    "ndcg_at_k",
    "mean_cosine_similarity",
    "neighbourhood_preservation",
    "paired_topk_accuracy",
    "recall_at_k",
    "svcca",
]

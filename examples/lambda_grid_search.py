"""Choosing lam with GridSearchCV in a Pipeline
============================================

``lam`` is an ordinary hyper-parameter of :class:`~sklearn_compat.LambdaOrthAligner`, so
scikit-learn's ``GridSearchCV`` chooses it, inside a ``Pipeline``, with class labels routed
to the aligner's ``fit``. The aligner's default ``score`` (paired top-1 retrieval: does each
adapted new embedding find its own old embedding?) drives a plain search; a multi-metric
search then reports top-1, top-5 and the new space's neighbourhood preservation side by side
and refits on top-1.

Data: :func:`~sklearn_compat.datasets.load_mnist_features` (old model: the MLP ``mlp_s0``,
new model: the conv net ``cnn_s0``), a slice of the training digits to keep the search
short.
"""

# %%
# The pipeline and the grid
# -------------------------
# ``labels`` reach ``LambdaOrthAligner.fit`` through scikit-learn's metadata routing
# (``set_fit_request(labels=True)``), split along with the CV folds, and switch its
# contrastive term to the supervised form. The rows are L2-normalised first, the paper's
# setting.

import math

import pandas as pd
import sklearn
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import Normalizer

from sklearn_compat import LambdaOrthAligner
from sklearn_compat.datasets import load_mnist_features
from sklearn_compat.metrics import make_multi_retrieval_scorer

data = load_mnist_features()
old, new, labels = data.mlp_s0, data.cnn_s0, data.labels
train, test = data.train_idx[:1200], data.test_idx

sklearn.set_config(enable_metadata_routing=True)
aligner = LambdaOrthAligner(max_epochs=20, random_state=0).set_fit_request(labels=True)
pipe = Pipeline([("l2", Normalizer()), ("align", aligner)])
grid = {"align__lam": [0.0, 1.0, math.inf]}

# %%
# Default scoring: paired top-1
# -----------------------------
# ``scoring=None`` uses the pipeline's ``score``, which is the aligner's paired top-1.

search = GridSearchCV(pipe, grid, cv=3).fit(new[train], old[train], labels=labels[train])
print(pd.DataFrame(search.cv_results_)[["param_align__lam", "mean_test_score"]].round(3))
print(
    f"best lam {search.best_params_['align__lam']}, held-out test top-1 "
    f"{search.score(new[test], old[test]):.3f}"
)

# %%
# Several metrics from one transform per fold
# -------------------------------------------
# :func:`~sklearn_compat.metrics.make_multi_retrieval_scorer` maps each fold's held-out rows
# once and scores every metric on them; ``refit="top1"`` keeps top-1 as the criterion.

scoring = make_multi_retrieval_scorer(("top1", "top5", "neighbourhood_preservation"))
multi = GridSearchCV(pipe, grid, cv=3, scoring=scoring, refit="top1")
multi.fit(new[train], old[train], labels=labels[train])
columns = ["param_align__lam", "mean_test_top1", "mean_test_top5"]
columns.append("mean_test_neighbourhood_preservation")
print(pd.DataFrame(multi.cv_results_)[columns].round(3).to_string(index=False))
best = multi.best_estimator_.named_steps["align"]
print(f"refitted lam {best.lam}: orthogonality gap {best.orthogonality_gap_:.2f}")

sklearn.set_config(enable_metadata_routing=False)

# %%
# :class:`~sklearn_compat.LambdaOrthAlignerCV` runs the same search along the whole ``lam``
# path in one fit per fold, warm-starting each ``lam`` from the previous one
# (:ref:`lam_tradeoff`).

"""Grid search over lam on a Dask cluster
======================================

GridSearchCV over ``lam`` (and ridge ``alpha``), run on a Dask cluster.

scikit-learn parallelises a grid search with joblib; joblib's "dask" backend sends each
(candidate, fold) fit to the workers of a ``dask.distributed`` cluster.  Nothing in the
search changes: only the ``joblib.parallel_config(backend="dask")`` block is added.

The aligners' default score is paired top-1 retrieval, so ``scoring=None`` selects what a
retrieval system cares about.  Two searches run on a small, noisy training pair (256-d
source, 480 training rows per fold): ``lam`` of ``LambdaOrthAligner`` (how far from
orthogonal the adapter may go) and ``alpha`` of ``AffineAligner`` (ridge shrinkage).

The example starts a ``LocalCluster`` on this machine; on a real cluster, pass the
scheduler's address instead: ``Client("tcp://scheduler:8786")``.
"""

# %%
# The searches
# ------------
# The estimators and their grids, exactly as for an in-memory search.

import joblib
import numpy as np
from distributed import Client, LocalCluster
from sklearn.model_selection import GridSearchCV, KFold

from sklearn_compat import AffineAligner, LambdaOrthAligner

# The estimators and the grids to search.
SEARCHES = [
    (LambdaOrthAligner(max_epochs=30, random_state=0), {"lam": [0.0, 2.0, 6.0, np.inf]}),
    (AffineAligner(), {"alpha": [0.0, 10.0, 100.0, 1000.0, 10000.0]}),
]

# %%
# A pair of embeddings
# --------------------
# Synthetic: a 256-d "new" model and a 48-d "old" one, noisy, few rows.


def make_pair(n=600, d_new=256, d_old=48, seed=0):
    """Noisy embeddings of the same n items from a 'new' and an 'old' model (synthetic).

    Few rows for a 256-d source: the unregularised least-squares map fits the noise, and
    ridge shrinkage pays off in held-out retrieval.
    """
    rng = np.random.default_rng(seed)
    items = rng.normal(size=(n, 32))
    new = np.tanh(items @ rng.normal(size=(32, d_new)) / 4) + rng.normal(size=(n, d_new))
    old = items @ rng.normal(size=(32, d_old)) + 4.0 * rng.normal(size=(n, d_old))
    return new.astype(np.float32), old.astype(np.float32)


X, Y = make_pair()

# %%
# Every fit on the cluster
# ------------------------
# ``n_jobs=-1`` and the ``dask`` backend send each (candidate, fold) fit to the workers.


def search_on_dask(estimator, grid, X, Y, *, cv=5):
    """Run ``GridSearchCV(estimator, grid)`` with every fit on the current Dask client."""
    search = GridSearchCV(estimator, grid, cv=KFold(cv, shuffle=True, random_state=0), n_jobs=-1)
    with joblib.parallel_config(backend="dask"):
        return search.fit(X, Y)


# Workers as threads of this process, so that the example runs anywhere (worker processes,
# the default, need the cluster started under a main-module guard).
cluster = LocalCluster(
    n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
)
with Client(cluster) as client:
    print(f"Dask cluster: {len(client.scheduler_info()['workers'])} workers")
    searches = [(grid, search_on_dask(estimator, grid, X, Y)) for estimator, grid in SEARCHES]
cluster.close()

# %%
# The results
# -----------
# Mean held-out top-1 over the five folds for each value.

for grid, search in searches:
    (name,) = grid
    print(f"\n{type(search.estimator).__name__}")
    print(f"{name:>10}  mean top-1 (5-fold CV)")
    values = search.cv_results_[f"param_{name}"]
    for value, score in zip(values, search.cv_results_["mean_test_score"], strict=True):
        print(f"{value:>10}  {score:.3f}")
    print(f"best: {search.best_params_}, top-1 {search.best_score_:.3f}")

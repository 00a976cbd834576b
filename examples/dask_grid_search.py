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

    python examples/dask_grid_search.py                      # a LocalCluster on this machine
    python examples/dask_grid_search.py --scheduler tcp://scheduler:8786   # an existing one
"""

import argparse

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


def search_on_dask(estimator, grid, X, Y, *, cv=5):
    """Run ``GridSearchCV(estimator, grid)`` with every fit on the current Dask client."""
    search = GridSearchCV(estimator, grid, cv=KFold(cv, shuffle=True, random_state=0), n_jobs=-1)
    with joblib.parallel_config(backend="dask"):
        return search.fit(X, Y)


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--scheduler", help="address of a running Dask scheduler")
    parser.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes")
    args = parser.parse_args(argv)

    if args.scheduler:
        client = Client(args.scheduler)
    else:
        cluster = LocalCluster(
            n_workers=args.workers, threads_per_worker=1, dashboard_address=None
        )
        client = Client(cluster)
    with client:
        print(f"Dask cluster: {len(client.scheduler_info()['workers'])} workers")
        X, Y = make_pair()
        searches = [(grid, search_on_dask(estimator, grid, X, Y)) for estimator, grid in SEARCHES]
    for grid, search in searches:
        (name,) = grid
        print(f"\n{type(search.estimator).__name__}")
        print(f"{name:>10}  mean top-1 (5-fold CV)")
        for value, score in zip(
            search.cv_results_[f"param_{name}"],
            search.cv_results_["mean_test_score"],
            strict=True,
        ):
            print(f"{value:>10}  {score:.3f}")
        print(f"best: {search.best_params_}, top-1 {search.best_score_:.3f}")
    if not args.scheduler:
        cluster.close()


# %%
# Run
# ---
# Starts a local cluster (or connects to ``--scheduler``) and runs the search on it.

if __name__ == "__main__":
    main()

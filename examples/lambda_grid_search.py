"""Choosing lam with GridSearchCV in a Pipeline
============================================

Choose lam with GridSearchCV, inside a Pipeline, with class labels routed to the fit.

The aligner's default ``score`` (paired top-1 retrieval: does each adapted new embedding
find its own old embedding?) drives a plain search; a multi-metric search then reports
top-1, top-5 and the preservation of the new space's neighbourhoods side by side and
refits on top-1.  ``labels`` reach ``LambdaOrthAligner.fit`` through scikit-learn's
metadata routing (``set_fit_request(labels=True)``), split along with the CV folds, and
switch its contrastive term to the supervised form.

    python examples/lambda_grid_search.py [--data PATH] [--max-epochs N]

Data: ``../shared/data/mnist5k_features.npz`` when present, else features built from
scikit-learn's bundled digits (see ``lambda_tradeoff.py``).
"""

import argparse
import math

import numpy as np
import pandas as pd
import sklearn
from lambda_tradeoff import load_features
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import Normalizer

from sklearn_compat import LambdaOrthAligner
from sklearn_compat.metrics import make_multi_retrieval_scorer


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--data", help="feature file (default: the shared one, else digits)")
    parser.add_argument("--max-epochs", type=int, default=60)
    parser.add_argument(
        "--digits", action="store_true", help="the digits features even where the shared file is"
    )
    args = parser.parse_args(argv)
    old, new, labels, tr, te, description = load_features(args.data, digits=args.digits)
    print(description)
    sklearn.set_config(enable_metadata_routing=True)

    pipe = Pipeline(
        [
            ("l2", Normalizer()),  # the paper's setting: L2-normalised embeddings
            (
                "align",
                LambdaOrthAligner(max_epochs=args.max_epochs, random_state=0).set_fit_request(
                    labels=True
                ),
            ),
        ]
    )
    grid = {"align__lam": [0.0, 2.0, 4.0, 8.0, math.inf]}

    # 1. Default scoring: the aligner's paired top-1 retrieval.
    search = GridSearchCV(pipe, grid, cv=3).fit(new[tr], old[tr], labels=labels[tr])
    table = pd.DataFrame(search.cv_results_)[["param_align__lam", "mean_test_score"]]
    print("\ndefault scoring (paired top-1):")
    print(table.round(3).to_string(index=False))
    print(
        f"best lam {search.best_params_['align__lam']}, held-out test top-1 "
        f"{search.score(new[te], old[te]):.3f}"
    )

    # 2. Several metrics from one transform per fold; refit on top-1.
    scoring = make_multi_retrieval_scorer(("top1", "top5", "neighbourhood_preservation"))
    multi = GridSearchCV(pipe, grid, cv=3, scoring=scoring, refit="top1")
    multi.fit(new[tr], old[tr], labels=labels[tr])
    columns = [
        "param_align__lam",
        "mean_test_top1",
        "mean_test_top5",
        "mean_test_neighbourhood_preservation",
    ]
    print("\nmulti-metric (refit on top1):")
    print(pd.DataFrame(multi.cv_results_)[columns].round(3).to_string(index=False))
    best = multi.best_estimator_.named_steps["align"]
    print(
        f"refitted lam {best.lam}: orthogonality gap {best.orthogonality_gap_:.2f}, "
        f"{best.n_epochs_} epochs"
    )
    sklearn.set_config(enable_metadata_routing=False)
    return search, multi


# %%
# Run
# ---

if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()

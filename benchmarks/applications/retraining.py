"""A recommender kept compatible across retrainings: MovieLens-100k, implicit ALS, nDCG@10.

Yesterday's model served user vectors; today's retraining gives new item vectors in a new
space.  Can today's items be served to yesterday's users (no user re-embedding) after a
map of today's item vectors onto yesterday's, fitted on the items both models know?
This is the recommender application of Maystre et al. (2025), "When Embedding Models
Meet: Procrustes Bounds and Applications" (arXiv:2510.13406).

Protocol: every interaction (rating) is an implicit positive; each user's interactions are
split at random 80 / 20 (train / test, seed 0).  ALS (the ``implicit`` library, 32 factors)
is trained on the train part; nDCG@10 ranks every item by dot product with the user's
vector, the user's train items excluded, the test items relevant (gain 1).  Two scenarios:

- ``same data``: yesterday and today train on the same interactions with seeds 0 and 1;
- ``more data``: yesterday trains on each user's earlier 75% of train interactions (by
  timestamp), today on all of them (the later ones added).  Items nobody had rated
  yesterday have no old vector: the maps are fitted on the items yesterday's model saw
  and applied to every item.

Rows: ``old x old`` and ``new x new`` (each model alone), ``old users x new items`` raw, and
mapped by each library aligner with its current defaults (items are the paired rows:
``X`` = today's item vectors, ``Y`` = yesterday's; ``sample_weight`` = the item's train
count where the aligner takes it), and ``LambdaOrthAligner`` across ``lam``.  ``retained``
is nDCG@10 over old x old's.  ``||map - Y||`` is the Frobenius residual of the mapped items
against yesterday's on the fitted items; ``alignability`` gives the paper's bound on the
best orthogonal map's residual (and that residual itself, uncentred, raw vectors).

Every nDCG@10 is checked against ir_measures (trec_eval) when it is installed.

Run: ``python benchmarks/applications/retraining.py`` (about a minute on a 2-core box;
``--wheel recbole-1.2.1-py3-none-any.whl`` to build the data from a wheel you have).
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from movielens import load_movielens
from reference import available, trec_ndcg
from threadpoolctl import threadpool_limits

from sklearn_compat import (
    AffineAligner,
    LambdaOrthAligner,
    OrthogonalProcrustesAligner,
    RCSLSAligner,
    ResidualAdapterAligner,
    WhitenedProcrustesAligner,
)
from sklearn_compat.metrics import alignability, ndcg_at_k, recall_at_k

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common  # noqa: E402  (benchmarks/_common.py)

FACTORS = 32
LAMS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, float("inf"))


def split_per_user(data, rng, test_share=0.2):
    """Boolean test mask: a random ``test_share`` of each user's interactions."""
    test = np.zeros(len(data["user"]), dtype=bool)
    order = np.argsort(data["user"], kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(data["user"][order]) != 0])
    for rows in np.split(order, starts[1:]):
        n_test = int(round(test_share * len(rows)))
        test[rng.choice(rows, size=n_test, replace=False)] = True
    return test


def earlier_share(data, mask, share=0.75):
    """Of the interactions in ``mask``, each user's earliest ``share`` (by timestamp)."""
    keep = np.zeros(len(mask), dtype=bool)
    rows = np.flatnonzero(mask)
    order = rows[np.lexsort((data["timestamp"][rows], data["user"][rows]))]
    starts = np.flatnonzero(np.r_[True, np.diff(data["user"][order]) != 0])
    for user_rows in np.split(order, starts[1:]):
        keep[user_rows[: int(round(share * len(user_rows)))]] = True
    return keep


def interactions(data, mask, shape):
    ones = np.ones(int(mask.sum()))
    return sp.csr_matrix((ones, (data["user"][mask], data["item"][mask])), shape=shape)


def train_als(user_items, seed):
    """(user_factors, item_factors) of implicit's ALS on a users x items matrix."""
    from implicit.cpu.als import AlternatingLeastSquares

    # One BLAS thread: implicit parallelises itself (and warns about a BLAS thread pool).
    with threadpool_limits(1, "blas"):
        model = AlternatingLeastSquares(factors=FACTORS, random_state=seed, num_threads=1)
        model.fit(user_items, show_progress=False)
    return np.asarray(model.user_factors), np.asarray(model.item_factors)


class Evaluator:
    """nDCG@10 / recall@10 of user vectors against item vectors, checked by ir_measures."""

    def __init__(self, relevant, seen, check):
        self.relevant, self.seen, self.check = relevant, seen, check
        self.max_gap = 0.0

    def __call__(self, users, items, check=True):
        options = {"k": 10, "exclude": self.seen, "similarity": "dot", "device": "cpu"}
        ndcg = ndcg_at_k(users, items, self.relevant, **options)
        recall = recall_at_k(users, items, self.relevant, **options)
        if self.check and check:
            scores = users @ items.T
            scores[self.seen.nonzero()] = -np.inf
            gap = abs(ndcg - trec_ndcg(scores, self.relevant))
            self.max_gap = max(self.max_gap, gap)
        return ndcg, recall


def library_aligners():
    """(label, factory, takes sample_weight) for every aligner, with its defaults."""
    return [
        ("OrthogonalProcrustesAligner()", OrthogonalProcrustesAligner, True),
        ("WhitenedProcrustesAligner()", WhitenedProcrustesAligner, True),
        ("AffineAligner()", AffineAligner, True),
        ("RCSLSAligner()", lambda: RCSLSAligner(random_state=0), False),
        ("LambdaOrthAligner()", lambda: LambdaOrthAligner(random_state=0), False),
        ("ResidualAdapterAligner()", lambda: ResidualAdapterAligner(random_state=0), False),
    ]


def scenario(name, old, new, known, popularity, evaluate):
    """Print one scenario's table; returns {row label: retained share}."""
    (old_users, old_items), (new_users, new_items) = old, new
    base, base_recall = evaluate(old_users, old_items)
    rows = [("old x old", base, base_recall, None)]
    # Scale: every user gets the items by their train count.  Counts tie, and trec_eval
    # breaks ties by document id where ndcg_at_k counts them against the query: no check.
    ones = np.ones((len(old_users), 1))
    rows.append(("popularity", *evaluate(ones, popularity[:, None], check=False), None))
    rows.append(("new x new", *evaluate(new_users, new_items), None))
    rows.append(("old users x new items, raw", *evaluate(old_users, new_items), None))
    X, Y = new_items[known], old_items[known]

    def mapped(label, aligner, weight=None):
        start = time.perf_counter()
        aligner.fit(X, Y, sample_weight=weight) if weight is not None else aligner.fit(X, Y)
        seconds = time.perf_counter() - start
        Z = aligner.transform(new_items)
        residual = float(np.linalg.norm(Z[known] - Y))
        rows.append((label, *evaluate(old_users, Z), (residual, seconds)))

    for label, make, weighted in library_aligners():
        mapped(label, make())
        if weighted:
            mapped(f"{label} popularity-weighted", make(), popularity[known])
    for lam in LAMS:
        mapped(f"LambdaOrthAligner(lam={lam:g})", LambdaOrthAligner(lam=lam, random_state=0))
    bound = alignability(X, Y, normalize=False)
    print(f"\n== {name}: {known.sum()} paired items (of {len(known)}), {len(old_users)} users")
    print(f"{'':50s}{'nDCG@10':>9s}{'retained':>9s}{'R@10':>8s}{'||map-Y||':>11s}{'fit s':>7s}")
    for label, ndcg, recall, extra in rows:
        tail = "" if extra is None else f"{extra[0]:11.2f}{extra[1]:7.2f}"
        print(f"{label:50s}{ndcg:9.4f}{ndcg / base:9.3f}{recall:8.4f}{tail}")
    print(
        f"alignability (raw item vectors): best orthogonal residual "
        f"{bound.procrustes_error:.2f} <= bound {bound.procrustes_error_bound:.2f}; "
        f"||Y||_F = {np.linalg.norm(Y):.2f}, delta = {bound.delta:.4f}"
    )
    return {label: ndcg / base for label, ndcg, _, _ in rows}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", default=None, help="a recbole-1.2.1 wheel already at hand")
    parser.add_argument("--no-check", action="store_true", help="skip the ir_measures check")
    _common.add_json_arguments(parser, "retraining")
    args = parser.parse_args(argv)
    data = load_movielens(args.wheel)
    shape = (len(data["user_ids"]), len(data["item_ids"]))
    test = split_per_user(data, np.random.default_rng(0))
    relevant, seen = interactions(data, test, shape), interactions(data, ~test, shape)
    check = available() and not args.no_check
    evaluate = Evaluator(relevant, seen, check)
    popularity = np.asarray(seen.sum(axis=0)).ravel()
    start = time.perf_counter()

    old = train_als(seen, seed=0)
    new = train_als(seen, seed=1)
    known = popularity > 0
    retained = {
        "same data": scenario("same data, seed 0 -> seed 1", old, new, known, popularity, evaluate)
    }

    yesterday = interactions(data, earlier_share(data, ~test), shape)
    old = train_als(yesterday, seed=0)
    known = np.asarray(yesterday.sum(axis=0)).ravel() > 0
    retained["more data"] = scenario(
        "more data, earlier 75% of train -> all train", old, new, known, popularity, evaluate
    )
    print("\n== retained nDCG@10 of old x old, mapped rows (target: >= 0.95 in both)")
    print(f"{'':50s}{'same':>9s}{'more':>9s}{'worst':>9s}")
    rows = []
    for label in list(retained["same data"]):
        both = [retained[s][label] for s in retained]
        rows.append([label, *(f"{value:.3f}" for value in [*both, min(both)])])
        if len(rows) > 4:
            print(f"{label:50s}" + "".join(f"{value:9.3f}" for value in [*both, min(both)]))
    notes = (
        "MovieLens-100k, implicit ALS; new item vectors mapped into the old space and served "
        "to yesterday's user vectors. Retained = nDCG@10 / old x old; same data: seed 0 -> 1, "
        "more data: the earlier 75 % of train -> all train."
    )
    if check:
        print(f"\nmax |ndcg_at_k - ir_measures nDCG@10| over every run: {evaluate.max_gap:.2e}")
        notes += f" Largest gap to trec_eval's nDCG@10: {evaluate.max_gap:.1e}."
    _common.write_results(
        args,
        "retraining",
        "Application: a recommender across retrainings",
        [_common.table("Retained nDCG@10", ["row", "same data", "more data", "worst"], rows)],
        notes=notes,
    )
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

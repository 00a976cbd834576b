"""Recommender retraining: today's items for yesterday's users
===========================================================

Recommender retraining: serve today's item vectors to yesterday's user vectors.

A matrix-factorisation recommender is retrained (new seed, more data): its item vectors
land in a new space, and yesterday's user vectors (cached, served, in downstream models)
no longer match them.  Instead of recomputing every user, map today's item vectors onto
yesterday's with an aligner fitted on the items both models know, then keep scoring
users by dot product.  nDCG@10 on held-out interactions, with each user's seen items
excluded, says how much of yesterday's quality survives.

By default it runs on synthetic interactions (a few seconds, no download) with a small
alternating-least-squares factorisation written out below.  With ``--data`` it uses
MovieLens-100k as cached by the benchmark: build it once with
``python benchmarks/applications/movielens.py`` (downloads the recbole 1.2.1 wheel, which
ships the data; GroupLens' terms forbid redistributing it), then pass
``--data benchmarks/applications/cache/ml-100k.npz``.

Usage::

    python examples/recommender_retraining.py [--data ml-100k.npz] [--factors 32]
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.metrics import ndcg_at_k


def synthetic_interactions(rng, n_users=600, n_items=900, rank=8, per_user=40):
    """(user, item) pairs drawn from planted tastes and a long-tailed item popularity."""
    tastes, traits = rng.normal(size=(n_users, rank)), rng.normal(size=(n_items, rank))
    logits = 2.0 * tastes @ traits.T / np.sqrt(rank) + np.log(rng.pareto(2.0, n_items) + 0.1)
    users, items = [], []
    for user, row in enumerate(logits):
        p = np.exp(row - row.max())
        chosen = rng.choice(n_items, size=per_user, replace=False, p=p / p.sum())
        users.append(np.full(per_user, user)), items.append(chosen)
    return np.concatenate(users), np.concatenate(items), (n_users, n_items)


def movielens_interactions(path):
    if not Path(path).exists():
        sys.exit(f"{path} not found: build it with python benchmarks/applications/movielens.py")
    with np.load(path) as data:
        shape = (len(data["user_ids"]), len(data["item_ids"]))
        return data["user"], data["item"], shape


def split_per_user(users, rng, test_share=0.2):
    test = np.zeros(len(users), dtype=bool)
    for user in np.unique(users):
        rows = np.flatnonzero(users == user)
        test[rng.choice(rows, size=int(round(test_share * len(rows))), replace=False)] = True
    return test


def factorise(R, factors, seed, reg=0.1, iterations=15):
    """Your trainer here: ridge ALS of a binary users x items matrix, ``R ~ U V^T``."""
    rng = np.random.default_rng(seed)
    V = 0.1 * rng.normal(size=(R.shape[1], factors))
    ridge = reg * np.eye(factors)
    for _ in range(iterations):
        U = np.linalg.solve(V.T @ V + ridge, (R @ V).T).T
        V = np.linalg.solve(U.T @ U + ridge, (R.T @ U).T).T
    return U, V


def main():
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--data", help="MovieLens-100k cache (ml-100k.npz) instead of synthetic")
    parser.add_argument("--factors", type=int, default=32)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    if args.data:
        users, items, shape = movielens_interactions(args.data)
    else:
        users, items, shape = synthetic_interactions(rng)
    test = split_per_user(users, rng)

    def matrix(mask):
        return sp.csr_matrix((np.ones(mask.sum()), (users[mask], items[mask])), shape=shape)

    seen, held_out = matrix(~test), matrix(test)

    # Yesterday's model and today's retraining (another seed; more data works the same).
    old_users, old_items = factorise(seen, args.factors, seed=0)
    new_users, new_items = factorise(seen, args.factors, seed=1)

    # The lines that keep yesterday's users served: fit on the items both models know,
    # weighted by popularity (the items users actually see), then map every item.
    popularity = np.asarray(seen.sum(axis=0)).ravel()
    known = popularity > 0
    aligner = OrthogonalProcrustesAligner().fit(
        new_items[known], old_items[known], sample_weight=popularity[known]
    )
    served_items = aligner.transform(new_items)

    def quality(user_vectors, item_vectors):
        return ndcg_at_k(
            user_vectors, item_vectors, held_out, k=10, exclude=seen, similarity="dot"
        )

    baseline = quality(old_users, old_items)
    print(f"{'data':32s}{'MovieLens-100k' if args.data else 'synthetic'}")
    print(f"{'users x items':32s}{shape[0]} x {shape[1]}, {len(users)} interactions")
    print(f"{'':32s}{'nDCG@10':>9s}{'retained':>10s}")
    for label, value in [
        ("old users x old items", baseline),
        ("new users x new items", quality(new_users, new_items)),
        ("old users x new items (raw)", quality(old_users, new_items)),
        ("old users x mapped new items", quality(old_users, served_items)),
    ]:
        print(f"{label:32s}{value:9.4f}{value / baseline:10.3f}")


# %%
# Run
# ---
# Prints nDCG@10 of yesterday's and today's users against raw and mapped item vectors.

if __name__ == "__main__":
    main()

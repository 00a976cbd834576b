"""Recommender retraining: today's items for yesterday's users
===========================================================

Recommender retraining: serve today's item vectors to yesterday's user vectors.

A matrix-factorisation recommender is retrained (new seed, more data): its item vectors
land in a new space, and yesterday's user vectors (cached, served, in downstream models)
no longer match them.  Instead of recomputing every user, map today's item vectors onto
yesterday's with an aligner fitted on the items both models know, then keep scoring
users by dot product.  nDCG@10 on held-out interactions, with each user's seen items
excluded, says how much of yesterday's quality survives.

Here the interactions are synthetic (a few seconds, no download) and the factorisation is a
small alternating-least-squares written out below. ``benchmarks/applications/retraining.py``
runs the same story on MovieLens-100k with implicit's ALS (:ref:`applications`).
"""

# %%
# Interactions and a factorisation
# --------------------------------
# Users pick items from planted tastes and a long-tailed popularity; a fifth of each user's
# interactions are held out for the evaluation. ``factorise`` stands for your trainer.

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


rng = np.random.default_rng(0)
users, items, shape = synthetic_interactions(rng)
test = split_per_user(users, rng)


def matrix(mask):
    return sp.csr_matrix((np.ones(mask.sum()), (users[mask], items[mask])), shape=shape)


seen, held_out = matrix(~test), matrix(test)
print(f"{shape[0]} users x {shape[1]} items, {len(users)} interactions")

# %%
# Yesterday's model and today's retraining
# ----------------------------------------
# Another seed (more data works the same): today's item vectors live in a new space.

old_users, old_items = factorise(seen, 32, seed=0)
new_users, new_items = factorise(seen, 32, seed=1)

# %%
# The lines that keep yesterday's users served
# --------------------------------------------
# Fit on the items both models know, weighted by popularity (the items users actually
# see), then map every item into yesterday's space.

popularity = np.asarray(seen.sum(axis=0)).ravel()
known = popularity > 0
aligner = OrthogonalProcrustesAligner().fit(
    new_items[known], old_items[known], sample_weight=popularity[known]
)
served_items = aligner.transform(new_items)

# %%
# What survives
# -------------
# nDCG@10 on the held-out interactions, each user's seen items excluded, scored by dot
# product, and the share of yesterday's own quality it keeps.


def quality(user_vectors, item_vectors):
    return ndcg_at_k(user_vectors, item_vectors, held_out, k=10, exclude=seen, similarity="dot")


baseline = quality(old_users, old_items)
print(f"{'':32s}{'nDCG@10':>9s}{'retained':>10s}")
for label, value in [
    ("old users x old items", baseline),
    ("new users x new items", quality(new_users, new_items)),
    ("old users x new items (raw)", quality(old_users, new_items)),
    ("old users x mapped new items", quality(old_users, served_items)),
]:
    print(f"{label:32s}{value:9.4f}{value / baseline:10.3f}")

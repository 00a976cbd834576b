"""Retention while the gallery is backfilled
==========================================

A new model arrives, and the old model's gallery is re-embedded item by item (*partial
backfilling*) while new-model queries are already served. During the transition the gallery
mixes old embeddings and mapped new ones. How much of the full re-index's retrieval quality
do the queries keep at each share of the gallery backfilled, and does the map chosen change
the answer?

The two small digit networks of the quickstart play the old and the new model (no download;
seconds on a CPU). Each aligner maps the new model's embeddings into the old space, so a
backfilled item is represented by its mapped new embedding.
:func:`~sklearn_compat.metrics.backfilling_curve` replaces the old embeddings by the mapped
new ones in the paper's order (per class, farthest from the class mean first) and scores
the new-model queries (class-label CMC top-1) at each share.

    python examples/backfilling.py
"""

# %%
# Two models of the same digits
# -----------------------------
# ``digit_models`` (``examples/_digit_models.py``, as in the quickstart) trains two small
# networks with different seeds; their 32-d embeddings of the same digits live in
# unrelated spaces.

import matplotlib.pyplot as plt
import numpy as np
from _digit_models import digit_models

from sklearn_compat import AffineAligner, LambdaOrthAligner, OrthogonalProcrustesAligner
from sklearn_compat.metrics import backfilling_curve, cmc_topk_accuracy

X_train, X_test, y_train, y_test, old, new = digit_models()
new_train, old_train = new(X_train), old(X_train)
new_test, old_test = new(X_test), old(X_test)

# The two ends: the old system before the upgrade, and a full re-index with the new model.
old_system = cmc_topk_accuracy(old_test, old_test, y_test)
reindex = cmc_topk_accuracy(new_test, new_test, y_test)
print(f"old system CMC top-1 {old_system:.3f}, full re-index {reindex:.3f}")

# %%
# The curves
# ----------
# ``beta = 0`` is the bridge (mapped queries against the untouched old gallery), ``beta =
# 1`` the mapped new model against itself. Retention is the CMC top-1 divided by the full
# re-index's.

aligners = {
    "OrthogonalProcrustesAligner()": OrthogonalProcrustesAligner(),
    "AffineAligner()": AffineAligner(),
    "LambdaOrthAligner(lam=2)": LambdaOrthAligner(lam=2.0, max_epochs=30, random_state=0),
}
curves = {}
for name, aligner in aligners.items():
    mapped = aligner.fit(new_train, old_train).transform(new_test)
    betas, values = backfilling_curve(mapped, old_test, None, y_test, n_steps=10)
    _, random_order = backfilling_curve(
        mapped, old_test, None, y_test, order="random", n_steps=10, random_state=0
    )
    curves[name] = (betas, np.asarray(values) / reindex, np.asarray(random_order) / reindex)
    start, end = curves[name][1][0], curves[name][1][-1]
    print(f"{name:32s} retention at beta=0: {start:.3f}, at 1: {end:.3f}")

# %%
# Retention against the backfilled share
# --------------------------------------
# Solid lines: the paper's order; dashed: a random order. A dip in the middle is the price
# of mixing two embeddings of the same class in one gallery.

fig, ax = plt.subplots(figsize=(7, 4.5))
for name, (betas, paper, random_order) in curves.items():
    line = ax.plot(betas, paper, marker="o", label=name)[0]
    ax.plot(betas, random_order, ls="--", color=line.get_color(), alpha=0.6)
ax.axhline(old_system / reindex, color="grey", ls=":", label="old system")
ax.axhline(1.0, color="black", ls=":", label="full re-index")
ax.set_xlabel("share of the gallery backfilled")
ax.set_ylabel("CMC top-1 / full re-index")
ax.set_title("New-model queries while the gallery is backfilled")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

"""The lam trade-off: compatibility against the new model's geometry
=================================================================

A retrieval system indexes an old model's embeddings; a new model arrives. The paper's
bidirectional adapters map new-model queries into the old space (``B``) and the old gallery
forward into a shared space (``F``). The threshold ``lam`` says how far from orthogonal
``B`` may go: a small ``lam`` keeps the new model's own geometry (its neighbourhoods), a
large one buys compatibility with the old gallery. This example measures both sides of the
trade-off on real features and draws them.

Data: :func:`~sklearn_compat.datasets.load_mnist_features`, the same MNIST digits embedded
by three trained networks (shipped with the package). The old model is the MLP
(``mlp_s0``), the new one a conv net (``cnn_s0``). Query set = gallery set (the test
digits), each query removed from its own gallery, class-label retrieval (CMC top-1, mAP).
"""

# %%
# Old and new embeddings of the same digits
# -----------------------------------------
# The maps are fitted on a slice of the training digits (class labels switch the
# contrastive term to its supervised form) and everything is measured on the test digits.

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from sklearn_compat import LambdaOrthAligner
from sklearn_compat.datasets import load_mnist_features
from sklearn_compat.metrics import (
    backfilling_auc,
    backfilling_curve,
    cmc_topk_accuracy,
    mean_average_precision,
    neighbourhood_preservation,
)

data = load_mnist_features()
old, new, labels = data.mlp_s0, data.cnn_s0, data.labels
train, test = data.train_idx[:1000], data.test_idx
lt = labels[test]


def retrieval(queries, gallery):
    """(CMC top-1, mAP) of ``queries`` against ``gallery``, both over the test digits."""
    return cmc_topk_accuracy(queries, gallery, lt, k=1), mean_average_precision(
        queries, gallery, lt
    )


reference = {
    "old/old": retrieval(old[test], old[test]),
    "new/new": retrieval(new[test], new[test]),
}
for name, (top1, ap) in reference.items():
    print(f"{name}: CMC top-1 {top1:.3f}, mAP {ap:.3f}")

# %%
# One adapter per lam
# -------------------
# For each ``lam`` (and the strict, exactly orthogonal variant): adapted new queries against
# the raw old gallery (``B/old``: compatibility), against the adapted new gallery (``B/B``:
# the new space after adaptation), the new space's neighbourhoods kept by ``B``
# (preservation@10), the orthogonality gap of ``B`` (compare with ``lam``), and the area
# under the partial-backfilling curve.

variants = [(f"{lam:g}", {"lam": lam}) for lam in (0.0, 0.5, 1.0, math.inf)]
variants.append(("strict", {"strict": True}))
rows, curves = [], {}
for name, params in variants:
    aligner = LambdaOrthAligner(bidirectional=True, max_epochs=20, random_state=0, **params)
    aligner.fit(new[train], old[train], labels=labels[train])
    B, F_old = aligner.transform(new[test]), aligner.transform_target(old[test])
    curves[name] = backfilling_curve(B, F_old, None, lt, order="farthest", n_steps=10)
    rows.append(
        {
            "lam": name,
            "gap": aligner.orthogonality_gap_,
            "B/old top1": retrieval(B, old[test])[0],
            "B/F(old) top1": retrieval(B, F_old)[0],
            "B/B top1": retrieval(B, B)[0],
            "preservation@10": neighbourhood_preservation(new[test], B, k=10),
            "backfill AUC": backfilling_auc(B, F_old, None, lt, order="farthest", n_steps=10),
        }
    )
table = pd.DataFrame(rows).set_index("lam")
print(table.round(3).to_string())

# %%
# The trade-off in one figure
# ---------------------------
# Left: retrieval against the old gallery and within the adapted new space, with the two
# models alone as references. Middle: the gap of ``B`` grows with ``lam`` while the new
# space's neighbourhoods fade. Right: CMC top-1 while the gallery is backfilled.

names = list(table.index)
x = np.arange(len(names))
fig, axes = plt.subplots(1, 3, figsize=(13, 4))
ax = axes[0]
for column, style in [("B/old top1", "o-"), ("B/F(old) top1", "s--"), ("B/B top1", "^-")]:
    ax.plot(x, table[column], style, label=column)
ax.axhline(reference["old/old"][0], color="grey", ls=":", label="old/old")
ax.axhline(reference["new/new"][0], color="black", ls=":", label="new/new")
ax.set_xticks(x, names)
ax.set_xlabel("lam")
ax.set_title("CMC top-1")
ax.legend(fontsize=7)
ax = axes[1]
ax.plot(x, table["gap"], "o-", label="orthogonality gap of B")
ax.set_xticks(x, names)
ax.set_xlabel("lam")
twin = ax.twinx()
twin.plot(x, table["preservation@10"], "s--", color="tab:red")
twin.set_ylabel("neighbourhood preservation@10", color="tab:red")
ax.set_title("distance from orthogonality")
ax.legend(fontsize=7, loc="upper left")
ax = axes[2]
for name, (betas, values) in curves.items():
    ax.plot(betas, values, label=f"lam={name}")
ax.set_xlabel("share of the gallery backfilled")
ax.set_ylabel("CMC top-1")
ax.set_title("partial backfilling (paper order)")
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()

# %%
# Reading the figure
# ------------------
# ``lam`` is a dial, not a default to tune blindly: pick it with a grid search on the
# metric your system serves (see :ref:`sphx_glr_auto_examples_lambda_grid_search.py`), and
# read :ref:`lam_tradeoff` for what each end costs. The full sweep on every real pair, with
# more epochs, is ``benchmarks/bench_lambda_path.py``.

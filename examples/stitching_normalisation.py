"""Zero-shot stitching per normalisation
=======================================

A classifier trained on one network's relative representation is applied, unchanged, to
another network's (:ref:`relative_stitching`). The relative vectors are similarities to
anchor items; ``normalize`` decides how they are scaled before the head sees them:
``"l2"`` (each vector to unit length, the default), ``"standard"`` (each anchor's column
standardised on the training rows) or ``None`` (the raw similarities).

Two pairs of small networks trained on scikit-learn's bundled digits (no download; the
quickstart's embedders): two networks trained alike from different seeds, and a strong
network against a briefly trained one. A plain ``LogisticRegression`` head is trained on
the first network's relative space; we report its accuracy on the second network's test
rows, over two anchor draws.

    python examples/stitching_normalisation.py
"""

# %%
# Features from three networks
# ----------------------------

import matplotlib.pyplot as plt
import numpy as np
import torch
from _digit_models import train_embedder
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from sklearn_compat import RelativeAnchorEncoder

torch.set_num_threads(1)  # networks this small run fastest on one thread
digits = load_digits()
X, y = (digits.data / 16.0).astype(np.float32), digits.target
order = np.random.default_rng(0).permutation(len(X))
train, test = order[:1300], order[1300:]
# (seed, epochs): two networks trained alike, and one stopped after two epochs.
NETWORKS = {"net_s0": (0, 20), "net_s1": (1, 20), "net_s2_short": (2, 2)}
features = {
    name: train_embedder(X[train], y[train], seed=seed, epochs=epochs)(X)
    for name, (seed, epochs) in NETWORKS.items()
}
PAIRS = [("net_s0", "net_s1"), ("net_s0", "net_s2_short")]
NORMALISATIONS = ["l2", "standard", None]


def zero_shot_accuracy(strong, other, normalize, seed):
    """Head trained on ``strong``'s relative space, scored on ``other``'s test rows."""
    S, T = features[strong], features[other]
    enc = RelativeAnchorEncoder(n_anchors=64, normalize=normalize, random_state=seed)
    enc.fit(S[train])
    head = LogisticRegression(max_iter=2000).fit(enc.transform(S[train]), y[train])
    return head.score(enc.rebase(T[train]).transform(T[test]), y[test])


# %%
# Accuracy per normalisation
# --------------------------

scores = {
    (pair, str(normalize)): [zero_shot_accuracy(*pair, normalize, seed) for seed in range(2)]
    for pair in PAIRS
    for normalize in NORMALISATIONS
}
for (pair, normalize), values in scores.items():
    print(f"{pair[0]} -> {pair[1]:13s} normalize={normalize:9s} {np.mean(values):.3f}")

# %%
# The figure: one group of bars per pair, the spread over anchor draws as error bars.

fig, ax = plt.subplots(figsize=(7, 4.5))
width = 0.25
for i, normalize in enumerate(NORMALISATIONS):
    values = [scores[(pair, str(normalize))] for pair in PAIRS]
    ax.bar(
        np.arange(len(PAIRS)) + (i - 1) * width,
        [np.mean(v) for v in values],
        width,
        yerr=[np.std(v) for v in values],
        label=f"normalize={normalize!r}",
    )
ax.set_xticks(np.arange(len(PAIRS)), [f"{a} -> {b}" for a, b in PAIRS])
ax.set_ylabel("zero-shot accuracy on the other network")
ax.set_ylim(0, 1)
ax.axhline(0.1, color="grey", ls=":", label="chance")
ax.set_title("Stitching a LogisticRegression head across networks")
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
plt.show()

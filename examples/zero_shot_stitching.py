"""Zero-shot stitching with relative representations
=================================================

A digit classifier trained on one network's embeddings is useless on another network's:
the two spaces share no basis. Relative representations fix that without a single pair of
the other network's labels: each item is described by its similarities to a few *anchor*
items, and the same anchor items exist in both spaces. A head trained on one network's
relative vectors then classifies the other network's digits unchanged (zero-shot
stitching).

Data: :func:`~sklearn_compat.datasets.load_mnist_features`, the same MNIST digits embedded
by a conv net (``cnn_s0``, the "strong" network whose head we train) and an MLP
(``mlp_s0``, the "other" one). ``benchmarks/stitching_survey.py`` runs every anchor
strategy and similarity over several seeds and pairs.
"""

# %%
# Two networks, one head
# ----------------------
# The head (a standardised logistic regression) is trained on the strong network's
# training digits. On the other network's raw embeddings it is at chance level.

from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_compat import OrthogonalProcrustesAligner, RelativeAnchorEncoder
from sklearn_compat.datasets import load_mnist_features

data = load_mnist_features()
strong, other, y = data.cnn_s0, data.mlp_s0, data.labels
train, test = data.train_idx, data.test_idx


def head():
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))


absolute = head().fit(strong[train], y[train])
print(f"strong head, strong network's test digits: {absolute.score(strong[test], y[test]):.3f}")
print(f"same head, other network's (no stitching): {absolute.score(other[test], y[test]):.3f}")

# %%
# Relative vectors and a head trained on them
# -------------------------------------------
# :class:`~sklearn_compat.RelativeAnchorEncoder` picks 64 anchor items among the strong
# network's training rows and encodes every row by its cosine to each anchor.

encoder = RelativeAnchorEncoder(n_anchors=64, anchors="random", random_state=0)
encoder.fit(strong[train])
relative_head = head().fit(encoder.transform(strong[train]), y[train])
own = relative_head.score(encoder.transform(strong[test]), y[test])
print(f"relative head on the strong network: {own:.3f}")

# %%
# Stitching: the same anchors in the other space
# ----------------------------------------------
# ``rebase`` builds an encoder for the other network from the *same anchor items* (rows of
# its training embeddings, in the same order), with that space's own statistics. The head
# never sees a label of the other network.

other_encoder = encoder.rebase(other[train])
stitched = relative_head.score(other_encoder.transform(other[test]), y[test])
print(f"relative head on the other network, zero-shot: {stitched:.3f}")

# %%
# Against a fitted map
# --------------------
# With pairs of the same items in both spaces, an orthogonal Procrustes map from the other
# space into the strong one lets the strong absolute head read the other network too. The
# relative route needs only the anchor items, not a fitted map.

procrustes = OrthogonalProcrustesAligner().fit(other[train], strong[train])
mapped = absolute.score(procrustes.transform(other[test]), y[test])
print(f"strong head on the other network through Procrustes: {mapped:.3f}")
ceiling = head().fit(other[train], y[train]).score(other[test], y[test])
print(f"other network's own head (the ceiling): {ceiling:.3f}")

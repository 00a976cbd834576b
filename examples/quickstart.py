"""Quickstart: a new model's queries on an old model's gallery
===========================================================

Quickstart: make a new model's embeddings searchable against an old model's gallery.

Two small networks ("old" and "new") are trained on scikit-learn's bundled digits with
different seeds, so their embedding spaces differ.  A retrieval system indexed with the old
model cannot serve queries embedded by the new one, until an OrthogonalProcrustesAligner,
fitted on items embedded by both (the training split), maps new embeddings into the old
space.  We measure cross-model retrieval on the held-out split: each new-model query must
find the old-model embedding of the same item.

Runs in a few seconds on a CPU; no download.
"""

# %%
# Two models of the same digits
# -----------------------------
# ``digit_models`` trains two small networks ("old" and "new") with different seeds on the
# training digits; their embeddings of the same digits live in unrelated spaces. The
# training digits, embedded by both, are the pairs a map is fitted on.

from _digit_models import digit_models
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer

from sklearn_compat import AffineAligner, LambdaOrthAligner, OrthogonalProcrustesAligner
from sklearn_compat.metrics import (
    cmc_topk_accuracy,
    mean_cosine_similarity,
    paired_topk_accuracy,
)

X_train, X_test, y_train, y_test, old, new = digit_models()
new_train, old_train = new(X_train), old(X_train)
new_test, old_test = new(X_test), old(X_test)

# %%
# Maps from the new space into the old one
# ----------------------------------------
# Each aligner is a scikit-learn estimator: ``fit(new, old)`` on the training pairs, then
# ``transform`` sends new-model queries into the old space. On the held-out digits, each
# query must find the old-model embedding of the same digit (paired top-1), and its
# nearest other old embedding should show the same digit (CMC@1).

aligners = {
    "no alignment": None,
    # The defaults center="auto", scale="auto": chosen at fit (printed below).
    "Procrustes": OrthogonalProcrustesAligner(),
    "Procrustes(center, scale)": OrthogonalProcrustesAligner(center=True, scale=True),
    # Normalising only the new side changes its scale, and the centred map adds the
    # old model's mean back: fit the scale too, or the mean swamps every query.
    "Normalizer + Procrustes": make_pipeline(
        Normalizer(), OrthogonalProcrustesAligner(scale=True)
    ),
    "AffineAligner": AffineAligner(),
    "LambdaOrthAligner(lam=2)": LambdaOrthAligner(lam=2.0, random_state=0),
}
print(f"{len(X_test)} held-out digits; queries: new model, gallery: old model")
print(f"{'map new -> old':30s} {'top-1':>7s} {'cosine':>7s} {'CMC@1':>7s}")
for name, aligner in aligners.items():
    if aligner is None:
        queries = new_test
    else:
        queries = aligner.fit(new_train, old_train).transform(new_test)
    top1 = paired_topk_accuracy(queries, old_test, k=1)
    cosine = mean_cosine_similarity(queries, old_test)
    cmc = cmc_topk_accuracy(queries, old_test, y_test)
    print(f"{name:30s} {top1:7.3f} {cosine:7.3f} {cmc:7.3f}")

# %%
# What the default chose
# ----------------------
# ``OrthogonalProcrustesAligner()`` decides centring and scaling from the training pairs
# (a held-out slice scores each candidate); the choice is a fitted attribute.

default = aligners["Procrustes"]
scores = ", ".join(f"{k}: {v:.3f}" for k, v in (default.auto_scores_ or {}).items())
print(
    f"the default Procrustes chose center_={default.center_}, "
    f"scale_mode_={default.scale_mode_!r} (held-out top-1 of each candidate: "
    f"{scores or 'none scored'})"
)

# %%
# The reference: the old model alone
# ----------------------------------
# With a map, new-model queries retrieve about as well from the old gallery as the old
# model's own queries do.

reference = cmc_topk_accuracy(old_test, old_test, y_test)
print(f"{'old model alone (reference)':30s} {'':7s} {'':7s} {reference:7.3f}")
print(
    "top-1: share of queries whose nearest old embedding (cosine) is their own image;\n"
    "cosine: mean cosine between a query and its own old embedding;\n"
    "CMC@1: share of queries whose nearest other old embedding shows the same digit."
)

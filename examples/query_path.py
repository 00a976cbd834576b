"""The query path against ``transform``
=====================================

New-model queries must find items of a gallery embedded by the old model. The direct route
maps the queries with the aligner's ``transform`` and ranks the raw gallery by cosine.
:class:`~sklearn_compat.AlignedNeighbors` uses the same map, and adds two things to the
ranking (:ref:`query_path`): it compares queries and gallery in the centred space when the
map was fitted centred (``gallery="auto"``), and it ranks by CSLS, which demotes gallery
items that are near every query (``csls_k="auto"``), with each item's crowding measured once
in ``fit``.

Two pairs of models, both made here in a few seconds: the quickstart's two digit networks,
and a synthetic pair of anisotropic models (every embedding near one common direction, as
with many text models). Paired top-1 is the share of queries whose first hit is their own
item.

    python examples/query_path.py
"""

# %%
# Two pairs of models
# -------------------

import matplotlib.pyplot as plt
import numpy as np
from _digit_models import digit_models
from scipy.stats import ortho_group

from sklearn_compat import AlignedNeighbors, OrthogonalProcrustesAligner
from sklearn_compat.metrics import anisotropy, paired_topk_accuracy

X_train, X_test, _, _, old, new = digit_models()
pairs = {"digit networks": (new(X_train), old(X_train), new(X_test), old(X_test))}

rng = np.random.default_rng(0)
signal = rng.normal(size=(2500, 32))
aniso_new = signal + 4.0 * np.abs(rng.normal(size=32))
aniso_old = (
    signal @ ortho_group.rvs(32, random_state=0)
    + 2.0 * np.abs(rng.normal(size=32))
    + rng.normal(size=(2500, 32))
)
pairs["anisotropic pair"] = (
    aniso_new[:2000],
    aniso_old[:2000],
    aniso_new[2000:],
    aniso_old[2000:],
)
for name, (_, _, _, old_test) in pairs.items():
    print(f"{name}: the old model's mean_norm {anisotropy(old_test)['mean_norm']:.2f}")

# %%
# Ranking forms
# -------------
# ``transform`` then cosine against the raw gallery, and ``AlignedNeighbors`` with each
# setting spelled out, then with its defaults.

FORMS = {
    "transform + cosine": None,
    "raw, cosine": dict(gallery="raw", csls_k=None),
    "centred, cosine": dict(gallery="centered", csls_k=None),
    "centred, CSLS": dict(gallery="centered", csls_k=10),
    "AlignedNeighbors defaults": dict(),
}
results = {}
for name, (new_train, old_train, new_test, old_test) in pairs.items():
    aligner = OrthogonalProcrustesAligner().fit(new_train, old_train)
    truth = np.arange(len(new_test))
    for form, params in FORMS.items():
        if params is None:
            top1 = paired_topk_accuracy(aligner.transform(new_test), old_test)
        else:
            search = AlignedNeighbors(aligner, n_neighbors=1, **params).fit(old_test)
            top1 = np.mean(search.kneighbors(new_test, return_distance=False)[:, 0] == truth)
        results[name, form] = top1
        print(f"{name:18s} {form:27s} top-1 {top1:.3f}")

# %%
# The figure
# ----------

fig, ax = plt.subplots(figsize=(8, 4.5))
width = 0.16
for i, form in enumerate(FORMS):
    ax.bar(
        np.arange(len(pairs)) + (i - 2) * width,
        [results[name, form] for name in pairs],
        width,
        label=form,
    )
ax.set_xticks(np.arange(len(pairs)), list(pairs))
ax.set_ylabel("paired top-1 (new-model queries, old gallery)")
ax.set_ylim(0, 1)
ax.set_title("Query path: AlignedNeighbors against transform + cosine")
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
plt.show()

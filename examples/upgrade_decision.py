"""Upgrade decision: bridge or re-index?
=====================================

Upgrade decision: bridge the new model's queries to the old index, or re-index?

Two small networks ("old" and "new", as in the quickstart) embed scikit-learn's bundled
digits.  An OrthogonalProcrustesAligner fitted on the training items maps new embeddings
into the old space.  On the held-out items, ``compatibility_report`` compares the three
systems (old / bridge / re-index), prints the decision and writes the report (Markdown)
with its figure.  Then the map is deployed: exported as a FAISS ``LinearTransform`` and
wrapped around the unchanged old index, so new-model queries search it directly.

Runs in a few seconds on a CPU; no download.  The FAISS part needs ``faiss-cpu`` (the
``faiss`` extra) and is skipped, with a note, without it.
"""

# %%
# Two models and a map
# --------------------
# The quickstart's two small networks embed the same digits; the map is fitted on the
# training digits only.

import tempfile
from pathlib import Path

import numpy as np
from _digit_models import digit_models

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.io import export_map
from sklearn_compat.metrics import compatibility_report


def deploy_with_faiss(aligner, new_queries, old_gallery, out_dir, k=10):
    """Export the map for FAISS and search the old index with new-model queries."""
    try:
        import faiss
    except ImportError:
        print("faiss is not installed (pip install faiss-cpu): skipping the deployment")
        return
    # The live index: L2-normalised old embeddings, inner product = cosine.
    gallery = old_gallery / np.linalg.norm(old_gallery, axis=1, keepdims=True)
    old_index = faiss.IndexFlatIP(gallery.shape[1])
    old_index.add(gallery.astype(np.float32))

    path = export_map(aligner, out_dir / "new_to_old.faiss", format="faiss", force=True)
    transform = faiss.read_VectorTransform(str(path))
    served = faiss.IndexPreTransform(transform, old_index)  # old index unchanged
    _, found = served.search(new_queries.astype(np.float32), k)

    _, expected = old_index.search(aligner.transform(new_queries.astype(np.float32)), k)
    print(f"\nFAISS: wrote {path.name}; IndexPreTransform(LinearTransform, old IndexFlatIP)")
    print(f"same top-{k} as mapping in Python, then searching: {np.array_equal(found, expected)}")
    return found


X_train, X_test, y_train, y_test, old, new = digit_models()
aligner = OrthogonalProcrustesAligner(center=True).fit(new(X_train), old(X_train))

# %%
# The decision, on items the map never saw
# ----------------------------------------
# :func:`~sklearn_compat.metrics.compatibility_report` scores the old system, the bridge
# (mapped new queries against the old gallery) and a full re-index, with the bridge's
# retention and its confidence interval, and says which to deploy.

new_test, old_test = new(X_test), old(X_test)
report = compatibility_report(aligner, new_test, old_test, labels=y_test, random_state=0)
print(report)

# %%
# The report, as a file to share
# ------------------------------
# Markdown with its figure, written to a temporary folder here.

out_dir = Path(tempfile.mkdtemp(prefix="upgrade_decision_"))
figure = report.plot(out_dir / "report.png")
(out_dir / "report.md").write_text(report.to_markdown(figure=figure.name))
print(f"wrote {out_dir / 'report.md'} and {figure}")

# %%
# The deployment
# --------------
# New-model queries search the unchanged old FAISS index through the exported map.

found = deploy_with_faiss(aligner, new_test, old_test, out_dir)

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

Usage::

    python examples/upgrade_decision.py [--output-dir DIR]
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.io import export_map
from sklearn_compat.metrics import compatibility_report

# Beside this file (the documentation's gallery runs it without __file__, from examples/).
sys.path.insert(0, str(Path(globals().get("__file__", "upgrade_decision.py")).resolve().parent))
from quickstart import digit_models  # noqa: E402 - the quickstart's two small models


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--output-dir", type=Path, help="where the report goes (default: tmp)")
    args = parser.parse_args(argv)
    out_dir = args.output_dir or Path(tempfile.mkdtemp(prefix="upgrade_decision_"))
    out_dir.mkdir(parents=True, exist_ok=True)

    X_train, X_test, y_train, y_test, old, new = digit_models()
    aligner = OrthogonalProcrustesAligner(center=True).fit(new(X_train), old(X_train))

    # The decision, on items the map never saw.
    new_test, old_test = new(X_test), old(X_test)
    report = compatibility_report(aligner, new_test, old_test, labels=y_test, random_state=0)
    print(report)
    figure = report.plot(out_dir / "report.png")
    (out_dir / "report.md").write_text(report.to_markdown(figure=figure.name))
    print(f"\nwrote {out_dir / 'report.md'} and {figure}")

    # The deployment: new-model queries against the old index, through FAISS.
    deploy_with_faiss(aligner, new_test, old_test, out_dir)


# %%
# Run
# ---
# Prints the compatibility report and its decision, writes the report with its figure,
# and searches the old FAISS index with new-model queries through the exported map.

if __name__ == "__main__":
    main()

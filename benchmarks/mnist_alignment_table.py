"""Cross-model retrieval on real features before and after orthogonal Procrustes alignment.

Data: ``sklearn_compat.datasets.load_mnist_features()`` (``--data`` for another npz with the
same keys): 64-d features of the same 5,000 MNIST digits from three networks.  For each pair
"new -> old" the new model's test embeddings are the queries and the old model's test
embeddings the gallery, the map is fitted on ``train_idx`` only, and every metric is
computed on ``test_idx``.  Inputs are L2-normalised rows, as in
``benchmarks/datasets/build_mnist_features.py``.

Rows per pair:

- ``old/old`` and ``new/new``: each model against itself (the references for CMC and mAP;
  paired top-1 is trivially 1 there, so it is left blank);
- ``new/old raw``: no map at all (defined here because all widths are 64);
- ``B(new)/old Procrustes``: ``OrthogonalProcrustesAligner`` uncentred and centred
  (``center=True``: the old gallery is left as it is, the map adds the old mean back);
- ``old'/old'`` and ``B(new')/old'`` pre-centred: the recipe of that script's summary, where both
  models' embeddings are first centred with their train means and then L2-normalised
  (so the old gallery is re-expressed too), followed by uncentred Procrustes.

Columns: paired top-1 (own partner first), CSLS top-1 (k = 10), mean cosine of pairs,
CMC top-1 and mAP with the digit labels (each query removed from its own gallery),
backfilling AUC (CMC top-1, the paper's "farthest" order, the gallery moving from the old
embeddings to the mapped new ones), and the Gram diagnostic ``delta`` of the unmapped
test pair (Maystre et al., arXiv:2510.13406, 2025; a property of the two spaces, so it is
shown once per space).  The compatibility criterion of the paper is
``CMC(B(new)/old) > CMC(old/old)``.

Run ``python benchmarks/mnist_alignment_table.py`` (about 30 s on a 2-core CPU), or with
``--n-test 200`` for a smoke run.  ``--markdown`` prints the table as Markdown.
"""

import argparse
import time
from pathlib import Path

import _common
import numpy as np

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.datasets import load_mnist_features
from sklearn_compat.metrics import (
    alignability,
    backfilling_auc,
    cmc_topk_accuracy,
    mean_average_precision,
    mean_cosine_similarity,
    paired_topk_accuracy,
)

PAIRS = [("cnn_s0", "cnn_s1"), ("cnn_s0", "mlp_s0")]
COLUMNS = [
    "paired top-1",
    "CSLS top-1",
    "mean cos",
    "CMC top-1",
    "mAP",
    "backfill AUC",
    "Gram delta",
]


def unit(A):
    return A / np.maximum(np.linalg.norm(A, axis=1, keepdims=True), 1e-12)


def cross_model_row(queries, gallery, labels, device):
    """All columns for queries (mapped new) against the old gallery, same test items."""
    return {
        "paired top-1": paired_topk_accuracy(queries, gallery, device=device),
        "CSLS top-1": paired_topk_accuracy(queries, gallery, csls_k=10, device=device),
        "mean cos": mean_cosine_similarity(queries, gallery, device=device),
        "CMC top-1": cmc_topk_accuracy(queries, gallery, labels, device=device),
        "mAP": mean_average_precision(queries, gallery, labels, device=device),
        "backfill AUC": backfilling_auc(queries, gallery, None, labels, device=device),
    }


def same_model_row(E, labels, device):
    return {
        "CMC top-1": cmc_topk_accuracy(E, E, labels, device=device),
        "mAP": mean_average_precision(E, E, labels, device=device),
    }


def run(data_path, n_test, device):
    if data_path is None:
        data = load_mnist_features()
    else:
        with np.load(data_path) as data:
            data = {key: data[key] for key in data.files}
    train, test = data["train_idx"], data["test_idx"]
    if n_test is not None:
        test = test[:n_test]
    labels = data["labels"][test]
    rows = []
    for new, old in PAIRS:
        X, Y = unit(data[new]), unit(data[old])
        delta = alignability(X[test], Y[test], device=device).delta
        rows.append((f"{new} -> {old}", "old/old", same_model_row(Y[test], labels, device)))
        rows.append((f"{new} -> {old}", "new/new", same_model_row(X[test], labels, device)))
        raw = cross_model_row(X[test], Y[test], labels, device)
        raw["Gram delta"] = delta
        rows.append((f"{new} -> {old}", "new/old raw", raw))
        for center in (False, True):
            aligner = OrthogonalProcrustesAligner(center=center, device=device)
            aligner.fit(X[train], Y[train])
            mapped = aligner.transform(X[test])
            name = "centred" if center else "uncentred"
            row = cross_model_row(mapped, Y[test], labels, device)
            assert row["paired top-1"] == aligner.score(X[test], Y[test])
            rows.append((f"{new} -> {old}", f"B(new)/old Procrustes {name}", row))
        # The recipe of build_mnist_features.py's summary: subtract the train means,
        # L2-normalise, then plain
        # Procrustes; the old gallery is pre-centred too, so it is a different space
        # with its own old'/old' reference.
        Xp = unit(data[new] - data[new][train].mean(axis=0))
        Yp = unit(data[old] - data[old][train].mean(axis=0))
        aligner = OrthogonalProcrustesAligner(device=device).fit(Xp[train], Yp[train])
        rows.append(
            (f"{new} -> {old}", "old'/old' pre-centred", same_model_row(Yp[test], labels, device))
        )
        row = cross_model_row(aligner.transform(Xp[test]), Yp[test], labels, device)
        row["Gram delta"] = alignability(Xp[test], Yp[test], device=device).delta
        rows.append((f"{new} -> {old}", "B(new')/old' pre-centred", row))
    return rows, len(train), len(test)


def table_cells(rows):
    """The header and the cells of the table."""
    header = ["pair", "query/gallery", *COLUMNS]
    cells = [
        [pair, what, *(f"{row[c]:.3f}" if c in row else "" for c in COLUMNS)]
        for pair, what, row in rows
    ]
    return header, cells


def format_table(rows, markdown):
    header, cells = table_cells(rows)
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in cells]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *cells, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r) for r in [header, *cells])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, help="an npz with the same keys (default: the shipped features)"
    )
    parser.add_argument("--n-test", type=int, default=None, help="use the first N test rows")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--markdown", action="store_true")
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "mnist_alignment_table")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    if args.data is not None and not args.data.exists():
        parser.error(f"{args.data} not found (pass --data).")
    start = time.perf_counter()
    rows, n_train, n_test = run(args.data, args.n_test, args.device)
    print(format_table(rows, args.markdown))
    print(
        f"\nfit on {n_train} train rows, evaluated on {n_test} test rows; "
        f"{time.perf_counter() - start:.1f} s"
    )
    _common.write_results(
        args,
        "mnist_alignment_table",
        "Cross-model retrieval on MNIST features before and after Procrustes",
        [_common.table("", *table_cells(rows))],
        notes=f"Rows L2-normalised, maps fitted on the {n_train:,} train rows, every figure on "
        f'the {n_test:,} test rows. "new -> old": the new model\'s queries mapped by `B` '
        "against the old model's gallery. CMC top-1 and mAP use the digit labels; backfill "
        "AUC averages CMC top-1 over the backfilled share.",
        device=args.device,
    )


if __name__ == "__main__":
    main()

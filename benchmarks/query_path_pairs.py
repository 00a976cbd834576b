"""Top-1 of the default query path (``AlignedNeighbors``) on every real pair.

For each real pair (the MNIST features of ``sklearn_compat.datasets`` and every text pair cached by
``benchmarks/pairs/build_pairs.py``) and each closed-form aligner, fit the aligner on the
train rows, fit ``AlignedNeighbors(aligner)`` with its defaults on the test gallery (the
word pair: its whole 20,000-word French gallery) and print the top-1 of the test queries.
``--raw-json PATH`` also writes the figures (and each query's top-1 row) so two versions of
the code can be compared query by query (``--compare PATH``); ``--json`` writes the results
file (``benchmarks/results/query_path_pairs.json``).  ``--force-cells`` sends every
gallery through the cell pass of the crowding estimate (which galleries below 32,768 rows
skip), with about a quarter of the gallery as each row's candidates (a power of two, at
most 4,096), so that pass can be compared on real pairs too.

Usage::

    python benchmarks/query_path_pairs.py --raw-json before.json
    python benchmarks/query_path_pairs.py --compare before.json
    python benchmarks/query_path_pairs.py --force-cells --raw-json cells.json
"""

import argparse
import json
from pathlib import Path

import _common
import numpy as np
from alignment_table import load_pairs

import sklearn_compat._core.knn as knn
from sklearn_compat import (
    AffineAligner,
    AlignedNeighbors,
    OrthogonalProcrustesAligner,
    WhitenedProcrustesAligner,
)

ALIGNERS = {
    "Procrustes": lambda: OrthogonalProcrustesAligner(),
    "Procrustes center=False": lambda: OrthogonalProcrustesAligner(center=False, scale=False),
    "Affine": lambda: AffineAligner(),
    "Whitened": lambda: WhitenedProcrustesAligner(),
}


def top1(pair, aligner, force_cells=False, **params):
    gallery = pair.get("gallery", pair["Y_test"])
    if force_cells:
        # Every reference through the cell pass, each row against ~a quarter of it.
        knn.EXACT_REFERENCE = 0
        knn.CANDIDATES = int(min(4096, 2 ** np.floor(np.log2(max(len(gallery) / 4, 8)))))
    search = AlignedNeighbors(aligner, n_neighbors=1, device="cpu", **params).fit(gallery)
    best = search.kneighbors(pair["X_test"], return_distance=False)[:, 0]
    if "gallery" in pair:
        hits = [t in set(g[g >= 0]) for t, g in zip(best, pair["gold"], strict=True)]
    else:
        hits = best == np.arange(len(best))
    return float(np.mean(hits)), best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs-root", default=str(Path(__file__).parent / "pairs" / "cache"))
    parser.add_argument("--raw-json", help="write the figures and each query's top-1 here")
    parser.add_argument("--compare", help="figures of another version to compare with")
    parser.add_argument(
        "--force-cells", action="store_true", help="every gallery through the cell pass"
    )
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "query_path_pairs")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    rows = []
    before = json.load(open(args.compare)) if args.compare else {}
    out = {}
    print("| pair | aligner | gallery | top-1 | before | change | queries moved |")
    print("|---|---|---|---|---|---|---|")
    for name, pair in load_pairs(args.pairs_root):
        for label, make in ALIGNERS.items():
            aligner = make().fit(pair["X_train"], pair["Y_train"])
            score, best = top1(pair, aligner, force_cells=args.force_cells)
            key = f"{name} | {label}"
            out[key] = {"top1": score, "best": best.tolist()}
            n_gallery = len(pair.get("gallery", pair["Y_test"]))
            old = before.get(key)
            change = moved = ""
            if old is not None:
                change = f"{score - old['top1']:+.4f}"
                moved = str(int(np.sum(np.asarray(old["best"]) != best)))
            was = f"{old['top1']:.4f}" if old else ""
            print(f"| {name} | {label} | {n_gallery} | {score:.4f} | {was} | {change} | {moved} |")
            rows.append([name, label, f"{n_gallery:,}", f"{score:.4f}"])
    if args.raw_json:
        with open(args.raw_json, "w") as f:
            json.dump(out, f)
    cells = " (every gallery through the cell pass)" if args.force_cells else ""
    _common.write_results(
        args,
        "query_path_pairs",
        "The default query path on every real pair" + cells,
        [_common.table("", ["pair", "aligner", "gallery", "top-1"], rows)],
        notes="`AlignedNeighbors(aligner)` with its defaults, fitted on the test gallery (the "
        "word pair: its whole 20,000-word French gallery); top-1 of the test queries.",
    )


if __name__ == "__main__":
    main()

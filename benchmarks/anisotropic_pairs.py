"""Anisotropic pairs and the query path: centring defaults measured on real pairs.

    python benchmarks/anisotropic_pairs.py [--pairs DIR] [--seeds 0 1]

For every real pair found (MNIST CNN features of ``sklearn_compat.datasets``; the text pairs
built by benchmarks/pairs/build_pairs.py in DIR, default benchmarks/pairs/cache) and its fixed
train/test split, prints:

- the anisotropy of both spaces (``sklearn_compat.metrics.anisotropy``);
- ``OrthogonalProcrustesAligner``: release 0.1.0's defaults (uncentred, ``s = 1``), centred
  with ``s = 1``, and the defaults (centred, ``scale="spread"``): paired top-1 of
  ``transform(X_test)`` against ``Y_test`` (``score``);
- ``RelativeAnchorEncoder`` fitted on the old model's train rows and rebased on the new
  model's: 0.1.0's defaults (128 anchors, uncentred, raw), centred with ``n_anchors="auto"``
  but raw, and the defaults (also ``normalize="l2"``, which changes no cosine), per seed:
  paired top-1 of the new model's relative vectors of the test rows against the old
  model's;
- ``AlignedNeighbors`` top-1 over the old test gallery: the 0.1.0 map on the raw gallery by
  cosine, the default map on the raw gallery, the centred gallery by cosine, the defaults
  (centred, CSLS k = 10 with each gallery item's crowding measured among the gallery), and
  CSLS with the crowding measured among the mapped train queries or the test batch.

Each row prints its change against the old default measured in the same run.  Rows are
used as stored (the e5 and MiniLM encoders unit-normalise, WordLlama and MNIST do not).
"""

import argparse
import time
import warnings
from pathlib import Path

import _common
import numpy as np

from sklearn_compat import AlignedNeighbors, OrthogonalProcrustesAligner, RelativeAnchorEncoder
from sklearn_compat.datasets import load_mnist_features
from sklearn_compat.metrics import AnisotropyWarning, anisotropy, paired_topk_accuracy

ROOT = Path(__file__).resolve().parents[1]
TEXT_PAIRS = {
    "wn_gloss_e5_minilm": "e5-small (4-bit) -> MiniLM",
    "wn_example_wordllama_minilm": "WordLlama -> MiniLM",
    "wn_gloss_e5_wordllama": "e5-small (4-bit) -> WordLlama",
}


def load_pairs(pairs_dir):
    pairs = {}
    d = load_mnist_features()
    split = np.zeros(len(d["labels"]), dtype=bool)
    split[d["train_idx"]] = True
    pairs["MNIST cnn_s0 -> cnn_s1"] = (d["cnn_s0"], d["cnn_s1"], split)
    for name, label in TEXT_PAIRS.items():
        path = Path(pairs_dir) / f"{name}.npz"
        if path.exists():
            with np.load(path) as d:
                pairs[label] = (d["X"], d["Y"], d["split"])
    return pairs


def top1_search(search, queries):
    idx = search.kneighbors(queries, n_neighbors=1, return_distance=False)[:, 0]
    return float(np.mean(idx == np.arange(len(queries))))


def measure(X, Y, train, seeds, device="auto"):
    Xtr, Ytr, Xte, Yte = X[train], Y[train], X[~train], Y[~train]
    row = {"aniso_x": anisotropy(X), "aniso_y": anisotropy(Y)}

    def procrustes(**params):
        return OrthogonalProcrustesAligner(device=device, **params).fit(Xtr, Ytr)

    def relative(seed, **params):
        enc = RelativeAnchorEncoder(random_state=seed, device=device, **params).fit(Ytr)
        top1 = paired_topk_accuracy(enc.rebase(Xtr).transform(Xte), enc.transform(Yte))
        return top1, enc.n_anchors_

    def search(aligner, queries=None, **params):
        found = AlignedNeighbors(aligner, device=device, **params).fit(Yte, queries=queries)
        return top1_search(found, Xte)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AnisotropyWarning)  # the old defaults warn
        plain = procrustes(center=False, scale=False)  # release 0.1.0's defaults
        rel_old = [relative(s, n_anchors=128, center=False, normalize=None)[0] for s in seeds]
    unit = procrustes(scale=False)
    default = procrustes()
    row["procrustes"] = tuple(a.score(Xte, Yte) for a in (plain, unit, default))
    rel_raw = [relative(s, normalize=None)[0] for s in seeds]
    rel_default = [relative(s) for s in seeds]
    row["relative"] = (rel_old, rel_raw, [t for t, _ in rel_default], rel_default[0][1])
    row["search"] = (
        search(plain, gallery="raw", csls_k=None),
        search(default, gallery="raw", csls_k=None),
        search(default, csls_k=None),
        search(default),
        search(default, queries=Xtr),
        search(default, csls_reference="batch"),
    )
    return row


def fmt(values):
    return "/".join(f"{v:.3f}" for v in values)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=ROOT / "benchmarks" / "pairs" / "cache")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--device", default="auto", help="'auto', 'cpu', 'cuda' or 'cuda:N'")
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "anisotropic_pairs")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    procrustes_rows, relative_rows, search_rows = [], [], []
    pairs = load_pairs(args.pairs)
    if not pairs:
        raise SystemExit(f"no pairs found ({args.pairs} holds none)")
    for label, (X, Y, train) in pairs.items():
        start = time.perf_counter()
        r = measure(X, Y, train, args.seeds, args.device)
        ax, ay = r["aniso_x"], r["aniso_y"]
        p_old, p_unit, p_new = r["procrustes"]
        rel_old, rel_raw, rel_new, m = r["relative"]
        s_plain, s_raw, s_cent, s_csls, s_queries, s_batch = r["search"]
        print(
            f"## {label}: n_train={train.sum()}, n_test={(~train).sum()}, "
            f"d={X.shape[1]}->{Y.shape[1]}"
        )
        print(
            f"  anisotropy mean_norm/mean_cosine: new {ax['mean_norm']:.2f}/"
            f"{ax['mean_cosine']:.2f}, old {ay['mean_norm']:.2f}/{ay['mean_cosine']:.2f}"
        )
        print(
            f"  Procrustes 0.1.0 defaults (uncentred, s=1) {p_old:.3f} | centred, s=1 "
            f"{p_unit:.3f} | defaults (centred, scale='spread') {p_new:.3f} "
            f"({p_new - p_old:+.3f})"
        )
        print(
            f"  RelativeAnchorEncoder seeds {args.seeds}: 0.1.0 defaults (128, uncentred, "
            f"raw) {fmt(rel_old)} | centred, auto={m}, raw {fmt(rel_raw)} | defaults "
            f"(+ normalize='l2') {fmt(rel_new)} "
            f"({np.mean(rel_new) - np.mean(rel_old):+.3f})"
        )
        print(
            f"  AlignedNeighbors top-1: 0.1.0 map, raw gallery, cosine {s_plain:.3f} | "
            f"default map, raw gallery {s_raw:.3f} | centred gallery, cosine {s_cent:.3f} | "
            f"defaults (centred, CSLS 10, crowding among the gallery) {s_csls:.3f} "
            f"({s_csls - s_plain:+.3f}) | crowding among the train queries {s_queries:.3f} | "
            f"crowding among the query batch {s_batch:.3f}"
        )
        print(f"  ({time.perf_counter() - start:.1f} s)")
        procrustes_rows.append(
            [
                label,
                f"{ax['mean_norm']:.2f} / {ax['mean_cosine']:.2f}, "
                f"{ay['mean_norm']:.2f} / {ay['mean_cosine']:.2f}",
                f"{p_old:.3f}",
                f"{p_unit:.3f}",
                f"**{p_new:.3f}**",
            ]
        )
        relative_rows.append([label, fmt(rel_old), fmt(rel_raw), f"**{fmt(rel_new)}**"])
        search_rows.append(
            [label, *(f"{v:.3f}" for v in (s_plain, s_raw, s_cent)), f"**{s_csls:.3f}**"]
            + [f"{s_queries:.3f}", f"{s_batch:.3f}"]
        )
    procrustes_columns = ["pair (new -> old)", "anisotropy new, old", "0.1.0 (uncentred, s = 1)"]
    search_columns = ["pair", "0.1.0 map, raw gallery", "default map, raw gallery"]
    _common.write_results(
        args,
        "anisotropic_pairs",
        "Anisotropic pairs: Procrustes, relative vectors and the query path",
        [
            _common.table(
                "OrthogonalProcrustesAligner, paired top-1",
                procrustes_columns + ["centred, s = 1", "defaults"],
                procrustes_rows,
            ),
            _common.table(
                f"RelativeAnchorEncoder, paired top-1 (seeds {' / '.join(map(str, args.seeds))})",
                ["pair", "0.1.0 (128, uncentred, raw)", "centred, auto anchors, raw", "defaults"],
                relative_rows,
            ),
            _common.table(
                "AlignedNeighbors, top-1 over the old test gallery",
                search_columns
                + [
                    "centred gallery, cosine",
                    "defaults",
                    "crowding among the train queries",
                    "crowding among the query batch",
                ],
                search_rows,
            ),
        ],
        notes="Fixed train/test splits; paired top-1 on the test rows (the old model's test "
        "rows are the gallery). Anisotropy is `mean_norm / mean_cosine`. Relative vectors: "
        "encoder fitted on the old model's train rows, `rebase` on the new model's.",
        device=args.device,
    )


if __name__ == "__main__":
    main()

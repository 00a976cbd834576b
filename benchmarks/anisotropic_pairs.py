"""Anisotropic pairs and the query path: centring defaults measured on real pairs.

    python benchmarks/anisotropic_pairs.py [--pairs DIR] [--seeds 0 1]

For every real pair found (MNIST CNN features from ../shared/data; the text pairs built by
benchmarks/pairs/build_pairs.py in DIR, default benchmarks/pairs/cache) and its fixed
train/test split, prints:

- the anisotropy of both spaces (``sklearn_compat.metrics.anisotropy``);
- ``OrthogonalProcrustesAligner`` with ``center=False`` and ``center=True`` (the default):
  paired top-1 of ``transform(X_test)`` against ``Y_test`` (``score``);
- ``RelativeAnchorEncoder`` fitted on the old model's train rows and rebased on the new
  model's, old defaults (128 anchors, uncentred) against the new ones (``n_anchors="auto"``,
  ``center=True``), per seed: paired top-1 of the new model's relative vectors of the test
  rows against the old model's;
- ``AlignedNeighbors`` top-1 over the old test gallery with the default (centred) map, raw
  against centred gallery, and the centred gallery with CSLS (k = 10).

Each row prints its change against the old default measured in the same run.  Rows are
used as stored (the e5 and MiniLM encoders unit-normalise, WordLlama and MNIST do not).
"""

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

from sklearn_compat import AlignedNeighbors, OrthogonalProcrustesAligner, RelativeAnchorEncoder
from sklearn_compat.metrics import AnisotropyWarning, anisotropy, paired_topk_accuracy

ROOT = Path(__file__).resolve().parents[1]
MNIST = ROOT.parent / "shared" / "data" / "mnist5k_features.npz"
TEXT_PAIRS = {
    "wn_gloss_e5_minilm": "e5-small (4-bit) -> MiniLM",
    "wn_example_wordllama_minilm": "WordLlama -> MiniLM",
    "wn_gloss_e5_wordllama": "e5-small (4-bit) -> WordLlama",
}


def load_pairs(pairs_dir):
    pairs = {}
    if MNIST.exists():
        with np.load(MNIST) as d:
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AnisotropyWarning)  # the old defaults warn
        plain = OrthogonalProcrustesAligner(center=False, device=device).fit(Xtr, Ytr)
        rel_old = []
        for seed in seeds:
            old = RelativeAnchorEncoder(
                n_anchors=128, center=False, random_state=seed, device=device
            )
            old.fit(Ytr)
            rel_old.append(
                paired_topk_accuracy(old.rebase(Xtr).transform(Xte), old.transform(Yte))
            )
    centred = OrthogonalProcrustesAligner(device=device).fit(Xtr, Ytr)
    row["procrustes"] = (plain.score(Xte, Yte), centred.score(Xte, Yte))
    rel_new, rel_std = [], []
    for seed in seeds:
        for store, normalize in ((rel_new, None), (rel_std, "standard")):
            new = RelativeAnchorEncoder(
                normalize=normalize, random_state=seed, device=device
            ).fit(Ytr)
            store.append(
                paired_topk_accuracy(new.rebase(Xtr).transform(Xte), new.transform(Yte))
            )
    row["relative"] = (rel_old, rel_new, rel_std, new.n_anchors_)
    row["search"] = (
        top1_search(AlignedNeighbors(plain, gallery="raw", device=device).fit(Yte), Xte),
        top1_search(AlignedNeighbors(centred, gallery="raw", device=device).fit(Yte), Xte),
        top1_search(AlignedNeighbors(centred, device=device).fit(Yte), Xte),
        top1_search(AlignedNeighbors(centred, csls_k=10, device=device).fit(Yte), Xte),
    )
    return row


def fmt(values):
    return "/".join(f"{v:.3f}" for v in values)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=ROOT / "benchmarks" / "pairs" / "cache")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--device", default="auto", help="'auto', 'cpu', 'cuda' or 'cuda:N'")
    args = parser.parse_args()
    pairs = load_pairs(args.pairs)
    if not pairs:
        raise SystemExit(f"no pairs found ({MNIST} and {args.pairs} hold none)")
    for label, (X, Y, train) in pairs.items():
        start = time.perf_counter()
        r = measure(X, Y, train, args.seeds, args.device)
        ax, ay = r["aniso_x"], r["aniso_y"]
        p_old, p_new = r["procrustes"]
        rel_old, rel_new, rel_std, m = r["relative"]
        s_plain, s_raw, s_cent, s_csls = r["search"]
        print(f"## {label}: n_train={train.sum()}, n_test={(~train).sum()}, "
              f"d={X.shape[1]}->{Y.shape[1]}")
        print(f"  anisotropy mean_norm/mean_cosine: new {ax['mean_norm']:.2f}/"
              f"{ax['mean_cosine']:.2f}, old {ay['mean_norm']:.2f}/{ay['mean_cosine']:.2f}")
        print(f"  Procrustes center=False {p_old:.3f} | center=True (default) {p_new:.3f} "
              f"({p_new - p_old:+.3f})")
        print(f"  RelativeAnchorEncoder seeds {args.seeds}: old defaults (128, uncentred) "
              f"{fmt(rel_old)} | new defaults (auto={m}, centred) {fmt(rel_new)} "
              f"({np.mean(rel_new) - np.mean(rel_old):+.3f}) | new + normalize='standard' "
              f"{fmt(rel_std)}")
        print(f"  AlignedNeighbors top-1: plain map, raw gallery {s_plain:.3f} | centred map, "
              f"raw gallery {s_raw:.3f} | centred gallery (default) {s_cent:.3f} "
              f"({s_cent - s_plain:+.3f}) | centred + CSLS k=10 {s_csls:.3f}")
        print(f"  ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()

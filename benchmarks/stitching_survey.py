"""Zero-shot stitching survey: every anchor strategy, several seeds, on real features.

A digit classifier trained on one network's relative space, applied unchanged to another
network's (the gallery example ``examples/zero_shot_stitching.py`` tells the story on one
pair and one recipe; this script surveys the options).

Data: :func:`sklearn_compat.datasets.load_mnist_features` (the same 5,000 MNIST digits
embedded by three independently trained networks), or ``--data`` an npz with the same keys.
For each pair (strong -> other):

1. fit a :class:`~sklearn_compat.RelativeAnchorEncoder` on the strong network's training rows
   (PARAM also sees the other network's training rows as a parallel space);
2. train a head (StandardScaler + LogisticRegression) on the strong network's relative vectors;
3. ``enc.rebase(other_train)`` builds the same anchors in the other network's space with its own
   statistics, and the head classifies the other network's test rows, never having seen them.

Reference rows: the same head recipe trained on the other network's own absolute embeddings
(what PARAM's claim compares against), the strong absolute head applied to the other network's
raw embeddings (no stitching: chance level), and the direct alternative, an orthogonal
Procrustes map from the other space into the strong one (fitted on the training pairs)
followed by the strong absolute head.  Accuracies are on the 1,000 test rows, mean and spread
over ``--seeds`` anchor draws.

Usage::

    python benchmarks/stitching_survey.py
    python benchmarks/stitching_survey.py --seeds 1 --pairs cnn_s0:cnn_s1 --configs 0   # quicker
"""

import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_compat import OrthogonalProcrustesAligner, RelativeAnchorEncoder
from sklearn_compat.datasets import load_mnist_features

PAIRS = ["cnn_s0:mlp_s0", "cnn_s0:cnn_s1"]

# (label, encoder parameters); every row shares n_anchors and the head recipe.
CONFIGS = [
    (
        "random + cosine (original recipe)",
        dict(anchors="random", similarity="cosine", normalize=None),
    ),
    (
        "random + cosine, standardised",
        dict(anchors="random", similarity="cosine", normalize="standard"),
    ),
    ("k-means + cosine, standardised", dict(anchors="kmeans", normalize="standard")),
    ("FPS + cosine, standardised", dict(anchors="fps", normalize="standard")),
    ("random + WIP, standardised", dict(anchors="random", similarity="wip", normalize="standard")),
    ("param + WIP, standardised", dict(anchors="param", similarity="wip", normalize="standard")),
]


def head():
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))


def stitch(data, strong, other, params, seed, n_anchors, device):
    train, test, y = data["train_idx"], data["test_idx"], data["labels"]
    S, T = data[strong], data[other]
    enc = RelativeAnchorEncoder(n_anchors=n_anchors, random_state=seed, device=device, **params)
    fit_params = {"parallel": [T[train]]} if params["anchors"] == "param" else {}
    enc.fit(S[train], **fit_params)
    clf = head().fit(enc.transform(S[train]), y[train])
    own = clf.score(enc.transform(S[test]), y[test])
    stitched = clf.score(enc.rebase(T[train]).transform(T[test]), y[test])
    return own, stitched


def run_pair(data, strong, other, seeds, n_anchors, device, configs=CONFIGS):
    train, test, y = data["train_idx"], data["test_idx"], data["labels"]
    S, T = data[strong], data[other]
    rows = []
    own_abs = head().fit(T[train], y[train]).score(T[test], y[test])
    rows.append((f"head on {other}'s own absolute embeddings", None, own_abs, 0.0))
    strong_head = head().fit(S[train], y[train])
    rows.append(
        ("strong absolute head on raw other (no stitching)", None,
         strong_head.score(T[test], y[test]), 0.0)
    )  # fmt: skip
    procrustes = OrthogonalProcrustesAligner(center=True, scale=True, device=device)
    procrustes.fit(T[train], S[train])
    rows.append(
        ("Procrustes other -> strong, strong absolute head", strong_head.score(S[test], y[test]),
         strong_head.score(procrustes.transform(T[test]), y[test]), 0.0)
    )  # fmt: skip
    for label, params in configs:
        start = time.perf_counter()
        scores = np.array(
            [stitch(data, strong, other, params, s, n_anchors, device) for s in range(seeds)]
        )
        rows.append((label, scores[:, 0].mean(), scores[:, 1].mean(), scores[:, 1].std()))
        print(f"  {label}: {time.perf_counter() - start:.1f} s", flush=True)
    return rows


def load_data(path):
    """({network: features, "labels", "train_idx", "test_idx"}, description)."""
    if path is None:
        return load_mnist_features(), "sklearn_compat.datasets.load_mnist_features()"
    if not path.exists():
        raise SystemExit(f"error: {path} not found")
    with np.load(path) as npz:
        return {key: npz[key] for key in npz.files}, path.name


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument(
        "--data", type=Path, help="an npz with the same keys (default: the shipped features)"
    )
    parser.add_argument(
        "--pairs", nargs="+", help=f"strong:other network pairs (default: {' '.join(PAIRS)})"
    )
    parser.add_argument("--seeds", type=int, default=3, help="anchor draws per row (default 3)")
    parser.add_argument(
        "--configs",
        type=int,
        nargs="+",
        help=f"encoder rows to run, by position 0-{len(CONFIGS) - 1} (default: all)",
    )
    parser.add_argument("--n-anchors", type=int, default=64, help="anchors (default 64)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    args = parser.parse_args(argv)
    data, source = load_data(args.data)
    print(f"features: {source}")
    for pair in args.pairs or PAIRS:
        strong, other = pair.split(":")
        if strong not in data or other not in data:
            raise SystemExit(f"error: --pairs {pair}: networks available: {sorted(data)}")
        print(f"\n{strong} (strong) -> {other}: fitting ...", flush=True)
        configs = CONFIGS if args.configs is None else [CONFIGS[i] for i in args.configs]
        rows = run_pair(data, strong, other, args.seeds, args.n_anchors, args.device, configs)
        print(f"\n| {strong} -> {other} | strong own acc | zero-shot acc on {other} |")
        print("|---|---|---|")
        for label, own, acc, spread in rows:
            own_text = "" if own is None else f"{own:.3f}"
            acc_text = f"{acc:.3f}" + (f" +- {spread:.3f}" if spread else "")
            print(f"| {label} | {own_text} | {acc_text} |")


if __name__ == "__main__":
    main()

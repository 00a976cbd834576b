"""Zero-shot stitching with relative representations
=================================================

Zero-shot stitching on real features: a digit classifier trained on one network's relative
space, applied unchanged to another network's.

Data: ``mnist5k_features.npz`` (the same 5,000 MNIST digits embedded by three independently
trained networks; see ``shared/data/README.md``) when present, else the hidden features of
three small MLPs trained here on scikit-learn's bundled digits (seconds, no download).  For
each pair (strong -> other):

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

    python examples/zero_shot_stitching.py
    python examples/zero_shot_stitching.py --seeds 1 --pairs mlp_s0:mlp_s1    # quicker
"""

import argparse
import time
from pathlib import Path

import numpy as np
from lambda_tradeoff import SHARED, digits_features
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_compat import OrthogonalProcrustesAligner, RelativeAnchorEncoder

# The digits stand-in: three networks trained from different seeds, one of them briefly
# (a weaker network), all 64 wide like the shared file's.
DIGITS_NETWORKS = {"mlp_s0": (64, 0, 200), "mlp_s1": (64, 1, 200), "mlp_s2_short": (64, 2, 15)}
PAIRS = {
    "shared": ["cnn_s0:mlp_s0", "cnn_s0:cnn_s1"],
    "digits": ["mlp_s0:mlp_s1", "mlp_s0:mlp_s2_short"],
}

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


def load_data(path, digits=False):
    """({network: features, "labels", "train_idx", "test_idx"}, description)."""
    if path is None and SHARED.exists() and not digits:
        path = SHARED
    if path is not None:
        if not path.exists():
            raise SystemExit(f"error: {path} not found (leave out --data to use the digits)")
        with np.load(path) as npz:
            return {key: npz[key] for key in npz.files}, path.name
    features, labels, train_idx, test_idx = digits_features(DIGITS_NETWORKS)
    data = dict(features, labels=labels, train_idx=train_idx, test_idx=test_idx)
    return data, "scikit-learn digits, hidden layers of three small MLPs"


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument(
        "--data", type=Path, help="the .npz file (default: the shared one, else digits)"
    )
    parser.add_argument(
        "--pairs",
        nargs="+",
        help="strong:other network pairs (default: cnn_s0:mlp_s0 cnn_s0:cnn_s1 on the "
        "shared file, mlp_s0:mlp_s1 mlp_s0:mlp_s2_short on the digits)",
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
    parser.add_argument(
        "--digits", action="store_true", help="the digits features even where the shared file is"
    )
    args = parser.parse_args(argv)
    data, source = load_data(args.data, digits=args.digits)
    print(f"features: {source}")
    for pair in args.pairs or PAIRS["digits" if source.startswith("scikit") else "shared"]:
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


# %%
# Run
# ---
# One table per pair: the strong network's own accuracy and the zero-shot accuracy of its
# head on the other network, per anchor strategy, beside the reference rows.

if __name__ == "__main__":
    main()

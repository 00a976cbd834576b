"""The lam trade-off: compatibility against the new model's geometry
=================================================================

The lambda trade-off on real features: compatibility against the new model's own geometry.

A retrieval system indexes an old model's embeddings; a new model arrives.  For each
threshold ``lam`` (and the strict, exactly orthogonal variant) we train the paper's
bidirectional adapters on the training split (with class labels, so the contrastive term
is the supervised one) and evaluate on the test split (query set = gallery set, each query
removed from its own gallery):

- old/old, new/new: the two models on their own (reference rows);
- B(new)/old: adapted new queries against the *raw* old gallery (compatibility: it should
  beat old/old);  B(new)/F(old): against the forward-adapted old gallery;
- B/B: adapted new queries against an adapted new gallery (own-space quality after
  adaptation; compare with new/new);
- neighbourhood preservation of the new space under B (``overlap@10``);
- the orthogonality gap N of B (compare with lam);
- partial backfilling: the gallery starts as F(old) and is re-embedded as B(new) item by
  item, in the paper's order (per class, farthest from the class mean first) or at random;
  the area under the CMC top-1 curve (AUC) for both orders.

Data: ``../shared/data/mnist5k_features.npz`` (old = the MLP's features, new = a conv
net's), else features it builds itself from scikit-learn's bundled digits (two small
MLPClassifiers; no download).

Usage::

    python examples/lambda_tradeoff.py [--data PATH] [--out-dir DIR] [--max-epochs N]

Writes ``lambda_tradeoff.csv`` and ``lambda_tradeoff.png`` to ``--out-dir``.
"""

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from sklearn_compat import LambdaOrthAligner
from sklearn_compat.metrics import (
    backfilling_auc,
    backfilling_curve,
    cmc_topk_accuracy,
    mean_average_precision,
    neighbourhood_preservation,
)

# The checkout's examples/ (the documentation's gallery runs this file without __file__,
# from examples/ itself).
HERE = Path(globals().get("__file__", "lambda_tradeoff.py")).resolve().parent
SHARED = HERE.parents[1] / "shared" / "data" / "mnist5k_features.npz"
LAMS = [0.0, 2.0, 4.0, 8.0, 16.0, math.inf]


def load_features(path=None, digits=False):
    """(old, new, labels, train_idx, test_idx, description).

    ``path``: the shared feature file; None uses it when present, else features built
    from scikit-learn's bundled digits (always with ``digits=True``).  A ``path`` that does
    not exist is an error.
    """
    if path is None and SHARED.exists() and not digits:
        path = SHARED
    if path is not None:
        if not Path(path).exists():
            raise SystemExit(f"error: {path} not found (leave out --data to use the digits)")
        with np.load(path) as data:
            return (
                data["mlp_s0"],
                data["cnn_s0"],
                data["labels"],
                data["train_idx"],
                data["test_idx"],
                f"{Path(path).name}: old = mlp_s0, new = cnn_s0",
            )
    features, y, train_idx, test_idx = digits_features({"old": (48, 0, 15), "new": (64, 1, 200)})
    return (
        features["old"],
        features["new"],
        y,
        train_idx,
        test_idx,
        "scikit-learn digits: old = 48-unit MLP (15 iterations), new = 64-unit MLP",
    )


def digits_features(networks):
    """Hidden-layer features of small MLPs trained on scikit-learn's bundled digits.

    ``networks`` maps a name to ``(width, seed, max_iter)``.  Returns ``(features, labels,
    train_idx, test_idx)`` with ``features[name]`` of shape (1797, width), float32; the
    networks see only the 1,300 training rows.  Seconds on a CPU, no download.
    """
    import warnings

    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    rng = np.random.default_rng(0)
    order = rng.permutation(len(X))
    train_idx, test_idx = order[:1300], order[1300:]

    def hidden(width, seed, max_iter):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            net = MLPClassifier((width,), max_iter=max_iter, random_state=seed)
            net.fit(X[train_idx], y[train_idx])
        return np.maximum(X @ net.coefs_[0] + net.intercepts_[0], 0).astype(np.float32)

    features = {name: hidden(*spec) for name, spec in networks.items()}
    return features, y, train_idx, test_idx


def retrieval(queries, gallery, labels):
    return (
        cmc_topk_accuracy(queries, gallery, labels, k=1),
        mean_average_precision(queries, gallery, labels),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--data", help="feature file (default: the shared one, else digits)")
    parser.add_argument("--out-dir", default=".")
    parser.add_argument("--max-epochs", type=int, default=200)
    parser.add_argument(
        "--lams", type=float, nargs="+", default=LAMS, help="lam values (default: %(default)s)"
    )
    parser.add_argument(
        "--digits", action="store_true", help="the digits features even where the shared file is"
    )
    args = parser.parse_args(argv)
    old, new, labels, tr, te, description = load_features(args.data, digits=args.digits)
    print(description)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    lt = labels[te]
    rows = []
    ref = {}
    ref["old/old"] = retrieval(old[te], old[te], lt)
    ref["new/new"] = retrieval(new[te], new[te], lt)
    curves = {}
    variants = [(f"{lam:g}", dict(lam=lam)) for lam in args.lams]
    variants += [("strict", dict(strict=True))]
    for name, params in variants:
        est = LambdaOrthAligner(
            bidirectional=True, max_epochs=args.max_epochs, random_state=0, **params
        ).fit(new[tr], old[tr], labels=labels[tr])
        B = est.transform(new[te])
        F_old = est.transform_target(old[te])
        b_old = retrieval(B, old[te], lt)
        b_f = retrieval(B, F_old, lt)
        b_b = retrieval(B, B, lt)
        betas, curve = backfilling_curve(B, F_old, None, lt, order="farthest", n_steps=20)
        _, curve_random = backfilling_curve(
            B, F_old, None, lt, order="random", n_steps=20, random_state=0
        )
        curves[name] = (betas, curve, curve_random)
        rows.append(
            {
                "variant": name,
                "gap": est.orthogonality_gap_,
                "epochs": est.n_epochs_,
                "B/old top1": b_old[0],
                "B/old mAP": b_old[1],
                "B/F(old) top1": b_f[0],
                "B/F(old) mAP": b_f[1],
                "B/B top1": b_b[0],
                "B/B mAP": b_b[1],
                "preservation@10": neighbourhood_preservation(new[te], B, k=10),
                "backfill AUC (paper order)": backfilling_auc(
                    B, F_old, None, lt, order="farthest", n_steps=20
                ),
                "backfill AUC (random)": backfilling_auc(
                    B, F_old, None, lt, order="random", n_steps=20, random_state=0
                ),
            }
        )
        print(f"  fitted {name:>6}: gap {est.orthogonality_gap_:6.2f}, {est.n_epochs_} epochs")

    table = pd.DataFrame(rows).set_index("variant")
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    print(
        f"\nold/old top1 {ref['old/old'][0]:.3f} mAP {ref['old/old'][1]:.3f}   "
        f"new/new top1 {ref['new/new'][0]:.3f} mAP {ref['new/new'][1]:.3f}"
    )
    print(table.round(3).to_string())
    table.to_csv(out / "lambda_tradeoff.csv")
    plot(table, ref, curves, out / "lambda_tradeoff.png", description)
    print(f"\nwrote {out / 'lambda_tradeoff.csv'} and {out / 'lambda_tradeoff.png'}")
    return table


def plot(table, ref, curves, path, description):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(table.index)
    x = np.arange(len(names))
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for ax, (col, what) in zip(axes[0], [(0, "top1"), (1, "mAP")], strict=True):
        for key, style in [("B/old", "o-"), ("B/F(old)", "s--"), ("B/B", "^-")]:
            ax.plot(x, table[f"{key} {what}"], style, label=key)
        ax.axhline(ref["old/old"][col], color="grey", ls=":", label="old/old")
        ax.axhline(ref["new/new"][col], color="black", ls=":", label="new/new")
        ax.set_xticks(x, names)
        ax.set_xlabel("lam")
        ax.set_title(f"CMC {what}" if what == "top1" else what)
        ax.legend(fontsize=8)
    ax = axes[1, 0]
    ax.plot(x, table["gap"], "o-", label="orthogonality gap N")
    finite = [i for i, n in enumerate(names) if n not in ("inf", "strict")]
    ax.plot(x[finite], [float(names[i]) for i in finite], "k:", label="N = lam")
    ax.set_xticks(x, names)
    ax.set_xlabel("lam")
    ax.set_ylabel("N")
    twin = ax.twinx()
    twin.plot(x, table["preservation@10"], "s--", color="tab:red", label="preservation@10")
    twin.set_ylabel("neighbourhood preservation", color="tab:red")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("distance from orthogonality vs own-space preservation")
    ax = axes[1, 1]
    for name in ("0", "4", "16", "inf", "strict"):
        if name in curves:
            betas, curve, curve_random = curves[name]
            line = ax.plot(betas, curve, label=f"lam={name} (paper order)")[0]
            ax.plot(betas, curve_random, ls="--", color=line.get_color(), alpha=0.6)
    ax.set_xlabel("share of gallery backfilled (beta)")
    ax.set_ylabel("CMC top-1")
    ax.set_title("partial backfilling (dashed: random order)")
    ax.legend(fontsize=8)
    fig.suptitle(f"LambdaOrthAligner trade-off -- {description}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    # Left open: the documentation's gallery shows the figures a script leaves open.


# %%
# Run
# ---
# Fits every variant, prints the table and draws the trade-off: retrieval against the raw
# and the adapted old gallery, the orthogonality gap against ``lam`` with the new space's
# neighbourhood preservation, and the partial-backfilling curves.

if __name__ == "__main__":
    main()

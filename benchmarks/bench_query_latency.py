"""Benchmark: the query path, ``transform`` of a few rows against a bare numpy ``x @ W``.

A retrieval service maps one query (or a small batch) per request, so the fixed cost of
``transform`` (validation, dispatch) matters more than the product.  For each batch size
this prints the time of ``aligner.transform(x)``, of the same call forced onto the full
(validation + torch) path that every input took before the small-input path existed, and
of the bare ``x @ W`` with the map's own matrix in the same dtype, measured interleaved in
the same run (best of ``--repeats``), and the ratios to the bare product.  Targets: at
most 5x for one row, 2x for 256 rows; large batches (on the torch path) about 1x.

Usage::

    python benchmarks/bench_query_latency.py                 # 384 -> 384, float32
    python benchmarks/bench_query_latency.py --dim 768 --dtype float64
"""

import argparse
import time

import _common
import numpy as np

import sklearn_compat._core.backend as backend
from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.io import linear_form


def _seconds(func, number):
    start = time.perf_counter()
    for _ in range(number):
        func()
    return (time.perf_counter() - start) / number


def _full_path(aligner, x):
    """``transform`` with the small-input path switched off (the code before it)."""
    small_rows = backend.SMALL_INPUT_ROWS
    backend.SMALL_INPUT_ROWS = 0
    try:
        return aligner.transform(x)
    finally:
        backend.SMALL_INPUT_ROWS = small_rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16, 256, 100_000])
    parser.add_argument("--repeats", type=int, default=7)
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "query_latency")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)

    rng = np.random.default_rng(0)
    dtype = np.dtype(args.dtype)
    X = rng.normal(size=(4000, args.dim)).astype(dtype)
    Y = (X @ rng.normal(size=(args.dim, args.dim))).astype(dtype)
    aligner = OrthogonalProcrustesAligner(center=True, device="cpu").fit(X, Y)
    W, b = linear_form(aligner)
    W = W.astype(dtype)

    print(f"OrthogonalProcrustesAligner {args.dim} -> {args.dim}, {args.dtype}, CPU")
    print(
        f"{'rows':>8} {'bare x@W':>12} {'transform':>12} {'ratio':>7} "
        f"{'full path':>12} {'ratio':>7}"
    )
    table = []
    for rows in args.rows:
        x = rng.normal(size=(rows, args.dim)).astype(dtype)
        aligner.transform(x)  # warm caches on both sides
        funcs = {
            "bare": lambda x=x: x @ W,
            "transform": lambda x=x: aligner.transform(x),
            "full": lambda x=x: _full_path(aligner, x),
        }
        # About 0.05 s of calls per measurement.
        numbers = {key: max(1, int(0.05 / _seconds(f, 3))) for key, f in funcs.items()}
        best = dict.fromkeys(funcs, np.inf)
        # Interleaved, so load on the shared machine hits all three alike.
        for _ in range(args.repeats):
            for key, func in funcs.items():
                best[key] = min(best[key], _seconds(func, numbers[key]))
        bare, model, full = best["bare"], best["transform"], best["full"]
        print(
            f"{rows:>8} {bare * 1e6:>10.1f}us {model * 1e6:>10.1f}us {model / bare:>6.2f}x "
            f"{full * 1e6:>10.1f}us {full / bare:>6.2f}x"
        )
        table.append(
            [
                f"{rows:,}",
                f"{bare * 1e6:.1f} us",
                f"{model * 1e6:.1f} us",
                f"{model / bare:.2f}x",
                f"{full * 1e6:.1f} us",
                f"{full / bare:.2f}x",
            ]
        )
    columns = ["rows", "bare `x @ W`", "`transform`", "ratio", "full path", "ratio"]
    _common.write_results(
        args,
        "query_latency",
        "Query latency: `transform` of a few rows",
        [_common.table("", columns, table)],
        notes=f"OrthogonalProcrustesAligner, centred, {args.dim} -> {args.dim}, {args.dtype}, "
        f'CPU; best of {args.repeats} interleaved measurements. "full path" forces the '
        "general path (validation, conversions, torch) that the small-input path skips.",
    )


if __name__ == "__main__":
    main()

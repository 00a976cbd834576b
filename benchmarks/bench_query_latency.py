"""Benchmark: one query through ``transform`` against a bare numpy ``x @ W``, idle and loaded.

A retrieval service maps one query (or a small batch) per request, and rarely runs alone
on its machine.  For each batch size this times ``aligner.transform(x)``, the same call
inside ``batch_invariant_rows`` (the command line's mode: a single row goes through a
padded whole block instead of the matrix-vector product, so its bits equal a batch's), and
the bare ``x @ W`` with the map's own matrix in the same dtype: first as the machine is,
then with a busy-loop process started by this script on another core.  The three are
measured interleaved in the same run, so load hits them alike; each figure is the median
over ``--repeats`` of the mean of about 0.05 s of calls, and the ratios are to the bare
product of the same phase.  Target: one row within 3x.

Usage::

    python benchmarks/bench_query_latency.py                 # 384 -> 384, float32
    python benchmarks/bench_query_latency.py --dim 768 --dtype float64 --json out.json
"""

import argparse
import multiprocessing
import time

import _common
import numpy as np
import torch

import sklearn_compat._core.backend as backend
from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.io import linear_form


def _seconds(func, number):
    start = time.perf_counter()
    for _ in range(number):
        func()
    return (time.perf_counter() - start) / number


def _batch_invariant_path(aligner, x):
    """``transform`` as the command line calls it: every row gets its batch value."""
    with backend.batch_invariant_rows():
        return aligner.transform(x)


def _busy_loop(stop):
    while not stop.is_set():
        sum(range(10_000))


def _measure(aligner, W, x, repeats):
    funcs = {
        "bare": lambda: x @ W,
        "transform": lambda: aligner.transform(x),
        "exact": lambda: _batch_invariant_path(aligner, x),
    }
    for func in funcs.values():
        func()  # warm caches
    numbers = {key: max(1, int(0.05 / _seconds(f, 3))) for key, f in funcs.items()}
    times = {key: [] for key in funcs}
    for _ in range(repeats):  # interleaved, so load hits all three alike
        for key, func in funcs.items():
            times[key].append(_seconds(func, numbers[key]))
    return {key: float(np.median(t)) for key, t in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 16, 256])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--note", default="", help="machine state, for the JSON notes")
    _common.add_json_arguments(parser, "query_latency")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    dtype = np.dtype(args.dtype)
    X = rng.normal(size=(4000, args.dim)).astype(dtype)
    Y = (X @ rng.normal(size=(args.dim, args.dim))).astype(dtype)
    aligner = OrthogonalProcrustesAligner(center=True, device="cpu").fit(X, Y)
    W, _ = linear_form(aligner)
    W = W.astype(dtype)

    title = (
        f"OrthogonalProcrustesAligner {args.dim} -> {args.dim}, {args.dtype}, CPU, "
        f"torch threads {torch.get_num_threads()}"
    )
    print(title)
    columns = ["machine", "rows", "bare x@W (us)", "transform (us)", "ratio",
               "batch-invariant (us)", "ratio"]  # fmt: skip
    print(" ".join(f"{c:>16}" for c in columns))
    rows_out = []
    for phase in ("as is", "other core busy"):
        stop = busy = None
        if phase != "as is":
            stop = multiprocessing.Event()
            busy = multiprocessing.Process(target=_busy_loop, args=(stop,), daemon=True)
            busy.start()
            time.sleep(0.2)
        try:
            for rows in args.rows:
                x = rng.normal(size=(rows, args.dim)).astype(dtype)
                t = _measure(aligner, W, x, args.repeats)
                row = [phase, rows, round(t["bare"] * 1e6, 1), round(t["transform"] * 1e6, 1),
                       round(t["transform"] / t["bare"], 2), round(t["exact"] * 1e6, 1),
                       round(t["exact"] / t["bare"], 2)]  # fmt: skip
                rows_out.append(row)
                print(" ".join(f"{v!s:>16}" for v in row))
        finally:
            if busy is not None:
                stop.set()
                busy.join()
    _common.write_results(
        args,
        "query_latency",
        "One query through transform against a bare numpy matmul, idle and loaded",
        [_common.table(title, columns, rows_out)],
        notes=args.note,
    )


if __name__ == "__main__":
    main()

"""Fit on a Dask LocalCluster vs in memory, same rows, same estimator.

The rows are generated on the workers with ``dask.array.random`` and persisted there (so
the cluster fit reads them from worker memory, as a real cluster would hold them); the
in-memory reference gets the same rows computed into local numpy arrays.  Printed: the
time of each fit, the ratio, and the largest difference between the two maps.

    python benchmarks/bench_dask.py                      # 2M x 256 float32 (~4 GB of rows)
    python benchmarks/bench_dask.py --rows 20000 --dim 32    # smoke run
"""

import argparse

import _common
import dask.array as da
import numpy as np
import torch
from distributed import Client, LocalCluster, wait

from sklearn_compat import AffineAligner, OrthogonalProcrustesAligner

ESTIMATORS = {
    "affine": lambda: AffineAligner(device="cpu"),
    "procrustes": lambda: OrthogonalProcrustesAligner(center=True, device="cpu"),
}


def make_pair(rows, dim, chunk_rows, seed):
    state = da.random.RandomState(seed)
    X = state.standard_normal(size=(rows, dim), chunks=(chunk_rows, dim)).astype(np.float32)
    mix = np.random.default_rng(seed).normal(size=(dim, dim)).astype(np.float32) / np.sqrt(dim)
    noise = state.standard_normal(size=(rows, dim), chunks=(chunk_rows, dim))
    Y = (X @ mix + 0.1 * noise.astype(np.float32) + 1.0).astype(np.float32)
    return X, Y


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--chunk-rows", type=int, default=125_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--estimator", choices=sorted(ESTIMATORS), default="affine")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--client-threads",
        type=int,
        default=None,
        help="torch threads for the in-memory fit (default: torch's choice, all cores)",
    )
    _common.add_json_arguments(parser, "dask")
    args = parser.parse_args(argv)

    cluster = LocalCluster(
        n_workers=args.workers,
        threads_per_worker=args.threads_per_worker,
        processes=True,
        dashboard_address=None,
    )
    with cluster, Client(cluster) as client:
        X, Y = make_pair(args.rows, args.dim, args.chunk_rows, seed=0)
        X, Y = client.persist([X, Y])
        wait([X, Y])
        make = ESTIMATORS[args.estimator]
        make().fit(X[: args.chunk_rows], Y[: args.chunk_rows])  # warm the workers' imports
        t_dask, on_cluster = _common.best_time(lambda: make().fit(X, Y), args.repeats)
        X_np, Y_np = client.compute([X, Y], sync=True)
        if args.client_threads:
            torch.set_num_threads(args.client_threads)
        t_mem, in_memory = _common.best_time(lambda: make().fit(X_np, Y_np), args.repeats)

    gap = np.abs(on_cluster.W_ - in_memory.W_).max() / np.abs(in_memory.W_).max()
    print(
        f"{args.estimator}: {args.rows} x {args.dim} float32, {X.numblocks[0]} blocks, "
        f"{args.workers} workers x {args.threads_per_worker} thread(s)"
    )
    print(f"in memory (numpy, {torch.get_num_threads()} torch threads): {t_mem:8.2f} s")
    print(f"Dask LocalCluster:                  {t_dask:8.2f} s")
    print(f"ratio dask / in memory:             {t_dask / t_mem:8.2f}")
    print(f"max |W_dask - W_mem| / max |W_mem|: {gap:.1e}")
    threads = f"--client-threads {args.client_threads}" if args.client_threads else "default"
    row = [
        f"in-memory fit, {threads} torch threads",
        f"{t_mem:.1f} s",
        f"{t_dask:.1f} s",
        f"{t_dask / t_mem:.2f}",
        f"{gap:.1e}",
    ]
    columns = ["run", "in memory", "Dask LocalCluster", "ratio dask / in memory"]
    _common.write_results(
        args,
        "dask",
        f"{type(in_memory).__name__} on Dask against in memory",
        [_common.table("", columns + ["max rel. gap of W"], [row])],
        notes=f"{args.rows:,} x {args.dim} float32 rows in {X.numblocks[0]} blocks, generated "
        f"and persisted on a LocalCluster of {args.workers} worker processes x "
        f"{args.threads_per_worker} thread(s); only the statistics come back.",
    )


if __name__ == "__main__":
    main()

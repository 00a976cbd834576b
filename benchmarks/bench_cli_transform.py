"""Benchmark: ``sklearn-compat transform`` of a large Parquet export against the I/O floor.

Writes an ``--rows`` x ``--dim`` float32 Parquet table (an int64 id column and the
embedding as one list column, or ``--form columns`` for one column per dimension), fits
an orthogonal map on a sample, and then times, each in a fresh process:

- the floor: pyarrow reads the file batch by batch, numpy multiplies each batch by the
  same matrix, pyarrow writes the result with the same writer settings as the CLI
  (dictionary encoding for the ids only): the least any tool must do;
- the command line: ``python -m sklearn_compat transform`` on the same file, at each
  ``--rows-per-batch`` value.

It prints throughput (rows/s), the ratio floor time / CLI time (1.0 = as fast as the
floor), and each process's peak resident memory (``ru_maxrss`` from ``os.wait4``), which
must depend on the batch size and not on the file size: compare it with the file size
and across batch sizes.  The CLI's start-up (Python, torch, model load) is timed apart
so the streaming part can be compared on its own.

Usage::

    python benchmarks/bench_cli_transform.py                 # 1M x 768 (about 3 GB)
    python benchmarks/bench_cli_transform.py --rows 100000   # smoke run
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

FLOOR = textwrap.dedent(
    """
    import sys, numpy as np, pyarrow as pa, pyarrow.parquet as pq
    src, dst, matrix, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    A = np.load(matrix)
    f = pq.ParquetFile(src, pre_buffer=False, buffer_size=1 << 20)
    writer = None
    for rb in f.iter_batches(batch_size=rows):
        col = rb.column(1)
        if pa.types.is_fixed_size_list(col.type):
            X = col.flatten().to_numpy().reshape(len(col), -1)
        else:
            X = np.column_stack([c.to_numpy() for c in rb.columns[1:]])
        Z = X @ A
        flat = pa.FixedSizeListArray.from_arrays(pa.array(Z.reshape(-1)), Z.shape[1])
        out = pa.RecordBatch.from_arrays([rb.column(0), flat], names=["id", "embedding"])
        if writer is None:
            writer = pq.ParquetWriter(dst, out.schema, use_dictionary=["id"])
        writer.write_batch(out)
    writer.close()
    """
)

STARTUP = (
    "import sys, numpy as np; from sklearn_compat.io import load_model; "
    "load_model(sys.argv[1]).transform(np.zeros((1, int(sys.argv[2])), np.float32))"
)


def timed(cmd, env=None):
    """Run ``cmd``; returns (seconds, peak RSS in MiB) of that process alone."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"command failed: {' '.join(map(str, cmd))}\n{err}")
    # ru_maxrss is in KiB on Linux.
    return seconds, usage.ru_maxrss / 1024


def make_input(path, rows, dim, form, row_group, seed=0):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    writer = None
    for start in range(0, rows, row_group):
        n = min(row_group, rows - start)
        X = rng.standard_normal((n, dim), dtype=np.float32)
        ids = pa.array(np.arange(start, start + n, dtype=np.int64))
        if form == "list":
            arrays = [ids, pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), dim)]
            names = ["id", "embedding"]
        else:
            Xt = np.ascontiguousarray(X.T)
            arrays = [ids] + [pa.array(c) for c in Xt]
            names = ["id"] + [f"e{i}" for i in range(dim)]
        batch = pa.RecordBatch.from_arrays(arrays, names=names)
        if writer is None:
            writer = pq.ParquetWriter(path, batch.schema)
        writer.write_batch(batch)
    writer.close()


def make_model(path, matrix_path, dim, out_dim):
    sys.path.insert(0, str(ROOT))
    from scipy.stats import ortho_group

    from sklearn_compat import OrthogonalProcrustesAligner
    from sklearn_compat.io import save_model

    rng = np.random.default_rng(1)
    X = rng.standard_normal((4 * max(dim, out_dim), dim))
    Q = ortho_group.rvs(max(dim, out_dim), random_state=0)[:dim, :out_dim]
    model = OrthogonalProcrustesAligner().fit(X, X @ Q)
    save_model(model, path, force=True)
    np.save(matrix_path, model.W_.astype(np.float32))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--out-dim", type=int, default=None, help="default: --dim")
    parser.add_argument("--form", choices=("list", "columns"), default="list")
    parser.add_argument("--row-group", type=int, default=65536,
                        help="rows per row group of the input file")
    parser.add_argument("--rows-per-batch", type=int, nargs="+", default=[16384, 65536])
    parser.add_argument("--workdir", help="where to write the files (default: a temp dir)")
    args = parser.parse_args(argv)
    out_dim = args.out_dim or args.dim

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_cli_"))
    work.mkdir(parents=True, exist_ok=True)
    src, model, matrix = work / "src.parquet", work / "model.skops", work / "A.npy"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        t0 = time.perf_counter()
        make_input(src, args.rows, args.dim, args.form, args.row_group)
        make_model(model, matrix, args.dim, out_dim)
        size = src.stat().st_size / 2**20
        print(f"input: {args.rows} x {args.dim} float32, form={args.form}, "
              f"row groups of {args.row_group}: {size:.0f} MiB "
              f"(written in {time.perf_counter() - t0:.1f} s)")
        print(f"machine: {os.cpu_count()} CPUs visible; torch threads as default")

        startup, startup_rss = timed(
            [sys.executable, "-c", STARTUP, str(model), str(args.dim)], env)
        print(f"CLI start-up (python + torch + model load): {startup:.2f} s, "
              f"{startup_rss:.0f} MiB")
        print(f"{'run':<28}{'rows/batch':>11}{'seconds':>9}{'rows/s':>11}"
              f"{'floor/run':>10}{'stream/floor':>13}{'peak MiB':>10}")
        for rows in args.rows_per_batch:
            out = work / "floor.parquet"
            floor_s, floor_rss = timed(
                [sys.executable, "-c", FLOOR, str(src), str(out), str(matrix), str(rows)])
            out.unlink()
            print(f"{'floor: pyarrow+numpy':<28}{rows:>11}{floor_s:>9.2f}"
                  f"{args.rows / floor_s:>11.0f}{1.0:>10.2f}{'':>13}{floor_rss:>10.0f}")
            out = work / "out.parquet"
            cli_s, cli_rss = timed(
                [sys.executable, "-m", "sklearn_compat", "transform", "--model", str(model),
                 "--input", str(src), "--output", str(out), "--id-column", "id",
                 "--rows-per-batch", str(rows), "--force", "--device", "cpu"], env)
            out.unlink()
            stream = max(cli_s - startup, 1e-9)
            print(f"{'sklearn-compat transform':<28}{rows:>11}{cli_s:>9.2f}"
                  f"{args.rows / cli_s:>11.0f}{floor_s / cli_s:>10.2f}"
                  f"{stream / floor_s:>13.2f}{cli_rss:>10.0f}")
        print("floor/run: floor seconds / run seconds (1.0 = as fast as the floor); "
              "stream/floor: CLI seconds without start-up / floor seconds.")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

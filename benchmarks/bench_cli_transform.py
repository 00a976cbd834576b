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
floor), and each process's peak resident memory (VmHWM, Linux), which
must depend on the batch size and not on the file size: compare it with the file size
and across batch sizes.  The CLI's start-up (Python and torch imports) is timed apart
so the streaming part can be compared on its own; the idle CLI's memory (imports only)
is printed for reference.

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
    import sys, time, numpy as np, pyarrow as pa, pyarrow.parquet as pq
    start = time.perf_counter()
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
    sys.stderr.write(f"WORK_S {time.perf_counter() - start}\\n")
    """
)

# The command line, timed from after its imports (Python, torch, pyarrow, skops), so the
# model load and the streaming can be compared with the floor on their own.
CLI = textwrap.dedent(
    """
    import sys, time
    import pyarrow.parquet, skops.io, torch
    import sklearn_compat.cli._commands
    from sklearn_compat.cli import main
    start = time.perf_counter()
    code = main(sys.argv[1:])
    sys.stderr.write(f"WORK_S {time.perf_counter() - start}\\n")
    sys.exit(code)
    """
)


# Runs a module (-m NAME ...) or code (-c CODE ...) and reports its peak resident memory
# from /proc/self/status (VmHWM).  ru_maxrss cannot be used: Linux carries it across
# fork and exec, so a child would report at least its parent's size.
PEAK = """
import atexit, runpy, sys
def _peak():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM"):
                sys.stderr.write(f"PEAK_KB {line.split()[1]}\\n")
atexit.register(_peak)
mode = sys.argv.pop(1)
if mode == "-m":
    sys.argv[0] = sys.argv.pop(1)
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    code = sys.argv.pop(1)
    sys.argv[0] = "-c"
    exec(compile(code, "<bench>", "exec"), {"__name__": "__main__"})
"""


def timed(args, env=None):
    """Run ``python -m ...`` or ``python -c ...`` (``args`` after the interpreter).

    Returns (wall seconds, seconds of work after the imports, peak resident MiB) of that
    process alone.
    """
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"command failed: {' '.join(map(str, args))}\n{proc.stderr}")

    def last(tag):
        values = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith(tag)]
        return float(values[-1])

    return seconds, last("WORK_S"), last("PEAK_KB") / 1024


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
    parser.add_argument(
        "--row-group", type=int, default=65536, help="rows per row group of the input file"
    )
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
        print(
            f"input: {args.rows} x {args.dim} float32, form={args.form}, "
            f"row groups of {args.row_group}: {size:.0f} MiB "
            f"(written in {time.perf_counter() - t0:.1f} s)"
        )
        print(f"machine: {os.cpu_count()} CPUs visible; torch threads as default")

        print(
            f"{'run':<26}{'rows/batch':>11}{'total s':>9}{'work s':>8}{'rows/s':>9}"
            f"{'floor/run':>10}{'peak MiB':>10}"
        )
        for rows in args.rows_per_batch:
            out = work / "floor.parquet"
            floor_total, floor_s, floor_rss = timed(
                ["-c", FLOOR, str(src), str(out), str(matrix), str(rows)]
            )
            out.unlink()
            print(
                f"{'floor: pyarrow+numpy':<26}{rows:>11}{floor_total:>9.2f}{floor_s:>8.2f}"
                f"{args.rows / floor_s:>9.0f}{1.0:>10.2f}{floor_rss:>10.0f}"
            )
            out = work / "out.parquet"
            cli_total, cli_s, cli_rss = timed(
                [
                    "-c",
                    CLI,
                    "transform",
                    "--model",
                    str(model),
                    "--input",
                    str(src),
                    "--output",
                    str(out),
                    "--id-column",
                    "id",
                    "--rows-per-batch",
                    str(rows),
                    "--force",
                    "--device",
                    "cpu",
                ],
                env,
            )
            out.unlink()
            print(
                f"{'sklearn-compat transform':<26}{rows:>11}{cli_total:>9.2f}{cli_s:>8.2f}"
                f"{args.rows / cli_s:>9.0f}{floor_s / cli_s:>10.2f}{cli_rss:>10.0f}"
            )
        idle = CLI.split("start = ")[0] + "sys.stderr.write('WORK_S 0\\n')\n"
        _, _, idle_rss = timed(["-c", idle], env)
        print(
            f"{'CLI after imports, idle':<26}{'':>11}{'':>9}{'':>8}{'':>9}{'':>10}"
            f"{idle_rss:>10.0f}"
        )
        print(
            "work s: after the imports (the CLI's includes loading the model); "
            "floor/run: floor work s / run work s (1.0 = as fast as the floor)."
        )
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

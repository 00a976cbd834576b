"""Benchmark: memory and CSV speed of ``sklearn-compat transform`` on real-world layouts.

In one run, in a temporary directory, it writes three ``--rows`` x ``--dim`` float32
Parquet exports with an int64 id column:

- ``columns``: one column per dimension, row groups of ``--row-group`` rows (pyarrow's
  defaults otherwise, so float columns are dictionary-encoded, as pandas writes them);
- ``list``: the embedding as one list column, same row groups;
- ``one-row-group``: one column per dimension in a single row group, as
  ``df.to_parquet(path)`` writes any frame of up to 1M rows;

fits an orthogonal map and runs ``sklearn-compat transform`` on each, at the default
``--rows-per-batch`` (and any given with ``--rows-per-batch``), each in a fresh process.
It prints each process's peak resident memory (VmHWM) beyond that of a process that only
does the command line's imports (target: under 300 MB), and the time of the work after
the imports.

Then it writes the same ``--csv-rows`` x ``--dim`` table to CSV with the command line's
writer (:class:`sklearn_compat.io.TableWriter`, batch by batch at the default batch) and
with ``pyarrow.csv.write_csv`` on the whole table, alternating, and prints the ratio
(target: at most 2x), plus the peak memory of a ``transform`` to CSV.

Usage::

    python benchmarks/bench_cli_transform.py                      # 600k x 256
    python benchmarks/bench_cli_transform.py --rows 100000        # smoke run
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import _common
import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# The command line with its imports done first, so the work is timed on its own.
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
IDLE = CLI.split("start = ")[0] + "sys.stderr.write('WORK_S 0\\n')\n"

# The CSV writers, in one process, alternating: ours (TableWriter, batch by batch) and
# pyarrow's write_csv on the whole table.
CSV_RACE = textwrap.dedent(
    """
    import sys, time
    import numpy as np, pyarrow as pa, pyarrow.csv as pacsv, pyarrow.parquet as pq
    from sklearn_compat.io import OutputLayout, TableWriter
    src, work, batch, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    table = pq.read_table(src)
    ids = table.column(0).to_numpy()
    X = np.column_stack([c.to_numpy() for c in table.columns[1:]])
    names = table.column_names[1:]
    layout = OutputLayout("columns", X.shape[1], "id", names)
    ours, theirs = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        with TableWriter(f"{work}/ours.csv", layout, force=True) as writer:
            for i in range(0, len(X), batch):
                writer.write(ids[i : i + batch], X[i : i + batch])
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        pacsv.write_csv(table, f"{work}/pyarrow.csv")
        theirs.append(time.perf_counter() - start)
    print(min(ours), min(theirs))
    """
)


def transform(model, src, out, rows, env):
    """``sklearn-compat transform`` in a fresh process: (work seconds, peak MiB)."""
    args = ["--model", model, "--input", src, "--output", out, "--id-column", "id"]
    args += ["--rows-per-batch", rows, "--force", "--device", "cpu", "--no-progress"]
    return _common.timed(CLI, "transform", *args, env=env)


def make_input(path, rows, dim, form, row_group, seed=0):
    """Write the export in slices of at most 65536 rows, so the generator stays small."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    writer = None
    table_rows = min(row_group, rows)
    for start in range(0, rows, table_rows):
        chunks = []
        for first in range(start, min(rows, start + table_rows), 65536):
            n = min(65536, rows - first, start + table_rows - first)
            X = rng.standard_normal((n, dim), dtype=np.float32)
            ids = pa.array(np.arange(first, first + n, dtype=np.int64))
            if form == "list":
                flat = pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), dim)
                chunks.append(pa.RecordBatch.from_arrays([ids, flat], ["id", "embedding"]))
            else:
                cols = [pa.array(c) for c in np.ascontiguousarray(X.T)]
                names = ["id"] + [f"e{i}" for i in range(dim)]
                chunks.append(pa.RecordBatch.from_arrays([ids, *cols], names))
        table = pa.Table.from_batches(chunks)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=table_rows)
        del table, chunks
    writer.close()


def make_model(path, dim):
    sys.path.insert(0, str(ROOT))
    from scipy.stats import ortho_group

    from sklearn_compat import OrthogonalProcrustesAligner
    from sklearn_compat.io import save_model

    rng = np.random.default_rng(1)
    X = rng.standard_normal((4 * dim, dim))
    model = OrthogonalProcrustesAligner().fit(X, X @ ortho_group.rvs(dim, random_state=0))
    save_model(model, path, force=True)


def main(argv=None):
    sys.path.insert(0, str(ROOT))
    from sklearn_compat.cli._parser import DEFAULT_ROWS_PER_BATCH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--row-group", type=int, default=50_000)
    parser.add_argument("--rows-per-batch", type=int, nargs="*", default=[])
    parser.add_argument(
        "--layouts",
        nargs="+",
        choices=("columns", "list", "one-row-group"),
        default=["columns", "list", "one-row-group"],
    )
    parser.add_argument("--csv-rows", type=int, default=100_000)
    parser.add_argument("--csv-rounds", type=int, default=2)
    parser.add_argument("--workdir", help="where to write the files (default: a temp dir)")
    _common.add_json_arguments(parser, "cli_transform")
    args = parser.parse_args(argv)
    batches = [DEFAULT_ROWS_PER_BATCH] + [
        b for b in args.rows_per_batch if b != DEFAULT_ROWS_PER_BATCH
    ]

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_cli_"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    model = work / "model.skops"
    try:
        make_model(model, args.dim)
        inputs = {
            "columns": ("columns", args.row_group),
            "list": ("list", args.row_group),
            "one-row-group": ("columns", args.rows),
        }
        _, idle = _common.timed(IDLE, env=env)
        print(f"machine: {os.cpu_count()} CPUs visible; default --rows-per-batch {batches[0]}")
        print(f"CLI after its imports, idle: {idle:.0f} MiB")
        print(
            f"{'input':<16}{'MiB':>6}{'rows/batch':>11}{'work s':>8}{'peak MiB':>10}"
            f"{'beyond imports':>16}"
        )
        table_rows = []
        for label in args.layouts:
            form, group = inputs[label]
            src = work / f"{label}.parquet"
            make_input(src, args.rows, args.dim, form, group)
            size = src.stat().st_size / 2**20
            for rows in batches:
                out = work / "out.parquet"
                seconds, peak = transform(model, src, out, rows, env)
                out.unlink()
                print(
                    f"{label:<16}{size:>6.0f}{rows:>11}{seconds:>8.1f}{peak:>10.0f}"
                    f"{peak - idle:>16.0f}"
                )
                table_rows.append(
                    [label, f"{size:.0f}", f"{rows}", f"{seconds:.1f}", f"{peak - idle:.0f}"]
                )
            src.unlink()

        src = work / "csv-src.parquet"
        make_input(src, args.csv_rows, args.dim, "columns", args.row_group)
        proc = subprocess.run(
            [sys.executable, "-c", CSV_RACE, src, work, str(batches[0]), str(args.csv_rounds)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        ours, theirs = map(float, proc.stdout.split())
        out = work / "out.csv"
        seconds, peak = transform(model, src, out, batches[0], env)
        print(
            f"CSV, {args.csv_rows} x {args.dim} float32 (best of {args.csv_rounds}): ours "
            f"{ours:.2f} s, pyarrow.csv.write_csv {theirs:.2f} s, ratio {ours / theirs:.2f}x"
        )
        print(
            f"transform to CSV at the default batch: {seconds:.1f} s, peak {peak:.0f} MiB, "
            f"{peak - idle:.0f} beyond imports"
        )
        table_rows.append(
            ["CSV output", "", f"{batches[0]}", f"{seconds:.1f}", f"{peak - idle:.0f}"]
        )
        columns = ["input", "file MiB", "rows/batch", "work s", "peak MiB beyond imports"]
        _common.write_results(
            args,
            "cli_transform",
            "Command line: `sklearn-compat transform` of real-world table layouts",
            [
                _common.table(f"{args.rows:,} x {args.dim} float32 Parquet", columns, table_rows),
                _common.table(
                    f"CSV writer, {args.csv_rows:,} x {args.dim} (best of {args.csv_rounds})",
                    ["ours s", "pyarrow.csv.write_csv s", "ratio"],
                    [[f"{ours:.2f}", f"{theirs:.2f}", f"{ours / theirs:.2f}x"]],
                ),
            ],
            notes="Each `transform` runs in a fresh process; peak memory is its VmHWM beyond "
            f"that of a process that only does the command line's imports ({idle:.0f} MiB). "
            "Layouts: one column per dimension (row groups of "
            f"{args.row_group:,}), one list column, one column per dimension in one row group.",
        )
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

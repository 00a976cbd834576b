"""Benchmark: ``sklearn-compat transform`` of a Qdrant collection into a new collection,
against a by-hand qdrant-client scroll + upsert floor in the same run.

In a temporary local-mode Qdrant storage (``QdrantClient(path=DIR)``, in /dev/shm where
there is one: local mode commits every point to SQLite on its own, which a VM's disk
makes ~25 ms a point), it writes a ``--rows`` x ``--dim`` float32 collection ``items``
(Cosine distance, integer ids, a payload per point), fits an orthogonal map, and runs,
each in a fresh process and alternating ``--rounds`` times:

- ours: ``sklearn-compat transform --input qdrant:DIR::items --output qdrant:DIR::mapped``
  (staged in ``mapped.v1``, resumable, the count checked, then the alias ``mapped``);
- the floor: qdrant-client's own scroll of ``items`` in batches of the same size (vectors
  and payloads), one ``X @ W + b`` per batch and one ``upsert`` of a ``models.Batch``
  into a new collection with the same vector settings (no resume, no checks, no alias).

Both open the storage inside the timed part (local mode loads every collection into
memory when it opens).  It prints the time of each, their ratio (target: at most 1.5x)
and each process's peak resident memory beyond a process that only does the imports.

Usage::

    python benchmarks/bench_qdrant.py                 # 200k x 384
    python benchmarks/bench_qdrant.py --rows 20000    # smoke run
"""

import argparse
import os
import shutil
import tempfile
import textwrap
import warnings
from pathlib import Path

import _common
import numpy as np

ROOT = Path(__file__).resolve().parents[1]

IMPORTS = """
import sys, time, warnings
warnings.simplefilter("ignore", UserWarning)
import qdrant_client, skops.io, torch
import sklearn_compat.cli._commands, sklearn_compat.io._qdrant_store
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
    import numpy as np
    from qdrant_client import QdrantClient, models
    from sklearn_compat.io import linear_form, load_model
    path, model, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    W, b = linear_form(load_model(model))
    W, b = W.astype(np.float32), b.astype(np.float32)
    start = time.perf_counter()
    client = QdrantClient(path=path)
    params = client.get_collection("items").config.params.vectors
    client.create_collection(
        "floor",
        vectors_config=models.VectorParams(size=W.shape[1], distance=params.distance),
    )
    offset = None
    while True:
        records, offset = client.scroll(
            "items", limit=batch, offset=offset, with_payload=True, with_vectors=True
        )
        if records:
            X = np.asarray([r.vector for r in records], dtype=np.float32)
            Z = X @ W + b
            client.upsert(
                "floor",
                points=models.Batch(
                    ids=[r.id for r in records],
                    vectors=Z.tolist(),
                    payloads=[r.payload for r in records],
                ),
            )
        if offset is None:
            break
    client.close()
    sys.stderr.write(f"WORK_S {time.perf_counter() - start}\\n")
    """
)

IDLE = IMPORTS + "sys.stderr.write('WORK_S 0\\n')\n"

DROP = IMPORTS + textwrap.dedent(
    """
    from qdrant_client import QdrantClient, models
    client = QdrantClient(path=sys.argv[1])
    client.update_collection_aliases(change_aliases_operations=[
        models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=a.alias_name))
        for a in client.get_aliases().aliases
    ])
    for c in client.get_collections().collections:
        if c.name != "items":
            client.delete_collection(c.name)
    client.close()
    sys.stderr.write("WORK_S 0\\n")
    """
)



def timed(code, *args):
    """Run ``code`` in a fresh process on one thread, this checkout first on its path."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return _common.timed(code, *args, cwd=ROOT, env=env)


def make_collection(path, rows, dim, seed=0):
    """The input collection, upserted in slices."""
    from qdrant_client import QdrantClient, models

    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        client = QdrantClient(path=str(path))
    client.create_collection(
        "items", vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE)
    )
    for start in range(0, rows, 16384):
        n = min(16384, rows - start)
        X = rng.standard_normal((n, dim), dtype=np.float32)
        ids = list(range(start, start + n))
        payloads = [{"text": f"item {i}"} for i in ids]
        client.upsert("items", points=models.Batch(ids=ids, vectors=X.tolist(), payloads=payloads))
    client.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--rows-per-batch", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--notes", default="", help="a note for the results (the box's state)")
    _common.add_json_arguments(parser, "qdrant_transform")
    args = parser.parse_args(argv)

    from sklearn_compat import OrthogonalProcrustesAligner
    from sklearn_compat.io import save_model

    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = Path(tempfile.mkdtemp(prefix="bench-qdrant-", dir=base))
    try:
        rng = np.random.default_rng(1)
        X = rng.standard_normal((2000, args.dim))
        Q = np.linalg.qr(rng.standard_normal((args.dim, args.dim)))[0]
        model = work / "m.skops"
        save_model(OrthogonalProcrustesAligner().fit(X, X @ Q), model)
        storage = work / "q"
        make_collection(storage, args.rows, args.dim)
        print(f"input written ({args.rows} x {args.dim})", flush=True)
        _, idle = timed(IDLE)
        ours, floor = [], []
        for _ in range(args.rounds):
            command = ["transform", "--model", model, "--input", f"qdrant:{storage}::items"]
            command += ["--output", f"qdrant:{storage}::mapped", "--no-progress"]
            command += ["--rows-per-batch", args.rows_per_batch, "--device", "cpu"]
            ours.append(timed(OURS, *command))
            print(f"ours {ours[-1][0]:.1f} s", flush=True)
            timed(DROP, storage)
            floor.append(timed(FLOOR, storage, model, args.rows_per_batch))
            print(f"floor {floor[-1][0]:.1f} s", flush=True)
            timed(DROP, storage)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = report(args, ours, floor, idle)
    notes = (
        f"{args.rows:,} x {args.dim} float32 in a local-mode Qdrant collection (Cosine, "
        f"integer ids, a payload per point) on tmpfs, an orthogonal map, batches of "
        f"{args.rows_per_batch:,} points; each run in a fresh process that opens the "
        f"storage inside the timed part, alternating, best of {args.rounds}. Memory is peak "
        "resident memory beyond a process that only does the same imports (local mode holds "
        "every collection in memory)."
    )
    _common.write_results(
        args,
        "qdrant_transform",
        "Vector stores: `transform` of a Qdrant collection into a new collection",
        [_common.table("", ["", "seconds", "peak MiB beyond imports"], rows)],
        notes=" ".join(filter(None, [notes, args.notes])),
    )


def report(args, ours, floor, idle):
    best_ours, best_floor = min(t for t, _ in ours), min(t for t, _ in floor)
    peak_ours = max(m for _, m in ours) - idle
    peak_floor = max(m for _, m in floor) - idle
    ratio = best_ours / best_floor
    print(f"Qdrant collection {args.rows} x {args.dim}, batches of {args.rows_per_batch}")
    print(f"{'':34}{'seconds':>10}{'peak MiB beyond imports':>26}")
    print(f"{'sklearn-compat transform':34}{best_ours:10.2f}{peak_ours:26.0f}")
    print(f"{'floor (scroll + upsert)':34}{best_floor:10.2f}{peak_floor:26.0f}")
    print(f"ratio (target <= 1.5): {ratio:.2f}")
    return [
        ["`sklearn-compat transform --input qdrant:DIR::items --output qdrant:DIR::mapped` "
         "(staged in mapped.v1, count checked, then the alias)", f"{best_ours:.2f}",
         f"{peak_ours:.0f}"],
        ["floor: qdrant-client's scroll + one `X @ W + b` + one `upsert` per batch",
         f"{best_floor:.2f}", f"{peak_floor:.0f}"],
        ["ratio", f"**{ratio:.2f}x** (target <= 1.5x: {'met' if ratio <= 1.5 else 'not met'})",
         ""],
    ]  # fmt: skip


if __name__ == "__main__":
    main()

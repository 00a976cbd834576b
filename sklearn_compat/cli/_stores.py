"""``transform`` into a vector store (LanceDB, Chroma, Postgres with pgvector), the
retention gate, ``rollback``.

A migration into a store is written batch by batch into a staging table or collection
that only becomes the output once every row is in it and checked (see
:mod:`sklearn_compat.io._lance`, :mod:`sklearn_compat.io._chroma` and
:mod:`sklearn_compat.io._pgvector_write`); an interrupted one
is finished by the same command with ``--resume``.
"""

import hashlib
import shlex
import signal
import sys
import threading
from contextlib import contextmanager

from ..io._common import STORES, InputError, table_format
from ..io._read import open_table
from ._mapping import check_width, map_batch, model_input, model_width, progress, source_columns
from ._stages import mark

__all__ = [
    "check_retention",
    "holdout_split",
    "is_store_job",
    "measure_retention",
    "run_rollback",
    "run_store_transform",
]


def _log(message):
    print(message, file=sys.stderr)


def is_store_job(args):
    """Whether ``transform`` is a store migration: a store table into a store of the same
    kind (its other columns carried over), or ``--replace``, ``--resume``.  Any other
    output (a file table, or a store of another kind, written from a file or a store) is
    a plain transform: the ids and the mapped vectors."""
    if args.replace or args.resume:
        return True
    kind = _store_kind(args.output)
    return kind is not None and kind == _store_kind(args.input)


def _store_kind(path):
    try:
        kind = table_format(path) if path else None
    except InputError:  # not a table name at all: the plain transform says so
        return None
    return kind if kind in STORES else None


# ------------------------------------------------------------------------- the gate
def holdout_split(n, fraction, seed):
    """``(keep, aside)`` row indices: all rows and None without a holdout fraction."""
    import numpy as np

    if not fraction:
        return slice(None), None
    n_aside = int(round(n * fraction))
    if n_aside < 10 or n - n_aside < 2:
        raise InputError(
            f"--holdout {fraction:g} of {n} pairs keeps {n_aside} aside; the retention "
            "figure needs at least 10 pairs aside and 2 to fit on"
        )
    order = np.random.default_rng(0 if seed is None else seed).permutation(n)
    return np.sort(order[n_aside:]), np.sort(order[:n_aside])


def measure_retention(model, X, Y, labels, device):
    """The model's retention on pairs it was not fitted on (compatibility report)."""
    from ..metrics import compatibility_report

    k = (1, min(10, len(Y) - 1))
    report = compatibility_report(
        model, X, Y, labels=labels, k=k, n_bootstrap=200, random_state=0, device=device or "auto"
    )
    figure, low, high = (float(v) for v in report.retention["bridge"][report.primary])
    heldout = {
        "metric": report.primary,
        "retention": figure,
        "interval": [low, high],
        "n_pairs": int(len(Y)),
    }
    _log(
        f"held-out retention {figure:.3f} ({report.primary}, 95% CI {low:.3f}-{high:.3f}) "
        f"on {len(Y)} pairs kept aside"
    )
    return heldout


def heldout_retention(model):
    """The held-out retention figure ``fit --holdout`` stored in the model, or None."""
    fingerprint = getattr(model, "fingerprint_", None) or {}
    return fingerprint.get("heldout")


def check_retention(model, minimum, model_path):
    """Refuse (InputError) when the model's held-out retention is below ``minimum``."""
    if minimum is None:
        return
    heldout = heldout_retention(model)
    if heldout is None:
        raise InputError(
            "has no held-out retention to check --min-retention against; fit it with "
            "--holdout 0.1 (pairs kept aside and measured)",
            path=str(model_path),
        )
    figure = heldout["retention"]
    low, high = heldout["interval"]
    what = (
        f"held-out retention {figure:.3f} ({heldout['metric']}, 95% CI {low:.3f}-{high:.3f}, "
        f"{heldout['n_pairs']} pairs kept aside at fit)"
    )
    if figure < minimum:
        raise InputError(
            f"{what} is below --min-retention {minimum:g}; nothing migrated",
            path=str(model_path),
        )
    _log(f"{model_path}: {what} >= --min-retention {minimum:g}")


# ------------------------------------------------------------------------ transform
def _digest(path):
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _migration(args, reader, width):
    """The store writer for this job: a LanceDB table, a Chroma collection or a Postgres
    table."""
    kind = reader.format
    target = args.input if args.replace else args.output
    if table_format(target) != kind:
        raise InputError(
            f"--resume finishes a migration into a store of the input's kind ({kind}); a "
            f"{table_format(target)} output is written by a plain transform (ids and "
            "vectors): the same command without --resume",
            path=target,
        )
    job = {
        "input": reader.path,
        "model_sha256": _digest(args.model),
        "vector_column": reader.list_column or ",".join(reader.vector_columns),
    }
    options = {"replace": args.replace, "resume": args.resume, "force": args.force}
    if kind == "pgvector":
        from ..io._pgvector_write import PgvectorMigration

        column = args.output_column or reader.list_column
        return PgvectorMigration(reader, args.output, width, column, job, **options)
    if kind == "lance":
        from ..io._lance import LanceMigration

        column = args.output_column or reader.list_column or "vector"
        return LanceMigration(reader, args.output, width, column, job, **options)
    from ..io._chroma import ChromaMigration

    return ChromaMigration(reader, args.output, width, job, **options)


def run_store_transform(args, model, spec):
    """``transform`` whose input or output is a store (``model`` loaded and gated)."""
    import numpy as np

    if args.replace and args.output:
        raise InputError("--replace writes into --input; give no --output")
    if not args.replace and not args.output:
        raise InputError("give --output (a new table), or --replace to migrate in place")
    reader = open_table(args.input, spec, dtype=args.dtype)
    if reader.format not in STORES:
        raise InputError(
            "--resume and --replace apply to a migration from a LanceDB table or a Chroma "
            "collection; a file table is written into a store by the same command "
            "without them",
            path=reader.path,
        )
    _refuse_mapping_twice(args, reader)
    expected = model_width(model, args.model)
    check_width(reader, expected, args.model)
    columns = source_columns(model, reader)
    probe = model_input(np.zeros((1, expected)), *columns)
    width = int(model.transform(probe).shape[1])
    migration = _migration(args, reader, width)
    try:
        return _migrate(args, model, reader, columns, migration)
    finally:
        migration.release()


def _refuse_mapping_twice(args, reader):
    """Refuse (unless ``--force``) to map a table that already holds this model's output:
    the vectors would be mapped twice."""
    done = reader.migration() or {}
    if args.force or done.get("model_sha256") != _digest(args.model):
        return
    since = f" since {done['finished']}" if done.get("finished") else ""
    if args.replace and reader.format == "lance":
        undo = (
            f"undo the migration with: sklearn-compat rollback --table {shlex.quote(reader.path)}"
        )
    else:
        undo = f"map its input ({done.get('input', 'the original table')}) instead"
    raise InputError(
        f"holds the output of the model {args.model}{since} (a sklearn-compat migration); "
        f"mapping it again would apply the map twice: {undo}, or pass --force to map it "
        "again on purpose",
        path=reader.path,
    )


def _migrate(args, model, reader, columns, migration):
    if migration.done:
        _log(f"resuming: {migration.done} of {reader.n_rows} rows already migrated")
    elif args.resume:
        _log(f"{migration.staging}: nothing staged to resume; starting from the first row")
    try:
        with (
            progress(reader.n_rows, args.no_progress) as bar,
            _stop_between_batches() as stop,
        ):
            bar.update(migration.done)
            for batch, raw in migration.batches(args.rows_per_batch):
                Z = map_batch(model, batch, reader, columns)
                migration.write(raw, Z)
                bar.update(len(batch))
                del batch, raw, Z
                stop()
            # The last step (check, rename or commit) runs whole: a signal now is ignored.
            mark("finishing")
            _log(migration.finish(_log))
    except KeyboardInterrupt as exc:
        if migration.done:
            exc.outcome = (
                f"{migration.done} of {reader.n_rows} rows are staged in "
                f"{migration.staging}; the same command with --resume finishes the migration"
            )
        raise
    return 0


@contextmanager
def _stop_between_batches():
    """Hold Ctrl-C and SIGTERM until the current batch is committed; yields the check
    that raises them then (KeyboardInterrupt, or the CLI's Terminated).

    The stores' engines (Lance, Chroma) run Rust code that polls for signals: raised in
    there, the interrupt comes back as an engine error ("External error: Terminated")
    instead of the interrupt, and the run cannot say how to resume.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    from ._signals import Terminated

    received = []

    def note(signum, frame):
        received.append(signum)

    previous = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}

    def stop():
        if received:
            raise Terminated(received[0]) if received[0] == signal.SIGTERM else KeyboardInterrupt

    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# ------------------------------------------------------------------------- rollback
def run_rollback(args):
    fmt = table_format(args.table)
    if fmt == "pgvector":
        from ..io._pgvector_rollback import rollback_pgvector

        _log(rollback_pgvector(args.table, args.to_version))
        return 0
    if fmt != "lance":
        raise InputError(
            "rollback restores a LanceDB table's earlier version (DIR/NAME.lance) or the "
            "vectors a Postgres table's last --replace kept (URI::TABLE)",
            path=args.table,
        )
    from ..io._lance import rollback_lance

    _log(rollback_lance(args.table, args.to_version))
    return 0

"""``transform`` into a vector store (LanceDB, Chroma, Postgres with pgvector), the
retention gate, ``rollback``.

A migration into a store is written batch by batch into a staging table or collection
that only becomes the output once every row is in it and checked (see
:mod:`sklearn_compat.io._lance`, :mod:`sklearn_compat.io._chroma` and
:mod:`sklearn_compat.io._pgvector_write`); an interrupted one
is finished by the same command with ``--resume``.
"""

import signal
import sys
import threading
from contextlib import contextmanager

from ..io._common import STORES, InputError, table_format
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
def _job(args, source, reader, model_info):
    """The migration's ledger entry, without its time (added when it finishes): what a
    staging records and a resumed run must match."""
    from ..io._stores import ledger

    job = ledger.entry(
        "replace" if args.replace else "transform",
        column=args.output_column or reader.list_column,
        model=model_info,
        input=source.display(),
        # The first migrations' keys, which their rooms' resume checks still compare.
        model_sha256=model_info["sha256"],
        vector_column=reader.list_column or ",".join(reader.vector_columns),
    )
    del job["time"], job["rows"]
    return job


def _target(args, source):
    """The store the migration writes: the input's (``--replace``) or ``--output``'s,
    which must be a store of the input's kind."""
    from ..io._stores import open_store

    if args.replace:
        return source
    kind = _store_kind(args.output)
    if kind != source.kind:
        what = f"a {kind} table" if kind else "a file table"
        raise InputError(
            f"--resume finishes a migration into a store of the input's kind "
            f"({source.kind}); {what} is written by a plain transform (ids and vectors): "
            "the same command without --resume",
            path=open_store(args.output).display() if kind else args.output,
        )
    return open_store(args.output)


def run_store_transform(args, model, spec):
    """``transform`` whose input or output is a store (``model`` loaded and gated):
    every step through the store interface (:mod:`sklearn_compat.io._stores`)."""
    import numpy as np

    from ..io._stores import ledger, open_store

    if args.replace and args.output:
        raise InputError("--replace writes into --input; give no --output")
    if not args.replace and not args.output:
        raise InputError("give --output (a new table), or --replace to migrate in place")
    if _store_kind(args.input) is None:
        raise InputError(
            "--resume and --replace apply to a migration from a vector store table (a "
            "LanceDB table, a Chroma collection, a Postgres or Qdrant table); a file table "
            "is written into a store by the same command without them",
            path=args.input,
        )
    source = open_store(args.input)
    reader = source.reader(spec, _dtype(args.dtype))
    model_info = ledger.model_entry(model, args.model)
    _refuse_mapping_twice(args, source, reader, model_info)
    expected = model_width(model, args.model)
    check_width(reader, expected, args.model)
    columns = source_columns(model, reader)
    probe = model_input(np.zeros((1, expected)), *columns)
    width = int(model.transform(probe).shape[1])
    target = _target(args, source)
    migration = target.migration(
        reader, width, args.output_column, _job(args, source, reader, model_info),
        replace=args.replace, resume=args.resume, force=args.force,
    )  # fmt: skip
    try:
        return _migrate(args, model, reader, columns, migration)
    finally:
        migration.release()


def _dtype(name):
    import numpy as np

    return {"float32": np.float32, "float64": np.float64, None: None}[name]


def _refuse_mapping_twice(args, source, reader, model_info):
    """Refuse (unless ``--force``) to map a table whose ledger says it holds this
    model's output: the vectors would be mapped twice.  The ledger is in the table
    itself, so dropping the kept old vectors does not lift the guard."""
    from ..io._stores import ledger

    entries = source.ledger()
    done = ledger.last_mapping(entries)
    if done is not None and done.get("action") == "replace" and ledger.same_model(
        done.get("model"), model_info
    ):
        hint = f"undo the migration with: {source.undo_line()}"
    else:
        hint = "map the original table instead"
    ledger.refuse_mapping_twice(
        entries, model_info, source.display(), force=args.force, hint=hint
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
    """Undo the last ``--replace`` or ``cutover`` of a store table (its room reads the
    ledger: :func:`sklearn_compat.io._stores.ledger.rollback_target`)."""
    from ..io._stores import open_store

    store = open_store(args.table)
    try:
        _log(store.rollback(args.to_version))
    finally:
        store.close()
    return 0

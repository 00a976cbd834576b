"""The upgrade of a store from the command line: ``transform --add-column``,
``backfill [--refit]``, ``status``, ``cutover`` (``rollback``: :mod:`._stores`).

Thin: options parsed into calls of :mod:`sklearn_compat.io._stores.upgrade`, which does
every step through the store interface.
"""

import json
import sys

from ..io._common import ColumnSpec, InputError
from ._mapping import check_width, model_input, model_width, source_columns
from ._stores import _dtype, _stop_between_batches, _store_kind

__all__ = ["run_add_column", "run_backfill", "run_cutover", "run_status", "warn_if_mapped"]


def _log(message):
    print(message, file=sys.stderr)


def _mapper(model, columns, where):
    """``X -> model.transform(X)`` with the model's column order and names; a model error
    becomes one line naming ``where``."""
    from .._core.backend import batch_invariant_rows

    def mapper(X):
        try:
            with batch_invariant_rows():
                return model.transform(model_input(X, *columns))
        except ValueError as exc:
            raise InputError(f"cannot map the rows: {exc}", path=where) from None

    return mapper


def _open(location, what="--table"):
    from ..io._stores import open_store

    if _store_kind(location) is None:
        raise InputError(
            f"{what} names a vector store table (LanceDB DIR/NAME.lance, Chroma DIR::NAME, "
            "Postgres URI::TABLE, Qdrant qdrant:DIR::NAME)",
            path=location,
        )
    return open_store(location)


def warn_if_mapped(location, model, model_path):
    """Warn when the store ``location`` (``evaluate``'s source) holds the output of
    ``model`` by its ledger: its vectors are in the target space already, and the
    figures would measure the map applied twice."""
    from ..io._stores import ledger, open_store

    if _store_kind(location) is None:
        return
    store = open_store(location)
    try:
        done = ledger.last_mapping(store.ledger())
    finally:
        store.close()
    if done is None or not ledger.same_model(done.get("model"), ledger.model_entry(model,
                                                                                   model_path)):
        return
    _log(
        f"sklearn-compat: warning: {store.display()} holds the output of the model "
        f"{model_path} since {done.get('time') or 'an earlier run'} (ledger: {done['action']}); "
        "its vectors are in the target space already: evaluate the model on the table it "
        "was mapped from"
    )


def _reading(spec, column):
    """``spec`` reading the vector column ``column`` (the column the mapped vectors are
    computed from, once the table has another one beside it)."""
    from dataclasses import replace

    if column is None:
        return spec
    return replace(spec, vector_column=column, prefix=None, pattern=None)


def _source_spec(store, spec, column, width):
    """``spec`` reading the vector column ``--add-column`` maps from, when the command
    line names none and the table has several vector columns (once a column was added:
    a rerun, a resume, a second ``--add-column``).  What decides, in turn: the column
    ``column`` was added beside, when it exists; else the vector columns that are not
    added columns; among several, those the ledger's migrations and added columns name;
    among several still, those of the model's input ``width``.  More than one left: one
    line naming every vector column and ``--vector-column``.  Generic: the store
    interface's ``vector_columns``, ``added_columns`` and ``ledger``."""
    from ..io._stores import ledger

    if spec.vector_column or spec.prefix or spec.pattern or store.one_vector_per_record:
        return spec
    columns = store.vector_columns()
    if len(columns) < 2:
        return spec
    added = store.added_columns()
    if column in added and added[column] in columns:
        return _reading(spec, added[column])
    candidates = [c for c in columns if c not in added]
    if len(candidates) > 1:
        named = {e.get("like") or e.get("column") for e in ledger.in_effect(store.ledger())
                 if e.get("action") in ("add_column", "transform", "replace")}  # fmt: skip
        candidates = [c for c in candidates if c in named] or candidates
    if len(candidates) > 1:
        candidates = [c for c in candidates if columns[c] in (None, width)] or candidates
    if len(candidates) == 1:
        return _reading(spec, candidates[0])
    listed = ", ".join(f"{c!r} ({columns[c]} values)" for c in columns)
    raise InputError(
        f"has several vector columns ({listed}); name the one to map with --vector-column",
        path=store.display(),
    )


def run_add_column(args, model, spec):
    """``transform --input STORE --add-column NAME``: the mapped vectors beside the old."""
    import numpy as np

    from ..io._stores import ledger, upgrade

    if args.output or args.replace:
        raise InputError("--add-column writes into --input; give no --output or --replace")
    store = _open(args.input, "--input")
    store.id_column = args.id_column
    try:
        expected = model_width(model, args.model)
        spec = _source_spec(store, spec, args.add_column, expected)
        reader = store.reader(spec, _dtype(args.dtype))
        check_width(reader, expected, args.model)
        columns = source_columns(model, reader)
        width = int(model.transform(model_input(np.zeros((1, expected)), *columns)).shape[1])
        with _stop_between_batches() as stop:
            upgrade.add_column(
                store, lambda column: store.reader(_reading(spec, column), _dtype(args.dtype)),
                args.add_column, width,
                _mapper(model, columns, store.display()),
                ledger.model_entry(model, args.model),
                batch_size=args.rows_per_batch, force=args.force, stop=stop, log=_log,
                checked=reader,
            )  # fmt: skip
    except KeyboardInterrupt as exc:
        exc.outcome = (
            "the rows written so far are kept; the same command finishes the column"
        )
        raise
    finally:
        store.close()
    return 0


def _measure(device):
    """What the refit's comparison scores a map by: the retrieval of rows it mapped, as
    new-model queries meet them.  On native pairs kept aside (``X`` old rows, ``Y`` the
    new model's own vectors of the same items), each pair's new vector is a query
    against the pairs' old rows mapped by the map, among the mapped rows still mapped
    (``others``, their old vectors, or None); a hit when the nearest one (cosine) is its
    own item's.  ``top-1`` is the share of hits (``interval``: Wilson's 95% interval);
    ``hits`` are per pair, for the paired comparison of two maps on the same pairs."""
    import numpy as np

    from .._core.ranking import target_ranks

    def measure(model, X, Y, others=None):
        rows = X if others is None or not len(others) else np.concatenate([X, others])
        mapped = np.asarray(_mapper(model, (None, None), "the pairs kept aside")(rows))
        ranks = target_ranks(Y, mapped, np.arange(len(Y)), device=device or "auto")
        hits = (ranks < 1).astype(np.float64)
        n, share = len(hits), float(hits.mean())
        # Wilson's 95% interval of a share (what transform --min-retention prints).
        z = 1.959964
        mid = (share + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return {"metric": "own-item top-1 of mapped rows", "retention": share,
                "interval": [float(max(mid - half, 0.0)), float(min(mid + half, 1.0))],
                "hits": hits, "n_pairs": int(n)}  # fmt: skip

    return measure


def run_backfill(args):
    from ..io._read import open_table
    from ..io._stores import upgrade

    store = _open(args.table)
    spec = ColumnSpec(
        id_column=args.id_column, vector_column=args.vector_column, prefix=args.prefix
    )
    try:
        vectors = open_table(args.vectors, spec)
        with _stop_between_batches() as stop:
            upgrade.backfill(
                store, args.column, vectors, batch_size=args.rows_per_batch, stop=stop,
                log=_log,
            )  # fmt: skip
            if args.refit:
                _refit(args, store, stop)
    except KeyboardInterrupt as exc:
        exc.outcome = "the rows written so far are kept; the same command finishes the backfill"
        raise
    finally:
        store.close()
    return 0


def _refit(args, store, stop):
    from ..io._model_files import load_model
    from ..io._stores import upgrade
    from ..io._stores.upgrade import _filled_by

    current = _filled_by(store.ledger(), args.column) or {}
    path = (current.get("model") or {}).get("path")
    if not path:
        raise InputError(
            f"the ledger names no model file for column {args.column!r}; --refit needs "
            "the map 'transform --add-column' used",
            path=store.display(),
        )
    model = load_model(path)
    if args.device is not None and "device" in model.get_params():
        model.set_params(device=args.device)

    def mapper_for(m):
        return _mapper(m, (None, None), store.display())

    upgrade.refit(
        store, args.column, model, measure=_measure(args.device), mapper_for=mapper_for,
        batch_size=args.rows_per_batch, stop=stop, log=_log,
    )  # fmt: skip


def run_status(args):
    from ..io._stores import upgrade

    store = _open(args.table)
    try:
        if not store.exists():
            raise InputError("no such table or collection", path=store.display())
        report = upgrade.status(store)
    finally:
        store.close()
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print("\n".join(upgrade.status_lines(report)))
    return 0


def run_cutover(args):
    from ..io._stores import upgrade

    store = _open(args.table)
    try:
        upgrade.cutover(store, args.column, min_native=args.min_native, log=_log)
    finally:
        store.close()
    return 0

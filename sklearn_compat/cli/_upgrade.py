"""The upgrade of a store from the command line: ``transform --add-column``,
``backfill [--refit]``, ``status``, ``cutover`` (``rollback``: :mod:`._stores`).

Thin: options parsed into calls of :mod:`sklearn_compat.io._stores.upgrade`, which does
every step through the store interface.
"""

import json
import sys

from ..io._common import ColumnSpec, InputError
from ._mapping import check_width, model_input, model_width, source_columns
from ._stores import _dtype, _stop_between_batches, _store_kind, measure_retention

__all__ = ["run_add_column", "run_backfill", "run_cutover", "run_status"]


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


def run_add_column(args, model, spec):
    """``transform --input STORE --add-column NAME``: the mapped vectors beside the old."""
    import numpy as np

    from ..io._stores import ledger, upgrade

    if args.output or args.replace:
        raise InputError("--add-column writes into --input; give no --output or --replace")
    store = _open(args.input, "--input")
    store.id_column = args.id_column
    try:
        reader = store.reader(spec, _dtype(args.dtype))
        expected = model_width(model, args.model)
        check_width(reader, expected, args.model)
        columns = source_columns(model, reader)
        width = int(model.transform(model_input(np.zeros((1, expected)), *columns)).shape[1])
        with _stop_between_batches() as stop:
            upgrade.add_column(
                store, reader, args.add_column, width,
                _mapper(model, columns, store.display()),
                ledger.model_entry(model, args.model),
                batch_size=args.rows_per_batch, force=args.force, stop=stop, log=_log,
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
    def measure(model, X, Y):
        return measure_retention(model, X, Y, None, device)

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

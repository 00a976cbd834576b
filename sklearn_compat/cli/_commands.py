"""The subcommands of ``sklearn-compat``: glue between :mod:`sklearn_compat.io` and the API.

Each ``run_<command>(args)`` checks its outputs first (so a run that would end by
refusing to overwrite a file fails before any work), reads its inputs, calls the public
estimators and metrics, and writes its outputs atomically.  No maths happens here.
"""

import inspect
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..exceptions import UnreliableAlignmentWarning
from ..io._common import ColumnSpec, InputError, table_format_or_none
from ..io._join import join_on_ids
from ..io._model_files import load_model, save_model
from ..io._read import open_table, read_table
from ..io._write import AtomicOutput, OutputLayout, TableWriter
from ._files import grid_plot_path, report_figure_path
from ._mapping import check_width as _check_width
from ._mapping import columns_beside_the_model as _columns_beside_the_model
from ._mapping import map_batch as _map_batch
from ._mapping import model_input as _model_input
from ._mapping import model_width as _model_width
from ._mapping import progress as _progress
from ._mapping import source_columns as _source_columns
from ._registry import (
    LABEL_METRICS,
    METHODS,
    METRICS,
    UNPAIRED_METHODS,
    NotAvailable,
    build_method,
    load,
)
from ._stores import (
    check_retention,
    holdout_split,
    is_store_job,
    measure_retention,
    run_rollback,
    run_store_transform,
)
from ._upgrade import run_add_column, run_backfill, run_cutover, run_status, warn_if_mapped

__all__ = [
    "run_fit",
    "run_transform",
    "run_evaluate",
    "run_grid",
    "run_encode",
    "run_search",
    "run_export",
    "run_inspect",
    "run_rollback",
    "run_backfill",
    "run_status",
    "run_cutover",
]

# Key of the joined ids in _read_pair's ``extra`` (a tuple: never a column name).
JOINED_IDS = ("joined ids",)


def _log(message):
    print(message, file=sys.stderr)


def _check_output(path, force, inputs=()):
    """Fail now if ``path`` could not be written at the end; leaves nothing behind."""
    if table_format_or_none(path) == "pgvector":
        return  # a database table, checked by its writer when opened
    AtomicOutput(path, force=force, inputs=inputs).abort()


# ----------------------------------------------------------------------- table specs
def _source_spec(args, exclude=()):
    return ColumnSpec(
        args.id_column, args.prefix, args.pattern, args.vector_column, tuple(exclude)
    )


def _target_spec(args, exclude=()):
    own = (args.target_prefix, args.target_pattern, args.target_vector_column)
    prefix, pattern, vector = own if any(own) else (args.prefix, args.pattern, args.vector_column)
    return ColumnSpec(
        args.target_id_column or args.id_column, prefix, pattern, vector, tuple(exclude)
    )


def _read_pair(args, extra_columns=(), source_exclude=()):
    """Read and join source and target.

    Returns ``(X, Y, source_reader, target_reader, report, extra)``.

    ``extra_columns`` (e.g. labels) are read from the source when it has them, else from
    the target, and returned in ``extra`` aligned with the joined rows.  ``source_exclude``:
    further source columns that are not the embedding.
    """
    src_extra, tgt_extra = _split_extra(args, extra_columns)
    exclude = tuple(extra_columns)
    source = read_table(
        args.source,
        _source_spec(args, exclude + tuple(source_exclude)),
        dtype=args.dtype,
        extra_columns=src_extra,
    )
    target = read_table(
        args.target, _target_spec(args, exclude), dtype=args.dtype, extra_columns=tgt_extra
    )
    for table, columns in ((source, src_extra), (target, tgt_extra)):
        for column in columns:
            _check_present(table, column)
    rows_s, rows_t, report = join_on_ids(source, target, duplicates=args.duplicates)
    X = source[1].X[rows_s]
    Y = target[1].X[rows_t]
    extra = {c: source[1].extra[c][rows_s] for c in src_extra}
    extra.update({c: target[1].extra[c][rows_t] for c in tgt_extra})
    # Tables paired by position have no ids: their row numbers stand in (as for a plain
    # .npy array), so the saved model still records which rows it was fitted on.
    extra[JOINED_IDS] = _ids(source[1])[rows_s]
    return X, Y, source[0], target[0], report, extra


def _check_present(table, column):
    """An extra column (class labels) must have a value on every row: name the first gap."""
    reader, batch = table
    missing = pd.isna(batch.extra[column])
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise InputError(f"{reader._locate(batch, i, column)}: missing value", path=reader.path)


def _split_extra(args, extra_columns):
    if not extra_columns:
        return (), ()
    src_cols = open_table(args.source, _source_spec(args, extra_columns), dtype=args.dtype)
    names = set(src_cols.columns)
    src = tuple(c for c in extra_columns if c in names)
    tgt = tuple(c for c in extra_columns if c not in names)
    return src, tgt


def _named_frame(A, reader):
    """A table's embedding as a DataFrame when its columns have names, so the model keeps
    them (Y's name the output columns, X's are checked when the model is applied)."""
    if reader.form == "columns":
        return pd.DataFrame(A, columns=reader.vector_columns, copy=False)
    return A


# ------------------------------------------------------------------------------- fit
def run_fit(args):
    _check_output(args.model, args.force, inputs=(args.source, args.target))
    estimator = build_method(args.method, args)
    if args.method in UNPAIRED_METHODS:
        return _fit_unpaired(estimator, args)
    if args.seed_pairs:
        raise InputError(f"--seed-pairs does not apply to --method {args.method}")
    fit_params = {}
    if args.labels_column and "labels" not in inspect.signature(estimator.fit).parameters:
        raise InputError(f"--labels-column does not apply to --method {args.method}")
    labels = (args.labels_column,) if args.labels_column else ()
    X, Y, src, tgt, report, extra = _read_pair(args, labels)
    _log(report.summary())
    keep, aside = holdout_split(X.shape[0], args.holdout, args.seed)
    if args.labels_column:
        # Class labels switch lambda-orth's contrastive term to its supervised form.
        fit_params["labels"] = extra[args.labels_column][keep]
    estimator.fit(_named_frame(X[keep], src), _named_frame(Y[keep], tgt), **fit_params)
    heldout = None
    if aside is not None:
        labels_aside = extra[args.labels_column][aside] if args.labels_column else None
        heldout = measure_retention(
            estimator, _named_frame(X[aside], src), Y[aside], labels_aside, args.device
        )
    fmt = save_model(
        estimator,
        args.model,
        format=args.model_format,
        force=args.force,
        training_ids=extra[JOINED_IDS][keep],
        heldout=heldout,
    )
    _log(
        f"fitted {type(estimator).__name__} on {len(X[keep])} pairs "
        f"({X.shape[1]} -> {Y.shape[1]} dimensions); saved {args.model} ({fmt})"
    )
    if args.json:
        print(
            json.dumps(
                {
                    "method": args.method,
                    "model": str(args.model),
                    "format": fmt,
                    "n_pairs": int(X.shape[0]),
                    "source_width": int(X.shape[1]),
                    "target_width": int(Y.shape[1]),
                    "join": report.as_dict(),
                }
            )
        )
    return 0


def _fit_unpaired(estimator, args):
    """``fit`` of a method that learns from unpaired rows: no join, every row of both."""
    for flag, value in (("--holdout", args.holdout), ("--labels-column", args.labels_column)):
        if value:
            raise InputError(f"{flag} does not apply to --method {args.method}")
    src, source = read_table(args.source, _source_spec(args), dtype=args.dtype)
    tgt, target = read_table(args.target, _target_spec(args), dtype=args.dtype)
    pairs = None
    if args.seed_pairs:
        pairs = _read_seed_pairs(args.seed_pairs, source, target, src, tgt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(_named_frame(source.X, src), _named_frame(target.X, tgt), pairs=pairs)
    for record in caught:
        if issubclass(record.category, UnreliableAlignmentWarning):
            # The estimator's advice names its Python arguments; say it in flags.
            reason = getattr(record.message, "reason", str(record.message))
            _log(
                f"sklearn-compat: warning: the unpaired alignment looks unreliable: {reason}. "
                "Pass known matches with --seed-pairs FILE (a few hundred help most), more "
                "rows of the same items in both tables, or fit a paired --method on tables "
                "joined by --id-column."
            )
        else:
            warnings.showwarning(record.message, record.category, record.filename, record.lineno)
    fmt = save_model(
        estimator,
        args.model,
        format=args.model_format,
        force=args.force,
        n_training_rows=int(source.X.shape[0]),
    )
    n_seeds = 0 if pairs is None else len(pairs)
    _log(
        f"fitted {type(estimator).__name__} on {len(source.X)} source and {len(target.X)} "
        f"target rows, unpaired, with {n_seeds} seed pairs ({source.X.shape[1]} -> "
        f"{target.X.shape[1]} dimensions); confidence {estimator.confidence_:.3f}; "
        f"saved {args.model} ({fmt})"
    )
    if args.json:
        print(
            json.dumps(
                {
                    "method": args.method,
                    "model": str(args.model),
                    "format": fmt,
                    "n_source_rows": int(source.X.shape[0]),
                    "n_target_rows": int(target.X.shape[0]),
                    "n_seed_pairs": n_seeds,
                    "n_matches": int(len(estimator.matches_)),
                    "confidence": float(estimator.confidence_),
                    "source_width": int(source.X.shape[1]),
                    "target_width": int(target.X.shape[1]),
                }
            )
        )
    return 0


def _read_seed_pairs(path, source, target, src, tgt):
    """Rows ``(source row, target row)`` of the known matches in ``path``.

    The file's first two columns hold a source id and a target id; without id columns
    (a plain array, no ``--id-column``) they are row numbers from 0.
    """
    name = str(path).lower()
    try:
        if name.endswith((".parquet", ".pq")):
            table = pd.read_parquet(path)
        else:
            table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except Exception as exc:  # noqa: BLE001 - any parse failure becomes one line
        raise InputError(f"cannot read the seed pairs: {exc}", path=path) from None
    if table.shape[1] < 2:
        raise InputError(
            f"needs two columns (a source id, then a target id), found {table.shape[1]}",
            path=path,
        )
    rows = []
    for column, (batch, reader, side) in enumerate(
        ((source, src, "source"), (target, tgt, "target"))
    ):
        values = table.iloc[:, column].astype(str).str.strip()
        if reader.id_column is None:
            ids = pd.Series([str(i) for i in range(len(batch.X))])
        else:
            ids = pd.Series(batch.ids).astype(str)
        # An id on several rows names its first.
        first = pd.Series(np.arange(len(ids)), index=ids)[~ids.duplicated().to_numpy()]
        found = values.map(first).fillna(-1).to_numpy(dtype=np.int64)
        missing = np.flatnonzero(found < 0)
        if len(missing):
            i = int(missing[0])
            what = "row number" if reader.id_column is None else "id"
            raise InputError(
                f"line {i + 2}, column {table.columns[column]!r}: {side} {what} "
                f"{values.iloc[i]!r} is not in {reader.path}",
                path=path,
            )
        rows.append(found)
    return np.stack(rows, axis=1).astype(np.int64)


# ------------------------------------------------------------------------- transform
def _set_device(model, device):
    if device is not None and "device" in model.get_params():
        model.set_params(device=device)


def _output_names(model, width):
    """The model's output column names when it learnt them from the target's columns."""
    try:
        names = [str(n) for n in model.get_feature_names_out()]
    except Exception:  # noqa: BLE001 - any model without names gets generic ones
        return None
    generic = type(model).__name__.lower()
    if len(names) != width or len(set(names)) != width or names[0].startswith(generic):
        return None
    return names


def _output_layout(reader, model, args, width):
    to_npy = args.output.lower().endswith(".npy")
    form = reader.form if args.output_form == "same" else args.output_form
    if form == "array" and not to_npy:
        form = "columns"
    names = _output_names(model, width) if form == "columns" else None
    id_column = reader.id_column
    id_dtype = reader.id_dtype() if id_column is not None and to_npy else None
    list_column = args.output_column or reader.list_column or "embedding"
    return OutputLayout(form, width, id_column, names, list_column, id_dtype)


def run_transform(args):
    if args.add_column:
        model = load_model(args.model, trust=args.trust)
        _set_device(model, args.device)
        check_retention(model, args.min_retention, args.model)
        return run_add_column(args, model, _source_spec(args))
    store = is_store_job(args)
    if not store:
        if not args.output:
            raise InputError("give --output (where to write the mapped table)")
        _check_output(args.output, args.force, inputs=(args.input, args.model))
    model = load_model(args.model, trust=args.trust)
    _set_device(model, args.device)
    check_retention(model, args.min_retention, args.model)
    if store:
        return run_store_transform(args, model, _source_spec(args))
    reader = open_table(args.input, _source_spec(args), dtype=args.dtype)
    beside = _columns_beside_the_model(model, reader)
    if beside:
        reader = open_table(args.input, _source_spec(args, beside), dtype=args.dtype)
    _warn_dropped_columns(reader)
    expected = _model_width(model, args.model)
    _check_width(reader, expected, args.model)
    columns = _source_columns(model, reader)
    layout = None
    writer = None
    rows = 0
    try:
        with _progress(reader.n_rows, args.no_progress) as bar:
            for batch in reader.iter_batches(args.rows_per_batch):
                if writer is None:
                    _check_width(reader, expected, args.model)
                Z = _map_batch(model, batch, reader, columns)
                if writer is None:
                    layout = _output_layout(reader, model, args, Z.shape[1])
                    writer = TableWriter(
                        args.output, layout, force=args.force, inputs=(args.input, args.model)
                    )
                writer.write(batch.ids if layout.id_column else None, Z)
                rows += len(batch)
                bar.update(len(batch))
                # Let this batch go before the next is read: otherwise the loop holds
                # two batches and two mapped batches at once.
                del batch, Z
        if writer is None:
            # An empty input still gives a (empty) output with the right columns.
            width = int(model.transform(_model_input(np.zeros((1, expected)), *columns)).shape[1])
            layout = _output_layout(reader, model, args, width)
            writer = TableWriter(
                args.output, layout, force=args.force, inputs=(args.input, args.model)
            )
        writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    _log(f"wrote {rows} rows ({expected} -> {layout.width} dimensions) to {args.output}")
    return 0


def _warn_dropped_columns(reader):
    """Say so when a table's other columns (probably its ids) will not be in the output."""
    if reader.id_column is not None or reader.form == "array":
        return
    used = set(reader.vector_columns or [reader.list_column])
    others = [c for c in reader.columns if c not in used]
    if others:
        shown = ", ".join(map(repr, others[:3])) + (", ..." if len(others) > 3 else "")
        _log(
            f"sklearn-compat: warning: {reader.path}: no --id-column given, so the output "
            f"keeps the row order but not the columns {shown}"
        )


# -------------------------------------------------------------------------- evaluate
def run_evaluate(args):
    if args.report:
        _check_output(args.report, args.force, inputs=(args.source, args.target))
        _check_output(report_figure_path(args.report), args.force)
    model = load_model(args.model, trust=args.trust)
    _set_device(model, args.device)
    labels_col = (args.labels_column,) if args.labels_column else ()
    warn_if_mapped(args.source, model, args.model)
    peek = open_table(args.source, _source_spec(args, labels_col), dtype=args.dtype)
    beside = _columns_beside_the_model(model, peek)
    X, Y, src, tgt, report, extra = _read_pair(args, labels_col, source_exclude=beside)
    _log(report.summary())
    expected = _model_width(model, args.model)
    if X.shape[1] != expected:
        _check_width(src, expected, args.model)
    Z = model.transform(_model_input(X, *_source_columns(model, src)))
    if Z.shape[1] != Y.shape[1]:
        raise InputError(
            f"the target embedding has {Y.shape[1]} values per row, but the model maps "
            f"into {Z.shape[1]} dimensions",
            path=tgt.path,
        )
    evaluated_on = _evaluated_on(model, src, extra[JOINED_IDS])
    if evaluated_on == "training":
        _log(
            f"evaluated on the {X.shape[0]} training pairs of {args.model} (the ids it was "
            "fitted on): these are training figures, not held-out ones"
        )
    device = args.device or "auto"
    labels = extra.get(args.labels_column) if args.labels_column else None
    metrics = dict(METRICS)
    if labels is not None:
        metrics.update(LABEL_METRICS)
    results, missing = {}, {}
    for name, fn in metrics.items():
        try:
            results[name] = float(fn(Z, Y, labels, device))
        except NotAvailable as exc:
            missing[name] = str(exc)
    for name, why in missing.items():
        _log(f"{name}: {why}")
    if args.json:
        print(
            json.dumps(
                {
                    "model": str(args.model),
                    "n_pairs": int(X.shape[0]),
                    "metrics": results,
                    "not_available": sorted(missing),
                    "evaluated_on": evaluated_on,
                    "join": report.as_dict(),
                },
                indent=2,
            )
        )
    else:
        width = max(map(len, results), default=6)
        print(f"{'metric':<{width}}  value")
        for name, value in results.items():
            print(f"{name:<{width}}  {value:.4f}")
        print(f"{'pairs':<{width}}  {X.shape[0]}")
    if args.report:
        X_model = _model_input(X, *_source_columns(model, src))
        _write_report(model, X_model, Y, labels, args, evaluated_on)
    return 0


def _evaluated_on(model, reader, ids):
    """``"training"`` when the pairs are exactly those the model was fitted on, by the ids
    its fingerprint records; else ``"unknown"`` (a digest cannot tell a partial overlap).

    Row numbers are not compared: two tables paired by position share them whatever
    their rows hold.
    """
    fingerprint = getattr(model, "fingerprint_", None) or {}
    digest = fingerprint.get("training_ids_sha256")
    if digest is None or reader.id_column is None:
        return "unknown"
    from ..io._fingerprint import ids_digest

    return "training" if ids_digest(ids) == digest else "unknown"


def _write_report(model, X, Y, labels, args, evaluated_on):
    """The bridge-or-reindex report as Markdown, its figure beside it (.png)."""
    from ..metrics import compatibility_report

    report = compatibility_report(
        model, X, Y, labels=labels, device=args.device or "auto", evaluated_on=evaluated_on
    )
    figure = report_figure_path(args.report)
    with AtomicOutput(figure, force=args.force) as out:
        report.plot(out.tmp)
        with AtomicOutput(args.report, force=args.force) as md:
            md.tmp.write_text(report.to_markdown(figure=figure.name), encoding="utf-8")
    _log(f"{report.decision}; wrote {args.report} and {figure}")


# ---------------------------------------------------------------------- export, inspect
def run_export(args):
    from ..io import export_map

    if args.format == "sentence-transformers":
        return _export_sentence_transformers(args)
    if args.encoder is not None or args.normalize_input:
        raise InputError(
            "--encoder and --normalize-input apply to --format sentence-transformers only"
        )
    _check_output(args.output, args.force, inputs=(args.model,))
    model = load_model(args.model, trust=args.trust)
    path = export_map(model, args.output, format=args.format, force=args.force)
    width_in, width_out = _model_width(model, args.model), getattr(model, "n_targets_", "?")
    _log(f"exported {type(model).__name__} ({width_in} -> {width_out}) as {args.format}: {path}")
    return 0


def _export_sentence_transformers(args):
    from ..io import linear_form
    from ..io._export import provenance
    from ..io._st_export import read_modules, write_sentence_transformers

    if args.encoder is None:
        raise InputError(
            "--format sentence-transformers needs --encoder DIR, the sentence-transformers "
            "folder of the model the map was fitted on"
        )
    read_modules(args.encoder)  # a wrong folder fails before the model is loaded
    model = load_model(args.model, trust=args.trust)
    W, b = linear_form(model)
    path, info = write_sentence_transformers(
        W, b, args.encoder, args.output, force=args.force,
        normalize_input=args.normalize_input, provenance=provenance(model),
    )  # fmt: skip
    where = "after the encoder's Normalize" if info["encoder_normalizes"] else "after its pooling"
    if args.normalize_input:
        where = "after a Normalize module added before it"
    _log(
        f"exported {type(model).__name__} into {args.encoder} as sentence-transformers: {path} "
        f"encodes {info['out_features']}-d vectors in the old space (a {info['in_features']} "
        f"-> {info['out_features']} Dense module {where})"
    )
    return 0


def run_inspect(args):
    from ..io._fingerprint import format_fingerprint

    model = load_model(args.model, trust=args.trust)
    fingerprint = getattr(model, "fingerprint_", None)
    if fingerprint is None:
        _log(f"{args.model}: no fingerprint (saved before fingerprints); showing the model")
        fingerprint = {
            "estimator": f"{type(model).__module__}.{type(model).__qualname__}",
            "n_features_in": getattr(model, "n_features_in_", None),
            "n_features_out": getattr(model, "n_targets_", None),
        }
    if args.json:
        print(json.dumps(fingerprint, indent=2))
    else:
        print("\n".join(format_fingerprint(fingerprint)))
    return 0


# ------------------------------------------------------------------------------ grid
def _results_suffix(path):
    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".parquet", ".pq", ".json"):
        raise InputError("results must be .csv, .parquet or .json", path=str(path))
    return suffix


def _write_results(frame, path, force):
    suffix = _results_suffix(path)
    with AtomicOutput(path, force=force) as out:
        if suffix == ".csv":
            frame.to_csv(out.tmp, index=False)
        elif suffix == ".json":
            frame.to_json(out.tmp, orient="records", indent=2)
        else:
            frame.to_parquet(out.tmp, index=False)


def run_grid(args):
    from sklearn.model_selection import KFold, cross_validate

    plot = grid_plot_path(args)
    inputs = (args.source, args.target)
    # Everything that would stop the run at the end is checked before the first fit.
    _results_suffix(args.output)
    repeated = sorted({lam for lam in args.lam if args.lam.count(lam) > 1})
    if repeated:
        raise InputError(f"--lam has repeated values: {' '.join(f'{v:g}' for v in repeated)}")
    _check_output(args.output, args.force, inputs)
    if plot is not None:
        _check_output(plot, args.force, inputs)
    METHODS["lambda-orth"].estimator_class("lambda-orth")  # not available: fail now
    X, Y, src, tgt, report, _ = _read_pair(args)
    _log(report.summary())
    if X.shape[0] < args.cv:
        raise InputError(f"{X.shape[0]} matched pairs cannot be split into {args.cv} folds")
    Yf = _named_frame(Y, tgt)
    candidates = []
    for name in ("procrustes", "affine"):
        try:
            candidates.append((name, np.nan, build_method(name, _Only(device=args.device))))
        except NotAvailable as exc:
            _log(f"reference {name}: {exc}")
    for lam in args.lam:
        candidates.append(("lambda-orth", lam, build_method("lambda-orth", args, lam=lam)))
    folds = KFold(n_splits=args.cv, shuffle=True, random_state=args.seed or 0)
    rows = []
    for name, lam, estimator in candidates:
        cv = cross_validate(estimator, X, Yf, cv=folds, error_score="raise")
        scores = cv["test_score"]
        rows.append(
            {
                "method": name,
                "lam": lam,
                "mean_top1": float(scores.mean()),
                "std_top1": float(scores.std()),
                "fit_seconds": float(cv["fit_time"].mean()),
                **{f"fold_{i}": float(s) for i, s in enumerate(scores)},
            }
        )
        shown = "" if np.isnan(lam) else f" lam={lam:g}"
        _log(f"{name}{shown}: top-1 {scores.mean():.4f} +- {scores.std():.4f}")
    frame = pd.DataFrame(rows)
    if plot is not None:
        from ._plot import plot_grid

        with AtomicOutput(plot, force=args.force) as out:
            plot_grid(frame, out.tmp, n_pairs=X.shape[0], cv=args.cv)
    _write_results(frame, args.output, args.force)
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0


class _Only:
    """Parsed-options stand-in that sets only the given options."""

    def __init__(self, **values):
        self.__dict__.update(values)


# ---------------------------------------------------------------------------- encode
def run_encode(args):
    if args.parallel_output and not args.parallel:
        raise InputError("--parallel-output needs --parallel")
    if args.parallel and not args.parallel_output:
        raise InputError("--parallel needs --parallel-output (where to write its encoding)")
    if args.anchors == "stratified" and not args.labels_column:
        raise InputError("--anchors stratified needs --labels-column (the class labels)")
    if args.labels_column and args.anchors != "stratified":
        raise InputError("--labels-column only applies to --anchors stratified")
    inputs = tuple(p for p in (args.input, args.parallel) if p)
    _check_output(args.output, args.force, inputs)
    if args.parallel_output:
        _check_output(args.parallel_output, args.force, inputs)
    if args.model:
        _check_output(args.model, args.force, inputs)
    encoder_cls = load("relative", "RelativeAnchorEncoder", "the encode command")
    params = {
        "n_anchors": args.n_anchors,
        "anchors": args.anchors,
        "similarity": args.similarity,
        "random_state": args.seed,
    }
    if args.normalize:
        params["normalize"] = None if args.normalize == "none" else args.normalize
    if args.device:
        params["device"] = args.device
    encoder = encoder_cls(**params)
    extra = (args.labels_column,) if args.labels_column else ()
    source = read_table(
        args.input, _source_spec(args, exclude=extra), dtype=args.dtype, extra_columns=extra
    )
    for column in extra:
        _check_present(source, column)
    reader, table = source
    _warn_dropped_columns(reader)
    rows_s = slice(None)
    if args.parallel:
        own = (args.parallel_prefix, args.parallel_pattern, args.parallel_vector_column)
        other_spec = ColumnSpec(
            args.parallel_id_column or args.id_column,
            *(own if any(own) else (args.prefix, args.pattern, args.vector_column)),
        )
        other = read_table(args.parallel, other_spec, dtype=args.dtype)
        rows_s, rows_p, report = join_on_ids(source, other, duplicates=args.duplicates)
        _log(report.summary())
    fit_params = {}
    if args.labels_column:
        fit_params["y"] = table.extra[args.labels_column][rows_s]
    if args.parallel and args.anchors == "param":
        # PARAM learns the mixtures across the spaces: the parallel rows take part.
        fit_params["parallel"] = [other[1].X[rows_p]]
    # Anchors are drawn from the items both exports hold, so the parallel space can be
    # rebased on exactly the same items.  Named columns are kept, so a saved encoder
    # matches an export's columns by name when it is applied with `transform`.
    encoder.fit(_named_frame(table.X[rows_s], reader), **fit_params)
    if args.parallel:
        parallel = encoder.rebase(_named_frame(other[1].X[rows_p], other[0]))
    _write_encoding(encoder, reader, table, args.output, args)
    if args.parallel:
        _write_encoding(parallel, other[0], other[1], args.parallel_output, args)
    if args.model:
        save_model(encoder, args.model, force=args.force)
    _log(
        f"encoded {len(table)} rows against {args.n_anchors} anchors into {args.output}"
        + (f" and {len(other[1])} rows into {args.parallel_output}" if args.parallel else "")
    )
    return 0


def _write_encoding(encoder, reader, table, path, args):
    R = encoder.transform(_named_frame(table.X, reader))
    form = reader.form if reader.form != "array" or path.lower().endswith(".npy") else "columns"
    names = None
    if form == "columns":
        # The encoder's own output names, as `transform --model` writes them.
        names = [str(n) for n in encoder.get_feature_names_out()]
    id_dtype = table.ids.dtype if table.ids is not None and table.ids.dtype != object else None
    layout = OutputLayout(
        form, R.shape[1], reader.id_column, names, reader.list_column or "embedding", id_dtype
    )
    with TableWriter(
        path, layout, force=args.force, inputs=(args.input, args.parallel or args.input)
    ) as writer:
        writer.write(table.ids if reader.id_column else None, R)


# ---------------------------------------------------------------------------- search
def _ids(table):
    return np.arange(len(table.X)) if table.ids is None else table.ids


def run_search(args):
    _results_suffix(args.output)
    _check_output(args.output, args.force, inputs=(args.gallery, args.queries, args.model))
    model = load_model(args.model, trust=args.trust)
    searcher_class = load("neighbors", "AlignedNeighbors", "the search command")
    beside = _columns_beside_the_model(
        model, open_table(args.queries, _source_spec(args), dtype=args.dtype)
    )
    query_reader, queries = read_table(
        args.queries, _source_spec(args, beside), dtype=args.dtype
    )
    _check_width(query_reader, _model_width(model, args.model), args.model)
    gallery_reader, gallery = read_table(args.gallery, _source_spec(args), dtype=args.dtype)
    n_gallery = len(gallery.X)
    if isinstance(args.csls, int) and args.csls >= n_gallery:
        # Each gallery item's crowding is measured among the other items.
        raise InputError(
            f"--csls {args.csls} needs a gallery of more than {args.csls} items, and it has "
            f"{n_gallery}; pass a smaller --csls, --no-csls (plain cosine), or leave --csls "
            "at auto, which adapts to the gallery",
            path=gallery_reader.path,
        )
    search = searcher_class(
        model,
        n_neighbors=args.n_neighbors,
        gallery=args.gallery_form,
        csls_k=args.csls,
        device=args.device or "auto",
    )
    try:
        search.fit(gallery.X)
    except ValueError as exc:
        raise InputError(str(exc), path=gallery_reader.path) from None
    columns = _source_columns(model, query_reader)
    distances, indices = search.kneighbors(_model_input(queries.X, *columns))
    n, k = indices.shape
    # Scores are similarities (higher is nearer): the cosine, or the CSLS value.
    scores = 1.0 - distances if search.csls_k_ is None else 2.0 * (1.0 - distances)
    frame = pd.DataFrame(
        {
            "query_id": np.repeat(_ids(queries), k),
            "rank": np.tile(np.arange(1, k + 1), n),
            "gallery_id": _ids(gallery)[indices.ravel()],
            "score": scores.ravel(),
        }
    )
    _write_results(frame, args.output, args.force)
    _log(f"searched {len(gallery.X)} gallery items for {n} queries (k={k}); wrote {args.output}")
    return 0

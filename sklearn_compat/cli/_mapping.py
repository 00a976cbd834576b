"""Applying a loaded model to a table, batch by batch: what the plain ``transform`` (and
``evaluate``, ``search``) and the store migration (``_stores``) share.

A module of its own so that ``_commands`` and ``_stores`` both import it and neither
imports the other's private helpers (no import circle).
"""

import sys

import pandas as pd

from ..io._common import InputError

__all__ = [
    "check_width",
    "columns_beside_the_model",
    "map_batch",
    "model_input",
    "model_width",
    "progress",
    "source_columns",
]


def _log(message):
    print(message, file=sys.stderr)


def model_width(model, path):
    """The model's input width (``n_features_in_``); an InputError naming ``path`` if it
    records none."""
    width = getattr(model, "n_features_in_", None)
    if width is None:
        raise InputError("model does not record its input width (n_features_in_)", path=path)
    return int(width)


def check_width(reader, expected, model_path):
    """Refuse a table whose embedding is not ``expected`` values wide (the model's input)."""
    if reader.width is not None and reader.width != expected:
        spec = reader.spec
        hint = ""
        if reader.form == "columns" and not (spec.prefix or spec.pattern or spec.vector_column):
            hint = "; choose the embedding columns with --prefix or --pattern"
        raise InputError(
            f"the embedding ({reader.describe_embedding()}, {reader.spec.describe()}) has "
            f"{reader.width} values per row, but the model {model_path} expects {expected}"
            f"{hint}",
            path=reader.path,
        )


def columns_beside_the_model(model, reader):
    """Numeric columns that are not the embedding the model was fitted on, or ``()``.

    A model fitted on named columns (``feature_names_in_``) that meets a table holding all
    of them and more numeric columns (a ``price``, a ``year``) takes its own columns: the
    others are returned, to be excluded when the table is opened again, and a note names
    them.  Only when the columns were not chosen explicitly (no prefix, pattern or list
    column) and the table is wider than the model.
    """
    names = getattr(model, "feature_names_in_", None)
    spec = reader.spec
    if names is None or reader.form != "columns" or spec.prefix or spec.pattern:
        return ()
    names = [str(n) for n in names]
    columns = list(reader.vector_columns)
    if len(columns) <= len(names) or not set(names) <= set(columns):
        return ()
    others = tuple(c for c in columns if c not in set(names))
    shown = ", ".join(map(repr, others[:3])) + (", ..." if len(others) > 3 else "")
    _log(
        f"sklearn-compat: note: {reader.path}: using the {len(names)} columns the model was "
        f"fitted on; {shown} {'is' if len(others) == 1 else 'are'} not part of the embedding "
        "(choose columns with --prefix or --pattern)"
    )
    return others


def source_columns(model, reader):
    """Put a table's embedding columns into the order the model was fitted with.

    Returns ``(order, names)``: the column permutation to apply to each batch (None when
    none is needed) and the names to give the model (None when it has none).  A model
    fitted on named columns maps columns by name, so an export whose columns come in
    another order is mapped correctly; columns named differently are matched by position,
    with a warning.
    """
    names = getattr(model, "feature_names_in_", None)
    if names is None:
        return None, None
    names = [str(n) for n in names]
    columns = list(reader.vector_columns or []) if reader.form == "columns" else []
    if sorted(columns) == sorted(names):
        order = [columns.index(n) for n in names]
        return (None if order == list(range(len(order))) else order), names
    _log(
        f"sklearn-compat: warning: {reader.path}: the embedding columns are not the "
        "ones the model was fitted on; they are matched by position"
    )
    return None, names


def model_input(X, order, names):
    """``X`` as the model takes it: columns reordered by ``order``, named by ``names``
    (the ``(order, names)`` of :func:`source_columns`)."""
    if order is not None:
        X = X[:, order]
    if names is None or X.shape[1] != len(names):
        return X
    return pd.DataFrame(X, columns=names, copy=False)


def map_batch(model, batch, reader, columns=(None, None)):
    """The model's output for one batch; a ValueError becomes an InputError naming the
    batch's rows."""
    from .._core.backend import batch_invariant_rows

    try:
        with batch_invariant_rows():  # a last batch of one row gets the bits of any other
            return model.transform(model_input(batch.X, *columns))
    except ValueError as exc:
        stop = batch.start + len(batch) - 1
        raise InputError(
            f"{reader.where(batch.start)} to {reader.where(stop)}: {exc}", path=reader.path
        ) from None


def progress(total, disable):
    """A progress bar over ``total`` rows on stderr, shown only on a terminal."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        unit="rows",
        unit_scale=True,
        file=sys.stderr,
        disable=disable or not sys.stderr.isatty(),
        leave=False,
    )

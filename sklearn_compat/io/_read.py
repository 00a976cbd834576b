"""Reading embedding tables (CSV, Parquet, .npy, LanceDB, Chroma) whole or in batches.

A reader first looks at the table's header or schema only, decides which columns hold the
ids and the embedding (:class:`ColumnSpec`), and then yields :class:`Batch` objects whose
memory is bounded by the batch size, not by the file: CSV through pandas' chunked reader,
Parquet through pyarrow's batch iterator with pre-buffering off (so a large row group is
not read whole), ``.npy`` through seeks into the file, LanceDB tables through Lance's
scanner, Chroma collections page by page and Postgres tables through a server-side
cursor at one snapshot.  Each format is a module of its own
(:data:`READERS`).  Every batch is checked: a missing
id, a NaN or infinite value or a list of the wrong length raises :class:`InputError`
naming the file, the row (the line for CSV) and the column.

``.npy`` layout
---------------
- A plain 2-d float array ``(n, d)``: the rows are the embeddings and the ids are the row
  numbers ``0 .. n-1``.
- A structured array with one id field and either one float sub-array field of shape
  ``(d,)`` (the "list" form, e.g. dtype ``[("id", "<i8"), ("embedding", "<f4", (768,))]``)
  or several scalar numeric fields (the "columns" form).  Field names play the role of
  column names.
Files holding Python objects (pickles) are refused: loading them could run code.
"""

import importlib

from ._common import STORES, ColumnSpec, InputError, is_pattern, table_format
from ._table_reader import _FLOAT_DTYPES, Batch, TableReader

__all__ = ["Batch", "TableReader", "open_table", "read_table", "READERS"]

# Each file format's reader, imported on first use: a new format is one module with a
# TableReader subclass, and one line here.  A store's reader comes from its Store (see
# ._stores.registry).
READERS = {
    "csv": ("._csv", "CsvReader"),
    "parquet": ("._parquet", "ParquetReader"),
    "npy": ("._npy", "NpyReader"),
}


def reader_class(fmt):
    """The :class:`TableReader` subclass of file format ``fmt`` (a key of :data:`READERS`)."""
    module, name = READERS[fmt]
    return getattr(importlib.import_module(module, __package__), name)


def open_table(path, spec=None, *, dtype=None, extra_columns=()):
    """Open an embedding table for reading; only the header or schema is read now.

    Parameters
    ----------
    path : str or path-like
        A ``.csv`` (``.csv.gz``, ``.csv.bz2``, ``.csv.zst``), ``.parquet`` (``.pq``) or
        ``.npy`` file, or a Parquet dataset: a directory of part files (hive-partitioned
        or not) or a glob pattern such as ``"exports/part-*.parquet"``.
    spec : ColumnSpec, default=None
        Which columns hold the ids and the embedding (default: no ids, all numeric columns).
    dtype : {None, "float32", "float64"}, default=None
        Cast the embedding to this dtype; None keeps the file's (float32 stays float32,
        other numbers become float64).
    extra_columns : sequence of str
        Further columns to read along (returned in ``Batch.extra``).

    Returns
    -------
    TableReader

    Examples
    --------
    >>> import numpy as np
    >>> from pathlib import Path
    >>> from tempfile import TemporaryDirectory
    >>> from sklearn_compat.io import open_table
    >>> with TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "items.npy"
    ...     np.save(path, np.arange(12.0).reshape(6, 2))
    ...     reader = open_table(path)
    ...     sizes = [len(batch) for batch in reader.iter_batches(batch_size=4)]
    >>> reader.form, reader.n_rows, sizes
    ('array', 6, [4, 2])
    """
    spec = spec or ColumnSpec()
    fmt = table_format(path)
    if fmt != "parquet" and is_pattern(path):
        raise InputError(
            "a pattern can name Parquet files only (read as one dataset); pass one "
            f"{fmt.upper()} file at a time",
            path=path,
        )
    if fmt in STORES:
        from ._stores import open_store

        return open_store(path).reader(spec, _FLOAT_DTYPES[dtype], tuple(extra_columns))
    return reader_class(fmt)(str(path), spec, _FLOAT_DTYPES[dtype], tuple(extra_columns))


def read_table(path, spec=None, *, dtype=None, extra_columns=()):
    """Read a whole embedding table; returns ``(reader, Batch)``.

    Parameters
    ----------
    path, spec, dtype, extra_columns
        As for :func:`open_table`.

    Returns
    -------
    reader : TableReader
        The table's layout (form, columns, id column).
    table : Batch
        All rows: ``table.ids``, ``table.X`` and ``table.extra``.

    Examples
    --------
    >>> from pathlib import Path
    >>> from tempfile import TemporaryDirectory
    >>> from sklearn_compat.io import ColumnSpec, read_table
    >>> with TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "items.csv"
    ...     rows = ["id,title,e0,e1", "x,first,1.0,2.0", "y,second,3.0,4.0"]
    ...     _ = path.write_text("\\n".join(rows))
    ...     reader, table = read_table(path, ColumnSpec(id_column="id"))
    >>> reader.vector_columns, table.ids.tolist(), table.X.tolist()
    (['e0', 'e1'], ['x', 'y'], [[1.0, 2.0], [3.0, 4.0]])
    """
    reader = open_table(path, spec, dtype=dtype, extra_columns=extra_columns)
    return reader, reader.read()

"""Reading embedding tables (CSV, Parquet, .npy) whole or in bounded row batches.

A reader first looks at the table's header or schema only, decides which columns hold the
ids and the embedding (:class:`ColumnSpec`), and then yields :class:`Batch` objects whose
memory is bounded by the batch size, not by the file: CSV through pandas' chunked reader,
Parquet through pyarrow's batch iterator with pre-buffering off (so a large row group is
not read whole), ``.npy`` through seeks into the file.  Every batch is checked: a missing
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

import glob
import os
import re
import sys
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ._common import ColumnSpec, InputError, csv_compression, is_pattern, table_format

__all__ = ["Batch", "open_table", "read_table"]

# Rows pandas looks at to tell numeric columns from the rest in a CSV file.
_CSV_SNIFF_ROWS = 200
_FLOAT_DTYPES = {"float32": np.float32, "float64": np.float64, None: None}


@dataclass
class Batch:
    """Rows ``start .. start + len(X)`` of a table.

    Attributes
    ----------
    start : int
        Index of the first row in the file (0-based, data rows only).
    ids : ndarray of shape (n,) or None
        The ids (None when the table has no id column).
    X : ndarray of shape (n, d)
        The embeddings, float32 or float64.
    extra : dict of str -> ndarray
        Other columns asked for (for example class labels).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.io import Batch
    >>> len(Batch(start=10, ids=None, X=np.zeros((3, 4))))
    3
    """

    start: int
    ids: np.ndarray | None
    X: np.ndarray
    extra: dict = field(default_factory=dict)

    def __len__(self):
        return self.X.shape[0]


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
    cls = {"csv": _CsvReader, "parquet": _ParquetReader, "npy": _NpyReader}[fmt]
    return cls(str(path), spec, _FLOAT_DTYPES[dtype], tuple(extra_columns))


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


class TableReader:
    """Common logic of the three readers; subclasses set the layout in ``__init__``.

    Attributes set by subclasses: ``form`` ("columns", "list" or "array"),
    ``vector_columns`` (list of names, columns form), ``list_column`` (list form),
    ``id_column`` (None when the ids are the row numbers), ``n_rows`` (None when unknown
    before reading, as for CSV), ``width`` (None when unknown before reading).
    """

    format = None
    columns = ()
    id_column = None
    vector_columns = None
    list_column = None
    width = None
    n_rows = None

    def __init__(self, path, spec, dtype, extra_columns):
        self.path = path
        self.spec = spec
        self.dtype = dtype
        self.extra_columns = extra_columns

    # -------------------------------------------------------------- public interface
    def iter_batches(self, batch_size=65536):
        """Yield checked :class:`Batch` objects of at most ``batch_size`` rows."""
        if batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}")
        for batch in self._batches(int(batch_size)):
            self._check(batch)
            yield batch

    def read(self):
        """All rows as one checked :class:`Batch`."""
        batches = list(self.iter_batches(1 << 20))
        if not batches:
            return Batch(0, self._empty_ids(), np.empty((0, self.width or 0)), {})
        if len(batches) == 1:
            return batches[0]
        ids = None if batches[0].ids is None else np.concatenate([b.ids for b in batches])
        extra = {k: np.concatenate([b.extra[k] for b in batches]) for k in batches[0].extra}
        return Batch(0, ids, np.concatenate([b.X for b in batches]), extra)

    def where(self, row):
        """Human name of data row ``row`` (0-based): ``row 17`` or ``line 19`` for CSV."""
        return f"row {row}"

    def describe_embedding(self):
        if self.form == "list":
            return f"list column {self.list_column!r}"
        if self.form == "array":
            return "the array's columns"
        return f"{len(self.vector_columns)} numeric columns"

    def id_dtype(self):
        """A fixed numpy dtype for the ids (``.npy`` output needs one before writing)."""
        return np.dtype(np.int64)

    # -------------------------------------------------------------- helpers
    def _empty_ids(self):
        return None if self.id_column is None else np.empty(0, dtype=object)

    def _locate(self, batch, i, column=None):
        where = self.where(batch.start + i)
        if batch.ids is not None and column != self.id_column:
            where += f" (id {_show(batch.ids[i])})"
        if column is not None:
            where += f", column {column!r}"
        return where

    def _check(self, batch):
        X = batch.X
        if self.width is None:
            self.width = X.shape[1]
        if batch.ids is not None:
            missing = pd.isna(batch.ids)
            if missing.any():
                i = int(np.flatnonzero(missing)[0])
                raise InputError(
                    f"{self._locate(batch, i, self.id_column)}: missing id", path=self.path
                )
        finite = np.isfinite(X)
        if not finite.all():
            i, j = (int(v) for v in np.argwhere(~finite)[0])
            value = "NaN (missing)" if np.isnan(X[i, j]) else str(X[i, j])
            if self.form == "columns":
                column = self.vector_columns[j]
            else:
                column = self.list_column
            where = self._locate(batch, i, column)
            if self.form != "columns":
                where += f" element {j}"
            raise InputError(f"{where}: value is {value}", path=self.path)

    def _cast(self, X, file_dtype):
        target = self.dtype
        if target is None:
            target = np.float32 if file_dtype in (np.float32, np.float16) else np.float64
        return np.asarray(X, dtype=target)


def _show(value):
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return repr(value) if isinstance(value, str) else str(value)


def _missing_id_column(spec, columns, path):
    shown = ", ".join(map(repr, list(columns)[:8])) + (", ..." if len(columns) > 8 else "")
    return InputError(f"no id column {spec.id_column!r} (columns: {shown})", path=path)


def _mostly_numbers(values):
    """Whether a text column is an embedding column with some bad cells.

    More than half of its values being numbers means a corrupt or stray cell (``"oops"``,
    ``"1,5"``) in an embedding column, which must be reported where it is rather than
    silently drop the whole dimension; a metadata column (titles, tags) stays text.
    """
    if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        return False
    present = values.dropna()
    if present.empty:
        return False
    parsed = pd.to_numeric(present.astype(str), errors="coerce").notna()
    return bool(parsed.sum() * 2 > len(present))


def _decimal_commas(sample):
    """Whether a semicolon- or tab-separated sample writes numbers with a decimal comma."""
    texts = [
        sample[c].dropna().astype(str)
        for c in sample.columns
        if sample[c].dtype == object or pd.api.types.is_string_dtype(sample[c])
    ]
    texts = [t for t in texts if len(t)]
    if not texts:
        return False
    number = r"\s*[-+]?\d*,\d+(?:[eE][-+]?\d+)?\s*"
    return sum(bool(t.str.fullmatch(number).all()) for t in texts) * 2 > len(texts)


class _Decompressed:
    """A pyarrow decompressing stream whose read errors name the file (for pandas)."""

    def __init__(self, stream, path):
        self._stream = stream
        self._path = path

    def read(self, size=-1):
        try:
            return self._stream.read(None if size is None or size < 0 else size)
        except Exception as exc:  # noqa: BLE001 - any codec failure is a damaged file
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"cannot decompress: {msg}", path=self._path) from None

    def close(self):
        self._stream.close()

    def __iter__(self):  # pandas checks for it to accept the object as a file
        return iter(self.read().splitlines(keepends=True))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Chunks:
    """pandas' chunked CSV reader that also closes the decompressing stream under it."""

    def __init__(self, reader, stream):
        self._reader = reader
        self._stream = stream

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._reader)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._reader.close()
        if self._stream is not None:
            self._stream.close()
        return False


def _check_numeric(chosen, numeric, type_of, path):
    for name in chosen:
        if name not in numeric:
            raise InputError(f"column {name!r} is not numeric ({type_of(name)})", path=path)


def _check_extra(extra_columns, columns, path):
    for name in extra_columns:
        if name not in columns:
            raise InputError(f"no column {name!r}", path=path)


# The name pandas gives a CSV column with an empty header: the index ``df.to_csv()``
# writes first by default (also kept as a header when such a file is read and re-written).
_UNNAMED_INDEX = "Unnamed: 0"


def _pandas_index_column(sample, columns, spec, path):
    """The leading column that holds the pandas index ``df.to_csv()`` wrote, or None.

    ``to_csv`` writes the index first unless ``index=False``: with an empty header (read as
    ``Unnamed: 0``) for an unnamed index, whatever its values, or under its name for a
    named one.  A named leading column is taken for an index only when it looks like a
    ``RangeIndex`` (integers rising by one, from any start) and the embedding columns are
    not chosen by name (``--prefix``, ``--pattern``); an embedding dimension never looks
    like that.  It is never an embedding column, and the caller is told once.
    """
    name = columns[0]
    if name == spec.id_column or len(columns) < 2:
        return None
    if name == _UNNAMED_INDEX:
        kind = "unnamed"
    else:
        values = sample[name]
        steps = np.diff(values.to_numpy()) if pd.api.types.is_integer_dtype(values) else []
        if spec.prefix or spec.pattern or len(values) < 3 or not (np.asarray(steps) == 1).all():
            return None
        kind = "named"
    warnings.warn(
        f"{path}: the first column {name!r} is the {kind} pandas index that df.to_csv() "
        "writes, not an embedding dimension; it is ignored (write with index=False to "
        "leave it out)",
        stacklevel=3,
    )
    return name


# ====================================================================== CSV
class _CsvReader(TableReader):
    """CSV through pandas.  Ids are read as text, exactly as written in the file.

    ``.csv.gz``, ``.csv.bz2`` and ``.csv.zst`` are decompressed on the fly by pyarrow.
    The separator is taken from the header line: a comma, or a semicolon or tab when the
    header has no comma (spreadsheet exports in many locales), and then a decimal comma
    (``0,5``) is recognised too.
    """

    format = "csv"

    def __init__(self, path, spec, dtype, extra_columns):
        super().__init__(path, spec, dtype, extra_columns)
        self._codec = csv_compression(path)
        self._sep, self._decimal = self._sniff_separator(), "."
        sample = self._read(nrows=_CSV_SNIFF_ROWS)
        if self._sep != "," and _decimal_commas(sample):
            self._decimal = ","
            sample = self._read(nrows=_CSV_SNIFF_ROWS)
        columns = self.columns = [str(c) for c in sample.columns]
        if sample.empty:
            shown = ", ".join(map(repr, columns[:5])) + (", ..." if len(columns) > 5 else "")
            raise InputError(
                f"has a header ({len(columns)} columns: {shown}) but no data rows",
                path=path,
            )
        if spec.id_column is not None and spec.id_column not in columns:
            raise _missing_id_column(spec, columns, path)
        _check_extra(extra_columns, columns, path)
        self.id_column = spec.id_column
        numeric = [
            c
            for c in columns
            if (
                pd.api.types.is_numeric_dtype(sample[c])
                and not pd.api.types.is_bool_dtype(sample[c])
            )
            or (c != spec.id_column and _mostly_numbers(sample[c]))
        ]
        list_like = [
            c
            for c in columns
            if (sample[c].dtype == object or pd.api.types.is_string_dtype(sample[c]))
            and sample[c].dropna().astype(str).str.lstrip().str.startswith("[").all()
            and sample[c].notna().any()
        ]
        self.index_column = _pandas_index_column(sample, columns, spec, path)
        index = () if self.index_column is None else (self.index_column,)
        spec = spec.excluding(tuple(extra_columns) + index)
        self.form, chosen = spec.select(numeric, list_like, path, columns)
        if self.form == "list":
            self.list_column = chosen
        else:
            self.vector_columns = [str(c) for c in chosen]
            self.width = len(chosen)

    def where(self, row):
        # Line numbers assume one line per row (no quoted newlines), as exports have.
        return f"line {row + 2}"

    def _open(self):
        """A binary stream of the file's (decompressed) text, or None for a plain file."""
        if self._codec is None:
            return None
        import pyarrow as pa

        if not pa.Codec.is_available(self._codec):
            raise InputError(
                f"this pyarrow build cannot read {self._codec}; decompress the file first",
                path=self.path,
            )
        try:
            raw = pa.OSFile(self.path, "rb")
        except IsADirectoryError:
            raise InputError("is a directory, not a table", path=self.path) from None
        return _Decompressed(pa.CompressedInputStream(raw, self._codec), self.path)

    def _sniff_separator(self):
        try:
            stream = self._open()
            if stream is None:
                with open(self.path, "rb") as f:
                    head = f.read(1 << 16)
            else:
                with stream:
                    head = stream.read(1 << 16)
        except FileNotFoundError:
            raise InputError("no such file", path=self.path) from None
        except IsADirectoryError:
            raise InputError("is a directory, not a table", path=self.path) from None
        header = head.split(b"\n", 1)[0]
        if b"," in header:
            return ","
        counts = {";": header.count(b";"), "\t": header.count(b"\t")}
        best = max(counts, key=counts.get)
        return best if counts[best] else ","

    def _read(self, **kwargs):
        stream = self._open()
        try:
            result = pd.read_csv(
                self.path if stream is None else stream,
                sep=self._sep,
                decimal=self._decimal,
                **kwargs,
            )
        except BaseException:
            if stream is not None:
                stream.close()
            raise self._explain(*sys.exc_info()[:2]) from None
        if "chunksize" in kwargs:
            return _Chunks(result, stream)
        if stream is not None:
            stream.close()
        return result

    def _explain(self, kind, exc):
        """The InputError for a pandas read failure (other exceptions pass unchanged)."""
        if issubclass(kind, FileNotFoundError):
            return InputError("no such file", path=self.path)
        if issubclass(kind, IsADirectoryError):
            return InputError("is a directory, not a table", path=self.path)
        if issubclass(kind, pd.errors.EmptyDataError):
            return InputError("empty file (no header row)", path=self.path)
        if issubclass(kind, (pd.errors.ParserError, UnicodeDecodeError)):
            msg = str(exc).strip().splitlines()[-1]
            return InputError(f"not a readable CSV table: {msg}", path=self.path)
        return exc

    def _usecols(self):
        cols = [] if self.id_column is None else [self.id_column]
        cols += list(self.vector_columns or [self.list_column])
        return cols + [c for c in self.extra_columns if c not in cols]

    def _batches(self, batch_size):
        dtypes = {}
        if self.id_column is not None:
            dtypes[self.id_column] = str
        if self.form == "columns":
            dtypes.update({c: np.float64 for c in self.vector_columns})
        else:
            dtypes[self.list_column] = str
        reader = self._read(usecols=self._usecols(), dtype=dtypes, chunksize=batch_size)
        start = 0
        with reader:
            while True:
                try:
                    chunk = next(reader)
                except StopIteration:
                    return
                except InputError:
                    raise
                except ValueError:
                    self._find_bad_number(batch_size)
                    raise
                yield self._to_batch(chunk, start)
                start += len(chunk)

    def _to_batch(self, chunk, start):
        ids = None
        if self.id_column is not None:
            ids = chunk[self.id_column].to_numpy(dtype=object)
        extra = {c: chunk[c].to_numpy() for c in self.extra_columns}
        if self.form == "columns":
            X = chunk[self.vector_columns].to_numpy(dtype=np.float64)
        else:
            X = self._parse_lists(chunk[self.list_column], start, ids)
        return Batch(start, ids, self._cast(X, np.float64), extra)

    def _parse_lists(self, texts, start, ids):
        texts = texts.to_numpy(dtype=object)
        rows = []
        for i, text in enumerate(texts):
            where = None
            try:
                if not isinstance(text, str):
                    where = "missing embedding"
                    raise ValueError
                body = text.strip()
                if not (body.startswith("[") and body.endswith("]")):
                    raise ValueError
                body = body[1:-1].strip()
                row = np.array(body.split(","), dtype=np.float64) if body else np.empty(0)
            except ValueError:
                batch = Batch(start, ids, np.empty((len(texts), 0)))
                what = where or f"not a list of numbers: {str(text)[:40]!r}"
                raise InputError(
                    f"{self._locate(batch, i, self.list_column)}: {what}", path=self.path
                ) from None
            if self.width is None:
                self.width = row.size
            if row.size != self.width:
                batch = Batch(start, ids, np.empty((len(texts), 0)))
                raise InputError(
                    f"{self._locate(batch, i, self.list_column)}: list has {row.size} "
                    f"values, earlier rows have {self.width}",
                    path=self.path,
                )
            rows.append(row)
        return np.stack(rows) if rows else np.empty((0, self.width or 0))

    def _find_bad_number(self, batch_size):
        """Name the line and column of a value that is not a number (error path only)."""
        reader = self._read(
            usecols=self.vector_columns, dtype=str, chunksize=batch_size, keep_default_na=True
        )
        start = 0
        with reader:
            for chunk in reader:
                for column in self.vector_columns:
                    values = chunk[column]
                    bad = pd.to_numeric(values, errors="coerce").isna() & values.notna()
                    if bad.any():
                        i = int(np.flatnonzero(bad.to_numpy())[0])
                        raise InputError(
                            f"{self.where(start + i)}, column {column!r}: not a number: "
                            f"{values.iloc[i]!r}",
                            path=self.path,
                        )
                start += len(chunk)

    def id_dtype(self):
        if self.id_column is None:
            return np.dtype(np.int64)
        longest = 1
        reader = self._read(
            usecols=[self.id_column], dtype=str, chunksize=1 << 20, keep_default_na=False
        )
        with reader:
            for chunk in reader:
                if len(chunk):
                    longest = max(longest, int(chunk[self.id_column].str.len().max()))
        return np.dtype(f"U{longest}")


# ====================================================================== Parquet
# Read buffer per column chunk.  pyarrow keeps one per column being read, so a
# one-column-per-dimension table of 768 columns holds 768 of them: 64 KiB keeps that at
# 48 MiB where 1 MiB cost 768 MiB.
_PARQUET_BUFFER = 64 << 10
# A row group whose embedding columns carry dictionary pages larger than this in all is
# staged (see _stage_row_group): reading it directly holds every column's dictionary,
# decompressed and decoded (about 3x its size), for the whole row group.
_DICTIONARY_BUDGET = 32 << 20
# Bytes of embedding values read per pass when a row group is staged.
_STAGE_BYTES = 16 << 20
# Rows per step when reading a list column (see _ParquetReader._batches).
_LIST_READ_ROWS = 4096
_INDEX_NAME = re.compile(r"__index_level_\d+__")


def _table_format_or_none(path):
    try:
        return table_format(path)
    except InputError:
        return None


def _check_parquet_folder(folder):
    """A folder of CSV or .npy files is not a dataset: say so before pyarrow fails."""
    names = [
        name
        for _, dirs, files in os.walk(folder)
        for name in files
        if not name.startswith((".", "_"))
    ]
    kinds = {_table_format_or_none(name) for name in names}
    if names and kinds <= {"csv", "npy"}:
        raise InputError(
            "a directory is read as a Parquet dataset, but its files are CSV or .npy; "
            "pass one file at a time",
            path=folder,
        )


def _parquet_sources(path):
    """The Parquet files a path names: itself, the files a pattern matches, or a directory."""
    if is_pattern(path):
        files = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        if not files:
            raise InputError("no files match this pattern", path=path)
        return files
    return path


def _index_columns(schema):
    """Columns that hold a pandas index (``df.to_parquet`` keeps a non-default index as
    ``__index_level_0__`` or under its name): they are never embedding dimensions."""
    names = set()
    try:
        meta = schema.pandas_metadata or {}
    except Exception:  # noqa: BLE001 - unreadable pandas metadata: fall back to names
        meta = {}
    for entry in meta.get("index_columns", []):
        if isinstance(entry, str):  # a RangeIndex is stored as a dict, with no column
            names.add(entry)
    names.update(n for n in schema.names if _INDEX_NAME.fullmatch(n))
    return names


class _ParquetReader(TableReader):
    """Parquet through pyarrow, batch by batch, without pre-buffering whole row groups.

    One file is read with :class:`pyarrow.parquet.ParquetFile`; a directory of part files
    (hive-partitioned or not) or a glob pattern is one table read through
    :mod:`pyarrow.dataset`, part after part, in the order of the file names.  Columns that
    hold a pandas index and hive partition keys are never embedding columns.
    """

    format = "parquet"

    def __init__(self, path, spec, dtype, extra_columns):
        super().__init__(path, spec, dtype, extra_columns)
        import pyarrow as pa

        self._pa = pa
        self._file = self._dataset = None
        partition_keys = set()
        source = _parquet_sources(path)
        try:
            if isinstance(source, list) or os.path.isdir(source):
                self._dataset = self._open_dataset(source)
                schema = self._dataset.schema
                # Hive partition keys (``shard=3/``) are columns of the dataset that
                # no part file holds.
                first = next(iter(self._dataset.get_fragments()))
                partition_keys = set(schema.names) - set(first.physical_schema.names)
            else:
                import pyarrow.parquet as pq

                # pre_buffer=False with a small read buffer streams column chunks page by
                # page instead of loading whole row groups.
                self._file = pq.ParquetFile(source, pre_buffer=False, buffer_size=_PARQUET_BUFFER)
                schema = self._file.schema_arrow
        except FileNotFoundError:
            raise InputError("no such file", path=path) from None
        except (pa.ArrowException, OSError) as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            many = isinstance(source, list) or os.path.isdir(source)
            what = "dataset" if many else "file"
            raise InputError(f"not a readable Parquet {what}: {msg}", path=path) from None
        columns = self.columns = list(schema.names)
        if spec.id_column is not None and spec.id_column not in columns:
            raise _missing_id_column(spec, columns, path)
        _check_extra(extra_columns, columns, path)
        self.id_column = spec.id_column
        types = pa.types

        def is_number(t):
            return types.is_integer(t) or types.is_floating(t)

        numeric = [f.name for f in schema if is_number(f.type)]
        list_like = [
            f.name
            for f in schema
            if (
                types.is_list(f.type)
                or types.is_large_list(f.type)
                or types.is_fixed_size_list(f.type)
            )
            and is_number(f.type.value_type)
        ]
        metadata = sorted((_index_columns(schema) | partition_keys) - {spec.id_column})
        self.metadata_columns = metadata
        spec = spec.excluding(tuple(extra_columns) + tuple(metadata))
        self.form, chosen = spec.select(numeric, list_like, path, columns)
        if self.form == "list":
            self.list_column = chosen
            t = schema.field(chosen).type
            self._file_dtype = t.value_type.to_pandas_dtype()
            if types.is_fixed_size_list(t):
                self.width = t.list_size
        else:
            _check_numeric(chosen, numeric, lambda c: schema.field(c).type, path)
            self.vector_columns = list(chosen)
            self.width = len(chosen)
            kinds = {schema.field(c).type.to_pandas_dtype() for c in chosen}
            self._file_dtype = np.float32 if kinds <= {np.float32, np.float16} else np.float64
        if self._file is not None:
            self.n_rows = self._file.metadata.num_rows
        else:
            self.n_rows = self._dataset.count_rows()

    def _open_dataset(self, source):
        import pyarrow.dataset as ds

        options = ds.ParquetFragmentScanOptions(
            pre_buffer=False, use_buffered_stream=True, buffer_size=_PARQUET_BUFFER
        )
        fmt = ds.ParquetFileFormat(default_fragment_scan_options=options)
        if isinstance(source, str):
            _check_parquet_folder(source)
        # Hidden and underscore files (_SUCCESS, _metadata, .crc) are skipped by default.
        dataset = ds.dataset(source, format=fmt, partitioning="hive")
        if not dataset.files:
            raise InputError("no Parquet files in this directory", path=self.path)
        return dataset

    def _columns_to_read(self):
        cols = [] if self.id_column is None else [self.id_column]
        cols += list(self.vector_columns or [self.list_column])
        return cols + [c for c in self.extra_columns if c not in cols]

    def _batches(self, batch_size):
        pa = self._pa
        cols = self._columns_to_read()
        # pyarrow's reader of list columns holds several times its batch while decoding
        # (levels, values, builders), so list columns are read in small steps and
        # gathered into the batch.
        step = batch_size if self.form == "columns" else min(batch_size, _LIST_READ_ROWS)
        start = 0
        gather = _Gather(batch_size, self.n_rows)
        try:
            for rb, X in self._record_batches(cols, step):
                part = self._to_batch(rb, start + gather.rows, X)
                del rb, X  # do not keep the Arrow copy alive while the batch is used
                if step == batch_size:
                    start += len(part)
                    yield part
                    continue
                if gather.rows + len(part) > batch_size:
                    batch = gather.take()
                    start += len(batch)
                    yield batch
                    part.start = start
                gather.add(part)
            if gather.rows:
                yield gather.take()
        except pa.ArrowException as exc:
            raise InputError(
                f"cannot read rows after row {start}: {exc}", path=self.path
            ) from None

    def _record_batches(self, cols, batch_size):
        if self._dataset is not None:
            # One batch read ahead, one part file at a time: pyarrow's defaults (16 and 4)
            # hold dozens of batches.
            for rb in self._dataset.to_batches(
                columns=cols,
                batch_size=batch_size,
                batch_readahead=1,
                fragment_readahead=1,
                use_threads=True,
            ):
                yield rb, None
            return
        meta = self._file.metadata
        for group in range(meta.num_row_groups):
            if self._should_stage(meta.row_group(group)):
                yield from _stage_row_group(self._file, group, cols, self, batch_size)
            else:
                for rb in self._file.iter_batches(
                    batch_size=batch_size, row_groups=[group], columns=cols, use_threads=True
                ):
                    yield rb, None

    def _should_stage(self, group):
        """Whether this row group's dictionaries would cost more than the budget."""
        if self.form != "columns":
            return False
        wanted = set(self.vector_columns)
        total = 0
        for j in range(group.num_columns):
            chunk = group.column(j)
            if chunk.path_in_schema in wanted and chunk.has_dictionary_page:
                total += chunk.data_page_offset - (chunk.dictionary_page_offset or 0)
        return total > _DICTIONARY_BUDGET

    def _to_batch(self, rb, start, X=None):
        """A :class:`Batch` from a record batch (the embedding already in ``X`` when the
        row group was staged; ``rb`` then holds the other columns, or is None)."""
        n = rb.num_rows if X is None else X.shape[0]
        ids = None
        if self.id_column is not None:
            ids = rb.column(self.id_column).to_numpy(zero_copy_only=False)
            if ids.dtype.kind in "fc":
                ids = ids.astype(object)  # a null in an int column came back as NaN
        extra = {c: rb.column(c).to_numpy(zero_copy_only=False) for c in self.extra_columns}
        dtype = self.dtype or (
            np.float32 if self._file_dtype in (np.float32, np.float16) else np.float64
        )
        if X is not None:
            pass
        elif self.form == "columns":
            X = np.empty((n, len(self.vector_columns)), dtype=dtype)
            for j, name in enumerate(self.vector_columns):
                X[:, j] = rb.column(name).to_numpy(zero_copy_only=False)
        else:
            X = self._list_values(rb.column(self.list_column), start, ids, dtype)
        return Batch(start, ids, X, extra)

    def _list_values(self, arr, start, ids, dtype):
        import pyarrow.compute as pc

        n = len(arr)
        if arr.null_count:
            i = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
            batch = Batch(start, ids, np.empty((n, 0)))
            raise InputError(
                f"{self._locate(batch, i, self.list_column)}: missing embedding",
                path=self.path,
            )
        lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        if self.width is None and n:
            self.width = int(lengths[0])
        wrong = lengths != self.width
        if wrong.any():
            i = int(np.flatnonzero(wrong)[0])
            batch = Batch(start, ids, np.empty((n, 0)))
            raise InputError(
                f"{self._locate(batch, i, self.list_column)}: list has {lengths[i]} values, "
                f"expected {self.width}",
                path=self.path,
            )
        values = arr.flatten().to_numpy(zero_copy_only=False)
        return np.asarray(values, dtype=dtype).reshape(n, self.width or 0)

    def id_dtype(self):
        if self.id_column is None:
            return np.dtype(np.int64)
        if self._dataset is not None:
            table = self._dataset.to_table(columns=[self.id_column])
        else:
            table = self._file.read(columns=[self.id_column])
        ids = table.column(0).to_numpy()
        if ids.dtype.kind in "iu":
            return ids.dtype
        return np.asarray(ids.astype(str)).dtype if len(ids) else np.dtype("U1")


class _Gather:
    """Collects small batches into one of at most ``size`` rows, copying each embedding
    into one preallocated array as it arrives (no second copy of the whole batch)."""

    def __init__(self, size, total):
        self.size = size
        self.total = total  # rows in the table: no batch is allocated beyond them
        self.parts = []
        self.rows = 0
        self.X = None

    def add(self, part):
        if self.X is None:
            rows = max(len(part), min(self.size, self.total - part.start))
            self.X = np.empty((rows, part.X.shape[1]), dtype=part.X.dtype)
        self.X[self.rows : self.rows + len(part)] = part.X
        self.rows += len(part)
        part.X = None
        self.parts.append(part)

    def take(self):
        parts, n = self.parts, self.rows
        first = parts[0]
        ids = None if first.ids is None else np.concatenate([p.ids for p in parts])
        extra = {k: np.concatenate([p.extra[k] for p in parts]) for k in first.extra}
        X = self.X[:n] if n < len(self.X) else self.X
        self.parts, self.rows, self.X = [], 0, None
        return Batch(first.start, ids, X, extra)


def _stage_row_group(parquet_file, group, cols, reader, batch_size):
    """Yield a large dictionary-encoded row group as record batches in bounded memory.

    Reading all columns of such a row group at once holds every column's dictionary
    (pandas and pyarrow write float columns dictionary-encoded, one row group per 1M
    rows).  Instead, the embedding columns are read a few at a time over the whole row
    group and written, block after block, to an anonymous temporary file (under
    ``TMPDIR``); the row batches are then read back from it.  Memory: about
    ``_STAGE_BYTES`` plus one batch; disk: the row group's embedding values.
    """
    import tempfile

    vectors = reader.vector_columns
    others = [c for c in cols if c not in vectors]
    n = parquet_file.metadata.row_group(group).num_rows
    itemsize = np.dtype(
        reader.dtype or (np.float32 if reader._file_dtype == np.float32 else np.float64)
    ).itemsize
    per_pass = max(1, min(len(vectors), _STAGE_BYTES // max(1, n * itemsize)))
    dtype = np.float32 if itemsize == 4 else np.float64
    blocks = []  # (first column, number of columns, offset in the file)
    with tempfile.TemporaryFile(prefix="sklearn-compat-stage-") as tmp:
        offset = 0
        for first in range(0, len(vectors), per_pass):
            names = vectors[first : first + per_pass]
            table = parquet_file.read_row_group(group, columns=names, use_threads=True)
            block = np.empty((n, len(names)), dtype=dtype)
            for j, name in enumerate(names):
                block[:, j] = table.column(name).to_numpy()
            del table
            tmp.write(block.data)
            blocks.append((first, len(names), offset))
            offset += block.nbytes
            del block
        tmp.flush()
        rest = parquet_file.read_row_group(group, columns=others) if others else None
        fd = tmp.fileno()
        for start in range(0, n, batch_size):
            rows = min(batch_size, n - start)
            X = np.empty((rows, len(vectors)), dtype=dtype)
            for first, width, where in blocks:
                raw = os.pread(fd, rows * width * itemsize, where + start * width * itemsize)
                X[:, first : first + width] = np.frombuffer(raw, dtype=dtype).reshape(rows, -1)
                del raw
            yield (None if rest is None else rest.slice(start, rows)), X


# ====================================================================== .npy
class _NpyReader(TableReader):
    """``.npy`` arrays read by seeking, so batches never load the whole file."""

    format = "npy"

    def __init__(self, path, spec, dtype, extra_columns):
        super().__init__(path, spec, dtype, extra_columns)
        fmt = np.lib.format
        try:
            with open(path, "rb") as f:
                version = fmt.read_magic(f)
                if version == (1, 0):
                    shape, fortran, file_dtype = fmt.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, file_dtype = fmt.read_array_header_2_0(f)
                else:
                    raise ValueError(f"unsupported .npy format version {version}")
                self._offset = f.tell()
        except FileNotFoundError:
            raise InputError("no such file", path=path) from None
        except IsADirectoryError:
            raise InputError("is a directory, not a table", path=path) from None
        except (ValueError, OSError, SyntaxError) as exc:
            raise InputError(f"not a readable .npy file: {exc}", path=path) from None
        if file_dtype.hasobject:
            raise InputError(
                "holds Python objects (a pickle), which are not loaded for safety; save a "
                "numeric or structured array instead",
                path=path,
            )
        self._file_dtype = file_dtype
        self._fortran = fortran
        self._shape = shape
        names = file_dtype.names
        self.columns = list(names or ())
        if names is None:
            if len(shape) != 2 or file_dtype.kind not in "fiu":
                raise InputError(
                    f"a plain .npy table must be a 2-d numeric array, got shape {shape} "
                    f"and dtype {file_dtype}",
                    path=path,
                )
            if spec.vector_column or spec.prefix or spec.pattern:
                raise InputError("a plain 2-d array has no named columns to select", path=path)
            _check_extra(extra_columns, (), path)
            self.form = "array"
            self.width = shape[1]
            self.id_column = None
        else:
            if len(shape) != 1:
                raise InputError(f"a structured table must be 1-d, got shape {shape}", path=path)
            if spec.id_column is not None and spec.id_column not in names:
                raise _missing_id_column(spec, names, path)
            _check_extra(extra_columns, names, path)
            self.id_column = spec.id_column
            numeric = [
                n for n in names if file_dtype[n].shape == () and file_dtype[n].kind in "fiu"
            ]
            list_like = [
                n
                for n in names
                if len(file_dtype[n].shape) == 1 and file_dtype[n].base.kind in "fiu"
            ]
            spec = spec.excluding(extra_columns)
            self.form, chosen = spec.select(numeric, list_like, path, list(names))
            if self.form == "list":
                self.list_column = chosen
                self.width = file_dtype[chosen].shape[0]
            else:
                _check_numeric(chosen, numeric, lambda c: file_dtype[c], path)
                self.vector_columns = list(chosen)
                self.width = len(chosen)
        self.n_rows = shape[0]

    def _batches(self, batch_size):
        n = self.n_rows
        if self._fortran:
            # Column-major data cannot be read row by row; memory-map it instead.
            data = np.load(self.path, mmap_mode="r")
            for start in range(0, n, batch_size):
                yield self._to_batch(np.array(data[start : start + batch_size]), start)
            return
        itemsize = self._file_dtype.itemsize * (self.width if self.form == "array" else 1)
        with open(self.path, "rb") as f:
            for start in range(0, n, batch_size):
                count = min(batch_size, n - start)
                f.seek(self._offset + start * itemsize)
                # readinto, not np.fromfile: an interrupt inside np.fromfile on a file
                # object surfaces as a TypeError instead of KeyboardInterrupt.
                raw = np.empty(
                    count * (self.width if self.form == "array" else 1), dtype=self._file_dtype
                )
                n_bytes = f.readinto(memoryview(raw).cast("B"))
                raw = raw[: n_bytes // self._file_dtype.itemsize]
                if self.form == "array":
                    got = raw.size // max(1, self.width)
                    raw = raw[: got * self.width].reshape(got, self.width)
                else:
                    got = raw.shape[0]
                if got < count:
                    raise InputError(
                        f"file is truncated: the header says {n} rows but the data ends "
                        f"at row {start + got}",
                        path=self.path,
                    )
                yield self._to_batch(raw, start)

    def _to_batch(self, raw, start):
        if self.form == "array":
            ids = np.arange(start, start + raw.shape[0])
            return Batch(start, ids, self._cast(raw, self._file_dtype.type), {})
        ids = None if self.id_column is None else raw[self.id_column]
        extra = {c: np.asarray(raw[c]) for c in self.extra_columns}
        if self.form == "list":
            field_dtype = self._file_dtype[self.list_column].base.type
            X = self._cast(raw[self.list_column], field_dtype)
        else:
            kinds = {self._file_dtype[c].type for c in self.vector_columns}
            file_dtype = np.float32 if kinds <= {np.float32, np.float16} else np.float64
            X = np.empty((raw.shape[0], self.width), dtype=self.dtype or file_dtype)
            for j, name in enumerate(self.vector_columns):
                X[:, j] = raw[name]
        return Batch(start, ids, X, extra)

    def id_dtype(self):
        if self.id_column is None:
            return np.dtype(np.int64)
        return self._file_dtype[self.id_column]

"""CSV embedding tables, read through pandas' chunked reader (see :class:`CsvReader`)."""

import re
import sys
import warnings

import numpy as np
import pandas as pd

from ._common import InputError, csv_compression
from ._table_reader import Batch, TableReader, _check_extra, _missing_id_column

__all__ = ["CsvReader"]


def _pandas_version():
    """pandas' (major, minor) version, from its version string ("3.1.0.dev0+12" -> (3, 1))."""
    return tuple(int(part) for part in re.findall(r"\d+", pd.__version__)[:2])


# Before pandas 3.1, the default float parser ("high") reads many 17-digit float64 values
# one unit off in the last place (2.2 and 3.0 alike); the "round_trip" parser hands each
# value to Python's correctly rounded conversion and reads every value exactly.  pandas 3.1
# made the default exact and deprecated the option.  CI runs the io tests under 2.2, 3.0 and
# the newest pandas (.ci/pandas_versions) to hold this for every version the pin allows.
_EXACT_FLOATS = {"float_precision": "round_trip"} if _pandas_version() < (3, 1) else {}

# Rows pandas looks at to tell numeric columns from the rest in a CSV file.
_CSV_SNIFF_ROWS = 200

# The cells pandas reads as missing by default.  Ids are read without them ("NA" is a country
# code, "None" a word, "nan" an id like any other: ids are text exactly as written) and only
# an empty id cell is missing; embedding cells keep them (a missing value is reported there).
_DEFAULT_NA = [
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
    "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
]  # fmt: skip

# One header field that is a number: a plain decimal or scientific literal (a decimal comma
# where the separator is not a comma).  "nan" and "inf" are names, not numbers, here.
_NUMBER = re.compile(r"\s*[-+]?(?:\d+(?:[.,]\d*)?|[.,]\d+)(?:[eE][-+]?\d+)?\s*")


def _headerless(header_line, sep):
    """Whether a CSV file's first line is a data row: every field a number.

    Such a file was written without a header (``np.savetxt``, ``df.to_csv(header=False)``);
    reading its first line as column names would silently lose a row.  A header of real
    column names always has a name that is not a number, except pandas' default names
    ``0, 1, 2, ...``, which stay a header.
    """
    fields = header_line.decode("utf-8-sig", errors="replace").rstrip("\r").split(sep)
    fields = [f.strip().strip('"') for f in fields]
    if fields == [str(j) for j in range(len(fields))]:
        # "0,1,2,...": the column names pandas gives a frame without names
        # (pd.DataFrame(X).to_csv(index=False)), a header.
        return False
    return bool(fields) and all(_NUMBER.fullmatch(f) for f in fields)


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
        if spec.prefix or spec.pattern or len(values) < 3:
            return None
        if not pd.api.types.is_integer_dtype(values) or (np.diff(values.to_numpy()) != 1).any():
            return None
        kind = "named"
    warnings.warn(
        f"{path}: the first column {name!r} is the {kind} pandas index that df.to_csv() "
        "writes, not an embedding dimension; it is ignored (write with index=False to "
        "leave it out)",
        stacklevel=3,
    )
    return name


class CsvReader(TableReader):
    """CSV through pandas.  Ids are read as text, exactly as written in the file.

    ``.csv.gz``, ``.csv.bz2`` and ``.csv.zst`` are decompressed on the fly by pyarrow.
    The separator is taken from the header line: a comma, or a semicolon or tab when the
    header has no comma (spreadsheet exports in many locales), and then a decimal comma
    (``0,5``) is recognised too.  A file whose first line is all numbers has no header
    (``np.savetxt``, ``df.to_csv(header=False)``): every line is a data row, the columns are
    named ``"0"``, ``"1"``, ... and the reader warns once.  Only an empty id cell is a
    missing id; ``NA``, ``null``, ``None`` or ``nan`` are ids like any other.
    """

    format = "csv"

    def __init__(self, path, spec, dtype, extra_columns):
        super().__init__(path, spec, dtype, extra_columns)
        self._codec = csv_compression(path)
        self._names = None
        self._sep, self._decimal = self._sniff_separator(), "."
        if self._headerless:
            width = len(self._first_line.split(self._sep.encode()))
            self._names = [str(j) for j in range(width)]
            if spec.id_column is not None:
                raise InputError(
                    f"has no header line (its first line is {width} numbers), so no id "
                    f"column {spec.id_column!r}; add a header line naming the columns",
                    path=path,
                )
            warnings.warn(
                f"{path}: no header line (the first line is all numbers): every line is "
                f"read as a data row, the {width} columns named '0' to '{width - 1}'",
                stacklevel=3,
            )
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
        self.index_column = (
            None if self._names else _pandas_index_column(sample, columns, spec, path)
        )
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
        return f"line {row + (1 if self._names else 2)}"

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
        header = self._first_line = head.split(b"\n", 1)[0].rstrip(b"\r")
        if b"," in header:
            sep = ","
        else:
            counts = {";": header.count(b";"), "\t": header.count(b"\t")}
            best = max(counts, key=counts.get)
            sep = best if counts[best] else ","
        self._headerless = bool(header.strip()) and _headerless(header, sep)
        return sep

    def _read(self, **kwargs):
        stream = self._open()
        try:
            if self._names is not None:
                kwargs = {"header": None, "names": self._names, **kwargs}
            result = pd.read_csv(
                self.path if stream is None else stream,
                sep=self._sep,
                decimal=self._decimal,
                **_EXACT_FLOATS,
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
        usecols = self._usecols()
        # Ids as written: only an empty cell is missing; every other column keeps pandas'
        # missing-value markers (a missing embedding value is reported where it is).
        na_values = {c: [""] if c == self.id_column else _DEFAULT_NA for c in usecols}
        reader = self._read(
            usecols=usecols,
            dtype=dtypes,
            chunksize=batch_size,
            keep_default_na=False,
            na_values=na_values,
        )
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
            rows.append(row)
        self._check_list_lengths([row.size for row in rows], start, ids)
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

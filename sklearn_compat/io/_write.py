"""Writing embedding tables so that a file appears whole or not at all.

Every output is first written to a hidden temporary file next to the destination (same
directory, hence same file system) and renamed over it only when complete, with
``os.replace``, which is atomic on POSIX and Windows.  On any error, or Ctrl-C, the
temporary file is removed and the destination is untouched.  An existing destination is
refused unless ``force=True``.
"""

import csv
import glob
import io
import os
import signal
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._common import STORES, InputError, csv_compression, is_pattern, table_format

__all__ = ["AtomicOutput", "OutputLayout", "TableWriter", "write_table"]

# Rows per slice handed to pyarrow's Parquet writer (see _ParquetSink.write).
_WRITE_STEP = 4096
# Spare digits kept in a .npy header so the row count can be written once it is known.
_NPY_SHAPE_DIGITS = 19


class AtomicOutput:
    """A temporary file that becomes ``path`` on :meth:`commit` and vanishes on :meth:`abort`.

    Parameters
    ----------
    path : str or path-like
        The destination.
    force : bool, default=False
        Allow replacing an existing file.
    inputs : sequence of path-like
        Files the command reads; writing over one of them is refused.

    Notes
    -----
    The checks (existing file, missing or read-only directory) run in the constructor, so
    a command can open its outputs before doing any work and fail early.

    Examples
    --------
    >>> from pathlib import Path
    >>> from tempfile import TemporaryDirectory
    >>> from sklearn_compat.io import AtomicOutput
    >>> with TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "out.txt"
    ...     with AtomicOutput(path) as out:
    ...         _ = out.tmp.write_text("done")
    ...         before = path.exists()
    ...     print(before, path.read_text())
    False done
    """

    def __init__(self, path, *, force=False, inputs=()):
        self.path = Path(path)
        self.force = force
        where = str(path)
        if self.path.is_dir():
            raise InputError("is a directory", path=where)
        for other in inputs:
            if Path(other).exists() and self.path.exists() and os.path.samefile(other, path):
                raise InputError("is also an input of this command", path=where)
        if self.path.exists() and not force:
            raise InputError("already exists (pass --force to overwrite it)", path=where)
        parent = self.path.parent
        if not parent.is_dir():
            raise InputError(f"directory {str(parent)!r} does not exist", path=where)
        # Created and registered with interrupts held back, so that a Ctrl-C or SIGTERM
        # cannot leave a file that nobody knows to remove (see remove_pending_temporaries).
        with _signals_deferred():
            try:
                # The process id in the name tells a later run which leftovers are stale.
                fd, tmp = tempfile.mkstemp(
                    dir=parent, prefix=f"{_temp_prefix(self.path)}{os.getpid()}.", suffix=".part"
                )
            except OSError as exc:
                raise InputError(f"cannot write: {exc.strerror}", path=where) from None
            os.close(fd)
            self.tmp = Path(tmp)
            self._done = False
            _PENDING.add(self.tmp)

    def commit(self):
        """Move the finished temporary file to the destination."""
        if self._done:
            return
        if self.path.exists() and not self.force:
            self.abort()
            raise InputError(
                "was created by someone else while this command ran; nothing written",
                path=str(self.path),
            )
        # mkstemp makes the file private (0600); give it the permissions a normal
        # ``open`` would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o666 & ~umask)
        os.replace(self.tmp, self.path)
        self._done = True
        _PENDING.discard(self.tmp)
        remove_stale_temporaries(self.path)

    def abort(self):
        """Remove the temporary file; the destination is left as it was."""
        if self._done:
            return
        self._done = True
        try:
            self.tmp.unlink()
        except FileNotFoundError:
            pass
        _PENDING.discard(self.tmp)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False


# Temporary files of this process not yet committed or aborted.
_PENDING = set()


def remove_pending_temporaries():
    """Remove every temporary file of this process that was neither committed nor aborted.

    For an interrupt that arrives where no ``abort`` runs (e.g. while a writer is still
    being constructed); the command line calls it when Ctrl-C or SIGTERM stops a command.
    """
    for tmp in list(_PENDING):
        try:
            tmp.unlink()
        except OSError:
            pass
        _PENDING.discard(tmp)


@contextmanager
def _signals_deferred():
    """Hold SIGINT and SIGTERM back inside the block (main thread); the handler of the
    first one received runs when it ends.

    The Python-level handlers are swapped for ones that only note the signal, rather than
    the signals being blocked: a process-directed signal blocked in the main thread is
    still delivered to any other thread (torch's, Lance's), and Python then runs the
    handler in the main thread inside the block all the same.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []

    def note(signum, frame):
        received.append(signum)

    previous = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if received:
            handler = previous[received[0]]
            if callable(handler):
                handler(received[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(received[0])


def _temp_prefix(path):
    return f".{path.name}."


def remove_stale_temporaries(path):
    """Delete temporary files of ``path`` left by runs that were killed (SIGKILL, a crash).

    Only ``.NAME.PID.*.part`` files whose process no longer runs on this machine are
    removed; another live run's file is left alone.  Returns the paths removed.
    """
    path = Path(path)
    prefix = _temp_prefix(path)
    removed = []
    for candidate in path.parent.glob(f"{glob.escape(prefix)}*.part"):
        pid = candidate.name[len(prefix) :].split(".", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _is_running(int(pid)):
            continue
        try:
            candidate.unlink()
            removed.append(candidate)
        except OSError:
            pass  # gone already, or not ours to delete: leave it
    return removed


def _is_running(pid):
    if os.name == "nt":
        return True  # os.kill would terminate it there: never guess
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


@dataclass
class OutputLayout:
    """The shape of an output table.

    Parameters
    ----------
    form : {"columns", "list", "array"}
        One numeric column per dimension, one list-valued column, or (``.npy`` only) a
        plain 2-d array whose row numbers are the ids.
    width : int
        Embedding dimension.
    id_column : str or None
        Name of the id column (None: no ids are written).
    vector_columns : list of str, optional
        Column names of the "columns" form (default ``dim_0 ... dim_{width-1}``).
    list_column : str, default="embedding"
        Column name of the "list" form.
    id_dtype : numpy dtype, optional
        Fixed id dtype for ``.npy`` output (needed before the first batch is written).

    Examples
    --------
    >>> from sklearn_compat.io import OutputLayout
    >>> OutputLayout("columns", width=3, id_column="id").vector_columns
    ['dim_0', 'dim_1', 'dim_2']
    """

    form: str
    width: int
    id_column: str | None = None
    vector_columns: list | None = None
    list_column: str = "embedding"
    id_dtype: object = None

    def __post_init__(self):
        if self.form == "columns" and self.vector_columns is None:
            self.vector_columns = [f"dim_{i}" for i in range(self.width)]
        if self.form == "columns" and len(self.vector_columns) != self.width:
            raise ValueError("vector_columns must have one name per dimension")
        if self.form not in ("columns", "list", "array"):
            raise ValueError(f"unknown table form {self.form!r}")


class TableWriter:
    """Write an embedding table batch by batch, atomically.

    Parameters
    ----------
    path : str or path-like
        Destination; the format comes from the name.
    layout : OutputLayout
        The columns to write: ids, embedding layout and width.
    force : bool, default=False
        Allow replacing an existing file.
    inputs : sequence of path-like
        Files being read (never overwritten).

    Notes
    -----
    Use as a context manager: the file is committed when the block ends normally and
    discarded when it raises.

    Examples
    --------
    >>> import numpy as np
    >>> from pathlib import Path
    >>> from tempfile import TemporaryDirectory
    >>> from sklearn_compat.io import OutputLayout, TableWriter, read_table
    >>> with TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "out.parquet"
    ...     with TableWriter(path, OutputLayout("list", width=2, id_column="id")) as writer:
    ...         writer.write(np.array([1, 2]), np.ones((2, 2)))
    ...         writer.write(np.array([3]), np.zeros((1, 2)))
    ...     print(read_table(path)[1].X.shape)
    (3, 2)
    """

    def __init__(self, path, layout, *, force=False, inputs=()):
        if is_pattern(path):
            raise InputError("an output must be one file name, not a pattern", path=path)
        self.format = table_format(path)
        if layout.form == "array" and self.format != "npy":
            layout = OutputLayout(
                "columns", layout.width, layout.id_column, id_dtype=layout.id_dtype
            )
        if self.format == "npy" and layout.id_column is not None and layout.form == "array":
            layout.form = "list"
        self.layout = layout
        self.path = str(path)
        self.n_rows = 0
        if self.format in STORES:
            # A store's sink (Store.sink) stages the table and moves it into place itself.
            from ._stores import open_store

            self._impl = self._out = open_store(self.path).sink(layout, force=force)
            return
        self._out = AtomicOutput(path, force=force, inputs=inputs)
        if self.format == "csv":
            self._impl = _CsvSink(self._out.tmp, layout, csv_compression(path))
        else:
            sink = {"parquet": _ParquetSink, "npy": _NpySink}[self.format]
            self._impl = sink(self._out.tmp, layout)

    def write(self, ids, Z):
        """Append rows: ``ids`` (n,) or None, ``Z`` (n, width)."""
        Z = np.asarray(Z)
        if Z.ndim != 2 or Z.shape[1] != self.layout.width:
            raise ValueError(f"expected rows of width {self.layout.width}, got {Z.shape}")
        if self.layout.id_column is not None and ids is None:
            raise ValueError("this layout has an id column but no ids were given")
        try:
            self._impl.write(ids, Z)
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror or exc}", path=self.path) from None
        self.n_rows += Z.shape[0]

    def close(self):
        """Finish the file and move it into place."""
        try:
            self._impl.close()
        except OSError as exc:
            self._out.abort()
            raise InputError(f"cannot write: {exc.strerror or exc}", path=self.path) from None
        self._out.commit()

    def abort(self):
        """Discard everything written; the destination is untouched."""
        try:
            self._impl.close()
        except Exception:  # noqa: BLE001 - the output is thrown away anyway
            pass
        self._out.abort()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


def write_table(path, ids, Z, layout, *, force=False, inputs=()):
    """Write a whole table atomically (see :class:`TableWriter`).

    Parameters
    ----------
    path : str or path-like
        ``.csv``, ``.parquet`` (``.pq``) or ``.npy``.
    ids : array-like of shape (n,) or None
        The ids (None when ``layout`` has no id column).
    Z : ndarray of shape (n, layout.width)
        The embeddings.
    layout : OutputLayout
        Form (columns or list), width and column names.
    force : bool, default=False
        Replace an existing file.
    inputs : sequence of path-like, default=()
        Files the output must not overwrite (the inputs of the job).

    Returns
    -------
    None

    Examples
    --------
    >>> import numpy as np
    >>> from pathlib import Path
    >>> from tempfile import TemporaryDirectory
    >>> from sklearn_compat.io import OutputLayout, write_table
    >>> with TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "out.csv"
    ...     layout = OutputLayout("columns", width=2, id_column="id")
    ...     write_table(path, np.array(["a", "b"]), np.eye(2), layout)
    ...     print(path.read_text().splitlines()[0])
    id,dim_0,dim_1
    """
    with TableWriter(path, layout, force=force, inputs=inputs) as writer:
        writer.write(ids, Z)


class _CsvSink:
    """CSV through pyarrow's writer, optionally compressed (``.csv.gz``, ``.bz2``, ``.zst``).

    Floats are written as the shortest text that reads back to the same float32 or
    float64 value; pyarrow formats them in C++ in slices of rows, so memory stays bounded
    by the batch.  Names and ids are quoted only when they need it (a comma, quote or
    line break), as pandas writes them; the list form's ``"[x, y, ...]"`` always needs it.
    """

    def __init__(self, tmp, layout, codec=None):
        import pyarrow as pa

        self.layout = layout
        self.raw = pa.OSFile(str(tmp), "wb")
        self.stream = pa.CompressedOutputStream(self.raw, codec) if codec else self.raw
        self.columns = ([] if layout.id_column is None else [layout.id_column]) + (
            list(layout.vector_columns) if layout.form == "columns" else [layout.list_column]
        )
        header = io.StringIO()
        csv.writer(header, lineterminator="\n").writerow(self.columns)
        self.stream.write(header.getvalue().encode("utf-8"))

    def _arrays(self, ids, Z):
        import pyarrow as pa
        import pyarrow.compute as pc

        lay = self.layout
        arrays = []
        if lay.id_column is not None:
            ids = np.asarray(ids)
            arrays.append(pa.array(ids.astype(str) if ids.dtype.kind == "S" else ids))
        if lay.form == "columns":
            # Contiguous columns of Z.T become Arrow arrays without another copy.
            arrays += [pa.array(col) for col in np.ascontiguousarray(Z.T)]
        else:
            text = pc.cast(pa.array(np.ascontiguousarray(Z).reshape(-1)), pa.string())
            offsets = pa.array(np.arange(0, Z.size + 1, max(1, Z.shape[1]), dtype=np.int32))
            lists = pa.ListArray.from_arrays(offsets, text)
            joined = pc.binary_join(lists, ", ")
            arrays.append(pc.binary_join_element_wise("[", joined, "]", ""))
        return arrays

    def write(self, ids, Z):
        import pyarrow as pa
        import pyarrow.csv as pacsv

        arrays = self._arrays(ids, Z)
        batch = pa.RecordBatch.from_arrays(arrays, names=self.columns)
        # pyarrow's "needed" quotes every text value; "none" quotes nothing and refuses
        # values that need quotes, so it is used when no text value needs them.
        plain = self.layout.form == "columns" and not any(
            _needs_quotes(a) for a in arrays[: 1 if self.layout.id_column else 0]
        )
        options = pacsv.WriteOptions(
            include_header=False, quoting_style="none" if plain else "needed"
        )
        pacsv.write_csv(batch, self.stream, write_options=options)

    def close(self):
        self.stream.close()
        if self.raw is not self.stream:
            self.raw.close()


def _needs_quotes(array):
    """Whether a text column holds a value that CSV must quote."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return False
    return bool(pc.any(pc.match_substring_regex(array, '[,"\\r\\n]')).as_py())


class _ParquetSink:
    def __init__(self, tmp, layout):
        self.tmp = tmp
        self.layout = layout
        self.writer = None

    def _schema(self, ids, Z):
        import pyarrow as pa

        lay = self.layout
        value = pa.from_numpy_dtype(Z.dtype)
        fields = []
        if lay.id_column is not None:
            id_type = (
                pa.from_numpy_dtype(np.dtype(lay.id_dtype))
                if lay.id_dtype is not None and np.dtype(lay.id_dtype).kind in "iuf"
                else pa.array(np.asarray(ids)[:1]).type
            )
            if pa.types.is_null(id_type):
                id_type = pa.string()
            fields.append(pa.field(lay.id_column, id_type))
        if lay.form == "columns":
            fields += [pa.field(name, value) for name in lay.vector_columns]
        else:
            fields.append(pa.field(lay.list_column, pa.list_(value, lay.width)))
        return pa.schema(fields)

    def write(self, ids, Z):
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.writer is None:
            self.schema = self._schema(ids, Z)
            # Dictionary encoding never pays on float embeddings (nearly every value is
            # distinct) and doubles the write time; keep it for the ids only.
            ids_only = [] if self.layout.id_column is None else [self.layout.id_column]
            self.writer = pq.ParquetWriter(self.tmp, self.schema, use_dictionary=ids_only)
        lay = self.layout
        arrays = []
        if lay.id_column is not None:
            arrays.append(pa.array(np.asarray(ids), type=self.schema.field(0).type))
        if lay.form == "columns":
            # Column j of Z is row j of Z.T; a contiguous transpose makes each one a
            # zero-copy Arrow buffer.
            Zt = np.ascontiguousarray(Z.T)
            arrays += [pa.array(col) for col in Zt]
        else:
            flat = pa.array(np.ascontiguousarray(Z).reshape(-1))
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, lay.width))
        # One row group per batch, encoded in slices of _WRITE_STEP rows: pyarrow's
        # writer holds several times the slice it encodes (levels, list offsets).
        n = Z.shape[0]
        steps = range(0, max(n, 1), _WRITE_STEP)
        columns = [
            pa.chunked_array([a.slice(i, _WRITE_STEP) for i in steps], a.type) for a in arrays
        ]
        table = pa.Table.from_arrays(columns, schema=self.schema)
        self.writer.write_table(table, row_group_size=max(n, 1))

    def close(self):
        import pyarrow.parquet as pq

        if self.writer is None:
            # No rows at all: still write a valid, empty table with the right columns.
            dtype = np.float32
            ids = np.empty(0, dtype=self.layout.id_dtype or object)
            self.schema = self._schema(ids, np.empty((0, self.layout.width), dtype))
            pq.write_table(self.schema.empty_table(), self.tmp)
            return
        self.writer.close()


class _NpySink:
    """Writes the .npy header with room for the row count, patched in :meth:`close`."""

    def __init__(self, tmp, layout):
        self.layout = layout
        self.f = open(tmp, "wb")  # noqa: SIM115
        self.dtype = None
        self.n = 0
        self.header_len = None

    def _dtype(self, ids, Z):
        lay = self.layout
        if lay.form == "array":
            return Z.dtype
        fields = []
        if lay.id_column is not None:
            id_dtype = lay.id_dtype
            if id_dtype is None:
                id_dtype = np.asarray(ids).dtype
                if id_dtype.kind == "O":
                    id_dtype = np.asarray(ids, dtype=str).dtype
            fields.append((lay.id_column, np.dtype(id_dtype)))
        if lay.form == "list":
            fields.append((lay.list_column, Z.dtype, (lay.width,)))
        else:
            fields += [(name, Z.dtype) for name in lay.vector_columns]
        return np.dtype(fields)

    def _header(self, n):
        fmt = np.lib.format
        shape = (n, self.layout.width) if self.layout.form == "array" else (n,)
        text = repr(
            {"descr": fmt.dtype_to_descr(self.dtype), "fortran_order": False, "shape": shape}
        )
        return text

    def _write_header(self, n):
        text = self._header(n)
        if self.header_len is None:
            room = len(self._header(10**_NPY_SHAPE_DIGITS))
            # magic (6) + version (2) + length field (2 or 4) + text + "\n", to 64 bytes.
            prefix = 10 if room + 11 < 65535 else 12
            self.header_len = -(-(prefix + room + 1) // 64) * 64 - prefix
            self.version = b"\x01\x00" if prefix == 10 else b"\x02\x00"
        body = (text.ljust(self.header_len - 1) + "\n").encode("latin1")
        size = len(body).to_bytes(2 if self.version == b"\x01\x00" else 4, "little")
        self.f.seek(0)
        self.f.write(b"\x93NUMPY" + self.version + size + body)

    def write(self, ids, Z):
        if self.dtype is None:
            self.dtype = self._dtype(ids, Z)
            self._write_header(0)
        lay = self.layout
        if lay.form == "array":
            np.ascontiguousarray(Z, dtype=self.dtype).tofile(self.f)
        else:
            rec = np.empty(Z.shape[0], dtype=self.dtype)
            if lay.id_column is not None:
                id_field = self.dtype[lay.id_column]
                values = np.asarray(ids)
                cast = values.astype(id_field)
                if id_field.kind in "US" and (values.astype(str) != cast.astype(str)).any():
                    raise InputError(f"an id is longer than the id field ({id_field})")
                rec[lay.id_column] = cast
            if lay.form == "list":
                rec[lay.list_column] = Z
            else:
                for j, name in enumerate(lay.vector_columns):
                    rec[name] = Z[:, j]
            rec.tofile(self.f)
        self.n += Z.shape[0]

    def close(self):
        if self.f.closed:
            return
        if self.dtype is None:
            ids = np.empty(0, dtype=self.layout.id_dtype or np.int64)
            self.dtype = self._dtype(ids, np.empty((0, self.layout.width), np.float32))
        self._write_header(self.n)
        self.f.close()

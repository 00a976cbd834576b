"""Parquet embedding tables: one file, a directory of part files or a glob pattern."""

import glob
import os
import re

import numpy as np

from ._arrow import ArrowTableReader
from ._common import InputError, is_pattern, table_format
from ._table_reader import Batch

__all__ = ["ParquetReader"]

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
# Rows per step when reading a list column (see ParquetReader._batches).
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


class ParquetReader(ArrowTableReader):
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
        metadata = sorted((_index_columns(schema) | partition_keys) - {spec.id_column})
        self.metadata_columns = metadata
        self._set_layout(schema, spec, metadata)
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

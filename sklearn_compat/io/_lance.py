"""LanceDB tables (embedded): ``DIR/NAME.lance`` is the table ``NAME`` of the database
``DIR`` (``lancedb.connect(DIR).open_table(NAME)``).

Reading goes through Lance's scanner at the version the table had when it was opened, in
bounded batches; the embedding is the fixed-size-list column (or the one ``vector_column``
names).  Writing (:class:`LanceMigration`) appends each batch as its own commit to a
staging table ``DIR/NAME.lance.partial``, so a run that is killed leaves only whole
batches there, which ``resume`` continues from; the staging table becomes ``NAME`` (a
new table, or a new version of the input table with ``replace``) only when every row is
in it and checked.  Lance keeps the versions a table had: :func:`rollback_lance`
restores the one before a migration.
"""

import json
import os
import shlex
import shutil
import time

import numpy as np

from ._arrow import ArrowTableReader
from ._common import InputError, check_same_job
from ._ownership import OWNER_KEY, OutputLock

__all__ = [
    "LEDGER_KEY",
    "LanceReader",
    "LanceMigration",
    "LanceSink",
    "rollback_lance",
    "MIGRATION_KEY",
    "read_ledger",
]

# Schema metadata key holding what a staged or finished migration was (JSON).
MIGRATION_KEY = b"sklearn_compat.migration"
# Schema metadata key of the table's ledger (a JSON list of entries, see
# sklearn_compat.io._stores.ledger).
LEDGER_KEY = "sklearn_compat.ledger"
# Rows per read of a row range (see LanceReader.record_batches).
_READ_ROWS = 4096
# Name ending of the staging table beside the destination.
STAGING_SUFFIX = ".partial"


def import_lance():
    try:
        import lance
    except ImportError:
        raise InputError(
            "LanceDB tables need the lancedb extra: "
            "pip install 'sklearn-embedding-compat[lancedb]'"
        ) from None
    return lance


def _message(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def open_dataset(path, version=None):
    """The Lance dataset at ``path`` (an InputError naming the path when it is not one)."""
    lance = import_lance()
    if not os.path.isdir(path):
        raise InputError("no such LanceDB table (a DIR/NAME.lance directory)", path=path)
    try:
        return lance.dataset(path, version=version)
    except Exception as exc:  # noqa: BLE001 - Lance raises several types for a bad table
        raise InputError(f"not a readable LanceDB table: {_message(exc)}", path=path) from None


def migration_info(dataset):
    """The migration recorded in a table's schema metadata, or None."""
    raw = (dataset.schema.metadata or {}).get(MIGRATION_KEY)
    return None if raw is None else json.loads(raw)


def list_indices(dataset):
    """``dataset.list_indices()`` (name, type, fields of each index) without the
    deprecation warning pylance 14 gives it (its replacement does not name the type)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return dataset.list_indices()


def read_ledger(dataset):
    """The ledger a table version records, oldest first (a table written by the first
    migrations, which recorded only their job, reads as a one-entry ledger)."""
    from ._stores.ledger import decode

    entries = decode((dataset.schema.metadata or {}).get(LEDGER_KEY.encode()))
    if entries is not None:
        return entries
    job = migration_info(dataset)
    return [] if not job else [_legacy_entry(job)]


def _legacy_entry(job):
    """A ledger entry from the job dict a migration recorded."""
    if job.get("action"):
        return {k: v for k, v in job.items() if k not in ("input_version", "finished")}
    action = "replace" if "previous_version" in job else "transform"
    return {
        "action": action,
        "column": job.get("column") or job.get("vector_column"),
        "model": {"sha256": job.get("model_sha256"), "path": job.get("model_path")},
        "input": job.get("input"),
        "rows": job.get("rows"),
        "time": job.get("finished"),
        **({"previous": job["previous_version"]} if "previous_version" in job else {}),
    }


def _ledger_value(entries):
    return json.dumps(entries, separators=(",", ":"))


def _check_job(job, info, staging, target):
    """Resume ownership: the staged job must be this run's (ledger entries are compared
    by :func:`~sklearn_compat.io._stores.ledger.check_resume`)."""
    if job.get("action"):
        from ._stores.ledger import check_resume

        check_resume(job, info, staging, target)
    else:
        check_same_job(job, info, staging, target)


def _owner(dataset):
    """The owner token a staging table records (see :mod:`._ownership`), or None."""
    raw = (dataset.schema.metadata or {}).get(OWNER_KEY.encode())
    return None if raw is None else raw.decode()


def lock_path(path):
    """The lock file of the LanceDB table ``path`` (beside it, hidden)."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.sklearn-compat.lock")


def finished_at():
    """Now, in UTC, as a migration's metadata records when it finished."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class LanceReader(ArrowTableReader):
    """A LanceDB table read at a fixed version, batch by batch.

    Attributes
    ----------
    version : int
        The table version read (pinned when opened: later writes are not seen).
    dataset : lance.LanceDataset
    """

    format = "lance"

    def __init__(self, path, spec, dtype, extra_columns):
        super().__init__(path.rstrip("/" + os.sep), spec, dtype, extra_columns)
        self.dataset = open_dataset(self.path)
        self.version = self.dataset.version
        self._set_layout(self.dataset.schema, spec)
        self.n_rows = self.dataset.count_rows()

    def _columns_to_read(self):
        cols = [] if self.id_column is None else [self.id_column]
        cols += list(self.vector_columns or [self.list_column])
        return cols + [c for c in self.extra_columns if c not in cols]

    def record_batches(self, batch_size, offset=0, columns=None):
        """Arrow record batches of ``batch_size`` rows (the last may be shorter) from row
        ``offset`` on, in the table's order."""
        import pyarrow as pa

        columns = columns or self._columns_to_read()
        # Lance's scanner holds several times its batch in buffers (240 MB for batches of
        # 16k rows of 256 floats); reading row ranges of _READ_ROWS rows and gathering
        # them holds about one batch.
        step = min(batch_size, _READ_ROWS)
        for start in range(offset, self.n_rows, batch_size):
            stop = min(start + batch_size, self.n_rows)
            parts = [
                self.dataset.to_table(columns=columns, offset=at, limit=min(step, stop - at))
                for at in range(start, stop, step)
            ]
            table = pa.concat_tables(parts).combine_chunks()
            del parts
            yield from table.to_batches(max_chunksize=batch_size)

    def _batches(self, batch_size, offset=0):
        start = offset
        try:
            for rb in self.record_batches(batch_size, offset):
                yield self._to_batch(rb, start)
                start += rb.num_rows
        except InputError:
            raise
        except OSError as exc:
            raise InputError(
                f"cannot read rows after row {start}: {_message(exc)}", path=self.path
            ) from None

    def migration(self):
        """What the sklearn-compat migration that wrote this table recorded (its job:
        model digest, input, when it finished...), or None."""
        return migration_info(self.dataset)

    def id_dtype(self):
        if self.id_column is None:
            return np.dtype(np.int64)
        ids = self.dataset.to_table(columns=[self.id_column]).column(0).to_numpy()
        if ids.dtype.kind in "iu":
            return ids.dtype
        return np.asarray(ids.astype(str)).dtype if len(ids) else np.dtype("U1")


class LanceMigration:
    """Write the mapped rows of a :class:`LanceReader` into a LanceDB table, resumably.

    Parameters
    ----------
    reader : LanceReader
        The input table (read at its pinned version; never modified unless ``replace``).
    output : str or None
        ``DIR/NAME.lance`` of a new table; None with ``replace``.
    width : int
        Width of the mapped vectors.
    column : str
        Name of the output's vector column (a fixed-size list of float32).
    job : dict
        What the migration is (input, version, model digest...): a staged table is
        resumed only by the same job.
    replace : bool
        Write the result as a new version of the input table.
    resume : bool
        Continue a staged migration of the same job.
    force : bool
        Replace an existing output table.
    """

    def __init__(self, reader, output, width, column, job, *, replace=False, resume=False,
                 force=False):  # fmt: skip
        self.lance = import_lance()
        import pyarrow as pa

        self.pa = pa
        self.reader = reader
        self.replace = replace
        self.target = reader.path if replace else output.rstrip("/" + os.sep)
        self.staging = self.target + STAGING_SUFFIX
        self.job = dict(job, rows=reader.n_rows, input_version=reader.version)
        if (
            not replace
            and os.path.exists(self.target)
            and os.path.samefile(self.target, reader.path)
        ):
            raise InputError(
                "is also the input; pass --replace (not --output) to migrate a table in place",
                path=self.target,
            )
        if not replace and os.path.exists(self.target) and not force:
            raise InputError("already exists (pass --force to replace it)", path=self.target)
        if not os.path.isdir(os.path.dirname(os.path.abspath(self.target))):
            raise InputError("the database directory does not exist", path=self.target)
        self.lock = OutputLock.acquire(lock_path(self.target), self.target)
        try:
            self.schema = self._schema(width, column)
            self.done = self._staged_rows(resume)
        except BaseException:
            self.lock.release()
            raise

    def release(self):
        """Give up the output's lock (after finishing, failing or being interrupted)."""
        self.lock.release()

    # ------------------------------------------------------------------ set-up
    def _schema(self, width, column):
        pa, reader = self.pa, self.reader
        used = set(reader.vector_columns or [reader.list_column])
        fields = [f for f in reader.dataset.schema if f.name not in used and f.name != column]
        position = reader.columns.index(reader.list_column or reader.vector_columns[0])
        vector = pa.field(column, pa.list_(pa.float32(), width))
        fields.insert(min(position, len(fields)), vector)
        self.column = column
        # Part of the job: a staging resumed with another --output-column is refused by
        # name, not by Lance's schema mismatch.
        self.job["column"] = column
        self.passthrough = [f.name for f in fields if f.name != column]
        return pa.schema(fields, metadata={MIGRATION_KEY: json.dumps(self.job).encode()})

    def _staged_rows(self, resume):
        """Rows already in the staging table (0 when starting afresh)."""
        if not os.path.exists(self.staging):
            return 0
        # This run holds the output's lock, so the run that staged these rows has ended.
        staged = open_dataset(self.staging)
        done = staged.count_rows()
        if not resume:
            raise InputError(
                f"an interrupted migration left {done} of {self.job['rows']} rows in "
                f"{self.staging}; pass --resume to finish it (or delete that directory to "
                "start over)",
                path=self.target,
            )
        info = migration_info(staged) or {}
        _check_job(self.job, info, self.staging, self.target)
        staged.update_schema_metadata({OWNER_KEY: self.lock.token})  # adopted by this run
        return done

    # ------------------------------------------------------------------ writing
    def batches(self, batch_size):
        """``(Batch, record batch)`` pairs of the rows still to migrate."""
        columns = self.reader.columns
        start = self.done
        for rb in self.reader.record_batches(batch_size, self.done, columns=columns):
            batch = self.reader._to_batch(rb, start)
            self.reader._check(batch)
            start += rb.num_rows
            yield batch, rb

    def write(self, rb, Z):
        """Append one mapped batch as one commit of the staging table."""
        pa = self.pa
        Z = np.ascontiguousarray(Z, dtype=np.float32)
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(Z.reshape(-1)), Z.shape[1])
        arrays = [vectors if f.name == self.column else rb.column(f.name) for f in self.schema]
        table = pa.Table.from_batches([pa.RecordBatch.from_arrays(arrays, schema=self.schema)])
        self._append(table)
        self.done += len(Z)

    def _append(self, table):
        if os.path.exists(self.staging):
            self.lance.write_dataset(table, self.staging, schema=self.schema, mode="append")
            return
        staged = self.lance.write_dataset(table, self.staging, schema=self.schema, mode="create")
        staged.update_schema_metadata({OWNER_KEY: self.lock.token})

    def finish(self, log):
        """Check the staged table and move it into place; returns a line for the log."""
        staged = self._verified()
        # Only this run's own staging is promoted (see _ownership): never one another run
        # wrote or took over.
        self.lock.check(_owner(staged), self.staging)
        if not self.replace:
            done = json.dumps(dict(self.job, finished=finished_at()))
            final = {MIGRATION_KEY.decode(): done}
            if self.job.get("action"):  # the new table's ledger: the input's, and this
                entries = read_ledger(self.reader.dataset) + [self._entry()]
                final[LEDGER_KEY] = _ledger_value(entries)
            staged.replace_schema_metadata(final)  # the owner token goes
            self._swap_in()
            # The new table serves the input's queries: it gets the input's indexes.
            indexes = _rebuild_indices(
                open_dataset(self.target),
                list_indices(self.reader.dataset),
                self.reader.dataset,
                new_table=True,
            )
            return f"wrote the LanceDB table {self.target} ({staged.count_rows()} rows){indexes}"
        return self._replace_input(staged, log)

    def _entry(self, **extra):
        """This migration's ledger entry, as it finishes."""
        entry = {k: v for k, v in self.job.items() if k != "input_version"}
        entry.update(extra, rows=self.reader.n_rows, time=finished_at())
        return entry

    def _verified(self):
        """The staging table, once every row is in it once, in the input's order."""
        if not os.path.exists(self.staging):  # an empty input: an empty table
            self._append(self.schema.empty_table())
        staged = open_dataset(self.staging)
        n = staged.count_rows()
        if n != self.reader.n_rows:
            raise InputError(
                f"the staged table has {n} rows, the input {self.reader.n_rows}; nothing replaced",
                path=self.staging,
            )
        key = self.reader.id_column
        if key is not None:
            mine = staged.to_batches(columns=[key], batch_size=1 << 16)
            theirs = self.reader.record_batches(1 << 16, columns=[key])
            if not _same_column(mine, theirs):
                raise InputError(
                    f"the staged table's {key!r} column differs from the input's; nothing "
                    "replaced (delete the staging table and run again)",
                    path=self.staging,
                )
        return staged

    def _swap_in(self):
        old = None
        if os.path.exists(self.target):  # --force: the old table goes only once the new is whole
            old = self.target + ".replaced"
            os.rename(self.target, old)
        os.rename(self.staging, self.target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def _replace_input(self, staged, log):
        latest = open_dataset(self.target)
        previous = self.reader.version
        if latest.version != previous:
            raise InputError(
                f"the table changed while it was migrated (version {previous} -> "
                f"{latest.version}); nothing replaced: delete {self.staging} and run again",
                path=self.target,
            )
        info = dict(self.job, previous_version=previous, finished=finished_at())
        metadata = {MIGRATION_KEY: json.dumps(info).encode()}
        if self.job.get("action"):  # the table's ledger, with this migration, in its commit
            entries = read_ledger(latest) + [self._entry(previous=previous)]
            metadata[LEDGER_KEY.encode()] = _ledger_value(entries).encode()
        schema = self.schema.with_metadata(metadata)
        indices = list_indices(latest)  # an Overwrite commit keeps none of them
        # No copy: the staged data files move into the table's data directory and one
        # Overwrite commit makes them its next version (Lance refuses it if another writer
        # committed since ``previous``).  The old version's files are left as they are.
        fragments = [f.metadata for f in staged.get_fragments()]
        moved = _move_data_files(self.staging, self.target)
        try:
            operation = self.lance.LanceOperation.Overwrite(schema, fragments)
            done = self.lance.LanceDataset.commit(self.target, operation, read_version=previous)
        except BaseException:
            _move_data_files(self.target, self.staging, moved)
            raise
        tag = f"before-sklearn-compat-v{done.version}"
        try:
            done.tags.create(tag, previous)  # a tagged version survives cleanup_old_versions
        except Exception:  # noqa: BLE001 - a tag is a safeguard, not the migration
            tag = None
        shutil.rmtree(self.staging, ignore_errors=True)
        kept = f" (tagged {tag!r})" if tag else ""
        indexes = _rebuild_indices(done, indices, latest)
        now = open_dataset(self.target).version
        later = f" (indexes rebuilt in version {now})" if now != done.version else ""
        return (
            f"replaced the vectors of {self.target}: version {done.version} holds the new "
            f"vectors{later}, version {previous} the old ones{kept}{indexes}; undo with: "
            f"sklearn-compat rollback --table {shlex.quote(self.target)}"
        )


def _index_options(dataset, index):
    """``create_index`` arguments rebuilding vector index ``index`` as it was built."""
    options = {"index_type": index["type"], "name": index["name"]}
    try:
        stats = dataset.stats.index_stats(index["name"])
    except Exception:  # noqa: BLE001 - older Lance: rebuild with its defaults
        return options
    first = (stats.get("indices") or [{}])[0]
    if first.get("metric_type"):
        options["metric"] = first["metric_type"]
    if first.get("num_partitions"):
        options["num_partitions"] = int(first["num_partitions"])
    sub = first.get("sub_index") or {}
    if sub.get("num_sub_vectors"):
        options["num_sub_vectors"] = int(sub["num_sub_vectors"])
    return options


def _rebuild_indices(dataset, indices, before, new_table=False):
    """Build again, on ``dataset``'s new version (or on the ``new_table`` a migration
    wrote), the indices the input had (``indices``, listed on ``before``); returns the
    clause naming them for the log line."""
    if not indices:
        return ""
    rebuilt, failed = [], []
    for index in indices:
        field = index["fields"][0]
        label = f"{index['type']} on {field!r}"
        try:
            if field not in dataset.schema.names:
                raise ValueError("the column is gone")
            if index["type"].upper().startswith("IVF") or "HNSW" in index["type"].upper():
                dataset.create_index(field, **_index_options(before, index))
            else:
                dataset.create_scalar_index(field, index_type=index["type"].upper(),
                                            name=index["name"])  # fmt: skip
            rebuilt.append(label)
        except Exception as exc:  # noqa: BLE001 - an index is rebuilt where Lance can
            failed.append(f"{label} ({_message(exc)})")
    if new_table:
        clause, done, missed = "; the input's indexes", "built on it", "not built"
    else:
        clause, done, missed = (
            "; the new version keeps no index of the old one",
            "rebuilt",
            "not rebuilt",
        )
    if rebuilt:
        clause += f", {done}: {', '.join(rebuilt)}"
    if failed:
        clause += f", {missed} (create again with table.create_index): {'; '.join(failed)}"
    return clause


def _move_data_files(source, target, names=None):
    """Move the data files of dataset ``source`` into ``target``'s; returns their names."""
    if names is None:
        # An empty staged table has no data directory: nothing to move.
        data = os.path.join(source, "data")
        names = os.listdir(data) if os.path.isdir(data) else []
    os.makedirs(os.path.join(target, "data"), exist_ok=True)
    for name in names:
        os.replace(os.path.join(source, "data", name), os.path.join(target, "data", name))
    return names


def _same_column(a, b):
    """Whether two streams of one-column record batches hold the same values in order."""
    import pyarrow as pa

    left = [rb.column(0) for rb in a]
    right = [rb.column(0) for rb in b]
    if not left or not right:  # an empty table gives no batch (and no type to build from)
        return sum(map(len, left)) == sum(map(len, right)) == 0
    return pa.chunked_array(left).equals(pa.chunked_array(right))


def rollback_lance(path, to_version=None):
    """Restore a LanceDB table's version from before its last migration.

    Parameters
    ----------
    path : str
        ``DIR/NAME.lance``.
    to_version : int, default=None
        The version to restore (default: the one the latest migration replaced).

    Returns
    -------
    str
        A line for the log: what was restored, and how to go back.
    """
    path = path.rstrip("/" + os.sep)
    dataset = open_dataset(path)
    current = dataset.version
    if to_version is None:
        info = migration_info(dataset) or {}
        to_version = info.get("previous_version")
        if to_version is None:
            raise InputError(
                f"version {current} was not written by a sklearn-compat migration; pass "
                "--to-version N to restore another version (lancedb lists them: "
                "table.list_versions())",
                path=path,
            )
    known = [v["version"] for v in dataset.versions()]
    if to_version not in known:
        raise InputError(
            f"has no version {to_version} (versions: {', '.join(map(str, known))})", path=path
        )
    held = migration_info(open_dataset(path, version=current))
    open_dataset(path, version=to_version).restore()
    now = open_dataset(path).version
    # Version ``current`` holds what the table held before this rollback: the migrated
    # vectors only when ``current`` was written by a migration (not after an earlier
    # rollback, which restores a version from before it).
    what = "the migrated vectors" if held is not None else "the vectors it held"
    return (
        f"restored {path} to version {to_version} (now version {now}); {what} stay in "
        f"version {current}: sklearn-compat rollback --table {shlex.quote(path)} "
        f"--to-version {current} brings them back"
    )


class LanceSink:
    """A new LanceDB table written batch by batch (ids and one vector column), staged as
    ``NAME.lance.partial`` and renamed into place on :meth:`commit` (for
    :class:`~sklearn_compat.io.TableWriter`)."""

    def __init__(self, path, layout, *, force=False):
        self.lance = import_lance()
        self.path = path.rstrip("/" + os.sep)
        self.staging = self.path + STAGING_SUFFIX
        self.layout = layout
        if os.path.exists(self.path) and not force:
            raise InputError("already exists (pass --force to replace it)", path=self.path)
        if not os.path.isdir(os.path.dirname(os.path.abspath(self.path))):
            raise InputError("the database directory does not exist", path=self.path)
        # Held from here to commit or abort: a leftover staging is then a dead run's.
        self.lock = OutputLock.acquire(lock_path(self.path), self.path)
        shutil.rmtree(self.staging, ignore_errors=True)
        self.schema = None

    def write(self, ids, Z):
        import pyarrow as pa

        Z = np.ascontiguousarray(Z, dtype=np.float32)
        arrays = [pa.FixedSizeListArray.from_arrays(pa.array(Z.reshape(-1)), Z.shape[1])]
        names = [self.layout.list_column]
        if self.layout.id_column is not None:
            ids = np.asarray(ids)
            arrays.insert(0, pa.array(ids.astype(str) if ids.dtype.kind in "OSU" else ids))
            names.insert(0, self.layout.id_column)
        table = pa.table(arrays, names=names)
        mode = "create" if self.schema is None else "append"
        owner = {OWNER_KEY.encode(): self.lock.token.encode()}
        self.schema = self.schema or table.schema.with_metadata(owner)
        self.lance.write_dataset(table.cast(self.schema), self.staging, mode=mode)

    def close(self):
        if self.schema is None:  # no rows: an empty table with the right columns
            self.write(np.empty(0, dtype=object), np.empty((0, self.layout.width)))

    def commit(self):
        self.lock.check(_owner(open_dataset(self.staging)), self.staging)
        old = None
        if os.path.exists(self.path):
            old = self.path + ".replaced"
            os.rename(self.path, old)
        os.rename(self.staging, self.path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self.lock.release()

    def abort(self):
        if self.lock.holds():  # never another run's staging
            shutil.rmtree(self.staging, ignore_errors=True)
        self.lock.release()

"""The LanceDB room: a table ``DIR/NAME.lance`` behind :class:`~._stores.base.Store`.

What this room keeps, and where (all of it inside the table, so that a copy of the table
directory carries it):

- **The ledger**: schema metadata key ``sklearn_compat.ledger`` (a JSON list of entries,
  :mod:`._stores.ledger` format).  A migration writes it in the commit that promotes its
  output; ``add_column`` in the commit that adds the column (one Merge commit),
  ``cutover`` and the rollback of a cutover in the commit that renames the columns (one
  Project commit).  A table written by the first migrations (key ``sklearn_compat.migration``
  only) reads as a one-entry ledger.
- **An added column** ``NAME``: a fixed-size list of float32 beside the column it was
  added ``like``, with a string column ``NAME_source`` holding each row's provenance
  (null: missing, ``"native"``, ``"mapped:<model id>"``).  The field metadata of ``NAME``
  records ``like`` and the id column.  Rows are written by id with ``merge_insert`` (the
  values and their provenance in one table version; no row is ever inserted; rows
  already holding the same bits and provenance are left alone).  Lance's write mode is
  chosen per call: rows gathered in few fragments (a column filled in table order) are
  patched in place (``rewrite_columns``: every index keeps covering every row); rows
  spread over the table (a backfill in export order) are rewritten whole into new
  fragments (``rewrite_rows``: the cost follows the rows written, where patching would
  rewrite the whole column each time), and folded back into every vector index (the old
  column's included) once a tenth of the table is outside it; Lance searches rows
  outside an index exactly, so results never change.  Once the column has no missing row
  it gets an index of the kind ``like`` has (same type, metric and partitions).
- **A backfill** (:meth:`LanceStore.bulk_writer`) reads the id column once (an id -> row
  address map kept up to date by this store's own writes), gathers the export's rows per
  fragment in a temporary directory, then patches each fragment's column once
  (``update_columns`` on the row address: the values and their provenance in one table
  version per fragment, the rows in place); a fragment holding more of the backfill than
  one patch (:data:`PATCH_BYTES` of vectors) gets its rows rewritten whole into new
  fragments in parts instead.  Its cost grows linearly with the rows; memory holds one
  batch while gathering, one patch while writing.  A rerun after ``kill -9`` reads the
  export again and writes only the rows that differ.
- **Cutover** renames, in one table version: ``like`` to :meth:`LanceStore.kept_name`
  (its provenance column too, when it has one) and the added column to ``like`` (with
  its provenance column).  No data file is touched, indexes follow their columns, so
  rollback (the reverse rename) is bit for bit.
- **Rollback** of ``--replace`` restores the version before the migration (Lance keeps
  it), then appends the rollback entry; a second rollback restores the migrated version
  again.
"""

import json
import os

import numpy as np

from ._common import InputError
from ._lance import (
    LEDGER_KEY,
    LanceMigration,
    LanceReader,
    LanceSink,
    _index_options,
    _message,
    import_lance,
    list_indices,
    open_dataset,
    read_ledger,
)
from ._stores import ledger as _ledger
from ._stores.base import NATIVE, Store, provenance_model, rows_of_width

__all__ = ["LanceStore", "LEDGER_KEY"]

# Field metadata keys of an added vector column.
LIKE_KEY = b"sklearn_compat.like"
ID_KEY = b"sklearn_compat.id_column"
# Name ending of an added column's provenance column.
SOURCE_SUFFIX = "_source"


def _encode(entries):
    return json.dumps(entries, separators=(",", ":"))


def _is_vector(field):
    import pyarrow as pa

    t = field.type
    return (pa.types.is_fixed_size_list(t) or pa.types.is_list(t)) and (
        pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)
    )


def _vectors(Z):
    import pyarrow as pa

    Z = np.ascontiguousarray(Z, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(Z.reshape(-1)), Z.shape[1])


def _as_matrix(column, width):
    """float32 ``(n, width)`` of an Arrow list column, NaN rows where it is null."""
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(column)
    out = np.full((n, width), np.nan, dtype=np.float32)
    if n == 0:
        return out
    valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if valid.any():
        values = column.filter(pa.array(valid)).flatten().to_numpy(zero_copy_only=False)
        out[valid] = np.asarray(values, dtype=np.float32).reshape(-1, width)
    return out


class _IdMap:
    """The id -> row map of a table at one version (``key``: :func:`_layout_key`):
    ``index`` (a ``pandas.Index`` of the ids in scan order), ``kind`` (the id column's
    Arrow type), ``addresses`` (each row's address, fragment id << 32 | offset) and
    ``physical`` (``{fragment id: physical rows}``)."""

    def __init__(self, key, index, kind, addresses, physical):
        self.key, self.index, self.kind = key, index, kind
        self.addresses, self.physical = addresses, physical


def _layout_key(dataset, id_column):
    """What identifies the rows' places: the version and its fragments (id, physical
    rows, deletion file), so that a table made again at the same path does not pass
    for the one read before."""
    fragments = []
    for f in dataset.get_fragments():
        deletion = f.metadata.deletion_file
        fragments.append((f.fragment_id, f.physical_rows,
                          None if deletion is None else (deletion.id, deletion.read_version)))
    return (id_column, dataset.version, tuple(fragments))


def _delete_offsets(fragment, offsets, id_column, ids):
    """Delete the rows at physical ``offsets`` of ``fragment`` (their ids ``ids``):
    straight into its deletion vector where Lance offers it, else by a filter on the
    ids (which scans the fragment)."""
    delete_rows = getattr(fragment, "delete_rows", None)
    if delete_rows is not None:
        return delete_rows(offsets)
    return fragment.delete(f"{_sql_name(id_column)} IN ({_sql_list(ids.to_pylist())})")


def pa_equal(chunks, expected):
    """Whether the Arrow arrays ``chunks``, end to end, equal the array ``expected``."""
    import pyarrow as pa

    got = pa.chunked_array(chunks, type=expected.type) if chunks else None
    return got is not None and got.combine_chunks().equals(
        expected.combine_chunks() if isinstance(expected, pa.ChunkedArray) else expected
    )


def _take_at(dataset, addresses, column):
    """Column ``column`` at row ``addresses`` (read in address order: Lance reads sorted
    addresses about twice as fast), in the order given; a string column as an object
    array."""
    import pyarrow as pa

    addresses = np.asarray(addresses, dtype=np.uint64)
    order = np.argsort(addresses, kind="stable")
    taken = dataset._take_rows(pa.array(addresses[order]), columns=[column]).column(0)
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    if pa.types.is_string(taken.type) or pa.types.is_large_string(taken.type):
        return np.asarray(taken.to_pylist(), dtype=object)[back]
    return taken.take(pa.array(back))


def _move_rows(path, dataset, id_column, addresses, table):
    """Rewrite the rows at ``addresses`` (ascending) whole, with the columns of
    ``table`` (rows in the same order) replacing theirs, in one Update commit: the rows
    read by address, their offsets added to the deletion vector of each fragment that
    held them, the new rows in new fragments.  Returns ``(dataset, removed fragment
    ids, the rows' ids)``."""
    import pyarrow as pa

    lance = import_lance()
    names = dataset.schema.names
    rows = dataset._take_rows(pa.array(addresses), columns=names)
    fragment_of = addresses >> np.uint64(32)
    offsets = addresses & np.uint64(0xFFFFFFFF)
    for name in table.column_names:
        if name == id_column:
            continue
        at = rows.schema.get_field_index(name)
        rows = rows.set_column(at, dataset.schema.field(name), table.column(name))
    rows = rows.cast(dataset.schema)
    fragments = {f.fragment_id: f for f in dataset.get_fragments()}
    updated, removed = [], []
    for fid in np.unique(fragment_of):
        gone = offsets[fragment_of == fid].tolist()
        done = _delete_offsets(fragments[int(fid)], gone, id_column,
                               rows.column(id_column).filter(pa.array(fragment_of == fid)))
        if done is None:
            removed.append(int(fid))
        else:
            updated.append(done)
    new = lance.fragment.write_fragments(rows, path, schema=dataset.schema)
    operation = lance.LanceOperation.Update(
        removed_fragment_ids=removed, updated_fragments=updated, new_fragments=new
    )
    done = lance.LanceDataset.commit(path, operation, read_version=dataset.version)
    return done, removed, rows.column(id_column)


# Temporary directories of a backfill's gathered rows: SPILL_PREFIX + pid + "-" + random.
SPILL_PREFIX = "sklearn-compat-backfill-"


def _drop_orphans():
    """Remove the gathered rows a backfill killed with ``kill -9`` left behind (their
    process is gone)."""
    import shutil
    import tempfile
    from pathlib import Path

    for path in Path(tempfile.gettempdir()).glob(SPILL_PREFIX + "*-*"):
        pid = path.name[len(SPILL_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:  # alive, another user's
            pass


# Most vector bytes one fragment's patch holds in memory (more rows for one fragment are
# written in several patches, each rewriting the fragment's column).
PATCH_BYTES = 256 * 2**20


class _FragmentWrites:
    """A backfill's rows for one added column, written by fragment rather than by batch.

    :meth:`add` looks each batch's ids up in the id map (built once) and appends the
    known rows' offsets and vectors to one file per fragment in a temporary directory
    (memory: one batch); :meth:`commit` then patches each fragment once
    (``LanceFragment.update_columns`` on the row address, one ``Update`` commit per
    fragment holding the values and their provenance): the column is rewritten once in
    all, where patching it batch by batch rewrote every fragment a batch touched (all of
    them, for ids in any order), and rewriting the rows whole moved every column.  Rows
    that already hold the bits and provenance are left alone; an id given twice keeps
    its last vector.  Each commit is whole or absent after ``kill -9``; a rerun reads
    the export again and skips the fragments already written."""

    def __init__(self, store, dataset, column, provenance, batch_size):
        import tempfile
        from pathlib import Path

        self.store, self.column, self.provenance = store, column, provenance
        self.width = dataset.schema.field(column).type.list_size
        self.id_column = store._ids_column(dataset.schema)
        store._positions(dataset, self.id_column)  # the id map, scanned once
        self.dataset, self.version = dataset, dataset.version
        self.patch_rows = max(int(batch_size), PATCH_BYTES // (4 * max(self.width, 1)))
        _drop_orphans()
        self._tmp = tempfile.TemporaryDirectory(prefix=f"{SPILL_PREFIX}{os.getpid()}-")
        self.dir = Path(self._tmp.name)
        self.counts = {}

    def add(self, ids, Z):
        """Gather one batch; returns the ids the table does not hold (not written)."""
        Z = rows_of_width(Z, self.width, self.column, self.store.path)
        positions, _, _ = self.store._lookup(self.dataset, self.id_column, ids)
        known = positions >= 0
        unknown = np.asarray(ids)[~known]
        if not known.any():
            return unknown
        addresses = self.store._id_cache.addresses[positions[known]]
        Z = np.ascontiguousarray(np.asarray(Z)[known], dtype=np.float32)
        fragment = addresses >> np.uint64(32)
        order = np.argsort(fragment, kind="stable")
        fragment, addresses, Z = fragment[order], addresses[order], Z[order]
        cuts = np.flatnonzero(np.diff(fragment)) + 1
        for part in np.split(np.arange(len(fragment)), cuts):
            fid = int(fragment[part[0]])
            offsets = (addresses[part] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            with open(self.dir / f"{fid}.offsets", "ab") as fh:
                fh.write(offsets.tobytes())
            with open(self.dir / f"{fid}.vectors", "ab") as fh:
                fh.write(Z[part].tobytes())
            self.counts[fid] = self.counts.get(fid, 0) + len(part)
        return unknown

    def commit(self, stop):
        """Write the gathered rows, fragment by fragment (``stop()`` between commits);
        returns ``(written, same)``: rows changed, rows that already held them."""
        written = same = 0
        for fid in sorted(self.counts):
            offsets = np.fromfile(self.dir / f"{fid}.offsets", dtype=np.uint32)
            # The last vector of an offset given twice; in offset order.
            last = len(offsets) - 1 - np.unique(offsets[::-1], return_index=True)[1]
            whole = None
            if len(offsets) <= self.patch_rows:  # read at once (sequential), then gathered
                whole = np.fromfile(self.dir / f"{fid}.vectors", dtype=np.float32)
                whole = whole.reshape(len(offsets), self.width)
            for start in range(0, len(last), self.patch_rows):
                rows = last[start : start + self.patch_rows]
                if whole is not None:
                    Z = whole[rows]
                else:
                    vectors = np.memmap(self.dir / f"{fid}.vectors", dtype=np.float32,
                                        mode="r", shape=(len(offsets), self.width))  # fmt: skip
                    Z = np.array(vectors[np.sort(rows)])
                    Z = Z[np.argsort(np.argsort(rows))]
                    del vectors
                whole = None  # one patch per fragment here: free it before the write
                done = self._patch(fid, offsets[rows], Z, len(last) <= self.patch_rows)
                written += done
                same += len(rows) - done
                stop()
        if written:
            self.store._keep_indexes_covering()
            self.store._index_when_complete(self.column)
        return written, same

    def _patch(self, fid, offsets, Z, whole):
        """Write the rows at ``offsets`` of fragment ``fid`` (ascending) that differ;
        ``whole``: they are all the fragment's rows of this backfill (patch its column),
        else part of them (move them).  Returns how many were written."""
        import pyarrow as pa

        lance = import_lance()
        dataset = self.store._dataset()
        if dataset.version != self.version:
            raise InputError(
                f"changed while the backfill wrote it (version {self.version}, now "
                f"{dataset.version}); nothing more written: run the same command again",
                path=self.store.path,
            )
        addresses = (np.uint64(fid) << np.uint64(32)) | offsets.astype(np.uint64)
        source = self.column + SOURCE_SUFFIX
        change = _take_at(dataset, addresses, source) != self.provenance
        agree = np.flatnonzero(~change)
        if len(agree):
            held = _as_matrix(_take_at(dataset, addresses[agree], self.column), self.width)
            alike = (held.view(np.uint32) == Z[agree].view(np.uint32)).all(axis=1)
            change[agree[~alike]] = True
        n = int(change.sum())
        if not n:
            return 0
        if n < len(change):
            addresses, Z = addresses[change], Z[change]
        schema = dataset.schema
        values = pa.table(
            [_vectors(Z), pa.array([self.provenance] * n, pa.string())],
            schema=pa.schema([schema.field(self.column), schema.field(source)]),
        )
        if whole:
            # Patch the fragment's column: the rows keep their place (and addresses).
            right = values.add_column(0, "_rowid", pa.array(addresses))
            fragment = dataset.get_fragment(fid)
            meta, fields = fragment.update_columns(right, left_on="_rowid")[:2]
            operation = lance.LanceOperation.Update(
                updated_fragments=[meta], fields_modified=fields, update_mode="rewrite_columns"
            )
            done = lance.LanceDataset.commit(self.store.path, operation,
                                             read_version=self.version)  # fmt: skip
            cache = self.store._id_cache
            if cache is not None:
                cache.key = _layout_key(done, self.id_column)
        else:
            # One part of a fragment too big to patch at once: these rows are rewritten
            # whole into a new fragment (the cost follows the rows, not the fragment).
            done = _move_rows(self.store.path, dataset, self.id_column, addresses, values)[0]
            self.store._id_cache = None
        self.version = done.version
        return n

    def close(self):
        self._tmp.cleanup()


class LanceStore(Store):
    """A LanceDB table ``DIR/NAME.lance`` (see the module notes for what is kept where).

    Parameters
    ----------
    location : str
        ``DIR/NAME.lance``: the table ``NAME`` of ``lancedb.connect(DIR)``.

    Attributes
    ----------
    id_column : str or None
        The id column rows are written and read by; None: the one an added column
        records, else ``"id"``.
    """

    kind = "lance"
    # write_rows leaves rows holding the same bits and provenance alone (a backfill then
    # needs no read-back); ``last_written``: rows the last call changed.
    write_skips_identical = True

    def __init__(self, location):
        super().__init__(str(location).rstrip("/" + os.sep))
        self.path = self.location
        self.id_column = None
        self._id_cache = None

    def display(self):
        return self.path

    # ------------------------------------------------------------------ reading
    def exists(self):
        return os.path.isdir(self.path)

    def _dataset(self, version=None):
        return open_dataset(self.path, version=version)

    def reader(self, spec=None, dtype=None, extra_columns=()):
        from ._common import ColumnSpec

        return LanceReader(self.path, spec or ColumnSpec(), dtype, extra_columns)

    # ------------------------------------------------------------------ migrations
    def migration(self, reader, width, column, job, *, replace=False, resume=False,
                  force=False):  # fmt: skip
        column = column or reader.list_column or "vector"
        output = None if replace else self.path
        return LanceMigration(reader, output, width, column, job, replace=replace,
                              resume=resume, force=force)  # fmt: skip

    def sink(self, layout, *, force=False):
        return LanceSink(self.path, layout, force=force)

    # ------------------------------------------------------------------ ledger
    def ledger(self):
        if not self.exists():
            return []
        try:
            return read_ledger(self._dataset())
        except InputError:
            return []

    def append_ledger(self, entry):
        dataset = self._dataset()
        entries = read_ledger(dataset) + [dict(entry)]
        dataset.update_schema_metadata({LEDGER_KEY: _encode(entries)})

    # ------------------------------------------------------------------ columns
    def vector_columns(self):
        schema = self._dataset().schema
        out = {}
        for field in schema:
            if not _is_vector(field):
                continue
            t = field.type
            out[field.name] = t.list_size if hasattr(t, "list_size") else None
        return out

    def _added(self, schema, name):
        """Whether ``name`` is an added column of this table (it has its provenance
        column and records what it was added like)."""
        if name not in schema.names or name + SOURCE_SUFFIX not in schema.names:
            return False
        return LIKE_KEY in (schema.field(name).metadata or {})

    def added_columns(self):
        schema = self._dataset().schema
        return {f.name: self._like(schema, f.name) for f in schema if self._added(schema, f.name)}

    def _like(self, schema, name):
        return (schema.field(name).metadata or {})[LIKE_KEY].decode()

    def _ids_column(self, schema):
        """The id column rows are matched on."""
        if self.id_column is not None:
            if self.id_column not in schema.names:
                raise InputError(
                    f"has no id column {self.id_column!r} (columns: {', '.join(schema.names)})",
                    path=self.path,
                )
            return self.id_column
        for field in schema:
            recorded = (field.metadata or {}).get(ID_KEY)
            if recorded is not None and recorded.decode() in schema.names:
                return recorded.decode()
        if "id" in schema.names:
            return "id"
        raise InputError("has no 'id' column: name the id column with --id-column", path=self.path)

    def _check_free(self, schema, names):
        taken = [n for n in names if n in schema.names]
        if taken:
            raise InputError(
                f"already has a column {taken[0]!r} that is not this upgrade's", path=self.path
            )

    def add_column(self, name, width, like):
        import pyarrow as pa

        lance = import_lance()
        from lance.schema import LanceSchema

        dataset = self._dataset()
        schema = dataset.schema
        if like not in schema.names or not _is_vector(schema.field(like)):
            vectors = [f.name for f in schema if _is_vector(f)]
            raise InputError(
                f"has no vector column {like!r} to add a column beside (vector columns: "
                f"{', '.join(vectors) or 'none'})",
                path=self.path,
            )
        width = int(width)
        if self._added(schema, name):
            have = schema.field(name).type.list_size
            if have != width or self._like(schema, name) != like:
                raise InputError(
                    f"already has an added column {name!r} of {have} values beside "
                    f"{self._like(schema, name)!r}; choose another --add-column name",
                    path=self.path,
                )
            return f"{self.path}: column {name!r} ({width} values) is already there; resuming"
        self._check_free(schema, [name, name + SOURCE_SUFFIX])
        id_column = self._ids_column(schema)
        meta = {LIKE_KEY: like.encode(), ID_KEY: id_column.encode()}
        added = [
            pa.field(name, pa.list_(pa.float32(), width), metadata=meta),
            pa.field(name + SOURCE_SUFFIX, pa.string()),
        ]
        new = pa.schema(list(schema) + added, metadata=schema.metadata)
        lance_schema = LanceSchema.from_pyarrow(new)
        if LanceSchema.from_pyarrow(schema) == dataset.lance_schema:
            # One Merge commit: the all-null columns cost no data file.
            fragments = [f.metadata for f in dataset.get_fragments()]
            operation = lance.LanceOperation.Merge(fragments, lance_schema)
            lance.LanceDataset.commit(self.path, operation, read_version=dataset.version)
        else:  # field ids not in schema order (a column was dropped): Lance's own call
            dataset.add_columns(pa.schema(added))
        index = self._index_of(dataset, like)
        kind = (
            f"; it gets a {index['type']} index like {like!r} once every row has a vector"
            if index
            else ""
        )
        return f"{self.path}: added the column {name!r} ({width} values) beside {like!r}{kind}"

    # ------------------------------------------------------------------ rows by id
    def _positions(self, dataset, id_column):
        """``pandas.Index`` of the table's ids in row order, kept in ``self._id_cache``
        (an :class:`_IdMap`) for as long as the table is at the version it was read at
        or at one this store's own writes moved it to (they update it in place): a
        backfill scans the id column once, not once per batch."""
        import pandas as pd

        key = _layout_key(dataset, id_column)
        if self._id_cache is not None and self._id_cache.key == key:
            return self._id_cache.index
        scanned = dataset.to_table(columns=[id_column], with_row_address=True)
        column = scanned.column(0)
        addresses = scanned.column("_rowaddr").to_numpy().astype(np.uint64)
        values = column.to_numpy(zero_copy_only=False)
        if values.dtype.kind == "f":
            values = values.astype(object)
        index = pd.Index(values)
        if not index.is_unique:
            dup = index[index.duplicated()][0]
            raise InputError(
                f"holds the id {_plain(dup)!r} more than once in {id_column!r}; rows are "
                "written by id",
                path=self.path,
            )
        # Rows are read by address (fragment, offset): a read by logical offset maps
        # every offset through the deletion vectors, slow once rows were rewritten.
        self._id_cache = _IdMap(key, index, column.type, addresses,
                                {f.fragment_id: f.physical_rows
                                 for f in dataset.get_fragments()})  # fmt: skip
        return index

    def _differing(self, dataset, column, positions, Z, provenance):
        """Mask of the rows (at ``positions``) whose stored vector or provenance differs
        from ``Z`` / ``provenance``."""
        held = self._take(dataset, positions, column + SOURCE_SUFFIX)
        change = held != provenance
        agree = np.flatnonzero(~change)
        if len(agree):
            width = Z.shape[1]
            current = _as_matrix(self._take(dataset, positions[agree], column), width)
            same = (current.view(np.uint32) == Z[agree].view(np.uint32)).all(axis=1)
            change[agree[~same]] = True
        return change

    def _write_mode(self, dataset, schema, column, positions):
        """Lance's cheaper way to write the rows at ``positions`` into ``column``:
        ``rewrite_columns`` (patches the column in the fragments holding the rows: every
        index keeps covering every row, rows keep their place) when the rows fill most
        of the fragments they are in (a column filled in table order), else
        ``rewrite_rows`` (the matched rows rewritten whole into new fragments; the cost
        follows the rows written, not the table: a backfill in any order).  A patched
        fragment is rewritten over all its physical rows, deleted ones included."""
        physical = self._id_cache.physical
        touched = np.unique(self._id_cache.addresses[positions] >> np.uint64(32))
        patched = sum(physical.get(int(f), 0) for f in touched) * (
            _row_bytes(schema, [column, column + SOURCE_SUFFIX])
        )
        rewritten = len(positions) * _row_bytes(schema, schema.names)
        return "rewrite_columns" if patched <= 2 * rewritten else "rewrite_rows"

    def _rewrite_rows(self, dataset, id_column, positions, table):
        """Rewrite the rows at ``positions`` whole with ``table``'s columns (the vector and
        its provenance; the others as they are) in one Update commit
        (:func:`_move_rows`); the id map then follows the rows to their new place.
        What ``merge_insert(..., "rewrite_rows")`` does, without its join over the whole
        table on every call (its cost grew with the table: 12x the one-call floor at
        500,000 rows in batches of 16,384)."""
        order = np.argsort(positions, kind="stable")
        moved = positions[order]
        before = {f.fragment_id for f in dataset.get_fragments()}
        done, removed, ids = _move_rows(self.path, dataset, id_column,
                                        self._id_cache.addresses[moved], table.take(order))
        self._follow_moved_rows(done, id_column, before, removed, moved, ids)

    def _follow_moved_rows(self, dataset, id_column, before, removed, moved, ids):
        """Point the id map at the new addresses of the rows ``_rewrite_rows`` moved (in
        the order they were written into the new fragments), and at ``dataset``'s
        version; checked against the ids the new fragments hold (else dropped: the
        next call scans again)."""
        cache = self._id_cache
        self._id_cache = None
        new = sorted((f for f in dataset.get_fragments() if f.fragment_id not in before),
                     key=lambda f: f.fragment_id)  # fmt: skip
        if sum(f.physical_rows for f in new) != len(moved):
            return
        placed, held = [], []
        for f in new:
            n = f.physical_rows
            placed.append((np.uint64(f.fragment_id) << np.uint64(32))
                          + np.arange(n, dtype=np.uint64))  # fmt: skip
            held.append(f.to_table(columns=[id_column]).column(0))
        if not pa_equal(held, ids):
            return
        cache.addresses[moved] = np.concatenate(placed)
        for fid in removed:
            cache.physical.pop(fid, None)
        cache.physical.update({f.fragment_id: f.physical_rows for f in new})
        cache.key = _layout_key(dataset, id_column)
        self._id_cache = cache

    def _keep_indexes_covering(self):
        """After rows were rewritten into new fragments: fold them into every vector
        index that no longer covers a tenth of the rows (Lance searches uncovered rows
        exactly, so results never change; this keeps the old column's index serving)."""
        dataset = self._dataset()
        rows = dataset.count_rows()
        stale = []
        for index in list_indices(dataset):
            field = index["fields"][0] if index["fields"] else None
            if field is None or not _is_vector(dataset.schema.field(field)):
                continue
            try:
                uncovered = dataset.stats.index_stats(index["name"])["num_unindexed_rows"]
            except Exception:  # noqa: BLE001 - an index Lance cannot describe: left alone
                continue
            if uncovered * 10 > rows:
                stale.append(index["name"])
        if stale:
            dataset.optimize.optimize_indices(index_names=stale)

    def _lookup(self, dataset, id_column, ids):
        index = self._positions(dataset, id_column)
        ids = np.asarray(ids)
        kind = self._id_cache.kind
        import pyarrow as pa

        if pa.types.is_integer(kind) and ids.dtype.kind in "OUS":
            try:
                ids = ids.astype(np.int64)
            except (TypeError, ValueError):
                pass
        elif (
            pa.types.is_string(kind) or pa.types.is_large_string(kind)
        ) and ids.dtype.kind in "iu":
            ids = ids.astype(str).astype(object)
        return index.get_indexer(ids), ids, kind

    def _check_added(self, schema, column):
        if not self._added(schema, column):
            added = [f.name for f in schema if self._added(schema, f.name)]
            raise InputError(
                f"has no added column {column!r} (added columns: {', '.join(added) or 'none'}; "
                "add one with transform --add-column)",
                path=self.path,
            )

    def read_rows(self, column, ids, vectors=True):
        """See :meth:`Store.read_rows`; ``vectors="native"`` reads the vectors of the rows
        whose provenance is native only (the others' rows of ``Z`` are NaN): what a
        backfill compares, at a fraction of the reads."""
        dataset = self._dataset()
        schema = dataset.schema
        id_column = self._ids_column(schema)
        positions, ids, _ = self._lookup(dataset, id_column, ids)
        known = positions >= 0
        width = schema.field(column).type.list_size
        Z = np.full((len(ids), width), np.nan, dtype=np.float32)
        provenance = np.full(len(ids), None, dtype=object)
        if not known.any():
            return known, Z, provenance
        rows = np.flatnonzero(known)
        if self._added(schema, column):
            provenance[rows] = self._take(dataset, positions[rows], column + SOURCE_SUFFIX)
        if vectors == "native":
            rows = rows[provenance[rows] == NATIVE]
        if vectors and len(rows):
            Z[rows] = _as_matrix(self._take(dataset, positions[rows], column), width)
        return known, Z, provenance

    def _take(self, dataset, positions, column):
        """Column ``column`` at row ``positions`` (see :meth:`_take_at`)."""
        return _take_at(dataset, self._id_cache.addresses[positions], column)

    def bulk_writer(self, column, provenance, batch_size):
        """See :meth:`Store.bulk_writer`: rows gathered on local disk per fragment, then
        each fragment patched once (:class:`_FragmentWrites`); None on a table with
        stable row ids (rows are then written batch by batch)."""
        dataset = self._dataset()
        self._check_added(dataset.schema, column)
        if dataset.has_stable_row_ids:
            return None
        return _FragmentWrites(self, dataset, column, provenance, batch_size)

    def write_rows(self, column, ids, Z, provenance):
        import pyarrow as pa

        self.last_written = 0
        dataset = self._dataset()
        schema = dataset.schema
        self._check_added(schema, column)
        width = schema.field(column).type.list_size
        Z = rows_of_width(Z, width, column, self.path)
        ids = np.asarray(ids)
        if len(ids) != len(Z):
            raise ValueError(f"{len(ids)} ids for {len(Z)} vectors")
        id_column = self._ids_column(schema)
        positions, typed, kind = self._lookup(dataset, id_column, ids)
        known = positions >= 0
        unknown = ids[~known]
        if not known.any():
            return unknown
        kept = positions[known]
        if len(np.unique(kept)) != len(kept):
            seen = set()
            dup = next(i for i in typed[known] if i in seen or seen.add(i))
            raise InputError(
                f"the id {_plain(dup)!r} comes twice in one batch: nothing written",
                path=self.path,
            )
        if isinstance(provenance, str) or provenance is None:
            wanted = np.full(int(known.sum()), provenance, dtype=object)
        else:
            wanted = np.asarray(provenance, dtype=object)[known]
        Z = np.asarray(Z, dtype=np.float32)[known]
        # Rows that already hold these bits with this provenance are left alone: only the
        # provenance strings are read, and the vectors of the rows whose provenance agrees.
        change = self._differing(dataset, column, kept, Z, wanted)
        self.last_written = int(change.sum())
        if not change.any():
            return unknown
        kept, Z, wanted = kept[change], Z[change], wanted[change]
        table = pa.table(
            {
                id_column: pa.array(typed[known][change].tolist(), type=kind),
                column: _vectors(Z),
                column + SOURCE_SUFFIX: pa.array(wanted.tolist(), pa.string()),
            }
        )
        mode = self._write_mode(dataset, schema, column, kept)
        if mode == "rewrite_rows" and not dataset.has_stable_row_ids:
            self._rewrite_rows(dataset, id_column, kept, table)
        else:
            builder = dataset.merge_insert(id_column).when_matched_update_all()
            builder.write_mode(mode).execute(table)
            self._follow_patched(dataset, id_column, mode)
        if mode == "rewrite_rows":
            self._keep_indexes_covering()
        self._index_when_complete(column)
        return unknown

    def _follow_patched(self, before, id_column, mode):
        """After a ``merge_insert`` of ours: rows patched in place (``rewrite_columns``)
        keep their addresses, so the id map holds for the version it made when that
        version follows the one it was read at; otherwise the map is dropped."""
        cache, self._id_cache = self._id_cache, None
        if mode != "rewrite_columns" or cache is None or before.has_stable_row_ids:
            return
        after = self._dataset()
        if after.version != before.version + 1:
            return
        key = _layout_key(after, id_column)
        if [k[:2] for k in key[2]] != [k[:2] for k in cache.key[2]]:
            return
        cache.key = key
        self._id_cache = cache

    def _index_of(self, dataset, column):
        for index in list_indices(dataset):
            if index["fields"] and index["fields"][0] == column:
                return index
        return None

    def _index_when_complete(self, column):
        """Build the added column's index (the kind of the column it was added like)
        once no row of it is missing."""
        dataset = self._dataset()
        schema = dataset.schema
        like = self._like(schema, column)
        model = self._index_of(dataset, like)
        if model is None or self._index_of(dataset, column) is not None:
            return None
        source = dataset.to_table(columns=[column + SOURCE_SUFFIX]).column(0)
        if source.null_count:
            return None
        options = _index_options(dataset, model)
        options["name"] = f"{column}_idx"
        try:
            if model["type"].upper().startswith("IVF") or "HNSW" in model["type"].upper():
                dataset.create_index(column, **options)
            return options["index_type"]
        except Exception as exc:  # noqa: BLE001 - the column serves without an index
            return f"not built ({_message(exc)})"

    def iter_rows(self, columns, batch_size):
        dataset = self._dataset()  # one version for the whole scan
        schema = dataset.schema
        id_column = self._ids_column(schema)
        read = [id_column]
        for column in columns:
            if column not in schema.names:
                raise InputError(f"has no column {column!r}", path=self.path)
            read.append(column)
            if self._added(schema, column):
                read.append(column + SOURCE_SUFFIX)
        n = dataset.count_rows()
        for start in range(0, n, batch_size):
            table = dataset.to_table(columns=read, offset=start, limit=batch_size)
            ids = table.column(id_column).to_numpy(zero_copy_only=False)
            vectors, sources = {}, {}
            for column in columns:
                t = schema.field(column).type
                width = t.list_size if hasattr(t, "list_size") else None
                if width is None:
                    values = table.column(column).to_pylist()
                    width = len(next((v for v in values if v is not None), []))
                vectors[column] = _as_matrix(table.column(column), width)
                if self._added(schema, column):
                    sources[column] = np.asarray(
                        table.column(column + SOURCE_SUFFIX).to_pylist(), dtype=object
                    )
                else:
                    sources[column] = np.full(table.num_rows, None, dtype=object)
            yield ids, vectors, sources

    def column_status(self, column):
        import pyarrow.compute as pc

        dataset = self._dataset()
        schema = dataset.schema
        if column not in schema.names or not _is_vector(schema.field(column)):
            raise InputError(
                f"has no vector column {column!r} (vector columns: "
                f"{', '.join(self.vector_columns()) or 'none'})",
                path=self.path,
            )
        t = schema.field(column).type
        rows = dataset.count_rows()
        index = self._index_of(dataset, column)
        out = {
            "dimension": getattr(t, "list_size", None),
            "rows": rows,
            "mapped": {},
            "native": 0,
            "missing": 0,
            "index": None if index is None else index["type"],
        }
        if self._added(schema, column):
            out["like"] = self._like(schema, column)
            source = dataset.to_table(columns=[column + SOURCE_SUFFIX]).column(0)
            out["missing"] = source.null_count
            for item in pc.value_counts(source).to_pylist():
                value, n = item["values"], int(item["counts"])
                if value is None:
                    continue
                model = provenance_model(value)
                if model is not None:
                    out["mapped"][model] = out["mapped"].get(model, 0) + n
                elif value == "native":
                    out["native"] += n
            return out
        nulls = dataset.to_table(columns=[column]).column(0).null_count
        out["missing"] = nulls
        done = _ledger.last_mapping(read_ledger(dataset), column)
        if done is not None and (done.get("action") in ("transform", "replace")):
            model = done.get("model") or {}
            key = model.get("id") or model.get("sha256") or "unknown"
            out["mapped"][key] = rows - nulls
        else:
            out["native"] = rows - nulls
        return out

    # ------------------------------------------------------------------ cutover
    def kept_name(self, column):
        return f"{column}_sklearn_compat_previous"

    def _renames(self, schema, column, like, kept):
        """``{old name: new name}`` of a cutover of ``column`` (served as ``like``)."""
        renames = {like: kept, column: like, column + SOURCE_SUFFIX: like + SOURCE_SUFFIX}
        if self._added(schema, like):  # the served column was itself added: its provenance
            renames[like + SOURCE_SUFFIX] = kept + SOURCE_SUFFIX
        elif like + SOURCE_SUFFIX in schema.names:
            raise InputError(
                f"has a column {like + SOURCE_SUFFIX!r} of its own: the cutover would serve "
                f"the provenance of {column!r} under that name; rename it first",
                path=self.path,
            )
        return renames

    def _rename(self, dataset, renames, entries):
        """Rename columns and write the ledger ``entries`` in one table version."""
        import pyarrow as pa

        lance = import_lance()
        from lance.schema import LanceSchema

        schema = dataset.schema
        metadata = dict(schema.metadata or {})
        metadata[LEDGER_KEY.encode()] = _encode(entries).encode()
        fields = [f.with_name(renames.get(f.name, f.name)) for f in schema]
        new = pa.schema(fields, metadata=metadata)
        if LanceSchema.from_pyarrow(schema) == dataset.lance_schema:
            operation = lance.LanceOperation.Project(
                LanceSchema.from_pyarrow(new), preserves_nullability=True
            )
            done = lance.LanceDataset.commit(self.path, operation, read_version=dataset.version)
            return done.version
        # Field ids not in schema order: Lance's rename, then the ledger (two versions).
        staged = {old: f"{old}__sklearn_compat_swap" for old in renames}
        dataset.alter_columns(*[{"path": o, "name": t} for o, t in staged.items()])
        dataset = self._dataset()
        dataset.alter_columns(*[{"path": staged[o], "name": n} for o, n in renames.items()])
        dataset = self._dataset()
        dataset.update_schema_metadata({LEDGER_KEY: _encode(entries)})
        return self._dataset().version

    def cutover(self, column):
        dataset = self._dataset()
        schema = dataset.schema
        self._check_added(schema, column)
        like = self._like(schema, column)
        kept = self.kept_name(like)
        if kept in schema.names:
            raise InputError(
                f"still keeps the column of an earlier cutover as {kept!r}: drop it "
                f"(table.drop_columns([{kept!r}])) before cutting over again",
                path=self.path,
            )
        missing = dataset.to_table(columns=[column + SOURCE_SUFFIX]).column(0).null_count
        if missing:
            raise InputError(
                f"column {column!r} has no vector for {missing} of {dataset.count_rows()} "
                "rows: finish `transform --add-column` first (its --resume), then cut over",
                path=self.path,
            )
        renames = self._renames(schema, column, like, kept)
        previous = dataset.version
        entry = _ledger.entry("cutover", column=column, served=like, kept=kept,
                              renames=renames, previous=previous)  # fmt: skip
        entries = read_ledger(dataset) + [entry]
        version = self._rename(dataset, renames, entries)
        return (
            f"{self.path}: version {version} serves {column!r} as {like!r} (the old "
            f"{like!r} kept as {kept!r}); undo with: {self.undo_line()}"
        )

    # ------------------------------------------------------------------ rollback
    def rollback(self, to_version=None):
        dataset = self._dataset()
        entries = read_ledger(dataset)
        current = dataset.version
        if to_version is not None:
            return self._restore(dataset, entries, int(to_version), None)
        target, redo = _ledger.rollback_target(entries)
        if target is None:
            raise InputError(
                f"version {current}: the ledger records no --replace or cutover to undo; pass "
                "--to-version N to restore another version (lancedb lists them: "
                "table.list_versions())",
                path=self.path,
            )
        if target["action"] == "cutover":
            renames = dict(target.get("renames") or {})
            if not redo:
                renames = {new: old for old, new in renames.items()}
            self._check_renames(dataset.schema, renames)
            entry = _ledger.entry("rollback", column=target.get("column"),
                                  undoes=_ledger.undo_reference(target),
                                  previous=current)  # fmt: skip
            version = self._rename(dataset, renames, entries + [entry])
            what = "served again" if redo else "back"
            return (
                f"{self.path}: version {version} has the columns as before the "
                f"{'rollback' if redo else 'cutover'} ({target.get('served')!r} {what}); "
                f"undo with: {self.undo_line()}"
            )
        if redo:
            last = next(e for e in reversed(entries) if e.get("action") == "rollback")
            version = last.get("previous")
        else:
            version = target.get("previous")
        if version is None:
            raise InputError(
                "the ledger does not say which version to restore; pass --to-version N",
                path=self.path,
            )
        return self._restore(dataset, entries, int(version), target)

    def _check_renames(self, schema, renames):
        missing = [old for old in renames if old not in schema.names]
        clash = [new for old, new in renames.items() if new in schema.names and new not in renames]
        if missing or clash:
            what = missing[0] if missing else clash[0]
            raise InputError(
                f"the columns changed since the cutover ({what!r}); nothing renamed",
                path=self.path,
            )

    def _restore(self, dataset, entries, version, target):
        current = dataset.version
        known = [v["version"] for v in dataset.versions()]
        if version not in known:
            raise InputError(
                f"has no version {version} (versions: {', '.join(map(str, known))})",
                path=self.path,
            )
        self._dataset(version).restore()
        extra = {} if target is None else {"undoes": _ledger.undo_reference(target)}
        entry = _ledger.entry("rollback", previous=current, restored=version, **extra)
        restored = self._dataset()
        restored.update_schema_metadata({LEDGER_KEY: _encode(entries + [entry])})
        now = self._dataset().version
        mapped = any(e.get("action") == "replace" for e in _ledger.in_effect(entries))
        what = "the migrated vectors" if mapped else "the vectors it held"
        return (
            f"restored {self.path} to version {version} (now version {now}); {what} stay in "
            f"version {current}: {self.undo_line()} brings them back"
        )


def _row_bytes(schema, names):
    """Rough bytes per row of columns ``names`` (a string counts 32)."""
    import pyarrow as pa

    total = 0
    for name in names:
        t = schema.field(name).type
        if pa.types.is_fixed_size_list(t):
            total += t.list_size * max(t.value_type.bit_width // 8, 1)
        elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
            total += 32
        else:
            try:
                total += max(t.bit_width // 8, 1)
            except ValueError:
                total += 16
    return total


def _sql_name(name):
    """A column name quoted for a Lance filter."""
    return "`" + str(name).replace("`", "``") + "`"


def _sql_list(values):
    """Ids as a Lance filter's ``IN`` list (strings quoted, integers as they are)."""
    if values and isinstance(values[0], str):
        return ", ".join("'" + v.replace("'", "''") + "'" for v in values)
    return ", ".join(str(int(v)) for v in values)


def _plain(value):
    """An id as a user wrote it (``np.int64(3)`` -> ``3``)."""
    return value.item() if hasattr(value, "item") else value

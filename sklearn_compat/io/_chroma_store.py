"""The Chroma room: a collection ``DIR::NAME`` behind :class:`~._stores.base.Store`.

A Chroma record holds one vector, so a column added to ``NAME`` is a **sibling
collection** ``NAME.COLUMN`` in the same database: same distance and index settings,
created empty; a row of the column exists once it is written, with the id, document and
metadata of ``NAME``'s record and the row's provenance in the record's metadata key
``sklearn_compat_source`` (``"native"`` or ``"mapped:<model id>"``).  Its collection
metadata names its parent (``sklearn_compat_parent``), its column and width.  Rows are
written by id with ``upsert`` of the ids ``NAME`` holds only: an id ``NAME`` lacks is
never added.

Vectors are written as float32 and read back bit for bit in collections of the ``l2`` and
``ip`` spaces; a ``cosine`` collection (Chroma's own storage) may return a value one unit
in the last place away.

**The ledger** is the collection metadata key ``sklearn_compat_ledger`` (a JSON list of
entries) of the collection served as ``NAME``; it travels with the name.

**Cutover** of column ``C`` renames ``NAME`` to ``NAME.embedding_sklearn_compat_previous``
(the kept column ``embedding_sklearn_compat_previous``) and ``NAME.C`` to ``NAME``: the
new vectors are served under the old name, queries unchanged.  Chroma renames one
collection at a time, so between the two renames ``NAME`` does not exist (a few
milliseconds); the collection about to be served carries the ledger with a pending
marker first, so that a cutover or rollback interrupted between the renames is finished
by any later operation on the collection.  Rollback renames them back: no vector is
rewritten, so it is bit for bit.
"""

import json
import os

import numpy as np

from ._chroma import (
    LEDGER_KEY,
    PREFIX,
    ChromaMigration,
    ChromaReader,
    ChromaSink,
    _check_name,
    _client,
    _collection,
    _index_configuration,
    _modifiable,
    _names,
    own_keys_removed,
    read_ledger,
    split_chroma_path,
)
from ._common import CHROMA_SEPARATOR, InputError
from ._stores import ledger as _ledger
from ._stores.base import Store, provenance_model, rows_of_width

__all__ = ["ChromaStore"]

EMBEDDING = "embedding"
SOURCE_KEY = PREFIX + "source"
PARENT_KEY = PREFIX + "parent"
COLUMN_KEY = PREFIX + "column"
WIDTH_KEY = PREFIX + "width"
PENDING_KEY = PREFIX + "pending"
# The column under which a rollback of ``--replace`` parks the migrated collection.
MIGRATED = "embedding_sklearn_compat_migrated"
# Marks a collection whose records carry their provenance (created by add_column).
PROVENANCE_KEY = PREFIX + "provenance"
# Records per get/upsert call (Chroma's own limit may be lower).
_PAGE = 4096


class ChromaStore(Store):
    """A Chroma collection ``DIR::NAME`` (see the module notes for what is kept where).

    Parameters
    ----------
    location : str
        ``DIR::NAME``: the collection ``NAME`` of ``chromadb.PersistentClient(DIR)``.
    """

    kind = "chroma"
    one_vector_per_record = True
    # write_rows leaves records holding the same bits and provenance alone (a backfill
    # then needs no read-back); ``last_written``: records the last call changed.
    write_skips_identical = True

    def __init__(self, location):
        super().__init__(location)
        self.directory, self.name = split_chroma_path(self.location)
        self.id_column = None
        self._client = None

    def display(self):
        return self.location

    # ------------------------------------------------------------------ plumbing
    @property
    def client(self):
        if self._client is None:
            self._client = _client(self.directory, self.location)
        return self._client

    def _sibling_name(self, column):
        return f"{self.name}.{column}"

    def column_location(self, column):
        if column == EMBEDDING:
            return None
        return f"{self.directory}{CHROMA_SEPARATOR}{self._sibling_name(column)}"

    def _main(self):
        self._recover()
        return _collection(self.client, self.name, self.location)

    def _get(self, name):
        try:
            return self.client.get_collection(name, embedding_function=None)
        except Exception:  # noqa: BLE001 - NotFoundError or ValueError, by Chroma version
            return None

    def _siblings(self):
        """``{column: collection}`` of the columns added to ``NAME``."""
        out = {}
        prefix = self.name + "."
        for name in sorted(_names(self.client)):
            if not name.startswith(prefix):
                continue
            collection = self._get(name)
            metadata = (collection.metadata or {}) if collection is not None else {}
            if metadata.get(PARENT_KEY) == self.name and not metadata.get(PENDING_KEY):
                out[metadata.get(COLUMN_KEY) or name[len(prefix) :]] = collection
        return out

    def _sibling(self, column):
        found = self._siblings().get(column)
        if found is None:
            raise InputError(
                f"has no added column {column!r} (a sibling collection "
                f"{self._sibling_name(column)!r}; added columns: "
                f"{', '.join(self._siblings()) or 'none'}; add one with transform "
                "--add-column)",
                path=self.location,
            )
        return found

    def _recover(self):
        """Finish a cutover or rollback interrupted between its two renames: ``NAME`` is
        missing and the collection to be served under it carries the pending marker."""
        if self.name in _names(self.client):
            return
        prefix = self.name + "."
        for name in _names(self.client):
            if not name.startswith(prefix):
                continue
            collection = self._get(name)
            metadata = dict((collection.metadata or {}) if collection is not None else {})
            if metadata.pop(PENDING_KEY, None) == self.name:
                collection.modify(name=self.name, metadata=_modifiable(metadata))
                return

    # ------------------------------------------------------------------ reading
    def exists(self):
        if not os.path.isdir(self.directory):
            return False
        self._recover()
        return self.name in _names(self.client)

    def reader(self, spec=None, dtype=None, extra_columns=()):
        from ._common import ColumnSpec

        self._recover()
        return ChromaReader(self.location, spec or ColumnSpec(), dtype, extra_columns)

    def migration(self, reader, width, column, job, *, replace=False, resume=False,
                  force=False):  # fmt: skip
        promote = self._promote_replace if replace else None
        kept = self._sibling_name(self.kept_name(EMBEDDING))
        if replace and self._get(kept) is not None:
            raise InputError(
                f"still keeps the collection {kept!r} of an earlier --replace or cutover: "
                "delete it (client.delete_collection) before replacing again",
                path=self.location,
            )
        return ChromaMigration(reader, self.location, width, job, replace=replace,
                               resume=resume, force=force, promote=promote)  # fmt: skip

    def _promote_replace(self, staged, entry):
        """``--replace``: serve the checked staging as ``NAME``, the old collection kept
        as the column :meth:`kept_name` (its collection ``NAME.<kept>``), the ledger
        with ``entry`` travelling with the name."""
        main = self._main()
        kept = self.kept_name(EMBEDDING)
        stale = self._get(self._sibling_name(MIGRATED))
        if stale is not None:  # what an undone earlier --replace parked: no redo reaches it
            self.client.delete_collection(stale.name)
        entry = dict(entry, previous=self._sibling_name(kept))
        entries = read_ledger(main.metadata) + [entry]
        self._swap(staged, kept, entries)
        return (
            f"replaced the vectors of {self.location}: the collection {self.name!r} holds the "
            f"new vectors, {self._sibling_name(kept)!r} the old ones; undo with: "
            f"{self.undo_line()}"
        )

    def sink(self, layout, *, force=False):
        return ChromaSink(self.location, layout, force=force)

    # ------------------------------------------------------------------ ledger
    def ledger(self):
        if not os.path.isdir(self.directory):
            return []
        try:
            return read_ledger(self._main().metadata)
        except InputError:
            return []

    def append_ledger(self, entry):
        main = self._main()
        metadata = dict(main.metadata or {})
        entries = read_ledger(metadata) + [dict(entry)]
        metadata[LEDGER_KEY] = json.dumps(entries, separators=(",", ":"))
        main.modify(metadata=_modifiable(metadata))

    # ------------------------------------------------------------------ columns
    def _width(self, collection):
        got = collection.get(limit=1, include=["embeddings"])
        embeddings = got.get("embeddings")
        if embeddings is None or len(embeddings) == 0:
            return (collection.metadata or {}).get(WIDTH_KEY)
        return len(embeddings[0])

    def vector_columns(self):
        out = {EMBEDDING: self._width(self._main())}
        for column, collection in self._siblings().items():
            out[column] = (collection.metadata or {}).get(WIDTH_KEY) or self._width(collection)
        return out

    def add_column(self, name, width, like=EMBEDDING):
        main = self._main()
        if like != EMBEDDING:
            raise InputError(
                f"a Chroma collection holds one vector per record ({EMBEDDING!r}); a column "
                f"is added beside it, not beside {like!r}",
                path=self.location,
            )
        sibling_name = self._sibling_name(name)
        _check_name(sibling_name, self.column_location(name))
        where = self.column_location(name)
        width = int(width)
        existing = self._get(sibling_name)
        if existing is not None:
            metadata = existing.metadata or {}
            if metadata.get(PARENT_KEY) != self.name or metadata.get(WIDTH_KEY) != width:
                raise InputError(
                    f"the collection {sibling_name!r} already exists and is not a column of "
                    f"{width} values added to {self.name!r}; choose another --add-column name",
                    path=self.location,
                )
            return f"{self.location}: column {name!r} is already the collection {where}; resuming"
        metadata = own_keys_removed(main.metadata)
        metadata.update(
            {PARENT_KEY: self.name, COLUMN_KEY: name, WIDTH_KEY: width, PROVENANCE_KEY: True}
        )
        configuration = _index_configuration(main)
        extra = {} if configuration is None else {"configuration": configuration}
        self.client.create_collection(
            sibling_name, metadata=metadata, embedding_function=None, **extra
        )
        return (
            f"{self.location}: added the column {name!r} ({width} values) as the collection "
            f"{where} (the same distance and index settings as {self.name!r})"
        )

    # ------------------------------------------------------------------ rows by id
    def _main_records(self, main, ids, include):
        """``{id: (document, metadata, embedding)}`` of the ``ids`` ``NAME`` holds."""
        out = {}
        for start in range(0, len(ids), _PAGE):
            part = ids[start : start + _PAGE]
            got = main.get(ids=part, include=include)
            documents = got.get("documents")
            metadatas = got.get("metadatas")
            embeddings = got.get("embeddings")
            for k, i in enumerate(got["ids"]):
                out[i] = (
                    None if documents is None else documents[k],
                    None if metadatas is None else metadatas[k],
                    None if embeddings is None else embeddings[k],
                )
        return out

    def _collection_of(self, column):
        return self._main() if column == EMBEDDING else self._sibling(column)

    def read_rows(self, column, ids):
        ids = [str(i) for i in np.asarray(ids).tolist()]
        main = self._main()
        known_ids = self._main_records(main, ids, [])
        known = np.array([i in known_ids for i in ids], dtype=bool)
        collection = self._collection_of(column)
        width = self.vector_columns()[column] or 0
        Z = np.full((len(ids), width), np.nan, dtype=np.float32)
        provenance = np.full(len(ids), None, dtype=object)
        have = self._main_records(
            collection,
            [i for i, k in zip(ids, known, strict=True) if k],
            ["embeddings", "metadatas"],
        )
        added = column != EMBEDDING or self._provenance_kept(main)
        for row, i in enumerate(ids):
            if i in have:
                _, metadata, embedding = have[i]
                Z[row] = np.asarray(embedding, dtype=np.float32)
                provenance[row] = (metadata or {}).get(SOURCE_KEY) if added else None
        return known, Z, provenance

    def _provenance_kept(self, collection):
        """Whether ``collection``'s records carry their provenance (an added column, or
        one served after a cutover)."""
        return bool((collection.metadata or {}).get(PROVENANCE_KEY))

    def write_rows(self, column, ids, Z, provenance):
        self.last_written = 0
        if column == EMBEDDING:
            raise InputError(
                f"{EMBEDDING!r} is the collection's own vector: rows are written into an "
                "added column (transform --add-column)",
                path=self.location,
            )
        sibling = self._sibling(column)
        width = (sibling.metadata or {}).get(WIDTH_KEY)
        Z = rows_of_width(Z, width, column, self.location)
        raw = np.asarray(ids)
        ids = [str(i) for i in raw.tolist()]
        if len(ids) != len(Z):
            raise ValueError(f"{len(ids)} ids for {len(Z)} vectors")
        if len(set(ids)) != len(ids):
            seen = set()
            dup = next(i for i in ids if i in seen or seen.add(i))
            raise InputError(
                f"the id {dup!r} comes twice in one batch: nothing written", path=self.location
            )
        main = self._main()
        records = self._main_records(main, ids, ["documents", "metadatas"])
        known = np.array([i in records for i in ids], dtype=bool)
        if isinstance(provenance, str) or provenance is None:
            sources = [provenance] * len(ids)
        else:
            sources = list(np.asarray(provenance, dtype=object))
        rows = np.flatnonzero(known)
        Z = np.asarray(Z, dtype=np.float32)
        # Rows already holding these bits with this provenance are left alone.
        held = self._main_records(sibling, [ids[r] for r in rows], ["embeddings", "metadatas"])
        rows = np.array(
            [r for r in rows if not _holds(held.get(ids[r]), Z[r], sources[r])], dtype=np.int64
        )
        self.last_written = len(rows)
        limit = min(_PAGE, self.client.get_max_batch_size())
        for start in range(0, len(rows), limit):
            part = rows[start : start + limit]
            documents, metadatas = [], []
            for r in part:
                document, metadata, _ = records[ids[r]]
                documents.append(document)
                metadatas.append({**own_keys_removed(metadata), SOURCE_KEY: sources[r]})
            sibling.upsert(
                ids=[ids[r] for r in part],
                embeddings=Z[part],
                documents=None if all(d is None for d in documents) else documents,
                metadatas=metadatas,
            )
        return raw[~known]

    def iter_rows(self, columns, batch_size):
        main = self._main()
        collections = {c: self._collection_of(c) for c in columns}
        widths = self.vector_columns()
        n = main.count()
        for start in range(0, n, batch_size):
            page = main.get(offset=start, limit=batch_size, include=[])
            ids = list(page["ids"])
            vectors, sources = {}, {}
            for column, collection in collections.items():
                have = self._main_records(collection, ids, ["embeddings", "metadatas"])
                Z = np.full((len(ids), widths[column] or 0), np.nan, dtype=np.float32)
                P = np.full(len(ids), None, dtype=object)
                added = self._provenance_kept(collection)
                for row, i in enumerate(ids):
                    if i in have:
                        Z[row] = np.asarray(have[i][2], dtype=np.float32)
                        if added:
                            P[row] = (have[i][1] or {}).get(SOURCE_KEY)
                vectors[column], sources[column] = Z, P
            yield np.asarray(ids, dtype=object), vectors, sources

    def column_status(self, column):
        main = self._main()
        if column != EMBEDDING and column not in self._siblings():
            raise InputError(
                f"has no vector column {column!r} (columns: {', '.join(self.vector_columns())})",
                path=self.location,
            )
        collection = self._collection_of(column)
        rows = main.count()
        out = {
            "dimension": self.vector_columns()[column],
            "rows": rows,
            "mapped": {},
            "native": 0,
            "missing": 0,
            "index": "HNSW",
        }
        location = self.column_location(column)
        if location is not None:
            out["collection"] = location
        if self._provenance_kept(collection):
            present = collection.count()
            out["missing"] = max(rows - present, 0) if column != EMBEDDING else 0
            for start in range(0, present, _PAGE):
                got = collection.get(offset=start, limit=_PAGE, include=["metadatas"])
                for metadata in got["metadatas"]:
                    value = (metadata or {}).get(SOURCE_KEY)
                    model = provenance_model(value)
                    if model is not None:
                        out["mapped"][model] = out["mapped"].get(model, 0) + 1
                    elif value == "native":
                        out["native"] += 1
            return out
        done = _ledger.last_mapping(read_ledger(collection.metadata), EMBEDDING)
        if column == EMBEDDING and done is not None:
            model = done.get("model") or {}
            out["mapped"][model.get("id") or model.get("sha256") or "unknown"] = rows
        else:
            out["native"] = collection.count()
            out["missing"] = rows - out["native"] if column != EMBEDDING else 0
        return out

    # ------------------------------------------------------------------ cutover
    def kept_name(self, column=EMBEDDING):
        return f"{EMBEDDING}_sklearn_compat_previous"

    def _swap(self, served, kept_column, entries):
        """Serve collection ``served`` as ``NAME`` and keep ``NAME`` as the column
        ``kept_column`` (the sibling ``NAME.kept_column``), the ledger ``entries``
        travelling with the name."""
        main = self._main()
        kept_name = self._sibling_name(kept_column)
        _check_name(kept_name, self.column_location(kept_column))
        if self._get(kept_name) is not None:
            raise InputError(
                f"the collection {kept_name!r} already exists; delete it (it holds what an "
                "earlier --replace or cutover kept) before cutting over again",
                path=self.location,
            )
        ledger = json.dumps(entries, separators=(",", ":"))
        # 1. The collection to be served carries the ledger and the pending marker.
        metadata = dict(served.metadata or {})
        metadata.pop(PARENT_KEY, None)
        metadata.pop(COLUMN_KEY, None)
        metadata[LEDGER_KEY] = ledger
        metadata[PENDING_KEY] = self.name
        served.modify(metadata=_modifiable(metadata))
        # 2. NAME becomes the kept column (its ledger stays with the name, not with it).
        old = dict(main.metadata or {})
        old.pop(LEDGER_KEY, None)
        old.update({PARENT_KEY: self.name, COLUMN_KEY: kept_column,
                    WIDTH_KEY: self._width(main)})  # fmt: skip
        main.modify(name=kept_name, metadata=_modifiable(old))
        # 3. The new one takes the name.
        metadata.pop(PENDING_KEY)
        served.modify(name=self.name, metadata=_modifiable(metadata))

    def cutover(self, column):
        main = self._main()
        sibling = self._sibling(column)
        rows, present = main.count(), sibling.count()
        if present < rows:
            raise InputError(
                f"column {column!r} has no vector for {rows - present} of {rows} rows: finish "
                "`transform --add-column` first (its --resume), then cut over",
                path=self.location,
            )
        kept = self.kept_name(EMBEDDING)
        entry = _ledger.entry("cutover", column=column, served=EMBEDDING, kept=kept,
                              collection=self._sibling_name(column),
                              kept_collection=self._sibling_name(kept))  # fmt: skip
        entries = read_ledger(main.metadata) + [entry]
        self._swap(sibling, kept, entries)
        return (
            f"{self.location}: serves the column {column!r} (collection "
            f"{self._sibling_name(column)!r}) as {self.name!r}; the old collection is kept as "
            f"{self._sibling_name(kept)!r} (column {kept!r}); undo with: {self.undo_line()}"
        )

    def rollback(self, to_version=None):
        if to_version is not None:
            raise InputError(
                "a Chroma collection keeps no versions: rollback undoes the last cutover "
                "(give no --to-version)",
                path=self.location,
            )
        main = self._main()
        entries = read_ledger(main.metadata)
        target, redo = _ledger.rollback_target(entries)
        if target is None:
            raise InputError(
                "the ledger records no --replace or cutover to undo (a migration with "
                "--output leaves its input as it was)",
                path=self.location,
            )
        entry = _ledger.entry("rollback", column=target.get("column"),
                              undoes=_ledger.undo_reference(target))  # fmt: skip
        kept = self.kept_name(EMBEDDING)
        if target["action"] == "replace":
            park, back = (kept, MIGRATED) if redo else (MIGRATED, kept)
            if self._siblings().get(back) is None:
                raise InputError(
                    f"the collection {self._sibling_name(back)!r} that --replace kept is gone "
                    "(deleted): nothing to restore",
                    path=self.location,
                )
            self._swap(self._sibling(back), park, entries + [entry])
            what = "the migrated vectors" if redo else "the vectors from before --replace"
            return (
                f"{self.location}: serves {what} again ({self._sibling_name(park)!r} holds "
                f"the others); undo with: {self.undo_line()}"
            )
        kept = target.get("kept") or kept
        if redo:  # serve the added column again; the old one kept again
            served, park = self._sibling(target["column"]), kept
        else:  # serve the kept old collection again; the added column back beside it
            served, park = self._sibling(kept), target["column"]
        self._swap(served, park, entries + [entry])
        now = "the added column" if redo else "the old collection"
        return (
            f"{self.location}: serves {now} again (the column {target['column']!r} "
            f"{'as' if redo else 'beside'} {self.name!r}); undo with: {self.undo_line()}"
        )

    def close(self):
        self._client = None


def _holds(record, z, provenance):
    """Whether a sibling record (``(document, metadata, embedding)`` or None) holds the
    vector ``z`` bit for bit with ``provenance``."""
    if record is None or record[2] is None:
        return False
    if (record[1] or {}).get(SOURCE_KEY) != provenance:
        return False
    held = np.asarray(record[2], dtype=np.float32)
    return held.shape == z.shape and bool((held.view(np.uint32) == z.view(np.uint32)).all())

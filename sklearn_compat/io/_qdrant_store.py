"""The Qdrant room: a collection ``qdrant:DIR::NAME`` (local mode) or
``qdrant[s]://HOST[:PORT]::NAME`` (a server) behind :class:`~._stores.base.Store`.

Qdrant cannot add a vector to an existing collection, rename one, or hold an alias and a
collection under one name.  So:

- **An added column** ``C`` of ``NAME`` is a **sibling collection** ``NAME.C`` with the
  settings of ``NAME`` (distance, HNSW, quantization; the vector ``like`` resized to the
  new width, other named vectors as they are), created empty.  A row of the column exists
  once it is written: the point of ``NAME`` with its payload and other vectors, the new
  vector, and the row's provenance in the payload field ``sklearn_compat_provenance``
  (``"native"`` or ``"mapped:<model id>"``).  Rows are written by id for the ids ``NAME``
  holds only: an id ``NAME`` lacks is never added.
- **Cutover** points the alias ``NAME`` at the sibling, in one alias operation: queries
  are unchanged (same name, same vector name).  The collection served before is kept
  whole (``status`` shows it as the column ``<like>_sklearn_compat_previous``), and
  **rollback** points the alias back: no vector is rewritten, so it is bit for bit.  Both
  need ``NAME`` to be an alias (everything sklearn-compat writes is served by one); a
  plain collection is refused in one line.
- **The ledger** is the JSON list under ``sklearn_compat_ledger`` in the metadata of the
  collection the name serves; a cutover or ``--replace`` carries it forward.

A Qdrant collection of the ``Cosine`` distance stores every vector normalised (the
engine's own rule, on every write): rows written there read back as their normalised
form; ``Dot``, ``Euclid`` and ``Manhattan`` collections read back bit for bit.
"""

import json

import numpy as np

from ._common import InputError
from ._qdrant import (
    LEDGER_KEY,
    PROVENANCE_FIELD,
    QdrantReader,
    _check_name,
    client_for,
    collection_names,
    dense_vectors,
    info_of,
    is_named,
    ledger_of,
    metadata_of,
    parse_qdrant,
    point_ids,
    qdrant_id,
    resolve,
)
from ._qdrant_write import (
    QdrantMigration,
    QdrantSink,
    copy_payload_indexes,
    copy_settings,
    rollback_qdrant,
    switch_alias,
)
from ._stores import ledger as _ledger
from ._stores.base import Store, provenance_model

__all__ = ["QdrantStore"]

PARENT_KEY = "sklearn_compat_parent"
COLUMN_KEY = "sklearn_compat_column"
# Points per retrieve / scroll call of the upgrade operations.
_PAGE = 4096


class QdrantStore(Store):
    """A Qdrant collection or alias (see the module notes for what is kept where).

    Parameters
    ----------
    location : str
        ``qdrant:DIR::NAME`` (``QdrantClient(path=DIR)``), ``qdrant://HOST[:PORT]::NAME``
        or ``qdrants://HOST[:PORT]::NAME`` (TLS); a server's API key comes from
        ``QDRANT_API_KEY``.
    """

    kind = "qdrant"
    one_vector_per_record = True
    secret_sources = ("QDRANT_API_KEY",)

    def __init__(self, location):
        super().__init__(location)
        self.loc = parse_qdrant(location)
        self.name = self.loc.collection
        self._client = None

    # ------------------------------------------------------------------ naming
    def display(self):
        return self.loc.display()

    def shell_location(self):
        return self.loc.display()

    def undo_line(self, command="rollback", *options):
        import shlex

        words = ["sklearn-compat", command, "--table", self.display(), *options]
        return " ".join(shlex.quote(str(w)) for w in words)

    @property
    def client(self):
        if self._client is None:
            self._client = client_for(self.loc)
        return self._client

    def _served(self):
        """``(physical collection, is_alias)`` of the name; an error when absent."""
        physical, is_alias = resolve(self.client, self.name)
        if physical is None:
            info_of(self.client, self.name, self.display())  # raises, naming them
        return physical, is_alias

    def _info(self, physical=None):
        return self.client.get_collection(physical or self._served()[0])

    # ------------------------------------------------------------------ reading
    def exists(self):
        try:
            client = client_for(self.loc)
        except InputError:
            return False
        self._client = client
        return resolve(client, self.name)[0] is not None

    def reader(self, spec, dtype=None, extra_columns=()):
        from ._common import ColumnSpec

        return QdrantReader(self.location, spec or ColumnSpec(), dtype, tuple(extra_columns))

    # ------------------------------------------------------------------ migrations
    def migration(self, reader, width, column, job, *, replace=False, resume=False,
                  force=False):  # fmt: skip
        migration = QdrantMigration(
            reader,
            None if replace else self.location,
            width,
            column,
            job,
            replace=replace,
            resume=resume,
            force=force,
        )
        migration.undo = self.undo_line()
        return migration

    def sink(self, layout, *, force=False):
        return QdrantSink(self.location, layout, force=force)

    def rollback(self, to_version=None):
        line = rollback_qdrant(self.location, to_version)
        return f"{line}; redo with: {self.undo_line()}"

    # ------------------------------------------------------------------ ledger
    def ledger(self):
        try:
            physical, _ = resolve(self.client, self.name)
        except InputError:
            return []
        if physical is None:
            return []
        return ledger_of(self.client.get_collection(physical))

    def append_ledger(self, entry):
        physical, _ = self._served()
        history = ledger_of(self.client.get_collection(physical))
        history.append(dict(entry))
        self.client.update_collection(physical, metadata={LEDGER_KEY: json.dumps(history)})

    # ------------------------------------------------------------------ columns
    def _added(self):
        """``{column: add_column entry}`` of the columns added and in effect (not yet
        served by a cutover)."""
        added = {}
        entries = _ledger.in_effect(self.ledger())
        for e in entries:
            if e.get("action") == "add_column" and e.get("sibling"):
                added[e["column"]] = e
            if e.get("action") == "cutover":
                added.pop(e.get("column"), None)
        return added

    def _cutovers(self):
        return [e for e in _ledger.in_effect(self.ledger()) if e.get("action") == "cutover"]

    def vector_columns(self):
        info = self._info()
        columns = {name: int(p.size) for name, p in dense_vectors(info).items()}
        for e in self._cutovers():
            kept = e.get("kept")
            if kept and e.get("previous") in collection_names(self.client):
                previous = self.client.get_collection(e["previous"])
                columns[kept] = int(dense_vectors(previous)[e["served"]].size)
        for column, e in self._added().items():
            columns[column] = int(e["width"])
        return columns

    def column_location(self, column):
        e = self._added().get(column)
        if e is not None:
            return self.loc.with_collection(e["sibling"]).display()
        for e in self._cutovers():
            if e.get("kept") == column:
                return self.loc.with_collection(e["previous"]).display()
        return None

    def added_columns(self):
        return {c: e.get("like") for c, e in self._added().items() if e.get("like")}

    def _column(self, column):
        """``(physical collection, vector key, added entry or None)`` of ``column``."""
        physical, _ = self._served()
        info = self._info(physical)
        e = self._added().get(column)
        if e is not None:
            return e["sibling"], e.get("key"), e
        vectors = dense_vectors(info)
        if column in vectors:
            return physical, (column if is_named(info) else None), None
        for e in self._cutovers():
            if e.get("kept") == column and e.get("previous") in collection_names(self.client):
                kept = self.client.get_collection(e["previous"])
                return e["previous"], (e["served"] if is_named(kept) else None), None
        raise InputError(
            f"no vector column {column!r} (columns: "
            f"{', '.join(map(repr, self.vector_columns()))})",
            path=self.display(),
        )

    def add_column(self, name, width, like):
        physical, _ = self._served()
        info = self._info(physical)
        vectors = dense_vectors(info)
        if like not in vectors:
            raise InputError(
                f"no vector column {like!r} to add {name!r} beside (columns: "
                f"{', '.join(map(repr, vectors))})",
                path=self.display(),
            )
        existing = self._added().get(name)
        if existing is not None:
            if int(existing["width"]) != int(width):
                raise InputError(
                    f"column {name!r} exists with {existing['width']} values, not {width}",
                    path=self.display(),
                )
            if existing["sibling"] in collection_names(self.client):
                return f"column {name!r} exists: {self.column_location(name)} (resumed)"
        elif name in vectors:
            raise InputError(f"column {name!r} is in use", path=self.display())
        sibling = f"{self.name}.{name}"
        _check_name(sibling, self.display())
        taken = collection_names(self.client)
        if sibling in taken or sibling in (a for a in self._aliases()):
            raise InputError(
                f"a collection {sibling!r} exists already (the added column's collection); "
                "choose another column name",
                path=self.display(),
            )
        metadata = {k: v for k, v in metadata_of(info).items() if not k.startswith("sklearn_")}
        metadata.update({PARENT_KEY: self.name, COLUMN_KEY: name})
        self.client.create_collection(
            sibling, metadata=metadata, **copy_settings(info, like, width)
        )
        copy_payload_indexes(self.client, info, sibling)
        record = _ledger.entry(
            "add_column",
            column=name,
            like=like,
            width=int(width),
            sibling=sibling,
            key=like if is_named(info) else None,
        )
        self.append_ledger(record)
        where = self.loc.with_collection(sibling).display()
        return f"added column {name!r} as the collection {where}"

    def _aliases(self):
        from ._qdrant import aliases

        return aliases(self.client)

    def _id_field(self):
        """The payload field that holds the table's ids, or None (the point ids)."""
        return None if self.id_column in (None, "id") else self.id_column

    def _point_ids(self, ids):
        """The point id of each table id (None where the collection has none): the id
        itself when the ids are point ids, else the point whose payload field
        :attr:`id_column` holds it."""
        values = np.asarray(ids, dtype=object).tolist()
        field = self._id_field()
        if field is None:
            out = []
            for value in values:
                try:
                    out.append(qdrant_id(value))
                except ValueError:
                    out.append(None)  # not a point id at all: an id the table lacks
            return out
        from qdrant_client import models

        served, _ = self._served()
        found = {}
        for i in range(0, len(values), _PAGE):
            chunk = [v.item() if hasattr(v, "item") else v for v in values[i : i + _PAGE]]
            condition = models.FieldCondition(key=field, match=models.MatchAny(any=chunk))
            offset = None
            while True:
                records, offset = self.client.scroll(
                    served,
                    scroll_filter=models.Filter(must=[condition]),
                    limit=_PAGE,
                    offset=offset,
                    with_payload=[field],
                )
                for r in records:
                    found.setdefault((r.payload or {}).get(field), r.id)
                if offset is None:
                    break
        return [found.get(v.item() if hasattr(v, "item") else v) for v in values]

    def _retrieve(self, physical, ids, *, vectors, payload):
        """``{point id: Record}`` of the ``ids`` collection ``physical`` holds."""
        found = {}
        ids = [i for i in ids if i is not None]
        for i in range(0, len(ids), _PAGE):
            for record in self.client.retrieve(
                physical, ids[i : i + _PAGE], with_payload=payload, with_vectors=vectors
            ):
                found[record.id] = record
        return found

    def read_rows(self, column, ids):
        return self._read_points(column, self._point_ids(ids))

    def _read_points(self, column, wanted):
        physical, key, added = self._column(column)
        served, _ = self._served()
        known_ids = self._retrieve(served, wanted, vectors=False, payload=False)
        width = self.vector_columns()[column]
        Z = np.full((len(wanted), width), np.nan, dtype=np.float32)
        provenance = np.full(len(wanted), None, dtype=object)
        rows = self._retrieve(
            physical,
            wanted,
            vectors=[key] if key else True,
            payload=[PROVENANCE_FIELD] if added else False,
        )
        known = np.array([w is not None and w in known_ids for w in wanted], dtype=bool)
        for i, w in enumerate(wanted):
            record = rows.get(w)
            if record is None or not known[i]:
                continue
            vector = record.vector if key is None else (record.vector or {}).get(key)
            if vector is None:
                continue
            Z[i] = vector
            if added:
                provenance[i] = (record.payload or {}).get(PROVENANCE_FIELD)
        return known, Z, provenance

    def write_rows(self, column, ids, Z, provenance):
        from qdrant_client import models

        physical, key, added = self._column(column)
        if added is None:
            raise InputError(
                f"column {column!r} is not an added column; write_rows fills a column "
                "added with --add-column",
                path=self.display(),
            )
        Z = np.asarray(Z, dtype=np.float32)
        wanted = self._point_ids(ids)
        if len(wanted) != len(Z):
            raise ValueError("one row of Z per id")
        served, _ = self._served()
        info = self._info(served)
        others = [n for n in dense_vectors(info) if n != added.get("like")] if key else []
        parents = self._retrieve(served, wanted, vectors=others if others else False, payload=True)
        if isinstance(provenance, str) or provenance is None:
            provenance = [provenance] * len(wanted)
        points, unknown = [], []
        for i, w in enumerate(wanted):
            parent = parents.get(w)
            if parent is None:
                unknown.append(np.asarray(ids, dtype=object)[i])
                continue
            payload = dict(parent.payload or {})
            payload[PROVENANCE_FIELD] = provenance[i]
            if key is None:
                vector = Z[i].tolist()
            else:
                vector = {k: v for k, v in (parent.vector or {}).items() if k in others}
                vector[key] = Z[i].tolist()
            points.append(models.PointStruct(id=w, vector=vector, payload=payload))
        for i in range(0, len(points), _PAGE):
            self.client.upsert(physical, points=points[i : i + _PAGE], wait=True)
        return np.asarray(unknown, dtype=object)

    def iter_rows(self, columns, batch_size):
        served, _ = self._served()
        field = self._id_field()
        offset = None
        while True:
            records, offset = self.client.scroll(
                served, limit=batch_size, offset=offset, with_payload=[field] if field else False
            )
            if records:
                if field is None:
                    ids = point_ids(r.id for r in records)
                else:
                    ids = np.asarray([(r.payload or {}).get(field) for r in records], object)
                vectors, provenance = {}, {}
                for column in columns:
                    _, Z, prov = self._read_points(column, [r.id for r in records])
                    vectors[column] = Z
                    added = self._added().get(column) is not None
                    provenance[column] = prov if added else np.full(len(ids), None, object)
                yield ids, vectors, provenance
            if offset is None:
                return

    def column_status(self, column):
        physical, key, added = self._column(column)
        served, _ = self._served()
        rows = self.client.count(served if added else physical, exact=True).count
        width = self.vector_columns()[column]
        cut_over = any(e.get("current") == physical for e in self._cutovers())
        if added is None and not cut_over:
            mapping = _ledger.last_mapping(self.ledger())
            model = (mapping or {}).get("model") or {}
            if mapping is not None and mapping.get("action") in ("transform", "replace"):
                mapped = {model.get("id") or "unknown": rows}
                return {"dimension": width, "rows": rows, "mapped": mapped, "native": 0,
                        "missing": 0}  # fmt: skip
            return {"dimension": width, "rows": rows, "mapped": {}, "native": rows, "missing": 0}
        mapped, native = {}, 0
        offset = None
        while True:
            records, offset = self.client.scroll(
                physical, limit=_PAGE, offset=offset, with_payload=[PROVENANCE_FIELD]
            )
            for r in records:
                source = (r.payload or {}).get(PROVENANCE_FIELD)
                model = provenance_model(source)
                if model is not None:
                    mapped[model] = mapped.get(model, 0) + 1
                elif source == "native":
                    native += 1
            if offset is None:
                break
        missing = max(rows - native - sum(mapped.values()), 0)
        return {"dimension": width, "rows": rows, "mapped": mapped, "native": native,
                "missing": missing}  # fmt: skip

    def kept_name(self, column):
        return f"{column}_sklearn_compat_previous"

    def cutover(self, column):
        physical, is_alias = self._served()
        added = self._added().get(column)
        if added is None:
            raise InputError(
                f"no added column {column!r} to cut over to (columns: "
                f"{', '.join(map(repr, self.vector_columns()))})",
                path=self.display(),
            )
        if not is_alias:
            raise InputError(
                "is a collection, not an alias: Qdrant can neither rename a collection nor "
                "put an alias on its name, so cutover switches an alias (the old collection "
                "kept whole for rollback). Serve queries from an alias (every collection "
                "sklearn-compat writes with --output is served by one), then cut over there",
                path=self.display(),
            )
        status = self.column_status(column)
        if status["missing"]:
            raise InputError(
                f"column {column!r} lacks {status['missing']} of {status['rows']} rows; "
                "those points would no longer be served after the cutover: map or backfill "
                "them first (transform --add-column, backfill)",
                path=self.display(),
            )
        like = added["like"]
        kept = self.kept_name(like)
        history = self.ledger()
        record = _ledger.entry(
            "cutover",
            column=column,
            served=like,
            kept=kept,
            alias=self.name,
            previous=physical,
            current=added["sibling"],
        )
        self.client.update_collection(
            added["sibling"], metadata={LEDGER_KEY: json.dumps(history + [record])}
        )
        switch_alias(self.client, self.name, added["sibling"])
        return (
            f"cut over {self.display()}: column {column!r} is served as {like!r} (collection "
            f"{added['sibling']}); the old vectors are kept as {kept!r} (collection "
            f"{physical}); undo with: {self.undo_line()}"
        )

    def close(self):
        self._client = None

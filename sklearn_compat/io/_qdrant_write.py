"""Writing Qdrant collections: a migration (``transform`` from a collection into a new
one, or ``--replace``), a new collection from ids and vectors (:class:`QdrantSink`), the
alias switch every promotion and ``rollback`` make, and the copy of a collection's
settings (distance, HNSW, quantization, sharding, payload indexes) onto a new one.

A migration stages the mapped points in a new collection ``NAME.vK`` whose metadata names
the output it is for (:data:`~._qdrant.STAGING_KEY`), the job and the owner run; an
interrupted run is finished with ``--resume`` (the staging holds a prefix of the input in
point id order: the rest is scrolled from there).  The finishing step checks the count,
writes the ledger into the staging's metadata and then points the alias ``NAME`` at it in
one alias operation.
"""

import json
import time

import numpy as np

from ._common import InputError
from ._ownership import OutputLock
from ._qdrant import (
    LEDGER_KEY,
    OWNER_KEY,
    STAGING_KEY,
    aliases,
    client_for,
    collection_names,
    dense_vectors,
    info_of,
    is_named,
    ledger_of,
    lock_path,
    metadata_of,
    parse_qdrant,
    qdrant_id,
    resolve,
)

__all__ = [
    "QdrantMigration",
    "QdrantSink",
    "copy_settings",
    "rollback_qdrant",
    "switch_alias",
]

JOB_KEY = "sklearn_compat_job"
# Points per page when two collections' ids are compared.
_ID_PAGE = 1 << 16


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _models():
    from qdrant_client import models

    return models


def _diff(model_cls, value):
    """``value`` (a config object, or None) as the ``*Diff`` model ``create_collection``
    takes, keeping only the fields the diff has."""
    if value is None:
        return None
    data = value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else dict(value)
    fields = getattr(model_cls, "model_fields", {})
    return model_cls(**{k: v for k, v in data.items() if k in fields})


def copy_settings(info, column, width, *, rename=None):
    """``create_collection`` keyword arguments for a collection like ``info``'s whose
    vector ``column`` holds ``width`` values (renamed ``rename`` when given): the same
    distance and per-vector settings, named vectors, sparse vectors, HNSW,
    quantization, sharding and payload storage settings.

    Examples
    --------
    >>> from qdrant_client import models
    >>> from sklearn_compat.io._qdrant_write import copy_settings
    >>> params = models.CollectionParams(
    ...     vectors=models.VectorParams(size=4, distance=models.Distance.DOT))
    >>> info = models.CollectionInfo(
    ...     status="green", optimizer_status="ok", segments_count=1, payload_schema={},
    ...     config=models.CollectionConfig(
    ...         params=params, hnsw_config=models.HnswConfig(m=32, ef_construct=200,
    ...         full_scan_threshold=10000), optimizer_config=models.OptimizersConfig(
    ...         deleted_threshold=0.2, vacuum_min_vector_number=1000,
    ...         default_segment_number=0, flush_interval_sec=5),
    ...         wal_config=None, quantization_config=models.ScalarQuantization(
    ...             scalar=models.ScalarQuantizationConfig(type="int8"))))
    >>> kwargs = copy_settings(info, "vector", 3)
    >>> kwargs["vectors_config"].size, kwargs["vectors_config"].distance.value
    (3, 'Dot')
    >>> kwargs["hnsw_config"].m, kwargs["quantization_config"].scalar.type.value
    (32, 'int8')
    """
    models = _models()
    config = info.config
    params = config.params
    vectors = dense_vectors(info)
    resized = vectors[column].model_copy(update={"size": int(width)})
    if is_named(info):
        vectors_config = {
            (rename or column if name == column else name): (resized if name == column else p)
            for name, p in vectors.items()
        }
    else:
        vectors_config = resized
    kwargs = {
        "vectors_config": vectors_config,
        "sparse_vectors_config": params.sparse_vectors or None,
        "shard_number": params.shard_number,
        "replication_factor": params.replication_factor,
        "write_consistency_factor": params.write_consistency_factor,
        "on_disk_payload": params.on_disk_payload,
        "hnsw_config": _diff(models.HnswConfigDiff, config.hnsw_config),
        "quantization_config": config.quantization_config,
    }
    return {k: v for k, v in kwargs.items() if v is not None}


def copy_payload_indexes(client, info, name):
    """Create on collection ``name`` the payload indexes ``info``'s collection has."""
    for field, index in (info.payload_schema or {}).items():
        schema = index.params if getattr(index, "params", None) is not None else index.data_type
        client.create_payload_index(name, field_name=field, field_schema=schema, wait=True)


def switch_alias(client, alias, target, *, delete_collection=None):
    """Point ``alias`` at collection ``target`` in one alias operation (creating it, or
    moving it from the collection it served).  ``delete_collection``: a collection of the
    alias's name to delete first (``--force`` over a plain collection)."""
    models = _models()
    if delete_collection is not None:
        client.delete_collection(delete_collection)
    operations = []
    if alias in aliases(client):
        operations.append(
            models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
        )
    operations.append(
        models.CreateAliasOperation(
            create_alias=models.CreateAlias(collection_name=target, alias_name=alias)
        )
    )
    client.update_collection_aliases(change_aliases_operations=operations)


def new_physical_name(client, name):
    """The first ``NAME.vK`` (K = 1, 2, ...) that is neither a collection nor an alias."""
    taken = collection_names(client) | set(aliases(client))
    k = 1
    while f"{name}.v{k}" in taken:
        k += 1
    return f"{name}.v{k}"


def stagings_for(client, name):
    """The collections staged for output ``name`` (by their metadata)."""
    found = []
    for physical in sorted(collection_names(client)):
        if physical == name or not physical.startswith(name + "."):
            continue
        metadata = metadata_of(client.get_collection(physical))
        if metadata.get(STAGING_KEY) == name:
            found.append(physical)
    return found


def _set_metadata(client, name, **values):
    client.update_collection(name, metadata=values)


class QdrantMigration:
    """Write the mapped rows of a :class:`~._qdrant.QdrantReader` into a new collection
    served by the alias ``output`` (or, with ``replace``, by the input's own alias),
    resumably (the interface of :class:`~sklearn_compat.io._lance.LanceMigration`).

    Parameters
    ----------
    reader : QdrantReader
    output : str or None
        ``qdrant:DIR::NAME`` or ``qdrant://HOST::NAME`` (None with ``replace``).
    width : int
        The mapped width.
    column : str or None
        The output's vector name (None: the input's).
    job : dict
        What the ledger records of this migration; a resumed staging must record the
        same (all keys but ``time``, ``rows`` and ``finished``).
    """

    def __init__(
        self, reader, output, width, column, job, *, replace=False, resume=False, force=False
    ):
        self.reader = reader
        self.replace = replace
        self.force = force
        self.width = int(width)
        source = reader.loc
        self.loc = source if replace else parse_qdrant(output)
        self.name = self.loc.collection
        self.target = self.loc.display()
        same = self.loc.same_storage(source)
        self.client = reader.client if same else client_for(self.loc, create=True)
        self.column = reader.list_column
        self.rename = None if column in (None, self.column) else column
        if self.rename is not None and not is_named(reader.info):
            raise InputError(
                "the input's vector is unnamed; the output keeps it unnamed (give no "
                "--output-column)",
                path=self.target,
            )
        self.job = dict(job)
        self.job.setdefault("action", "replace" if replace else "transform")
        self.job.setdefault("input", reader.shown)
        self.job.setdefault("column", column or self.column)
        self.previous = None
        if replace:
            physical, is_alias = resolve(self.client, self.name)
            if not is_alias:
                raise InputError(
                    "is a collection, not an alias: Qdrant can neither rename a collection "
                    "nor put an alias on its name, so --replace (and rollback) switch an "
                    "alias, keeping the old collection whole. Write the mapped collection "
                    "with --output qdrant:...::NEW_NAME (served through the alias NEW_NAME), "
                    "then serve queries from that name",
                    path=self.target,
                )
            self.previous = physical
        else:
            physical, _ = resolve(self.client, self.name)
            if same and physical is not None and physical == reader.physical:
                raise InputError(
                    "is also the input; write the mapped vectors into a new collection "
                    "(or pass --replace)",
                    path=self.target,
                )
            if physical is not None and not force:
                raise InputError("already exists (pass --force to replace it)", path=self.target)
        self.undo = f"sklearn-compat rollback --table {self.target}"
        self.done = 0
        self.staged_name = None
        self.staging = f"{self.target} (staging)"
        self._offset = None
        self.lock = OutputLock.acquire(lock_path(self.loc, self.name), self.target)
        try:
            leftovers = stagings_for(self.client, self.name)
            if leftovers:
                self._adopt(leftovers[-1], resume)
        except BaseException:
            self.lock.release()
            raise

    # ---------------------------------------------------------------- staging
    def _adopt(self, physical, resume):
        """Take over the staging an interrupted run left (this run holds the lock)."""
        from ._stores.ledger import check_resume

        shown = self.loc.with_collection(physical).display()
        done = self.client.count(physical, exact=True).count
        if not resume:
            raise InputError(
                f"an interrupted migration left {done} of {self.reader.n_rows} points in "
                f"{shown}; pass --resume to finish it (or delete that collection to start "
                "over)",
                path=self.target,
            )
        metadata = metadata_of(self.client.get_collection(physical))
        staged = json.loads(metadata.get(JOB_KEY) or "{}")
        check_resume(self.job, staged, shown, self.target)
        _set_metadata(self.client, physical, **{OWNER_KEY: self.lock.token})
        self.staged_name, self.staging, self.done = physical, shown, done
        self._offset = self._skip(done)

    def _skip(self, done):
        """The scroll offset of the input's point number ``done``, checking that the
        staging holds exactly the input's first ``done`` points."""
        offset_in = offset_st = None
        left = done
        while left > 0:
            step = min(left, _ID_PAGE)
            mine, offset_st = self.client.scroll(
                self.staged_name, limit=step, offset=offset_st, with_payload=False
            )
            theirs, offset_in = self.reader.client.scroll(
                self.reader.loc.collection, limit=step, offset=offset_in, with_payload=False
            )
            if [p.id for p in mine] != [p.id for p in theirs]:
                raise InputError(
                    f"{self.staging} does not hold the input's first {done} points (was the "
                    "input changed?); delete it and run again",
                    path=self.target,
                )
            left -= step
        return offset_in

    def _create_staging(self):
        self.staged_name = new_physical_name(self.client, self.name)
        self.staging = self.loc.with_collection(self.staged_name).display()
        metadata = {
            k: v
            for k, v in metadata_of(self.reader.info).items()
            if k not in (LEDGER_KEY, OWNER_KEY, STAGING_KEY, JOB_KEY)
        }
        metadata.update(
            {STAGING_KEY: self.name, OWNER_KEY: self.lock.token, JOB_KEY: json.dumps(self.job)}
        )
        kwargs = copy_settings(self.reader.info, self.column, self.width, rename=self.rename)
        self.client.create_collection(self.staged_name, metadata=metadata, **kwargs)
        copy_payload_indexes(self.client, self.reader.info, self.staged_name)

    def release(self):
        """Give up the output's lock (after finishing, failing or being interrupted)."""
        self.lock.release()

    def batches(self, batch_size):
        """``(Batch, records)`` pairs of the points still to migrate."""
        reader = self.reader
        if self.done and self._offset is None:
            return
        start = self.done
        for records, _ in reader.pages(
            batch_size, self._offset, all_vectors=is_named(reader.info), payload=True
        ):
            batch = reader.to_batch(records, start)
            reader._check(batch)
            start += len(records)
            yield batch, records

    def write(self, records, Z):
        """Upsert one mapped batch (ids, payloads and other named vectors kept)."""
        models = _models()
        if self.staged_name is None:
            self._create_staging()
        Z = np.asarray(Z, dtype=np.float32)
        if is_named(self.reader.info):
            name = self.rename or self.column
            points = []
            for r, z in zip(records, Z, strict=True):
                vectors = {k: v for k, v in (r.vector or {}).items() if k != self.column}
                vectors[name] = z.tolist()
                points.append(models.PointStruct(id=r.id, vector=vectors, payload=r.payload))
        else:
            points = models.Batch(
                ids=[r.id for r in records],
                vectors=Z.tolist(),
                payloads=[r.payload for r in records],
            )
        self.client.upsert(self.staged_name, points=points, wait=True)
        self.done += len(Z)

    # ---------------------------------------------------------------- promotion
    def finish(self, log):
        """Check the staging (every input id once), write the ledger into it and point
        the alias at it; returns a line for the log."""
        if self.staged_name is None:  # an empty input: an empty collection
            self._create_staging()
        staged = self.client.get_collection(self.staged_name)
        metadata = metadata_of(staged)
        self.lock.check(metadata.get(OWNER_KEY), self.staging)
        n = self.client.count(self.staged_name, exact=True).count
        # Every staged point was upserted by this migration (the lock and the owner token)
        # with an id scrolled from the input, and a prefix adopted on --resume was checked
        # id by id (_skip); input ids are unique.  So the staging holds every input id
        # exactly when it holds as many points as the input and as were written.  (A scan
        # of both collections' ids would cost local mode a sort of every id per page.)
        if n != self.reader.n_rows or n != self.done:
            raise InputError(
                f"the staged collection has {n} points, the input {self.reader.n_rows}, this "
                f"migration wrote {self.done} (did the input change?); delete it and run again",
                path=self.staging,
            )
        entry = dict(self.job, rows=n, time=now(), alias=self.name, current=self.staged_name)
        entry["finished"] = entry["time"]
        if self.replace:
            entry["previous"] = self.previous
            history = ledger_of(self.client.get_collection(self.previous))
        else:
            # The output's history is the input's plus this mapping, so mapping the
            # output again with the same model is refused as well.
            history = self.reader.ledger()
        _set_metadata(
            self.client,
            self.staged_name,
            **{
                LEDGER_KEY: json.dumps(history + [entry]),
                STAGING_KEY: None,
                OWNER_KEY: None,
                JOB_KEY: None,
            },
        )
        physical, is_alias = resolve(self.client, self.name)
        drop = physical if physical is not None and not is_alias else None
        switch_alias(self.client, self.name, self.staged_name, delete_collection=drop)
        if self.replace:
            return (
                f"migrated {self.target} in place ({n} points, now served from "
                f"{self.staged_name}; the old vectors are kept in {self.previous}); undo with: "
                f"{self.undo}"
            )
        kept = ""
        if is_alias and physical is not None:
            kept = f"; the collection it served before, {physical}, is kept"
        return (
            f"wrote the Qdrant collection {self.target} ({n} points, collection "
            f"{self.staged_name} served by the alias {self.name}){kept}"
        )


def rollback_qdrant(location, to_version=None):
    """Undo the last ``--replace`` or ``cutover`` of the alias ``location`` (a second
    rollback redoes it): the alias goes back to the collection it served before, which
    was never written since (its vectors bit for bit).  Returns a line for the log."""
    from ._stores.ledger import entry, rollback_target, undo_reference

    loc = parse_qdrant(location)
    shown = loc.display()
    if to_version is not None:
        raise InputError(
            "--to-version applies to a LanceDB table; a Qdrant rollback switches the "
            "alias back to the collection it served before",
            path=shown,
        )
    client = client_for(loc)
    physical, is_alias = resolve(client, loc.collection)
    if physical is None:
        info_of(client, loc.collection, shown)  # raises, naming the collections
    if not is_alias:
        raise InputError(
            "is a collection, not an alias: sklearn-compat changed nothing here to roll "
            "back (--replace and cutover switch an alias)",
            path=shown,
        )
    history = ledger_of(client.get_collection(physical))
    # Only this alias's switches (an --output's ledger starts with its input's history).
    own = [e for e in history if e.get("alias") == loc.collection]
    target, redo = rollback_target(own)
    if target is None:
        raise InputError(
            "nothing to roll back: the ledger records no --replace or cutover", path=shown
        )
    back_to = target.get("current") if redo else target.get("previous")
    if back_to not in collection_names(client):
        raise InputError(
            f"the collection {back_to!r} that {'the redo' if redo else 'rollback'} would "
            f"serve again is gone; nothing rolled back",
            path=shown,
        )
    record = entry(
        "rollback",
        column=target.get("column"),
        undoes=undo_reference(target),
        alias=loc.collection,
        previous=physical,
        current=back_to,
    )
    for key in ("served", "kept"):
        if key in target:
            record[key] = target[key]
    _set_metadata(client, back_to, **{LEDGER_KEY: json.dumps(history + [record])})
    switch_alias(client, loc.collection, back_to)
    what = "redone" if redo else "undone"
    return (
        f"rolled back {shown}: served from {back_to} ({target.get('action')} of "
        f"{target.get('time')} {what}; {physical} kept)"
    )


class QdrantSink:
    """A new collection written from ids and vectors (for
    :class:`~sklearn_compat.io.TableWriter`): staged in ``NAME.vK`` and served by the
    alias ``NAME`` on :meth:`commit`.  The ``Dot`` distance, so that the vectors are
    stored exactly as written (a ``Cosine`` collection stores them normalised; for
    unit-length embeddings the two rank alike).  Ids must be unsigned integers or UUIDs
    (Qdrant's point ids)."""

    def __init__(self, path, layout, *, force=False):
        models = _models()
        self.loc = parse_qdrant(path)
        self.name = self.loc.collection
        self.path = self.loc.display()
        self.client = client_for(self.loc, create=True)
        physical, self.is_alias = resolve(self.client, self.name)
        if physical is not None and not force:
            raise InputError("already exists (pass --force to replace it)", path=self.path)
        self.existing = physical
        self.lock = OutputLock.acquire(lock_path(self.loc, self.name), self.path)
        try:
            for leftover in stagings_for(self.client, self.name):
                self.client.delete_collection(leftover)  # a dead run's (we hold the lock)
            self.staging = new_physical_name(self.client, self.name)
            self.client.create_collection(
                self.staging,
                vectors_config=models.VectorParams(
                    size=int(layout.width), distance=models.Distance.DOT
                ),
                metadata={STAGING_KEY: self.name, OWNER_KEY: self.lock.token},
            )
        except BaseException:
            self.lock.release()
            raise
        self.rows = 0

    def write(self, ids, Z):
        models = _models()
        Z = np.asarray(Z, dtype=np.float32)
        if ids is None:
            ids = np.arange(self.rows, self.rows + len(Z))
        converted = []
        for i, value in enumerate(np.asarray(ids, dtype=object).tolist()):
            try:
                converted.append(qdrant_id(value))
            except ValueError as exc:
                raise InputError(f"row {self.rows + i}: {exc}", path=self.path) from None
        self.client.upsert(
            self.staging, points=models.Batch(ids=converted, vectors=Z.tolist()), wait=True
        )
        self.rows += len(Z)

    def close(self):
        pass

    def commit(self):
        metadata = metadata_of(self.client.get_collection(self.staging))
        self.lock.check(metadata.get(OWNER_KEY), f"{self.path} (staging {self.staging})")
        record = {"action": "transform", "rows": self.rows, "time": now(), "current": self.staging}
        _set_metadata(
            self.client,
            self.staging,
            **{LEDGER_KEY: json.dumps([record]), STAGING_KEY: None, OWNER_KEY: None},
        )
        drop = self.existing if self.existing is not None and not self.is_alias else None
        switch_alias(self.client, self.name, self.staging, delete_collection=drop)
        self.lock.release()

    def abort(self):
        if self.lock.holds():  # never another run's staging
            try:
                self.client.delete_collection(self.staging)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.lock.release()

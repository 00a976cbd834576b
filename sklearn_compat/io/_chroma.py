"""Chroma collections (embedded): ``DIR::NAME`` is the collection ``NAME`` of
``chromadb.PersistentClient(path=DIR)``.

A collection is read page by page (``collection.get`` with an offset and a limit, in
Chroma's storage order); its columns are ``id`` (the ids), ``embedding``, ``document`` and
``metadata``.  :class:`ChromaMigration` writes the mapped vectors, with the documents,
metadata and ids unchanged, into a staging collection ``NAME.partial`` batch by batch and
renames it ``NAME`` only once every row is in it and checked; an interrupted run is
finished with ``resume``.
"""

import json
import os
import re
import time

import numpy as np

from ._common import CHROMA_SEPARATOR, InputError, check_same_job
from ._ownership import OWNER_KEY, OutputLock
from ._table_reader import Batch, TableReader

__all__ = [
    "ChromaReader",
    "ChromaMigration",
    "ChromaSink",
    "LEDGER_KEY",
    "read_ledger",
    "split_chroma_path",
]

# Name ending of the staging collection; collection metadata key of a migration (JSON).
STAGING_SUFFIX = ".partial"
MIGRATION_KEY = "sklearn_compat_migration"
# Collection metadata key of the collection's ledger (a JSON list of entries, see
# sklearn_compat.io._stores.ledger); every key this package writes starts with PREFIX.
LEDGER_KEY = "sklearn_compat_ledger"
PREFIX = "sklearn_compat_"


def read_ledger(metadata):
    """The ledger a collection's metadata records, oldest first (a collection written by
    the first migrations, which recorded only their job, reads as a one-entry ledger)."""
    from ._stores.ledger import decode

    metadata = metadata or {}
    entries = decode(metadata.get(LEDGER_KEY))
    if entries is not None:
        return entries
    raw = metadata.get(MIGRATION_KEY)
    if raw is None:
        return []
    job = json.loads(raw)
    if job.get("action"):
        return [{k: v for k, v in job.items() if k != "finished"}]
    return [
        {
            "action": "transform",
            "column": "embedding",
            "model": {"sha256": job.get("model_sha256"), "path": job.get("model_path")},
            "input": job.get("input"),
            "rows": job.get("rows"),
            "time": job.get("finished"),
        }
    ]


def own_keys_removed(metadata):
    """A collection's metadata without the keys this package writes (what a new
    collection made from it inherits)."""
    return {k: v for k, v in (metadata or {}).items() if not k.startswith(PREFIX)}


def _check_job(job, info, staging, target):
    if job.get("action"):
        from ._stores.ledger import check_resume

        check_resume(job, info, staging, target)
    else:
        check_same_job(job, info, staging, target)


_COLUMNS = ["id", "embedding", "document", "metadata"]
_INCLUDE = {"embedding": "embeddings", "document": "documents", "metadata": "metadatas"}


def split_chroma_path(path):
    """``(directory, collection)`` of ``DIR::NAME``.

    Examples
    --------
    >>> from sklearn_compat.io._chroma import split_chroma_path
    >>> split_chroma_path("stores/chroma::items")
    ('stores/chroma', 'items')
    """
    directory, _, name = str(path).rpartition(CHROMA_SEPARATOR)
    if not directory or not name:
        raise InputError(
            f"a Chroma collection is named DIR{CHROMA_SEPARATOR}NAME (the directory of "
            "chromadb.PersistentClient and the collection)",
            path=path,
        )
    return directory, name


# Chroma's rule for collection names (checked before any work, not at the final rename).
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{1,500}[a-zA-Z0-9]")


def _check_name(name, path):
    if not _NAME.fullmatch(name):
        raise InputError(
            f"{name!r} is not a Chroma collection name (3-502 characters from "
            "a-z A-Z 0-9 . _ -, starting and ending with a letter or digit)",
            path=path,
        )


def _client(directory, path, create=False):
    try:
        import chromadb
    except ImportError:
        raise InputError(
            "Chroma collections need the chroma extra: "
            "pip install 'sklearn-embedding-compat[chroma]'",
            path=path,
        ) from None
    if not create and not os.path.isdir(directory):
        raise InputError(f"no Chroma database directory {directory!r}", path=path)
    return chromadb.PersistentClient(path=directory)


def lock_path(directory, name):
    """The lock file of collection ``name`` of the Chroma database ``directory``."""
    return os.path.join(directory, f".{name}.sklearn-compat.lock")


def finished_at():
    """Now, in UTC, as a migration's metadata records when it finished."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _modifiable(metadata):
    """``metadata`` without the ``hnsw:`` keys, which Chroma refuses in ``modify`` even
    unchanged (the index settings stay in the collection's configuration)."""
    return {k: v for k, v in metadata.items() if not k.startswith("hnsw:")}


def _index_configuration(collection):
    """The collection's index settings (distance space, HNSW or SPANN parameters) in the
    form ``create_collection`` takes, or None where this Chroma version has none: a
    collection configured with ``configuration=`` keeps them only there, not in its
    metadata."""
    configuration = getattr(collection, "configuration", None)
    if not isinstance(configuration, dict):
        return None
    kept = {
        key: dict(value)
        for key, value in configuration.items()
        if key in ("hnsw", "spann") and value
    }
    return kept or None


def _names(client):
    return {getattr(c, "name", c) for c in client.list_collections()}


def _collection(client, name, path):
    try:
        return client.get_collection(name, embedding_function=None)
    except Exception:  # noqa: BLE001 - NotFoundError or ValueError, by Chroma version
        names = sorted(getattr(c, "name", c) for c in client.list_collections())
        raise InputError(
            f"no collection {name!r} (collections: {', '.join(names) or 'none'})", path=path
        ) from None


class ChromaReader(TableReader):
    """A Chroma collection read in pages of at most the batch size."""

    format = "chroma"
    form = "list"
    list_column = "embedding"

    def __init__(self, path, spec, dtype, extra_columns):
        super().__init__(path, spec, dtype, extra_columns)
        directory, self.name = split_chroma_path(path)
        self.client = _client(directory, path)
        self.collection = _collection(self.client, self.name, path)
        self.columns = list(_COLUMNS)
        if spec.id_column not in (None, "id"):
            raise InputError(
                f"a Chroma collection's ids are its 'id' column, not {spec.id_column!r}",
                path=path,
            )
        for name in extra_columns:
            if name not in ("document", "metadata"):
                raise InputError(f"no column {name!r} (columns: {_COLUMNS})", path=path)
        if spec.prefix or spec.pattern or spec.vector_column not in (None, "embedding"):
            raise InputError("a Chroma collection's embedding is its 'embedding'", path=path)
        self.id_column = "id"
        self.n_rows = self.collection.count()
        if self.n_rows:
            self.width = len(self.page(0, 1, ())["embeddings"][0])

    def page(self, offset, limit, extra=None):
        """Chroma's ``get`` result for rows ``offset .. offset + limit``."""
        extra = self.extra_columns if extra is None else extra
        include = ["embeddings"] + [_INCLUDE[c] for c in extra]
        return self.collection.get(offset=offset, limit=limit, include=include)

    def _to_batch(self, result, start):
        ids = np.asarray(result["ids"], dtype=object)
        X = np.asarray(result["embeddings"], dtype=self.dtype or np.float32)
        if X.ndim != 2:
            X = X.reshape(len(ids), -1)
        extra = {c: np.asarray(result[_INCLUDE[c]], dtype=object) for c in self.extra_columns}
        return Batch(start, ids, X, extra)

    def _batches(self, batch_size, offset=0):
        for start in range(offset, self.n_rows, batch_size):
            yield self._to_batch(self.page(start, batch_size), start)

    def migration(self):
        """What the sklearn-compat migration that wrote this collection recorded (its job:
        model digest, input, when it finished...), or None."""
        raw = (self.collection.metadata or {}).get(MIGRATION_KEY)
        return None if raw is None else json.loads(raw)

    def id_dtype(self):
        return np.dtype(object)


class ChromaMigration:
    """Write the mapped rows of a :class:`ChromaReader` into a new collection, resumably
    (the interface of :class:`~sklearn_compat.io._lance.LanceMigration`)."""

    def __init__(self, reader, output, width, job, *, replace=False, resume=False, force=False,
                 promote=None):  # fmt: skip
        if replace and promote is None:
            raise InputError(
                "--replace migrates a LanceDB table in place (it keeps versions); write a "
                "new Chroma collection with --output",
                path=reader.path,
            )
        # ``promote(staged, entry)``: with ``replace``, serves the checked staging under
        # the input's name (see sklearn_compat.io._chroma_store); returns the log line.
        self.replace, self.promote = replace, promote
        output = reader.path if replace else output
        self.reader = reader
        directory, self.name = split_chroma_path(output)
        _check_name(self.name, output)
        self.target = output
        source_dir, source_name = split_chroma_path(reader.path)
        if (
            not replace
            and self.name == source_name
            and os.path.realpath(directory) == os.path.realpath(source_dir)
        ):
            raise InputError(
                "is also the input; write the mapped vectors into a new collection",
                path=output,
            )
        self.client = _client(directory, output, create=True)
        self.staging = f"{directory}{CHROMA_SEPARATOR}{self.name}{STAGING_SUFFIX}"
        self._staging_name = self.name + STAGING_SUFFIX
        self.job = dict(job, rows=reader.n_rows)
        if not replace and self.name in _names(self.client) and not force:
            raise InputError("already exists (pass --force to replace it)", path=output)
        self.batch_limit = self.client.get_max_batch_size()
        self.done = 0
        self.collection = None
        self.lock = OutputLock.acquire(lock_path(directory, self.name), output)
        try:
            if self._staging_name in _names(self.client):
                self._adopt(resume)
        except BaseException:
            self.lock.release()
            raise

    def _adopt(self, resume):
        """Take over the staging an interrupted run left (this run holds the lock, so
        that run has ended): with ``resume`` only, and only the same job's."""
        collection = self.client.get_collection(self._staging_name, embedding_function=None)
        done = collection.count()
        metadata = dict(collection.metadata or {})
        info = json.loads(metadata.get(MIGRATION_KEY, "{}"))
        if not resume:
            raise InputError(
                f"an interrupted migration left {done} of {self.reader.n_rows} rows in "
                f"{self.staging}; pass --resume to finish it (or delete that collection "
                "to start over)",
                path=self.target,
            )
        _check_job(self.job, info, self.staging, self.target)
        metadata[OWNER_KEY] = self.lock.token
        collection.modify(metadata=_modifiable(metadata))
        self.collection, self.done = collection, done

    def release(self):
        """Give up the output's lock (after finishing, failing or being interrupted)."""
        self.lock.release()

    def batches(self, batch_size):
        """``(Batch, page)`` pairs of the rows still to migrate."""
        reader = self.reader
        for start in range(self.done, reader.n_rows, batch_size):
            page = reader.page(start, batch_size, ("document", "metadata"))
            batch = reader._to_batch(page, start)
            reader._check(batch)
            yield batch, page

    def write(self, page, Z):
        """Add one mapped batch to the staging collection (ids, documents, metadata kept)."""
        if self.collection is None:
            metadata = own_keys_removed(self.reader.collection.metadata)
            metadata[MIGRATION_KEY] = json.dumps(self.job)
            metadata[OWNER_KEY] = self.lock.token
            # The distance and index settings travel too: a collection of another
            # distance would rank the mapped vectors differently.  (Only passed when
            # there are some: a Chroma without collection configurations has no such
            # argument, and keeps them in the metadata copied above.)
            configuration = _index_configuration(self.reader.collection)
            extra = {} if configuration is None else {"configuration": configuration}
            self.collection = self.client.create_collection(
                self._staging_name, metadata=metadata, embedding_function=None, **extra
            )
        Z = np.asarray(Z, dtype=np.float32)
        for i in range(0, len(Z), self.batch_limit):
            part = slice(i, i + self.batch_limit)
            documents = page["documents"][part]
            metadatas = page["metadatas"][part]
            self.collection.add(
                ids=page["ids"][part],
                embeddings=Z[part],
                documents=None if all(d is None for d in documents) else documents,
                metadatas=None if all(m is None for m in metadatas) else metadatas,
            )
            self.done += len(Z[part])

    def finish(self, log):
        """Check the staged collection and rename it; returns a line for the log."""
        if self.collection is None:  # an empty input: an empty collection
            self.write({"ids": [], "documents": [], "metadatas": []}, np.empty((0, 0)))
        # Only this run's own staging is promoted, and an existing output deleted only
        # then (see _ownership): read back what the database holds now.
        try:
            staged = self.client.get_collection(self._staging_name, embedding_function=None)
        except Exception:  # noqa: BLE001 - NotFoundError or ValueError, by Chroma version
            staged = None
        metadata = dict(staged.metadata or {}) if staged is not None else {}
        self.lock.check(metadata.pop(OWNER_KEY, None), self.staging)
        self.collection = staged
        n = self.collection.count()
        if n != self.reader.n_rows:
            raise InputError(
                f"the staged collection has {n} rows, the input {self.reader.n_rows}",
                path=self.staging,
            )
        step = 1 << 14
        for start in range(0, n, step):
            mine = self.collection.get(offset=start, limit=step, include=[])["ids"]
            theirs = self.reader.collection.get(offset=start, limit=step, include=[])["ids"]
            if list(mine) != list(theirs):
                raise InputError(
                    "the staged collection's ids differ from the input's; delete it and run again",
                    path=self.staging,
                )
        finished = finished_at()
        if self.replace:  # the input stays, kept beside the new one (for rollback)
            metadata[MIGRATION_KEY] = json.dumps(dict(self.job, finished=finished))
            self.collection.modify(metadata=_modifiable(metadata))
            return self.promote(self.collection, dict(self.job, rows=n, time=finished))
        if self.name in _names(self.client):  # --force: the old one goes once the new is whole
            self.client.delete_collection(self.name)
        metadata[MIGRATION_KEY] = json.dumps(dict(self.job, finished=finished))
        if self.job.get("action"):  # the new collection's ledger: this migration
            entries = read_ledger(self.reader.collection.metadata)
            entries.append(dict(self.job, rows=n, time=finished))
            metadata[LEDGER_KEY] = json.dumps(entries, separators=(",", ":"))
        self.collection.modify(name=self.name, metadata=_modifiable(metadata))
        return f"wrote the Chroma collection {self.target} ({n} rows)"


class ChromaSink:
    """A new Chroma collection written batch by batch (ids and embeddings), staged as
    ``NAME.partial`` and renamed on :meth:`commit` (for
    :class:`~sklearn_compat.io.TableWriter`)."""

    def __init__(self, path, layout, *, force=False):
        directory, self.name = split_chroma_path(path)
        _check_name(self.name, path)
        self.path = path
        self.client = _client(directory, path, create=True)
        if self.name in _names(self.client) and not force:
            raise InputError("already exists (pass --force to replace it)", path=path)
        # Held from here to commit or abort: a leftover staging is then a dead run's.
        self.lock = OutputLock.acquire(lock_path(directory, self.name), path)
        self.staging = self.name + STAGING_SUFFIX
        try:
            if self.staging in _names(self.client):
                self.client.delete_collection(self.staging)
            self.collection = self.client.create_collection(
                self.staging, metadata={OWNER_KEY: self.lock.token}, embedding_function=None
            )
        except BaseException:
            self.lock.release()
            raise
        self.limit = self.client.get_max_batch_size()
        self.rows = 0

    def write(self, ids, Z):
        Z = np.asarray(Z, dtype=np.float32)
        if ids is None:
            ids = np.arange(self.rows, self.rows + len(Z))
        ids = [str(i) for i in np.asarray(ids).tolist()]
        for i in range(0, len(Z), self.limit):
            self.collection.add(ids=ids[i : i + self.limit], embeddings=Z[i : i + self.limit])
        self.rows += len(Z)

    def close(self):
        pass

    def commit(self):
        try:
            staged = self.client.get_collection(self.staging, embedding_function=None)
            owner = (staged.metadata or {}).get(OWNER_KEY)
        except Exception:  # noqa: BLE001 - NotFoundError or ValueError, by Chroma version
            owner = None
        self.lock.check(owner, f"{self.path}{STAGING_SUFFIX}")
        if self.name in _names(self.client):
            self.client.delete_collection(self.name)
        self.collection.modify(name=self.name)
        self.lock.release()

    def abort(self):
        if self.lock.holds():  # never another run's staging
            try:
                self.client.delete_collection(self.staging)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.lock.release()

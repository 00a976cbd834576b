"""Qdrant collections: ``qdrant:DIR::NAME`` (local mode, ``QdrantClient(path=DIR)``),
``qdrant://HOST[:PORT]::NAME`` (a server over HTTP) and ``qdrants://HOST[:PORT]::NAME``
(over TLS).  The API key of a server comes from the environment variable
``QDRANT_API_KEY`` only: a location never holds it, and nothing prints it.

A collection is read by scrolling (point id order) in pages of at most the batch size.
Its point ids (integers or UUIDs) are the ids; ``--id-column FIELD`` takes a payload field
instead.  The embedding is the collection's vector, or one of its named vectors
(``--vector-column NAME``).  Columns: ``id``, the vector, ``payload`` and every payload
field asked for by name.

Names and aliases
-----------------
Qdrant can neither rename a collection nor hold an alias and a collection under one name,
so everything sklearn-compat writes is served through an alias: ``--output NAME`` stages
the mapped points in a new collection ``NAME.vK`` (the first free ``K``) and creates the
alias ``NAME`` on it only once every point is there and checked, so the output appears
whole or not at all.  ``--replace``, ``cutover`` and ``rollback`` switch an alias in one
atomic alias operation, keeping the collection it served untouched (its vectors are
restored bit for bit because they are never written again).

The ledger
----------
The served collection's metadata (Qdrant's collection ``metadata``) holds the ledger, a
JSON list under :data:`LEDGER_KEY`; each collection a promotion serves carries the whole
history forward, so the name's ledger is always its served collection's.
"""

import os
import re
import tempfile
import uuid
from dataclasses import dataclass

import numpy as np

from ._common import InputError
from ._table_reader import Batch, TableReader

__all__ = [
    "QdrantLocation",
    "QdrantReader",
    "parse_qdrant",
    "is_qdrant",
    "client_for",
    "LEDGER_KEY",
]

PREFIX_LOCAL = "qdrant:"
SCHEMES = {"qdrant://": "http", "qdrants://": "https"}
SEPARATOR = "::"
DEFAULT_PORT = 6333
API_KEY_ENV = "QDRANT_API_KEY"

# Collection metadata keys (JSON strings: Qdrant merges nested objects on update).
LEDGER_KEY = "sklearn_compat_ledger"
STAGING_KEY = "sklearn_compat_staging"
OWNER_KEY = "sklearn_compat_owner"
# The payload field of a sibling column's points that holds each row's provenance.
PROVENANCE_FIELD = "sklearn_compat_provenance"
# Name of a collection's one unnamed vector, as a column.
UNNAMED = "vector"
# Qdrant's rule for collection names (a server refuses these characters).
_BAD_NAME = re.compile(r"[<>:\"/\\|?*\x00-\x1f]")


def is_qdrant(location):
    """Whether ``location`` names a Qdrant collection (syntax only).

    Examples
    --------
    >>> from sklearn_compat.io._qdrant import is_qdrant
    >>> is_qdrant("qdrant:stores/q::items"), is_qdrant("qdrants://q.example.com::items")
    (True, True)
    >>> is_qdrant("stores/chroma::items")
    False
    """
    return str(location).lower().startswith(PREFIX_LOCAL) or str(location).lower().startswith(
        tuple(SCHEMES)
    )


@dataclass(frozen=True)
class QdrantLocation:
    """A parsed Qdrant location: a local storage directory or a server, and a collection.

    Attributes
    ----------
    path : str or None
        The local-mode storage directory (None for a server).
    url : str or None
        ``http://HOST:PORT`` or ``https://HOST:PORT`` (None for local mode).
    collection : str
        The collection (or alias) name.
    """

    path: str | None
    url: str | None
    collection: str

    def display(self):
        """The location as written, minus anything that could be a secret."""
        if self.path is not None:
            return f"{PREFIX_LOCAL}{self.path}{SEPARATOR}{self.collection}"
        scheme = "qdrants://" if self.url.startswith("https") else "qdrant://"
        return f"{scheme}{self.url.split('://', 1)[1]}{SEPARATOR}{self.collection}"

    def with_collection(self, name):
        """The same storage, another collection."""
        return QdrantLocation(self.path, self.url, name)

    def same_storage(self, other):
        if self.path is not None and other.path is not None:
            return os.path.realpath(self.path) == os.path.realpath(other.path)
        return self.url is not None and self.url == other.url


def parse_qdrant(location):
    """Parse ``qdrant:DIR::NAME``, ``qdrant://HOST[:PORT]::NAME`` or
    ``qdrants://HOST[:PORT]::NAME`` (nothing is opened).

    Raises
    ------
    InputError
        On another syntax, a credential in the location (the API key comes from
        ``QDRANT_API_KEY``) or a name Qdrant refuses; the message never repeats a
        credential.

    Examples
    --------
    >>> from sklearn_compat.io._qdrant import parse_qdrant
    >>> parse_qdrant("qdrant:stores/q::items")
    QdrantLocation(path='stores/q', url=None, collection='items')
    >>> parse_qdrant("qdrants://q.example.com::items").url
    'https://q.example.com:6333'
    >>> parse_qdrant("qdrant://[::1]:6334::items").url
    'http://[::1]:6334'
    """
    text = str(location)
    lower = text.lower()
    head, _, name = text.rpartition(SEPARATOR)
    shown = _shown(text)
    for scheme, protocol in SCHEMES.items():
        if lower.startswith(scheme):
            host = head[len(scheme) :]
            if "@" in host:
                raise InputError(
                    f"a Qdrant location holds no credentials: put the API key in {API_KEY_ENV}",
                    path=shown,
                )
            match = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+)(?::(\d+))?/?", host)
            if not head or not name or match is None:
                raise InputError(
                    f"a Qdrant server collection is named {scheme}HOST[:PORT]{SEPARATOR}NAME",
                    path=shown,
                )
            port = int(match.group(2) or DEFAULT_PORT)
            _check_name(name, shown)
            return QdrantLocation(None, f"{protocol}://{match.group(1)}:{port}", name)
    if not lower.startswith(PREFIX_LOCAL):
        raise InputError("not a Qdrant location (qdrant:DIR::NAME)", path=shown)
    directory = head[len(PREFIX_LOCAL) :]
    if not directory or not name:
        raise InputError(
            f"a local Qdrant collection is named {PREFIX_LOCAL}DIR{SEPARATOR}NAME (the "
            "directory of QdrantClient(path=DIR) and the collection)",
            path=shown,
        )
    _check_name(name, shown)
    return QdrantLocation(directory, None, name)


def _shown(text):
    """``text`` with anything between ``://`` and an ``@`` removed (a credential)."""
    return re.sub(r"(?i)(qdrants?://)[^@/]*@", r"\1", text)


def _check_name(name, shown):
    if _BAD_NAME.search(name) or len(name) > 255:
        raise InputError(
            f"{name!r} is not a Qdrant collection name (at most 255 characters, none of "
            '< > : " / \\ | ? *)',
            path=shown,
        )


# ------------------------------------------------------------------------- clients
# Local mode locks its directory for one client: one client per directory per process.
_LOCAL_CLIENTS = {}


def _import_client():
    try:
        import qdrant_client
    except ImportError:
        raise InputError(
            "Qdrant collections need the qdrant extra: "
            "pip install 'sklearn-embedding-compat[qdrant]'"
        ) from None
    return qdrant_client


def client_for(loc, *, create=False):
    """The ``QdrantClient`` of ``loc``'s storage (shared within the process).

    A local directory must exist unless ``create``; a directory another process has open
    (local mode allows one process at a time) is refused in one line.
    """
    qdrant_client = _import_client()
    if loc.path is not None:
        key = os.path.realpath(loc.path)
        client = _LOCAL_CLIENTS.get(key)
        if client is not None and not getattr(client._client, "closed", False):
            return client
        if not create and not os.path.isdir(loc.path):
            raise InputError(f"no Qdrant storage directory {loc.path!r}", path=loc.display())
        if os.path.exists(loc.path) and not os.path.isdir(loc.path):
            raise InputError("is not a directory", path=loc.path)
        import warnings

        try:
            with warnings.catch_warnings():
                # "Local mode is not recommended for collections with more than 20,000
                # points": said once per process, not for every store opened.
                warnings.simplefilter("ignore", UserWarning)
                client = qdrant_client.QdrantClient(path=loc.path)
        except RuntimeError as exc:
            if "already accessed" in str(exc):
                raise InputError(
                    "another process has this local Qdrant storage open (local mode "
                    "serves one process at a time; use a Qdrant server for more)",
                    path=loc.display(),
                ) from None
            raise
        if not _LOCAL_CLIENTS:
            import atexit

            # Closed before the interpreter tears modules down (qdrant-client's own
            # finaliser then fails with a traceback on stderr).
            atexit.register(close_local_clients)
        _LOCAL_CLIENTS[key] = client
        return client
    client = qdrant_client.QdrantClient(
        url=loc.url,
        api_key=os.environ.get(API_KEY_ENV) or None,
        timeout=120,
        check_compatibility=False,
    )
    client.sklearn_compat_where = loc.with_collection("").display().rstrip(":")
    return client


def _reach(client, call):
    """``call()``; a server that cannot be reached or refuses (a wrong API key) is one
    line naming the server, never the key."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - narrowed below by qdrant-client's types
        from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

        if not isinstance(exc, (ResponseHandlingException, UnexpectedResponse)):
            raise
        reason = getattr(exc, "source", None) or exc
        if isinstance(exc, UnexpectedResponse):
            reason = f"HTTP {exc.status_code} {exc.reason_phrase}".strip()
            if exc.status_code in (401, 403):
                reason += f" (check the API key in {API_KEY_ENV})"
        raise InputError(
            f"cannot use the Qdrant server: {reason}",
            path=getattr(client, "sklearn_compat_where", None),
        ) from None


def close_local_clients():
    """Close every local-mode client of this process (their directory locks go)."""
    for key in list(_LOCAL_CLIENTS):
        client = _LOCAL_CLIENTS.pop(key)
        try:
            client.close()
        except Exception:  # noqa: BLE001 - closing anyway
            pass


def lock_path(loc, name):
    """The sklearn-compat lock file of output ``name`` of ``loc``'s storage: beside a
    local storage, in the temporary directory for a server (named by a hash of the URL)."""
    if loc.path is not None:
        return os.path.join(loc.path, f".{name}.sklearn-compat.lock")
    import hashlib

    key = hashlib.sha256(f"{loc.url}{SEPARATOR}{name}".encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"sklearn-compat-qdrant-{key}.lock")


# ------------------------------------------------------------------------- collections
def aliases(client):
    """``{alias: collection}`` of the storage."""
    found = _reach(client, client.get_aliases)
    return {a.alias_name: a.collection_name for a in found.aliases}


def collection_names(client):
    return {c.name for c in client.get_collections().collections}


def resolve(client, name):
    """``(physical collection, is_alias)`` of ``name``, or ``(None, False)``."""
    target = aliases(client).get(name)
    if target is not None:
        return target, True
    if name in collection_names(client):
        return name, False
    return None, False


def info_of(client, name, where):
    """``client.get_collection(name)``, or a one-line error naming the collections."""
    physical, _ = resolve(client, name)
    if physical is None:
        names = sorted(collection_names(client) | set(aliases(client)))
        shown = ", ".join(names) or "none"
        raise InputError(f"no collection {name!r} (collections: {shown})", path=where)
    return client.get_collection(physical)


def metadata_of(info):
    return dict(getattr(info.config, "metadata", None) or {})


def ledger_of(info):
    """The ledger (list of dicts) a collection's metadata holds; [] when none."""
    from ._stores.ledger import decode

    return decode(metadata_of(info).get(LEDGER_KEY) or None) or []


def dense_vectors(info):
    """``{column: VectorParams}`` of a collection's dense vectors; the one unnamed vector
    is the column :data:`UNNAMED`."""
    vectors = info.config.params.vectors
    if vectors is None:
        return {}
    if isinstance(vectors, dict):
        return dict(vectors)
    return {UNNAMED: vectors}


def is_named(info):
    return isinstance(info.config.params.vectors, dict)


def vector_key(info, column):
    """The name Qdrant knows ``column`` by (``""``-less: None for the unnamed vector)."""
    return column if is_named(info) else None


def choose_vector(info, wanted, where):
    """The vector column a reader uses: ``wanted`` (``--vector-column``), or the only one."""
    vectors = dense_vectors(info)
    names = list(vectors)
    if wanted in (None, "") or (wanted == UNNAMED and not is_named(info)):
        if len(names) == 1:
            return names[0]
        if not names:
            raise InputError("the collection has no dense vectors", path=where)
        raise InputError(
            f"the collection has several named vectors ({', '.join(map(repr, names))}); "
            "name the embedding with --vector-column",
            path=where,
        )
    if wanted not in vectors:
        if not is_named(info):
            raise InputError(
                f"no named vector {wanted!r}: the collection has one unnamed vector "
                f"(give no --vector-column, or {UNNAMED!r})",
                path=where,
            )
        raise InputError(
            f"no named vector {wanted!r} (vectors: {', '.join(map(repr, names))})", path=where
        )
    if getattr(vectors[wanted], "multivector_config", None) is not None:
        raise InputError(
            f"vector {wanted!r} is a multivector, not one vector per point", path=where
        )
    return wanted


def point_ids(values):
    """Point ids as a numpy array: int64 when all are integers, else object (UUID text)."""
    values = list(values)
    if values and all(isinstance(v, int) for v in values):
        return np.asarray(values, dtype=np.int64)
    return np.asarray([str(v) if isinstance(v, uuid.UUID) else v for v in values], dtype=object)


def qdrant_id(value):
    """A Qdrant point id from a table id: an integer >= 0, or a UUID (as text)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"id {int(value)} is negative; Qdrant ids are >= 0 or UUIDs")
        return int(value)
    if isinstance(value, bytes):
        value = value.decode()
    text = str(value)
    if text.isdigit():
        return int(text)
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise ValueError(
            f"id {text!r} is neither an unsigned integer nor a UUID (Qdrant's point ids)"
        ) from None


def vectors_of(records, key):
    """The float32 ``(n, d)`` array of one vector of ``records`` (``key`` None: unnamed)."""
    if key is None:
        rows = [r.vector for r in records]
    else:
        rows = [None if r.vector is None else r.vector.get(key) for r in records]
    return rows


# ------------------------------------------------------------------------- reading
class QdrantReader(TableReader):
    """A Qdrant collection (or alias) read by scrolling pages of at most the batch size,
    in point id order, at the state the collection has while it is read."""

    format = "qdrant"
    form = "list"

    def __init__(self, path, spec, dtype, extra_columns):
        super().__init__(path, spec, dtype, extra_columns)
        self.loc = parse_qdrant(path)
        self.shown = self.loc.display()
        self.client = client_for(self.loc)
        self.info = info_of(self.client, self.loc.collection, self.shown)
        self.physical, self.is_alias = resolve(self.client, self.loc.collection)
        self.list_column = choose_vector(self.info, spec.vector_column, self.shown)
        self.key = vector_key(self.info, self.list_column)
        if spec.prefix or spec.pattern:
            raise InputError(
                "a Qdrant collection's embedding is a vector: name it with --vector-column",
                path=self.shown,
            )
        # The ids: the point ids, or a payload field (--id-column FIELD).
        self.id_field = None if spec.id_column in (None, "id") else spec.id_column
        self.id_column = spec.id_column or "id"
        self.columns = ["id", self.list_column, "payload"]
        self.payload_fields = [c for c in extra_columns if c not in ("id", "payload")]
        self.n_rows = self.client.count(self.loc.collection, exact=True).count
        self.width = int(dense_vectors(self.info)[self.list_column].size)

    def _wants_payload(self, extra):
        if self.id_field is not None or "payload" in extra:
            return True
        fields = [c for c in extra if c not in ("id",)]
        return fields or False

    def pages(self, batch_size, offset=None, *, all_vectors=False, payload=None):
        """Yield ``(records, next_offset)`` pages of the scroll from point ``offset``."""
        with_payload = self._wants_payload(self.extra_columns) if payload is None else payload
        with_vectors = True if all_vectors else ([self.key] if self.key is not None else True)
        while True:
            records, offset = self.client.scroll(
                self.loc.collection,
                limit=batch_size,
                offset=offset,
                with_payload=with_payload,
                with_vectors=with_vectors,
            )
            if records:
                yield records, offset
            if offset is None:
                return

    def to_batch(self, records, start):
        """A :class:`Batch` of scrolled ``records`` (rows ``start ..``)."""
        if self.id_field is None:
            ids = point_ids(r.id for r in records)
        else:
            values = [(r.payload or {}).get(self.id_field) for r in records]
            for i, v in enumerate(values):
                if v is None:
                    raise InputError(
                        f"row {start + i} (point {records[i].id}): no payload field "
                        f"{self.id_field!r} (the id column)",
                        path=self.shown,
                    )
            ids = np.asarray(values, dtype=object)
            if all(isinstance(v, int) for v in values):
                ids = ids.astype(np.int64)
        rows = vectors_of(records, self.key)
        for i, row in enumerate(rows):
            if row is None:
                raise InputError(
                    f"row {start + i} (point {records[i].id}): no vector {self.list_column!r}",
                    path=self.shown,
                )
        X = self._cast(np.asarray(rows, dtype=np.float32), np.float32)
        if X.ndim != 2:
            X = X.reshape(len(records), -1)
        extra = {}
        for name in self.extra_columns:
            if name == "id":
                extra[name] = point_ids(r.id for r in records)
            elif name == "payload":
                extra[name] = np.asarray(
                    [r.payload or {} for r in records] + [None], dtype=object
                )[:-1]
            else:
                extra[name] = np.asarray(
                    [(r.payload or {}).get(name) for r in records], dtype=object
                )
        return Batch(start, ids, X, extra)

    def _batches(self, batch_size):
        start = 0
        for records, _ in self.pages(batch_size):
            yield self.to_batch(records, start)
            start += len(records)

    def ledger(self):
        """The collection's ledger (oldest first)."""
        return ledger_of(self.info)

    def migration(self):
        """The job of the last mapping the ledger records in effect (with ``finished``),
        or None: what the command line's mapped-twice guard reads."""
        for entry in reversed(self.ledger()):
            if entry.get("action") in ("transform", "replace") and entry.get("finished"):
                return entry
        return None

    def id_dtype(self):
        return np.dtype(object)

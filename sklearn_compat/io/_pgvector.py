"""Postgres tables with pgvector columns: ``URI::TABLE`` is the table ``TABLE`` (schema-
qualified or not) of the database a libpq connection URI names.

A table is read inside one ``REPEATABLE READ`` transaction, so every batch comes from one
snapshot (rows committed by others during the run are not seen), through a server-side
cursor in the table's id order, ``batch_size`` rows per fetch.  The vector column is the
table's one ``vector`` or ``halfvec`` column (or the one ``vector_column`` names); its
values arrive as pgvector's binary form and are decoded a whole batch at a time.  The ids
are the primary key's (or ``id_column``'s) values; every other column is carried, in its
binary form, by the migrations of :mod:`sklearn_compat.io._pgvector_write`.
"""

import json
import re

import numpy as np

from ._common import CHROMA_SEPARATOR, InputError, redact_uri
from ._table_reader import Batch, TableReader

__all__ = ["PgvectorReader", "TableName", "connect", "database_errors", "split_pg_path"]

# pgvector's dense vector types and the big-endian element type of their binary form
# (a 2-byte dimension, 2 unused bytes, then the elements).
VECTOR_TYPES = {"vector": np.dtype(">f4"), "halfvec": np.dtype(">f2")}
_HEADER_BYTES = 4
# Integer id types: their ids are read as int64 (joinable with other tables' integer ids);
# ids of any other type are read as their text.
_INTEGER_TYPES = {"int2", "int4", "int8"}
# Rows per FETCH of a batch (see PgvectorReader.rows).
_FETCH_ROWS = 4096
# Postgres truncates longer identifiers (NAMEDATALEN - 1 bytes).
MAX_IDENTIFIER = 63


def import_psycopg():
    try:
        import psycopg
    except ImportError:
        raise InputError(
            "Postgres tables need the pgvector extra: "
            "pip install 'sklearn-embedding-compat[pgvector]'"
        ) from None
    return psycopg


def first_line(exc):
    """The first line of a driver error, for one-line messages."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class database_errors:
    """Turn a driver error inside the block into an :class:`InputError` naming ``path``,
    with ``what`` said first and ``then`` (what to do next) after the driver's line."""

    def __init__(self, path, what, then="", secret=None):
        self.path, self.what, self.then = path, what, then
        self.secret = secret

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or isinstance(exc, InputError):
            return False
        psycopg = import_psycopg()
        if not isinstance(exc, psycopg.Error):
            return False
        lost = isinstance(exc, psycopg.OperationalError)
        why = "the connection to the database was lost" if lost else first_line(exc)
        detail = f" ({first_line(exc)})" if lost else ""
        # What to do next (``--resume``...) helps after a lost connection or a conflict
        # with another transaction; a refused privilege or a bad value fails the same way
        # when run again.
        transient = lost or isinstance(exc, psycopg.errors.TransactionRollback)
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            tail = (
                "; another session holds the table (a long transaction or query: see "
                "pg_stat_activity); nothing changed, run again when it ends"
            )
        elif isinstance(exc, psycopg.errors.InsufficientPrivilege):
            tail = (
                "; the database role lacks that privilege: grant it (or connect as a role "
                "that has it), then run again"
            )
        else:
            tail = f"; {self.then}" if self.then and transient else ""
        message = scrub(f"{self.what}: {why}{detail}{tail}", self.secret)
        raise InputError(message, path=self.path) from None


class TableName:
    """A table's schema (None: the search path's) and name, as written after ``::``.

    ``items``, ``public.items`` and ``"Mixed Case"."my.items"`` (double quotes keep case
    and dots) are accepted.

    Examples
    --------
    >>> from sklearn_compat.io._pgvector import TableName
    >>> TableName.parse('app."Items.v2"', "x").parts
    ('app', 'Items.v2')
    >>> TableName.parse("Items", "x").parts
    (None, 'items')
    """

    def __init__(self, schema, name):
        self.schema, self.name = schema, name

    @property
    def parts(self):
        return self.schema, self.name

    @classmethod
    def parse(cls, text, path):
        """The name ``text`` (an input's or an output's: the same rules), or an
        InputError: an unquoted part is an SQL identifier (letters, digits, ``_``,
        ``$``; folded to lower case), anything else is double-quoted, and no part is
        longer than Postgres keeps (63 bytes)."""
        parts = re.findall(r'"((?:[^"]|"")+)"|([^".]+)', text)
        words = [quoted.replace('""', '"') if quoted else bare.lower() for quoted, bare in parts]
        rebuilt = ".".join(f'"{q}"' if q else b for q, b in parts)
        bare_ok = all(q or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", b) for q, b in parts)
        if not 1 <= len(words) <= 2 or rebuilt != text.strip() or not all(words) or not bare_ok:
            raise InputError(
                f"{text!r} is not a table name (TABLE or SCHEMA.TABLE, each an SQL "
                "identifier: letters, digits and _; double-quote a name with capitals, "
                "dots, spaces or other signs)",
                path=path,
            )
        for word in words:
            if len(word.encode()) > MAX_IDENTIFIER:
                raise InputError(
                    f"the name {word[:20]!r}... is {len(word.encode())} bytes long; Postgres "
                    f"keeps only the first {MAX_IDENTIFIER} bytes of a name: give a shorter one",
                    path=path,
                )
        return cls(*([None] + words)[-2:])

    def sibling(self, suffix):
        """The table beside this one whose name ends in ``suffix`` (kept under Postgres'
        identifier length: a long name is shortened and given a digest of the whole)."""
        name = self.name + suffix
        if len(name.encode()) > MAX_IDENTIFIER:
            import hashlib

            digest = hashlib.sha256(self.name.encode()).hexdigest()[:8]
            keep = MAX_IDENTIFIER - len(suffix.encode()) - 9
            name = self.name.encode()[:keep].decode(errors="ignore") + "_" + digest + suffix
        return TableName(self.schema, name)

    def sql(self):
        from psycopg import sql

        return sql.Identifier(*[p for p in self.parts if p is not None])

    def __str__(self):
        return ".".join(_quote(p) for p in self.parts if p is not None)


def _quote(word):
    if re.fullmatch(r"[a-z_][a-z0-9_]*", word):
        return word
    return '"' + word.replace('"', '""') + '"'


def split_pg_path(path):
    """``(uri, TableName)`` of ``URI::TABLE``.

    Examples
    --------
    >>> from sklearn_compat.io._pgvector import split_pg_path
    >>> uri, table = split_pg_path("postgresql://app@db/shop::public.items")
    >>> uri, table.parts
    ('postgresql://app@db/shop', ('public', 'items'))
    """
    uri, _, name = str(path).rpartition(CHROMA_SEPARATOR)
    if not uri or not name.strip():
        raise InputError(
            f"a Postgres table is named URI{CHROMA_SEPARATOR}TABLE (a connection URI such as "
            f"postgresql://user@host/db, then {CHROMA_SEPARATOR} and the table)",
            path=redact_uri(path),
        )
    return uri, TableName.parse(name.strip(), redact_uri(path))


def secrets_of(location):
    """The password-like parts of a connection URI or keyword string (and of each piece
    an unencoded ``@`` splits them into): driver messages that echo one are scrubbed.

    Examples
    --------
    >>> from sklearn_compat.io._pgvector import secrets_of
    >>> secrets_of("postgresql://app:p@ss::w@db/shop")
    ['p@ss::w', 'ss::w']
    >>> secrets_of("host=db password='a b' dbname=shop")
    ['a b']
    """
    text = str(location or "")
    found = []
    head = text.split("?", 1)[0]
    if "://" in head:
        authority = text.split("://", 1)[1]
        if "@" in authority:
            info = authority.rsplit("@", 1)[0]
            if ":" in info:
                found.append(info.split(":", 1)[1])
    for match in re.finditer(r"(?i)\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&#]*)", text):
        value = match.group(1)
        if value.startswith("'") and value.endswith("'") and len(value) > 1:
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        found.append(value)
    pieces = []
    for secret in found:
        pieces += [p for p in secret.split("@")[1:] if len(p) >= 3]
        pieces += [unquote(secret)] if unquote(secret) != secret else []
    out = []
    for secret in found + pieces:
        if secret and secret not in out:
            out.append(secret)
    return out


def unquote(text):
    from urllib.parse import unquote as _unquote

    return _unquote(text)


def scrub(text, location):
    """``text`` without any password of ``location`` in it (each replaced by ``***``),
    and with every URI password masked."""
    text = str(text)
    for secret in sorted(secrets_of(location), key=len, reverse=True):
        if len(secret) >= 3:  # a shorter one would mask ordinary words
            text = text.replace(secret, "***")
    return redact_uri(text)


# Where libpq reads a password left out of a location.
SECRET_SOURCES = ("PGPASSWORD", "~/.pgpass")


def undo_line(location, command="rollback"):
    """``sklearn-compat COMMAND --table LOCATION``, shell-quoted, the password left out of
    the location (then read from ``PGPASSWORD`` or ``~/.pgpass``, as the line says).

    Examples
    --------
    >>> from sklearn_compat.io._pgvector import undo_line
    >>> print(undo_line("postgresql://app:pw@db/shop?a=1&b=2::items"))
    sklearn-compat rollback --table 'postgresql://app@db/shop?a=1&b=2::items' \
(the password from PGPASSWORD or ~/.pgpass)
    """
    import shlex

    from ._common import strip_secret

    words = ["sklearn-compat", command, "--table", strip_secret(location)]
    line = " ".join(shlex.quote(w) for w in words)
    if redact_uri(location) != location:
        line += f" (the password from {' or '.join(SECRET_SOURCES)})"
    return line


def connect(uri, path, *, autocommit=False):
    """A connection to the database of ``uri`` that has pgvector, or an InputError (the
    driver's line scrubbed of the password, however it was written)."""
    psycopg = import_psycopg()
    try:
        conn = psycopg.connect(uri, autocommit=autocommit)
    except psycopg.Error as exc:
        message = scrub(f"cannot connect to the database: {first_line(exc)}", uri)
        raise InputError(message, path=path) from None
    with database_errors(path, "cannot read the catalog", secret=uri):
        found = conn.execute("SELECT to_regtype('vector') IS NOT NULL").fetchone()[0]
        if not autocommit:
            conn.rollback()
    if not found:
        conn.close()
        raise InputError(
            "the database has no pgvector extension (CREATE EXTENSION vector)", path=path
        )
    return conn


class Column:
    """One column of a table, from the catalog."""

    def __init__(self, name, type_sql, type_name, typmod, not_null, send, type_oid):
        self.name, self.type_sql, self.type_name = name, type_sql, type_name
        self.typmod, self.not_null, self.send, self.type_oid = typmod, not_null, send, type_oid

    def ident(self):
        from psycopg import sql

        return sql.Identifier(self.name)


def table_oid(conn, table, path):
    """The table's oid, or an InputError listing the tables there are."""
    oid = conn.execute("SELECT to_regclass(%s)::oid", [str(table)]).fetchone()[0]
    if oid is None:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT table_schema || '.' || table_name FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
                "ORDER BY 1 LIMIT 9"
            )
        ]
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        # An unquoted name is folded to lower case, as in SQL: name a table that has
        # capitals the way that finds it.
        cased = conn.execute(
            "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) "
            "FROM information_schema.tables WHERE lower(table_name) = lower(%s) "
            "AND table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1 LIMIT 1",
            [table.name],
        ).fetchone()
        hint = ""
        if cased is not None:
            hint = (
                f"; unquoted names are folded to lower case as in SQL: name it ::{cased[0]} "
                "(inside single quotes in a shell)"
            )
        raise InputError(f"no table {str(table)!r} (tables: {shown or 'none'}){hint}", path=path)
    return oid


def table_columns(conn, oid):
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typname, a.atttypmod, "
        "a.attnotnull, t.typsend::regproc::text, a.atttypid "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        [oid],
    ).fetchall()
    return [Column(*row) for row in rows]


def primary_key(conn, oid):
    """The primary key's column names (empty when the table has none)."""
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
        "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = %s AND i.indisprimary ORDER BY a.attnum",
        [oid],
    ).fetchall()
    return [r[0] for r in rows]


def unique_column(conn, oid, column):
    """Whether a unique index (or the primary key) covers ``column`` alone: its values
    are then one per row and never NULL (a unique index allows NULLs: checked too)."""
    row = conn.execute(
        "SELECT bool_or(i.indisprimary), bool_or(a.attnotnull) FROM pg_index i "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
        "WHERE i.indrelid = %s AND i.indisunique AND i.indnatts = 1 AND a.attname = %s "
        "AND i.indexprs IS NULL AND i.indpred IS NULL",
        [oid, column],
    ).fetchone()
    return bool(row and (row[0] or row[1]))


def vector_indexes(conn, oid, column):
    """The indexes on ``column`` alone: ``[{name, method, opclass, options}]``."""
    rows = conn.execute(
        "SELECT ic.relname, am.amname, opc.opcname, coalesce(ic.reloptions, '{}') "
        "FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid "
        "JOIN pg_am am ON am.oid = ic.relam JOIN pg_opclass opc ON opc.oid = i.indclass[0] "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
        "WHERE i.indrelid = %s AND i.indnatts = 1 AND a.attname = %s "
        "AND i.indexprs IS NULL AND i.indpred IS NULL AND NOT i.indisprimary ORDER BY 1",
        [oid, column],
    ).fetchall()
    return [
        {"name": name, "method": method, "opclass": opclass, "options": list(options)}
        for name, method, opclass, options in rows
    ]


def table_comment(conn, table):
    """The JSON a migration wrote as the table's comment (``{}`` when none)."""
    raw = conn.execute("SELECT obj_description(to_regclass(%s), 'pg_class')", [str(table)])
    text = raw.fetchone()[0]
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {}


def decode_vectors(values, kind, width, dtype):
    """A ``(n, width)`` array from pgvector's binary form of ``n`` vectors (bytes each).

    Returns ``(X, bad)``: ``bad`` is the index of the first value that is NULL or of
    another dimension (None when all are whole), ``X`` is None then.
    """
    element = VECTOR_TYPES[kind]
    size = _HEADER_BYTES + element.itemsize * width
    lengths = np.fromiter((-1 if v is None else len(v) for v in values), np.int64, len(values))
    wrong = np.flatnonzero(lengths != size)
    if len(wrong):
        return None, int(wrong[0])
    # The header is a whole number of elements: one view of the joined values, and one
    # copy into native floats.
    skip = _HEADER_BYTES // element.itemsize
    raw = np.frombuffer(b"".join(values), dtype=element).reshape(len(values), width + skip)
    return raw[:, skip:].astype(dtype or np.float32), None


def vector_width(value, kind):
    """The dimension recorded in one vector's binary form."""
    return int(np.frombuffer(value[:2], dtype=">i2")[0]) if value is not None else None


class PgvectorReader(TableReader):
    """A Postgres table read at one snapshot, batch by batch, in id order.

    Attributes
    ----------
    uri : str
        The connection URI (``path`` is the name shown in messages, password hidden).
    table : TableName
    oid : int
    vector : Column
        The vector (``vector`` or ``halfvec``) column.
    kind : {"vector", "halfvec"}
    indexes : list of dict
        The indexes on the vector column (method, operator class, options).
    """

    format = "pgvector"
    form = "list"
    # Rows come in id order: messages name a row by its id, not its position.
    rows_in_file_order = False

    def __init__(self, path, spec, dtype, extra_columns):
        super().__init__(redact_uri(path), spec, dtype, extra_columns)
        self.uri, self.table = split_pg_path(path)
        if spec.prefix or spec.pattern:
            raise InputError(
                "a Postgres table's embedding is its vector column; name it with "
                "--vector-column (a prefix or pattern selects numeric file columns)",
                path=self.path,
            )
        self.conn = connect(self.uri, self.path)
        # One snapshot for the whole run: the count and every batch.
        self.conn.isolation_level = import_psycopg().IsolationLevel.REPEATABLE_READ
        self.conn.read_only = True
        with database_errors(self.path, "cannot read the table"):
            self.oid = table_oid(self.conn, self.table, self.path)
            self.all_columns = table_columns(self.conn, self.oid)
            self.columns = [c.name for c in self.all_columns]
            self._set_layout(spec)
            self.indexes = vector_indexes(self.conn, self.oid, self.list_column)
            count = self.conn.execute(f"SELECT count(*) FROM {self._from()}").fetchone()[0]
            self.n_rows = int(count)
        self._cursors = 0

    def _set_layout(self, spec):
        by_name = {c.name: c for c in self.all_columns}
        vectors = [c.name for c in self.all_columns if c.type_name in VECTOR_TYPES]
        if spec.vector_column is not None:
            if spec.vector_column not in by_name:
                raise InputError(f"no column {spec.vector_column!r}", path=self.path)
            if spec.vector_column not in vectors:
                raise InputError(
                    f"column {spec.vector_column!r} is {by_name[spec.vector_column].type_sql}, "
                    "not a pgvector vector or halfvec",
                    path=self.path,
                )
            chosen = spec.vector_column
        elif len(vectors) == 1:
            chosen = vectors[0]
        elif not vectors:
            raise InputError("has no vector or halfvec column", path=self.path)
        elif len(served := self._served(vectors)) == 1:
            # The others are columns an upgrade added beside it or kept after a cutover.
            chosen = served[0]
        else:
            raise InputError(
                f"several vector columns ({', '.join(map(repr, vectors))}); name the "
                "embedding with --vector-column",
                path=self.path,
            )
        self.vector = by_name[chosen]
        self.list_column = chosen
        self.kind = self.vector.type_name
        self.width = self.vector.typmod if self.vector.typmod > 0 else None
        if spec.id_column is not None:
            if spec.id_column not in by_name:
                shown = ", ".join(map(repr, self.columns[:8]))
                raise InputError(
                    f"no id column {spec.id_column!r} (columns: {shown})", path=self.path
                )
            self.id_column = spec.id_column
        else:
            key = primary_key(self.conn, self.oid)
            if len(key) != 1:
                what = "no primary key" if not key else f"a primary key of {len(key)} columns"
                raise InputError(
                    f"has {what}; name the id column with --id-column", path=self.path
                )
            self.id_column = key[0]
        for name in self.extra_columns:
            if name not in by_name:
                raise InputError(f"no column {name!r}", path=self.path)
        self.id = by_name[self.id_column]

    def _served(self, vectors):
        """The vector columns that serve the table: not added by ``transform
        --add-column`` beside another (until cut over), nor kept by a cutover."""
        notes = dict(
            self.conn.execute(
                "SELECT attname, col_description(attrelid, attnum) FROM pg_attribute "
                "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped",
                [self.oid],
            ).fetchall()
        )
        served = []
        for name in vectors:
            try:
                note = json.loads(notes.get(name) or "{}").get("sklearn_compat") or {}
            except (ValueError, AttributeError):
                note = {}
            if not (note.get("beside") or note.get("kept_by_cutover")):
                served.append(name)
        return served

    # ------------------------------------------------------------------ queries
    def _from(self):
        return self.table.sql().as_string(self.conn)

    def id_value(self):
        """The id as the reader returns it: an integer, or its text."""
        from psycopg import sql

        ident = self.id.ident()
        if self.id.type_name in _INTEGER_TYPES:
            return ident
        return sql.SQL("{}::text").format(ident)

    def query(self, send_columns=(), after=None, version=False, only=None):
        """The SELECT of a batch stream: the id's value, the vector's binary form, then
        each of ``send_columns`` in its binary form (bytea), then (with ``version``) the
        row version (``xmin`` as a number: it changes whenever the row is written), then
        the extra columns.  ``after``: only ids above it; ``only``: only these ids (as
        the reader returns them)."""
        from psycopg import sql

        ident = self.id.ident()
        items = [self.id_value(), _send(self.vector)]
        items += [_send(c) for c in send_columns]
        if version:
            items.append(sql.SQL("xmin::text::int8"))
        items += [sql.Identifier(c) for c in self.extra_columns]
        where = sql.SQL("")
        params = []
        if only is not None:
            array = "int8[]" if self.id.type_name in _INTEGER_TYPES else "text[]"
            where = sql.SQL(" WHERE {} = ANY(%s::{})").format(self.id_value(), sql.SQL(array))
            params = [list(only)]
        elif after is not None:
            where = sql.SQL(" WHERE {} > %s").format(ident)
            params = [after]
        text = sql.SQL("SELECT {} FROM {}{} ORDER BY {}").format(
            sql.SQL(", ").join(items), self.table.sql(), where, ident
        )
        return text, params

    def rows(self, batch_size, send_columns=(), after=None, then="", version=False, only=None):
        """Lists of at most ``batch_size`` raw rows (see :meth:`query`) at the snapshot."""
        text, params = self.query(send_columns, after, version, only)
        self._cursors += 1
        with database_errors(self.path, "cannot read the table", then):
            cursor = self.conn.cursor(f"sklearn_compat_read_{self._cursors}", binary=True)
            cursor.execute(text, params)
        done = 0
        # Fetched in parts: the driver holds each FETCH's whole result besides its rows.
        step = min(batch_size, _FETCH_ROWS)
        while True:
            batch = []
            with database_errors(self.path, f"cannot read the rows after row {done}", then):
                while len(batch) < batch_size:
                    part = cursor.fetchmany(min(step, batch_size - len(batch)))
                    batch += part
                    if len(part) < step:
                        break
            if not batch:
                break
            done += len(batch)
            # Popped, so that this frame holds no reference while the caller uses it.
            held = [batch]
            del batch
            yield held.pop()
        with database_errors(self.path, "cannot read the table", then):
            cursor.close()

    def to_batch(self, rows, start):
        """A checked-layout :class:`Batch` from raw rows (ids, vectors, extra columns)."""
        n = len(rows)
        ids = [r[0] for r in rows]
        if self.id.type_name in _INTEGER_TYPES and None not in ids:
            ids = np.fromiter(ids, dtype=np.int64, count=n)
        else:
            ids = np.array(ids, dtype=object)
        vectors = [r[1] for r in rows]
        if self.width is None and n and vectors[0] is not None:
            self.width = vector_width(vectors[0], self.kind)
        X, bad = decode_vectors(vectors, self.kind, self.width or 0, self.dtype)
        if bad is not None:
            batch = Batch(start, ids, np.empty((n, 0)))
            where = self._locate(batch, bad, self.list_column)
            if vectors[bad] is None:
                raise InputError(f"{where}: missing vector (NULL)", path=self.path)
            raise InputError(
                f"{where}: vector has {vector_width(vectors[bad], self.kind)} dimensions, "
                f"expected {self.width}",
                path=self.path,
            )
        first = len(rows[0]) - len(self.extra_columns) if n else 0
        extra = {
            c: np.array([r[first + j] for r in rows], dtype=object)
            for j, c in enumerate(self.extra_columns)
        }
        return Batch(start, ids, X, extra)

    def _batches(self, batch_size, offset=0):
        start = 0
        for rows in self.rows(batch_size):
            if start + len(rows) > offset:
                skip = max(0, offset - start)
                yield self.to_batch(rows[skip:], start + skip)
            start += len(rows)

    def ledger(self):
        """The table's ledger entries, oldest first (see
        :mod:`sklearn_compat.io._pgvector_ledger`), read at the reader's snapshot."""
        from ._pgvector_ledger import read_entries

        with database_errors(self.path, "cannot read the ledger"):
            return read_entries(self.conn, self.table)

    def migration(self):
        """The migration whose output the table's vector column holds (the last mapping
        in effect the ledger records: ``model_sha256``, ``input``, ``finished``...), or
        None; a table an earlier version migrated records it in its comment."""
        from ._stores.ledger import last_mapping

        done = last_mapping(self.ledger(), self.list_column)
        if done is not None:
            model = done.get("model") or {}
            return dict(
                done,
                model_sha256=model.get("sha256") or done.get("model_sha256"),
                finished=done.get("time"),
            )
        with database_errors(self.path, "cannot read the table"):
            return table_comment(self.conn, self.table).get("migration")

    def id_dtype(self):
        return np.dtype(np.int64) if self.id.type_name in _INTEGER_TYPES else np.dtype(object)

    def close(self):
        self.conn.close()


def _send(column):
    """``typsend(column)``: the column's binary form as bytea (NULL stays NULL)."""
    from psycopg import sql

    return sql.SQL("{}({})").format(sql.SQL(column.send), column.ident())

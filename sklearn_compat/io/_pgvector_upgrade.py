"""The upgrade of a Postgres table in place: a vector column added beside the old one,
rows written by id with their provenance, counts, cutover and its rollback.

- ``add_column``: ``ALTER TABLE ... ADD COLUMN NAME vector(W), ADD COLUMN NAME_source
  text`` (instant: no row is rewritten) and, for each index on the old column, an index of
  the same method and options with the operator class of the new type (``halfvec_*_ops``
  becomes ``vector_*_ops``; a column wider than an index method takes in ``vector`` is
  ``halfvec``).  The old column and its indexes keep serving.  The column's comment records
  which column it was added beside.
- ``write_rows``: the vectors, their ids and provenance go by binary ``COPY`` into a
  temporary table, then one ``UPDATE ... FROM`` writes them, bit for bit, in the same
  transaction: a killed run leaves whole calls or nothing.  Rows whose vector and
  provenance are already those written are not touched (a rerun changes nothing); ids the
  table does not hold are returned, never inserted.
- ``column_status``: one ``GROUP BY`` over the provenance column.
- ``cutover``: the old column renamed to ``OLD_sklearn_compat_previous`` and the new one to
  the old name (with their provenance columns), in one transaction with its ledger entry;
  ``uncutover`` renames them back.
"""

import json

import numpy as np

from ._common import InputError
from ._pgvector import (
    _INTEGER_TYPES,
    MAX_IDENTIFIER,
    VECTOR_TYPES,
    decode_vectors,
    primary_key,
    table_columns,
    vector_indexes,
)
from ._pgvector_ledger import append_entry
from ._pgvector_sql import create_index, vector_bytes

__all__ = [
    "SOURCE_SUFFIX",
    "add_column",
    "column_status",
    "cutover",
    "iter_rows",
    "read_rows",
    "uncutover",
    "vector_columns",
    "write_rows",
]

# The provenance column of vector column NAME: NAME_source ("native", "mapped:<model id>",
# NULL while the row has no vector).
SOURCE_SUFFIX = "_source"
# The widest column each index method takes in vector (in halfvec: twice as wide).
_INDEX_MAX_WIDTH = {"hnsw": 2000, "ivfflat": 2000}
_TEMP = "sklearn_compat_rows"


def _sql():
    from psycopg import sql

    return sql


class VectorColumn:
    """A vector column of the table: name, kind (vector/halfvec), width, not null."""

    def __init__(self, column):
        self.name = column.name
        self.kind = column.type_name
        self.width = column.typmod if column.typmod > 0 else None
        self.type_sql = column.type_sql
        self.not_null = column.not_null


def _columns(store):
    return table_columns(store.conn, store._oid())


def vector_columns(store):
    """``{name: VectorColumn}`` of the table's vector and halfvec columns."""
    with store.errors("cannot read the table"):
        out = {c.name: VectorColumn(c) for c in _columns(store) if c.type_name in VECTOR_TYPES}
        store.conn.rollback()
    return out


def _vector_column(store, name):
    columns = {c.name: c for c in _columns(store)}
    if name not in columns:
        vectors = [c.name for c in columns.values() if c.type_name in VECTOR_TYPES]
        raise InputError(
            f"no column {name!r} (vector columns: {', '.join(map(repr, vectors)) or 'none'})",
            path=store.display(),
        )
    if columns[name].type_name not in VECTOR_TYPES:
        raise InputError(
            f"column {name!r} is {columns[name].type_sql}, not a pgvector vector or halfvec",
            path=store.display(),
        )
    return VectorColumn(columns[name]), columns


def _id_column(store):
    """The id column: the store's ``id_column`` or the one-column primary key."""
    columns = {c.name: c for c in _columns(store)}
    if store.id_column is not None:
        if store.id_column not in columns:
            raise InputError(f"no id column {store.id_column!r}", path=store.display())
        return columns[store.id_column]
    key = primary_key(store.conn, store._oid())
    if len(key) != 1:
        what = "no primary key" if not key else f"a primary key of {len(key)} columns"
        raise InputError(f"has {what}; name the id column with --id-column", path=store.display())
    return columns[key[0]]


def _check_name(store, name):
    for word in (name, name + SOURCE_SUFFIX):
        if len(word.encode()) > MAX_IDENTIFIER:
            raise InputError(
                f"the column name {word[:20]!r}... is longer than the {MAX_IDENTIFIER} bytes "
                "Postgres keeps; give a shorter one",
                path=store.display(),
            )


def column_note(store, name):
    """What the comment of column ``name`` records (``{}`` for a column sklearn-compat
    did not add)."""
    text = store.conn.execute(
        "SELECT col_description(%s, attnum) FROM pg_attribute "
        "WHERE attrelid = %s AND attname = %s",
        [store._oid(), store._oid(), name],
    ).fetchone()
    try:
        note = json.loads(text[0]) if text and text[0] else {}
    except ValueError:
        return {}
    return note.get("sklearn_compat", {}) if isinstance(note, dict) else {}


def _set_note(store, name, note):
    sql = _sql()
    store.conn.execute(
        sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
            store.table.sql(),
            sql.Identifier(name),
            sql.Literal(json.dumps({"sklearn_compat": note})),
        )
    )


def _opclass(opclass, kind):
    """The operator class of ``opclass``'s family for vectors of ``kind``."""
    for prefix in VECTOR_TYPES:
        if opclass.startswith(prefix + "_"):
            return kind + opclass[len(prefix) :]
    return opclass


def _index_name(store, name, method):
    from ._pgvector import TableName

    return TableName(None, store.table.name).sibling(f"_{name}_{method}_idx").name


# How long a change of the table's columns waits for its lock: it queues every other
# query of the table behind it while it waits, so it gives up early instead.
LOCK_TIMEOUT = "5s"


def _wait_briefly(store):
    store.conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")


def add_column(store, name, width, like):
    """See :meth:`PgvectorStore.add_column`."""
    sql = _sql()
    _check_name(store, name)
    width = int(width)
    store.let_readers_go()
    with store.errors("cannot add the column; nothing changed"):
        _wait_briefly(store)
        old, columns = _vector_column(store, like)
        indexes = vector_indexes(store.conn, store._oid(), like)
        ann = [i for i in indexes if i["method"] in _INDEX_MAX_WIDTH]
        kind = "vector"
        if ann and width > min(_INDEX_MAX_WIDTH[i["method"]] for i in ann):
            kind = "halfvec"  # pgvector indexes halfvec up to twice the width
        type_sql = f"{kind}({width})"
        if name in columns:
            have = columns[name]
            source = name + SOURCE_SUFFIX in columns
            if have.type_name in VECTOR_TYPES and have.typmod == width and source:
                store.conn.rollback()
                return f"{store.display()}: column {name!r} ({have.type_sql}) is already there"
            raise InputError(
                f"column {name!r} already exists ({have.type_sql}); give another name",
                path=store.display(),
            )
        if name + SOURCE_SUFFIX in columns:
            raise InputError(
                f"column {name + SOURCE_SUFFIX!r} already exists (it would hold the provenance "
                f"of {name!r}); give another name",
                path=store.display(),
            )
        store.conn.execute(
            sql.SQL("ALTER TABLE {} ADD COLUMN {} {}, ADD COLUMN {} text").format(
                store.table.sql(),
                sql.Identifier(name),
                sql.SQL(type_sql),
                sql.Identifier(name + SOURCE_SUFFIX),
            )
        )
        built = []
        for index in indexes:
            made = dict(index, opclass=_opclass(index["opclass"], kind))
            create_index(
                store.conn, store.table, name, made, _index_name(store, name, index["method"])
            )
            built.append(f"{made['method']} ({made['opclass']})")
        _set_note(store, name, {"beside": like, "source": name + SOURCE_SUFFIX})
        store.conn.commit()
    indexed = f"; index: {', '.join(built)}" if built else ""
    return (
        f"{store.display()}: added column {name!r} ({type_sql}) beside {like!r} "
        f"({old.type_sql}), provenance in {name + SOURCE_SUFFIX!r}{indexed}; {like!r} and its "
        "indexes keep serving"
    )


def _ids_list(ids, id_col):
    ids = np.asarray(ids)
    if id_col.type_name in _INTEGER_TYPES:
        if ids.dtype.kind not in "iu":
            try:
                ids = ids.astype(np.int64)
            except (TypeError, ValueError):
                raise InputError(
                    f"id column {id_col.name!r} holds integers; got ids such as {ids[:1]}"
                ) from None
        return [int(i) for i in ids.tolist()], "int8"
    return [str(i) for i in ids.tolist()], "text"


def _temp_table(store, id_type, vector_sql):
    """A temporary table of this connection (rows dropped at commit) for one call's rows."""
    sql = _sql()
    store.conn.execute(f"DROP TABLE IF EXISTS pg_temp.{_TEMP}")
    columns = sql.SQL("id {}").format(sql.SQL(id_type))
    if vector_sql is not None:
        columns = sql.SQL("{}, v {}, src text").format(columns, sql.SQL(vector_sql))
    store.conn.execute(
        sql.SQL("CREATE TEMP TABLE {} ({}) ON COMMIT DROP").format(sql.Identifier(_TEMP), columns)
    )


def _match(id_col):
    """``t.ID = s.id`` with the temporary table's id cast to the column's type."""
    sql = _sql()
    ident = sql.Identifier("t", id_col.name)
    if id_col.type_name in _INTEGER_TYPES:
        return sql.SQL("{} = s.id").format(ident)
    return sql.SQL("{} = s.id::{}").format(ident, sql.SQL(id_col.type_sql))


def write_rows(store, column, ids, Z, provenance):
    """See :meth:`PgvectorStore.write_rows`."""
    sql = _sql()
    Z = np.asarray(Z)
    n = len(ids)
    with store.errors("cannot write the rows; nothing written"):
        col, columns = _vector_column(store, column)
        id_col = _id_column(store)
        if Z.ndim != 2 or Z.shape[0] != n:
            raise InputError(f"{n} ids but vectors of shape {Z.shape}", path=store.display())
        if col.width is not None and Z.shape[1] != col.width:
            raise InputError(
                f"the vectors have {Z.shape[1]} values, column {column!r} holds "
                f"{col.type_sql}; nothing written",
                path=store.display(),
            )
        values, id_type = _ids_list(ids, id_col)
        if len(set(values)) != n:
            seen, repeated = set(), []
            for v in values:
                if v in seen and v not in repeated:
                    repeated.append(v)
                seen.add(v)
            raise InputError(
                f"ids repeated in one write ({', '.join(map(str, repeated[:5]))}); each id once",
                path=store.display(),
            )
        if isinstance(provenance, str) or provenance is None:
            sources = [provenance] * n
        else:
            sources = [None if p is None else str(p) for p in provenance]
        source = column + SOURCE_SUFFIX
        if source not in columns:  # a column sklearn-compat did not add: provenance beside
            store.conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN {} text").format(
                    store.table.sql(), sql.Identifier(source)
                )
            )
        if not n:
            store.conn.commit()
            store.last_written = 0
            return np.asarray(ids)[:0]
        Z = Z.astype(np.float32, copy=False)
        limit = np.finfo(np.float16).max if col.kind == "halfvec" else np.inf
        bad = ~(np.abs(Z) <= limit).all(axis=1)  # NaN, infinite or beyond halfvec
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(
                f"id {values[i]}: the vector holds NaN or infinite values (or values beyond "
                f"what a {col.kind} holds); nothing written",
                path=store.display(),
            )
        vectors = vector_bytes(Z, col.kind)
        _temp_table(store, id_type, f"{col.kind}({Z.shape[1]})")
        copy_sql = sql.SQL("COPY {} (id, v, src) FROM STDIN (FORMAT BINARY)").format(
            sql.Identifier(_TEMP)
        )
        with store.conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
            copy.set_types([id_type, "bytea", "text"])
            for record in zip(values, vectors, sources, strict=True):
                copy.write_row(record)
        # The planner knows the batch's size (a temporary table has no statistics until
        # analysed) and hashes it in memory, not the table.
        store.conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(_TEMP)))
        store.conn.execute("SET LOCAL work_mem = '256MB'")
        # The vectors were sent in their binary form as bytea: the column's type reads them
        # (vector_recv / halfvec_recv) from the same bytes, bit for bit.
        written = store.conn.execute(
            sql.SQL(
                "UPDATE {t} t SET {c} = s.v, {p} = s.src FROM {s} s WHERE {m} "
                "AND (t.{c} IS DISTINCT FROM s.v OR t.{p} IS DISTINCT FROM s.src) "
                "RETURNING s.id"
            ).format(
                t=store.table.sql(),
                c=sql.Identifier(column),
                p=sql.Identifier(source),
                s=sql.Identifier(_TEMP),
                m=_match(id_col),
            )
        ).rowcount
        store.last_written = written
        unknown = []
        if written < n:  # rows already as written, or ids the table does not hold
            unknown = [
                r[0]
                for r in store.conn.execute(
                    sql.SQL(
                        "SELECT s.id FROM {s} s WHERE NOT EXISTS (SELECT 1 FROM {t} t WHERE {m})"
                    ).format(s=sql.Identifier(_TEMP), t=store.table.sql(), m=_match(id_col))
                )
            ]
        store.conn.commit()
    dtype = np.int64 if id_type == "int8" else object
    return np.array(unknown, dtype=dtype)


def _decode(values, col, width):
    """float32 ``(n, width)`` with NaN rows for NULL."""
    n = len(values)
    Z = np.full((n, width), np.nan, dtype=np.float32)
    present = [i for i, v in enumerate(values) if v is not None]
    if present:
        X, bad = decode_vectors([values[i] for i in present], col.kind, width, np.float32)
        if bad is not None:
            raise InputError(f"column {col.name!r}: a vector of another dimension")
        Z[present] = X
    return Z


def read_rows(store, column, ids):
    """See :meth:`PgvectorStore.read_rows`."""
    sql = _sql()
    n = len(ids)
    with store.errors("cannot read the rows"):
        col, columns = _vector_column(store, column)
        id_col = _id_column(store)
        values, id_type = _ids_list(ids, id_col)
        source = column + SOURCE_SUFFIX
        src = sql.Identifier("t", source) if source in columns else sql.SQL("NULL::text")
        _temp_table(store, id_type, None)
        copy_sql = sql.SQL("COPY {} (id) FROM STDIN (FORMAT BINARY)").format(sql.Identifier(_TEMP))
        with store.conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
            copy.set_types([id_type])
            for value in values:
                copy.write_row((value,))
        store.conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(_TEMP)))
        with store.conn.cursor(binary=True) as cursor:
            cursor.execute(
                sql.SQL(
                    "SELECT s.id, t.{k} IS NOT NULL, {send}(t.{c}), {src} "
                    "FROM {s} s LEFT JOIN {t} t ON {m}"
                ).format(
                    k=sql.Identifier(id_col.name),
                    send=sql.SQL(f"{col.kind}_send"),
                    c=sql.Identifier(column),
                    src=src,
                    s=sql.Identifier(_TEMP),
                    t=store.table.sql(),
                    m=_match(id_col),
                )
            )
            found = {r[0]: r[1:] for r in cursor.fetchall()}
        store.conn.rollback()
    width = col.width or 0
    known = np.zeros(n, dtype=bool)
    raw = [None] * n
    prov = np.empty(n, dtype=object)
    for i, value in enumerate(values):
        row = found.get(value)
        if row is None or not row[0]:
            continue
        known[i] = True
        raw[i] = row[1]
        prov[i] = row[2] if row[1] is not None else None
    return known, _decode(raw, col, width), prov


def iter_rows(store, columns, batch_size):
    """See :meth:`PgvectorStore.iter_rows`."""
    sql = _sql()
    with store.errors("cannot read the table"):
        id_col = _id_column(store)
        cols, have = [], {c.name for c in _columns(store)}
        for name in columns:
            cols.append(_vector_column(store, name)[0])
        store.conn.rollback()
    items = [
        sql.Identifier(id_col.name)
        if id_col.type_name in _INTEGER_TYPES
        else sql.SQL("{}::text").format(sql.Identifier(id_col.name))
    ]
    for col in cols:
        send = sql.SQL(f"{col.kind}_send")
        items.append(sql.SQL("{}({})").format(send, sql.Identifier(col.name)))
        source = col.name + SOURCE_SUFFIX
        items.append(sql.Identifier(source) if source in have else sql.SQL("NULL::text"))
    query = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
        sql.SQL(", ").join(items), store.table.sql(), sql.Identifier(id_col.name)
    )
    from ._pgvector import connect

    conn = connect(store.uri, store.display())  # its own snapshot, apart from writes
    try:
        conn.isolation_level = __import__("psycopg").IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        with store.errors("cannot read the table"):
            cursor = conn.cursor("sklearn_compat_iter", binary=True)
            cursor.execute(query)
        while True:
            with store.errors("cannot read the table"):
                rows = cursor.fetchmany(batch_size)
            if not rows:
                break
            if id_col.type_name in _INTEGER_TYPES:
                ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            else:
                ids = np.array([r[0] for r in rows], dtype=object)
            Zs, provs = {}, {}
            for j, col in enumerate(cols):
                values = [r[1 + 2 * j] for r in rows]
                Zs[col.name] = _decode(values, col, col.width or 0)
                provs[col.name] = np.array(
                    [r[2 + 2 * j] if r[1 + 2 * j] is not None else None for r in rows],
                    dtype=object,
                )
            yield ids, Zs, provs
    finally:
        conn.close()


def column_status(store, column):
    """See :meth:`PgvectorStore.column_status`."""
    from ._stores.base import NATIVE, provenance_model
    from ._stores.ledger import last_mapping

    sql = _sql()
    entries = store.ledger()
    with store.errors("cannot read the table"):
        col, columns = _vector_column(store, column)
        source = column + SOURCE_SUFFIX
        src = sql.Identifier(source) if source in columns else sql.SQL("NULL::text")
        rows = store.conn.execute(
            sql.SQL("SELECT {p}, count(*), count({c}) FROM {t} GROUP BY 1").format(
                p=src, c=sql.Identifier(column), t=store.table.sql()
            )
        ).fetchall()
        store.conn.rollback()
    status = {"dimension": col.width, "rows": 0, "mapped": {}, "native": 0, "missing": 0}
    # Vectors without a provenance were there before: mapped when the ledger says a map
    # wrote this column (transform, --replace), else the table's own.
    written = last_mapping(entries, column)
    before = ((written or {}).get("model") or {}).get("id") or (
        ((written or {}).get("model") or {}).get("sha256", "")[:16] or None
    )
    for prov, total, present in rows:
        status["rows"] += total
        status["missing"] += total - present
        if not present:
            continue
        model = provenance_model(prov)
        if model is None and prov is None and before is not None:
            model = before
        if model is not None:
            status["mapped"][model] = status["mapped"].get(model, 0) + present
        elif prov is None or prov == NATIVE:
            status["native"] += present
        else:
            status["native"] += present
    return status


def _readers_of(store, names):
    """Views and rules that read any of ``names``: they read a column by position, so a
    rename would leave them on the old vectors."""
    rows = store.conn.execute(
        "SELECT DISTINCT r.ev_class::regclass::text FROM pg_depend d "
        "JOIN pg_rewrite r ON r.oid = d.objid "
        "JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid "
        "WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = %s "
        "AND a.attname = ANY(%s) AND r.ev_class <> d.refobjid ORDER BY 1",
        [store._oid(), list(names)],
    ).fetchall()
    return [r[0] for r in rows]


def added_columns(store):
    """``{name: like}`` of the added vector columns (their column notes)."""
    out = {}
    with store.errors("cannot read the table"):
        for name in vector_columns(store):
            beside = column_note(store, name).get("beside")
            if beside:
                out[name] = beside
        store.conn.rollback()
    return out


def _beside(store, column, entries):
    note = column_note(store, column)
    if note.get("beside"):
        return note["beside"]
    for e in reversed(entries):
        if e.get("action") == "add_column" and e.get("column") == column and e.get("like"):
            return e["like"]
    return None


def _rename(store, old, new):
    sql = _sql()
    store.conn.execute(
        sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
            store.table.sql(), sql.Identifier(old), sql.Identifier(new)
        )
    )


def _swap_columns(store, served, new, kept, have):
    """``served`` -> ``kept`` and ``new`` -> ``served``, with their provenance columns
    (a missing provenance column is skipped); NOT NULL moves with the served name."""
    for old, name in [(served, kept), (new, served)]:
        _rename(store, old, name)
        if old + SOURCE_SUFFIX in have:
            _rename(store, old + SOURCE_SUFFIX, name + SOURCE_SUFFIX)


def _not_null(store, name, how):
    sql = _sql()
    store.conn.execute(
        sql.SQL("ALTER TABLE {} ALTER COLUMN {} {} NOT NULL").format(
            store.table.sql(), sql.Identifier(name), sql.SQL(how)
        )
    )


def cutover(store, column):
    """See :meth:`PgvectorStore.cutover`."""
    from ._stores.ledger import entry

    sql = _sql()
    entries = store.ledger()
    store.let_readers_go()
    with store.errors("cannot cut over; nothing changed"):
        new, columns = _vector_column(store, column)
        served = _beside(store, column, entries)
        if served is None:
            raise InputError(
                f"column {column!r} was not added by 'transform --add-column' (no record of "
                "the column it stands beside); nothing to cut over",
                path=store.display(),
            )
        if served not in columns:
            raise InputError(
                f"column {served!r}, which {column!r} was added beside, is gone",
                path=store.display(),
            )
        kept = store.kept_name(served)
        _check_name(store, kept)
        if kept in columns or kept + SOURCE_SUFFIX in columns:
            raise InputError(
                f"column {kept!r} holds the vectors an earlier cutover replaced; roll that "
                f"back ({store.undo_line()}) or drop the column, then cut over",
                path=store.display(),
            )
        readers = _readers_of(store, [served, column])
        if readers:
            raise InputError(
                f"views or rules read {served!r} or {column!r} ({', '.join(readers)}): they "
                "follow a column, not its name, and would keep reading the old vectors; drop "
                "them, cut over, and create them again",
                path=store.display(),
            )
        old_not_null = columns[served].not_null
        missing = 0
        if old_not_null:
            missing = store.conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE {} IS NULL").format(
                    store.table.sql(), sql.Identifier(column)
                )
            ).fetchone()[0]
        _wait_briefly(store)
        store.conn.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(store.table.sql())
        )
        _swap_columns(store, served, column, kept, set(columns))
        served_not_null = bool(old_not_null and not missing)
        if old_not_null:
            _not_null(store, kept, "DROP")
        if served_not_null:
            _not_null(store, served, "SET")
        rebuilt = _reindex_ivfflat(store, served)
        _set_note(store, served, {"added_as": column, "kept": kept})
        _set_note(store, kept, {"kept_by_cutover": True, "served": served})
        record = entry("cutover", column=column, served=served, kept=kept,
                       not_null=bool(old_not_null), served_not_null=served_not_null,
                       rows=None)  # fmt: skip
        append_entry(store.conn, store.table, record)
        store.conn.commit()
    notes = "; IVFFlat lists rebuilt over the vectors" if rebuilt else ""
    return (
        f"{store.display()}: column {column!r} ({new.type_sql}) is now served as {served!r}; "
        f"the old {served!r} is kept as {kept!r}{notes}; undo with: {store.undo_line()}"
    )


def _reindex_ivfflat(store, column):
    """Rebuild the IVFFlat indexes of ``column`` (their lists were chosen when it was
    empty or partly written)."""
    sql = _sql()
    done = []
    for index in vector_indexes(store.conn, store._oid(), column):
        if index["method"] == "ivfflat":
            from ._pgvector import TableName

            name = TableName(store.table.schema, index["name"]).sql()
            store.conn.execute(sql.SQL("REINDEX INDEX {}").format(name))
            done.append(index["name"])
    return done


def uncutover(store, cut, redo):
    """Undo the cutover the ledger entry ``cut`` records (or, with ``redo``, do it again
    after a rollback), in one transaction with its ``rollback`` ledger entry."""
    from ._stores.ledger import entry, undo_reference

    sql = _sql()
    served, kept, column = cut.get("served"), cut.get("kept"), cut.get("column")
    store.let_readers_go()
    try:
        with store.errors("cannot roll back; nothing changed"):
            columns = {c.name: c for c in _columns(store)}
            if redo:
                need = [served, column]
            else:
                need = [served, kept]
            absent = [n for n in need if n not in columns]
            if absent or (not redo and column in columns) or (redo and kept in columns):
                raise InputError(
                    f"the columns are not as the cutover left them ({', '.join(absent)} "
                    "missing or renamed); nothing restored",
                    path=store.display(),
                )
            readers = _readers_of(store, need)
            if readers:
                raise InputError(
                    f"views or rules read {' or '.join(map(repr, need))} "
                    f"({', '.join(readers)}); drop them, roll back, and create them again",
                    path=store.display(),
                )
            _wait_briefly(store)
            store.conn.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(store.table.sql())
            )
            have = set(columns)
            old_not_null = bool(cut.get("not_null"))
            served_not_null = bool(cut.get("served_not_null"))
            if redo:
                _swap_columns(store, served, column, kept, have)
                if old_not_null:
                    _not_null(store, kept, "DROP")
                if served_not_null:
                    _not_null(store, served, "SET")
                _set_note(store, served, {"added_as": column, "kept": kept})
                _set_note(store, kept, {"kept_by_cutover": True, "served": served})
            else:
                # served -> column (the added one again), kept -> served
                _rename(store, served, column)
                if served + SOURCE_SUFFIX in have:
                    _rename(store, served + SOURCE_SUFFIX, column + SOURCE_SUFFIX)
                _rename(store, kept, served)
                if kept + SOURCE_SUFFIX in have:
                    _rename(store, kept + SOURCE_SUFFIX, served + SOURCE_SUFFIX)
                if served_not_null:
                    _not_null(store, column, "DROP")
                if old_not_null:
                    _not_null(store, served, "SET")
                _set_note(store, column, {"beside": served, "source": column + SOURCE_SUFFIX})
                store.conn.execute(
                    sql.SQL("COMMENT ON COLUMN {}.{} IS NULL").format(
                        store.table.sql(), sql.Identifier(served)
                    )
                )
            undoes = undo_reference(cut)
            append_entry(store.conn, store.table, entry("rollback", column=column, undoes=undoes))
            store.conn.commit()
    finally:
        store.close()
    if redo:
        return (
            f"{store.display()}: cut over again: column {column!r} is served as {served!r}, "
            f"the old one kept as {kept!r}; the same command swaps them back"
        )
    return (
        f"{store.display()}: rolled back the cutover: {served!r} serves the old vectors "
        f"again (bit for bit) and the new ones are column {column!r} again; the same "
        f"command cuts over again"
    )

"""The SQL steps the Postgres writers share: the advisory lock, table comments, vectors in
pgvector's binary form, and dropping and rebuilding a vector column's indexes around a
rewrite of its values."""

import json

import numpy as np

from ._common import InputError
from ._pgvector import VECTOR_TYPES, TableName

__all__ = [
    "check_type_change",
    "create_index",
    "drop_indexes",
    "hold_lock",
    "lock_key",
    "same_ids",
    "set_comment",
    "set_vectors",
    "table_exists",
    "vector_bytes",
]

STAGING_SUFFIX = "_sklearn_compat_partial"
KEPT_SUFFIX = "_sklearn_compat_previous"


def sql_module():
    from psycopg import sql

    return sql


def table_exists(conn, table):
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", [str(table)]).fetchone()[0]


def lock_key(conn, table):
    """The advisory lock key of ``table`` (its schema resolved: one key per table however
    its name is written)."""
    schema = table.schema or conn.execute("SELECT current_schema()").fetchone()[0]
    return f"sklearn_compat:{schema}.{table.name}"


def hold_lock(conn, table, path):
    """Hold the advisory lock of ``table`` for this connection's life, or refuse."""
    from ..exceptions import OutputLocked

    key = lock_key(conn, table)
    got = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [key]).fetchone()
    if not got[0]:
        # The holder, as far as this role may see it.
        holder = conn.execute(
            "SELECT a.pid, a.application_name, a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.objid = (hashtextextended(%s, 0) & 4294967295)::oid "
            "AND l.pid <> pg_backend_pid() LIMIT 1",
            [key],
        ).fetchone()
        conn.commit()
        who = ""
        if holder is not None:
            since = holder[2].strftime("%Y-%m-%d %H:%M:%S") if holder[2] else "?"
            app = f", application {holder[1]!r}" if holder[1] else ""
            who = f" (server process {holder[0]}{app}, connected since {since})"
        raise OutputLocked(
            f"another sklearn-compat run is writing this table now: it holds the table's "
            f"advisory lock{who}; wait for it to end or stop it",
            path=path,
        )
    conn.commit()


def set_comment(conn, table, info):
    sql = sql_module()
    conn.execute(
        sql.SQL("COMMENT ON TABLE {} IS {}").format(table.sql(), sql.Literal(json.dumps(info)))
    )


def vector_bytes(Z, kind):
    """pgvector's binary form of each row of ``Z``: a list of zero-copy views (memoryview)
    of one buffer, which binary ``COPY`` sends as they are."""
    element = VECTOR_TYPES[kind]
    n, width = Z.shape
    size = 4 + element.itemsize * width
    out = np.empty((n, size), dtype=np.uint8)
    out[:, :4] = np.frombuffer(np.array([width, 0], dtype=">i2").tobytes(), dtype=np.uint8)
    values = out[:, 4:].view(element)
    values[...] = Z  # cast straight into the buffer, big-endian
    finite = np.isfinite(values)
    if not finite.all():  # NaN from the model, or beyond float16's range for a halfvec
        i = int(np.argwhere(~finite)[0][0])
        raise InputError(
            f"the model mapped row {i} of the batch to a vector that a {kind} cannot hold "
            "(NaN or infinite values)"
        )
    flat = memoryview(out.reshape(-1))
    return [flat[i : i + size] for i in range(0, n * size, size)]


def create_index(conn, table, column, index, name):
    sql = sql_module()
    options = sql.SQL("")
    if index["options"]:
        pairs = [o.split("=", 1) for o in index["options"]]
        options = sql.SQL(" WITH ({})").format(
            sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in pairs
            )
        )
    conn.execute(
        sql.SQL("CREATE INDEX {} ON {} USING {} ({} {}){}").format(
            sql.Identifier(name),
            table.sql(),
            sql.Identifier(index["method"]),
            sql.Identifier(column),
            sql.Identifier(index["opclass"]),
            options,
        )
    )


def drop_indexes(conn, table, indexes):
    sql = sql_module()
    for index in indexes:
        name = TableName(table.schema, index["name"]).sql()
        conn.execute(sql.SQL("DROP INDEX {}").format(name))


def check_type_change(conn, table, column, current, wanted, path, action):
    """Refuse, before any work, to change ``column``'s type from ``current`` to ``wanted``
    while views or rules read the column: Postgres refuses ``ALTER COLUMN ... TYPE`` then,
    at the very end of a migration.  ``action`` names what would change it."""
    if current == wanted:
        return
    users = conn.execute(
        "SELECT DISTINCT r.ev_class::regclass::text FROM pg_depend d "
        "JOIN pg_rewrite r ON r.oid = d.objid "
        "JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid "
        "WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = to_regclass(%s) "
        "AND a.attname = %s ORDER BY 1",
        [str(table), column],
    ).fetchall()
    if users:
        raise InputError(
            f"{action} changes column {column!r} from {current} to {wanted}, which Postgres "
            f"refuses while views or rules read it ({', '.join(u[0] for u in users)}): drop "
            "them and create them again afterwards, or write a new table with --output",
            path=path,
        )


def set_vectors(conn, table, id_column, column, type_sql, source, indexes, not_null):
    """Write ``source``'s vectors (by id) into ``table``'s column ``column`` of type
    ``type_sql``, the vector indexes dropped first and rebuilt after (same names)."""
    sql = sql_module()
    ident, key = sql.Identifier(column), sql.Identifier(id_column)
    drop_indexes(conn, table, indexes)
    current = conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attname = %s",
        [str(table), column],
    ).fetchone()[0]
    if current != type_sql:
        if not_null:
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP NOT NULL").format(table.sql(), ident)
            )
        conn.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING NULL").format(
                table.sql(), ident, sql.SQL(type_sql)
            )
        )
    conn.execute(
        sql.SQL("UPDATE {t} SET {c} = s.{c} FROM {s} s WHERE {t}.{k} = s.{k}").format(
            t=table.sql(), c=ident, s=source.sql(), k=key
        )
    )
    if current != type_sql and not_null:
        conn.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET NOT NULL").format(table.sql(), ident)
        )
    for index in indexes:
        create_index(conn, table, column, index, index["name"])


def same_ids(conn, table, other, id_column):
    """``(missing, extra, repeated)`` counts of ``other``'s ids against ``table``'s."""
    sql = sql_module()
    key = sql.Identifier(id_column)
    query = sql.SQL(
        "SELECT (SELECT count(*) FROM {t} t WHERE NOT EXISTS "
        "(SELECT 1 FROM {o} o WHERE o.{k} = t.{k})), "
        "(SELECT count(*) FROM {o} o WHERE NOT EXISTS "
        "(SELECT 1 FROM {t} t WHERE o.{k} = t.{k})), "
        "(SELECT count(*) - count(DISTINCT {k}) FROM {o})"
    ).format(t=table.sql(), o=other.sql(), k=key)
    return conn.execute(query).fetchone()

"""The ledger of a Postgres table: what sklearn-compat did to it, kept in the database.

Entries (the dicts of :mod:`sklearn_compat.io._stores.ledger`) live in the table
``sklearn_compat_ledger`` of the table's own schema, one row per entry: the table's name
and oid, the entry as ``jsonb``, in the order they were written (``seq``).  An entry is
written in the same transaction as the change it records (the promotion of a migration,
an added column, a cutover, a rollback), so the ledger and the table never disagree, and
dropping the vectors an earlier ``--replace`` kept does not lose the record that the
table was mapped.

A table's entries are those written under its name or its oid (a renamed table keeps its
ledger); a table replaced by ``--force`` loses the entries of the table it replaced, in
the transaction that drops it.
"""

import json

__all__ = ["LEDGER_TABLE", "append_entry", "forget_entries", "read_entries"]

LEDGER_TABLE = "sklearn_compat_ledger"


def _sql():
    from psycopg import sql

    return sql


class _Ledger:
    """The ledger table's name in one schema (``sql()`` and ``str()`` as a TableName)."""

    def __init__(self, schema):
        self.schema, self.name = schema, LEDGER_TABLE

    def sql(self):
        return _sql().Identifier(self.schema, self.name)

    def __str__(self):
        return '"' + self.schema.replace('"', '""') + '".' + self.name


def ledger_table(conn, table):
    """The ledger's name: in ``table``'s schema (resolved, so that a table named with or
    without its schema has one ledger)."""
    return _Ledger(table.schema or _schema_of(conn, table))


def _schema_of(conn, table):
    row = conn.execute(
        "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = to_regclass(%s)",
        [str(table)],
    ).fetchone()
    if row is not None:
        return row[0]
    return conn.execute("SELECT current_schema()").fetchone()[0]


def read_entries(conn, table):
    """The entries of ``table`` (dicts), oldest first; ``[]`` when there is no ledger."""
    ledger = ledger_table(conn, table)
    if conn.execute("SELECT to_regclass(%s)", [str(ledger)]).fetchone()[0] is None:
        return []
    rows = conn.execute(
        _sql()
        .SQL(
            "SELECT entry FROM {} WHERE table_name = %s "
            "OR table_oid = to_regclass(%s)::oid ORDER BY seq"
        )
        .format(ledger.sql()),
        [table.name, str(table)],
    ).fetchall()
    return [r[0] if isinstance(r[0], dict) else json.loads(r[0]) for r in rows]


def append_entry(conn, table, entry):
    """Append ``entry`` to ``table``'s ledger in the connection's open transaction
    (creating the ledger table the first time); the caller commits."""
    sql = _sql()
    ledger = ledger_table(conn, table)
    # Two first writers in one schema: the second waits for the first's CREATE.
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [str(ledger)])
    if conn.execute("SELECT to_regclass(%s)", [str(ledger)]).fetchone()[0] is None:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (seq bigserial PRIMARY KEY, table_name text NOT NULL, "
                "table_oid oid, entry jsonb NOT NULL)"
            ).format(ledger.sql())
        )
        conn.execute(
            sql.SQL("COMMENT ON TABLE {} IS {}").format(
                ledger.sql(),
                sql.Literal(
                    "sklearn-compat's record of the migrations, added columns, backfills, "
                    "cutovers and rollbacks of the tables of this schema (keep it: it stops "
                    "a map from being applied twice)"
                ),
            )
        )
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (table_name, table_oid, entry) "
            "VALUES (%s, to_regclass(%s)::oid, %s::jsonb)"
        ).format(ledger.sql()),
        [table.name, str(table), json.dumps(entry)],
    )


def forget_entries(conn, table):
    """Delete ``table``'s entries (it is being dropped and replaced) in the open
    transaction."""
    ledger = ledger_table(conn, table)
    if conn.execute("SELECT to_regclass(%s)", [str(ledger)]).fetchone()[0] is None:
        return
    conn.execute(
        _sql()
        .SQL("DELETE FROM {} WHERE table_name = %s OR table_oid = to_regclass(%s)::oid")
        .format(ledger.sql()),
        [table.name, str(table)],
    )

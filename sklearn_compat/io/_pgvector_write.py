"""Writing Postgres tables: resumable migrations, ``--replace`` in one transaction, rollback.

:class:`PgvectorMigration` writes the mapped rows of a :class:`PgvectorReader` with binary
``COPY`` into a staging table ``NAME_sklearn_compat_partial`` beside the destination, one
transaction per batch, so a run that is killed leaves only whole batches there (in id
order), which ``resume`` continues after.  The staging table becomes the output only when
every row is in it once; then, in one transaction, it gets the input's primary key and its
vector indexes (same method, operator class and options) and takes the output's name.

With ``replace``, the staging table holds the ids and new vectors only, and one
transaction keeps the old vectors in ``NAME_sklearn_compat_previous``, drops the vector
indexes, changes the column's dimension if needed, writes the new vectors, rebuilds the
indexes and commits: concurrent readers see the old vectors or the new ones, never a mix.
:func:`rollback_pgvector` swaps the kept vectors back the same way.

A run holds a session advisory lock on its destination (``pg_try_advisory_lock``), so a
second run on the same table is refused while the first is alive; the server releases the
lock when the first one's connection ends, however it ends.
"""

import json

import numpy as np

from ._common import InputError, redact_uri
from ._pgvector import (
    VECTOR_TYPES,
    TableName,
    connect,
    database_errors,
    primary_key,
    split_pg_path,
    table_columns,
    table_comment,
    table_oid,
    vector_indexes,
)

__all__ = ["PgvectorMigration", "PgvectorSink", "rollback_pgvector"]

STAGING_SUFFIX = "_sklearn_compat_partial"
KEPT_SUFFIX = "_sklearn_compat_previous"


def _sql():
    from psycopg import sql

    return sql


def _exists(conn, table):
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", [str(table)]).fetchone()[0]


def _lock(conn, table, path):
    """Hold the advisory lock of ``table`` for this connection's life, or refuse."""
    key = f"sklearn_compat:{table}"
    got = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [key]).fetchone()
    conn.commit()
    if not got[0]:
        raise InputError(
            "another sklearn-compat run is writing this table now (it holds the table's "
            "advisory lock); wait for it to end or stop it",
            path=path,
        )


def _comment(conn, table, info):
    sql = _sql()
    conn.execute(
        sql.SQL("COMMENT ON TABLE {} IS {}").format(table.sql(), sql.Literal(json.dumps(info)))
    )


def _vector_bytes(Z, kind):
    """pgvector's binary form of each row of ``Z`` (a list of bytes)."""
    element = VECTOR_TYPES[kind]
    n, width = Z.shape
    if not np.isfinite(Z).all():
        i = int(np.argwhere(~np.isfinite(Z))[0][0])
        raise InputError(f"the model mapped row {i} of the batch to a non-finite vector")
    size = 4 + element.itemsize * width
    out = np.empty((n, size), dtype=np.uint8)
    out[:, :4] = np.frombuffer(np.array([width, 0], dtype=">i2").tobytes(), dtype=np.uint8)
    out[:, 4:] = np.ascontiguousarray(Z, dtype=element).view(np.uint8).reshape(n, -1)
    flat = out.tobytes()
    return [flat[i : i + size] for i in range(0, n * size, size)]


def _create_index(conn, table, column, index, name):
    sql = _sql()
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


def _drop_indexes(conn, table, indexes):
    sql = _sql()
    for index in indexes:
        name = TableName(table.schema, index["name"]).sql()
        conn.execute(sql.SQL("DROP INDEX {}").format(name))


def _set_vectors(conn, table, id_column, column, type_sql, source, indexes, not_null):
    """Write ``source``'s vectors (by id) into ``table``'s column ``column`` of type
    ``type_sql``, the vector indexes dropped first and rebuilt after (same names)."""
    sql = _sql()
    ident, key = sql.Identifier(column), sql.Identifier(id_column)
    _drop_indexes(conn, table, indexes)
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
        _create_index(conn, table, column, index, index["name"])


def _same_ids(conn, table, other, id_column):
    """``(missing, extra, repeated)`` counts of ``other``'s ids against ``table``'s."""
    sql = _sql()
    key = sql.Identifier(id_column)
    query = sql.SQL(
        "SELECT (SELECT count(*) FROM {t} t WHERE NOT EXISTS "
        "(SELECT 1 FROM {o} o WHERE o.{k} = t.{k})), "
        "(SELECT count(*) FROM {o} o WHERE NOT EXISTS "
        "(SELECT 1 FROM {t} t WHERE o.{k} = t.{k})), "
        "(SELECT count(*) - count(DISTINCT {k}) FROM {o})"
    ).format(t=table.sql(), o=other.sql(), k=key)
    return conn.execute(query).fetchone()


class PgvectorMigration:
    """Write the mapped rows of a :class:`PgvectorReader` into a Postgres table, resumably
    (the interface of :class:`~sklearn_compat.io._lance.LanceMigration`).

    Parameters
    ----------
    reader : PgvectorReader
        The input table (read at its snapshot; never modified unless ``replace``).
    output : str or None
        ``URI::TABLE`` of a new table; None with ``replace``.
    width : int
        Width of the mapped vectors (the new column is ``vector(width)``, or
        ``halfvec(width)`` when the input's was a ``halfvec``).
    column : str
        Name of the output's vector column.
    job : dict
        What the migration is (input, model digest...): a staged table is resumed only
        by the same job.
    replace : bool
        Migrate the input table in place (its old vectors are kept for rollback).
    resume : bool
        Continue a staged migration of the same job.
    force : bool
        Replace an existing output table.
    """

    def __init__(self, reader, output, width, column, job, *, replace=False, resume=False,
                 force=False):  # fmt: skip
        self.reader = reader
        self.replace = replace
        self.force = force
        if replace:
            uri, self.target = reader.uri, reader.table
            self.path = reader.path
            if column != reader.list_column:
                raise InputError(
                    "--replace writes the new vectors into the same column; give no "
                    "--output-column",
                    path=self.path,
                )
        else:
            uri, self.target = split_pg_path(output)
            self.path = redact_uri(output)
        self.column = column
        self.kind = reader.kind
        self.type_sql = f"{reader.vector.type_sql.split('(')[0]}({width})"
        self.job = dict(job, rows=reader.n_rows, width=width, replace=replace)
        self.staging = self.target.sibling(STAGING_SUFFIX)
        self.kept = reader.table.sibling(KEPT_SUFFIX)
        self.conn = connect(uri, self.path)
        with database_errors(self.path, "cannot prepare the migration"):
            _lock(self.conn, self.target, self.path)
            self._check_target()
            self.done, self.last_id = self._staged_rows(resume)
            self.conn.commit()
        # The columns copied: all of them into a new table, the id and vector in place;
        # the new vector goes where the input's was.
        if replace:
            self.copied = [reader.id]
        else:
            self.copied = [c for c in reader.all_columns if c.name != reader.list_column]
        self.position = reader.columns.index(reader.list_column)
        with database_errors(reader.path, "cannot read the table"):
            self.keyed = primary_key(reader.conn, reader.oid) == [reader.id_column]

    # ------------------------------------------------------------------ set-up
    def _same_table(self):
        reader = self.reader
        here = (self.conn.info.host, self.conn.info.port, self.conn.info.dbname)
        there = (reader.conn.info.host, reader.conn.info.port, reader.conn.info.dbname)
        if here != there:
            return False
        oid = self.conn.execute("SELECT to_regclass(%s)::oid", [str(self.target)]).fetchone()[0]
        return oid == reader.oid

    def _check_target(self):
        conn = self.conn
        if self.replace:
            if _exists(conn, self.kept):
                raise InputError(
                    f"the vectors of an earlier --replace are kept in {self.kept}; restore "
                    f"them with 'sklearn-compat rollback --table', or DROP TABLE {self.kept} "
                    "to keep the migrated ones, then migrate again",
                    path=self.path,
                )
            return
        if self._same_table():
            raise InputError(
                "is also the input; pass --replace (not --output) to migrate a table in place",
                path=self.path,
            )
        if _exists(conn, self.target) and not self.force:
            raise InputError("already exists (pass --force to replace it)", path=self.path)
        if self.target.schema is not None:
            found = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", [self.target.schema]
            ).fetchone()
            if not found:
                raise InputError(f"no schema {self.target.schema!r}", path=self.path)

    def _staged_rows(self, resume):
        """``(rows, last id)`` already in the staging table (``(0, None)`` afresh)."""
        conn, sql = self.conn, _sql()
        if not _exists(conn, self.staging):
            return 0, None
        key = sql.Identifier(self.reader.id_column)
        done, last = conn.execute(
            sql.SQL("SELECT count(*), max({}) FROM {}").format(key, self.staging.sql())
        ).fetchone()
        if not resume:
            raise InputError(
                f"an interrupted migration left {done} of {self.job['rows']} rows in "
                f"{self.staging}; pass --resume to finish it (or DROP TABLE {self.staging} "
                "to start over)",
                path=self.path,
            )
        info = table_comment(conn, self.staging)
        changed = [k for k in self.job if k != "rows" and info.get(k) != self.job[k]]
        if changed:
            raise InputError(
                f"{self.staging} was staged by another migration ({', '.join(changed)} "
                f"differ); DROP TABLE {self.staging} to start over",
                path=self.path,
            )
        return int(done), last

    def _create_staging(self):
        sql = _sql()
        reader = self.reader
        columns = [reader.id] if self.replace else reader.all_columns
        parts = []
        for c in columns:
            type_sql = self.type_sql if c.name == reader.list_column else c.type_sql
            name = self.column if c.name == reader.list_column else c.name
            null = " NOT NULL" if c.not_null or c.name == reader.list_column else ""
            parts.append(sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(type_sql + null)))
        if self.replace:
            vector = sql.SQL("{} {} NOT NULL").format(
                sql.Identifier(self.column), sql.SQL(self.type_sql)
            )
            parts.append(vector)
        self.conn.execute(
            sql.SQL("CREATE TABLE {} ({})").format(self.staging.sql(), sql.SQL(", ").join(parts))
        )
        _comment(self.conn, self.staging, self.job)

    # ------------------------------------------------------------------ writing
    def batches(self, batch_size):
        """``(Batch, raw rows)`` pairs of the rows still to migrate, in id order."""
        reader = self.reader
        start = self.done
        then = "the same command with --resume continues after the last whole batch"
        for rows in reader.rows(batch_size, self.copied, after=self.last_id, then=then):
            batch = reader.to_batch(rows, start)
            reader._check(batch)
            start += len(rows)
            yield batch, rows

    def write(self, rows, Z):
        """Append one mapped batch to the staging table in one transaction."""
        sql = _sql()
        vectors = _vector_bytes(np.asarray(Z), self.kind)
        n_copied = len(self.copied)
        names = [c.name for c in self.copied]
        if self.replace:
            order = [self.reader.id_column, self.column]
            records = ((r[2], v) for r, v in zip(rows, vectors, strict=True))
        else:
            at = self.position
            order = names[:at] + [self.column] + names[at:]
            records = (
                r[2 : 2 + at] + (v,) + r[2 + at : 2 + n_copied]
                for r, v in zip(rows, vectors, strict=True)
            )
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            self.staging.sql(), sql.SQL(", ").join(map(sql.Identifier, order))
        )
        then = "the same command with --resume continues after the last whole batch"
        with database_errors(self.path, f"cannot write the rows after row {self.done}", then):
            if self.done == 0 and not _exists(self.conn, self.staging):
                self._create_staging()
            with self.conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
                # Each value is already in its column type's binary form: sent as is.
                copy.set_types(["bytea"] * len(order))
                for record in records:
                    copy.write_row(record)
            self.conn.commit()
        self.done += len(vectors)
        self.last_id = rows[-1][0]

    def finish(self, log):
        """Check the staged rows and make them the output (or the input's new vectors) in
        one transaction; returns a line for the log."""
        # The reader's snapshot holds a lock on the input that --replace must take over.
        self.reader.conn.rollback()
        with database_errors(self.path, "cannot finish the migration; nothing replaced"):
            if not _exists(self.conn, self.staging):  # an empty input: an empty table
                self._create_staging()
                self.conn.commit()
            self._check_staged()
            if self.replace:
                line = self._replace_vectors()
            else:
                line = self._publish()
            self.conn.commit()
        self.conn.close()
        return line

    def _check_staged(self):
        """Every input id exactly once in the staging table (the input read now)."""
        reader = self.reader
        if self._same_database():
            counts = _same_ids(self.conn, reader.table, self.staging, reader.id_column)
        else:
            counts = self._count_only()
        missing, extra, repeated = counts
        if missing or extra or repeated:
            raise InputError(
                f"the staged rows do not match the input's ids ({missing} missing, {extra} "
                f"not in the input, {repeated} repeated); DROP TABLE {self.staging} and run "
                "again",
                path=self.path,
            )

    def _same_database(self):
        reader = self.reader
        here = (self.conn.info.host, self.conn.info.port, self.conn.info.dbname)
        return here == (reader.conn.info.host, reader.conn.info.port, reader.conn.info.dbname)

    def _count_only(self):
        sql = _sql()
        key = sql.Identifier(self.reader.id_column)
        n, distinct = self.conn.execute(
            sql.SQL("SELECT count(*), count(DISTINCT {}) FROM {}").format(key, self.staging.sql())
        ).fetchone()
        return (
            max(0, self.reader.n_rows - distinct),
            max(0, distinct - self.reader.n_rows),
            n - distinct,
        )

    def _publish(self):
        sql, conn, reader = _sql(), self.conn, self.reader
        if _exists(conn, self.target):  # --force: the old table goes in the same transaction
            conn.execute(sql.SQL("DROP TABLE {}").format(self.target.sql()))
        if self.keyed:
            name = self.target.sibling("_pkey").name
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY ({})").format(
                    self.staging.sql(), sql.Identifier(name), sql.Identifier(reader.id_column)
                )
            )
        for index in reader.indexes:
            name = self.target.sibling(f"_{self.column}_{index['method']}_idx").name
            _create_index(conn, self.staging, self.column, index, name)
        conn.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                self.staging.sql(), sql.Identifier(self.target.name)
            )
        )
        _comment(conn, self.target, {"migration": self.job})
        rebuilt = ", ".join(f"{i['method']} ({i['opclass']})" for i in reader.indexes)
        indexes = f"; vector index rebuilt: {rebuilt}" if rebuilt else ""
        return f"wrote the Postgres table {self.path} ({self.done} rows{indexes})"

    def _replace_vectors(self):
        sql, conn, reader = _sql(), self.conn, self.reader
        table, column = self.target, reader.list_column
        key, ident = sql.Identifier(reader.id_column), sql.Identifier(column)
        conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table.sql()))
        now = table_columns(conn, table_oid(conn, table, self.path))
        vector = next(c for c in now if c.name == column)
        indexes = vector_indexes(conn, table_oid(conn, table, self.path), column)
        conn.execute(
            sql.SQL("CREATE TABLE {} AS SELECT {}, {} FROM {}").format(
                self.kept.sql(), key, ident, table.sql()
            )
        )
        info = {
            "migration": self.job,
            "table": str(table),
            "id_column": reader.id_column,
            "vector_column": column,
            "type": vector.type_sql,
            "not_null": vector.not_null,
            "indexes": indexes,
        }
        _comment(conn, self.kept, info)
        _set_vectors(
            conn, table, reader.id_column, column, self.type_sql, self.staging, indexes,
            vector.not_null,
        )  # fmt: skip
        conn.execute(sql.SQL("DROP TABLE {}").format(self.staging.sql()))
        kept = ", ".join(f"{i['method']} ({i['opclass']})" for i in indexes) or "none"
        return (
            f"replaced the vectors of {self.path} ({self.done} rows, {vector.type_sql} -> "
            f"{self.type_sql}; vector indexes rebuilt: {kept}); the old vectors are kept in "
            f"{self.kept}; undo with: sklearn-compat rollback --table {self.path}"
        )


def rollback_pgvector(path, to_version=None):
    """Swap a Postgres table's vectors with those its last ``--replace`` kept.

    The restored vectors are the kept ones bit for bit, in the column type they had; the
    vectors they replace are kept in their stead, so a second rollback redoes the
    migration.  One transaction: readers see the one set of vectors or the other.

    Parameters
    ----------
    path : str
        ``URI::TABLE``.
    to_version : None
        Postgres tables keep one earlier set of vectors; versions are LanceDB's.

    Returns
    -------
    str
        A line for the log.
    """
    shown = redact_uri(path)
    if to_version is not None:
        raise InputError(
            "--to-version applies to LanceDB tables; a Postgres table keeps the vectors of "
            "its last --replace, which rollback swaps back",
            path=shown,
        )
    uri, table = split_pg_path(path)
    kept = table.sibling(KEPT_SUFFIX)
    sql = _sql()
    conn = connect(uri, shown)
    with database_errors(shown, "cannot roll back; nothing changed"):
        _lock(conn, table, shown)
        table_oid(conn, table, shown)
        if not _exists(conn, kept):
            raise InputError(
                f"no kept vectors ({kept} does not exist): the table was not migrated with "
                "'transform --replace', or its old vectors were dropped",
                path=shown,
            )
        info = table_comment(conn, kept)
        column, key = info["vector_column"], info["id_column"]
        conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table.sql()))
        missing, extra, repeated = _same_ids(conn, table, kept, key)
        if missing or extra:
            raise InputError(
                f"the table's ids changed since the migration ({missing} rows without kept "
                f"vectors, {extra} kept ids no longer in the table); nothing restored",
                path=shown,
            )
        oid = table_oid(conn, table, shown)
        vector = next(c for c in table_columns(conn, oid) if c.name == column)
        indexes = vector_indexes(conn, oid, column)
        swap = table.sibling("_sklearn_compat_swap")
        conn.execute(
            sql.SQL("CREATE TABLE {} AS SELECT {}, {} FROM {}").format(
                swap.sql(), sql.Identifier(key), sql.Identifier(column), table.sql()
            )
        )
        _set_vectors(conn, table, key, column, info["type"], kept, indexes, info["not_null"])
        conn.execute(sql.SQL("DROP TABLE {}").format(kept.sql()))
        conn.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(swap.sql(), sql.Identifier(kept.name))
        )
        _comment(
            conn, kept, dict(info, type=vector.type_sql, not_null=vector.not_null, indexes=indexes)
        )
        conn.commit()
    conn.close()
    return (
        f"restored the vectors of {shown} ({info['type']}); the vectors it had "
        f"({vector.type_sql}) are kept in {kept}: the same command swaps them back"
    )


class PgvectorSink:
    """A new Postgres table written batch by batch (ids and one vector column), staged as
    ``NAME_sklearn_compat_partial`` and renamed into place on :meth:`commit` (for
    :class:`~sklearn_compat.io.TableWriter`)."""

    def __init__(self, path, layout, *, force=False):
        uri, self.table = split_pg_path(path)
        self.path = redact_uri(path)
        self.layout = layout
        self.force = force
        self.staging = self.table.sibling(STAGING_SUFFIX)
        self.conn = connect(uri, self.path)
        with database_errors(self.path, "cannot create the table"):
            _lock(self.conn, self.table, self.path)
            if _exists(self.conn, self.table) and not force:
                raise InputError("already exists (pass --force to replace it)", path=self.path)
            self.conn.execute(_sql().SQL("DROP TABLE IF EXISTS {}").format(self.staging.sql()))
            self.conn.commit()
        self.created = False
        self.rows = 0

    def _create(self, ids):
        sql = _sql()
        columns = [
            sql.SQL("{} vector({})").format(
                sql.Identifier(self.layout.list_column), sql.SQL(str(self.layout.width))
            )
        ]
        if self.layout.id_column is not None:
            kind = "bigint" if np.asarray(ids).dtype.kind in "iu" else "text"
            columns.insert(
                0,
                sql.SQL("{} {} NOT NULL").format(
                    sql.Identifier(self.layout.id_column), sql.SQL(kind)
                ),
            )
            self.id_type = kind
        self.conn.execute(
            sql.SQL("CREATE TABLE {} ({})").format(self.staging.sql(), sql.SQL(", ").join(columns))
        )
        self.created = True

    def write(self, ids, Z):
        sql = _sql()
        with database_errors(self.path, "cannot write"):
            if not self.created:
                self._create(ids)
            vectors = _vector_bytes(np.asarray(Z), "vector")
            names = [self.layout.list_column]
            types = ["bytea"]
            if self.layout.id_column is not None:
                names.insert(0, self.layout.id_column)
                types.insert(0, "int8" if self.id_type == "bigint" else "text")
                values = [
                    int(i) if self.id_type == "bigint" else str(i)
                    for i in np.asarray(ids).tolist()
                ]
                records = zip(values, vectors, strict=True)
            else:
                records = ((v,) for v in vectors)
            copy_sql = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
                self.staging.sql(), sql.SQL(", ").join(map(sql.Identifier, names))
            )
            with self.conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
                copy.set_types(types)
                for record in records:
                    copy.write_row(record)
        self.rows += len(vectors)

    def close(self):
        if not self.created:  # no rows: an empty table with the right columns
            with database_errors(self.path, "cannot create the table"):
                self._create(np.empty(0, dtype=np.int64))

    def commit(self):
        sql = _sql()
        with database_errors(self.path, "cannot create the table; nothing written"):
            if _exists(self.conn, self.table):
                self.conn.execute(sql.SQL("DROP TABLE {}").format(self.table.sql()))
            if self.layout.id_column is not None:
                self.conn.execute(
                    sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY ({})").format(
                        self.staging.sql(),
                        sql.Identifier(self.table.sibling("_pkey").name),
                        sql.Identifier(self.layout.id_column),
                    )
                )
            self.conn.execute(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    self.staging.sql(), sql.Identifier(self.table.name)
                )
            )
            self.conn.commit()
        self.conn.close()

    def abort(self):
        try:
            self.conn.rollback()
            self.conn.close()
        except Exception:  # noqa: BLE001 - the connection may be gone already
            pass

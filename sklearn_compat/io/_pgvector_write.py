"""Writing Postgres tables: resumable migrations into a new table or, with ``--replace``, in place.

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
:func:`~sklearn_compat.io._pgvector_rollback.rollback_pgvector` swaps the kept vectors
back the same way.

A run holds a session advisory lock on its destination (``pg_try_advisory_lock``), so a
second run on the same table is refused while the first is alive; the server releases the
lock when the first one's connection ends, however it ends.
"""

import numpy as np

from ._common import InputError, redact_uri
from ._pgvector import (
    connect,
    database_errors,
    primary_key,
    split_pg_path,
    table_columns,
    table_comment,
    table_oid,
    vector_indexes,
)
from ._pgvector_sql import (
    KEPT_SUFFIX,
    STAGING_SUFFIX,
    check_type_change,
    create_index,
    hold_lock,
    same_ids,
    set_comment,
    set_vectors,
    sql_module,
    table_exists,
    vector_bytes,
)

__all__ = ["PgvectorMigration"]


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
            hold_lock(self.conn, self.target, self.path)
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
            if table_exists(conn, self.kept):
                raise InputError(
                    f"the vectors of an earlier --replace are kept in {self.kept}; restore "
                    f"them with 'sklearn-compat rollback --table', or DROP TABLE {self.kept} "
                    "to keep the migrated ones, then migrate again",
                    path=self.path,
                )
            reader = self.reader
            check_type_change(
                conn, self.target, reader.list_column, reader.vector.type_sql, self.type_sql,
                self.path, "--replace",
            )  # fmt: skip
            return
        if self._same_table():
            raise InputError(
                "is also the input; pass --replace (not --output) to migrate a table in place",
                path=self.path,
            )
        if table_exists(conn, self.target) and not self.force:
            raise InputError("already exists (pass --force to replace it)", path=self.path)
        if self.target.schema is not None:
            found = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", [self.target.schema]
            ).fetchone()
            if not found:
                raise InputError(f"no schema {self.target.schema!r}", path=self.path)

    def _staged_rows(self, resume):
        """``(rows, last id)`` already in the staging table (``(0, None)`` afresh)."""
        conn, sql = self.conn, sql_module()
        if not table_exists(conn, self.staging):
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
        sql = sql_module()
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
        set_comment(self.conn, self.staging, self.job)

    # ------------------------------------------------------------------ writing
    def batches(self, batch_size):
        """``(Batch, raw)`` pairs of the rows still to migrate, in id order; ``raw`` is the
        last id and each row's copied columns in their binary form."""
        reader = self.reader
        start = self.done
        then = "the same command with --resume continues after the last whole batch"
        for rows in reader.rows(batch_size, self.copied, after=self.last_id, then=then):
            batch = reader.to_batch(rows, start)
            reader._check(batch)
            start += len(rows)
            # The input's vectors go now (they are in ``batch``), before the map runs.
            raw = [(rows[-1][0], [r[2:] for r in rows])]
            del rows
            yield batch, raw.pop()  # popped: this frame keeps no reference while paused

    def write(self, raw, Z):
        """Append one mapped batch to the staging table in one transaction."""
        sql = sql_module()
        last_id, rows = raw
        vectors = vector_bytes(np.asarray(Z), self.kind)
        if self.replace:
            order = [self.reader.id_column, self.column]
            records = ((r[0], v) for r, v in zip(rows, vectors, strict=True))
        else:
            at = self.position
            names = [c.name for c in self.copied]
            order = names[:at] + [self.column] + names[at:]
            records = (r[:at] + (v,) + r[at:] for r, v in zip(rows, vectors, strict=True))
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            self.staging.sql(), sql.SQL(", ").join(map(sql.Identifier, order))
        )
        then = "the same command with --resume continues after the last whole batch"
        with database_errors(self.path, f"cannot write the rows after row {self.done}", then):
            if self.done == 0 and not table_exists(self.conn, self.staging):
                self._create_staging()
            with self.conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
                # Each value is already in its column type's binary form: sent as is.
                copy.set_types(["bytea"] * len(order))
                for record in records:
                    copy.write_row(record)
            self.conn.commit()
        self.done += len(vectors)
        self.last_id = last_id

    def release(self):
        """Give up the destination's advisory lock (after finishing, failing or being
        interrupted): it lives as long as this run's connection."""
        if not self.conn.closed:
            self.conn.close()

    def finish(self, log):
        """Check the staged rows and make them the output (or the input's new vectors) in
        one transaction; returns a line for the log."""
        # The reader's snapshot holds a lock on the input that --replace must take over.
        self.reader.conn.rollback()
        with database_errors(self.path, "cannot finish the migration; nothing replaced"):
            if not table_exists(self.conn, self.staging):  # an empty input: an empty table
                self._create_staging()
                self.conn.commit()
            if self.replace:  # no row may come or go between the check and the swap
                self.conn.execute(
                    sql_module()
                    .SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE")
                    .format(self.target.sql())
                )
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
            counts = same_ids(self.conn, reader.table, self.staging, reader.id_column)
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
        sql = sql_module()
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
        sql, conn, reader = sql_module(), self.conn, self.reader
        if table_exists(conn, self.target):  # --force: the old table goes in the same transaction
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
            create_index(conn, self.staging, self.column, index, name)
        conn.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                self.staging.sql(), sql.Identifier(self.target.name)
            )
        )
        set_comment(conn, self.target, {"migration": self.job})
        rebuilt = ", ".join(f"{i['method']} ({i['opclass']})" for i in reader.indexes)
        indexes = f"; vector index rebuilt: {rebuilt}" if rebuilt else ""
        return f"wrote the Postgres table {self.path} ({self.done} rows{indexes})"

    def _replace_vectors(self):
        sql, conn, reader = sql_module(), self.conn, self.reader
        table, column = self.target, reader.list_column
        key, ident = sql.Identifier(reader.id_column), sql.Identifier(column)
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
        set_comment(conn, self.kept, info)
        set_vectors(
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

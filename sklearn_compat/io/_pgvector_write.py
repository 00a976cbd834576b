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
:meth:`~sklearn_compat.io._pgvector_store.PgvectorStore.rollback` swaps the kept vectors
back the same way.

A run holds a session advisory lock on its destination (``pg_try_advisory_lock``), so a
second run on the same table is refused while the first is alive; the server releases the
lock when the first one's connection ends, however it ends.
"""

import sys

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
    undo_line,
    unique_column,
    vector_indexes,
)
from ._pgvector_ledger import append_entry, forget_entries
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

# The staging column holding each input row's version (xmin) when it was staged: a
# resumed run re-maps the rows written since.
VERSION_COLUMN = "sklearn_compat_row_version"
# Ids named in a message, at most.
_SHOWN = 5
_RESUME = "the same command with --resume continues after the last whole batch"


def _show(ids, total=None):
    total = len(ids) if total is None else total
    shown = ", ".join(str(i) for i in list(ids)[:_SHOWN])
    return shown + (f" and {total - _SHOWN} more" if total > _SHOWN else "")


def _note(message):
    print(message, file=sys.stderr)


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
        if len(column.encode()) > 63:
            raise InputError(
                f"the column name {column[:20]!r}... is longer than the 63 bytes Postgres "
                "keeps; give a shorter one",
                path=self.path,
            )
        self.uri = uri
        self.kind = reader.kind
        self.type_sql = f"{reader.vector.type_sql.split('(')[0]}({width})"
        self.job = dict(job, rows=reader.n_rows, width=width, replace=replace)
        self.staging = self.target.sibling(STAGING_SUFFIX)
        self.kept = reader.table.sibling(KEPT_SUFFIX)
        self.redo = None  # ids to map again before continuing (a resumed run)
        self.notes = []
        self.inherited = []  # the input's ledger entries a new table takes over
        self.drop_kept = False  # the kept table holds a rolled-back migration's vectors
        _check_unique_ids(reader)
        self.conn = connect(uri, self.path)
        with database_errors(self.path, "cannot prepare the migration", secret=uri):
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
            if table_exists(conn, self.kept) and not self._kept_was_undone():
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

    def _kept_was_undone(self):
        """Whether the kept table holds the vectors of a ``--replace`` that was rolled back
        (the ledger says so): this migration then takes its place (the undone one could
        only have been redone)."""
        from ._pgvector_ledger import read_entries
        from ._stores.ledger import rollback_target

        own = [e for e in read_entries(self.conn, self.target) if not e.get("inherited")]
        target, redo = rollback_target(own)
        self.drop_kept = bool(target and target.get("action") == "replace" and redo)
        return self.drop_kept

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
        changed = [
            k
            for k in self.job
            if k not in ("rows", "time", "finished") and _same(info.get(k)) != _same(self.job[k])
        ]
        if changed:
            raise InputError(
                f"{self.staging} was staged by another migration ({', '.join(changed)} "
                f"differ); DROP TABLE {self.staging} to start over",
                path=self.path,
            )
        # A staging an earlier version wrote has no row versions: its rows count as
        # changed (NULL), so they are mapped again.
        versioned = conn.execute(
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s "
            "AND NOT attisdropped",
            [str(self.staging), VERSION_COLUMN],
        ).fetchone()
        if not versioned:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN {} int8").format(
                    self.staging.sql(), sql.Identifier(VERSION_COLUMN)
                )
            )
            conn.commit()
        if done:
            done, last = self._changed_since_staged(int(done), last)
        return int(done), last

    def _changed_since_staged(self, done, last):
        """Drop from the staging the rows that changed in the input since they were
        staged (their version differs) or left it, and note the ids to map again (those
        changed, and those added at or below the last staged id).  Returns the new
        ``(done, last)``."""
        sql = sql_module()
        reader = self.reader
        key = sql.Identifier(reader.id_column)
        staging, table = self.staging.sql(), reader.table.sql()
        if self._same_database():
            changed, gone, added = self._compare_in_sql(key, staging, table, last)
        else:  # the staging is in another database: compared here
            changed, gone, added = self._compare_here(key, staging, table, last)
        if changed or gone:
            array = "int8[]" if reader.id_dtype().kind == "i" else "text[]"
            self.conn.execute(
                sql.SQL("DELETE FROM {s} s WHERE {v} = ANY(%s::{a})").format(
                    s=staging, v=_value(reader, "s"), a=sql.SQL(array)
                ),
                [changed + gone],
            )
            self.conn.commit()
        if changed:
            self._say(
                f"{len(changed)} rows changed in the input since they were staged (ids "
                f"{_show(changed)}): mapped again from their current values"
            )
        if gone:
            self._say(
                f"{len(gone)} staged rows are no longer in the input (ids {_show(gone)}): "
                "dropped from the staging"
            )
        if added:
            self._say(
                f"{len(added)} rows were added to the input among the staged ids (ids "
                f"{_show(added)}): mapped too"
            )
        self.redo = changed + added
        if changed or gone:
            key = sql.Identifier(reader.id_column)
            done, last = self.conn.execute(
                sql.SQL("SELECT count(*), max({}) FROM {}").format(key, staging)
            ).fetchone()
        return int(done), last

    def _compare_in_sql(self, key, staging, table, last):
        """``(changed, gone, added)`` ids, the input read at the reader's snapshot."""
        sql = sql_module()
        reader = self.reader
        # Read at the reader's snapshot: what the rest of this run maps.
        changed = [
            r[0]
            for r in reader.conn.execute(
                sql.SQL(
                    "SELECT {v} FROM {s} s JOIN {t} ON {t}.{k} = s.{k} "
                    "WHERE {t}.xmin::text::int8 IS DISTINCT FROM s.{x} ORDER BY 1"
                ).format(
                    v=_value(reader, "s"),
                    s=staging,
                    t=table,
                    k=key,
                    x=sql.Identifier(VERSION_COLUMN),
                )
            )
        ]
        gone = [
            r[0]
            for r in reader.conn.execute(
                sql.SQL(
                    "SELECT {v} FROM {s} s WHERE NOT EXISTS "
                    "(SELECT 1 FROM {t} WHERE {t}.{k} = s.{k}) ORDER BY 1"
                ).format(v=_value(reader, "s"), s=staging, t=table, k=key)
            )
        ]
        added = [
            r[0]
            for r in reader.conn.execute(
                sql.SQL(
                    "SELECT {v} FROM {t} t WHERE t.{k} <= %s AND NOT EXISTS "
                    "(SELECT 1 FROM {s} s WHERE s.{k} = t.{k}) ORDER BY 1"
                ).format(v=_value(reader, "t"), s=staging, t=table, k=key),
                [last],
            )
        ]
        return changed, gone, added

    def _compare_here(self, key, staging, table, last):
        """``(changed, gone, added)`` ids of a staging in another database than the
        input: both sides' ids and row versions read and compared here."""
        sql = sql_module()
        reader = self.reader
        staged = dict(
            self.conn.execute(
                sql.SQL("SELECT {v}, s.{x} FROM {s} s").format(
                    v=_value(reader, "s"), s=staging, x=sql.Identifier(VERSION_COLUMN)
                )
            ).fetchall()
        )
        current = dict(
            reader.conn.execute(
                sql.SQL("SELECT {v}, t.xmin::text::int8 FROM {t} t WHERE t.{k} <= %s").format(
                    v=_value(reader, "t"), t=table, k=key
                ),
                [last],
            ).fetchall()
        )
        changed = sorted(i for i, v in staged.items() if i in current and current[i] != v)
        gone = sorted(i for i in staged if i not in current)
        added = sorted(i for i in current if i not in staged)
        return changed, gone, added

    def _say(self, message):
        self.notes.append(message)
        _note(f"{self.path}: {message}")

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
        parts.append(sql.SQL("{} int8").format(sql.Identifier(VERSION_COLUMN)))
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
        n = len(self.copied)
        passes = []
        if self.redo:  # rows changed or added since staged, then the rest
            passes.append({"only": self.redo})
        passes.append({"after": self.last_id})
        for where in passes:
            last = self.last_id
            rows_of = reader.rows(batch_size, self.copied, then=_RESUME, version=True, **where)
            for rows in rows_of:
                batch = reader.to_batch(rows, start)
                reader._check(batch)
                start += len(rows)
                # The input's vectors go now (they are in ``batch``), before the map runs.
                # A pass over some ids keeps the last staged id (they are below it).
                end = last if "only" in where else rows[-1][0]
                raw = [(end, [r[2 : 2 + n] + (r[2 + n],) for r in rows])]
                del rows
                yield batch, raw.pop()  # popped: this frame keeps no reference while paused
        self.redo = None

    def write(self, raw, Z):
        """Append one mapped batch to the staging table in one transaction."""
        sql = sql_module()
        last_id, rows = raw
        vectors = vector_bytes(np.asarray(Z), self.kind)
        if self.replace:
            order = [self.reader.id_column, self.column]
            records = ((r[0], v, r[-1]) for r, v in zip(rows, vectors, strict=True))
        else:
            at = self.position
            names = [c.name for c in self.copied]
            order = names[:at] + [self.column] + names[at:]
            records = (
                r[:at] + (v,) + r[at:-1] + (r[-1],) for r, v in zip(rows, vectors, strict=True)
            )
        order.append(VERSION_COLUMN)
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            self.staging.sql(), sql.SQL(", ").join(map(sql.Identifier, order))
        )
        with database_errors(
            self.path, f"cannot write the rows after row {self.done}", _RESUME, secret=self.uri
        ):
            if self.done == 0 and not table_exists(self.conn, self.staging):
                self._create_staging()
            with self.conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
                # Each value is already in its column type's binary form: sent as is.
                copy.set_types(["bytea"] * (len(order) - 1) + ["int8"])
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
        from ._stores.ledger import now

        with database_errors(self.path, "cannot finish the migration; nothing replaced",
                             secret=self.uri):  # fmt: skip
            if not table_exists(self.conn, self.staging):  # an empty input: an empty table
                self._create_staging()
                self.conn.commit()
            if not self.replace:  # a new table is the input at the reader's snapshot
                self._check_staged(None)
                # The new table inherits the input's ledger: a model that mapped the input
                # is not applied to its output either.
                self.inherited = [
                    dict(e, inherited=self.reader.path) for e in self.reader.ledger()
                ]
            # The reader's snapshot holds a lock on the input that --replace must take over.
            self.reader.conn.rollback()
            if self.replace:  # no row may come or go between the check and the swap
                self.conn.execute(
                    sql_module()
                    .SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE")
                    .format(self.target.sql())
                )
                self._check_staged(self.conn)
                self._check_unchanged()
            self.entry = dict(self.job, rows=self.done, time=now())
            self.entry.setdefault("action", "replace" if self.replace else "transform")
            self.entry.setdefault("column", self.column)
            if "model" not in self.entry:  # a job of the first migrations: the model's digest
                self.entry["model"] = {"sha256": self.job.get("model_sha256")}
            if self.replace:
                line = self._replace_vectors()
            else:
                line = self._publish()
            self.conn.commit()
        self.conn.close()
        return line

    def _check_staged(self, conn):
        """Every input id exactly once in the staging table (the input read through
        ``conn``: the reader's snapshot, or now under the lock)."""
        reader = self.reader
        if conn is not None:
            counts = same_ids(conn, reader.table, self.staging, reader.id_column)
        else:
            counts = self._count_only()
        missing, extra, repeated = counts
        if missing or extra or repeated:
            again = (
                "the same command with --resume maps the rows added and drops those removed"
                if self.replace
                else f"DROP TABLE {self.staging} and run again"
            )
            raise InputError(
                f"the staged rows do not match the input's ids ({missing} missing, {extra} "
                f"not in the input, {repeated} repeated); nothing replaced: {again}",
                path=self.path,
            )

    def _check_unchanged(self):
        """Refuse (under the table's lock) to write mapped vectors over rows that changed
        since they were read: their map would be of an older value."""
        sql, reader = sql_module(), self.reader
        key = sql.Identifier(reader.id_column)
        changed = [
            r[0]
            for r in self.conn.execute(
                sql.SQL(
                    "SELECT {v} FROM {s} s JOIN {t} ON {t}.{k} = s.{k} "
                    "WHERE {t}.xmin::text::int8 IS DISTINCT FROM s.{x} ORDER BY 1"
                ).format(
                    v=_value(reader, "s"),
                    s=self.staging.sql(),
                    t=self.target.sql(),
                    k=key,
                    x=sql.Identifier(VERSION_COLUMN),
                )
            )
        ]
        if changed:
            raise InputError(
                f"{len(changed)} rows changed in the table while it was being migrated (ids "
                f"{_show(changed)}); nothing replaced: the same command with --resume maps "
                "them again from their current values and finishes",
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
            forget_entries(conn, self.target)
            conn.execute(sql.SQL("DROP TABLE {}").format(self.target.sql()))
        conn.execute(
            sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(
                self.staging.sql(), sql.Identifier(VERSION_COLUMN)
            )
        )
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
        conn.execute(sql.SQL("COMMENT ON TABLE {} IS NULL").format(self.target.sql()))
        for inherited in self.inherited:
            append_entry(conn, self.target, inherited)
        append_entry(conn, self.target, self.entry)
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
        if self.drop_kept and table_exists(conn, self.kept):  # an undone migration's vectors
            conn.execute(sql.SQL("DROP TABLE {}").format(self.kept.sql()))
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
        self.entry["previous"] = str(self.kept)
        append_entry(conn, table, self.entry)
        kept = ", ".join(f"{i['method']} ({i['opclass']})" for i in indexes) or "none"
        return (
            f"replaced the vectors of {self.path} ({self.done} rows, {vector.type_sql} -> "
            f"{self.type_sql}; vector indexes rebuilt: {kept}); the old vectors are kept in "
            f"{self.kept}; undo with: {undo_line(self.reader.uri + '::' + str(table))}"
        )


def _value(reader, alias):
    """The id of the row aliased ``alias`` as the reader returns ids (integer or text)."""
    sql = sql_module()
    ident = sql.Identifier(alias, reader.id_column)
    return ident if reader.id_dtype().kind == "i" else sql.SQL("{}::text").format(ident)


def _check_unique_ids(reader):
    """Refuse, before anything is staged, an input whose id column repeats an id or has
    none on some rows (a migration writes each id once); cheap when a unique index or
    the primary key covers the column (nothing to check)."""
    sql = sql_module()
    conn = reader.conn
    with database_errors(reader.path, "cannot read the table"):
        if unique_column(conn, reader.oid, reader.id_column):
            return
        key = sql.Identifier(reader.id_column)
        table = reader.table.sql()
        nulls = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE {} IS NULL").format(table, key)
        ).fetchone()[0]
        repeated = conn.execute(
            sql.SQL(
                "SELECT {v}, count(*) FROM {t} WHERE {k} IS NOT NULL GROUP BY {k} "
                "HAVING count(*) > 1 ORDER BY {k} LIMIT %s"
            ).format(v=reader.id_value(), t=table, k=key),
            [_SHOWN + 1],
        ).fetchall()
    problems = []
    if repeated:
        shown = ", ".join(f"{i} ({n} rows)" for i, n in repeated[:_SHOWN])
        more = " and more" if len(repeated) > _SHOWN else ""
        problems.append(f"repeats ids: {shown}{more}")
    if nulls:
        problems.append(f"has no id (NULL) on {nulls} rows")
    if problems:
        raise InputError(
            f"id column {reader.id_column!r} {' and '.join(problems)}; a migration writes "
            "each id once: name a column with one value per row with --id-column, or remove "
            "the repeated rows (nothing was written)",
            path=reader.path,
        )


def _same(value):
    """What of a job's value must match to resume (of a model: its file's digest)."""
    if isinstance(value, dict) and "sha256" in value:
        return value["sha256"]
    return value

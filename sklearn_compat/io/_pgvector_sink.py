"""A new Postgres table written by :class:`~sklearn_compat.io.TableWriter` (``encode``,
``write_table``): ids and one vector column, staged and renamed into place whole."""

import numpy as np

from ._common import InputError, redact_uri
from ._pgvector import (
    connect,
    database_errors,
    split_pg_path,
)
from ._pgvector_sql import (
    STAGING_SUFFIX,
    hold_lock,
    sql_module,
    table_exists,
    vector_bytes,
)

__all__ = ["PgvectorSink"]


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
            hold_lock(self.conn, self.table, self.path)
            if table_exists(self.conn, self.table) and not force:
                raise InputError("already exists (pass --force to replace it)", path=self.path)
            self.conn.execute(
                sql_module().SQL("DROP TABLE IF EXISTS {}").format(self.staging.sql())
            )
            self.conn.commit()
        self.created = False
        self.rows = 0

    def _create(self, ids):
        sql = sql_module()
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
        sql = sql_module()
        with database_errors(self.path, "cannot write"):
            if not self.created:
                self._create(ids)
            vectors = vector_bytes(np.asarray(Z), "vector")
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
        sql = sql_module()
        with database_errors(self.path, "cannot create the table; nothing written"):
            if table_exists(self.conn, self.table):
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

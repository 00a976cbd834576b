"""The Postgres room of the store interface: a table with pgvector columns, ``URI::TABLE``.

:class:`PgvectorStore` implements :class:`~sklearn_compat.io._stores.base.Store` on one
table named by a libpq connection URI (``postgresql://...``) or keyword string
(``host=... dbname=...``), then ``::`` and the table (schema-qualified or not):

- reading and migrating: :class:`~sklearn_compat.io._pgvector.PgvectorReader` and
  :class:`~sklearn_compat.io._pgvector_write.PgvectorMigration`;
- the ledger: the table ``sklearn_compat_ledger`` of the table's schema
  (:mod:`sklearn_compat.io._pgvector_ledger`), each entry written in the transaction of
  the change it records;
- the upgrade (:mod:`sklearn_compat.io._pgvector_upgrade`): an added vector column with
  its index and a provenance column ``NAME_source`` beside it, rows written by id, counts,
  cutover by renaming columns in one transaction;
- ``rollback``: undoes the last ``--replace`` or cutover the ledger records.

The password of a location never reaches a message: :meth:`display` masks it and
:meth:`undo_line` leaves it out (libpq reads it from ``PGPASSWORD`` or ``~/.pgpass``).
"""

from contextlib import contextmanager

from ._common import InputError
from ._pgvector import TableName, connect, database_errors, split_pg_path
from ._stores.base import Store

__all__ = ["PgvectorStore", "rollback_pgvector"]


class PgvectorStore(Store):
    """A Postgres table with pgvector columns (see the module notes).

    Parameters
    ----------
    location : str
        ``URI::TABLE``: a libpq URI or keyword connection string, ``::``, then the table
        (``items``, ``app.items``, ``"Mixed Case"``).  Parsed here; nothing is opened.

    Attributes
    ----------
    id_column : str or None
        The id column of the upgrade operations (None: the table's one-column primary
        key).

    Examples
    --------
    >>> from sklearn_compat.io._pgvector_store import PgvectorStore
    >>> store = PgvectorStore("postgresql://app:s3cret@db/shop?sslmode=require::items")
    >>> store.display()
    'postgresql://app:***@db/shop?sslmode=require::items'
    >>> print(store.undo_line())
    sklearn-compat rollback --table 'postgresql://app@db/shop?sslmode=require::items' \
(the password from PGPASSWORD or ~/.pgpass)
    """

    kind = "pgvector"
    secret_sources = ("PGPASSWORD", "~/.pgpass")
    # write_rows leaves a row whose vector and provenance are already those written
    # untouched (a caller need not read rows back to skip them); ``last_written`` is the
    # number of rows the last call did write.
    write_skips_identical = True
    last_written = 0

    def __init__(self, location):
        super().__init__(location)
        self.uri, self.table = split_pg_path(self.location)
        self.id_column = None
        self._conn = None
        self._readers = []

    # ------------------------------------------------------------------ plumbing
    @property
    def conn(self):
        """This store's connection (opened on first use; one transaction per operation)."""
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.uri, self.display())
        return self._conn

    @contextmanager
    def errors(self, what, then=""):
        """Driver errors inside the block become one-line InputErrors (``what`` first);
        the connection's transaction is rolled back on any error, so the store stays
        usable."""
        try:
            with database_errors(self.display(), what, then, secret=self.uri):
                yield
        except BaseException:
            if self._conn is not None and not self._conn.closed:
                try:
                    self._conn.rollback()
                except Exception:  # noqa: BLE001 - the connection may be gone
                    pass
            raise

    def close(self):
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None

    def _oid(self):
        from ._pgvector import table_oid

        return table_oid(self.conn, self.table, self.display())

    # ------------------------------------------------------------------ reading
    def exists(self):
        with self.errors("cannot read the catalog"):
            found = self.conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", [str(self.table)]
            ).fetchone()[0]
            self.conn.rollback()
        return bool(found)

    def reader(self, spec=None, dtype=None, extra_columns=()):
        from ._common import ColumnSpec
        from ._pgvector import PgvectorReader

        reader = PgvectorReader(self.location, spec or ColumnSpec(), dtype, extra_columns)
        self._readers.append(reader)
        return reader

    def let_readers_go(self):
        """End the snapshots of this store's open readers (their next batch starts a new
        one): a change of the table's columns waits for every transaction that read it,
        this process's own readers included."""
        for reader in self._readers:
            if not reader.conn.closed:
                reader.conn.rollback()

    # ------------------------------------------------------------------ migrations
    def migration(self, reader, width, column, job, *, replace=False, resume=False,
                  force=False):  # fmt: skip
        from ._pgvector_write import PgvectorMigration

        column = column or reader.list_column
        output = None if replace else self.location
        return PgvectorMigration(reader, output, width, column, job, replace=replace,
                                 resume=resume, force=force)  # fmt: skip

    def sink(self, layout, *, force=False):
        from ._pgvector_sink import PgvectorSink

        return PgvectorSink(self.location, layout, force=force)

    def rollback(self, to_version=None):
        from ._pgvector_upgrade import uncutover
        from ._stores.ledger import rollback_target

        if to_version is not None:
            raise InputError(
                "--to-version applies to LanceDB tables; a Postgres table's rollback undoes "
                "its last --replace or cutover (a second rollback redoes it)",
                path=self.display(),
            )
        # Entries a new table inherited from its input record what was done to the input.
        own = [e for e in self.ledger() if not e.get("inherited")]
        target, redo = rollback_target(own)
        if target is not None and target.get("action") == "cutover":
            return uncutover(self, target, redo)
        from ._pgvector_rollback import swap_kept

        try:
            return swap_kept(self.location, None, target=target)
        finally:
            self.close()

    # ------------------------------------------------------------------ ledger
    def ledger(self):
        from ._pgvector_ledger import read_entries

        with self.errors("cannot read the ledger"):
            entries = read_entries(self.conn, self.table)
            self.conn.rollback()
        return entries

    def append_ledger(self, entry):
        from ._pgvector_ledger import append_entry

        with self.errors("cannot write the ledger"):
            self._oid()
            append_entry(self.conn, self.table, entry)
            self.conn.commit()

    # ------------------------------------------------------------------ upgrade
    def vector_columns(self):
        from ._pgvector_upgrade import vector_columns

        return {name: c.width for name, c in vector_columns(self).items()}

    def added_columns(self):
        from ._pgvector_upgrade import added_columns

        return added_columns(self)

    def add_column(self, name, width, like):
        from ._pgvector_upgrade import add_column

        return add_column(self, name, width, like)

    def read_rows(self, column, ids):
        from ._pgvector_upgrade import read_rows

        return read_rows(self, column, ids)

    def write_rows(self, column, ids, Z, provenance):
        from ._pgvector_upgrade import write_rows

        return write_rows(self, column, ids, Z, provenance)

    def iter_rows(self, columns, batch_size):
        from ._pgvector_upgrade import iter_rows

        return iter_rows(self, columns, batch_size)

    def column_status(self, column):
        from ._pgvector_upgrade import column_status

        return column_status(self, column)

    def cutover(self, column):
        from ._pgvector_upgrade import cutover

        return cutover(self, column)

    def undo_line(self, command="rollback", *options):
        from ._pgvector import undo_line

        line = undo_line(self.location, command)
        if options:  # the password note stays last
            import shlex

            head, sep, note = line.partition(" (the password")
            line = head + " " + " ".join(shlex.quote(str(o)) for o in options) + sep + note
        return line

    def kept_name(self, column):
        """``COLUMN_sklearn_compat_previous`` (shortened with a digest of the whole when
        longer than Postgres' 63 bytes)."""
        return TableName(None, column).sibling("_sklearn_compat_previous").name

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def rollback_pgvector(path, to_version=None):
    """``sklearn-compat rollback --table URI::TABLE``: :meth:`PgvectorStore.rollback`."""
    store = PgvectorStore(path)
    try:
        return store.rollback(to_version)
    finally:
        store.close()

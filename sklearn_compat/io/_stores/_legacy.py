"""Adapters from the stores' first modules (readers, migrations, sinks, rollback) to
:class:`~.base.Store`, used by the registry until a room defines its own Store class.

They give the migration commands (``transform`` into a store, ``--replace``, ``--resume``,
``rollback``) and a ledger read from what a migration recorded in the table; the upgrade
operations (``add_column``, ``write_rows``, ``cutover``...) are refused in one line.
"""

import importlib
import os

from .._common import ColumnSpec, InputError
from .base import Store

__all__ = ["LEGACY"]

_READERS = {
    "lance": ("._lance", "LanceReader"),
    "chroma": ("._chroma", "ChromaReader"),
    "pgvector": ("._pgvector", "PgvectorReader"),
}


def _job_entry(job):
    """A ledger entry from the job dict the first migrations recorded."""
    action = "replace" if job.get("replace") or "previous_version" in job else "transform"
    model = {"sha256": job.get("model_sha256"), "path": job.get("model_path")}
    return {
        "action": action,
        "column": job.get("column") or job.get("vector_column"),
        "model": model,
        "input": job.get("input"),
        "rows": job.get("rows"),
        "time": job.get("finished"),
        **({"previous": job["previous_version"]} if "previous_version" in job else {}),
    }


class _Legacy(Store):
    def reader(self, spec=None, dtype=None, extra_columns=()):
        module, name = _READERS[self.kind]
        cls = getattr(importlib.import_module(module, "sklearn_compat.io"), name)
        return cls(self.location, spec or ColumnSpec(), dtype, tuple(extra_columns))

    def ledger(self):
        try:
            reader = self.reader()
        except InputError:
            return []
        try:
            job = reader.migration()
        finally:
            close = getattr(reader, "close", None)
            if close is not None:
                close()
        return [] if not job else [_job_entry(job)]

    def append_ledger(self, entry):
        raise self._unsupported("a ledger entry")

    def _unsupported(self, what):
        return InputError(
            f"{what} is not supported on {self.kind} tables by this version",
            path=self.display(),
        )

    def vector_columns(self):
        raise self._unsupported("listing vector columns")

    def add_column(self, name, width, like):
        raise self._unsupported("--add-column")

    def read_rows(self, column, ids):
        raise self._unsupported("reading rows by id")

    def write_rows(self, column, ids, Z, provenance):
        raise self._unsupported("writing rows by id (backfill)")

    def iter_rows(self, columns, batch_size):
        raise self._unsupported("reading columns")

    def column_status(self, column):
        raise self._unsupported("status")

    def cutover(self, column):
        raise self._unsupported("cutover")


class LegacyLance(_Legacy):
    kind = "lance"

    def __init__(self, location):
        super().__init__(str(location).rstrip("/" + os.sep))

    def exists(self):
        return os.path.isdir(self.location)

    def migration(self, reader, width, column, job, *, replace=False, resume=False,
                  force=False):  # fmt: skip
        from .._lance import LanceMigration

        column = column or reader.list_column or "vector"
        output = None if replace else self.location
        return LanceMigration(reader, output, width, column, job, replace=replace,
                              resume=resume, force=force)  # fmt: skip

    def sink(self, layout, *, force=False):
        from .._lance import LanceSink

        return LanceSink(self.location, layout, force=force)

    def rollback(self, to_version=None):
        from .._lance import rollback_lance

        return rollback_lance(self.location, to_version)


class LegacyChroma(_Legacy):
    kind = "chroma"

    def exists(self):
        return True

    def migration(self, reader, width, column, job, *, replace=False, resume=False,
                  force=False):  # fmt: skip
        from .._chroma import ChromaMigration

        output = reader.path if replace else self.location
        return ChromaMigration(reader, output, width, job, replace=replace, resume=resume,
                               force=force)  # fmt: skip

    def sink(self, layout, *, force=False):
        from .._chroma import ChromaSink

        return ChromaSink(self.location, layout, force=force)

    def rollback(self, to_version=None):
        raise InputError(
            "rollback restores a LanceDB table's earlier version (DIR/NAME.lance) or the "
            "vectors a Postgres table's last --replace kept (URI::TABLE)",
            path=self.display(),
        )


class LegacyPgvector(_Legacy):
    kind = "pgvector"
    secret_sources = ("PGPASSWORD", "~/.pgpass")

    def exists(self):
        return True

    def migration(self, reader, width, column, job, *, replace=False, resume=False,
                  force=False):  # fmt: skip
        from .._pgvector_write import PgvectorMigration

        column = column or reader.list_column
        output = None if replace else self.location
        return PgvectorMigration(reader, output, width, column, job, replace=replace,
                                 resume=resume, force=force)  # fmt: skip

    def sink(self, layout, *, force=False):
        from .._pgvector_sink import PgvectorSink

        return PgvectorSink(self.location, layout, force=force)

    def rollback(self, to_version=None):
        from .._pgvector_rollback import rollback_pgvector

        return rollback_pgvector(self.location, to_version)


LEGACY = {"lance": LegacyLance, "chroma": LegacyChroma, "pgvector": LegacyPgvector}

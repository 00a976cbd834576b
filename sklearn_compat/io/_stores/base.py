"""The abstract vector store: one :class:`Store` subclass per store ("room"), found from a
location string by :mod:`.registry`.

Every command that touches a store (``transform`` into or out of one, ``--replace``,
``--resume``, ``--add-column``, ``backfill``, ``status``, ``cutover``, ``rollback``) is
generic code in ``sklearn_compat.cli`` calling this interface; a store is one module
implementing it.  The guards that keep a migration from being applied twice, a staging
from being taken over by another run and a rollback from undoing the wrong thing read the
store's ledger through :meth:`Store.ledger` (entry format and guards: :mod:`.ledger`).

Semantics every room follows
----------------------------
- A location is parsed in ``__init__`` without touching the store (no connection, no
  file access); :meth:`Store.display` is the only form of it that may reach a message or a
  log, and it holds no password, token or API key in any form.
- Vectors are written bit for bit as float32 (pgvector ``halfvec``: the room's type, said
  in :meth:`Store.vector_columns`); ids keep their type (integers stay integers).
- Every write is a transaction, a table version or a batch that is whole or absent after
  a crash (``kill -9``); a rerun of the same command finishes the job.
- The ledger lives in the store itself (pgvector: a ledger table or comment the user is
  never told to drop; LanceDB: schema metadata of the table version; Chroma: collection
  metadata; Qdrant: collection metadata), appended in the same transaction or table
  version as the change it records where the store allows.
- Provenance of a row of an added column: ``None`` (missing: no vector yet), ``"native"``
  (the new model's own vector, written by ``backfill``) or ``"mapped:<model id>"``
  (written by a map; ``<model id>`` is :func:`.ledger.model_id` of the model).
"""

import abc
import shlex

from .._common import InputError, redact_uri, strip_secret, table_format_or_none

__all__ = ["Store", "Migration", "NATIVE", "mapped_by", "provenance_model"]

# Provenance values of a row of an added column (see the module notes).
NATIVE = "native"
_MAPPED = "mapped:"


def mapped_by(model_id):
    """The provenance of a row a map wrote: ``"mapped:<model id>"``."""
    return _MAPPED + str(model_id)


def rows_of_width(Z, width, column, where):
    """``Z`` as an array of rows of ``width`` values for ``column``, or one line naming
    both widths (``write_rows`` then writes nothing)."""
    import numpy as np

    Z = np.asarray(Z)
    if Z.ndim != 2 or Z.shape[1] != width:
        got = Z.shape[1] if Z.ndim == 2 else Z.shape
        raise InputError(
            f"the vectors have {got} values per row; column {column!r} holds {width}: "
            "nothing written",
            path=where,
        )
    return Z


def provenance_model(provenance):
    """The model id of a ``"mapped:..."`` provenance, else None."""
    if isinstance(provenance, str) and provenance.startswith(_MAPPED):
        return provenance[len(_MAPPED) :]
    return None


class Migration(abc.ABC):
    """A migration in progress (what :meth:`Store.migration` returns).

    Attributes
    ----------
    done : int
        Rows already staged (a resumed run starts after them).
    staging : str
        Display name of the staging table or collection (no secrets).
    """

    done = 0
    staging = ""

    @abc.abstractmethod
    def batches(self, batch_size):
        """Yield ``(Batch, raw)`` for the rows still to migrate, in a fixed order; ``raw``
        is whatever :meth:`write` needs to carry the row's other columns over."""

    @abc.abstractmethod
    def write(self, raw, Z):
        """Stage one mapped batch (one transaction / commit); ``self.done`` grows."""

    @abc.abstractmethod
    def finish(self, log):
        """Check the staging (every input id once) and promote it: a new table for
        ``--output``, or in place for ``--replace`` keeping the old vectors for
        :meth:`Store.rollback`; append the job's ledger entry in the same transaction or
        table version.  Returns the line for the log (with :meth:`Store.undo_line` when
        the change can be undone)."""

    @abc.abstractmethod
    def release(self):
        """Give up the output's lock, whatever the outcome (finish, failure, interrupt)."""


class Store(abc.ABC):
    """One vector store table or collection, named by a location string.

    Parameters
    ----------
    location : str
        As the user wrote it (``DIR/NAME.lance``, ``DIR::NAME``, ``URI::TABLE``,
        ``qdrant:DIR::NAME``...).  Parsed here; nothing is opened.

    Attributes
    ----------
    kind : str
        The store's name in the registry (``"lance"``, ``"chroma"``, ``"pgvector"``,
        ``"qdrant"``); also the ``format`` of its readers.
    one_vector_per_record : bool
        Whether a record holds a single vector (Chroma): an added column is then a
        sibling collection whose name :meth:`column_location` gives.
    location : str
        The location as given (may hold a secret: never print it; use :meth:`display`).
    id_column : str or None
        The id column the by-id operations (:meth:`read_rows`, :meth:`write_rows`,
        :meth:`iter_rows`, :meth:`add_column`) use; set by the caller from
        ``--id-column`` (None: the room decides, e.g. the one ``add_column`` recorded in
        the ledger, the primary key, or the store's own ids).
    """

    kind = None
    id_column = None
    # Optional: a room whose write_rows leaves rows that already hold the given bits and
    # provenance untouched sets this, and ``last_written`` (rows the last call changed);
    # backfill then skips its read-back of the rows.
    write_skips_identical = False
    last_written = 0
    one_vector_per_record = False
    # Environment variables and files a secret of this store's locations can come from
    # instead (named in undo lines), e.g. ("PGPASSWORD", "~/.pgpass").
    secret_sources = ()

    def __init__(self, location):
        self.location = str(location)

    # ------------------------------------------------------------------ naming
    @classmethod
    def matches(cls, location):
        """Whether ``location`` names a table of this store (syntax only, no I/O)."""
        return table_format_or_none(location) == cls.kind

    def display(self):
        """The location for messages and logs: no password, token or key in any form."""
        return redact_uri(self.location)

    def shell_location(self):
        """The location with its secret removed (not masked), for a command line a user
        can paste: the secret then comes from :attr:`secret_sources`.  Default: the
        location with the password of a URI or keyword string taken out."""
        return strip_secret(self.location)

    def undo_line(self, command="rollback", *options):
        """A runnable, shell-quoted command line naming this table, e.g.
        ``sklearn-compat rollback --table 'postgresql://app@db/shop?a=1&b=2::items'``,
        followed, when the location had a secret, by where the secret is read from
        (``(password from PGPASSWORD or ~/.pgpass)``), never the secret or ``***``."""
        words = ["sklearn-compat", command, "--table", self.shell_location(), *options]
        line = " ".join(shlex.quote(str(w)) for w in words)
        if self.display() != self.location and self.secret_sources:
            line += f" (the password from {' or '.join(self.secret_sources)})"
        return line

    def __str__(self):
        return self.display()

    def __repr__(self):
        return f"{type(self).__name__}({self.display()!r})"

    # ------------------------------------------------------------------ reading
    @abc.abstractmethod
    def exists(self):
        """Whether the table or collection exists (connects or looks)."""

    @abc.abstractmethod
    def reader(self, spec, dtype=None, extra_columns=()):
        """A :class:`~sklearn_compat.io.TableReader` of the table at one snapshot or
        version (its ``format`` is :attr:`kind`); ``spec`` a ColumnSpec."""

    # ------------------------------------------------------------------ migrations
    @abc.abstractmethod
    def migration(self, reader, width, column, job, *, replace=False, resume=False,
                  force=False):  # fmt: skip
        """The :class:`Migration` writing the mapped rows of ``reader`` (a reader of a
        table of this kind) into this location: a new table (``--output``; ``force``
        replaces an existing one whole at promotion) or, with ``replace``, this same
        table in place.  ``width`` is the mapped width, ``column`` the output's vector
        column (None: the input's), ``job`` the ledger entry of the migration
        (:func:`.ledger.entry`, action ``"transform"`` or ``"replace"``) whose keys other
        than ``time`` a staging resumed with ``resume`` must match (else one line naming
        the keys that differ: resume ownership).  Takes the output's lock now (a live
        other writer: :class:`~sklearn_compat.exceptions.OutputLocked`); refuses a
        leftover staging without ``resume``."""

    def sink(self, layout, *, force=False):
        """The writer of a new table holding ids and one vector column (for
        :class:`~sklearn_compat.io.TableWriter`): ``write(ids, Z)``, ``close()``,
        ``commit()``, ``abort()``."""
        raise InputError(f"cannot write a new {self.kind} table", path=self.display())

    @abc.abstractmethod
    def rollback(self, to_version=None):
        """Undo the last ``--replace`` or ``cutover`` the ledger records
        (:func:`.ledger.rollback_target`), bit for bit, in one transaction / version; a
        second rollback redoes it.  Appends a ``"rollback"`` entry.  Returns a log line
        (with :meth:`undo_line`).  Raises InputError naming what is missing when there
        is nothing to undo."""

    # ------------------------------------------------------------------ ledger
    @abc.abstractmethod
    def ledger(self):
        """The ledger entries (dicts, :mod:`.ledger` format), oldest first; ``[]`` for a
        table nothing was done to.  Cheap; never raises for a table without one."""

    @abc.abstractmethod
    def append_ledger(self, entry):
        """Append one entry (a dict of JSON values) to the store's ledger."""

    # ------------------------------------------------------------------ upgrade
    @abc.abstractmethod
    def vector_columns(self):
        """``{name: width}`` of the table's vector columns (Chroma: the collection's
        ``"embedding"`` and the sibling collections added to it, by column name)."""

    def added_columns(self):
        """``{name: like}``: the vector columns added beside another (by
        :meth:`add_column`) and the column each was added beside.  Default: the
        ``add_column`` entries in effect in the ledger; a room that records an added
        column when it adds it (before the ledger entry, written once every row is in)
        says so from that record."""
        from . import ledger as _ledger

        out = {}
        for e in _ledger.in_effect(self.ledger()):
            if e.get("action") == "add_column" and e.get("column") and e.get("like"):
                out[e["column"]] = e["like"]
        return out

    @abc.abstractmethod
    def add_column(self, name, width, like):
        """Create the vector column ``name`` of ``width`` float32 values beside ``like``
        (an existing vector column), every row missing, with the index kind of ``like``
        (pgvector: same method, opclass for the new type, options; LanceDB: the same
        index type when ``like`` has one; Chroma: a sibling collection with the same
        distance and index settings holding the same ids).  Idempotent for the same
        ``(name, width)`` (a resumed ``--add-column``); refuses another width or a name
        in use.  Returns a log line (naming the sibling collection where there is one)."""

    @abc.abstractmethod
    def read_rows(self, column, ids):
        """``(known, Z, provenance)`` for ``ids`` (a 1-d array): ``known`` a bool mask
        (ids the table holds), ``Z`` float32 ``(len(ids), width)`` with NaN rows where
        the vector is missing or the id unknown, ``provenance`` an object array (None:
        missing)."""

    @abc.abstractmethod
    def write_rows(self, column, ids, Z, provenance):
        """Write ``Z`` (float32, bit for bit) into ``column`` for ``ids``, and the
        provenance (one string, or one per row) beside it, in one transaction or table
        version.  Never inserts: returns the ids the table does not hold (an array,
        empty when all were known), which are not written."""

    def bulk_writer(self, column, provenance, batch_size):
        """Optional: an object writing many batches into ``column`` better than
        :meth:`write_rows` one at a time (``backfill`` uses it), or None (the default:
        batch by batch).  ``add(ids, Z)`` gathers a batch and returns the ids the table
        does not hold (never written), ``commit(stop)`` writes what was gathered (each
        write whole or absent after a crash, ``stop()`` between writes, rows already
        holding the bits and ``provenance`` left alone) and returns ``(written,
        same)``; ``close()`` drops what is left.  Memory stays bounded by
        ``batch_size`` and what the room states."""
        return None

    @abc.abstractmethod
    def iter_rows(self, columns, batch_size):
        """Yield ``(ids, {column: Z}, {column: provenance})`` over the whole table at
        one snapshot, ``batch_size`` rows at a time; ``Z`` float32 with NaN rows where
        missing, provenance as in :meth:`read_rows` (None for a column without one,
        such as the original column)."""

    @abc.abstractmethod
    def column_status(self, column):
        """``{"dimension": int, "rows": int, "mapped": {model id: n}, "native": int,
        "missing": int}`` of one vector column (rows = table rows; mapped + native +
        missing = rows for an added column; an original column counts as native, or as
        mapped by the model its ledger names when a migration wrote it)."""

    @abc.abstractmethod
    def cutover(self, column):
        """Serve ``column`` under the name of the column it was added beside (queries
        unchanged), keeping the old one under :meth:`kept_name`, in one transaction /
        table version, with a ``"cutover"`` ledger entry (``column``, ``served``,
        ``kept``).  Returns a log line with :meth:`undo_line`."""

    def kept_name(self, column):
        """Name under which ``cutover`` keeps the old column (``status`` shows it)."""
        return f"{column}_sklearn_compat_previous"

    def column_location(self, column):
        """The location of an added column when it is a sibling collection (None for a
        column of the same table)."""
        return None

    def close(self):  # noqa: B027 - optional: most rooms hold nothing open
        """Release connections and clients (safe to call twice)."""

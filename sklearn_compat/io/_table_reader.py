"""The parts every table reader shares: :class:`Batch` and the :class:`TableReader` base.

A format's reader (one module each: ``_csv``, ``_parquet``, ``_npy``, ``_lance``,
``_chroma``) subclasses :class:`TableReader`, sets the layout in ``__init__`` and yields
raw batches from ``_batches``; the checks (missing ids, NaN or infinite values) and the
error messages that name the row and column live here, once.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ._common import InputError

__all__ = ["Batch", "TableReader"]

_FLOAT_DTYPES = {"float32": np.float32, "float64": np.float64, None: None}


@dataclass
class Batch:
    """Rows ``start`` to ``start + len(X) - 1`` of a table.

    Attributes
    ----------
    start : int
        Index of the first row in the file (0-based, data rows only).
    ids : ndarray of shape (n,) or None
        The ids (None when the table has no id column).
    X : ndarray of shape (n, d)
        The embeddings, float32 or float64.
    extra : dict of str -> ndarray
        Other columns asked for (for example class labels).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.io import Batch
    >>> len(Batch(start=10, ids=None, X=np.zeros((3, 4))))
    3
    """

    start: int
    ids: np.ndarray | None
    X: np.ndarray
    extra: dict = field(default_factory=dict)

    def __len__(self):
        return self.X.shape[0]


class TableReader:
    """Common logic of the three readers; subclasses set the layout in ``__init__``.

    Attributes set by subclasses: ``form`` ("columns", "list" or "array"),
    ``vector_columns`` (list of names, columns form), ``list_column`` (list form),
    ``id_column`` (None when the ids are the row numbers), ``n_rows`` (None when unknown
    before reading, as for CSV), ``width`` (None when unknown before reading).
    """

    format = None
    columns = ()
    id_column = None
    vector_columns = None
    list_column = None
    width = None
    n_rows = None
    #: Whether ``Batch.start`` counts rows in the order the user's file holds them.  A store
    #: read in id order (a database table has no file order) sets it False: its messages
    #: then name a row by its id alone, never by a position the user cannot find.
    rows_in_file_order = True

    def __init__(self, path, spec, dtype, extra_columns):
        self.path = path
        self.spec = spec
        self.dtype = dtype
        self.extra_columns = extra_columns

    # -------------------------------------------------------------- public interface
    def iter_batches(self, batch_size=65536):
        """Yield checked :class:`Batch` objects of at most ``batch_size`` rows."""
        if batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}")
        for batch in self._batches(int(batch_size)):
            self._check(batch)
            yield batch

    def read(self):
        """All rows as one checked :class:`Batch`."""
        batches = list(self.iter_batches(1 << 20))
        if not batches:
            return Batch(0, self._empty_ids(), np.empty((0, self.width or 0)), {})
        if len(batches) == 1:
            return batches[0]
        ids = None if batches[0].ids is None else np.concatenate([b.ids for b in batches])
        extra = {k: np.concatenate([b.extra[k] for b in batches]) for k in batches[0].extra}
        return Batch(0, ids, np.concatenate([b.X for b in batches]), extra)

    def where(self, row):
        """Human name of data row ``row`` (0-based): ``row 17`` or ``line 19`` for CSV."""
        return f"row {row}"

    def describe_embedding(self):
        if self.form == "list":
            return f"list column {self.list_column!r}"
        if self.form == "array":
            return "the array's columns"
        return f"{len(self.vector_columns)} numeric columns"

    def id_dtype(self):
        """A fixed numpy dtype for the ids (``.npy`` output needs one before writing)."""
        return np.dtype(np.int64)

    # -------------------------------------------------------------- helpers
    def _empty_ids(self):
        return None if self.id_column is None else np.empty(0, dtype=object)

    def _locate(self, batch, i, column=None):
        if not self.rows_in_file_order and batch.ids is not None:
            where = f"id {_show(batch.ids[i])}"
        else:
            where = self.where(batch.start + i)
            if batch.ids is not None and column != self.id_column:
                where += f" (id {_show(batch.ids[i])})"
        if column is not None:
            where += f", column {column!r}"
        return where

    def _check_list_lengths(self, lengths, start, ids):
        """Settle the list column's width; refuse the first row whose list has another length.

        The first batch takes the length most of its rows share, not its first row's: when
        the first rows are the odd ones out, they are the rows blamed.
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        if not lengths.size:
            return
        settled = self.width is not None
        if not settled:
            values, first_row, counts = np.unique(lengths, return_index=True, return_counts=True)
            # The commonest length; among equally common ones, the one seen first.
            commonest = np.flatnonzero(counts == counts.max())
            self.width = int(values[commonest[np.argmin(first_row[commonest])]])
        wrong = lengths != self.width
        if wrong.any():
            i = int(np.flatnonzero(wrong)[0])
            if settled:
                basis = f"earlier rows have {self.width}"
            else:
                basis = f"{int((~wrong).sum())} of the first {lengths.size} rows have {self.width}"
            batch = Batch(start, ids, np.empty((lengths.size, 0)))
            raise InputError(
                f"{self._locate(batch, i, self.list_column)}: list has {lengths[i]} values, "
                f"{basis}",
                path=self.path,
            )

    def _check(self, batch):
        X = batch.X
        if self.width is None:
            self.width = X.shape[1]
        if batch.ids is not None:
            missing = pd.isna(batch.ids)
            if missing.any():
                i = int(np.flatnonzero(missing)[0])
                raise InputError(
                    f"{self._locate(batch, i, self.id_column)}: missing id", path=self.path
                )
        finite = np.isfinite(X)
        if not finite.all():
            i, j = (int(v) for v in np.argwhere(~finite)[0])
            value = "NaN (missing)" if np.isnan(X[i, j]) else str(X[i, j])
            if self.form == "columns":
                column = self.vector_columns[j]
            else:
                column = self.list_column
            where = self._locate(batch, i, column)
            if self.form != "columns":
                where += f" element {j}"
            raise InputError(f"{where}: value is {value}", path=self.path)

    def _cast(self, X, file_dtype):
        target = self.dtype
        if target is None:
            target = np.float32 if file_dtype in (np.float32, np.float16) else np.float64
        return np.asarray(X, dtype=target)


def show_id(value):
    """An id as a message prints it: ``'NA'`` for text, ``7`` for a number.

    numpy scalars print as the plain values they hold (``7``, not ``np.int64(7)``; ``'x'``,
    not ``np.str_('x')``), and bytes as the text they decode to.
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return repr(value) if isinstance(value, str) else str(value)


_show = show_id


def _missing_id_column(spec, columns, path):
    shown = ", ".join(map(repr, list(columns)[:8])) + (", ..." if len(columns) > 8 else "")
    return InputError(f"no id column {spec.id_column!r} (columns: {shown})", path=path)


def _check_numeric(chosen, numeric, type_of, path):
    for name in chosen:
        if name not in numeric:
            raise InputError(f"column {name!r} is not numeric ({type_of(name)})", path=path)


def _check_extra(extra_columns, columns, path):
    for name in extra_columns:
        if name not in columns:
            raise InputError(f"no column {name!r}", path=path)

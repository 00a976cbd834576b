"""Pairing the rows of two exports by id, with a report of what matched."""

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from ._common import DUPLICATE_POLICIES, InputError
from ._table_reader import show_id

__all__ = ["JoinReport", "join_on_ids", "DUPLICATE_POLICIES"]

# JoinReport.by of tables paired row for row (neither has an id column).
POSITION = "row position"


@dataclass
class JoinReport:
    """Counts of a join between a source and a target table.

    ``matched`` ids are on both sides; ``missing_in_target`` are source ids the target
    lacks and ``missing_in_source`` the reverse; ``duplicated_*`` count the distinct ids
    that appear on more than one row of a table, and ``dropped_rows_*`` the rows the
    duplicate policy removed.

    Examples
    --------
    >>> from sklearn_compat.io import JoinReport
    >>> report = JoinReport(2, 3, 2, 1, 0, 0, 0, 0, 0, "error", "'id'")
    >>> report.as_dict()["missing_in_target"]
    1
    """

    matched: int
    source_rows: int
    target_rows: int
    missing_in_target: int
    missing_in_source: int
    duplicated_source: int
    duplicated_target: int
    dropped_rows_source: int
    dropped_rows_target: int
    duplicates: str
    by: str
    numeric_matches: int = 0

    def summary(self):
        """One line for a log."""
        if self.by == POSITION:
            return f"pairing rows by position (no --id-column): {self.matched} pairs"
        text = (
            f"joined on {self.by}: {self.matched} ids matched; "
            f"{self.missing_in_target} source ids missing from the target, "
            f"{self.missing_in_source} target ids missing from the source; "
            f"duplicated ids: {self.duplicated_source} in the source, "
            f"{self.duplicated_target} in the target"
        )
        dropped = self.dropped_rows_source + self.dropped_rows_target
        if dropped:
            text += f" ({dropped} rows dropped, duplicates={self.duplicates})"
        if self.numeric_matches:
            text += f"; {_numeric_hint(self.numeric_matches)}"
        return text

    def as_dict(self):
        return asdict(self)


def _comparable(a, b):
    """Id arrays that compare by value: text on both sides when one side is text."""
    a, b = np.asarray(a), np.asarray(b)
    numeric = {a.dtype.kind in "iuf", b.dtype.kind in "iuf"}
    if numeric == {True, False}:
        # CSV ids are read as text; compare integers from Parquet or .npy as text too.
        def as_text(x):
            if x.dtype.kind == "f" and np.all(np.mod(x, 1) == 0):
                x = x.astype(np.int64)
            return x.astype(str).astype(object)

        a, b = as_text(a), as_text(b)
    if a.dtype.kind == "S":
        a = np.char.decode(a).astype(object)
    if b.dtype.kind == "S":
        b = np.char.decode(b).astype(object)
    return a, b


def _deduplicate(ids, policy, reader):
    index = pd.Index(ids)
    repeated = index.duplicated(keep=False)
    n_dup = int(pd.Index(ids[repeated]).nunique()) if repeated.any() else 0
    if n_dup and policy == "error":
        first = ids[repeated][0]
        rows = np.flatnonzero(index == first)[:3]
        where = " and ".join(reader.where(int(r)) for r in rows)
        raise InputError(
            f"{n_dup} ids appear on more than one row, e.g. id {show_id(first)} on {where}; "
            "pass --duplicates first, last or drop to choose",
            path=reader.path,
        )
    if policy == "drop":
        keep = ~repeated
        if len(ids) and not keep.any():
            raise InputError(
                f"all {len(ids)} rows were dropped as duplicates (--duplicates drop): every "
                f"id appears on more than one row ({n_dup} ids in all); pass --duplicates "
                "first or last to keep one row per id",
                path=reader.path,
            )
    else:
        keep = ~index.duplicated(keep=policy if policy in ("first", "last") else "first")
    return np.flatnonzero(keep), n_dup


def join_on_ids(source, target, *, duplicates="error"):
    """Row positions pairing two tables by id.

    Parameters
    ----------
    source, target : tuple (reader, Batch)
        As returned by :func:`read_table`.
    duplicates : {"error", "first", "last", "drop"}
        What to do with ids that appear on several rows of one table.

    Returns
    -------
    source_rows, target_rows : ndarray of int
        ``source.X[source_rows[i]]`` and ``target.X[target_rows[i]]`` are the same item,
        in the source's row order.
    report : JoinReport

    Tables without ids are paired by position and must have the same number of rows.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.io import Batch, join_on_ids
    >>> class Reader:  # the two attributes join_on_ids reads from a TableReader
    ...     path, id_column = "table", "id"
    >>> source = (Reader(), Batch(0, np.array(["a", "b", "c"], dtype=object), np.zeros((3, 2))))
    >>> target = (Reader(), Batch(0, np.array(["c", "a"], dtype=object), np.zeros((2, 2))))
    >>> source_rows, target_rows, report = join_on_ids(source, target)
    >>> source_rows.tolist(), target_rows.tolist(), report.matched
    ([0, 2], [1, 0], 2)
    """
    (src_reader, src), (tgt_reader, tgt) = source, target
    if duplicates not in DUPLICATE_POLICIES:
        raise InputError(f"duplicates must be one of {DUPLICATE_POLICIES}, got {duplicates!r}")
    n_s, n_t = len(src), len(tgt)
    if src.ids is None or tgt.ids is None:
        if n_s != n_t:
            raise InputError(
                f"{src_reader.path} has {n_s} rows and {tgt_reader.path} has {n_t}; without "
                "an id column (--id-column) rows are paired by position and the counts "
                "must agree"
            )
        rows = np.arange(n_s)
        report = JoinReport(n_s, n_s, n_t, 0, 0, 0, 0, 0, 0, duplicates, POSITION)
        return rows, rows, report
    s_ids, t_ids = _comparable(src.ids, tgt.ids)
    s_keep, dup_s = _deduplicate(s_ids, duplicates, src_reader)
    t_keep, dup_t = _deduplicate(t_ids, duplicates, tgt_reader)
    s_kept, t_kept = s_ids[s_keep], t_ids[t_keep]
    position = pd.Index(t_kept).get_indexer(s_kept)
    found = position >= 0
    matched = int(found.sum())
    by = repr(src_reader.id_column or tgt_reader.id_column or "row number")
    numeric = _numeric_matches(s_kept[~found], np.delete(t_kept, position[found]))
    if matched == 0:
        hint = f"; {_numeric_hint(numeric)}" if numeric else ""
        raise InputError(
            f"no ids in common between {src_reader.path} (ids like "
            f"{_examples(s_kept)}) and {tgt_reader.path} (ids like {_examples(t_kept)})"
            f"{hint}"
        )
    source_rows = s_keep[found]
    target_rows = t_keep[position[found]]
    report = JoinReport(
        matched=matched,
        source_rows=n_s,
        target_rows=n_t,
        missing_in_target=int(pd.Index(s_kept[~found]).nunique()),
        missing_in_source=int(len(t_kept) - matched),
        duplicated_source=dup_s,
        duplicated_target=dup_t,
        dropped_rows_source=n_s - len(s_keep),
        dropped_rows_target=n_t - len(t_keep),
        duplicates=duplicates,
        by=by,
        numeric_matches=numeric,
    )
    return source_rows, target_rows, report


def _numeric_matches(unmatched_source, unmatched_target):
    """How many unmatched source ids equal an unmatched target id when both are read as
    numbers ('007' and 7, '7.0' and '7'): ids are compared by their text, so these pairs
    silently miss each other."""
    if len(unmatched_source) == 0 or len(unmatched_target) == 0:
        return 0
    source = pd.to_numeric(pd.Series(unmatched_source, dtype=object), errors="coerce")
    target = pd.to_numeric(pd.Series(unmatched_target, dtype=object), errors="coerce")
    target = set(target.dropna().tolist())
    return int(source.dropna().isin(target).sum()) if target else 0


def _numeric_hint(n):
    return (
        f"{n} more ids would match if read as numbers (e.g. '007' and 7): ids are compared "
        "as written, so make both id columns the same form"
    )


def _examples(ids):
    return ", ".join(repr(v) if isinstance(v, str) else str(v) for v in list(ids[:3]))

"""The upgrade of a store, step by step, as generic code over :class:`~.base.Store`:
mapped vectors into an added column, backfill of the new model's own vectors, the refit on
the pairs gathered, status and cutover.  The command line (``sklearn_compat.cli``) parses
options and prints; every step here calls the interface only, so each store gets each
behaviour.

Callers pass what needs the model or the command line as callables: ``mapper(X)`` (the
mapped rows of an old-column matrix), ``stop()`` (raises between batches when the run was
interrupted), ``log(line)``.
"""

import numpy as np

from .._common import InputError
from . import ledger as _ledger
from .base import NATIVE, mapped_by, provenance_model

__all__ = ["add_column", "backfill", "cutover", "refit", "status", "status_lines"]

# Native rows a refit needs at least; the share of the native rows the current map was not
# fitted on that is kept aside to judge both maps (at least REFIT_MIN_ASIDE, at most
# REFIT_MAX_ASIDE pairs: the figure's standard error is below 0.012 there, and the ranking
# stays cheap); the refit is kept when its gain exceeds REFIT_Z paired standard errors.
REFIT_MIN_PAIRS = 20
REFIT_ASIDE = 0.2
REFIT_MIN_ASIDE = 10
REFIT_MAX_ASIDE = 2000
REFIT_Z = 2.0
# Rows still mapped (a uniform sample of at most this many) that the pairs kept aside are
# retrieved among: the comparison is the retrieval of the rows still mapped.
REFIT_OTHERS = 10000


def _never():
    return None


def _filled_by(entries, column):
    """The last entry in effect that wrote mapped vectors into the added ``column``."""
    for e in reversed(_ledger.in_effect(entries)):
        if (
            e.get("action") in ("add_column", "refit")
            and e.get("column") == column
            and e.get("model")  # a room's own record of the new column names no model
        ):
            return e
    return None


def _added_entry(entries, column):
    """The first ``add_column`` entry of ``column`` in effect (it names ``like``)."""
    for e in _ledger.in_effect(entries):
        if e.get("action") == "add_column" and e.get("column") == column and e.get("like"):
            return e
    return None


def _is(prov, value):
    return np.fromiter((p == value for p in prov), dtype=bool, count=len(prov))


# ---------------------------------------------------------------------- add column
def _close(reader):
    close = getattr(reader, "close", None)
    if close is not None:
        close()


def add_column(store, open_reader, column, width, mapper, model, *, batch_size, force=False,
               stop=_never, log=print, checked=None):  # fmt: skip
    """Write the mapped vectors of the store's rows (its old column, read by the reader
    ``open_reader(vector_column)`` returns) into the new vector column ``column`` of
    ``width`` values, by id; returns the rows written.

    The column is added while no reader of the table is open (a reader's snapshot would
    block a database's ``ALTER TABLE``): ``checked``, a reader the caller opened to check
    the layout, is closed first, and the rows are read by a new one.

    Rows already native (backfilled) are never overwritten, rows already mapped by this
    model are skipped (a rerun finishes an interrupted run), and a column another model
    filled is refused.  The ledger gets an ``add_column`` entry once every row is in.
    ``model`` is :func:`.ledger.model_entry` of the model.
    """
    where = store.display()
    reader = checked if checked is not None else open_reader(None)
    like = reader.list_column
    id_column = reader.id_column
    _close(reader)
    if like is None:
        raise InputError("--add-column needs a table whose embedding is one vector column",
                         path=where)  # fmt: skip
    if column == like:
        raise InputError(f"--add-column {column!r} is the table's vector column", path=where)
    entries = store.ledger()
    _ledger.refuse_mapping_twice(
        entries, model, where, column=like, force=force,
        hint=f"column {like!r} already holds this model's output",
    )  # fmt: skip
    done = _filled_by(entries, column)
    if done is not None and not _ledger.same_model(done.get("model"), model):
        other = (done.get("model") or {}).get("path") or "another model"
        raise InputError(
            f"column {column!r} holds the vectors of {other} (since {done.get('time')}); "
            "choose another --add-column name",
            path=where,
        )
    log(store.add_column(column, width, like))
    own = mapped_by(model["id"])
    written = kept = 0
    reader = open_reader(like)  # the table now has two vector columns: name the old one
    try:
        for batch in reader.iter_batches(batch_size):
            known, _, prov = store.read_rows(column, batch.ids)
            native = _is(prov, NATIVE)
            todo = known & ~native & ~_is(prov, own)
            kept += int(native.sum())
            if todo.any():
                Z = np.asarray(mapper(batch.X[todo]), dtype=np.float32)
                store.write_rows(column, batch.ids[todo], Z, own)
                written += int(todo.sum())
            stop()
    finally:
        _close(reader)
    store.append_ledger(
        _ledger.entry("add_column", column=column, model=model, input=where, like=like,
                      width=int(width), id_column=id_column, rows=written)  # fmt: skip
    )
    native = f"; {kept} rows already native kept" if kept else ""
    log(f"{where}: mapped {written} rows into column {column!r}{native}")
    return written


# ------------------------------------------------------------------------ backfill
def _same_bits(A, B):
    A = np.ascontiguousarray(A, dtype=np.float32)
    B = np.ascontiguousarray(B, dtype=np.float32)
    return (A.view(np.uint32) == B.view(np.uint32)).all(axis=1)


def _shown(values, limit=5):
    values = [v.item() if hasattr(v, "item") else v for v in values]
    text = ", ".join(repr(v) if isinstance(v, str) else str(v) for v in values[:limit])
    return text + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def backfill(store, column, vectors, *, batch_size, stop=_never, log=print):
    """Write the new model's own vectors (``vectors``, a TableReader of any table with
    ids) into the added ``column``, by id, bit for bit as float32, each row marked
    native.  Stores hold float32: a float64 export is rounded to the nearest float32
    (exact for vectors a model computed in float32), and a value beyond float32's range
    is refused in one line naming its row, id and column, before anything is written.
    Rows already native with the same bits are left alone (the same backfill twice
    changes nothing); ids the table does not hold are never inserted and are named.
    Memory is bounded by ``batch_size`` (and what the room's
    :meth:`~.base.Store.bulk_writer` states, where it has one).  Returns
    ``{"written", "same", "unknown"}``."""
    where = store.display()
    columns = store.vector_columns()
    if column not in columns:
        raise InputError(
            f"has no vector column {column!r} (vector columns: {', '.join(columns) or 'none'}; "
            "add one with 'transform --add-column')",
            path=where,
        )
    width = columns[column]
    source = _display(vectors.path)

    def check(got):
        if width is not None and got is not None and got != width:
            raise InputError(
                f"the vectors have {got} values per row; column {column!r} of {where} holds "
                f"{width}: nothing written",
                path=source,
            )

    check(vectors.width)
    if vectors.id_column is None:
        raise InputError("backfill writes rows by id: name the id column (--id-column)",
                         path=source)  # fmt: skip
    written = same = 0
    unknown = []
    bulk = store.bulk_writer(column, NATIVE, batch_size)
    if bulk is None:  # rows written batch by batch: a value float32 cannot hold, first
        _refuse_beyond_float32(vectors, batch_size, column, source)
    try:
        for batch in vectors.iter_batches(batch_size):
            check(batch.X.shape[1])
            ids = np.asarray(batch.ids)
            _refuse_duplicates(ids, vectors, batch)
            Z = _float32(batch, vectors, column, source)
            if bulk is not None:
                unknown.extend(np.asarray(bulk.add(ids, Z)).tolist())
                stop()
                continue
            done, alike = _write_batch(store, column, ids, Z, unknown)
            written, same = written + done, same + alike
            stop()
        if bulk is not None:
            written, same = bulk.commit(stop)
    finally:
        if bulk is not None:
            bulk.close()
    if written:
        store.append_ledger(
            _ledger.entry("backfill", column=column, input=source, rows=written,
                          unknown=len(unknown))  # fmt: skip
        )
    line = f"{where}: backfilled {written} rows of column {column!r} with native vectors"
    if same:
        line += f"; {same} rows already held them"
    log(line)
    if unknown:
        log(
            f"{source}: {len(unknown)} ids are not in {where} and were not "
            f"written: {_shown(unknown)}"
        )
    return {"written": written, "same": same, "unknown": len(unknown)}


def _write_batch(store, column, ids, Z, unknown):
    """One batch of a backfill by :meth:`~.base.Store.write_rows`; returns ``(written,
    same)`` and extends ``unknown``."""
    if getattr(store, "write_skips_identical", False):
        # The room leaves rows already holding these bits and provenance untouched
        # and says how many it wrote: no read back needed.
        missing = np.asarray(store.write_rows(column, ids, Z, NATIVE))
        unknown.extend(missing.tolist())
        done = int(store.last_written)
        return done, len(ids) - len(missing) - done
    known, current, prov = store.read_rows(column, ids)
    alike = known & _is(prov, NATIVE) & _same_bits(current, Z)
    todo = known & ~alike
    if (~known).any():
        unknown.extend(ids[~known].tolist())
    if todo.any():
        store.write_rows(column, ids[todo], Z[todo], NATIVE)
    return int(todo.sum()), int(alike.sum())


def _float32(batch, reader, column, source):
    """The batch's vectors as float32 (what stores hold: float64 values are rounded to
    the nearest float32), or one line naming the row, id and column of a value beyond
    float32's range (it would become infinite)."""
    X = np.asarray(batch.X)
    with np.errstate(over="ignore"):
        Z = np.ascontiguousarray(X, dtype=np.float32)
    if X.dtype != np.float32:
        beyond = np.isinf(Z) & np.isfinite(X)
        if beyond.any():
            i, j = (int(k) for k in np.argwhere(beyond)[0])
            names = getattr(reader, "vector_columns", None) or []
            named = reader.list_column or (names[j] if j < len(names) else None)
            raise InputError(
                f"{reader._locate(batch, i, named)}: value {X[i, j]:g} is beyond float32 "
                f"(at most {float(np.finfo(np.float32).max):.4g} in magnitude; column "
                f"{column!r} holds float32): nothing written",
                path=source,
            )
    return Z


def _refuse_beyond_float32(reader, batch_size, column, source):
    """One pass over an export that is not float32, before anything is written: refuse a
    value float32 cannot hold (:func:`_float32`)."""
    for batch in reader.iter_batches(batch_size):
        if np.asarray(batch.X).dtype == np.float32:
            return
        _float32(batch, reader, column, source)


def _display(location):
    from .._common import redact_uri

    return redact_uri(location)


def _refuse_duplicates(ids, reader, batch):
    import pandas as pd

    dup = pd.Index(ids).duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise InputError(
            f"{reader.where(batch.start + i)}: the id {_shown([ids[i]])} comes twice; "
            "each row is written once (nothing of this batch written)",
            path=_display(reader.path),
        )


# -------------------------------------------------------------------------- refit
def _pairs(store, like, column, batch_size, others=0, seed=0):
    """The native rows' ``(X old, Y new, ids)`` in id order, and the old vectors of a
    uniform sample of at most ``others`` rows still mapped (the lowest of a key hashed
    from each row's id and ``seed``).  Neither depends on the order the store yields its
    rows in, which a backfill or a compaction may change."""
    X, Y, ids = [], [], []
    kept, keys = [], np.empty(0)
    for batch_ids, vectors, prov in store.iter_rows([like, column], batch_size):
        native = _is(prov[column], NATIVE)
        X.append(vectors[like][native])
        Y.append(vectors[column][native])
        ids.append(np.asarray(batch_ids)[native])
        if others:
            mapped = ~native
            keys = np.concatenate([keys, _id_keys(np.asarray(batch_ids)[mapped], seed)])
            kept.append(np.asarray(vectors[like][mapped]))
            if len(keys) > others:
                lowest = np.argpartition(keys, others)[:others]
                kept, keys = [np.concatenate(kept)[lowest]], keys[lowest]
    still = np.concatenate(kept) if kept else None
    if not X:
        return np.empty((0, 0)), np.empty((0, 0)), np.empty(0), still
    X, Y, ids = np.concatenate(X), np.concatenate(Y), np.concatenate(ids)
    order = np.argsort(_id_keys(ids, seed), kind="stable")
    return X[order], Y[order], ids[order], still


def _id_keys(ids, seed):
    """A key in [0, 1) per id, fixed by the id's value and ``seed`` alone."""
    import pandas as pd

    hashed = pd.util.hash_array(np.asarray([repr(i) for i in ids.tolist()], dtype=object),
                                hash_key=f"sklearn_compat{seed:02d}"[:16].ljust(16, "0"))
    return hashed.astype(np.float64) / 2.0**64


def _refit_path(path):
    from pathlib import Path

    p = Path(path)
    stem = p.stem.split(".refit-")[0]
    for k in range(1, 10000):
        candidate = p.with_name(f"{stem}.refit-{k}{p.suffix}")
        if not candidate.exists():
            return candidate
    raise InputError("too many refitted models beside it", path=str(path))


def _held_aside(n, fitted, seed):
    """``(aside, train)`` row indices of ``n`` native pairs: ``aside`` drawn only from the
    rows the current map was not fitted on (``fitted``, a mask or None when unknown),
    ``train`` every other native row (the current map's own sample included)."""
    eligible = np.arange(n) if fitted is None else np.flatnonzero(~fitted)
    n_aside = min(len(eligible), REFIT_MAX_ASIDE,
                  max(REFIT_MIN_ASIDE, int(round(len(eligible) * REFIT_ASIDE))))  # fmt: skip
    aside = np.sort(np.random.default_rng(seed).choice(eligible, n_aside, replace=False))
    return aside, np.setdiff1d(np.arange(n), aside)


def _paired_gain(before, after):
    """Mean and standard error of the per-pair difference ``after - before``."""
    d = np.asarray(after["hits"], dtype=np.float64) - np.asarray(before["hits"], dtype=np.float64)
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("inf")
    return float(d.mean()), se


def refit(store, column, model, *, measure, mapper_for, batch_size, seed=0, stop=_never,
          log=print):  # fmt: skip
    """Re-fit the map of the added ``column`` on the native rows (old column -> new
    column, the direction of the map in use) with the same estimator and settings
    (``sklearn.base.clone`` of ``model``, the map in use, loaded by the caller from the
    path the ledger names), and keep it only when it retrieves the rows still mapped
    better than the current map.

    Both maps are judged on the same native pairs kept aside, which neither was fitted
    on: a share (``REFIT_ASIDE``, 10 to 2,000 pairs) of the native rows that are not
    among the current map's training rows (as its model file records them, see
    :func:`~sklearn_compat.io.save_model`; when it records none, a line says the figure
    may favour the current map).  The candidate is fitted on every other native pair,
    the current map's own sample included.  ``measure(model, X, Y, others)`` -> dict
    with ``metric``, ``retention`` (the figure) and ``hits`` (per pair) scores a map on
    pairs of old rows ``X`` and new rows ``Y``, the old vectors ``others`` of a uniform
    sample of the rows still mapped (at most ``REFIT_OTHERS``; None when there are none)
    mapped beside them; the refit is kept when its gain over the current map exceeds
    ``REFIT_Z`` (2) paired standard errors, both figures and the difference logged.

    A kept map is saved beside the current one (``NAME.refit-K.EXT``, its fingerprint
    naming the map it replaced, its training ids recorded), the rows still mapped are
    mapped again by it (``mapper_for(model)``), and the ledger gets a ``refit`` entry.
    Returns ``{"kept", "current", "refit", "gain", "se", "pairs", "aside", "rows",
    "model"}``.
    """
    from sklearn.base import clone

    from .._model_files import load_model, save_model, trained_on

    where = store.display()
    entries = store.ledger()
    current = _filled_by(entries, column)
    added = _added_entry(entries, column)
    if current is None or added is None:
        raise InputError(
            f"the ledger records no map that wrote column {column!r}; --refit re-fits the "
            "map of 'transform --add-column'",
            path=where,
        )
    like = added.get("like")
    X, Y, ids, others = _pairs(store, like, column, batch_size, REFIT_OTHERS, seed)
    n = len(X)
    if n < REFIT_MIN_PAIRS:
        raise InputError(
            f"column {column!r} has {n} native rows; --refit needs at least "
            f"{REFIT_MIN_PAIRS} (pairs of old and new vectors)",
            path=where,
        )
    old_path = (current.get("model") or {}).get("path") or "the current map"
    old_id = (current.get("model") or {}).get("id")
    fitted = trained_on(model, ids)
    result = {"kept": False, "current": None, "refit": None, "gain": None, "se": None,
              "pairs": n, "aside": 0, "rows": 0, "model": None}  # fmt: skip
    if fitted is None:
        log(
            f"{where}: {old_path} records no training ids: native rows it was fitted on may "
            "be among those kept aside, which favours it"
        )
    elif (~fitted).sum() < REFIT_MIN_ASIDE:
        log(
            f"{where}: {int((~fitted).sum())} of the {n} native rows are not the current "
            f"map's training rows; the refit is judged on at least {REFIT_MIN_ASIDE}: "
            "kept the current map"
        )
        return result
    aside, train = _held_aside(n, fitted, seed)
    candidate = clone(model).fit(X[train], Y[train])
    before = measure(model, X[aside], Y[aside], others)
    after = measure(candidate, X[aside], Y[aside], others)
    gain, se = _paired_gain(before, after)
    kept = gain > 0 and gain > REFIT_Z * se
    among = f" (among {len(others)} rows still mapped)" if others is not None else ""
    log(
        f"{where}: held-out {before.get('metric', 'retention')} on {len(aside)} native pairs "
        f"neither map was fitted on{among}: current map {before['retention']:.3f}, refit on "
        f"{len(train)} pairs {after['retention']:.3f} ({gain:+.3f} +/- {se:.3f} paired SE)"
    )
    before = {k: v for k, v in before.items() if k != "hits"}
    after = {k: v for k, v in after.items() if k != "hits"}
    result.update(current=before, refit=after, gain=gain, se=se, aside=len(aside))
    if not kept:
        log(
            f"{where}: the refit does not beat the current map by more than {REFIT_Z:g} "
            "paired SE; kept the current map"
        )
        return result
    path = _refit_path((current.get("model") or {}).get("path") or "map.skops")
    heldout = dict(after, refit={"previous": old_id, "table": where, "column": column,
                                 "pairs": int(n), "gain": gain, "se": se})  # fmt: skip
    save_model(candidate, path, training_ids=ids[train], heldout=heldout)
    saved = load_model(path)
    info = _ledger.model_entry(saved, path)
    mapper = mapper_for(saved)
    own = mapped_by(info["id"])
    rows = 0
    for batch_ids, vectors, prov in store.iter_rows([like, column], batch_size):
        mapped = np.fromiter((provenance_model(p) is not None for p in prov[column]),
                             dtype=bool, count=len(batch_ids))  # fmt: skip
        mapped &= ~_is(prov[column], own)
        if mapped.any():
            Z = np.asarray(mapper(vectors[like][mapped]), dtype=np.float32)
            store.write_rows(column, np.asarray(batch_ids)[mapped], Z, own)
            rows += int(mapped.sum())
        stop()
    store.append_ledger(
        _ledger.entry("refit", column=column, model=info, input=where, previous=old_id,
                      pairs=int(n), aside=len(aside), metric=after.get("metric"),
                      retention={"current": before["retention"], "refit": after["retention"],
                                 "gain": gain, "se": se},
                      rows=rows)  # fmt: skip
    )
    log(f"{where}: kept the refit map, saved as {path}; mapped again the {rows} rows still mapped")
    result.update(kept=True, rows=rows, model=str(path))
    return result


# ------------------------------------------------------------------- status, cutover
def status(store):
    """What ``status --json`` prints: ``{"table", "columns": {name: {"dimension",
    "rows", "mapped" (count), "native", "missing", "mapped_by": [{"model", "path",
    "rows", "since"}], "retention" (held-out retention of the map that mapped it, or
    None), "retention_metric" (what that figure measures), ...}}, "ledger": [...]}``."""
    entries = store.ledger()
    effect = _ledger.in_effect(entries)
    models = {}
    for e in effect:
        m = e.get("model") or {}
        for key in (m.get("id"), m.get("sha256")):
            if key and key not in models:
                models[key] = (m, e)
    columns = {}
    for name in store.vector_columns():
        raw = dict(store.column_status(name))
        by = raw.pop("mapped", {}) or {}
        if not isinstance(by, dict):
            by = {"unknown": int(by)}
        listed = []
        for key, count in by.items():
            m, e = models.get(key, ({}, {}))
            listed.append({"model": key, "path": m.get("path"), "rows": int(count),
                           "since": e.get("time")})  # fmt: skip
        out = {"dimension": raw.pop("dimension", None), "rows": int(raw.pop("rows", 0)),
               "mapped": int(sum(by.values())), "native": int(raw.pop("native", 0)),
               "missing": int(raw.pop("missing", 0)), "mapped_by": listed}  # fmt: skip
        out["retention"], out["retention_metric"] = _retention(effect, name)
        out.update(raw)
        columns[name] = out
    return {"table": store.display(), "columns": columns, "ledger": entries}


def _retention(effect, column):
    """``(figure, metric)`` of the held-out measure of the map that last wrote
    ``column`` (a refit's from its comparison), or ``(None, None)``."""
    for e in reversed(effect):
        if e.get("column") != column or e.get("action") not in _ledger.MAPPING:
            continue
        if e.get("action") == "refit":
            return (e.get("retention") or {}).get("refit"), e.get("metric")
        heldout = (e.get("model") or {}).get("heldout") or {}
        return heldout.get("retention"), heldout.get("metric")
    return None, None


def status_lines(report):
    """The text form of :func:`status`."""
    lines = [f"{report['table']}"]
    for name, c in report["columns"].items():
        dim = c["dimension"] if c["dimension"] is not None else "?"
        lines.append(
            f"  column {name!r} ({dim} values): {c['rows']} rows; mapped {c['mapped']}, "
            f"native {c['native']}, missing {c['missing']}"
        )
        for m in c["mapped_by"]:
            lines.append(
                f"    mapped by {m['path'] or m['model']} ({m['rows']} rows) since "
                f"{m['since'] or 'unknown'}"
            )
        if c.get("retention") is not None:
            metric = f" ({c['retention_metric']})" if c.get("retention_metric") else ""
            lines.append(f"    held-out retention of its map: {c['retention']:.3f}{metric}")
        if c.get("like"):
            lines.append(f"    added beside {c['like']!r}")
    if report["ledger"]:
        lines.append("ledger:")
    for e in report["ledger"]:
        model = (e.get("model") or {}).get("path")
        parts = [e.get("time") or "?", e.get("action") or "?"]
        if e.get("column"):
            parts.append(f"column {e['column']!r}")
        if model:
            parts.append(f"model {model}")
        if e.get("input"):
            parts.append(f"from {e['input']}")
        if e.get("rows") is not None:
            parts.append(f"{e['rows']} rows")
        if e.get("kept"):
            parts.append(f"old column kept as {e['kept']!r}")
        lines.append("  " + ", ".join(str(p) for p in parts))
    return lines


def cutover(store, column, *, min_native=None, log=print):
    """Serve the added ``column`` under the old column's name; with ``min_native``,
    only when at least that share of its rows is native (else one line, nothing
    changed)."""
    if min_native is not None:
        st = store.column_status(column)
        rows = int(st.get("rows") or 0)
        native = int(st.get("native") or 0)
        share = native / rows if rows else 0.0
        if share < min_native:
            raise InputError(
                f"column {column!r}: {native} of {rows} rows are native ({share:.3f}), below "
                f"--min-native {min_native:g}; nothing changed",
                path=store.display(),
            )
    line = store.cutover(column)
    log(line)
    return line

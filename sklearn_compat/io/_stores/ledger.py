"""The ledger every store keeps of what was done to it, and the guards that read it.

An entry is a dict of JSON values:

- ``action``: ``"transform"`` (a new table written from a mapped input), ``"replace"``
  (mapped in place), ``"add_column"`` (mapped vectors written into a new column),
  ``"backfill"`` (native vectors written), ``"refit"`` (a re-fitted map re-mapped the
  rows still mapped), ``"cutover"``, ``"rollback"``;
- ``column``: the vector column the action wrote (for ``cutover``: the column now served;
  ``served``: the name it is served under; ``kept``: where the old one went);
- ``model``: :func:`model_entry` of the model that mapped (None for ``backfill``,
  ``cutover``, ``rollback``);
- ``input``: the input's display name (no secrets), for ``backfill`` the export read;
- ``time``: UTC, ISO 8601 to the second; ``rows``: rows written;
- ``undoes``: for ``rollback``, the ``time`` and ``action`` of the entry it undid;
  ``previous``: what a rollback restores (a LanceDB version, a kept table...), room-specific.

The guards: :func:`refuse_mapping_twice` (a table or column that holds the output of a
model is not mapped by it again, even after the kept old vectors were dropped, since the
ledger is in the table itself), :func:`check_resume` (a staging is resumed only by the
same job), :func:`rollback_target` (what ``rollback`` undoes).
"""

import hashlib
import json
import time

from .._common import InputError

__all__ = [
    "ACTIONS",
    "UNDOABLE",
    "check_resume",
    "entry",
    "file_sha256",
    "in_effect",
    "model_entry",
    "model_id",
    "last_mapping",
    "refuse_mapping_twice",
    "rollback_target",
    "same_model",
    "undo_reference",
]

ACTIONS = ("transform", "replace", "add_column", "backfill", "refit", "cutover", "rollback")
# Actions ``rollback`` undoes (the last one in effect).
UNDOABLE = ("replace", "cutover")
# Actions after which a column holds vectors a model mapped.
MAPPING = ("transform", "replace", "add_column", "refit")
# Keys of an entry that are not part of the job a staging is resumed by.
_NOT_JOB = ("time", "rows", "finished")


def now():
    """UTC now as the ledger writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def file_sha256(path):
    """SHA-256 (hex) of a file's bytes."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def model_entry(model, path):
    """What the ledger records of a model: ``id`` (:func:`model_id`), ``sha256`` of the
    file, ``path`` (as given), ``estimator``, ``created``, ``training_ids_sha256``,
    ``n_features_in``/``n_features_out`` and ``heldout`` (the held-out retention
    ``fit --holdout`` stored, or None) from its fingerprint."""
    fp = dict(getattr(model, "fingerprint_", None) or {})
    digest = file_sha256(path)
    return {
        "id": model_id(fp, digest),
        "sha256": digest,
        "path": str(path),
        "estimator": fp.get("estimator"),
        "created": fp.get("created"),
        "training_ids_sha256": fp.get("training_ids_sha256"),
        "n_features_in": fp.get("n_features_in"),
        "n_features_out": fp.get("n_features_out"),
        "heldout": fp.get("heldout"),
    }


def model_id(fingerprint, digest):
    """A short id of a model: from its fingerprint (estimator, save time, training ids)
    when it has one, so that a copy of the file is the same model; else the file's
    SHA-256.  16 hex digits."""
    fp = fingerprint or {}
    if fp.get("created") and fp.get("estimator"):
        key = "|".join(str(fp.get(k)) for k in ("estimator", "created", "training_ids_sha256"))
    else:
        key = digest
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def same_model(a, b):
    """Whether two ledger model entries (or job dicts) are the same model."""
    if not a or not b:
        return False
    if a.get("id") and a.get("id") == b.get("id"):
        return True
    return bool(a.get("sha256")) and a.get("sha256") == b.get("sha256")


def decode(raw):
    """The entries of a ledger stored as JSON text (bytes or str), or None when ``raw`` is
    missing or not a JSON list (the rooms then read what the first migrations recorded)."""
    if raw is None:
        return None
    try:
        entries = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    except ValueError:
        return None
    return list(entries) if isinstance(entries, list) else None


def entry(action, *, column=None, model=None, input=None, rows=None, **extra):
    """A ledger entry (see the module notes); ``time`` is now."""
    if action not in ACTIONS:
        raise ValueError(f"unknown ledger action {action!r}")
    out = {"action": action, "column": column, "model": model, "input": input}
    out.update(extra)
    out["rows"] = rows
    out["time"] = now()
    return out


def in_effect(ledger):
    """The entries not undone by a later ``rollback`` (a rollback of a rollback redoes
    the entry), oldest first."""
    undone = set()
    for e in ledger:
        if e.get("action") != "rollback":
            continue
        target = _key(e.get("undoes") or {})
        undone.symmetric_difference_update({target})
    out = []
    for e in ledger:
        if e.get("action") == "rollback":
            continue
        if _key(e) in undone:
            continue
        out.append(e)
    return out


def _key(e):
    return (e.get("time"), e.get("action"), e.get("column"))


def rollback_target(ledger):
    """``(entry, redo)``: the ``replace`` or ``cutover`` entry ``rollback`` acts on, and
    whether it is currently undone (the last event was a rollback of it: this rollback
    redoes it).  ``(None, False)`` when the ledger has nothing to undo.  The rollback
    entry a room appends has ``undoes`` = ``{"time", "action", "column"}`` of it."""
    for e in reversed(ledger):
        if e.get("action") in UNDOABLE:
            return e, False
        if e.get("action") == "rollback":
            target = _key(e.get("undoes") or {})
            for f in ledger:
                if f.get("action") in UNDOABLE and _key(f) == target:
                    return f, target not in {_key(g) for g in in_effect(ledger)}
            return None, False
    return None, False


def undo_reference(e):
    """The ``undoes`` value of a rollback entry undoing (or redoing) entry ``e``."""
    return {"time": e.get("time"), "action": e.get("action"), "column": e.get("column")}


def last_mapping(ledger, column=None):
    """The last entry in effect that left ``column`` (None: any column) holding vectors
    a model mapped, or None."""
    for e in reversed(in_effect(ledger)):
        if e.get("action") in MAPPING and (column is None or e.get("column") in (None, column)):
            return e
    return None


def refuse_mapping_twice(ledger, model, where, column=None, force=False, hint=""):
    """Raise InputError when the ledger says ``model`` (a :func:`model_entry`) already
    mapped ``column`` of the table (any column when None) and the mapping is in effect:
    mapping it again would apply the map twice.  ``force`` lets it through."""
    if force:
        return
    for e in reversed(in_effect(ledger)):
        if e.get("action") not in MAPPING or not same_model(e.get("model"), model):
            continue
        if column is not None and e.get("column") not in (None, column):
            continue
        since = f" since {e['time']}" if e.get("time") else ""
        what = f"column {e['column']!r} " if e.get("column") else ""
        hint = f": {hint}" if hint else ""
        raise InputError(
            f"{what}holds the output of the model {model.get('path')}{since} (ledger: "
            f"{e['action']} from {e.get('input') or 'an earlier table'}); mapping it again "
            f"would apply the map twice{hint}; pass --force to map it again on purpose",
            path=where,
        )


def check_resume(job, staged, staging, where):
    """Refuse to resume into ``staging`` when the job it records (``staged``) differs
    from this run's ``job`` in any key but ``time``, ``rows`` and ``finished``."""
    changed = [
        k for k in job if k not in _NOT_JOB and _comparable(staged.get(k)) != _comparable(job[k])
    ]
    if changed:
        raise InputError(
            f"{staging} was staged by another migration ({', '.join(changed)} differ); "
            "delete it to start over",
            path=where,
        )


def _comparable(value):
    if isinstance(value, dict) and ("id" in value or "sha256" in value):
        return value.get("sha256")  # a model: the same file
    return value

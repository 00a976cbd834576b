"""Who writes a store output: a lock file with a live-owner check, and the owner token
recorded in the staging a writer promotes.

A store writer (LanceDB, Chroma, and any later store) stages its rows under a name derived
from the output's (``NAME.partial``) and promotes the staging to the output at the end.
Two runs writing the same output must not take each other's staging for an interrupted
one, nor promote or delete what the other wrote.  The contract every store writer follows:

1. **Lock before touching anything.**  Before it creates, resumes or deletes a staging (or
   checks whether the output exists), the writer takes the output's lock:
   ``lock = OutputLock.acquire(lock_path, output)``.  ``lock_path`` is a file the store
   chooses beside its data (one path per output, the same for every run).  The file is
   created whole and atomically (written aside, then hard-linked into place: it never
   exists half-written) and holds JSON: ``token`` (random, unique to this run), ``pid``,
   ``host``, ``started`` (the process's start time as the OS records it, so that a reused
   process id is not taken for the owner) and ``output``.
2. **A live owner is never overridden.**  When the lock exists and its owner runs,
   ``acquire`` raises :class:`~sklearn_compat.exceptions.OutputLocked` naming it: a running
   migration is never called interrupted.  A lock is stale only when its owner is gone:
   same host, and no process with that id runs, or one runs that started at another time.
   A stale lock is moved aside under a name of this run's own (so of two runs that find it
   stale, one takes it) and then deleted.  A lock written on another host is never judged
   stale (its processes cannot be seen from here): the message names the file to delete
   once that run is known to be over.
3. **The staging records its owner.**  The writer stores ``lock.token`` in the staging
   (LanceDB: schema metadata; Chroma: collection metadata) when it creates it, and again
   when it adopts an interrupted run's staging on ``--resume`` (which it may only do while
   holding the lock).
4. **Promote only your own staging.**  The finishing step (renaming or committing the
   staging into place, deleting an output that ``--force`` replaces) first calls
   ``lock.check(recorded_token, staging)``, which raises unless the lock file still holds
   this run's token and the staging records it.
5. **Release at the end**, whatever the outcome: ``lock.release()`` deletes the file only
   while it still holds this run's token.  A run killed outright (SIGKILL, a crash) leaves
   its lock behind, stale by rule 2, so the next run takes it and finds the staging to
   resume.

``OutputLock`` is a context manager too (``with OutputLock.acquire(...) as lock:``).
"""

import json
import os
import socket
import time
import uuid

from ..exceptions import OutputLocked

__all__ = ["OutputLock", "OWNER_KEY", "process_start_time"]

# Key under which a staging records the token of the run that owns it.
OWNER_KEY = "sklearn_compat_owner"


def process_start_time(pid):
    """When process ``pid`` started, as an opaque comparable value; None when unknown.

    Linux: the start time in clock ticks since boot (``/proc/PID/stat``, field 22).  Where
    ``/proc`` is absent, psutil's ``create_time`` when psutil is installed.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # The command name (field 2) is in parentheses and may hold spaces: split after it.
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return round(psutil.Process(pid).create_time(), 2)
    except Exception:  # noqa: BLE001 - no psutil, no such process, no access
        return None


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    except OSError:
        return False
    return True


def _owner_is_gone(owner):
    """Whether the process that wrote lock record ``owner`` has certainly ended."""
    if owner.get("host") != socket.gethostname():
        return False
    pid = owner.get("pid")
    if not isinstance(pid, int) or not _running(pid):
        return True
    started = owner.get("started")
    return started is not None and process_start_time(pid) not in (None, started)


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: never judged stale (rule 2), reported as it is


def _describe(owner, path):
    if not owner:
        return f"an unreadable lock file {path}"
    started = owner.get("started_at")
    when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(started)) if started else ""
    return f"process {owner.get('pid')} on {owner.get('host')}{when} (lock file {path})"


class OutputLock:
    """The lock of one store output, held by this process (see the module's contract).

    Use :meth:`acquire` to take one; the constructor only records an acquired lock.

    Attributes
    ----------
    path : str
        The lock file.
    token : str
        This run's owner token, to record in the staging.
    """

    def __init__(self, path, token):
        self.path = path
        self.token = token

    @classmethod
    def acquire(cls, path, output):
        """Take the lock at ``path`` for ``output`` (a name for messages).

        Raises
        ------
        OutputLocked
            When a live process (or one on another host) holds it.
        """
        record = {
            "token": uuid.uuid4().hex,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": process_start_time(os.getpid()),
            "started_at": time.time(),
            "output": str(output),
        }
        aside = f"{path}.{record['token']}.tmp"
        with open(aside, "w", encoding="utf-8") as f:
            json.dump(record, f)
        try:
            for _ in range(3):  # a stale lock removed, then taken; or lost to a faster run
                try:
                    os.link(aside, path)
                    return cls(path, record["token"])
                except FileExistsError:
                    pass
                owner = _read(path)
                if owner is None:  # released meanwhile
                    continue
                if not _owner_is_gone(owner):
                    elsewhere = owner and owner.get("host") != socket.gethostname()
                    hint = (
                        f"; if that run is over, delete {path}"
                        if elsewhere or not owner
                        else "; wait for it to finish"
                    )
                    raise OutputLocked(
                        f"another sklearn-compat run is writing this output: "
                        f"{_describe(owner, path)}{hint}",
                        path=output,
                    )
                cls._break(path, owner, record["token"])
            raise OutputLocked(f"could not take the lock {path}; run again", path=output)
        finally:
            os.unlink(aside)

    @staticmethod
    def _break(path, owner, token):
        """Remove a stale lock, unless another run broke (and took) it first."""
        moved = f"{path}.{token}.stale"
        try:
            os.rename(path, moved)
        except FileNotFoundError:
            return
        if (_read(moved) or {}).get("token") != owner.get("token"):
            # Between reading the stale record and moving it, another run took the lock:
            # put its live lock back (nothing can have been linked at ``path`` meanwhile
            # but by a run that also found it stale, and that one re-checks).
            try:
                os.link(moved, path)
            except FileExistsError:
                pass
        os.unlink(moved)

    def holds(self):
        """Whether the lock file still holds this run's token."""
        return (_read(self.path) or {}).get("token") == self.token

    def check(self, recorded, staging):
        """Raise unless this run still holds the lock and ``recorded`` (the owner token the
        staging ``staging`` records) is this run's: the finishing step's guard."""
        if not self.holds():
            raise OutputLocked(
                f"this run no longer holds the lock {self.path} (removed or taken by another "
                f"run); {staging} was not promoted",
                path=staging,
            )
        if recorded != self.token:
            raise OutputLocked(
                "the staging was written or taken over by another run; nothing promoted",
                path=staging,
            )

    def release(self):
        """Delete the lock file if it still holds this run's token."""
        if self.holds():
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

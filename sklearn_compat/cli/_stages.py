"""Named moments of a command's run, marked for whoever must act at a known one.

A test (or a supervisor) that wants to signal a command during its imports, or start a
second writer while the first one finishes, waits for the mark instead of sleeping for a
guessed time, which a loaded machine makes wrong.

Set the environment variable ``SKLEARN_COMPAT_STAGE_DIR`` to a directory: on reaching stage
``S`` the command creates the empty file ``DIR/S``.  With ``SKLEARN_COMPAT_HOLD_AT=S`` as
well, it then waits until the file ``DIR/S.go`` exists (at most ``HOLD_LIMIT`` seconds)
before going on.  Unset (the default), :func:`mark` does nothing.

Stages:

``started``
    The command line's signal handlers are installed; nothing but the standard library
    is imported yet (the command's own imports, torch and scikit-learn, come next).
``imported``
    The command's modules are imported and its arguments parsed; it runs next.
``finishing``
    A store migration has staged every row; its final check and promotion come next.
"""

import os
import time

__all__ = ["mark", "STAGES"]

STAGES = ("started", "imported", "finishing")
# Longest wait for the go-ahead of a held stage (then the command goes on anyway).
HOLD_LIMIT = 600.0


def mark(stage):
    """Record that ``stage`` is reached (and wait if asked to); see the module."""
    directory = os.environ.get("SKLEARN_COMPAT_STAGE_DIR")
    if not directory:
        return
    with open(os.path.join(directory, stage), "w"):
        pass
    if os.environ.get("SKLEARN_COMPAT_HOLD_AT") != stage:
        return
    go = os.path.join(directory, f"{stage}.go")
    deadline = time.monotonic() + HOLD_LIMIT
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)

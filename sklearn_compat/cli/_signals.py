"""SIGINT and SIGTERM as exceptions for the command line, from its first moment on.

The handlers are installed before the command imports anything heavy (torch, scikit-learn,
pandas, the stores' engines), so a signal at any moment of a run, imports included, ends it
the same way: the clean-ups that handle Ctrl-C run, one line is printed, and the exit
status is 130 (SIGINT) or 143 (SIGTERM).  Only the interpreter's own start-up and the
import of the ``sklearn_compat`` package itself (standard library only) come before them.
"""

import signal
import threading
from contextlib import contextmanager

__all__ = ["Terminated", "signals_as_exceptions"]


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler, ``timeout``, ``kill``) raised where the program runs.

    A KeyboardInterrupt, so every clean-up that handles Ctrl-C (removing a temporary
    output file, restoring the existing one) handles it too.
    """


def _raise(signum, frame):
    # Once: a second signal while the first one's clean-up runs must not cut it short.
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, signal.SIG_IGN)
    raise Terminated(signum) if signum == signal.SIGTERM else KeyboardInterrupt


@contextmanager
def signals_as_exceptions():
    """Inside the block, SIGINT raises KeyboardInterrupt and SIGTERM :class:`Terminated`,
    each once; the previous handlers come back after it (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

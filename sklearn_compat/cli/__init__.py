"""The ``sklearn-compat`` batch command line (also ``python -m sklearn_compat``).

Subcommands::

    sklearn-compat fit --method procrustes|affine|lambda-orth|whitened|refined|residual|rcsls \\
        --source SRC --target TGT \\
        [--id-column ID] --model MODEL [method options such as --lam 12]
    sklearn-compat transform --model MODEL --input SRC --output OUT [--id-column ID]
    sklearn-compat evaluate --model MODEL --source SRC --target TGT [--id-column ID] [--json] \\
        [--report report.md]
    sklearn-compat grid --source SRC --target TGT [--id-column ID] --lam 0 4 12 inf \\
        --cv 5 --output RESULTS
    sklearn-compat encode --input SRC --output OUT --n-anchors 64 \\
        [--parallel OTHER --parallel-output OTHER_OUT]
    sklearn-compat search --model MODEL --gallery OLD --queries NEW -k 10 --output OUT \
        [--gallery-form centered|raw] [--csls K | --no-csls]
    sklearn-compat export --model MODEL --format npz|faiss|onnx --output FILE
    sklearn-compat export --model MODEL --format sentence-transformers --encoder DIR \\
        --output DIR [--normalize-input]
    sklearn-compat inspect --model MODEL [--json]
    # the upgrade of a store, step by step
    sklearn-compat transform --model MODEL --input STORE --id-column ID --add-column NAME
    sklearn-compat backfill --table STORE --column NAME --vectors EXPORT --id-column ID [--refit]
    sklearn-compat status --table STORE [--json]
    sklearn-compat cutover --table STORE --column NAME [--min-native R]
    sklearn-compat rollback --table STORE [--to-version N]

Tables are CSV, Parquet or .npy, chosen from the file name, or vector stores: a LanceDB
table ``DIR/NAME.lance``, a Chroma collection ``DIR::NAME``, a Postgres table with a
pgvector column ``postgresql://...::TABLE`` (or a libpq keyword string before ``::TABLE``)
or a Qdrant collection ``qdrant:DIR::NAME`` (see :mod:`sklearn_compat.io`).  Every store is
one room behind one interface (``sklearn_compat.io._stores``) and keeps a ledger of what
was done to it, which the guards read: a table holding a model's output is not mapped by
it again, ``rollback`` undoes the last ``--replace`` or ``cutover`` (and a second one
redoes it).
``fit``, ``evaluate`` and ``grid`` pair source and target rows by ``--id-column``; without
one, rows are paired by position (said once on stderr) and both tables must have the same
number of rows.
Exit status: 0 on success, 1 when the input, the model or an output is wrong (one line
``sklearn-compat: error: ...`` on stderr naming the file, row or column; no output file
is left behind), 2 for a malformed command line, 130 when interrupted (Ctrl-C) and 143
when terminated (SIGTERM), which is handled like Ctrl-C.  ``--debug``
shows the full traceback instead.

This module only runs a command and reports its errors: the options are declared in
``_parser`` (method options once, in ``_registry``), and the commands live in ``_commands``,
which call the public estimators, metrics and :mod:`sklearn_compat.io`.
"""

# Only the standard library and light modules here: the signal handlers are installed
# (in ``main``) before anything heavy is imported, so the imports stay inside ``main``.
import signal
import sys
import traceback
import warnings

from .._lazy import lazy_exports
from ..exceptions import InputError
from ._signals import Terminated, signals_as_exceptions
from ._stages import mark

__all__ = ["main", "build_parser"]

__getattr__, __dir__ = lazy_exports(__name__, {"build_parser": "._parser"})
# The program's name in messages (``_parser.PROG`` too; not imported from there, which
# would load the parser before the handlers are installed).
PROG = "sklearn-compat"


def _check_device(args):
    """Refuse ``--device cuda[:N]`` when torch cannot see that GPU (every command alike)."""
    device = getattr(args, "device", None)
    if device in (None, "auto", "cpu"):
        return
    from .._core.backend import resolve_device

    try:
        resolve_device(device)
    except ValueError as exc:
        raise ValueError(
            f"--device {device}: {exc} Pass --device cpu, or auto to use a GPU when there is one."
        ) from None


def _error(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    # One line per warning, like the errors; no source excerpt.
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def main(argv=None):
    """Run the command line; returns the exit status (also used by the console script).

    Parameters
    ----------
    argv : list of str, default=None
        Arguments without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success, 1 on an error in the input, model or output, 2 on a malformed
        command line (argparse exits with it), 130 when interrupted, 143 when terminated
        by SIGTERM (handled like an interrupt: temporary files removed, outputs intact).
    """
    with signals_as_exceptions():
        try:
            mark("started")
            # The commands import torch, scikit-learn and pandas: seconds, in which a
            # signal gets the usual one line too.
            from ._files import check_files
            from ._parser import build_parser

            args = build_parser().parse_args(argv)
            from . import _commands as _cli_commands

            mark("imported")
        except KeyboardInterrupt as exc:
            return _interrupted(exc)
        return _run(getattr(_cli_commands, f"run_{args.command}"), args, check_files)


def _run(command, args, check_files):
    with warnings.catch_warnings():
        if not args.debug:
            warnings.showwarning = _show_warning
        try:
            _check_device(args)
            check_files(args)
            return command(args) or 0
        except KeyboardInterrupt as exc:
            return _interrupted(exc)
        except (InputError, ValueError, TypeError, OSError, MemoryError) as exc:
            if args.debug:
                traceback.print_exc()
            _error(_one_line(exc))
            return 1
        except Exception as exc:  # noqa: BLE001 - a batch job wants one line, not a trace
            if args.debug:
                traceback.print_exc()
            message = " ".join(str(exc).split()) or "no message"
            _error(
                f"{message} (unexpected {type(exc).__name__}; run with --debug for the traceback)"
            )
            return 1


def _interrupted(exc):
    """The one line and the exit status of an interrupted run: 130 (SIGINT), 143 (SIGTERM)."""
    if "sklearn_compat.io._write" in sys.modules:  # else no output was started
        from ..io._write import remove_pending_temporaries

        remove_pending_temporaries()
    # A store migration keeps its finished batches and says how to resume.
    outcome = getattr(exc, "outcome", "no output was written")
    if isinstance(exc, Terminated):
        _error(f"terminated (SIGTERM); {outcome}")
        return 128 + signal.SIGTERM
    _error(f"interrupted; {outcome}")
    return 130


def _one_line(exc):
    if isinstance(exc, InputError):
        text = str(exc)
    elif isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror or exc}"
    elif isinstance(exc, MemoryError):
        text = "out of memory (try a smaller --rows-per-batch)"
    else:
        text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
    # The last guard on secrets: whatever raised, no password of a connection URI or
    # keyword string reaches the terminal or a log (stores mask their own already).
    from ..io._common import redact_uri

    return redact_uri(" ".join(text.split()))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

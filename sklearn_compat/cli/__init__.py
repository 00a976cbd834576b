"""The ``sklearn-compat`` batch command line (also ``python -m sklearn_compat``).

Subcommands::

    sklearn-compat fit --method procrustes|affine|lambda-orth --source SRC --target TGT \\
        --id-column ID --model MODEL [method options such as --lam 12]
    sklearn-compat transform --model MODEL --input SRC --output OUT [--id-column ID]
    sklearn-compat evaluate --model MODEL --source SRC --target TGT --id-column ID [--json]
    sklearn-compat grid --source SRC --target TGT --id-column ID --lam 0 4 12 inf \\
        --cv 5 --output RESULTS
    sklearn-compat encode --input SRC --output OUT --n-anchors 64 \\
        [--parallel OTHER --parallel-output OTHER_OUT]

Tables are CSV, Parquet or .npy, chosen from the file name (see :mod:`sklearn_compat.io`).
Exit status: 0 on success, 1 when the input, the model or an output is wrong (one line
``sklearn-compat: error: ...`` on stderr naming the file, row or column; no output file
is left behind), 2 for a malformed command line, 130 when interrupted (Ctrl-C) and 143
when terminated (SIGTERM), which is handled like Ctrl-C.  ``--debug``
shows the full traceback instead.

This module only parses arguments and reports errors; the commands live in
``_cli_commands`` and call the public estimators, metrics and :mod:`sklearn_compat.io`.
"""

import argparse
import math
import signal
import sys
import threading
import traceback
import warnings
from contextlib import contextmanager

from ..io._common import DUPLICATE_POLICIES, InputError
from ._registry import METHODS

__all__ = ["main", "build_parser"]

PROG = "sklearn-compat"


def _lam(text):
    """A lambda value: a non-negative float or ``inf``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(value) or value < 0:
        raise argparse.ArgumentTypeError(f"lambda must be >= 0 or inf, got {text!r}")
    return value


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _device(text):
    """A well-formed device name; whether it exists is for the command to find out."""
    from .._core.backend import resolve_device

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an absent GPU is not a usage error
            resolve_device(text, for_inference=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _n_folds(text):
    value = _positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"cross-validation needs at least 2 folds, got {value}")
    return value


def _common_parser():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return p


def _table_parser():
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("table columns")
    g.add_argument(
        "--id-column",
        metavar="ID",
        help="the id column (a plain 2-d .npy array has ids = row numbers)",
    )
    g.add_argument("--prefix", help="embedding columns: numeric columns starting with PREFIX")
    g.add_argument(
        "--pattern",
        metavar="REGEX",
        help="embedding columns: numeric columns whose name matches REGEX",
    )
    g.add_argument(
        "--vector-column", metavar="NAME", help="the embedding is this one list-valued column"
    )
    g.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        help="read embeddings as this dtype (default: float32 stays float32, "
        "other numbers become float64)",
    )
    return p


def _pair_parser():
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("source and target tables")
    g.add_argument(
        "--source",
        required=True,
        metavar="SRC",
        help="table of the model to map from (usually the new model)",
    )
    g.add_argument(
        "--target",
        required=True,
        metavar="TGT",
        help="table of the model to map into (usually the old model)",
    )
    g.add_argument(
        "--target-id-column",
        metavar="ID",
        help="the target's id column, when named differently (default: --id-column)",
    )
    g.add_argument("--target-prefix", help="the target's embedding column prefix")
    g.add_argument(
        "--target-pattern", metavar="REGEX", help="the target's embedding column pattern"
    )
    g.add_argument(
        "--target-vector-column", metavar="NAME", help="the target's list-valued embedding column"
    )
    g.add_argument(
        "--duplicates",
        choices=DUPLICATE_POLICIES,
        default="error",
        help="ids on several rows of one table: an error (default), keep the "
        "first or last row, or drop every such id",
    )
    return p


def _method_options(p, *, grid=False):
    g = p.add_argument_group("method options (each applies to some methods only)")
    g.add_argument(
        "--device", type=_device, help="'auto' (default: CUDA when available), 'cpu', 'cuda:N'"
    )
    if not grid:
        g.add_argument(
            "--center", action="store_true", default=None, help="procrustes: centre both sides"
        )
        g.add_argument(
            "--scale", action="store_true", default=None, help="procrustes: fit an isotropic scale"
        )
        g.add_argument(
            "--no-reflection",
            action="store_true",
            default=None,
            help="procrustes: rotations only (det = +1)",
        )
        g.add_argument("--alpha", type=float, help="affine: ridge penalty")
        g.add_argument(
            "--no-intercept", action="store_true", default=None, help="affine: no bias term"
        )
        g.add_argument("--lam", type=_lam, help="lambda-orth: orthogonality threshold (0 .. inf)")
    g.add_argument("--epochs", type=_positive_int, help="lambda-orth: max_epochs")
    g.add_argument("--batch-size", type=_positive_int, help="lambda-orth: batch size")
    g.add_argument("--lr", type=float, help="lambda-orth: learning rate")
    g.add_argument("--seed", type=int, help="lambda-orth: random_state (repeatable fits)")
    g.add_argument("--verbose", type=int, help="lambda-orth: training log level")


def _model_parser():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--model", required=True, help="model file written by 'fit'")
    p.add_argument(
        "--trust",
        action="store_true",
        help="load model files holding types that are not this package's own "
        "(and joblib/pickle files); only for files you trust",
    )
    return p


def build_parser():
    """The argument parser of ``sklearn-compat``."""
    common, table, pair, model = (
        _common_parser(),
        _table_parser(),
        _pair_parser(),
        _model_parser(),
    )
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Learn and apply maps between the embedding spaces of two models, on "
        "tabular exports (CSV, Parquet, .npy).",
        parents=[common],
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    fit = sub.add_parser(
        "fit",
        parents=[common, pair, table],
        help="fit a map from SRC's space into TGT's and save it",
        description="Join SRC and TGT on the id column, fit the method on "
        "the matched rows and save the model.",
    )
    fit.add_argument("--method", required=True, choices=sorted(METHODS))
    fit.add_argument("--model", required=True, help="where to save the model")
    fit.add_argument(
        "--model-format",
        choices=("skops", "joblib"),
        help="default: joblib for .joblib/.pkl names, else skops",
    )
    fit.add_argument("--force", action="store_true", help="overwrite an existing model file")
    fit.add_argument("--json", action="store_true", help="print the report as JSON")
    fit.add_argument(
        "--labels-column",
        metavar="COL",
        help="lambda-orth: class labels (in SRC or TGT) for the supervised contrastive term",
    )
    _method_options(fit)

    tr = sub.add_parser(
        "transform",
        parents=[common, model, table],
        help="map a table into the target space, batch by batch",
        description="Map every row of INPUT with MODEL; ids are kept.",
    )
    tr.add_argument("--input", required=True)
    tr.add_argument("--output", required=True)
    tr.add_argument("--force", action="store_true", help="overwrite an existing output")
    tr.add_argument(
        "--rows-per-batch",
        type=_positive_int,
        default=65536,
        metavar="N",
        help="rows per batch; memory is bounded by it (default 65536)",
    )
    tr.add_argument(
        "--output-form",
        choices=("same", "columns", "list"),
        default="same",
        help="numeric columns, one list column, or as the input (default)",
    )
    tr.add_argument(
        "--output-column",
        metavar="NAME",
        help="name of the output's list column (default: the input's, or 'embedding')",
    )
    tr.add_argument(
        "--device", type=_device, help="where to compute (default: the model's device)"
    )
    tr.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (it is only shown on a terminal anyway)",
    )

    ev = sub.add_parser(
        "evaluate",
        parents=[common, model, pair, table],
        help="retrieval metrics of MODEL on paired tables",
    )
    ev.add_argument(
        "--labels-column",
        metavar="COL",
        help="class labels (in SRC or TGT): adds CMC top-1 and mAP",
    )
    ev.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ev.add_argument("--device", type=_device, help="where to compute")

    gr = sub.add_parser(
        "grid",
        parents=[common, pair, table],
        help="cross-validated lambda grid with reference methods",
        description="Cross-validate LambdaOrthAligner over --lam values, "
        "with Procrustes and affine as reference rows; write "
        "a results table and a PNG plot.",
    )
    gr.add_argument(
        "--lam", type=_lam, nargs="+", required=True, help="lambda values, e.g. 0 4 12 inf"
    )
    gr.add_argument("--cv", type=_n_folds, default=5, help="number of folds (default 5)")
    gr.add_argument(
        "--output",
        required=True,
        metavar="RESULTS",
        help="results table (.csv, .parquet or .json)",
    )
    gr.add_argument(
        "--plot", metavar="PNG", help="plot of score against lambda (default: RESULTS with .png)"
    )
    gr.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    gr.add_argument("--force", action="store_true", help="overwrite existing outputs")
    _method_options(gr, grid=True)

    en = sub.add_parser(
        "encode",
        parents=[common, table],
        help="relative-anchor encoding of a table (and of a parallel one)",
        description="Encode INPUT as similarities to anchor items; with "
        "--parallel, encode another model's export of the same "
        "items against the same anchor items.",
    )
    en.add_argument("--input", required=True, help="the table to encode")
    en.add_argument("--output", required=True, help="where to write its encoding")
    en.add_argument(
        "--n-anchors",
        type=_positive_int,
        default=64,
        metavar="M",
        help="number of anchors, the width of the encoding (default 64)",
    )
    en.add_argument(
        "--anchors",
        default="random",
        choices=("random", "stratified", "kmeans", "kmeans_mixture", "fps", "param"),
        help="anchor strategy (default random); stratified needs --labels-column, "
        "param learns the anchors across INPUT and --parallel",
    )
    en.add_argument(
        "--similarity",
        default="cosine",
        choices=("cosine", "euclidean", "dot", "wip"),
        help="similarity to the anchors (default cosine; wip: whitened inner product)",
    )
    en.add_argument(
        "--normalize",
        choices=("l2", "standard"),
        help="post-process the encoding: unit rows, or each column standardised with "
        "its mean and deviation over the rows the anchors were fitted on (default: none)",
    )
    en.add_argument(
        "--labels-column",
        metavar="COL",
        help="class labels in INPUT, for --anchors stratified",
    )
    en.add_argument(
        "--seed", type=int, help="random_state of the anchor choice (repeatable encodings)"
    )
    en.add_argument(
        "--parallel",
        metavar="OTHER",
        help="another model's table of the same items (joined on the id column)",
    )
    en.add_argument(
        "--parallel-output", metavar="OTHER_OUT", help="where to write OTHER's encoding"
    )
    for what, meta in (
        ("id-column", "ID"),
        ("prefix", "PREFIX"),
        ("pattern", "REGEX"),
        ("vector-column", "NAME"),
    ):
        en.add_argument(
            f"--parallel-{what}",
            metavar=meta,
            help=f"OTHER's {what.replace('-', ' ')}, when it differs from INPUT's",
        )
    en.add_argument("--model", help="also save the fitted encoder here")
    en.add_argument("--force", action="store_true", help="overwrite existing outputs")
    en.add_argument(
        "--duplicates",
        choices=DUPLICATE_POLICIES,
        default="error",
        help="ids on several rows of INPUT or OTHER: an error (default), keep the first "
        "or last row, or drop every such id",
    )
    en.add_argument("--device", type=_device, help="where to compute")
    _document_device(sub)
    return parser


# One behaviour for every command: a GPU that was asked for and is absent is an error, so a
# batch job never runs (slowly) somewhere else than its command line says.
_DEVICE_NOTE = "; a CUDA device torch cannot see is an error (exit status 1)"


def _document_device(subparsers):
    for command in subparsers.choices.values():
        for action in command._actions:
            if action.dest == "device" and _DEVICE_NOTE not in (action.help or ""):
                action.help = (action.help or "where to compute") + _DEVICE_NOTE


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
    with _termination_as_interrupt():
        try:
            parser = build_parser()
            args = parser.parse_args(argv)
            # The commands import torch, scikit-learn and pandas: seconds, in which an
            # interrupt gets the usual one line too.
            from . import _commands as _cli_commands
        except KeyboardInterrupt as exc:
            return _interrupted(exc)
        return _run(getattr(_cli_commands, f"run_{args.command}"), args)


def _run(command, args):
    with warnings.catch_warnings():
        if not args.debug:
            warnings.showwarning = _show_warning
        try:
            _check_device(args)
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


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler, ``timeout``, ``kill``) raised where the program runs.

    A KeyboardInterrupt, so every clean-up that handles Ctrl-C (removing a temporary
    output file, restoring the existing one) handles it too.
    """


def _raise_terminated(signum, frame):
    # A second SIGTERM while the first one's clean-up runs must not cut it short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated(signum)


@contextmanager
def _termination_as_interrupt():
    """Turn SIGTERM into :class:`Terminated` inside the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupted(exc):
    """The one line and the exit status of an interrupted run: 130 (SIGINT), 143 (SIGTERM)."""
    if isinstance(exc, Terminated):
        _error("terminated (SIGTERM); no output was written")
        return 128 + signal.SIGTERM
    _error("interrupted; no output was written")
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
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

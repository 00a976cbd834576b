"""Which files each command reads and writes, and the one rule every command obeys.

The rule: no file a command writes (its outputs, a model, a report, the report's figure,
a plot) may be one of its inputs or another of its outputs.  It is checked from the parsed
options alone, in :func:`check_files`, before the command does any work, so a run that
would overwrite what it reads (or write one output over another) is refused up front and
leaves everything as it was.  Derived names (the figure written beside ``--report``, the
plot beside ``grid --output``) come from here too, so the command and the check agree.

Every command lists its files in :data:`FILES`; a test checks that every command of the
parser is listed, so a new command cannot skip the rule.
"""

import os
from pathlib import Path

from ..io._common import POSTGRES_SCHEMES, InputError, redact_uri

__all__ = ["FILES", "check_files", "grid_plot_path", "report_figure_path"]


def report_figure_path(report):
    """The figure ``evaluate --report`` writes beside the Markdown (same name, .png)."""
    return Path(report).with_suffix(".png")


def grid_plot_path(args):
    """The plot ``grid`` draws: ``--plot``, else RESULTS with .png; None with --no-plot."""
    if args.no_plot:
        return None
    return args.plot or str(Path(args.output).with_suffix(".png"))


def _option(name):
    return lambda args: getattr(args, name, None)


def _report_figure(args):
    return report_figure_path(args.report) if args.report else None


# command -> (inputs, outputs), each a tuple of (what the error calls it, how to get it).
FILES = {
    "fit": (
        (("--source", _option("source")), ("--target", _option("target"))),
        (("--model", _option("model")),),
    ),
    "transform": (
        (("--input", _option("input")), ("--model", _option("model"))),
        (("--output", _option("output")),),
    ),
    "evaluate": (
        (
            ("--source", _option("source")),
            ("--target", _option("target")),
            ("--model", _option("model")),
        ),
        (("--report", _option("report")), ("--report's figure", _report_figure)),
    ),
    "grid": (
        (("--source", _option("source")), ("--target", _option("target"))),
        (("--output", _option("output")), ("--plot", grid_plot_path)),
    ),
    "encode": (
        (("--input", _option("input")), ("--parallel", _option("parallel"))),
        (
            ("--output", _option("output")),
            ("--parallel-output", _option("parallel_output")),
            ("--model", _option("model")),
        ),
    ),
    "search": (
        (
            ("--gallery", _option("gallery")),
            ("--queries", _option("queries")),
            ("--model", _option("model")),
        ),
        (("--output", _option("output")),),
    ),
    "export": (
        (("--model", _option("model")), ("--encoder", _option("encoder"))),
        (("--output", _option("output")),),
    ),
    "inspect": ((("--model", _option("model")),), ()),
    # rollback restores a version inside the table it names: no file is written beside it.
    "rollback": ((("--table", _option("table")),), ()),
    # The upgrade commands write inside the store table they name.
    "backfill": ((("--table", _option("table")), ("--vectors", _option("vectors"))), ()),
    "status": ((("--table", _option("table")),), ()),
    "cutover": ((("--table", _option("table")),), ()),
}


def _resolve(args, entries):
    pairs = ((flag, get(args)) for flag, get in entries)
    return [(flag, str(path)) for flag, path in pairs if path]


def _same_file(a, b):
    """Whether two names denote one file: the same resolved path, or (both existing) the
    same inode, which also catches hard links."""
    pa, pb = Path(a), Path(b)
    if pa.resolve() == pb.resolve():
        return True
    try:
        return pa.exists() and pb.exists() and os.path.samefile(pa, pb)
    except OSError:
        return False


def check_files(args):
    """Refuse a command line whose outputs overlap its inputs or one another.

    Raises
    ------
    InputError
        ``PATH: is also an input of this command (...)`` or
        ``FLAG and FLAG name the same file PATH``.
    """
    if args.command not in FILES:
        raise InputError(f"internal error: the files of command {args.command!r} are not listed")
    input_entries, output_entries = FILES[args.command]
    inputs = _resolve(args, input_entries)
    outputs = _resolve(args, output_entries)
    for out_flag, out in outputs:
        for in_flag, source in inputs:
            if _same_file(out, source):
                hint = ""
                in_place = out.rstrip("/").endswith(".lance") or out.lower().startswith(
                    POSTGRES_SCHEMES
                )
                if args.command == "transform" and in_place:
                    hint = "; pass --replace (not --output) to migrate a table in place"
                raise InputError(
                    f"is also an input of this command ({out_flag} is {in_flag}){hint}",
                    path=redact_uri(out),
                )
    for i, (flag, path) in enumerate(outputs):
        for other_flag, other in outputs[:i]:
            if _same_file(path, other):
                raise InputError(f"{flag} and {other_flag} name the same file {path}")

"""The argument parser of ``sklearn-compat``: one small builder per command.

Options shared by several commands come from parent parsers (tables, pairs, models); the
method options are declared once in :mod:`._registry` and added by
:func:`._registry.add_method_options`.  A new command is a new ``_add_<name>`` function
here and a ``run_<name>`` in :mod:`._commands`.
"""

import argparse

from ..io._common import DUPLICATE_POLICIES
from ._registry import METHODS, add_method_options, device_name, lam_value, positive_int

__all__ = ["PROG", "build_parser"]

PROG = "sklearn-compat"

# Rows per batch of ``transform``; memory is bounded by it.
DEFAULT_ROWS_PER_BATCH = 16384


def _n_folds(text):
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"cross-validation needs at least 2 folds, got {value}")
    return value


def _csls_neighbours(text):
    """``--csls K``: a positive int, or "auto" (the searcher's default)."""
    return "auto" if text == "auto" else positive_int(text)


def _parent():
    return argparse.ArgumentParser(add_help=False)


def _common_parser():
    p = _parent()
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return p


def _table_parser():
    p = _parent()
    g = p.add_argument_group("table columns")
    g.add_argument(
        "--id-column",
        metavar="ID",
        help="the id column that pairs source and target rows (without one, rows are "
        "paired by position and the tables must have the same row count; a plain 2-d "
        ".npy array has ids = row numbers)",
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


def _add_duplicates(parser, what):
    parser.add_argument(
        "--duplicates",
        choices=DUPLICATE_POLICIES,
        default="error",
        help=f"ids on several rows of {what}: an error (default), keep the first or last "
        "row, or drop every such id",
    )


def _pair_parser():
    p = _parent()
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
    _add_duplicates(g, "one table")
    return p


def _model_parser():
    p = _parent()
    p.add_argument("--model", required=True, help="model file written by 'fit'")
    p.add_argument(
        "--trust",
        action="store_true",
        help="load model files holding types that are not this package's own "
        "(and joblib/pickle files); only for files you trust",
    )
    return p


def _add_force(parser, what="existing outputs"):
    parser.add_argument("--force", action="store_true", help=f"overwrite {what}")


def _add_device(parser, help="where to compute"):
    parser.add_argument("--device", type=device_name, help=help)


def _add_labels_column(parser, help):
    parser.add_argument("--labels-column", metavar="COL", help=help)


def _add_fit(sub, parents):
    fit = sub.add_parser(
        "fit",
        parents=[parents["common"], parents["pair"], parents["table"]],
        help="fit a map from SRC's space into TGT's and save it",
        description="Join SRC and TGT on the id column, fit the method on "
        "the matched rows and save the model.  --method unpaired joins nothing: it "
        "learns from all rows of both tables (and --seed-pairs, if given).",
    )
    fit.add_argument("--method", required=True, choices=sorted(METHODS))
    fit.add_argument("--model", required=True, help="where to save the model")
    fit.add_argument(
        "--model-format",
        choices=("skops", "joblib"),
        help="default: joblib for .joblib/.pkl names, else skops",
    )
    _add_force(fit, "an existing model file")
    fit.add_argument(
        "--holdout",
        type=_fraction,
        metavar="F",
        help="keep this share of the pairs aside (not fitted on) and store the model's "
        "retention on them in the model file, for 'transform --min-retention'",
    )
    fit.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_labels_column(
        fit, "lambda-orth: class labels (in SRC or TGT) for the supervised contrastive term"
    )
    fit.add_argument(
        "--seed-pairs",
        metavar="FILE",
        help="unpaired: a CSV or Parquet table of known matches, first column a SRC id, "
        "second a TGT id (row numbers from 0 when no --id-column is given)",
    )
    add_method_options(fit)


def _add_transform(sub, parents):
    tr = sub.add_parser(
        "transform",
        parents=[parents["common"], parents["model"], parents["table"]],
        help="map a table into the target space, batch by batch",
        description="Map every row of INPUT with MODEL; ids are kept.",
    )
    tr.add_argument(
        "--input",
        required=True,
        help="a table, or a LanceDB DIR/NAME.lance, Chroma DIR::NAME or Postgres URI::TABLE",
    )
    tr.add_argument("--output", help="where to write (a new store table for a store input)")
    _add_force(tr, "an existing output")
    _add_store_options(tr)
    tr.add_argument(
        "--rows-per-batch",
        type=positive_int,
        default=DEFAULT_ROWS_PER_BATCH,
        metavar="N",
        help=f"rows per batch; memory is bounded by it (default {DEFAULT_ROWS_PER_BATCH})",
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
    _add_device(tr, "where to compute (default: the model's device)")
    tr.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (it is only shown on a terminal anyway)",
    )


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _retention(text):
    """A retention threshold: a number in [0, 1] (a NaN would pass every comparison)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text}")
    return value


def _add_store_options(tr):
    g = tr.add_argument_group("migrations (vector stores)")
    g.add_argument(
        "--resume",
        action="store_true",
        help="finish an interrupted migration into a store (finished batches are kept)",
    )
    g.add_argument(
        "--replace",
        action="store_true",
        help="migrate --input in place once every new vector is written and checked "
        "(LanceDB: a new version; Postgres: one transaction that keeps the old vectors and "
        "rebuilds the vector index); 'sklearn-compat rollback' restores the old vectors",
    )
    g.add_argument(
        "--min-retention",
        type=_retention,
        metavar="R",
        help="refuse unless the model's held-out retention (fit --holdout) is at least R",
    )
    g.add_argument(
        "--add-column",
        metavar="NAME",
        help="write the mapped vectors into a new vector column NAME of --input (the old "
        "column and its index keep serving; a Chroma collection gets a sibling "
        "collection); resumable: run it again to finish. Then 'backfill', 'status', "
        "'cutover'",
    )


_STORE_METAVAR = "STORE"
_STORE_HELP = (
    "a vector store table: LanceDB DIR/NAME.lance, Chroma DIR::NAME, Postgres URI::TABLE "
    "or Qdrant qdrant:DIR::NAME"
)


def _add_rollback(sub, parents):
    rb = sub.add_parser(
        "rollback",
        parents=[parents["common"]],
        help="undo the last 'transform --replace' or 'cutover' of a store table, bit for "
        "bit (run again to redo it)",
    )
    rb.add_argument("--table", required=True, metavar=_STORE_METAVAR, help=_STORE_HELP)
    rb.add_argument(
        "--to-version",
        type=positive_int,
        metavar="N",
        help="LanceDB: restore this version (default: the one the last migration replaced)",
    )


def _add_backfill(sub, parents):
    bf = sub.add_parser(
        "backfill",
        parents=[parents["common"]],
        help="write the new model's own vectors into an added column, by id",
        description="Replace the mapped vectors of some rows of --column by the new "
        "model's own (from --vectors, any table this command line reads), bit for bit, "
        "each row marked native; ids the table does not hold are named and never "
        "inserted. The same backfill twice changes nothing; an interrupted one is "
        "finished by running it again.",
    )
    bf.add_argument("--table", required=True, metavar=_STORE_METAVAR, help=_STORE_HELP)
    bf.add_argument("--column", required=True, metavar="NAME", help="the added vector column")
    bf.add_argument(
        "--vectors",
        required=True,
        metavar="EXPORT",
        help="the new model's vectors (a table); written as float32, what the stores hold: "
        "float64 values are rounded to the nearest float32, and a value beyond float32's "
        "range is refused (one line naming its row, id and column; nothing written)",
    )
    bf.add_argument("--id-column", required=True, metavar="ID", help="EXPORT's id column")
    bf.add_argument("--vector-column", metavar="NAME", help="EXPORT's list-valued column")
    bf.add_argument("--prefix", help="EXPORT's embedding columns: numeric columns with PREFIX")
    bf.add_argument(
        "--refit",
        action="store_true",
        help="then re-fit the map on the native rows (old column, new column) with the "
        "same method and settings; kept only if it retrieves the rows still mapped better "
        "than the current map (own-item top-1 of new-model queries on native pairs kept "
        "aside that neither map was fitted on, by more than 2 paired SE; both printed), "
        "and the rows still mapped are mapped again",
    )
    bf.add_argument(
        "--rows-per-batch",
        type=positive_int,
        default=DEFAULT_ROWS_PER_BATCH,
        metavar="N",
        help=f"rows per batch; memory is bounded by it (default {DEFAULT_ROWS_PER_BATCH})",
    )
    _add_device(bf, "where to compute the refit")


def _add_status(sub, parents):
    st = sub.add_parser(
        "status",
        parents=[parents["common"]],
        help="how far the upgrade of a store table is: its vector columns and ledger",
        description="Per vector column: dimension, rows, mapped (by which model, since "
        "when), native, missing; the ledger of migrations, backfills, refits and "
        "cutovers; the held-out retention of the current map.",
    )
    st.add_argument("--table", required=True, metavar=_STORE_METAVAR, help=_STORE_HELP)
    st.add_argument("--json", action="store_true", help="print JSON")


def _add_cutover(sub, parents):
    cu = sub.add_parser(
        "cutover",
        parents=[parents["common"]],
        help="serve an added column under the old column's name (rollback undoes it)",
        description="The added column is served under the name of the column it was "
        "added beside (queries unchanged); the old one is kept under a name 'status' "
        "shows. One transaction or table version; 'sklearn-compat rollback' undoes it.",
    )
    cu.add_argument("--table", required=True, metavar=_STORE_METAVAR, help=_STORE_HELP)
    cu.add_argument("--column", required=True, metavar="NAME", help="the added vector column")
    cu.add_argument(
        "--min-native",
        type=_retention,
        metavar="R",
        help="refuse unless at least this share of the rows hold the new model's own "
        "vectors (native)",
    )


def _add_evaluate(sub, parents):
    ev = sub.add_parser(
        "evaluate",
        parents=[parents["common"], parents["model"], parents["pair"], parents["table"]],
        help="retrieval metrics of MODEL on paired tables",
    )
    _add_labels_column(ev, "class labels (in SRC or TGT): adds CMC top-1 and mAP")
    ev.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ev.add_argument(
        "--report",
        metavar="MD",
        help="also write the bridge-or-reindex report (Markdown) here, its figure beside it "
        "(same name, .png); SRC = new model, TGT = old model, held-out rows (the report "
        "says so when they are MODEL's own training pairs)",
    )
    _add_force(ev, "an existing report")
    _add_device(ev)


def _add_grid(sub, parents):
    gr = sub.add_parser(
        "grid",
        parents=[parents["common"], parents["pair"], parents["table"]],
        help="cross-validated lambda grid with reference methods",
        description="Cross-validate LambdaOrthAligner over --lam values, "
        "with Procrustes and affine as reference rows; write "
        "a results table and a PNG plot.",
    )
    gr.add_argument(
        "--lam", type=lam_value, nargs="+", required=True, help="lambda values, e.g. 0 4 12 inf"
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
    _add_force(gr)
    add_method_options(gr, grid=True)


def _add_encode(sub, parents):
    en = sub.add_parser(
        "encode",
        parents=[parents["common"], parents["table"]],
        help="relative-anchor encoding of a table (and of a parallel one)",
        description="Encode INPUT as similarities to anchor items; with "
        "--parallel, encode another model's export of the same "
        "items against the same anchor items.",
    )
    en.add_argument("--input", required=True, help="the table to encode")
    en.add_argument("--output", required=True, help="where to write its encoding")
    en.add_argument(
        "--n-anchors",
        type=positive_int,
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
        choices=("standard", "l2", "none"),
        help="post-process the encoding: each column standardised with its mean and "
        "deviation over the rows the anchors were fitted on, unit rows (default), or none",
    )
    _add_labels_column(en, "class labels in INPUT, for --anchors stratified")
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
    _add_force(en)
    _add_duplicates(en, "INPUT or OTHER")
    _add_device(en)


def _add_search(sub, parents):
    se = sub.add_parser(
        "search",
        parents=[parents["common"], parents["model"], parents["table"]],
        help="search an old gallery with new-model queries mapped by MODEL",
        description="Map every row of NEW with MODEL and write its K nearest rows of OLD "
        "(CSLS over cosines by default, both centred by the target mean): one row per "
        "query and rank with the query id, the gallery id and the score.",
    )
    se.add_argument("--gallery", required=True, metavar="OLD", help="the old model's table")
    se.add_argument("--queries", required=True, metavar="NEW", help="the new model's table")
    se.add_argument(
        "-k",
        "--n-neighbors",
        type=positive_int,
        default=10,
        metavar="K",
        help="gallery items per query (default 10)",
    )
    se.add_argument("--output", required=True, help="results table (.csv, .parquet or .json)")
    se.add_argument(
        "--gallery-form",
        choices=("auto", "centered", "raw"),
        default="auto",
        help="compare centred by the target mean where MODEL was fitted centred (auto, "
        "the default), always centred, or raw",
    )
    csls = se.add_mutually_exclusive_group()
    csls.add_argument(
        "--csls",
        type=_csls_neighbours,
        default="auto",
        metavar="K",
        help="rank by CSLS with K neighbours, each gallery item's crowding measured among "
        "the other gallery items (score = 2 cos - both penalties); default auto: 10 (at "
        "most the gallery's size less one), or plain cosine where MODEL was trained for "
        "retrieval with cosine",
    )
    csls.add_argument(
        "--no-csls",
        dest="csls",
        action="store_const",
        const=None,
        help="rank by plain cosine",
    )
    _add_force(se, "an existing output")
    _add_device(se)


def _add_export(sub, parents):
    ex = sub.add_parser(
        "export",
        parents=[parents["common"], parents["model"]],
        help="write MODEL's linear map for a serving stack (npz, FAISS, ONNX, "
        "sentence-transformers)",
        description="npz: arrays W and b with y = x @ W + b; faiss: a LinearTransform to "
        "wrap an index of old embeddings (IndexPreTransform); onnx: a MatMul + Add graph; "
        "sentence-transformers: a copy of the new model's folder (--encoder) with the map "
        "appended as a Dense module, whose encode() returns vectors in the old space.",
    )
    ex.add_argument(
        "--format", required=True, choices=("npz", "faiss", "onnx", "sentence-transformers")
    )
    ex.add_argument("--output", required=True, metavar="FILE|DIR")
    ex.add_argument(
        "--encoder",
        metavar="DIR",
        help="sentence-transformers only (required there): the folder of the model whose "
        "embeddings MODEL maps (as written by SentenceTransformer.save); it is only read",
    )
    ex.add_argument(
        "--normalize-input",
        action="store_true",
        help="sentence-transformers only: normalise the encoder's vectors before the map "
        "(for a map fitted on encode(normalize_embeddings=True) of an encoder without "
        "its own Normalize module)",
    )
    _add_force(ex, "an existing output")


def _add_inspect(sub, parents):
    ins = sub.add_parser(
        "inspect",
        parents=[parents["common"], parents["model"]],
        help="print MODEL's fingerprint (version, estimator, widths, training rows)",
    )
    ins.add_argument("--json", action="store_true", help="print JSON")


# The commands in the order ``--help`` lists them.
COMMANDS = (
    _add_fit,
    _add_transform,
    _add_evaluate,
    _add_grid,
    _add_encode,
    _add_search,
    _add_export,
    _add_inspect,
    _add_backfill,
    _add_status,
    _add_cutover,
    _add_rollback,
)


def build_parser():
    """The argument parser of ``sklearn-compat``."""
    from .. import __version__

    parents = {
        "common": _common_parser(),
        "table": _table_parser(),
        "pair": _pair_parser(),
        "model": _model_parser(),
    }
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Learn and apply maps between the embedding spaces of two models, on "
        "tabular exports (CSV, Parquet, .npy) and vector stores (LanceDB, Chroma).",
        parents=[parents["common"]],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(sub, parents)
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

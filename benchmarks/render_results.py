"""Render benchmarks/results/*.json into benchmarks/RESULTS.md, the benchmarks page.

Each benchmark script writes its latest figures to ``benchmarks/results/<name>.json``
(schema in ``benchmarks/_common.py``, :func:`write_results`).  This script renders every
such file, one section per benchmark in the order of :data:`ORDER`, then any other file
in name order, into plain Markdown (MyST-compatible, no raw HTML), which the docs site
includes as its benchmarks page.  Earlier figures live in git history, not on the page.

    python benchmarks/render_results.py            # rewrite RESULTS.md
    python benchmarks/render_results.py --check    # exit 1 when RESULTS.md is stale
"""

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
PAGE = HERE / "RESULTS.md"

#: Sections in reading order: the estimators' fits, their defaults on real pairs, the query
#: path, the relative representation, the command line and stores, the applications, GPU.
ORDER = [
    "procrustes",
    "affine",
    "dask",
    "wide",
    "lambda",
    "lambda_fold_batching",
    "lambda_cv_vs_gridsearch",
    "lambda_intercept_choice",
    "lambda_intercept_cost",
    "alignment_table",
    "alignment_table_procrustes",
    "defaults",
    "refined_rounds",
    "anisotropic_pairs",
    "mnist_alignment_table",
    "metrics_speed",
    "query_latency",
    "query_path",
    "query_path_pairs",
    "relative",
    "relative_stitching",
    "cli_transform",
    "store_transform",
    "store_transform_pgvector",
    "retraining",
    "mixed_models",
    "unpaired",
    "unpaired_heldout",
    "unpaired_large",
    "unpaired_ceiling",
    "gpu",
]
REQUIRED = {
    "benchmark": str,
    "title": str,
    "command": str,
    "machine": str,
    "date": str,
    "notes": str,
    "tables": list,
}


def load_results(results_dir=RESULTS_DIR):
    """Every results file, checked against the schema, in page order."""
    records = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        check_record(record, path.name)
        records[path.stem] = record
    known = [records.pop(name) for name in ORDER if name in records]
    return known + [records[name] for name in sorted(records)]


def check_record(record, where):
    """Raise ValueError naming ``where`` when ``record`` does not follow the schema."""
    for key, kind in REQUIRED.items():
        if not isinstance(record.get(key), kind):
            raise ValueError(f"{where}: {key!r} must be a {kind.__name__}")
    for number, tab in enumerate(record["tables"]):
        columns, rows = tab.get("columns"), tab.get("rows")
        if not isinstance(tab.get("title"), str) or not isinstance(columns, list):
            raise ValueError(f"{where}: table {number} needs a 'title' and 'columns'")
        if not isinstance(rows, list) or any(len(row) != len(columns) for row in rows):
            raise ValueError(f"{where}: table {number}: every row needs {len(columns)} cells")


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 1e5 or (value and abs(value) < 1e-3) else str(value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(tab):
    lines = []
    if tab["title"]:
        lines += [f"**{tab['title']}**", ""]
    lines.append("| " + " | ".join(_cell(c) for c in tab["columns"]) + " |")
    lines.append("|" + "---|" * len(tab["columns"]))
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in tab["rows"]]
    return lines


def render(records):
    """The page's Markdown text."""
    lines = [
        "# Benchmark results",
        "",
        "This page is generated: `python benchmarks/render_results.py` renders it from",
        "`benchmarks/results/*.json`, which each benchmark script writes (its `--json`",
        "option). Edit those files or rerun the benchmarks, not this page. It holds the",
        "latest figure of each benchmark with its machine and date; earlier figures are in",
        "git history. Speed figures are ratios against a reference measured in the same run;",
        'a "loaded" machine was shared with other jobs, so its absolute seconds are noisy.',
        "",
    ]
    for record in records:
        lines += [
            f"## {record['title']}",
            "",
            # Where, when and how in one paragraph with the notes: the page stays short.
            " ".join(
                filter(
                    None,
                    [
                        f"*{record['date']}, {record['machine']}.*",
                        f"Command: `{record['command']}`.",
                        record["notes"].strip(),
                    ],
                )
            ),
            "",
        ]
        for tab in record["tables"]:
            lines += _table(tab) + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only check that RESULTS.md is up to date"
    )
    args = parser.parse_args(argv)
    text = render(load_results())
    if args.check:
        if PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is stale: run python benchmarks/render_results.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
    "qdrant_transform",
    "backfill",
    "refit",
    "retraining",
    "mixed_models",
    "unpaired",
    "unpaired_heldout",
    "unpaired_large",
    "unpaired_ceiling",
    "unpaired_disjoint",
    "unpaired_disjoint_heldout_d",
    "unpaired_disjoint_7400",
    "unpaired_last_stage",
    "gpu",
]
#: Records whose per-run tables the user guide prints in full: the page shows one summary
#: row per pair (:func:`_unpaired_summary`) and names the page with every run.
IN_FULL_ELSEWHERE = {
    "unpaired": "docs/user_guide/unpaired.md",
    "unpaired_heldout": "docs/user_guide/unpaired.md",
    "unpaired_large": "docs/user_guide/unpaired.md",
}
# Benchmarks whose per-restart tables only a user guide page prints: here the heading, the
# run's paragraph and a pointer.
TABLES_ELSEWHERE = {
    "unpaired_disjoint": "docs/user_guide/unpaired.md",
    "unpaired_disjoint_heldout_d": "docs/user_guide/unpaired.md",
    "unpaired_disjoint_7400": "docs/user_guide/unpaired.md",
}
# Benchmarks whose first table (a summary) is shown here, the others only on a user guide
# page, which prints every one of their rows.
FIRST_TABLE_HERE = {"refit": "docs/user_guide/upgrade.md"}
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
        # The title line runs straight into its table (Markdown and MyST alike end the
        # paragraph there): one line less per table keeps the page short.
        lines.append(f"**{tab['title']}**")
    lines.append("| " + " | ".join(_cell(c) for c in tab["columns"]) + " |")
    lines.append("|" + "---|" * len(tab["columns"]))
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in tab["rows"]]
    return lines


def _unpaired_summary(tab):
    """One row per pair of an unpaired benchmark's per-run table: each setting's ratio of
    unpaired to supervised top-1, with ``(w)`` where the fit warned."""
    col = {name: i for i, name in enumerate(tab["columns"])}
    pairs, settings = {}, []
    for row in tab["rows"]:
        setting = row[col["setting"]]
        if setting not in settings:
            settings.append(setting)
        warned = " (w)" if row[col["warned"]] == "yes" else ""
        cells = pairs.setdefault(row[col["pair"]], {"supervised": row[col["supervised top-1"]]})
        cells[setting] = f"{_cell(row[col['ratio']])}{warned}"
    columns = ["pair", "supervised top-1"] + [f"{s}: ratio" for s in settings]
    rows = [
        [pair, cells["supervised"]] + [cells.get(s, "") for s in settings]
        for pair, cells in pairs.items()
    ]
    title = f"{tab['title']}: unpaired / supervised top-1, (w) = warned" if tab["title"] else ""
    return {"title": title, "columns": columns, "rows": rows}


def render(records):
    """The page's Markdown text."""
    lines = [
        "# Benchmark results",
        "",
        "This page is generated: `python benchmarks/render_results.py` renders it from "
        "`benchmarks/results/*.json`, which each benchmark script writes (its `--json` "
        "option). Edit those files or rerun the benchmarks, not this page. It holds the "
        "latest figure of each benchmark with its machine and date; earlier figures are in "
        "git history. Speed figures are ratios against a reference measured in the same run; "
        'a "loaded" machine was shared with other jobs, so its absolute seconds are noisy.',
        "",
    ]
    previous = None
    for record in records:
        # Two records of one benchmark with the same title (two files of one script) share
        # one heading.
        if record["title"] != previous:
            # The heading runs straight into its paragraph: a line less per section.
            lines += [f"## {record['title']}"]
        previous = record["title"]
        lines += [
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
        if record["benchmark"] in TABLES_ELSEWHERE:
            lines[-2] += f" Every restart: `{TABLES_ELSEWHERE[record['benchmark']]}`."
            continue
        tables = record["tables"]
        if record["benchmark"] in FIRST_TABLE_HERE:
            lines[-2] += f" Every figure: `{FIRST_TABLE_HERE[record['benchmark']]}`."
            tables = tables[:1]
        elsewhere = IN_FULL_ELSEWHERE.get(record["benchmark"])
        for tab in tables:
            if elsewhere:
                tab = _unpaired_summary(tab)
            lines += _table(tab) + [""]
        if elsewhere:
            lines += [f"Every run (start, rounds, confidence, seconds): `{elsewhere}`.", ""]
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

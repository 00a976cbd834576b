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
    """{row label: (top-1, cosine)} from the quickstart's printed table."""
    rows = {}
    for line in stdout.splitlines():
        parts = line.split()
        try:
            top1, cosine = float(parts[-2]), float(parts[-1])
        except (IndexError, ValueError):
            continue
        rows[line[:30].strip()] = (top1, cosine)
    return rows


def test_quickstart_runs_and_alignment_improves_retrieval():
    result = _run("quickstart.py")
    assert result.returncode == 0, result.stderr
    rows = _table(result.stdout)
    before = rows["no alignment"]
    assert set(rows) >= {"no alignment", "Procrustes", "Normalizer + Procrustes"}, result.stdout
    for name in ("Procrustes", "Procrustes(center, scale)", "Normalizer + Procrustes"):
        top1, cosine = rows[name]
        # Without a map the spaces are unrelated (chance is 1/719); with one, most
        # held-out items find their partner.
        assert top1 > 0.5 > 0.1 > before[0], result.stdout
        assert cosine > 0.9 > before[1], result.stdout

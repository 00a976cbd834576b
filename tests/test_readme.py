"""Every ```python block in README.md runs as written.

Each block runs on its own (a fresh namespace), so blocks must be self-contained.  A block
preceded by the line ``<!-- needs-shared-data -->`` uses the project's shared feature file
and is skipped when that file is absent.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHARED_FEATURES = ROOT.parent / "shared" / "data" / "mnist5k_features.npz"  # as conftest.py
SHARED_MARKER = "<!-- needs-shared-data -->"
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.DOTALL)


def _blocks():
    text = README.read_text(encoding="utf-8")
    blocks = []
    for match in BLOCK.finditer(text):
        line = text[: match.start("code")].count("\n") + 1
        needs_shared = match.group("before").strip() == SHARED_MARKER
        marks = [pytest.mark.shared_data] if needs_shared else []
        # Padding keeps tracebacks pointing at README.md's own line numbers.
        code = "\n" * (line - 1) + match.group("code")
        blocks.append(pytest.param(code, needs_shared, id=f"README.md:{line}", marks=marks))
    return blocks


def test_readme_has_python_examples():
    assert len(_blocks()) >= 1


@pytest.mark.parametrize("code, needs_shared", _blocks())
def test_readme_python_block_runs(code, needs_shared):
    if needs_shared and not SHARED_FEATURES.exists():
        pytest.skip(f"{SHARED_FEATURES} not present")
    exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})

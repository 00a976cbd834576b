"""Every ```python block of README.md and of the documentation pages runs as written.

The pages are docs/**/*.md (the user guide, getting started; not the generated ones).  Each
block runs on its own (a fresh namespace, as ``__main__``, so a block guarded by
``if __name__ == "__main__":`` runs too), so blocks must be self-contained.  Real data come
from the package (``sklearn_compat.datasets``), so no block is ever skipped.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GENERATED = ("_build", "auto_examples", "generated")
PAGES = [README] + sorted(
    path
    for path in (ROOT / "docs").rglob("*.md")
    if not set(GENERATED) & set(path.relative_to(ROOT / "docs").parts)
)
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.DOTALL)


def _blocks(pages=PAGES):
    blocks = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(ROOT).as_posix()
        for match in BLOCK.finditer(text):
            line = text[: match.start("code")].count("\n") + 1
            # Padding keeps tracebacks pointing at the page's own line numbers.
            code = "\n" * (line - 1) + match.group("code")
            blocks.append(pytest.param(page, code, id=f"{name}:{line}"))
    return blocks


def test_readme_has_python_examples():
    assert len(_blocks([README])) >= 1


def test_user_guide_pages_have_python_examples():
    # A page that explains how to use the library shows it; reference-only pages are exempt,
    # and so is the upgrade walkthrough, whose shell blocks tests/test_upgrade_page.py runs.
    exempt = {"index.md", "command_line.md", "vector_stores.md", "unpaired.md", "upgrade.md"}
    guide = sorted((ROOT / "docs" / "user_guide").glob("*.md"))
    assert guide, "no user guide pages"
    bare = [page.name for page in guide if page.name not in exempt and not _blocks([page])]
    assert not bare, f"user guide pages without a runnable example: {bare}"


@pytest.mark.parametrize("page, code", _blocks())
def test_python_block_runs(page, code):
    exec(compile(code, str(page), "exec"), {"__name__": "__main__"})


def _commands(text):
    """The ``sklearn-compat`` command lines of a page's bash blocks, continuations joined."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [" ".join(line.split()) for line in lines if line.startswith("sklearn-compat ")]


def test_readme_vector_store_commands_are_the_guides():
    # The README's store commands are run, with the data they need, by the vector stores
    # page's test (tests/test_stores.py); they must be the same commands.
    readme = README.read_text(encoding="utf-8").split("## From a vector store", 1)[1]
    page = (ROOT / "docs" / "user_guide" / "vector_stores.md").read_text(encoding="utf-8")
    shown = _commands(readme.split("\n## ", 1)[0])
    assert [c.split()[1] for c in shown] == ["fit", "transform", "rollback"]
    assert set(shown) <= set(_commands(page))

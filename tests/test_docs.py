"""The documentation users get is self-contained: no pointer to a file they do not have."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = [ROOT / "README.md"] + [
    path
    for folder in ("sklearn_compat", "examples", "benchmarks")
    for path in sorted((ROOT / folder).rglob("*"))
    if path.suffix in {".py", ".md", ".txt", ".rst", ".toml", ".cfg"}
]
DOCS_PATH = re.compile(r"\bdocs/[\w./-]*\.md\b")


def _text(path):
    return path.read_text(encoding="utf-8")


def test_no_private_notes_cited():
    # The team's notes are not shipped; docstrings cite the papers and docs/ instead.
    offenders = [str(path.relative_to(ROOT)) for path in SHIPPED if "METHODS.md" in _text(path)]
    assert not offenders, f"cite the papers or docs/methods.md, not METHODS.md: {offenders}"


def test_cited_docs_pages_exist():
    cited = {
        (path.relative_to(ROOT), match)
        for path in SHIPPED
        for match in DOCS_PATH.findall(_text(path))
    }
    assert any(match == "docs/methods.md" for _, match in cited)
    missing = sorted(f"{where}: {match}" for where, match in cited if not (ROOT / match).is_file())
    assert not missing, f"docs pages cited but absent: {missing}"


def test_cited_sections_exist():
    # 'see docs/methods.md, section "Name"' must name a heading of that page.
    pattern = re.compile(r'docs/methods\.md,\s+section\s+"([^"]+)"')
    headings = set(re.findall(r"^#+ (.+)$", _text(ROOT / "docs" / "methods.md"), re.M))
    cited = {" ".join(name.split()) for path in SHIPPED for name in pattern.findall(_text(path))}
    assert cited, "no section of docs/methods.md is cited"
    assert cited <= headings, sorted(cited - headings)

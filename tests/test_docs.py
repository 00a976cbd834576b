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


def test_api_reference_names_every_public_name():
    # The site's API reference (docs/api/index.rst) lists every entry of the package's and
    # its public modules' __all__, so nothing public goes undocumented.
    import importlib

    reference = _text(ROOT / "docs" / "api" / "index.rst")
    listed = set(re.findall(r"^\s+([A-Za-z_]\w*)\s*$", reference, re.M))
    listed |= set(re.findall(r"^\.\. (?:autodata|py:data):: (?:[\w.]+\.)?(\w+)", reference, re.M))
    missing = []
    public_modules = ("sklearn_compat", "sklearn_compat.metrics", "sklearn_compat.io")
    for module in (*public_modules, "sklearn_compat.datasets"):
        for name in importlib.import_module(module).__all__:
            if name in {"metrics", "exceptions"}:  # documented as sections of the page
                assert f"``sklearn_compat.{name}``" in reference
            elif name not in listed:
                missing.append(f"{module}.{name}")
    for name in importlib.import_module("sklearn_compat.exceptions").__all__:
        if name not in listed:
            missing.append(f"sklearn_compat.exceptions.{name}")
    assert not missing, f"public names absent from docs/api/index.rst: {missing}"


def test_user_guide_has_every_label():
    # Docstrings cite these as :ref:`label`; each page starts with its label line.
    labels = {
        "choosing_a_method",
        "centring",
        "lam_tradeoff",
        "relative_stitching",
        "query_path",
        "command_line",
        "vector_stores",
        "exports",
        "scaling_up",
        "applications",
        "unpaired",
    }
    guide = ROOT / "docs" / "user_guide"
    toctree = _text(guide / "index.md")
    for label in labels:
        assert f"\n{label}\n" in toctree, f"user_guide/{label} is not in the toctree"
        page = guide / f"{label}.md"
        if page.exists():  # vector_stores and unpaired are written on their own branches
            assert _text(page).startswith(f"({label})=\n"), page
    assert _text(ROOT / "docs" / "benchmarks.md").startswith("(benchmarks)=\n")


def test_gallery_has_enough_examples_and_figures():
    # Every examples/*.py is a gallery script: a reST title, executed by the docs build.
    scripts = sorted((ROOT / "examples").glob("[!_]*.py"))  # _*.py: helpers, not pages
    for script in scripts:
        lines = _text(script).split('"""', 2)[1].splitlines()
        assert len(lines) > 1 and set(lines[1]) == {"="}, f"{script.name}: no gallery title"
        assert len(lines[1]) >= len(lines[0]), f"{script.name}: title underline too short"
    with_figures = [s.name for s in scripts if "matplotlib" in _text(s)]
    assert len(scripts) >= 8 and len(with_figures) >= 4, with_figures


def test_the_query_path_page_says_what_its_first_block_prints():
    # The page's words about its example must be the example's numbers (it once called
    # 0.950 against 0.946 "far better").
    import contextlib
    import io

    text = _text(ROOT / "docs" / "user_guide" / "query_path.md")
    code = re.search(r"```python\n(.*?)\n```", text, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "query_path.md", "exec"), {"__name__": "__main__"})
    printed = dict(re.findall(r"^(raw|centered) top-1: ([\d.]+)$", out.getvalue(), re.M))
    assert set(printed) == {"raw", "centered"}, out.getvalue()
    for form, value in printed.items():
        assert f"{float(value):.3f}" in text, (form, value)
    assert "far better" not in text

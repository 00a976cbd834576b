"""The command line's modules import each other without a circle (issue 33, the house)."""

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[1] / "sklearn_compat" / "cli"


def _imports_within_cli(path):
    """Names of the ``sklearn_compat.cli`` modules that ``path`` imports (at any depth)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:  # ``from . import _commands``
                found.update(alias.name for alias in node.names)
    return found


def test_cli_import_graph_has_no_circle():
    graph = {p.stem: _imports_within_cli(p) for p in CLI.glob("*.py")}
    graph = {m: {n for n in names if n in graph} for m, names in graph.items()}

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, (*seen, n)))
                   for n in graph[start])  # fmt: skip

    circles = [m for m in graph if m != "__init__" and reaches(m, m)]
    assert circles == [], {m: sorted(graph[m]) for m in circles}


def test_the_command_line_module_imports_nothing_heavy():
    """``import sklearn_compat.cli`` loads no parser, numpy, torch or pandas: the signal
    handlers are installed before any of them (issue 32, item 6)."""
    import subprocess
    import sys

    code = (
        "import sys, sklearn_compat.cli as cli;"
        "heavy = [m for m in ('numpy', 'torch', 'pandas', 'sklearn', 'sklearn_compat.cli._parser')"
        " if m in sys.modules]; print(heavy)"
    )
    env = {"PYTHONPATH": str(CLI.parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "[]", out.stderr
    from sklearn_compat import cli
    from sklearn_compat.cli import _parser

    assert cli.PROG == _parser.PROG

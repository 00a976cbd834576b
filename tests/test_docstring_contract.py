"""Docstrings state contracts; measurements live on the benchmarks page.

Every docstring of every module under ``sklearn_compat/`` is read from the source (no import,
so optional dependencies do not hide a module), together with the command line's help texts
(the ``help=``, ``description=`` and ``epilog=`` strings given to argparse).

The rule for a *measured figure*, applied to a text after taking out what is not prose:

* taken out first: doctest examples (a ``>>>`` line, its ``...`` continuations and the output
  lines after it up to the next blank line), inline literals in double backquotes, ``:ref:``
  and other roles, ``.. versionadded::`` / ``.. versionchanged::`` / ``.. deprecated::`` lines,
  arXiv identifiers (``2103.03230``) and parameter settings written ``name=value``;
* then each of these counts as one figure:

  - a ratio: a number followed by ``x`` or ``×`` (``1.5x``, ``3 x``) but not by another
    number (``2,000 x 64`` is a shape);
  - a percentage: a number followed by ``%`` or ``percent``;
  - a duration or a size: a number followed by a unit among ``ns us µs ms s sec seconds min
    minutes h hours KB MB GB TB KiB MiB GiB TiB`` (``12 s``, ``40 MB``);
  - a decimal fraction: a number with two or more digits after the point (``0.973``), or any
    number with a point and a leading digit other than zero (``1.5``, ``13.2``), unless it
    already counted as one of the above.

A docstring (or help text) *carries measurements* when three or more figures are counted in it.
"""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sklearn_compat"
MAX_DOCSTRINGS_WITH_MEASUREMENTS = 3
FIGURES_MAKING_A_MEASUREMENT = 3
HELP_KEYWORDS = {"help", "description", "epilog"}

_NUMBER = r"(?<![\w.])\d+(?:[.,]\d+)*"
_UNITS = r"(?:ns|us|µs|ms|s|sec|seconds|min|minutes|h|hours|[KMGT]i?B)"
_FIGURE = re.compile(
    rf"{_NUMBER}\s?(?:x|×)(?![\w])(?!\s?\d)"  # ratio, not a shape such as 2,000 x 64
    rf"|{_NUMBER}\s?(?:%|percent\b)"  # percentage
    rf"|{_NUMBER}\s?{_UNITS}(?![\w])"  # duration or size
    r"|(?<![\w.])(?:0?\.\d{2,}|[1-9]\d*\.\d+)(?![\w.])"  # decimal fraction
)
_LITERAL = re.compile(r"``.+?``", re.S)
_ROLE = re.compile(r":\w+(?::\w+)?:`[^`]*`")
_SETTING = re.compile(r"\b\w+\s?=\s?[-+\w.]+")
_ARXIV = re.compile(r"(?<![\w.])\d{4}\.\d{4,5}(?:v\d+)?(?![\w.])")
_DIRECTIVE = re.compile(r"^\s*\.\. (?:versionadded|versionchanged|deprecated)::.*$", re.M)
_BENCHMARK_POINTER = re.compile(r"benchmarks/|RESULTS\.md")


def _without_examples(text):
    kept, in_example = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(">>>"):
            in_example = True
        elif in_example and not stripped:
            in_example = False
        if not in_example:
            kept.append(line)
    return "\n".join(kept)


def measured_figures(text):
    """The figures the module docstring's rule counts in ``text``."""
    prose = _without_examples(text)
    for pattern in (_DIRECTIVE, _LITERAL, _ROLE, _ARXIV, _SETTING):
        prose = pattern.sub(" ", prose)
    return _FIGURE.findall(prose)


def _help_text(node):
    # argparse help strings are literals, implicit concatenations or %-formatted literals.
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _help_text(node.left)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) else " " for part in node.values
        )
    return None


def _texts():
    """(where, text) for every docstring and command-line help text of the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(PACKAGE.parent).as_posix()
        nodes = [module] + [
            node
            for node in ast.walk(module)
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        for node in nodes:
            text = ast.get_docstring(node, clean=True)
            if text:
                found.append((f"{where}:{getattr(node, 'name', '<module>')}", text))
        for node in ast.walk(module):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    text = _help_text(keyword.value) if keyword.arg in HELP_KEYWORDS else None
                    if text:
                        found.append((f"{where}:{keyword.arg}@{node.lineno}", text))
    return found


TEXTS = _texts()


def test_the_package_has_docstrings_to_check():
    assert len(TEXTS) > 100


def test_no_docstring_points_into_benchmarks():
    # benchmarks/ and its RESULTS page are not shipped: cite :ref:`benchmarks` instead.
    offenders = [where for where, text in TEXTS if _BENCHMARK_POINTER.search(text)]
    assert not offenders, offenders


def test_few_docstrings_carry_measurements():
    heavy = {
        where: figures
        for where, text in TEXTS
        if len(figures := measured_figures(text)) >= FIGURES_MAKING_A_MEASUREMENT
    }
    assert len(heavy) <= MAX_DOCSTRINGS_WITH_MEASUREMENTS, heavy


@pytest.mark.parametrize(
    "text, expected",
    [
        ("top-1 rises from 0.412 to 0.973", ["0.412", "0.973"]),
        ("1.5x faster, 3 x the floor", ["1.5x", "3 x"]),
        ("12 s per fit, 40 MB of memory, 250 ms", ["12 s", "40 MB", "250 ms"]),
        ("within 2% or 13.2 percent", ["2%", "13.2 percent"]),
        ("1,000 rows in 2 batches of 64 columns, a 2,000 x 64 matrix", []),
        ("``alpha=0.5`` or alpha=1.0 with lam = 0.25", []),
        ("version 0.1, see :ref:`lam_tradeoff`, 1e-6, arXiv:2103.03230", []),
        ("    .. versionchanged:: 0.1.2\n       The default became ``'auto'``.", []),
        (">>> round(aligner.score(X, Y), 3)\n0.973\n\nThen 0.99 holds.", ["0.99"]),
    ],
)
def test_the_counting_rule(text, expected):
    assert measured_figures(text) == expected


# numpydoc codes that mean a section did not parse as written (prose read as parameters,
# parameters out of order or without a description, unknown sections, bad layout).
NUMPYDOC_PARSE_ERRORS = {"PR02", "PR03", "PR06", "PR07", "PR10"}


def _public_names():
    import inspect

    import sklearn_compat
    import sklearn_compat.io
    import sklearn_compat.metrics

    names = []
    for module in (sklearn_compat, sklearn_compat.metrics, sklearn_compat.io):
        for name in module.__all__:
            obj = getattr(module, name)
            if not callable(obj) or not hasattr(obj, "__qualname__"):
                continue
            names.append(f"{obj.__module__}.{obj.__qualname__}")
            if inspect.isclass(obj):
                names += [
                    f"{obj.__module__}.{obj.__qualname__}.{method}"
                    for method, member in vars(obj).items()
                    if not method.startswith("_") and callable(member) and member.__doc__
                ]
    return list(dict.fromkeys(names))


def test_public_docstrings_parse_as_numpydoc():
    validate = pytest.importorskip("numpydoc.validate").validate
    problems = [
        f"{name}: {code} {message}"
        for name in _public_names()
        for code, message in validate(name)["errors"]
        if code in NUMPYDOC_PARSE_ERRORS or code.startswith("GL")
    ]
    assert not problems, "\n".join(problems)

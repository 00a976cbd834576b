"""The user guide page "Upgrading a model in a vector store" runs as written and prints
what it shows: its bash blocks, in order, in an empty directory (the ``sklearn-compat``
lines through :func:`sklearn_compat.cli.main` in this process, the ``python`` heredocs and
scripts with ``exec``), their output compared with the page's ``text`` blocks."""

import contextlib
import io
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

from sklearn_compat.cli import main

pytest.importorskip("lancedb")
pytest.importorskip("sklearn_compat.datasets", reason="the shipped MNIST features")

PAGE = Path(__file__).resolve().parents[1] / "docs" / "user_guide" / "upgrade.md"
_BLOCK = re.compile(r"^```(bash|text)\n(.*?)^```", re.M | re.S)
_HEREDOC = re.compile(r"^(python -|cat > (\S+)) <<'EOF'\n(.*?)^EOF\n", re.M | re.S)


def _run_line(line, out):
    words = shlex.split(line)
    if words[0] == "sklearn-compat":
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(words[1:])
        assert code == 0, f"{line}\n{out.getvalue()}"
    elif words[0] == "python":
        argv, sys.argv = sys.argv, words[1:]
        try:
            with contextlib.redirect_stdout(out):
                runpy.run_path(words[1], run_name="__main__")
        finally:
            sys.argv = argv
    else:
        raise AssertionError(f"the page runs {words[0]!r}, which this test does not")


def _run_block(block):
    out = io.StringIO()
    rest = block
    while rest.strip():
        heredoc = _HEREDOC.match(rest)
        if heredoc:
            if heredoc.group(2):
                Path(heredoc.group(2)).write_text(heredoc.group(3))
            else:
                with contextlib.redirect_stdout(out):
                    exec(compile(heredoc.group(3), "<page>", "exec"), {"__name__": "__main__"})
            rest = rest[heredoc.end() :]
            continue
        line, _, rest = rest.partition("\n")
        while line.endswith("\\"):
            more, _, rest = rest.partition("\n")
            line = line[:-1] + " " + more.strip()
        if line.strip():
            _run_line(line, out)
    return out.getvalue()


def _comparable(text):
    """Lines without what changes from run to run (times, and figures' last digits)."""
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TIME", text)
    text = re.sub(r"(\d\.\d\d)\d", r"\1", text)
    return [line.rstrip() for line in text.strip().splitlines()]


def test_upgrade_page_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = _BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    assert [kind for kind, _ in blocks].count("bash") >= 7
    printed = {}
    pending = None
    for kind, body in blocks:
        if kind == "bash":
            pending = _run_block(body)
            continue
        assert pending is not None, f"a text block without a command before it:\n{body}"
        got, shown = _comparable(pending), _comparable(body)
        # Every line the page shows is printed (the command line prints more: progress).
        missing = [line for line in shown if line not in got]
        assert not missing, f"shown but not printed: {missing}\nprinted:\n{pending}"
        printed[len(printed)] = pending
        pending = None
    # The retrieval figures tell the page's story: chance before the map, the mapped
    # column far above it, half the table native above the mapped column.
    figures = [
        float(m)
        for text in printed.values()
        for m in re.findall(r"^vector(?:_v2)?: top-1 (\d\.\d+)", text, re.M)
    ]
    assert figures[0] < 0.2 < figures[1] < figures[2]

"""The one rule for the files a command writes: never an input, never another output.

Checked before any work from the parsed options (``sklearn_compat.cli._files``), so a
refused run leaves every file as it was.
"""

import os

import numpy as np
import pytest

from sklearn_compat.cli import main
from sklearn_compat.cli._files import FILES
from sklearn_compat.cli._parser import COMMANDS, build_parser
from sklearn_compat.io import OutputLayout, write_table

# A minimal command line per command: flag -> file name (None: a flag without a file).
TEMPLATES = {
    "fit": {"--method": "procrustes", "--source": "s.csv", "--target": "t.csv",
            "--id-column": "id", "--model": "m.skops"},
    "transform": {"--model": "m.skops", "--input": "s.csv", "--output": "o.csv"},
    "evaluate": {"--model": "m.skops", "--source": "s.csv", "--target": "t.csv",
                 "--id-column": "id", "--report": "r.md"},
    "grid": {"--source": "s.csv", "--target": "t.csv", "--id-column": "id", "--lam": "0",
             "--output": "g.csv", "--plot": "g2.png"},
    "encode": {"--input": "s.csv", "--output": "e.csv", "--parallel": "t.csv",
               "--parallel-output": "e2.csv", "--model": "enc.skops", "--id-column": "id"},
    "search": {"--model": "m.skops", "--gallery": "t.csv", "--queries": "s.csv",
               "--output": "hits.csv"},
    "export": {"--model": "m.skops", "--format": "npz", "--output": "w.npz"},
}  # fmt: skip


def run(tmp_path, capsys, command, options):
    argv = [command]
    for flag, value in options.items():
        argv += [flag, str(tmp_path / value) if "." in value else value]
    code = main(argv + ["--force"])
    return code, capsys.readouterr().err


def snapshot(tmp_path):
    return {p.name: p.read_bytes() for p in tmp_path.iterdir()}


@pytest.fixture
def files(tmp_path):
    """Every name a template uses exists, with content that must survive."""
    for options in TEMPLATES.values():
        for value in options.values():
            if "." in value:
                (tmp_path / value).write_text(f"keep {value}")
    return tmp_path


def assert_refused(code, err, *fragments):
    assert code == 1, err
    assert err.count("\n") == 1 and err.startswith("sklearn-compat: error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def test_every_command_declares_its_files():
    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    assert commands == set(FILES)
    assert len(COMMANDS) == len(FILES)


def _cases(kind):
    for command, (inputs, outputs) in FILES.items():
        flags = [flag for flag, _ in outputs if flag in TEMPLATES.get(command, {})]
        if kind == "input":
            others = [flag for flag, _ in inputs if flag in TEMPLATES.get(command, {})]
            yield from ((command, out, other) for out in flags for other in others)
        else:
            yield from ((command, a, b) for i, a in enumerate(flags) for b in flags[i + 1 :])


@pytest.mark.parametrize("command, output, source", list(_cases("input")))
def test_no_output_may_be_an_input(files, capsys, command, output, source):
    options = dict(TEMPLATES[command])
    options[output] = options[source]
    before = snapshot(files)
    code, err = run(files, capsys, command, options)
    assert_refused(code, err, f"{options[source]}: is also an input of this command")
    assert snapshot(files) == before


@pytest.mark.parametrize("command, first, second", list(_cases("output")))
def test_no_two_outputs_may_be_one_file(files, capsys, command, first, second):
    options = dict(TEMPLATES[command])
    options[second] = options[first]
    before = snapshot(files)
    code, err = run(files, capsys, command, options)
    assert_refused(code, err, "name the same file")
    assert snapshot(files) == before


def test_a_link_to_an_input_is_the_input(files, capsys):
    os.link(files / "m.skops", files / "hard.npz")
    (files / "soft.npz").symlink_to(files / "m.skops")
    for name in ("hard.npz", "soft.npz"):
        options = {**TEMPLATES["export"], "--output": name}
        code, err = run(files, capsys, "export", options)
        assert_refused(code, err, "is also an input of this command (--output is --model)")
    assert (files / "m.skops").read_text() == "keep m.skops"


# ------------------------------------------------ the evaluate --report reproductions
@pytest.fixture
def fitted(tmp_path, capsys, rng):
    X = rng.normal(size=(40, 4))
    Y = X @ np.linalg.qr(rng.normal(size=(4, 4)))[0]
    ids = np.array([f"i{k}" for k in range(40)])
    for name, A in (("src.csv", X), ("tgt.csv", Y)):
        write_table(tmp_path / name, ids, A, OutputLayout("columns", 4, "id", id_dtype=ids.dtype))
    argv = ["fit", "--method", "procrustes", "--id-column", "id"]
    argv += ["--source", str(tmp_path / "src.csv"), "--target", str(tmp_path / "tgt.csv")]
    assert main(argv + ["--model", str(tmp_path / "r.png")]) == 0
    capsys.readouterr()
    return tmp_path


def evaluate(tmp_path, capsys, model, report):
    argv = ["evaluate", "--id-column", "id", "--force", "--model", str(tmp_path / model)]
    argv += ["--source", str(tmp_path / "src.csv"), "--target", str(tmp_path / "tgt.csv")]
    code = main(argv + ["--report", str(tmp_path / report)])
    return code, capsys.readouterr().err


def test_report_figure_may_not_overwrite_the_model(fitted, capsys):
    # The figure beside r.md is r.png: the model being read.  It used to be overwritten.
    before = snapshot(fitted)
    code, err = evaluate(fitted, capsys, "r.png", "r.md")
    assert_refused(code, err, "r.png: is also an input of this command (--report's figure")
    assert snapshot(fitted) == before


def test_report_figure_may_not_overwrite_the_report(fitted, capsys):
    # --report y.png: the figure (y.png) used to be written over the Markdown report.
    before = snapshot(fitted)
    code, err = evaluate(fitted, capsys, "r.png", "y.png")
    assert_refused(code, err, "--report's figure and --report name the same file")
    assert snapshot(fitted) == before
    code, err = evaluate(fitted, capsys, "r.png", "y.md")
    assert code == 0, err
    assert {"y.md", "y.png"} <= set(snapshot(fitted))

"""What a new user meets first: the README's command lines, ``--help``, a missing GPU.

The command line runs in subprocesses here, as a user starts it.
"""

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def _cli(*args, cwd=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "sklearn_compat", *map(str, args)],
        env=ENV,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_importing_the_command_line_does_not_import_torch_sklearn_or_pandas():
    code = (
        "import sys, sklearn_compat.cli; "
        "print(sorted(m for m in ('torch', 'sklearn', 'pandas', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_public_names_still_import_lazily():
    import sklearn_compat

    assert {"LambdaOrthAligner", "metrics", "RelativeAnchorEncoder"} <= set(dir(sklearn_compat))
    from sklearn_compat import AffineAligner, lambda_orth_penalty, metrics
    from sklearn_compat.io import AtomicOutput, read_table

    assert AffineAligner.__module__ == "sklearn_compat.affine"
    assert callable(lambda_orth_penalty) and callable(read_table)
    assert metrics.__name__ == "sklearn_compat.metrics" and AtomicOutput.__name__
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        sklearn_compat.Nope  # noqa: B018


def test_help_and_usage_errors_answer_fast():
    # Measured in CPU time, which a loaded machine does not inflate as it does wall time:
    # with torch and scikit-learn imported it was about 5 s, now about 0.15 s.
    code = (
        "import resource, runpy, sys; sys.argv = ['sklearn-compat'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('sklearn_compat', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code\n"
        "u = resource.getrusage(resource.RUSAGE_SELF)\n"
        "print(code, u.ru_utime + u.ru_stime, file=sys.stderr)"
    )
    for args in (["--help"], ["fit", "--bogus"]):
        out = subprocess.run(
            [sys.executable, "-c", code, *args], env=ENV, capture_output=True, text=True
        )
        status, cpu = out.stderr.strip().splitlines()[-1].split()
        assert status == ("0" if args == ["--help"] else "2")
        assert float(cpu) < 1.0, (args, cpu)


COMMAND_LINE_PAGE = ROOT / "docs" / "user_guide" / "command_line.md"


def _command_block(page, heading):
    """The first bash block after ``heading`` (the whole page when it is None)."""
    text = page.read_text(encoding="utf-8")
    section = text[text.index(heading) :] if heading else text
    return re.search(r"```bash\n(.*?)\n```", section, re.DOTALL).group(1)


@pytest.mark.parametrize(
    "page, heading",
    [(README, "## Command line"), (COMMAND_LINE_PAGE, None)],
    ids=["README.md", "docs/user_guide/command_line.md"],
)
def test_command_lines_run_as_typed(tmp_path, page, heading):
    """Every line of the command-line block of the README and of the guide, in a fresh
    directory.

    The block names the set-up's ``.venv/bin/...``; here that is this interpreter's
    environment.  A ``grid`` line is only parsed (``--help``): cross-validating four
    lambdas takes minutes on a loaded test machine.
    """
    block = _command_block(page, heading)
    lines = block.splitlines()
    script_start = lines.index(".venv/bin/python - <<'PY'")
    script_end = lines.index("PY")
    commands = lines[: script_start + 1] + lines[script_end + 1 :]
    assert all(line.startswith((".venv/bin/", "#")) for line in commands), (
        "a command without .venv/bin/ fails when typed outside the environment"
    )
    script = "\n".join(lines[script_start + 1 : script_end])
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=ENV, check=True)
    for line in lines[script_end + 1 :]:
        words = shlex.split(line)
        assert words[0] == ".venv/bin/sklearn-compat", line
        if words[1] == "grid":
            words = words[:2] + ["--help"]
        out = _cli(*words[1:], cwd=tmp_path)
        assert out.returncode == 0, (line, out.stderr)
    assert (tmp_path / "new_in_old.csv").exists() and (tmp_path / "map.skops").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_device_cuda_without_a_gpu_is_an_error_for_every_command(tmp_path):
    """One behaviour: a GPU that was asked for and is absent stops every command."""
    import numpy as np

    from sklearn_compat import OrthogonalProcrustesAligner
    from sklearn_compat.io import OutputLayout, save_model, write_table

    X = np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32)
    ids = np.array([f"i{k}" for k in range(30)])
    write_table(tmp_path / "x.parquet", ids, X, OutputLayout("list", 4, "id"))
    save_model(OrthogonalProcrustesAligner().fit(X, X), tmp_path / "m.skops")
    pair = ["--source", "x.parquet", "--target", "x.parquet", "--id-column", "id"]
    commands = {
        "fit": ["fit", "--method", "procrustes", *pair, "--model", "new.skops"],
        "transform": ["transform", "--model", "m.skops", "--input", "x.parquet"]
        + ["--output", "out.csv", "--id-column", "id"],
        "evaluate": ["evaluate", "--model", "m.skops", *pair],
        "encode": ["encode", "--input", "x.parquet", "--output", "enc.csv"]
        + ["--id-column", "id", "--n-anchors", "3"],
    }
    for name, args in commands.items():
        start = time.monotonic()
        out = _cli(*args, "--device", "cuda", cwd=tmp_path)
        assert out.returncode == 1, (name, out.stderr)
        assert out.stderr.strip().splitlines() == [
            "sklearn-compat: error: --device cuda: device='cuda' is not available: torch sees "
            "no CUDA device. Pass --device cpu, or auto to use a GPU when there is one."
        ], name
        assert time.monotonic() - start < 300
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.skops", "x.parquet"]
    assert "is an error" in _cli("transform", "--help").stdout

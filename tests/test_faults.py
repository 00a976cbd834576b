"""Faults of a real ``sklearn-compat transform`` run: SIGTERM, SIGINT and SIGKILL.

Each test starts the command line in a subprocess (the way a job scheduler or ``timeout``
runs it), signals it at some moment, and checks what a user finds afterwards: one line on
stderr (no traceback), the usual exit status, no temporary file, and an existing output
either untouched or completely replaced.

The moments are waited for, never slept to: the command marks its stages in a directory
(``SKLEARN_COMPAT_STAGE_DIR``, see ``sklearn_compat.cli._stages``), and a temporary output
shows that writing began; so a loaded machine changes how long a test takes, not what it
tests.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ortho_group

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.io import save_model
from sklearn_compat.io._write import remove_stale_temporaries

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")

ROOT = Path(__file__).resolve().parents[1]
ROWS = 8000
OLD_OUTPUT = "id,z_0\nkept,1.0\n"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A model and an input large enough that the transform runs for a while."""
    tmp = tmp_path_factory.mktemp("faults")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(ROWS, 16)).astype(np.float32)
    np.save(tmp / "src.npy", X)
    Q = ortho_group.rvs(16, random_state=0)
    save_model(OrthogonalProcrustesAligner().fit(X[:200], X[:200] @ Q), tmp / "model.skops")
    return tmp


def _start(job, out, *extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT), SKLEARN_COMPAT_STAGE_DIR=str(out.parent))
    command = [sys.executable, "-m", "sklearn_compat", "transform", "--model"]
    command += [str(job / "model.skops"), "--input", str(job / "src.npy")]
    command += ["--output", str(out), "--force", "--rows-per-batch", "200", "--no-progress"]
    return subprocess.Popen(
        command + list(extra), env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _temporaries(out):
    return sorted(out.parent.glob(f".{out.name}.*.part"))


def _wait_for_temporary(proc, out, timeout=120):
    """Block until the run has a temporary output (True) or has ended (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _temporaries(out):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.005)
    raise AssertionError("the transform neither started writing nor ended")


def _size(path):
    try:
        return path.stat().st_size
    except FileNotFoundError:  # removed since the listing
        return 0


def _wait_for_growth(proc, out, timeout=120):
    """Block until some batches are in the temporary output (True) or the run has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if max(map(_size, _temporaries(out)), default=0) > 4096:
            return True
        time.sleep(0.001)
    return False


def _wait_for_stage(proc, out, stage, timeout=300):
    """Block until the run has reached ``stage`` (True) or has ended (False)."""
    deadline = time.monotonic() + timeout
    while not (out.parent / stage).exists():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, f"the transform never reached {stage!r}"
        time.sleep(0.001)
    return True


def _check_aftermath(proc, out, signum):
    _, err = proc.communicate(timeout=300)
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert _temporaries(out) == [], (proc.returncode, err)
    finished = out.read_text().count("\n") == ROWS + 1
    if proc.returncode == 0 or (proc.returncode == -signum and finished):
        # The signal came after the work was done: caught by the command, or (once the
        # command had returned and restored the default handlers) ending the interpreter.
        assert finished
        return
    expected = {signal.SIGINT: 130, signal.SIGTERM: 143}[signum]
    # Rarely the process, having cleaned up and printed its line, still ends by the
    # signal's default action on its way out (a shell shows 128 + signum for both): the
    # line, the temporary files and the output are what a user relies on.
    assert proc.returncode in (expected, -signum), err
    word = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
    assert lines == [f"sklearn-compat: error: {word}; no output was written"], err
    # Untouched, or (a signal between the final rename and the exit) completely replaced:
    # never a partial file.
    assert out.read_text() == OLD_OUTPUT or out.read_text().count("\n") == ROWS + 1


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("moment", ["imports", "imported", "first_temporary", "writing"])
def test_signal_during_transform_leaves_nothing_behind(job, tmp_path, signum, moment):
    out = tmp_path / "out.csv"
    out.write_text(OLD_OUTPUT)
    proc = _start(job, out)
    if moment == "imports":
        # The handlers are installed and the command's imports (torch, scikit-learn) run.
        assert _wait_for_stage(proc, out, "started")
    elif moment == "imported":  # the command is about to run
        _wait_for_stage(proc, out, "imported")
    else:
        started = _wait_for_temporary(proc, out)
        if started and moment == "writing":
            _wait_for_growth(proc, out)
    if proc.poll() is None:
        proc.send_signal(signum)
    _check_aftermath(proc, out, signum)


def test_a_killed_runs_temporary_file_is_removed_by_the_next_run(job, tmp_path):
    out = tmp_path / "out.csv"
    proc = _start(job, out)
    # Killed while batches are written: a temporary alone is not enough, since the command
    # first checks that the output can be written by making one and removing it at once.
    killed = _wait_for_growth(proc, out)
    if proc.poll() is None:
        proc.kill()  # SIGKILL: nothing can clean up
    proc.communicate(timeout=300)
    if killed and proc.returncode == -signal.SIGKILL and out.exists():
        # The kill came after the final rename: the output is whole.
        assert out.read_text().count("\n") == ROWS + 1
    elif killed and proc.returncode == -signal.SIGKILL:
        assert _temporaries(out), "SIGKILL should have left the temporary file"
    # A later successful run of the same output removes the leftovers of dead runs.
    again = _start(job, out)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert _temporaries(out) == []
    assert out.read_text().count("\n") == ROWS + 1


def test_only_temporaries_of_dead_processes_are_stale(tmp_path):
    out = tmp_path / "out.csv"
    dead = tmp_path / ".out.csv.999999999.abc.part"  # above any pid_max: not running
    live = tmp_path / f".out.csv.{os.getppid()}.abc.part"  # our parent runs
    other = tmp_path / ".other.csv.999999999.abc.part"  # another output's
    legacy = tmp_path / ".out.csv.abc123.part"  # no pid: not ours to judge
    for path in (dead, live, other, legacy):
        path.write_text("partial")
    assert remove_stale_temporaries(out) == [dead]
    assert not dead.exists() and live.exists() and other.exists() and legacy.exists()

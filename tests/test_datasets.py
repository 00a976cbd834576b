"""The shipped data sets: real features in the package; a repository that needs nothing else."""

import subprocess
from pathlib import Path

import numpy as np
import pytest

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.datasets import load_mnist_features

ROOT = Path(__file__).resolve().parents[1]


def test_mnist_features_ship_with_the_package():
    data = load_mnist_features()
    assert set(data) == {"cnn_s0", "cnn_s1", "mlp_s0", "labels", "train_idx", "test_idx"}
    for name in ("cnn_s0", "cnn_s1", "mlp_s0"):
        assert data[name].shape == (5000, 64) and data[name].dtype == np.float32
        assert (data[name] >= 0).all()  # ReLU activations
    assert np.array_equal(np.bincount(data.labels), np.full(10, 500))
    # The split of benchmarks/datasets/build_mnist_features.py, the rows the networks saw.
    order = np.random.default_rng(0).permutation(5000)
    assert np.array_equal(data.train_idx, order[:4000])
    assert np.array_equal(data.test_idx, order[4000:])


def test_mnist_features_are_a_real_model_update():
    # Same architecture, new seed: an orthogonal map recovers most partners; a different
    # architecture is harder; unmapped, the spaces are unrelated.
    data = load_mnist_features()
    train, test = data.train_idx, data.test_idx
    scores = {}
    for new, old in (("cnn_s0", "cnn_s1"), ("cnn_s0", "mlp_s0")):
        aligner = OrthogonalProcrustesAligner(center=True, device="cpu")
        aligner.fit(data[new][train], data[old][train])
        scores[old] = aligner.score(data[new][test], data[old][test])
    assert scores["cnn_s1"] > 0.6 > scores["mlp_s0"] > 0.2, scores


def _tracked_text_files():
    try:
        names = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    suffixes = {".py", ".md", ".rst", ".toml", ".cfg", ".txt", ".sh", ".in", ".json"}
    return [ROOT / name for name in names if Path(name).suffix in suffixes or "/" not in name]


def test_no_file_names_a_folder_outside_the_repository():
    # A user's clone holds everything the tests, examples, docs and benchmarks read: no
    # data folder beside the checkout, no absolute path of a developer's machine.
    outside = ("shared/data", "../shared", "/work/", "/home/")
    hits = []
    for path in _tracked_text_files():
        if not path.is_file() or path == Path(__file__).resolve():  # this list itself
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if any(token in line for token in outside):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert hits == []

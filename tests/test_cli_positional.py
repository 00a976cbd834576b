"""Tables without ids: ``fit``, ``evaluate`` and ``grid`` pair their rows by position.

The commonest input there is, two ``DataFrame.to_csv(index=False)`` exports of the same
items in the same order, has no id column.  Such rows are paired by position (said once on
stderr), and both tables must then have the same number of rows.
"""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ortho_group

from sklearn_compat import AffineAligner, OrthogonalProcrustesAligner
from sklearn_compat.cli import main
from sklearn_compat.io import load_model

POSITIONAL = "pairing rows by position (no --id-column)"


def run(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def exports(tmp_path, rng):
    """Two exports of the same 150 items, rows in the same order, no id column."""
    X = rng.normal(size=(150, 6))
    Y = X @ ortho_group.rvs(8, random_state=0)[:6] + 0.05 * rng.normal(size=(150, 8))
    source = pd.DataFrame(X, columns=[f"new_{i}" for i in range(6)])
    target = pd.DataFrame(Y, columns=[f"old_{i}" for i in range(8)])
    return tmp_path, source, target


def _write(frame, path):
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize(
    "method, estimator", [("procrustes", OrthogonalProcrustesAligner), ("affine", AffineAligner)]
)
def test_fit_without_ids_equals_the_python_estimator(exports, capsys, suffix, method, estimator):
    tmp_path, source, target = exports
    src, tgt = tmp_path / f"src{suffix}", tmp_path / f"tgt{suffix}"
    _write(source, src)
    _write(target, tgt)
    model = tmp_path / "m.skops"
    code, _, err = run(
        capsys, "fit", "--method", method, "--source", src, "--target", tgt, "--model", model
    )
    assert code == 0, err
    assert err.count(POSITIONAL) == 1, err
    # The same arrays the files hold, read back the ordinary way.
    read = pd.read_csv if suffix == ".csv" else pd.read_parquet
    X, Y = read(src).to_numpy(), read(tgt).to_numpy()
    expected = estimator().fit(X, Y)
    fitted = load_model(model)
    assert np.allclose(fitted.transform(read(src)), expected.transform(X), rtol=0, atol=1e-10)


def test_evaluate_and_grid_without_ids(exports, capsys):
    tmp_path, source, target = exports
    src, tgt = tmp_path / "src.csv", tmp_path / "tgt.parquet"
    _write(source, src)
    _write(target, tgt)
    model = tmp_path / "m.skops"
    code, _, err = run(
        capsys, "fit", "--method", "affine", "--source", src, "--target", tgt, "--model", model
    )
    assert code == 0, err
    code, out, err = run(
        capsys, "evaluate", "--model", model, "--source", src, "--target", tgt, "--json"
    )
    assert code == 0, err
    assert err.count(POSITIONAL) == 1, err
    assert '"n_pairs": 150' in out
    results = tmp_path / "grid.csv"
    code, _, err = run(
        capsys,
        "grid",
        "--source",
        src,
        "--target",
        tgt,
        "--lam",
        "inf",
        "--cv",
        "2",
        "--epochs",
        "2",
        "--output",
        results,
        "--no-plot",
    )
    assert code == 0, err
    assert err.count(POSITIONAL) == 1, err
    assert set(pd.read_csv(results)["method"]) == {"procrustes", "affine", "lambda-orth"}


def test_row_counts_must_agree_without_ids(exports, capsys):
    tmp_path, source, target = exports
    src, tgt = tmp_path / "src.csv", tmp_path / "tgt.csv"
    _write(source, src)
    _write(target.iloc[:-1], tgt)
    model = tmp_path / "m.skops"
    code, _, err = run(
        capsys, "fit", "--method", "affine", "--source", src, "--target", tgt, "--model", model
    )
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sklearn-compat: error: "), err
    assert f"{src} has 150 rows and {tgt} has 149" in lines[0]
    assert "--id-column" in lines[0]
    assert not model.exists()

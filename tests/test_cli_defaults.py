"""``sklearn-compat fit`` with no method options is the Python estimator's default.

The defaults that choose from the data (``center="auto"`` and friends) must choose the
same way behind the command line as in Python: same rows, same order, same fallback.
Each method is fitted once through ``fit`` + ``transform`` and once directly, on a pair
where centring matters (a large common offset on the new side) and on one where it does
not, and the mapped rows and the recorded choices must agree.
"""

import numpy as np
import pytest

from sklearn_compat.cli import main
from sklearn_compat.cli._registry import METHODS
from sklearn_compat.io import ColumnSpec, OutputLayout, load_model, read_table, write_table

N, D_X, D_Y = 400, 12, 10
CHOICES = ("center_", "scale_mode_", "fit_intercept_", "normalize_")
# Trained methods draw their initial weights: compare them under one seed and few epochs.
TRAINED = {"lambda-orth", "residual"}
# Seeded but not trained by epochs: its restarts and samples are drawn from the seed.
SEEDED = {"unpaired"}


def _pair(offset):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N, D_X))
    W = np.linalg.qr(rng.normal(size=(D_X, D_X)))[0][:, :D_Y]
    Y = X @ W + 0.3 * rng.normal(size=(N, D_Y))
    X = X + offset * rng.normal(size=D_X)  # the anisotropy of e5-like models
    return X.astype(np.float32), Y.astype(np.float32)


def _run(*args):
    code = main([str(a) for a in args])
    assert code == 0, args


@pytest.mark.parametrize("offset", [0.0, 6.0], ids=["ordinary", "offset"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_cli_default_is_the_python_default(tmp_path, capsys, method, offset):
    X, Y = _pair(offset)
    ids = np.array([f"row{i:04d}" for i in range(N)])
    src, tgt, model, out = (tmp_path / n for n in ("src.csv", "tgt.csv", "m.skops", "z.csv"))
    write_table(src, ids, X, OutputLayout("columns", D_X, "id"))
    write_table(tgt, ids, Y, OutputLayout("columns", D_Y, "id"))
    extra = ("--seed", 0, "--epochs", 3) if method in TRAINED else ()
    extra = ("--seed", 0) if method in SEEDED else extra
    _run("fit", "--method", method, "--source", src, "--target", tgt, "--id-column", "id",
         "--model", model, *extra)  # fmt: skip
    _run("transform", "--model", model, "--input", src, "--output", out, "--id-column", "id")
    capsys.readouterr()

    cls = METHODS[method].estimator_class(method)
    params = {"random_state": 0, "max_epochs": 3} if method in TRAINED else {}
    params = {"random_state": 0} if method in SEEDED else params
    direct = cls(**params).fit(X, Y)
    cli_model = load_model(model)
    assert cli_model.get_params() == direct.get_params()
    for name in CHOICES:
        if hasattr(direct, name):
            assert getattr(cli_model, name) == getattr(direct, name), name
    _, table = read_table(out, ColumnSpec("id"))
    np.testing.assert_array_equal(table.ids, ids)
    np.testing.assert_allclose(table.X, direct.transform(X), rtol=1e-4, atol=1e-4)

"""Small messages of issue 26: fits on too few pairs, names in errors, CLI warnings."""

import warnings

import numpy as np
import pandas as pd
import pytest

from sklearn_compat import (
    AffineAligner,
    LambdaOrthAligner,
    OrthogonalProcrustesAligner,
    RCSLSAligner,
    RefinedProcrustesAligner,
    ResidualAdapterAligner,
    UnderdeterminedFitWarning,
    WhitenedProcrustesAligner,
)
from sklearn_compat.cli import main
from sklearn_compat.metrics import compatibility_report

D_X, D_Y = 6, 4
# (estimator, pairs needed for D_X -> D_Y): see sklearn_compat/_core/few_pairs.py.
FLOORS = [
    (OrthogonalProcrustesAligner(), min(D_X, D_Y) + 1),
    (OrthogonalProcrustesAligner(center=False), min(D_X, D_Y)),
    (AffineAligner(), max(D_X, D_Y) + 1),
    (AffineAligner(fit_intercept=False), max(D_X, D_Y)),
    (WhitenedProcrustesAligner(), D_X + D_Y + 1),
    (WhitenedProcrustesAligner(whiten=False), min(D_X, D_Y) + 1),
    (LambdaOrthAligner(max_epochs=1, random_state=0), min(D_X, D_Y) + 1),
    (LambdaOrthAligner(lam=np.inf, max_epochs=1, random_state=0), max(D_X, D_Y) + 1),
    (RCSLSAligner(max_iter=1, random_state=0), min(D_X, D_Y)),
    (ResidualAdapterAligner(hidden=2, max_epochs=1, random_state=0), min(D_X, D_Y) + 1),
]


def pairs(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D_X))
    return X, X @ rng.normal(size=(D_X, D_Y)) + 0.1 * rng.normal(size=(n, D_Y))


def fit_warnings(estimator, n):
    X, Y = pairs(n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(X, Y)
    return [w for w in caught if issubclass(w.category, UnderdeterminedFitWarning)]


@pytest.mark.parametrize("estimator, floor", FLOORS, ids=lambda v: str(v)[:40])
def test_warns_below_the_floor_and_not_at_it(estimator, floor):
    (below,) = fit_warnings(estimator, floor - 1)
    message = str(below.message)
    assert f"fitted on {floor - 1} pairs, fewer than the {floor}" in message
    assert "the map is underdetermined: " in message
    assert type(estimator).__name__ in message
    assert below.filename == __file__ or isinstance(estimator, ResidualAdapterAligner)
    assert fit_warnings(estimator, floor) == []


def test_ridge_and_partial_fit_batches_do_not_warn():
    assert fit_warnings(AffineAligner(alpha=1.0), 2) == []
    X, Y = pairs(40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnderdeterminedFitWarning)
        aligner = OrthogonalProcrustesAligner()
        for start in range(0, 40, 2):  # small batches, enough pairs in all
            aligner.partial_fit(X[start : start + 2], Y[start : start + 2])


def test_refinement_rounds_warn_once_for_the_given_pairs():
    caught = fit_warnings(RefinedProcrustesAligner(n_refinements=3), 3)
    assert len(caught) == 1 and "fitted on 3 pairs" in str(caught[0].message)


def test_residual_adapter_names_itself_in_a_wrong_keyword_error():
    X, Y = pairs(20)
    with pytest.raises(TypeError, match=r"^ResidualAdapterAligner\.fit\(\) got an unexp"):
        ResidualAdapterAligner().fit(X, Y, sample_weight=np.ones(20))


def test_report_gives_a_named_model_its_column_names():
    X, Y = pairs(60)
    names = [f"new_{i}" for i in range(D_X)]
    aligner = OrthogonalProcrustesAligner().fit(pd.DataFrame(X, columns=names), Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compatibility_report(aligner, pd.DataFrame(X, columns=names), Y, n_bootstrap=10)


# --------------------------------------------------------------------------- CLI
@pytest.fixture
def tables(tmp_path):
    X, Y = pairs(60)
    ids = [f"i{k}" for k in range(60)]
    pd.DataFrame(X, columns=[f"a{i}" for i in range(D_X)]).assign(id=ids).to_csv(
        tmp_path / "s.csv", index=False
    )
    pd.DataFrame(Y, columns=[f"b{i}" for i in range(D_Y)]).assign(id=ids).to_csv(
        tmp_path / "t.csv", index=False
    )
    return tmp_path


def cli(capsys, path, *args):
    code = main(
        [str(path / a) if a.endswith((".csv", ".skops", ".md", ".npz")) else a for a in args]
    )
    return code, capsys.readouterr().err


def fit_cli(capsys, path, source="s.csv", *extra):
    argv = ["fit", "--method", "procrustes", "--id-column", "id", "--source", source]
    return cli(capsys, path, *argv, "--target", "t.csv", "--model", "m.skops", *extra)


def test_export_and_report_of_a_cli_model_do_not_warn(tables, capsys):
    assert fit_cli(capsys, tables)[0] == 0
    code, err = cli(capsys, tables, "export", "--model", "m.skops", "--format", "npz",
                    "--output", "w.npz")  # fmt: skip
    assert code == 0 and "warning" not in err, err
    code, err = cli(capsys, tables, "evaluate", "--model", "m.skops", "--source", "s.csv",
                    "--target", "t.csv", "--id-column", "id", "--report", "r.md")  # fmt: skip
    assert code == 0 and "warning" not in err, err


def test_cli_fit_on_three_pairs_warns(tables, capsys):
    pd.read_csv(tables / "s.csv").head(3).to_csv(tables / "s3.csv", index=False)
    code, err = fit_cli(capsys, tables, "s3.csv")
    assert code == 0
    assert "sklearn-compat: warning: OrthogonalProcrustesAligner was fitted on 3 pairs" in err


def test_duplicates_drop_that_drops_everything_says_so(tables, capsys):
    frame = pd.read_csv(tables / "s.csv").head(3)
    pd.concat([frame, frame]).to_csv(tables / "twice.csv", index=False)
    code, err = fit_cli(capsys, tables, "twice.csv", "--duplicates", "drop")
    assert code == 1 and err.count("\n") == 1
    assert "twice.csv: all 6 rows were dropped as duplicates (--duplicates drop)" in err
    assert "no ids in common" not in err

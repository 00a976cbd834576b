"""Command-line options and messages that used to mislead (issue 32's rough edges)."""

import json

import numpy as np
import pandas as pd
import pytest

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.cli import main
from sklearn_compat.io import save_model


@pytest.mark.parametrize("value", ["nan", "NaN", "1.5", "-0.1", "inf"])
def test_min_retention_must_be_a_number_in_the_unit_interval(tmp_path, capsys, value):
    # A NaN passed the gate (every comparison with it is false); 1.5 could never pass.
    args = ["transform", "--model", "m.skops", "--input", "in.csv", "--output"]
    with pytest.raises(SystemExit) as info:
        main([*args, str(tmp_path / "out.csv"), "--min-retention", value])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"argument --min-retention: must be a number in [0, 1], got {value}")
    assert not (tmp_path / "out.csv").exists()


def test_search_on_a_small_gallery(tmp_path, capsys, rng):
    # The default CSLS neighbourhood (10) failed on galleries of 10 items or fewer.
    X = rng.normal(size=(40, 4))
    aligner = OrthogonalProcrustesAligner(center=True).fit(X, X)
    model = tmp_path / "m.skops"
    save_model(aligner, model)
    np.save(tmp_path / "g.npy", X[:5])
    np.save(tmp_path / "q.npy", X[:3])
    args = ["search", "--model", model, "--gallery", tmp_path / "g.npy"]
    args += ["--queries", tmp_path / "q.npy", "-k", "1", "--output"]
    assert main([str(a) for a in [*args, tmp_path / "r.csv"]]) == 0
    capsys.readouterr()
    results = pd.read_csv(tmp_path / "r.csv")
    assert results["gallery_id"].tolist() == [0, 1, 2]
    # A neighbourhood asked for is kept, and refused in one line where too large.
    code = main([str(a) for a in [*args, tmp_path / "r5.csv", "--csls", "5"]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0] == (
        f"sklearn-compat: error: {tmp_path / 'g.npy'}: --csls 5 needs a gallery of more "
        "than 5 items, and it has 5; pass a smaller --csls, --no-csls (plain cosine), or "
        "leave --csls at auto, which adapts to the gallery"
    )
    assert not (tmp_path / "r5.csv").exists()


def _pairs(tmp_path, rng, name, ids):
    X = rng.normal(size=(len(ids), 6))
    Y = X @ np.linalg.qr(rng.normal(size=(6, 6)))[0] + 0.1 * rng.normal(size=X.shape)
    for side, A in (("src", X), ("tgt", Y)):
        frame = pd.DataFrame(A, columns=[f"{side}{j}" for j in range(6)])
        frame.insert(0, "id", ids)
        frame.to_csv(tmp_path / f"{name}_{side}.csv", index=False)
    return tmp_path / f"{name}_src.csv", tmp_path / f"{name}_tgt.csv"


def test_evaluate_says_training_pairs_when_they_are_the_fits_own(tmp_path, capsys, rng):
    train = _pairs(tmp_path, rng, "train", [f"t{i}" for i in range(150)])
    other = _pairs(tmp_path, rng, "other", [f"o{i}" for i in range(150)])
    model = tmp_path / "m.skops"
    fit = ["fit", "--method", "procrustes", "--id-column", "id", "--model", model]
    assert main([str(a) for a in [*fit, "--source", train[0], "--target", train[1]]]) == 0
    capsys.readouterr()
    for (source, target), expected in ((train, "training"), (other, "unknown")):
        report = tmp_path / f"{expected}.md"
        args = ["evaluate", "--model", model, "--id-column", "id", "--json", "--report", report]
        assert main([str(a) for a in [*args, "--source", source, "--target", target]]) == 0
        out, err = capsys.readouterr()
        text = report.read_text()
        assert json.loads(out)["evaluated_on"] == expected
        assert ("training pairs" in text) == (expected == "training"), text
        assert ("training figure" in err) == (expected == "training"), err
        # Only rows checked against the fit's are called held-out; these never are.
        assert "held-out gallery items" not in text

"""The deployment commands: fingerprints (fit -> inspect), export, evaluate --report."""

import json

import numpy as np
import pytest

from sklearn_compat.cli import main
from sklearn_compat.io import OutputLayout, load_model, write_table
from sklearn_compat.io._fingerprint import ids_digest


@pytest.fixture
def pair(tmp_path, rng):
    n, d_x, d_y = 90, 6, 5
    ids = np.array([f"item{i:03d}" for i in range(n)])
    X = rng.normal(size=(n, d_x)).astype(np.float32)
    Y = (X @ rng.normal(size=(d_x, d_y))).astype(np.float32)
    labels = np.arange(n) % 3
    src, tgt = tmp_path / "new.parquet", tmp_path / "old.parquet"
    write_table(src, ids, X, OutputLayout("list", d_x, "id", id_dtype=ids.dtype))
    # the target lacks the last 10 items, so the fit trains on 80 joined ids
    write_table(tgt, ids[:80], Y[:80], OutputLayout("columns", d_y, "id", id_dtype=ids.dtype))
    return src, tgt, ids, X, labels


def test_fit_writes_a_fingerprint_that_inspect_prints(pair, tmp_path, capsys):
    src, tgt, ids, X, _ = pair
    model = tmp_path / "map.skops"
    args = ["fit", "--method", "affine", "--source", str(src), "--target", str(tgt)]
    assert main(args + ["--id-column", "id", "--model", str(model)]) == 0
    fingerprint = load_model(model).fingerprint_
    assert fingerprint["estimator"] == "sklearn_compat.affine.AffineAligner"
    assert (fingerprint["n_features_in"], fingerprint["n_features_out"]) == (6, 5)
    assert fingerprint["n_training_rows"] == 80
    assert fingerprint["training_ids_sha256"] == ids_digest(ids[:80])
    assert fingerprint["feature_names_out"][:2] == ["e0", "e1"] or fingerprint["feature_names_out"]
    capsys.readouterr()
    assert main(["inspect", "--model", str(model), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == fingerprint
    assert main(["inspect", "--model", str(model)]) == 0
    text = capsys.readouterr().out
    assert "training_ids_sha256: " + ids_digest(ids[:80]) in text
    # The parameter as given, and what "auto" chose from the data.
    assert "fit_intercept = 'auto'" in text or "fit_intercept = auto" in text
    assert "chosen:\n  fit_intercept_ = " in text


def test_export_command(pair, tmp_path, capsys):
    pytest.importorskip("onnx")
    pytest.importorskip("faiss")
    src, tgt, ids, X, _ = pair
    model = tmp_path / "map.skops"
    main(["fit", "--method", "procrustes", "--source", str(src), "--target", str(tgt),
          "--id-column", "id", "--model", str(model)])  # fmt: skip
    fitted = load_model(model)
    for fmt in ("npz", "faiss", "onnx"):
        out = tmp_path / f"map.{fmt}"
        assert main(["export", "--model", str(model), "--format", fmt, "--output", str(out)]) == 0
        assert out.is_file()
    saved = np.load(tmp_path / "map.npz")
    np.testing.assert_allclose(X @ saved["W"] + saved["b"], fitted.transform(X), atol=1e-5)
    capsys.readouterr()
    args = ["export", "--model", str(model), "--format", "npz", "--output"]
    assert main(args + [str(tmp_path / "map.npz")]) == 1
    assert "already exists" in capsys.readouterr().err
    # a relative encoding has no linear form: one line, exit 1, nothing written
    enc = tmp_path / "enc.skops"
    main(["encode", "--input", str(src), "--output", str(tmp_path / "enc.parquet"),
          "--id-column", "id", "--n-anchors", "4", "--model", str(enc)])  # fmt: skip
    capsys.readouterr()
    assert main(["export", "--model", str(enc), "--format", "npz", "--output",
                 str(tmp_path / "enc.npz")]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert "RelativeAnchorEncoder has no linear form" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "enc.npz").exists()


def test_evaluate_writes_the_report(pair, tmp_path, capsys):
    src, tgt, ids, X, labels = pair
    model = tmp_path / "map.skops"
    main(["fit", "--method", "procrustes", "--source", str(src), "--target", str(tgt),
          "--id-column", "id", "--model", str(model)])  # fmt: skip
    report = tmp_path / "report.md"
    args = ["evaluate", "--model", str(model), "--source", str(src), "--target", str(tgt)]
    assert main(args + ["--id-column", "id", "--report", str(report)]) == 0
    text = report.read_text()
    assert text.startswith("# Bridge or re-index?") and "![bridge or re-index](report.png)" in text
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert main(args + ["--id-column", "id", "--report", str(report)]) == 1
    assert "already exists" in capsys.readouterr().err

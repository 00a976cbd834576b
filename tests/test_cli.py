"""The ``sklearn-compat`` command line, end to end on real files.

Commands run in-process through ``main([...])``; one test runs the real entry point
(``python -m sklearn_compat``) in a subprocess.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.cli import main
from sklearn_compat.io import (
    ColumnSpec,
    OutputLayout,
    load_model,
    read_table,
    save_model,
    write_table,
)

from _helpers import planted_pair

ROOT = Path(__file__).resolve().parents[1]
N, D_X, D_Y = 120, 6, 8


@pytest.fixture
def planted_table(rng):
    """Paired embeddings with an exact orthogonal map (orthonormal rows) between them."""
    X, Y, Q = planted_pair(rng, N, D_X, D_Y, dtype=np.float32)
    ids = np.array([f"item{i:03d}" for i in range(N)])
    return ids, X, Y, Q


def write_pair(tmp_path, planted_table, src_fmt, tgt_fmt, src_form="columns", tgt_form="list"):
    """Source: all items in order.  Target: 10 source items missing, 5 extra items, and
    the rows shuffled, so only a join on the ids can pair them."""
    ids, X, Y, _ = planted_table
    rng = np.random.default_rng(1)
    keep = rng.permutation(N)[: N - 10]
    extra_ids = np.array([f"other{i}" for i in range(5)])
    tgt_ids = np.concatenate([ids[keep], extra_ids])
    tgt_Y = np.concatenate([Y[keep], rng.normal(size=(5, D_Y)).astype(np.float32)])
    order = rng.permutation(len(tgt_ids))
    src = tmp_path / f"src.{src_fmt}"
    tgt = tmp_path / f"tgt.{tgt_fmt}"
    write_table(src, ids, X, OutputLayout(src_form, D_X, "id", id_dtype=ids.dtype))
    write_table(
        tgt,
        tgt_ids[order],
        tgt_Y[order],
        OutputLayout(
            tgt_form,
            D_Y,
            "id",
            [f"old_{i}" for i in range(D_Y)] if tgt_form == "columns" else None,
            id_dtype=np.dtype("U8"),
        ),
    )
    return src, tgt


def run(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *fragments):
    """Exit status 1 and one error line (last on stderr, after any log lines)."""
    assert code == 1
    lines = err.strip().splitlines()
    errors = [line for line in lines if line.startswith("sklearn-compat: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    assert "Traceback" not in err


def fit(capsys, src, tgt, model, *extra):
    return run(
        capsys,
        "fit",
        "--method",
        "procrustes",
        "--source",
        src,
        "--target",
        tgt,
        "--id-column",
        "id",
        "--model",
        model,
        *extra,
    )


# ------------------------------------------------------------------- end to end
@pytest.mark.parametrize(
    "src_fmt, src_form, tgt_fmt, tgt_form",
    [
        ("csv", "columns", "parquet", "list"),
        ("parquet", "list", "npy", "columns"),
        ("npy", "list", "csv", "list"),
        ("parquet", "columns", "parquet", "columns"),
    ],
)
def test_fit_transform_evaluate(
    tmp_path, capsys, planted_table, src_fmt, src_form, tgt_fmt, tgt_form
):
    ids, X, Y, Q = planted_table
    src, tgt = write_pair(tmp_path, planted_table, src_fmt, tgt_fmt, src_form, tgt_form)
    model = tmp_path / "model.skops"
    code, out, err = fit(capsys, src, tgt, model)
    assert code == 0, err
    assert (
        "110 ids matched; 10 source ids missing from the target, 5 target ids missing "
        "from the source; duplicated ids: 0 in the source, 0 in the target"
    ) in err
    aligner = load_model(model)
    assert np.allclose(aligner.W_, Q, atol=1e-5)  # the planted map, despite the shuffle

    output = tmp_path / f"out.{src_fmt}"
    code, out, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        src,
        "--output",
        output,
        "--id-column",
        "id",
    )
    assert code == 0, err
    reader, table = read_table(output, ColumnSpec("id"))
    assert reader.form == src_form  # the output keeps the input's form ...
    assert [str(v) for v in table.ids] == list(ids)  # ... and its ids, in order
    assert np.allclose(table.X, Y, atol=1e-5)
    if src_fmt != "csv":
        assert table.X.dtype == np.float32
    if src_form == "columns" and tgt_form == "columns":
        assert reader.vector_columns == [f"old_{i}" for i in range(D_Y)]

    code, out, err = run(
        capsys,
        "evaluate",
        "--model",
        model,
        "--source",
        src,
        "--target",
        tgt,
        "--id-column",
        "id",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["n_pairs"] == 110
    assert report["metrics"]["top1"] == 1.0 and report["metrics"]["top5"] == 1.0
    assert report["join"]["missing_in_target"] == 10


def test_real_features_agree_with_the_api(tmp_path, capsys, mnist_features):
    """On real MNIST features, exported by two models in different formats and orders, the
    command line reaches exactly the score of the estimator used directly."""
    from sklearn_compat import OrthogonalProcrustesAligner

    f = mnist_features
    ids = np.array([f"digit{i:04d}" for i in range(len(f["labels"]))])
    train, test = f["train_idx"], f["test_idx"]
    order = np.random.default_rng(0).permutation(len(ids))
    write_table(
        tmp_path / "new_train.parquet",
        ids[train],
        f["cnn_s0"][train],
        OutputLayout("list", 64, "id"),
    )
    write_table(
        tmp_path / "new_test.csv", ids[test], f["cnn_s0"][test], OutputLayout("columns", 64, "id")
    )
    write_table(
        tmp_path / "old.npy",
        ids[order],
        f["cnn_s1"][order],
        OutputLayout("list", 64, "id", id_dtype=ids.dtype),
    )
    model = tmp_path / "m.skops"
    code, _, err = fit(
        capsys,
        tmp_path / "new_train.parquet",
        tmp_path / "old.npy",
        model,
        "--center",
        "--dtype",
        "float32",
    )
    assert code == 0 and "4000 ids matched; 0 source ids missing" in err
    code, out, _ = run(
        capsys,
        "evaluate",
        "--model",
        model,
        "--source",
        tmp_path / "new_test.csv",
        "--target",
        tmp_path / "old.npy",
        "--id-column",
        "id",
        "--json",
        "--dtype",
        "float32",
    )
    assert code == 0
    direct = OrthogonalProcrustesAligner(center=True).fit(f["cnn_s0"][train], f["cnn_s1"][train])
    expected = direct.score(f["cnn_s0"][test], f["cnn_s1"][test])
    assert json.loads(out)["metrics"]["top1"] == pytest.approx(expected)
    assert expected > 0.5  # a real alignment, not chance (0.001)


def test_evaluate_table_and_fit_json(tmp_path, capsys, planted_table):
    src, tgt = write_pair(tmp_path, planted_table, "parquet", "parquet")
    model = tmp_path / "m.skops"
    code, out, _ = fit(capsys, src, tgt, model, "--json", "--center")
    assert code == 0
    assert json.loads(out)["join"]["matched"] == 110
    assert load_model(model).center is True
    code, out, _ = run(
        capsys, "evaluate", "--model", model, "--source", src, "--target", tgt, "--id-column", "id"
    )
    assert code == 0
    table = dict(line.split() for line in out.strip().splitlines()[1:])
    assert float(table["top1"]) == 1.0 and table["pairs"] == "110"


def test_evaluate_with_labels_in_the_shuffled_target(tmp_path, capsys, planted_table):
    ids, X, Y, _ = planted_table
    labels = np.arange(N) % 4
    noisy = Y + np.random.default_rng(5).normal(scale=0.3, size=Y.shape).astype(np.float32)
    src = tmp_path / "src.parquet"
    write_table(src, ids, X, OutputLayout("list", D_X, "id"))
    order = np.random.default_rng(6).permutation(N)
    frame = pd.DataFrame(noisy[order], columns=[f"old_{i}" for i in range(D_Y)])
    frame.insert(0, "id", ids[order])
    frame["label"] = labels[order]
    frame.to_csv(tmp_path / "tgt.csv", index=False)
    model = tmp_path / "m.skops"
    args = [
        "--source",
        src,
        "--target",
        tmp_path / "tgt.csv",
        "--id-column",
        "id",
        "--labels-column",
        "label",
    ]
    assert (
        run(
            capsys,
            "fit",
            "--method",
            "procrustes",
            *args[:6],
            "--target-prefix",
            "old_",
            "--model",
            model,
        )[0]
        == 0
    )
    code, out, err = run(capsys, "evaluate", "--model", model, *args, "--json")
    assert code == 0, err
    report = json.loads(out)
    # sklearn_compat.metrics is merged: the label metrics must be there, not skipped.
    from sklearn_compat import metrics

    assert report["not_available"] == []
    # The labels came from the shuffled target: they must have been joined like the rows.
    Z = load_model(model).transform(X)
    expected = metrics.cmc_topk_accuracy(Z, noisy, labels, k=1, exclude_self=True)
    assert report["metrics"]["cmc_top1"] == pytest.approx(expected)
    assert report["metrics"]["map"] == pytest.approx(
        metrics.mean_average_precision(Z, noisy, labels, exclude_self=True)
    )
    assert report["metrics"]["mean_cosine"] == pytest.approx(
        metrics.mean_cosine_similarity(Z, noisy)
    )


def test_transform_in_small_batches_matches_one_batch(tmp_path, capsys, planted_table):
    src, tgt = write_pair(tmp_path, planted_table, "csv", "parquet")
    model = tmp_path / "m.skops"
    assert fit(capsys, src, tgt, model)[0] == 0
    outputs = []
    for rows in ("7", "100000"):
        out = tmp_path / f"out{rows}.csv"
        code, _, err = run(
            capsys,
            "transform",
            "--model",
            model,
            "--input",
            src,
            "--output",
            out,
            "--id-column",
            "id",
            "--rows-per-batch",
            rows,
        )
        assert code == 0, err
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1]
    assert outputs[0].splitlines()[1].startswith("item000,")


def test_a_last_batch_of_one_row_gets_the_bits_of_a_whole_batch(tmp_path, capsys, rng):
    # transform maps a single row with the matrix-vector product, whose last bits differ
    # from a block product's; the command line must still write the same table whatever
    # its batch size, a last batch of one row included (41 = 5 x 8 + 1).
    X = rng.normal(size=(41, 256)).astype(np.float32)
    Q = np.linalg.qr(rng.normal(size=(256, 256)))[0].astype(np.float32)
    save_model(OrthogonalProcrustesAligner(center=True, scale=False).fit(X, X @ Q),
               tmp_path / "m.skops")  # fmt: skip
    np.save(tmp_path / "X.npy", X)
    outputs = []
    for rows in ("8", "100000"):
        out = tmp_path / f"out{rows}.npy"
        args = ["--model", tmp_path / "m.skops", "--input", tmp_path / "X.npy"]
        code, _, err = run(capsys, "transform", *args, "--output", out, "--rows-per-batch", rows)
        assert code == 0, err
        outputs.append(np.load(out))
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_progress_bar_on_a_terminal(tmp_path, capsys, planted_table, monkeypatch):
    src, tgt = write_pair(tmp_path, planted_table, "npy", "npy", "list", "list")
    model = tmp_path / "m.skops"
    assert fit(capsys, src, tgt, model)[0] == 0
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        src,
        "--output",
        tmp_path / "o.npy",
        "--id-column",
        "id",
        "--rows-per-batch",
        "50",
    )
    assert code == 0
    assert "/120 [" in err and "rows/s" in err  # tqdm drew the bar on stderr
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        src,
        "--output",
        tmp_path / "o.npy",
        "--id-column",
        "id",
        "--force",
        "--no-progress",
    )
    assert code == 0 and "rows/s" not in err


def test_interrupt_leaves_nothing(tmp_path, capsys, planted_table, monkeypatch):
    from sklearn_compat.cli import _commands as _cli_commands

    src, tgt = write_pair(tmp_path, planted_table, "parquet", "parquet")
    model = tmp_path / "m.skops"
    assert fit(capsys, src, tgt, model)[0] == 0
    calls = []

    def interrupted(model, batch, reader, columns=(None, None)):
        calls.append(batch.start)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return model.transform(_cli_commands._model_input(batch.X, *columns))

    monkeypatch.setattr(_cli_commands, "_map_batch", interrupted)
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        src,
        "--output",
        tmp_path / "o.parquet",
        "--id-column",
        "id",
        "--rows-per-batch",
        "50",
    )
    assert code == 130 and "interrupted; no output was written" in err
    assert no_output_left(tmp_path, "o.parquet")


def test_transform_changes_form_on_request(tmp_path, capsys, planted_table):
    ids, X, Y, _ = planted_table
    src, tgt = write_pair(tmp_path, planted_table, "csv", "parquet")
    model = tmp_path / "m.skops"
    assert fit(capsys, src, tgt, model)[0] == 0
    out = tmp_path / "out.npy"
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        src,
        "--output",
        out,
        "--id-column",
        "id",
        "--output-form",
        "list",
        "--output-column",
        "vec",
        "--dtype",
        "float32",
    )
    assert code == 0, err
    data = np.load(out)
    assert data.dtype.names == ("id", "vec")
    assert data["id"].tolist() == ids.tolist() and data["vec"].dtype == np.float32
    assert np.allclose(data["vec"], Y, atol=1e-5)


def test_plain_npy_keeps_row_order(tmp_path, capsys, planted_table):
    ids, X, Y, _ = planted_table
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y[::-1])  # plain arrays pair by row number ...
    model = tmp_path / "m.skops"
    code, _, err = run(
        capsys,
        "fit",
        "--method",
        "procrustes",
        "--source",
        tmp_path / "x.npy",
        "--target",
        tmp_path / "y.npy",
        "--model",
        model,
    )
    assert code == 0 and "joined on 'row number'" in err
    np.save(tmp_path / "y.npy", Y)  # ... so the reversed target fits a different map
    code, _, _ = run(
        capsys,
        "fit",
        "--method",
        "procrustes",
        "--source",
        tmp_path / "x.npy",
        "--target",
        tmp_path / "y.npy",
        "--model",
        model,
        "--force",
    )
    assert code == 0
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        tmp_path / "x.npy",
        "--output",
        tmp_path / "z.npy",
    )
    assert code == 0, err
    Z = np.load(tmp_path / "z.npy")
    assert Z.shape == (N, D_Y) and np.allclose(Z, Y, atol=1e-5)


def test_joblib_model_needs_trust(tmp_path, capsys, planted_table):
    src, tgt = write_pair(tmp_path, planted_table, "parquet", "parquet")
    model = tmp_path / "m.joblib"
    assert fit(capsys, src, tgt, model)[0] == 0
    out = tmp_path / "out.parquet"
    args = ["transform", "--model", model, "--input", src, "--output", out, "--id-column", "id"]
    code, _, err = run(capsys, *args)
    assert_one_line_error(code, err, "m.joblib", "--trust")
    assert not out.exists()
    assert run(capsys, *args, "--trust")[0] == 0
    # Without --id-column the ids cannot be kept: the command says so.
    code, _, err = run(capsys, *args[:-2], "--trust", "--force")
    assert code == 0
    assert "warning: " in err and "no --id-column given" in err and "'id'" in err


# ------------------------------------------------------------------- bad input
@pytest.fixture
def fitted(tmp_path, capsys, planted_table):
    src, tgt = write_pair(tmp_path, planted_table, "csv", "parquet")
    model = tmp_path / "m.skops"
    assert fit(capsys, src, tgt, model)[0] == 0
    return src, tgt, model


def no_output_left(tmp_path, name):
    return not any(p.name.startswith((name, f".{name}")) for p in tmp_path.iterdir())


def test_nan_in_a_row(tmp_path, capsys, fitted):
    src, tgt, model = fitted
    lines = src.read_text().splitlines()
    cells = lines[58].split(",")
    cells[4] = "nan"
    lines[58] = ",".join(cells)
    src.write_text("\n".join(lines) + "\n")
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        src,
        "--output",
        tmp_path / "out.parquet",
        "--id-column",
        "id",
        "--rows-per-batch",
        "16",
    )
    assert_one_line_error(
        code, err, "src.csv: line 59 (id 'item057'), column 'dim_3': value is NaN"
    )
    assert no_output_left(tmp_path, "out.parquet")
    code, _, err = fit(capsys, src, tgt, tmp_path / "m2.skops")
    assert_one_line_error(code, err, "line 59", "'dim_3'")
    assert no_output_left(tmp_path, "m2.skops")


def test_missing_id_column(tmp_path, capsys, fitted):
    src, tgt, model = fitted
    code, _, err = run(
        capsys,
        "fit",
        "--method",
        "procrustes",
        "--source",
        src,
        "--target",
        tgt,
        "--id-column",
        "key",
        "--model",
        tmp_path / "m2.skops",
    )
    assert_one_line_error(code, err, "src.csv: no id column 'key' (columns: 'id', 'dim_0'")
    code, _, err = run(
        capsys,
        "fit",
        "--method",
        "procrustes",
        "--source",
        src,
        "--target",
        tgt,
        "--id-column",
        "id",
        "--target-id-column",
        "key",
        "--model",
        tmp_path / "m2.skops",
    )
    assert_one_line_error(code, err, "tgt.parquet: no id column 'key'")


def test_no_ids_in_common(tmp_path, capsys, planted_table):
    ids, X, Y, _ = planted_table
    write_table(tmp_path / "a.csv", ids, X, OutputLayout("columns", D_X, "id"))
    write_table(tmp_path / "b.csv", np.char.add("x", ids), Y, OutputLayout("columns", D_Y, "id"))
    code, _, err = fit(capsys, tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "m.skops")
    assert_one_line_error(
        code, err, "no ids in common", "a.csv (ids like 'item000'", "b.csv (ids like 'xitem000'"
    )
    assert no_output_left(tmp_path, "m.skops")


def test_duplicated_ids(tmp_path, capsys, planted_table):
    ids, X, Y, _ = planted_table
    dup = ids.copy()
    dup[5] = dup[4]
    write_table(tmp_path / "a.parquet", dup, X, OutputLayout("list", D_X, "id"))
    write_table(tmp_path / "b.parquet", ids, Y, OutputLayout("list", D_Y, "id"))
    args = [tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "m.skops"]
    code, _, err = fit(capsys, *args)
    assert_one_line_error(
        code,
        err,
        "a.parquet: 1 ids appear on more than one row",
        "'item004' on row 4 and row 5",
        "--duplicates",
    )
    code, _, err = fit(capsys, *args, "--duplicates", "first")
    assert code == 0
    assert "119 ids matched" in err and "duplicated ids: 1 in the source" in err


def test_wrong_width_for_the_model(tmp_path, capsys, fitted, rng):
    src, tgt, model = fitted
    narrow = tmp_path / "narrow.parquet"
    write_table(narrow, np.arange(5), rng.normal(size=(5, 3)), OutputLayout("list", 3, "id"))
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        narrow,
        "--output",
        tmp_path / "out.csv",
        "--id-column",
        "id",
    )
    assert_one_line_error(
        code,
        err,
        "narrow.parquet: the embedding (list column 'embedding'",
        "has 3 values per row, but the model",
        "expects 6",
    )
    assert no_output_left(tmp_path, "out.csv")
    code, _, err = run(
        capsys, "evaluate", "--model", model, "--source", tgt, "--target", tgt, "--id-column", "id"
    )
    assert_one_line_error(code, err, "tgt.parquet", "8 values per row", "expects 6")


@pytest.mark.parametrize("damage", ["missing", "corrupt", "not a model"])
def test_bad_model_file(tmp_path, capsys, fitted, damage):
    src, _, model = fitted
    if damage == "missing":
        model.unlink()
    elif damage == "corrupt":
        model.write_bytes(model.read_bytes()[:200])
    else:
        model.write_text("hello")
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        src,
        "--output",
        tmp_path / "out.csv",
        "--id-column",
        "id",
    )
    assert_one_line_error(code, err, "m.skops: ")
    assert no_output_left(tmp_path, "out.csv")


def test_unwritable_output(tmp_path, capsys, fitted):
    src, _, model = fitted
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        src,
        "--output",
        tmp_path / "no" / "such" / "out.csv",
        "--id-column",
        "id",
    )
    assert_one_line_error(code, err, "out.csv: directory", "does not exist")
    if os.geteuid() != 0:  # root can write into read-only directories
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        code, _, err = run(
            capsys,
            "transform",
            "--model",
            model,
            "--input",
            src,
            "--output",
            locked / "out.csv",
            "--id-column",
            "id",
        )
        assert_one_line_error(code, err, "Permission denied")


def test_existing_output_needs_force(tmp_path, capsys, fitted):
    src, tgt, model = fitted
    out = tmp_path / "out.csv"
    out.write_text("keep me")
    args = ["transform", "--model", model, "--input", src, "--output", out, "--id-column", "id"]
    code, _, err = run(capsys, *args)
    assert_one_line_error(code, err, "out.csv: already exists (pass --force")
    assert out.read_text() == "keep me"
    code, _, err = fit(capsys, src, tgt, model)
    assert_one_line_error(code, err, "m.skops: already exists")
    code, _, err = run(capsys, *args[:-4], "--output", src, "--id-column", "id", "--force")
    assert_one_line_error(code, err, "src.csv: is also an input")
    assert run(capsys, *args, "--force")[0] == 0
    assert out.read_text().startswith("id,dim_0")


def test_failure_mid_stream_leaves_nothing(tmp_path, capsys, fitted):
    src, _, model = fitted
    out = tmp_path / "out.parquet"
    out.write_text("previous")
    lines = src.read_text().splitlines()
    lines[100] = lines[100].replace(",", ",inf,", 1).rsplit(",", 1)[0]  # row 98: inf
    src.write_text("\n".join(lines) + "\n")
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        src,
        "--output",
        out,
        "--id-column",
        "id",
        "--rows-per-batch",
        "10",
        "--force",
    )
    assert_one_line_error(code, err, "line 101", "value is inf")
    # Nine batches were written before the bad one; none of it may show.
    assert out.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_options_that_do_not_apply(tmp_path, capsys, fitted):
    src, tgt, _ = fitted
    code, _, err = fit(capsys, src, tgt, tmp_path / "x.skops", "--lam", "3")
    assert_one_line_error(code, err, "--lam does not apply to --method procrustes")
    # A malformed device name is a usage error (exit status 2), like a malformed lambda.
    with pytest.raises(SystemExit) as exc:
        fit(capsys, src, tgt, tmp_path / "x.skops", "--device", "gpu7")
    assert exc.value.code == 2
    assert "argument --device: device must be" in capsys.readouterr().err


def test_fit_with_labels(tmp_path, capsys, planted_table):
    ids, X, Y, _ = planted_table
    src = tmp_path / "src.parquet"
    frame = pd.DataFrame({"id": ids, "label": np.arange(N) % 3, "vec": list(X)})
    frame.to_parquet(src)
    tgt = tmp_path / "tgt.npy"
    write_table(tgt, ids, Y, OutputLayout("list", D_Y, "id", id_dtype=ids.dtype))
    code, _, err = fit(capsys, src, tgt, tmp_path / "m.skops", "--labels-column", "label")
    assert_one_line_error(code, err, "--labels-column does not apply to --method procrustes")
    if importlib.util.find_spec("sklearn_compat.lambda_orth") is None:
        return
    code, _, err = run(
        capsys,
        "fit",
        "--method",
        "lambda-orth",
        "--source",
        src,
        "--target",
        tgt,
        "--id-column",
        "id",
        "--model",
        tmp_path / "m.skops",
        "--labels-column",
        "label",
        "--epochs",
        "2",
        "--seed",
        "0",
        "--device",
        "cpu",
        "--lam",
        "12",
    )
    assert code == 0, err
    model = load_model(tmp_path / "m.skops")
    assert model.lam == 12 and model.max_epochs == 2 and model.n_features_in_ == D_X
    # A row without a label is named (file, row, id, column), for fit and for evaluate.
    labels = (np.arange(N) % 3).astype(float)
    labels[7] = np.nan
    frame.assign(label=labels).to_parquet(src)
    for command in ("fit", "evaluate"):
        args = ["--method", "lambda-orth", "--force"] if command == "fit" else []
        code, _, err = run(
            capsys,
            command,
            "--source",
            src,
            "--target",
            tgt,
            "--id-column",
            "id",
            "--model",
            tmp_path / "m.skops",
            "--labels-column",
            "label",
            *args,
        )
        assert_one_line_error(code, err, "src.parquet: row 7 (id ", "'label': missing value")


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--method", "nope"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["grid", "--source", "a", "--target", "b", "--lam", "-1", "--output", "r.csv"])
    assert exc.value.code == 2
    assert "lambda must be >= 0" in capsys.readouterr().err
    # One fold is a usage error in our words, not scikit-learn's "n_splits" after a join.
    with pytest.raises(SystemExit) as exc:
        main(["grid", "--source", "a", "--target", "b", "--lam", "0", "--cv", "1"])
    assert exc.value.code == 2
    assert "at least 2 folds, got 1" in capsys.readouterr().err
    # A malformed device is a usage error, not blamed on the rows of the input file.
    with pytest.raises(SystemExit) as exc:
        main(["transform", "--model", "m", "--input", "i.csv", "--output", "o", "--device", "gpu"])
    assert exc.value.code == 2
    assert "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'" in capsys.readouterr().err


def test_debug_shows_the_traceback(tmp_path, capsys, fitted):
    src, _, _ = fitted
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        tmp_path / "none.skops",
        "--input",
        src,
        "--output",
        tmp_path / "o.csv",
        "--debug",
    )
    assert code == 1
    assert "Traceback" in err and err.strip().endswith("no such model file")


def test_console_entry_point_in_a_subprocess(tmp_path, fitted):
    src, _, model = fitted
    model.write_bytes(b"PK\x03\x04 truncated zip")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sklearn_compat",
            "transform",
            "--model",
            str(model),
            "--input",
            str(src),
            "--output",
            str(tmp_path / "o.csv"),
            "--id-column",
            "id",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("sklearn-compat: error: ") and "m.skops" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.csv").exists()


# ------------------------------------------------------------------- grid, encode
def test_grid_not_available_is_a_clear_error(tmp_path, capsys, fitted, monkeypatch):
    src, tgt, _ = fitted
    monkeypatch.setitem(sys.modules, "sklearn_compat.lambda_orth", None)
    code, _, err = run(
        capsys,
        "grid",
        "--source",
        src,
        "--target",
        tgt,
        "--id-column",
        "id",
        "--lam",
        "0",
        "inf",
        "--output",
        tmp_path / "r.csv",
    )
    assert_one_line_error(code, err, "method 'lambda-orth' is not available")
    assert no_output_left(tmp_path, "r.")


def test_encode_not_available_is_a_clear_error(tmp_path, capsys, fitted, monkeypatch):
    src, _, _ = fitted
    monkeypatch.setitem(sys.modules, "sklearn_compat.relative", None)
    code, _, err = run(
        capsys, "encode", "--input", src, "--output", tmp_path / "r.csv", "--id-column", "id"
    )
    assert_one_line_error(code, err, "the encode command is not available")


def test_grid_table_and_plot(tmp_path, capsys, fitted):
    src, tgt, _ = fitted
    results = tmp_path / "grid.csv"
    code, out, err = run(
        capsys,
        "grid",
        "--source",
        src,
        "--target",
        tgt,
        "--id-column",
        "id",
        "--lam",
        "0",
        "12",
        "inf",
        "--cv",
        "2",
        "--epochs",
        "3",
        "--output",
        results,
        "--seed",
        "0",
        "--device",
        "cpu",
    )
    assert code == 0, err
    frame = pd.read_csv(results)
    assert frame["method"].tolist()[-3:] == ["lambda-orth"] * 3
    assert frame["method"].iloc[0] == "procrustes"
    assert np.isinf(frame["lam"].iloc[-1])
    assert frame.loc[0, "mean_top1"] == 1.0  # Procrustes recovers the planted map
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_encode_with_a_parallel_export(tmp_path, capsys, planted_table):
    pytest.importorskip("sklearn_compat.relative")
    ids, X, Y, _ = planted_table
    write_table(tmp_path / "a.parquet", ids, X, OutputLayout("list", D_X, "id"))
    order = np.random.default_rng(3).permutation(N)
    write_table(tmp_path / "b.csv", ids[order], Y[order], OutputLayout("columns", D_Y, "id"))
    code, _, err = run(
        capsys,
        "encode",
        "--input",
        tmp_path / "a.parquet",
        "--output",
        tmp_path / "ra.parquet",
        "--id-column",
        "id",
        "--n-anchors",
        "10",
        "--seed",
        "0",
        "--parallel",
        tmp_path / "b.csv",
        "--parallel-output",
        tmp_path / "rb.csv",
    )
    assert code == 0, err
    _, ra = read_table(tmp_path / "ra.parquet", ColumnSpec("id"))
    reader_b, rb = read_table(tmp_path / "rb.csv", ColumnSpec("id"))
    assert ra.X.shape == (N, 10) and reader_b.form == "columns"
    # The planted map is orthogonal, so cosine similarities to the same anchor items are
    # the same in both spaces: the two encodings agree row by row after the id join.
    position = {v: i for i, v in enumerate(rb.ids)}
    assert np.allclose(ra.X, rb.X[[position[v] for v in ra.ids]], atol=1e-4)


def test_columns_are_matched_by_name_not_position(tmp_path, capsys):
    # A second export whose embedding columns come in another order used to be mapped
    # position by position, silently wrong; the model now keeps X's column names.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    Y = X @ np.linalg.qr(rng.normal(size=(4, 4)))[0]
    ids = [f"i{k}" for k in range(60)]
    src = pd.DataFrame(X, columns=["a", "b", "c", "d"]).assign(id=ids)
    src.to_csv(tmp_path / "src.csv", index=False)
    src[["id", "d", "c", "b", "a"]].to_csv(tmp_path / "shuffled.csv", index=False)
    src.rename(columns={"a": "z"}).to_csv(tmp_path / "renamed.csv", index=False)
    pd.DataFrame(Y, columns=["u", "v", "w", "x"]).assign(id=ids).to_csv(
        tmp_path / "tgt.csv", index=False
    )
    model = tmp_path / "m.skops"
    assert fit(capsys, tmp_path / "src.csv", tmp_path / "tgt.csv", model)[0] == 0
    outputs = {}
    for name in ("src", "shuffled", "renamed"):
        code, _, err = run(
            capsys,
            "transform",
            "--model",
            model,
            "--input",
            tmp_path / f"{name}.csv",
            "--output",
            tmp_path / f"out_{name}.csv",
            "--id-column",
            "id",
        )
        assert code == 0, err
        assert ("matched by position" in err) == (name == "renamed"), err
        outputs[name] = (tmp_path / f"out_{name}.csv").read_text()
    assert outputs["shuffled"] == outputs["src"]
    assert outputs["renamed"] == outputs["src"]
    code, out, err = run(
        capsys,
        "evaluate",
        "--model",
        model,
        "--source",
        tmp_path / "shuffled.csv",
        "--target",
        tmp_path / "tgt.csv",
        "--id-column",
        "id",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["metrics"]["top1"] == 1.0


def _encode_tables(tmp_path, rng):
    """Two exports of the same 80 items, same order; the source has a label column."""
    X = rng.normal(size=(80, 5))
    Y = np.tanh(X @ rng.normal(size=(5, 4)))
    ids = [f"i{k:02d}" for k in range(80)]
    labels = np.arange(80) % 4
    src = pd.DataFrame(X, columns=[f"a{j}" for j in range(5)]).assign(id=ids, label=labels)
    src.to_csv(tmp_path / "src.csv", index=False)
    tgt = pd.DataFrame(Y, columns=[f"b{j}" for j in range(4)]).assign(id=ids)
    tgt.to_parquet(tmp_path / "tgt.parquet", index=False)
    return X, Y, labels


def test_encode_param_learns_the_anchors_across_the_parallel_export(tmp_path, capsys, rng):
    # --anchors param with --parallel used to learn the mixture on INPUT alone.
    from sklearn_compat import RelativeAnchorEncoder

    X, Y, _ = _encode_tables(tmp_path, rng)
    code, _, err = run(
        capsys,
        "encode",
        "--input",
        tmp_path / "src.csv",
        "--prefix",
        "a",
        "--output",
        tmp_path / "ea.csv",
        "--id-column",
        "id",
        "--n-anchors",
        "6",
        "--anchors",
        "param",
        "--similarity",
        "wip",
        "--seed",
        "0",
        "--parallel",
        tmp_path / "tgt.parquet",
        "--parallel-prefix",
        "b",
        "--parallel-output",
        tmp_path / "eb.csv",
    )
    assert code == 0, err
    enc = RelativeAnchorEncoder(n_anchors=6, anchors="param", similarity="wip", random_state=0)
    enc.fit(X, parallel=[Y])
    got_a = pd.read_csv(tmp_path / "ea.csv")
    got_b = pd.read_csv(tmp_path / "eb.csv")
    assert list(got_a.columns) == ["id"] + [f"anchor{i}" for i in range(6)]
    np.testing.assert_allclose(got_a.iloc[:, 1:].to_numpy(), enc.transform(X), rtol=1e-10)
    np.testing.assert_allclose(
        got_b.iloc[:, 1:].to_numpy(), enc.rebase(Y).transform(Y), rtol=1e-10
    )


def test_encode_stratified_with_labels_and_saved_encoder(tmp_path, capsys, rng):
    from sklearn_compat import RelativeAnchorEncoder

    X, _, labels = _encode_tables(tmp_path, rng)
    base = ["encode", "--input", tmp_path / "src.csv", "--id-column", "id", "--prefix", "a"]
    base += ["--n-anchors", "8", "--seed", "0"]
    code, _, err = run(capsys, *base, "--output", tmp_path / "x.csv", "--anchors", "stratified")
    assert_one_line_error(code, err, "--anchors stratified needs --labels-column")
    code, _, err = run(capsys, *base, "--output", tmp_path / "x.csv", "--labels-column", "label")
    assert_one_line_error(code, err, "--labels-column only applies to --anchors stratified")
    assert no_output_left(tmp_path, "x.")
    strat = ["--anchors", "stratified", "--labels-column", "label"]
    model = tmp_path / "enc.skops"
    code, _, err = run(capsys, *base, *strat, "--output", tmp_path / "e.csv", "--model", model)
    assert code == 0, err
    enc = RelativeAnchorEncoder(n_anchors=8, anchors="stratified", random_state=0)
    enc.fit(X, labels)
    encoded = pd.read_csv(tmp_path / "e.csv")
    np.testing.assert_allclose(encoded.iloc[:, 1:].to_numpy(), enc.transform(X), rtol=1e-10)
    np.testing.assert_array_equal(load_model(model).anchor_indices_, enc.anchor_indices_)
    # The saved encoder, applied with `transform`, writes the very same table.
    code, _, err = run(
        capsys,
        "transform",
        "--model",
        model,
        "--input",
        tmp_path / "src.csv",
        "--prefix",
        "a",
        "--id-column",
        "id",
        "--output",
        tmp_path / "t.csv",
    )
    assert code == 0, err
    assert (tmp_path / "t.csv").read_text() == (tmp_path / "e.csv").read_text()


def test_encode_outputs_must_be_distinct_and_choices_checked(tmp_path, capsys, rng):
    _encode_tables(tmp_path, rng)
    base = ["encode", "--input", tmp_path / "src.csv", "--id-column", "id", "--prefix", "a"]
    base += ["--n-anchors", "4", "--output", tmp_path / "e.csv"]
    code, _, err = run(
        capsys,
        *base,
        "--parallel",
        tmp_path / "tgt.parquet",
        "--parallel-prefix",
        "b",
        "--parallel-output",
        tmp_path / "e.csv",
    )
    # The parallel encoding used to replace the first one silently.
    assert_one_line_error(code, err, "--parallel-output and --output name the same file")
    code, _, err = run(capsys, *base, "--model", tmp_path / "e.csv")
    assert_one_line_error(code, err, "--model and --output name the same file")
    assert no_output_left(tmp_path, "e.")
    for option, value in (("--anchors", "bogus"), ("--similarity", "cos")):
        with pytest.raises(SystemExit) as info:
            main([str(a) for a in base] + [option, value])
        assert info.value.code == 2
        assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--lam", "0", "1", "1"], "--lam has repeated values: 1"),
        (["--lam", "0", "--output-suffix", ".txt"], "results must be .csv, .parquet or .json"),
        (["--lam", "0", "--plot", "SAME"], "--plot and --output name the same file"),
    ],
)
def test_grid_refuses_before_any_fit(tmp_path, capsys, fitted, extra, message):
    # These used to be found after every fold had been trained (the plot was even
    # written over the results file), or not at all (repeated lambdas).
    src, tgt, _ = fitted
    output = tmp_path / "res.csv"
    if "--output-suffix" in extra:
        output = output.with_suffix(extra[-1])
        extra = extra[:2]
    extra = [output if a == "SAME" else a for a in extra]
    code, _, err = run(
        capsys,
        "grid",
        "--source",
        src,
        "--target",
        tgt,
        "--id-column",
        "id",
        "--cv",
        "2",
        "--epochs",
        "2",
        "--output",
        output,
        *extra,
    )
    assert_one_line_error(code, err, message)
    assert "top-1" not in err  # nothing was fitted
    assert no_output_left(tmp_path, "res.")


@pytest.mark.filterwarnings("ignore:X does not have valid feature names")
@pytest.mark.parametrize(
    "method, extra",
    [
        ("whitened", []),
        ("refined", []),
        ("residual", ["--epochs", "2", "--seed", "0", "--lam", "1"]),
        ("rcsls", []),
    ],
)
def test_fit_with_the_newer_methods(tmp_path, capsys, planted_table, method, extra):
    src, tgt = write_pair(tmp_path, planted_table, "parquet", "npy")
    model_path = tmp_path / "m.skops"
    code, _, err = run(
        capsys,
        "fit",
        "--method",
        method,
        "--source",
        src,
        "--target",
        tgt,
        "--id-column",
        "id",
        "--model",
        model_path,
        "--device",
        "cpu",
        *extra,
    )
    assert code == 0, err
    model = load_model(model_path)  # skops, trusting only this package's types
    assert model.n_features_in_ == D_X and model.n_targets_ == D_Y
    _, X, Y, _ = planted_table
    assert model.score(X, Y) > 0.9


def test_a_diverging_lambda_orth_fit_is_an_error_not_a_model(tmp_path, capsys, planted_table):
    # `fit --method lambda-orth --lr 10` used to exit 0 with a map scoring 0.009.
    src, tgt = write_pair(tmp_path, planted_table, "parquet", "parquet")
    model = tmp_path / "m.skops"
    code, _, err = run(
        capsys, "fit", "--method", "lambda-orth", "--source", src, "--target", tgt,
        "--id-column", "id", "--model", model, "--lr", "10", "--seed", "0",
    )  # fmt: skip
    assert_one_line_error(code, err, "Training diverged", "lr=10")
    assert not model.exists()

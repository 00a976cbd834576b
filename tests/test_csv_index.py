"""CSV files written by pandas' ``to_csv``: the index column is never an embedding column."""

import warnings

import numpy as np
import pandas as pd
import pytest

from sklearn_compat.cli import main
from sklearn_compat.io import ColumnSpec, read_table


def _frame(n=40, d=8, seed=0):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(n, d)), columns=[f"e{i}" for i in range(d)])
    frame.insert(0, "id", [f"doc{i}" for i in range(n)])
    return frame


def _read(path, **spec):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader, table = read_table(path, ColumnSpec(id_column="id", **spec))
    messages = [str(w.message) for w in caught if "pandas index" in str(w.message)]
    return reader, table, messages


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda f, p: f.to_csv(p), id="default-index"),
        pytest.param(lambda f, p: f.rename_axis("row").to_csv(p), id="named-index"),
        pytest.param(lambda f, p: f.iloc[5:].to_csv(p), id="range-index-from-5"),
        pytest.param(lambda f, p: f.sample(frac=1, random_state=0).to_csv(p), id="shuffled"),
        pytest.param(
            lambda f, p: pd.read_csv(_written(f, p)).to_csv(p, index=False), id="re-written"
        ),
    ],
)
def test_index_column_is_dropped_once_with_a_message(tmp_path, write):
    frame = _frame()
    path = tmp_path / "withindex.csv"
    write(frame, path)
    reader, table, messages = _read(path)
    assert reader.vector_columns == [f"e{i}" for i in range(8)]
    assert table.X.shape[1] == 8
    expected = frame.set_index("id").loc[table.ids].to_numpy()
    np.testing.assert_allclose(table.X, expected)
    assert len(messages) == 1 and "ignored" in messages[0]


def _written(frame, path):
    frame.to_csv(path)  # with the index: re-read, it is a column named "Unnamed: 0"
    return path


def test_index_false_reads_every_column_without_a_message(tmp_path):
    path = tmp_path / "plain.csv"
    _frame().to_csv(path, index=False)
    reader, table, messages = _read(path)
    assert reader.vector_columns == [f"e{i}" for i in range(8)] and not messages


def test_an_integer_dimension_that_is_not_a_range_is_kept(tmp_path):
    frame = _frame().drop(columns="id")
    frame.insert(0, "count", np.arange(len(frame)) * 3)
    frame.insert(0, "id", [f"doc{i}" for i in range(len(frame))])
    path = tmp_path / "counts.csv"
    frame.to_csv(path, index=False)
    reader, _, messages = _read(path)
    assert reader.vector_columns[0] == "count" and not messages


def test_a_float_first_column_is_a_dimension(tmp_path):
    frame = _frame().drop(columns="id").assign(id=[f"doc{i}" for i in range(40)])
    path = tmp_path / "floats_first.csv"
    frame.to_csv(path, index=False)
    reader, _, messages = _read(path)
    assert reader.vector_columns == [f"e{i}" for i in range(8)] and not messages


def test_the_index_can_still_be_the_id_column(tmp_path):
    path = tmp_path / "named.csv"
    _frame().drop(columns="id").rename_axis("row").to_csv(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reader, table = read_table(path, ColumnSpec(id_column="row"))
    assert table.ids.tolist()[:3] == ["0", "1", "2"] and reader.width == 8


def test_cli_fit_and_evaluate_on_a_to_csv_export(tmp_path, capsys):
    """The issue's reproduction: 8 -> 8 dimensions and top-1 1.0, with one warning."""
    frame = _frame(n=60)
    frame.to_csv(tmp_path / "new.csv", index=False)
    frame.to_csv(tmp_path / "old.csv", index=False)
    pd.read_csv(tmp_path / "new.csv").to_csv(tmp_path / "withindex.csv")
    common = ["--source", str(tmp_path / "withindex.csv"), "--target", str(tmp_path / "old.csv")]
    common += ["--id-column", "id", "--model", str(tmp_path / "m.skops")]
    assert main(["fit", "--method", "procrustes", *common]) == 0
    err = capsys.readouterr().err
    assert "(8 -> 8 dimensions)" in err and err.count("pandas index") == 1
    assert main(["evaluate", *common, "--json"]) == 0
    assert '"top1": 1.0' in capsys.readouterr().out

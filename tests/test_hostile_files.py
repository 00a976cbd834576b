"""The file route under a hostile new user (issue 44): no row lost, ids as written, plain
messages, and a model that finds its own columns beside others."""

import warnings

import numpy as np
import pandas as pd
import pytest

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.cli import main
from sklearn_compat.io import ColumnSpec, InputError, read_table, save_model


def _write_rows(path, rows, header=None):
    lines = [] if header is None else [",".join(header)]
    lines += [",".join(map(str, row)) for row in rows]
    path.write_text("\n".join(lines) + "\n")


def test_a_headerless_numeric_csv_keeps_its_first_row(tmp_path):
    X = np.random.default_rng(0).standard_normal((5, 3))
    path = tmp_path / "plain.csv"
    np.savetxt(path, X, delimiter=",")
    with pytest.warns(UserWarning, match="no header line"):
        reader, table = read_table(path)
    assert table.X.shape == (5, 3)
    np.testing.assert_array_equal(table.X, X)
    assert reader.vector_columns == ["0", "1", "2"]
    assert reader.where(0) == "line 1"  # the first line of the file is row 0


def test_a_headerless_csv_maps_every_row_through_the_cli(tmp_path, capsys):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 4))
    aligner = OrthogonalProcrustesAligner(center=False, scale=False, device="cpu").fit(X, X)
    save_model(aligner, tmp_path / "m.skops")
    np.savetxt(tmp_path / "in.csv", X[:5], delimiter=",")
    assert main(["transform", "--model", str(tmp_path / "m.skops"),
                 "--input", str(tmp_path / "in.csv"),
                 "--output", str(tmp_path / "out.csv")]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "wrote 5 rows" in err and "no header line" in err
    assert "site-packages" not in err
    out = pd.read_csv(tmp_path / "out.csv").to_numpy()
    np.testing.assert_allclose(out, X[:5], atol=1e-10)


def test_a_headerless_csv_with_an_id_column_asked_for_is_one_clear_line(tmp_path):
    np.savetxt(tmp_path / "plain.csv", np.eye(3), delimiter=",")
    with warnings.catch_warnings(), pytest.raises(InputError, match="no header line"):
        warnings.simplefilter("ignore")
        read_table(tmp_path / "plain.csv", ColumnSpec(id_column="id"))


def test_a_header_of_names_is_still_a_header(tmp_path):
    _write_rows(tmp_path / "t.csv", [[1, 2.5], [3, 4.5]], header=["1st", "e0"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reader, table = read_table(tmp_path / "t.csv")
    assert reader.columns == ["1st", "e0"] and len(table.X) == 2


NA_LIKE = ["NA", "null", "None", "N/A", "nan", "#N/A", "NULL", "n/a", "<NA>"]


def test_csv_ids_are_text_exactly_as_written(tmp_path):
    # "NA" is Namibia's country code; "None" and "nan" are ids like any other.
    rows = [[name, i, -i] for i, name in enumerate(NA_LIKE)]
    _write_rows(tmp_path / "t.csv", rows, header=["id", "e0", "e1"])
    _, table = read_table(tmp_path / "t.csv", ColumnSpec(id_column="id"))
    assert table.ids.tolist() == NA_LIKE
    assert table.X[:, 0].tolist() == list(range(len(NA_LIKE)))


def test_an_empty_csv_id_is_still_missing(tmp_path):
    _write_rows(tmp_path / "t.csv", [["a", 1], ["", 2]], header=["id", "e0"])
    with pytest.raises(InputError, match="line 3, column 'id': missing id"):
        read_table(tmp_path / "t.csv", ColumnSpec(id_column="id"))


def test_an_na_embedding_value_is_still_reported(tmp_path):
    _write_rows(tmp_path / "t.csv", [["a", 1], ["NA", "NA"]], header=["id", "e0"])
    with pytest.raises(InputError, match=r"line 3 \(id 'NA'\), column 'e0'"):
        read_table(tmp_path / "t.csv", ColumnSpec(id_column="id"))


def test_na_like_csv_ids_join_and_fit(tmp_path, capsys):
    rng = np.random.default_rng(2)
    ids = NA_LIKE + [f"x{i}" for i in range(20)]
    X = rng.standard_normal((len(ids), 3))
    for name, M in (("s.csv", X), ("t.csv", X[:, ::-1])):
        _write_rows(tmp_path / name, [[i, *row] for i, row in zip(ids, M, strict=True)],
                    header=["id", "e0", "e1", "e2"])  # fmt: skip
    assert main(["fit", "--method", "procrustes", "--source", str(tmp_path / "s.csv"),
                 "--target", str(tmp_path / "t.csv"), "--id-column", "id",
                 "--model", str(tmp_path / "m.skops")]) == 0  # fmt: skip
    assert f"{len(ids)} ids matched" in capsys.readouterr().err


def test_duplicate_id_message_prints_the_plain_id(tmp_path, capsys):
    frame = pd.DataFrame({"id": np.array([5, 0, 7, 0]), "e0": [1.0, 2.0, 3.0, 4.0]})
    frame.to_parquet(tmp_path / "dup.parquet")
    code = main(["fit", "--method", "procrustes", "--source", str(tmp_path / "dup.parquet"),
                 "--target", str(tmp_path / "dup.parquet"), "--id-column", "id",
                 "--model", str(tmp_path / "m.skops")])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0
    assert "e.g. id 0 on row 1 and row 3" in err, err
    assert "np." not in err


def _price_table(tmp_path, rng):
    X = rng.standard_normal((30, 4))
    names = [f"e{j}" for j in range(4)]
    fitted = OrthogonalProcrustesAligner(center=False, scale=False, device="cpu")
    fitted.fit(pd.DataFrame(X, columns=names), X[:, ::-1])
    save_model(fitted, tmp_path / "m.skops")
    frame = pd.DataFrame(X, columns=names)
    frame.insert(0, "id", [f"i{k}" for k in range(30)])
    frame.insert(3, "price", rng.random(30) * 100)  # an extra numeric column in between
    return X, fitted, frame


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_an_extra_numeric_column_beside_the_models_columns_is_left_out(tmp_path, capsys, suffix):
    rng = np.random.default_rng(3)
    X, fitted, frame = _price_table(tmp_path, rng)
    path = tmp_path / f"in{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    out = tmp_path / f"out{suffix}"
    assert main(["transform", "--model", str(tmp_path / "m.skops"), "--input", str(path),
                 "--id-column", "id", "--output", str(out)]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "'price' is not part of the embedding" in err and "wrote 30 rows" in err
    mapped = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    np.testing.assert_allclose(mapped.drop(columns="id").to_numpy(), fitted.transform(X),
                               atol=1e-10)  # fmt: skip


def test_a_wider_table_without_the_models_names_points_at_prefix(tmp_path, capsys):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((30, 4))
    save_model(OrthogonalProcrustesAligner(device="cpu").fit(X, X), tmp_path / "m.skops")
    frame = pd.DataFrame(rng.standard_normal((5, 5)), columns=list("abcde"))
    frame.to_csv(tmp_path / "in.csv", index=False)
    code = main(["transform", "--model", str(tmp_path / "m.skops"), "--input",
                 str(tmp_path / "in.csv"), "--output", str(tmp_path / "o.csv")])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "--prefix or --pattern" in err, err


def test_a_reader_in_id_order_names_rows_by_id_alone():
    # A store read in id order (a database table has no file order) must not print a
    # position the user cannot find: its messages name the id alone.
    from sklearn_compat.io import Batch, TableReader

    class IdOrdered(TableReader):
        rows_in_file_order = False
        form, id_column, vector_columns = "columns", "id", ["e0"]

        def _batches(self, batch_size):
            yield Batch(0, np.array([3, 7], dtype=object), np.array([[1.0], [np.nan]]))

    reader = IdOrdered("db::items", ColumnSpec(id_column="id"), None, ())
    with pytest.raises(InputError, match=r"^db::items: id 7, column 'e0': value is NaN"):
        reader.read()


def test_pandas_default_column_names_are_still_a_header(tmp_path):
    # pd.DataFrame(X).to_csv(index=False) writes the header "0,1,2": names, not a data row.
    X = np.random.default_rng(5).standard_normal((4, 3))
    pd.DataFrame(X).to_csv(tmp_path / "t.csv", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reader, table = read_table(tmp_path / "t.csv")
    assert reader.columns == ["0", "1", "2"]
    np.testing.assert_array_equal(table.X, X)

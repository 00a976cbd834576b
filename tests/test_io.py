"""Embedding tables on disk: formats, column selection, batches, checks, joins, atomic writes."""

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.io import (
    AtomicOutput,
    ColumnSpec,
    InputError,
    OutputLayout,
    TableWriter,
    join_on_ids,
    load_model,
    open_table,
    read_table,
    save_model,
    table_format,
    write_table,
)

FORMATS = ["csv", "parquet", "npy"]


@pytest.fixture
def table(rng):
    ids = np.array([f"item{i}" for i in range(23)])
    X = rng.normal(size=(23, 5)).astype(np.float32)
    return ids, X


# --------------------------------------------------------------------------- formats
def test_format_from_name():
    assert table_format("a/b.CSV") == "csv"
    assert table_format("x.pq") == table_format("x.parquet") == "parquet"
    assert table_format("x.npy") == "npy"
    with pytest.raises(InputError, match=r"x\.txt: cannot tell the table format"):
        table_format("x.txt")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("form", ["columns", "list"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_trip_keeps_ids_values_and_form(tmp_path, table, fmt, form, dtype):
    ids, X = table
    X = X.astype(dtype) / 3  # float64 values need all 17 digits in text
    path = tmp_path / f"t.{fmt}"
    write_table(path, ids, X, OutputLayout(form, 5, "id"))
    reader, batch = read_table(path, ColumnSpec("id"))
    assert reader.form == form
    assert reader.id_column == "id"
    assert [str(v) for v in batch.ids] == list(ids)
    # Text holds the shortest decimal that reads back to the same float32.
    assert np.array_equal(batch.X.astype(dtype), X)
    assert batch.X.dtype == (np.float64 if fmt == "csv" else dtype)
    if form == "columns":
        assert reader.vector_columns == [f"dim_{i}" for i in range(5)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_batches_cover_the_table_in_order(tmp_path, table, fmt):
    ids, X = table
    path = tmp_path / f"t.{fmt}"
    write_table(path, ids, X, OutputLayout("list", 5, "id"))
    reader = open_table(path, ColumnSpec("id"))
    batches = list(reader.iter_batches(4))
    assert [len(b) for b in batches] == [4] * 5 + [3]
    assert [b.start for b in batches] == list(range(0, 23, 4))
    assert np.array_equal(np.concatenate([b.X for b in batches]).astype(np.float32), X)
    assert [str(v) for b in batches for v in b.ids] == list(ids)


def test_npy_layouts(tmp_path, table):
    ids, X = table
    plain = tmp_path / "plain.npy"
    np.save(plain, X)
    reader, batch = read_table(plain)
    assert reader.form == "array"
    assert np.array_equal(batch.ids, np.arange(23))  # ids are the row numbers
    assert np.array_equal(batch.X, X)

    structured = np.zeros(23, dtype=[("key", "<i8"), ("vec", "<f4", (5,)), ("w", "<f8")])
    structured["key"] = np.arange(100, 123)
    structured["vec"] = X
    path = tmp_path / "s.npy"
    np.save(path, structured)
    reader, batch = read_table(path, ColumnSpec("key", exclude=("w",)))
    assert reader.form == "list" and reader.list_column == "vec"
    assert np.array_equal(batch.ids, np.arange(100, 123))
    assert np.array_equal(batch.X, X)

    fortran = tmp_path / "f.npy"
    np.save(fortran, np.asfortranarray(X))
    batches = list(open_table(fortran).iter_batches(10))
    assert np.array_equal(np.concatenate([b.X for b in batches]), X)


def test_npy_writer_patches_row_count_after_streaming(tmp_path, table):
    ids, X = table
    path = tmp_path / "out.npy"
    with TableWriter(path, OutputLayout("list", 5, "id", id_dtype=np.dtype("U6"))) as w:
        for start in range(0, 23, 10):
            w.write(ids[start : start + 10], X[start : start + 10])
    data = np.load(path)
    assert data.shape == (23,)
    assert np.array_equal(data["embedding"], X)
    assert data["id"].tolist() == ids.tolist()


def test_npy_refuses_pickles_and_truncated_files(tmp_path, table):
    objects = tmp_path / "obj.npy"
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="Python objects"):
        open_table(objects)
    _, X = table
    cut = tmp_path / "cut.npy"
    np.save(cut, X)
    cut.write_bytes(cut.read_bytes()[:-30])
    with pytest.raises(InputError, match=r"cut\.npy: file is truncated"):
        read_table(cut)


# --------------------------------------------------------------------- column choice
def test_column_selection(tmp_path, rng):
    df = pd.DataFrame(rng.normal(size=(6, 4)), columns=["new_0", "new_1", "old_0", "old_1"])
    df.insert(0, "id", range(6))
    df["label"] = [0, 1] * 3
    path = tmp_path / "t.parquet"
    df.to_parquet(path)
    reader = open_table(path, ColumnSpec("id", prefix="old_"))
    assert reader.vector_columns == ["old_0", "old_1"]
    reader = open_table(path, ColumnSpec("id", pattern=r"new_\d"))
    assert reader.vector_columns == ["new_0", "new_1"]
    reader = open_table(path, ColumnSpec("id", exclude=("label",)))
    assert reader.vector_columns == ["new_0", "new_1", "old_0", "old_1"]
    with pytest.raises(InputError, match="no embedding columns"):
        open_table(path, ColumnSpec("id", prefix="zzz"))
    with pytest.raises(InputError, match="at most one of"):
        ColumnSpec("id", prefix="a", pattern="b")
    with pytest.raises(InputError, match="is numeric, not list-valued"):
        open_table(path, ColumnSpec("id", vector_column="new_0"))


def test_missing_id_column_names_the_columns(tmp_path, table):
    ids, X = table
    for fmt in FORMATS:
        path = tmp_path / f"t.{fmt}"
        write_table(path, ids, X, OutputLayout("columns", 5, "id"))
        with pytest.raises(InputError, match=rf"t\.{fmt}: no id column 'key' \(columns: 'id'"):
            open_table(path, ColumnSpec("key"))


# ----------------------------------------------------------------------- row checks
def test_nan_names_line_and_column_in_csv(tmp_path, table):
    ids, X = table
    path = tmp_path / "t.csv"
    write_table(path, ids, X, OutputLayout("columns", 5, "id"))
    lines = path.read_text().splitlines()
    cells = lines[8].split(",")
    cells[3] = ""  # data row 7 (0-based) is on line 9 of the file
    lines[8] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    reader = open_table(path, ColumnSpec("id"))
    with pytest.raises(
        InputError,
        match=r"t\.csv: line 9 \(id 'item7'\), column 'dim_2': "
        r"value is NaN",
    ):
        list(reader.iter_batches(4))


def test_nan_and_missing_id_in_parquet(tmp_path, table):
    ids, X = table
    X = X.copy()
    X[12, 4] = np.inf
    path = tmp_path / "t.parquet"
    write_table(path, ids, X, OutputLayout("list", 5, "id"))
    with pytest.raises(
        InputError,
        match=r"row 12 \(id 'item12'\), column 'embedding' "
        r"element 4: value is inf",
    ):
        read_table(path, ColumnSpec("id"))
    pq.write_table(pa.table({"id": ["a", None], "x": [1.0, 2.0]}), path)
    with pytest.raises(InputError, match=r"row 1, column 'id': missing id"):
        read_table(path, ColumnSpec("id"))


def test_ragged_parquet_lists(tmp_path):
    path = tmp_path / "r.parquet"
    pq.write_table(
        pa.table({"id": [1, 2, 3], "v": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0]]}), path
    )
    reader = open_table(path, ColumnSpec("id"))
    assert reader.form == "list" and reader.width is None  # not fixed-size: known on reading
    with pytest.raises(
        InputError,
        match=r"row 2 \(id 3\), column 'v': list has 1 values, "
        r"2 of the first 3 rows have 3",
    ):
        reader.read()
    pq.write_table(pa.table({"id": [1, 2], "v": [[1.0, 2.0], None]}), path)
    with pytest.raises(InputError, match=r"row 1 \(id 2\), column 'v': missing embedding"):
        read_table(path, ColumnSpec("id"))


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_ragged_lists_blame_the_odd_rows_even_when_they_come_first(tmp_path, suffix):
    lists = [[1.0, 2.0]] * 2 + [[1.0, 2.0, 3.0]] * 4
    path = tmp_path / f"r{suffix}"
    ids = ["a", "b", "c", "d", "e", "f"]
    if suffix == ".parquet":
        pq.write_table(pa.table({"id": ids, "v": lists}), path)
        where = "row 0"
    else:
        pd.DataFrame({"id": ids, "v": [str(v) for v in lists]}).to_csv(path, index=False)
        where = "line 2"
    with pytest.raises(InputError) as info:
        read_table(path, ColumnSpec("id"))
    assert str(info.value) == (
        f"{path}: {where} (id 'a'), column 'v': list has 2 values, 4 of the first 6 rows have 3"
    )
    # Once a batch has settled the width, a later batch's odd row is measured against it.
    settled = r"\(id 'c'\), column 'v': list has 3 values, earlier rows have 2$"
    with pytest.raises(InputError, match=settled):
        list(open_table(path, ColumnSpec("id")).iter_batches(2))


def test_bad_csv_values(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,a,b\nx,1,2\ny,3,oops\n")
    # By default a text column is metadata, not part of the embedding ...
    assert open_table(path, ColumnSpec("id")).vector_columns == ["a"]
    # ... but a column picked by name must be numeric: the bad cell is named.
    with pytest.raises(InputError, match=r"line 3, column 'b': not a number: 'oops'"):
        read_table(path, ColumnSpec("id", pattern="a|b"))
    # A bad value after the rows used to sniff the types is found the same way.
    rows = [f"r{i},{i},{i}" for i in range(300)] + ["bad,1,x"]
    path.write_text("id,a,b\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"line 302, column 'b': not a number: 'x'"):
        read_table(path, ColumnSpec("id"))
    lists = tmp_path / "l.csv"
    lists.write_text('id,v\nx,"[1, 2]"\ny,"[1, 2, 3]"\n')
    with pytest.raises(InputError, match=r"line 3 \(id 'y'\), column 'v': list has 3 values"):
        read_table(lists, ColumnSpec("id"))


def test_stray_text_in_a_sniffed_embedding_column_is_named(tmp_path):
    # One bad cell among the rows used to sniff the types used to turn the whole column
    # into "metadata", silently dropping a dimension; it is named instead.
    path = tmp_path / "t.csv"
    rows = [f"r{i},{i},{i},title {i}" for i in range(20)]
    rows[4] = "r4,4,oops,title 4"
    path.write_text("id,a,b,title\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"line 6, column 'b': not a number: 'oops'"):
        read_table(path, ColumnSpec("id"))
    # A text column that is mostly text stays metadata.
    path.write_text("id,a,b,title\n" + "\n".join(rows[:4] + rows[5:]) + "\n")
    assert open_table(path, ColumnSpec("id")).vector_columns == ["a", "b"]


def test_unreadable_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        open_table(tmp_path / "none.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match=r"bad\.parquet: not a readable Parquet file"):
        open_table(bad)
    empty = tmp_path / "e.csv"
    empty.write_text("")
    with pytest.raises(InputError, match="empty file"):
        open_table(empty)


# ----------------------------------------------------------------------------- joins
def _tables(tmp_path, src_ids, tgt_ids, X, Y):
    src, tgt = tmp_path / "s.parquet", tmp_path / "t.csv"
    write_table(src, np.asarray(src_ids), X, OutputLayout("list", X.shape[1], "id"))
    write_table(tgt, np.asarray(tgt_ids), Y, OutputLayout("columns", Y.shape[1], "id"))
    return read_table(src, ColumnSpec("id")), read_table(tgt, ColumnSpec("id"))


def test_join_pairs_shuffled_rows_and_counts(tmp_path, rng):
    X = rng.normal(size=(10, 3)).astype(np.float32)
    perm = rng.permutation(10)[:8]  # target: 8 of the 10 items, shuffled, plus 2 extra
    tgt_ids = np.concatenate([perm, [50, 51]])
    Y = np.concatenate([X[perm] * 2, np.ones((2, 3), np.float32)])
    source, target = _tables(tmp_path, np.arange(10), tgt_ids, X, Y)
    rows_s, rows_t, report = join_on_ids(source, target)
    # Parquet ids are integers, CSV ids text: they still match by value.
    assert report.matched == 8
    assert report.missing_in_target == 2 and report.missing_in_source == 2
    assert np.allclose(target[1].X[rows_t], 2 * source[1].X[rows_s])
    assert "8 ids matched" in report.summary()


def test_join_duplicate_policies(tmp_path, rng):
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    source, target = _tables(tmp_path, ["a", "b", "b", "c"], ["c", "b", "a"], X, X[:3])
    with pytest.raises(
        InputError,
        match=r"1 ids appear on more than one row, e\.g\. id 'b' "
        r"on row 1 and row 2; pass --duplicates",
    ):
        join_on_ids(source, target)
    rows_s, _, report = join_on_ids(source, target, duplicates="first")
    assert rows_s.tolist() == [0, 1, 3] and report.duplicated_source == 1
    rows_s, _, _ = join_on_ids(source, target, duplicates="last")
    assert rows_s.tolist() == [0, 2, 3]
    rows_s, _, report = join_on_ids(source, target, duplicates="drop")
    assert rows_s.tolist() == [0, 3] and report.dropped_rows_source == 2


def test_join_without_common_ids(tmp_path, rng):
    X = rng.normal(size=(3, 2))
    source, target = _tables(tmp_path, ["a", "b", "c"], ["x", "y", "z"], X, X)
    with pytest.raises(
        InputError,
        match=r"no ids in common between .*s\.parquet \(ids like "
        r"'a', 'b', 'c'\)",
    ):
        join_on_ids(source, target)


# ---------------------------------------------------------------------- atomic writes
def test_atomic_output_refuses_existing_and_cleans_up(tmp_path, table):
    ids, X = table
    path = tmp_path / "out.parquet"
    path.write_text("precious")
    with pytest.raises(InputError, match="already exists"):
        write_table(path, ids, X, OutputLayout("list", 5, "id"))
    assert path.read_text() == "precious"
    with (
        pytest.raises(RuntimeError),
        TableWriter(path, OutputLayout("list", 5, "id"), force=True) as writer,
    ):
        writer.write(ids, X)
        raise RuntimeError("crash half-way")
    assert path.read_text() == "precious"  # untouched by the failed run
    assert sorted(os.listdir(tmp_path)) == ["out.parquet"]  # no temporary left
    write_table(path, ids, X, OutputLayout("list", 5, "id"), force=True)
    assert np.array_equal(read_table(path, ColumnSpec("id"))[1].X, X)


def test_atomic_output_unwritable_destinations(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        AtomicOutput(tmp_path / "missing" / "out.csv")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="does not exist"):
        AtomicOutput(tmp_path / "file" / "out.csv")
    with pytest.raises(InputError, match="is a directory"):
        AtomicOutput(tmp_path)
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(InputError, match="cannot write: Permission denied"):
            AtomicOutput(locked / "out.csv")


# ----------------------------------------------------------------------------- models
class Foreign:
    """A type skops does not know: loading it must need trust."""


def test_model_files_load_safely(tmp_path, rng):
    X = rng.normal(size=(30, 4))
    model = OrthogonalProcrustesAligner().fit(X, X)
    path = tmp_path / "m.skops"
    assert save_model(model, path) == "skops"
    assert np.allclose(load_model(path).W_, model.W_)
    with pytest.raises(InputError, match="already exists"):
        save_model(model, path)

    model.foreign_ = Foreign()
    bad = tmp_path / "foreign.skops"
    save_model(model, bad)
    with pytest.raises(InputError, match=r"not this package's .*test_io\.Foreign.*--trust"):
        load_model(bad)
    assert isinstance(load_model(bad, trust=True).foreign_, Foreign)

    pickled = tmp_path / "m.joblib"
    assert save_model(model, pickled) == "joblib"
    with pytest.raises(InputError, match="can run arbitrary code"):
        load_model(pickled)
    assert np.allclose(load_model(pickled, trust=True).W_, model.W_)


def test_bad_model_files(tmp_path):
    with pytest.raises(InputError, match="no such model file"):
        load_model(tmp_path / "none.skops")
    corrupt = tmp_path / "c.skops"
    save_model(OrthogonalProcrustesAligner().fit(np.eye(3), np.eye(3)), corrupt)
    data = corrupt.read_bytes()
    corrupt.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"c\.skops: "):
        load_model(corrupt)
    unfitted = tmp_path / "u.skops"
    save_model(OrthogonalProcrustesAligner(), unfitted)
    with pytest.raises(InputError, match="never fitted"):
        load_model(unfitted)

"""Real-world export layouts through the batch command line, end to end.

Exports written the way pandas, pyarrow datasets and spreadsheet tools write them: a
pandas index kept in the Parquet file, ``partition_cols`` folders, directories of part
files and globs, compressed and semicolon-separated CSV, one-row-group files.  Every test
fits or maps through ``sklearn_compat.cli.main`` and checks the numbers against the
planted map, not just the exit status.
"""

import gzip

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from scipy.stats import ortho_group

from sklearn_compat.cli import main
from sklearn_compat.io import (
    ColumnSpec,
    InputError,
    OutputLayout,
    _parquet,
    open_table,
    read_table,
    write_table,
)

N, D_X, D_Y = 90, 6, 8


@pytest.fixture
def pair():
    """Source and target exports (DataFrames) of the same items, with an exact map."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D_X)).astype(np.float32)
    Q = ortho_group.rvs(D_Y, random_state=0)[:D_X]
    Y = (X.astype(np.float64) @ Q).astype(np.float32)
    ids = np.array([f"item{i:03d}" for i in range(N)])
    src = pd.DataFrame(X, columns=[f"new_{i}" for i in range(D_X)])
    src.insert(0, "id", ids)
    tgt = pd.DataFrame(Y, columns=[f"old_{i}" for i in range(D_Y)])
    tgt.insert(0, "id", ids)
    return src, tgt, Q


def run(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, err, *fragments):
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith("sklearn-compat: error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in line, (fragment, line)


def fit(capsys, tmp_path, source, target, *extra):
    model = tmp_path / "m.skops"
    code, _, err = run(
        capsys, "fit", "--method", "procrustes", "--source", source, "--target", target,
        "--id-column", "id", "--model", model, "--force", *extra,
    )  # fmt: skip
    assert code == 0, err
    return model, err


def transform(capsys, model, source, output, *extra):
    code, _, err = run(
        capsys, "transform", "--model", model, "--input", source, "--output", output,
        "--id-column", "id", "--no-progress", *extra,
    )  # fmt: skip
    assert code == 0, err
    return err


def assert_mapped(output, src, Q):
    """Every output row is its source row times the planted map, whatever the order."""
    reader, table = read_table(output, ColumnSpec("id"))
    X = src.set_index("id").loc[table.ids.astype(str)].to_numpy(np.float64)
    np.testing.assert_allclose(table.X, X @ Q, atol=1e-5)
    assert sorted(table.ids.astype(str)) == sorted(src["id"])
    return reader, table


# ----------------------------------------------------------------- pandas exports
def test_pandas_index_is_never_an_embedding_dimension(tmp_path, capsys, pair):
    src, tgt, Q = pair
    # A shuffled frame keeps its old row numbers as the index: pandas stores them as
    # __index_level_0__, an integer column a reader must not take as a dimension.
    shuffled = src.sample(frac=1, random_state=0)
    shuffled.to_parquet(tmp_path / "src.parquet")
    assert "__index_level_0__" in pq.read_schema(tmp_path / "src.parquet").names
    tgt.to_csv(tmp_path / "tgt.csv", index=False)
    model, err = fit(capsys, tmp_path, tmp_path / "src.parquet", tmp_path / "tgt.csv")
    assert f"{D_X} -> {D_Y}" in err or f"{D_X}->{D_Y}" in err.replace(" ", ""), err
    # The same model maps the CSV export of the source (no index there) ...
    src.to_csv(tmp_path / "src.csv", index=False)
    transform(capsys, model, tmp_path / "src.csv", tmp_path / "a.parquet")
    assert_mapped(tmp_path / "a.parquet", src, Q)
    # ... and the Parquet one, in its shuffled row order.
    transform(capsys, model, tmp_path / "src.parquet", tmp_path / "b.parquet")
    _, table = assert_mapped(tmp_path / "b.parquet", src, Q)
    assert table.ids.tolist() == shuffled["id"].tolist()


def test_index_column_that_is_the_id_column(tmp_path, capsys, pair):
    src, tgt, Q = pair
    # set_index("id"): the pandas metadata names "id" as the index column.
    src.set_index("id").sample(frac=1, random_state=1).to_parquet(tmp_path / "src.parquet")
    meta = pq.read_schema(tmp_path / "src.parquet").pandas_metadata
    assert meta["index_columns"] == ["id"]
    tgt.set_index("id").to_parquet(tmp_path / "tgt.parquet")
    model, _ = fit(capsys, tmp_path, tmp_path / "src.parquet", tmp_path / "tgt.parquet")
    transform(capsys, model, tmp_path / "src.parquet", tmp_path / "out.csv")
    assert_mapped(tmp_path / "out.csv", src, Q)
    # Without --id-column the index is still no dimension (the width matches).
    reader = open_table(tmp_path / "src.parquet")
    assert reader.vector_columns == [f"new_{i}" for i in range(D_X)]


def test_pandas_partition_cols(tmp_path, capsys, pair):
    src, tgt, Q = pair
    part = src.assign(shard=np.arange(N) % 3)  # an integer partition key
    part.to_parquet(tmp_path / "src", partition_cols=["shard"])
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == [
        "shard=0",
        "shard=1",
        "shard=2",
    ]
    tgt.to_parquet(tmp_path / "tgt.parquet")
    model, _ = fit(capsys, tmp_path, tmp_path / "src", tmp_path / "tgt.parquet")
    assert load_width(model) == D_X
    transform(capsys, model, tmp_path / "src", tmp_path / "out.parquet", "--rows-per-batch", "7")
    assert_mapped(tmp_path / "out.parquet", src, Q)


def load_width(model_path):
    from sklearn_compat.io import load_model

    return load_model(model_path).n_features_in_


# ---------------------------------------------------------- pyarrow datasets, globs
@pytest.fixture
def parts(tmp_path, pair):
    """A pyarrow dataset: a directory of part files (and a Spark-style _SUCCESS)."""
    src = pair[0]
    folder = tmp_path / "parts"
    ds.write_dataset(
        pa.Table.from_pandas(src, preserve_index=False),
        folder,
        format="parquet",
        max_rows_per_file=25,
        max_rows_per_group=25,
    )
    (folder / "_SUCCESS").write_text("")
    assert len(list(folder.glob("*.parquet"))) == 4
    return folder


def test_directory_of_parts_and_glob(tmp_path, capsys, pair, parts):
    src, tgt, Q = pair
    tgt.to_csv(tmp_path / "tgt.csv", index=False)
    model, err = fit(capsys, tmp_path, parts, tmp_path / "tgt.csv")
    assert f"{N} " in err  # every row of every part matched
    transform(capsys, model, parts, tmp_path / "a.csv", "--rows-per-batch", "10")
    transform(capsys, model, f"{parts}/part-*.parquet", tmp_path / "b.csv")
    _, a = assert_mapped(tmp_path / "a.csv", src, Q)
    _, b = assert_mapped(tmp_path / "b.csv", src, Q)
    assert a.ids.tolist() == b.ids.tolist()  # the same order: the parts' names


def test_dataset_errors_name_the_path(tmp_path, capsys, pair):
    model = tmp_path / "m.skops"
    with pytest.raises(InputError, match="no files match"):
        open_table(tmp_path / "none-*.parquet")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty: no Parquet files"):
        open_table(tmp_path / "empty")
    pair[0].to_csv(tmp_path / "src.csv", index=False)
    with pytest.raises(InputError, match="a pattern can name Parquet files only"):
        open_table(tmp_path / "*.csv")
    (tmp_path / "csvs").mkdir()
    pair[0].to_csv(tmp_path / "csvs" / "part-0.csv", index=False)
    with pytest.raises(InputError, match="csvs: a directory is read as a Parquet dataset"):
        open_table(tmp_path / "csvs")
    code, _, err = run(
        capsys, "transform", "--model", model, "--input", tmp_path / "src.csv",
        "--output", tmp_path / "out-*.csv",
    )  # fmt: skip
    assert code == 1 and "Traceback" not in err


# ------------------------------------------------------------------- CSV variants
@pytest.mark.parametrize("suffix", [".csv.gz", ".csv.bz2", ".csv.zst"])
def test_compressed_csv_in_and_out(tmp_path, capsys, pair, suffix):
    src, tgt, Q = pair
    codec = {".csv.gz": "gzip", ".csv.bz2": "bz2", ".csv.zst": "zstd"}[suffix]
    with pa.CompressedOutputStream(str(tmp_path / f"src{suffix}"), codec) as f:
        f.write(src.to_csv(index=False).encode())
    tgt.to_csv(tmp_path / "tgt.csv", index=False)
    model, _ = fit(capsys, tmp_path, tmp_path / f"src{suffix}", tmp_path / "tgt.csv")
    transform(capsys, model, tmp_path / f"src{suffix}", tmp_path / f"out{suffix}")
    src.to_csv(tmp_path / "src.csv", index=False)
    transform(capsys, model, tmp_path / "src.csv", tmp_path / "plain.csv")
    assert_mapped(tmp_path / f"out{suffix}", src, Q)
    with pa.CompressedInputStream(str(tmp_path / f"out{suffix}"), codec) as f:
        text = f.read().decode()
    assert text == (tmp_path / "plain.csv").read_text()
    assert text.splitlines()[0] == "id," + ",".join(f"old_{i}" for i in range(D_Y))
    if suffix == ".csv.gz":  # readable by the usual tools too
        assert gzip.decompress((tmp_path / "out.csv.gz").read_bytes()).decode() == text


def test_truncated_gzip_is_one_line(tmp_path, capsys, pair):
    src = pd.concat([pair[0]] * 50, ignore_index=True)
    data = gzip.compress(src.to_csv(index=False).encode())
    (tmp_path / "src.csv.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"src\.csv\.gz: cannot decompress"):
        read_table(tmp_path / "src.csv.gz", ColumnSpec("id"))


@pytest.mark.parametrize(
    "sep, decimal", [(";", "."), (";", ","), ("\t", "."), ("\t", ",")], ids=str
)
def test_semicolon_and_tab_csv_detected(tmp_path, capsys, pair, sep, decimal):
    src, tgt, Q = pair
    src.to_csv(tmp_path / "src.csv", sep=sep, decimal=decimal, index=False)
    tgt.to_csv(tmp_path / "tgt.csv", index=False)
    model, _ = fit(capsys, tmp_path, tmp_path / "src.csv", tmp_path / "tgt.csv")
    transform(capsys, model, tmp_path / "src.csv", tmp_path / "out.parquet")
    assert_mapped(tmp_path / "out.parquet", src, Q)


def test_header_only_csv_says_it_has_no_rows(tmp_path, capsys, pair):
    src, tgt, _ = pair
    src.iloc[:0].to_csv(tmp_path / "src.csv", index=False)
    tgt.to_csv(tmp_path / "tgt.csv", index=False)
    code, _, err = run(
        capsys, "fit", "--method", "procrustes", "--source", tmp_path / "src.csv",
        "--target", tmp_path / "tgt.csv",
        "--id-column", "id", "--model", tmp_path / "m.skops",
    )  # fmt: skip
    one_line_error(code, err, "src.csv: has a header (7 columns: 'id', 'new_0'", "no data rows")
    assert not (tmp_path / "m.skops").exists()


def test_csv_writer_round_trips_floats_and_quotes_ids(tmp_path):
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        Z = (rng.normal(size=(50, 5)) * 10.0 ** rng.integers(-30, 30, size=(50, 1))).astype(dtype)
        ids = np.array(["plain", 'with "quote"', "a,b", "x"] + [f"r{i}" for i in range(46)])
        for form in ("columns", "list"):
            path = tmp_path / f"{np.dtype(dtype).name}-{form}.csv.gz"
            write_table(path, ids, Z, OutputLayout(form, 5, "id"))
            _, table = read_table(path, ColumnSpec("id"), dtype=np.dtype(dtype).name)
            assert table.ids.tolist() == ids.tolist()
            np.testing.assert_array_equal(table.X, Z)  # exactly: shortest round-trip text
    # Ids that need no quotes are written bare, as pandas writes them.
    write_table(
        tmp_path / "p.csv", np.array(["a", "b"]), np.eye(2), OutputLayout("columns", 2, "id")
    )
    assert (tmp_path / "p.csv").read_text().splitlines() == ["id,dim_0,dim_1", "a,1,0", "b,0,1"]


# --------------------------------------------------- one row group, bounded memory
@pytest.mark.parametrize("sep, decimal", [(",", "."), (";", ","), ("\t", ",")], ids=repr)
def test_csv_float64_text_is_read_exactly(tmp_path, sep, decimal):
    # Shortest round-trip text (Python's repr), as any careful writer emits it: every value
    # must come back bit for bit, whatever the installed pandas' default float parser does
    # (pandas 2.2 and 3.0 read about one value in five one unit off in the last place).
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 8)) * 10.0 ** rng.integers(-30, 30, size=(300, 8))
    lines = [sep.join(["id"] + [f"d{j}" for j in range(8)])]
    for i, row in enumerate(X):
        lines.append(sep.join([f"r{i}"] + [repr(float(v)).replace(".", decimal) for v in row]))
    path = tmp_path / "x.csv"
    path.write_text("\n".join(lines) + "\n")
    _, table = read_table(path, ColumnSpec("id"), dtype="float64")
    np.testing.assert_array_equal(table.X, X)


def test_dictionary_heavy_row_group_is_staged(tmp_path, monkeypatch, pair):
    """A one-row-group, dictionary-encoded file (as df.to_parquet writes up to 1M rows)
    is read through the staging file: same values and ids as pyarrow reads, in any
    batch size."""
    src = pair[0]
    path = tmp_path / "one.parquet"
    src.to_parquet(path)  # one row group, dictionary-encoded floats
    monkeypatch.setattr(_parquet, "_DICTIONARY_BUDGET", 0)
    monkeypatch.setattr(_parquet, "_STAGE_BYTES", N * 4 * 2)  # two columns per pass
    staged = []
    real = _parquet._stage_row_group

    def spy(*args, **kwargs):
        staged.append(True)
        yield from real(*args, **kwargs)

    monkeypatch.setattr(_parquet, "_stage_row_group", spy)
    reader = open_table(path, ColumnSpec("id"))
    batches = list(reader.iter_batches(batch_size=17))
    assert staged and [len(b) for b in batches] == [17] * 5 + [5]
    assert [b.start for b in batches] == list(range(0, N, 17))
    X = np.concatenate([b.X for b in batches])
    np.testing.assert_array_equal(X, src.iloc[:, 1:].to_numpy(np.float32))
    assert np.concatenate([b.ids for b in batches]).tolist() == src["id"].tolist()


def test_list_column_batches_are_gathered(tmp_path, monkeypatch, pair):
    src = pair[0]
    X = src.iloc[:, 1:].to_numpy(np.float32)
    path = tmp_path / "list.parquet"
    write_table(path, src["id"].to_numpy(), X, OutputLayout("list", D_X, "id"))
    monkeypatch.setattr(_parquet, "_LIST_READ_ROWS", 4)
    batches = list(open_table(path, ColumnSpec("id")).iter_batches(batch_size=30))
    assert [len(b) for b in batches] == [28, 28, 28, 6]
    np.testing.assert_array_equal(np.concatenate([b.X for b in batches]), X)
    starts = np.cumsum([0] + [len(b) for b in batches[:-1]])
    assert [b.start for b in batches] == starts.tolist()


def test_docs_and_help_state_the_same_default_batch(capsys):
    from pathlib import Path

    from sklearn_compat.cli._parser import DEFAULT_ROWS_PER_BATCH

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "user_guide" / "command_line.md").read_text()
    assert f"default {DEFAULT_ROWS_PER_BATCH}" in page
    with pytest.raises(SystemExit):
        main(["transform", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"(default {DEFAULT_ROWS_PER_BATCH})" in help_text

"""The differential matrix: every registered store x every operation, each compared with
the file route (the same model's ``transform`` into a Parquet file gives the reference
vectors) and refusing the same things.  A store whose room lacks a behaviour or a guard
fails here (issues 44 and 46)."""

import json

import numpy as np
import pytest

import sklearn_compat.cli._stores as cli_stores
from sklearn_compat.cli import main
from sklearn_compat.io import OutputLayout, read_table, write_table
from sklearn_compat.io._stores import open_store

# Stores that cannot migrate in place yet (their rooms refuse --replace in one line).
NO_REPLACE = set()


def _fit(tmp, ids, X, Y, name="m.skops", rows=None, noise=0.0, holdout="0.25"):
    """A Procrustes map fitted from parquet files of the pairs (``rows``: the ones used)."""
    rows = slice(None) if rows is None else rows
    layout = OutputLayout("list", X.shape[1], id_column="id", list_column="vector")
    src, tgt = tmp / f"{name}.src.parquet", tmp / f"{name}.tgt.parquet"
    Yn = Y + noise * np.random.default_rng(1).normal(size=Y.shape).astype(np.float32)
    write_table(src, ids[rows], X[rows], layout)
    write_table(tgt, ids[rows], Yn[rows].astype(np.float32), layout)
    model = tmp / name
    argv = ["fit", "--method", "procrustes", "--source", str(src), "--target", str(tgt),
            "--id-column", "id", "--model", str(model)]  # fmt: skip
    if holdout:
        argv += ["--holdout", holdout]
    assert main(argv) == 0
    return str(model)


def _reference(engine, model, location):
    """The file route: the same model's transform of the store into Parquet."""
    out = engine.tmp / f"ref{len(list(engine.tmp.glob('ref*')))}.parquet"
    argv = ["transform", "--model", model, "--input", location, "--output", str(out),
            "--id-column", engine.id_column]  # fmt: skip
    if engine.vector:
        argv += ["--vector-column", engine.vector]
    assert main(argv) == 0
    _, table = read_table(out, __import__("sklearn_compat.io", fromlist=["x"]).ColumnSpec(
        id_column="id"))
    ids = np.asarray([int(i) for i in table.ids])
    order = np.argsort(ids)
    return np.asarray(table.X, dtype=np.float32)[order]


def _transform(engine, model, location, *more):
    argv = ["transform", "--model", model, "--input", location, "--id-column", engine.id_column,
            "--rows-per-batch", "20", *more]  # fmt: skip
    if engine.vector:
        argv += ["--vector-column", engine.vector]
    return main(argv)


def _status(location, capsys):
    capsys.readouterr()
    assert main(["status", "--table", location, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _replace_or_skip(engine):
    if engine.kind in NO_REPLACE:
        pytest.xfail(f"the {engine.kind} room has no --replace yet")


# ------------------------------------------------------------------ migrations
def test_new_output_matches_the_file_route_and_is_not_mapped_again(engine, data, capsys):
    ids, X, Y = data
    model = _fit(engine.tmp, ids, X, Y)
    source = engine.create("items", ids, X)
    ref = _reference(engine, model, source)
    out = engine.location("mapped")
    assert _transform(engine, model, source, "--output", out) == 0
    got_ids, Z = engine.read(out)
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(Z, ref)
    np.testing.assert_array_equal(engine.read(source)[1], X)  # the input untouched
    # The output holds the model's vectors: its ledger refuses mapping it again.
    capsys.readouterr()
    again = engine.location("twice")
    assert _transform(engine, model, out, "--output", again) == 1
    err = capsys.readouterr().err
    assert "twice" in err and len(err.strip().splitlines()) == 1
    assert not open_store(again).exists()
    # evaluate on it says the vectors are the model's output already.
    target = engine.tmp / "m.skops.tgt.parquet"
    main(["evaluate", "--model", model, "--source", out, "--target", str(target),
          "--id-column", engine.id_column])  # fmt: skip
    assert "holds the output of the model" in capsys.readouterr().err
    # --force maps it again on purpose.
    assert _transform(engine, model, out, "--output", again, "--force") == 0


def test_replace_rollback_redo_and_the_guard_after_the_kept_data_is_dropped(
    engine, data, capsys
):
    ids, X, Y = data
    model = _fit(engine.tmp, ids, X, Y)
    source = engine.create("items", ids, X)
    ref = _reference(engine, model, source)
    _replace_or_skip(engine)
    assert _transform(engine, model, source, "--replace") == 0
    np.testing.assert_array_equal(engine.read(source)[1], ref)
    # Twice in a row: refused, in place or into a new table; nothing changes.
    capsys.readouterr()
    assert _transform(engine, model, source, "--replace") == 1
    assert "twice" in capsys.readouterr().err
    assert _transform(engine, model, source, "--output", engine.location("o")) == 1
    np.testing.assert_array_equal(engine.read(source)[1], ref)
    # rollback restores the old vectors bit for bit; a second one redoes the migration.
    assert main(["rollback", "--table", source]) == 0
    np.testing.assert_array_equal(engine.read(source)[1], X)
    assert main(["rollback", "--table", source]) == 0
    np.testing.assert_array_equal(engine.read(source)[1], ref)
    # Once the kept old vectors are dropped, the ledger in the table still refuses.
    engine.drop_kept(source)
    capsys.readouterr()
    assert _transform(engine, model, source, "--replace") == 1
    assert "twice" in capsys.readouterr().err
    np.testing.assert_array_equal(engine.read(source)[1], ref)


def test_rolled_back_table_can_be_migrated_again(engine, data):
    ids, X, Y = data
    model = _fit(engine.tmp, ids, X, Y)
    source = engine.create("items", ids, X)
    ref = _reference(engine, model, source)
    _replace_or_skip(engine)
    assert _transform(engine, model, source, "--replace") == 0
    assert main(["rollback", "--table", source]) == 0
    # The ledger says the migration was undone: mapping the old vectors is right again.
    assert _transform(engine, model, source, "--replace") == 0
    np.testing.assert_array_equal(engine.read(source)[1], ref)


@pytest.mark.parametrize("mode", ["output", "replace"])
def test_interrupted_migration_resumes_only_with_resume(engine, data, monkeypatch, mode):
    ids, X, Y = data
    model = _fit(engine.tmp, ids, X, Y)
    source = engine.create("items", ids, X)
    ref = _reference(engine, model, source)
    if mode == "replace":
        _replace_or_skip(engine)
    target = ["--replace"] if mode == "replace" else ["--output", engine.location("out")]
    calls = []
    real = cli_stores.map_batch

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(cli_stores, "map_batch", interrupted)
    assert _transform(engine, model, source, *target) == 130
    monkeypatch.setattr(cli_stores, "map_batch", real)
    np.testing.assert_array_equal(engine.read(source)[1], X)  # nothing promoted
    assert _transform(engine, model, source, *target) == 1  # a staging left: --resume
    assert _transform(engine, model, source, *target, "--resume") == 0
    result = source if mode == "replace" else engine.location("out")
    np.testing.assert_array_equal(engine.read(result)[1], ref)


# ------------------------------------------------------------------ the upgrade
def _export(engine, ids, Y, name="native.parquet", width=None):
    path = engine.tmp / name
    layout = OutputLayout("list", Y.shape[1], id_column="id", list_column="vector")
    write_table(path, ids, Y, layout)
    return str(path)


def test_add_column_backfill_status_cutover_rollback(engine, data, capsys):
    ids, X, Y = data
    model = _fit(engine.tmp, ids, X, Y)
    source = engine.create("items", ids, X)
    ref = _reference(engine, model, source)
    store = open_store(source)
    # transform --add-column: the mapped vectors beside the old ones, which stay.
    assert _transform(engine, model, source, "--add-column", "new") == 0
    np.testing.assert_array_equal(engine.read(source)[1], X)
    known, Z, prov = store.read_rows("new", ids)
    assert known.all()
    np.testing.assert_array_equal(Z, ref)
    st = _status(source, capsys)["columns"]["new"]
    assert (st["rows"], st["mapped"], st["native"], st["missing"]) == (len(ids), len(ids), 0, 0)
    # Run again (a resume): nothing changes, nothing is mapped twice; the old column is
    # found without --vector-column although the table now has two.
    argv = ["transform", "--model", model, "--input", source, "--add-column", "new",
            "--id-column", engine.id_column]  # fmt: skip
    assert main(argv) == 0
    np.testing.assert_array_equal(store.read_rows("new", ids)[1], ref)

    # backfill: 40 native rows bit for bit, two ids the table lacks named, not inserted.
    export = _export(engine, np.r_[ids[:40], [1000, 1001]], np.r_[Y[:40], Y[:2]])
    argv = ["backfill", "--table", source, "--column", "new", "--vectors", export,
            "--id-column", "id", "--rows-per-batch", "16"]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "1000" in err and "1001" in err
    known, Z, prov = store.read_rows("new", np.r_[ids, [1000]])
    assert known.tolist() == [True] * len(ids) + [False]
    np.testing.assert_array_equal(Z[:40], Y[:40])
    np.testing.assert_array_equal(Z[40 : len(ids)], ref[40:])
    assert list(prov[:40]) == ["native"] * 40
    assert all(str(p).startswith("mapped:") for p in prov[40 : len(ids)])
    report = _status(source, capsys)
    st = report["columns"]["new"]
    assert (st["rows"], st["mapped"], st["native"], st["missing"]) == (len(ids), 20, 40, 0)
    assert st["mapped_by"][0]["path"] == model
    # The same backfill again changes nothing (not even the ledger).
    assert main(argv) == 0
    again = _status(source, capsys)
    assert again["ledger"] == report["ledger"]
    assert again["columns"]["new"] == st
    # A wrong dimension: one line, nothing written.
    wrong = _export(engine, ids[40:], np.ones((len(ids) - 40, 5), np.float32), "wrong.parquet")
    capsys.readouterr()
    assert main([*argv[:6], wrong, *argv[7:]]) == 1
    err = capsys.readouterr().err
    assert "5 values" in err and len(err.strip().splitlines()) == 1
    assert _status(source, capsys)["columns"]["new"] == st

    # cutover: gated, then the new column served under the old name; rollback bit for bit.
    capsys.readouterr()
    assert main(["cutover", "--table", source, "--column", "new", "--min-native", "0.9"]) == 1
    assert "0.9" in capsys.readouterr().err
    served_before = engine.read(source)[1]
    np.testing.assert_array_equal(served_before, X)
    assert main(["cutover", "--table", source, "--column", "new"]) == 0
    served = engine.read(source)[1]
    np.testing.assert_array_equal(served[:40], Y[:40])
    np.testing.assert_array_equal(served[40:], ref[40:])
    assert "cutover" in [e["action"] for e in _status(source, capsys)["ledger"]]
    assert main(["rollback", "--table", source]) == 0
    np.testing.assert_array_equal(engine.read(source)[1], X)
    np.testing.assert_array_equal(store.read_rows("new", ids)[1][:40], Y[:40])


def test_add_column_refuses_a_column_the_model_already_mapped(engine, data, capsys):
    ids, X, Y = data
    model = _fit(engine.tmp, ids, X, Y)
    source = engine.create("items", ids, X)
    out = engine.location("mapped")
    assert _transform(engine, model, source, "--output", out) == 0
    capsys.readouterr()
    assert _transform(engine, model, out, "--add-column", "new") == 1
    assert "twice" in capsys.readouterr().err


def test_refit_on_native_rows_keeps_a_better_map_and_remaps_the_rest(engine, data, capsys):
    ids, X, Y = data
    # A poor first map (12 very noisy pairs); the native rows are exact pairs.
    model = _fit(engine.tmp, ids, X, Y, rows=slice(0, 12), noise=2.0, holdout=None)
    source = engine.create("items", ids, X)
    assert _transform(engine, model, source, "--add-column", "new") == 0
    export = _export(engine, ids[:44], Y[:44])
    capsys.readouterr()
    argv = ["backfill", "--table", source, "--column", "new", "--vectors", export,
            "--id-column", "id", "--refit"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "current map" in err and "refit" in err, err
    report = _status(source, capsys)
    st = report["columns"]["new"]
    assert (st["native"], st["mapped"]) == (44, len(ids) - 44)
    assert [m["path"] for m in st["mapped_by"]] != [model], err  # the refit map mapped them
    entry = [e for e in report["ledger"] if e["action"] == "refit"][-1]
    assert entry["retention"]["refit"] > entry["retention"]["current"]
    from sklearn_compat.io import load_model

    refitted = load_model(entry["model"]["path"])
    assert refitted.fingerprint_["heldout"]["refit"]["previous"] == entry["previous"]
    Z = open_store(source).read_rows("new", ids[44:])[1]
    np.testing.assert_allclose(Z, refitted.transform(X[44:]), atol=1e-5)
    # The native rows are untouched.
    np.testing.assert_array_equal(open_store(source).read_rows("new", ids[:44])[1], Y[:44])


def test_interrupted_add_column_and_backfill_finish_when_run_again(
    engine, data, monkeypatch, capsys
):
    import sklearn_compat.cli._upgrade as cli_upgrade

    ids, X, Y = data
    model = _fit(engine.tmp, ids, X, Y)
    source = engine.create("items", ids, X)
    ref = _reference(engine, model, source)
    real_mapper = cli_upgrade._mapper

    def interrupted_mapper(*args):
        mapper, calls = real_mapper(*args), []

        def once(X):
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return mapper(X)

        return once

    monkeypatch.setattr(cli_upgrade, "_mapper", interrupted_mapper)
    assert _transform(engine, model, source, "--add-column", "new") == 130
    monkeypatch.setattr(cli_upgrade, "_mapper", real_mapper)
    assert _transform(engine, model, source, "--add-column", "new") == 0
    store = open_store(source)
    np.testing.assert_array_equal(store.read_rows("new", ids)[1], ref)

    # Ctrl-C taken at the second check between writes (a room may gather batches and
    # write them later: the interrupt lands wherever the room's second check is).
    from contextlib import contextmanager

    real_stop = cli_upgrade._stop_between_batches

    @contextmanager
    def interrupted_stop():
        calls = []

        def stop():
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt

        with real_stop():
            yield stop

    export = _export(engine, ids[:40], Y[:40])
    argv = ["backfill", "--table", source, "--column", "new", "--vectors", export,
            "--id-column", "id", "--rows-per-batch", "16"]  # fmt: skip
    monkeypatch.setattr(cli_upgrade, "_stop_between_batches", interrupted_stop)
    assert main(argv) == 130
    monkeypatch.setattr(cli_upgrade, "_stop_between_batches", real_stop)
    assert main(argv) == 0
    Z = store.read_rows("new", ids)[1]
    np.testing.assert_array_equal(Z[:40], Y[:40])
    np.testing.assert_array_equal(Z[40:], ref[40:])
    report = _status(source, capsys)
    st = report["columns"]["new"]
    assert (st["native"], st["mapped"], st["missing"]) == (40, len(ids) - 40, 0)
    assert [e["action"] for e in report["ledger"]].count("backfill") == 1


def test_add_column_without_vector_column_reads_the_original_column(engine, data, capsys):
    """``transform --add-column`` without ``--vector-column`` once the table holds an
    added column (a rerun, a second added column, after a backfill): the column the
    others were added beside is mapped, as the file route maps it."""
    ids, X, Y = data
    model = _fit(engine.tmp, ids, X, Y)
    source = engine.create("items", ids, X)
    ref = _reference(engine, model, source)
    argv = ["transform", "--model", model, "--input", source, "--id-column", engine.id_column,
            "--rows-per-batch", "20"]  # fmt: skip
    assert main(argv + ["--add-column", "new"]) == 0
    export = _export(engine, ids[:10], Y[:10])
    assert main(["backfill", "--table", source, "--column", "new", "--vectors", export,
                 "--id-column", "id"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(argv + ["--add-column", "new"]) == 0, capsys.readouterr().err  # a rerun
    assert main(argv + ["--add-column", "other"]) == 0, capsys.readouterr().err
    store = open_store(source)
    np.testing.assert_array_equal(store.read_rows("other", ids)[1], ref)
    Z = store.read_rows("new", ids)[1]
    np.testing.assert_array_equal(Z[:10], Y[:10])
    np.testing.assert_array_equal(Z[10:], ref[10:])
    assert main(argv + ["--add-column", "other"]) == 0, capsys.readouterr().err


def test_backfill_rounds_float64_to_float32_and_refuses_a_value_beyond_it(engine, data, capsys):
    """A float64 export is written as its nearest float32 values; a value float32 cannot
    hold (it would become infinite) is one line naming its row, id and column, and
    nothing is written, even from the batches before it."""
    ids, X, Y = data
    model = _fit(engine.tmp, ids, X, Y)
    source = engine.create("items", ids, X)
    ref = _reference(engine, model, source)
    assert _transform(engine, model, source, "--add-column", "new") == 0
    import pyarrow as pa
    import pyarrow.parquet as pq

    def float64_export(name, A):
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(A.reshape(-1)), A.shape[1])
        pq.write_table(pa.table({"id": ids, "vector": vectors}), engine.tmp / name)
        return str(engine.tmp / name)

    Y64 = Y.astype(np.float64) + 1e-12  # not float32 values
    bad = Y64.copy()
    bad[45, 3] = 1e39  # in the third batch of 20
    argv = ["backfill", "--table", source, "--column", "new", "--id-column", "id",
            "--rows-per-batch", "20", "--vectors"]  # fmt: skip
    capsys.readouterr()
    assert main(argv + [float64_export("bad.parquet", bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "row 45 (id 45), column 'vector'" in err and "1e+39" in err and "'new'" in err, err
    store = open_store(source)
    np.testing.assert_array_equal(store.read_rows("new", ids)[1], ref)  # nothing written
    assert store.column_status("new")["native"] == 0
    assert main(argv + [float64_export("good.parquet", Y64)]) == 0
    Z = open_store(source).read_rows("new", ids)[1]
    assert Z.dtype == np.float32
    assert Z.tobytes() == Y64.astype(np.float32).tobytes()

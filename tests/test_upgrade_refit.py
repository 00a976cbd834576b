"""``backfill --refit`` judges the current map and the refit fairly: on native pairs that
neither was fitted on (the current map's own sample sits among the native rows), by the
retrieval of mapped rows by new-model queries, and the refit is fitted on every other
native pair."""

import numpy as np
import pytest

from sklearn_compat.cli import main
from sklearn_compat.cli._upgrade import _measure
from sklearn_compat.io import OutputLayout, load_model, save_model, write_table
from sklearn_compat.io._stores import open_store, upgrade

pa = pytest.importorskip("pyarrow")
lancedb = pytest.importorskip("lancedb")

N, D = 120, 8
LAYOUT = OutputLayout("list", D, id_column="id", list_column="vector")


def _data():
    """Old vectors ``X`` and the new model's ``Y`` (a rotation of X plus noise)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D)).astype(np.float32)
    Q, _ = np.linalg.qr(rng.normal(size=(D, D)))
    Y = (X @ Q + 0.5 * rng.normal(size=(N, D))).astype(np.float32)
    return np.arange(N), X, Y


def _upgrade_started(tmp, ids, X, Y, *, sample, noise, holdout, native):
    """A LanceDB table of the old vectors, a map fitted on ``sample`` (targets with
    ``noise``) added as column ``new``, and the native vectors of ``native`` backfilled."""
    Yn = Y + noise * np.random.default_rng(1).normal(size=Y.shape).astype(np.float32)
    write_table(tmp / "src.parquet", ids[sample], X[sample], LAYOUT)
    write_table(tmp / "tgt.parquet", ids[sample], Yn[sample], LAYOUT)
    argv = ["fit", "--method", "procrustes", "--source", str(tmp / "src.parquet"),
            "--target", str(tmp / "tgt.parquet"), "--id-column", "id",
            "--model", str(tmp / "map.skops")]  # fmt: skip
    assert main(argv + (["--holdout", holdout] if holdout else [])) == 0
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), D)
    lancedb.connect(tmp / "db").create_table("items", pa.table({"id": ids, "vector": vectors}))
    table = str(tmp / "db" / "items.lance")
    assert main(["transform", "--model", str(tmp / "map.skops"), "--input", table,
                 "--id-column", "id", "--add-column", "new"]) == 0  # fmt: skip
    write_table(tmp / "native.parquet", ids[native], Y[native], LAYOUT)
    assert main(["backfill", "--table", table, "--column", "new", "--vectors",
                 str(tmp / "native.parquet"), "--id-column", "id"]) == 0  # fmt: skip
    return table


def _refit(table, model, X, log=print):
    """``upgrade.refit`` with the command line's measure, recording the old rows of the
    pairs each map was scored on and of the rows still mapped they were retrieved among
    (as ids: a row of X is one id)."""
    scored, still = [], []
    measure = _measure("cpu")
    row_of = {X[i].tobytes(): i for i in range(len(X))}

    def spy(m, X_aside, Y_aside, others):
        scored.append(sorted(row_of[np.asarray(x, dtype=np.float32).tobytes()] for x in X_aside))
        still.append(sorted(row_of[np.asarray(x, dtype=np.float32).tobytes()] for x in others))
        return measure(m, X_aside, Y_aside, others)

    store = open_store(table)
    try:
        result = upgrade.refit(store, "new", model, measure=spy,
                               mapper_for=lambda m: m.transform, batch_size=32,
                               log=log)  # fmt: skip
    finally:
        store.close()
    return result, scored, still


def test_refit_is_judged_on_pairs_neither_map_was_fitted_on(tmp_path, capsys):
    ids, X, Y = _data()
    # The first map: 40 noisy pairs, 30 fitted on (10 kept aside by fit --holdout); the
    # re-embedding job delivers those 40 items first, then 40 more.
    table = _upgrade_started(tmp_path, ids, X, Y, sample=slice(0, 40), noise=4.0,
                             holdout="0.25", native=slice(0, 80))  # fmt: skip
    model = load_model(tmp_path / "map.skops")
    from sklearn_compat.io._model_files import trained_on

    first = set(ids[trained_on(model, ids)].tolist())
    assert len(first) == 30
    result, scored, still = _refit(table, model, X)
    # Both maps scored on the same pairs, none of them the current map's training rows
    # (the old comparison drew its 16 from all 80 native rows: 8 of them were).
    assert scored[0] == scored[1]
    aside = set(scored[0])
    assert len(aside) == 10 and not aside & first and aside <= set(range(80))
    # ... retrieved among the rows still mapped, as new-model queries meet them.
    assert still[0] == still[1] == list(range(80, N))
    # The refit is kept (exact pairs beat 30 noisy ones), and fitted on every other
    # native pair, the first map's own sample included.
    assert result["kept"] and result["gain"] > 2 * result["se"], result
    refitted = load_model(result["model"])
    assert set(ids[trained_on(refitted, ids)].tolist()) == set(range(80)) - aside
    # Its held-out figure is one transform --min-retention checks.
    heldout = refitted.fingerprint_["heldout"]
    low, high = heldout["interval"]
    assert low <= heldout["retention"] == result["refit"]["retention"] <= high
    from sklearn_compat.cli._stores import check_retention

    check_retention(refitted, 0.5, result["model"])
    out = capsys.readouterr().out
    assert "neither map was fitted on" in out and "paired SE" in out, out
    # A second refit judges the refit map on pairs it was not fitted on: its own aside.
    result2, scored2, _ = _refit(table, refitted, X)
    assert set(scored2[0]) <= aside


def test_refit_of_a_map_without_training_ids_says_so(tmp_path):
    ids, X, Y = _data()
    table = _upgrade_started(tmp_path, ids, X, Y, sample=slice(0, 40), noise=4.0,
                             holdout=None, native=slice(0, 80))  # fmt: skip
    from sklearn_compat import OrthogonalProcrustesAligner

    # The same kind of map saved from Python without its training ids.
    bare = tmp_path / "bare.skops"
    save_model(OrthogonalProcrustesAligner().fit(X[:40], Y[:40]), bare)
    lines = []
    result, scored, _ = _refit(table, load_model(bare), X, log=lines.append)
    assert any("records no training ids" in line for line in lines), lines
    assert len(scored[0]) == 16  # a fifth of the 80 native rows


def test_refit_measure_is_new_model_queries_against_the_mapped_rows():
    # A map exact on every pair but two, whose mapped rows it swaps: a new-model query
    # finds its own item's mapped row for every pair but those two.
    _, X, Y = _data()

    class Swapping:
        def transform(self, A):
            Z = np.array(A, dtype=np.float64)
            Z[[0, 1]] = Z[[1, 0]]
            return Z

    got = _measure("cpu")(Swapping(), X[:20], X[:20])
    assert got["hits"].tolist() == [0.0, 0.0] + [1.0] * 18
    assert got["retention"] == pytest.approx(0.9)


def test_refit_with_too_few_rows_the_map_was_not_fitted_on_keeps_it(tmp_path):
    ids, X, Y = _data()
    # 45 native rows, 40 of them the map's own training rows: 5 left to judge on.
    table = _upgrade_started(tmp_path, ids, X, Y, sample=slice(0, 40), noise=1.0,
                             holdout=None, native=slice(0, 45))  # fmt: skip
    lines = []
    result, scored, _ = _refit(table, load_model(tmp_path / "map.skops"), X, log=lines.append)
    assert not result["kept"] and scored == [], result
    assert any("5 of the 45 native rows" in line for line in lines), lines
    store = open_store(table)
    try:
        st = upgrade.status(store)["columns"]["new"]
    finally:
        store.close()
    assert [m["path"] for m in st["mapped_by"]] == [str(tmp_path / "map.skops")]

"""The upgrade of a Postgres table through the store interface, on the embedded server:
a vector column added beside the old one (its index of the old one's kind), rows written by
id bit for bit with their provenance, counts, cutover and rollback bit for bit, a writer
killed with SIGKILL."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import _pg
import numpy as np
import pytest

from sklearn_compat.exceptions import InputError
from sklearn_compat.io._pgvector_store import PgvectorStore
from sklearn_compat.io._stores.base import NATIVE, mapped_by

server, pg = _pg.server, _pg.pg  # the fixtures
ROOT = Path(__file__).resolve().parents[1]
N, D_OLD, D_NEW = 40, 6, 4


def _load(conn, X, kind="vector", table="items"):
    conn.execute(
        f"CREATE TABLE {table} (id bigint PRIMARY KEY, title text, emb {kind}({X.shape[1]}) "
        "NOT NULL)"
    )
    with conn.cursor().copy(f"COPY {table} (id, title, emb) FROM STDIN") as copy:
        for i, row in enumerate(X):
            copy.write_row((i, f"title {i}", "[" + ",".join(map(repr, row.tolist())) + "]"))
    conn.execute(
        f"CREATE INDEX {table}_emb_hnsw ON {table} USING hnsw (emb {kind}_cosine_ops) "
        "WITH (m = 8, ef_construction = 32)"
    )


def _raw(conn, column, table="items"):
    """``{id: binary form}`` of a column (bit-for-bit comparisons)."""
    kind = conn.execute(
        "SELECT t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s::regclass AND a.attname = %s",
        [table, column],
    ).fetchone()[0]
    rows = conn.execute(f'SELECT id, {kind}_send("{column}") FROM {table} ORDER BY id')
    return {i: None if v is None else bytes(v) for i, v in rows.fetchall()}


def _binary(Z):
    """pgvector's binary form of float32 rows: dimension, 0, big-endian floats."""
    head = np.array([Z.shape[1], 0], dtype=">i2").tobytes()
    return [head + row.astype(">f4").tobytes() for row in Z]


def _indexdefs(conn, table="items"):
    rows = conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
    return sorted(r[0].split(" USING ", 1)[1] for r in rows)


def _plan_uses(conn, column, query, table="items"):
    conn.execute("SET enable_seqscan = off")
    sql = f"EXPLAIN SELECT id FROM {table} ORDER BY {column} <=> %s LIMIT 1"
    plan = "\n".join(r[0] for r in conn.execute(sql, [query]).fetchall())
    conn.execute("RESET enable_seqscan")
    return plan


@pytest.fixture
def store(pg):
    uri, connect = pg
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D_OLD)).astype(np.float32)
    with connect() as conn:
        _load(conn, X)
    s = PgvectorStore(f"{uri}::items")
    yield s, connect, X
    s.close()


def test_add_column_keeps_the_old_column_serving_and_copies_its_index(store):
    s, connect, X = store
    with connect() as conn:
        before = _raw(conn, "emb")
    line = s.add_column("emb_v2", D_NEW, like="emb")
    assert "added column 'emb_v2' (vector(4))" in line and "hnsw (vector_cosine_ops)" in line
    assert s.vector_columns() == {"emb": D_OLD, "emb_v2": D_NEW}
    with connect() as conn:
        defs = _indexdefs(conn)
        assert "hnsw (emb vector_cosine_ops) WITH (m='8', ef_construction='32')" in defs
        assert "hnsw (emb_v2 vector_cosine_ops) WITH (m='8', ef_construction='32')" in defs
        assert _raw(conn, "emb") == before  # the old column untouched
        assert set(_raw(conn, "emb_v2").values()) == {None}  # every row missing
        assert "items_emb_hnsw" in _plan_uses(conn, "emb", X[0])  # still served by its index
    # A reader takes the served column (the added one stands beside it).
    reader = s.reader()
    assert reader.list_column == "emb"
    reader.close()
    # Again with the same width: nothing to do; another width or a name in use: refused.
    assert "already there" in s.add_column("emb_v2", D_NEW, like="emb")
    with pytest.raises(InputError, match="already exists"):
        s.add_column("emb_v2", D_NEW + 1, like="emb")
    with pytest.raises(InputError, match="already exists"):
        s.add_column("title", D_NEW, like="emb")
    with pytest.raises(InputError, match="longer than the 63 bytes"):
        s.add_column("v" * 60, D_NEW, like="emb")
    assert [e["action"] for e in s.ledger()] == []  # the caller records the job


def test_add_column_beside_a_halfvec_takes_the_vector_operator_class(pg):
    uri, connect = pg
    X = np.random.default_rng(1).normal(size=(N, D_OLD)).astype(np.float32)
    with connect() as conn:
        _load(conn, X, kind="halfvec")
    s = PgvectorStore(f"{uri}::items")
    s.add_column("emb_v2", D_NEW, like="emb")
    s.close()
    with connect() as conn:
        assert "hnsw (emb_v2 vector_cosine_ops) WITH (m='8', ef_construction='32')" in (
            _indexdefs(conn)
        )


def test_add_column_ivfflat_options_and_a_width_beyond_vector_indexes(pg):
    uri, connect = pg
    X = np.random.default_rng(4).normal(size=(N, D_OLD)).astype(np.float32)
    with connect() as conn:
        _load(conn, X)
        conn.execute("CREATE INDEX items_emb_ivf ON items USING ivfflat (emb vector_l2_ops) "
                     "WITH (lists = 3)")  # fmt: skip
    s = PgvectorStore(f"{uri}::items")
    s.add_column("small", D_NEW, like="emb")
    # hnsw and ivfflat index vector up to 2,000 dimensions, halfvec up to 4,000.
    line = s.add_column("wide", 2001, like="emb")
    assert "(halfvec(2001))" in line
    Z = np.random.default_rng(5).normal(size=(2, 2001)).astype(np.float32)
    assert s.write_rows("wide", np.array([0, 1]), Z, NATIVE).size == 0
    known, got, _ = s.read_rows("wide", np.array([0, 1]))
    np.testing.assert_array_equal(got, Z.astype(np.float16).astype(np.float32))
    s.close()
    with connect() as conn:
        defs = _indexdefs(conn)
    assert "ivfflat (small) WITH (lists='3')" in defs  # vector_l2_ops, the default
    assert "ivfflat (wide halfvec_l2_ops) WITH (lists='3')" in defs
    assert "hnsw (wide halfvec_cosine_ops) WITH (m='8', ef_construction='32')" in defs


def test_write_rows_bit_for_bit_with_provenance_never_inserting(store):
    s, connect, X = store
    s.add_column("emb_v2", D_NEW, like="emb")
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(N, D_NEW)).astype(np.float32)
    Z[3] = [np.float32(1e-38), -0.0, np.float32(3.4e38), np.nextafter(np.float32(1), 2)]
    ids = np.arange(N)
    # Mapped rows for every id, then native vectors for a few: written bit for bit.
    unknown = s.write_rows("emb_v2", ids[:30], Z[:30], mapped_by("abc"))
    assert unknown.size == 0
    native = rng.normal(size=(5, D_NEW)).astype(np.float32)
    stray = np.array([0, 2, 4, 1000, 1001])  # two ids the table does not hold
    unknown = s.write_rows("emb_v2", stray, native, NATIVE)
    assert sorted(unknown.tolist()) == [1000, 1001]
    expected = dict(zip(range(30), _binary(Z[:30]), strict=True))
    expected.update(zip([0, 2, 4], _binary(native[:3]), strict=True))
    with connect() as conn:
        raw = _raw(conn, "emb_v2")
        assert {i: raw[i] for i in expected} == expected
        assert all(raw[i] is None for i in range(30, N))
        assert conn.execute("SELECT count(*) FROM items").fetchone()[0] == N  # none inserted
        sources = dict(conn.execute("SELECT id, emb_v2_source FROM items").fetchall())
    assert [sources[i] for i in (0, 1, 2, 3, 35)] == [NATIVE, "mapped:abc", NATIVE,
                                                      "mapped:abc", None]  # fmt: skip
    status = s.column_status("emb_v2")
    assert status == {"dimension": D_NEW, "rows": N, "mapped": {"abc": 27}, "native": 3,
                      "missing": 10}  # fmt: skip
    assert s.column_status("emb")["native"] == N  # the original column: the table's own
    # read_rows: the same values and provenance, NaN and None where missing or unknown.
    known, got, prov = s.read_rows("emb_v2", np.array([3, 35, 2, 999]))
    assert known.tolist() == [True, True, True, False]
    assert got[0].tobytes() == Z[3].tobytes() and got[2].tobytes() == native[1].tobytes()
    assert np.isnan(got[1]).all() and np.isnan(got[3]).all()
    assert prov.tolist() == ["mapped:abc", None, NATIVE, None]
    # The same write again changes nothing: no row is rewritten (its version stays).
    with connect() as conn:
        versions = conn.execute("SELECT id, xmin::text FROM items ORDER BY id").fetchall()
    s.write_rows("emb_v2", stray, native, NATIVE)
    assert s.last_written == 0
    with connect() as conn:
        assert conn.execute("SELECT id, xmin::text FROM items ORDER BY id").fetchall() == versions
    # A wrong width is one line, nothing written.
    with pytest.raises(InputError, match="the vectors have 5 values, column 'emb_v2' holds"):
        s.write_rows("emb_v2", ids[30:32], np.ones((2, 5), np.float32), NATIVE)
    bad = np.ones((2, D_NEW), np.float32)
    bad[1, 2] = np.nan
    with pytest.raises(InputError, match="id 31: the vector holds NaN"):
        s.write_rows("emb_v2", ids[30:32], bad, NATIVE)
    with connect() as conn:
        assert _raw(conn, "emb_v2")[30] is None
    # iter_rows: every row once, in id order, with both columns.
    seen = []
    for batch_ids, Zs, provs in s.iter_rows(["emb", "emb_v2"], 16):
        seen += batch_ids.tolist()
        assert Zs["emb"].shape == (len(batch_ids), D_OLD)
        assert np.array_equal(Zs["emb"], X[batch_ids])
        assert all(provs["emb"] == None)  # noqa: E711 - an object array
    assert seen == list(range(N))


def test_cutover_then_rollback_bit_for_bit(store):
    s, connect, X = store
    s.add_column("emb_v2", D_NEW, like="emb")
    Z = np.random.default_rng(3).normal(size=(N, D_NEW)).astype(np.float32)
    s.write_rows("emb_v2", np.arange(N), Z, NATIVE)
    with connect() as conn:
        old, new = _raw(conn, "emb"), _raw(conn, "emb_v2")
    line = s.cutover("emb_v2")
    assert "now served as 'emb'" in line and "kept as 'emb_sklearn_compat_previous'" in line
    assert "sklearn-compat rollback --table" in line
    with connect() as conn:
        assert _raw(conn, "emb") == new and _raw(conn, "emb_sklearn_compat_previous") == old
        assert set(s.vector_columns()) == {"emb", "emb_sklearn_compat_previous"}
        # Queries unchanged: the served name's index is the new column's.
        assert "items_emb_v2_hnsw_idx" in _plan_uses(conn, "emb", Z[0])
        not_null = dict(
            conn.execute(
                "SELECT attname, attnotnull FROM pg_attribute WHERE attrelid = 'items'::regclass"
            ).fetchall()
        )
        assert not_null["emb"] and not not_null["emb_sklearn_compat_previous"]
    assert s.column_status("emb")["native"] == N
    assert [e["action"] for e in s.ledger()] == ["cutover"]
    reader = s.reader()  # the served column, not the kept one
    assert reader.list_column == "emb" and reader.width == D_NEW
    reader.close()
    # Rollback: the old vectors served again, bit for bit; a second rollback cuts over again.
    assert "rolled back the cutover" in s.rollback()
    with connect() as conn:
        assert _raw(conn, "emb") == old and _raw(conn, "emb_v2") == new
        assert "items_emb_hnsw" in _plan_uses(conn, "emb", X[0])
    assert "cut over again" in s.rollback()
    with connect() as conn:
        assert _raw(conn, "emb") == new and _raw(conn, "emb_sklearn_compat_previous") == old
    assert s.rollback() and s.vector_columns() == {"emb": D_OLD, "emb_v2": D_NEW}
    assert [e["action"] for e in s.ledger()] == ["cutover", "rollback", "rollback", "rollback"]


def test_cutover_refuses_views_and_a_column_not_added(store):
    s, connect, _ = store
    with pytest.raises(InputError, match="was not added by 'transform --add-column'"):
        s.cutover("emb")
    s.add_column("emb_v2", D_NEW, like="emb")
    with connect() as conn:
        conn.execute("CREATE VIEW items_view AS SELECT id, emb FROM items")
    with pytest.raises(InputError, match="items_view"):
        s.cutover("emb_v2")
    assert set(s.vector_columns()) == {"emb", "emb_v2"}


_WRITER = """
import sys, numpy as np
from sklearn_compat.io._pgvector_store import PgvectorStore
s = PgvectorStore(sys.argv[1])
rng = np.random.default_rng(0)
for start in range(0, 10**9, 5):
    ids = np.arange(start, start + 5) % {n}
    s.write_rows("emb_v2", ids, rng.normal(size=(5, {d})).astype(np.float32), "native")
    print(start, flush=True)
"""


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_a_writer_killed_with_sigkill_leaves_whole_writes(store):
    """Each write_rows is one transaction: after SIGKILL every row has its vector and its
    provenance together, or neither."""
    s, connect, _ = store
    s.add_column("emb_v2", D_NEW, like="emb")
    code = _WRITER.format(n=N, d=D_NEW)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", code, s.location], env=env,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        for _ in range(3):  # a few writes committed, others in flight
            assert proc.stdout.readline(), "the writer ended early"
        time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    with connect() as conn:
        rows = conn.execute(
            "SELECT count(*), count(emb_v2), count(emb_v2_source) FROM items"
        ).fetchone()
    assert rows[0] == N and rows[1] == rows[2] and rows[1] >= 15 and rows[1] % 5 == 0
    status = s.column_status("emb_v2")
    assert status["native"] + status["missing"] == N


def test_the_upgrade_from_the_command_line(pg, tmp_path, capsys):
    """transform --add-column, backfill (twice), status --json, cutover, rollback on a
    Postgres table: the old column serves throughout, values bit for bit."""
    import json

    from sklearn_compat.cli import main

    uri, connect = pg
    rng = np.random.default_rng(6)
    X = rng.normal(size=(N, D_OLD)).astype(np.float32)  # the old model's vectors
    W = rng.normal(size=(D_OLD, D_NEW)).astype(np.float32)
    Y = (X @ W).astype(np.float32)  # the new model's own
    with connect() as conn:
        _load(conn, X)
        conn.execute(f"CREATE TABLE native (id bigint PRIMARY KEY, emb vector({D_NEW}))")
        with conn.cursor().copy("COPY native (id, emb) FROM STDIN") as copy:
            for i in range(N):
                copy.write_row((i, "[" + ",".join(map(repr, Y[i].tolist())) + "]"))
        old = _raw(conn, "emb")
    model = str(tmp_path / "m.skops")
    fit = ["fit", "--method", "affine", "--source", f"{uri}::items", "--target", f"{uri}::native"]
    assert main([*fit, "--model", model]) == 0
    table = f"{uri}::items"
    add = ["transform", "--model", model, "--input", table, "--add-column", "emb_v2"]
    assert main([*add, "--no-progress"]) == 0
    # The native vectors of the first 10 items arrive (a table of their own).
    with connect() as conn:
        conn.execute("DELETE FROM native WHERE id >= 10")
    backfill = ["backfill", "--table", table, "--column", "emb_v2", "--vectors", f"{uri}::native"]
    assert main([*backfill, "--id-column", "id"]) == 0
    assert main([*backfill, "--id-column", "id"]) == 0  # again: nothing changes
    capsys.readouterr()
    assert main(["status", "--table", table, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    text = json.dumps(report)
    assert '"native": 10' in text and '"rows": 40' in text, text
    with connect() as conn:
        raw = _raw(conn, "emb_v2")
        assert [raw[i] for i in range(10)] == _binary(Y[:10])  # bit for bit
        assert _raw(conn, "emb") == old  # the old column untouched, still served
    assert main(["cutover", "--table", table, "--column", "emb_v2"]) == 0
    with connect() as conn:
        assert _raw(conn, "emb") == raw and _raw(conn, "emb_sklearn_compat_previous") == old
    assert main(["rollback", "--table", table]) == 0
    with connect() as conn:
        assert _raw(conn, "emb") == old and _raw(conn, "emb_v2") == raw


def test_a_busy_table_is_refused_quickly_not_queued_behind(store, monkeypatch):
    """A column change waits briefly for its lock (while it waits, every other query of
    the table queues behind it), then gives up in one line with nothing changed."""
    import sklearn_compat.io._pgvector_upgrade as upgrade

    s, connect, _ = store
    monkeypatch.setattr(upgrade, "LOCK_TIMEOUT", "200ms")
    with connect() as other:
        other.execute("BEGIN")
        other.execute("SELECT count(*) FROM items")  # a long transaction that read it
        with pytest.raises(InputError, match="another session holds the table"):
            s.add_column("emb_v2", D_NEW, like="emb")
        other.execute("ROLLBACK")
    assert set(s.vector_columns()) == {"emb"}
    s.add_column("emb_v2", D_NEW, like="emb")
    assert set(s.vector_columns()) == {"emb", "emb_v2"}


def test_rows_by_id_on_a_table_keyed_by_uuid(pg):
    """Ids of a non-integer key travel as text and are cast to the key's type."""
    uri, connect = pg
    keys = [f"00000000-0000-0000-0000-{i:012d}" for i in range(5)]
    with connect() as conn:
        conn.execute("CREATE TABLE docs (key uuid PRIMARY KEY, emb vector(2))")
        for k in keys:
            conn.execute("INSERT INTO docs VALUES (%s, '[1,2]')", [k])
    s = PgvectorStore(f"{uri}::docs")
    s.add_column("emb_v2", 3, like="emb")
    Z = np.arange(9, dtype=np.float32).reshape(3, 3)
    ids = np.array([keys[4], keys[0], "00000000-0000-0000-0000-999999999999"], dtype=object)
    unknown = s.write_rows("emb_v2", ids, Z, NATIVE)
    assert unknown.tolist() == ["00000000-0000-0000-0000-999999999999"]
    known, got, prov = s.read_rows("emb_v2", np.array(keys, dtype=object))
    assert known.all() and prov.tolist() == [NATIVE, None, None, None, NATIVE]
    np.testing.assert_array_equal(got[[4, 0]], Z[:2])
    assert s.column_status("emb_v2")["native"] == 2
    s.close()

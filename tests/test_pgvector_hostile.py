"""A hostile user's Postgres cases (issue 44), on the embedded server: a table mapped in
place is never mapped again by the same model (its ledger is in the database), ``--resume``
maps again the rows changed since they were staged, passwords never reach a message,
repeated ids and missing privileges get advice that works, and table names follow one rule
for inputs and outputs."""

import shlex

import _pg
import numpy as np
import pytest

from sklearn_compat.cli import main
from sklearn_compat.io import load_model

psycopg = _pg.psycopg
server, pg = _pg.server, _pg.pg  # the fixtures
N, D = 60, 6


def _load(conn, table, X, ids=None, key=True):
    ids = np.arange(len(X)) if ids is None else ids
    primary = " PRIMARY KEY" if key else ""
    conn.execute(
        f"CREATE TABLE {table} (id bigint{primary}, title text, emb vector({X.shape[1]}))"
    )
    with conn.cursor().copy(f"COPY {table} (id, title, emb) FROM STDIN") as copy:
        for i, row in zip(ids.tolist(), X, strict=True):
            copy.write_row((i, f"title {i}", "[" + ",".join(map(repr, row.tolist())) + "]"))


def _vectors(conn, table):
    rows = conn.execute(f"SELECT id, emb::text FROM {table} ORDER BY id").fetchall()
    return [r[0] for r in rows], np.array([np.fromstring(r[1][1:-1], sep=",") for r in rows])


def _tables(conn):
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    return sorted(r[0] for r in rows if r[0] != "sklearn_compat_ledger")


def _one_error(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sklearn-compat: error: "), err
    return err[0]


@pytest.fixture
def pair(pg, tmp_path):
    """``new`` and ``old`` (vector(6)), a Procrustes model between them."""
    uri, connect = pg
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D)).astype(np.float32)
    Y = X @ np.linalg.qr(rng.normal(size=(D, D)))[0].astype(np.float32)
    with connect() as conn:
        _load(conn, "new", X)
        _load(conn, "old", Y)
    model = str(tmp_path / "m.skops")
    argv = ["fit", "--method", "procrustes", "--source", f"{uri}::new"]
    assert main([*argv, "--target", f"{uri}::old", "--model", model]) == 0
    return uri, connect, model


def test_a_table_migrated_in_place_is_not_mapped_again(pair, capsys):
    uri, connect, model = pair
    transform = ["transform", "--model", model, "--input", f"{uri}::new"]
    assert main([*transform, "--replace", "--no-progress"]) == 0
    with connect() as conn:
        mapped = _vectors(conn, "new")[1]
    capsys.readouterr()
    # Into a new table: refused, nothing written.
    assert main([*transform, "--output", f"{uri}::twice", "--no-progress"]) == 1
    assert "would apply the map twice" in _one_error(capsys)
    # The kept old vectors dropped, as the page advises once a migration is final: the
    # ledger in the database still says the table holds the model's output.
    with connect() as conn:
        conn.execute("DROP TABLE new_sklearn_compat_previous")
    assert main([*transform, "--replace", "--no-progress"]) == 1
    assert "would apply the map twice" in _one_error(capsys)
    with connect() as conn:
        np.testing.assert_array_equal(_vectors(conn, "new")[1], mapped)
        assert _tables(conn) == ["new", "old"]
        entries = conn.execute("SELECT entry->>'action' FROM sklearn_compat_ledger").fetchall()
        assert [e[0] for e in entries] == ["replace"]
    # evaluate on the mapped table says what it holds.
    capsys.readouterr()
    pair = ["--source", f"{uri}::new", "--target", f"{uri}::old"]
    assert main(["evaluate", "--model", model, *pair]) == 0
    assert "holds the output of the model" in capsys.readouterr().err
    # --force maps it again on purpose.
    assert main([*transform, "--replace", "--force", "--no-progress"]) == 0


def test_a_new_table_written_by_a_migration_is_not_mapped_again(pair, capsys):
    uri, connect, model = pair
    transform = ["transform", "--model", model, "--no-progress"]
    assert main([*transform, "--input", f"{uri}::new", "--output", f"{uri}::mapped"]) == 0
    capsys.readouterr()
    assert main([*transform, "--input", f"{uri}::mapped", "--replace"]) == 1
    assert "would apply the map twice" in _one_error(capsys)
    # The table's own comment is left alone (the ledger holds the record).
    with connect() as conn:
        comment = conn.execute("SELECT obj_description('mapped'::regclass)").fetchone()[0]
        assert comment is None


def _interrupt_after(monkeypatch, batches):
    """Stop the migration (as Ctrl-C would) once ``batches`` batches are committed."""
    from sklearn_compat.io._pgvector_write import PgvectorMigration

    write = PgvectorMigration.write
    calls = []

    def stopping(self, raw, Z):
        if len(calls) == batches:
            raise KeyboardInterrupt
        calls.append(1)
        write(self, raw, Z)

    monkeypatch.setattr(PgvectorMigration, "write", stopping)


@pytest.mark.parametrize("replace", [False, True])
def test_resume_maps_again_the_rows_changed_since_they_were_staged(
    pair, monkeypatch, capsys, replace
):
    uri, connect, model = pair
    argv = ["transform", "--model", model, "--input", f"{uri}::new", "--no-progress"]
    argv += ["--replace"] if replace else ["--output", f"{uri}::out"]
    argv += ["--rows-per-batch", "10"]
    _interrupt_after(monkeypatch, 2)
    assert main(argv) not in (0, 1)  # interrupted
    monkeypatch.undo()
    with connect() as conn:
        # Rows 3 and 12 were staged: one changed, one removed; an id below the last staged
        # one appears; a row after it changes too (read afresh anyway).
        conn.execute("UPDATE new SET emb = '[9,9,9,9,9,9]' WHERE id = 3")
        conn.execute("DELETE FROM new WHERE id = 12")
        conn.execute("INSERT INTO new VALUES (-1, 'added', '[1,2,3,4,5,6]')")
        conn.execute("UPDATE new SET emb = '[7,7,7,7,7,7]' WHERE id = 40")
        ids, X = _vectors(conn, "new")
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "1 rows changed in the input since they were staged (ids 3)" in err
    assert "1 staged rows are no longer in the input (ids 12)" in err
    assert "1 rows were added to the input among the staged ids (ids -1)" in err
    with connect() as conn:
        got_ids, Z = _vectors(conn, "new" if replace else "out")
    assert got_ids == ids
    expected = load_model(model).transform(X.astype(np.float32))
    np.testing.assert_allclose(Z, expected, rtol=0, atol=1e-5)


def test_replace_refuses_rows_changed_while_it_ran_then_resume_maps_them(pair, monkeypatch,
                                                                         capsys):  # fmt: skip
    from sklearn_compat.io._pgvector_write import PgvectorMigration

    uri, connect, model = pair
    argv = ["transform", "--model", model, "--input", f"{uri}::new", "--no-progress"]
    argv += ["--replace", "--rows-per-batch", "10"]
    finish = PgvectorMigration.finish

    def someone_writes_first(self, log):
        with connect() as conn:
            conn.execute("UPDATE new SET emb = '[5,5,5,5,5,5]' WHERE id = 7")
        return finish(self, log)

    monkeypatch.setattr(PgvectorMigration, "finish", someone_writes_first)
    with connect() as conn:
        before = _vectors(conn, "new")[1]
    capsys.readouterr()
    assert main(argv) == 1
    line = _one_error(capsys)
    assert "1 rows changed in the table while it was being migrated (ids 7)" in line
    assert "nothing replaced" in line and "--resume" in line
    monkeypatch.undo()
    with connect() as conn:
        now = _vectors(conn, "new")[1]
        np.testing.assert_array_equal(np.delete(now, 7, 0), np.delete(before, 7, 0))
    assert main([*argv, "--resume"]) == 0
    with connect() as conn:
        Z = _vectors(conn, "new")[1]
    np.testing.assert_allclose(Z, load_model(model).transform(now.astype(np.float32)), atol=1e-5)


def test_passwords_are_never_printed(pair, capsys, tmp_path):
    uri, connect, model = pair
    # The embedded server trusts local connections: any password is accepted, and the
    # failures below come from the host or database, whose messages must not echo it.
    host = uri.split("host=", 1)[1].split("&")[0]
    database = uri.split("?", 1)[0].rsplit("/", 1)[1]
    secret = "hunter2::xyz"
    keyword = f"host={host} dbname={database} user=postgres password={secret}"
    transform = ["transform", "--model", model, "--no-progress"]
    assert main([*transform, "--input", f"{keyword}::new", "--output", f"{uri}::kw"]) == 0
    out = capsys.readouterr()
    assert "hunter2" not in out.err + out.out
    with connect() as conn:
        assert "kw" in _tables(conn)
    cases = [
        f"host={host} dbname=nope user=postgres password={secret}::new",
        f"postgresql://postgres:{secret}@x@/nope?host={host}::new",
        f"postgresql://postgres:hunter2@x::y@/nope?host={host}::new",
        f"postgresql:///nope?host={host}&user=postgres&password={secret}::new",
    ]
    for source in cases:
        assert main([*transform, "--input", source, "--output", f"{uri}::out"]) == 1, source
        line = _one_error(capsys)
        for piece in ("hunter2", "xyz", "x::y", "@x@"):
            assert piece not in line, line
    # The undo line of --replace: shell-quoted (the URI holds &), no password, no ***.
    location = f"postgresql://postgres:{secret}@/{database}?host={host}&application_name=a::new"
    assert main([*transform, "--input", location, "--replace"]) == 0
    err = capsys.readouterr().err
    assert "hunter2" not in err and "***" not in err.split("undo with: ", 1)[1]
    undo = err.split("undo with: ", 1)[1].splitlines()[0]
    assert "PGPASSWORD" in undo
    words = shlex.split(undo.split(" (the password", 1)[0])
    assert words[:3] == ["sklearn-compat", "rollback", "--table"]
    assert main(words[1:]) == 0  # it runs as printed (the password from the environment)


def test_repeated_ids_are_refused_before_anything_is_staged(pg, tmp_path, capsys):
    uri, connect = pg
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, D)).astype(np.float32)
    ids = np.arange(N)
    ids[[10, 20, 30]] = 5
    with connect() as conn:
        _load(conn, "dup", X, ids=ids, key=False)
        _load(conn, "tgt", X)
    model = str(tmp_path / "m.skops")
    assert main(["fit", "--method", "procrustes", "--source", f"{uri}::tgt", "--target",
                 f"{uri}::tgt", "--model", model]) == 0  # fmt: skip
    capsys.readouterr()
    argv = ["transform", "--model", model, "--input", f"{uri}::dup", "--id-column", "id"]
    for target in (["--output", f"{uri}::out"], ["--replace"]):
        assert main([*argv, *target, "--no-progress"]) == 1
        line = _one_error(capsys)
        assert "id column 'id' repeats ids: 5 (4 rows)" in line and "--id-column" in line
        assert "--resume" not in line and "DROP TABLE" not in line
        with connect() as conn:
            assert _tables(conn) == ["dup", "tgt"]


def test_a_missing_privilege_does_not_suggest_resume(pair, capsys):
    uri, connect, model = pair
    with connect() as conn:
        conn.execute("CREATE ROLE reader LOGIN")
        conn.execute("GRANT SELECT ON new TO reader")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    weak = uri.replace("postgresql://postgres:@", "postgresql://reader@", 1)
    assert weak != uri
    capsys.readouterr()
    argv = ["transform", "--model", model, "--input", f"{weak}::new", "--no-progress"]
    assert main([*argv, "--output", f"{weak}::out"]) == 1
    line = _one_error(capsys)
    assert "permission denied" in line and "grant it" in line and "--resume" not in line


@pytest.mark.parametrize(
    "name, message",
    [
        ("t" * 64, "keeps only the first 63 bytes"),
        ("x; DROP TABLE y; --", "is not a table name"),
        ("a b", "is not a table name"),
    ],
    ids=["long", "injection", "space"],
)
def test_input_and_output_names_follow_one_rule(pair, capsys, name, message):
    uri, connect, model = pair
    capsys.readouterr()
    argv = ["transform", "--model", model, "--no-progress"]
    assert main([*argv, "--input", f"{uri}::new", "--output", f"{uri}::{name}"]) == 1
    assert message in _one_error(capsys)
    assert main([*argv, "--input", f"{uri}::{name}", "--output", f"{uri}::out"]) == 1
    assert message in _one_error(capsys)
    with connect() as conn:
        assert _tables(conn) == ["new", "old"]
    # Quoted, the same name is an ordinary table (63 bytes at most).
    quoted = '"' + name[:63] + '"'
    assert main([*argv, "--input", f"{uri}::new", "--output", f"{uri}::{quoted}"]) == 0
    with connect() as conn:
        assert name[:63] in _tables(conn)


def test_the_output_of_a_mapped_table_inherits_its_ledger(pair, capsys, tmp_path):
    uri, connect, model = pair
    transform = ["transform", "--model", model, "--no-progress"]
    assert main([*transform, "--input", f"{uri}::new", "--replace"]) == 0
    # Another model maps the migrated table into a new one ...
    other = str(tmp_path / "other.skops")
    fit = ["fit", "--method", "affine", "--source", f"{uri}::new", "--target", f"{uri}::old"]
    assert main([*fit, "--model", other]) == 0
    assert main(["transform", "--model", other, "--input", f"{uri}::new", "--output",
                 f"{uri}::further", "--no-progress"]) == 0  # fmt: skip
    capsys.readouterr()
    # ... whose vectors the first model already mapped once: refused there too.
    assert main([*transform, "--input", f"{uri}::further", "--output", f"{uri}::x"]) == 1
    assert "would apply the map twice" in _one_error(capsys)
    # Its rollback does not reach for the input's kept vectors: nothing to undo there.
    assert main(["rollback", "--table", f"{uri}::further"]) == 1
    assert "no kept vectors" in _one_error(capsys)


def test_resume_into_another_database_maps_changed_rows_again(pair, server, monkeypatch,
                                                              capsys):  # fmt: skip
    uri, connect, model = pair
    other = "t_resume_elsewhere"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{other}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{other}"')
    there = server.replace("/postgres?", f"/{other}?", 1)
    try:
        with psycopg.connect(there, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
        argv = ["transform", "--model", model, "--input", f"{uri}::new", "--no-progress"]
        argv += ["--output", f"{there}::out", "--rows-per-batch", "10"]
        _interrupt_after(monkeypatch, 2)
        assert main(argv) not in (0, 1)
        monkeypatch.undo()
        with connect() as conn:
            conn.execute("UPDATE new SET emb = '[9,9,9,9,9,9]' WHERE id = 3")
            ids, X = _vectors(conn, "new")
        capsys.readouterr()
        assert main([*argv, "--resume"]) == 0
        assert "(ids 3): mapped again" in capsys.readouterr().err
        with psycopg.connect(there) as conn:
            got_ids, Z = _vectors(conn, "out")
        assert got_ids == ids
        np.testing.assert_allclose(Z, load_model(model).transform(X.astype(np.float32)),
                                   rtol=0, atol=1e-5)  # fmt: skip
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{other}" WITH (FORCE)')

"""Vector stores on their real engines: LanceDB tables and Chroma collections as inputs
and outputs, resumable migrations, ``--replace`` with ``rollback``, the retention gate."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sklearn_compat.cli import main
from sklearn_compat.io import load_model

lancedb = pytest.importorskip("lancedb")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("lance")

ROOT = Path(__file__).resolve().parents[1]
N, D = 600, 8


def _pairs(n=N, d=D, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    Y = (X @ Q + noise * rng.normal(size=(n, d))).astype(np.float32)
    return X, Y, np.array([f"doc{i}" for i in range(n)])


def _vectors(A):
    return pa.FixedSizeListArray.from_arrays(pa.array(A.reshape(-1)), A.shape[1])


@pytest.fixture
def lance_db(tmp_path):
    """Database ``db`` with ``new`` (ids, text, tags, vector) and ``old`` (shuffled)."""
    X, Y, ids = _pairs(noise=0.05)
    db = lancedb.connect(tmp_path / "db")
    text = [f"text of {i}" for i in range(N)]
    db.create_table("new", pa.table({"id": ids, "text": text, "vector": _vectors(X)}))
    order = np.random.default_rng(1).permutation(N)
    db.create_table("old", pa.table({"id": ids[order], "emb": _vectors(Y[order])}))
    return tmp_path


def _fit(tmp, source, target, *extra):
    argv = ["fit", "--method", "procrustes", "--source", source, "--target", target]
    argv += ["--id-column", "id", "--model", str(tmp / "m.skops"), *extra]
    assert main(argv) == 0


def _table(tmp, name):
    return lancedb.connect(tmp / "db").open_table(name)


def _python_transform(tmp, X):
    return load_model(tmp / "m.skops").transform(X)


def _new_vectors(tmp):
    table = _table(tmp, "new").to_arrow()
    X = np.stack(table.column("vector").to_numpy(zero_copy_only=False))
    return table, X


def test_lance_fit_transform_into_a_new_table(lance_db, capsys):
    tmp = lance_db
    db = tmp / "db"
    before = _table(tmp, "new")
    version, rows = before.version, before.to_arrow()
    _fit(tmp, str(db / "new.lance"), str(db / "old.lance"))
    assert "(8 -> 8 dimensions)" in capsys.readouterr().err
    argv = ["transform", "--model", str(tmp / "m.skops"), "--input", str(db / "new.lance")]
    argv += ["--output", str(db / "mapped.lance"), "--id-column", "id", "--rows-per-batch", "128"]
    assert main(argv) == 0
    assert "mapped" in lancedb.connect(db).list_tables().tables
    out = _table(tmp, "mapped").to_arrow()
    assert sorted(out.column("id").to_pylist()) == sorted(rows.column("id").to_pylist())
    assert out.column("id").to_pylist() == rows.column("id").to_pylist()
    assert out.column("text").equals(rows.column("text"))
    _, X = _new_vectors(tmp)
    Z = np.stack(out.column("vector").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(Z, _python_transform(tmp, X), atol=1e-4)
    after = _table(tmp, "new")
    assert after.version == version and after.to_arrow().equals(rows)
    assert not (db / "mapped.lance.partial").exists()
    # The table is read like any other: a file output from it, evaluate and search on it.
    assert main([*argv[:5], "--output", str(tmp / "m.parquet"), "--id-column", "id"]) == 0
    pair = ["--source", str(db / "new.lance"), "--target", str(db / "old.lance")]
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp / "m.skops"), *pair, "--id-column", "id"]) == 0
    assert "top1         1.0000" in capsys.readouterr().out
    search = ["search", "--model", str(tmp / "m.skops"), "--gallery", str(db / "old.lance")]
    search += ["--queries", str(db / "new.lance"), "--id-column", "id", "-k", "1"]
    assert main([*search, "--output", str(tmp / "hits.csv")]) == 0
    hits = (tmp / "hits.csv").read_text().splitlines()[1:]
    assert sum(h.split(",")[0] == h.split(",")[2] for h in hits) == N


def test_lance_output_exists_or_is_the_input(lance_db, capsys):
    tmp, db = lance_db, lance_db / "db"
    _fit(tmp, str(db / "new.lance"), str(db / "old.lance"))
    before = _table(tmp, "old").to_arrow()
    argv = ["transform", "--model", str(tmp / "m.skops"), "--input", str(db / "new.lance")]
    capsys.readouterr()
    assert main([*argv, "--output", str(db / "old.lance"), "--id-column", "id"]) == 1
    assert "already exists (pass --force" in capsys.readouterr().err
    same = [*argv, "--output", str(db / "new.lance"), "--id-column", "id", "--force"]
    assert main(same) == 1
    err = capsys.readouterr().err
    assert "is also an input of this command" in err and "pass --replace" in err
    # --force replaces another table, once the new one is whole.
    assert main([*argv, "--output", str(db / "old.lance"), "--id-column", "id", "--force"]) == 0
    after = _table(tmp, "old").to_arrow()
    assert after.column_names == ["id", "text", "vector"] and after.num_rows == before.num_rows
    assert sorted(os.listdir(db)) == ["new.lance", "old.lance"]


def _gate_figure(tmp):
    return load_model(tmp / "m.skops").fingerprint_["heldout"]["retention"]


def test_retention_gate_refuses_below_and_passes_above(tmp_path, capsys):
    # Noisy pairs, so that the held-out retention is measurably below 1.
    X, Y, ids = _pairs(n=400, d=8, noise=1.0)
    db = lancedb.connect(tmp_path / "db")
    db.create_table("new", pa.table({"id": ids, "vector": _vectors(X)}))
    db.create_table("old", pa.table({"id": ids, "vector": _vectors(Y)}))
    src, tgt = str(tmp_path / "db" / "new.lance"), str(tmp_path / "db" / "old.lance")
    _fit(tmp_path, src, tgt, "--holdout", "0.25")
    figure = _gate_figure(tmp_path)
    assert 0 < figure < 1
    capsys.readouterr()
    argv = ["transform", "--model", str(tmp_path / "m.skops"), "--input", src]
    argv += ["--output", str(tmp_path / "db" / "out.lance"), "--id-column", "id"]
    assert main([*argv, "--min-retention", f"{figure + 0.01:.4f}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"held-out retention {figure:.3f}" in err[0]
    assert "below --min-retention" in err[0]
    assert not (tmp_path / "db" / "out.lance").exists()
    assert main([*argv, "--min-retention", f"{figure - 0.01:.4f}"]) == 0
    assert (tmp_path / "db" / "out.lance").is_dir()


def test_gate_needs_a_holdout(lance_db, capsys):
    tmp, db = lance_db, lance_db / "db"
    _fit(tmp, str(db / "new.lance"), str(db / "old.lance"))
    argv = ["transform", "--model", str(tmp / "m.skops"), "--input", str(db / "new.lance")]
    argv += ["--output", str(db / "o.lance"), "--id-column", "id", "--min-retention", "0.9"]
    assert main(argv) == 1
    assert "--holdout" in capsys.readouterr().err


def test_replace_then_rollback_restores_the_previous_version(lance_db, capsys):
    tmp, db = lance_db, lance_db / "db"
    table, X = _new_vectors(tmp)
    version = _table(tmp, "new").version
    _fit(tmp, str(db / "new.lance"), str(db / "old.lance"))
    argv = ["transform", "--model", str(tmp / "m.skops"), "--input", str(db / "new.lance")]
    assert main([*argv, "--replace", "--id-column", "id", "--rows-per-batch", "100"]) == 0
    assert "sklearn-compat rollback --table" in capsys.readouterr().err
    replaced, Z = _new_vectors(tmp)
    assert _table(tmp, "new").version == version + 1
    np.testing.assert_allclose(Z, _python_transform(tmp, X), atol=1e-4)
    assert replaced.column("text").equals(table.column("text"))
    assert main(["rollback", "--table", str(db / "new.lance")]) == 0
    restored, X2 = _new_vectors(tmp)
    np.testing.assert_array_equal(X2, X)
    assert restored.column("id").equals(table.column("id"))
    # A second rollback redoes the migration (the ledger says what was undone), a third
    # undoes it again; any version can also be brought back by number.
    assert main(["rollback", "--table", str(db / "new.lance")]) == 0
    np.testing.assert_array_equal(_new_vectors(tmp)[1], Z)
    assert main(["rollback", "--table", str(db / "new.lance")]) == 0
    np.testing.assert_array_equal(_new_vectors(tmp)[1], X)
    target = ["rollback", "--table", str(db / "new.lance"), "--to-version", str(version + 1)]
    assert main(target) == 0
    np.testing.assert_array_equal(_new_vectors(tmp)[1], Z)


def _interrupt_after(monkeypatch, cls, batches):
    """Make ``cls.write`` raise KeyboardInterrupt once ``batches`` batches are written."""
    real = cls.write
    calls = []

    def write(self, *args):
        if len(calls) == batches:
            raise KeyboardInterrupt
        calls.append(1)
        return real(self, *args)

    monkeypatch.setattr(cls, "write", write)
    return calls


def test_lance_interrupted_migration_resumes_without_redoing_batches(
    lance_db, monkeypatch, capsys
):
    from sklearn_compat.io._lance import LanceMigration

    tmp, db = lance_db, lance_db / "db"
    _fit(tmp, str(db / "new.lance"), str(db / "old.lance"))
    argv = ["transform", "--model", str(tmp / "m.skops"), "--input", str(db / "new.lance")]
    argv += ["--output", str(db / "out.lance"), "--id-column", "id", "--rows-per-batch", "100"]
    _interrupt_after(monkeypatch, LanceMigration, 3)
    capsys.readouterr()
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "300 of 600 rows are staged" in err and "--resume" in err
    assert not (db / "out.lance").exists()
    assert main(argv) == 1  # a staged migration is not silently started over
    assert "pass --resume" in capsys.readouterr().err
    monkeypatch.undo()
    calls = _interrupt_after(monkeypatch, LanceMigration, 100)
    assert main([*argv, "--resume"]) == 0
    assert len(calls) == 3  # only the batches that were missing
    out = _table(tmp, "out").to_arrow()
    table, X = _new_vectors(tmp)
    assert out.column("id").equals(table.column("id"))
    Z = np.stack(out.column("vector").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(Z, _python_transform(tmp, X), atol=1e-4)


def _versions(staging):
    try:
        return len(os.listdir(staging / "_versions"))
    except FileNotFoundError:
        return 0


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_sigterm_mid_migration_then_resume(tmp_path):
    """A real SIGTERM while batches are committed; --resume then finishes the table."""
    n = 40000
    X, Y, ids = _pairs(n=n, d=8)
    db = lancedb.connect(tmp_path / "db")
    db.create_table("new", pa.table({"id": ids, "vector": _vectors(X)}))
    db.create_table("old", pa.table({"id": ids, "vector": _vectors(Y)}))
    src = str(tmp_path / "db" / "new.lance")
    _fit(tmp_path, src, str(tmp_path / "db" / "old.lance"))
    out = tmp_path / "db" / "out.lance"
    staging = tmp_path / "db" / "out.lance.partial"
    command = [sys.executable, "-m", "sklearn_compat", "transform", "--model"]
    command += [str(tmp_path / "m.skops"), "--input", src, "--output", str(out)]
    command += ["--id-column", "id", "--rows-per-batch", "200", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    # Kill while batches are being committed, not before the first one.
    while _versions(staging) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert proc.poll() is None, "the migration ended before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (143, -signal.SIGTERM), err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("sklearn-compat: error: terminated (SIGTERM); "), err
    assert f"of {n} rows are staged" in lines[0] and "--resume" in lines[0], err
    assert not out.exists()
    # Resumed with larger batches (the batch size is not part of the job): fewer commits.
    resume = command[3:-3] + ["--rows-per-batch", "8000", "--resume", "--no-progress"]
    assert main(resume) == 0
    done = lancedb.connect(tmp_path / "db").open_table("out").to_arrow()
    assert done.num_rows == n and done.column("id").to_pylist() == ids.tolist()
    Z = np.stack(done.column("vector").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(Z, _python_transform(tmp_path, X), atol=1e-4)


# ---------------------------------------------------------------------------- Chroma
@pytest.fixture
def chroma_db(tmp_path):
    chromadb = pytest.importorskip("chromadb")
    X, Y, ids = _pairs(noise=0.05)
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    for name, A in (("new", X), ("old", Y)):
        collection = client.create_collection(name, embedding_function=None)
        collection.add(
            ids=ids.tolist(),
            embeddings=A,
            documents=[f"text {i}" for i in range(N)],
            metadatas=[{"k": i, "side": name} for i in range(N)],
        )
    return tmp_path, client, X


def test_chroma_flow_with_resume(chroma_db, monkeypatch, capsys):
    from sklearn_compat.io._chroma import ChromaMigration

    tmp, client, X = chroma_db
    where = str(tmp / "chroma")
    _fit(tmp, f"{where}::new", f"{where}::old")
    argv = ["transform", "--model", str(tmp / "m.skops"), "--input", f"{where}::new"]
    argv += ["--output", f"{where}::mapped", "--rows-per-batch", "150"]
    _interrupt_after(monkeypatch, ChromaMigration, 2)
    assert main(argv) == 130
    assert "300 of 600 rows are staged" in capsys.readouterr().err
    monkeypatch.undo()
    calls = _interrupt_after(monkeypatch, ChromaMigration, 100)
    assert main([*argv, "--resume"]) == 0
    assert len(calls) == 2
    names = {c.name for c in client.list_collections()}
    assert names == {"new", "old", "mapped"}
    got = client.get_collection("mapped").get(include=["embeddings", "documents", "metadatas"])
    original = client.get_collection("new").get(include=["documents", "metadatas"])
    assert got["ids"] == original["ids"] and len(set(got["ids"])) == N
    assert got["documents"] == original["documents"]
    assert got["metadatas"] == original["metadatas"]
    order = [int(i[3:]) for i in got["ids"]]
    expected = _python_transform(tmp, X[order])
    np.testing.assert_allclose(np.asarray(got["embeddings"]), expected, atol=1e-4)
    assert client.get_collection("new").count() == N


VECTOR_STORES_PAGE = ROOT / "docs" / "user_guide" / "vector_stores.md"


def _bash_blocks(page):
    """The page's bash blocks before its Postgres section (which needs a server: it runs
    in tests/test_pgvector.py)."""
    text = page.read_text(encoding="utf-8").split("(pgvector)=", 1)[0]
    return re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)


def test_vector_stores_page_runs_as_written(tmp_path):
    """The page's bash blocks, in order, in an empty directory, with the command line and
    its ``python`` first on the PATH (as after activating the environment)."""
    pytest.importorskip("chromadb")
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "sklearn-compat").exists():
        pytest.skip(f"no sklearn-compat script beside {sys.executable}")
    blocks = _bash_blocks(VECTOR_STORES_PAGE)
    assert len(blocks) >= 3
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env["PYTHONPATH"] = str(ROOT)  # this checkout, whichever one the script was installed from
    for block in blocks:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, f"{block}\n{done.stderr}"
    # The migration was undone: the table holds the old vectors again, restored in its third
    # version, the ledger's rollback entry in the fourth.
    table = lancedb.connect(tmp_path / "db").open_table("items")
    assert len(table.list_versions()) == 4
    assert table.to_arrow().column("id").to_pylist()[:2] == ["doc0", "doc1"]
    assert lancedb.connect(tmp_path / "db").open_table("items_v2").count_rows() == 2000


def test_table_writer_and_encode_write_stores(tmp_path, capsys):
    """``write_table`` and ``encode`` write a LanceDB table and a Chroma collection whole."""
    pytest.importorskip("chromadb")
    from sklearn_compat.io import ColumnSpec, OutputLayout, read_table, write_table

    X, _, ids = _pairs(n=50)
    layout = OutputLayout("list", width=D, id_column="id", list_column="vector")
    with pytest.raises(ValueError, match="not a Chroma collection name"):
        write_table(f"{tmp_path / 'chroma'}::t", ids, X, layout)
    for path in (tmp_path / "db" / "t.lance", f"{tmp_path / 'chroma'}::items"):
        (tmp_path / "db").mkdir(exist_ok=True)
        write_table(path, ids, X, layout)
        reader, table = read_table(path, ColumnSpec(id_column="id"))
        assert table.ids.tolist() == ids.tolist()
        np.testing.assert_allclose(table.X, X, atol=1e-6)
        with pytest.raises(ValueError, match="already exists"):
            write_table(path, ids, X, layout)
    argv = ["encode", "--input", str(tmp_path / "db" / "t.lance"), "--id-column", "id"]
    argv += ["--n-anchors", "4", "--output", str(tmp_path / "db" / "enc.lance")]
    assert main(argv) == 0
    assert lancedb.connect(tmp_path / "db").open_table("enc").count_rows() == 50

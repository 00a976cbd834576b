"""Store migrations under careless use (issue 32): a migration applied twice, concurrent
writers, empty tables, messages that name a route that works, indexes --replace drops."""

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sklearn_compat.cli import main
from sklearn_compat.exceptions import OutputLocked
from sklearn_compat.io._ownership import OutputLock, process_start_time

lancedb = pytest.importorskip("lancedb")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("lance")

ROOT = Path(__file__).resolve().parents[1]
N, D = 400, 8


def _vectors(A):
    return pa.FixedSizeListArray.from_arrays(pa.array(A.reshape(-1)), A.shape[1])


def _pairs(n=N, d=D, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    return X, (X @ Q).astype(np.float32), np.array([f"doc{i}" for i in range(n)])


@pytest.fixture
def store(tmp_path):
    """``db/old.lance`` (old-model vectors), ``db/new.lance`` (their new-model vectors),
    the Chroma collection ``chroma::old``, and ``m.skops`` fitted old -> new."""
    X, Y, ids = _pairs()
    db = lancedb.connect(tmp_path / "db")
    db.create_table("old", pa.table({"id": ids, "text": ids, "vector": _vectors(X)}))
    db.create_table("new", pa.table({"id": ids, "vector": _vectors(Y)}))
    argv = ["fit", "--method", "procrustes", "--source", str(tmp_path / "db" / "old.lance")]
    argv += ["--target", str(tmp_path / "db" / "new.lance"), "--id-column", "id"]
    assert main([*argv, "--model", str(tmp_path / "m.skops")]) == 0
    return tmp_path


def _chroma(tmp, name="old", n=N):
    chromadb = pytest.importorskip("chromadb")
    X, _, ids = _pairs(n=n)
    client = chromadb.PersistentClient(path=str(tmp / "chroma"))
    # With an index setting in its metadata, which Chroma refuses to "modify" unchanged.
    collection = client.create_collection(
        name, metadata={"hnsw:space": "cosine"}, embedding_function=None
    )
    if n:
        collection.add(ids=ids.tolist(), embeddings=X, documents=ids.tolist())
    return client


def _transform(tmp, *argv):
    return main(["transform", "--model", str(tmp / "m.skops"), *map(str, argv)])


def _column(table, name="vector"):
    return np.stack(table.to_arrow().column(name).to_numpy(zero_copy_only=False))


# ----------------------------------------------------------- item 2: applied twice
def test_a_second_replace_with_the_same_model_is_refused(store, capsys):
    db = store / "db"
    table = db / "old.lance"
    assert _transform(store, "--input", table, "--id-column", "id", "--replace") == 0
    once = lancedb.connect(db).open_table("old")
    version, mapped = once.version, _column(once)
    np.testing.assert_allclose(mapped, _column(lancedb.connect(db).open_table("new")), atol=1e-4)
    capsys.readouterr()
    assert _transform(store, "--input", table, "--id-column", "id", "--replace") == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "holds the output of the model" in err and " since 20" in err
    assert f"sklearn-compat rollback --table {table}" in err and "--force" in err
    again = lancedb.connect(db).open_table("old")
    assert again.version == version  # nothing written
    np.testing.assert_array_equal(_column(again), mapped)
    # On purpose: --force maps the mapped vectors once more.
    argv = ["--input", table, "--id-column", "id", "--replace", "--force"]
    assert _transform(store, *argv) == 0
    assert lancedb.connect(db).open_table("old").version > version


def test_mapping_a_migrated_table_or_collection_again_is_refused(store, capsys):
    db = store / "db"
    argv = ["--input", db / "old.lance", "--output", db / "mapped.lance", "--id-column", "id"]
    assert _transform(store, *argv) == 0
    argv = ["--input", db / "mapped.lance", "--output", db / "twice.lance", "--id-column", "id"]
    assert _transform(store, *argv) == 1
    assert "holds the output of the model" in capsys.readouterr().err
    assert not (db / "twice.lance").exists()
    _chroma(store)
    where = store / "chroma"
    assert _transform(store, "--input", f"{where}::old", "--output", f"{where}::mapped") == 0
    capsys.readouterr()
    assert _transform(store, "--input", f"{where}::mapped", "--output", f"{where}::twice") == 1
    assert "holds the output of the model" in capsys.readouterr().err


# ------------------------------------------------------ item 3: concurrent writers
def _cli(argv, stages=None, hold=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if stages is not None:
        env.update(SKLEARN_COMPAT_STAGE_DIR=str(stages), SKLEARN_COMPAT_HOLD_AT=hold or "")
    command = [sys.executable, "-m", "sklearn_compat", "transform", *map(str, argv)]
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)


def _wait_for(path, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


@pytest.mark.parametrize("kind", ["lance", "chroma"])
def test_a_second_writer_never_takes_over_a_running_migration(store, kind):
    """Two real processes: the first holds before its finishing step while a second one
    (plain, then with --resume, then with --force) tries the same output."""
    if kind == "chroma":
        _chroma(store)
        source, output = f"{store / 'chroma'}::old", f"{store / 'chroma'}::conc"
    else:
        source, output = store / "db" / "old.lance", store / "db" / "conc.lance"
    argv = ["--model", store / "m.skops", "--input", source, "--output", output]
    argv += ["--id-column", "id", "--rows-per-batch", "100", "--no-progress"]
    stages = store / "stages"
    stages.mkdir()
    first = _cli(argv, stages, hold="finishing")
    _wait_for(stages / "finishing", first)  # every row staged; held before promoting
    for extra in ([], ["--resume"], ["--resume", "--force"]):
        second = _cli([*argv, *extra])
        _, err = second.communicate(timeout=300)
        assert second.returncode == 1, err
        assert "another sklearn-compat run is writing this output" in err, err
        assert f"process {first.pid} on {socket.gethostname()}" in err
        assert "interrupted" not in err and len(err.strip().splitlines()) == 1
    (stages / "finishing.go").touch()
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    if kind == "chroma":
        got = _chroma_client(store).get_collection("conc")
        assert got.count() == N
        names = {c.name for c in _chroma_client(store).list_collections()}
        assert "conc.partial" not in names
    else:
        assert lancedb.connect(store / "db").open_table("conc").count_rows() == N
        assert not (store / "db" / "conc.lance.partial").exists()
    assert not [p for p in os.listdir(Path(str(output).split("::")[0]).parent) if ".lock" in p]


def _chroma_client(tmp):
    import chromadb

    return chromadb.PersistentClient(path=str(tmp / "chroma"))


def test_the_finishing_step_promotes_only_its_own_staging(store, monkeypatch, capsys):
    """If the lock was taken from a run (deleted by hand, broken by mistake), its finishing
    step promotes nothing and deletes nothing."""
    from sklearn_compat.io._chroma import ChromaMigration

    _chroma(store)
    where = store / "chroma"
    client = _chroma_client(store)
    client.create_collection("taken", embedding_function=None).add(
        ids=["x"], embeddings=[[0.0] * D]
    )
    finish = ChromaMigration.finish

    def stolen(self, log):
        os.unlink(self.lock.path)  # another run's lock now: rule 4 refuses
        OutputLock.acquire(self.lock.path, "another run")
        return finish(self, log)

    monkeypatch.setattr(ChromaMigration, "finish", stolen)
    argv = ["--input", f"{where}::old", "--output", f"{where}::taken", "--force"]
    assert _transform(store, *argv) == 1
    assert "no longer holds the lock" in capsys.readouterr().err
    assert _chroma_client(store).get_collection("taken").count() == 1  # not deleted


def test_only_a_lock_whose_owner_is_gone_is_stale(tmp_path):
    path = str(tmp_path / "out.lock")
    here = socket.gethostname()

    def write(**owner):
        record = {"token": "t", "host": here, "pid": os.getppid(), "started": None} | owner
        Path(path).write_text(json.dumps(record))

    write()  # our parent: alive
    with pytest.raises(OutputLocked, match=f"process {os.getppid()} on {here}"):
        OutputLock.acquire(path, "out")
    write(host="elsewhere")  # cannot be checked from here: never stale
    with pytest.raises(OutputLocked, match="if that run is over, delete"):
        OutputLock.acquire(path, "out")
    write(pid=999_999_999)  # no such process
    with OutputLock.acquire(path, "out") as lock:
        assert lock.holds()
    assert not os.path.exists(path)  # released
    started = process_start_time(os.getppid())
    if started is not None:  # a reused pid: the process runs, but not the one that locked
        write(started=started + 1)
        OutputLock.acquire(path, "out").release()


# ------------------------------------------------------------- item 5: empty tables
def test_empty_tables_migrate_to_empty_tables(store, capsys):
    db = store / "db"
    schema = pa.schema([("id", pa.string()), ("vector", pa.list_(pa.float32(), D))])
    lancedb.connect(db).create_table("empty", schema=schema)
    empty = db / "empty.lance"
    for argv in (
        ["--output", db / "out.lance"],
        ["--output", db / "resumed.lance", "--resume"],
        ["--replace"],
    ):
        assert _transform(store, "--input", empty, "--id-column", "id", *argv) == 0, (
            capsys.readouterr().err
        )
    for name in ("out", "resumed", "empty"):
        table = lancedb.connect(db).open_table(name)
        assert table.count_rows() == 0 and table.schema.field("vector").type.list_size == D
    assert not [p for p in os.listdir(db) if p.endswith(".partial")]
    client = _chroma(store, "nothing", n=0)
    where = store / "chroma"
    assert _transform(store, "--input", f"{where}::nothing", "--output", f"{where}::out") == 0
    resumed = ["--input", f"{where}::nothing", "--output", f"{where}::again", "--resume"]
    assert _transform(store, *resumed) == 0
    assert client.get_collection("out").count() == client.get_collection("again").count() == 0


# -------------------------------------------------------- item 7: the store messages
def test_other_routes_into_a_store_work(store, capsys):
    """A file table, or a store of another kind, is written into a store by a plain
    transform (ids and vectors); --resume on such a route names the command that works."""
    db, where = store / "db", store / "chroma"
    X, _, ids = _pairs()
    csv = store / "old.csv"
    frame = pd.DataFrame(X, columns=[f"d{j}" for j in range(D)]).assign(id=ids)
    frame.to_csv(csv, index=False)
    assert (
        _transform(store, "--input", csv, "--output", db / "from_csv.lance", "--id-column", "id")
        == 0
    )
    assert (
        _transform(store, "--input", csv, "--output", f"{where}::from-csv", "--id-column", "id")
        == 0
    )
    assert lancedb.connect(db).open_table("from_csv").count_rows() == N
    assert _chroma_client(store).get_collection("from-csv").count() == N
    capsys.readouterr()
    assert _transform(store, "--input", csv, "--output", db / "x.lance", "--resume") == 1
    err = capsys.readouterr().err
    assert "same command without them" in err


def test_lance_into_chroma_is_a_plain_transform(store, capsys):
    db, where = store / "db", store / "chroma"
    argv = ["--input", db / "old.lance", "--output", f"{where}::from-lance", "--id-column", "id"]
    assert _transform(store, *argv) == 0, capsys.readouterr().err
    got = _chroma_client(store).get_collection("from-lance").get(include=["embeddings"])
    assert got["ids"][:2] == ["doc0", "doc1"] and len(got["ids"]) == N
    capsys.readouterr()
    assert _transform(store, *argv[:-2], "--force", "--resume", "--id-column", "id") == 1
    assert "the same command without --resume" in capsys.readouterr().err


def test_printed_rollback_commands_run_when_pasted(store, capsys):
    """Table names with a space: the rollback lines are quoted for the shell; and after
    --to-version the message names what each version holds."""
    # LanceDB table names have no spaces, but their database's directory may.
    db = store / "my db"
    os.rename(store / "db", db)
    table = db / "old.lance"
    assert _transform(store, "--input", table, "--id-column", "id", "--replace") == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    command = line.split("undo with: ", 1)[1]
    assert command == f"sklearn-compat rollback --table {shlex.quote(str(table))}"
    done = _paste(command)
    assert done.returncode == 0, done.stderr
    restored = lancedb.connect(db).open_table("old")
    X, _, _ = _pairs()
    # Version 3: the old vectors restored; version 4: the same, with the ledger's entry.
    np.testing.assert_array_equal(_column(restored), X)
    assert "(now version 4)" in done.stderr
    # The vectors the table held before this rollback (migrated) stay in version 2 ...
    assert "the migrated vectors stay in version 2" in done.stderr
    back = done.stderr.strip().split("stay in version 2: ", 1)[1]
    done = _paste(back.replace(" brings them back", ""))
    assert done.returncode == 0, done.stderr
    # ... and undoing the rollback names version 4 for what it holds: not migrated vectors.
    assert "to version 2 (now version 6)" in done.stderr
    assert "the vectors it held stay in version 4" in done.stderr


def _paste(command):
    """Run a command line as a user pasting it into bash would (``sklearn-compat`` being
    this checkout's command line)."""
    script = f'sklearn-compat() {{ "{sys.executable}" -m sklearn_compat "$@"; }}\n{command}'
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)


def test_resuming_with_another_output_column_is_one_line(store, monkeypatch, capsys):
    from sklearn_compat.io._lance import LanceMigration

    db = store / "db"
    argv = ["--input", db / "old.lance", "--output", db / "out.lance", "--id-column", "id"]
    argv += ["--rows-per-batch", "100"]
    write = LanceMigration.write
    calls = []

    def interrupted(self, rb, Z):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return write(self, rb, Z)

    monkeypatch.setattr(LanceMigration, "write", interrupted)
    assert _transform(store, *argv) == 130
    monkeypatch.undo()
    capsys.readouterr()
    assert _transform(store, *argv, "--resume", "--output-column", "emb") == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "OSError" not in err
    assert "staged by another migration (column differ)" in err
    assert _transform(store, *argv, "--resume") == 0


def test_replace_rebuilds_the_indexes_it_drops(store, capsys):
    db = store / "db"
    n = 1000
    X, _, ids = _pairs(n=n)
    table = lancedb.connect(db).create_table("big", pa.table({"id": ids, "vector": _vectors(X)}))
    from lancedb.index import BTree, IvfPq

    table.create_index("vector", config=IvfPq(distance_type="cosine", num_partitions=2,
                                              num_sub_vectors=2))  # fmt: skip
    table.create_index("id", config=BTree())
    before = {i.name for i in lancedb.connect(db).open_table("big").list_indices()}
    assert before == {"vector_idx", "id_idx"}
    capsys.readouterr()
    assert _transform(store, "--input", db / "big.lance", "--id-column", "id", "--replace") == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "rebuilt: " in line and "IVF_PQ on 'vector'" in line and "BTree on 'id'" in line
    after = lancedb.connect(db).open_table("big")
    assert {i.name for i in after.list_indices()} == before
    types = {i.name: i.index_type for i in after.list_indices()}
    assert types == {"vector_idx": "IvfPq", "id_idx": "BTree"}
    assert after.search(X[0] @ np.eye(D)).limit(1).to_list()  # the index answers


def test_a_new_table_gets_the_input_indexes_with_their_metric(store, capsys):
    # A migration into a new table serves the input's queries: without the input's vector
    # index every query would scan, and an index of another metric would rank otherwise.
    import lance
    from lancedb.index import BTree, IvfPq

    db = store / "db"
    X, _, ids = _pairs(n=1000)
    table = lancedb.connect(db).create_table("big", pa.table({"id": ids, "vector": _vectors(X)}))
    table.create_index("vector", config=IvfPq(distance_type="cosine", num_partitions=2,
                                              num_sub_vectors=2))  # fmt: skip
    table.create_index("id", config=BTree())
    capsys.readouterr()
    assert _transform(store, "--input", db / "big.lance", "--output", db / "big2.lance") == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "built on it: " in line and "IVF_PQ on 'vector'" in line and "BTree on 'id'" in line
    after = lancedb.connect(db).open_table("big2")
    types = {i.name: i.index_type for i in after.list_indices()}
    assert types == {"vector_idx": "IvfPq", "id_idx": "BTree"}
    stats = lance.dataset(db / "big2.lance").stats.index_stats("vector_idx")
    assert stats["indices"][0]["metric_type"] == "cosine"
    assert {i.name for i in lancedb.connect(db).open_table("big").list_indices()} == set(types)


# ------------------------------------------------------- the store's distance is kept
@pytest.mark.parametrize(
    "settings",
    [
        {"configuration": {"hnsw": {"space": "ip", "max_neighbors": 20}}},
        {"metadata": {"hnsw:space": "cosine", "hnsw:M": 24}},
    ],
    ids=["configuration", "legacy-metadata"],
)
def test_a_migrated_collection_keeps_its_distance_and_index_settings(store, settings):
    # A collection of another distance would rank the mapped vectors differently: the
    # migration creates its output with the input's space and HNSW parameters, set either
    # way Chroma allows, and queries on the output rank by that distance.
    chromadb = pytest.importorskip("chromadb")
    X, _, ids = _pairs()
    client = chromadb.PersistentClient(path=str(store / "chroma"))
    client.create_collection("src", embedding_function=None, **settings).add(
        ids=ids.tolist(), embeddings=X
    )
    assert _transform(store, "--input", f"{store / 'chroma'}::src",
                      "--output", f"{store / 'chroma'}::mapped", "--no-progress") == 0  # fmt: skip
    client = chromadb.PersistentClient(path=str(store / "chroma"))
    source = client.get_collection("src").configuration["hnsw"]
    mapped = client.get_collection("mapped")
    assert mapped.configuration["hnsw"] == source
    assert source["space"] != "l2"  # Chroma's default: the settings did not just coincide
    got = mapped.get(include=["embeddings"])
    Z = np.asarray(got["embeddings"])
    hits = mapped.query(query_embeddings=Z[:1], n_results=5, include=["distances"])
    rows = [got["ids"].index(i) for i in hits["ids"][0]]
    similarity = Z[rows] @ Z[0]
    if source["space"] == "cosine":
        similarity /= np.linalg.norm(Z[rows], axis=1) * np.linalg.norm(Z[0])
    np.testing.assert_allclose(hits["distances"][0], 1 - similarity, atol=1e-4)

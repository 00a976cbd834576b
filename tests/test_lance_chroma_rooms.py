"""The LanceDB and Chroma rooms on their real engines: the ledger kept in the table or
collection, a column added beside the old one, rows written by id with their provenance
(bit for bit, never inserted, idempotent, whole after ``kill -9``), status counts,
cutover and rollback bit for bit."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sklearn_compat.io._stores import ledger as L
from sklearn_compat.io._stores import mapped_by, open_store

pa = pytest.importorskip("pyarrow")
lancedb = pytest.importorskip("lancedb")
pytest.importorskip("lance")

ROOT = Path(__file__).resolve().parents[1]
N, D_OLD, D_NEW = 40, 16, 8
MAPPED = mapped_by("0123456789abcdef")


def _ids(n=N):
    return np.array([f"doc{i}" for i in range(n)], dtype=object)


def _vectors(A):
    A = np.ascontiguousarray(A, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(A.reshape(-1)), A.shape[1])


def _data(seed=0, n=N):
    rng = np.random.default_rng(seed)
    old = rng.normal(size=(n, D_OLD)).astype(np.float32)
    mapped = rng.normal(size=(n, D_NEW)).astype(np.float32)
    native = rng.normal(size=(n, D_NEW)).astype(np.float32)
    return old, mapped, native


# ------------------------------------------------------------------------------ LanceDB
@pytest.fixture
def lance_table(tmp_path):
    """``db/items.lance``: id, text, a 16-wide ``vector`` with an IVF_FLAT index."""
    old, _, _ = _data()
    db = lancedb.connect(tmp_path / "db")
    text = [f"text {i}" for i in range(N)]
    table = db.create_table(
        "items", pa.table({"id": _ids(), "text": text, "vector": _vectors(old)})
    )
    import lance

    lance.dataset(str(tmp_path / "db" / "items.lance")).create_index(
        "vector", index_type="IVF_FLAT", num_partitions=2, metric="cosine"
    )
    assert table.count_rows() == N
    return str(tmp_path / "db" / "items.lance")


def _dataset(path, version=None):
    import lance

    return lance.dataset(path, version=version)


def _in_id_order(table):
    """``table``'s rows in the order of ``_ids()`` (the room may move rewritten rows)."""
    rank = np.array([int(i[3:]) for i in table.column("id").to_pylist()])
    return table.take(pa.array(np.argsort(rank)))


def _column(path, name):
    table = _in_id_order(_dataset(path).to_table(columns=["id", name]))
    return table.column("id").to_pylist(), table.column(name)


def _matrix(column):
    return np.stack(column.to_numpy(zero_copy_only=False)).astype(np.float32)


def test_lance_add_column_write_rows_bit_for_bit_with_provenance(lance_table):
    path = lance_table
    old, mapped, native = _data()
    store = open_store(path)
    assert type(store).__name__ == "LanceStore" and store.ledger() == []
    line = store.add_column("v2", D_NEW, like="vector")
    assert "'v2'" in line and "IVF_FLAT" in line
    version = _dataset(path).version
    # Idempotent for the same column; refused for another width or a name in use.
    assert "already there" in store.add_column("v2", D_NEW, like="vector")
    assert _dataset(path).version == version
    with pytest.raises(ValueError, match="already has an added column 'v2' of 8"):
        store.add_column("v2", 4, like="vector")
    with pytest.raises(ValueError, match="already has a column 'text'"):
        store.add_column("text", 4, like="vector")
    assert store.vector_columns() == {"vector": D_OLD, "v2": D_NEW}
    status = store.column_status("v2")
    assert (status["rows"], status["missing"], status["native"], status["mapped"]) == (N, N, 0, {})
    # Mapped rows for every id, plus two unknown ids: reported, never inserted.
    ids = np.r_[_ids(), ["ghost1", "ghost2"]]
    Z = np.r_[mapped, mapped[:2]]
    unknown = store.write_rows("v2", ids, Z, MAPPED)
    assert list(unknown) == ["ghost1", "ghost2"]
    assert _dataset(path).count_rows() == N
    got_ids, column = _column(path, "v2")
    assert got_ids == _ids().tolist()
    assert _matrix(column).tobytes() == mapped.tobytes()
    # Native vectors for a third of the rows, in shuffled order, replace the mapped ones.
    rows = np.random.default_rng(3).permutation(N)[: N // 3]
    store.write_rows("v2", _ids()[rows], native[rows], "native")
    expected = mapped.copy()
    expected[rows] = native[rows]
    assert _matrix(_column(path, "v2")[1]).tobytes() == expected.tobytes()
    status = store.column_status("v2")
    assert status["native"] == len(rows) and status["mapped"] == {
        "0123456789abcdef": N - len(rows)
    }
    assert status["missing"] == 0 and status["dimension"] == D_NEW
    known, R, P = store.read_rows("v2", np.r_[_ids()[rows[:3]], ["ghost"]])
    assert known.tolist() == [True, True, True, False]
    assert R[:3].tobytes() == native[rows[:3]].tobytes() and np.isnan(R[3]).all()
    assert P.tolist() == ["native"] * 3 + [None]
    # The same backfill twice changes nothing.
    before = _in_id_order(_dataset(path).to_table(columns=["id", "v2", "v2_source"]))
    version = _dataset(path).version
    store.write_rows("v2", _ids()[rows], native[rows], "native")
    assert store.last_written == 0 and _dataset(path).version == version  # nothing to write
    store.write_rows("v2", _ids()[rows[:2]], native[rows[:2]], MAPPED)  # provenance differs
    assert store.last_written == 2
    store.write_rows("v2", _ids()[rows[:2]], native[rows[:2]], "native")
    after = _in_id_order(_dataset(path).to_table(columns=["id", "v2", "v2_source"]))
    assert after.equals(before)
    # The old column is untouched and its index keeps serving (rows the room rewrote
    # whole are folded back into it before a tenth of the table is outside it).
    assert _matrix(_column(path, "vector")[1]).tobytes() == old.tobytes()
    stats = _dataset(path).stats.index_stats("vector_idx")
    assert stats["num_unindexed_rows"] * 10 <= N
    assert stats["num_indexed_rows"] + stats["num_unindexed_rows"] == N


def test_lance_wrong_dimension_writes_nothing_and_the_old_index_serves(lance_table):
    path = lance_table
    old, mapped, _ = _data()
    store = open_store(path)
    store.add_column("v2", D_NEW, like="vector")
    version = _dataset(path).version
    with pytest.raises(ValueError, match="have 7 values per row; column 'v2' holds 8") as err:
        store.write_rows("v2", _ids(), mapped[:, :7], MAPPED)
    assert "\n" not in str(err.value) and "nothing written" in str(err.value)
    assert _dataset(path).version == version
    with pytest.raises(ValueError, match="'doc1' comes twice"):
        store.write_rows("v2", _ids()[[1, 1]], mapped[:2], MAPPED)
    assert _dataset(path).version == version
    # Half the rows mapped: the old column's nearest neighbours are as before.
    query = old[5]
    before = _dataset(path).to_table(nearest={"column": "vector", "q": query, "k": 3})
    store.write_rows("v2", _ids()[: N // 2], mapped[: N // 2], MAPPED)
    after = _dataset(path).to_table(nearest={"column": "vector", "q": query, "k": 3})
    assert after.column("id").to_pylist() == before.column("id").to_pylist()
    assert after.column("id").to_pylist()[0] == "doc5"
    # The new column gets the old one's index kind once it has no missing row.
    assert store.column_status("v2")["index"] is None
    store.write_rows("v2", _ids()[N // 2 :], mapped[N // 2 :], MAPPED)
    assert store.column_status("v2")["index"] == "IVF_FLAT"


def test_lance_cutover_is_one_version_and_rollback_is_bit_for_bit(lance_table):
    path = lance_table
    old, mapped, native = _data()
    store = open_store(path)
    store.add_column("v2", D_NEW, like="vector")
    store.write_rows("v2", _ids()[:10], mapped[:10], MAPPED)
    with pytest.raises(ValueError, match=f"no vector for {N - 10} of {N} rows"):
        store.cutover("v2")
    store.write_rows("v2", _ids(), mapped, MAPPED)
    store.write_rows("v2", _ids()[:5], native[:5], "native")
    store.append_ledger(L.entry("backfill", column="v2", input="export.parquet", rows=5))
    before = _dataset(path)
    snapshot = _in_id_order(before.to_table())
    line = store.cutover("v2")
    assert "undo with: sklearn-compat rollback --table" in line
    after = _dataset(path)
    assert after.version == before.version + 1  # one table version, ledger included
    assert after.schema.names == [
        "id", "text", "vector_sklearn_compat_previous", "vector", "vector_source",
    ]  # fmt: skip
    assert _matrix(_column(path, "vector")[1]).tobytes() == np.r_[native[:5], mapped[5:]].tobytes()
    kept = _column(path, "vector_sklearn_compat_previous")[1]
    assert _matrix(kept).tobytes() == old.tobytes()
    entries = json.loads(after.schema.metadata[b"sklearn_compat.ledger"])
    assert [e["action"] for e in entries] == ["backfill", "cutover"]
    assert entries[-1]["served"] == "vector"
    assert entries[-1]["kept"] == "vector_sklearn_compat_previous"
    status = store.column_status("vector")
    assert status["native"] == 5 and status["mapped"] == {"0123456789abcdef": N - 5}
    assert set(store.vector_columns()) == {"vector", "vector_sklearn_compat_previous"}
    # Queries unchanged: the served name finds the new vectors, through an index.
    hit = after.to_table(nearest={"column": "vector", "q": native[3], "k": 1})
    assert hit.column("id").to_pylist() == ["doc3"]
    # Rollback: the same columns, names and bytes as before the cutover.
    store.rollback()
    back = _dataset(path)
    restored = _in_id_order(back.to_table())
    assert restored.schema.names == snapshot.schema.names
    for name in snapshot.schema.names:
        assert restored.column(name).equals(snapshot.column(name)), name
    assert [e["action"] for e in store.ledger()][-2:] == ["cutover", "rollback"]
    # A second rollback redoes the cutover; a third undoes it again.
    store.rollback()
    assert _dataset(path).schema.names[2:] == [
        "vector_sklearn_compat_previous", "vector", "vector_source"
    ]  # fmt: skip
    store.rollback()
    assert _in_id_order(_dataset(path).to_table()).column("v2").equals(snapshot.column("v2"))
    assert L.rollback_target(store.ledger())[1] is True


def test_lance_ledger_survives_dropping_the_kept_versions(lance_table, tmp_path):
    """The ledger is in the table version itself: after ``--replace`` and the old versions
    cleaned up, mapping the table again with the same model is still refused."""
    from datetime import timedelta

    from sklearn_compat.cli import main

    path = lance_table
    old, _, _ = _data()
    db = lancedb.connect(tmp_path / "db")
    db.create_table("target", pa.table({"id": _ids(), "vector": _vectors(old[:, ::-1])}))
    model = str(tmp_path / "m.skops")
    argv = ["fit", "--method", "procrustes", "--source", path, "--target"]
    assert main([*argv, str(tmp_path / "db" / "target.lance"), "--id-column", "id",
                 "--model", model]) == 0  # fmt: skip
    transform = ["transform", "--model", model, "--input", path, "--id-column", "id"]
    assert main([*transform, "--replace"]) == 0
    entries = open_store(path).ledger()
    assert [e["action"] for e in entries] == ["replace"]
    assert entries[0]["model"]["sha256"] == L.file_sha256(model)
    assert entries[0]["previous"] == 2
    # Drop what --replace kept (its tag, then every older version).
    dataset = _dataset(path)
    for tag in list(dataset.tags.list()):
        dataset.tags.delete(tag)
    time.sleep(0.01)
    dataset.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    assert [v["version"] for v in _dataset(path).versions()] == [_dataset(path).version]
    from sklearn_compat.io import load_model

    entry = L.model_entry(load_model(model), model)
    with pytest.raises(ValueError, match="would apply the map twice"):
        L.refuse_mapping_twice(open_store(path).ledger(), entry, path)
    # An --output table carries the input's ledger and its own entry.
    out = str(tmp_path / "db" / "out.lance")
    assert main([*transform, "--output", out, "--force"]) == 0
    assert [e["action"] for e in open_store(out).ledger()] == ["replace", "transform"]


def test_lance_rows_spread_over_fragments_are_rewritten_and_indexes_kept(tmp_path):
    """A backfill in export order touches every fragment: the room rewrites those rows
    (cost follows the rows, not the table) and folds them back into the old column's
    index once a tenth of the rows is outside it; values and provenance as always."""
    import lance

    old, mapped, native = _data()
    db = lancedb.connect(tmp_path / "db")
    half = N // 2
    table = db.create_table(
        "items", pa.table({"id": _ids()[:half], "vector": _vectors(old[:half])})
    )
    table.add(pa.table({"id": _ids()[half:], "vector": _vectors(old[half:])}))
    path = str(tmp_path / "db" / "items.lance")
    lance.dataset(path).create_index("vector", index_type="IVF_FLAT", num_partitions=2)
    store = open_store(path)
    store.add_column("v2", D_NEW, like="vector")
    store.write_rows("v2", _ids(), mapped, MAPPED)  # in table order: patched in place
    assert len(lance.dataset(path).get_fragments()) == 2
    rows = np.array([3, half + 7])  # one row in each fragment
    store.write_rows("v2", _ids()[rows], native[rows], "native")
    dataset = lance.dataset(path)
    assert len(dataset.get_fragments()) == 3  # the two rows moved to a new fragment
    assert dataset.stats.index_stats("vector_idx")["num_unindexed_rows"] == 2
    more = np.array([1, 2, half + 1, half + 2])
    store.write_rows("v2", _ids()[more], native[more], "native")
    assert lance.dataset(path).stats.index_stats("vector_idx")["num_unindexed_rows"] == 0
    expected = mapped.copy()
    done = np.r_[rows, more]
    expected[done] = native[done]
    got = _in_id_order(lance.dataset(path).to_table())
    assert _matrix(got.column("v2")).tobytes() == expected.tobytes()
    assert _matrix(got.column("vector")).tobytes() == old.tobytes()
    known, R, P = store.read_rows("v2", _ids()[[3, 4]], vectors="native")
    assert P.tolist() == ["native", MAPPED] and R[0].tobytes() == native[3].tobytes()
    assert np.isnan(R[1]).all()  # a mapped row's vector is not read when only natives are
    assert store.column_status("v2")["native"] == len(done)


_KILL_SCRIPT = """
import sys, numpy as np
from sklearn_compat.io._stores import open_store
path, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(7)
Z = rng.normal(size=(n, 8)).astype(np.float32)
ids = np.array([f"doc{i}" for i in range(n)], dtype=object)
store = open_store(path)
store.add_column("v2", 8, like="vector")
for start in range(0, n, 5):
    store.write_rows("v2", ids[start:start + 5], Z[start:start + 5], "native")
    print(start, flush=True)
"""


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_lance_write_rows_killed_then_rerun(tmp_path):
    """``kill -9`` between and during writes: every row is whole (vector and provenance
    together), and the rerun finishes bit for bit."""
    n = 150
    db = lancedb.connect(tmp_path / "db")
    old = np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32)
    db.create_table("items", pa.table({"id": _ids(n), "vector": _vectors(old)}))
    path = str(tmp_path / "db" / "items.lance")
    script = tmp_path / "writer.py"
    script.write_text(_KILL_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, str(script), path, str(n)], env=env,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    for _ in range(6):  # a few batches in
        assert proc.stdout.readline(), "the writer ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    table = _in_id_order(_dataset(path).to_table())
    present = np.asarray(table.column("v2").is_valid())
    sources = np.array(table.column("v2_source").to_pylist(), dtype=object)
    assert 6 * 5 <= present.sum() < n
    assert ((sources == "native") == present).all()  # a vector never without its provenance
    done = subprocess.run([sys.executable, str(script), path, str(n)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    Z = np.random.default_rng(7).normal(size=(n, 8)).astype(np.float32)
    assert _matrix(_column(path, "v2")[1]).tobytes() == Z.tobytes()
    assert open_store(path).column_status("v2")["native"] == n


# ------------------------------------------------------------------------------- Chroma
@pytest.fixture
def chroma_collection(tmp_path):
    chromadb = pytest.importorskip("chromadb")
    old, _, _ = _data()
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    collection = client.create_collection(
        "items", embedding_function=None, metadata={"team": "search"},
        configuration={"hnsw": {"space": "l2", "max_neighbors": 12}},
    )  # fmt: skip
    collection.add(
        ids=_ids().tolist(),
        embeddings=old,
        documents=[f"text {i}" for i in range(N)],
        metadatas=[{"k": i} for i in range(N)],
    )
    return f"{tmp_path / 'chroma'}::items", client


def _chroma_rows(client, name):
    got = client.get_collection(name).get(include=["embeddings", "metadatas", "documents"])
    order = np.argsort(got["ids"])
    return (
        [got["ids"][i] for i in order],
        np.asarray(got["embeddings"], dtype=np.float32)[order],
        [got["metadatas"][i] for i in order],
        [got["documents"][i] for i in order],
    )


def _sorted(ids, A):
    order = np.argsort(ids)
    return np.asarray(A)[order]


def test_chroma_sibling_column_write_rows_and_status(chroma_collection):
    location, client = chroma_collection
    old, mapped, native = _data()
    store = open_store(location)
    assert type(store).__name__ == "ChromaStore" and store.one_vector_per_record
    line = store.add_column("v2", D_NEW, like="embedding")
    assert store.column_location("v2") in line and store.column_location("v2").endswith(
        "::items.v2"
    )
    sibling = client.get_collection("items.v2")
    assert sibling.configuration["hnsw"]["space"] == "l2"
    assert sibling.configuration["hnsw"]["max_neighbors"] == 12
    assert "already" in store.add_column("v2", D_NEW, like="embedding")
    with pytest.raises(ValueError, match="not a column of 4 values"):
        store.add_column("v2", 4, like="embedding")
    assert store.vector_columns() == {"embedding": D_OLD, "v2": D_NEW}
    assert store.column_status("v2")["missing"] == N
    unknown = store.write_rows("v2", np.r_[_ids(), ["ghost"]], np.r_[mapped, mapped[:1]], MAPPED)
    assert list(unknown) == ["ghost"] and sibling.count() == N
    with pytest.raises(ValueError, match="have 3 values per row; column 'v2' holds 8"):
        store.write_rows("v2", _ids()[:2], mapped[:2, :3], "native")
    rows = np.arange(0, N, 4)
    store.write_rows("v2", _ids()[rows], native[rows], "native")
    assert store.last_written == len(rows)
    store.write_rows("v2", _ids()[rows], native[rows], "native")  # idempotent
    assert store.last_written == 0
    expected = mapped.copy()
    expected[rows] = native[rows]
    ids, Z, metadatas, documents = _chroma_rows(client, "items.v2")
    assert Z.tobytes() == _sorted(_ids(), expected).tobytes()
    # Each record keeps its document and metadata, with its provenance beside them.
    assert documents == _sorted(_ids(), [f"text {i}" for i in range(N)]).tolist()
    k = {m["k"]: m["sklearn_compat_source"] for m in metadatas}
    assert all(k[i] == ("native" if i % 4 == 0 else MAPPED) for i in range(N))
    status = store.column_status("v2")
    assert status["native"] == len(rows) and status["mapped"] == {
        "0123456789abcdef": N - len(rows)
    }
    assert status["missing"] == 0 and status["rows"] == N
    known, R, P = store.read_rows("v2", ["doc4", "doc5", "nope"])
    assert known.tolist() == [True, True, False]
    assert R[0].tobytes() == native[4].tobytes() and R[1].tobytes() == mapped[5].tobytes()
    assert P.tolist() == ["native", MAPPED, None]
    # The old collection serves as before.
    assert _chroma_rows(client, "items")[1].tobytes() == _sorted(_ids(), old).tobytes()


def test_chroma_cutover_then_rollback_bit_for_bit(chroma_collection):
    location, client = chroma_collection
    old, mapped, native = _data()
    store = open_store(location)
    store.add_column("v2", D_NEW, like="embedding")
    store.write_rows("v2", _ids()[:-1], mapped[:-1], MAPPED)
    with pytest.raises(ValueError, match="no vector for 1 of 40 rows"):
        store.cutover("v2")
    store.write_rows("v2", _ids(), mapped, MAPPED)
    store.write_rows("v2", _ids()[:6], native[:6], "native")
    before = {c.name: _chroma_rows(client, c.name) for c in client.list_collections()}
    line = store.cutover("v2")
    assert "items.embedding_sklearn_compat_previous" in line and "rollback --table" in line
    names = sorted(c.name for c in client.list_collections())
    assert names == ["items", "items.embedding_sklearn_compat_previous"]
    served = _chroma_rows(client, "items")
    assert served[1].tobytes() == before["items.v2"][1].tobytes()
    assert client.get_collection("items").configuration["hnsw"]["space"] == "l2"
    hit = client.get_collection("items").query(query_embeddings=native[2:3], n_results=1)
    assert hit["ids"] == [["doc2"]]  # queries unchanged, the new vectors served
    status = store.column_status("embedding")
    assert status["native"] == 6 and status["mapped"] == {"0123456789abcdef": N - 6}
    kept = store.column_status("embedding_sklearn_compat_previous")
    assert kept["dimension"] == D_OLD and kept["collection"].endswith(
        "::items.embedding_sklearn_compat_previous"
    )
    assert [e["action"] for e in store.ledger()] == ["cutover"]
    store.rollback()
    after = {c.name: _chroma_rows(client, c.name) for c in client.list_collections()}
    assert sorted(after) == sorted(before) == ["items", "items.v2"]
    for name in before:
        assert after[name][0] == before[name][0]
        assert after[name][1].tobytes() == before[name][1].tobytes()
        assert after[name][2:] == before[name][2:]
    assert client.get_collection("items").metadata["team"] == "search"
    assert [e["action"] for e in store.ledger()] == ["cutover", "rollback"]
    store.rollback()  # a second rollback serves the new column again
    assert _chroma_rows(client, "items")[1].tobytes() == before["items.v2"][1].tobytes()
    with pytest.raises(ValueError, match="keeps no versions"):
        store.rollback(to_version=3)


def test_chroma_cutover_interrupted_between_renames_is_finished(chroma_collection, monkeypatch):
    location, client = chroma_collection
    _, mapped, _ = _data()
    store = open_store(location)
    store.add_column("v2", D_NEW, like="embedding")
    store.write_rows("v2", _ids(), mapped, MAPPED)
    from chromadb.api.models.Collection import Collection

    real = Collection.modify
    calls = []

    def modify(self, *args, **kwargs):
        calls.append(kwargs.get("name"))
        if kwargs.get("name") == "items" and len(calls) == 3:
            raise KeyboardInterrupt  # killed after NAME was renamed away
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "modify", modify)
    with pytest.raises(KeyboardInterrupt):
        store.cutover("v2")
    monkeypatch.undo()
    names = sorted(c.name for c in client.list_collections())
    assert names == ["items.embedding_sklearn_compat_previous", "items.v2"]
    again = open_store(location)
    assert [e["action"] for e in again.ledger()] == ["cutover"]  # finished on first touch
    assert sorted(c.name for c in client.list_collections()) == [
        "items", "items.embedding_sklearn_compat_previous"
    ]  # fmt: skip
    assert _chroma_rows(client, "items")[1].tobytes() == _sorted(_ids(), mapped).tobytes()


def test_chroma_migration_ledger_and_map_twice(chroma_collection, tmp_path):
    from sklearn_compat.cli import main
    from sklearn_compat.io import load_model

    location, client = chroma_collection
    old, _, _ = _data()
    target = client.create_collection("target", embedding_function=None)
    target.add(ids=_ids().tolist(), embeddings=old[:, ::-1].copy())
    model = str(tmp_path / "m.skops")
    argv = ["fit", "--method", "procrustes", "--source", location, "--target"]
    assert main([*argv, f"{tmp_path / 'chroma'}::target", "--model", model]) == 0
    out = f"{tmp_path / 'chroma'}::mapped"
    assert main(["transform", "--model", model, "--input", location, "--output", out]) == 0
    entries = open_store(out).ledger()
    assert [e["action"] for e in entries] == ["transform"]
    assert entries[0]["rows"] == N and entries[0]["model"]["sha256"] == L.file_sha256(model)
    entry = L.model_entry(load_model(model), model)
    with pytest.raises(ValueError, match="would apply the map twice"):
        L.refuse_mapping_twice(open_store(out).ledger(), entry, out)
    # The copied metadata carries no ledger of the input's into another collection.
    assert open_store(location).ledger() == []


def test_chroma_replace_in_place_rollback_and_the_kept_collection(chroma_collection, tmp_path):
    from sklearn_compat.cli import main

    location, client = chroma_collection
    old, _, _ = _data()
    target = client.create_collection("target", embedding_function=None)
    target.add(ids=_ids().tolist(), embeddings=old[:, ::-1].copy())
    model = str(tmp_path / "m.skops")
    argv = ["fit", "--method", "procrustes", "--source", location, "--target"]
    assert main([*argv, f"{tmp_path / 'chroma'}::target", "--model", model]) == 0
    before = _chroma_rows(client, "items")
    replace = ["transform", "--model", model, "--input", location, "--replace"]
    assert main([*replace, "--rows-per-batch", "16"]) == 0
    names = sorted(c.name for c in client.list_collections())
    assert names == ["items", "items.embedding_sklearn_compat_previous", "target"]
    kept = _chroma_rows(client, "items.embedding_sklearn_compat_previous")
    assert kept[1].tobytes() == before[1].tobytes() and kept[2:] == before[2:]
    migrated = _chroma_rows(client, "items")
    assert migrated[0] == before[0] and migrated[3] == before[3]
    np.testing.assert_allclose(migrated[1], before[1][:, ::-1], atol=1e-5)
    assert [e["action"] for e in open_store(location).ledger()] == ["replace"]
    assert main(replace) == 1  # mapped twice: refused by the ledger
    assert main(["rollback", "--table", location]) == 0
    back = _chroma_rows(client, "items")
    assert back[1].tobytes() == before[1].tobytes() and back[2:] == before[2:]
    assert main(["rollback", "--table", location]) == 0  # redo
    assert _chroma_rows(client, "items")[1].tobytes() == migrated[1].tobytes()
    # The kept collection deleted: the ledger still refuses a second mapping, and rollback
    # says in one line that there is nothing to restore.
    client.delete_collection("items.embedding_sklearn_compat_previous")
    assert main(replace) == 1
    with pytest.raises(ValueError, match="'items.embedding_sklearn_compat_previous' that "):
        open_store(location).rollback()


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_lance_backfill_sigterm_then_rerun(tmp_path, how):
    """``backfill`` stopped by SIGTERM between writes (one line, exit 143) or killed with
    ``kill -9`` at any point: the rows written so far kept whole, each with its
    provenance (the room writes a backfill fragment by fragment); the same command then
    finishes, bit for bit."""
    import lance

    n, per_fragment = 3000, 100
    rng = np.random.default_rng(0)
    old = rng.normal(size=(n, 4)).astype(np.float32)
    native = rng.normal(size=(n, 8)).astype(np.float32)
    ids = np.arange(n, dtype=np.int64)
    path = str(tmp_path / "db" / "items.lance")
    lance.write_dataset(
        pa.table({"id": ids, "vector": _vectors(old)}), path, max_rows_per_file=per_fragment
    )
    store = open_store(path)
    store.add_column("v2", 8, like="vector")
    store.write_rows("v2", ids, np.zeros((n, 8), np.float32), MAPPED)
    order = rng.permutation(n)
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"id": ids[order], "vector": _vectors(native[order])}),
        str(tmp_path / "native.parquet"),
    )
    command = [sys.executable, "-m", "sklearn_compat", "backfill", "--table", path]
    command += ["--column", "v2", "--vectors", str(tmp_path / "native.parquet")]
    command += ["--id-column", "id", "--rows-per-batch", "50"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = lance.dataset(path).version
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while lance.dataset(path).version < start + 3 and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert proc.poll() is None, "the backfill ended before it could be interrupted"
    proc.send_signal(how)
    _, err = proc.communicate(timeout=120)
    if how == signal.SIGTERM:
        assert proc.returncode in (143, -signal.SIGTERM), err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    status = open_store(path).column_status("v2")
    # whole fragments only (the export holds every row), values with their provenance
    assert 0 < status["native"] < n and status["native"] % per_fragment == 0
    table = _dataset(path).to_table().sort_by("id")
    native_rows = np.array(table.column("v2_source").to_pylist()) == "native"
    held = _matrix(table.column("v2"))
    assert held[native_rows].tobytes() == native[native_rows].tobytes()
    assert not held[~native_rows].any()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _matrix(_dataset(path).to_table().sort_by("id").column("v2")).tobytes() == (
        native.tobytes()
    )
    assert open_store(path).column_status("v2")["native"] == n
    import tempfile

    # the rows the killed run gathered are gone (the rerun removed them)
    assert not list(Path(tempfile.gettempdir()).glob(f"sklearn-compat-backfill-{proc.pid}-*"))


@pytest.mark.parametrize("patch_rows", [None, 7])
def test_lance_bulk_backfill_fragments_duplicates_and_index(
    lance_table, tmp_path, monkeypatch, patch_rows
):
    """The backfill's writer by fragment: rows in any order over several fragments, an
    id given twice keeps its last vector, unknown ids never inserted, the old index keeps
    serving; a fragment with more rows than one patch holds (``patch_rows``) is written
    in parts, bit for bit all the same; a rerun writes nothing."""
    import lance

    import sklearn_compat.io._lance_store as room

    old, mapped, native = _data()
    dataset = _dataset(lance_table)
    more = pa.table({"id": _ids(2 * N)[N:], "text": [f"t{i}" for i in range(N)],
                     "vector": _vectors(old)})  # fmt: skip
    dataset.insert(more)  # a second fragment
    assert len(_dataset(lance_table).get_fragments()) == 2
    store = open_store(lance_table)
    store.add_column("v2", D_NEW, like="vector")
    ids = _ids(2 * N)
    both = np.vstack([mapped, mapped])
    store.write_rows("v2", ids, both, MAPPED)
    if patch_rows:
        monkeypatch.setattr(room, "PATCH_BYTES", patch_rows * 4 * D_NEW)
    rng = np.random.default_rng(3)
    Y = rng.normal(size=(2 * N, D_NEW)).astype(np.float32)
    order = rng.permutation(2 * N)[: 3 * N // 2]
    first = rng.normal(size=(5, D_NEW)).astype(np.float32)  # overwritten by later batches
    writer = store.bulk_writer("v2", "native", 16)
    try:
        assert writer.add(ids[order[:5]], first).size == 0
        for start in range(0, len(order), 16):
            part = order[start : start + 16]
            assert writer.add(ids[part], Y[part]).size == 0
        extra = rng.normal(size=(2, D_NEW)).astype(np.float32)
        unknown = writer.add(np.array(["nope", "doc1"], dtype=object), extra)
        assert unknown.tolist() == ["nope"]
        written, same = writer.commit(lambda: None)
    finally:
        writer.close()
    assert (written, same) == (len(set(order) | {1}), 0)  # 'nope' never
    assert _dataset(lance_table).count_rows() == 2 * N
    got = _matrix(_column(lance_table, "v2")[1])
    want = both.copy()
    want[order] = Y[order]
    want[1] = extra[1]  # doc1's last vector
    assert got.tobytes() == want.tobytes()
    sources = np.array(_column(lance_table, "v2_source")[1].to_pylist(), dtype=object)
    native_rows = np.zeros(2 * N, bool)
    native_rows[order] = True
    native_rows[1] = True
    assert ((sources == "native") == native_rows).all()
    assert ((sources == MAPPED) == ~native_rows).all()
    hits = lance.dataset(lance_table).to_table(nearest={"column": "vector", "q": old[3], "k": 1})
    assert hits.column("id").to_pylist()[0] in ("doc3", f"doc{N + 3}")
    writer = store.bulk_writer("v2", "native", 16)
    try:
        writer.add(ids[order], Y[order])
        version = _dataset(lance_table).version
        assert writer.commit(lambda: None)[0] == (1 if 1 in order else 0)
    finally:
        writer.close()
    if 1 not in order:
        assert _dataset(lance_table).version == version


def _procrustes_model(tmp_path, width):
    from sklearn_compat.cli import main
    from sklearn_compat.io import OutputLayout, write_table

    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, width)).astype(np.float32)
    ids = np.arange(30)
    layout = OutputLayout("list", width, id_column="id", list_column="vector")
    write_table(tmp_path / "src.parquet", ids, X, layout)
    write_table(tmp_path / "tgt.parquet", ids, X[:, ::-1].copy(), layout)
    model = str(tmp_path / "m.skops")
    assert main(["fit", "--method", "procrustes", "--source", str(tmp_path / "src.parquet"),
                 "--target", str(tmp_path / "tgt.parquet"), "--id-column", "id",
                 "--model", model]) == 0  # fmt: skip
    return model


def test_lance_add_column_picks_the_column_of_the_model_width_or_names_them(tmp_path, capsys):
    """Two original vector columns and no ``--vector-column``: the one of the model's
    input width is mapped; two of that width: one line naming the columns and
    ``--vector-column``, nothing added."""
    from sklearn_compat.cli import main

    model = _procrustes_model(tmp_path, 8)
    rng = np.random.default_rng(0)
    a = rng.normal(size=(N, 8)).astype(np.float32)
    wide = rng.normal(size=(N, 16)).astype(np.float32)
    db = lancedb.connect(tmp_path / "db")
    db.create_table("two", pa.table({"id": _ids(), "b": _vectors(wide), "a": _vectors(a)}))
    db.create_table("same", pa.table({"id": _ids(), "b": _vectors(a), "a": _vectors(a)}))
    argv = ["transform", "--model", model, "--id-column", "id", "--add-column", "new"]
    two = str(tmp_path / "db" / "two.lance")
    assert main(argv + ["--input", two]) == 0
    assert open_store(two).added_columns() == {"new": "a"}
    same = str(tmp_path / "db" / "same.lance")
    capsys.readouterr()
    assert main(argv + ["--input", same]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "'a' (8 values)" in err and "'b' (8 values)" in err and "--vector-column" in err
    assert set(open_store(same).vector_columns()) == {"a", "b"}

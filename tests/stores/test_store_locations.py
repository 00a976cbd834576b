"""Locations of stores: the registry from syntax to room, secrets never printed in any
form, the undo line runnable as printed (issue 44, items 5 and 7), and the ledger's rules."""

import shlex

import numpy as np
import pytest

from sklearn_compat.cli import main
from sklearn_compat.io import table_format
from sklearn_compat.io._common import InputError, redact_uri, strip_secret
from sklearn_compat.io._stores import kind_of, ledger, open_store, registered

SECRET = "s3cr@t::pw"


@pytest.mark.parametrize(
    "location, kind",
    [
        ("db/items.lance", "lance"),
        ("db/items.lance/", "lance"),
        ("chroma_dir::items", "chroma"),
        ("postgresql://app@db/shop::public.items", "pgvector"),
        ("postgres://db/shop::items", "pgvector"),
        ("host=db dbname=shop user=app password=x::items", "pgvector"),
        ("dbname=shop::items", "pgvector"),
        ("qdrant:qdrant_dir::items", "qdrant"),
        ("qdrant://localhost:6333::items", "qdrant"),
        ("items.parquet", None),
    ],
)
def test_the_registry_names_the_store_of_each_syntax(location, kind):
    assert kind_of(location) == kind
    if kind is not None:
        assert table_format(location) == kind


def test_the_first_three_stores_are_served_by_their_rooms():
    assert {"lance", "chroma", "pgvector"} <= set(registered())
    with pytest.raises(InputError, match="not a vector store"):
        open_store("items.parquet")


@pytest.mark.parametrize(
    "location",
    [
        f"postgresql://app:{SECRET}@db.internal/shop::items",
        f"postgresql://db.internal/shop?user=app&password={SECRET}&sslmode=require::items",
        f"host=db.internal user=app password={SECRET} dbname=shop::items",
        "host=db.internal user=app password='s3cr@t ::pw' dbname=shop::items",
    ],
)
def test_a_password_is_never_shown_in_any_form(location):
    store = open_store(location)
    for text in (store.display(), str(store), repr(store), redact_uri(location)):
        for piece in ("s3cr", "::pw", "@t", " ::pw"):
            assert piece not in text, text
        assert "items" in text
    assert "s3cr" not in store.undo_line()


@pytest.mark.parametrize(
    "location, table",
    [
        (
            f"postgresql://app:{SECRET}@db.internal/shop?sslmode=require&application_name=x::items",
            "postgresql://app@db.internal/shop?sslmode=require&application_name=x::items",
        ),
        (
            f"postgresql://db/shop?password={SECRET}&sslmode=require::items",
            "postgresql://db/shop?sslmode=require::items",
        ),
        (f"host=db password={SECRET} dbname=shop::items", "host=db dbname=shop::items"),
    ],
)
def test_the_undo_line_is_shell_quoted_and_names_where_the_password_comes_from(location, table):
    line = open_store(location).undo_line()
    command, _, note = line.partition(" (")
    # Pasted into a shell, the command is these words: the '&' does not background it.
    assert shlex.split(command) == ["sklearn-compat", "rollback", "--table", table]
    assert "***" not in line and "s3cr" not in line
    assert "PGPASSWORD" in note and ".pgpass" in note
    assert strip_secret(location) == table


def test_a_location_without_a_secret_is_printed_as_given():
    location = "postgresql://app@db/shop?a=1&b=2::items"
    store = open_store(location)
    assert store.display() == location
    assert open_store(location).undo_line() == (
        f"sklearn-compat rollback --table {shlex.quote(location)}"
    )


def test_a_keyword_connection_string_is_a_postgres_table_and_its_password_stays_hidden(
    tmp_path, capsys
):
    """On main it was taken for a Chroma directory and the error echoed the password."""
    from sklearn_compat import OrthogonalProcrustesAligner
    from sklearn_compat.io import save_model

    X = np.random.default_rng(0).normal(size=(30, 4))
    aligner = OrthogonalProcrustesAligner(center=True, scale="spread").fit(X, X)
    save_model(aligner, tmp_path / "m.skops")
    location = (
        "host=127.0.0.1 port=1 connect_timeout=1 user=app password=Sup3rS3cret dbname=shop::items"
    )
    argv = ["transform", "--model", str(tmp_path / "m.skops"), "--input", location,
            "--output", str(tmp_path / "out.parquet")]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Sup3rS3cret" not in err and "Chroma" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.parquet").exists()


# ------------------------------------------------------------------------ the ledger
def _model(sha="a" * 64, ident="m1"):
    return {"id": ident, "sha256": sha, "path": "m.skops"}


def test_the_ledger_refuses_a_second_mapping_until_it_is_rolled_back():
    replace = ledger.entry("replace", column="v", model=_model(), input="t", rows=3)
    entries = [replace]
    with pytest.raises(InputError, match="twice"):
        ledger.refuse_mapping_twice(entries, _model(), "t")
    # The same model saved again (other bytes, same fingerprint id) is the same model.
    with pytest.raises(InputError, match="twice"):
        ledger.refuse_mapping_twice(entries, _model(sha="b" * 64), "t")
    ledger.refuse_mapping_twice(entries, _model(sha="c" * 64, ident="m2"), "t")  # another
    ledger.refuse_mapping_twice(entries, _model(), "t", force=True)
    target, redo = ledger.rollback_target(entries)
    assert target is replace and not redo
    undo = ledger.entry("rollback", column="v", undoes=ledger.undo_reference(replace))
    entries.append(undo)
    ledger.refuse_mapping_twice(entries, _model(), "t")  # undone: mapping is right again
    assert ledger.in_effect(entries) == []
    target, redo = ledger.rollback_target(entries)
    assert target is replace and redo  # a second rollback redoes it
    entries.append(ledger.entry("rollback", column="v", undoes=ledger.undo_reference(replace)))
    assert ledger.in_effect(entries) == [replace]
    with pytest.raises(InputError, match="twice"):
        ledger.refuse_mapping_twice(entries, _model(), "t")


def test_resume_ownership_compares_the_job_but_not_its_time():
    job = ledger.entry("transform", column="v", model=_model(), input="t")
    staged = dict(job, time="2000-01-01T00:00:00Z", rows=10)
    ledger.check_resume(job, staged, "t.partial", "t")
    other = dict(staged, model=_model(sha="d" * 64, ident="m3"))
    with pytest.raises(InputError, match="model differ"):
        ledger.check_resume(job, other, "t.partial", "t")


@pytest.mark.parametrize(
    "exc",
    [
        InputError("cannot connect", path="postgresql://app:Sup3r@S3cret@db/shop::items"),
        RuntimeError("driver said: host=db password=Sup3rS3cret dbname=shop"),
        OSError("postgresql://db/shop?password=Sup3rS3cret&sslmode=require::t: refused"),
    ],
)
def test_no_error_line_of_the_command_line_carries_a_password(exc):
    from sklearn_compat.cli import _one_line

    line = _one_line(exc)
    assert "Sup3r" not in line and "S3cret" not in line
    assert "***" in line

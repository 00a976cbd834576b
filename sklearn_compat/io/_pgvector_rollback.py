"""``rollback`` of a Postgres table migrated with ``--replace``: the kept vectors swapped
back in one transaction (see :mod:`sklearn_compat.io._pgvector_write`)."""

from ._common import InputError, redact_uri
from ._pgvector import (
    connect,
    database_errors,
    split_pg_path,
    table_columns,
    table_comment,
    table_oid,
    undo_line,
    vector_indexes,
)
from ._pgvector_sql import (
    KEPT_SUFFIX,
    check_type_change,
    hold_lock,
    same_ids,
    set_comment,
    set_vectors,
    sql_module,
    table_exists,
)

__all__ = ["swap_kept"]


def swap_kept(path, to_version=None, target=None):
    """Swap a Postgres table's vectors with those its last ``--replace`` kept.

    The restored vectors are the kept ones bit for bit, in the column type they had; the
    vectors they replace are kept in their stead, so a second rollback redoes the
    migration.  One transaction: readers see the one set of vectors or the other.

    Parameters
    ----------
    path : str
        ``URI::TABLE``.
    to_version : None
        Postgres tables keep one earlier set of vectors; versions are LanceDB's.
    target : dict or None
        The ledger entry this rollback acts on (the ``--replace``, or the rollback it
        redoes); the ``rollback`` entry is appended in the same transaction.

    Returns
    -------
    str
        A line for the log.
    """
    from ._pgvector_ledger import append_entry
    from ._stores.ledger import entry, undo_reference

    shown = redact_uri(path)
    if to_version is not None:
        raise InputError(
            "--to-version applies to LanceDB tables; a Postgres table keeps the vectors of "
            "its last --replace, which rollback swaps back",
            path=shown,
        )
    uri, table = split_pg_path(path)
    kept = table.sibling(KEPT_SUFFIX)
    sql = sql_module()
    conn = connect(uri, shown)
    with database_errors(shown, "cannot roll back; nothing changed"):
        hold_lock(conn, table, shown)
        table_oid(conn, table, shown)
        if not table_exists(conn, kept):
            if target is not None:
                raise InputError(
                    f"the ledger's last change to undo is the {target.get('action')} of "
                    f"{target.get('time')}, but its kept vectors ({kept}) were dropped: "
                    "nothing to restore",
                    path=shown,
                )
            raise InputError(
                f"no kept vectors ({kept} does not exist): the table was not migrated with "
                "'transform --replace', or its old vectors were dropped",
                path=shown,
            )
        info = table_comment(conn, kept)
        column, key = info["vector_column"], info["id_column"]
        conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table.sql()))
        missing, extra, repeated = same_ids(conn, table, kept, key)
        if missing or extra:
            raise InputError(
                f"the table's ids changed since the migration ({missing} rows without kept "
                f"vectors, {extra} kept ids no longer in the table); nothing restored",
                path=shown,
            )
        oid = table_oid(conn, table, shown)
        vector = next(c for c in table_columns(conn, oid) if c.name == column)
        indexes = vector_indexes(conn, oid, column)
        check_type_change(conn, table, column, vector.type_sql, info["type"], shown, "rollback")
        swap = table.sibling("_sklearn_compat_swap")
        conn.execute(
            sql.SQL("CREATE TABLE {} AS SELECT {}, {} FROM {}").format(
                swap.sql(), sql.Identifier(key), sql.Identifier(column), table.sql()
            )
        )
        set_vectors(conn, table, key, column, info["type"], kept, indexes, info["not_null"])
        conn.execute(sql.SQL("DROP TABLE {}").format(kept.sql()))
        conn.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(swap.sql(), sql.Identifier(kept.name))
        )
        set_comment(
            conn, kept, dict(info, type=vector.type_sql, not_null=vector.not_null, indexes=indexes)
        )
        if target is not None:
            undoes = undo_reference(target)
            append_entry(conn, table, entry("rollback", column=column, undoes=undoes))
        conn.commit()
    conn.close()
    return (
        f"restored the vectors of {shown} ({info['type']}); the vectors it had "
        f"({vector.type_sql}) are kept in {kept}; the same command swaps them back: "
        f"{undo_line(path)}"
    )

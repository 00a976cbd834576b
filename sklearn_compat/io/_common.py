"""Shared pieces of the table I/O modules: the error type, formats, column selections."""

import glob
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..exceptions import InputError

__all__ = [
    "check_same_job",
    "InputError",
    "ColumnSpec",
    "table_format",
    "redact_uri",
    "strip_secret",
    "csv_compression",
    "is_pattern",
    "FORMATS",
    "COMPRESSIONS",
    "DUPLICATE_POLICIES",
]

# What to do with an id that appears on several rows of one table (here, not in _join,
# so that the command line's parser can name the choices without importing pandas).
DUPLICATE_POLICIES = ("error", "first", "last", "drop")

# File name endings and the format each one means.  The format always comes from the name,
# so a mistyped suffix is an error rather than a guess.  A directory is a Parquet dataset
# (the part files Spark, Dask, pandas' ``partition_cols`` and pyarrow datasets write).
FORMATS = {
    ".csv": "csv",
    ".csv.gz": "csv",
    ".csv.bz2": "csv",
    ".csv.zst": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".npy": "npy",
    ".lance": "lance",
}

# A Chroma collection is named ``DIR::COLLECTION``: the directory of
# ``chromadb.PersistentClient(path=DIR)`` and the collection's name.
CHROMA_SEPARATOR = "::"

# A Postgres table is named ``URI::TABLE``: a libpq connection URI (these schemes), then
# the table's name, schema-qualified or not.  Checked before Chroma's ``DIR::NAME``.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# A libpq keyword connection string (``host=db dbname=shop user=app password=...``) before
# the ``::TABLE``: a Postgres table too, never a Chroma directory.
KEYWORD_DSN = re.compile(
    r"^\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode)\s*=", re.I
)

# Formats that are databases (tables written as a new version or collection), not files.
STORES = ("lance", "chroma", "pgvector", "qdrant")

# Compressed CSV endings and the pyarrow codec that reads and writes each one.
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}


def is_pattern(path):
    """Whether ``path`` is a glob pattern (``exports/part-*.parquet``), not one name (a
    connection URI's ``?`` starts its parameters)."""
    return glob.has_magic(str(path)) and not str(path).lower().startswith(POSTGRES_SCHEMES)


def table_format(path):
    """The table format of ``path`` from its name: ``"csv"``, ``"parquet"``, ``"npy"``,
    ``"lance"``, ``"chroma"`` or ``"pgvector"``.

    ``.csv.gz``, ``.csv.bz2`` and ``.csv.zst`` are compressed CSV.  An existing directory
    is a Parquet dataset (a folder of part files, hive-partitioned or not), and a glob
    pattern (``exports/part-*.parquet``) takes the format of the name it matches.
    ``DIR/NAME.lance`` is the LanceDB table ``NAME`` of the database ``DIR``, and
    ``DIR::NAME`` the Chroma collection ``NAME`` of ``chromadb.PersistentClient(DIR)``,
    and ``postgresql://.../DB::TABLE`` the table ``TABLE`` of a Postgres database (a libpq
    connection URI, then ``::`` and the table's name, schema-qualified or not).

    Raises
    ------
    InputError
        If the name ends in none of the known endings (see ``FORMATS``).

    Examples
    --------
    >>> from sklearn_compat.io import table_format
    >>> table_format("exports/items.PQ"), table_format("items.csv.gz")
    ('parquet', 'csv')
    >>> table_format("exports/part-*.parquet")
    'parquet'
    >>> table_format("db/items.lance"), table_format("chroma_db::items")
    ('lance', 'chroma')
    >>> table_format("postgresql://app@db.internal/shop::public.items")
    'pgvector'
    """
    if str(path).lower().startswith(POSTGRES_SCHEMES):
        return "pgvector"
    if CHROMA_SEPARATOR in str(path) and KEYWORD_DSN.match(str(path)):
        return "pgvector"
    if str(path).lower().startswith(("qdrant:", "qdrants:")):
        return "qdrant"
    if CHROMA_SEPARATOR in str(path):
        return "chroma"
    name = Path(path).name.lower()
    if name.endswith(".lance"):
        return "lance"
    if not is_pattern(path) and Path(path).is_dir():
        return "parquet"
    for ending in sorted(FORMATS, key=len, reverse=True):
        if name.endswith(ending):
            return FORMATS[ending]
    known = ", ".join(sorted(FORMATS))
    raise InputError(
        f"cannot tell the table format from the name (expected one of {known}, "
        f"a directory of Parquet files, a LanceDB table DIR/NAME.lance, a Chroma "
        f"collection DIR{CHROMA_SEPARATOR}NAME or a Postgres table "
        f"postgresql://...{CHROMA_SEPARATOR}TABLE)",
        path=path,
    )


# The password of a URI's user information: from ``user:`` to the last ``@`` of the
# whitespace-free token (an unencoded password may hold ``@``, ``/`` or ``::``).
_USERINFO = re.compile(r"(://[^:/@?#\s]*:)(\S*)@")
# ``password=`` of a URI's query or of a libpq keyword string, quoted or not.
_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&#]*)")


def _password_end(value, after):
    """``(secret, rest)`` of an unquoted ``password=`` value followed by the text
    ``after``: when no ``::`` comes later, the table after the value's last ``::`` is
    not part of it."""
    if value.startswith("'") or "::" in after:
        return value, ""
    head, sep, tail = value.rpartition("::")
    if sep and tail and re.fullmatch(r'[\w."$]+', tail):
        return head, sep + tail
    return value, ""


def redact_uri(text):
    """``text`` with every password of a connection URI or keyword string in it replaced
    by ``***`` (the user information's, however many ``@`` or ``::`` it holds, and any
    ``password=`` value, quoted or not).

    Messages name the table they are about; a password must not reach a log with them.

    Examples
    --------
    >>> from sklearn_compat.io._common import redact_uri
    >>> redact_uri("postgresql://app:s3cret@db/shop::items")
    'postgresql://app:***@db/shop::items'
    >>> redact_uri("postgresql://db/shop?user=app&password=s3cret::items")
    'postgresql://db/shop?user=app&password=***::items'
    >>> redact_uri("postgresql://app:p@ss::w@db/shop::items")
    'postgresql://app:***@db/shop::items'
    >>> redact_uri("host=db password='a b' dbname=shop::items")
    'host=db password=*** dbname=shop::items'
    """
    text = _USERINFO.sub(r"\1***@", str(text))
    return _PASSWORD.sub(
        lambda m: m.group(1) + "***" + _password_end(m.group(2), m.string[m.end() :])[1], text
    )


def strip_secret(location):
    """``location`` with its password taken out (not masked), for a command line a user
    can paste: the password then comes from the environment (``PGPASSWORD``) or a
    password file.

    Examples
    --------
    >>> from sklearn_compat.io._common import strip_secret
    >>> strip_secret("postgresql://app:s3cret@db/shop?sslmode=require&password=x::items")
    'postgresql://app@db/shop?sslmode=require::items'
    >>> strip_secret("host=db password=s3cret dbname=shop::items")
    'host=db dbname=shop::items'
    """
    text = _USERINFO.sub(lambda m: m.group(1)[:-1] + "@", str(location))

    def drop(m):
        return "\x00" + _password_end(m.group(2), m.string[m.end() :])[1]

    text = _PASSWORD.sub(drop, text)
    text = re.sub(r"\?\x00&", "?", text)  # ?password=x&b=1 -> ?b=1
    text = re.sub(r"&\x00", "", text)
    text = re.sub(r"\?\x00", "", text)
    text = re.sub(r"\s*\x00\s*", " ", text).strip()
    return text.replace(" ::", "::")


def table_format_or_none(path):
    """:func:`table_format` of ``path``, or None when the name has no known format (a
    model or results file)."""
    try:
        return table_format(path)
    except InputError:
        return None


def csv_compression(path):
    """The pyarrow codec of a compressed CSV name (``"gzip"``, ``"bz2"``, ``"zstd"``) or None.

    Examples
    --------
    >>> from sklearn_compat.io._common import csv_compression
    >>> csv_compression("a.csv.gz"), csv_compression("a.csv.zst"), csv_compression("a.csv")
    ('gzip', 'zstd', None)
    """
    name = Path(path).name.lower()
    for suffix, codec in COMPRESSIONS.items():
        if name.endswith(".csv" + suffix):
            return codec
    return None


@dataclass(frozen=True)
class ColumnSpec:
    """Which columns of a table hold the ids and the embedding.

    Parameters
    ----------
    id_column : str or None
        Name of the id column.  ``None``: the table has no ids (rows are matched by
        position); a plain 2-d ``.npy`` array always has ids = row numbers.
    prefix : str or None
        Embedding columns are the numeric columns whose name starts with ``prefix``.
    pattern : str or None
        Embedding columns are the numeric columns whose whole name matches this regular
        expression.
    vector_column : str or None
        The embedding is this one list-valued column (or ``.npy`` sub-array field).
    exclude : tuple of str
        Columns that are never embedding columns (for example a labels column).

    Notes
    -----
    With none of ``prefix``, ``pattern``, ``vector_column`` given, a table with exactly
    one list-valued column uses it; otherwise every numeric column other than the id and
    ``exclude`` columns is an embedding column, in file order.

    Examples
    --------
    >>> from sklearn_compat.io import ColumnSpec
    >>> spec = ColumnSpec(id_column="id", prefix="new_")
    >>> spec.select(["new_0", "new_1", "score"], [], "items.csv")
    ('columns', ['new_0', 'new_1'])
    """

    id_column: str | None = None
    prefix: str | None = None
    pattern: str | None = None
    vector_column: str | None = None
    exclude: tuple = ()

    def __post_init__(self):
        given = [n for n in ("prefix", "pattern", "vector_column") if getattr(self, n)]
        if len(given) > 1:
            raise InputError(
                "give at most one of prefix, pattern and vector column to select the "
                f"embedding, got {' and '.join(given)}"
            )
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise InputError(f"bad column pattern {self.pattern!r}: {exc}") from None

    def excluding(self, columns):
        """The same selection with ``columns`` never taken as embedding columns."""
        return replace(self, exclude=tuple(self.exclude) + tuple(columns))

    def describe(self):
        """How the embedding columns are chosen, for error messages."""
        if self.vector_column:
            return f"list column {self.vector_column!r}"
        if self.prefix:
            return f"numeric columns starting with {self.prefix!r}"
        if self.pattern:
            return f"numeric columns matching {self.pattern!r}"
        return "all numeric columns other than the id"

    def select(self, numeric, list_like, path, columns=None):
        """Pick the embedding from the numeric and list-valued column names of a table.

        ``columns`` are all column names in file order: a prefix or pattern also picks
        matching non-numeric columns, so that a stray text value in an embedding column
        is reported where it is instead of the column silently dropping out.

        Returns ``("list", name)`` or ``("columns", [names])``.
        """
        skip = set(self.exclude) | ({self.id_column} if self.id_column else set())
        if self.vector_column:
            if self.vector_column not in list_like:
                if self.vector_column in numeric:
                    raise InputError(
                        f"column {self.vector_column!r} is numeric, not list-valued; "
                        "select numeric embedding columns with a prefix or pattern",
                        path=path,
                    )
                raise InputError(f"no list-valued column {self.vector_column!r}", path=path)
            return "list", self.vector_column
        named = [
            c
            for c in (numeric if columns is None else columns)
            if c not in skip and c not in list_like
        ]
        numeric = [c for c in numeric if c not in skip]
        if self.prefix:
            chosen = [c for c in named if c.startswith(self.prefix)]
        elif self.pattern:
            chosen = [c for c in named if re.fullmatch(self.pattern, c)]
        else:
            lists = [c for c in list_like if c not in skip]
            if len(lists) == 1:
                # One list-valued column is the embedding; numeric columns next to it are
                # metadata (scores, counts) that must not be mixed into the vector.
                return "list", lists[0]
            if len(lists) > 1:
                raise InputError(
                    f"several list-valued columns ({', '.join(map(repr, lists))}); "
                    "name the embedding with --vector-column",
                    path=path,
                )
            chosen = numeric
        if not chosen:
            raise InputError(f"no embedding columns ({self.describe()})", path=path)
        return "columns", chosen


def check_same_job(job, staged, staging, path):
    """Refuse to resume into ``staging`` when the job it records (``staged``, a dict)
    differs from this run's ``job`` in any key: its rows would be another migration's."""
    changed = [k for k in job if staged.get(k) != job[k]]
    if changed:
        raise InputError(
            f"{staging} was staged by another migration ({', '.join(changed)} differ); "
            "delete it to start over",
            path=path,
        )

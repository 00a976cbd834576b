"""From a location string to the :class:`~.base.Store` that serves it.

The syntax of a location says the store (no I/O); each store is a class in its own module,
imported on first use, so a missing extra (lancedb, chromadb, psycopg, qdrant-client) only
matters for the store that needs it.  A new store is one line in :data:`STORES` and one
matcher in :func:`kind_of`.
"""

import importlib
from pathlib import Path

from .._common import CHROMA_SEPARATOR, KEYWORD_DSN, POSTGRES_SCHEMES, InputError, redact_uri

__all__ = ["STORES", "kind_of", "open_store", "registered", "store_class"]

# kind -> (module relative to sklearn_compat.io, class name), in the order the kinds are
# tried by kind_of.
STORES = {
    "qdrant": ("._qdrant_store", "QdrantStore"),
    "pgvector": ("._pgvector_store", "PgvectorStore"),
    "chroma": ("._chroma_store", "ChromaStore"),
    "lance": ("._lance_store", "LanceStore"),
}
QDRANT_SCHEMES = ("qdrant:", "qdrants:")


def kind_of(location):
    """The store kind a location names (``"qdrant"``, ``"pgvector"``, ``"chroma"``,
    ``"lance"``), or None for anything else (a file).

    Examples
    --------
    >>> from sklearn_compat.io._stores.registry import kind_of
    >>> kind_of("db/items.lance"), kind_of("chroma_db::items"), kind_of("items.csv")
    ('lance', 'chroma', None)
    >>> kind_of("postgresql://app@db/shop::items"), kind_of("host=db dbname=shop::items")
    ('pgvector', 'pgvector')
    >>> kind_of("qdrant:qdrant_dir::items"), kind_of("qdrant://localhost:6333::items")
    ('qdrant', 'qdrant')
    """
    text = str(location)
    lower = text.lower()
    if lower.startswith(QDRANT_SCHEMES):
        return "qdrant"
    if lower.startswith(POSTGRES_SCHEMES):
        return "pgvector"
    if CHROMA_SEPARATOR in text and KEYWORD_DSN.match(text):
        return "pgvector"
    if CHROMA_SEPARATOR in text:
        return "chroma"
    if Path(text.rstrip("/\\")).name.lower().endswith(".lance"):
        return "lance"
    return None


def store_class(kind):
    """The :class:`~.base.Store` subclass of ``kind`` (its room's module, imported now)."""
    module, name = STORES[kind]
    return getattr(importlib.import_module(module, "sklearn_compat.io"), name)


def open_store(location):
    """The :class:`~.base.Store` of ``location`` (parsed, not opened), or an InputError
    naming the location (without its secrets) when it names no store."""
    kind = kind_of(location)
    if kind is None:
        raise InputError(
            "is not a vector store table (DIR/NAME.lance, DIR::NAME, URI::TABLE or "
            "qdrant:DIR::NAME)",
            path=redact_uri(location),
        )
    return store_class(kind)(str(location))


def registered():
    """The kinds whose room implements :class:`~.base.Store` itself (the abstract test
    suite runs over them), in :data:`STORES` order."""
    out = []
    for kind, (module, name) in STORES.items():
        try:
            mod = importlib.import_module(module, "sklearn_compat.io")
        except ImportError:
            continue
        if getattr(mod, name, None) is not None:
            out.append(kind)
    return out

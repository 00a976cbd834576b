"""Vector stores behind one interface: :class:`~.base.Store` (read, stage, promote, add a
column, write rows by id, ledger, rollback), one room (module) per store, a registry from
location syntax to room (:mod:`.registry`) and the ledger with its guards (:mod:`.ledger`).
"""

from .base import NATIVE, Migration, Store, mapped_by, provenance_model
from .registry import STORES, kind_of, open_store, registered, store_class

__all__ = [
    "NATIVE",
    "Migration",
    "STORES",
    "Store",
    "kind_of",
    "mapped_by",
    "open_store",
    "provenance_model",
    "registered",
    "store_class",
]

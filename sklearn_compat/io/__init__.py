"""Reading and writing embedding tables (CSV, Parquet, .npy, LanceDB, Chroma, Postgres with
pgvector, Qdrant) and fitted models.

Fitted linear maps are exported for a serving stack (numpy ``.npz``, FAISS, ONNX, or
appended to the new model's sentence-transformers folder) with :func:`export_map`;
:func:`linear_form` gives the map as ``(W, b)``.

An *embedding table* holds an id column and the embedding, either as numeric columns (one
per dimension) or as one list-valued column.  The format comes from the file name:
``.csv``, ``.parquet`` / ``.pq`` or ``.npy``; or it is a vector store's table: a LanceDB
table ``DIR/NAME.lance`` (``lancedb.connect(DIR).open_table(NAME)``) or a Chroma
collection ``DIR::NAME`` (``chromadb.PersistentClient(DIR).get_collection(NAME)``) or a
Postgres table ``URI::TABLE`` (a libpq connection URI, then the table; its ``vector`` or
``halfvec`` column is the embedding, its primary key the ids) or a Qdrant collection
``qdrant:DIR::NAME`` (local mode, ``QdrantClient(path=DIR)``) or
``qdrant[s]://HOST[:PORT]::NAME`` (a server; its point ids are the ids), with the extras
``[lancedb]``, ``[chroma]``, ``[pgvector]`` and ``[qdrant]``.  Each format is one private
module.

``.npy`` tables are either a plain 2-d float array (ids are the row numbers) or a
structured array with an id field and either one float sub-array field (the list form)
or one scalar field per dimension.  Objects (pickles) are never loaded.

Large tables are read in bounded batches (:meth:`TableReader.iter_batches`), outputs are
written to a temporary file and renamed into place (:class:`TableWriter`), and every
problem is an :class:`InputError` (a ``ValueError``) whose message names the file, the
row or CSV line, and the column.

Examples
--------
>>> import numpy as np
>>> from pathlib import Path
>>> from tempfile import TemporaryDirectory
>>> from sklearn_compat.io import ColumnSpec, OutputLayout, read_table, write_table
>>> with TemporaryDirectory() as tmp:
...     path = Path(tmp) / "items.parquet"
...     vectors = np.arange(6, dtype=np.float32).reshape(3, 2)
...     layout = OutputLayout("list", width=2, id_column="item")
...     write_table(path, np.array(["a", "b", "c"]), vectors, layout)
...     reader, table = read_table(path, ColumnSpec(id_column="item"))
>>> reader.form, table.ids.tolist(), table.X.dtype
('list', ['a', 'b', 'c'], dtype('float32'))
"""

from .._lazy import lazy_exports
from ._common import DUPLICATE_POLICIES, FORMATS, ColumnSpec, InputError, table_format

# The rest on first use: pandas and scikit-learn are not needed to parse a command line.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(["JoinReport", "join_on_ids"], "._join"),
        **dict.fromkeys(["load_model", "model_format", "save_model"], "._model_files"),
        **dict.fromkeys(["Batch", "TableReader", "open_table", "read_table"], "._read"),
        **dict.fromkeys(["AtomicOutput", "OutputLayout", "TableWriter", "write_table"], "._write"),
        **dict.fromkeys(
            ["EXPORT_FORMATS", "aligned_faiss_index", "export_map", "linear_form"], "._export"
        ),
        "model_fingerprint": "._fingerprint",
    },
)

__all__ = [
    "AtomicOutput",
    "Batch",
    "ColumnSpec",
    "DUPLICATE_POLICIES",
    "EXPORT_FORMATS",
    "FORMATS",
    "InputError",
    "JoinReport",
    "OutputLayout",
    "TableReader",
    "TableWriter",
    "aligned_faiss_index",
    "export_map",
    "join_on_ids",
    "linear_form",
    "load_model",
    "model_fingerprint",
    "model_format",
    "open_table",
    "read_table",
    "save_model",
    "table_format",
    "write_table",
]

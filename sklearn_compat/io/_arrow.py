"""Readers of Arrow-based formats (Parquet, LanceDB): the layout from a schema, and
:class:`Batch` objects from Arrow record batches."""

import numpy as np

from ._common import InputError
from ._table_reader import Batch, TableReader, _check_extra, _check_numeric, _missing_id_column

__all__ = ["ArrowTableReader"]


class ArrowTableReader(TableReader):
    """A reader whose rows come as Arrow record batches; subclasses call
    :meth:`_set_layout` with the table's schema and yield batches through
    :meth:`_to_batch`."""

    def _set_layout(self, schema, spec, metadata=()):
        """Choose the id and embedding columns from an Arrow ``schema``; ``metadata`` are
        columns that are never embedding columns (a pandas index, partition keys)."""
        import pyarrow as pa

        path, extra_columns = self.path, self.extra_columns
        columns = self.columns = list(schema.names)
        if spec.id_column is not None and spec.id_column not in columns:
            raise _missing_id_column(spec, columns, path)
        _check_extra(extra_columns, columns, path)
        self.id_column = spec.id_column
        types = pa.types

        def is_number(t):
            return types.is_integer(t) or types.is_floating(t)

        numeric = [f.name for f in schema if is_number(f.type)]
        list_like = [
            f.name
            for f in schema
            if (
                types.is_list(f.type)
                or types.is_large_list(f.type)
                or types.is_fixed_size_list(f.type)
            )
            and is_number(f.type.value_type)
        ]
        spec = spec.excluding(tuple(extra_columns) + tuple(metadata))
        self.form, chosen = spec.select(numeric, list_like, path, columns)
        if self.form == "list":
            self.list_column = chosen
            t = schema.field(chosen).type
            self._file_dtype = t.value_type.to_pandas_dtype()
            if types.is_fixed_size_list(t):
                self.width = t.list_size
        else:
            _check_numeric(chosen, numeric, lambda c: schema.field(c).type, path)
            self.vector_columns = list(chosen)
            self.width = len(chosen)
            kinds = {schema.field(c).type.to_pandas_dtype() for c in chosen}
            self._file_dtype = np.float32 if kinds <= {np.float32, np.float16} else np.float64

    def _to_batch(self, rb, start, X=None):
        """A :class:`Batch` from a record batch (the embedding already in ``X`` when the
        row group was staged; ``rb`` then holds the other columns, or is None)."""
        n = rb.num_rows if X is None else X.shape[0]
        ids = None
        if self.id_column is not None:
            ids = rb.column(self.id_column).to_numpy(zero_copy_only=False)
            if ids.dtype.kind in "fc":
                ids = ids.astype(object)  # a null in an int column came back as NaN
        extra = {c: rb.column(c).to_numpy(zero_copy_only=False) for c in self.extra_columns}
        dtype = self.dtype or (
            np.float32 if self._file_dtype in (np.float32, np.float16) else np.float64
        )
        if X is not None:
            pass
        elif self.form == "columns":
            X = np.empty((n, len(self.vector_columns)), dtype=dtype)
            for j, name in enumerate(self.vector_columns):
                X[:, j] = rb.column(name).to_numpy(zero_copy_only=False)
        else:
            X = self._list_values(rb.column(self.list_column), start, ids, dtype)
        return Batch(start, ids, X, extra)

    def _list_values(self, arr, start, ids, dtype):
        import pyarrow.compute as pc

        n = len(arr)
        if arr.null_count:
            i = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
            batch = Batch(start, ids, np.empty((n, 0)))
            raise InputError(
                f"{self._locate(batch, i, self.list_column)}: missing embedding",
                path=self.path,
            )
        lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        self._check_list_lengths(lengths, start, ids)
        values = arr.flatten().to_numpy(zero_copy_only=False)
        return np.asarray(values, dtype=dtype).reshape(n, self.width or 0)

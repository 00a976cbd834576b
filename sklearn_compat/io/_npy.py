""".npy embedding tables, read by seeking into the file (see the layouts in ``_read``)."""

import numpy as np

from ._common import InputError
from ._table_reader import Batch, TableReader, _check_extra, _check_numeric, _missing_id_column

__all__ = ["NpyReader"]


class NpyReader(TableReader):
    """``.npy`` arrays read by seeking, so batches never load the whole file."""

    format = "npy"

    def __init__(self, path, spec, dtype, extra_columns):
        super().__init__(path, spec, dtype, extra_columns)
        fmt = np.lib.format
        try:
            with open(path, "rb") as f:
                version = fmt.read_magic(f)
                if version == (1, 0):
                    shape, fortran, file_dtype = fmt.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, file_dtype = fmt.read_array_header_2_0(f)
                else:
                    raise ValueError(f"unsupported .npy format version {version}")
                self._offset = f.tell()
        except FileNotFoundError:
            raise InputError("no such file", path=path) from None
        except IsADirectoryError:
            raise InputError("is a directory, not a table", path=path) from None
        except (ValueError, OSError, SyntaxError) as exc:
            raise InputError(f"not a readable .npy file: {exc}", path=path) from None
        if file_dtype.hasobject:
            raise InputError(
                "holds Python objects (a pickle), which are not loaded for safety; save a "
                "numeric or structured array instead",
                path=path,
            )
        self._file_dtype = file_dtype
        self._fortran = fortran
        self._shape = shape
        names = file_dtype.names
        self.columns = list(names or ())
        if names is None:
            if len(shape) != 2 or file_dtype.kind not in "fiu":
                raise InputError(
                    f"a plain .npy table must be a 2-d numeric array, got shape {shape} "
                    f"and dtype {file_dtype}",
                    path=path,
                )
            if spec.vector_column or spec.prefix or spec.pattern:
                raise InputError("a plain 2-d array has no named columns to select", path=path)
            _check_extra(extra_columns, (), path)
            self.form = "array"
            self.width = shape[1]
            self.id_column = None
        else:
            if len(shape) != 1:
                raise InputError(f"a structured table must be 1-d, got shape {shape}", path=path)
            if spec.id_column is not None and spec.id_column not in names:
                raise _missing_id_column(spec, names, path)
            _check_extra(extra_columns, names, path)
            self.id_column = spec.id_column
            numeric = [
                n for n in names if file_dtype[n].shape == () and file_dtype[n].kind in "fiu"
            ]
            list_like = [
                n
                for n in names
                if len(file_dtype[n].shape) == 1 and file_dtype[n].base.kind in "fiu"
            ]
            spec = spec.excluding(extra_columns)
            self.form, chosen = spec.select(numeric, list_like, path, list(names))
            if self.form == "list":
                self.list_column = chosen
                self.width = file_dtype[chosen].shape[0]
            else:
                _check_numeric(chosen, numeric, lambda c: file_dtype[c], path)
                self.vector_columns = list(chosen)
                self.width = len(chosen)
        self.n_rows = shape[0]

    def _batches(self, batch_size):
        n = self.n_rows
        if self._fortran:
            # Column-major data cannot be read row by row; memory-map it instead.
            data = np.load(self.path, mmap_mode="r")
            for start in range(0, n, batch_size):
                yield self._to_batch(np.array(data[start : start + batch_size]), start)
            return
        itemsize = self._file_dtype.itemsize * (self.width if self.form == "array" else 1)
        with open(self.path, "rb") as f:
            for start in range(0, n, batch_size):
                count = min(batch_size, n - start)
                f.seek(self._offset + start * itemsize)
                # readinto, not np.fromfile: an interrupt inside np.fromfile on a file
                # object surfaces as a TypeError instead of KeyboardInterrupt.
                raw = np.empty(
                    count * (self.width if self.form == "array" else 1), dtype=self._file_dtype
                )
                n_bytes = f.readinto(memoryview(raw).cast("B"))
                raw = raw[: n_bytes // self._file_dtype.itemsize]
                if self.form == "array":
                    got = raw.size // max(1, self.width)
                    raw = raw[: got * self.width].reshape(got, self.width)
                else:
                    got = raw.shape[0]
                if got < count:
                    raise InputError(
                        f"file is truncated: the header says {n} rows but the data ends "
                        f"at row {start + got}",
                        path=self.path,
                    )
                yield self._to_batch(raw, start)

    def _to_batch(self, raw, start):
        if self.form == "array":
            ids = np.arange(start, start + raw.shape[0])
            return Batch(start, ids, self._cast(raw, self._file_dtype.type), {})
        ids = None if self.id_column is None else raw[self.id_column]
        extra = {c: np.asarray(raw[c]) for c in self.extra_columns}
        if self.form == "list":
            field_dtype = self._file_dtype[self.list_column].base.type
            X = self._cast(raw[self.list_column], field_dtype)
        else:
            kinds = {self._file_dtype[c].type for c in self.vector_columns}
            file_dtype = np.float32 if kinds <= {np.float32, np.float16} else np.float64
            X = np.empty((raw.shape[0], self.width), dtype=self.dtype or file_dtype)
            for j, name in enumerate(self.vector_columns):
                X[:, j] = raw[name]
        return Batch(start, ids, X, extra)

    def id_dtype(self):
        if self.id_column is None:
            return np.dtype(np.int64)
        return self._file_dtype[self.id_column]

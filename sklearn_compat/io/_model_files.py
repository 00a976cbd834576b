"""Saving and loading fitted models: skops by default, joblib on request.

Safe loading: a skops file is loaded only when every type in it that skops does not
already trust is one of this package's own estimator classes.  Any other type (which
could run code on load) makes :func:`load_model` refuse, naming the types, unless
``trust=True``.  A joblib file is a pickle, which can run arbitrary code when loaded, so
it is loaded only with ``trust=True``.
"""

import copy
import importlib
import zipfile
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from ._common import InputError
from ._fingerprint import model_fingerprint
from ._write import AtomicOutput

__all__ = ["save_model", "load_model", "model_format", "own_types"]

_JOBLIB_SUFFIXES = {".joblib", ".pkl", ".pickle"}


def model_format(path, requested=None):
    """``"skops"`` or ``"joblib"``: as requested, else from the name (skops by default).

    Parameters
    ----------
    path : str or path-like
        The model file's name.
    requested : {"skops", "joblib"}, default=None
        An explicit choice, which wins over the name.

    Returns
    -------
    str

    Examples
    --------
    >>> from sklearn_compat.io import model_format
    >>> model_format("map.skops"), model_format("map.joblib"), model_format("map", "joblib")
    ('skops', 'joblib', 'joblib')
    """
    if requested is not None:
        if requested not in ("skops", "joblib"):
            raise InputError(f"model format must be 'skops' or 'joblib', got {requested!r}")
        return requested
    return "joblib" if Path(path).suffix.lower() in _JOBLIB_SUFFIXES else "skops"


def save_model(
    model,
    path,
    *,
    format=None,
    force=False,
    training_ids=None,
    n_training_rows=None,
    heldout=None,
):
    """Write a fitted model atomically, with its fingerprint; returns the format used.

    The file holds a shallow copy of a fitted ``model`` carrying ``fingerprint_`` (see
    :func:`model_fingerprint`); ``model`` itself is left as it is.

    Parameters
    ----------
    model : estimator
        A fitted estimator.
    path : str or path-like
        Where to write it; the file appears whole or not at all.
    format : {"skops", "joblib"}, default=None
        None: joblib for ``.joblib``/``.pkl`` names, else skops.
    force : bool, default=False
        Replace an existing file.
    training_ids : array-like, default=None
        Ids of the rows the model was fitted on: their count and a hash go into the
        fingerprint, and the ids themselves (as text, sorted) are kept on the saved copy
        as ``training_ids_`` (a 1-d array of str), so that ``backfill --refit`` judges the
        map only on rows it was not fitted on.
    n_training_rows : int, default=None
        Number of training rows, when the ids are not given.
    heldout : dict, default=None
        The model's retention on pairs kept aside from the fit (builtins only), stored as
        ``fingerprint_["heldout"]``; ``transform --min-retention`` checks it.

    Returns
    -------
    str
        The format used.

    Examples
    --------
    >>> import numpy as np
    >>> from pathlib import Path
    >>> from tempfile import TemporaryDirectory
    >>> from sklearn_compat import OrthogonalProcrustesAligner
    >>> from sklearn_compat.io import load_model, save_model
    >>> X = np.random.default_rng(0).normal(size=(20, 3))
    >>> aligner = OrthogonalProcrustesAligner().fit(X, X[:, ::-1])
    >>> with TemporaryDirectory() as tmp:
    ...     fmt = save_model(aligner, Path(tmp) / "map.skops")
    ...     loaded = load_model(Path(tmp) / "map.skops")
    >>> fmt, bool(np.allclose(loaded.transform(X), X[:, ::-1]))
    ('skops', True)
    """
    fmt = model_format(path, format)
    if _is_fitted(model):
        stamped = copy.copy(model)
        stamped.fingerprint_ = model_fingerprint(
            model, training_ids=training_ids, n_training_rows=n_training_rows
        )
        if heldout is not None:
            stamped.fingerprint_["heldout"] = heldout
        if training_ids is not None:
            stamped.training_ids_ = np.sort(_as_text(training_ids))
        model = stamped
    with AtomicOutput(path, force=force) as out:
        if fmt == "skops":
            try:
                import skops.io as sio
            except ImportError:
                raise InputError(
                    "saving with skops needs the skops package (pip install skops); or "
                    "save with --model-format joblib"
                ) from None
            sio.dump(model, out.tmp)
        else:
            import joblib

            joblib.dump(model, out.tmp)
    return fmt


def _as_text(ids):
    return np.asarray([str(i) for i in np.asarray(ids, dtype=object).ravel()], dtype=str)


def trained_on(model, ids):
    """Which of ``ids`` the model was fitted on, by the training ids its file records.

    Parameters
    ----------
    model : estimator
        A model loaded by :func:`load_model`.
    ids : array-like of shape (n,)
        Row ids (compared as text, as :func:`save_model` keeps them).

    Returns
    -------
    ndarray of bool of shape (n,), or None
        True for the ids among the model's training rows; None when the file records no
        training ids (saved without ``training_ids``, or before they were kept).
    """
    recorded = getattr(model, "training_ids_", None)
    if recorded is None:
        return None
    return np.isin(_as_text(ids), np.asarray(recorded, dtype=str))


def _is_fitted(model):
    try:
        check_is_fitted(model)
    except (NotFittedError, TypeError):
        return False
    return True


def own_types(type_names):
    """The names among ``type_names`` that are this package's own estimator classes."""
    ours = []
    for name in type_names:
        module, _, attr = name.rpartition(".")
        if not module.startswith("sklearn_compat"):
            continue
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
        if isinstance(obj, type) and issubclass(obj, BaseEstimator):
            ours.append(name)
    return ours


def load_model(path, *, trust=False):
    """Load a fitted model saved by :func:`save_model` (see the module notes on safety).

    skops files load when they hold only types skops trusts and this package's own
    estimators; joblib/pickle files can run code when loaded, so they need ``trust``.

    Parameters
    ----------
    path : str or path-like
        A file written by :func:`save_model`.
    trust : bool, default=False
        Load whatever the file holds (only for files you made yourself).

    Returns
    -------
    estimator
        The fitted model.

    Raises
    ------
    InputError
        Missing, corrupt or untrusted file, or an object that is not a fitted estimator.

    Examples
    --------
    >>> from sklearn_compat.io import load_model
    >>> load_model("no-such-model.skops")
    Traceback (most recent call last):
    ...
    sklearn_compat.exceptions.InputError: no-such-model.skops: no such model file
    """
    where = str(path)
    p = Path(path)
    if not p.is_file():
        raise InputError("no such model file" if not p.exists() else "is not a file", path=where)
    if zipfile.is_zipfile(p):
        model = _load_skops(p, trust)
    else:
        kind = _sniff(p)
        if kind != "pickle":
            what = (
                "it starts like a skops archive but is cut short or corrupted (an "
                "interrupted copy or download?)"
                if kind == "zip"
                else "it is neither a skops archive nor a joblib/pickle file"
            )
            raise InputError(f"is damaged or not a model file: {what}", path=where)
        if not trust:
            raise InputError(
                "is not a skops file; if it is a joblib/pickle file, loading it can run "
                "arbitrary code, so pass --trust only if you made it yourself",
                path=where,
            )
        import joblib

        try:
            model = joblib.load(p)
        except Exception as exc:  # noqa: BLE001 - any unpickling failure means corrupt
            raise InputError(
                f"cannot read model: {type(exc).__name__}: {exc}", path=where
            ) from None
    if not (isinstance(model, BaseEstimator) and hasattr(model, "transform")):
        raise InputError(f"holds a {type(model).__name__}, not a fitted model", path=where)
    try:
        check_is_fitted(model)
    except NotFittedError:
        raise InputError("holds a model that was never fitted", path=where) from None
    return model


def _load_skops(p, trust):
    import skops.io as sio

    where = str(p)
    try:
        untrusted = sio.get_untrusted_types(file=p)
        ours = own_types(untrusted)
        others = [t for t in untrusted if t not in ours]
        if others and not trust:
            raise InputError(
                "holds types that are not this package's and not known to be safe: "
                f"{', '.join(others)}; pass --trust only if you trust the file",
                path=where,
            )
        return sio.load(p, trusted=untrusted if trust else ours)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - corrupt archives fail in many ways
        raise InputError(
            f"is damaged or not a model file: cannot read it as a skops model "
            f"({type(exc).__name__}: {exc})",
            path=where,
        ) from None


# First bytes of a zip archive (skops), and of what joblib writes: a pickle (protocol 2+
# starts with 0x80) or one compressed by zlib, gzip, bz2, xz or lz4.
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_MAGICS = (b"\x80", b"\x78", b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x04\x22\x4d\x18")


def _sniff(p):
    """'zip', 'pickle' or 'other', from the first bytes of the file."""
    with open(p, "rb") as f:
        head = f.read(8)
    if head.startswith(_ZIP_MAGIC):
        return "zip"
    if head.startswith(_PICKLE_MAGICS):
        return "pickle"
    return "other"

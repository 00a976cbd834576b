"""Exporting a fitted linear map to where queries run: numpy, FAISS, ONNX, sentence-transformers.

Every linear aligner's ``transform`` is ``x @ W + b`` once centring, scale and intercept
are folded in (:func:`linear_form`).  That pair is all a query path needs, so it is
written in the format the serving side already speaks:

- ``npz``: arrays ``W`` (d_x, d_y) and ``b`` (d_y,), float64, loadable with
  ``np.load(path)`` (no pickle);
- ``faiss``: a ``faiss.LinearTransform`` (float32, ``y = A x + b`` with ``A = W^T``),
  written by ``faiss.write_VectorTransform``.  Wrapped around an unchanged index of old
  embeddings, ``faiss.IndexPreTransform(transform, old_index)``, it lets new-model
  queries search the old index;
- ``onnx``: a graph ``y = MatMul(x, W) + b`` on float32 input named ``x`` of shape
  (batch, d_x), output ``y`` (batch, d_y), default ONNX domain opset 13 (IR version 7), so
  any onnxruntime since 1.8 runs it;
- ``sentence-transformers``: a copy of the new model's sentence-transformers folder with
  the map appended as a ``Dense`` module, so the model itself encodes into the old space
  (see ``_st_export``).
"""

import numpy as np

from ._write import AtomicOutput

__all__ = ["EXPORT_FORMATS", "ONNX_OPSET", "aligned_faiss_index", "export_map", "linear_form"]

EXPORT_FORMATS = ("npz", "faiss", "onnx", "sentence-transformers")
# The estimators whose fitted map is x @ W + b (named when another one is refused).
AFFINE_ESTIMATORS = (
    "OrthogonalProcrustesAligner",
    "AffineAligner",
    "LambdaOrthAligner",
    "LambdaOrthAlignerCV",
    "RefinedProcrustesAligner (of an affine estimator)",
    "UnpairedProcrustesAligner",
    "WhitenedProcrustesAligner (normalize=False)",
)
# MatMul and Add are unchanged since opset 13; IR version 7 is what opset 13 shipped with.
ONNX_OPSET = 13
_ONNX_IR_VERSION = 7


def linear_form(model):
    """The fitted map as ``(W, b)`` with ``model.transform(x) == x @ W + b``.

    Centring, scale and intercept are folded into ``W`` and ``b``, so the pair alone
    reproduces ``transform`` (up to floating-point rounding).

    Parameters
    ----------
    model : fitted aligner
        ``OrthogonalProcrustesAligner``, ``AffineAligner``, ``LambdaOrthAligner``,
        ``LambdaOrthAlignerCV``, ``UnpairedProcrustesAligner``,
        ``WhitenedProcrustesAligner(normalize=False)`` or a ``RefinedProcrustesAligner``
        whose estimator is one of these (the estimators whose map is affine).

    Returns
    -------
    W : ndarray of shape (n_features_in_, n_targets_), float64
    b : ndarray of shape (n_targets_,), float64

    Raises
    ------
    TypeError
        When the model's map is not linear (e.g. ``RelativeAnchorEncoder``, whose output
        is a similarity to anchors).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat import OrthogonalProcrustesAligner
    >>> from sklearn_compat.io import linear_form
    >>> X = np.random.default_rng(0).normal(size=(30, 4))
    >>> aligner = OrthogonalProcrustesAligner(center=True).fit(X, X[:, ::-1] + 1.0)
    >>> W, b = linear_form(aligner)
    >>> W.shape, b.shape, bool(np.allclose(X @ W + b, aligner.transform(X)))
    ((4, 4), (4,), True)
    """
    from sklearn.utils.validation import check_is_fitted

    affine_map = getattr(model, "_affine_map", None)
    name = type(model).__name__
    refused = TypeError(
        f"{name} has no linear form (its transform is not x @ W + b); only the affine "
        f"aligners can be exported: {', '.join(AFFINE_ESTIMATORS)}."
    )
    if affine_map is None:
        raise refused
    check_is_fitted(model)
    try:
        W, b = affine_map()
    except NotImplementedError:
        raise refused from None
    W = np.array(W, dtype=np.float64)
    b = np.array(b, dtype=np.float64).reshape(-1)
    _check_transform_is_affine(model, W, b)
    return W, b


def _check_transform_is_affine(model, W, b):
    """Refuse a model whose ``transform`` does more than ``x @ W + b``.

    A subclass may add a step around its affine part (row normalisation, a residual MLP);
    exporting the matrix alone would then change the model's answers silently.  Rows of
    several lengths and directions expose both kinds of step.
    """
    rng = np.random.default_rng(0)
    probe = rng.normal(size=(8, W.shape[0])) * np.geomspace(0.1, 10.0, 8)[:, None]
    expected = probe @ W + b
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        # A model fitted on named columns expects them (else scikit-learn warns).
        import pandas as pd

        probe = pd.DataFrame(probe, columns=names)
    got = np.asarray(model.transform(probe), dtype=np.float64)
    scale = np.abs(expected).max() + np.abs(b).max() + 1e-300
    if not np.allclose(got, expected, rtol=1e-6, atol=1e-6 * scale):
        raise TypeError(
            f"{type(model).__name__} has no linear form with these parameters: its transform "
            "is not x @ W + b (it normalises rows or has a nonlinear part), so exporting the "
            "matrix alone would change its answers; the affine aligners are "
            f"{', '.join(AFFINE_ESTIMATORS)}."
        )


def export_map(model, path, format="npz", *, force=False, encoder=None, normalize_input=False):
    """Write a fitted aligner's map for a serving stack; returns the path written.

    Parameters
    ----------
    model : fitted aligner
        A model with a linear form (see :func:`linear_form`).
    path : str or path-like
        Destination file (a folder for ``"sentence-transformers"``); written atomically
        (whole or not at all).
    format : {"npz", "faiss", "onnx", "sentence-transformers"}, default="npz"
        ``"npz"``: arrays ``W`` and ``b`` (float64); ``"faiss"``: a
        ``faiss.LinearTransform`` (needs ``faiss-cpu``, extra ``faiss``); ``"onnx"``: a
        MatMul + Add graph, opset 13, float32 input ``x`` (needs ``onnx``, extra ``onnx``);
        ``"sentence-transformers"``: a copy of the ``encoder`` folder with the map
        appended as a ``Dense`` module (weight ``W.T``, bias ``b``, float32, identity
        activation) after all of the encoder's modules, its ``Normalize`` included, so
        that ``SentenceTransformer(path).encode(texts)`` equals
        ``model.transform(SentenceTransformer(encoder).encode(texts))``.  Plain
        sentence-transformers 3.1 or later loads it (no custom code, no
        ``trust_remote_code``; the weights are a ``model.safetensors``, and
        ``sklearn_compat.json`` beside them names the estimator and its fingerprint); no
        ``Normalize`` follows the map (see Notes).  Needs ``sentence-transformers`` (extra
        ``sentence-transformers``).
    force : bool, default=False
        Replace an existing file (or folder).
    encoder : str or path-like, default=None
        ``"sentence-transformers"`` only, and required there: the folder of the model
        whose embeddings the map was fitted on (the new model), as written by
        ``SentenceTransformer.save``.  It is only read; the export may not lie inside it.
    normalize_input : bool, default=False
        ``"sentence-transformers"`` only: put a ``Normalize`` module before the map, for
        a map fitted on ``encode(..., normalize_embeddings=True)`` output of an encoder
        that does not end in ``Normalize`` itself.  False: the map receives exactly
        what the encoder's ``encode`` returns.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError
        When the model has no linear form (the affine aligners are listed in the
        message).
    ValueError
        An unknown format, ``encoder`` missing or given for a file format; for
        ``"sentence-transformers"`` (as :class:`~sklearn_compat.exceptions.InputError`):
        an ``encoder`` that is not a sentence-transformers folder, that is itself such
        an export (it holds a module with ``sklearn_compat.json``) or that outputs
        vectors of another width than the map takes, an existing ``path`` without
        ``force``, or a ``path`` inside the encoder's folder.

    Notes
    -----
    The map goes after the encoder's ``Normalize`` because it was fitted on the vectors
    the encoder returns, which are unit vectors when the encoder normalises.  The mapped
    vectors are not normalised again, as ``transform`` does not normalise them: cosine
    search, and inner-product or L2 search of a unit-normalised old index, rank the
    same neighbours whatever a query's own length.  Pass ``normalize_embeddings=True``
    to ``encode`` where a store wants unit queries.  Before the folder is moved into
    place, it is loaded back with sentence-transformers and must reproduce the map on a
    few probe sentences; the encoder is loaded on the CPU from local files only.

    Examples
    --------
    >>> import numpy as np
    >>> from pathlib import Path
    >>> from tempfile import TemporaryDirectory
    >>> from sklearn_compat import AffineAligner
    >>> from sklearn_compat.io import export_map
    >>> X = np.random.default_rng(0).normal(size=(30, 4))
    >>> aligner = AffineAligner().fit(X, X @ np.ones((4, 2)) + 3.0)
    >>> with TemporaryDirectory() as tmp:
    ...     path = export_map(aligner, Path(tmp) / "map.npz")
    ...     saved = np.load(path)
    ...     W, b = saved["W"], saved["b"]
    >>> bool(np.allclose(X @ W + b, aligner.transform(X)))
    True
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"format must be one of {', '.join(EXPORT_FORMATS)}; got {format!r}.")
    if format == "sentence-transformers":
        if encoder is None:
            raise ValueError(
                "format='sentence-transformers' needs encoder=, the sentence-transformers "
                "folder of the model the map was fitted on."
            )
        W, b = linear_form(model)
        from ._st_export import write_sentence_transformers

        written, _ = write_sentence_transformers(
            W, b, encoder, path, force=force, normalize_input=normalize_input,
            provenance=provenance(model),
        )  # fmt: skip
        return written
    if encoder is not None or normalize_input:
        raise ValueError(
            "encoder= and normalize_input= apply to format='sentence-transformers' only; "
            f"got format={format!r}."
        )
    W, b = linear_form(model)
    writer = {"npz": _write_npz, "faiss": _write_faiss, "onnx": _write_onnx}[format]
    with AtomicOutput(path, force=force) as out:
        writer(W, b, out.tmp)
    return out.path


def provenance(model):
    """What an export records about the map: the estimator's class and its fingerprint."""
    kind = type(model)
    return {
        "estimator": f"{kind.__module__}.{kind.__qualname__}",
        "fingerprint": getattr(model, "fingerprint_", None),
    }


def _write_npz(W, b, path):
    # A file object: np.savez would append ".npz" to the temporary file's name.
    with open(path, "wb") as handle:
        np.savez(handle, W=W, b=b)


def faiss_linear_transform(W, b):
    """A trained ``faiss.LinearTransform`` computing ``x @ W + b`` (float32)."""
    faiss = _optional("faiss", "faiss-cpu", "faiss")
    d_in, d_out = W.shape
    transform = faiss.LinearTransform(d_in, d_out, True)
    # FAISS stores A as (d_out, d_in), row-major, and computes y = A x + b.
    faiss.copy_array_to_vector(np.ascontiguousarray(W.T, dtype=np.float32).ravel(), transform.A)
    faiss.copy_array_to_vector(np.ascontiguousarray(b, dtype=np.float32), transform.b)
    transform.is_trained = True
    return transform


def aligned_faiss_index(model, old_index):
    """Wrap an index of old embeddings so that new-model queries search it unchanged.

    Returns ``faiss.IndexPreTransform(transform, old_index)``, where ``transform`` is the
    model's map as a ``faiss.LinearTransform``: ``search`` takes new-model queries
    (width ``n_features_in_``), maps them and searches ``old_index`` (width ``n_targets_``).
    With an inner-product index of L2-normalised old embeddings the ranking is the cosine
    ranking of the mapped queries (a query's own norm does not change its order).

    Parameters
    ----------
    model : fitted aligner, or ``(W, b)``
        A model with a linear form, or the pair itself (e.g. read from an exported npz).
    old_index : faiss.Index
        The live index of old embeddings (any FAISS index type).

    Returns
    -------
    faiss.IndexPreTransform
    """
    _optional("faiss", "faiss-cpu", "faiss")
    import faiss

    W, b = model if isinstance(model, tuple) else linear_form(model)
    W = np.asarray(W, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if old_index.d != W.shape[1]:
        raise ValueError(
            f"the old index holds {old_index.d}-d vectors but the map outputs {W.shape[1]}-d "
            "ones: wrap the index of the model the map was fitted to (its target space)."
        )
    return faiss.IndexPreTransform(faiss_linear_transform(W, b), old_index)


def _write_faiss(W, b, path):
    faiss = _optional("faiss", "faiss-cpu", "faiss")
    faiss.write_VectorTransform(faiss_linear_transform(W, b), str(path))


def onnx_graph(W, b):
    """An ONNX model computing ``y = x @ W + b`` on float32 input ``x`` (batch, d_x)."""
    onnx = _optional("onnx", "onnx", "onnx")
    from onnx import TensorProto, helper, numpy_helper

    d_in, d_out = W.shape
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xW"]),
            helper.make_node("Add", ["xW", "b"], ["y"]),
        ],
        "sklearn_compat_linear_map",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", d_out])],
        initializer=[
            numpy_helper.from_array(W.astype(np.float32), "W"),
            numpy_helper.from_array(b.astype(np.float32), "b"),
        ],
    )
    model = helper.make_model(
        graph,
        producer_name="sklearn_compat",
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
    )
    model.ir_version = _ONNX_IR_VERSION
    onnx.checker.check_model(model)
    return model


def _write_onnx(W, b, path):
    onnx = _optional("onnx", "onnx", "onnx")
    onnx.save(onnx_graph(W, b), str(path))


def _optional(module, package, extra):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f"exporting to {extra} needs the {package} package: pip install {package} (or the "
            f"'{extra}' extra of sklearn-embedding-compat)"
        ) from None

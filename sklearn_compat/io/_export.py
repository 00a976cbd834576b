"""Exporting a fitted linear map to where queries run: numpy ``.npz``, FAISS, ONNX.

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
  any onnxruntime since 1.8 runs it.
"""

import numpy as np

from ._write import AtomicOutput

__all__ = ["EXPORT_FORMATS", "ONNX_OPSET", "aligned_faiss_index", "export_map", "linear_form"]

EXPORT_FORMATS = ("npz", "faiss", "onnx")
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
        ``OrthogonalProcrustesAligner``, ``AffineAligner``, ``LambdaOrthAligner`` or
        ``LambdaOrthAlignerCV`` (any estimator whose map is affine).

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
    if affine_map is None:
        raise TypeError(
            f"{name} has no linear form (its transform is not x @ W + b); only the linear "
            "aligners (Procrustes, affine, lambda-orthogonal) can be exported as a matrix."
        )
    check_is_fitted(model)
    try:
        W, b = affine_map()
    except NotImplementedError:
        raise TypeError(f"{name} has no linear form (its transform is not x @ W + b).") from None
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
            "matrix alone would change its answers."
        )


def export_map(model, path, format="npz", *, force=False):
    """Write a fitted aligner's map for a serving stack; returns the path written.

    Parameters
    ----------
    model : fitted aligner
        A model with a linear form (see :func:`linear_form`).
    path : str or path-like
        Destination; written atomically (whole or not at all).
    format : {"npz", "faiss", "onnx"}, default="npz"
        ``"npz"``: arrays ``W`` and ``b`` (float64); ``"faiss"``: a
        ``faiss.LinearTransform`` (needs ``faiss-cpu``, extra ``faiss``); ``"onnx"``: a
        MatMul + Add graph, opset 13, float32 input ``x`` (needs ``onnx``, extra ``onnx``).
    force : bool, default=False
        Replace an existing file.

    Returns
    -------
    pathlib.Path

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
    W, b = linear_form(model)
    writer = {"npz": _write_npz, "faiss": _write_faiss, "onnx": _write_onnx}[format]
    with AtomicOutput(path, force=force) as out:
        writer(W, b, out.tmp)
    return out.path


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

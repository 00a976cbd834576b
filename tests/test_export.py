"""Exported maps (npz, FAISS, ONNX) reproduce the estimator's own transform."""

import numpy as np
import pytest

from sklearn_compat import (
    AffineAligner,
    LambdaOrthAligner,
    OrthogonalProcrustesAligner,
    RelativeAnchorEncoder,
)
from sklearn_compat.io import aligned_faiss_index, export_map, linear_form

faiss = pytest.importorskip("faiss")
onnxruntime = pytest.importorskip("onnxruntime")
# The off-centre data are on purpose (the bias must be folded in), uncentred maps included.
pytestmark = pytest.mark.filterwarnings("ignore:.*is anisotropic")


def _pair(rng, n=200, d_x=12, d_y=8):
    X = rng.normal(size=(n, d_x)) + 2.0  # off-centre, so centring and bias matter
    M = rng.normal(size=(d_x, d_y))
    Y = X @ M + 0.1 * rng.normal(size=(n, d_y)) - 1.0
    return X, Y


def _fitted(rng):
    X, Y = _pair(rng)
    return X, [
        OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y),
        OrthogonalProcrustesAligner(center=False).fit(X, Y),
        AffineAligner(alpha=0.5).fit(X, Y),
        LambdaOrthAligner(lam=1.0, max_epochs=2, random_state=0).fit(X, Y),
    ]


def test_linear_form_folds_centring_and_scale(rng):
    X, models = _fitted(rng)
    for model in models:
        W, b = linear_form(model)
        assert W.shape == (12, 8) and b.shape == (8,)
        np.testing.assert_allclose(X @ W + b, model.transform(X), rtol=1e-10, atol=1e-10)


def test_exported_files_reproduce_transform(rng, tmp_path):
    X, models = _fitted(rng)
    X32 = X.astype(np.float32)
    for i, model in enumerate(models):
        expected = model.transform(X32)
        scale = np.abs(expected).max()

        saved = np.load(export_map(model, tmp_path / f"m{i}.npz"))
        assert sorted(saved.files) == ["W", "b"]
        np.testing.assert_allclose(X @ saved["W"] + saved["b"], model.transform(X), rtol=1e-12)

        transform = faiss.read_VectorTransform(
            str(export_map(model, tmp_path / f"m{i}.faiss", format="faiss"))
        )
        assert (transform.d_in, transform.d_out) == (12, 8)
        np.testing.assert_allclose(transform.apply(X32), expected, atol=1e-5 * scale)

        path = export_map(model, tmp_path / f"m{i}.onnx", format="onnx")
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (out,) = session.run(None, {"x": X32})
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, expected, atol=1e-5 * scale)


def test_faiss_pretransform_searches_old_index_like_mapping_then_searching(rng):
    X, models = _fitted(rng)
    model = models[0]
    old = rng.normal(size=(500, 8)).astype(np.float32)
    old /= np.linalg.norm(old, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(8)
    index.add(old)
    queries = X[:50].astype(np.float32)

    wrapped = aligned_faiss_index(model, index)
    _, got = wrapped.search(queries, 10)
    _, want = index.search(model.transform(queries), 10)
    np.testing.assert_array_equal(got, want)
    # and the brute-force cosine ranking agrees
    mapped = model.transform(queries).astype(np.float64)
    brute = np.argsort(-(mapped @ old.T.astype(np.float64)), axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(got, brute)


def test_no_linear_form_and_wrong_widths_are_refused(rng, tmp_path):
    X, models = _fitted(rng)
    encoder = RelativeAnchorEncoder(n_anchors=5, random_state=0).fit(X)
    with pytest.raises(TypeError, match="RelativeAnchorEncoder has no linear form"):
        export_map(encoder, tmp_path / "rel.npz")
    with pytest.raises(TypeError, match="no linear form"):
        export_map(encoder, tmp_path / "rel.faiss", format="faiss")
    assert not (tmp_path / "rel.npz").exists()
    with pytest.raises(ValueError, match="format must be one of npz, faiss, onnx"):
        export_map(models[0], tmp_path / "m.bin", format="bin")
    index = faiss.IndexFlatIP(5)
    with pytest.raises(ValueError, match="old index holds 5-d vectors but the map outputs 8-d"):
        aligned_faiss_index(models[0], index)
    path = export_map(models[0], tmp_path / "m.onnx", format="onnx")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="invalid dimensions for input: x"):
        session.run(None, {"x": np.zeros((2, 5), np.float32)})
    with pytest.raises(ValueError, match="already exists"):
        export_map(models[0], path, format="onnx")


def test_models_whose_transform_is_not_affine_are_refused(rng):
    # A subclass that adds a step around its affine part must not export the matrix
    # alone: the whitened aligner normalises rows, the residual adapter adds an MLP.
    from sklearn_compat import ResidualAdapterAligner, WhitenedProcrustesAligner

    X = rng.normal(size=(200, 6))
    Y = np.tanh(X @ rng.normal(size=(6, 5)))
    for model in (
        WhitenedProcrustesAligner(normalize=True),
        ResidualAdapterAligner(hidden=8, max_epochs=3, random_state=0),
    ):
        model.fit(X, Y)
        with pytest.raises(TypeError, match="has no linear form with these parameters"):
            linear_form(model)
    # The same classes in an affine setting export exactly.
    plain = WhitenedProcrustesAligner(normalize=False).fit(X, Y)
    W, b = linear_form(plain)
    np.testing.assert_allclose(X @ W + b, plain.transform(X), rtol=1e-10, atol=1e-10)


def test_refined_procrustes_exports_its_last_round(rng):
    from sklearn_compat import RefinedProcrustesAligner

    X, Y = _pair(rng, d_x=8, d_y=8)
    base = OrthogonalProcrustesAligner(center=True, scale=True)
    model = RefinedProcrustesAligner(base, n_refinements=2).fit(X, Y)
    W, b = linear_form(model)
    np.testing.assert_allclose(X @ W + b, model.transform(X), rtol=1e-10, atol=1e-10)

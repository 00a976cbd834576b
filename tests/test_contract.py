"""The DESIGN contract, checked the same way on every aligner.

Each test is parametrised over the aligners, so a behaviour promised for all of them
(dtype follows the input, Y's column names, one-line errors for bad input, safe skops
loading, CPU fallback of a CUDA-fitted model) cannot hold for one and silently not for
another.
"""

import pickle
import warnings

import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.base import clone

from sklearn_compat import (
    AffineAligner,
    AutoSettingWarning,
    LambdaOrthAligner,
    LambdaOrthAlignerCV,
    OrthogonalProcrustesAligner,
)

sio = pytest.importorskip("skops.io")

ALIGNERS = [
    OrthogonalProcrustesAligner(center=True),
    AffineAligner(alpha=0.1),
    LambdaOrthAligner(lam=1.0, max_epochs=2, bidirectional=True, random_state=0),
    LambdaOrthAlignerCV(
        [0.0, np.inf],
        estimator=LambdaOrthAligner(max_epochs=2, bidirectional=True, random_state=0),
        cv=2,
    ),
]
IDS = [type(a).__name__ for a in ALIGNERS]


def _set_device(aligner, device):
    """``device`` of an aligner, or of the estimator a search trains."""
    if isinstance(aligner, LambdaOrthAlignerCV):
        return aligner.set_params(estimator__device=device)
    return aligner.set_params(device=device)


def _device_of(aligner):
    if isinstance(aligner, LambdaOrthAlignerCV):
        return aligner.estimator.device
    return aligner.device


def _our_types(fitted):
    """The classes skops must be told to trust: the aligner's and nothing but ours."""
    names = [fitted]
    if isinstance(fitted, LambdaOrthAlignerCV):
        names.append(fitted.best_estimator_)  # the search holds the aligner it refitted
    return sorted({f"{type(a).__module__}.{type(a).__qualname__}" for a in names})


def _as_loaded_from_a_gpu_machine(fitted):
    """A fitted aligner whose device (and its refitted map's) is "cuda"."""
    _set_device(fitted, "cuda")
    if isinstance(fitted, LambdaOrthAlignerCV):
        fitted.best_estimator_.set_params(device="cuda")
    return fitted


def _data(n=40, d_x=5, d_y=3, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d_x))
    Y = X @ rng.normal(size=(d_x, d_y)) + 0.01 * rng.normal(size=(n, d_y))
    return X.astype(dtype), Y.astype(dtype)


@pytest.fixture(params=ALIGNERS, ids=IDS)
def aligner(request):
    return clone(request.param)


def _methods_into_y(fitted):
    """(name, method, input width) of every method that takes Y-space input."""
    out = []
    if hasattr(fitted, "inverse_transform"):
        out.append(("inverse_transform", fitted.inverse_transform))
    if hasattr(fitted, "transform_target"):
        out.append(("transform_target", fitted.transform_target))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_follows_input_everywhere(aligner, dtype):
    X, Y = _data(dtype=dtype)
    fitted = aligner.fit(X, Y)
    assert fitted.transform(X).dtype == dtype
    methods = _methods_into_y(fitted)
    assert methods  # every aligner here has at least one Y-space method
    for name, method in methods:
        assert method(Y).dtype == dtype, name
    # torch input follows the same rule.
    assert fitted.transform(torch.as_tensor(X)).dtype == dtype


@pytest.mark.parametrize("d_x, d_y", [(6, 3), (3, 6), (1, 4), (4, 1)])
def test_rectangular_maps_both_ways(aligner, d_x, d_y):
    X, Y = _data(d_x=d_x, d_y=d_y)
    fitted = aligner.fit(X, Y)
    assert fitted.W_.shape == (d_x, d_y)
    assert fitted.transform(X).shape == (40, d_y)
    assert fitted.transform(X[:1]).shape == (1, d_y)


def test_pandas_output_uses_y_column_names(aligner):
    X, Y = _data()
    Xf = pd.DataFrame(X, columns=[f"x{i}" for i in range(5)])
    Yf = pd.DataFrame(Y, columns=["u", "v", "w"])
    out = aligner.set_output(transform="pandas").fit(Xf, Yf).transform(Xf)
    assert list(out.columns) == ["u", "v", "w"]
    plain = aligner.set_output(transform="default").transform(Xf)
    np.testing.assert_allclose(out.to_numpy(), plain)


def test_round_trips_and_skops_trusts_only_our_class(aligner, tmp_path):
    X, Y = _data()
    fitted = aligner.fit(X, Y)
    expected = fitted.transform(X)
    names = _our_types(fitted)
    path = tmp_path / "model.skops"
    sio.dump(fitted, path)
    assert sio.get_untrusted_types(file=path) == names
    joblib.dump(fitted, tmp_path / "model.joblib")
    loaded_models = (
        sio.load(path, trusted=names),
        pickle.loads(pickle.dumps(fitted)),
        joblib.load(tmp_path / "model.joblib"),
    )
    for loaded in loaded_models:
        assert type(loaded) is type(fitted)
        np.testing.assert_array_equal(loaded.transform(X), expected)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_fitted_model_transforms_on_cpu_with_a_warning(aligner):
    X, Y = _data(dtype=np.float32)
    fitted = _set_device(aligner, "cpu").fit(X, Y)
    expected, expected_score = fitted.transform(X), fitted.score(X, Y)
    _as_loaded_from_a_gpu_machine(fitted)
    with pytest.warns(RuntimeWarning, match="running on the CPU"):
        np.testing.assert_array_equal(fitted.transform(X), expected)
    with pytest.warns(RuntimeWarning, match="running on the CPU"):
        assert fitted.score(X, Y) == expected_score
    for name, method in _methods_into_y(fitted):
        with pytest.warns(RuntimeWarning, match="running on the CPU"):
            assert method(Y).dtype == np.float32, name


X0, Y0 = _data()
BAD_FIT = {
    "X NaN": (np.where(X0 > 1, np.nan, X0), Y0, "Input X contains NaN"),
    "Y inf": (X0, np.where(Y0 > 1, np.inf, Y0), "Input Y contains infinity"),
    "rows differ": (X0, Y0[:30], "inconsistent numbers of samples"),
    "empty": (X0[:0], Y0[:0], "0 sample"),
    "strings": (np.full((40, 5), "a"), Y0, "could not convert string to float"),
    "3-d X": (X0[:, :, None], Y0, "dim 3"),
    "complex X": (X0 + 1j, Y0, "Complex data not supported: X"),
    "complex Y": (X0, Y0 + 1j, "Complex data not supported: Y"),
    "complex tensor": (torch.as_tensor(X0 + 1j), torch.as_tensor(Y0), "Complex data"),
    "X None": (None, Y0, "X is None"),
    "Y None": (X0, None, "requires y to be passed"),
}


@pytest.mark.parametrize("side", ["X", "Y"])
def test_sparse_and_meta_tensors_are_refused_clearly(aligner, side):
    X, Y = (torch.as_tensor(a) for a in _data())
    sparse = {"X": (X.to_sparse(), Y), "Y": (X, Y.to_sparse())}[side]
    with pytest.raises(TypeError, match=rf"{side} is a sparse tensor .*\.to_dense\(\)"):
        aligner.fit(*sparse)
    meta = {"X": (X.to("meta"), Y), "Y": (X, Y.to("meta"))}[side]
    with pytest.raises(ValueError, match=f"{side} is a tensor on the meta device"):
        aligner.fit(*meta)
    fitted = aligner.fit(X, Y)
    with pytest.raises(TypeError, match="X is a sparse tensor"):
        fitted.transform(X.to_sparse())


@pytest.mark.parametrize("case", list(BAD_FIT), ids=list(BAD_FIT))
def test_bad_fit_input_is_a_one_line_error(aligner, case):
    X, Y, match = BAD_FIT[case]
    with pytest.raises(ValueError, match=match) as info:
        aligner.fit(X, Y)
    assert "\n" not in str(info.value)


def _bad_apply_inputs(width):
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(10, width))
    return {
        "NaN": (np.where(Z > 1, np.nan, Z), "contains NaN"),
        "wrong width": (Z[:, :-1] if width > 1 else np.ones((10, 2)), "features"),
        "1-d": (np.ones(7), "features|1D array"),
        "3-d": (Z[:, :, None], "dim 3"),
        "complex": (Z + 1j, "Complex data not supported"),
        "strings": (np.full((3, width), "a"), "could not convert string to float"),
        "None": (None, "None|needs"),
    }


@pytest.mark.parametrize("case", list(_bad_apply_inputs(5)))
def test_bad_input_after_fit_is_a_one_line_error(aligner, case):
    X, Y = _data()
    fitted = aligner.fit(X, Y)
    calls = [("transform", fitted.transform, 5)]
    calls += [(name, method, 3) for name, method in _methods_into_y(fitted)]
    calls.append(("score", lambda Z: fitted.score(Z, Y[:10]), 5))
    for name, method, width in calls:
        data, match = _bad_apply_inputs(width)[case]
        with pytest.raises(ValueError, match=match) as info:
            method(data)
        assert "\n" not in str(info.value), name


def test_requires_grad_and_strided_inputs_work(aligner):
    X, Y = _data()
    fitted = aligner.fit(np.asfortranarray(X), Y[:, ::-1].copy()[:, ::-1])
    expected = fitted.transform(X)
    Xt = torch.as_tensor(X).requires_grad_(True)
    np.testing.assert_allclose(fitted.transform(Xt), expected, rtol=1e-12)
    np.testing.assert_allclose(fitted.transform(np.asfortranarray(X)), expected, rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # 40 rows are too few for "auto" to decide: that message is expected here.
        warnings.simplefilter("ignore", AutoSettingWarning)
        assert clone(aligner).fit(Xt, torch.as_tensor(Y)).transform(Xt).shape == (40, 3)


@pytest.mark.parametrize("device", ["gpu", "cuda:7", "cpu:0"])
def test_bad_device_strings(aligner, device):
    X, Y = _data()
    with pytest.raises(ValueError, match="device") as info:
        _set_device(aligner, device).fit(X, Y)
    assert "\n" not in str(info.value)


def test_renamed_columns_error_names_them_on_one_line(aligner):
    X, Y = _data()
    Xf = pd.DataFrame(X, columns=list("abcde"))
    fitted = aligner.fit(Xf, Y)
    with pytest.raises(ValueError, match=r"unseen at fit time: y, z; .*missing: a, b$") as info:
        fitted.transform(Xf.rename(columns={"a": "z", "b": "y"}))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("pandas_dtype", ["Float32", "float32[pyarrow]"])
def test_pandas_float32_extension_columns_stay_float32(aligner, pandas_dtype):
    # pandas' nullable and Arrow-backed float32 columns (e.g. Parquet read with
    # dtype_backend="pyarrow") are float32 input; scikit-learn alone widens them.
    pytest.importorskip("pyarrow")
    X, Y = _data(dtype=np.float32)
    Xf = pd.DataFrame(X, columns=list("abcde")).astype(pandas_dtype)
    Yf = pd.DataFrame(Y, columns=["u", "v", "w"]).astype(pandas_dtype)
    fitted = aligner.fit(Xf, Yf)
    out = fitted.transform(Xf)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, fitted.transform(pd.DataFrame(X, columns=list("abcde"))))
    assert list(fitted.get_feature_names_out()) == ["u", "v", "w"]
    Xf.iloc[0, 0] = pd.NA
    with pytest.raises(ValueError, match="Input X contains NaN"):
        fitted.transform(Xf)


def test_torch_device_parameter_keeps_skops_loading_safe(aligner, tmp_path):
    X, Y = _data()
    fitted = _set_device(aligner, torch.device("cpu")).fit(X, Y)
    names = _our_types(fitted)
    path = tmp_path / "model.skops"
    sio.dump(fitted, path)
    # torch.device would otherwise be one more type the user must trust.
    assert sio.get_untrusted_types(file=path) == names
    loaded = sio.load(path, trusted=names)
    assert _device_of(loaded) == "cpu" and _device_of(fitted) == torch.device("cpu")
    np.testing.assert_array_equal(loaded.transform(X), fitted.transform(X))

"""Fitted aligners survive pickle, joblib and skops round trips unchanged.

skops loads a model only when every type in it is trusted.  The aligners keep their fitted
state as numpy arrays and builtins, so the only type a user must trust is the estimator
class itself::

    skops.io.load(path, trusted=["sklearn_compat.procrustes.OrthogonalProcrustesAligner"])
"""

import pickle
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest

from sklearn_compat import OrthogonalProcrustesAligner

sio = pytest.importorskip("skops.io")

PROCRUSTES_TYPE = "sklearn_compat.procrustes.OrthogonalProcrustesAligner"


def _fitted(rng, **params):
    X = pd.DataFrame(rng.normal(size=(60, 4)) + 1, columns=["a", "b", "c", "d"])
    Y = pd.DataFrame(rng.normal(size=(60, 3)), columns=["u", "v", "w"])
    return OrthogonalProcrustesAligner(**params).fit(X, Y), X, Y


def _assert_same(loaded, original, X, Y):
    assert type(loaded) is OrthogonalProcrustesAligner
    assert loaded.get_params() == original.get_params()
    for attr in ("W_", "mean_x_", "mean_y_", "singular_values_", "feature_names_in_"):
        np.testing.assert_array_equal(getattr(loaded, attr), getattr(original, attr))
    assert loaded.scale_ == original.scale_
    np.testing.assert_array_equal(loaded.transform(X), original.transform(X))
    assert list(loaded.get_feature_names_out()) == ["u", "v", "w"]
    # The streaming state survives too: partial_fit continues where it stopped.
    loaded.partial_fit(X, Y)
    original.partial_fit(X, Y)
    np.testing.assert_allclose(loaded.W_, original.W_, atol=1e-14)


PARAMS = [{}, {"center": True, "scale": True, "allow_reflection": False}]


@pytest.mark.parametrize("params", PARAMS)
def test_pickle_round_trip(rng, params):
    aligner, X, Y = _fitted(rng, **params)
    _assert_same(pickle.loads(pickle.dumps(aligner)), aligner, X, Y)


@pytest.mark.parametrize("params", PARAMS)
def test_joblib_round_trip(rng, tmp_path, params):
    aligner, X, Y = _fitted(rng, **params)
    joblib.dump(aligner, tmp_path / "model.joblib")
    _assert_same(joblib.load(tmp_path / "model.joblib"), aligner, X, Y)


@pytest.mark.parametrize("params", PARAMS)
def test_skops_round_trip_trusts_only_our_class(rng, tmp_path, params):
    aligner, X, Y = _fitted(rng, **params)
    path = tmp_path / "model.skops"
    sio.dump(aligner, path)
    assert sio.get_untrusted_types(file=path) == [PROCRUSTES_TYPE]
    _assert_same(sio.load(path, trusted=[PROCRUSTES_TYPE]), aligner, X, Y)


def test_skops_refuses_untrusted_class(rng, tmp_path):
    aligner, _, _ = _fitted(rng)
    sio.dump(aligner, tmp_path / "model.skops")
    with pytest.raises(sio.exceptions.UntrustedTypesFoundException):
        sio.load(tmp_path / "model.skops")


def test_unfitted_aligner_round_trips(rng, tmp_path):
    aligner = OrthogonalProcrustesAligner(center=True, device="cpu")
    sio.dump(aligner, tmp_path / "model.skops")
    loaded = sio.load(tmp_path / "model.skops", trusted=[PROCRUSTES_TYPE])
    assert loaded.get_params() == aligner.get_params()
    assert pickle.loads(pickle.dumps(aligner)).get_params() == aligner.get_params()


RELEASE_0_1_0 = Path(__file__).parent / "data" / "release_0_1_0"
RELEASE_0_1_0_MODELS = [
    "procrustes",
    "procrustes_centered",
    "affine",
    "lambda_orth",
    "lambda_orth_cv",
    "relative",
]


@pytest.mark.parametrize("name", RELEASE_0_1_0_MODELS)
def test_release_0_1_0_files_load_and_keep_their_behaviour(name):
    # Written by tests/data/release_0_1_0/make_models.py with release 0.1.0, before the
    # package's layout changed: the estimator module paths they name must still resolve, and
    # the loaded models must give the outputs recorded at save time (old defaults included).
    path = RELEASE_0_1_0 / f"{name}.skops"
    trusted = sio.get_untrusted_types(file=path)
    assert all(t.startswith("sklearn_compat.") and t.count(".") == 2 for t in trusted)
    model = sio.load(path, trusted=trusted)
    expected = np.load(RELEASE_0_1_0 / "expected.npz")
    np.testing.assert_allclose(
        model.transform(expected["X"]), expected[name], rtol=1e-5, atol=1e-6
    )

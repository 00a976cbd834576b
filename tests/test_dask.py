"""Dask arrays in the closed-form aligners, on a real LocalCluster with worker processes."""

import numpy as np
import pytest
import torch
from sklearn.model_selection import GridSearchCV, KFold

from sklearn_compat import (
    AffineAligner,
    LambdaOrthAligner,
    OrthogonalProcrustesAligner,
    WhitenedProcrustesAligner,
)

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
joblib = pytest.importorskip("joblib")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with cluster, distributed.Client(cluster) as client:
        yield client


def paired(rng, n=700, d_x=6, d_y=4, dtype=np.float64):
    X = rng.normal(size=(n, d_x)) * rng.uniform(0.5, 2, d_x) + 3.0
    Y = X @ rng.normal(size=(d_x, d_y)) + 0.3 * rng.normal(size=(n, d_y)) - 1.0
    return X.astype(dtype), Y.astype(dtype)


ESTIMATORS = [
    AffineAligner(),
    AffineAligner(fit_intercept=False, alpha=3.0),
    OrthogonalProcrustesAligner(),
    OrthogonalProcrustesAligner(center=True, scale=True),
    WhitenedProcrustesAligner(),
    WhitenedProcrustesAligner(normalize=False, reweight=0.5, n_components=3),
]


def fitted_state(est):
    names = ["W_", "bias_", "mean_x_", "mean_y_", "scale_"]
    return {name: getattr(est, name) for name in names if hasattr(est, name)}


def assert_same_fit(a, b, rtol=1e-10):
    state_a, state_b = fitted_state(a), fitted_state(b)
    assert state_a.keys() == state_b.keys()
    for name in state_a:
        np.testing.assert_allclose(state_a[name], state_b[name], rtol=rtol, atol=1e-11)
    assert a.n_samples_seen_ == b.n_samples_seen_
    assert a.n_features_in_ == b.n_features_in_


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=repr)
@pytest.mark.parametrize("weights", [None, "dask", "numpy"])
def test_dask_fit_equals_in_memory_fit(client, rng, estimator, weights):
    X, Y = paired(rng)
    w = None if weights is None else rng.uniform(0, 2, size=len(X))
    # Uneven row chunks that differ between X, Y and the weights, and split columns.
    Xd = da.from_array(X, chunks=((100, 250, 7, 343), (4, 2)))
    Yd = da.from_array(Y, chunks=(300, 4))
    wd = da.from_array(w, chunks=90) if weights == "dask" else w
    on_cluster = estimator.__class__(**estimator.get_params()).fit(Xd, Yd, sample_weight=wd)
    in_memory = estimator.__class__(**estimator.get_params()).fit(X, Y, sample_weight=w)
    assert_same_fit(on_cluster, in_memory)
    assert isinstance(on_cluster.W_, np.ndarray)


def test_blocks_are_reduced_on_the_workers(client, rng):
    X, Y = paired(rng)
    with distributed.get_task_stream(client) as stream:
        AffineAligner().fit(da.from_array(X, chunks=200), da.from_array(Y, chunks=200))
    names = {
        task["key"][0] if isinstance(task["key"], tuple) else task["key"] for task in stream.data
    }
    assert any("_block_moments" in str(name) for name in names)
    assert any("_merge" in str(name) for name in names)


def test_arrays_generated_on_workers(client):
    # The rows never exist on the client: dask.array.random creates them on the workers.
    state = da.random.RandomState(0)
    X = state.normal(size=(4000, 8), chunks=(1000, 8)).astype(np.float32)
    Y = X[:, :5] * 2.0 + 1.0
    aligner = AffineAligner().fit(X, Y)
    expected = np.zeros((8, 5))
    expected[:5] = 2.0 * np.eye(5)
    np.testing.assert_allclose(aligner.W_, expected, atol=1e-5)
    np.testing.assert_allclose(aligner.bias_, 1.0, atol=1e-5)


def test_partial_fit_mixes_dask_and_numpy_batches(client, rng):
    X, Y = paired(rng)
    streamed = AffineAligner(alpha=0.5)
    # A Dask X with an in-memory (torch) Y is fine too.
    streamed.partial_fit(da.from_array(X[:400], chunks=150), torch.from_numpy(Y[:400]))
    streamed.partial_fit(X[400:], Y[400:])
    assert_same_fit(streamed, AffineAligner(alpha=0.5).fit(X, Y))


def test_unknown_chunk_sizes(client, rng):
    X, Y = paired(rng)
    keep = X[:, 0] > 3.0
    Xd, Yd = da.from_array(X, chunks=200), da.from_array(Y, chunks=200)
    mask = da.from_array(keep, chunks=200)
    Xk, Yk = Xd[mask], Yd[mask]
    assert np.isnan(Xk.shape[0])
    on_cluster = OrthogonalProcrustesAligner(center=True).fit(Xk, Yk)
    assert_same_fit(on_cluster, OrthogonalProcrustesAligner(center=True).fit(X[keep], Y[keep]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transform_is_lazy_and_matches_numpy(client, rng, dtype):
    X, Y = paired(rng, dtype=dtype)
    aligner = AffineAligner().fit(X, Y)
    Xd = da.from_array(X, chunks=((100, 250, 350), (3, 3)))
    Z = aligner.transform(Xd)
    assert isinstance(Z, da.Array)
    assert Z.dtype == dtype and Z._meta.dtype == dtype
    assert Z.chunks == ((100, 250, 350), (4,))
    computed = Z.compute()
    assert isinstance(computed, np.ndarray) and computed.dtype == dtype
    np.testing.assert_allclose(computed, aligner.transform(X), rtol=1e-6)
    # fit_transform (TransformerMixin) goes through the same route.
    Yd = da.from_array(Y, chunks=100)
    assert isinstance(AffineAligner().fit_transform(Xd, Yd), da.Array)


def test_transform_computes_nothing_until_asked(client):
    def poisoned():
        raise RuntimeError("the block was computed")

    X = da.from_delayed(dask.delayed(poisoned)(), shape=(10, 6), dtype=np.float64)
    aligner = OrthogonalProcrustesAligner().fit(np.eye(6), np.eye(6)[:, :4])
    Z = aligner.transform(X)  # would raise if anything ran
    assert Z.shape == (10, 4)
    with pytest.raises(RuntimeError, match="the block was computed"):
        Z.compute()


def test_bad_dask_input_is_rejected_clearly(client, rng):
    X, Y = paired(rng)
    X_nan = X.copy()
    X_nan[650, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        AffineAligner().fit(da.from_array(X_nan, chunks=100), da.from_array(Y, chunks=100))
    with pytest.raises(ValueError, match="same number of rows"):
        AffineAligner().fit(da.from_array(X, chunks=100), da.from_array(Y[:-1], chunks=100))
    with pytest.raises(ValueError, match="Negative values"):
        AffineAligner().fit(
            da.from_array(X, chunks=100), Y, sample_weight=da.from_array(-np.ones(len(X)))
        )
    with pytest.raises(ValueError, match="Complex data not supported"):
        AffineAligner().fit(da.from_array(X.astype(complex)), Y)
    with pytest.raises(ValueError, match="requires y"):
        AffineAligner().fit(da.from_array(X))
    aligner = AffineAligner().fit(X, Y)
    with pytest.raises(ValueError, match="is expecting 6 features"):
        aligner.transform(da.from_array(X[:, :5]))
    with pytest.raises(ValueError, match="target features"):
        aligner.partial_fit(da.from_array(X), da.from_array(Y[:, :3]))


# GridSearchCV over a hyper-parameter with joblib's Dask backend.  When LambdaOrthAligner
# lands, add ``(LambdaOrthAligner(max_epochs=..., random_state=0), {"lam": [0, 12, np.inf]})``.
SEARCHES = [
    (LambdaOrthAligner(max_epochs=5, random_state=0), {"lam": [0.0, 2.0, np.inf]}),
    (AffineAligner(), {"alpha": [0.0, 1e2, 1e4, 1e6]}),
    (OrthogonalProcrustesAligner(), {"center": [False, True]}),
]


@pytest.mark.parametrize("estimator, grid", SEARCHES, ids=lambda p: type(p).__name__)
def test_grid_search_on_the_dask_backend(client, rng, estimator, grid):
    X, Y = paired(rng, n=300, d_x=10, d_y=10)
    Y = Y + 2.0 * rng.normal(size=Y.shape)  # noisy enough that the grid matters
    cv = KFold(3, shuffle=True, random_state=0)
    local = GridSearchCV(estimator, grid, cv=cv).fit(X, Y)
    with distributed.get_task_stream(client) as stream:
        with joblib.parallel_config(backend="dask"):
            remote = GridSearchCV(estimator, grid, cv=cv, n_jobs=-1).fit(X, Y)
    assert len(stream.data) > 0  # the fits really ran on the cluster
    assert remote.best_params_ == local.best_params_
    np.testing.assert_allclose(
        remote.cv_results_["mean_test_score"], local.cv_results_["mean_test_score"]
    )

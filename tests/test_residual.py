"""ResidualAdapterAligner: the linear solution at zero width, a nonlinear remainder learnt."""

import pickle

import numpy as np
import pytest
import torch

from sklearn_compat import LambdaOrthAligner, ResidualAdapterAligner

FAST = {"max_epochs": 30, "random_state": 0, "device": "cpu"}


def test_zero_width_is_the_linear_aligner(rng):
    X = rng.normal(size=(300, 6))
    Y = X @ rng.normal(size=(6, 5)) + 0.1 * rng.normal(size=(300, 5))
    residual = ResidualAdapterAligner(hidden=0, lam=1.0, **FAST).fit(X, Y)
    linear = LambdaOrthAligner(lam=1.0, **FAST).fit(X, Y)
    np.testing.assert_array_equal(residual.W_, linear.W_)
    np.testing.assert_array_equal(residual.bias_, linear.bias_)
    np.testing.assert_array_equal(residual.transform(X), linear.transform(X))
    assert residual.mlp_weights_ == []
    assert residual.history_ == linear.history_


def test_the_mlp_learns_what_a_linear_map_cannot(rng):
    X = rng.normal(size=(1500, 4))
    Y = np.concatenate([X, np.abs(X)], axis=1)  # a nonlinear target
    kwargs = {"lam": np.inf, "contrastive_weight": 0.0, "max_epochs": 150, "lr": 3e-3}
    residual = ResidualAdapterAligner(hidden=64, **kwargs, random_state=0).fit(X, Y)
    linear = LambdaOrthAligner(**kwargs, random_state=0).fit(X, Y)
    X_test = rng.normal(size=(300, 4))
    Y_test = np.concatenate([X_test, np.abs(X_test)], axis=1)
    err_residual = np.mean((residual.transform(X_test) - Y_test) ** 2)
    err_linear = np.mean((linear.transform(X_test) - Y_test) ** 2)
    assert err_residual < 0.25 * err_linear


def test_the_penalty_acts_on_the_linear_part(rng):
    X = rng.normal(size=(600, 5))
    Y = X @ np.diag([3.0, 2.0, 1.0, 0.5, 0.2])
    free = ResidualAdapterAligner(hidden=8, lam=np.inf, **FAST).fit(X, Y)
    tight = ResidualAdapterAligner(hidden=8, lam=0.0, **FAST).fit(X, Y)
    assert tight.orthogonality_gap_ < 0.5 * free.orthogonality_gap_


def test_fitted_state_is_numpy_and_pickles(rng):
    X, Y = rng.normal(size=(200, 5)), rng.normal(size=(200, 3))
    aligner = ResidualAdapterAligner(hidden=16, **FAST).fit(
        torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(Y, dtype=torch.float32)
    )
    assert all(type(w) is np.ndarray and w.dtype == np.float64 for w in aligner.mlp_weights_)
    out = aligner.transform(X[:7].astype(np.float32))
    assert out.dtype == np.float32
    loaded = pickle.loads(pickle.dumps(aligner))
    np.testing.assert_array_equal(loaded.transform(X[:7]), aligner.transform(X[:7]))


def test_mlp_weights_reproduce_the_module(rng):
    """transform (numpy state, user units) equals the trained module on rescaled rows."""
    X = 5.0 * rng.normal(size=(200, 4))
    Y = 0.1 * np.tanh(X @ rng.normal(size=(4, 3)))
    aligner = ResidualAdapterAligner(hidden=8, **FAST).fit(X, Y)
    W1, b1, W2, b2 = aligner.mlp_weights_
    expected = X @ aligner.W_ + aligner.bias_ + np.maximum(X @ W1 + b1, 0) @ W2 + b2
    np.testing.assert_allclose(aligner.transform(X), expected, rtol=1e-10, atol=1e-12)


def test_negative_width_is_refused(rng):
    with pytest.raises(ValueError, match="hidden"):
        ResidualAdapterAligner(hidden=-1).fit(rng.normal(size=(20, 2)), rng.normal(size=(20, 2)))

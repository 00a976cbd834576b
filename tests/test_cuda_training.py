"""Training steps replayed from a CUDA graph (skipped without a GPU, see conftest.py).

The recorded step must be the eager step: the same kernels in the same order, so the fitted
maps agree with the eager loop's to float32 rounding, whatever the objective's parts.
"""

import numpy as np
import pytest
import torch

from sklearn_compat import LambdaOrthAligner, ResidualAdapterAligner
from sklearn_compat._lambda import steps
from sklearn_compat._lambda.intercept_choice import choose_intercept

pytestmark = pytest.mark.cuda


def _pair(rng, n=5000, d_x=48, d_y=40):
    X = rng.normal(size=(n, d_x)).astype(np.float32)
    A = rng.normal(size=(d_x, d_y)) / np.sqrt(d_x)
    Y = (X @ A + 0.3 * rng.normal(size=(n, d_y)) + 1.0).astype(np.float32)
    return X, Y


def _fit(estimator, X, Y, labels, monkeypatch, *, graphs):
    monkeypatch.setattr(steps, "USE_CUDA_GRAPHS", graphs)
    estimator.fit(X, Y, labels)
    return estimator, steps.last_outcome


@pytest.mark.parametrize(
    "make, with_labels",
    [
        (lambda: LambdaOrthAligner(lam=4.0, fit_intercept=True), False),
        (lambda: LambdaOrthAligner(lam=0.5, bidirectional=True, fit_intercept=False), False),
        (lambda: LambdaOrthAligner(lam=2.0, fit_intercept=True), True),
        (lambda: ResidualAdapterAligner(lam=4.0), False),
    ],
    ids=["paired", "bidirectional", "labels", "residual"],
)
def test_replayed_steps_fit_what_eager_steps_fit(rng, monkeypatch, make, with_labels):
    X, Y = _pair(rng)
    labels = rng.integers(0, 20, size=X.shape[0]) if with_labels else None
    common = dict(max_epochs=3, early_stopping=False, random_state=0, device="cuda")
    eager, eager_run = _fit(make().set_params(**common), X, Y, labels, monkeypatch, graphs=False)
    assert eager_run.replays == 0
    graph, graph_run = _fit(make().set_params(**common), X, Y, labels, monkeypatch, graphs=True)
    assert graph_run.capture_error is None
    # Every full batch of 256 rows of the 3 epochs but the eager warm-up steps.
    assert graph_run.replays == 3 * (graph_run.train_rows // 256) - steps.WARMUP_STEPS
    np.testing.assert_allclose(graph.W_, eager.W_, rtol=0, atol=1e-5)
    np.testing.assert_allclose(graph.bias_, eager.bias_, rtol=0, atol=1e-5)
    for name, values in eager.history_.items():
        np.testing.assert_allclose(graph.history_[name], values, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(graph.transform(X), eager.transform(X), rtol=0, atol=1e-4)


def test_strict_training_stays_eager(rng, monkeypatch):
    X, Y = _pair(rng, d_y=48)
    est = LambdaOrthAligner(
        strict=True, max_epochs=2, early_stopping=False, random_state=0, device="cuda"
    )
    _, run = _fit(est, X, Y, None, monkeypatch, graphs=True)
    assert run.replays == 0
    # Orthogonal up to the rescaling: W_ = (y_scale_ / x_scale_) Q.
    Q = est.W_ * (est.x_scale_ / est.y_scale_)
    np.testing.assert_allclose(Q.T @ Q, np.eye(48), atol=1e-5)


def test_early_stopping_restores_the_best_replayed_weights(rng, monkeypatch):
    # Early stopping restores weights into the parameters the graph writes: a refit must
    # start from the estimator's own start, not from what the previous graph left.
    X, Y = _pair(rng)
    est = LambdaOrthAligner(lam=4.0, max_epochs=30, random_state=0, device="cuda")
    _, run = _fit(est, X, Y, None, monkeypatch, graphs=True)
    assert run.replays > 0
    first = est.W_.copy()
    est.fit(X, Y)
    np.testing.assert_allclose(est.W_, first, rtol=0, atol=1e-6)


@pytest.mark.parametrize("rescale", [True, False])
def test_intercept_choice_on_the_device_is_the_host_choice(rng, rescale):
    # 70,000 rows: two chunks of the one pass, the second one short.
    X, Y = _pair(rng, n=70_000)
    host = choose_intercept(X, Y, 0, rescale=rescale, device=torch.device("cpu"))
    device = choose_intercept(X, Y, 0, rescale=rescale, device=torch.device("cuda"))
    assert device[0] == host[0]
    for label, score in host[1].items():
        assert device[1][label] == pytest.approx(score, abs=2e-3)

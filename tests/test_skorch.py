"""The skorch-ready parts: lambda-orthogonality in users' own skorch nets."""

import math

import numpy as np
import pytest
import skorch
import torch
from scipy.stats import ortho_group
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from torch import nn

from sklearn_compat.lambda_orth import (
    AffineAdapter,
    AlignmentLoss,
    LambdaOrthMixin,
    LambdaOrthRegressor,
    OrthogonalityGap,
    contrastive_loss,
    lambda_orth_penalty,
    orthogonality_gap,
)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def stretched(rng, n=512, d=6):
    """Y = X A with A far from orthogonal, both sides scaled to unit RMS row norm.

    Beyond ``lam`` the penalty grows like ``N`` with unit weight, so how far the data
    loss can push ``N`` past ``lam`` depends on the data's scale; unit RMS norms are the
    scale ``LambdaOrthAligner`` trains at.
    """
    X = rng.normal(size=(n, d))
    A = (ortho_group.rvs(d, random_state=0) * np.linspace(0.1, 2.5, d)) @ ortho_group.rvs(
        d, random_state=1
    )
    Y = X @ A

    def unit_rms(M):
        return (M / np.sqrt((M**2).sum(1).mean())).astype(np.float32)

    return unit_rms(X), unit_rms(Y)


def make_net(d, lam, **kw):
    params = dict(
        module__in_features=d,
        module__out_features=d,
        criterion=AlignmentLoss,
        optimizer=torch.optim.Adam,
        lr=2e-2,
        max_epochs=40,
        batch_size=128,
        train_split=None,
        callbacks=[OrthogonalityGap()],
        lam=lam,
        verbose=0,
    )
    return LambdaOrthRegressor(AffineAdapter, **{**params, **kw})


def test_mixin_penalty_bounds_the_gap_and_callback_logs_it(rng):
    X, Y = stretched(rng)
    torch.manual_seed(0)
    free = make_net(6, math.inf).fit(X, Y)
    torch.manual_seed(0)
    held = make_net(6, 0.5).fit(X, Y)
    gap_free = orthogonality_gap(free.module_.weight.detach().double().numpy())
    gap_held = orthogonality_gap(held.module_.weight.detach().double().numpy())
    assert gap_free > 2.0
    assert gap_held < 1.0
    # The callback records the same N every epoch.
    logged = held.history[:, "orthogonality_gap"]
    assert len(logged) == 40 and logged[-1] == pytest.approx(gap_held, rel=1e-4)


def test_mixin_loss_is_data_loss_plus_penalty(rng):
    X, Y = stretched(rng, n=64)
    net = make_net(6, 1.0, lam_sharpness=3.0).initialize()
    with torch.no_grad():
        net.module_.weight.mul_(1.7)
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    pred = net.module_(Xt)
    expected = AlignmentLoss()(pred, Yt) + lambda_orth_penalty(net.module_.weight, 1.0, 3.0)
    assert net.get_loss(pred, Yt, X=Xt, training=True).item() == pytest.approx(expected.item())


def test_mixin_selects_parameters_by_glob_on_any_module(rng):
    X, Y = stretched(rng, n=64)

    class Net(LambdaOrthMixin, skorch.NeuralNetRegressor):
        pass

    module = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6))
    net = Net(module, lam=0.0, lam_parameters="0.weight", max_epochs=1, train_split=None)
    net.initialize()
    Yt = torch.from_numpy(Y)
    pred = net.module_(torch.from_numpy(X))
    base = nn.functional.mse_loss(pred, Yt)
    only_first = lambda_orth_penalty(net.module_[0].weight, 0.0)
    assert net.get_loss(pred, Yt).item() == pytest.approx((base + only_first).item())


def test_lam_is_a_plain_hyper_parameter_for_grid_search(rng):
    X, Y = stretched(rng, n=256)
    net = make_net(6, 1.0, max_epochs=3)
    assert clone(net).get_params()["lam"] == 1.0
    search = GridSearchCV(net, {"lam": [0.0, math.inf]}, cv=2, scoring="neg_mean_squared_error")
    search.fit(X, Y)
    # Without the orthogonality constraint the stretched map fits better.
    assert search.best_params_["lam"] == math.inf


def test_alignment_loss_matches_formula(rng):
    z = torch.tensor(rng.normal(size=(8, 4)))
    y = torch.tensor(rng.normal(size=(8, 4)))
    loss = AlignmentLoss(contrastive_weight=0.5, temperature=0.2)(z, y)
    expected = (z - y).pow(2).sum(1).mean() + 0.5 * contrastive_loss(z, y, temperature=0.2)
    assert loss.item() == pytest.approx(expected.item())


def test_strict_adapter_stays_orthogonal_under_training(rng):
    X, Y = stretched(rng, n=256)
    net = make_net(6, math.inf, module__strict=True).fit(X, Y)
    assert orthogonality_gap(net.module_.weight.detach().double().numpy()) < 1e-5

"""LambdaOrthAligner and the lambda-orthogonality regulariser."""

import math
import re

import numpy as np
import pytest
import sklearn
import torch
from scipy.stats import ortho_group
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import Normalizer

from sklearn_compat import LambdaOrthAligner, OrthogonalProcrustesAligner, lambda_orth_penalty
from sklearn_compat.lambda_orth import contrastive_loss, orthogonality_gap
from sklearn_compat.metrics import paired_topk_accuracy


@pytest.fixture(autouse=True)
def one_thread():
    # These problems are tiny: on a shared 2-core machine OpenMP threads only contend.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def planted_affine(rng, n=2000, d=8, spread=(0.4, 2.5), noise=0.0, d_out=None):
    """Y = X A + b with A's singular values spread out (far from orthogonal)."""
    d_out = d if d_out is None else d_out
    X = rng.normal(size=(n, d))
    U = ortho_group.rvs(d, random_state=1)
    V = ortho_group.rvs(d_out, random_state=2)[: min(d, d_out)]
    S = np.linspace(*spread, min(d, d_out))
    A = (U[:, : min(d, d_out)] * S) @ V
    b = rng.normal(size=d_out)
    return X, X @ A + b + noise * rng.normal(size=(n, d_out))


def numpy_penalty(W, lam, alpha):
    W = np.asarray(W, dtype=np.float64)
    G = W @ W.T if W.shape[0] <= W.shape[1] else W.T @ W
    N = np.linalg.norm(G - np.eye(G.shape[0]))
    return N / (1 + np.exp(-alpha * (N - lam))), N


# ---------------------------------------------------------------- the regulariser
@pytest.mark.parametrize("shape", [(5, 5), (3, 7), (7, 3)])
@pytest.mark.parametrize("lam, alpha", [(0.0, 1.0), (1.5, 10.0), (4.0, 0.5)])
def test_penalty_matches_numpy_formula_and_gradient(rng, shape, lam, alpha):
    W = rng.normal(size=shape)
    expected, N = numpy_penalty(W, lam, alpha)
    Wt = torch.tensor(W, requires_grad=True)
    value = lambda_orth_penalty(Wt, lam, alpha)
    assert value.item() == pytest.approx(expected, rel=1e-10)
    assert orthogonality_gap(W) == pytest.approx(N, rel=1e-12)
    assert orthogonality_gap(W.T) == pytest.approx(N, rel=1e-12)
    value.backward()
    # d/dW [sigmoid(a (N - lam)) N] = (s + a N s (1 - s)) dN/dW, dN/dW = 2 (G - I) W / N
    # on the smaller side (transposed for tall W).
    s = 1 / (1 + np.exp(-alpha * (N - lam)))
    if shape[0] <= shape[1]:
        dN = 2 * (W @ W.T - np.eye(shape[0])) @ W / N
    else:
        dN = 2 * W @ (W.T @ W - np.eye(shape[1])) / N
    np.testing.assert_allclose(Wt.grad.numpy(), (s + alpha * N * s * (1 - s)) * dN, rtol=1e-9)
    # A small step against the gradient lowers N (the penalty pulls towards orthogonality).
    assert orthogonality_gap(W - 1e-4 * Wt.grad.numpy()) < N


def test_penalty_at_inf_is_exactly_zero_and_orthogonal_weight_has_no_gradient():
    W = torch.randn(4, 6, requires_grad=True)
    assert lambda_orth_penalty(W, math.inf).item() == 0.0
    # N is a plain (not squared) norm, so it has a kink at N = 0: at an exactly orthogonal
    # weight the gradient is torch's zero subgradient, never NaN.
    Q = torch.eye(4, 6, requires_grad=True)
    lambda_orth_penalty(Q, 0.0).backward()
    assert torch.equal(Q.grad, torch.zeros(4, 6))
    with pytest.raises(ValueError, match="lam must be in"):
        lambda_orth_penalty(W, -1.0)
    with pytest.raises(ValueError, match="2-d"):
        lambda_orth_penalty(torch.ones(3), 1.0)


def test_contrastive_loss_forms(rng):
    q = torch.tensor(rng.normal(size=(6, 4)))
    k = torch.tensor(rng.normal(size=(6, 4)))
    paired = contrastive_loss(q, k)
    # Distinct labels: the only positive is the pair itself.
    assert contrastive_loss(q, k, torch.arange(6)).item() == pytest.approx(paired.item())
    # One class and identical rows: uniform target, uniform softmax, the loss is log(6).
    same = torch.zeros(6, dtype=torch.long)
    flat = torch.ones(6, 4, dtype=q.dtype)
    assert contrastive_loss(flat, flat, same).item() == pytest.approx(math.log(6))
    # The positive pairs score best when keys equal queries.
    assert contrastive_loss(q, q).item() < paired.item()


# ---------------------------------------------------------------- fitted maps
def test_large_lam_approaches_least_squares(rng):
    X, Y = planted_affine(rng, n=1000, noise=0.3)
    # Full-batch Adam, so the minibatch noise does not blur the comparison.
    est = LambdaOrthAligner(
        lam=math.inf,
        contrastive_weight=0.0,
        lr=2e-2,
        max_epochs=500,
        batch_size=1000,
        early_stopping=False,
        random_state=0,
    ).fit(X, Y)
    coef, *_ = np.linalg.lstsq(np.c_[X, np.ones(len(X))], Y, rcond=None)
    np.testing.assert_allclose(est.W_, coef[:-1], atol=0.01)
    np.testing.assert_allclose(est.bias_, coef[-1], atol=0.01)
    # The least-squares map is far from orthogonal and the Procrustes start is not it.
    procrustes = OrthogonalProcrustesAligner(center=True).fit(X, Y)
    assert np.abs(procrustes.W_ * est.y_scale_ / est.x_scale_ - coef[:-1]).max() > 0.3
    assert est.orthogonality_gap_ > 1
    assert "penalty" not in est.history_


@pytest.mark.parametrize("variant", [{"lam": 0.0}, {"lam": 0.0, "strict": True}])
def test_lam_zero_and_strict_approach_procrustes(rng, variant):
    d = 6
    Q = ortho_group.rvs(d, random_state=3)
    if np.linalg.det(Q) < 0:
        Q[:, 0] *= -1  # from the identity, a rotation is reachable by a continuous path
    X = rng.normal(size=(1500, d))
    Y = 3.0 * X @ Q + 0.05 * rng.normal(size=(1500, d))
    est = LambdaOrthAligner(
        init="identity",
        contrastive_weight=0.0,
        lr=1e-2,
        max_epochs=100,
        early_stopping=False,
        random_state=0,
        **variant,
    ).fit(X, Y)
    procrustes = OrthogonalProcrustesAligner(center=True).fit(X, Y)
    # W_ is in user units: Q times the unit conversion y_scale_ / x_scale_ (about 3).
    scale = est.y_scale_ / est.x_scale_
    assert scale == pytest.approx(3.0, rel=0.02)
    np.testing.assert_allclose(est.W_ / scale, procrustes.W_, atol=0.02)
    assert est.orthogonality_gap_ < (1e-9 if variant.get("strict") else 0.05)


@pytest.mark.parametrize("d_x, d_y", [(6, 6), (4, 7), (7, 4)])
def test_strict_variant_is_exactly_orthogonal(rng, d_x, d_y):
    X, Y = planted_affine(rng, n=600, d=d_x, d_out=d_y)
    est = LambdaOrthAligner(strict=True, max_epochs=5, random_state=0).fit(X, Y)
    Q = est.W_ * est.x_scale_ / est.y_scale_
    small = Q @ Q.T if d_x <= d_y else Q.T @ Q
    np.testing.assert_allclose(small, np.eye(min(d_x, d_y)), atol=1e-10)
    assert est.orthogonality_gap_ < 1e-6
    assert est.orthogonality_gap_ == pytest.approx(orthogonality_gap(Q), abs=1e-12)


def test_gap_settles_near_lam_when_affine_optimum_is_far(rng):
    X, Y = planted_affine(rng, n=2000, d=16, spread=(0.1, 3.0))
    params = dict(contrastive_weight=0.0, lr=1e-2, early_stopping=False, random_state=0)
    unconstrained = LambdaOrthAligner(lam=math.inf, **params).fit(X, Y)
    assert unconstrained.orthogonality_gap_ > 3
    for lam in (1.0, 2.0):
        est = LambdaOrthAligner(lam=lam, **params).fit(X, Y)
        # The data pull N up to the threshold, where the switch turns the penalty on; the
        # sigmoid's soft shoulder holds it a little below.
        assert lam - 0.6 < est.orthogonality_gap_ <= lam + 0.05
        assert est.history_["orthogonality_gap"][-1] == pytest.approx(est.orthogonality_gap_)


def test_lam_inf_equals_no_regulariser(rng):
    X, Y = planted_affine(rng, n=500)
    params = dict(max_epochs=4, early_stopping=False, random_state=0)
    unreg = LambdaOrthAligner(lam=math.inf, **params).fit(X, Y)
    # A threshold so large the sigmoid underflows to exactly 0 adds nothing either.
    huge = LambdaOrthAligner(lam=1e30, **params).fit(X, Y)
    np.testing.assert_allclose(unreg.W_, huge.W_, rtol=1e-6, atol=1e-7)


def test_rescaling_makes_units_irrelevant(rng):
    X, Y = planted_affine(rng, n=600)
    params = dict(lam=1.0, max_epochs=5, early_stopping=False, random_state=0)
    base = LambdaOrthAligner(**params).fit(X, Y)
    scaled = LambdaOrthAligner(**params).fit(4.0 * X, 0.25 * Y)
    np.testing.assert_allclose(scaled.W_, base.W_ / 16, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(scaled.bias_, base.bias_ / 4, rtol=1e-5, atol=1e-9)
    assert scaled.orthogonality_gap_ == pytest.approx(base.orthogonality_gap_, rel=1e-5)


def test_random_state_repeats_and_seeds_differ(rng):
    X, Y = planted_affine(rng, n=500)
    params = dict(lam=1.0, max_epochs=3, early_stopping=True)
    a = LambdaOrthAligner(random_state=0, **params).fit(X, Y)
    b = LambdaOrthAligner(random_state=0, **params).fit(X, Y)
    c = LambdaOrthAligner(random_state=1, **params).fit(X, Y)
    np.testing.assert_array_equal(a.W_, b.W_)
    assert a.history_ == b.history_
    assert not np.array_equal(a.W_, c.W_)


def test_warm_start_continues(rng):
    X, Y = planted_affine(rng, n=500)
    est = LambdaOrthAligner(lam=1.0, max_epochs=3, early_stopping=False, random_state=0)
    est.fit(X, Y)
    first_W, first_loss = est.W_.copy(), est.history_["loss"]
    est.set_params(warm_start=True, lr=1e-12).fit(X, Y)
    assert est.n_epochs_ == 6 and len(est.history_["loss"]) == 6
    assert est.history_["loss"][:3] == first_loss
    # With a vanishing lr the map stays where the first fit left it.
    np.testing.assert_allclose(est.W_, first_W, rtol=1e-5, atol=1e-7)
    est.set_params(lr=1e-3).fit(X, Y)
    assert est.history_["loss"][-1] < first_loss[-1]
    # Switching to the strict variant continues from the nearest isometry.
    est.set_params(strict=True).fit(X, Y)
    assert est.orthogonality_gap_ < 1e-9 and est.n_epochs_ == 12


def test_early_stopping_stops_and_keeps_best_epoch(rng):
    X, Y = planted_affine(rng, n=400, noise=2.0)
    est = LambdaOrthAligner(
        lam=math.inf,
        max_epochs=400,
        lr=5e-2,
        early_stopping=True,
        n_iter_no_change=3,
        tol=0.0,
        random_state=0,
    ).fit(X, Y)
    assert est.n_epochs_ < 400
    valid = est.history_["valid_loss"]
    assert est.best_epoch_ == int(np.argmin(valid)) + 1
    assert est.n_epochs_ == est.best_epoch_ + 3
    # Without held-out rows it stops when the training loss stalls.
    stall = LambdaOrthAligner(
        max_epochs=400, early_stopping=False, tol=1.0, n_iter_no_change=2, random_state=0
    ).fit(X, Y)
    assert stall.n_epochs_ == 3 and stall.best_epoch_ is None


def test_divergence_raises_naming_lr_and_lam(rng):
    X, Y = planted_affine(rng, n=300)
    est = LambdaOrthAligner(lam=2.0, lr=1e30, max_epochs=5, random_state=0)
    with pytest.raises(FloatingPointError, match=r"lr=1e\+30, lam=2"):
        est.fit(X, Y)
    assert not hasattr(est, "W_")
    # A warm start that diverges keeps the previous, finite map.
    est.set_params(lr=1e-3).fit(X, Y)
    W = est.W_.copy()
    with pytest.raises(FloatingPointError):
        est.set_params(lr=1e30, warm_start=True).fit(X, Y)
    np.testing.assert_array_equal(est.W_, W)


def test_bidirectional_forward_adapter(rng):
    X, Y = planted_affine(rng, n=600, d=6, d_out=5)
    labels = rng.integers(0, 4, size=600)
    est = LambdaOrthAligner(bidirectional=True, max_epochs=5, random_state=0)
    est.fit(X, Y, labels=labels)
    assert {"forward", "contrastive", "penalty"} <= set(est.history_)
    FY = est.transform_target(Y)
    assert FY.shape == Y.shape and est.forward_W_.shape == (5, 5)
    np.testing.assert_allclose(FY, Y @ est.forward_W_ + est.forward_bias_, atol=1e-10)
    # F starts at the identity and is pulled toward B(x) ~ y, so it stays near it.
    assert np.abs(est.forward_W_ - np.eye(5)).max() < 0.2
    with pytest.raises(ValueError, match="bidirectional=True"):
        LambdaOrthAligner(max_epochs=1).fit(X, Y).transform_target(Y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_follows_input_and_tensor_input(rng, dtype):
    X, Y = planted_affine(rng, n=300)
    X, Y = X.astype(dtype), Y.astype(dtype)
    est = LambdaOrthAligner(max_epochs=2, random_state=0).fit(X, Y)
    assert est.transform(X).dtype == dtype
    assert est.W_.dtype == np.float64
    from_tensors = LambdaOrthAligner(max_epochs=2, random_state=0).fit(
        torch.from_numpy(X), torch.from_numpy(Y)
    )
    np.testing.assert_allclose(from_tensors.W_, est.W_)


def test_auto_lam_scales_with_dimension(rng):
    X, Y = planted_affine(rng, n=200, d=16, d_out=9)
    est = LambdaOrthAligner(max_epochs=1).fit(X, Y)
    # The threshold trained with; 0 where "auto" kept the Procrustes start instead.
    assert est.lam_ == pytest.approx(0.5 * 3.0 if est.step_choice_["kept"] else 0.0)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"lam": -1.0}, "'lam' parameter"),
        ({"lam": "big"}, "'lam' parameter"),
        ({"init": "zeros"}, "'init' parameter"),
        ({"lr": 0.0}, "'lr' parameter"),
        ({"validation_fraction": 1.0}, "'validation_fraction' parameter"),
        ({"early_stopping": "yes"}, "'early_stopping' parameter"),
    ],
)
def test_bad_parameters(rng, params, match):
    X, Y = planted_affine(rng, n=50)
    with pytest.raises(ValueError, match=match):
        LambdaOrthAligner(**params).fit(X, Y)


def test_bad_inputs(rng):
    X, Y = planted_affine(rng, n=50)
    with pytest.raises(ValueError, match="labels has 10 entries, but X has 50 rows"):
        LambdaOrthAligner(max_epochs=1).fit(X, Y, labels=np.zeros(10))
    with pytest.raises(ValueError, match="leaves no training or validation rows"):
        LambdaOrthAligner(early_stopping=True, validation_fraction=0.001).fit(X, Y)
    with pytest.raises(TypeError, match="not both"):
        LambdaOrthAligner().fit(X, Y, y=Y)
    with pytest.raises(ValueError, match=r"labels must be 1-d.*\(50, 2\)"):
        LambdaOrthAligner(max_epochs=1).fit(X, Y, labels=np.zeros((50, 2)))
    # NaN is not a class (the metrics refuse it too); it used to become one silently.
    with pytest.raises(ValueError, match="labels contains NaN"):
        LambdaOrthAligner(max_epochs=1).fit(X, Y, labels=np.r_[np.nan, np.zeros(49)])
    # Labels as a tensor (any device) or a column vector are fine.
    by_tensor = LambdaOrthAligner(max_epochs=1, random_state=0)
    by_tensor.fit(X, Y, labels=torch.arange(50) % 3)
    by_array = LambdaOrthAligner(max_epochs=1, random_state=0)
    by_array.fit(X, Y, labels=(np.arange(50) % 3).astype(str))
    np.testing.assert_array_equal(by_tensor.W_, by_array.W_)


@pytest.mark.parametrize("factor", [1e25, 1e-25])
def test_rescaling_works_for_extreme_float32_scales(rng, factor):
    # Squared row norms of such float32 rows overflow (or underflow) in float32; the scales
    # used to fall back to 1.0 silently, so training diverged or learnt nothing.
    X, Y = planted_affine(rng, n=300)
    params = dict(lam=1.0, max_epochs=3, early_stopping=False, random_state=0)
    base = LambdaOrthAligner(**params).fit(X.astype(np.float32), Y.astype(np.float32))
    big = LambdaOrthAligner(**params).fit(
        (factor * X).astype(np.float32), (factor * Y).astype(np.float32)
    )
    assert big.x_scale_ == pytest.approx(factor * base.x_scale_, rel=1e-5)
    np.testing.assert_allclose(big.W_, base.W_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(big.bias_ / factor, base.bias_, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- model selection
class _LabelSpy(LambdaOrthAligner):
    """Records the labels each fit receives (to see metadata routing reach the step)."""

    seen: list = []

    def fit(self, X, Y=None, labels=None, *, y=None):
        type(self).seen.append(None if labels is None else np.asarray(labels).copy())
        return super().fit(X, Y, labels=labels, y=y)


def _top5(estimator, X, Y):
    return paired_topk_accuracy(estimator.transform(X), Y, k=5)


def test_grid_search_over_lam_in_pipeline_routes_labels(rng):
    X, Y = planted_affine(rng, n=300, d=6, noise=0.5)
    labels = np.arange(300) % 3
    _LabelSpy.seen = []
    with sklearn.config_context(enable_metadata_routing=True):
        # An explicit intercept: fit_intercept="auto" would add the fits of its
        # candidates (which get the kept rows' labels) to the fits counted here.
        step = _LabelSpy(max_epochs=2, random_state=0, fit_intercept=True)
        step = step.set_fit_request(labels=True)
        pipe = Pipeline([("norm", Normalizer()), ("align", step)])
        search = GridSearchCV(pipe, {"align__lam": [0.0, 2.0, math.inf]}, cv=3)
        search.fit(X, Y, labels=labels)
        assert len(_LabelSpy.seen) == 3 * 3 + 1
        # Each CV fit saw the labels of its own training rows (2/3 of them).
        assert all(s is not None and len(s) == 200 for s in _LabelSpy.seen[:-1])
        np.testing.assert_array_equal(_LabelSpy.seen[-1], labels)
        # Default scoring is the aligner's paired top-1 retrieval: the first fold's score
        # of the best candidate, recomputed by hand, is the one the search recorded.
        train, test = next(KFold(3).split(X))
        by_hand = clone(pipe).set_params(**search.best_params_)
        by_hand.fit(X[train], Y[train], labels=labels[train])
        expected = paired_topk_accuracy(by_hand.transform(X[test]), Y[test])
        recorded = search.cv_results_["split0_test_score"][search.best_index_]
        assert recorded == pytest.approx(expected, abs=1e-12)
        assert search.best_score_ == max(search.cv_results_["mean_test_score"])

        multi = GridSearchCV(
            pipe,
            {"align__lam": [0.0, math.inf]},
            scoring={"top1": lambda est, X, Y: est.score(X, Y), "top5": _top5},
            refit="top5",
            cv=2,
        ).fit(X, Y, labels=labels)
        assert {"mean_test_top1", "mean_test_top5"} <= set(multi.cv_results_)
        best = int(np.argmax(multi.cv_results_["mean_test_top5"]))
        assert multi.best_index_ == best
        assert multi.best_estimator_.named_steps["align"].lam == multi.best_params_["align__lam"]


def test_clone_and_params_round_trip():
    est = LambdaOrthAligner(lam=3.0, strict=True, sharpness=2.0)
    copy = clone(est)
    assert copy.get_params() == est.get_params()


def test_verbose_progress_bar_and_threads_restored(rng, capsys):
    X, Y = planted_affine(rng, n=200)
    torch.set_num_threads(2)
    LambdaOrthAligner(max_epochs=2, verbose=1, random_state=0).fit(X, Y)
    err = capsys.readouterr().err
    assert "LambdaOrthAligner" in err and "2/2 " in err and "gap=" in err
    # Small problems train single-threaded; the caller's setting comes back.
    assert torch.get_num_threads() == 2


def test_warm_start_history_keeps_columns_aligned(rng):
    X, Y = planted_affine(rng, n=300)
    est = LambdaOrthAligner(max_epochs=2, early_stopping=False, random_state=0).fit(X, Y)
    est.set_params(warm_start=True, early_stopping=True, max_epochs=3).fit(X, Y)
    lengths = {len(v) for v in est.history_.values()}
    assert lengths == {est.n_epochs_}
    assert all(math.isnan(v) for v in est.history_["valid_loss"][:2])


def test_fitted_model_round_trips_through_pickle_and_skops(rng):
    import pickle

    skops_io = pytest.importorskip("skops.io")
    X, Y = planted_affine(rng, n=300, d=5, d_out=4)
    est = LambdaOrthAligner(bidirectional=True, max_epochs=2, random_state=0).fit(X, Y)
    expected = est.transform(X), est.transform_target(Y)
    for loaded in (
        pickle.loads(pickle.dumps(est)),
        skops_io.loads(
            skops_io.dumps(est),
            trusted=["sklearn_compat.lambda_orth.LambdaOrthAligner"],
        ),
    ):
        np.testing.assert_array_equal(loaded.transform(X), expected[0])
        np.testing.assert_array_equal(loaded.transform_target(Y), expected[1])
    # Nothing but the estimator's own class needs trusting: the state is plain data.
    assert skops_io.get_untrusted_types(data=skops_io.dumps(est)) == [
        "sklearn_compat.lambda_orth.LambdaOrthAligner"
    ]


def _rotation_pair(n, d):
    X = np.random.default_rng(0).normal(size=(n, d))
    return X, X @ ortho_group.rvs(d, random_state=0)


@pytest.mark.parametrize(
    "n, d, lr", [(300, 8, 10.0), (300, 8, 1e6), (300, 8, 1.0), (3000, 16, 10.0)]
)
def test_a_fit_whose_loss_explodes_raises_instead_of_returning_the_wreck(n, d, lr):
    # These fits used to return maps scoring 0.04-0.2 (0.999 at the default lr) with a
    # finite loss 1e2-1e12 times the start; only a non-finite loss was caught.
    X, Y = _rotation_pair(n, d)
    est = LambdaOrthAligner(lr=lr, random_state=0)
    named = rf"rose to .*lr={re.escape(format(lr, 'g'))}, lam="
    with pytest.raises(FloatingPointError, match=named) as info:
        est.fit(X, Y)
    assert "Lower lr" in str(info.value) and "\n" not in str(info.value)
    assert not hasattr(est, "W_")


@pytest.mark.parametrize("lr", [1e-3, 1e-2, 0.1])
def test_ordinary_learning_rates_are_not_called_divergent(lr):
    # lr=0.1 makes the loss jump to ~6x its (tiny) start before settling: not divergence.
    X, Y = _rotation_pair(300, 8)
    est = LambdaOrthAligner(lr=lr, random_state=0).fit(X, Y)
    assert est.score(X, Y) == 1.0


@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
@pytest.mark.parametrize("name", ["lam", "lr", "max_epochs", "sharpness"])
def test_booleans_are_refused_as_numbers(name, value):
    X, Y = _rotation_pair(50, 3)
    with pytest.raises(ValueError, match=rf"'{name}' parameter of LambdaOrthAligner must be"):
        LambdaOrthAligner(max_epochs=1).set_params(**{name: value}).fit(X, Y)


def test_divergence_guard_reads_its_level_from_a_sample(rng):
    # The guard's starting level comes from an even sample of large training sets (a fixed
    # few dozen batches, not a third of an epoch): it must match the level over every row.
    from sklearn_compat._lambda import training
    from sklearn_compat._lambda.adapter import AffineAdapter

    n, d = 4 * training._LIMIT_ROWS, 8
    X = torch.as_tensor(rng.normal(size=(n, d)), dtype=torch.float32)
    Y = X @ torch.as_tensor(ortho_group.rvs(d, random_state=0), dtype=torch.float32)
    Y += 0.5 * torch.randn(n, d, generator=torch.Generator().manual_seed(0))
    # Rows sorted by their loss: the first rows alone would read far too low a level.
    order = torch.argsort((X - Y).pow(2).sum(dim=1))
    X, Y = X[order], Y[order]
    config = training.TrainConfig(
        lam=1.0, sharpness=10.0, strict=False, alignment_weight=1.0, contrastive_weight=0.1,
        forward_weight=0.0, temperature=0.1, bidirectional=False, max_epochs=1,
        batch_size=256, lr=1e-3, n_iter_no_change=1, tol=0.0, verbose=0,
    )  # fmt: skip
    objective = training.Objective(config)
    adapter = AffineAdapter(d, d)
    sampled = training._divergence_limit(objective, adapter, None, (X, Y, None), None, config)
    with torch.no_grad():
        every = training._evaluate(objective, adapter, None, (X, Y, None))
        zero_map = float(Y.double().pow(2).sum(dim=1).mean())
    expected = training.DIVERGENCE_FACTOR * max(float(every), zero_map)
    assert sampled == pytest.approx(expected, rel=0.02)


def test_intercept_choice_reads_the_moments_of_the_kept_rows_in_one_pass(rng):
    """The one-pass moments of ``fit_intercept="auto"`` equal a direct float64 computation
    over the kept rows, with an offset 3,000 times the spread (where the uncentred cross
    product cancels seven digits) and rows over three chunks."""
    from sklearn_compat._lambda.intercept_choice import _Moments, _shifted_cross

    n = 150_000
    X = (3.0 * rng.normal(size=(n, 6)) + 1e4).astype(np.float32)
    Y = (X[:, :5] @ rng.normal(size=(5, 5)) + rng.normal(size=(n, 5))).astype(np.float32)
    held = np.sort(rng.choice(n, 900, replace=False))
    mx, my = _Moments(X), _Moments(Y)
    cross = _shifted_cross(X, Y, held, mx, my, None)
    kept = np.setdiff1d(np.arange(n), held)
    Xk, Yk = X[kept].astype(np.float64) / mx.peak, Y[kept].astype(np.float64) / my.peak
    mean_x, mean_y = Xk.mean(axis=0), Yk.mean(axis=0)
    np.testing.assert_allclose(mx.sum / len(kept), mean_x, rtol=1e-12)
    np.testing.assert_allclose(my.sum / len(kept), mean_y, rtol=1e-10, atol=1e-14)
    assert mx.squares == pytest.approx(np.square(Xk).sum(), rel=1e-12)
    centred = cross - len(kept) * np.outer(mean_x - mx.shift, mean_y - my.shift)
    direct = (Xk - mean_x).T @ (Yk - mean_y)
    np.testing.assert_allclose(centred, direct, rtol=1e-7, atol=1e-7 * np.abs(direct).max())

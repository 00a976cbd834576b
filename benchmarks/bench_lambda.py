"""Training time of LambdaOrthAligner against a bare hand-written torch loop and skorch.

All three run the same job in the same process: the same number of Adam steps (lr 1e-3)
on minibatches of the same size, with the same loss (squared error + 0.1 * paired InfoNCE +
the lambda-orthogonality penalty), starting from the same Procrustes initialisation:

- ``bare``: a minimal loop written directly against torch (data on the device, a seeded
  permutation per epoch, no logging).
- ``ours``: ``LambdaOrthAligner(fit_intercept=True).fit`` with early stopping off (so
  every epoch runs), the bare loop's job; the time includes input validation, rescaling,
  the Procrustes init, the divergence guard and per-epoch history.
- ``ours, default``: the same with ``fit_intercept="auto"``, which first trains both
  settings for a sixth of ``max_epochs`` (at least one epoch) to choose: with the few
  epochs timed here that choice costs more than the fit, so it is reported apart.
- ``skorch``: skorch's default ``NeuralNet`` (DataLoader over numpy arrays) with the
  ``AffineAdapter`` module, ``AlignmentLoss`` criterion and ``LambdaOrthMixin`` penalty.

Prints seconds and ratios to ``bare``; the target is ours/bare <= 1.25.

    python benchmarks/bench_lambda.py                      # CPU, n=20000, d=128
    python benchmarks/bench_lambda.py --n 1000000 --d 1024 --device cuda --skorch-epochs 1
    python benchmarks/bench_lambda.py --n 2000 --d 16 --epochs 1 --repeats 1   # smoke run
"""

import argparse
import math

import _common
import numpy as np
import torch

from sklearn_compat import LambdaOrthAligner
from sklearn_compat._core.backend import resolve_device
from sklearn_compat.procrustes import procrustes_from_cross


def make_data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d), dtype=np.float32)
    A = np.eye(d, dtype=np.float32) + 0.3 * rng.standard_normal((d, d), dtype=np.float32) / d**0.5
    Y = X @ A + 0.1 * rng.standard_normal((n, d), dtype=np.float32)
    return X, Y


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_step(W, b, opt, eye, xb, yb, *, lam, sharpness, cw, temperature):
    """One Adam step of the hand-written reference on the batch ``(xb, yb)``."""
    z = torch.addmm(b, xb, W)
    loss = (z - yb).pow(2).sum(1).mean()
    zn = torch.nn.functional.normalize(z, dim=1)
    yn = torch.nn.functional.normalize(yb, dim=1)
    logits = zn @ yn.T / temperature
    target = torch.arange(logits.shape[0], device=z.device)
    ce = torch.nn.functional.cross_entropy
    loss = loss + cw * 0.5 * (ce(logits, target) + ce(logits.T, target))
    gram = W @ W.T if W.shape[0] <= W.shape[1] else W.T @ W
    N = torch.linalg.matrix_norm(gram - eye)
    loss = loss + torch.sigmoid(sharpness * (N - lam)) * N
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def bare_loop(X, Y, *, epochs, batch_size, lr, lam, sharpness, cw, temperature, device, seed):
    """The hand-written reference: the data as tensors, a seeded permutation per epoch,
    :func:`bare_step` per batch, nothing extra."""
    Xt = torch.as_tensor(X, device=device)
    Yt = torch.as_tensor(Y, device=device)
    Xt = Xt / torch.linalg.vector_norm(Xt, dim=1).pow(2).mean().sqrt()
    Yt = Yt / torch.linalg.vector_norm(Yt, dim=1).pow(2).mean().sqrt()
    mx, my = Xt.mean(0), Yt.mean(0)
    cross = ((Xt - mx).T.double() @ (Yt - my).double()).cpu().numpy()
    W0 = torch.as_tensor(procrustes_from_cross(cross)[0], dtype=torch.float32, device=device)
    W = W0.clone().requires_grad_(True)
    b = (my - mx @ W0).clone().requires_grad_(True)
    opt = torch.optim.Adam([W, b], lr=lr)
    eye = torch.eye(min(W.shape), device=device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    n = Xt.shape[0]
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen, device=device)
        for start in range(0, n, batch_size):
            idx = perm[start : start + batch_size]
            bare_step(W, b, opt, eye, Xt[idx], Yt[idx], lam=lam, sharpness=sharpness, cw=cw,
                      temperature=temperature)  # fmt: skip
    return W.detach().cpu().numpy()


def ours(
    X, Y, *, epochs, batch_size, lr, lam, sharpness, cw, temperature, device, seed, intercept=True
):
    est = LambdaOrthAligner(
        fit_intercept=intercept,
        lam=lam,
        sharpness=sharpness,
        contrastive_weight=cw,
        temperature=temperature,
        max_epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        early_stopping=False,
        n_iter_no_change=epochs + 1,
        random_state=seed,
        device=str(device),
    )
    return est.fit(X, Y).W_


def skorch_net(X, Y, *, epochs, batch_size, lr, lam, sharpness, cw, temperature, device, seed):
    from skorch import NeuralNet

    from sklearn_compat._lambda.skorch_parts import AffineAdapter, AlignmentLoss, LambdaOrthMixin

    class Net(LambdaOrthMixin, NeuralNet):
        pass

    torch.manual_seed(seed)
    # The same start as the bare loop, computed the same way on the device (numpy float64
    # copies of 1M x 1,024 rows took longer than skorch's epoch on a GPU).
    Xt, Yt = torch.as_tensor(X, device=device), torch.as_tensor(Y, device=device)
    x_rms = float(torch.linalg.vector_norm(Xt, dim=1).pow(2).mean().sqrt())
    y_rms = float(torch.linalg.vector_norm(Yt, dim=1).pow(2).mean().sqrt())
    Xt, Yt = Xt / x_rms, Yt / y_rms
    mx_t, my_t = Xt.mean(0), Yt.mean(0)
    cross = ((Xt - mx_t).T.double() @ (Yt - my_t).double()).cpu().numpy()
    W0 = procrustes_from_cross(cross)[0]
    mx, my = mx_t.double().cpu().numpy(), my_t.double().cpu().numpy()
    Xs, Ys = X / np.float32(x_rms), Y / np.float32(y_rms)
    del Xt, Yt
    net = Net(
        AffineAdapter,
        module__in_features=X.shape[1],
        module__out_features=Y.shape[1],
        module__weight=W0,
        module__bias_init=my - mx @ W0,
        criterion=AlignmentLoss,
        criterion__contrastive_weight=cw,
        criterion__temperature=temperature,
        optimizer=torch.optim.Adam,
        lr=lr,
        batch_size=batch_size,
        max_epochs=epochs,
        train_split=None,
        iterator_train__shuffle=True,
        lam=lam,
        lam_sharpness=sharpness,
        device=str(device),
        verbose=0,
    )
    net.fit(Xs, Ys)
    return net.module_.weight.detach().cpu().numpy()


def timed(fn, X, Y, device, repeats, **kw):
    sync(device)
    return _common.best_time(lambda: fn(X, Y, device=device, **kw), repeats, device=device)[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--skorch-epochs",
        type=int,
        default=None,
        help="epochs for skorch (default: --epochs); its time is scaled up",
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lam", type=float, default=4.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    parser.add_argument("--no-skorch", action="store_true")
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "lambda")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)

    device = resolve_device(args.device)
    X, Y = make_data(args.n, args.d)
    kw = dict(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=1e-3,
        lam=args.lam,
        sharpness=1.0,
        cw=0.1,
        temperature=0.1,
        seed=0,
    )
    steps = args.epochs * math.ceil(args.n / args.batch_size)
    print(
        f"n={args.n} d={args.d} epochs={args.epochs} batch={args.batch_size} "
        f"steps={steps} device={device} threads={torch.get_num_threads()}"
    )
    # Warm-up (allocator, kernels, lazy imports) so no contender pays for it.
    warm = dict(kw, epochs=1)
    bare_loop(X[:2048], Y[:2048], device=device, **warm)
    ours(X[:2048], Y[:2048], device=device, **warm)

    # Interleave the contenders so background load hits them alike.
    t_bare, t_ours = math.inf, math.inf
    for _ in range(args.repeats):
        t_bare = min(t_bare, timed(bare_loop, X, Y, device, 1, **kw))
        t_ours = min(t_ours, timed(ours, X, Y, device, 1, **kw))
    print(f"bare torch loop : {t_bare:8.3f} s  ({t_bare / steps * 1e3:.3f} ms/step)")
    print(
        f"LambdaOrthAligner: {t_ours:8.3f} s  ratio to bare {t_ours / t_bare:.3f} (target <= 1.25)"
    )
    t_default = timed(ours, X, Y, device, 1, **dict(kw, intercept="auto"))
    print(
        f"  default (fit_intercept='auto', choice included): {t_default:8.3f} s  "
        f"ratio to bare {t_default / t_bare:.3f}"
    )
    if not args.no_skorch:
        sk_epochs = args.skorch_epochs or args.epochs
        t_sk = timed(skorch_net, X, Y, device, 1, **dict(kw, epochs=sk_epochs))
        t_sk *= args.epochs / sk_epochs
        note = "" if sk_epochs == args.epochs else f" (measured on {sk_epochs} epoch(s), scaled)"
        print(f"skorch NeuralNet: {t_sk:8.3f} s  ratio to bare {t_sk / t_bare:.3f}{note}")
    rows = [
        ["bare torch loop", f"{t_bare:.3f}", "1.00"],
        ["LambdaOrthAligner(fit_intercept=True)", f"{t_ours:.3f}", f"{t_ours / t_bare:.2f}"],
        [
            "LambdaOrthAligner() (default: chooses fit_intercept)",
            f"{t_default:.3f}",
            f"{t_default / t_bare:.2f}",
        ],
    ]
    if not args.no_skorch:
        rows.append(["skorch NeuralNet" + note, f"{t_sk:.3f}", f"{t_sk / t_bare:.2f}"])
    _common.write_results(
        args,
        "lambda",
        "LambdaOrthAligner training against a bare torch loop and skorch",
        [
            _common.table(
                f"{args.n:,} x {args.d}, {args.epochs} epochs ({steps} steps), "
                f"{torch.get_num_threads()} thread(s)",
                ["contender", "best s", "ratio to the bare loop"],
                rows,
            )
        ],
        notes="The same Adam steps for all (lr 1e-3, batch 256, squared error + 0.1 x paired "
        f"InfoNCE + the lambda penalty at lam {args.lam:g}, Procrustes start, synthetic "
        f"float32 data); best of {args.repeats} interleaved runs.",
        device=device,
    )


if __name__ == "__main__":
    main()

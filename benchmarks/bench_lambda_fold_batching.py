"""Would training the CV folds' adapters in one batched step make LambdaOrthAlignerCV faster?

Times one Adam step of LambdaOrthAligner's default objective (alignment MSE + paired
InfoNCE + lambda penalty, with an intercept) for ``K`` folds at once, two ways, on
random data of the benchmark's shape (MNIST features: d = 64, batch 256, 5 folds):

- ``sequential``: K separate steps, each as ``_lambda_train.Objective`` computes it
  (``addmm``, ``contrastive_loss``, ``lambda_orth_penalty``) with its own Adam, which is
  what LambdaOrthAlignerCV (and GridSearchCV) run today;
- ``batched``: one step over stacked parameters ``W`` (K, d, d), ``b`` (K, 1, d): the
  fold minibatches gathered as (K, B, d), ``baddbmm``/``bmm`` for the map and the
  logits, per-fold losses summed (each fold's gradient is its own) and one Adam (Adam is
  elementwise, so this equals K Adams).

Also prints the cost of the objective's parts for one fold, to show where a step's time
goes. Prints CPU milliseconds per round of K fold steps and the ratio sequential/batched.

    python benchmarks/bench_lambda_fold_batching.py                  # d 64, B 256, K 5
    python benchmarks/bench_lambda_fold_batching.py --d 16 --batch 64 --steps 50   # smoke
"""

import argparse
import time

import _common
import torch
import torch.nn.functional as F

from sklearn_compat._lambda.losses import contrastive_loss, lambda_orth_penalty


def _sequential(X, Y, lam, sharpness, temperature, lr):
    K, _, d = X.shape
    Ws = [torch.eye(d, dtype=X.dtype).requires_grad_() for _ in range(K)]
    bs = [torch.zeros(d, dtype=X.dtype, requires_grad=True) for _ in range(K)]
    opts = [torch.optim.Adam([W, b], lr=lr) for W, b in zip(Ws, bs, strict=True)]

    def step(idx, parts=("contrastive", "penalty")):
        for k in range(K):
            xb, yb = X[k, idx], Y[k, idx]
            z = torch.addmm(bs[k], xb, Ws[k])
            loss = (z - yb).pow(2).sum(dim=1).mean()
            if "contrastive" in parts:
                loss = loss + contrastive_loss(z, yb, None, temperature)
            if "penalty" in parts:
                loss = loss + lambda_orth_penalty(Ws[k], lam, sharpness)
            opts[k].zero_grad(set_to_none=True)
            loss.backward()
            opts[k].step()

    return step


def _batched(X, Y, lam, sharpness, temperature, lr):
    K, _, d = X.shape
    W = torch.eye(d, dtype=X.dtype).repeat(K, 1, 1).requires_grad_()
    b = torch.zeros(K, 1, d, dtype=X.dtype, requires_grad=True)
    opt = torch.optim.Adam([W, b], lr=lr)
    eye = torch.eye(d, dtype=X.dtype)

    def step(idx):
        xb, yb = X[:, idx], Y[:, idx]
        B = idx.shape[0]
        z = torch.baddbmm(b, xb, W)
        alignment = (z - yb).pow(2).sum(dim=2).mean(dim=1)
        q, k = F.normalize(z, dim=2), F.normalize(yb, dim=2)
        logits = torch.bmm(q, k.transpose(1, 2)) / temperature
        target = torch.arange(B).repeat(K)
        ce = F.cross_entropy(logits.reshape(K * B, B), target, reduction="none")
        ce_t = F.cross_entropy(logits.transpose(1, 2).reshape(K * B, B), target, reduction="none")
        contrastive = 0.5 * (ce.reshape(K, B).mean(1) + ce_t.reshape(K, B).mean(1))
        N = torch.linalg.matrix_norm(W.transpose(1, 2) @ W - eye)
        penalty = torch.sigmoid(sharpness * (N - lam)) * N
        loss = (alignment + contrastive + penalty).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def _time(step, idx, steps, **kwargs):
    for _ in range(max(5, steps // 10)):
        step(idx, **kwargs)
    start = time.process_time()
    for _ in range(steps):
        step(idx, **kwargs)
    return (time.process_time() - start) / steps * 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--n", type=int, default=3200, help="training rows per fold")
    parser.add_argument("--steps", type=int, default=300)
    _common.add_threads_argument(parser, default=1)
    _common.add_json_arguments(parser, "lambda_fold_batching")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(args.folds, args.n, args.d, generator=g)
    Y = torch.randn(args.folds, args.n, args.d, generator=g)
    idx = torch.randperm(args.n, generator=g)[: args.batch]
    hyper = {"lam": 4.0, "sharpness": 10.0, "temperature": 0.1, "lr": 1e-3}
    seq = _sequential(X, Y, **hyper)
    bat = _batched(X, Y, **hyper)
    print(
        f"K={args.folds} folds, d={args.d}, batch {args.batch}, {args.threads} thread(s), "
        f"CPU ms per round of {args.folds} fold steps"
    )
    t_seq = _time(seq, idx, args.steps)
    t_bat = _time(bat, idx, args.steps)
    print(f"  sequential {t_seq:8.3f}")
    print(f"  batched    {t_bat:8.3f}   sequential/batched = {t_seq / t_bat:.2f}x")
    print("parts of one sequential round (same units):")
    rows = [
        ["sequential (one step per fold)", f"{t_seq:.3f}", "1.00"],
        ["batched (one step over stacked folds)", f"{t_bat:.3f}", f"{t_seq / t_bat:.2f}"],
    ]
    for label, parts in [
        ("alignment only", ()),
        ("+ penalty", ("penalty",)),
        ("+ contrastive", ("contrastive",)),
        ("all three", ("contrastive", "penalty")),
    ]:
        ms = _time(seq, idx, args.steps, parts=parts)
        print(f"  {label:15s} {ms:8.3f}")
        rows.append([f"sequential, {label}", f"{ms:.3f}", ""])
    _common.write_results(
        args,
        "lambda_fold_batching",
        "LambdaOrthAligner: training the folds in one batched step",
        [_common.table("", ["round of fold steps", "CPU ms", "sequential / this"], rows)],
        notes=f"{args.folds} folds, d = {args.d}, batch {args.batch}, {args.threads} thread(s): "
        "one Adam step of the default objective for every fold, as separate steps against "
        "one step over stacked maps (`baddbmm`/`bmm`, one Adam).",
    )


if __name__ == "__main__":
    main()

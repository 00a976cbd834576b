"""Benchmark: RelativeAnchorEncoder.transform against the matmul floor; PARAM training time.

Transform: for each similarity, ``enc.transform(X)`` (numpy in, numpy out, blockwise on the
device) is timed against the floor measured in the same run on the same data: one torch GEMM
of X against a (d, m) matrix, with the same host -> device -> host copies (a relative
representation cannot cost less than that product).  Candidates run interleaved, round after
round, so load from other jobs hits them alike; the table shows best and median times and the
ratio of the best times.

PARAM: the time of ``fit(X, parallel=[X2])`` with learned anchors, per epoch, next to the fit
time of random anchors on the same data (which only computes the statistics).

Examples::

    python benchmarks/bench_relative.py                         # n=200k, d=768, m=256, CPU
    python benchmarks/bench_relative.py --n 5000 --d 64 --m 32 --param-n 2000 --repeats 2
    python benchmarks/bench_relative.py --device cuda --n 1000000 --d 1024 --m 512
"""

import argparse
import statistics

import _common
import numpy as np
import torch

from sklearn_compat import RelativeAnchorEncoder
from sklearn_compat._core.backend import resolve_device, to_torch


def _floor(X, K, device):
    Xt = to_torch(X, device, torch.float32)
    return (Xt @ K).cpu().numpy()


def _timed(fn, device):
    _common.synchronize(device)
    return _common.best_time(fn, 1, device=device)[0]


TITLE = "RelativeAnchorEncoder transform against the matmul floor"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="rows to transform")
    parser.add_argument("--d", type=int, default=768, help="embedding width")
    parser.add_argument("--m", type=int, default=256, help="anchors")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (default 5)")
    _common.add_threads_argument(parser)
    parser.add_argument("--param-n", type=int, default=20_000, help="rows for PARAM training")
    parser.add_argument("--param-epochs", type=int, default=10, help="PARAM epochs")
    parser.add_argument("--skip-param", action="store_true", help="skip PARAM training")
    _common.add_json_arguments(parser, "relative")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    device = resolve_device(args.device)
    rng = np.random.default_rng(0)
    # Low-rank structure plus noise, like real embeddings (a full-rank cloud is too easy
    # for nothing in particular, but keeps WIP's whitening well-posed).
    basis = rng.normal(size=(64, args.d)).astype(np.float32)
    X = rng.normal(size=(args.n, 64)).astype(np.float32) @ basis
    X += 0.3 * rng.normal(size=X.shape).astype(np.float32)
    print(
        f"transform: n={args.n} d={args.d} m={args.m} float32 on {device} "
        f"(torch threads {torch.get_num_threads()}), {args.repeats} rounds"
    )
    fit_rows = X[: min(args.n, 50_000)]
    encoders = {
        sim: RelativeAnchorEncoder(
            n_anchors=args.m, similarity=sim, random_state=0, device=str(device)
        ).fit(fit_rows)
        for sim in ("cosine", "euclidean", "dot", "wip")
    }
    encoders["wip+standard"] = RelativeAnchorEncoder(
        n_anchors=args.m,
        similarity="wip",
        normalize="standard",
        random_state=0,
        device=str(device),
    ).fit(fit_rows)
    K = to_torch(np.ascontiguousarray(encoders["dot"].anchors_.T), device, torch.float32)
    candidates = {"floor: X @ K": lambda: _floor(X, K, device)}
    for name, enc in encoders.items():
        candidates[name] = lambda enc=enc: enc.transform(X)
    times = _common.time_interleaved(candidates, args.repeats, device=device)
    floor = min(times["floor: X @ K"])
    print(f"{'candidate':<16} {'best s':>8} {'median s':>9} {'rows/s':>12} {'x floor':>8}")
    rows = []
    for name, ts in times.items():
        best = min(ts)
        print(
            f"{name:<16} {best:8.3f} {statistics.median(ts):9.3f} "
            f"{args.n / best:12.3g} {best / floor:8.2f}"
        )
        rows.append([name, f"{best:.3f}", f"{statistics.median(ts):.3f}", f"{best / floor:.2f}x"])
    tables = [
        _common.table(
            f"transform, {args.n:,} x {args.d}, {args.m} anchors",
            ["similarity", "best s", "median s", "x floor"],
            rows,
        )
    ]
    notes = (
        "numpy in, numpy out, the encoder's defaults otherwise; the floor is one torch GEMM "
        f"`X @ K` with the same copies; {args.repeats} interleaved rounds."
    )

    if args.skip_param:
        _common.write_results(args, "relative", TITLE, tables, notes=notes, device=device)
        return
    n = min(args.param_n, args.n)
    X2 = np.tanh(X[:n] @ rng.normal(size=(args.d, args.d)).astype(np.float32) / args.d**0.5)
    base = RelativeAnchorEncoder(
        n_anchors=args.m, similarity="wip", random_state=0, device=str(device)
    )
    t_random = _timed(lambda: base.fit(X[:n]), device)
    param = base.set_params(anchors="param", max_epochs=1)
    # Warm-up: the first torch optimiser of a process imports torch._dynamo (seconds).
    warm = max(args.m, min(n, 500))
    param.fit(X[:warm], parallel=[X2[:warm]])
    param.set_params(max_epochs=args.param_epochs)
    t_param = _timed(lambda: param.fit(X[:n], parallel=[X2]), device)
    print(
        f"\nPARAM: n={n} rows x 2 spaces, m={args.m}, k={param.support_indices_.size}, "
        f"batch {param.batch_size}, {args.param_epochs} epochs on {device}"
    )
    print(f"  fit anchors='random' (statistics only): {t_random:8.2f} s")
    print(
        f"  fit anchors='param':                     {t_param:8.2f} s "
        f"({t_param / max(args.param_epochs, 1):.2f} s/epoch, "
        f"loss {param.history_[0]:.4f} -> {param.history_[-1]:.4f})"
    )
    tables.append(
        _common.table(
            f"PARAM training, {n:,} rows x 2 spaces, k = {param.support_indices_.size}",
            ["fit", "seconds", "seconds per epoch"],
            [
                ["anchors='random' (statistics only)", f"{t_random:.2f}", ""],
                [
                    f"anchors='param', {args.param_epochs} epochs",
                    f"{t_param:.2f}",
                    f"{t_param / max(args.param_epochs, 1):.2f}",
                ],
            ],
        )
    )
    _common.write_results(args, "relative", TITLE, tables, notes=notes, device=device)


if __name__ == "__main__":
    main()

"""LambdaOrthAligner's training epoch on a GPU against the kernel time of its steps.

The reference is the GPU's own work: the profiler's sum of kernel durations over steps of
the bare loop (the same objective as ``bench_lambda.py``: squared error + 0.1 x paired
InfoNCE + the lambda penalty, Adam), times the epoch's number of steps.  Contenders, each
one epoch of the same rows in the same process:

- ``bare loop``: the hand-written eager loop of ``bench_lambda.py``;
- ``ours, eager``: ``LambdaOrthAligner(fit_intercept=True)`` with graph replay switched off;
- ``ours``: the same as shipped, full batches replayed from a recorded CUDA graph.

A ratio near 1 means the GPU never waits for the host.

    python benchmarks/bench_lambda_step.py --n 1000000 --d 1024          # one epoch, CUDA
    python benchmarks/bench_lambda_step.py --n 20000 --d 64 --device cpu  # smoke run
"""

import argparse
import math

import _common
import torch
from bench_lambda import bare_loop, bare_step, make_data, ours
from torch.autograd import DeviceType

from sklearn_compat._core.backend import resolve_device
from sklearn_compat._lambda import steps


def kernel_seconds_per_step(X, Y, *, device, batch_size, n_steps, lam, cw, temperature):
    """Mean summed kernel time of one bare-loop step (:func:`bench_lambda.bare_step`, the
    same step as the timed bare loop; seconds), from the profiler."""
    Xt = torch.as_tensor(X[: batch_size * (n_steps + 3)], device=device)
    Yt = torch.as_tensor(Y[: batch_size * (n_steps + 3)], device=device)
    d_x, d_y = Xt.shape[1], Yt.shape[1]
    W = torch.eye(d_x, d_y, device=device).requires_grad_(True)
    b = torch.zeros(d_y, device=device, requires_grad=True)
    opt = torch.optim.Adam([W, b], lr=1e-3)
    eye = torch.eye(min(d_x, d_y), device=device)

    def step(i):
        rows = slice(i * batch_size, (i + 1) * batch_size)
        bare_step(W, b, opt, eye, Xt[rows], Yt[rows], lam=lam, sharpness=1.0, cw=cw,
                  temperature=temperature)  # fmt: skip

    for i in range(3):  # lazy initialisation outside the profile
        step(i)
    _common.synchronize(device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(3, n_steps + 3):
            step(i)
        _common.synchronize(device)
    if device.type != "cuda":
        return math.nan
    micro = sum(
        e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA
    )
    return micro * 1e-6 / n_steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lam", type=float, default=4.0)
    parser.add_argument("--profile-steps", type=int, default=200)
    parser.add_argument("--device", default="auto")
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "lambda_step")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    device = resolve_device(args.device)
    X, Y = make_data(args.n, args.d)
    kw = dict(
        epochs=1, batch_size=args.batch_size, lr=1e-3, lam=args.lam, sharpness=1.0, cw=0.1,
        temperature=0.1, seed=0,
    )  # fmt: skip
    n_steps = math.ceil(args.n / args.batch_size)
    per_step = kernel_seconds_per_step(
        X, Y, device=device, batch_size=args.batch_size, n_steps=args.profile_steps,
        lam=args.lam, cw=0.1, temperature=0.1,
    )  # fmt: skip
    floor = per_step * n_steps
    print(f"kernel time per step {per_step * 1e3:.4f} ms; epoch floor {floor:.3f} s")

    def run_ours(graphs):
        steps.USE_CUDA_GRAPHS = graphs
        try:
            return _common.best_time(lambda: ours(X, Y, device=device, **kw), 1, device=device)
        finally:
            steps.USE_CUDA_GRAPHS = True

    warm = dict(kw)
    bare_loop(X[:8192], Y[:8192], device=device, **warm)
    ours(X[:8192], Y[:8192], device=device, **warm)
    t_bare = _common.best_time(lambda: bare_loop(X, Y, device=device, **kw), 1, device=device)[0]
    t_eager = run_ours(False)[0]
    t_ours = run_ours(True)[0]
    outcome = steps.last_outcome
    replays = 0 if outcome is None else outcome.replays
    error = None if outcome is None else outcome.capture_error
    rows = []
    for name, t in [
        ("bare loop (eager)", t_bare),
        ("LambdaOrthAligner, eager steps", t_eager),
        ("LambdaOrthAligner (replayed steps)", t_ours),
    ]:
        rows.append(
            [name, round(t, 3), round(t / n_steps * 1e3, 4), round(t / floor, 2),
             round(t / t_bare, 2)]
        )  # fmt: skip
        print(f"{name:36s} {t:8.3f} s  {t / n_steps * 1e3:.4f} ms/step  "
              f"{t / floor:6.2f}x kernel time  {t / t_bare:5.2f}x bare")  # fmt: skip
    print(f"replayed steps {replays} of {n_steps}; capture error: {error}")
    _common.write_results(
        args,
        "lambda_step",
        "LambdaOrthAligner's epoch against the kernel time of its steps",
        [
            _common.table(
                f"{args.n:,} x {args.d}, one epoch ({n_steps} steps of {args.batch_size} rows); "
                f"kernel time {per_step * 1e3:.4f} ms a step (profiler, "
                f"{args.profile_steps} bare steps), floor {floor:.3f} s",
                [
                    "contender",
                    "seconds",
                    "ms a step",
                    "ratio to the kernel floor",
                    "ratio to the bare loop",
                ],
                rows,
            )  # fmt: skip
        ],
        notes=f"Replayed steps: {replays} of {n_steps}; capture error: {error}. Time includes "
        "each fit's validation, rescaling, Procrustes start and readings.",
        device=device,
    )


if __name__ == "__main__":
    main()

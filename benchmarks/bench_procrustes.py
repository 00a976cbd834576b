"""Benchmark: OrthogonalProcrustesAligner.fit against the floor and against scipy.

The floor is the least work any Procrustes fit must do, measured in the same run on the
same data: torch's ``X.T @ Y`` in the input dtype on the device, plus a float64 SVD of the
(d, d) result.  The reference is ``scipy.linalg.orthogonal_procrustes`` (CPU only).  The
candidates run interleaved, round after round, so that load from other jobs hits them all
alike; the table reports the best and the median time of each and the ratios of the best
times.

Examples::

    python benchmarks/bench_procrustes.py                      # n=100k, d=512, float32, CPU
    python benchmarks/bench_procrustes.py --n 2000 --d 64 --repeats 2       # smoke run
    python benchmarks/bench_procrustes.py --threads 1     # steadier on a shared machine
    python benchmarks/bench_procrustes.py --device cuda --n 1000000 --d 1024 --no-scipy
"""

import argparse
import statistics

import _common
import numpy as np
import scipy.linalg
import torch

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat._core.backend import resolve_device


def _floor(Xt, Yt):
    with torch.no_grad():
        M = Xt.T @ Yt
        return torch.linalg.svd(M.double().cpu(), full_matrices=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="rows (default 100000)")
    parser.add_argument("--d", type=int, default=512, help="width of X and Y (default 512)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    parser.add_argument("--repeats", type=int, default=7, help="rounds (default 7)")
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "procrustes")
    parser.add_argument("--no-scipy", action="store_true", help="skip the scipy reference")
    parser.add_argument(
        "--no-center", action="store_true", help="skip the center=True, scale=True row"
    )
    args = parser.parse_args(argv)

    device = resolve_device(args.device)
    _common.limit_threads(args.threads)
    # Data made with torch on the device (fast at n=1M, d=1024): Y = X Q + noise.
    dtype = getattr(torch, args.dtype)
    generator = torch.Generator(device).manual_seed(0)
    Xt = torch.randn(args.n, args.d, generator=generator, device=device, dtype=dtype)
    Q = torch.linalg.qr(
        torch.randn(args.d, args.d, generator=generator, device=device, dtype=torch.float64)
    )[0]
    Yt = torch.addmm(
        0.1 * torch.randn(args.n, args.d, generator=generator, device=device, dtype=dtype),
        Xt,
        Q.to(dtype),
    )
    X, Y, Q = Xt.cpu().numpy(), Yt.cpu().numpy(), Q.cpu().numpy()

    candidates = {"floor: torch X.T @ Y + float64 SVD": lambda: _floor(Xt, Yt)}
    if device.type == "cuda":
        # numpy input first crosses to the device: the floor for it includes that copy.
        candidates["floor with the copy from numpy"] = lambda: _floor(
            torch.from_numpy(X).to(device), torch.from_numpy(Y).to(device)
        )
    candidates["ours: fit(X, Y), numpy input"] = lambda: OrthogonalProcrustesAligner(
        device=args.device
    ).fit(X, Y)
    # The same sizes with a common offset on both sides, as anisotropic text models have
    # (X's mean 1.5x its spread, Y's 0.5x): the default then scores its candidate
    # settings on a held-out fold, and X's chunks are shifted before their GEMM.
    X_off, Y_off = X + np.float32(1.5), Y - np.float32(0.5)
    candidates["ours: fit, data with an offset"] = lambda: OrthogonalProcrustesAligner(
        device=args.device
    ).fit(X_off, Y_off)
    candidates["ours: explicit center=False"] = lambda: OrthogonalProcrustesAligner(
        center=False, scale=False, device=args.device
    ).fit(X, Y)
    if device.type == "cuda":
        candidates["ours: fit(X, Y), tensors on the device"] = lambda: OrthogonalProcrustesAligner(
            device=args.device
        ).fit(Xt, Yt)
    if not args.no_center:
        candidates["ours: center=True, scale=True"] = lambda: OrthogonalProcrustesAligner(
            center=True, scale=True, device=args.device
        ).fit(X, Y)
    if not args.no_scipy:
        candidates["scipy.linalg.orthogonal_procrustes"] = lambda: (
            scipy.linalg.orthogonal_procrustes(X, Y)
        )

    times = _common.time_interleaved(candidates, args.repeats, device=device)

    # Sanity: the fit we time recovers the planted rotation.
    W = OrthogonalProcrustesAligner(device=args.device).fit(X, Y).W_
    error = float(np.abs(W - Q).max())

    floor = min(times["floor: torch X.T @ Y + float64 SVD"])
    scipy_best = min(times["scipy.linalg.orthogonal_procrustes"]) if not args.no_scipy else None
    threads = torch.get_num_threads()
    print(
        f"Procrustes fit, n={args.n}, d={args.d}, {args.dtype}, device={device}, "
        f"torch threads={threads}, {args.repeats} interleaved rounds"
    )
    header = f"{'':42s} {'best s':>9s} {'median s':>9s} {'/ floor':>8s}"
    if scipy_best is not None:
        header += f" {'/ scipy':>8s}"
    print(header)
    rows = []
    for name, ts in times.items():
        best = min(ts)
        line = f"{name:42s} {best:9.4f} {statistics.median(ts):9.4f} {best / floor:8.2f}"
        row = [name, f"{best:.4f}", f"{statistics.median(ts):.4f}", f"{best / floor:.2f}"]
        if scipy_best is not None:
            line += f" {best / scipy_best:8.2f}"
            row.append(f"{best / scipy_best:.2f}")
        print(line)
        rows.append(row)
    print(f"max |W - Q| of our fit: {error:.2e}")
    columns = ["candidate", "best s", "median s", "/ floor"]
    columns += ["/ scipy"] if scipy_best is not None else []
    _common.write_results(
        args,
        "procrustes",
        "Procrustes fit against the floor and scipy",
        [_common.table("", columns, rows)],
        notes=f"{args.n:,} x {args.d} {args.dtype} pairs, {args.repeats} interleaved rounds; "
        "ratios are of best times. The floor is torch's `X.T @ Y` plus a float64 SVD of the "
        f"d x d result. Max |W - Q| of the fit: {error:.2e}.",
        device=device,
    )


if __name__ == "__main__":
    main()

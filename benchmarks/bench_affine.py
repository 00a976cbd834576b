"""AffineAligner.fit vs numpy's lstsq and scikit-learn's Ridge on the same rows.

AffineAligner forms the float64 normal equations in one chunked pass; lstsq factorises the
(n, d+1) matrix (SVD), Ridge(solver="cholesky") forms X^T X like we do.  Printed: each
time, the ratio against AffineAligner, and how far each map is from lstsq's.

    python benchmarks/bench_affine.py                         # 200k x 256 -> 256, float32 rows
    python benchmarks/bench_affine.py --rows 5000 --dim 32    # smoke run
"""

import argparse

import _common
import numpy as np
from sklearn.linear_model import Ridge

from sklearn_compat import AffineAligner


def make_pair(rows, dim, kappa, seed=0):
    """float32 rows whose singular values spread over [1/kappa, 1], plus a noisy affine target."""
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    X = (rng.normal(size=(rows, dim)) * np.logspace(0, -np.log10(kappa), dim)) @ Q.T + 1.0
    Y = X @ rng.normal(size=(dim, dim)) + 0.1 * rng.normal(size=(rows, dim)) + 2.0
    return X.astype(np.float32), Y.astype(np.float32)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--kappa", type=float, default=1e3, help="condition number of X")
    parser.add_argument("--alpha", type=float, default=1.0, help="ridge penalty for Ridge")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=2)
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "affine")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)

    X, Y = make_pair(args.rows, args.dim, args.kappa)
    X64, Y64 = X.astype(np.float64), Y.astype(np.float64)

    def lstsq():
        A = np.hstack([X64, np.ones((len(X64), 1))])
        return np.linalg.lstsq(A, Y64, rcond=None)[0][:-1]

    t_ours, ours = _common.best_time(
        lambda: AffineAligner(device=args.device).fit(X, Y), args.repeats
    )
    t_lstsq, W_lstsq = _common.best_time(lstsq, args.repeats)
    t_ridge_ours, ridge_ours = _common.best_time(
        lambda: AffineAligner(alpha=args.alpha, device=args.device).fit(X, Y), args.repeats
    )
    t_ridge, ridge = _common.best_time(
        lambda: Ridge(alpha=args.alpha, solver="cholesky").fit(X64, Y64), args.repeats
    )

    def gap(W, reference):
        return np.linalg.norm(W - reference) / np.linalg.norm(reference)

    print(f"{args.rows} x {args.dim} -> {args.dim} float32 rows, cond(X) = {args.kappa:g}")
    print(f"AffineAligner (alpha=0):     {t_ours:8.2f} s")
    print(f"numpy lstsq (float64):       {t_lstsq:8.2f} s   ratio {t_lstsq / t_ours:6.2f}")
    print(f"AffineAligner (alpha={args.alpha:g}):   {t_ridge_ours:8.2f} s")
    print(f"sklearn Ridge (cholesky):    {t_ridge:8.2f} s   ratio {t_ridge / t_ridge_ours:6.2f}")
    print(f"relative |W - W_lstsq|:      {gap(ours.W_, W_lstsq):.1e}")
    print(f"relative |W - W_Ridge|:      {gap(ridge_ours.W_, ridge.coef_.T):.1e}")
    rows = [
        [
            "AffineAligner(alpha=0)",
            f"{t_ours:.2f} s",
            "1",
            f"{gap(ours.W_, W_lstsq):.1e} from lstsq",
        ],
        [
            "numpy.linalg.lstsq on float64 copies",
            f"{t_lstsq:.2f} s",
            f"{t_lstsq / t_ours:.1f}x slower",
            "reference",
        ],
        [
            f"AffineAligner(alpha={args.alpha:g})",
            f"{t_ridge_ours:.2f} s",
            "1",
            f"{gap(ridge_ours.W_, ridge.coef_.T):.1e} from Ridge",
        ],
        [
            f'sklearn Ridge(alpha={args.alpha:g}, solver="cholesky") on float64 copies',
            f"{t_ridge:.2f} s",
            f"{t_ridge / t_ridge_ours:.1f}x slower",
            "reference",
        ],
    ]
    columns = ["fit", "time", "ratio vs AffineAligner", "relative distance of W"]
    _common.write_results(
        args,
        "affine",
        "AffineAligner against lstsq and Ridge",
        [_common.table("", columns, rows)],
        notes=f"{args.rows:,} x {args.dim} -> {args.dim} float32 rows, cond(X) = "
        f"{args.kappa:g}; the references run on float64 copies; best of {args.repeats}.",
        device=args.device,
    )


if __name__ == "__main__":
    main()

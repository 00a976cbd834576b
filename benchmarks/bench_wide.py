"""Benchmark: fits of wide data (n pairs of d-dimensional embeddings) against two floors.

- dense floor: the float64 cross product ``X_c^T Y_c`` plus the SVD of that d x d matrix,
  the least work of the dense route (what every fit cost before the row-space solver);
- thin floor (n < d only): thin QR of ``X_c^T`` and ``Y_c^T``, the SVD of the n x n
  product of their triangular factors and the one (d x n)(n x d) product that forms a
  map from thin factors, the least work of any row-space solver that returns ``W_``.

``OrthogonalProcrustesAligner`` is compared with the smaller floor, and
``WhitenedProcrustesAligner`` with Procrustes.  Everything runs in the same process on the
same data, so load from other jobs hits all of them alike.

Examples::

    python benchmarks/bench_wide.py --n 2000 --d 4096
    python benchmarks/bench_wide.py --n 200 --d 8192 --no-dense-floor
    python benchmarks/bench_wide.py --n 20000 --d 4096
    python benchmarks/bench_wide.py --n 2000 --d 4096 --offset 3   # "auto" scores
"""

import argparse
import warnings

import _common
import numpy as np
import scipy.linalg

from sklearn_compat import OrthogonalProcrustesAligner, WhitenedProcrustesAligner


def dense_floor(Xc, Yc):
    M = Xc.T @ Yc
    scipy.linalg.svd(M, full_matrices=False, check_finite=False)


def thin_floor(Xc, Yc):
    Qx, Rx = scipy.linalg.qr(Xc.T, mode="economic", check_finite=False)
    Qy, Ry = scipy.linalg.qr(Yc.T, mode="economic", check_finite=False)
    U, _, Vt = scipy.linalg.svd(Rx @ Ry.T, check_finite=False)
    (Qx @ U) @ (Qy @ Vt.T).T


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--d", type=int, default=4096)
    parser.add_argument("--no-dense-floor", action="store_true", help="skip the d x d SVD")
    parser.add_argument("--no-whitened", action="store_true")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds (best kept)")
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "wide")
    parser.add_argument(
        "--offset", type=float, default=0.0, help="size of a common offset on each side"
    )
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, args.d)) * np.geomspace(1.0, 0.05, args.d)
    # A planted map would cost a d x d QR here; shifted noisy columns serve as well.
    Y = np.roll(X, 1, axis=1) + 0.1 * rng.normal(size=X.shape)
    if args.offset:
        # Common offsets unrelated by the map: "auto" then scores its candidates.
        X = X + args.offset * rng.normal(size=args.d) * np.geomspace(1.0, 0.05, args.d)
        Y = Y + args.offset * rng.normal(size=args.d) * np.geomspace(1.0, 0.05, args.d)
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    candidates = {}
    if args.n < args.d:
        candidates["thin floor"] = lambda: thin_floor(Xc, Yc)
    if not args.no_dense_floor:
        candidates["dense floor (d x d SVD)"] = lambda: dense_floor(Xc, Yc)
    # The defaults ("auto" settings) and the explicit settings they fall back to: the
    # difference is the cost of the choice (nothing to score when neither side has a
    # common offset, see --offset).
    candidates["OrthogonalProcrustesAligner"] = lambda: OrthogonalProcrustesAligner(
        device="cpu"
    ).fit(X, Y)
    candidates["  center=True, scale='spread'"] = lambda: OrthogonalProcrustesAligner(
        center=True, scale="spread", device="cpu"
    ).fit(X, Y)
    if not args.no_whitened:
        candidates["WhitenedProcrustesAligner"] = lambda: WhitenedProcrustesAligner(
            device="cpu"
        ).fit(X, Y)
        candidates["  center=True, normalize=True"] = lambda: WhitenedProcrustesAligner(
            center=True, normalize=True, device="cpu"
        ).fit(X, Y)
    # Interleaved rounds, best of each: load from other jobs hits every candidate alike.
    _common.limit_threads(args.threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        times = _common.time_interleaved(candidates, args.repeats, warmup=False)
    rows = {name: min(values) for name, values in times.items()}
    floors = [rows[k] for k in rows if "floor" in k]
    floor = min(floors)
    procrustes = rows["OrthogonalProcrustesAligner"]
    explicit = rows["  center=True, scale='spread'"]
    threads = args.threads or "all"
    print(f"n={args.n} d={args.d} float64, best of {args.repeats} rounds, {threads} threads")
    table = []
    for name, seconds in rows.items():
        ratio = f"{seconds / floor:5.2f}x floor"
        if name == "WhitenedProcrustesAligner":
            ratio += f", {seconds / procrustes:5.2f}x Procrustes"
        elif "normalize" in name:
            ratio += f", {seconds / explicit:5.2f}x Procrustes with explicit settings"
        print(f"  {name:<28} {seconds:8.2f} s  {ratio}")
        table.append([name.strip(), f"{seconds:.2f}", " ".join(ratio.split())])
    _common.write_results(
        args,
        "wide",
        "Wide inputs: fits with fewer pairs than dimensions",
        [_common.table(f"{args.n:,} x {args.d:,}", ["candidate", "best s", "ratio"], table)],
        notes=f"float64, offset {args.offset:g}, best of {args.repeats} interleaved rounds; the "
        "thin floor is the least work of a row-space solver returning `W_`, the dense floor "
        "the d x d cross product and its SVD; indented rows give the default's choice "
        "explicitly.",
    )


if __name__ == "__main__":
    main()

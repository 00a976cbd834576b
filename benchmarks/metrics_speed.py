"""Speed and memory of the blockwise metrics against a whole-matrix numpy reference.

For ``n`` random clustered float32 embeddings (query set = gallery set, 10 classes) it
times paired top-1, CMC top-1 and mAP computed by :mod:`sklearn_compat.metrics` (torch,
blocks under ``--budget-mb``) and by plain numpy on the full ``n x n`` similarity matrix,
checks that both agree, and prints the time ratio.  ``--no-reference`` skips numpy, for
sizes whose ``n x n`` matrix does not fit (e.g. ``--n 100000``: 40 GB in float32); the peak
resident memory printed at the end shows that the blockwise path never forms it.

    python benchmarks/metrics_speed.py --n 10000
    python benchmarks/metrics_speed.py --n 100000 --no-reference --skip-map
    python benchmarks/metrics_speed.py --n 1000            # smoke run
"""

import argparse
import resource
import time

import _common
import numpy as np

from sklearn_compat.metrics import (
    cmc_topk_accuracy,
    mean_average_precision,
    paired_topk_accuracy,
)


def make_data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n)
    centres = rng.normal(size=(10, d)).astype(np.float32)
    Q = centres[labels] + 1.5 * rng.normal(size=(n, d)).astype(np.float32)
    G = Q + 0.7 * rng.normal(size=(n, d)).astype(np.float32)
    return Q, G, labels


def unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def numpy_paired_top1(Q, G):
    S = unit(Q) @ unit(G).T
    own = np.diag(S)
    return float(np.mean((S >= own[:, None]).sum(axis=1) - 1 < 1))


def numpy_cmc_top1(Q, G, labels):
    S = unit(Q) @ unit(G).T
    np.fill_diagonal(S, -np.inf)
    positive = labels[:, None] == labels[None, :]
    np.fill_diagonal(positive, False)
    best = np.where(positive, S, -np.inf).max(axis=1)
    return float(np.mean(((S >= best[:, None]) & ~positive).sum(axis=1) < 1))


def numpy_map(Q, G, labels):
    S = unit(Q) @ unit(G).T
    np.fill_diagonal(S, -np.inf)
    order = np.argsort(-S, axis=1, kind="stable")
    hits = labels[order] == labels[:, None]
    hits[np.arange(len(S)), np.argmax(order == np.arange(len(S))[:, None], axis=1)] = False
    cum = np.cumsum(hits, axis=1)
    precision = np.where(hits, cum / np.arange(1, S.shape[1] + 1), 0.0)
    return float(np.mean(precision.sum(axis=1) / hits.sum(axis=1)))


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--budget-mb", type=int, default=128)
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--skip-map", action="store_true", help="mAP sorts every row")
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "metrics_speed")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    Q, G, labels = make_data(args.n, args.d)
    opts = {"device": args.device, "memory_budget": args.budget_mb * 2**20}
    cases = [
        ("paired top-1", lambda: paired_topk_accuracy(Q, G, **opts), numpy_paired_top1, (Q, G)),
        (
            "CMC top-1",
            lambda: cmc_topk_accuracy(Q, G, labels, **opts),
            numpy_cmc_top1,
            (Q, G, labels),
        ),
    ]
    if not args.skip_map:
        cases.append(
            (
                "mAP",
                lambda: mean_average_precision(Q, G, labels, **opts),
                numpy_map,
                (Q, G, labels),
            )
        )
    print(f"n={args.n} d={args.d} float32, device={args.device}, budget={args.budget_mb} MiB")
    print(f"{'metric':<14}{'value':>9}{'blockwise s':>13}{'numpy s':>10}{'ratio':>8}")
    rows = []
    for name, ours, reference, ref_args in cases:
        value, t_ours = timed(ours)
        if args.no_reference:
            print(f"{name:<14}{value:>9.4f}{t_ours:>13.2f}{'-':>10}{'-':>8}")
            rows.append([f"{args.n:,}", name, f"{t_ours:.2f}", "(not run)", "-"])
            continue
        ref_value, t_ref = timed(lambda r=reference, a=ref_args: r(*a))
        assert abs(value - ref_value) < 1e-4, (name, value, ref_value)
        print(f"{name:<14}{value:>9.4f}{t_ours:>13.2f}{t_ref:>10.2f}{t_ref / t_ours:>7.2f}x")
        rows.append(
            [f"{args.n:,}", name, f"{t_ours:.2f}", f"{t_ref:.2f}", f"{t_ref / t_ours:.2f}x"]
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    full = args.n**2 * 4 / 2**20
    print(f"peak resident memory {peak:.0f} MiB (one n x n float32 matrix: {full:.0f} MiB)")
    columns = ["n", "metric", "blockwise (s)", "numpy full matrix (s)", "numpy / blockwise"]
    _common.write_results(
        args,
        "metrics_speed",
        "Blockwise metrics against a whole-matrix numpy reference",
        [_common.table("", columns, rows)],
        notes=f"Random clustered float32 embeddings, d = {args.d}, 10 classes, query set = "
        f"gallery set, blocks under {args.budget_mb} MiB; both give the same values. Peak "
        f"resident memory {peak:,.0f} MiB, against {full:,.0f} MiB for one n x n float32 "
        "similarity matrix.",
        device=args.device,
    )


if __name__ == "__main__":
    main()

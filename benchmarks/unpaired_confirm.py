"""Evidence that ONE refined disjoint candidate is right: signals on right and wrong candidates.

Runs ``oriented_disjoint_start`` restarts once on the disjoint halves of a design pair (the
estimator's start sample: ``--start-rows`` rows a side), refines every restart with
``disjoint_refine`` (the estimator's candidate refiner) and measures, per candidate:

- ``start`` / ``refined``: paired top-1 on the test split as a ratio to supervised
  Procrustes (common form), the ground truth that says right (>= 0.5) or wrong;
- ``refined criterion``: mean best CSLS after refinement (its stand-out among candidates is
  the second signal);
- split-half re-refinement (the first signal): the start sample's rows of each side split
  into two random halves, the START map refined again on each half with fresh draws;
  agreement ``trace(W1^T W2) / d`` of the two results with each other (``a12``), with the
  candidate (``a1c``, ``a2c``) and with the start (``a10``, ``a20``); the same from the
  refined map (``r12``);
- agreement of the candidate with the supervised map (``truth``).

    python benchmarks/unpaired_confirm.py --pair wn_gloss_e5_minilm --direction Y->X \
        --restarts 8 --threads 1 --out /tmp/confirm.jsonl
    python benchmarks/unpaired_confirm.py --null blobs --threads 1 --out /tmp/null.jsonl
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import limit_threads  # noqa: E402


def halves(n, rng):
    order = rng.permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2 :])


def signals(A, B, W0, Wc, rng, generator, refine, from_refined=True):
    """Split-half re-refinement of the start W0 (and of the refined Wc)."""
    from sklearn_compat._unpaired.confidence import agreement

    hx, hy = halves(len(A), rng), halves(len(B), rng)
    out = {}
    W1 = refine(A[hx[0]], B[hy[0]], W0, generator)
    W2 = refine(A[hx[1]], B[hy[1]], W0, generator)
    out.update(
        a12=agreement(W1, W2),
        a1c=agreement(W1, Wc),
        a2c=agreement(W2, Wc),
        a10=agreement(W1, W0),
        a20=agreement(W2, W0),
    )
    if from_refined:
        R1 = refine(A[hx[0]], B[hy[0]], Wc, generator)
        R2 = refine(A[hx[1]], B[hy[1]], Wc, generator)
        out.update(r12=agreement(R1, R2), r1c=agreement(R1, Wc), r2c=agreement(R2, Wc))
    return out, (W1, W2)


def restart_map(A, B, restart, rng, generator):
    """``(map, criterion)`` of the estimator's disjoint restart number ``restart`` (its
    source side alternating, its partitions and QAP restarts as in the estimator)."""
    from sklearn_compat._unpaired import start

    return start.oriented_disjoint_start(
        A,
        B,
        reverse=restart % 2 == 1,
        rng=np.random.RandomState(rng.randint(2**31 - 1)),
        generator=generator,
        n_runs=10,
        qap_restarts=100,
    )


def refine_fn(A, B, W, generator):
    from sklearn_compat.unpaired import _refine_candidate

    return _refine_candidate(A, B, W, generator)


def real(args):
    from unpaired import real_pairs
    from unpaired_ceiling import common_form_judge, disjoint_halves

    from sklearn_compat._unpaired import start
    from sklearn_compat._unpaired.confidence import agreement

    ((name, X, Y, X_test, Y_test),) = real_pairs([args.pair], args.rows)
    if args.direction == "Y->X":
        X, Y, X_test, Y_test = Y, X, Y_test, X_test
    form, top1, truth = common_form_judge(X, Y, X_test, Y_test)
    first, second = disjoint_halves(len(X))
    sup = top1(truth)
    rng = np.random.RandomState(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    Xw, Yw = form(X[first]), form(Y[second])
    sx = np.sort(rng.choice(len(Xw), min(args.start_rows, len(Xw)), replace=False))
    sy = np.sort(rng.choice(len(Yw), min(args.start_rows, len(Yw)), replace=False))
    A, B = Xw[sx], Yw[sy]
    starts = []
    for r in range(args.restarts):
        t = time.perf_counter()
        W0, crit = restart_map(A, B, r, rng, generator)
        starts.append((r, W0, crit))
        print(
            f"restart {r} start {top1(W0) / sup:.3f} crit {crit:.4f} "
            f"{time.perf_counter() - t:.0f}s",
            flush=True,
        )
    starts.sort(key=lambda s: -s[2])
    for r, W0, crit in starts[: args.refine]:
        t = time.perf_counter()
        Wc = refine_fn(A, B, W0, generator)
        row = dict(
            pair=name,
            direction=args.direction,
            restart=r,
            start=top1(W0) / sup,
            crit=crit,
            refined=top1(Wc) / sup,
            refined_crit=start.mean_best_csls(A, B, Wc),
            truth=agreement(Wc, truth),
            start_truth=agreement(W0, truth),
            a0c=agreement(W0, Wc),
            nn_truth=nn_agreement(A, B, Wc, truth),
        )
        if args.twice:
            W2 = refine_fn(A, B, W0, generator)
            row.update(
                refined2=top1(W2) / sup,
                refined2_crit=start.mean_best_csls(A, B, W2),
                twice=agreement(Wc, W2),
                a02=agreement(W0, W2),
                nn_twice=nn_agreement(A, B, Wc, W2),
                nn_start=nn_agreement(A, B, Wc, W0),
            )
        row["seconds"] = time.perf_counter() - t
        print(
            json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}),
            flush=True,
        )
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        if args.save:
            np.savez(
                f"{args.save}_{args.pair}_{args.direction.replace('->', '')}_{r}.npz",
                W0=W0.numpy(),
                Wc=Wc.numpy(),
                W2=W2.numpy() if args.twice else Wc.numpy(),
            )


def nn_agreement(A, B, W1, W2, k=10):
    """Share of A's rows whose CSLS best row of B is the same under both maps."""
    from sklearn_compat._unpaired import common

    one = common.csls_neighbours(common.unit_rows(A @ W1.to(A.dtype)), B, k)[0]
    two = common.csls_neighbours(common.unit_rows(A @ W2.to(A.dtype)), B, k)[0]
    return float((one == two).float().mean())


def null(args):
    from sklearn.datasets import make_blobs

    from sklearn_compat._unpaired import common, start
    from sklearn_compat._unpaired.confidence import agreement

    rng = np.random.RandomState(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    for _case in range(args.cases):
        n = int(rng.choice([100, 150, 200, 300]))
        d = int(rng.choice(args.dims))
        if args.null == "blobs":
            X, _ = make_blobs(n, d, centers=8, random_state=rng.randint(1000))
            Y, _ = make_blobs(n, d, centers=8, random_state=rng.randint(1000))
        else:
            X, Y = rng.randn(n, d), rng.randn(n + 7, d)
        A = common.unit_centered(torch.as_tensor(X, dtype=torch.float32))
        B = common.unit_centered(torch.as_tensor(Y, dtype=torch.float32))
        cands = []
        for r in range(args.restarts):
            W0, crit = restart_map(A, B, r, rng, generator)
            cands.append((crit, r, W0))
        cands.sort(key=lambda c: -c[0])
        for crit, r, W0 in cands[: args.refine]:
            Wc = refine_fn(A, B, W0, generator)
            row = dict(
                null=args.null,
                n=n,
                d=d,
                restart=r,
                crit=crit,
                refined_crit=start.mean_best_csls(A, B, Wc),
                a0c=agreement(W0, Wc),
            )
            W2 = refine_fn(A, B, W0, generator)
            row.update(twice=agreement(Wc, W2), a02=agreement(W0, W2))
            row.update(
                nn_twice=nn_agreement(A, B, Wc, W2), refined2_crit=start.mean_best_csls(A, B, W2)
            )
            print(
                json.dumps(
                    {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}
                ),
                flush=True,
            )
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="wn_gloss_e5_minilm")
    parser.add_argument("--direction", default="Y->X")
    parser.add_argument("--rows", type=int, default=4800)
    parser.add_argument("--start-rows", type=int, default=2000)
    parser.add_argument("--restarts", type=int, default=8)
    parser.add_argument("--refine", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--null", choices=["random", "blobs"])
    parser.add_argument("--cases", type=int, default=6)
    parser.add_argument("--from-refined", action="store_true")
    parser.add_argument("--twice", action="store_true")
    parser.add_argument("--dims", type=int, nargs="*", default=[12, 16, 24, 32])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out")
    parser.add_argument("--save")
    args = parser.parse_args(argv)
    limit_threads(args.threads)
    if args.null:
        null(args)
    else:
        real(args)


if __name__ == "__main__":
    main()

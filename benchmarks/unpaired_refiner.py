"""Disjoint items: the basin of the refiners, start quality against final quality.

The training rows of a pair are split into the disjoint halves of ``benchmarks/unpaired.py``
(no item on both sides).  Each refiner of ``sklearn_compat._unpaired.refine`` is started
from maps of known quality and scored by paired top-1 on the test split, as a ratio to
supervised Procrustes on all the training items paired (in the common form of
``unit_centered``, as the refiners work):

- ``supervised``: the true map itself (the ceiling: does the refiner hold a right map?);
- ``perturbed t``: the true map mixed with a random orthogonal map, ``orth((1-t) W* + t R)``,
  ``t`` chosen so that the start scores the ratios of ``--perturbed`` (an error spread evenly
  over all directions);
- ``restart r``: restart ``r`` of ``benchmarks/unpaired_disjoint.py``'s sequence (the same
  seeds), :func:`~sklearn_compat._unpaired.start.disjoint_start`: matched clusters and
  anchor rounds, right along the rows' leading directions and close to random in the rest;
  only restarts scoring at least ``--min-start`` are refined.

Refiners: ``neighbour means + union`` (:func:`neighbour_mean_refine`, 40 rounds, then
:func:`union_self_learn`) and ``disjoint_refine`` (stochastic self-learning, then neighbour
means; once per ``--refine-seeds`` seed, since its draws decide whether a weak start is
caught).  Each row also gives the final map's criterion (mean best CSLS, which ranks
restarts).  Both directions are run.  It prints a table; ``--json PATH`` also writes it.

    python benchmarks/unpaired_refiner.py --threads 1
    python benchmarks/unpaired_refiner.py --directions Y->X --perturbed --restarts 3 \\
        --min-start 0.05 --refine-seeds 0 1
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_threads_argument, limit_threads, table, write_results  # noqa: E402
from unpaired import real_pairs  # noqa: E402
from unpaired_ceiling import common_form_judge, disjoint_halves  # noqa: E402

COLUMNS = [
    "pair",
    "direction",
    "start",
    "start / supervised",
    "refiner",
    "final / supervised",
    "criterion",
    "seconds",
]


def perturbed(W, R, t):
    """``orth((1 - t) W + t R)``: the nearest map with orthonormal rows/columns."""
    U, _, Vt = torch.linalg.svd((1 - t) * W.double() + t * R.double(), full_matrices=False)
    return U @ Vt


def mixing_for(ratio, score, W, R, steps=12):
    """The ``t`` whose perturbed map scores ``ratio`` of supervised (bisection: the score
    falls as ``t`` grows)."""
    low, high = 0.0, 1.0
    for _ in range(steps):
        middle = 0.5 * (low + high)
        if score(perturbed(W, R, middle)) > ratio:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


def refiners():
    from sklearn_compat._unpaired import refine

    def old(A, B, W, seed):
        W = refine.neighbour_mean_refine(A, B, W)
        return refine.union_self_learn(A, B, W)[0]

    def new(A, B, W, seed):
        generator = torch.Generator().manual_seed(seed)
        return refine.disjoint_refine(A, B, W, generator=generator)[0]

    return {"neighbour means + union": old, "disjoint_refine": new}


def basin(X, Y, X_test, Y_test, ratios, n_restarts, names, *, min_start=0.0, seeds=(0,)):
    """Yield ``[start, start ratio, refiner, final ratio, criterion, seconds]`` rows."""
    import sklearn_compat.unpaired as estimator
    from sklearn_compat._unpaired import common, start

    form, top1, truth = common_form_judge(X, Y, X_test, Y_test)
    first, second = disjoint_halves(len(X))
    A, B = form(X[first]), form(Y[second])
    supervised = top1(truth)
    score = lambda W: top1(W) / supervised  # noqa: E731
    starts = [("supervised", truth)]
    R = common.random_orthogonal(A.shape[1], B.shape[1], torch.Generator().manual_seed(1))
    for ratio in ratios:
        t = mixing_for(ratio, score, truth, R)
        starts.append((f"perturbed t={t:.3f}", perturbed(truth, R, t)))
    rng, generator = np.random.RandomState(0), torch.Generator().manual_seed(0)
    for r in range(n_restarts):  # unpaired_disjoint.restarts' sequence
        W, _ = start.disjoint_start(
            A,
            B,
            rng=np.random.RandomState(rng.randint(2**31 - 1)),
            generator=generator,
            n_runs=estimator._DISJOINT_RUNS,
            qap_restarts=estimator._DISJOINT_QAP_RESTARTS,
        )
        if score(W) >= min_start:
            starts.append((f"restart {r}", W))
        else:
            print(f"restart {r}: start {score(W):.3f} of supervised, not refined", flush=True)
    for label, W in starts:
        for name, refiner in refiners().items():
            for seed in seeds if name == "disjoint_refine" else (0,):
                if name not in names:
                    continue
                began = time.perf_counter()
                final = refiner(A, B, W, seed)
                seconds = time.perf_counter() - began
                criterion = round(start.mean_best_csls(A, B, final), 4)
                cells = [round(score(W), 3), f"{name} (seed {seed})", round(score(final), 3)]
                yield [label, *cells, criterion, round(seconds, 1)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="*", default=["wn_gloss_e5_minilm"])
    parser.add_argument("--rows", type=int, default=4800, help="training items (both halves)")
    parser.add_argument("--directions", nargs="*", default=["X->Y", "Y->X"])
    parser.add_argument(
        "--perturbed", type=float, nargs="*", default=[0.05, 0.1, 0.2], help="start ratios"
    )
    parser.add_argument("--restarts", type=int, default=0, help="disjoint starts")
    parser.add_argument("--min-start", type=float, default=0.0, help="refine starts above this")
    parser.add_argument("--refine-seeds", type=int, nargs="*", default=[0])
    parser.add_argument(
        "--refiners", nargs="*", default=list(refiners()), choices=list(refiners())
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the table here")
    add_threads_argument(parser, default=1)
    args = parser.parse_args(argv)
    limit_threads(args.threads)
    rows = []
    for name, X, Y, X_test, Y_test in real_pairs(args.pairs, args.rows):
        for direction in args.directions:
            data = (X, Y, X_test, Y_test) if direction == "X->Y" else (Y, X, Y_test, X_test)
            cells_of = basin(
                *data,
                args.perturbed,
                args.restarts,
                args.refiners,
                min_start=args.min_start,
                seeds=args.refine_seeds,
            )
            for cells in cells_of:
                rows.append([name, direction, *cells])
                print(" | ".join(map(str, rows[-1])), flush=True)
    write_results(
        args,
        "unpaired_refiner",
        "Disjoint items: the refiners' basin",
        [table("Start quality against final quality", COLUMNS, rows)],
        notes=f"{args.rows} training items split into disjoint halves; paired top-1 on the "
        "test split as a ratio to supervised Procrustes on all the training items paired; "
        f"torch threads {args.threads}.",
    )


if __name__ == "__main__":
    main()

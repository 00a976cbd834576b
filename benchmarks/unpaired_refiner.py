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
- ``disjoint start s``: :func:`~sklearn_compat._unpaired.start.disjoint_start` with seed ``s``
  (matched clusters and anchor rounds: right along the rows' leading directions, close to
  random in the rest).

Refiners: ``neighbour means + union`` (:func:`neighbour_mean_refine`, 40 rounds, then
:func:`union_self_learn`) and ``disjoint_refine`` (stochastic self-learning, then neighbour
means).  Both directions are run.  It prints a table; ``--json PATH`` also writes it.

    python benchmarks/unpaired_refiner.py --threads 1
    python benchmarks/unpaired_refiner.py --directions Y->X --perturbed 0.1 --starts 1 6
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
from unpaired_ceiling import disjoint_halves  # noqa: E402

COLUMNS = [
    "pair",
    "direction",
    "start",
    "start / supervised",
    "refiner",
    "final / supervised",
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


def refiners(seed):
    from sklearn_compat._unpaired import refine

    def old(A, B, W):
        W = refine.neighbour_mean_refine(A, B, W)
        return refine.union_self_learn(A, B, W)[0]

    def new(A, B, W):
        generator = torch.Generator().manual_seed(seed)
        return refine.disjoint_refine(A, B, W, generator=generator)[0]

    return {"neighbour means + union": old, "disjoint_refine": new}


def basin(X, Y, X_test, Y_test, ratios, seeds, names):
    """Yield ``[start, start ratio, refiner, final ratio, seconds]`` rows."""
    import sklearn_compat.unpaired as estimator
    from sklearn_compat._unpaired import common, start

    form = lambda A: common.unit_centered(torch.as_tensor(A, dtype=torch.float32))  # noqa: E731
    first, second = disjoint_halves(len(X))
    A, B = form(X[first]), form(Y[second])
    Xt, Yt = form(X_test), form(Y_test)

    def top1(W):
        sims = common.unit_rows(Xt @ W.float()) @ Yt.T
        return float((sims.argmax(dim=1) == torch.arange(len(Xt))).float().mean())

    truth = common.orthogonal_fit(form(X), form(Y))
    supervised = top1(truth)
    score = lambda W: top1(W) / supervised  # noqa: E731
    starts = [("supervised", truth)]
    R = common.random_orthogonal(A.shape[1], B.shape[1], torch.Generator().manual_seed(1))
    for ratio in ratios:
        t = mixing_for(ratio, score, truth, R)
        starts.append((f"perturbed t={t:.3f}", perturbed(truth, R, t)))
    for seed in seeds:
        W, _ = start.disjoint_start(
            A,
            B,
            rng=np.random.RandomState(seed),
            generator=torch.Generator().manual_seed(seed),
            n_runs=estimator._DISJOINT_RUNS,
            qap_restarts=estimator._DISJOINT_QAP_RESTARTS,
        )
        starts.append((f"disjoint start {seed}", W))
    for label, W in starts:
        for name, refiner in refiners(0).items():
            if name not in names:
                continue
            began = time.perf_counter()
            final = refiner(A, B, W)
            seconds = time.perf_counter() - began
            yield [label, round(score(W), 3), name, round(score(final), 3), round(seconds, 1)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="*", default=["wn_gloss_e5_minilm"])
    parser.add_argument("--rows", type=int, default=4800, help="training items (both halves)")
    parser.add_argument("--directions", nargs="*", default=["X->Y", "Y->X"])
    parser.add_argument(
        "--perturbed", type=float, nargs="*", default=[0.05, 0.1, 0.2], help="start ratios"
    )
    parser.add_argument("--starts", type=int, nargs="*", default=[], help="disjoint_start seeds")
    parser.add_argument(
        "--refiners", nargs="*", default=list(refiners(0)), choices=list(refiners(0))
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the table here")
    add_threads_argument(parser, default=1)
    args = parser.parse_args(argv)
    limit_threads(args.threads)
    rows = []
    for name, X, Y, X_test, Y_test in real_pairs(args.pairs, args.rows):
        for direction in args.directions:
            data = (X, Y, X_test, Y_test) if direction == "X->Y" else (Y, X, Y_test, X_test)
            for cells in basin(*data, args.perturbed, args.starts, args.refiners):
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

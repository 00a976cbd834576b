"""Disjoint items: the disjoint start stage by stage, restart by restart.

The training rows of a pair are split into the disjoint halves of ``benchmarks/unpaired.py``
(no item on both sides).  Each restart is
:func:`~sklearn_compat._unpaired.start.disjoint_start` with the estimator's settings, from
the first side (``--directions X->Y``: X's rows are the source) onto the other, watched
after its stages: the matched-cluster description fit (``desc``) and anchor rounds 3, 5, 8
and 11 of :data:`~sklearn_compat._unpaired.start.ANCHOR_ROUNDS`; then, with
``--extra N``, N more anchor rounds of 512 clusters.  Per stage: paired top-1 on the test
split as a ratio to supervised Procrustes on all the training items paired (in the common
form of ``unit_centered``), the criterion that ranks restarts
(:func:`~sklearn_compat._unpaired.start.mean_best_csls`) and the seconds since the restart
began.  A start of about 0.1 of supervised is what the refiner
(:func:`~sklearn_compat._unpaired.refine.disjoint_refine`) catches.  It prints a table;
``--json PATH`` also writes it.

    python benchmarks/unpaired_start.py --directions Y->X --restarts 14 --threads 1
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

STAGES = {"desc": 0, "a3": 3, "a5": 5, "a8": 8, "a11": 11}


def stages(X, Y, X_test, Y_test, n_restarts, extra, *, seed=0, reverse=False, runs=None, qap=None):
    """Yield ``[restart, stage, start / supervised, criterion, seconds]`` rows; with
    ``reverse``, the start runs from Y's half onto X's and is transposed (the estimator's
    odd restarts).  ``runs`` and ``qap``: k-means partitions per side and FAQ restarts
    per match (the estimator's when ``None``)."""
    import sklearn_compat.unpaired as estimator
    from sklearn_compat._unpaired import common, start

    form, top1, truth = common_form_judge(X, Y, X_test, Y_test)
    first, second = disjoint_halves(len(X))
    A, B = form(X[first]), form(Y[second])
    S, T = (B, A) if reverse else (A, B)  # the start's source and target rows
    supervised = top1(truth)
    rng, generator = np.random.RandomState(seed), torch.Generator().manual_seed(seed)
    watched = {v: k for k, v in STAGES.items()}
    for restart in range(n_restarts):
        began = time.perf_counter()
        restart_rng = np.random.RandomState(rng.randint(2**31 - 1))
        blocks_x, blocks_y = [], []
        for _ in range(runs or estimator._DISJOINT_RUNS):  # disjoint_start's first stage
            Cx = start.kmeans(S, 32, generator)
            Cy = start.kmeans(T, 32, generator)
            perm = start.match_centroids(
                Cx, Cy, restart_rng, n_init=qap or estimator._DISJOINT_QAP_RESTARTS
            )
            blocks_x.append(common.unit_centered(S @ Cx.T))
            blocks_y.append(common.unit_centered(T @ Cy[perm].T))
        W = start._description_fit(S, T, blocks_x, blocks_y, 50)
        rounds = list(start.ANCHOR_ROUNDS) + [512] * extra
        for done in range(len(rounds) + 1):
            if done > 0:
                W = start.anchor_round(S, T, W, rounds[done - 1], generator, n_neighbors=50)
            label = watched.get(done, f"a{done}" if done == len(rounds) else None)
            if label is None:
                continue
            seconds = time.perf_counter() - began
            M = W.T if reverse else W  # X's space into Y's
            criterion = start.mean_best_csls(A, B, M)
            yield [
                restart,
                label,
                round(top1(M) / supervised, 3),
                round(criterion, 4),
                round(seconds, 1),
            ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="*", default=["wn_gloss_e5_minilm"])
    parser.add_argument("--rows", type=int, default=4800, help="training items (both halves)")
    parser.add_argument("--directions", nargs="*", default=["X->Y", "Y->X"])
    parser.add_argument("--restarts", type=int, default=12)
    parser.add_argument("--extra", type=int, default=0, help="anchor rounds of 512 after the 11")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=None, help="k-means partitions per side")
    parser.add_argument("--qap", type=int, default=None, help="FAQ restarts per match")
    parser.add_argument(
        "--reverse", action="store_true", help="start from the second side's rows, transposed"
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the table here")
    add_threads_argument(parser, default=1)
    args = parser.parse_args(argv)
    limit_threads(args.threads)
    columns = [
        "pair",
        "direction",
        "source",
        "restart",
        "stage",
        "start / supervised",
        "criterion",
        "seconds",
    ]
    rows = []
    for name, X, Y, X_test, Y_test in real_pairs(args.pairs, args.rows):
        for direction in args.directions:
            data = (X, Y, X_test, Y_test) if direction == "X->Y" else (Y, X, Y_test, X_test)
            cells_of = stages(
                *data,
                args.restarts,
                args.extra,
                seed=args.seed,
                reverse=args.reverse,
                runs=args.runs,
                qap=args.qap,
            )
            source = direction[-1] if args.reverse else direction[0]
            for cells in cells_of:
                rows.append([name, direction, source, *cells])
                print(" | ".join(map(str, rows[-1])), flush=True)
    write_results(
        args,
        "unpaired_start",
        "Disjoint items: the start stage by stage",
        [table("Start quality and criterion by stage", columns, rows)],
        notes=f"{args.rows} training items split into disjoint halves; paired top-1 on the "
        "test split as a ratio to supervised Procrustes on all the training items paired; "
        f"torch threads {args.threads}.",
    )


if __name__ == "__main__":
    main()

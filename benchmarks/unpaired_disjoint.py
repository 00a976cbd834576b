"""Disjoint items, restart by restart: what ``UnpairedProcrustesAligner(init="disjoint")`` does.

The training rows of a pair are split into the disjoint halves of ``benchmarks/unpaired.py``
(no item on both sides; ``--rows`` training items, so ``--rows / 2`` per side).  For each
restart the script runs the estimator's own parts (``sklearn_compat._unpaired``) with the
estimator's settings: the disjoint start (matched k-means partitions, then anchor rounds),
then the refiner (neighbour means, then union-CSLS self-learning), and reports per restart
paired top-1 on the test split as a ratio to supervised Procrustes on all the training
items paired (``start``: after the anchor rounds; ``final``: after the refiner, in the
common form), the restart's criterion (mean best CSLS after the anchor rounds, which the
estimator ranks restarts by), its seconds, and the confidence the estimator would report
after that many restarts.  Both directions are run (X->Y, then Y->X).

    python benchmarks/unpaired_disjoint.py --pairs wn_gloss_e5_minilm --rows 4800 --threads 1
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    add_json_arguments,
    add_threads_argument,
    limit_threads,
    table,
    write_results,
)
from unpaired import real_pairs  # noqa: E402
from unpaired_ceiling import disjoint_halves  # noqa: E402

COLUMNS = [
    "pair",
    "direction",
    "rows per side",
    "restart",
    "start / supervised",
    "final / supervised",
    "criterion",
    "seconds",
    "confidence so far",
]


def restarts(X, Y, X_test, Y_test, n_restarts, seed=0):
    """Yield one row's cells per restart (from ``restart`` on) for the fit of X onto Y."""
    import sklearn_compat.unpaired as estimator
    from sklearn_compat._unpaired import common, refine, start

    form = lambda A: common.unit_centered(torch.as_tensor(A, dtype=torch.float32))  # noqa: E731
    first, second = disjoint_halves(len(X))
    A, B = form(X[first]), form(Y[second])
    Xt, Yt = form(X_test), form(Y_test)

    def top1(W):
        sims = common.unit_rows(Xt @ W.float()) @ Yt.T
        return float((sims.argmax(dim=1) == torch.arange(len(Xt))).float().mean())

    supervised = top1(common.orthogonal_fit(form(X), form(Y)))
    rng = np.random.RandomState(seed)
    generator = torch.Generator().manual_seed(seed)
    scores, maps = {}, {}
    for r in range(n_restarts):
        began = time.perf_counter()
        W, criterion = start.disjoint_start(
            A,
            B,
            rng=np.random.RandomState(rng.randint(2**31 - 1)),
            generator=generator,
            n_runs=estimator._DISJOINT_RUNS,
            qap_restarts=estimator._DISJOINT_QAP_RESTARTS,
        )
        scores[r], maps[r] = criterion, W
        final, _ = refine.union_self_learn(A, B, refine.neighbour_mean_refine(A, B, W))
        seconds = time.perf_counter() - began
        confidence = estimator._disjoint_confidence(scores, maps)[0]
        yield (
            f"{len(first)} / {len(second)}",
            r,
            round(top1(W) / supervised, 3),
            round(top1(final) / supervised, 3),
            round(criterion, 4),
            round(seconds, 1),
            round(confidence, 3),
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="*", default=["wn_gloss_e5_minilm"])
    parser.add_argument("--rows", type=int, default=4800, help="training items (both halves)")
    parser.add_argument("--restarts", type=int, default=4, help="restarts per direction")
    parser.add_argument("--directions", nargs="*", default=["X->Y", "Y->X"])
    add_threads_argument(parser, default=1)
    add_json_arguments(parser, "unpaired_disjoint")
    args = parser.parse_args(argv)
    limit_threads(args.threads)
    rows = []
    for name, X, Y, X_test, Y_test in real_pairs(args.pairs, args.rows):
        for direction in args.directions:
            data = (X, Y, X_test, Y_test) if direction == "X->Y" else (Y, X, Y_test, X_test)
            for cells in restarts(*data, args.restarts):
                rows.append([name, direction, *cells])
                print(" | ".join(map(str, rows[-1])), flush=True)
                write_results(
                    args,
                    "unpaired_disjoint",
                    "UnpairedProcrustesAligner(init='disjoint'), restart by restart",
                    [table("Disjoint halves, per restart", COLUMNS, rows)],
                    notes=f"{args.rows} training items split into disjoint halves; paired "
                    "top-1 on the test split as a ratio to supervised Procrustes on all the "
                    f"training items; torch threads {args.threads} on a shared, loaded box.",
                )


if __name__ == "__main__":
    main()

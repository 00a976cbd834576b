"""Disjoint items, restart by restart: ``UnpairedProcrustesAligner(init="disjoint")`` end to end.

The training rows of a pair are split into the disjoint halves of ``benchmarks/unpaired.py``
(no item on both sides; ``--rows`` training items, so ``--rows / 2`` per side).  Each
direction is one fit of the estimator with its default settings; the script watches its
restarts (the estimator's own start function, wrapped to keep each restart's map) and
reports per restart the side it started from, paired top-1 on the test split as a ratio
to supervised Procrustes on all the training items paired (``start``: after the anchor
rounds, in the common form), the restart's criterion (mean best CSLS, which ranks the
restarts), the criterion after refinement on the start sample (for the restarts that were
refined as one of the two best) and its seconds; then one row for the fit (naming the kept
restart and the agreement of each twice-refined start's two refinements): paired top-1 of
the fitted map as a ratio to supervised (``final``), ``confidence_``, whether it warned,
and the whole fit's seconds.

    python benchmarks/unpaired_disjoint.py --pairs wn_gloss_e5_minilm --rows 4800 --threads 1

7,400 rows a side (the estimator draws its ``start_rows`` start sample from them itself, and
its last stage and final map use every row, up to ``max_rows``), in a file of its own so
that the 2,400-row record stays:

    python benchmarks/unpaired_disjoint.py --pairs wn_gloss16k_e5_minilm --rows 14800 \
        --directions Y->X --n-init 16 --json benchmarks/results/unpaired_disjoint_7400.json
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    add_json_arguments,
    add_threads_argument,
    limit_threads,
    table,
    write_results,
)
from unpaired import real_pairs  # noqa: E402
from unpaired_ceiling import common_form_judge, disjoint_halves  # noqa: E402

COLUMNS = [
    "pair",
    "direction",
    "rows per side",
    "restart",
    "source side",
    "start / supervised",
    "criterion",
    "refined criterion",
    "final / supervised",
    "confidence",
    "warned",
    "seconds",
]


def fit_disjoint(X, Y, X_test, Y_test, n_init, seed=0):
    """Cells of one row per restart, then of the fit's row, for the fit of X onto Y."""
    from sklearn_compat import OrthogonalProcrustesAligner, UnpairedProcrustesAligner
    from sklearn_compat._unpaired import start
    from sklearn_compat.exceptions import UnreliableAlignmentWarning

    form, top1, truth = common_form_judge(X, Y, X_test, Y_test)
    first, second = disjoint_halves(len(X))
    common_supervised = top1(truth)
    supervised = OrthogonalProcrustesAligner().fit(X, Y).score(X_test, Y_test)
    starts, original = [], start.oriented_disjoint_start

    def watched(Xs, Ys, *, reverse, **kwargs):
        W, criterion = original(Xs, Ys, reverse=reverse, **kwargs)
        starts.append((reverse, W, criterion))
        return W, criterion

    start.oriented_disjoint_start = watched
    began = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnreliableAlignmentWarning)
            aligner = UnpairedProcrustesAligner(init="disjoint", n_init=n_init, random_state=seed)
            aligner.fit(X[first], Y[second])
    finally:
        start.oriented_disjoint_start = original
    seconds = time.perf_counter() - began
    warned = any(issubclass(w.category, UnreliableAlignmentWarning) for w in caught)
    sides = f"{len(first)} / {len(second)}"
    for r, (reverse, W, criterion) in enumerate(starts):
        label = f"disjoint ({r})"
        refined = aligner.refined_scores_.get(label)
        yield (
            sides,
            r,
            "Y" if reverse else "X",
            round(top1(W) / common_supervised, 3),
            round(criterion, 4),
            "" if refined is None else round(refined, 4),
            "",
            "",
            "",
            round(aligner.start_seconds_[label], 1),
        )
    final = aligner.score(X_test, Y_test) / supervised
    yield (
        sides,
        f"fit (kept {aligner.init_}; reproduced "
        + ", ".join(f"{c[10:-1]}: {a:.3f}" for c, a in aligner.reproduced_.items())
        + ")",
        "",
        "",
        "",
        "",
        round(final, 3),
        round(aligner.confidence_, 3),
        "yes" if warned else "no",
        round(seconds, 1),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="*", default=["wn_gloss_e5_minilm"])
    parser.add_argument("--rows", type=int, default=4800, help="training items (both halves)")
    parser.add_argument("--directions", nargs="*", default=["X->Y", "Y->X"])
    parser.add_argument("--n-init", type=int, default=24, help="the estimator's n_init")
    add_threads_argument(parser, default=1)
    add_json_arguments(parser, "unpaired_disjoint")
    args = parser.parse_args(argv)
    limit_threads(args.threads)
    rows = []
    for name, X, Y, X_test, Y_test in real_pairs(args.pairs, args.rows):
        if len(X) < args.rows:
            parser.error(f"{name} holds {len(X)} training items, fewer than --rows {args.rows}")
        for direction in args.directions:
            data = (X, Y, X_test, Y_test) if direction == "X->Y" else (Y, X, Y_test, X_test)
            for cells in fit_disjoint(*data, args.n_init):
                rows.append([name, direction, *cells])
                print(" | ".join(map(str, rows[-1])), flush=True)
            write_results(
                args,
                "unpaired_disjoint",
                "UnpairedProcrustesAligner(init='disjoint'), restart by restart",
                [table("Disjoint halves, per restart", COLUMNS, rows)],
                notes=f"{args.rows} training items split into disjoint halves; paired "
                "top-1 on the test split as a ratio to supervised Procrustes on all the "
                "training items (start: in the common form; final: the fitted aligner "
                "against OrthogonalProcrustesAligner); "
                f"n_init={args.n_init}; torch threads {args.threads} on a shared, loaded box.",
            )


if __name__ == "__main__":
    main()

"""Disjoint items: the last stage of a disjoint fit, option by option.

``UnpairedProcrustesAligner(init="disjoint")`` keeps one candidate (a start refined on the
start sample by :func:`~sklearn_compat._unpaired.refine.disjoint_refine`), then refines it
once more on every working row and fits its final map (supervised Procrustes, ``"auto"``
settings, on the mutual CSLS pairs of the working rows).  This script measures that last
refinement on a design pair's disjoint halves (the halves of ``benchmarks/unpaired.py``;
held-aside pairs are refused), from candidates the refiner has caught:

- ``(a) candidate``: the kept candidate as it is;
- ``(b) + union_self_learn``: the estimator's last stage (union-CSLS self-learning, 20 rounds);
- ``(c) + disjoint_refine``: one more :func:`disjoint_refine` pass on all working rows;
- ``(d) + neighbour means``: :func:`neighbour_mean_refine` only (30 rounds, 10 nearest).

The candidates: the true map perturbed towards a random orthogonal map until it scores
``--perturbed`` of supervised (``orth((1-t) W* + t R)``, as in
``benchmarks/unpaired_refiner.py``), and optionally the estimator's own restarts
(``--restarts``: :func:`oriented_disjoint_start` on the start sample, alternating sides,
kept from ``--min-start``), each refined on the start sample as the estimator refines a
candidate.  Per option: paired top-1 on the test split as a ratio to supervised, of the
refined map in the common form (``map``) and of the final map the estimator would fit from
it (``final``), the final's difference from ``(b)`` with its paired standard error over the
test pairs, the refined map itself used as the final map (``map as final``: each side's
training mean, the estimator's final map when it has no pair), and the option's seconds.

    python benchmarks/unpaired_last_stage.py --threads 1
    python benchmarks/unpaired_last_stage.py --directions Y->X --perturbed 0.1 --restarts 4 \\
        --min-start 0.1
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
from unpaired_ceiling import common_form_judge, disjoint_halves  # noqa: E402
from unpaired_refiner import mixing_for, perturbed  # noqa: E402

COLUMNS = [
    "pair",
    "direction",
    "candidate",
    "start / supervised",
    "option",
    "map / supervised",
    "final / supervised",
    "final minus (b) +/- paired SE",
    "map as final / supervised",
    "seconds",
]
START_ROWS = 2000  # the estimator's default start_rows


def options(Xw, Yw, generator_seed):
    """The last stages measured: ``{label: W -> W}``."""
    from sklearn_compat._unpaired import refine

    def union(W):
        return refine.union_self_learn(Xw, Yw, W, n_iter=20)[0]

    def again(W):
        generator = torch.Generator().manual_seed(generator_seed)
        return refine.disjoint_refine(Xw, Yw, W, generator=generator)[0]

    def means(W):
        return refine.neighbour_mean_refine(Xw, Yw, W, n_rounds=30, n_neighbors=10)

    return {
        "(a) candidate": lambda W: W,
        "(b) + union_self_learn": union,
        "(c) + disjoint_refine": again,
        "(d) + neighbour means": means,
    }


def last_stage(X, Y, X_test, Y_test, ratios, n_restarts, min_start, seed=0):
    """Yield ``[candidate, start ratio, option, map ratio, final ratio, diff, seconds]``."""
    import sklearn_compat.unpaired as estimator
    from sklearn_compat import OrthogonalProcrustesAligner
    from sklearn_compat._core.holdout import paired_hits
    from sklearn_compat._unpaired import common, start

    form, top1, truth = common_form_judge(X, Y, X_test, Y_test)
    first, second = disjoint_halves(len(X))
    Xr, Yr = X[first], Y[second]
    Xw, Yw = form(Xr), form(Yr)
    rng = np.random.RandomState(seed)
    sx = np.sort(rng.choice(len(Xw), min(START_ROWS, len(Xw)), replace=False))
    sy = np.sort(rng.choice(len(Yw), min(START_ROWS, len(Yw)), replace=False))
    A, B = Xw[torch.as_tensor(sx)], Yw[torch.as_tensor(sy)]
    common_supervised = top1(truth)
    supervised = OrthogonalProcrustesAligner().fit(X, Y).score(X_test, Y_test)

    def final_hits(W):
        # the estimator's final map: Procrustes ("auto") on the working rows' mutual pairs
        i, j = common.mutual_pairs(common.unit_rows(Xw @ W.float()), Yw, 10)
        final = OrthogonalProcrustesAligner(center="auto", scale="auto")
        final.fit(Xr[i.numpy()], Yr[j.numpy()])
        return paired_hits(final.transform(X_test), Y_test).astype(float)

    mean_x, mean_y = Xr.mean(axis=0, dtype=np.float64), Yr.mean(axis=0, dtype=np.float64)
    scale = np.sqrt(np.sum((Yr - mean_y) ** 2) / np.sum((Xr - mean_x) ** 2))

    def map_as_final(W):
        # the estimator's final map without a dictionary: the map itself, each side's
        # training mean, scale from the spreads (UnpairedProcrustesAligner._fit_final_map)
        Z = (X_test - mean_x) @ W.double().numpy() * scale + mean_y
        return paired_hits(Z, Y_test).mean()

    score = lambda W: top1(W) / common_supervised  # noqa: E731
    candidates = []
    R = common.random_orthogonal(Xw.shape[1], Yw.shape[1], torch.Generator().manual_seed(1))
    for ratio in ratios:
        t = mixing_for(ratio, score, truth, R)
        candidates.append((f"perturbed t={t:.3f}", perturbed(truth, R, t)))
    generator = torch.Generator().manual_seed(seed)
    for r in range(n_restarts):
        W, _ = start.oriented_disjoint_start(
            A,
            B,
            reverse=r % 2 == 1,
            rng=np.random.RandomState(rng.randint(2**31 - 1)),
            generator=generator,
            n_runs=estimator._DISJOINT_RUNS,
            qap_restarts=estimator._DISJOINT_QAP_RESTARTS,
        )
        print(f"restart {r}: start {score(W):.3f} of supervised", flush=True)
        if score(W) >= min_start:
            candidates.append((f"restart {r}", W))
    for number, (label, W0) in enumerate(candidates):
        began = time.perf_counter()
        candidate = estimator._refine_candidate(A, B, W0, torch.Generator().manual_seed(number))
        refine_seconds = time.perf_counter() - began
        print(f"{label}: candidate refined in {refine_seconds:.0f} s", flush=True)
        baseline, results = None, []
        for option, stage in options(Xw, Yw, 100 + number).items():
            began = time.perf_counter()
            W = stage(candidate)
            seconds = time.perf_counter() - began
            hits = final_hits(W)
            results.append((option, W, hits, seconds))
            if option.startswith("(b)"):
                baseline = hits
        for option, W, hits, seconds in results:
            diff = hits - baseline
            se = diff.std(ddof=1) / np.sqrt(len(diff))
            yield [
                label,
                round(score(W0), 3),
                option,
                round(score(W), 3),
                round(hits.mean() / supervised, 3),
                f"{diff.mean() / supervised:+.3f} +/- {se / supervised:.3f}",
                round(map_as_final(W) / supervised, 3),
                round(seconds if option[1] != "a" else refine_seconds, 1),
            ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="*", default=["wn_gloss_e5_minilm"])
    parser.add_argument("--rows", type=int, default=4800, help="training items (both halves)")
    parser.add_argument("--directions", nargs="*", default=["X->Y", "Y->X"])
    parser.add_argument(
        "--perturbed", type=float, nargs="*", default=[0.1, 0.2], help="start ratios"
    )
    parser.add_argument("--restarts", type=int, default=0, help="the estimator's restarts")
    parser.add_argument("--min-start", type=float, default=0.1, help="refine restarts above")
    add_threads_argument(parser, default=1)
    add_json_arguments(parser, "unpaired_last_stage")
    args = parser.parse_args(argv)
    if any(name.startswith("heldout") for name in args.pairs or []):
        parser.error("the last stage is designed on design pairs only, not held-aside ones")
    limit_threads(args.threads)
    rows = []
    for name, X, Y, X_test, Y_test in real_pairs(args.pairs, args.rows):
        for direction in args.directions:
            data = (X, Y, X_test, Y_test) if direction == "X->Y" else (Y, X, Y_test, X_test)
            for cells in last_stage(*data, args.perturbed, args.restarts, args.min_start):
                rows.append([name, direction, *cells])
                print(" | ".join(map(str, rows[-1])), flush=True)
            write_results(
                args,
                "unpaired_last_stage",
                "Disjoint items: the last stage of a disjoint fit",
                [table("Kept candidate, then each last stage", COLUMNS, rows)],
                notes=f"{args.rows} training items split into disjoint halves; candidates "
                f"refined on a {START_ROWS}-row start sample as the estimator refines them "
                "(the perturbed ones start from the true map perturbed: starts the refiner "
                "catches); paired top-1 on the test split as a ratio to supervised "
                "Procrustes on all the training items (map: the refined map in the common "
                "form; final: the estimator's final map fitted on its mutual pairs); "
                f"torch threads {args.threads} on a shared, loaded box.",
            )


if __name__ == "__main__":
    main()

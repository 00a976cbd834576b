"""How far self-learning can go on disjoint items, started from the right map.

``UnpairedProcrustesAligner`` ends with self-learning: mutual CSLS nearest neighbours under
the current map become the dictionary, Procrustes refits the map, and the two repeat.  When
the two sides hold different items, no row has its true partner on the other side, so even
a perfect start drifts to wherever neighbouring items pull it.  This script measures that
ceiling: the estimator's own self-learning (``sklearn_compat._unpaired.refine.self_learn``)
started from supervised Procrustes fitted on the true pairs, on the disjoint halves that
``benchmarks/unpaired.py`` uses, then its final map (:class:`OrthogonalProcrustesAligner`
with its ``"auto"`` centring and scale on the induced pairs), scored like the benchmark
(paired top-1 on the test split) against supervised Procrustes on all the items.

It is a practical ceiling (starts near the right map settle within a few points of it):
it says how many rows per side disjoint alignment needs before it is possible at all.

    python benchmarks/unpaired_ceiling.py --threads 1
    python benchmarks/unpaired_ceiling.py --pairs wn_gloss_e5_minilm --sizes 1000 --no-json
"""

import argparse
import sys
import warnings
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

SENTENCE_PAIRS = [
    "wn_gloss_e5_minilm",
    "wn_gloss_e5_wordllama",
    "heldout_b_gloss_minilm_e5",
    "wn_gloss16k_e5_minilm",
]


def disjoint_halves(n):
    """The halves of ``benchmarks/unpaired.py`` (the same generator, the same draws)."""
    rng = np.random.default_rng(0)
    rng.permutation(n)  # the shuffled setting's order
    halves = rng.permutation(n)
    return np.sort(halves[: n // 2]), np.sort(halves[n // 2 :])


def common_form_judge(X, Y, X_test, Y_test):
    """``(form, top1, truth)`` for judging maps of a pair's rows in the common form.

    ``form`` puts rows in the unpaired search's common form (unit, centred, unit),
    ``top1(W)`` is paired top-1 of the test split under ``W`` in that form, and ``truth``
    is supervised Procrustes on all the training items paired, in that form (the map a
    disjoint search is measured against).
    """
    from sklearn_compat._unpaired import common

    def form(M):
        return common.unit_centered(torch.as_tensor(M, dtype=torch.float32))

    Xt, Yt = form(X_test), form(Y_test)

    def top1(W):
        sims = common.unit_rows(Xt @ W.float()) @ Yt.T
        return float((sims.argmax(dim=1) == torch.arange(len(Xt))).float().mean())

    return form, top1, common.orthogonal_fit(form(X), form(Y))


def ceiling(X, Y, X_test, Y_test):
    """(supervised top-1, top-1 after self-learning from it on disjoint halves)."""
    from types import SimpleNamespace

    from sklearn_compat import OrthogonalProcrustesAligner
    from sklearn_compat._unpaired import common, refine, start

    U = SimpleNamespace(
        **{n: getattr(m, n) for m in (common, refine, start) for n in dir(m) if n[:2] != "__"}
    )

    supervised = OrthogonalProcrustesAligner().fit(X, Y).score(X_test, Y_test)
    first, second = disjoint_halves(len(X))
    common = [U.unit_centered(torch.as_tensor(A, dtype=torch.float32)) for A in (X, Y)]
    W = U.orthogonal_fit(*common)
    Xs, Ys = common[0][first], common[1][second]
    _, matches, _ = U.self_learn(Xs, Ys, W, n_iter=10, csls_k=10, tol=0.01)
    i, j = (first[matches[:, 0].numpy()], second[matches[:, 1].numpy()])
    final = OrthogonalProcrustesAligner().fit(X[i], Y[j])
    return supervised, final.score(X_test, Y_test)


def partitions(X, Y, counts, seed=0):
    """How alike k-means partitions of disjoint halves are, within a model and across two.

    For each count: spherical k-means (best of 10 runs) on X's first half, on X's second
    half and on Y's second half, in the common form.  Each set of centroids is matched to
    X's first-half centroids by the assignment that maximises their mean cosine (Y's
    through supervised Procrustes on all the pairs, the true map), and that mean cosine is
    reported; then how many of Y's centroids the unpaired centroid match (Gram-matrix
    structure only) assigns as the true map does.  Returns rows
    ``[clusters, same model, across models, unpaired match right]``.
    """
    from types import SimpleNamespace

    from scipy.optimize import linear_sum_assignment

    from sklearn_compat._unpaired import common, refine, start

    U = SimpleNamespace(
        **{n: getattr(m, n) for m in (common, refine, start) for n in dir(m) if n[:2] != "__"}
    )

    first, second = disjoint_halves(len(X))
    common = [U.unit_centered(torch.as_tensor(A, dtype=torch.float32)) for A in (X, Y)]
    W = U.orthogonal_fit(*common).float()
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for count in counts:
        here = U.kmeans(common[0][first], count, generator, n_runs=10)
        again = U.kmeans(common[0][second], count, generator, n_runs=10)
        there = U.kmeans(common[1][second], count, generator, n_runs=10)
        cells = []
        for other in (again, U.unit_rows(there @ W.T)):
            cosines = (here @ other.T).numpy()
            rows_, truth = linear_sum_assignment(-cosines)
            cells.append(round(float(cosines[rows_, truth].mean()), 3))
        # truth: the last assignment, X's centroids to Y's through the true map
        guess = U.match_centroids(here, there, np.random.RandomState(seed)).cpu().numpy()
        rows.append([count, *cells, f"{int((guess == truth).sum())} / {count}"])
        print("partitions", rows[-1], flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="*", default=SENTENCE_PAIRS)
    parser.add_argument(
        "--sizes", type=int, nargs="*", default=[500, 1000, 2400, 7400], help="items per side"
    )
    parser.add_argument(
        "--partition-pair",
        default="wn_gloss16k_e5_minilm",
        help="pair whose k-means partitions are compared at the largest size",
    )
    parser.add_argument(
        "--clusters", type=int, nargs="*", default=[2, 4, 8, 16], help="k-means counts"
    )
    add_threads_argument(parser, default=1)
    add_json_arguments(parser, "unpaired_ceiling")
    args = parser.parse_args(argv)
    limit_threads(args.threads)
    found = {}  # pair -> {size: (supervised X->Y, Y->X, ratio X->Y, ratio Y->X)}
    for size in args.sizes:
        for name, X, Y, X_test, Y_test in real_pairs(args.pairs, 2 * size):
            if len(X) < 2 * size:
                continue
            cells = []
            for A, B, A_test, B_test in ((X, Y, X_test, Y_test), (Y, X, Y_test, X_test)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    supervised, reached = ceiling(A, B, A_test, B_test)
                cells.append((round(supervised, 3), round(reached / supervised, 3)))
            found.setdefault(name, {})[size] = cells
            print(name, size, cells, flush=True)
    # One row per pair (the page stays short): supervised top-1 at the most items, then
    # the ceiling's ratio at each size, both directions in one cell.
    rows = []
    for name, by_size in found.items():
        (sup_xy, _), (sup_yx, _) = by_size[max(by_size)]
        row = [name, f"{sup_xy} / {sup_yx}"]
        for size in args.sizes:
            ratios = by_size.get(size)
            row.append(f"{ratios[0][1]} / {ratios[1][1]}" if ratios else "")
        rows.append(row)
    columns = ["pair", "supervised top-1 (X->Y / Y->X, most items)"]
    columns += [f"ratio to supervised, {size} items per side" for size in args.sizes]
    tables = [table("", columns, rows)]
    size = max(args.sizes)
    for name, X, Y, _, _ in real_pairs([args.partition_pair], 2 * size):
        if len(X) >= 2 * size and args.clusters:
            tables.append(
                table(
                    f"k-means partitions of disjoint halves ({name}, {size} items per side)",
                    [
                        "clusters",
                        "same model: mean cosine of matched centroids",
                        "across the two models (true map)",
                        "unpaired centroid match agrees with the true one",
                    ],
                    partitions(X, Y, args.clusters),
                )
            )
    write_results(
        args,
        "unpaired_ceiling",
        "Disjoint items: the most self-learning reaches, started from the right map",
        tables,
        notes="Self-learning as UnpairedProcrustesAligner runs it, started from supervised "
        "Procrustes on all the pairs, on the disjoint halves of benchmarks/unpaired.py; "
        "paired top-1 on the test split, as a ratio to supervised Procrustes on the same "
        "items paired (X->Y / Y->X); a pair with too few training items has no cell at the "
        "larger sizes. A practical ceiling: starts near the right map settle within a few "
        "points of it. The second table compares k-means partitions of the disjoint halves "
        "(best of 10 runs each): one model's own two halves, and the two models' halves "
        "through the true map (see partitions()).",
    )


if __name__ == "__main__":
    main()

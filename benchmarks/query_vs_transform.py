"""Each aligner's default against its explicit settings, by ``transform`` and by the query path.

For every real pair (the MNIST features of ``sklearn_compat.datasets`` and the text and word
pairs cached by ``benchmarks/pairs/build_pairs.py``; the held-aside ``heldout_*`` pairs are
skipped, they are reported by ``alignment_table.py --heldout-root``) and every aligner that
centres or rescales, fit each explicit setting that the aligner's ``"auto"`` chooses among, and the
default, on the train rows, then print for each:

- ``transform``: top-1 of ``transform(X_test)`` by cosine against the raw gallery (the test
  Y rows; for the word pair the whole French gallery, any gold translation counts);
- ``query``: top-1 of ``AlignedNeighbors(aligner)`` with its defaults over the same gallery;
- ``query - transform``: the query path must not rank below the map it serves (issue 22:
  >= -0.005);
- the fit time, and for the default the factor over the mean explicit fit (the cost of
  choosing).

Then one summary line per pair and aligner: the default's transform top-1 minus the best
explicit setting's (issue 22: >= -0.005).

Usage::

    python benchmarks/query_vs_transform.py --threads 1
    python benchmarks/query_vs_transform.py --only mnist --estimators RCSLS Lambda

The trained aligners use ``--max-epochs`` (60 by default, to keep the run in minutes; their
own default is 200 with early stopping).
"""

import argparse
import time
import warnings
from pathlib import Path

import _common
import numpy as np
import torch
from alignment_table import load_pairs

from sklearn_compat import (
    AffineAligner,
    AlignedNeighbors,
    LambdaOrthAligner,
    OrthogonalProcrustesAligner,
    RCSLSAligner,
    RefinedProcrustesAligner,
    ResidualAdapterAligner,
    WhitenedProcrustesAligner,
)


def estimators(max_epochs):
    """``{name: ({explicit label: factory}, default factory, chosen(fitted) -> str)}``."""
    epochs = {"max_epochs": max_epochs, "random_state": 0}

    def whitened(c, n):
        return lambda: WhitenedProcrustesAligner(center=c, normalize=n)

    return {
        "Procrustes": (
            {
                "uncentred": lambda: OrthogonalProcrustesAligner(center=False, scale=False),
                "centred s=1": lambda: OrthogonalProcrustesAligner(center=True, scale=False),
                "centred Umeyama": lambda: OrthogonalProcrustesAligner(center=True, scale=True),
                "centred spread": lambda: OrthogonalProcrustesAligner(center=True, scale="spread"),
            },
            OrthogonalProcrustesAligner,
            lambda e: f"center={e.center_}, scale={e.scale_mode_!r}",
        ),
        "Affine": (
            {
                "intercept": lambda: AffineAligner(fit_intercept=True),
                "no intercept": lambda: AffineAligner(fit_intercept=False),
            },
            AffineAligner,
            lambda e: f"fit_intercept={e.center_}",
        ),
        "Whitened": (
            {
                f"{'unit' if n else 'raw'} {'centred' if c else 'uncentred'}": whitened(c, n)
                for n in (True, False)
                for c in (True, False)
            },
            WhitenedProcrustesAligner,
            lambda e: f"center={e.center_}, normalize={e.normalize_}",
        ),
        "Refined": (
            {
                f"{'unit' if n else 'raw'} {'centred' if c else 'uncentred'}": (
                    lambda c=c, n=n: RefinedProcrustesAligner(whitened(c, n)())
                )
                for n in (True, False)
                for c in (True, False)
            },
            RefinedProcrustesAligner,
            lambda e: f"center={e.center_}, normalize={e.normalize_}",
        ),
        "RCSLS": (
            {
                "uncentred": lambda: RCSLSAligner(center=False, random_state=0),
                "centred": lambda: RCSLSAligner(center=True, random_state=0),
            },
            lambda: RCSLSAligner(random_state=0),
            lambda e: f"center={e.center_}",
        ),
        "LambdaOrth": (
            {
                "intercept": lambda: LambdaOrthAligner(fit_intercept=True, **epochs),
                "no intercept": lambda: LambdaOrthAligner(fit_intercept=False, **epochs),
            },
            lambda: LambdaOrthAligner(**epochs),
            lambda e: f"fit_intercept={e.center_}",
        ),
        "Residual": (
            {
                "intercept": lambda: ResidualAdapterAligner(fit_intercept=True, **epochs),
                "no intercept": lambda: ResidualAdapterAligner(fit_intercept=False, **epochs),
            },
            lambda: ResidualAdapterAligner(**epochs),
            lambda e: f"fit_intercept={e.center_}",
        ),
    }


def hits(best, pair):
    """Share of queries whose top row is right (its own row, or a gold translation)."""
    if "gallery" in pair:
        return float(
            np.mean([t in set(g[g >= 0]) for t, g in zip(best, pair["gold"], strict=True)])
        )
    return float(np.mean(best == np.arange(len(best))))


def unit(A):
    A = torch.as_tensor(np.asarray(A), dtype=torch.float32)
    return torch.nn.functional.normalize(A, dim=1)


def transform_top1(est, pair):
    """Top-1 of ``transform`` by cosine against the raw gallery."""
    gallery = pair.get("gallery", pair["Y_test"])
    best = (unit(est.transform(pair["X_test"])) @ unit(gallery).T).argmax(dim=1).numpy()
    return hits(best, pair)


def query_top1(est, pair):
    """Top-1 of ``AlignedNeighbors(est)`` with its defaults over the same gallery."""
    gallery = pair.get("gallery", pair["Y_test"])
    search = AlignedNeighbors(est, n_neighbors=1, device="cpu").fit(gallery)
    return hits(search.kneighbors(pair["X_test"], return_distance=False)[:, 0], pair), search


def fit(make, pair):
    start = time.perf_counter()
    with warnings.catch_warnings():
        # Explicit settings may draw advice (e.g. an uncentred map of an anisotropic
        # pair); the defaults are run with warnings as errors below.
        warnings.simplefilter("ignore")
        est = make().fit(pair["X_train"], pair["Y_train"])
    return est, time.perf_counter() - start


TITLE = "The defaults of the aligners: transform, query path and the cost of choosing"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs-root", default=str(Path(__file__).parent / "pairs" / "cache"))
    parser.add_argument("--only", nargs="*", help="pair names (substrings) to run")
    parser.add_argument("--estimators", nargs="*", help="estimator names (substrings)")
    parser.add_argument("--max-epochs", type=int, default=60)
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "defaults")
    parser.add_argument("--no-mnist", action="store_true")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    torch.manual_seed(0)
    pairs = [
        (name, pair)
        for name, pair in load_pairs(args.pairs_root, mnist=not args.no_mnist)
        if not name.startswith("heldout_")
        and (not args.only or any(part in name for part in args.only))
    ]
    specs = {
        name: spec
        for name, spec in estimators(args.max_epochs).items()
        if not args.estimators or any(part in name for part in args.estimators)
    }
    print("| pair | estimator | setting | transform | query | query - transform | fit s |")
    print("|---|---|---|---|---|---|---|")
    summary = []
    for pair_name, pair in pairs:
        for name, (settings, default, chosen) in specs.items():
            explicit, times = {}, []
            for label, make in settings.items():
                est, seconds = fit(make, pair)
                explicit[label] = transform_top1(est, pair)
                query, _ = query_top1(est, pair)
                times.append(seconds)
                print(
                    f"| {pair_name} | {name} | {label} | {explicit[label]:.3f} | {query:.3f} "
                    f"| {query - explicit[label]:+.3f} | {seconds:.1f} |",
                    flush=True,
                )
            start = time.perf_counter()
            with warnings.catch_warnings():
                # Default fits on ordinary data must not draw any warning (issue 22).
                warnings.simplefilter("error")
                est = default().fit(pair["X_train"], pair["Y_train"])
            seconds = time.perf_counter() - start
            top1 = transform_top1(est, pair)
            query, search = query_top1(est, pair)
            form = f"{'centred' if search.centered_ else 'raw'}, csls_k={search.csls_k_}"
            print(
                f"| {pair_name} | {name} | **default** ({chosen(est)}; query {form}) | "
                f"**{top1:.3f}** | **{query:.3f}** | {query - top1:+.3f} | {seconds:.1f} "
                f"({seconds / np.mean(times):.2f}x) |",
                flush=True,
            )
            best = max(explicit, key=explicit.get)
            summary.append(
                (pair_name, name, top1, best, explicit[best], query, seconds / np.mean(times))
            )
    print(
        "\n| pair | estimator | default | best explicit | default - best | query | "
        "query - default | fit cost |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for pair_name, name, top1, best, value, query, factor in summary:
        rows.append(
            [
                pair_name,
                name,
                f"{top1:.3f}",
                f"{best} {value:.3f}",
                f"{top1 - value:+.3f}",
                f"{query:.3f}",
                f"{query - top1:+.3f}",
                f"{factor:.2f}x",
            ]
        )
        print("| " + " | ".join(rows[-1]) + " |")
    columns = ["pair", "estimator", "default", "best explicit", "default - best", "query"]
    _common.write_results(
        args,
        "defaults",
        TITLE,
        [_common.table("", columns + ["query - default", "fit cost"], rows)],
        notes="Top-1 of `transform(X_test)` by cosine against the raw test gallery, and of "
        "`AlignedNeighbors(aligner)` with its defaults; fit cost is the default fit's wall "
        "time over the mean explicit fit's. Default fits run with warnings as errors.",
    )


if __name__ == "__main__":
    main()

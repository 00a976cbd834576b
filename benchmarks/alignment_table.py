"""Every public aligner, with its defaults and its best documented setting, on real pairs.

Pairs ("new -> old": X is the new model's embeddings, Y the old model's, fitted on the
train rows, measured on the others):

- ``mnist cnn_s0->cnn_s1`` and ``mnist cnn_s0->mlp_s0``: the shared MNIST features
  (``shared/data/mnist5k_features.npz``, 4,000 / 1,000 split of its README);
- every text pair that ``benchmarks/pairs/build_pairs.py`` (branch ``pairs``) wrote to
  its cache, when present (``--pairs-root``): sentence-model pairs on WordNet text with
  ``split`` as the train mask, and the word-translation pair ``muse_en_fr`` (MUSE-style
  5,000 / 1,500 split), where a query is right when its nearest row of the whole French
  ``gallery`` is one of its ``gold_rows``.

Columns: ``P@1`` (paired top-1 cosine retrieval of ``transform(X_test)`` against the test
Y rows, or against the gallery for the word pair), ``CSLS@1`` (the same ranked by CSLS,
k = 10, Conneau et al. 2018), ``R@10`` (the partner among the 10 nearest), ``NP@10``
(neighbourhood preservation of the new model's own 10-neighbourhoods, 1 for a map that
keeps cosines), the query path (top-1 of ``AlignedNeighbors(aligner)`` with its defaults:
centred gallery, CSLS with the crowding measured among the gallery) and the fit time
(seconds, this shared box).

Rows marked ``(+unpaired)`` (``RefinedProcrustesAligner``, ``RCSLSAligner``) also get the
test rows of both sides as *unpaired* rows (the targets shuffled; for the word pair the
whole French gallery): transductive, as MUSE's refinement and RCSLS's neighbour pools use
the whole vocabulary.

Run ``python benchmarks/alignment_table.py`` (several minutes on a 2-core CPU: the
trained aligners dominate; ``--fast`` skips LambdaOrthAlignerCV and uses fewer epochs).
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from sklearn_compat import (
    AffineAligner,
    AlignedNeighbors,
    LambdaOrthAligner,
    OrthogonalProcrustesAligner,
    RCSLSAligner,
    ResidualAdapterAligner,
    WhitenedProcrustesAligner,
)
from sklearn_compat._core.csls import csls_nearest
from sklearn_compat.metrics import paired_topk_accuracy

HERE = Path(__file__).resolve().parent
MNIST_PAIRS = [("cnn_s0", "cnn_s1"), ("cnn_s0", "mlp_s0")]


def find_upwards(relative):
    for folder in HERE.parents:
        candidate = folder / relative
        if candidate.exists():
            return candidate
    return None


def load_pairs(pairs_root, mnist=True):
    """[(name, dict)] with X_train, Y_train, X_test, Y_test and optionally gallery/gold."""
    out = []
    mnist = find_upwards("shared/data/mnist5k_features.npz") if mnist else None
    if mnist is not None:
        d = np.load(mnist)
        for new, old in MNIST_PAIRS:
            X, Y = d[new], d[old]
            out.append(
                (
                    f"mnist {new}->{old}",
                    {
                        "X_train": X[d["train_idx"]],
                        "Y_train": Y[d["train_idx"]],
                        "X_test": X[d["test_idx"]],
                        "Y_test": Y[d["test_idx"]],
                    },
                )
            )
    root = Path(pairs_root) if pairs_root else HERE / "pairs" / "cache"
    found = sorted(Path(root).glob("*.npz")) if root is not None else []
    if not found:
        print(f"(no text pairs under {root}; build them with benchmarks/pairs/build_pairs.py)")
    for path in found:
        name = path.stem
        with np.load(path, allow_pickle=False) as z:
            d = {k: z[k] for k in z.files}
        train = d["split"]
        pair = {
            "X_train": d["X"][train],
            "Y_train": d["Y"][train],
            "X_test": d["X"][~train],
            "Y_test": d["Y"][~train],
            "meta": json.loads(str(d["meta"])),
        }
        if "gallery" in d:
            pair["gallery"] = d["gallery"]
            pair["gold"] = d["gold_rows"][~train]
        out.append((name, pair))
    return out


def estimators(fast, trained):
    """(name, default, {setting label: factory}, chosen(fitted default) -> str) per aligner.

    Each estimator's default is fitted as a user would (no parameters beyond a seed), and
    every setting its ``"auto"`` parameters choose among is fitted explicitly beside it.
    """
    epochs = {"max_epochs": 60} if fast else {}

    def procrustes(**kw):
        return lambda: OrthogonalProcrustesAligner(**kw)

    rows = [
        (
            "OrthogonalProcrustesAligner",
            procrustes(),
            {
                "uncentred": procrustes(center=False, scale=False),
                "centred s=1": procrustes(center=True, scale=False),
                "centred Umeyama": procrustes(center=True, scale=True),
                "centred spread": procrustes(center=True, scale="spread"),
            },
            lambda e: f"center={e.center_}, scale={e.scale_mode_!r}",
        ),
        (
            "AffineAligner",
            lambda: AffineAligner(),
            {
                "intercept": lambda: AffineAligner(fit_intercept=True),
                "no intercept": lambda: AffineAligner(fit_intercept=False),
            },
            lambda e: f"fit_intercept={e.center_}",
        ),
        (
            "WhitenedProcrustesAligner",
            lambda: WhitenedProcrustesAligner(),
            {
                f"{'unit' if n else 'raw'} rows, {'centred' if c else 'uncentred'}": (
                    lambda c=c, n=n: WhitenedProcrustesAligner(center=c, normalize=n)
                )
                for n in (True, False)
                for c in (True, False)
            },
            lambda e: f"center={e.center_}, normalize={e.normalize_}",
        ),
        (
            "RCSLSAligner",
            lambda: RCSLSAligner(random_state=0),
            {
                "uncentred": lambda: RCSLSAligner(center=False, random_state=0),
                "centred": lambda: RCSLSAligner(center=True, random_state=0),
            },
            lambda e: f"center={getattr(e, 'center_', e.center)}",
        ),
    ]
    if trained:
        for name, cls in (
            ("LambdaOrthAligner", LambdaOrthAligner),
            ("ResidualAdapterAligner", ResidualAdapterAligner),
        ):
            rows.append(
                (
                    name,
                    lambda cls=cls: cls(random_state=0, **epochs),
                    {
                        "intercept": lambda cls=cls: cls(
                            fit_intercept=True, random_state=0, **epochs
                        ),
                        "no intercept": lambda cls=cls: cls(
                            fit_intercept=False, random_state=0, **epochs
                        ),
                    },
                    lambda e: f"fit_intercept={e.fit_intercept}",
                )
            )
    return rows


def gallery_scores(Z, gallery, gold, device):
    """P@1, CSLS@1 and R@10 against a gallery with sets of gold rows per query."""
    Zt = torch.nn.functional.normalize(torch.as_tensor(Z, dtype=torch.float32), dim=1)
    Gt = torch.nn.functional.normalize(torch.as_tensor(gallery, dtype=torch.float32), dim=1)
    top = torch.topk(Zt @ Gt.T, 10, dim=1).indices.numpy()
    gold_sets = [set(g[g >= 0]) for g in gold]
    p1 = np.mean([t[0] in g for t, g in zip(top, gold_sets, strict=True)])
    r10 = np.mean([bool(g.intersection(t)) for t, g in zip(top, gold_sets, strict=True)])
    best = csls_nearest(Z, gallery, 10, device=device)
    csls = np.mean([b in g for b, g in zip(best, gold_sets, strict=True)])
    return p1, csls, r10


def query_path_top1(est, pair, device):
    """Top-1 of ``AlignedNeighbors`` with its defaults over the test gallery (or the
    word pair's whole gallery, where any gold row counts)."""
    gallery = pair.get("gallery", pair["Y_test"])
    search = AlignedNeighbors(est, n_neighbors=1, device=device).fit(gallery)
    top = search.kneighbors(pair["X_test"], return_distance=False)[:, 0]
    if "gallery" in pair:
        return float(
            np.mean([t in set(g[g >= 0]) for t, g in zip(top, pair["gold"], strict=True)])
        )
    return float(np.mean(top == np.arange(len(top))))


def transform_top1(est, pair, device):
    """P@1 of ``est.transform`` against the pair's gallery (test Y rows or the words)."""
    Z = est.transform(pair["X_test"])
    if "gallery" in pair:
        return float(gallery_scores(Z, pair["gallery"], pair["gold"], device)[0])
    return float(paired_topk_accuracy(Z, pair["Y_test"], device=device))


def measure(name, default, settings, chosen, pair, device):
    """Every setting's P@1, the default's P@1 and query path, and what it chose."""
    row = {}
    for label, make in settings.items():
        start = time.perf_counter()
        est = make().fit(pair["X_train"], pair["Y_train"])
        row[label] = transform_top1(est, pair, device)
        row[f"{label} s"] = time.perf_counter() - start
    start = time.perf_counter()
    est = default().fit(pair["X_train"], pair["Y_train"])
    row["fit s"] = time.perf_counter() - start
    row["default"] = transform_top1(est, pair, device)
    row["query path"] = query_path_top1(est, pair, device)
    row["chosen"] = chosen(est)
    return row


def print_estimator_table(name, settings, results):
    labels = list(settings)
    print(f"\n#### {name}\n")
    print(
        "| pair | "
        + " | ".join(labels)
        + " | default | chosen | default - best | query path | query - transform |"
    )
    print("|---" * (len(labels) + 6) + "|")
    for pair_name, row in results.items():
        best = max(row[label] for label in labels)
        cells = " | ".join(f"{row[label]:.3f}" for label in labels)
        print(
            f"| {pair_name} | {cells} | **{row['default']:.3f}** | {row['chosen']} | "
            f"{row['default'] - best:+.3f} | {row['query path']:.3f} | "
            f"{row['query path'] - row['default']:+.3f} |",
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs-root", default=None, help="folder of the text pairs' .npz")
    parser.add_argument(
        "--heldout-root",
        default=None,
        help="folder of the held-aside pairs (benchmarks/pairs/build_heldout_pairs.py), "
        "reported separately",
    )
    parser.add_argument("--fast", action="store_true", help="fewer epochs for the trained")
    parser.add_argument("--trained", action="store_true", help="also LambdaOrth, Residual")
    parser.add_argument("--only", nargs="*", help="pair names (substrings) to run")
    parser.add_argument("--estimators", nargs="*", help="estimator names (substrings)")
    parser.add_argument("--no-mnist", action="store_true", help="skip the MNIST pairs")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    groups = [("design pairs", load_pairs(args.pairs_root, mnist=not args.no_mnist))]
    if args.heldout_root:
        groups.append(("held-aside pairs", load_pairs(args.heldout_root, mnist=False)))
    specs = [
        spec
        for spec in estimators(args.fast, args.trained)
        if not args.estimators or any(part in spec[0] for part in args.estimators)
    ]
    for group, pairs in groups:
        pairs = [(n, p) for n, p in pairs if not args.only or any(s in n for s in args.only)]
        print(f"\n### {group}: " + ", ".join(n for n, _ in pairs))
        for name, default, settings, chosen in specs:
            results = {}
            for pair_name, pair in pairs:
                results[pair_name] = measure(name, default, settings, chosen, pair, args.device)
            print_estimator_table(name, settings, results)


if __name__ == "__main__":
    main()

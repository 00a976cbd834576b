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
    LambdaOrthAlignerCV,
    OrthogonalProcrustesAligner,
    RCSLSAligner,
    RefinedProcrustesAligner,
    ResidualAdapterAligner,
    WhitenedProcrustesAligner,
)
from sklearn_compat._core.csls import csls_nearest
from sklearn_compat.metrics import neighbourhood_preservation, paired_topk_accuracy

HERE = Path(__file__).resolve().parent
MNIST_PAIRS = [("cnn_s0", "cnn_s1"), ("cnn_s0", "mlp_s0")]


def find_upwards(relative):
    for folder in HERE.parents:
        candidate = folder / relative
        if candidate.exists():
            return candidate
    return None


def load_pairs(pairs_root):
    """[(name, dict)] with X_train, Y_train, X_test, Y_test and optionally gallery/gold."""
    out = []
    mnist = find_upwards("shared/data/mnist5k_features.npz")
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
    root = Path(pairs_root) if pairs_root else find_upwards("wt-pairs/benchmarks/pairs/cache")
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


def aligners(fast):
    epochs = {"max_epochs": 60} if fast else {}
    rows = [
        (
            "Procrustes 0.1.0 (center=False, scale=False)",
            lambda: OrthogonalProcrustesAligner(center=False, scale=False),
        ),
        ("Procrustes scale=False", lambda: OrthogonalProcrustesAligner(scale=False)),
        ("Procrustes", lambda: OrthogonalProcrustesAligner()),
        ("Affine", lambda: AffineAligner()),
        ("Affine rank=32", lambda: AffineAligner(rank=32)),
        ("Whitened", lambda: WhitenedProcrustesAligner()),
        ("Whitened reweight=0.5", lambda: WhitenedProcrustesAligner(reweight=0.5)),
        ("Refined (+unpaired)", lambda: RefinedProcrustesAligner()),
        (
            "Refined MUSE (+unpaired)",
            lambda: RefinedProcrustesAligner(OrthogonalProcrustesAligner()),
        ),
        ("RCSLS", lambda: RCSLSAligner(random_state=0)),
        ("RCSLS (+unpaired)", lambda: RCSLSAligner(random_state=0)),
        ("RCSLS max_iter=32", lambda: RCSLSAligner(max_iter=32, random_state=0)),
        ("LambdaOrth", lambda: LambdaOrthAligner(random_state=0, **epochs)),
        ("LambdaOrth lam=0", lambda: LambdaOrthAligner(lam=0.0, random_state=0, **epochs)),
        ("ResidualAdapter", lambda: ResidualAdapterAligner(random_state=0, **epochs)),
        (
            "ResidualAdapter lam=0",
            lambda: ResidualAdapterAligner(lam=0.0, random_state=0, **epochs),
        ),
    ]
    if not fast:
        at = [label for label, _ in rows].index("LambdaOrth")
        rows.insert(at, ("LambdaOrthCV", lambda: LambdaOrthAlignerCV()))
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


def evaluate(label, make, pair, device, rng):
    est = make()
    start = time.perf_counter()
    if label.endswith("(+unpaired)"):
        extra_y = pair.get("gallery")
        if extra_y is None:
            extra_y = pair["Y_test"][rng.permutation(len(pair["Y_test"]))]
        est.fit(pair["X_train"], pair["Y_train"], X_unpaired=pair["X_test"], Y_unpaired=extra_y)
    else:
        est.fit(pair["X_train"], pair["Y_train"])
    seconds = time.perf_counter() - start
    Z = est.transform(pair["X_test"])
    if "gallery" in pair:
        p1, csls, r10 = gallery_scores(Z, pair["gallery"], pair["gold"], device)
    else:
        Y = pair["Y_test"]
        p1 = paired_topk_accuracy(Z, Y, device=device)
        csls = paired_topk_accuracy(Z, Y, csls_k=10, device=device)
        r10 = paired_topk_accuracy(Z, Y, k=10, device=device)
    keep = neighbourhood_preservation(pair["X_test"], Z, k=10, device=device)
    path = query_path_top1(est, pair, device)
    return {"P@1": p1, "CSLS@1": csls, "R@10": r10, "NP@10": keep, "AN@1": path, "fit s": seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs-root", default=None, help="folder of the text pairs' .npz")
    parser.add_argument("--fast", action="store_true", help="skip the CV, fewer epochs")
    parser.add_argument("--only", nargs="*", help="pair names (substrings) to run")
    parser.add_argument("--skip", nargs="*", default=[], help="aligner labels to leave out")
    parser.add_argument("--rows", nargs="*", help="only the aligners whose labels start so")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    for name, pair in load_pairs(args.pairs_root):
        if args.only and not any(part in name for part in args.only):
            continue
        shapes = f"X {pair['X_train'].shape[1]}-d, Y {pair['Y_train'].shape[1]}-d"
        print(
            f"\n### {name} ({len(pair['X_train'])} train / {len(pair['X_test'])} test, {shapes})\n"
        )
        print("| aligner | P@1 | CSLS@1 | R@10 | NP@10 | query path @1 | fit s |")
        print("|---|---|---|---|---|---|---|")
        results = {}
        for label, make in aligners(args.fast):
            if label in args.skip:
                continue
            if args.rows and not any(label.startswith(part) for part in args.rows):
                continue
            row = evaluate(label, make, pair, args.device, np.random.default_rng(0))
            results[label] = row
            print(
                f"| {label} | {row['P@1']:.3f} | {row['CSLS@1']:.3f} | {row['R@10']:.3f} | "
                f"{row['NP@10']:.3f} | {row['AN@1']:.3f} | {row['fit s']:.1f} |",
                flush=True,
            )
        if "Procrustes" not in results:
            continue
        plain = results["Procrustes"]["P@1"]  # the default
        best_procrustes = max(
            results[label]["P@1"] for label in results if label.startswith("Procrustes")
        )
        best_label = max(results, key=lambda k: results[k]["P@1"])
        print(
            f"\nbest P@1: {best_label} {results[best_label]['P@1']:.3f}; "
            f"against default Procrustes {results[best_label]['P@1'] - plain:+.3f}, "
            f"against the better Procrustes setting "
            f"{results[best_label]['P@1'] - best_procrustes:+.3f}"
        )


if __name__ == "__main__":
    main()

"""Zero-shot stitching: normalisations of the relative vectors beyond ``normalize``'s
options, and the statistics a data-driven rule could read (issue 22).

Same protocol as ``benchmarks/relative_stitching.py`` (random anchors, centred cosine,
``n_anchors="auto"``, a ``LogisticRegression(max_iter=1000)`` head trained on Y's relative
train vectors and applied to X's relative test vectors, mean over anchor seeds), but the
relative vectors are computed once per seed with ``normalize=None`` and post-processed:

- ``None`` / ``l2``: the encoder's own options (``l2``: unit rows on both sides);
- ``rms1``: each space's vectors divided by their RMS row norm on the fitted rows;
- X-side only (what ``rebase`` alone could do, leaving Y's vectors and its head as they
  are): ``xmatch`` (X's vectors scaled to Y's RMS row norm), ``xrow`` (X's rows to unit
  length, then to Y's RMS norm), ``colmatch`` (each X column standardised, then given Y's
  column mean and deviation, the moment matching of Maiorca et al., "Latent Space
  Translation via Semantic Alignment", NeurIPS 2023), ``colmean`` (X's column means moved
  to Y's), ``colmean_scale`` (that, plus one global scale to Y's centred RMS norm);
- ``cv rule``: ``l2`` where the coefficient of variation of the fitted space's relative
  row norms exceeds ``--cv-threshold``, else None (a rule found after the held-aside pairs
  were measured; shown, not adopted).

Statistics per space (fitted rows): RMS row norm of the relative vectors and their
coefficient of variation.  Design and held-aside pairs are printed apart.

    python benchmarks/relative_stitching_variants.py --threads 1
"""

import argparse
import sys
import time
from pathlib import Path

import _common
import numpy as np
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from sklearn_compat import RelativeAnchorEncoder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from relative_stitching import labelled_pair_groups  # noqa: E402

VARIANTS = ["None", "l2", "rms1", "xmatch", "xrow", "colmatch", "colmean", "colmean_scale"]
TOLERANCE = 0.01


def unit(R):
    return R / np.maximum(np.linalg.norm(R, axis=1, keepdims=True), 1e-30)


def rms(R):
    return float(np.sqrt(np.mean(np.einsum("ij,ij->i", R, R))))


def one_seed(pair, seed):
    enc = RelativeAnchorEncoder(random_state=seed, normalize=None, device="cpu")
    enc.fit(pair["Y_train"])
    other = enc.rebase(pair["X_train"])
    RY = enc.transform(pair["Y_train"]).astype(np.float64)
    RX = other.transform(pair["X_train"]).astype(np.float64)
    Rt = other.transform(pair["X_test"]).astype(np.float64)
    y, y_test = pair["labels_train"], pair["labels_test"]
    norms_y = np.linalg.norm(RY, axis=1)
    stats = {"Y rms": rms(RY), "X rms": rms(RX), "Y cv": float(norms_y.std() / norms_y.mean())}
    raw = LogisticRegression(max_iter=1000).fit(RY, y)
    l2 = LogisticRegression(max_iter=1000).fit(unit(RY), y)
    rms1 = LogisticRegression(max_iter=1000).fit(RY / stats["Y rms"], y)
    mx, my = RX.mean(axis=0), RY.mean(axis=0)
    spread = rms(RY - my) / rms(RX - mx)
    acc = {
        "None": raw.score(Rt, y_test),
        "l2": l2.score(unit(Rt), y_test),
        "rms1": rms1.score(Rt / stats["X rms"], y_test),
        "xmatch": raw.score(Rt * stats["Y rms"] / stats["X rms"], y_test),
        "xrow": raw.score(unit(Rt) * stats["Y rms"], y_test),
        "colmatch": raw.score((Rt - mx) / RX.std(axis=0) * RY.std(axis=0) + my, y_test),
        "colmean": raw.score(Rt - mx + my, y_test),
        "colmean_scale": raw.score((Rt - mx) * spread + my, y_test),
    }
    return {k: float(v) for k, v in acc.items()}, stats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="*", help="pair names (substrings) to run")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--cv-threshold", type=float, default=0.12)
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "relative_stitching_variants")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    start = time.perf_counter()
    cols = [*VARIANTS, "cv rule"]
    table = []
    with threadpool_limits(limits=args.threads):
        for group, pairs in labelled_pair_groups(args.pairs):
            print(f"\n### {group}\n")
            print("| pair | " + " | ".join(cols) + " | Y cv | X rms / Y rms |")
            print("|---" * (len(cols) + 3) + "|")
            for name, pair in pairs:
                runs = [one_seed(pair, s) for s in args.seeds]
                for acc, stats in runs:
                    acc["cv rule"] = (
                        acc["l2"] if stats["Y cv"] > args.cv_threshold else acc["None"]
                    )
                mean = {c: np.mean([a[c] for a, _ in runs]) for c in cols}
                best = max(mean["None"], mean["l2"])
                cells = " | ".join(
                    f"{mean[c]:.3f}" + (" FAIL" if mean[c] < best - TOLERANCE else "")
                    for c in cols
                )
                cv = "/".join(f"{s['Y cv']:.3f}" for _, s in runs)
                ratio = np.mean([s["X rms"] / s["Y rms"] for _, s in runs])
                print(f"| {name} | {cells} | {cv} | {ratio:.2f} |", flush=True)
                table.append([name, *cells.split(" | "), cv, f"{ratio:.2f}"])
    print(
        f"\nFAIL: below the better of None and 'l2' by more than {TOLERANCE}; seeds "
        f"{args.seeds}; {time.perf_counter() - start:.0f} s"
    )
    _common.write_results(
        args,
        "relative_stitching_variants",
        "Zero-shot stitching: rules tried for a data-driven `normalize`",
        [_common.table("", ["pair", *cols, "Y cv", "X rms / Y rms"], table)],
        notes="Accuracy of the `LogisticRegression` head, mean of anchor seeds "
        f"{', '.join(map(str, args.seeds))}. FAIL: more than {TOLERANCE} below the better of "
        f'None and `"l2"`. The cv rule\'s threshold: {args.cv_threshold:g}.',
    )


if __name__ == "__main__":
    main()

"""Does refinement reorder ``RefinedProcrustesAligner``'s inner settings? (issue 22)

Per real pair (the layout of ``benchmarks/alignment_table.py``, every training row
paired) and per explicit inner Whitened setting (``center`` x ``normalize``): the held-out
paired top-1 over the five folds of ``auto_settings.holdout_folds`` (each fold's map
refined on the other training pairs) after 0, 1, 2 and 5 rounds, the CPU seconds those
fold fits took, and the test top-1 of the full fit (5 rounds, all training pairs).

    python benchmarks/bench_refined_rounds.py            # every pair (about 25 min at load 3)
    python benchmarks/bench_refined_rounds.py mnist heldout_example
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import _common
import numpy as np

from sklearn_compat import RefinedProcrustesAligner, WhitenedProcrustesAligner
from sklearn_compat._core import auto_settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alignment_table import load_all_pairs, transform_top1  # noqa: E402

ROUNDS = (0, 1, 2, 5)


def refined(center, normalize, rounds=5):
    inner = WhitenedProcrustesAligner(center=center, normalize=normalize, device="cpu")
    return RefinedProcrustesAligner(inner, n_refinements=rounds, device="cpu")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="pair names (substrings) to run")
    _common.add_threads_argument(parser, default=1)
    _common.add_json_arguments(parser, "refined_rounds")
    args = parser.parse_args(argv)
    names = args.names
    _common.limit_threads(args.threads)
    warnings.simplefilter("ignore")
    out = {}
    for pairs in load_all_pairs().values():
        for name, pair in pairs:
            if names and not any(s in name for s in names):
                continue
            X, Y = pair["X_train"], pair["Y_train"]
            folds = auto_settings.holdout_folds(len(X), None)
            out[name] = {}
            for center in (True, False):
                for normalize in (True, False):
                    scores = {r: [] for r in ROUNDS}
                    seconds = dict.fromkeys(ROUNDS, 0.0)
                    for rows in folds:
                        keep = np.setdiff1d(np.arange(len(X)), rows)
                        for r in ROUNDS:
                            start = time.process_time()
                            est = refined(center, normalize, r).fit(X[keep], Y[keep])
                            seconds[r] += time.process_time() - start
                            top1 = auto_settings.paired_top1(est.transform(X[rows]), Y[rows])
                            scores[r].append(top1)
                    full = refined(center, normalize).fit(X, Y)
                    row = {
                        "held out": {r: round(float(np.mean(scores[r])), 4) for r in ROUNDS},
                        "fold fits s": {r: round(seconds[r], 1) for r in ROUNDS},
                        "test": round(transform_top1(full, pair), 4),
                    }
                    label = f"center={center}, normalize={normalize}"
                    out[name][label] = row
                    print(name, label, row, flush=True)
    print(json.dumps(out, indent=1))
    labels = list(dict.fromkeys(label for by_label in out.values() for label in by_label))
    rows = [
        [
            name,
            *(
                " / ".join(f"{v:.4f}" for v in by_label[label]["held out"].values())
                + f" / **{by_label[label]['test']:.3f}**"
                for label in labels
            ),
        ]
        for name, by_label in out.items()
    ]
    _common.write_results(
        args,
        "refined_rounds",
        "RefinedProcrustesAligner: the inner setting after refinement",
        [_common.table("", ["pair", *labels], rows)],
        notes="Held-out paired top-1 over the five folds of the training pairs (each fold's "
        "map refined on the other pairs) after "
        + " / ".join(map(str, ROUNDS))
        + " rounds, then (bold) the test top-1 of the full fit with that inner Whitened "
        "setting.",
    )


if __name__ == "__main__":
    main()

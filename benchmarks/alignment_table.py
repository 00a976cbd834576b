"""Each aligner's default against every explicit setting, on every real pair (issue 22).

Run (one core, every pair, every estimator; the runtime is printed at the end)::

    python benchmarks/alignment_table.py --threads 1 --raw-json table.json

It writes its tables to ``benchmarks/results/alignment_table.json`` (``--json``), which
``render_results.py`` puts on the results page.  On the shared 2-core box a full run took
about 10 minutes of CPU time (29 min of wall time at load average 10).

Pairs ("new -> old": X is the new model's embeddings, Y the old model's; every map is
fitted on the train rows and measured on the others):

- ``mnist cnn_s0->cnn_s1`` and ``mnist cnn_s0->mlp_s0``: the shared MNIST features
  (``sklearn_compat.datasets.load_mnist_features()``) with L2-normalised rows and the 4,000 / 1,000
  split, as in ``benchmarks/mnist_alignment_table.py``;
- every pair that ``benchmarks/pairs/build_pairs.py`` wrote to ``benchmarks/pairs/cache``
  (``--pairs-root``): sentence-model pairs on WordNet text with ``split`` as the train
  mask, and the word-translation pair ``muse_en_fr``, where a query is right when its
  nearest row of the whole 20,000-word French ``gallery`` is one of its ``gold_rows``;
- the held-aside pairs ``heldout_*`` of ``benchmarks/pairs/build_heldout_pairs.py`` (same
  folder), which the default rules were not designed on: reported in their own section.

Per estimator, one column per explicit setting of the parameters that centre, rescale or
normalise (Procrustes ``center`` x ``scale``, Affine ``fit_intercept``, Whitened ``center``
x ``normalize``, Refined its inner Whitened map's, RCSLS ``center``, LambdaOrth and
Residual ``fit_intercept``), plus every other parameter whose default is ``"auto"`` and
whose explicit values can be listed from its constraints (booleans and string options):
so a new ``"auto"`` default is picked up as it lands.  Each cell is ``P@1``: paired top-1
cosine retrieval of ``transform(X_test)`` among the test Y rows (the word pair: among the
whole gallery).  Then the default (fitted as a user would: no parameter but a seed for the
trained ones, and ``--epochs``), what it chose (its fitted ``center_``, ``scale_mode_``,
``normalize_``, ...), and the query path: top-1 of ``AlignedNeighbors(default)`` with its
defaults over the same gallery.

Checks of issue 22, per row: ``default >= best setting - 0.005`` and
``query path >= default transform - 0.005``; a summary line counts them.

``--versus-procrustes`` measures instead each estimator's default against
``OrthogonalProcrustesAligner()`` on the same test rows, in both directions of every pair
(``A -> B`` and ``B -> A``; the word pair only as built), with the paired standard error of
the per-row difference: issue 45's check is ``default >= Procrustes - 2 SE`` (Affine
excepted: its loss of own geometry is its documented trade-off), and what each default's
``"auto"`` step decided (``step_choice_``: kept or not).  It writes
``benchmarks/results/alignment_table_procrustes.json``, the held-aside pairs (which the
step rule was not designed on) in a table of their own.

Options: ``--pairs`` / ``--estimators`` (name substrings), ``--threads`` (torch and BLAS),
``--epochs`` (``max_epochs`` of LambdaOrth and Residual, default 30: their early
stopping rarely runs longer on these pairs, and the whole table then stays within minutes
on one core), ``--query-all`` (the query path of every setting too), ``--raw-json`` (every
measurement), ``--json`` / ``--no-json`` (the results file).
"""

import argparse
import itertools
import json
import sys
import time
import warnings
from pathlib import Path

import _common
import numpy as np
import torch
from _common import load_all_pairs, load_pairs  # noqa: F401 (other scripts import them here)
from sklearn.utils._param_validation import StrOptions
from threadpoolctl import threadpool_limits

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
from sklearn_compat._core.auto_settings import fitted_choices
from sklearn_compat._core.holdout import paired_gain
from sklearn_compat.metrics import paired_topk_accuracy

TOLERANCE = 0.005

#: The parameters that centre, rescale or normalise, listed whatever their default.
SETTING_PARAMS = {
    OrthogonalProcrustesAligner: ("center", "scale"),
    AffineAligner: ("fit_intercept",),
    WhitenedProcrustesAligner: ("center", "normalize"),
    RefinedProcrustesAligner: (),
    RCSLSAligner: ("center",),
    LambdaOrthAligner: ("fit_intercept",),
    ResidualAdapterAligner: ("fit_intercept",),
}
#: "auto" parameters that are not a setting of the map (where it runs, when it stops).
NOT_SETTINGS = {"device", "early_stopping", "index", "n_anchors"}
TRAINED = (RCSLSAligner, LambdaOrthAligner, ResidualAdapterAligner)
EPOCHS = (LambdaOrthAligner, ResidualAdapterAligner)


def explicit_values(cls, name):
    """The explicit values of a parameter, from its constraints (False/True, then the
    string options but "auto"); None when they cannot be listed (an interval)."""
    values = []
    for constraint in cls._parameter_constraints.get(name, []):
        if constraint == "boolean":
            values += [False, True]
        elif isinstance(constraint, StrOptions):
            values += sorted(o for o in constraint.options - {"auto"} if o not in values)
        elif constraint is None:
            values.append(None)
        else:
            return None
    return values or None


def setting_params(cls):
    """The parameters listed explicitly: the known settings, then every other "auto"."""
    defaults = cls().get_params(deep=False)
    names = list(SETTING_PARAMS.get(cls, ()))
    for name, value in defaults.items():
        if (
            isinstance(value, str)
            and value == "auto"
            and name not in names
            and name not in NOT_SETTINGS
            and explicit_values(cls, name)
        ):
            names.append(name)
    return names


def grid(cls):
    """[(label, params)] over the explicit values of the setting parameters."""
    names = setting_params(cls)
    values = [explicit_values(cls, name) for name in names]
    out = []
    for combo in itertools.product(*values):
        params = dict(zip(names, combo, strict=True))
        out.append((", ".join(f"{n}={v!r}" for n, v in params.items()), params))
    return out


def chosen(est):
    """What the fitted defaults chose, e.g. ``center_=True, scale_mode_='spread'``."""
    return ", ".join(f"{k}={v!r}" for k, v in choices(est).items()) or "-"


def choices(est):
    """``{fitted attribute: value}`` of the settings chosen at fit."""
    found = {k: v for k, v in fitted_choices(est).items() if k != "auto_scores_"}
    for name in setting_params(type(est)):
        value = getattr(est, f"{name}_", None)
        if f"{name}_" not in found and isinstance(value, (bool, np.bool_, str)):
            found[f"{name}_"] = value
        elif f"{name}_" not in found and not (
            isinstance(getattr(est, name), str) and getattr(est, name) == "auto"
        ):
            found[name] = getattr(est, name)  # an explicit default, chosen by nothing
    inner = getattr(est, "estimator_", None)
    if inner is not None:
        found.update({f"inner {k}": v for k, v in choices(inner).items()})
    return found


def specs(epochs):
    """(name, default factory, [(label, factory)]) per estimator."""

    def extra(cls):
        kw = {"device": "cpu"}
        if cls in TRAINED:
            kw["random_state"] = 0
        if cls in EPOCHS and epochs is not None:
            kw["max_epochs"] = epochs
        return kw

    out = []
    for cls in (
        OrthogonalProcrustesAligner,
        AffineAligner,
        WhitenedProcrustesAligner,
        RefinedProcrustesAligner,
        RCSLSAligner,
        LambdaOrthAligner,
        ResidualAdapterAligner,
    ):
        kw = extra(cls)
        settings = [
            (label, lambda cls=cls, params=params, kw=kw: cls(**params, **kw))
            for label, params in grid(cls)
        ]
        if cls is RefinedProcrustesAligner:
            # Its centring and normalisation are those of the map it refits each round
            # (WhitenedProcrustesAligner by default): list that map's explicit settings.
            inner = WhitenedProcrustesAligner
            settings = [
                (
                    f"inner {label}" + (f", {own_label}" if own_label else ""),
                    lambda params=params, own=own, kw=kw, inner=inner: RefinedProcrustesAligner(
                        estimator=inner(**params, device="cpu"), **own, **kw
                    ),
                )
                for label, params in grid(inner)
                for own_label, own in (grid(cls) or [("", {})])
            ]
        out.append((cls.__name__, lambda cls=cls, kw=kw: cls(**kw), settings))
    return out


def gold_hits(top, gold):
    """Share of queries whose top row is one of their gold rows (-1 padded)."""
    return float(np.mean([t in set(g[g >= 0]) for t, g in zip(top, gold, strict=True)]))


def transform_top1(est, pair):
    """P@1 of ``est.transform`` against the pair's gallery (test Y rows or the words)."""
    Z = est.transform(pair["X_test"])
    if "gallery" in pair:
        Zt = torch.nn.functional.normalize(torch.as_tensor(Z, dtype=torch.float32), dim=1)
        G = torch.nn.functional.normalize(torch.as_tensor(pair["gallery"]), dim=1)
        top = (Zt @ G.T).argmax(dim=1).numpy()
        return gold_hits(top, pair["gold"])
    return float(paired_topk_accuracy(Z, pair["Y_test"], device="cpu"))


def query_path_top1(est, pair):
    """Top-1 of ``AlignedNeighbors(est)`` with its defaults over the same gallery."""
    gallery = pair.get("gallery", pair["Y_test"])
    search = AlignedNeighbors(est, n_neighbors=1, device="cpu").fit(gallery)
    top = search.kneighbors(pair["X_test"], return_distance=False)[:, 0]
    if "gallery" in pair:
        return gold_hits(top, pair["gold"])
    return float(np.mean(top == np.arange(len(top))))


def transform_hits(est, pair):
    """Per test query, whether ``est.transform`` retrieves its own row (or a gold word)."""
    Z = torch.nn.functional.normalize(
        torch.as_tensor(est.transform(pair["X_test"]), dtype=torch.float32), dim=1
    )
    if "gallery" in pair:
        G = torch.nn.functional.normalize(torch.as_tensor(pair["gallery"]), dim=1)
        top = (Z @ G.T).argmax(dim=1).numpy()
        return np.array([t in set(g[g >= 0]) for t, g in zip(top, pair["gold"], strict=True)])
    Y = torch.nn.functional.normalize(torch.as_tensor(pair["Y_test"], dtype=torch.float32), dim=1)
    sims = Z @ Y.T
    own = sims.diagonal().clone()
    sims.fill_diagonal_(-float("inf"))
    return (sims.max(dim=1).values < own).numpy()


def directions(pair_name, pair):
    """``[(label, pair)]``: the pair as built and, for paired test rows, reversed."""
    X, Y = pair["X_train"], pair["Y_train"]
    out = [(f"{pair_name} ({X.shape[1]} -> {Y.shape[1]})", pair)]
    if "gallery" not in pair:
        reverse = {
            "X_train": pair["Y_train"],
            "Y_train": pair["X_train"],
            "X_test": pair["Y_test"],
            "Y_test": pair["X_test"],
        }
        out.append((f"{pair_name} reversed ({Y.shape[1]} -> {X.shape[1]})", reverse))
    return out


def versus_procrustes(pairs, chosen_specs):
    """``{row label: {estimator: cell}}``: each default against Procrustes' default."""
    rows = {}
    for pair_name, pair in pairs:
        for label, p in directions(pair_name, pair):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                base_model = OrthogonalProcrustesAligner(device="cpu")
                base = transform_hits(base_model.fit(p["X_train"], p["Y_train"]), p)
            row = {"procrustes": float(base.mean())}
            for name, default, _ in chosen_specs:
                if name == "OrthogonalProcrustesAligner":
                    continue
                start = time.perf_counter()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    est = default().fit(p["X_train"], p["Y_train"])
                hits = transform_hits(est, p)
                gain, se = paired_gain(hits, base)
                step = getattr(est, "step_choice_", None) or {}
                row[name] = {
                    "p@1": float(hits.mean()),
                    "gain": gain,
                    "se": se,
                    "ok": name == "AffineAligner" or gain >= -2 * se,
                    "kept": step.get("kept"),
                    "warned": any("StepDeclined" in type(w.message).__name__ for w in caught),
                    "fit s": time.perf_counter() - start,
                }
                print(
                    f"{label}: {name} {hits.mean():.3f} vs {base.mean():.3f} "
                    f"({gain:+.3f} +/- {se:.3f}) step kept={step.get('kept')}",
                    flush=True,
                )
            rows[label] = row
    return rows


def versus_cell(cell):
    kept = {True: "step", False: "without", None: "-"}[cell["kept"]]
    mark = "" if cell["ok"] else " **below**"
    return f"{cell['p@1']:.3f} ({cell['gain']:+.3f} ± {cell['se']:.3f}, {kept}){mark}"


def write_versus_procrustes(args, out, names):
    """The ``--versus-procrustes`` results: one table per group of pairs, in
    ``benchmarks/results/alignment_table_procrustes.json``.  A run on some pairs
    (``--pairs``) keeps the other pairs' rows of the last run."""
    columns = ["pair (new -> old)", "Procrustes", *[n.replace("Aligner", "") for n in names]]
    path = Path(args.json).with_name("alignment_table_procrustes.json")
    previous = {}
    if path.exists() and args.pairs:
        for tab in json.loads(path.read_text())["tables"]:
            if tab["columns"] == columns:
                previous[tab["title"]] = tab["rows"]
    tables = []
    for group in ("design pairs", "held-aside pairs"):
        rows = out.get(group, {})
        table_rows = [
            [label, f"{row['procrustes']:.3f}", *(versus_cell(row[n]) for n in names)]
            for label, row in rows.items()
        ]
        table_rows = [r for r in previous.get(group, []) if r[0] not in rows] + table_rows
        if table_rows:
            tables.append(_common.table(group, columns, table_rows))
    below = [
        f"{tab['columns'][2 + i]} on {r[0]}"
        for tab in tables
        for r in tab["rows"]
        for i, cell in enumerate(r[2:])
        if cell.endswith("**below**")
    ]
    _common.write_results(
        argparse.Namespace(json=str(path), no_json=args.no_json),
        "alignment_table_procrustes",
        "Each default against OrthogonalProcrustesAligner()",
        tables,
        notes="P@1 of `transform` on the test rows, then (default - Procrustes ± paired "
        'SE of the per-row difference, what the default\'s `"auto"` step chose: the '
        "step kept, or the map without it). **below**: more than 2 SE below Procrustes "
        "(Affine is not checked: it trades the new space's geometry for the old "
        "space's fit). "
        + (f"{len(below)} below: " + "; ".join(below) if below else "None below.")
        + " The held-aside pairs were not used to design the rule.",
    )


def measure(default, settings, pair, query_all):
    row = {"settings": {}, "fit s": {}, "query": {}}
    for label, make in settings:
        start = time.perf_counter()
        with warnings.catch_warnings():
            # Explicit settings warn where they are wrong (e.g. uncentred on an
            # anisotropic model): that is what the table measures.
            warnings.simplefilter("ignore")
            est = make().fit(pair["X_train"], pair["Y_train"])
        row["fit s"][label] = time.perf_counter() - start
        row["settings"][label] = transform_top1(est, pair)
        if query_all:
            row["query"][label] = query_path_top1(est, pair)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = default().fit(pair["X_train"], pair["Y_train"])
    row["fit s"]["default"] = time.perf_counter() - start
    # A default that chose well should not warn (issue 22): show what it said.
    row["warnings"] = sorted({type(w.message).__name__ for w in caught})
    row["default"] = transform_top1(est, pair)
    row["query path"] = query_path_top1(est, pair)
    row["chosen"] = chosen(est)
    best = max(row["settings"].values())
    row["best setting"] = max(row["settings"], key=row["settings"].get)
    row["default - best"] = row["default"] - best
    row["query - transform"] = row["query path"] - row["default"]
    row["default check"] = row["default - best"] >= -TOLERANCE
    row["query check"] = row["query - transform"] >= -TOLERANCE
    if query_all:
        row["query checks"] = {
            label: row["query"][label] - row["settings"][label] >= -TOLERANCE
            for label in row["settings"]
        }
    return row


def verdict(ok):
    return "PASS" if ok else "FAIL"


ESTIMATOR_COLUMNS = [
    "default",
    "chosen",
    "default - best",
    "check",
    "query path",
    "query - transform",
    "check",
    "default warned",
    "fit s (default / settings)",
]


def estimator_row(pair_name, labels, row):
    """The cells of one pair's row of an estimator's table."""
    settings_s = sum(v for k, v in row["fit s"].items() if k != "default")
    return [
        pair_name,
        *(f"{row['settings'][label]:.3f}" for label in labels),
        f"**{row['default']:.3f}**",
        str(row["chosen"]),
        f"{row['default - best']:+.3f}",
        verdict(row["default check"]),
        f"{row['query path']:.3f}",
        f"{row['query - transform']:+.3f}",
        verdict(row["query check"]),
        ", ".join(row["warnings"]) or "-",
        f"{row['fit s']['default']:.1f} / {settings_s:.1f}",
    ]


def print_estimator_table(name, labels, results):
    print(f"\n#### {name}\n")
    print("| " + " | ".join(["pair", *labels, *ESTIMATOR_COLUMNS]) + " |")
    print("|---" * (len(labels) + 10) + "|")
    for pair_name, row in results.items():
        print("| " + " | ".join(estimator_row(pair_name, labels, row)) + " |", flush=True)
    if any("query checks" in row for row in results.values()):
        print("\nquery path of every setting (AlignedNeighbors(setting) top-1, check):\n")
        print("| pair | " + " | ".join(labels) + " |")
        print("|---" * (len(labels) + 1) + "|")
        for pair_name, row in results.items():
            cells = " | ".join(
                f"{row['query'][label]:.3f} {verdict(row['query checks'][label])}"
                for label in labels
            )
            print(f"| {pair_name} | {cells} |")


def print_pair_tables(by_estimator):
    """The same results per pair: one row per estimator, its best explicit setting beside
    the default and the query path."""
    pairs = list(dict.fromkeys(p for by_pair in by_estimator.values() for p in by_pair))
    for pair in pairs:
        print(f"\n#### {pair}\n")
        print(
            "| estimator | best setting | its P@1 | default P@1 | chosen | default - best "
            "| query path | query - transform | checks |"
        )
        print("|---" * 9 + "|")
        for name, by_pair in by_estimator.items():
            if pair not in by_pair:
                continue
            row = by_pair[pair]
            best = row["best setting"]
            checks = "PASS" if row["default check"] and row["query check"] else "FAIL"
            print(
                f"| {name} | {best} | {row['settings'][best]:.3f} | **{row['default']:.3f}** "
                f"| {row['chosen']} | {row['default - best']:+.3f} | {row['query path']:.3f} "
                f"| {row['query - transform']:+.3f} | {checks} |"
            )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="*", help="pair names (substrings) to run")
    parser.add_argument("--estimators", nargs="*", help="estimator names (substrings)")
    parser.add_argument("--pairs-root", default=None, help="folder of the pairs' .npz")
    _common.add_threads_argument(parser)
    parser.add_argument(
        "--epochs", type=int, default=30, help="max_epochs of LambdaOrth and Residual (30)"
    )
    parser.add_argument("--query-all", action="store_true", help="query path of every setting")
    parser.add_argument("--no-mnist", action="store_true", help="skip the MNIST pairs")
    parser.add_argument("--raw-json", default=None, help="write every measurement here")
    parser.add_argument(
        "--versus-procrustes",
        action="store_true",
        help="each default against OrthogonalProcrustesAligner(), both directions (issue 45)",
    )
    _common.add_json_arguments(parser, "alignment_table")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    torch.manual_seed(0)
    start = time.perf_counter()
    groups = load_all_pairs(args.pairs_root, mnist=not args.no_mnist)
    chosen_specs = [
        spec
        for spec in specs(args.epochs)
        if not args.estimators or any(part in spec[0] for part in args.estimators)
    ]
    out, labels_of = {}, {}
    if args.versus_procrustes:
        with threadpool_limits(limits=args.threads):
            for group, pairs in groups.items():
                pairs = [
                    (n, p) for n, p in pairs if not args.pairs or any(s in n for s in args.pairs)
                ]
                if pairs:
                    print(f"\n### {group}: " + ", ".join(n for n, _ in pairs))
                    out[group] = versus_procrustes(pairs, chosen_specs)
        names = [n for n, _, _ in chosen_specs if n != "OrthogonalProcrustesAligner"]
        write_versus_procrustes(args, out, names)
        print(f"{time.perf_counter() - start:.0f} s")
        return 0
    with threadpool_limits(limits=args.threads):
        for group, pairs in groups.items():
            pairs = [(n, p) for n, p in pairs if not args.pairs or any(s in n for s in args.pairs)]
            if not pairs:
                continue
            print(f"\n### {group}: " + ", ".join(n for n, _ in pairs))
            out[group] = {}
            for name, default, settings in chosen_specs:
                results = {}
                for pair_name, pair in pairs:
                    results[pair_name] = measure(default, settings, pair, args.query_all)
                labels_of[name] = [label for label, _ in settings]
                print_estimator_table(name, labels_of[name], results)
                out[group][name] = results
            print(f"\n### {group}, per pair")
            print_pair_tables(out[group])
    elapsed = time.perf_counter() - start
    rows = [
        (group, name, pair, row)
        for group, by_name in out.items()
        for name, by_pair in by_name.items()
        for pair, row in by_pair.items()
    ]
    fails = [
        f"{name} on {pair} ({what})"
        for group, name, pair, row in rows
        for what, ok in (("default", row["default check"]), ("query path", row["query check"]))
        if not ok
    ]
    fails += [
        f"{name} {label} on {pair} (query path)"
        for group, name, pair, row in rows
        for label, ok in row.get("query checks", {}).items()
        if not ok
    ]
    passed = sum(row["default check"] and row["query check"] for *_, row in rows)
    summary_line = (
        f"Summary: {passed}/{len(rows)} rows pass both checks; "
        + (f"{len(fails)} FAIL: " + "; ".join(fails) if fails else "no FAIL")
        + f"; {elapsed:.0f} s with {torch.get_num_threads()} torch thread(s)."
    )
    print(
        f"\nsummary: {passed}/{len(rows)} rows pass both checks (default >= best setting - "
        f"{TOLERANCE}, query path >= transform - {TOLERANCE}); "
        + (f"{len(fails)} FAIL: " + "; ".join(fails) if fails else "no FAIL")
        + f"; {elapsed:.0f} s with {torch.get_num_threads()} torch thread(s)"
    )
    if args.raw_json:
        payload = {"elapsed s": elapsed, "threads": torch.get_num_threads(), "results": out}
        Path(args.raw_json).write_text(json.dumps(payload, indent=1, default=str))
    tables = [
        _common.table(
            name,
            ["pair", *labels, *ESTIMATOR_COLUMNS],
            [
                estimator_row(pair, labels, row)
                for by_name in out.values()
                for pair, row in by_name.get(name, {}).items()
            ],
        )
        for name, labels in labels_of.items()
    ]
    _common.write_results(
        args,
        "alignment_table",
        "Every aligner's default against every setting on real pairs",
        tables,
        notes="Each map is fitted on a pair's train rows; P@1 is the paired top-1 cosine "
        "retrieval of `transform(X_test)` among the test Y rows (`muse_en_fr`: among all "
        "20,000 French vectors). One column per explicit setting, then the default, what it "
        "chose and the query path (`AlignedNeighbors(default)`). Checks: default >= best "
        f"setting - {TOLERANCE}; query path >= default `transform` - {TOLERANCE}. " + summary_line,
    )


if __name__ == "__main__":
    sys.exit(main())

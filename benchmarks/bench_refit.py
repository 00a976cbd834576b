"""Benchmark: ``backfill --refit`` on real pairs: does a map re-fitted on the native rows
retrieve the rows still mapped better than the map fitted on the first 500 pairs?

Each pair's train rows are the store (the old model's vectors; the new model's own ones
are what the re-embedding job delivers), its test rows the queries (new-model vectors of
items the store does not hold; a stored item is relevant to the queries of its class).
The first map is ``OrthogonalProcrustesAligner()`` (what ``fit --method procrustes``
builds) fitted on 500 random store rows, old -> new.  The re-embedding job delivers rows in
a random order, independent of that sample.

For each share (1%, 5%, 20%, 50% of the rows native) the refit is decided as ``backfill
--refit`` decides it (the library's own steps: pairs kept aside from the native rows the
first map was not fitted on, the candidate fitted on every other native pair, both scored
by top-1 of new-model queries against the mapped rows, kept on a gain over 2 paired
standard errors), and its effect on the rows still mapped is measured two ways, each with
the paired standard error of the difference (refit - first map) over queries:

- **own item**: the new-model vectors of (up to 1,000 of) the items still mapped, each a
  query against every row still mapped; a hit when its own item's row comes first (these
  native vectors are unknown to both maps);
- **class**: the held-out queries against the rows still mapped; a hit when the nearest
  one has the query's class.

Then one run through the real command line on a LanceDB table (first design pair): ``fit``
on the 500 pairs, ``transform --add-column``, ``backfill`` of half the rows, ``backfill
--refit`` of a further 10%, with the class top-1 of the held-out queries against the whole
column (native and mapped rows) at 0%, 50% and 60%.

Single thread, about a minute.

Usage::

    python benchmarks/bench_refit.py            # writes benchmarks/results/refit.json
    python benchmarks/bench_refit.py --no-json  # print only
"""

import argparse
import contextlib
import io
import re
import tempfile
from pathlib import Path

import _common
import numpy as np

DESIGN = ["wn_gloss_e5_minilm", "wn_example_wordllama_minilm"]
HELD_ASIDE = ["heldout_b_gloss_minilm_e5"]
SHARES = (0.01, 0.05, 0.20, 0.50)
SAMPLE = 500
OWN_QUERIES = 1000


def _unit(A):
    A = np.asarray(A, dtype=np.float64)
    return A / np.maximum(np.linalg.norm(A, axis=1, keepdims=True), 1e-12)


def _class_hits(queries, query_labels, gallery, gallery_labels):
    nearest = np.argmax(_unit(queries) @ _unit(gallery).T, axis=1)
    return (gallery_labels[nearest] == query_labels).astype(np.float64)


def _own_hits(queries, gallery, targets):
    from sklearn_compat._core.ranking import target_ranks

    return (target_ranks(queries, gallery, targets, device="cpu") < 1).astype(np.float64)


def _diff(before, after):
    d = after - before
    return f"{d.mean():+.3f} +/- {d.std(ddof=1) / np.sqrt(len(d)):.3f}"


def _pair(name):
    pair = _common.load_npz_pair(_common.PAIRS_ROOT / f"{name}.npz")
    # The pairs hold X = new model, Y = old model: the store holds Y, the map is Y -> X.
    return {
        "old": pair["Y_train"],
        "new": pair["X_train"],
        "labels": pair["labels_train"],
        "queries": pair["X_test"],
        "query_labels": pair["labels_test"],
    }


def _first_map(p):
    from sklearn_compat import OrthogonalProcrustesAligner

    sample = np.random.default_rng(1).choice(len(p["old"]), SAMPLE, replace=False)
    return sample, OrthogonalProcrustesAligner().fit(p["old"][sample], p["new"][sample])


def stages(name):
    """One row per share: the refit's decision and its effect on the rows still mapped."""
    from sklearn.base import clone

    from sklearn_compat.cli._upgrade import _measure
    from sklearn_compat.io._stores import upgrade

    p = _pair(name)
    n = len(p["old"])
    sample, first = _first_map(p)
    order = np.random.default_rng(0).permutation(n)
    measure = _measure("cpu")
    rows, summary = [], []
    label = f"{name} (held aside)" if name in HELD_ASIDE else name
    for share in SHARES:
        k = int(round(share * n))
        native, still = order[:k], order[k:]
        X, Y = p["old"][native], p["new"][native]
        fitted = np.isin(native, sample)
        aside, train = upgrade._held_aside(k, fitted, seed=0)
        candidate = clone(first).fit(X[train], Y[train])
        others = p["old"][still][: upgrade.REFIT_OTHERS]  # (random order already)
        before = measure(first, X[aside], Y[aside], others)
        after = measure(candidate, X[aside], Y[aside], others)
        gain, se = upgrade._paired_gain(before, after)
        kept = gain > 0 and gain > upgrade.REFIT_Z * se
        # The rows still mapped, by the first map and by the candidate.
        g0, g1 = first.transform(p["old"][still]), candidate.transform(p["old"][still])
        pick = np.random.default_rng(2).choice(len(still), min(OWN_QUERIES, len(still)), False)
        own0 = _own_hits(p["new"][still][pick], g0, pick)
        own1 = _own_hits(p["new"][still][pick], g1, pick)
        labels = p["labels"][still]
        cls0 = _class_hits(p["queries"], p["query_labels"], g0, labels)
        cls1 = _class_hits(p["queries"], p["query_labels"], g1, labels)
        rows.append([
            label, f"{share:.0%} ({k})", f"{len(aside)} / {len(train)}",
            f"{before['retention']:.3f} -> {after['retention']:.3f} ({gain:+.3f} +/- {se:.3f})",
            "kept" if kept else "declined",
            f"{own0.mean():.3f} -> {own1.mean():.3f} ({_diff(own0, own1)})",
            f"{cls0.mean():.3f} -> {cls1.mean():.3f} ({_diff(cls0, cls1)})",
        ])  # fmt: skip
        print(" | ".join(map(str, rows[-1])), flush=True)
        summary.append(f"{'kept' if kept else 'declined'}, {_diff(own0, own1)}")
    return rows, [label, *summary]


def _quality(table, column, p):
    import lance

    t = lance.dataset(table).to_table(columns=["id", column]).to_pandas()
    G = np.stack(t[column].to_numpy())
    return _class_hits(p["queries"], p["query_labels"], G, p["labels"][t["id"].to_numpy()])


def cli_run(name):
    """The real command line on a LanceDB table: 0% -> 50% -> a further 10% with --refit."""
    import lancedb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sklearn_compat.cli import main

    p = _pair(name)
    n = len(p["old"])
    sample, _ = _first_map(p)
    order = np.random.default_rng(0).permutation(n)
    half, tenth = order[: n // 2], order[n // 2 : n // 2 + n // 10]

    def arrow(ids, X):
        X = np.ascontiguousarray(X, dtype=np.float32)
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), X.shape[1])
        return pa.table({"id": np.asarray(ids, dtype=np.int64), "vector": vectors})

    log = io.StringIO()

    def run(line):
        with contextlib.redirect_stderr(log):
            assert main(line.split()) == 0, log.getvalue()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        table = str(tmp / "db" / "items.lance")
        lancedb.connect(tmp / "db").create_table("items", arrow(np.arange(n), p["old"]))
        pq.write_table(arrow(sample, p["old"][sample]), tmp / "old_sample.parquet")
        pq.write_table(arrow(sample, p["new"][sample]), tmp / "new_sample.parquet")
        pq.write_table(arrow(half, p["new"][half]), tmp / "half.parquet")
        pq.write_table(arrow(tenth, p["new"][tenth]), tmp / "tenth.parquet")
        run(f"fit --method procrustes --source {tmp}/old_sample.parquet --target "
            f"{tmp}/new_sample.parquet --id-column id --model {tmp}/map.skops")  # fmt: skip
        run(f"transform --model {tmp}/map.skops --input {table} --id-column id "
            "--vector-column vector --add-column v2")  # fmt: skip
        at0 = _quality(table, "v2", p)
        run(f"backfill --table {table} --column v2 --vectors {tmp}/half.parquet --id-column id")
        at50 = _quality(table, "v2", p)
        # The same further 10% without the refit, on a copy: the reference for the refit.
        import shutil

        shutil.copytree(tmp / "db", tmp / "copy")
        copy = str(tmp / "copy" / "items.lance")
        run(f"backfill --table {copy} --column v2 --vectors {tmp}/tenth.parquet --id-column id")
        at60 = _quality(copy, "v2", p)
        run(f"backfill --table {table} --column v2 --vectors {tmp}/tenth.parquet "
            "--id-column id --refit")  # fmt: skip
        at60r = _quality(table, "v2", p)
        import lance

        t = lance.dataset(table).to_table(columns=["id", "v2_source"]).to_pandas()
        still = t["id"].to_numpy()[(t["v2_source"] != "native").to_numpy()]
        first = lance.dataset(copy).to_table(columns=["id", "v2"]).to_pandas().set_index("id")
        after = lance.dataset(table).to_table(columns=["id", "v2"]).to_pandas().set_index("id")
        g0, g1 = np.stack(first.loc[still, "v2"]), np.stack(after.loc[still, "v2"])
        pick = np.random.default_rng(2).choice(len(still), min(OWN_QUERIES, len(still)), False)
        own0 = _own_hits(p["new"][still][pick], g0, pick)
        own1 = _own_hits(p["new"][still][pick], g1, pick)
    said = ("neither map", "refit map", "current map;")
    decision = [line.split(": ", 1)[1] for line in log.getvalue().splitlines()
                if any(s in line for s in said)]  # fmt: skip
    decision = " ".join(re.sub(r" saved as \S+;", "", d) for d in decision)
    row = [
        name, f"{at0.mean():.3f}", f"{at50.mean():.3f} ({_diff(at0, at50)})",
        f"{at60.mean():.3f}", f"{at60r.mean():.3f} ({_diff(at60, at60r)})",
        f"{own0.mean():.3f} -> {own1.mean():.3f} ({_diff(own0, own1)})",
    ]  # fmt: skip
    print(" | ".join(row), "\n ", decision, flush=True)
    return row, decision


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_threads_argument(parser, default=1)
    _common.add_json_arguments(parser, "refit")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    rows, summary = [], []
    for name in DESIGN + HELD_ASIDE:
        detail, line = stages(name)
        rows += detail
        summary.append(line)
    cli, decision = cli_run(DESIGN[0])
    tables = [
        _common.table(
            "Rows still mapped: own-item top-1, refit - 500-pair map (+/- paired SE), and "
            "the refit's decision",
            ["pair", *(f"{share:.0%} native" for share in SHARES)],
            summary,
        ),
        _common.table(
            "Refit at each share: 500-pair map -> refit (difference +/- its paired SE)",
            ["pair", "native", "aside / refit pairs", "refit's own comparison",
             "decision", "still mapped, own item top-1", "still mapped, class top-1"],
            rows,
        ),  # fmt: skip
        _common.table(
            "The real command line (LanceDB): class top-1 of held-out new-model queries "
            "against the column",
            ["pair", "0% native", "50% native", "60%, no refit", "60%, --refit",
             "still mapped at 60%, own item top-1"],
            [cli],
        ),  # fmt: skip
    ]
    notes = (
        f"Store: a pair's train rows (old model); first map: OrthogonalProcrustesAligner() "
        f"on {SAMPLE} random store rows; rows backfilled in a random order; at each share "
        "the refit decided as `backfill --refit` decides it. Own-item top-1: the new-model "
        "vectors of up to 1,000 items still mapped, each a query against the rows still "
        "mapped (a hit: its own row first). Through the real command line on a LanceDB "
        f"table ({cli[0]}): class top-1 of held-out new-model queries against the column "
        f"{cli[1]} at 0% native, {cli[2]} at 50%; a further 10% with `--refit` printed "
        f"\"{decision}\"; own-item top-1 of the rows still mapped {cli[5]}; class top-1 "
        f"against the whole column {cli[3]} without the refit, {cli[4]} with it (the "
        "queries' nearest rows are native ones)."
    )
    _common.write_results(
        args, "refit", "Vector stores: `backfill --refit` on real pairs", tables, notes=notes
    )


if __name__ == "__main__":
    main()

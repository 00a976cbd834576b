"""Retrieval across two text embedding models: Semanlink arXiv tagging, MiniLM and WordLlama.

The second application of Maystre et al. (2025), "When Embedding Models Meet: Procrustes
Bounds and Applications" (arXiv:2510.13406): one model's queries searched against an
index built by another model, and a mixed index whose documents come from both.

Data (``build_semanlink.py`` writes it, offline, into ``cache/``): 314 arXiv papers
(title + abstract) as queries, 433 Semanlink tags (label, alternative labels, parent
labels) as documents, 1,315 judgements (gain 1), 314 of them the generic tag
``arxiv_doc`` that every paper carries.  Models: all-MiniLM-L6-v2 (384-d) and WordLlama
l2_supercat (256-d).  Every map is fitted on texts disjoint from the evaluation, embedded
by both models, one table per set: 11,000 WordNet glosses and usage examples (another
domain), Semanlink texts that are neither queries nor documents (the other tags, the
non-arXiv bookmarks: the same domain), and both together.

nDCG@10 by cosine (``sklearn_compat.metrics.ndcg_at_k``), with the ``arxiv_doc`` tag
judged ("all judgements") and with it removed from the index ("no arxiv_doc", via
``exclude``).  Rows, for each direction A -> B (A's queries, B's index):

- ``A alone`` / ``B alone``: each model on its own queries and documents;
- ``raw``: A's queries against B's documents as they are (the first ``d_B`` coordinates,
  or zero-padded: the two spaces share no basis);
- one row per library aligner (its current defaults), fitted A -> B on the WordNet texts:
  mapped A queries against B documents;
- ``AlignedNeighbors(Procrustes)``: the library's query path with its defaults;
- ``mixed index``: B's queries against an index where a random half of the documents are
  B's own vectors and the other half A's vectors mapped into B's space (a partial
  re-index; a mixed-modality index has the same shape), for each aligner.

``retained`` is the row's nDCG@10 over ``B alone``'s.  Every nDCG@10 of ``ndcg_at_k`` is
checked against ir_measures (trec_eval) when it is installed.

Run: ``python benchmarks/applications/mixed_models.py --builder-python PYTHON`` where
``PYTHON`` has ``benchmarks/pairs/requirements.txt`` installed.  The encodings are built
once, by ``build_semanlink.py`` with that interpreter, and cached under ``--cache-dir``
(default: the user's cache directory, ``~/.cache/sklearn-compat/benchmarks``, not the
repository); later runs read the cache.  ``--n-fit N`` (default 11000) sets the number of
fit texts per set: the encoding and the trained aligners scale with it, so a small N
(``--n-fit 1000``) answers in minutes.  A run with a smaller N than a cached build reuses
that build (a seeded subset of its fit texts).  The build prints its estimated encoding
time before encoding; the evaluation prints its estimate after the first of its
directions.  ``--skip RCSLS ResidualAdapter`` and ``--fit fit_domain`` shorten it too.
"""

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from build_semanlink import N_FIT, data_file, default_cache_dir, split_fit
from reference import available, trec_ndcg

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
from sklearn_compat.metrics import alignability, linear_cka, ndcg_at_k

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common  # noqa: E402  (benchmarks/_common.py)

HERE = Path(__file__).resolve().parent
NAMES = {"minilm": "MiniLM", "wordllama": "WordLlama"}
FITS = {
    "fit": "WordNet glosses + examples",
    "fit_domain": "other Semanlink texts",
    "fit_both": "both sets",
}


CHECK = available()
GAPS = []


def cosines(queries, documents):
    queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-30)
    documents = documents / np.maximum(np.linalg.norm(documents, axis=1, keepdims=True), 1e-30)
    return queries.astype(np.float64) @ documents.astype(np.float64).T


def library_aligners():
    return [
        ("OrthogonalProcrustesAligner()", OrthogonalProcrustesAligner),
        ("WhitenedProcrustesAligner()", WhitenedProcrustesAligner),
        ("AffineAligner()", AffineAligner),
        ("RefinedProcrustesAligner()", RefinedProcrustesAligner),
        ("RCSLSAligner()", lambda: RCSLSAligner(random_state=0)),
        ("LambdaOrthAligner()", lambda: LambdaOrthAligner(random_state=0)),
        ("ResidualAdapterAligner()", lambda: ResidualAdapterAligner(random_state=0)),
    ]


def ndcg_of_rankings(top, relevance, excluded, k=10):
    """nDCG@k of given rankings (rows of gallery indices, best first), binary gains."""
    dense = relevance.toarray() > 0
    if excluded is not None:
        dense[:, excluded] = False
        top = np.array([[i for i in row if i != excluded][:k] for row in top])
    top = top[:, :k]
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = (np.take_along_axis(dense, top, axis=1) * discount[: top.shape[1]]).sum(axis=1)
    n_relevant = dense.sum(axis=1)
    ideal = np.array([discount[: min(n, k)].sum() for n in n_relevant])
    judged = n_relevant > 0
    return float(np.mean(dcg[judged] / ideal[judged]))


def raw_view(Q, width):
    """``Q`` cut or zero-padded to ``width`` columns: no map at all."""
    if Q.shape[1] >= width:
        return Q[:, :width]
    return np.hstack([Q, np.zeros((Q.shape[0], width - Q.shape[1]), dtype=Q.dtype)])


def direction(data, a, b, fit, relevance, generic, mixed_half, skip):
    """Rows of the table for A's queries against B's index; returns {label: (all, no)}."""
    Qa, Qb = data[f"queries_{a}"], data[f"queries_{b}"]
    Da, Db = data[f"documents_{a}"], data[f"documents_{b}"]
    Fa, Fb = data[f"{fit}_{a}"], data[f"{fit}_{b}"]
    no_generic = [[generic]] * len(Qa)

    def both(queries, documents):
        # float64, so the check against trec_eval compares the metric, not float32 rounding
        # of near-tied cosines.
        queries, documents = queries.astype(np.float64), documents.astype(np.float64)
        values = (
            ndcg_at_k(queries, documents, relevance),
            ndcg_at_k(queries, documents, relevance, exclude=no_generic),
        )
        if CHECK:
            scores = cosines(queries, documents)
            gap = abs(values[0] - trec_ndcg(scores, relevance))
            scores[:, generic] = -np.inf
            gap = max(gap, abs(values[1] - trec_ndcg(scores, relevance)))
            GAPS.append(gap)
        return values

    rows = {
        f"{NAMES[a]} alone": both(Qa, Da),
        f"{NAMES[b]} alone": both(Qb, Db),
        "raw": both(raw_view(Qa, Db.shape[1]), Db),
    }
    mixed = {}
    for label, make in library_aligners():
        if any(label.startswith(name) for name in skip):
            continue
        start = time.perf_counter()
        aligner = make().fit(Fa, Fb)
        seconds = time.perf_counter() - start
        rows[f"{label} ({seconds:.1f} s)"] = both(aligner.transform(Qa), Db)
        if label.startswith("Orthogonal"):
            search = AlignedNeighbors(aligner, n_neighbors=11).fit(Db)
            top = search.kneighbors(Qa, return_distance=False)
            rows["AlignedNeighbors(OrthogonalProcrustesAligner())"] = (
                ndcg_of_rankings(top, relevance, None),
                ndcg_of_rankings(top, relevance, generic),
            )
        # Half of B's index re-embedded from A's document vectors, mapped into B's space.
        index = Db.copy()
        index[mixed_half] = aligner.transform(Da[mixed_half])
        mixed[f"mixed index, {label}"] = both(Qb, index)
    rows.update(mixed)
    bound = alignability(Fa, Fb)
    base = rows[f"{NAMES[b]} alone"]
    print(f"\n== {NAMES[a]} queries -> {NAMES[b]} index, maps fitted on {FITS[fit]} ({len(Fa)})")
    print(f"{'':58s}{'all judgements':>24s}{'no arxiv_doc':>24s}")
    print(f"{'':58s}" + f"{'nDCG@10':>12s}{'retained':>12s}" * 2)
    for label, values in rows.items():
        cells = "".join(
            f"{v:12.4f}{v / base_v:12.3f}" for v, base_v in zip(values, base, strict=True)
        )
        print(f"{label:58s}{cells}")
    print(
        f"fit texts: linear CKA {linear_cka(Fa, Fb):.3f}; alignability (normalised rows) "
        f"delta {bound.delta:.4f}, best orthogonal residual {bound.procrustes_error:.1f} <= "
        f"bound {bound.procrustes_error_bound:.1f} (n = {len(Fa)})"
    )
    return rows


def cached_data(cache_dir, n_fit, builder_python):
    """The encodings with ``n_fit`` fit texts per set: the cached build of that size, a
    larger cached build's seeded subset, or a new build (cached for the next run)."""
    wanted = data_file(cache_dir, n_fit)
    larger = sorted(
        (int(p.stem.rsplit("_fit", 1)[1]), p)
        for p in Path(cache_dir).glob("semanlink_minilm_wordllama_fit*.npz")
        if p.stem.rsplit("_fit", 1)[1].isdigit() and int(p.stem.rsplit("_fit", 1)[1]) > n_fit
    )
    if not wanted.exists() and larger:
        print(f"using a subset of the cached build {larger[0][1]}")
        with np.load(larger[0][1]) as stored:
            return subset({key: stored[key] for key in stored.files}, n_fit)
    if not wanted.exists():
        print(f"building {wanted} once (offline, with {builder_python}) ...")
        command = [builder_python, str(HERE / "build_semanlink.py")]
        command += ["--cache-dir", str(cache_dir), "--n-fit", str(n_fit)]
        subprocess.run(command, check=False)
    if not wanted.exists():
        raise SystemExit(
            f"{wanted} not found: build it with the builder environment of benchmarks/pairs: "
            f"python benchmarks/applications/build_semanlink.py --n-fit {n_fit}"
        )
    with np.load(wanted) as stored:
        return {key: stored[key] for key in stored.files}


def subset(data, n_fit):
    """``data`` with ``n_fit`` fit texts per set: a seeded choice of glosses and examples
    (in the build's 6:5 ratio) and the first ``n_fit`` in-domain texts."""
    meta = json.loads(str(data["meta"]))
    n_glosses = meta.get("n_glosses", 6000)
    glosses, examples = split_fit(n_fit)
    rng = np.random.default_rng(0)
    n_stored = len(data["fit_minilm"])
    rows = np.concatenate([
        np.sort(rng.choice(n_glosses, glosses, replace=False)),
        n_glosses + np.sort(rng.choice(n_stored - n_glosses, examples, replace=False)),
    ])  # fmt: skip
    for model in NAMES:
        data[f"fit_{model}"] = data[f"fit_{model}"][rows]
        data[f"fit_domain_{model}"] = data[f"fit_domain_{model}"][:n_fit]
    return data


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="an encodings file (default: the cached build)")
    parser.add_argument("--cache-dir", default=str(default_cache_dir()))
    parser.add_argument(
        "--n-fit", type=int, default=N_FIT, help=f"fit texts per set (default {N_FIT})"
    )
    parser.add_argument(
        "--builder-python",
        default=sys.executable,
        help="interpreter with benchmarks/pairs/requirements.txt, to build a missing cache",
    )
    parser.add_argument("--fit", nargs="*", default=list(FITS), choices=list(FITS))
    parser.add_argument("--skip", nargs="*", default=[], help="aligner names to leave out")
    _common.add_json_arguments(parser, "mixed_models")
    args = parser.parse_args(argv)
    if args.data:
        with np.load(args.data) as stored:
            data = {key: stored[key] for key in stored.files}
    else:
        data = cached_data(args.cache_dir, args.n_fit, args.builder_python)
    meta = json.loads(str(data["meta"]))
    for model in NAMES:
        data[f"fit_both_{model}"] = np.vstack([data[f"fit_{model}"], data[f"fit_domain_{model}"]])
    judged = data["judged"]
    n_queries, n_docs = len(data["queries_minilm"]), len(data["documents_minilm"])
    relevance = sp.csr_matrix(
        (np.ones(len(judged)), (judged[:, 0], judged[:, 1])), shape=(n_queries, n_docs)
    )
    generic = int(data["generic"])
    print(f"{n_queries} queries, {n_docs} documents, {relevance.nnz} judgements")
    print(f"models: {meta['models']}")
    mixed_half = np.random.default_rng(0).permutation(n_docs)[: n_docs // 2]
    directions = [
        (fit, a, b)
        for fit in args.fit
        for a, b in (("minilm", "wordllama"), ("wordllama", "minilm"))
    ]
    start = time.perf_counter()
    retained = {}  # (a, b) -> {fit: {label: retained nDCG@10, all judgements}}
    for done, (fit, a, b) in enumerate(directions, start=1):
        rows = direction(data, a, b, fit, relevance, generic, mixed_half, args.skip)
        base = rows[f"{NAMES[b]} alone"][0]
        retained.setdefault((a, b), {})[fit] = {
            re.sub(r" \([\d.]+ s\)$", "", label): values[0] / base
            for label, values in rows.items()
            if not label.endswith(" alone")
        }
        if done == 1 and len(directions) > 1:
            # The directions fit the same aligners on sets of similar sizes ("both" is
            # the two together: about twice), so the first one's time is a fair unit.
            first = time.perf_counter() - start
            left = sum(2 if f == "fit_both" else 1 for f, _, _ in directions[1:])
            print(
                f"(first direction {first:.0f} s; estimated time for the other "
                f"{len(directions) - 1}: about {first * left / 60:.1f} min)"
            )
    if GAPS:
        print(
            f"\nmax |ndcg_at_k - ir_measures nDCG@10| over {len(GAPS) * 2} runs: {max(GAPS):.2e}"
        )
    print(f"({time.perf_counter() - start:.0f} s)")
    tables = []
    for (a, b), by_fit in retained.items():
        labels = list(dict.fromkeys(label for row in by_fit.values() for label in row))
        rows = [
            [f"{FITS[fit]} ({len(data[f'{fit}_{a}']):,})"]
            + [f"{row[label]:.3f}" if label in row else "" for label in labels]
            for fit, row in by_fit.items()
        ]
        title = f"{NAMES[a]} queries -> {NAMES[b]} index (retained nDCG@10)"
        tables.append(_common.table(title, ["map fitted on", *labels], rows))
    _common.write_results(
        args,
        "mixed_models",
        "Application: retrieval across two text models and a mixed index",
        tables,
        notes=f"Semanlink arXiv tagging: {n_queries} queries, {n_docs} tags as documents, "
        f"{relevance.nnz} judgements; nDCG@10 by cosine, retained against the index model's "
        "own. Maps are fitted on texts disjoint from the evaluation. A mixed index holds half "
        "the documents as the index model's own vectors and half as the other model's, mapped.",
    )


if __name__ == "__main__":
    main()

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
``PYTHON`` has ``benchmarks/pairs/requirements.txt`` installed: it builds the cache with
``build_semanlink.py`` when it is missing (a few minutes), then evaluates (several minutes
on a 2-core box: the trained aligners dominate; ``--skip RCSLS ResidualAdapter`` and
``--fit fit_domain`` shorten it).
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
DATA = HERE / "cache" / "semanlink_minilm_wordllama.npz"
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument(
        "--builder-python",
        default=sys.executable,
        help="interpreter with benchmarks/pairs/requirements.txt, to build a missing cache",
    )
    parser.add_argument("--fit", nargs="*", default=list(FITS), choices=list(FITS))
    parser.add_argument("--skip", nargs="*", default=[], help="aligner names to leave out")
    _common.add_json_arguments(parser, "mixed_models")
    args = parser.parse_args(argv)
    if not Path(args.data).exists() and args.data == str(DATA):
        # Build it (offline: packages only) with the builder environment.
        subprocess.run([args.builder_python, str(HERE / "build_semanlink.py")], check=False)
    if not Path(args.data).exists():
        raise SystemExit(
            f"{args.data} not found: build it with the builder environment of "
            "benchmarks/pairs: python benchmarks/applications/build_semanlink.py"
        )
    with np.load(args.data) as stored:
        data = {key: stored[key] for key in stored.files}
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
    start = time.perf_counter()
    retained = {}  # (a, b) -> {fit: {label: retained nDCG@10, all judgements}}
    for fit in args.fit:
        for a, b in (("minilm", "wordllama"), ("wordllama", "minilm")):
            rows = direction(data, a, b, fit, relevance, generic, mixed_half, args.skip)
            base = rows[f"{NAMES[b]} alone"][0]
            retained.setdefault((a, b), {})[fit] = {
                re.sub(r" \([\d.]+ s\)$", "", label): values[0] / base
                for label, values in rows.items()
                if not label.endswith(" alone")
            }
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

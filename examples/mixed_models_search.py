"""Search across two embedding models
==================================

Search across two embedding models: one model's queries, another's index, a mixed index.

A search team has an index embedded by model B and a new client that embeds queries with
model A (another vendor, a smaller on-device model, an image encoder against a text index).
A map from A's space to B's, fitted on texts that both models embedded (never the
evaluation's), lets A's queries search B's index, and lets documents embedded by A sit in
B's index beside B's own (a partial re-index; a mixed-modality index has the same shape).
nDCG@10 against relevance judgements says what each step keeps.

Here the two "models" are synthetic (two different nonlinear views of shared latent
topics; a few seconds, no download). ``benchmarks/applications/mixed_models.py`` runs the
same steps on the Semanlink arXiv tagging set embedded by all-MiniLM-L6-v2 (A) and
WordLlama (B) (:ref:`applications`).
"""

# %%
# Two models of the same texts
# ----------------------------
# Documents, judged queries (each relevant to one to three documents) and other texts that
# both models embedded, which the map is fitted on.

import numpy as np

from sklearn_compat import AlignedNeighbors, OrthogonalProcrustesAligner
from sklearn_compat.metrics import ndcg_at_k


def synthetic(rng, latent=24, n_docs=400, n_queries=300, n_fit=3000):
    """Two models' views of shared latent topics: documents, judged queries, fit texts."""
    view_a, view_b = rng.normal(size=(latent, 64)), rng.normal(size=(latent, 48))

    def model_a(z):
        return np.tanh(z @ view_a / np.sqrt(latent))

    def model_b(z):
        h = z @ view_b / np.sqrt(latent)
        return h + 0.3 * np.sin(h)

    docs = rng.normal(size=(n_docs, latent))
    judged = [rng.choice(n_docs, size=rng.integers(1, 4), replace=False) for _ in range(n_queries)]
    queries = np.array([docs[j].mean(axis=0) for j in judged])
    queries += 0.6 * rng.normal(size=queries.shape)
    fit = rng.normal(size=(n_fit, latent))  # other texts, embedded by both models
    return {
        "queries_a": model_a(queries),
        "documents_a": model_a(docs),
        "fit_a": model_a(fit),
        "documents_b": model_b(docs),
        "queries_b": model_b(queries),
        "fit_b": model_b(fit),
        "relevance": judged,
    }


def rank_scores(top, n_docs):
    """A ranking (rows of document indices, best first) as scores: k, k-1, ..., 1, then 0."""
    scores = np.zeros((len(top), n_docs))
    np.put_along_axis(scores, top, np.arange(top.shape[1], 0, -1.0)[None, :], axis=1)
    return scores


rng = np.random.default_rng(0)
data = synthetic(rng)
qrels = data["relevance"]

# %%
# The map, and three ways to use it
# ---------------------------------
# Fit A -> B on texts both models embedded (never the evaluation's). Then A's queries
# search B's index mapped, or through the query path
# (:class:`~sklearn_compat.AlignedNeighbors`: CSLS and centring), and a mixed index holds
# half the documents as B's own vectors and half embedded by A and mapped.

aligner = OrthogonalProcrustesAligner().fit(data["fit_a"], data["fit_b"])
mapped_queries = aligner.transform(data["queries_a"])
search = AlignedNeighbors(aligner, n_neighbors=10).fit(data["documents_b"])
top10 = search.kneighbors(data["queries_a"], return_distance=False)

n_docs = len(data["documents_b"])
from_a = rng.permutation(n_docs)[: n_docs // 2]
mixed_index = data["documents_b"].copy()
mixed_index[from_a] = aligner.transform(data["documents_a"][from_a])

# %%
# What each way keeps
# -------------------
# nDCG@10 against the judgements, and the share of the index model's own nDCG@10 (B's
# queries on B's index). A and B share no basis: A's raw queries (cut to B's width) find
# nothing in B's index.

width = data["documents_b"].shape[1]
rows = [
    ("A alone (A queries, A index)", data["queries_a"], data["documents_a"]),
    ("B alone (B queries, B index)", data["queries_b"], data["documents_b"]),
    ("A queries, B index, raw", data["queries_a"][:, :width], data["documents_b"]),
    ("A queries mapped, B index", mapped_queries, data["documents_b"]),
    ("B queries, mixed index", data["queries_b"], mixed_index),
    # The query path's ranking, scored as given: rank scores 10..1 against one-hot docs.
    ("A queries, AlignedNeighbors", rank_scores(top10, n_docs), np.eye(n_docs)),
]
baseline = ndcg_at_k(data["queries_b"], data["documents_b"], qrels)
print(f"{'':40s}{'nDCG@10':>9s}{'of B alone':>12s}")
for label, queries, index in rows:
    similarity = "dot" if label.endswith("AlignedNeighbors") else "cosine"
    value = ndcg_at_k(queries, index, qrels, similarity=similarity)
    print(f"{label:40s}{value:9.4f}{value / baseline:12.3f}")

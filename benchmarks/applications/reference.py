"""nDCG@k by an independent implementation: trec_eval's ``ndcg_cut`` through ir_measures.

The application benchmarks check every ``ndcg_at_k`` figure they print against it (ties
aside: trec_eval breaks them by document name, ``ndcg_at_k`` counts them against the query).
"""

import numpy as np


def available():
    try:
        import ir_measures  # noqa: F401
    except ImportError:
        return False
    return True


def trec_ndcg(scores, relevance, k=10, depth=100):
    """Mean nDCG@k of a dense score matrix (``-inf``: never ranked) against sparse gains.

    Only each query's ``depth`` best-scored items enter the run (nDCG@k reads the top k),
    and only the queries with a relevant item are averaged, as ``ndcg_at_k`` does.
    """
    import ir_measures

    depth = min(depth, scores.shape[1] - 1)
    top = np.argpartition(-scores, depth, axis=1)[:, :depth]
    run = {
        str(q): {str(i): float(scores[q, i]) for i in top[q] if np.isfinite(scores[q, i])}
        for q in range(scores.shape[0])
    }
    relevance = relevance.tocsr()
    qrels = {}
    for q in range(scores.shape[0]):
        row = slice(relevance.indptr[q], relevance.indptr[q + 1])
        judged = {
            str(i): int(g)
            for i, g in zip(relevance.indices[row], relevance.data[row], strict=True)
            if g > 0 and np.isfinite(scores[q, i])
        }
        if judged:
            qrels[str(q)] = judged
    measure = ir_measures.nDCG @ k
    return ir_measures.calc_aggregate([measure], qrels, run)[measure]

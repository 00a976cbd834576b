"""An approximate (FAISS HNSW) index over a gallery in its scoring form, CSLS included.

CSLS ranks a query's gallery items by ``cos(q, g) - r(g) / 2`` (the query's own ``r(q)``
does not change its order).  That is an inner product of augmented vectors,
``[q, 1, 0] . [g, -r(g) / 2, e(g)]``, and with ``e(g) = sqrt(R^2 - |g|^2 - r(g)^2 / 4)``
every augmented gallery vector has the same norm ``R``, so the inner product order is the
Euclidean order (``|q' - g'|^2 = |q'|^2 + R^2 - 2 q'.g'``) and an ordinary L2 HNSW graph
(Malkov and Yashunin, 2018, "Efficient and robust approximate nearest neighbor search
using Hierarchical Navigable Small World graphs") searches it.  The same index answers the
plain cosine order with the query ``[q, 0, 0]``, which gives ``r(q)``.  The candidates
are re-scored exactly against the stored gallery, so scores match the exact path's.
"""

import numpy as np
import torch

__all__ = ["HNSWGallery"]

# Gallery rows augmented and added to the graph per call (bounds the temporary copy).
_ADD_ROWS = 65536
DEFAULT_PARAMS = {"M": 32, "ef_construction": 64, "ef_search": 128}


def _faiss():
    try:
        import faiss
    except ImportError as error:  # pragma: no cover - faiss-cpu is in the [all] extra
        raise ImportError(
            "index='hnsw' needs faiss: pip install 'sklearn-embedding-compat[all]' "
            "(or faiss-cpu)."
        ) from error
    return faiss


class HNSWGallery:
    """An HNSW graph over the augmented gallery; search returns exact scores.

    Parameters
    ----------
    G : Tensor of shape (n, d), on CPU
        The gallery in its scoring form (unit rows).
    penalty : Tensor of shape (n,) or None
        CSLS's ``r(g)`` of each row (None: plain cosine).
    M, ef_construction, ef_search : int
        FAISS's HNSW parameters: links per node, and the candidate lists of the build and
        of the search (the search list is raised to ``k`` when a call asks for more).
    """

    def __init__(self, G, penalty, *, M, ef_construction, ef_search):
        faiss = _faiss()
        n, d = G.shape
        G = G.to(torch.float32)
        half = torch.zeros(n) if penalty is None else penalty.to(torch.float32).cpu() / 2
        norms2 = (G * G).sum(dim=1) + half * half
        self.radius2 = float(norms2.max()) * (1 + 1e-6)
        self.ef_search = int(ef_search)
        self.index = faiss.IndexHNSWFlat(d + 2, int(M))
        self.index.hnsw.efConstruction = int(ef_construction)
        for start in range(0, n, _ADD_ROWS):
            rows = slice(start, start + _ADD_ROWS)
            extra = torch.sqrt(torch.clamp(self.radius2 - norms2[rows], min=0))
            block = torch.cat([G[rows], -half[rows, None], extra[:, None]], dim=1)
            self.index.add(np.ascontiguousarray(block.numpy()))

    def _candidates(self, Q, k, csls):
        q = np.zeros((Q.shape[0], Q.shape[1] + 2), dtype=np.float32)
        q[:, :-2] = Q.to(torch.float32).cpu().numpy()
        q[:, -2] = 1.0 if csls else 0.0
        params = _faiss().SearchParametersHNSW()
        params.efSearch = max(self.ef_search, k)
        return self.index.search(q, k, params=params)[1]

    def search(self, Q, G, k, *, penalty=None, csls_k=None):
        """``(scores, indices)`` as :func:`sklearn_compat._core.knn.search` returns them,
        from the graph's candidates (exact scores, approximate neighbours)."""
        found = torch.from_numpy(self._candidates(Q, k, penalty is not None)).to(Q.device)
        found = torch.where(found >= 0, found, 0)  # -1: fewer than k reachable items
        sims = torch.einsum("nd,nkd->nk", Q, G[found])
        if penalty is None:
            top = torch.sort(sims, dim=1, descending=True)
            return top.values, torch.gather(found, 1, top.indices)
        near = torch.from_numpy(self._candidates(Q, csls_k, False)).to(Q.device)
        near = torch.where(near >= 0, near, 0)
        query_penalty = torch.einsum("nd,nkd->nk", Q, G[near]).mean(dim=1, keepdim=True)
        top = torch.sort(2 * sims - penalty[found], dim=1, descending=True)
        return top.values - query_penalty, torch.gather(found, 1, top.indices)

    def memory_bytes(self):
        """Bytes held by the index: its augmented vectors and the graph's links."""
        hnsw = self.index.hnsw
        vectors = self.index.ntotal * self.index.d * 4
        return int(vectors + hnsw.neighbors.size() * 4 + hnsw.offsets.size() * 8)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["index"] = _faiss().serialize_index(self.index)
        return state

    def __setstate__(self, state):
        state["index"] = _faiss().deserialize_index(state["index"])
        self.__dict__.update(state)

"""Approximate (FAISS HNSW or IVF) indexes over a gallery in its scoring form, CSLS included.

CSLS ranks a query's gallery items by ``cos(q, g) - r(g) / 2`` (the query's own ``r(q)``
does not change its order).  That is an inner product of augmented vectors,
``[q, 1, 0] . [g, -r(g) / 2, e(g)]``, and with ``e(g) = sqrt(R^2 - |g|^2 - r(g)^2 / 4)``
every augmented gallery vector has the same norm ``R``, so the inner product order is the
Euclidean order (``|q' - g'|^2 = |q'|^2 + R^2 - 2 q'.g'``) and an ordinary L2 index
searches it: an HNSW graph (Malkov and Yashunin, 2018, "Efficient and robust approximate
nearest neighbor search using Hierarchical Navigable Small World graphs") or an inverted
file of k-means cells (Jegou et al., 2011, "Product quantization for nearest neighbor
search"), probed ``nprobe`` cells at a time.  The same index answers the
plain cosine order with the query ``[q, 0, 0]``, which gives ``r(q)``.  The candidates
are re-scored exactly against the stored gallery, so scores match the exact path's.
"""

import numpy as np
import torch

__all__ = ["DEFAULT_PARAMS", "FaissGallery"]

# Gallery rows augmented and added to the graph per call (bounds the temporary copy).
_ADD_ROWS = 65536
# Parameters of each kind of index (nlist=None: the square root of the gallery size).
DEFAULT_PARAMS = {
    "hnsw": {"M": 32, "ef_construction": 64, "ef_search": 128},
    "ivf": {"nlist": None, "nprobe": 128},
}
# Rows per IVF cell that its k-means is trained on (a seeded sample).
_TRAIN_PER_LIST = 40


def _faiss():
    try:
        import faiss
    except ImportError as error:  # pragma: no cover - faiss-cpu is in the [all] extra
        raise ImportError(
            "index='hnsw' needs faiss: pip install 'sklearn-embedding-compat[all]' (or faiss-cpu)."
        ) from error
    return faiss


class FaissGallery:
    """An HNSW graph or an IVF index over the augmented gallery; exact scores.

    Parameters
    ----------
    G : Tensor of shape (n, d), on CPU
        The gallery in its scoring form (unit rows).
    penalty : Tensor of shape (n,) or None
        CSLS's ``r(g)`` of each row (None: plain cosine).
    kind : {"hnsw", "ivf"}
        The index.
    params : dict
        ``"hnsw"``: ``M`` (links per node), ``ef_construction`` and ``ef_search`` (the
        candidate lists of the build and of the search, raised to ``k`` when a call asks
        for more).  ``"ivf"``: ``nlist`` (cells) and ``nprobe`` (cells searched per query).
    seed : int
        Seed of the IVF training sample.
    """

    def __init__(self, G, penalty, kind, params, seed=0):
        faiss = _faiss()
        self.kind, self.params = kind, dict(params)
        n, d = G.shape
        G = G.to(torch.float32)
        half = torch.zeros(n) if penalty is None else penalty.to(torch.float32).cpu() / 2
        norms2 = (G * G).sum(dim=1) + half * half
        self.radius2 = float(norms2.max()) * (1 + 1e-6)

        def augmented(rows):
            extra = torch.sqrt(torch.clamp(self.radius2 - norms2[rows], min=0))
            block = torch.cat([G[rows], -half[rows, None], extra[:, None]], dim=1)
            return np.ascontiguousarray(block.numpy())

        if kind == "hnsw":
            self.index = faiss.IndexHNSWFlat(d + 2, int(params["M"]))
            self.index.hnsw.efConstruction = int(params["ef_construction"])
        else:
            nlist = params["nlist"] or max(1, int(round(np.sqrt(n))))
            self.params["nlist"] = nlist = min(int(nlist), n)
            self.index = faiss.IndexIVFFlat(faiss.IndexFlatL2(d + 2), d + 2, nlist)
            self.index.cp.niter = 10
            generator = torch.Generator().manual_seed(seed)
            take = torch.randperm(n, generator=generator)[: _TRAIN_PER_LIST * nlist]
            self.index.train(augmented(torch.sort(take).values))
        for start in range(0, n, _ADD_ROWS):
            self.index.add(augmented(slice(start, start + _ADD_ROWS)))

    def _candidates(self, Q, k, csls):
        q = np.zeros((Q.shape[0], Q.shape[1] + 2), dtype=np.float32)
        q[:, :-2] = Q.to(torch.float32).cpu().numpy()
        q[:, -2] = 1.0 if csls else 0.0
        faiss = _faiss()
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(int(self.params["ef_search"]), k)
        else:
            params = faiss.SearchParametersIVF()
            params.nprobe = min(int(self.params["nprobe"]), self.params["nlist"])
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
        """Bytes held by the index: its augmented vectors, graph links or list ids."""
        vectors = self.index.ntotal * self.index.d * 4
        if self.kind == "hnsw":
            hnsw = self.index.hnsw
            return int(vectors + hnsw.neighbors.size() * 4 + hnsw.offsets.size() * 8)
        return int(vectors + self.index.ntotal * 8 + self.index.nlist * self.index.d * 4)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["index"] = _faiss().serialize_index(self.index)
        return state

    def __setstate__(self, state):
        state["index"] = _faiss().deserialize_index(state["index"])
        self.__dict__.update(state)

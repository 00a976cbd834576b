"""Exact top-k search and CSLS crowding for galleries of millions of rows, in float32 torch.

Two kernels behind :class:`~sklearn_compat.AlignedNeighbors`:

- :func:`search` scores blocks of queries against column chunks of the gallery with one
  GEMM each and keeps a running top-k, so the working memory is one (block, chunk) slab
  whatever the gallery size, and no copy of the gallery is made.  The top-k of a slab is
  taken in two stages (the best ``k`` groups of 64 columns by their maximum, then the top
  ``k`` of those groups' columns): exact, and much cheaper on CPU than
  :func:`torch.topk` over the whole slab, which would dominate the search.
- :func:`crowding` measures CSLS's ``r(g)``, the mean cosine of each row to its ``k``
  nearest reference rows (Conneau et al., 2018, "Word translation without parallel
  data"), at a cost of about ``n x candidates x d`` instead of ``n x n_reference x d``:
  the reference rows are partitioned into cells of about ``candidates / 8`` rows by a few
  rounds of spherical k-means (seeded), and each row is compared with the reference rows
  of the 8 cells whose centroids are nearest to it.  Nearest neighbours share a cell or
  sit in adjacent ones, so the top-``k`` found is the true one for most rows (and never
  above it: a subset is searched).  Each row is first ranked in its own cell; the
  ``k``-th value found there bounds its final one from below, so the slabs of the other
  cells are screened by the maxima of groups of 8 columns and only the groups above the
  bound are ranked: the selection costs a fraction of the GEMM, where a
  :func:`torch.topk` of every (rows x ~512) slab cost about as much as the GEMM itself.
  A random sample of
  the reference rows is no substitute: the ``k`` nearest of ``m`` sampled rows are about
  the ``k n / m``-th nearest of all, a coarser and noisier neighbourhood that can cost the
  query path more top-1 than CSLS gains, where the cell pass stays close to the exact one.
"""

import contextlib
import math
from concurrent.futures import ThreadPoolExecutor

import torch

__all__ = ["crowding", "rowwise", "search", "topk_columns"]

# Columns per group of the two-stage top-k (the groups' maxima are one cheap reduction):
# 64 on slabs at least this wide, 8 on narrower ones (cells, centroids).
_GROUP = 64
_TWO_STAGE_WIDTH = 8192
_NARROW_GROUP = 8
# Gallery columns per chunk of the search: a (block, chunk) float32 slab is 128 MiB.
_CHUNK = 32768
# Query rows per block of the search: the gallery is read once per block, so tall blocks
# (1,024 rows against 256 measured 2x faster at 200,000 x 384).
_BLOCK = 1024
# Default reference rows each row of the crowding pass is compared with, about.
CANDIDATES = 4096
# Reference sets up to this many rows are measured exactly (every row against all): on
# the 20,000-word gallery of the MUSE pair the cell pass moved top-1 by 0.001 to 0.004.
EXACT_REFERENCE = 32768
# Rows per block of the row-wise transforms of fit (its working memory beside the output).
_ROWS = 8192
# Rows probing a cell scored per GEMM, at most (cells are narrow: the GEMM needs height).
_CELL_BLOCK = 8192
# Groups of 8 columns above a row's bound kept per slab of the screened pass (rows with
# more are ranked in full).
_SCREEN_GROUPS = 8
# Cells of the reference each row of the crowding pass is compared with.
_PROBES = 8
# Threads scoring cells at once in the crowding pass, at most (each keeps a running top k
# of every row: n x k values).
_WORKERS = 4
# Rows of the reference sample per cell that the k-means is trained on, and its rounds.
_TRAIN_PER_CELL = 24
_KMEANS_ROUNDS = 6


def topk_columns(S, k):
    """``(values, columns)`` of the ``k`` largest entries of each row of ``S``, descending.

    Exact (as :func:`torch.topk`; ties in no particular order).  The columns are split
    into groups of 64 (8 on slabs narrower than 8,192 columns): a group holding one of a
    row's top ``k`` entries has a maximum at least the ``k``-th largest entry, and at most
    ``k - 1`` other groups can have a larger maximum, so the top ``k`` entries lie in the
    ``k`` groups with the largest maxima.
    """
    rows, n = S.shape
    k = min(k, n)
    # Wide slabs (the search's chunks) in groups of 64; narrow ones (the cells of the
    # crowding pass, the centroids of its probes) in groups of 8, about 2x faster than
    # torch.topk there; the gathers cost more than they save under 4 k groups.
    group = _GROUP if n >= _TWO_STAGE_WIDTH else _NARROW_GROUP
    whole = n - n % group
    if whole < 4 * k * group:
        top = torch.topk(S, k, dim=1, sorted=True)
        return top.values, top.indices
    groups = S[:, :whole].view(rows, whole // group, group).amax(dim=2)
    best = torch.topk(groups, k, dim=1, sorted=False).indices
    offsets = torch.arange(group, device=S.device)
    columns = (best[:, :, None] * group + offsets).reshape(rows, -1)
    if whole < n:
        tail = torch.arange(whole, n, device=S.device).expand(rows, -1)
        columns = torch.cat([columns, tail], dim=1)
    top = torch.topk(torch.gather(S, 1, columns), k, dim=1, sorted=True)
    return top.values, torch.gather(columns, 1, top.indices)


def rowwise(A, func, device, dtype):
    """``func`` (rows -> rows of the same shape) applied to blocks of rows of ``A``.

    The result is one preallocated tensor on ``device``; the temporaries of ``func`` are
    one block's, so the peak memory is the output plus O(block) whatever ``A``'s size.
    """
    out = torch.empty(A.shape, dtype=dtype, device=device)
    for start in range(0, A.shape[0], _ROWS):
        out[start : start + _ROWS] = func(A[start : start + _ROWS])
    return out


def _merge(values, columns, k):
    """Top ``k`` of the concatenated per-chunk candidates."""
    values, columns = torch.cat(values, dim=1), torch.cat(columns, dim=1)
    top = torch.topk(values, min(k, values.shape[1]), dim=1, sorted=True)
    return top.values, torch.gather(columns, 1, top.indices)


def search(Q, G, k, *, penalty=None, csls_k=None, budget=None):
    """Exact top-``k`` gallery rows of each query by cosine, or by CSLS with a penalty.

    Parameters
    ----------
    Q : Tensor of shape (n_queries, d)
        L2-normalised queries.
    G : Tensor of shape (n_gallery, d)
        L2-normalised gallery, same device and dtype (never copied).
    k : int
        Neighbours per query.
    penalty : Tensor of shape (n_gallery,), default=None
        CSLS's ``r(g)`` of each gallery row.  With it the rows are ranked by
        ``2 cos(q, g) - r(q) - r(g)``, where ``r(q)`` is the mean cosine of ``q`` to its
        ``csls_k`` nearest gallery rows (measured from the same GEMM: it does not change
        the order, only the scores).
    csls_k : int, default=None
        Neighbourhood of ``r(q)``; required with ``penalty``.
    budget : int, default=None
        Bytes of similarity slab, at most: the slab is 1,024 query rows by up to 32,768
        gallery rows (128 MiB of float32), narrower under a smaller budget.

    Returns
    -------
    scores : Tensor of shape (n_queries, k)
        Cosines (or CSLS values), decreasing along each row.
    indices : Tensor of shape (n_queries, k), int64
    """
    block = _BLOCK
    chunk = _CHUNK if budget is None else max(_GROUP, min(_CHUNK, budget // (block * 4)))
    n, n_gallery = Q.shape[0], G.shape[0]
    scores = torch.empty((n, k), dtype=Q.dtype, device=Q.device)
    indices = torch.empty((n, k), dtype=torch.int64, device=Q.device)
    half = None if penalty is None else penalty / 2
    for start in range(0, n, block):
        stop = min(start + block, n)
        found, where, near = [], [], []
        for first in range(0, n_gallery, chunk):
            last = min(first + chunk, n_gallery)
            sims = Q[start:stop] @ G[first:last].T
            if half is not None:
                near.append(topk_columns(sims, csls_k)[0])
                # cos - r(g) / 2 orders a query's row as CSLS does, in place.
                sims.sub_(half[first:last])
            values, columns = topk_columns(sims, k)
            found.append(values)
            where.append(columns + first)
        values, columns = _merge(found, where, k)
        if half is not None:
            query_penalty = _merge(near, near, csls_k)[0].mean(dim=1, keepdim=True)
            values = 2 * values - query_penalty
        scores[start:stop], indices[start:stop] = values, columns
    return scores, indices


def _exact_crowding(A, R, k, same, chunk):
    """Mean cosine of each row of ``A`` to its ``k`` nearest rows of ``R`` (all compared)."""
    out = torch.empty(A.shape[0], dtype=A.dtype, device=A.device)
    for start in range(0, A.shape[0], _BLOCK):
        stop = min(start + _BLOCK, A.shape[0])
        near = []
        for first in range(0, R.shape[0], chunk):
            last = min(first + chunk, R.shape[0])
            sims = A[start:stop] @ R[first:last].T
            if same:
                _mask_own(sims, start - first)
            near.append(topk_columns(sims, k)[0])
        out[start:stop] = _merge(near, near, k)[0].mean(dim=1)
    return out


def _mask_own(sims, shift):
    """Set entry ``(r, r + shift)`` of a slab to -inf where that column exists."""
    rows = torch.arange(sims.shape[0], device=sims.device)
    cols = rows + shift
    inside = (cols >= 0) & (cols < sims.shape[1])
    sims[rows[inside], cols[inside]] = -torch.inf


def _assign(X, centroids):
    """Index of the most similar centroid of each row (blockwise, bounded memory)."""
    out = torch.empty(X.shape[0], dtype=torch.int64, device=X.device)
    step = max(1, (32 * 2**20) // (4 * centroids.shape[0]))
    for start in range(0, X.shape[0], step):
        out[start : start + step] = (X[start : start + step] @ centroids.T).argmax(dim=1)
    return out


def _cells(R, n_cells, generator):
    """Centroids of a spherical k-means of a seeded sample of the rows of ``R``."""
    n = R.shape[0]
    device = R.device
    take = min(n, n_cells * _TRAIN_PER_CELL)
    sample = R[torch.randperm(n, generator=generator)[:take].to(device)]
    centroids = sample[torch.randperm(take, generator=generator)[:n_cells].to(device)].clone()
    for _ in range(_KMEANS_ROUNDS):
        owner = _assign(sample, centroids)
        sums = torch.zeros_like(centroids).index_add_(0, owner, sample)
        sizes = torch.bincount(owner, minlength=n_cells)
        # An empty cell keeps its centroid (it may win rows in the full assignment).
        sums[sizes == 0] = centroids[sizes == 0]
        # torch's own normalize, not ranking.unit_rows: no wait on the device per round
        # (sums of unit rows have ordinary norms, which is all its plain norm gets right).
        centroids = torch.nn.functional.normalize(sums, dim=1)
    return centroids


def _probes(X, centroids, probes, workers=1):
    """The ``probes`` most similar centroids of each row, most similar first (blockwise,
    the blocks dealt out to ``workers`` threads as in :func:`_share`)."""
    out = torch.empty((X.shape[0], probes), dtype=torch.int64, device=X.device)
    step = max(1, (32 * 2**20) // (4 * centroids.shape[0]))

    def block(_, start):
        sims = X[start : start + step] @ centroids.T
        out[start : start + step] = topk_columns(sims, probes)[1]

    _share([None] * workers, [(start,) for start in range(0, X.shape[0], step)], block)
    return out


def _grouped(keys, n_groups):
    """``(order, ends)``: positions sorted by key and where each key's run ends."""
    order = torch.argsort(keys, stable=True)
    ends = torch.cumsum(torch.bincount(keys, minlength=n_groups), 0)
    return order, ends.cpu().tolist()


def crowding(A, R, k, *, same=False, candidates=None, exact_below=None, seed=0):
    """CSLS's ``r``: mean cosine of each row of ``A`` to its ``k`` nearest rows of ``R``.

    Parameters
    ----------
    A : Tensor of shape (n, d)
        L2-normalised rows to measure (the gallery).
    R : Tensor of shape (n_reference, d)
        L2-normalised reference rows (mapped queries, or ``A`` itself with ``same``).
    k : int
        Neighbourhood size (``csls_k``).
    same : bool, default=False
        ``R`` is ``A``: each row is left out of its own neighbourhood.
    candidates : int, default=None
        Reference rows each row is compared with, about (default 4,096).
    exact_below : int, default=None
        References of up to this many rows are measured exactly (default 32,768).
    seed : int, default=0
        Seed of the k-means sample and initialisation (the result is deterministic).

    Returns
    -------
    Tensor of shape (n,)

    Notes
    -----
    The reference rows are cut into cells of about ``candidates / 8`` rows by a spherical
    k-means, and each row of ``A`` is compared with the reference rows of the 8 cells whose
    centroids are nearest to it (an inverted-file search, organised cell by cell: the rows
    probing a cell are scored against its rows with one GEMM and a running top-``k`` per
    row is kept).  Cost: ``n x (n_cells + candidates) x d``.  The result is the exact top
    ``k`` of the probed cells: the screening by a lower bound (each row's top ``k`` in its
    own cell, ranked first) only skips groups of columns that cannot enter it.
    """
    candidates = candidates or CANDIDATES
    n_reference = R.shape[0]
    if n_reference <= (EXACT_REFERENCE if exact_below is None else exact_below):
        return _exact_crowding(A, R, k, same, _CHUNK)
    generator = torch.Generator().manual_seed(seed)
    n_probes = _PROBES
    n_cells = max(n_probes, math.ceil(n_reference * n_probes / candidates))
    centroids = _cells(R, n_cells, generator)
    threads = torch.get_num_threads()
    workers = min(threads, _WORKERS) if A.device.type == "cpu" else 1
    with _threads(threads // workers):
        probes = _probes(A, centroids, n_probes, workers)
        # A row's own cell is its most similar centroid (probes are sorted).
        owner = probes[:, 0] if same else _assign(R, centroids)
        member_order, member_ends = _grouped(owner, n_cells)
        member_starts = [0, *member_ends[:-1]]
        most = max(b - a for a, b in zip(member_starts, member_ends, strict=True))
        own = torch.full((A.shape[0], k), -torch.inf, dtype=A.dtype, device=A.device)
        passes = [_CellPass(A, R, k, most, own) for _ in range(workers)]
        # First each row against the cell it is nearest to, where most of its neighbours
        # are: its top k there bounds the final k-th value from below, so the slabs of
        # the other cells are screened by a cheap group maximum, not ranked in full.
        first = (member_order, member_ends) if same else _grouped(probes[:, 0], n_cells)
        jobs = [
            (rows, member_order[member_starts[cell] : member_ends[cell]])
            for cell, rows in enumerate(_runs(*first))
            if rows.shape[0] and member_ends[cell] > member_starts[cell]
        ]
        # With ``same``, a cell's rows are its members: each row leaves itself out.
        _share(passes, jobs, lambda pass_, rows, members: pass_.own(rows, members, same))
        order, ends = _grouped(probes[:, 1:].flatten(), n_cells)
        probers = order // (n_probes - 1)  # rows of A, grouped by the other cells they probe
        jobs = [
            (rows, member_order[member_starts[cell] : member_ends[cell]])
            for cell, rows in enumerate(_runs(probers, ends))
            if rows.shape[0] and member_ends[cell] > member_starts[cell]
        ]
        _share(passes, jobs, lambda pass_, rows, members: pass_.screened(rows, members))
    # Each worker kept the top k of the cells it screened, apart from the own cells'.
    found = torch.cat([own, *(pass_.found for pass_ in passes)], dim=1)
    return torch.topk(found, k, dim=1, sorted=False).values.mean(dim=1)


@contextlib.contextmanager
def _threads(n):
    """Torch's CPU thread count set to ``n`` within the block."""
    before = torch.get_num_threads()
    if n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _share(passes, jobs, work):
    """``work(pass_, *job)`` for every job, the jobs dealt out to the passes.

    With several passes (CPU threads), each runs in its own thread on every
    ``len(passes)``-th job: torch releases the GIL in its ops, so the cells are scored
    in parallel, each with single-threaded ops.  One parallel GEMM per cell, with the
    small selection ops of its slab parallel too, stalled on every op on a loaded box
    (each parallel region waits for all its threads: a 4,096 x 64 reduction took 10 ms
    on 2 threads against 0.1 ms on 1).
    """
    if len(passes) == 1:
        for job in jobs:
            work(passes[0], *job)
        return

    def run(which):
        for job in jobs[which :: len(passes)]:
            work(passes[which], *job)

    with ThreadPoolExecutor(len(passes)) as pool:
        list(pool.map(run, range(len(passes))))


def _runs(order, ends):
    """The runs of ``order`` that :func:`_grouped` delimits, one per group."""
    start = 0
    for stop in ends:
        yield order[start:stop]
        start = stop


class _CellPass:
    """The running top ``k`` of each row of ``A`` over the reference cells it probes.

    The gathered rows, cells and similarity slabs are written into buffers allocated
    once (fresh tensors of these sizes cost page faults on every cell: the gathers ran
    7x slower), so the working memory is one block of rows, one cell and one slab.
    """

    def __init__(self, A, R, k, most_members, own):
        self.A, self.R, self.k, self.own_found = A, R, k, own
        self.found = torch.full((A.shape[0], k), -torch.inf, dtype=A.dtype, device=A.device)
        d = A.shape[1]
        self._rows = torch.empty((_CELL_BLOCK, d), dtype=A.dtype, device=A.device)
        self._pool = torch.empty((most_members, d), dtype=A.dtype, device=A.device)
        self._sims = torch.empty(_CELL_BLOCK * most_members, dtype=A.dtype, device=A.device)

    def _slabs(self, rows, members):
        """``(offset, rows, slab)``: blocks of ``rows`` scored against ``members``."""
        pool = torch.index_select(self.R, 0, members, out=self._pool[: members.shape[0]])
        # Blocks of equal height (a cell's probers split 4,096 + 33 wasted a GEMM).
        n_blocks = -(-rows.shape[0] // _CELL_BLOCK)
        height = -(-rows.shape[0] // n_blocks)
        for start in range(0, rows.shape[0], height):
            some = rows[start : start + height]
            block = torch.index_select(self.A, 0, some, out=self._rows[: some.shape[0]])
            sims = self._sims[: some.shape[0] * pool.shape[0]].view(some.shape[0], -1)
            yield start, some, torch.mm(block, pool.T, out=sims)

    def own(self, rows, members, same):
        """Top ``k`` of ``rows`` in their own cell (``same``: ``rows`` is ``members``)."""
        width = min(self.k, members.shape[0] - same)
        if width <= 0:
            return
        for start, some, sims in self._slabs(rows, members):
            if same:
                _mask_own(sims, start)
            self.own_found[some, :width] = topk_columns(sims, width)[0]

    def screened(self, rows, members):
        """Merge the entries of the slabs above each row's current ``k``-th value."""
        k, group = self.k, _NARROW_GROUP
        for _, some, sims in self._slabs(rows, members):
            height, width = sims.shape
            whole = width - width % group
            current = self.found[some]
            # The row's k-th value so far: in its own cell or in the cells screened here.
            bound = torch.maximum(current[:, -1:], self.own_found[some, -1:])
            # A group of columns whose maximum is not above the row's k-th value holds
            # nothing of its top k; the ragged tail of columns is always kept.
            parts = [current, sims[:, whole:]]
            heavy = None
            if whole:
                groups = sims[:, :whole].view(height, whole // group, group)
                hit = groups.amax(dim=2) > bound
                counts = hit.sum(dim=1)
                most = int(counts.max())
                if most:
                    kept = min(most, _SCREEN_GROUPS)
                    row, column = torch.nonzero(hit, as_tuple=True)
                    rank = torch.arange(row.shape[0], device=row.device)
                    rank -= (torch.cumsum(counts, 0) - counts)[row]
                    keep = rank < kept
                    row, column, rank = row[keep], column[keep], rank[keep]
                    dense = torch.full(
                        (height, kept, group), -torch.inf, dtype=sims.dtype, device=sims.device
                    )
                    dense[row, rank] = groups[row, column]
                    parts.append(dense.view(height, kept * group))
                    if most > kept:
                        heavy = torch.nonzero(counts > kept).flatten()
            merged = torch.topk(torch.cat(parts, dim=1), k, dim=1, sorted=True).values
            if heavy is not None:
                # Rows with more groups above their bound than kept: rank their whole row.
                best = topk_columns(sims[heavy], min(k, width))[0]
                both = torch.cat([current[heavy], best], dim=1)
                merged[heavy] = torch.topk(both, k, dim=1, sorted=True).values
            self.found[some] = merged

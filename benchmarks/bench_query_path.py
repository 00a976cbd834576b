"""Benchmark: the query path at gallery scale, beside FAISS in the same run.

For each gallery size: ``AlignedNeighbors`` (defaults: centred, CSLS crowding measured at
``fit``) with the exact search and with ``index="ivf"`` (searched at each ``--nprobe``;
also ``"hnsw"`` with ``--hnsw``), beside FAISS ``IndexFlatIP`` (build plus the crowding
pass against a 4,096-row sample, k=10, the reference of issue 25) and FAISS
``IndexHNSWFlat`` (M=32, efConstruction=64, efSearch=128, cosine; skipped above ``--hnsw-
max`` rows: its build is minutes per million on 2 cores), all at the same thread count.
Prints ``fit`` and the search of 1,000 queries (k=10) in seconds, recall@10 against the
exact path (ours against our exact CSLS neighbours, FAISS HNSW against FAISS flat), the
peak memory above the start of each phase (resident set, sampled), and the ratios to FAISS
flat.

Data: no real gallery of these sizes is at hand, so rows are synthetic, shaped like
sentence embeddings: a 48-dimensional latent signal spread over 384 dimensions, isotropic
noise and a strong common direction (anisotropic).  The queries are held-out rows mapped
by a random rotation plus noise (the new model); the aligner is a Procrustes map fitted on
4,096 pairs.

Usage::

    python benchmarks/bench_query_path.py --sizes 50000 200000 1000000
"""

import argparse
import gc
import threading
import time

import _common
import faiss
import numpy as np
import torch
from scipy.stats import ortho_group

from sklearn_compat import AlignedNeighbors, OrthogonalProcrustesAligner


class PeakRSS:
    """Peak resident memory above the start, sampled every 5 ms by a thread."""

    def __enter__(self):
        self.start = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    def _watch(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss())

    @staticmethod
    def _rss():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    @property
    def mib(self):
        return (self.peak - self.start) / 2**20


def timed(func, *args):
    with PeakRSS() as memory:
        start = time.perf_counter()
        out = func(*args)
        seconds = time.perf_counter() - start
    return out, seconds, memory.mib


def synthetic(n, d, rng, latent=48):
    """Gallery rows (float32), built in blocks."""
    basis = rng.normal(size=(latent, d)).astype(np.float32) / np.sqrt(latent)
    scales = np.linspace(2.0, 0.3, latent, dtype=np.float32)
    mean = (6.0 / np.sqrt(d) * rng.normal(size=d)).astype(np.float32)
    out = np.empty((n, d), dtype=np.float32)
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        z = rng.normal(size=(m, latent)).astype(np.float32) * scales
        out[start : start + m] = z @ basis + 0.15 * rng.normal(size=(m, d)).astype(np.float32)
    out += mean
    return out


def flat_fit(G, rng):
    """FAISS flat index, and the crowding of every row against a 4,096-row sample."""
    index = faiss.IndexFlatIP(G.shape[1])
    index.add(G)
    sample = faiss.IndexFlatIP(G.shape[1])
    sample.add(G[np.sort(rng.choice(len(G), 4096, replace=False))])
    sample.search(G, 10)
    return index


def hnsw_fit(G_unit):
    index = faiss.IndexHNSWFlat(G_unit.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 64
    index.add(G_unit)
    index.hnsw.efSearch = 128
    return index


def neighbours(est, X):
    return est.kneighbors(X, 10)[1]


def faiss_neighbours(index, Q):
    return index.search(Q, 10)[1]


def recall(found, truth):
    shared = [len(set(a) & set(b)) for a, b in zip(found, truth, strict=True)]
    return float(np.mean(shared) / truth.shape[1])


def load_average():
    """The box's 1-, 5- and 15-minute load averages and the UTC time, for the record."""
    with open("/proc/loadavg") as f:
        averages = " ".join(f.read().split()[:3])
    return f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {averages}"


#: Every row reported in this run, for the results file.
TABLE = []


def report(rows, printed, reference):
    """Print the rows not printed yet, with their ratios to FAISS flat."""
    n, flat_fit_s, flat_search_s = reference
    for label, (fit_s, search_s, rec, mib) in rows.items():
        if label in printed:
            continue
        printed.add(label)
        cells = [
            f"{n:,}",
            label,
            f"{fit_s:.2f}",
            f"{search_s:.3f}",
            f"{rec:.3f}",
            f"{mib:.0f}",
            f"{fit_s / flat_fit_s:.2f}x",
            f"{search_s / flat_search_s:.2f}x",
        ]
        TABLE.append(cells)
        print("| " + " | ".join(cells) + " |", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000, 200_000, 1_000_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--hnsw", action="store_true", help="also AlignedNeighbors(index='hnsw')")
    parser.add_argument("--hnsw-max", type=int, default=50_000)
    parser.add_argument("--nprobe", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--no-flat-hnsw", action="store_true")
    _common.add_threads_argument(parser)
    _common.add_json_arguments(parser, "query_path")
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    threads = torch.get_num_threads()
    faiss.omp_set_num_threads(threads)
    print(f"{threads} threads (torch and FAISS), {args.dim}-d float32, {args.queries} queries")
    print(
        "| rows | method | fit s | search s | recall@10 | peak MiB fit | fit / flat "
        "| search / flat |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    d = args.dim
    rotation = ortho_group.rvs(d, random_state=0).astype(np.float32)
    for n in args.sizes:
        print(f"<!-- {n:,} rows: start {load_average()} -->", flush=True)
        Y = synthetic(n + args.queries, d, rng)
        held = Y[n:]
        Y = Y[:n]
        X_held = held @ rotation + 0.05 * rng.normal(size=held.shape).astype(np.float32)
        assert Y.dtype == X_held.dtype == np.float32
        pairs = rng.choice(n, 4096, replace=False)
        X_pairs = Y[pairs] @ rotation + 0.05 * rng.normal(size=(4096, d)).astype(np.float32)
        aligner = OrthogonalProcrustesAligner().fit(X_pairs, Y[pairs])
        rows = {}

        exact = AlignedNeighbors(aligner, index="exact")
        _, fit_s, fit_mib = timed(exact.fit, Y)
        truth, search_s, _ = timed(neighbours, exact, X_held)
        rows["AlignedNeighbors exact"] = (fit_s, search_s, 1.0, fit_mib)

        # FAISS flat on the same scoring-form vectors, crowding from a 4,096-row sample.
        G = exact.gallery_
        Q = exact._scoring_form(aligner.transform(X_held), torch.device("cpu")).numpy()

        flat, fit_s, fit_mib = timed(flat_fit, G, rng)
        flat_truth, search_s, _ = timed(faiss_neighbours, flat, Q)
        rows["FAISS IndexFlatIP (+4,096 crowding)"] = (fit_s, search_s, 1.0, fit_mib)
        reference = (n, fit_s, search_s)
        printed = set()
        report(rows, printed, reference)
        del flat, exact, G
        gc.collect()

        kinds = ["ivf"] + (["hnsw"] if args.hnsw else [])
        for kind in kinds:
            approx = AlignedNeighbors(aligner, index=kind)
            _, fit_s, fit_mib = timed(approx.fit, Y)
            index_mib = approx.index_.memory_bytes() / 2**20
            settings = [None] if kind == "hnsw" else args.nprobe
            for nprobe in settings:
                label = f"AlignedNeighbors index={kind!r}"
                if nprobe is not None:
                    approx.index_.params["nprobe"] = nprobe
                    label += f" nprobe={nprobe}"
                found, search_s, _ = timed(neighbours, approx, X_held)
                rows[f"{label} ({index_mib:.0f} MiB index)"] = (
                    fit_s,
                    search_s,
                    recall(found, truth),
                    fit_mib,
                )
                report(rows, printed, reference)
            del approx
            gc.collect()

        if n <= args.hnsw_max:
            G_unit = Y / np.linalg.norm(Y, axis=1, keepdims=True)
            hnsw, fit_s, fit_mib = timed(hnsw_fit, G_unit)
            Q_unit = np.ascontiguousarray(aligner.transform(X_held), dtype=np.float32)
            Q_unit /= np.linalg.norm(Q_unit, axis=1, keepdims=True)
            plain = faiss.IndexFlatIP(d)
            plain.add(G_unit)
            plain_truth = plain.search(Q_unit, 10)[1]
            del plain
            found, search_s, _ = timed(faiss_neighbours, hnsw, Q_unit)
            rows["FAISS IndexHNSWFlat (raw cosine)"] = (
                fit_s,
                search_s,
                recall(found, plain_truth),
                fit_mib,
            )
            del hnsw, G_unit
            gc.collect()

        report(rows, printed, reference)
        print(f"<!-- {n:,} rows: end {load_average()} -->", flush=True)
        del Y, held, X_held, flat_truth
        gc.collect()
    columns = ["rows", "method", "fit s", "search s", "recall@10", "peak MiB fit"]
    _common.write_results(
        args,
        "query_path",
        "The query path at gallery scale",
        [_common.table("", columns + ["fit / flat", "search / flat"], TABLE)],
        notes=f"{args.dim}-d float32 synthetic galleries, {args.queries:,} queries, k = 10, "
        f"{threads} threads for both libraries; the aligner is a Procrustes map fitted on "
        "4,096 pairs. FAISS flat's `fit` = `IndexFlatIP` build + the crowding of every row "
        "against a 4,096-row sample. Recall@10 is against the exact path.",
    )


if __name__ == "__main__":
    main()

"""The query path at gallery scale: the blocked search, the crowding pass, the HNSW index."""

import pickle

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group

import sklearn_compat._core.knn as knn
from sklearn_compat import AlignedNeighbors, OrthogonalProcrustesAligner

from _helpers import unit


def _clustered(rng, n, d=24, latent=6):
    """Rows near a low-dimensional subspace (as real embeddings), plus a common mean."""
    Z = rng.normal(size=(n, latent)) @ rng.normal(size=(latent, d))
    return Z + 0.3 * rng.normal(size=(n, d)) + 2.0


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_topk_columns_matches_torch_topk(rng):
    # Wide enough for the two-stage path, with a ragged tail of columns.
    S = torch.as_tensor(rng.normal(size=(7, 64 * 50 + 13)))
    S[3, -1] = 100.0  # the best entry of a row in the tail
    values, columns = knn.topk_columns(S, 9)
    top = torch.topk(S, 9, dim=1)
    assert torch.equal(values, top.values) and torch.equal(columns, top.indices)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_search_matches_brute_force_csls(rng, dtype, monkeypatch):
    monkeypatch.setattr(knn, "_CHUNK", 640)  # several gallery chunks and query blocks
    monkeypatch.setattr(knn, "_BLOCK", 32)
    G = torch.as_tensor(unit(rng.normal(size=(3000, 16))), dtype=dtype)
    Q = torch.as_tensor(unit(rng.normal(size=(70, 16))), dtype=dtype)
    penalty = torch.as_tensor(rng.uniform(0.1, 0.5, size=3000), dtype=dtype)
    scores, indices = knn.search(Q, G, 5, penalty=penalty, csls_k=10)
    sims = (Q @ G.T).numpy()
    r_q = np.sort(sims, axis=1)[:, -10:].mean(axis=1, keepdims=True)
    csls = 2 * sims - penalty.numpy()[None, :] - r_q
    expected = np.argsort(-csls, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(indices.numpy(), expected)
    np.testing.assert_allclose(scores.numpy(), np.take_along_axis(csls, expected, 1), atol=1e-5)
    plain = knn.search(Q, G, 5)[1].numpy()
    np.testing.assert_array_equal(plain, np.argsort(-sims, axis=1, kind="stable")[:, :5])


def test_crowding_cell_pass_bounds_and_mostly_equals_the_exact_one(rng):
    A = torch.as_tensor(unit(_clustered(rng, 4000)))
    k = 5
    sims = (A @ A.T).numpy()
    np.fill_diagonal(sims, -np.inf)
    exact = np.sort(sims, axis=1)[:, -k:].mean(axis=1)
    measured = knn.crowding(A, A, k, same=True, exact_below=4000).numpy()
    np.testing.assert_allclose(measured, exact, atol=1e-12)
    cells = knn.crowding(A, A, k, same=True, candidates=400, exact_below=1000).numpy()
    # Every row's neighbours are searched among a subset of the others.
    assert np.all(cells <= exact + 1e-12)
    assert np.mean(np.isclose(cells, exact, atol=1e-12)) > 0.8
    assert np.abs(cells - exact).mean() < 2e-3
    again = knn.crowding(A, A, k, same=True, candidates=400, exact_below=1000).numpy()
    np.testing.assert_array_equal(cells, again)  # seeded: deterministic


def test_crowding_against_other_rows_matches_numpy(rng):
    A = torch.as_tensor(unit(_clustered(rng, 1500)))
    R = torch.as_tensor(unit(_clustered(rng, 3000)))
    exact = np.sort((A @ R.T).numpy(), axis=1)[:, -4:].mean(axis=1)
    cells = knn.crowding(A, R, 4, candidates=600, exact_below=1000).numpy()
    assert np.all(cells <= exact + 1e-12)
    assert np.mean(np.isclose(cells, exact, atol=1e-12)) > 0.8


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize(("screen_groups", "n_threads"), [(8, 1), (8, 3), (1, 2)])
def test_crowding_cell_pass_is_the_top_k_of_the_probed_cells(
    rng, monkeypatch, threads, same, screen_groups, n_threads
):
    # The screened pass (a lower bound from each row's own cell, then only the groups of
    # columns above it) must find exactly the top k of the cells each row probes, in one
    # thread or with the cells dealt out to several; one group kept per slab sends many
    # rows through the full ranking as well.
    threads(n_threads)
    monkeypatch.setattr(knn, "_SCREEN_GROUPS", screen_groups)
    monkeypatch.setattr(knn, "_CELL_BLOCK", 96)  # several blocks per cell
    A = torch.as_tensor(unit(_clustered(rng, 2500)), dtype=torch.float32)
    R = A if same else torch.as_tensor(unit(_clustered(rng, 1800)), dtype=torch.float32)
    k, candidates = 6, 240
    measured = knn.crowding(A, R, k, same=same, candidates=candidates, exact_below=100).numpy()
    # The same cells and probes, then a brute-force top k over each row's probed cells.
    n_cells = max(knn._PROBES, -(-R.shape[0] * knn._PROBES // candidates))
    centroids = knn._cells(R, n_cells, torch.Generator().manual_seed(0))
    probes = knn._probes(A, centroids, knn._PROBES).numpy()
    owner = probes[:, 0] if same else knn._assign(R, centroids).numpy()
    sims = (A @ R.T).numpy()
    if same:
        np.fill_diagonal(sims, -np.inf)
    probed = (owner[None, :] == probes[:, :, None]).any(axis=1)
    expected = np.sort(np.where(probed, sims, -np.inf), axis=1)[:, -k:].mean(axis=1)
    np.testing.assert_allclose(measured, expected, rtol=0, atol=1e-6)
    assert torch.get_num_threads() == n_threads  # restored after the pass


def _search_pair(rng, n=6000, d=24):
    Y = _clustered(rng, n, d)
    Q = ortho_group.rvs(d, random_state=1)
    X = (Y - 2.0) @ Q.T + 0.2 * rng.normal(size=(n, d))
    aligner = OrthogonalProcrustesAligner().fit(X[:2000], Y[:2000])
    return aligner, X[-300:], Y


@pytest.mark.parametrize(("index", "csls_k"), [("hnsw", 10), ("hnsw", None), ("ivf", 10)])
def test_approximate_index_recalls_the_exact_neighbours(rng, index, csls_k):
    aligner, queries, Y = _search_pair(rng)
    exact = AlignedNeighbors(aligner, csls_k=csls_k, index="exact").fit(Y)
    approx = AlignedNeighbors(aligner, csls_k=csls_k, index=index).fit(Y)
    assert exact.index_ is None and approx.index_ is not None
    d_exact, i_exact = exact.kneighbors(queries)
    d_approx, i_approx = approx.kneighbors(queries)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(i_exact, i_approx, strict=True)])
    assert recall >= 0.95
    # Same centring and CSLS: where the neighbour agrees, so does the distance.
    same = i_exact == i_approx
    assert same.mean() > 0.9
    np.testing.assert_allclose(d_approx[same], d_exact[same], atol=1e-4)
    assert np.all(np.diff(d_approx, axis=1) >= 0)
    restored = pickle.loads(pickle.dumps(approx))
    np.testing.assert_array_equal(restored.kneighbors(queries)[1], i_approx)


def test_index_errors(rng):
    aligner, queries, Y = _search_pair(rng, n=2500)
    with pytest.raises(ValueError, match="csls_reference='fit'"):
        AlignedNeighbors(aligner, index="hnsw", csls_reference="batch").fit(Y)
    with pytest.raises(ValueError, match="unknown keys \\['efSearch'\\]"):
        AlignedNeighbors(aligner, index="hnsw", index_params={"efSearch": 3}).fit(Y)
    with pytest.raises(ValueError, match="index"):
        AlignedNeighbors(aligner, index="annoy").fit(Y)


@pytest.mark.cuda
def test_exact_path_and_crowding_on_cuda_match_cpu(rng, monkeypatch):
    monkeypatch.setattr(knn, "EXACT_REFERENCE", 1000)  # the cell pass, on the device too
    aligner, queries, Y = _search_pair(rng, n=4000)
    Y = Y.astype(np.float32)
    cpu = AlignedNeighbors(aligner, device="cpu", index="exact").fit(Y)
    gpu = AlignedNeighbors(aligner, device="cuda", index="exact").fit(Y)
    np.testing.assert_allclose(gpu.gallery_penalty_, cpu.gallery_penalty_, atol=1e-4)
    d_cpu, i_cpu = cpu.kneighbors(queries)
    d_gpu, i_gpu = gpu.kneighbors(queries)
    assert np.mean(i_cpu == i_gpu) > 0.99
    np.testing.assert_allclose(d_gpu, d_cpu, atol=1e-4)

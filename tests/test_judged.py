"""nDCG@k and recall@k against relevance judgements, checked against independent references:
ir_measures (trec_eval's nDCG@k and R@k), scikit-learn's ndcg_score and a brute-force sort."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import ndcg_score
from sklearn.model_selection import GridSearchCV

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.metrics import make_retrieval_scorer, ndcg_at_k, recall_at_k

from _helpers import brute_force_ndcg_recall


def _graded(rng, n_queries, n_gallery, density=0.05):
    """Random graded judgements (gains 1..3); every query judges at least one item."""
    gains = sp.random(
        n_queries,
        n_gallery,
        density=density,
        random_state=rng,
        data_rvs=lambda n: rng.integers(1, 4, n).astype(float),
    ).tolil()
    for row in range(n_queries):
        if not gains.rows[row]:
            gains[row, rng.integers(n_gallery)] = 2.0
    return gains.tocsr()


def _scores(Q, G, similarity):
    if similarity == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        G = G / np.linalg.norm(G, axis=1, keepdims=True)
    return Q @ G.T


def _ir_measures(scores, gains, excluded, k):
    """trec_eval's nDCG@k and R@k through ir_measures, excluded pairs left out of both."""
    ir_measures = pytest.importorskip("ir_measures")
    excluded = np.zeros(scores.shape, bool) if excluded is None else excluded.toarray() != 0
    qrels = [
        ir_measures.Qrel(str(q), str(d), int(gains[q, d]))
        for q, d in zip(*gains.nonzero(), strict=True)
        if not excluded[q, d]
    ]
    run = [
        ir_measures.ScoredDoc(str(q), str(d), float(scores[q, d]))
        for q, d in zip(*np.nonzero(~excluded), strict=True)
    ]
    ndcg, recall = ir_measures.nDCG @ k, ir_measures.R @ k
    result = ir_measures.calc_aggregate([ndcg, recall], qrels, run)
    return result[ndcg], result[recall]


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
@pytest.mark.parametrize("with_exclude", [False, True])
def test_matches_ir_measures_on_graded_judgements(similarity, with_exclude):
    rng = np.random.default_rng(0)
    Q, G = rng.normal(size=(60, 8)), rng.normal(size=(250, 8)) * rng.uniform(0.5, 2, (250, 1))
    gains = _graded(rng, 60, 250)
    exclude = sp.random(60, 250, density=0.1, random_state=rng, format="csr")
    exclude = exclude if with_exclude else None
    expected_ndcg, expected_recall = _ir_measures(_scores(Q, G, similarity), gains, exclude, 10)
    options = {"k": 10, "exclude": exclude, "similarity": similarity}
    assert ndcg_at_k(Q, G, gains, **options) == pytest.approx(expected_ndcg, abs=1e-6)
    assert recall_at_k(Q, G, gains, **options) == pytest.approx(expected_recall, abs=1e-6)
    # Small blocks (several per call) change nothing.
    assert ndcg_at_k(Q, G, gains, memory_budget=4096, **options) == pytest.approx(
        expected_ndcg, abs=1e-12
    )


def test_matches_ir_measures_on_a_recommender_run():
    """A matrix-factorisation run: dot scores, held-out items judged, seen items excluded."""
    rng = np.random.default_rng(1)
    users, items = rng.normal(size=(80, 6)), rng.normal(size=(300, 6))
    affinity = users @ items.T + rng.gumbel(size=(80, 300))
    interacted = affinity > np.quantile(affinity, 0.9, axis=1, keepdims=True)
    held_out = interacted & (rng.random(interacted.shape) < 0.2)
    seen = sp.csr_matrix(interacted & ~held_out)
    held_out = sp.csr_matrix(held_out.astype(float))
    expected, _ = _ir_measures(users @ items.T, held_out, seen, 10)
    got = ndcg_at_k(users, items, held_out, exclude=seen, similarity="dot")
    assert got == pytest.approx(expected, abs=1e-6)
    # The seen items crowd the head when they are not excluded.
    assert ndcg_at_k(users, items, held_out, similarity="dot") < got


@pytest.mark.parametrize("k", [1, 5, 40])
def test_matches_sklearn_ndcg_score_on_dense_judgements(k):
    rng = np.random.default_rng(2)
    Q, G = rng.normal(size=(30, 5)), rng.normal(size=(40, 5))
    dense = rng.integers(0, 4, size=(30, 40)).astype(float)
    expected = ndcg_score(dense, _scores(Q, G, "cosine"), k=k)
    assert ndcg_at_k(Q, G, sp.csr_matrix(dense), k=k) == pytest.approx(expected, abs=1e-12)


def test_ties_count_against_the_query_across_the_cut():
    """Integer vectors make many exact ties, straddling the cut at k."""
    rng = np.random.default_rng(3)
    Q = rng.integers(-1, 2, size=(40, 3)).astype(float)
    G = rng.integers(-1, 2, size=(90, 3)).astype(float)
    gains = rng.integers(0, 3, size=(40, 90)) * (rng.random((40, 90)) < 0.2)
    excluded = rng.random((40, 90)) < 0.1
    for k in (1, 4, 10):
        expected = brute_force_ndcg_recall(Q @ G.T, gains, excluded, k)
        options = {"k": k, "exclude": sp.csr_matrix(excluded), "similarity": "dot"}
        got = (
            ndcg_at_k(Q, G, sp.csr_matrix(gains), **options),
            recall_at_k(Q, G, sp.csr_matrix(gains), **options),
        )
        np.testing.assert_allclose(got, expected, atol=1e-12)


def test_collapsed_gallery_scores_zero():
    G = np.ones((20, 4))
    Q = np.random.default_rng(4).normal(size=(5, 4))
    relevance = [[0, 3], [1], [2], [5, 6, 7], [19]]
    assert ndcg_at_k(Q, G, relevance, k=5) == 0.0
    assert recall_at_k(Q, G, relevance, k=5) == 0.0
    # Every item is in the head when k covers the gallery: recall is then 1.
    assert recall_at_k(Q, G, relevance, k=20) == 1.0


def test_judgement_forms_agree():
    rng = np.random.default_rng(5)
    Q, G = rng.normal(size=(6, 4)), rng.normal(size=(30, 4))
    sets = [{1, 2}, [3], np.array([4, 5, 4]), (), [29], range(10, 14)]
    matrix = sp.lil_matrix((6, 30))
    for row, items in enumerate(sets):
        for item in items:
            matrix[row, item] = 1.0
    as_mappings = [{int(i): 1.0 for i in items} for items in sets]
    expected = ndcg_at_k(Q, G, matrix.tocsr(), k=3)
    assert ndcg_at_k(Q, G, sets, k=3) == expected
    assert ndcg_at_k(Q, G, as_mappings, k=3) == expected
    assert ndcg_at_k(Q, G, sp.coo_array(matrix), k=3) == expected
    # The query with no judgement is left out of the mean, not counted as 0.
    per_query = [ndcg_at_k(Q[[i]], G, [sets[i]], k=3) for i in (0, 1, 2, 4, 5)]
    assert expected == pytest.approx(np.mean(per_query))


def test_exclude_removes_the_query_itself_and_its_relevance():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(25, 5))
    itself = [[i] for i in range(25)]
    # Each row is its own nearest neighbour: nDCG 1 unless the row is excluded.
    assert ndcg_at_k(X, X, itself, k=1) == 1.0
    dots = X @ X.T
    np.fill_diagonal(dots, -np.inf)
    neighbours = [[int(j)] for j in dots.argmax(axis=1)]
    assert ndcg_at_k(X, X, neighbours, k=1, exclude=sp.eye(25), similarity="dot") == 1.0
    # A relevant item that is also excluded leaves the judgement.
    both = [[i, neighbours[i][0]] for i in range(25)]
    assert ndcg_at_k(X, X, both, k=1, exclude=itself, similarity="dot") == 1.0
    with pytest.raises(ValueError, match="No query has a relevant item"):
        ndcg_at_k(X, X, itself, exclude=itself)


def test_dot_and_cosine_rank_differently():
    Q = np.array([[1.0, 0.0]])
    G = np.array([[1.0, 0.1], [5.0, 3.0]])  # item 1: long (popular) but off-direction
    assert ndcg_at_k(Q, G, [[1]], k=1, similarity="dot") == 1.0
    assert ndcg_at_k(Q, G, [[1]], k=1, similarity="cosine") == 0.0


@pytest.mark.parametrize(
    ("relevance", "options", "message"),
    [
        ([[0]], {}, "relevance has 1 entries but queries has 3 rows"),
        ([[0], [1], [9]], {}, r"relevance\[2\] holds item 9, outside the gallery's 4 rows"),
        ([[0], [0.5], [1]], {}, r"relevance\[1\] must hold integer gallery indices"),
        (sp.eye(3, 5), {}, r"relevance has shape \(3, 5\), but queries x gallery is \(3, 4\)"),
        (-sp.eye(3, 4), {}, "relevance holds negative gains"),
        ("abc", {}, "relevance must be a scipy.sparse matrix"),
        ([[0], [1], [2]], {"exclude": [[0]]}, "exclude has 1 entries"),
        ([[0], [1], [2]], {"similarity": "l2"}, "similarity must be 'cosine' or 'dot'"),
        ([[0], [1], [2]], {"k": 0}, "k must be a positive integer"),
    ],
)
def test_bad_input_gives_one_line_errors(relevance, options, message):
    Q, G = np.ones((3, 2)), np.eye(4, 2)
    with pytest.raises((ValueError, TypeError), match=message) as info:
        ndcg_at_k(Q, G, relevance, **options)
    assert "\n" not in str(info.value)


@pytest.mark.cuda
def test_cuda_matches_cpu():
    rng = np.random.default_rng(8)
    Q, G = rng.normal(size=(40, 6)), rng.normal(size=(120, 6))
    gains, seen = _graded(rng, 40, 120), sp.random(40, 120, density=0.1, random_state=rng)
    for similarity in ("cosine", "dot"):
        options = {"k": 5, "exclude": seen, "similarity": similarity}
        expected = ndcg_at_k(Q, G, gains, device="cpu", **options)
        got = ndcg_at_k(Q, G, gains, device="cuda", **options)
        assert got == pytest.approx(expected, abs=1e-9)


def test_dot_overflow_is_refused():
    Q = np.full((2, 2), 1e30, dtype=np.float32)
    with pytest.raises(ValueError, match="could overflow"):
        ndcg_at_k(Q, Q, [[0], [1]], similarity="dot")


# ---------------------------------------------------------------------- the scorer
@pytest.fixture
def labelled_pair():
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 4, size=120)
    X = 2.0 * rng.normal(size=(4, 6))[labels] + rng.normal(size=(120, 6))
    rotation = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    Y = X @ rotation + 0.3 * rng.normal(size=(120, 6)) + 1.5
    return X, Y, labels


def test_ndcg_scorer_uses_same_label_relevance(labelled_pair):
    X, Y, labels = labelled_pair
    aligner = OrthogonalProcrustesAligner(center=True).fit(X, Y)
    same_class = [np.flatnonzero(labels == label) for label in labels]
    expected = ndcg_at_k(aligner.transform(X), Y, same_class, k=5, exclude=sp.eye(120))
    scorer = make_retrieval_scorer("ndcg5")
    assert scorer(aligner, X, Y, labels=labels) == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match="needs the class labels"):
        scorer(aligner, X, Y)


@pytest.mark.filterwarnings("ignore::sklearn_compat.metrics.AnisotropyWarning")
def test_ndcg_scorer_in_grid_search(labelled_pair):
    import sklearn

    X, Y, labels = labelled_pair
    with sklearn.config_context(enable_metadata_routing=True):
        search = GridSearchCV(
            OrthogonalProcrustesAligner(),
            {"center": [False, True]},
            scoring=make_retrieval_scorer("ndcg10"),
            cv=3,
        ).fit(X, Y, labels=labels)
    # Y is offset: centring is what lets the classes meet.
    assert search.best_params_ == {"center": True}
    assert search.best_score_ > 0.8


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, bool, float])
def test_dense_judgements_are_gains_not_index_rows(dtype):
    """A dense 0/1 (or graded) matrix is read as gains: as its CSR form, as ndcg_score."""
    rng = np.random.default_rng(7)
    Q, G = rng.normal(size=(12, 5)), rng.normal(size=(30, 5))
    dense = (rng.random((12, 30)) < 0.2).astype(dtype)
    if dtype is not bool:
        dense = dense * rng.integers(1, 4, size=(12, 30)).astype(dtype)
    dense[:, 0] = 1  # every query judged, so the mean agrees with ndcg_score
    sparse = sp.csr_matrix(dense)
    for k in (1, 5, 30):
        assert ndcg_at_k(Q, G, dense, k=k) == ndcg_at_k(Q, G, sparse, k=k)
        assert recall_at_k(Q, G, dense, k=k) == recall_at_k(Q, G, sparse, k=k)
        expected = ndcg_score(dense.astype(float), _scores(Q, G, "cosine"), k=k)
        assert ndcg_at_k(Q, G, dense, k=k) == pytest.approx(expected, abs=1e-12)
    # A dense exclusion matrix works the same way.
    seen = rng.random((12, 30)) < 0.3
    assert ndcg_at_k(Q, G, dense, exclude=seen) == ndcg_at_k(
        Q, G, sparse, exclude=sp.csr_matrix(seen)
    )


@pytest.mark.parametrize(
    ("relevance", "message"),
    [
        # Rows of a dense matrix written as lists: gains or indices? Refused.
        ([[0, 1, 0, 1], [1, 0, 0, 0], [0, 0, 1, 1]], "relevance is ambiguous"),
        (list(np.eye(3, 4, dtype=int)), "relevance is ambiguous"),
        # A 2-D array is a gain matrix: one of another shape is not read as indices.
        (np.array([[0, 1], [1, 2], [2, 3]]), r"dense array of shape \(3, 2\)"),
        (np.array([0, 1, 2]), "1-D array of int64 values"),
        ([0, 1, 2], r"relevance\[0\] is 0, not a collection"),
    ],
)
def test_ambiguous_judgement_forms_are_refused(relevance, message):
    Q, G = np.ones((3, 2)), np.eye(4, 2)
    with pytest.raises(ValueError, match=message) as info:
        ndcg_at_k(Q, G, relevance)
    text = str(info.value)
    assert "\n" not in text
    assert "dense 2-D array of gains" in text and "a list with one entry per query" in text
    # The per-query form itself stays: lists of indices shorter than the gallery.
    assert ndcg_at_k(Q, G, [[0, 1], [1], [2, 3]]) == ndcg_at_k(Q, G, [{0, 1}, {1}, {2, 3}])

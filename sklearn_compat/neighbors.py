"""The query path: search an old model's gallery with new-model queries through an aligner."""

import numbers

import numpy as np
import scipy.sparse
import torch
from sklearn.base import BaseEstimator, _fit_context
from sklearn.pipeline import Pipeline
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._core.backend import resolve_device, to_numpy, to_torch
from ._core.knn import crowding, rowwise, search
from ._core.query_policy import fitted_csls_k, query_comparison_form, query_csls_k
from ._core.ranking import check_embeddings, knn_mean_similarity, l2_normalize
from ._core.validation import NumbersNotBoolsMixin
from ._neighbors_index import DEFAULT_PARAMS, FaissGallery

__all__ = ["AlignedNeighbors"]

# Bytes of similarity slab per block of queries (the top-k buffers are small beside it).
_SLAB_BYTES = 128 * 2**20

# Galleries above this many rows get the HNSW index under index="auto".
AUTO_INDEX_ROWS = 2_000_000


def _final_step(aligner):
    return aligner[-1] if isinstance(aligner, Pipeline) else aligner


class AlignedNeighbors(NumbersNotBoolsMixin, BaseEstimator):
    """Nearest neighbours in an old model's gallery for queries embedded by a new model.

    scikit-learn's :class:`~sklearn.neighbors.NearestNeighbors` interface for the query
    path of a model upgrade: ``fit`` stores the old gallery (in the target space of a
    fitted aligner), ``kneighbors`` maps the new-model queries with the aligner and returns
    the nearest gallery items.  Nothing is re-embedded.

    Parameters
    ----------
    aligner : fitted aligner or Pipeline ending in one
        Anything with ``transform`` that maps the new model's embeddings into the old
        model's space (:class:`~sklearn_compat.OrthogonalProcrustesAligner`,
        :class:`~sklearn_compat.AffineAligner`, :class:`~sklearn_compat.LambdaOrthAligner`
        or a pipeline ending in one).  It is used as given, never refitted (``clone`` of
        this estimator clones it unfitted; wrap it in
        :class:`sklearn.frozen.FrozenEstimator` to keep it through ``clone``).
    n_neighbors : int, default=10
        Neighbours returned by ``kneighbors`` when it is not given one.
    gallery : {"auto", "centered", "raw"}, default="auto"
        How gallery and mapped queries are compared.  Centred: both are shifted by the
        target mean ``mu`` and renormalised before the cosine: ``mu`` is the aligner's
        ``mean_y_`` when it has a non-zero one (a centred Procrustes map), else the mean of
        the gallery given to ``fit``.  On anisotropic models, whose embeddings share one
        common direction, every mapped query is otherwise pulled toward the gallery items
        nearest that direction.  ``"auto"`` compares centred exactly when the map was
        fitted to centred rows: the aligner's fitted ``center_`` (what its own ``"auto"``
        chose), else its ``center`` or ``fit_intercept`` parameter; any other map is
        compared raw, as its queries do not sit around Y's mean.
        :class:`~sklearn_compat.LambdaOrthAligner` and
        :class:`~sklearn_compat.ResidualAdapterAligner` are compared raw whatever their
        intercept: their trained bias already places the queries for the cosine with Y's
        raw rows, and centring on the gallery's mean moves them off.  ``"centered"``
        centres every map not fitted uncentred; ``centered_`` says which form was used.
        Aligners that map into the space of Y's unit rows
        (:class:`~sklearn_compat.WhitenedProcrustesAligner` with ``normalize=True``,
        :class:`~sklearn_compat.RCSLSAligner`) have both sides scaled to unit rows first,
        and ``mu`` is then a mean of unit rows.  ``"raw"``: plain cosine against the stored
        gallery.  Centring the stored gallery is vector arithmetic on the index (subtract
        one vector, renormalise), not a re-embedding.

        .. versionchanged:: 0.1
           ``"auto"`` became the default; ``"centered"`` was the default before.
    metric : {"cosine"}, default="cosine"
        Similarity of the comparison; distances are ``1 - cos``.
    csls_k : int, "auto" or None, default="auto"
        Rank by CSLS (cross-domain similarity local scaling, Conneau et al., 2018, "Word
        translation without parallel data") with this neighbourhood size, or by plain
        cosine when None.  ``"auto"``: 10, except for maps trained on a retrieval
        criterion that already demotes crowding targets
        (:class:`~sklearn_compat.RCSLSAligner`), which are ranked by the cosine they
        were trained for: the gallery's crowding on top over-corrects.  Where the aligner
        scored its own held-out fold through the query path's forms at ``fit``
        (``query_scores_``, recorded by
        :class:`~sklearn_compat.OrthogonalProcrustesAligner`'s ``"auto"``), ``"auto"``
        for both ``csls_k`` and ``gallery`` follows that evidence: a form (raw or centred,
        with or without CSLS) that beats the default one there by more than ``0.005``
        top-1 is used instead.  ``csls_k_`` holds the value in force.  On a small gallery
        ``"auto"`` takes at most the rows each crowding is measured among: the gallery's
        size less one (the gallery as its own reference), or the number of ``queries``
        given to ``fit`` (or, with ``csls_reference="batch"``, of each ``kneighbors``
        call); a gallery of one item is ranked by plain cosine.  A number larger than
        those is refused, naming the size.

        .. versionchanged:: 0.1.0
           ``"auto"`` adapts to galleries of 10 items or fewer instead of failing.

        ``CSLS(q, g) = 2 cos(q, g) - r_G(q) - r_Q(g)``: ``r_G(q)`` is the mean cosine
        of query ``q`` to its ``csls_k`` nearest gallery items (it does not change the
        order of ``q``'s neighbours), ``r_Q(g)`` that of gallery item ``g`` to its
        ``csls_k`` nearest queries, so hubs, near many queries, are demoted.  Mapped
        queries crowd around some gallery items more than the old model's own queries
        did; CSLS undoes that, which is why it is on by default (:ref:`query_path`).
        Distances are then ``1 - CSLS / 2``: the cosine distance plus the mean of the
        two penalties.
    csls_reference : {"fit", "batch"}, default="fit"
        Where ``r_Q(g)`` is measured.  ``"fit"``: once, in ``fit``, against the mapped
        ``queries`` given to it (a sample of real new-model queries, such as the rows the
        aligner was fitted on) or, without them, against the gallery itself (each item
        left out of its own neighbourhood; mapped queries are meant to look like gallery
        items); a query's neighbours then do not depend on the other queries, and
        ``kneighbors`` costs what plain cosine costs.  References of up to 32,768 rows
        are measured exactly; above that, each item is compared with about 4,096
        reference rows of the k-means cells nearest to it (seeded, so deterministic),
        which finds its true ``csls_k`` nearest neighbours for most items: the cost grows
        as ``n x 4,096 x d``, not ``n^2 d``.  ``"batch"``: against the queries of
        the same ``kneighbors`` call, as Conneau et al. do for a whole test dictionary
        (transductive: a query's neighbours depend on the batch it came in).
    memory_budget : int, default=None
        Bytes of similarity slab per block of queries (default 128 MiB), as in
        :mod:`sklearn_compat.metrics`: the block height follows from it, so memory stays
        bounded whatever the number of queries.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the similarities and top-k run ("auto": CUDA when torch sees a GPU).  The
        exact search and the crowding pass run there; the gallery is copied to the
        device once and kept for later calls.
    index : {"auto", "exact", "hnsw", "ivf"}, default="auto"
        How ``kneighbors`` searches.  ``"exact"``: every gallery item is scored (blocked
        GEMM and top-k in the gallery's dtype, no copy of the gallery).  ``"hnsw"``,
        ``"ivf"``: an approximate FAISS index (``faiss-cpu``, in the ``[all]`` extra)
        built in ``fit`` over the gallery augmented so that its inner product carries
        the CSLS penalty (the same centring and CSLS as the exact path; candidates are
        re-scored exactly, so the distances of the neighbours found are the exact
        ones).  ``"auto"``: exact up to 2,000,000 gallery items (``AUTO_INDEX_ROWS``),
        ``"hnsw"`` above.  The exact search needs no memory beyond the gallery.
        ``"ivf"`` holds the augmented gallery again, ``(d + 2) x 4`` bytes plus an 8-byte
        id per item, and its recall against the exact path grows with ``nprobe``.
        ``"hnsw"`` holds the augmented gallery plus its graph (about ``8 M`` bytes per item
        more) and builds slowest.  The indexes need ``csls_reference="fit"`` (or
        ``csls_k=None``) and search on the CPU.  Build times, memory and recall of each
        index against the exact search: :ref:`scaling_up`.
    index_params : dict, default=None
        Parameters of the index: ``"hnsw"``: ``M`` (32), ``ef_construction`` (64),
        ``ef_search`` (128); ``"ivf"``: ``nlist`` (cells, default the square root of the
        gallery size) and ``nprobe`` (cells searched per query, default 128).

    Attributes
    ----------
    gallery_ : ndarray of shape (n_samples_fit_, n_features_in_)
        The gallery in its scoring form: centred (when ``gallery="centered"``) and
        L2-normalised rows, in the dtype given to ``fit``.
    center_ : ndarray of shape (n_features_in_,) or None
        The mean subtracted from gallery and mapped queries (None for ``"raw"``).
    centered_ : bool
        Whether gallery and queries are compared centred (see ``gallery``).
    csls_k_ : int or None
        The CSLS neighbourhood in force (None: plain cosine; see ``csls_k``).
    unit_rows_ : bool
        Whether rows are scaled to unit length before the centring (the aligner maps
        into the space of Y's unit rows).
    gallery_penalty_ : ndarray of shape (n_samples_fit_,) or None
        CSLS's ``r_Q(g)`` of each gallery item, measured in ``fit`` (None without CSLS or
        with ``csls_reference="batch"``).
    index_ : object or None
        The approximate index built in ``fit`` (None: exact search).
    n_samples_fit_ : int
        Number of gallery items.
    n_features_in_ : int
        Width of the gallery (the aligner's target space).

    See Also
    --------
    sklearn.neighbors.NearestNeighbors : the interface followed here.
    sklearn_compat.metrics.paired_topk_accuracy : the paired evaluation of the same path.

    Notes
    -----
    The exact search scores blocks of 1,024 queries against chunks of the gallery with
    one GEMM each and keeps a running top-k, so the peak memory is one slab of
    ``memory_budget`` bytes whatever the gallery size, and ``fit`` holds the gallery's
    scoring form plus O(block) (it is built block by block).  Ties between equally
    similar gallery items are broken in no particular order.  An all-zero row
    (after centring) has similarity 0 to everything.  Results come back sorted by
    increasing distance, as scikit-learn's.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import ortho_group
    >>> from sklearn_compat import AlignedNeighbors, OrthogonalProcrustesAligner
    >>> rng = np.random.default_rng(0)
    >>> Y_old = rng.normal(size=(500, 16)) + 3.0  # old model: one strong common direction
    >>> Q = ortho_group.rvs(16, random_state=0)
    >>> X_new = (Y_old - 3.0) @ Q.T + 0.05 * rng.normal(size=(500, 16)) - 1.0
    >>> aligner = OrthogonalProcrustesAligner().fit(X_new[:400], Y_old[:400])
    >>> search = AlignedNeighbors(aligner, n_neighbors=3).fit(Y_old)
    >>> distances, indices = search.kneighbors(X_new[400:])
    >>> indices.shape, distances.shape
    ((100, 3), (100, 3))
    >>> float(np.mean(indices[:, 0] == np.arange(400, 500)))  # its own old embedding
    1.0
    """

    _parameter_constraints: dict = {
        "aligner": [HasMethods(["transform"])],
        "n_neighbors": [Interval(numbers.Integral, 1, None, closed="left")],
        "gallery": [StrOptions({"auto", "centered", "raw"})],
        "metric": [StrOptions({"cosine"})],
        "csls_k": [
            Interval(numbers.Integral, 1, None, closed="left"),
            StrOptions({"auto"}),
            None,
        ],
        "csls_reference": [StrOptions({"fit", "batch"})],
        "memory_budget": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "device": [str, torch.device],
        "index": [StrOptions({"auto", "exact", "hnsw", "ivf"})],
        "index_params": [dict, None],
    }

    def __init__(
        self,
        aligner,
        *,
        n_neighbors=10,
        gallery="auto",
        metric="cosine",
        csls_k="auto",
        csls_reference="fit",
        memory_budget=None,
        device="auto",
        index="auto",
        index_params=None,
    ):
        self.aligner = aligner
        self.n_neighbors = n_neighbors
        self.gallery = gallery
        self.metric = metric
        self.csls_k = csls_k
        self.csls_reference = csls_reference
        self.memory_budget = memory_budget
        self.device = device
        self.index = index
        self.index_params = index_params

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, queries=None):
        """Store the old gallery in its scoring form (and its CSLS penalties).

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_gallery, n_targets)
            The old model's embeddings of the gallery items (the aligner's target space).
        y : None
            Ignored.
        queries : array-like or torch.Tensor of shape (n_queries, n_features), default=None
            With CSLS and ``csls_reference="fit"``: a sample of new-model queries (for
            example the rows the aligner was fitted on), mapped by the aligner, against
            which each gallery item's crowding ``r_Q(g)`` is measured.  Without it the
            gallery itself is the reference.  Not stored.

        Returns
        -------
        self : object
            Fitted searcher.
        """
        resolve_device(self.device, for_inference=True)
        final = _final_step(self.aligner)
        check_is_fitted(final)
        G = check_embeddings(X, "gallery")
        csls_k = query_csls_k(final, self.csls_k)
        if self._auto_csls():
            # "auto" adapts to a small gallery: its neighbourhood is at most the rows the
            # crowding is measured among (the other gallery items, or the queries).
            if self.csls_reference == "fit" and queries is None:
                n_reference = G.shape[0] - 1
            elif self.csls_reference == "fit":
                n_reference = min(G.shape[0], len(queries))
            else:
                n_reference = G.shape[0]
            csls_k = fitted_csls_k(csls_k, n_reference)
        self.csls_k_ = csls_k
        width = getattr(final, "n_targets_", G.shape[1])
        if G.shape[1] != width:
            raise ValueError(
                f"gallery has {G.shape[1]} features, but the aligner maps into a space of "
                f"{width} features."
            )
        if csls_k is not None and csls_k > G.shape[0]:
            raise ValueError(
                f"csls_k={csls_k} exceeds the number of gallery items ({G.shape[0]}); "
                "lower csls_k, set csls_k=None (plain cosine) or csls_k='auto' (adapts "
                "to the gallery)."
            )
        measure_now = csls_k is not None and self.csls_reference == "fit"
        if measure_now and queries is None and csls_k >= G.shape[0]:
            raise ValueError(
                f"csls_k={csls_k} needs a gallery of more than {csls_k} items to "
                f"measure each item's neighbourhood among the others (got {G.shape[0]}); "
                "pass queries= to fit, lower csls_k, or set csls_k=None (plain cosine) or "
                "csls_k='auto' (adapts to the gallery)."
            )
        center = None
        # Aligners that work on unit rows (vecmap's normalisation, RCSLS) map into the
        # space of Y's unit rows and report that space's mean: centre unit rows there.
        # A map fitted to uncentred rows does not put the queries around Y's mean, so
        # centring the gallery alone would leave every query off-centre.
        self.centered_, self.unit_rows_ = query_comparison_form(final, self.gallery)
        if self.centered_:
            mean_y = getattr(final, "mean_y_", None)
            if mean_y is not None and np.any(mean_y):
                center = np.asarray(mean_y, dtype=np.float64)
            elif self.unit_rows_:
                center = l2_normalize(torch.as_tensor(G, dtype=torch.float64)).mean(dim=0)
                center = center.numpy()
            else:
                center = G.mean(axis=0, dtype=np.float64)
        self.center_ = center
        self.n_samples_fit_, self.n_features_in_ = G.shape
        device = resolve_device(self.device, for_inference=True)
        dtype = torch.float64 if G.dtype == np.float64 else torch.float32
        scoring = rowwise(G, lambda rows: self._scoring_form(rows, device), device, dtype)
        self.gallery_ = scoring.cpu().numpy()
        self.gallery_penalty_ = None
        if measure_now:
            self.gallery_penalty_ = self._fit_penalty(scoring, queries, device).cpu().numpy()
        self.index_ = self._build_index(scoring)
        return self

    def _auto_csls(self):
        return isinstance(self.csls_k, str) and self.csls_k == "auto"

    def _build_index(self, scoring):
        """The approximate index ``index`` asks for (None: exact search)."""
        kind = self.index
        if kind == "auto":
            kind = "hnsw" if scoring.shape[0] > AUTO_INDEX_ROWS else "exact"
        if kind == "exact":
            return None
        if self.csls_k_ is not None and self.csls_reference == "batch":
            raise ValueError(
                f"index={kind!r} stores each gallery item's CSLS penalty, so it needs "
                "csls_reference='fit' (or csls_k=None); csls_reference='batch' measures "
                "it anew for every call: use index='exact'."
            )
        params = {**DEFAULT_PARAMS[kind], **(self.index_params or {})}
        unknown = sorted(set(params) - set(DEFAULT_PARAMS[kind]))
        if unknown:
            raise ValueError(
                f"index_params has unknown keys {unknown} for index={kind!r}; expected "
                f"some of {sorted(DEFAULT_PARAMS[kind])}."
            )
        penalty = None
        if self.gallery_penalty_ is not None:
            penalty = torch.from_numpy(self.gallery_penalty_)
        return FaissGallery(scoring.cpu(), penalty, kind, params)

    def _fit_penalty(self, G, queries, device):
        """CSLS's ``r_Q(g)`` of every gallery item, against ``queries`` or the gallery."""
        if queries is None:
            return crowding(G, G, self.csls_k_, same=True)
        Z = self._mapped_queries(queries)
        if self.csls_k_ > Z.shape[0]:
            raise ValueError(
                f"csls_k={self.csls_k_} exceeds the number of queries given to fit ({Z.shape[0]})."
            )
        Q = self._scoring_form(Z, device).to(G.dtype)
        return crowding(G, Q, self.csls_k_)

    def _scoring_form(self, A, device):
        """Rows shifted by ``center_`` (if any) and L2-normalised, as a tensor on device."""
        dtype = torch.float64 if A.dtype == np.float64 else torch.float32
        T = to_torch(A, device, dtype)
        if self.unit_rows_ and self.center_ is not None:
            T = l2_normalize(T)
        if self.center_ is not None:
            T = T - to_torch(self.center_, device, dtype)
        return l2_normalize(T)

    def _budget(self):
        return self.memory_budget or _SLAB_BYTES

    def _device_gallery(self, device):
        """The stored gallery as a tensor on ``device`` (shared memory on CPU; the copy on
        an accelerator is made once and kept for the next calls)."""
        if device.type == "cpu":
            return to_torch(self.gallery_, device)
        cached = self.__dict__.get("_gallery_on_device")
        if cached is None or cached[0] != device or cached[1] is not self.gallery_:
            cached = (device, self.gallery_, to_torch(self.gallery_, device))
            self._gallery_on_device = cached
        return cached[2]

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_gallery_on_device", None)  # a device copy is not fitted state
        return state

    def _mapped_queries(self, X):
        Z = np.asarray(self.aligner.transform(X))
        if Z.ndim != 2 or Z.shape[1] != self.n_features_in_:
            raise ValueError(
                f"the aligner maps the queries to shape {Z.shape}, but the gallery has "
                f"{self.n_features_in_} features."
            )
        return check_embeddings(Z, "mapped queries")

    def _check_n_neighbors(self, n_neighbors):
        if n_neighbors is None:
            n_neighbors = self.n_neighbors
        if (
            not isinstance(n_neighbors, numbers.Integral)
            or isinstance(n_neighbors, bool)
            or n_neighbors < 1
        ):
            raise ValueError(f"n_neighbors must be a positive integer, got {n_neighbors!r}.")
        if n_neighbors > self.n_samples_fit_:
            raise ValueError(
                f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {n_neighbors}, "
                f"n_samples_fit = {self.n_samples_fit_}."
            )
        return int(n_neighbors)

    def kneighbors(self, X, n_neighbors=None, return_distance=True):
        """The nearest gallery items of each new-model query.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_queries, n_features)
            New-model embeddings of the queries (the aligner's source space).
        n_neighbors : int, default=None
            Neighbours per query (default: ``self.n_neighbors``).
        return_distance : bool, default=True
            Also return the distances.

        Returns
        -------
        distances : ndarray of shape (n_queries, n_neighbors)
            ``1 - cos`` (or ``1 - CSLS / 2`` with ``csls_k``), increasing along each row;
            only returned when ``return_distance``.
        indices : ndarray of shape (n_queries, n_neighbors), int64
            Gallery rows, nearest first.
        """
        check_is_fitted(self, "gallery_")
        k = self._check_n_neighbors(n_neighbors)
        Z = self._mapped_queries(X)
        device = resolve_device(self.device, for_inference=True)
        # Queries take the gallery's dtype: the gallery is never copied or widened.
        G = self._device_gallery(device)
        Q = self._scoring_form(Z, device).to(G.dtype)
        n = Q.shape[0]
        penalty = None
        # Searchers saved before csls_k="auto" existed hold the number as given.
        csls_k = getattr(self, "csls_k_", self.csls_k)
        if csls_k is not None:
            if self.csls_reference == "batch":
                if self._auto_csls():
                    csls_k = fitted_csls_k(csls_k, n)  # a batch of few queries lends them all
                if csls_k > n:
                    raise ValueError(
                        f"csls_k={csls_k} exceeds the number of queries ({n}): with "
                        "csls_reference='batch' CSLS measures each gallery item's "
                        "neighbourhood among the queries of the call."
                    )
                penalty = knn_mean_similarity(G, Q, csls_k, budget=self._budget())
            else:
                penalty = to_torch(self.gallery_penalty_, device, G.dtype)
        if getattr(self, "index_", None) is not None:
            scores, indices = self.index_.search(Q, G, k, penalty=penalty, csls_k=csls_k)
        else:
            scores, indices = search(
                Q, G, k, penalty=penalty, csls_k=csls_k, budget=self._budget()
            )
        scores, indices = to_numpy(scores), to_numpy(indices)
        if not return_distance:
            return indices
        distances = 1.0 - (scores / 2 if csls_k is not None else scores)
        return distances, indices

    def kneighbors_graph(self, X, n_neighbors=None, mode="connectivity"):
        """Sparse graph from each query to its nearest gallery items.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_queries, n_features)
            New-model embeddings of the queries.
        n_neighbors : int, default=None
            Neighbours per query (default: ``self.n_neighbors``).
        mode : {"connectivity", "distance"}, default="connectivity"
            Entries of 1, or the distances of :meth:`kneighbors`.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (n_queries, n_samples_fit_)
        """
        if mode not in ("connectivity", "distance"):
            raise ValueError(f"mode must be 'connectivity' or 'distance', got {mode!r}.")
        distances, indices = self.kneighbors(X, n_neighbors=n_neighbors)
        n, k = indices.shape
        data = np.ones(n * k) if mode == "connectivity" else distances.ravel()
        indptr = np.arange(0, n * k + 1, k)
        return scipy.sparse.csr_matrix(
            (data, indices.ravel(), indptr), shape=(n, self.n_samples_fit_)
        )

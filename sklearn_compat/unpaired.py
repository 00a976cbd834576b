"""Orthogonal alignment of two embedding spaces from rows that are not paired."""

import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import _fit_context
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ._core import unpaired as _u
from ._core.backend import apply_affine, checked_input, one_line_errors, resolve_device
from ._core.base import BaseAligner
from ._core.validation import FLOAT_DTYPES, pick_target
from .exceptions import UnreliableAlignmentWarning
from .procrustes import procrustes_from_cross

__all__ = ["UnpairedProcrustesAligner"]

# Fewest rows a side needs: k-means, CSLS neighbourhoods and a mutual-neighbour share
# mean nothing on fewer.
_MIN_ROWS = 2
_INITS = ("sorted_profile", "cluster_match")


class UnpairedProcrustesAligner(BaseAligner):
    """Learn an orthogonal map from X's space into Y's from rows that are not paired.

    The rows of ``X`` and ``Y`` need not describe the same items, nor come in the same
    order or number: the map is found from the shape of the two clouds of points, and
    optionally a few pairs known to match (a seed dictionary).  ``fit`` runs in two
    stages, both on rows put in vecmap's common form (unit length, centred, unit length
    again, each side on its own):

    1. An unsupervised start proposes maps from the two sets alone: vecmap's sorted
       similarity profiles (Artetxe et al., 2018: matching items have the same multiset of
       similarities to the other items, whatever the rotation between the spaces) and a
       mini-vec2vec start (Dar, 2025: k-means on each side, the two sets of centroids
       matched by the structure of their Gram matrices, rows paired by their similarity
       to the matched centroids).  Each start is tried in both directions (an orthogonal
       map's inverse is its transpose) and, for the cluster start, from ``n_init``
       random restarts; with seed pairs, their own Procrustes map is one more candidate.
       Every candidate is refined briefly on a sample, and the one with the highest
       unsupervised criterion (the mutual-neighbour share below) is kept.
    2. Self-learning (Conneau et al., ICLR 2018): the rows that are each other's nearest
       neighbour under CSLS (which demotes "hub" rows) become the dictionary, the map is
       refitted by Procrustes on it plus the seed pairs, and the two steps repeat until
       the dictionary settles.

    3. The map itself is centred Procrustes on the final dictionary's raw rows (seed pairs
       included), as :class:`OrthogonalProcrustesAligner` would fit it from those pairs.

    No true pairs are needed to judge the result: ``confidence_`` compares the share of
    rows (of the side with fewer) that are each other's CSLS nearest neighbour under the
    final map with the share a random orthogonal map gives.  Spaces that a rotation really
    aligns give nearly every shared item a mutual partner; a wrong map, even one that
    self-learning has fitted to its own matches, stays much closer to chance.  Below
    ``min_confidence``, ``fit`` warns with
    :class:`~sklearn_compat.exceptions.UnreliableAlignmentWarning`.

    Read more in the :ref:`User Guide <unpaired>`.

    Parameters
    ----------
    init : {"auto", "sorted_profile", "cluster_match"}, default="auto"
        The unsupervised start.  ``"auto"`` tries both and keeps the candidate with the
        highest mutual-neighbour share after a short refinement.
    n_init : int, default=3
        Random restarts of the cluster start (k-means seeds and centroid matching).  The
        sorted-profile start is deterministic given its sample.
    n_clusters : int, default=32
        Clusters per side of the cluster start (at least 2, at most a quarter of the
        sampled rows).
    max_iter : int, default=10
        Rounds of self-learning at most; ``fit`` stops earlier once fewer than ``tol`` of
        the rows change partner between rounds.
    tol : float, default=0.01
        Share of rows whose match may change between two rounds for the dictionary to
        count as settled.
    csls_k : int, default=10
        Neighbourhood size of CSLS's hubness correction.
    start_rows : int, default=2000
        Rows sampled from each side for the starts and for comparing candidates (the
        sorted-profile start costs a ``start_rows``-square SVD per side).
    max_rows : int, default=10000
        Rows of each side used in self-learning (a random sample when a side has more);
        each round costs a few ``max_rows``-square similarity passes.  The map is then
        applied to every row.
    min_confidence : float, default=0.4
        ``fit`` warns when ``confidence_`` is below this.  0 never warns.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the similarity searches and k-means run.
    random_state : int, RandomState instance or None, default=None
        Samples, k-means seeding and centroid-matching restarts; an int makes ``fit``
        repeatable.

    Attributes
    ----------
    W_ : ndarray of shape (n_features_in_, n_targets_)
        The orthogonal map (orthonormal rows when d_x <= d_y, orthonormal columns
        otherwise), float64.
    mean_x_ : ndarray of shape (n_features_in_,)
        Column means of X's matched rows (the final dictionary's, seed pairs included).
    mean_y_ : ndarray of shape (n_targets_,)
        Column means of Y's matched rows.
    scale_ : float
        ``sqrt(sum ||Y_d - mean_y_||^2 / sum ||X_d - mean_x_||^2)`` over the matched
        rows: mapped rows spread around Y's mean as much as Y's own rows (as
        :class:`OrthogonalProcrustesAligner`'s ``scale="spread"``).
    matches_ : ndarray of shape (n_matches, 2)
        The last round's induced pairs as ``(row of X, row of Y)``, best CSLS first (seed
        pairs not included).
    n_iter_ : int
        Rounds of self-learning run.
    confidence_ : float
        ``(mutual_share_ - chance_share_) / (1 - chance_share_)``, clipped at 0: the
        share of rows with a mutual partner beyond what chance gives, in [0, 1].
        Computed without any true pairs.
    mutual_share_ : float
        Share of the smaller side's (sampled) rows that are each other's CSLS nearest
        neighbour under the final map.
    chance_share_ : float
        The same share under a random orthogonal map (seeded): mutual neighbours are
        common by chance in few dimensions or among near-orthogonal rows.
    init_ : str
        The start that was kept: ``"sorted_profile"``, ``"cluster_match (Y->X, 2)"``
        or ``"seed_pairs"``.
    start_scores_ : dict
        Mutual-neighbour share of every candidate start after its short refinement.
    n_features_in_ : int
        Width of X.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, when X was a DataFrame with string columns.

    See Also
    --------
    RefinedProcrustesAligner : the same self-learning, started from a few hundred pairs.
    OrthogonalProcrustesAligner : the supervised map, from paired rows.

    Notes
    -----
    When it works: the unsupervised start needs two spaces that are close to isometric on
    the rows given (the same network trained twice, a model and its quantised or
    fine-tuned version).  Two different sentence encoders can defeat it even over the
    same texts, because neither their cluster structures nor their similarity profiles
    agree closely enough; ``confidence_`` then says so.  A hundred or so seed pairs,
    far too few for supervised Procrustes in a few hundred dimensions, can be enough
    for self-learning to find the map from there (:ref:`unpaired`).

    Computation runs in float32 on ``device``; Procrustes solves are float64 SVDs on the
    CPU.  Memory is bounded: similarities are formed in blocks of rows.

    References
    ----------
    .. [1] Artetxe, Labaka, Agirre, "A robust self-learning method for fully unsupervised
       cross-lingual mappings of word embeddings", ACL 2018.
    .. [2] Dar, "mini-vec2vec: Scaling Universal Geometry Alignment with Linear
       Transformations", arXiv:2510.02348, 2025.
    .. [3] Conneau, Lample, Ranzato, Denoyer, Jegou, "Word translation without parallel
       data", ICLR 2018.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import ortho_group
    >>> from sklearn_compat import UnpairedProcrustesAligner
    >>> rng = np.random.default_rng(0)
    >>> centres = rng.normal(size=(12, 16)) * np.linspace(3, 0.5, 16)
    >>> X = centres[rng.integers(12, size=600)] + 0.3 * rng.normal(size=(600, 16))
    >>> Q = ortho_group.rvs(16, random_state=0)
    >>> Y = (X @ Q)[rng.permutation(600)]  # the same items, order unknown
    >>> aligner = UnpairedProcrustesAligner(random_state=0).fit(X, Y)
    >>> bool(np.abs(aligner.W_ - Q).max() < 1e-6)
    True
    >>> aligner.confidence_ > 0.9
    True
    """

    _parameter_constraints: dict = {
        "init": [StrOptions({"auto", *_INITS})],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, 1, closed="both")],
        "csls_k": [Interval(Integral, 1, None, closed="left")],
        "start_rows": [Interval(Integral, 2, None, closed="left")],
        "max_rows": [Interval(Integral, 2, None, closed="left")],
        "min_confidence": [Interval(Real, 0, 1, closed="both")],
        "device": [str, torch.device],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        *,
        init="auto",
        n_init=3,
        n_clusters=32,
        max_iter=10,
        tol=0.01,
        csls_k=10,
        start_rows=2000,
        max_rows=10000,
        min_confidence=0.4,
        device="auto",
        random_state=None,
    ):
        self.init = init
        self.n_init = n_init
        self.n_clusters = n_clusters
        self.max_iter = max_iter
        self.tol = tol
        self.csls_k = csls_k
        self.start_rows = start_rows
        self.max_rows = max_rows
        self.min_confidence = min_confidence
        self.device = device
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, Y=None, *, pairs=None, y=None):
        """Learn the map from unpaired rows (and optional seed pairs).

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_x, n_features)
            Source embeddings.
        Y : array-like or torch.Tensor of shape (n_y, n_targets)
            Target embeddings: any rows, any order, any number (``n_y`` need not equal
            ``n_x``).  A 1-d ``Y`` is one column.
        pairs : array-like of int of shape (n_pairs, 2), default=None
            Rows known to match, as ``(row of X, row of Y)``: a seed dictionary kept in
            every round of self-learning.
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.

        Returns
        -------
        self : object
            Fitted aligner.
        """
        X, Y = self._validate_unpaired(X, pick_target(Y, y))
        seeds = _check_pairs(pairs, len(X), len(Y))
        rng = check_random_state(self.random_state)
        device = resolve_device(self.device)

        Xs = _u.unit_centered(
            torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float32, device=device)
        )
        Ys = _u.unit_centered(
            torch.as_tensor(np.ascontiguousarray(Y), dtype=torch.float32, device=device)
        )
        # Self-learning on at most max_rows rows per side; the seed pairs' rows always in.
        rows_x = _sample(len(X), self.max_rows, rng, keep=seeds[:, 0])
        rows_y = _sample(len(Y), self.max_rows, rng, keep=seeds[:, 1])
        Xw, Yw = Xs[rows_x], Ys[rows_y]
        seeds_w = torch.as_tensor(
            np.stack(
                [np.searchsorted(rows_x, seeds[:, 0]), np.searchsorted(rows_y, seeds[:, 1])],
                axis=1,
            ).reshape(-1, 2),
            device=device,
        )
        if len(seeds_w) == 0:
            seeds_w = None

        generator = torch.Generator(device="cpu").manual_seed(int(rng.randint(2**31 - 1)))
        W, self.init_, self.start_scores_ = self._start(Xw, Yw, seeds_w, rng, generator)
        W, matches, self.n_iter_ = _u.self_learn(
            Xw, Yw, W, seeds=seeds_w, n_iter=self.max_iter, csls_k=self.csls_k, tol=self.tol
        )
        matches = matches.cpu().numpy()
        self.matches_ = np.stack([rows_x[matches[:, 0]], rows_y[matches[:, 1]]], axis=1)
        self.mutual_share_ = len(matches) / min(len(Xw), len(Yw))
        self.chance_share_ = _u.chance_share(Xw, Yw, self.csls_k, generator)
        self.confidence_ = max(
            0.0, (self.mutual_share_ - self.chance_share_) / (1.0 - self.chance_share_)
        )
        self._fit_final_map(X, Y, np.concatenate([seeds, self.matches_]), W)
        if self.confidence_ < self.min_confidence:
            warnings.warn(
                f"The unpaired alignment looks unreliable: confidence_={self.confidence_:.3f} "
                "(the share of rows with a mutual nearest neighbour under the map, beyond "
                f"what unrelated spaces give) is below min_confidence={self.min_confidence}. "
                "The two spaces may share too little "
                "structure for an unsupervised fit; pass seed pairs (pairs=, a few hundred "
                "help most), more rows of the same items on both sides, or fit a supervised "
                "aligner on paired rows.",
                UnreliableAlignmentWarning,
                stacklevel=2,
            )
        return self

    def _fit_final_map(self, X, Y, dictionary, W):
        """The map itself: centred Procrustes on the final dictionary's raw rows.

        Self-learning matched rows in the common form, each side centred on its own mean;
        when the two sides hold different items (a subset, other documents) those means
        differ by more than the rotation.  The final map is therefore the supervised one
        on the induced pairs (seed pairs included), as
        :class:`~sklearn_compat.OrthogonalProcrustesAligner` with ``center=True,
        scale="spread"`` would fit it; without any pair it keeps the self-learned map
        and the means of all rows.
        """
        if len(dictionary) == 0:
            Xd, Yd = X, Y
        else:
            Xd, Yd = X[dictionary[:, 0]], Y[dictionary[:, 1]]
        self.mean_x_ = Xd.mean(axis=0, dtype=np.float64)
        self.mean_y_ = Yd.mean(axis=0, dtype=np.float64)
        Xc, Yc = Xd - self.mean_x_, Yd - self.mean_y_
        if len(dictionary) == 0:
            self.W_ = W.double().cpu().numpy()
        else:
            self.W_ = procrustes_from_cross(Xc.T @ Yc)[0]
        spread_x, spread_y = np.sum(Xc**2), np.sum(Yc**2)
        self.scale_ = float(np.sqrt(spread_y / spread_x)) if spread_x > 0 else 1.0

    def _start(self, Xw, Yw, seeds, rng, generator):
        """The starting map: the candidate with the highest mutual-neighbour share after a
        short refinement on a sample.  Returns ``(W, label, scores)``."""
        n = min(len(Xw), len(Yw), self.start_rows)
        # Both samples hold n rows (the sorted profiles compare rows of equal length),
        # the seed pairs' rows among them so that every candidate is refined with them.
        kept = np.empty((0, 2), dtype=np.int64) if seeds is None else seeds.cpu().numpy()[:n]
        sx, sy = _sample(len(Xw), n, rng, kept[:, 0]), _sample(len(Yw), n, rng, kept[:, 1])
        A, B = Xw[torch.as_tensor(sx, device=Xw.device)], Yw[torch.as_tensor(sy, device=Yw.device)]
        sample_seeds = None
        if seeds is not None:
            sample_seeds = torch.as_tensor(
                np.stack([np.searchsorted(sx, kept[:, 0]), np.searchsorted(sy, kept[:, 1])], 1),
                device=Xw.device,
            )
        candidates = {}
        if seeds is not None:
            candidates["seed_pairs"] = _u.orthogonal_fit(Xw[seeds[:, 0]], Yw[seeds[:, 1]])
        inits = _INITS if self.init == "auto" else (self.init,)
        n_clusters = max(2, min(self.n_clusters, n // 4))
        for init in inits:
            for forward in (True, False):
                P, Q = (A, B) if forward else (B, A)
                arrow = "X->Y" if forward else "Y->X"
                if init == "sorted_profile":
                    # Symmetric by construction (neighbours both ways): one direction.
                    found = {"sorted_profile": _u.sorted_profile_start(P, Q)} if forward else {}
                else:
                    found = {
                        f"cluster_match ({arrow}, {r})": _u.cluster_match_start(
                            P, Q, n_clusters=n_clusters, rng=rng, generator=generator
                        )
                        for r in range(self.n_init)
                    }
                for label, W in found.items():
                    candidates[label] = W if forward else W.T
        scores, refined = {}, {}
        for label, W in candidates.items():
            # A short refinement on the sample: a start close to the answer converges
            # there quickly, a wrong one stays among unrelated matches.
            W, matches, _ = _u.self_learn(
                A, B, W, seeds=sample_seeds, n_iter=3, csls_k=self.csls_k, tol=self.tol
            )
            scores[label] = len(matches) / n
            refined[label] = W
        best = max(scores, key=scores.get)
        return refined[best], best, scores

    def _validate_unpaired(self, X, Y):
        """Validate two sets of rows that need not be paired (their own row counts)."""
        if Y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None: "
                "pass Y, the target embeddings (rows need not be paired with X's)."
            )
        target_names = None
        if hasattr(Y, "columns"):
            columns = np.asarray(Y.columns, dtype=object)
            if len(columns) and all(isinstance(c, str) for c in columns):
                target_names = columns
        with one_line_errors():
            X = validate_data(
                self,
                checked_input(X, "X"),
                reset=True,
                dtype=FLOAT_DTYPES,
                ensure_min_samples=_MIN_ROWS,
            )
            Y = check_array(
                checked_input(Y, "Y"),
                dtype=FLOAT_DTYPES,
                ensure_2d=False,
                ensure_min_samples=_MIN_ROWS,
                input_name="Y",
            )
        if Y.ndim == 1:
            Y = Y.reshape(-1, 1)
        self._target_names = target_names
        return X, Y.astype(X.dtype, copy=False)

    def _affine_map(self):
        A = self.scale_ * self.W_
        return A, self.mean_y_ - self.mean_x_ @ A

    def inverse_transform(self, Z):
        """Map embeddings from Y's space back into X's space (``W^T / scale_``).

        Exact when d_x <= d_y; when d_x > d_y it recovers the part of X that the map keeps.

        Parameters
        ----------
        Z : array-like or torch.Tensor of shape (n_samples, n_targets_)
            Embeddings in Y's space, e.g. the output of ``transform``.

        Returns
        -------
        ndarray of shape (n_samples, n_features_in_)
            In Z's float dtype.
        """
        check_is_fitted(self)
        Z = self._validate_target(Z, name="Z")
        A = self.W_.T / self.scale_
        return apply_affine(Z, A, self.mean_x_ - self.mean_y_ @ A, self._compute_device())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        return tags


def _sample(n, limit, rng, keep):
    """Sorted row indices: all ``n`` rows, or ``limit`` of them including ``keep``."""
    if n <= limit:
        return np.arange(n)
    keep = np.unique(keep)
    others = np.setdiff1d(np.arange(n), keep)
    extra = rng.choice(others, max(0, limit - len(keep)), replace=False)
    return np.sort(np.concatenate([keep, extra]))


def _check_pairs(pairs, n_x, n_y):
    """Seed pairs as an int64 (m, 2) array of valid rows, or a clear error."""
    if pairs is None:
        return np.empty((0, 2), dtype=np.int64)
    values = np.asarray(checked_input(pairs, "pairs"))
    if values.ndim != 2 or values.shape[1] != 2:
        raise ValueError(
            f"pairs must have shape (n_pairs, 2), (row of X, row of Y); got shape {values.shape}."
        )
    if values.size and not np.issubdtype(values.dtype, np.integer):
        if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
            raise ValueError("pairs must hold integer row indices.")
    values = values.astype(np.int64)
    for column, (name, n) in enumerate((("X", n_x), ("Y", n_y))):
        bad = (values[:, column] < 0) | (values[:, column] >= n)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"pairs[{row}] = {values[row].tolist()} names row {values[row, column]} of "
                f"{name}, which has {n} rows."
            )
    return values

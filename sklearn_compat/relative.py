"""RelativeAnchorEncoder: relative representations for zero-shot stitching across models."""

import numbers

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context, clone
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import (
    _check_feature_names_in,
    check_is_fitted,
    validate_data,
)

from ._core.backend import as_numpy_input, checked_input, one_line_errors, resolve_device
from ._core.ranking import l2_normalize
from ._core.validation import NumbersNotBoolsMixin, check_row_labels
from ._relative.anchors import (
    farthest_point_anchors,
    kmeans_anchors,
    kmeans_mixture_anchors,
    random_anchors,
    stratified_anchors,
)
from ._relative.mixtures import DEFAULT_LOSS_WEIGHTS, initial_logits, train_mixture
from ._relative.similarity import (
    SIMILARITIES,
    prepare_kernel,
    relative_blockwise,
    whitening,
)
from .metrics._anisotropy import warn_if_anisotropic

__all__ = ["RelativeAnchorEncoder"]

FLOAT_DTYPES = (np.float64, np.float32)
INDEX_STRATEGIES = ("random", "stratified", "kmeans", "fps")
MIXTURE_STRATEGIES = ("kmeans_mixture", "param")
# n_anchors="auto" uses this many anchors per feature of the fitted space (capped by the
# rows): measured on real text pairs, see the n_anchors parameter.
AUTO_ANCHORS_PER_FEATURE = 2
# Similarities that centring changes (euclidean is translation invariant, wip centres).
CENTRED_SIMILARITIES = ("cosine", "dot")


class RelativeAnchorEncoder(NumbersNotBoolsMixin, TransformerMixin, BaseEstimator):
    """Represent each embedding by its similarities to a set of anchor items.

    Two models that embed the same anchor items produce comparable relative vectors, so a
    head trained on one model's relative representation works on another's without
    retraining (zero-shot stitching, Moschella et al. 2023).  Anchors are real items of the
    X given to ``fit``, chosen by one of several strategies, or convex mixtures of real items
    learned across parallel spaces (PARAM); :meth:`rebase` rebuilds the same anchors in
    another model's space from that model's embeddings of the same rows.

    Read more in docs/methods.md, section "Relative representations and PARAM"
    ([1]_, [2]_).

    Parameters
    ----------
    n_anchors : int or "auto", default="auto"
        Number of anchors ``m``, the width of the output (ignored when ``anchors`` is an
        array of indices).  ``"auto"`` follows the width ``d`` of the fitted space:
        ``m = min(2 d, n_samples)``.  Moschella et al.'s rule of thumb is ``m >= d``; more
        anchors than that still make two spaces' relative vectors of the same item match
        better (:ref:`relative_stitching`).  An integer may not exceed the number of rows
        given to ``fit``: anchors are distinct items (or mixtures over at most that many
        items), and silently clipping it would change the output width that downstream
        heads are built for.
    anchors : {"random", "stratified", "kmeans", "kmeans_mixture", "fps", "param"} or \
array-like of int, default="random"
        How anchors are chosen:

        - ``"random"``: distinct rows drawn uniformly (the original recipe);
        - ``"stratified"``: random rows within each class of ``y``, per-class counts
          proportional to class frequency (largest remainder; needs ``y``);
        - ``"kmeans"``: k-means with ``m`` clusters; each anchor is the cluster member
          nearest its centroid (a real item);
        - ``"kmeans_mixture"``: each anchor is the mean of the (up to)
          ``n_support // m`` members nearest its centroid (a convex mixture);
        - ``"fps"``: farthest point sampling from a random first row;
        - ``"param"``: convex mixtures ``P X_sub`` of ``n_support`` random support rows,
          ``P`` learned across ``parallel`` spaces (see Notes);
        - an array of row indices of X: those rows, in that order.

        k-means and FPS work in the geometry the similarity sees: L2-normalised rows for
        ``"cosine"``, whitened centred rows for ``"wip"``, raw rows otherwise.
    similarity : {"cosine", "euclidean", "dot", "wip"}, default="cosine"
        ``"cosine"``; ``"euclidean"`` is the negative Euclidean distance; ``"dot"`` the
        plain inner product; ``"wip"`` the whitened inner product
        ``<(x - mu) L, (a - mu) L>`` with the mean and ``L = Sigma_lam^(-1/2)`` of the
        fitted space.
    center : bool, default=True
        ``"cosine"`` and ``"dot"``: compare ``x - mu`` with ``a - mu``, where ``mu`` is the
        mean of the rows given to ``fit`` (by :meth:`rebase`, the mean of the other
        space's parallel rows), so each space is centred by its own mean.  Many models put
        every embedding near one common direction (E5-style text models, ReLU features);
        uncentred cosines to anchors are then all close to 1 and two such spaces'
        relative vectors stop matching.  ``fit`` warns with
        :class:`~sklearn_compat.exceptions.AnisotropyWarning` when ``center=False`` meets a
        space whose :func:`~sklearn_compat.metrics.anisotropy` ``mean_norm`` exceeds one
        half.  No effect on ``"euclidean"`` (translation invariant) or ``"wip"`` (centred
        already).

        .. versionchanged:: 0.1
           ``center`` was added; models saved before it existed load with
           ``center=False``, as they were.
    shrinkage : float in [0, 1], "ledoit_wolf" or "oas", default="ledoit_wolf"
        WIP only: ``Sigma_lam = (1 - lam) Sigma + lam tr(Sigma)/d I (+ eps)``; the strings
        estimate ``lam`` with scikit-learn's Ledoit-Wolf or OAS formulas.
    eps : float, default=1e-6
        WIP only: ridge added to the covariance, relative to ``tr(Sigma)/d``.  With
        ``shrinkage=0`` and ``eps=0`` WIP is invariant to every invertible affine map of
        the space.
    normalize : {"standard", "l2"} or None, default="l2"
        Post-processing of the relative vectors: ``"l2"`` scales each row to unit norm;
        None keeps the similarities themselves; ``"standard"`` standardises each anchor
        column with the mean and standard deviation measured on the X given to ``fit``
        (or, for the other space, to :meth:`rebase`).  ``"l2"`` is the default because
        zero-shot stitching (a head trained on one model's relative vectors, applied to
        another's) needs it most: where two spaces' relative vectors differ in length, unit
        rows undo the difference.  No rule read from the data chooses better, so there is
        no ``"auto"``.  Standardised columns weigh every anchor alike, so a head fits the
        first model's idiosyncrasies more closely and transfers worse; but ``"standard"``
        matches the two spaces' relative vectors of the same item best: choose it for
        cross-space retrieval of relative vectors.  Measurements of each setting on real
        pairs: :ref:`relative_stitching`.

        .. versionchanged:: 0.1
           The default changed from None to ``"l2"``; models saved with another setting
           keep it when loaded.
    n_support : int, default=None
        ``"param"``: number of support rows ``k`` the anchors mix (default
        ``min(n_samples, 4 m)``).  ``"kmeans_mixture"``: each anchor averages the
        ``n_support // m`` members nearest its centroid, or its whole cluster if smaller
        (default ``16 m``; ``n_support >= m n_samples`` gives the exact centroids).  Ignored
        by the other strategies.
    temperature : float, default=0.2
        ``"param"``: ``P = softmax(logits / temperature)`` row-wise.
    loss_weights : dict, default=None
        ``"param"``: weights of the loss terms, keys ``"jaccard"``, ``"barlow"``,
        ``"align_uniform"``, ``"cohesion"``; missing keys keep their defaults
        (1, 1, 1, 0.1).
    max_epochs : int, default=30
        ``"param"``: passes over the parallel rows.
    batch_size : int, default=256
        ``"param"``: rows per minibatch.
    lr : float, default=0.01
        ``"param"``: Adam learning rate on the logits.
    random_state : int, RandomState instance or None, default=None
        Seeds every random choice (random/stratified draws, k-means, the FPS start, the
        PARAM support, initialisation and minibatches), so fits repeat on the CPU.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where PARAM trains and transforms run.
    verbose : bool, default=False
        Print PARAM's loss per epoch.

    Attributes
    ----------
    anchor_indices_ : ndarray of shape (n_anchors_,)
        Rows of X used as anchors (every strategy except the mixtures).
    support_indices_ : ndarray of shape (k,)
        Rows of X the mixtures draw on (``"param"`` and ``"kmeans_mixture"`` only).
    mixture_ : ndarray of shape (n_anchors_, k)
        Row-stochastic weights: ``anchors_ = mixture_ @ X[support_indices_]``
        (``"param"`` and ``"kmeans_mixture"`` only).
    anchors_ : ndarray of shape (n_anchors_, n_features_in_)
        The anchors in this space, float64.
    n_anchors_ : int
        Number of anchors (output width).
    center_ : ndarray of shape (n_features_in_,)
        ``center=True`` with ``"cosine"`` or ``"dot"`` only: the mean subtracted from the
        rows and the anchors (from ``fit``, or the parallel rows given to ``rebase``).
    mean_ : ndarray of shape (n_features_in_,)
        ``"wip"`` only: mean of the fitted space.
    whitening_ : ndarray of shape (n_features_in_, n_features_in_)
        ``"wip"`` only: ``L = Sigma_lam^(-1/2)`` (symmetric, float64).
    shrinkage_ : float
        ``"wip"`` only: the shrinkage used.
    output_mean_, output_scale_ : ndarray of shape (n_anchors_,)
        ``normalize="standard"`` only: column statistics of the fitted relative vectors.
    history_ : ndarray of shape (n_epochs_,)
        ``"param"`` only: mean training loss per epoch.
    n_epochs_ : int
        ``"param"`` only: epochs run.
    n_samples_fit_ : int
        Rows of the X given to ``fit``; :meth:`rebase` needs the same rows.
    n_features_in_ : int
        Width of X.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, when X was a DataFrame with string columns.

    See Also
    --------
    OrthogonalProcrustesAligner : maps one space into the other instead.

    Notes
    -----
    Only the anchor rows (or the support rows and the mixture) are stored, never X, so
    :meth:`rebase` must be given the other model's embeddings of *all* the rows given to
    ``fit``, in the same order: it rebuilds the anchors from those rows and recomputes the
    space's own statistics (WIP mean and whitening, ``"standard"`` column statistics) from
    all of them.  Statistics always come from ``fit``/``rebase``, never from the rows being
    transformed, so ``transform`` of one row equals that row of a batch transform.

    ``"param"`` (Svendsen et al.): the logits of ``P`` start as a local Gaussian kernel around
    distinct support rows and are trained with Adam on minibatches of the parallel rows of
    X and every array in ``parallel`` (the "banks"), minimising a weighted sum of soft
    Jaccard, Barlow Twins and alignment + uniformity losses between the banks' relative
    vectors and an anchor-cohesion term; the definitions and default weights are in the
    module docstring of ``sklearn_compat._relative.mixtures``.  Without ``parallel`` only
    uniformity and cohesion apply.

    ``transform`` is one GEMM against a (d, m) matrix prepared from the anchors and the
    fitted statistics, computed in row blocks of bounded memory on ``device``.

    References
    ----------
    .. [1] Moschella, Maiorca, Fumero, Norelli, Locatello, Rodola, "Relative Representations
       Enable Zero-Shot Latent Space Communication", ICLR 2023, arXiv:2209.15430.
    .. [2] Svendsen, Jakobsen, Nassar, Mager (Technical University of Denmark), PARAM:
       learned convex anchor mixtures compared by a whitened inner product, 2025-26.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import ortho_group
    >>> from sklearn_compat import RelativeAnchorEncoder
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 16))
    >>> X_other = 3.0 * X @ ortho_group.rvs(16, random_state=0)  # another "model"
    >>> enc = RelativeAnchorEncoder(n_anchors=32, random_state=0).fit(X)
    >>> enc.transform(X).shape
    (300, 32)
    >>> other = enc.rebase(X_other)  # same anchor items, the other model's space
    >>> bool(np.allclose(enc.transform(X), other.transform(X_other)))
    True
    """

    _parameter_constraints: dict = {
        "n_anchors": [Interval(numbers.Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "anchors": [StrOptions(set(INDEX_STRATEGIES + MIXTURE_STRATEGIES)), "array-like"],
        "similarity": [StrOptions(set(SIMILARITIES))],
        "center": ["boolean"],
        "shrinkage": [
            Interval(numbers.Real, 0, 1, closed="both"),
            StrOptions({"ledoit_wolf", "oas"}),
        ],
        "eps": [Interval(numbers.Real, 0, None, closed="left")],
        "normalize": [None, StrOptions({"l2", "standard"})],
        "n_support": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "temperature": [Interval(numbers.Real, 0, None, closed="neither")],
        "loss_weights": [dict, None],
        "max_epochs": [Interval(numbers.Integral, 0, None, closed="left")],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "lr": [Interval(numbers.Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
        "device": [str, torch.device],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_anchors="auto",
        anchors="random",
        similarity="cosine",
        center=True,
        shrinkage="ledoit_wolf",
        eps=1e-6,
        normalize="l2",
        n_support=None,
        temperature=0.2,
        loss_weights=None,
        max_epochs=30,
        batch_size=256,
        lr=0.01,
        random_state=None,
        device="auto",
        verbose=False,
    ):
        self.n_anchors = n_anchors
        self.anchors = anchors
        self.similarity = similarity
        self.center = center
        self.shrinkage = shrinkage
        self.eps = eps
        self.normalize = normalize
        self.n_support = n_support
        self.temperature = temperature
        self.loss_weights = loss_weights
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, parallel=None):
        """Choose (or learn) the anchors in X's space and record its statistics.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Embeddings of the items in this model's space.
        y : array-like of shape (n_samples,), default=None
            Class labels; used by ``anchors="stratified"`` only (ignored otherwise).
        parallel : list of array-like, default=None
            ``anchors="param"`` only: the same rows embedded by other models (any widths),
            in the same order as X; the anchors are learned to agree across all spaces.

        Returns
        -------
        self : object
            Fitted encoder.
        """
        X = self._validate(X, reset=True)
        n = X.shape[0]
        strategy = self.anchors if isinstance(self.anchors, str) else "indices"
        if parallel is not None and strategy != "param":
            raise ValueError(
                f"parallel is only used by anchors='param', not anchors={strategy!r}; "
                "use rebase() to build the encoder of another space."
            )
        if strategy != "indices" and self.n_anchors != "auto" and self.n_anchors > n:
            raise ValueError(
                f"n_anchors={self.n_anchors} exceeds the number of rows given to fit "
                f"(n_samples={n}); anchors are distinct items, so use at most {n}."
            )
        for attr in ("anchor_indices_", "support_indices_", "mixture_", "history_", "n_epochs_"):
            self.__dict__.pop(attr, None)
        device = resolve_device(self.device)
        rng = check_random_state(self.random_state)
        stats = self._whitening(X) if self.similarity == "wip" else None
        m = self._n_anchors_for(X)
        self._warn_if_uncentred(X, "X")

        if strategy == "indices":
            self.anchor_indices_ = self._check_indices(self.anchors, n)
        elif strategy == "random":
            self.anchor_indices_ = random_anchors(n, m, rng)
        elif strategy == "stratified":
            self.anchor_indices_ = stratified_anchors(self._check_labels(y, n), m, rng)
        elif strategy == "kmeans":
            self.anchor_indices_ = kmeans_anchors(self._geometry(X, stats), m, rng)
        elif strategy == "kmeans_mixture":
            per = max(1, (self.n_support or 16 * m) // m)
            support, mixture = kmeans_mixture_anchors(self._geometry(X, stats), m, per, rng)
            self.support_indices_, self.mixture_ = support, mixture
        elif strategy == "fps":
            self.anchor_indices_ = farthest_point_anchors(self._geometry(X, stats), m, rng, device)
        else:
            self._fit_param(X, parallel, stats, rng, device)
        self._finish(X, stats)
        return self

    def _fit_param(self, X, parallel, stats, rng, device):
        n, m = X.shape[0], self._n_anchors_for(X)
        banks = [X] + self._check_parallel(parallel, n)
        if self._centres():
            # Anchors are convex mixtures, so mixing centred rows gives centred anchors:
            # training sees the similarities that transform will compute.
            banks = [B - B.mean(axis=0, dtype=np.float64).astype(B.dtype) for B in banks]
        weights = dict(DEFAULT_LOSS_WEIGHTS)
        unknown = set(self.loss_weights or {}) - set(weights)
        if unknown:
            raise ValueError(
                f"loss_weights has unknown keys {sorted(unknown)}; expected some of "
                f"{sorted(weights)}."
            )
        weights.update(self.loss_weights or {})
        # Every bank needs its whitening: WIP similarities and the cohesion term use it.
        whitenings = [stats if stats is not None else self._whitening(banks[0])]
        whitenings += [self._whitening(B) for B in banks[1:]]
        k = min(n, self.n_support or 4 * m)
        support = np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)
        seeds = rng.choice(k, size=m, replace=k < m)
        mean0, L0 = whitenings[0][:2]
        logits0 = initial_logits((banks[0][support] - mean0) @ L0, seeds, self.temperature)
        # A little noise breaks ties between anchors seeded on the same item (k < m), which
        # would otherwise receive identical gradients forever.
        logits0 += 1e-2 * self.temperature * rng.standard_normal(logits0.shape)
        logits, history = train_mixture(
            banks,
            [w[:2] for w in whitenings],
            support,
            logits0,
            self.similarity,
            temperature=self.temperature,
            weights=weights,
            max_epochs=self.max_epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            random_state=rng,
            device=device,
            verbose=self.verbose,
        )
        z = logits / self.temperature
        P = np.exp(z - z.max(axis=1, keepdims=True))
        self.support_indices_ = support
        self.mixture_ = P / P.sum(axis=1, keepdims=True)
        self.history_ = history
        self.n_epochs_ = len(history)

    def _finish(self, X, stats):
        """Anchors in X's space, then X's own statistics (shared by fit and rebase)."""
        if hasattr(self, "anchor_indices_"):
            self.anchors_ = np.asarray(X[self.anchor_indices_], dtype=np.float64)
        else:
            self.anchors_ = self.mixture_ @ np.asarray(X[self.support_indices_], np.float64)
        self.n_anchors_ = self.anchors_.shape[0]
        self.n_samples_fit_ = X.shape[0]
        for attr in (
            "center_",
            "mean_",
            "whitening_",
            "shrinkage_",
            "output_mean_",
            "output_scale_",
        ):
            self.__dict__.pop(attr, None)
        if self._centres():
            self.center_ = X.mean(axis=0, dtype=np.float64)
        if self.similarity == "wip":
            self.mean_, self.whitening_, self.shrinkage_ = stats
        if self.normalize == "standard":
            R = self._relative(X, standardize=False)
            mean = R.mean(axis=0, dtype=np.float64)
            std = R.std(axis=0, dtype=np.float64)
            # Constant columns keep scale 1, as StandardScaler does.
            self.output_mean_ = mean
            self.output_scale_ = np.where(
                std > 10 * np.finfo(R.dtype).eps * np.abs(mean), std, 1.0
            )

    # ------------------------------------------------------------------ helpers
    def _validate(self, X, *, reset, name="X"):
        """numpy/pandas/torch (any device) in; the shared one-line errors for bad input."""
        try:
            with one_line_errors():
                X = validate_data(self, checked_input(X, name), dtype=FLOAT_DTYPES, reset=reset)
        except ValueError as exc:
            if name == "X":
                raise
            # scikit-learn calls every such input X ("Input X contains NaN").
            raise ValueError(str(exc).replace("Input X ", f"Input {name} ")) from None
        if self.similarity in ("dot", "euclidean"):
            _check_product_range(X, self.similarity, name)
        return X

    def _centres(self):
        return bool(self.center) and self.similarity in CENTRED_SIMILARITIES

    def _n_anchors_for(self, X):
        n, d = X.shape
        if self.n_anchors == "auto":
            return min(n, AUTO_ANCHORS_PER_FEATURE * d)
        return self.n_anchors

    def _warn_if_uncentred(self, X, name):
        if self.similarity in CENTRED_SIMILARITIES and not self.center:
            warn_if_anisotropic(
                {name: X},
                estimator=type(self).__name__,
                fix="center=True",
                consequence=f"uncentred {self.similarity} similarities to anchors are all "
                "alike and relative vectors stop matching across spaces",
                stacklevel=5,
            )

    def _whitening(self, X):
        return whitening(X, self.shrinkage, self.eps)

    def _geometry(self, X, stats):
        """Rows as the similarity sees them (for k-means and farthest point sampling)."""
        if self.similarity == "cosine":
            if self._centres():
                X = X - X.mean(axis=0, dtype=np.float64).astype(X.dtype)
            # Scale-safe (max-abs first), so 1e30 or 1e-30 rows normalise exactly.
            return l2_normalize(torch.from_numpy(np.ascontiguousarray(X))).numpy()
        if self.similarity == "wip":
            mean, L, _ = stats
            return ((X - mean) @ L).astype(X.dtype, copy=False)
        return X

    @staticmethod
    def _check_indices(indices, n):
        idx = np.asarray(as_numpy_input(indices))
        if idx.ndim != 1 or idx.size == 0:
            raise ValueError(
                f"anchors given as indices must be a non-empty 1-d array, got shape {idx.shape}."
            )
        if not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"anchors given as indices must be integers, got dtype {idx.dtype}.")
        if idx.min() < 0 or idx.max() >= n:
            raise ValueError(
                f"anchor indices must lie in [0, {n}) (the rows given to fit), got values "
                f"from {idx.min()} to {idx.max()}."
            )
        if np.unique(idx).size != idx.size:
            raise ValueError("anchor indices must be distinct; duplicates give equal columns.")
        return idx.astype(np.int64)

    @staticmethod
    def _check_labels(y, n):
        if y is None:
            raise ValueError("anchors='stratified' needs the class labels y in fit(X, y).")
        return check_row_labels(y, n, "y")

    @staticmethod
    def _check_parallel(parallel, n):
        if parallel is None:
            return []
        if not isinstance(parallel, (list, tuple)):
            raise TypeError(
                "parallel must be a list of arrays (one per other model), got "
                f"{type(parallel).__name__}."
            )
        banks = []
        for i, B in enumerate(parallel):
            name = f"parallel[{i}]"
            with one_line_errors():
                B = check_array(checked_input(B, name), dtype=FLOAT_DTYPES, input_name=name)
            if B.shape[0] != n:
                raise ValueError(
                    f"parallel[{i}] has {B.shape[0]} rows, but X has {n}: parallel spaces "
                    "must hold the same items in the same order."
                )
            banks.append(B)
        return banks

    def _relative(self, X, *, standardize=True, budget=None):
        similarity = self.similarity
        wip = similarity == "wip"
        offset = getattr(self, "center_", None)
        anchors = self.anchors_ if offset is None else self.anchors_ - offset
        kernel = prepare_kernel(
            similarity,
            anchors,
            self.mean_ if wip else None,
            self.whitening_ if wip else None,
        )
        standard = standardize and self.normalize == "standard"
        extra = {} if budget is None else {"budget": budget}
        return relative_blockwise(
            X,
            similarity,
            kernel,
            resolve_device(self.device, for_inference=True),
            l2=self.normalize == "l2",
            offset=offset,
            shift=self.output_mean_ if standard else None,
            scale=self.output_scale_ if standard else None,
            **extra,
        )

    # ------------------------------------------------------------------ public API
    def transform(self, X):
        """Relative representation: similarities of each row to the anchors.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features_in_)
            Embeddings in the fitted space.

        Returns
        -------
        ndarray of shape (n_samples, n_anchors_)
            In X's float dtype.
        """
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        return self._relative(X)

    def rebase(self, X_parallel):
        """A fitted encoder for another model's space, built from the same anchor items.

        Parameters
        ----------
        X_parallel : array-like or torch.Tensor of shape (n_samples_fit_, d_other)
            The other model's embeddings of exactly the rows given to ``fit``, in the same
            order (only the anchor/support rows are read for the anchors; all rows give the
            space's own statistics).

        Returns
        -------
        RelativeAnchorEncoder
            A new fitted encoder (same parameters) whose ``transform`` takes the other
            model's embeddings; its relative vectors are comparable to this encoder's.
        """
        check_is_fitted(self)
        new = clone(self)
        Xp = new._validate(X_parallel, reset=True, name="X_parallel")
        if Xp.shape[0] != self.n_samples_fit_:
            raise ValueError(
                f"X_parallel has {Xp.shape[0]} rows, but the encoder was fitted on "
                f"{self.n_samples_fit_}: rebase needs the other model's embeddings of the "
                "same rows, in the same order."
            )
        for attr in (
            "anchor_indices_",
            "support_indices_",
            "mixture_",
            "history_",
            "n_epochs_",
        ):
            if hasattr(self, attr):
                value = getattr(self, attr)
                setattr(new, attr, value.copy() if isinstance(value, np.ndarray) else value)
        stats = new._whitening(Xp) if new.similarity == "wip" else None
        new._warn_if_uncentred(Xp, "X_parallel")
        new._finish(Xp, stats)
        return new

    def get_feature_names_out(self, input_features=None):
        """Output column names ``anchor0 ... anchor{m-1}``.

        Parameters
        ----------
        input_features : array-like of str, default=None
            Checked against ``feature_names_in_`` when given.

        Returns
        -------
        ndarray of str objects
        """
        check_is_fitted(self)
        _check_feature_names_in(self, input_features, generate_names=False)
        return np.asarray([f"anchor{i}" for i in range(self.n_anchors_)], dtype=object)

    def __getstate__(self):
        # Parameters given as torch objects are saved as their plain equivalents (a
        # device as its string, index tensors as int64 arrays), which every method accepts
        # alike: skops then loads the encoder trusting only its own class.
        state = super().__getstate__()
        if isinstance(state.get("device"), torch.device):
            state = {**state, "device": str(state["device"])}
        if isinstance(state.get("anchors"), torch.Tensor):
            state = {**state, "anchors": as_numpy_input(state["anchors"]).astype(np.int64)}
        return state

    def __setstate__(self, state):
        # Models saved before ``center`` existed computed uncentred similarities.
        if "center" not in state:
            state = {**state, "center": False}
        super().__setstate__(state)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


# Largest entries whose products (dot, squared distances) stay exact in each dtype: squares
# overflow near 2**64 (float32) / 2**512 (float64) and lose all precision near the square
# roots of the smallest normal numbers.
_PRODUCT_RANGE = {np.dtype(np.float32): 2.0**60, np.dtype(np.float64): 2.0**500}


def _check_product_range(X, similarity, name):
    """Refuse rows whose dot products or squared distances would overflow or underflow."""
    if X.size == 0:
        return
    limit = _PRODUCT_RANGE[X.dtype]
    # Two reductions, no |X| temporary: a fresh array of X's size costs more in page
    # faults than the transform's GEMM (1.5 s against 1.0 s at 200k x 768).
    peak = max(float(X.max()), -float(X.min()))
    if peak > limit or 0 < peak < 1.0 / limit:
        wider = ", or pass float64" if X.dtype == np.float32 else ""
        raise ValueError(
            f"similarity={similarity!r} multiplies the values, and {name} holds values of "
            f"size {peak:.3g}, whose products {X.dtype} cannot hold: rescale {name}{wider} "
            "(or use similarity='cosine', which does not depend on the scale)."
        )

"""Orthogonal alignment of two embedding spaces from rows that are not paired."""

import time
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import _fit_context
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ._core import holdout
from ._core.backend import apply_affine, checked_input, one_line_errors, resolve_device
from ._core.base import BaseAligner
from ._core.validation import FLOAT_DTYPES, pick_target
from ._unpaired import common as _common
from ._unpaired import confidence as _confidence
from ._unpaired import refine as _refine
from ._unpaired import start as _starts
from .exceptions import UnreliableAlignmentWarning
from .procrustes import OrthogonalProcrustesAligner

__all__ = ["UnpairedProcrustesAligner"]

# Rows below which scikit-learn's own "n_samples" message answers (one row is no cloud).
_MIN_ROWS = 2
# Fewest rows a side needs for a fit at all: the start's clusters, CSLS neighbourhoods and
# a held-out fifth of X need a few rows each.  Below _MIN_JUDGED_ROWS the fit runs but its
# confidence cannot mean anything (see _MIN_JUDGED_ROWS).
_MIN_FIT_ROWS = 10
# Rows a side needs for confidence_ to be measured at all: below, its held-out fifth is a
# handful of rows whose mutual partners say nothing (two unrelated random clouds of a few
# dozen rows reach a held-out share of 1), so the fit warns and reports 0.
_MIN_JUDGED_ROWS = 100
_INITS = ("sorted_profile", "cluster_match", "disjoint")
# Share of held-out rows of X left out of self-learning, on which confidence_ is measured.
_HELDOUT_SHARE = 0.2
# A candidate start whose confidence reaches this ends the search for a better one.
_CLEARLY_ALIGNED = 0.8
# Candidate starts, the best by held-out share, that get stochastic dictionary induction
# when none is clearly aligned (each costs tens of rounds on the start sample).
_STOCHASTIC_CANDIDATES = 3
# Most clusters of the null's surrogate target (about sqrt(n) below): enough to keep the
# coarse structure any two sets of embeddings share, too few to keep items.
_NULL_CLUSTERS = 64
# Disjoint restarts: _MIN_RESTARTS before the two best are refined, then more only while
# no map has been reached twice (see _disjoint_confidence).
_MIN_RESTARTS = 4
# confidence_ of a disjoint fit from the agreement of two refinements: 0 at the chance
# level (the larger of 0.3 and _AGREEMENT_SPREADS / sqrt(d), three times the spread by which
# two random maps agree; twice that for two refinements of one start, which share its
# choice of which clusters lie on which: unrelated make_blobs clouds in 16 dimensions
# refined twice from one start agree to 0.75), 1 at 0.4 above it.
_AGREEMENT_FLOOR, _AGREEMENT_SPAN, _AGREEMENT_SPREADS = 0.3, 0.4, 3.0
# The floor of a pair from one start: on design e5 / MiniLM glosses a start refined twice
# agreed to 0.36 for a fit that ended at 0.43 of supervised, 0.47-0.49 for right ones.
_SAME_START_FLOOR = 0.35
# A disjoint candidate's refinement on the start sample: stochastic dictionary induction's
# patience (rounds without gain before more similarities are kept) and most rounds.
_CANDIDATE_PATIENCE, _CANDIDATE_ROUNDS = 30, 400
# Disjoint restarts before the first candidates are refined, and between later ones (a
# refinement costs as much as several restarts).
_REFINE_EVERY = 4
# Each disjoint restart: k-means partitions per side matched by quadratic assignment, and
# FAQ restarts per match (see disjoint_start).
_DISJOINT_RUNS, _DISJOINT_QAP_RESTARTS = 10, 100
# A disjoint search stops once its confidence reaches this: agreement 0.1 above chance
# (right candidates refined twice on real glosses agreed to 0.47-0.49, wrong ones to
# 0.19-0.24, against a chance level of 0.35 in 384 dimensions).
_CLEARLY_DISJOINT = 0.25
# The kept disjoint candidate's last refinement (one more disjoint_refine pass) runs on at
# most this many working rows a side (a random sample when there are more): one pass costs
# about two minutes on one thread at 2,400 rows a side and grows with the square of the rows.
_LAST_PASS_ROWS = 2400
# Rows of its sampled side the cluster start partitions (at least start_rows): k-means
# partitions of two spaces correspond, and their centroids match, far more often on a few
# thousand rows than on two thousand.  Design pair WordLlama -> MiniLM (WordNet usage
# examples, 4,000 shuffled items): the cluster start was right (test top-1 above 0.6) in
# 2 of 13 draws on all 4,000 rows a side and in none of 26 on 2,000 (the same items, or a
# sample of X onto all of Y), none above 0.1.
_CLUSTER_START_ROWS = 4000
# Fewest candidate starts the null's search tries (see _null_share).
_NULL_MIN_CANDIDATES = 5


class UnpairedProcrustesAligner(BaseAligner):
    """Learn an orthogonal map from X's space into Y's from rows that are not paired.

    The rows of ``X`` and ``Y`` need not describe the same items, nor come in the same
    order or number: the map is found from the shape of the two clouds of points, and
    optionally a few pairs known to match (a seed dictionary).  ``fit`` runs in two
    stages, both on rows put in vecmap's common form (unit length, centred, unit length
    again, each side on its own):

    1. Unsupervised starts propose maps from the two sets alone: a mini-vec2vec start
       (Dar, 2025: a few clusters on each side, the two sets of centroids matched by the
       structure of their Gram matrices, rows paired by their similarity to the matched
       centroids; the rough map is then sharpened through finer anchors, clusters of Y
       carried into X's space by the map itself) and vecmap's sorted similarity profiles
       (Artetxe et al., 2018: matching items have the same multiset of similarities to
       the other items, whatever the rotation between the spaces).  The cluster start
       depends on how the k-means partitions happen to fall, so it is tried from
       ``n_init`` random restarts in both directions (an orthogonal map's inverse is its
       transpose); with seed pairs, their own Procrustes map is one more candidate.  Each
       candidate is refined by self-learning from a sample of X's rows onto every row of
       Y in use, and scored by the confidence below; the search stops early once a
       candidate is clearly aligned.  Otherwise the three best candidates are refined
       again with vecmap's stochastic dictionary induction (each similarity kept only
       with a probability that starts at 0.1 and doubles whenever the objective stalls,
       so that the dictionary can leave the matches a weak start favours), and the best
       of all is kept.
    2. Self-learning (Conneau et al., ICLR 2018): the rows that are each other's nearest
       neighbour under CSLS (which demotes "hub" rows) become the dictionary, the map is
       refitted by Procrustes on it plus the seed pairs, and the two steps repeat until
       the dictionary settles.
    3. The map itself is :class:`OrthogonalProcrustesAligner` fitted on the final
       dictionary's raw rows (seed pairs included), centring and scale chosen by its
       ``"auto"`` rule (held-out retrieval on those pairs) from 100 pairs on,
       ``center=True, scale="spread"`` below.

    No true pairs are needed to judge the result: a random fifth of X's rows is kept out
    of every dictionary, and ``mutual_share_`` is the share of those held-out rows that are
    each other's CSLS nearest neighbour with a row of Y under the map.  A map self-learned
    on its own matches finds mutual partners for many of the rows it was fitted on even
    when it is wrong; only a map that really aligns the spaces does so for rows it has not
    seen.  Structure alone also gives held-out rows partners: two unrelated sets of
    clustered rows, once their clusters are laid onto each other, match a third of them.
    So the same search, with at least the same effort, is run again against a *null*
    target: a second cloud drawn with Y's clusters (their means and covariances) and
    nothing finer, which no map can align item by item (``chance_share_``).
    ``confidence_`` is the share beyond that null, less two standard errors of the
    difference (so that a handful of held-out rows cannot pass luck for alignment).  Below
    100 rows a side no such figure means anything: ``confidence_`` is then 0.  Below
    ``min_confidence``, ``fit`` warns with
    :class:`~sklearn_compat.exceptions.UnreliableAlignmentWarning`.

    What ``confidence_`` can tell: whether the map pairs *items* better than any map can
    pair rows that merely share Y's clusters; when the two sides hold the same items, it
    is near 1 for a right map and near 0 for a wrong one.  What it cannot tell: how good
    retrieval under the map is (it is no estimate of top-1), nor whether a map between
    sides holding *different* items is right (their rows have no partner to find, so a
    right map scores near the null too).

    Read more in the :ref:`User Guide <unpaired>`.

    Parameters
    ----------
    init : {"auto", "sorted_profile", "cluster_match", "disjoint"}, default="auto"
        The unsupervised start.  ``"auto"`` tries the first two and keeps the candidate
        with the highest confidence after refinement.  ``"disjoint"`` is for sides that
        hold *different* items (no item embedded by both models): each restart matches
        ten k-means partitions of 32 clusters per side by quadratic assignment, pairs
        every row of X with the mean of the Y rows described most alike by their
        similarities to the matched centroids, and sharpens the map through rounds of
        finer anchors carried by the map itself (64 up to 512 clusters); restarts
        alternate which side is the source and are ranked by the mean best CSLS of both
        sides under their map.  The two best starts are refined on the start sample
        (vecmap's stochastic dictionary induction, then pulling each row towards the
        mean of its 10 nearest Y rows), and the start of the best refined candidate is
        refined a second time with fresh draws; more restarts run, and their best
        refined, only until a refined candidate is reached again, by another restart's
        refinement or by its own start's second one (see ``confidence_``); the kept map
        is refined once more the same way on the working rows (at most 2,400 a side).
        Experimental: each restart costs about ten seconds and each refinement one to
        two minutes on a few thousand rows of a few hundred dimensions (one CPU core); a
        start must be roughly right (about a tenth of supervised top-1 or more) to be
        refined to the right map (see the User Guide).
    n_init : int, default=8
        Random restarts of the cluster start (k-means seeds), each tried in both
        directions.  The sorted-profile start is deterministic given its sample.  With
        ``init="disjoint"``: the most disjoint restarts (even ones from X onto Y, odd ones
        from Y onto X, transposed); four run (all of them when ``n_init`` is smaller)
        before the two best are refined, more only while no refined candidate has been
        reached again (see ``confidence_``).  On real text embeddings few
        restarts start well (see the User Guide): raise it for such data.
    n_clusters : int, default=8
        Clusters per side whose centroids the cluster start matches (at least 2, at most
        a quarter of the sampled rows).  Up to 8 the match is exact (every permutation is
        scored); beyond, it is FAQ's approximate quadratic assignment.
    max_iter : int, default=10
        Rounds of self-learning at most; ``fit`` stops earlier once fewer than ``tol`` of
        the rows change partner between rounds.
    tol : float, default=0.01
        Share of rows whose match may change between two rounds for the dictionary to
        count as settled.
    csls_k : int, default=10
        Neighbourhood size of CSLS's hubness correction.
    start_rows : int, default=2000
        Rows sampled from each side for the starts.  Each start maps one side's sample
        onto every row of the other side in use (the sorted-profile start compares the
        two samples), and candidates are refined and compared from X's sample onto all
        of Y's rows in use, a few self-learning rounds each: when the two sides hold the
        same items, every sampled row keeps its partner.  The cluster start partitions a
        larger sample of its side where there are more rows: up to 4,000 (its clusters
        match across spaces far more often on a few thousand rows than on two thousand).
    max_rows : int, default=10000
        Rows of each side used in self-learning (a random sample when a side has more);
        each round costs a few ``max_rows``-square similarity passes.  The map is then
        applied to every row.  The two sides are sampled independently: when both hold
        the same ``n`` items, only about ``max_rows / n`` of the sampled rows keep their
        partner, and the fit tends towards the harder disjoint case; raise it to cover
        every row where time allows.
    min_confidence : float, default=0.15
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
        Column means of X's matched rows (the final dictionary's, seed pairs included;
        zeros when the final map is not centred).
    mean_y_ : ndarray of shape (n_targets_,)
        Column means of Y's matched rows (zeros when not centred).
    scale_ : float
        Isotropic scale of the map (see :class:`OrthogonalProcrustesAligner`'s
        ``scale``).
    center_ : bool
        Whether the final map is centred.
    scale_mode_ : {"spread", True, False}
        The final map's scale setting: what :class:`OrthogonalProcrustesAligner`'s
        ``"auto"`` chose on the final dictionary, or ``"spread"`` below 100 matched pairs.
    matches_ : ndarray of shape (n_matches, 2)
        The pairs of rows that are each other's CSLS nearest neighbour under the
        self-learned map, as ``(row of X, row of Y)``, best CSLS first (held-out rows
        included, seed pairs not).
    n_iter_ : int
        Rounds of self-learning run (``init="disjoint"``: of the last refinement's
        stochastic dictionary induction).
    confidence_ : float
        ``(mutual_share_ - chance_share_ - 2 se) / (1 - chance_share_)``, clipped to
        [0, 1], with ``se`` the standard error of the difference of the two shares on the
        held-out rows: the share of held-out rows with a mutual partner beyond what a
        target with Y's clusters and no items gives.  0 when a side has fewer than 100
        rows.  Computed without any true pairs.  With ``init="disjoint"`` it comes from
        the refinements instead: ``(agreement_ - chance) / 0.4`` clipped to [0, 1], so
        it is above 0 only when one map was reached twice from independent draws: by
        two restarts' refinements (chance: the larger of 0.3 and ``3 / sqrt(d)``, three
        times the spread by which two random maps agree), or by a candidate's
        refinement and a second refinement of its own start (``reproduced_``; chance:
        the larger of 0.35 and ``6 / sqrt(d)``, since the two share the start's choice of
        which clusters lie on which, and where that choice fixes much of the map -- few
        dimensions, unrelated clustered clouds -- they agree through it alone; in 36
        dimensions or fewer such a pair never counts).  What it can tell: that the
        refiner is pulled to this map from independent draws, not to wherever one
        draw happened to end.  What it cannot tell: how good retrieval under the map
        is (it is no estimate of top-1), nor that a fit which warns is wrong (a right
        start that the second refinement fails to catch leaves the fit warning).
    mutual_share_ : float
        Share of the held-out rows of X (a random fifth of the rows used, never a seed
        pair's, left out of every dictionary) that are in a mutual CSLS nearest-neighbour
        pair with a row of Y under the self-learned map.  NaN with ``init="disjoint"``.
    chance_share_ : float
        The same share for the same search (at least as many candidate starts, the same
        self-learning) run against a Gaussian mixture with the means and covariances of
        Y's k-means clusters (about ``sqrt(n)`` of them, at most 64), seed pairs' rows
        kept: what structure alone gives.  NaN when a side has fewer than 100 rows.
        NaN with ``init="disjoint"`` (see ``confidence_``).
    stand_out_ : float
        ``init="disjoint"``: how far the best restart's criterion (mean best CSLS) stands
        above the others' median, in units of their robust spread (at least 0.001); 0
        with three restarts or fewer.  Reported only: it does not enter ``confidence_``.
        NaN otherwise.
    agreement_ : float
        ``init="disjoint"``: the largest agreement ``trace(W1^T W2) / min(d_x, d_y)``
        (1: the same map, about 0 for unrelated ones) between two refined candidates, or
        between a candidate and its start's second refinement.  NaN otherwise.
    reproduced_ : dict
        ``init="disjoint"`` only: for each refined candidate whose start was refined a
        second time (the best refined candidate at each stage), the agreement of the two
        refinements.
    refined_scores_ : dict
        ``init="disjoint"`` only: the criterion (mean best CSLS) of each restart that was
        refined on the start sample (at each stage, the two best starts by criterion).
        ``init_`` is the better of the two that agree when two do (the candidate itself
        when its start's second refinement agrees with it), otherwise the highest.
    start_seconds_ : dict
        ``init="disjoint"`` only: seconds each restart took (its start, and its
        refinement on the start sample when it was refined).
    init_ : str
        The start that was kept: ``"sorted_profile"``, ``"cluster_match (Y->X, 2)"``
        or ``"seed_pairs"``, followed by ``" + stochastic"`` when stochastic dictionary
        induction refined it.
    start_scores_ : dict
        Held-out mutual share of every candidate start tried, after its refinement on
        the sample (labelled as ``init_``; a ``" + stochastic"`` entry is the same start
        refined again by stochastic dictionary induction).  With ``init="disjoint"``: the
        criterion (mean best CSLS) of every restart, ``"disjoint (r)"``.
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
    When it works: the unsupervised start needs the two spaces to share their coarse
    cluster structure on the rows given: the same network trained twice, a model and its
    quantised or fine-tuned version, and some pairs of sentence encoders over the same
    texts.  Other pairs of encoders, or rows of different items on the two sides, can
    defeat it, because their clusters do not correspond closely enough for any restart
    to match them; ``confidence_`` then says so.  A hundred or so seed pairs,
    far too few for supervised Procrustes in a few hundred dimensions, can be enough
    for self-learning to find the map from there (:ref:`unpaired`).

    Computation runs in float32 on ``device``; Procrustes solves are float64 SVDs on the
    CPU.  Memory is bounded: similarities are formed in blocks of rows.

    .. versionchanged:: 0.1.0
       Starts that no candidate clearly aligns get stochastic dictionary induction.
       The final map chooses its centring and scale as
       :class:`OrthogonalProcrustesAligner` does (it was always centred with
       ``scale="spread"``).
       Candidate starts are refined from the sample of X onto every row of Y in use, not
       onto an independent sample of Y, which left same-item sides larger than
       ``start_rows`` sharing few of their sampled items.
       The cluster start partitions up to 4,000 rows of its side, not ``start_rows``:
       partitions of a 2,000-row sample were rarely right on real same-item sides (see
       the User Guide).
       With ``init="disjoint"``, a candidate whose start's second refinement reaches
       the same map counts as confirmed (before, only two restarts' refinements could
       agree, so a fit with one right restart always warned), and the search stops there.
       ``init="disjoint"``: the kept candidate's last refinement is one more pass of the
       candidates' refiner (stochastic dictionary induction, then neighbour means) on up
       to 2,400 working rows a side, not union self-learning on every row.

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
    >>> aligner.confidence_ > 0.5
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
        n_init=8,
        n_clusters=8,
        max_iter=10,
        tol=0.01,
        csls_k=10,
        start_rows=2000,
        max_rows=10000,
        min_confidence=0.15,
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

        Xs = _common.unit_centered(
            torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float32, device=device)
        )
        Ys = _common.unit_centered(
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
        if self.init == "disjoint":
            W = self._fit_disjoint(Xw, Yw, seeds_w, rng, generator)
            i, j = _common.mutual_pairs(_common.unit_rows(Xw @ W.to(Xw.dtype)), Yw, self.csls_k)
            self.matches_ = np.stack([rows_x[i.cpu().numpy()], rows_y[j.cpu().numpy()]], axis=1)
            self._fit_final_map(X, Y, np.concatenate([seeds, self.matches_]), W)
            self._warn_if_unreliable(X, Y)
            return self
        # Rows of X kept out of every dictionary: the confidence is measured on them.
        held = _heldout_rows(len(Xw), seeds_w, rng)
        W, self.init_, self.start_scores_, effort = self._start(
            Xw, Yw, held, seeds_w, rng, generator
        )
        W, self.n_iter_ = self._self_learn(Xw, Yw, W, held, seeds_w, self.max_iter)
        self.mutual_share_ = _confidence.heldout_share(Xw, Yw, W, held, self.csls_k)
        too_few = min(len(X), len(Y)) < _MIN_JUDGED_ROWS
        if too_few:
            self.chance_share_, self.confidence_ = float("nan"), 0.0
        else:
            self.chance_share_ = self._null_share(Xw, Yw, held, seeds_w, effort, rng, generator)
            self.confidence_ = _confidence.beyond_chance(
                self.mutual_share_, self.chance_share_, len(held)
            )
        i, j = _common.mutual_pairs(_common.unit_rows(Xw @ W.to(Xw.dtype)), Yw, self.csls_k)
        self.matches_ = np.stack([rows_x[i.cpu().numpy()], rows_y[j.cpu().numpy()]], axis=1)
        self._fit_final_map(X, Y, np.concatenate([seeds, self.matches_]), W)
        self.stand_out_ = self.agreement_ = float("nan")
        self._warn_if_unreliable(X, Y)
        return self

    def _warn_if_unreliable(self, X, Y):
        if min(len(X), len(Y)) < _MIN_JUDGED_ROWS:
            _warn_unreliable(
                f"X has {len(X)} rows and Y {len(Y)}; below {_MIN_JUDGED_ROWS} rows a side "
                "no unsupervised figure can tell a right map from chance, so confidence_ is 0"
            )
        elif self.confidence_ < self.min_confidence and self.init == "disjoint":
            _warn_unreliable(
                f"confidence_={self.confidence_:.3f} (no map was reached twice: neither "
                f"two of the {len(self.refined_scores_)} refined candidates among "
                f"{len(self.start_scores_)} disjoint restarts nor a candidate and its "
                f"start's second refinement agree) is below "
                f"min_confidence={self.min_confidence}"
            )
        elif self.confidence_ < self.min_confidence:
            _warn_unreliable(
                f"confidence_={self.confidence_:.3f} (the share of held-out rows, which the "
                "fit never saw, that find a mutual nearest neighbour under the map, beyond "
                f"what a target with Y's clusters but no items gives) is below "
                f"min_confidence={self.min_confidence}"
            )

    def _fit_disjoint(self, Xw, Yw, seeds, rng, generator):
        """``init="disjoint"``: restarts of the disjoint start (alternating which side is
        the source), the best by criterion refined on the start sample (and the best
        refined one's start refined again) until one map is reached twice, the kept one
        refined once more on the working rows.  Sets the search's fitted attributes;
        returns the map."""
        none = np.empty(0, dtype=np.int64)
        sx = _sample(len(Xw), self.start_rows, rng, none)
        sy = _sample(len(Yw), self.start_rows, rng, none)
        A, B = Xw[torch.as_tensor(sx, device=Xw.device)], Yw[torch.as_tensor(sy, device=Yw.device)]
        scores, maps, refined, refined_scores, again = {}, {}, {}, {}, {}
        self.start_seconds_ = {}
        for restart in range(self.n_init):
            began = time.perf_counter()
            label = f"disjoint ({restart})"
            maps[label], scores[label] = _starts.oriented_disjoint_start(
                A,
                B,
                reverse=restart % 2 == 1,
                rng=np.random.RandomState(rng.randint(2**31 - 1)),
                generator=generator,
                n_runs=_DISJOINT_RUNS,
                qap_restarts=_DISJOINT_QAP_RESTARTS,
            )
            self.start_seconds_[label] = time.perf_counter() - began
            last = restart == self.n_init - 1
            due = (
                len(scores) >= _MIN_RESTARTS and (len(scores) - _MIN_RESTARTS) % _REFINE_EVERY == 0
            )
            if not (due or last):
                continue
            # the best starts by criterion not yet refined: two at first, then one
            waiting = [c for c in sorted(scores, key=scores.get, reverse=True) if c not in refined]
            for candidate in waiting[: 2 if len(refined) < 2 else 1]:
                began = time.perf_counter()
                refined[candidate] = _refine_candidate(A, B, maps[candidate], generator)
                refined_scores[candidate] = _starts.mean_best_csls(A, B, refined[candidate])
                self.start_seconds_[candidate] += time.perf_counter() - began
            # the best refined candidate, refined again from its start with fresh draws: a
            # right start's second refinement reaches the same map, a wrong one's does not
            leader = max(refined_scores, key=refined_scores.get)
            if leader not in again:
                began = time.perf_counter()
                again[leader] = _refine_candidate(A, B, maps[leader], generator)
                self.start_seconds_[leader] += time.perf_counter() - began
            if (
                _disjoint_confidence(scores, refined, refined_scores, again)[0]
                >= _CLEARLY_DISJOINT
            ):
                break
        self.start_scores_, self.refined_scores_ = scores, refined_scores
        self.reproduced_ = {c: _confidence.agreement(refined[c], again[c]) for c in again}
        confidence, self.stand_out_, self.agreement_, best = _disjoint_confidence(
            scores, refined, refined_scores, again
        )
        self.confidence_, self.init_ = confidence, best
        self.mutual_share_ = self.chance_share_ = float("nan")
        W = refined[best]
        if seeds is not None:
            W, _, _ = _refine.self_learn(Xw, Yw, W, seeds=seeds, n_iter=2, csls_k=self.csls_k)
        # One more disjoint_refine pass on (up to _LAST_PASS_ROWS of) the working rows: on
        # the design glosses it beat union self-learning by 0.04-0.05 of supervised (see
        # the User Guide); the final map is then fitted on every working row's matches.
        lx = torch.as_tensor(_sample(len(Xw), _LAST_PASS_ROWS, rng, none), device=Xw.device)
        ly = torch.as_tensor(_sample(len(Yw), _LAST_PASS_ROWS, rng, none), device=Yw.device)
        W, self.n_iter_ = _refine.disjoint_refine(
            Xw[lx],
            Yw[ly],
            W,
            generator=generator,
            csls_k=self.csls_k,
            patience=_CANDIDATE_PATIENCE,
            max_rounds=_CANDIDATE_ROUNDS,
        )
        return W

    def _null_share(self, Xw, Yw, held, seeds, effort, rng, generator):
        """The held-out share that the same search, with the same effort, reaches against a
        cloud with Y's clusters and nothing finer (:func:`clustered_surrogate`): what
        structure alone gives, which a real alignment must beat."""
        keep = None if seeds is None else seeds[:, 1]
        n_clusters = int(np.clip(round(np.sqrt(len(Yw))), 2, _NULL_CLUSTERS))
        surrogate = _confidence.clustered_surrogate(Yw, generator, n_clusters, keep=keep)
        null_rng = np.random.RandomState(rng.randint(2**31 - 1))
        # At least a few candidates: a real search that stopped at a lucky first candidate
        # must not leave the null fewer chances to be lucky.
        budget = (max(effort[0], _NULL_MIN_CANDIDATES), effort[1])
        W, *_ = self._start(Xw, surrogate, held, seeds, null_rng, generator, budget=budget)
        W, _ = self._self_learn(Xw, surrogate, W, held, seeds, self.max_iter)
        return _confidence.heldout_share(Xw, surrogate, W, held, self.csls_k)

    def _fit_final_map(self, X, Y, dictionary, W):
        """The map itself: supervised Procrustes on the final dictionary's raw rows.

        Self-learning matched rows in the common form, each side centred on its own mean;
        when the two sides hold different items (a subset, other documents) those means
        differ by more than the rotation, and spaces with a large common offset need the
        centring and scale chosen by retrieval.  The final map is therefore
        :class:`~sklearn_compat.OrthogonalProcrustesAligner` with its ``"auto"`` settings
        fitted on the induced pairs (seed pairs included); below its 100 rows, or without
        any pair, ``center=True, scale="spread"`` (the self-learned map and the means of
        all rows when there is no pair).
        """
        if len(dictionary) == 0:
            self.mean_x_ = X.mean(axis=0, dtype=np.float64)
            self.mean_y_ = Y.mean(axis=0, dtype=np.float64)
            spread_x = np.sum((X - self.mean_x_) ** 2)
            spread_y = np.sum((Y - self.mean_y_) ** 2)
            self.W_ = W.double().cpu().numpy()
            self.scale_ = float(np.sqrt(spread_y / spread_x)) if spread_x > 0 else 1.0
            self.center_, self.scale_mode_ = True, "spread"
            return
        if len(dictionary) >= holdout.MIN_ROWS:
            center, scale = "auto", "auto"
        else:
            center, scale = True, "spread"
        final = OrthogonalProcrustesAligner(center=center, scale=scale, device=self.device)
        final.fit(X[dictionary[:, 0]], Y[dictionary[:, 1]])
        self.W_, self.scale_ = final.W_, final.scale_
        self.mean_x_, self.mean_y_ = final.mean_x_, final.mean_y_
        self.center_, self.scale_mode_ = final.center_, final.scale_mode_

    def _self_learn(self, Xs, Ys, W, held, seeds, n_iter, *, stochastic=None):
        """Self-learning with the rows ``held`` left out of the dictionary, preceded by
        stochastic dictionary induction when ``stochastic`` (its generator) is given.

        Returns ``(W, rounds)``."""
        train = np.setdiff1d(np.arange(len(Xs)), held)
        if seeds is not None:
            seeds = seeds.clone()
            seeds[:, 0] = torch.as_tensor(
                np.searchsorted(train, seeds[:, 0].cpu().numpy()), device=seeds.device
            )
        Xt = Xs[torch.as_tensor(train, device=Xs.device)]
        stochastic_rounds = 0
        if stochastic is not None:
            W, stochastic_rounds = _refine.stochastic_self_learn(
                Xt, Ys, W, generator=stochastic, seeds=seeds, csls_k=self.csls_k
            )
        W, _, rounds = _refine.self_learn(
            Xt, Ys, W, seeds=seeds, n_iter=n_iter, csls_k=self.csls_k, tol=self.tol
        )
        return W, stochastic_rounds + rounds

    def _start(self, Xw, Yw, held, seeds, rng, generator, budget=None):
        """The starting map: of the candidate starts, each refined by self-learning from a
        sample of X's rows onto all of Y's, the one whose map finds mutual partners for
        the most held-out rows.

        ``budget``, ``(candidates, stochastic refinements)``, caps the search at the
        effort another search spent (the null's, see ``_null_share``).

        Returns ``(W, label, scores, effort)``."""
        max_plain, max_stochastic = budget or (np.inf, _STOCHASTIC_CANDIDATES)
        n = min(len(Xw), len(Yw), self.start_rows)
        # Both samples hold n rows (the sorted profiles compare rows of equal length),
        # the seed pairs' rows among them so that every candidate is refined with them.
        kept = np.empty((0, 2), dtype=np.int64) if seeds is None else seeds.cpu().numpy()[:n]
        sx, sy = _sample(len(Xw), n, rng, kept[:, 0]), _sample(len(Yw), n, rng, kept[:, 1])
        A, B = Xw[torch.as_tensor(sx, device=Xw.device)], Yw[torch.as_tensor(sy, device=Yw.device)]
        sample_held = np.flatnonzero(np.isin(sx, held))
        sample_seeds = None
        if seeds is not None:
            sample_seeds = torch.as_tensor(
                np.stack([np.searchsorted(sx, kept[:, 0]), kept[:, 1]], 1),
                device=Xw.device,
            )
        # Candidates are refined and compared from the sample of X onto every working row
        # of Y, never onto a sample of Y: when the two sides hold the same items, two
        # independent samples share only a fraction of them (a fifth, for samples of a
        # fifth), and the start then faces the much harder disjoint problem.  The sampled
        # rows of X all keep their partners among Y's rows.
        # The cluster start partitions more rows than the start sample when there are more
        # (_CLUSTER_START_ROWS); the same rows as the sample otherwise, with no draw.
        m = max(n, min(len(Xw), len(Yw), _CLUSTER_START_ROWS))
        cx, cy = sx, sy
        if m > n:
            none = np.empty(0, dtype=np.int64)
            cx, cy = _sample(len(Xw), m, rng, none), _sample(len(Yw), m, rng, none)
        CA = Xw[torch.as_tensor(cx, device=Xw.device)]
        CB = Yw[torch.as_tensor(cy, device=Yw.device)]
        scores, refined = {}, {}
        for label, make in self._candidates(A, B, CA, CB, Xw, Yw, seeds, rng, generator):
            if len(scores) >= max_plain:
                break
            W, _ = self._self_learn(A, Yw, make(), sample_held, sample_seeds, self.max_iter)
            scores[label] = _confidence.heldout_share(A, Yw, W, sample_held, self.csls_k)
            refined[label] = W
            if scores[label] >= _CLEARLY_ALIGNED:
                return W, label, scores, (len(scores), 0)  # not beaten by enough to pay for more
        # No start is clearly right: the most promising few get stochastic dictionary
        # induction, which can carry a roughly right map out of a poor dictionary's basin.
        dropout = torch.Generator(device=A.device).manual_seed(
            int(torch.randint(2**62, (1,), generator=generator))
        )
        plain, stochastic = len(scores), 0
        for label in sorted(scores, key=scores.get, reverse=True)[:max_stochastic]:
            stochastic += 1
            W, _ = self._self_learn(
                A, Yw, refined[label], sample_held, sample_seeds, self.max_iter,
                stochastic=dropout,
            )  # fmt: skip
            tried = f"{label} + stochastic"
            scores[tried] = _confidence.heldout_share(A, Yw, W, sample_held, self.csls_k)
            refined[tried] = W
            if scores[tried] >= _CLEARLY_ALIGNED:
                break
        best = max(scores, key=scores.get)
        return refined[best], best, scores, (plain, stochastic)

    def _candidates(self, A, B, CA, CB, Xw, Yw, seeds, rng, generator):
        """``(label, make)`` of every candidate start, cheapest first; ``make()`` builds
        the map (lazily, so that a good early candidate spares the later ones).  ``A`` and
        ``B`` are the start samples (the sorted-profile start compares them), ``CA`` and
        ``CB`` the rows the cluster start partitions (see ``_CLUSTER_START_ROWS``)."""
        if seeds is not None:
            yield "seed_pairs", lambda: _common.orthogonal_fit(Xw[seeds[:, 0]], Yw[seeds[:, 1]])
        if self.init in ("auto", "sorted_profile"):
            yield "sorted_profile", lambda: _starts.sorted_profile_start(A, B)
        if self.init in ("auto", "cluster_match"):
            n_clusters = max(2, min(self.n_clusters, len(CA) // 4))
            for restart in range(self.n_init):
                for forward in (True, False):
                    arrow = "X->Y" if forward else "Y->X"

                    # The sampled side onto all of the other side's working rows,
                    # whose partners it then all has (see _start).
                    def make(forward=forward):
                        P, Q = (CA, Yw) if forward else (CB, Xw)
                        W = _starts.cluster_match_start(
                            P, Q, n_clusters=n_clusters, rng=rng, generator=generator
                        )
                        return W if forward else W.T

                    yield f"cluster_match ({arrow}, {restart})", make

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
        for name, rows in (("X", len(X)), ("Y", len(Y))):
            if rows < _MIN_FIT_ROWS:
                raise ValueError(
                    f"{type(self).__name__} needs at least {_MIN_FIT_ROWS} rows on each side "
                    f"to learn a map without pairs; {name} has {rows}. With so few items, "
                    "pair them and fit OrthogonalProcrustesAligner."
                )
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


def _refine_candidate(A, B, W, generator):
    """A disjoint start refined on the start sample by one pass of
    :func:`~sklearn_compat._unpaired.refine.disjoint_refine` (stochastic dictionary
    induction with a long patience, then neighbour means)."""
    W, _ = _refine.disjoint_refine(
        A, B, W, generator=generator, patience=_CANDIDATE_PATIENCE, max_rounds=_CANDIDATE_ROUNDS
    )
    return W


def _disjoint_confidence(scores, refined, refined_scores, again=None):
    """``(confidence, stand_out, agreement, kept)`` of the disjoint restarts so far.

    ``agreement`` is the largest :func:`agreement` between two refinements that reached
    their map independently: two refined candidates (different restarts), or a refined
    candidate and the second refinement of the same start with fresh draws (``again``:
    label -> that map).  A right start is caught again by a second refinement; a wrong
    one's two refinements end at less alike maps.  ``confidence = (agreement - chance) /
    0.4`` clipped to [0, 1], the largest over all pairs, chance being the larger of 0.3
    and ``3 / sqrt(d)`` (three times the spread by which two random maps agree) for two
    restarts, and of 0.35 and ``6 / sqrt(d)`` for one start refined twice: the two share
    its choice of which clusters lie on which, and where that choice fixes much of the
    map (few dimensions, clustered clouds) they agree through it alone.  ``kept`` is the
    candidate with the higher refined criterion of the agreeing pair (the candidate
    itself when it agrees with its own second refinement) when agreement is beyond
    chance, otherwise the highest refined criterion of all (the best start by criterion
    when none is refined).  ``stand_out`` (:func:`stand_out` of the starts' criteria, 0
    with three or fewer) is reported, not counted: a start that stands out may still be
    refined to a poor map."""
    again = again or {}
    stand = _confidence.stand_out(list(scores.values())) if len(scores) > 3 else 0.0
    if not refined_scores:
        return 0.0, stand, 0.0, max(scores, key=scores.get)
    kept = max(refined_scores, key=refined_scores.get)
    labels = sorted(refined_scores)
    pairs = [
        (refined[a], refined[b], (a, b)) for i, a in enumerate(labels) for b in labels[i + 1 :]
    ]
    pairs += [(refined[c], again[c], (c,)) for c in sorted(again) if c in refined]
    if not pairs:
        return 0.0, stand, 0.0, kept

    def beyond(W1, W2, which):
        # a pair from one start shares the start's coarse choice (which clusters lie on
        # which): it needs twice the spreads of two random maps
        one_start = len(which) == 1
        spreads = _AGREEMENT_SPREADS * (2 if one_start else 1)
        floor = _SAME_START_FLOOR if one_start else _AGREEMENT_FLOOR
        chance = max(floor, spreads / np.sqrt(min(W1.shape)))
        agree = _confidence.agreement(W1, W2)
        return float(np.clip((agree - chance) / _AGREEMENT_SPAN, 0.0, 1.0)), agree, which

    confidence, agree, which = max(
        (beyond(W1, W2, which) for W1, W2, which in pairs), key=lambda item: item[:2]
    )
    if confidence > 0:
        kept = max(which, key=refined_scores.get)
    return confidence, stand, agree, kept


def _warn_unreliable(reason):
    """Warn with :class:`UnreliableAlignmentWarning`; ``reason`` (a clause naming what the
    fit measured) is kept on the warning as ``reason`` so that the command line can say
    the same in its own terms."""
    warning = UnreliableAlignmentWarning(
        f"The unpaired alignment looks unreliable: {reason}. The two spaces may share too "
        "little structure for an unsupervised fit; pass seed pairs (pairs=, a few hundred "
        "help most), more rows of the same items on both sides, or fit a supervised "
        "aligner on paired rows."
    )
    warning.reason = reason
    warnings.warn(warning, stacklevel=3)


def _sample(n, limit, rng, keep):
    """Sorted row indices: all ``n`` rows, or ``limit`` of them including ``keep``."""
    if n <= limit:
        return np.arange(n)
    keep = np.unique(keep)
    others = np.setdiff1d(np.arange(n), keep)
    extra = rng.choice(others, max(0, limit - len(keep)), replace=False)
    return np.sort(np.concatenate([keep, extra]))


def _heldout_rows(n, seeds, rng):
    """Sorted indices of the rows of X kept out of self-learning (never a seed pair's)."""
    candidates = np.arange(n)
    if seeds is not None:
        candidates = np.setdiff1d(candidates, seeds[:, 0].cpu().numpy())
    count = min(len(candidates), max(1, round(_HELDOUT_SHARE * n)))
    return np.sort(rng.choice(candidates, count, replace=False))


def _check_pairs(pairs, n_x, n_y):
    """Seed pairs as an int64 (m, 2) array of valid rows, or a one-line error."""
    if pairs is None:
        return np.empty((0, 2), dtype=np.int64)
    values = np.asarray(checked_input(pairs, "pairs"))
    if values.ndim != 2 or values.shape[1] != 2:
        raise ValueError(
            f"pairs must have shape (n_pairs, 2), (row of X, row of Y); got shape {values.shape}."
        )
    if values.dtype.kind == "O":  # mixed Python objects: judge each entry
        for (row, column), value in np.ndenumerate(values):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
                _not_an_index(row, column, value)
        values = values.astype(np.float64)
    if values.dtype.kind not in "iuf":  # strings, booleans, bytes, dates
        entries = [(where, value.item()) for where, value in np.ndenumerate(values)]
        # the first entry that does not even read as a number, else the first
        odd = [e for e in entries if not str(e[1]).strip().lstrip("-").isdigit()]
        (row, column), value = (odd or entries)[0]
        _not_an_index(row, column, value)
    for column, (name, n) in enumerate((("X", n_x), ("Y", n_y))):
        side = values[:, column]
        bad = (side < 0) | (side >= n) | (side != np.round(side))
        if values.dtype.kind == "f":
            bad |= ~np.isfinite(side)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            value = float(side[row])
            if value != np.round(value) or not np.isfinite(value):
                raise ValueError(
                    f"pairs[{row}] = {values[row].tolist()}: {value!r} is not an integer row "
                    "index (pairs must hold integer row indices)."
                )
            shown = int(value) if abs(value) < 2**53 else f"{value:g}"
            raise ValueError(
                f"pairs[{row}] = {values[row].tolist()} names row {shown} of "
                f"{name}, which has {n} rows."
            )
    return values.astype(np.int64)


def _not_an_index(row, column, value):
    raise ValueError(
        f"pairs[{row}, {column}] = {value!r} is not a row index: pairs must hold integer "
        f"row indices (row of X, row of Y), not {type(value).__name__} values."
    )

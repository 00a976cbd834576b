"""Iterative refinement with a dictionary induced under CSLS (Conneau et al., ICLR 2018)."""

import warnings
from numbers import Integral

import numpy as np
import torch
from sklearn.base import _fit_context, clone
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._core import fitted_choices, holdout, step_choice
from ._core.base import BaseAligner
from ._core.csls import mutual_csls_pairs
from ._core.few_pairs import UnderdeterminedFitWarning
from ._core.validation import pick_target, stack_unpaired
from .whitened import WhitenedProcrustesAligner

__all__ = ["RefinedProcrustesAligner"]

#: Rounds that ``n_refinements="auto"`` runs when they help (MUSE's 5).
AUTO_ROUNDS = 5

#: The fitted attribute that records each "auto" parameter's choice.
_CHOICES = {
    "center": "center_",
    "fit_intercept": "center_",
    "scale": "scale_mode_",
    "normalize": "normalize_",
    "whiten": "whiten_",
    "dewhiten": "dewhiten_",
}


def chosen_settings(fitted, unfitted):
    """``{parameter: value}`` of the ``"auto"`` parameters of ``unfitted`` as ``fitted``
    resolved them (an estimator without any gives ``{}``)."""
    params = unfitted.get_params(deep=False)
    return {
        name: getattr(fitted, attribute)
        for name, attribute in _CHOICES.items()
        if isinstance(params.get(name), str)
        and params[name] == "auto"
        and hasattr(fitted, attribute)
    }


class RefinedProcrustesAligner(BaseAligner):
    """Fit a map, induce more pairs from unpaired rows by mutual CSLS neighbours, refit.

    The refinement of Conneau, Lample, Ranzato, Denoyer and Jegou, "Word translation
    without parallel data" (MUSE), ICLR 2018: starting from a map fitted on the given
    pairs (a few hundred suffice), every round maps all source rows, paired and unpaired,
    into Y's space, takes as new pairs the rows that are each other's nearest neighbour
    under CSLS (cross-domain similarity local scaling, which demotes "hub" rows), and
    refits the map on the given pairs plus the induced ones.  Unpaired rows of either
    space thereby improve the map.

    Parameters
    ----------
    estimator : aligner, default=None
        The map refitted in every round (cloned).  ``None`` uses
        :class:`WhitenedProcrustesAligner`; MUSE's own choice is
        ``OrthogonalProcrustesAligner(center=True)``.  Its ``"auto"`` settings (the
        default Whitened map's ``center`` and ``normalize``) are decided once, by the
        first fit on the given pairs (held-out paired top-1, see the estimator), and
        every round refits with that choice: the induced pairs are the map's own
        guesses, so they are not asked again.  ``center_``, ``normalize_`` (or the
        estimator's other choices) and ``auto_scores_`` hold the choice.  How that choice
        compares with the best explicit setting after refinement: :ref:`benchmarks`.
    n_refinements : int or "auto", default="auto"
        Rounds of induction and refitting (MUSE uses 5).  0 fits ``estimator`` on the
        given pairs only.  Rounds stop early once the induced dictionary repeats.
        ``"auto"`` runs 5 rounds only where they help: the given pairs less a held-out
        slice (a fifth, at most 1,000, evenly spaced) are fitted and refined with the
        unpaired rows, and the rounds are kept only when the refined map's paired top-1
        on the slice (ranked among the slice's and the unpaired target rows) beats the
        unrefined one's by more than one paired standard error
        (:class:`~sklearn_compat.exceptions.StepDeclinedWarning` when they lose).  With
        ``keep_pairs`` and no unpaired rows there is nothing to induce and no round
        runs; below 100 given pairs (no slice to judge by, and few pairs are what
        refinement is for) the 5 rounds run.  ``step_choice_`` holds the evidence.

        .. versionchanged:: 0.1
           The default became ``"auto"`` (was 5).
    csls_k : int, default=10
        Neighbourhood size of CSLS's hubness correction (the paper's 10).
    keep_pairs : bool, default=True
        Keep the given pairs in every round's dictionary, and induce pairs only for rows
        whose partner is not given (MUSE's supervised refinement uses the induced
        dictionary alone: set False for that).

        .. versionchanged:: 0.1
           A row of a given pair is no longer also paired by induction: a mutual
           neighbour that is not its known partner added a wrong pair beside the true one
           (on paired-only data every round then refitted the given pairs plus their
           mistakes).
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the neighbour searches run (``estimator`` has its own ``device``).

    Attributes
    ----------
    estimator_ : aligner
        The map fitted in the last round; ``transform`` is its transform.
    center_, normalize_, scale_mode_ : bool or str
        What the estimator's ``"auto"`` parameters chose on the given pairs (present
        where the estimator has them); :class:`~sklearn_compat.neighbors.AlignedNeighbors`
        compares centred when ``center_`` is True.
    auto_scores_ : dict or None
        The held-out scores of that choice.
    W_ : ndarray of shape (n_features_in_, n_targets_)
        ``estimator_.W_``.
    induced_pairs_ : ndarray of shape (n_induced, 2)
        The last round's induced pairs as ``(source row, target row)`` indices into
        ``[X; X_unpaired]`` and ``[Y; Y_unpaired]``.
    n_induced_ : list of int
        Pairs induced in each round.
    n_refinements_ : int
        Rounds run.
    step_choice_ : dict or None
        With ``n_refinements="auto"``: the held-out evidence for the rounds (``kept``,
        ``with_step``, ``without_step``, ``gain``, ``se``, ``n_rows``), or ``kept`` None
        and ``why`` when there was nothing to decide; None for explicit rounds.
    n_features_in_ : int
        Width of X.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, when X was a DataFrame with string columns.

    See Also
    --------
    WhitenedProcrustesAligner : the default map of every round.
    OrthogonalProcrustesAligner : MUSE's map.

    Notes
    -----
    Each round costs two CSLS searches of ``n_source x n_target`` similarities, computed
    on ``device`` in blocks of bounded memory (no full matrix is formed), plus a refit.
    Without unpaired rows and with ``keep_pairs`` there is nothing to induce.  With
    ``keep_pairs=False`` the rounds can still move the map: the induced dictionary
    replaces pairs the map gets wrong by ones it gets right, which is only useful when the
    given pairs are noisy.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import ortho_group
    >>> from sklearn_compat import OrthogonalProcrustesAligner, RefinedProcrustesAligner
    >>> rng = np.random.default_rng(0)
    >>> Q = ortho_group.rvs(10, random_state=0)
    >>> X = rng.normal(size=(500, 10))
    >>> Y = X @ Q + 0.05 * rng.normal(size=(500, 10))
    >>> seed = OrthogonalProcrustesAligner()
    >>> aligner = RefinedProcrustesAligner(seed, n_refinements=3).fit(
    ...     X[:20], Y[:20], X_unpaired=X[20:], Y_unpaired=Y[20:][::-1])
    >>> aligner.n_induced_  # every unpaired row finds its partner
    [480, 480]
    >>> float(np.abs(aligner.W_ - Q).max()) < 0.01
    True
    >>> float(np.abs(OrthogonalProcrustesAligner().fit(X[:20], Y[:20]).W_ - Q).max()) < 0.01
    False
    """

    _parameter_constraints: dict = {
        "estimator": [HasMethods(["fit", "transform"]), None],
        "n_refinements": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "csls_k": [Interval(Integral, 1, None, closed="left")],
        "keep_pairs": ["boolean"],
        "device": [str, torch.device],
    }

    def __init__(
        self, estimator=None, *, n_refinements="auto", csls_k=10, keep_pairs=True, device="auto"
    ):
        self.estimator = estimator
        self.n_refinements = n_refinements
        self.csls_k = csls_k
        self.keep_pairs = keep_pairs
        self.device = device

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, Y=None, *, X_unpaired=None, Y_unpaired=None, y=None):
        """Fit on the pairs, then refine with pairs induced among all rows.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_pairs, n_features)
            Source embeddings of the given pairs.
        Y : array-like or torch.Tensor of shape (n_pairs, n_targets)
            Target embeddings of the same items, same row order.
        X_unpaired : array-like of shape (n_source_only, n_features), default=None
            More source rows, with no partner known.
        Y_unpaired : array-like of shape (n_target_only, n_targets), default=None
            More target rows (any number, any order), e.g. the old index.
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.

        Returns
        -------
        self : object
            Fitted aligner.
        """
        X, Y = self._validate_pair(X, pick_target(Y, y), reset=True)
        sources = stack_unpaired(X, X_unpaired, "X_unpaired")
        targets = stack_unpaired(Y, Y_unpaired, "Y_unpaired")
        n_pairs = X.shape[0]
        base = WhitenedProcrustesAligner() if self.estimator is None else self.estimator
        current = clone(base).fit(X, Y)
        # The estimator's "auto" settings are decided once, on the given pairs, and kept
        # by every round: the induced pairs are the map's own guesses, and a setting that
        # changed between rounds would change the dictionary it induces.
        base = clone(base).set_params(**chosen_settings(current, base))
        for name in fitted_choices.CHOICE_ATTRIBUTES:
            self.__dict__.pop(name, None)
            if name != "step_choice_" and hasattr(current, name):
                setattr(self, name, getattr(current, name))
        self.step_choice_ = None
        n_rounds = self.n_refinements
        if isinstance(n_rounds, str):
            n_rounds = self._auto_rounds(X, Y, X_unpaired, Y_unpaired, base)
        current, induced, self.n_induced_ = self._refine(
            current, base, sources, targets, n_pairs, n_rounds
        )
        self.estimator_ = current
        self.W_ = np.asarray(current.W_, dtype=np.float64)
        self.induced_pairs_ = induced
        self.n_refinements_ = len(self.n_induced_)
        return self

    def _refine(self, current, base, sources, targets, n_pairs, n_rounds):
        """Up to ``n_rounds`` rounds from the map ``current``: ``(last map, last induced
        pairs, pairs induced per round)``.  The first ``n_pairs`` rows of ``sources`` and
        ``targets`` are the given pairs."""
        n_induced = []
        induced = np.empty((0, 2), dtype=np.int64)
        k = min(self.csls_k, sources.shape[0], targets.shape[0])
        for _ in range(n_rounds):
            mapped = current.transform(sources)
            new = mutual_csls_pairs(mapped, targets, k, device=self.device)
            if self.keep_pairs:
                # A row with a given partner keeps it: a mutual neighbour that is not
                # that partner would add a wrong pair beside the true one.
                new = new[(new[:, 0] >= n_pairs) & (new[:, 1] >= n_pairs)]
            n_induced.append(int(len(new)))
            if np.array_equal(new, induced):
                break
            induced = new
            src, tgt = induced[:, 0], induced[:, 1]
            if self.keep_pairs:
                src = np.concatenate([np.arange(n_pairs), src])
                tgt = np.concatenate([np.arange(n_pairs), tgt])
            if len(src) == 0:
                break
            with warnings.catch_warnings():
                # Said once, by the first fit on the given pairs: a round's induced pairs
                # are the model's own guesses, not the user's data.
                warnings.simplefilter("ignore", UnderdeterminedFitWarning)
                current = clone(base).fit(sources[src], targets[tgt])
        return current, induced, n_induced

    def _auto_rounds(self, X, Y, X_unpaired, Y_unpaired, base):
        """``n_refinements="auto"``: :data:`AUTO_ROUNDS` rounds if they beat no round on
        a held-out slice of the given pairs (see the parameter), else 0."""
        if self.keep_pairs and X_unpaired is None and Y_unpaired is None:
            step_choice.no_evidence(self, "refinement", "no unpaired rows to induce pairs from")
            return 0
        folds = holdout.holdout_folds(X.shape[0], None)
        if folds is None:
            step_choice.no_evidence(self, "refinement", "too few pairs for a held-out slice")
            return AUTO_ROUNDS
        held = folds[0]
        keep = np.setdiff1d(np.arange(X.shape[0]), held)
        sources = stack_unpaired(X[keep], X_unpaired, "X_unpaired")
        targets = stack_unpaired(Y[keep], Y_unpaired, "Y_unpaired")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = clone(base).fit(X[keep], Y[keep])
            refined, _, _ = self._refine(start, base, sources, targets, len(keep), AUTO_ROUNDS)
        # The slice's rows rank among the unpaired target rows too (at most
        # MAX_SCORED_ROWS of them, evenly spaced), so a small slice still tells maps apart.
        others = None
        if Y_unpaired is not None:
            others = np.asarray(targets[len(keep) :])
            step = max(1, len(others) // holdout.MAX_SCORED_ROWS)
            others = others[::step]
        kept = step_choice.decide_step(
            self,
            "refinement",
            holdout.paired_hits(refined.transform(X[held]), Y[held], others),
            holdout.paired_hits(start.transform(X[held]), Y[held], others),
            parameter=f"n_refinements={AUTO_ROUNDS}",
            base="the map of the given pairs",
        )
        return AUTO_ROUNDS if kept else 0

    def _affine_map(self):
        """The last round's map as ``(A, b)`` (exports; ``transform`` delegates to it)."""
        return self.estimator_._affine_map()

    def _maps_unit_rows(self):
        """Whether the last round's map works on unit rows (see AlignedNeighbors)."""
        return bool(getattr(self.estimator_, "_maps_unit_rows", lambda: False)())

    def transform(self, X):
        """Map X into Y's space with the last round's map.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features_in_)
            Source embeddings.

        Returns
        -------
        ndarray of shape (n_samples, n_targets_)
            In X's float dtype.
        """
        check_is_fitted(self)
        return self.estimator_.transform(self._validate_X(X))

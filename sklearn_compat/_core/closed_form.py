"""Base class of the aligners solved in closed form from sufficient statistics.

``OrthogonalProcrustesAligner`` and ``AffineAligner`` share everything but the statistics
they ask for and the final solve: ``fit`` and ``partial_fit`` both reduce a batch to
:class:`~.moments.PairMoments` (numpy, torch or Dask input, see ``pair_stats``), merge it
exactly with the batches seen before, and solve from the merged statistics.
"""

from sklearn.base import _fit_context

from .base import BaseAligner
from .few_pairs import warn_if_few_pairs
from .moments import PairMoments
from .pair_stats import batch_moments
from .row_space import (
    full_moments,
    is_wide,
    merge_thin,
    moments_state,
    row_stats,
    state_stats,
    thin_width,
)
from .validation import pick_target

__all__ = ["ClosedFormAligner"]


class ClosedFormAligner(BaseAligner):
    """An aligner fitted from mergeable sufficient statistics.

    Subclasses implement:

    - ``_moment_options()``: the keyword arguments of :func:`~.pair_stats.batch_moments`
      (``centered``, ``need_gram``, ...) that their solve needs;
    - ``_check_continuation(previous)``: raise ``ValueError`` when the current parameters
      cannot continue from statistics ``previous`` collected by earlier ``partial_fit``
      calls (checked before any work, so a refused call leaves the model as it was);
    - ``_solve(moments, n_samples_seen)``: set the fitted attributes;
    - optionally ``_check_fit_inputs(X, Y)``: warnings about the data of a first batch
      (called after validation succeeded).
    """

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, Y=None, sample_weight=None, *, y=None):
        """Fit the map from paired rows.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask array of shape (n_samples, n_features)
            Source embeddings (the space to map from).
        Y : array-like, torch.Tensor or dask array of shape (n_samples, n_targets)
            Target embeddings of the same items in the same row order.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights; integer weights equal repeating rows.
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.

        Returns
        -------
        self : object
            Fitted aligner.
        """
        self._update(X, pick_target(Y, y), sample_weight, reset=True)
        warn_if_few_pairs(self, self.n_samples_seen_, stacklevel=4)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, Y=None, sample_weight=None, *, y=None):
        """Update the map with a batch of paired rows.

        The sufficient statistics of all batches so far are merged exactly, so the result
        equals ``fit`` on the concatenation of the batches.  Parameters that shape the
        statistics (``center`` and ``scale``, ``fit_intercept``) must stay as they were
        at the first call; others (``alpha``, ``allow_reflection``) apply to the total.

        Parameters
        ----------
        X : array-like, torch.Tensor or dask array of shape (n_samples, n_features)
            Source embeddings.
        Y : array-like, torch.Tensor or dask array of shape (n_samples, n_targets)
            Target embeddings of the same items.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative row weights.
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.

        Returns
        -------
        self : object
            Updated aligner.
        """
        first = not hasattr(self, "_moments_state")
        return self._update(X, pick_target(Y, y), sample_weight, reset=first)

    def _solves_wide(self):
        """Whether ``_solve`` also takes :class:`~.row_space.RowStats` (wide data)."""
        return False

    def _update(self, X, Y, sample_weight, *, reset):
        if reset and self._solves_wide() and is_wide(X, Y, sample_weight):
            # Fewer rows than dimensions: solved in the row space (see row_space).
            options = self._moment_options()
            stats = row_stats(self, X, Y, sample_weight, centered=options["centered"])
            return self._fit_row_stats(stats, X, Y)
        if not reset and self._merges_thin(X, Y, sample_weight):
            return self._update_thin(X, Y, sample_weight)
        previous = None if reset else PairMoments(**full_moments(self._moments_state))
        if previous is not None:
            self._check_continuation(previous)
        batch, n_rows = batch_moments(
            self, X, Y, sample_weight, reset=reset, **self._moment_options()
        )
        if reset:
            self._check_fit_inputs(X, Y)
        if previous is not None:
            batch = previous.merge(batch)
        if batch.weight <= 0:
            raise ValueError("sample_weight sums to zero: there is nothing to fit.")
        n_samples_seen = n_rows + (0 if reset else self.n_samples_seen_)
        self._solve(batch, n_samples_seen)
        self._moments_state = vars(batch).copy()
        self.n_samples_seen_ = n_samples_seen
        return self

    def _fit_row_stats(self, stats, X, Y):
        """Solve a fresh fit from the :class:`~.row_space.RowStats` of validated rows."""
        self._check_fit_inputs(X, Y)
        self._solve(stats, stats.n_rows)
        need_gram = self._moment_options().get("need_gram")
        self._moments_state = moments_state(stats, need_gram=need_gram)
        self.n_samples_seen_ = stats.n_rows
        return self

    def _merges_thin(self, X, Y, sample_weight):
        """Whether a partial_fit batch can be merged into thin statistics and stay thin."""
        width = thin_width(self._moments_state)
        if width is None or not self._solves_wide() or "gram_root" in self._moments_state:
            return False
        rows = getattr(X, "shape", (None,))[0]
        d = max(self.n_features_in_, self.n_targets_)
        return is_wide(X, Y, sample_weight) and rows is not None and width + rows + 1 < d

    def _update_thin(self, X, Y, sample_weight):
        previous = self._moments_state
        self._check_continuation(PairMoments(**full_moments({**previous, "cross_left": None})))
        stats = row_stats(self, X, Y, sample_weight, centered=previous["centered"], reset=False)
        merged = merge_thin(previous, moments_state(stats, need_gram=False))
        n_samples_seen = self.n_samples_seen_ + stats.n_rows
        self._solve(state_stats(merged, n_samples_seen), n_samples_seen)
        self._moments_state = merged
        self.n_samples_seen_ = n_samples_seen
        return self

    def _check_fit_inputs(self, X, Y):
        """Hook for warnings about the data of a fresh fit; nothing by default."""

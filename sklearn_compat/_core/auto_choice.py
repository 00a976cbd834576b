"""Settings chosen from the training pairs at ``fit`` (``center="auto"`` and friends).

No fixed centring or scale is right for every pair of models: centring rescues anisotropic
models and costs on ordinary ones (the user guide's :ref:`centring` shows both).  So the
``"auto"`` settings are decided by held-out paired top-1 (:mod:`.holdout`): each
candidate setting is fitted on the kept rows and scored on the held-out ones; the best
one is refitted on all rows.  Ties go to the candidate listed first.

This module resolves an estimator's ``"auto"`` parameters (:func:`resolve_by_refit`) with
one of the choosers: :func:`~.refit_choice.choose_by_refit` by default,
:mod:`.moment_choice`'s from sufficient statistics where the estimator passes one.

When the data cannot decide (fewer than :data:`~.holdout.MIN_ROWS` rows), the documented
fallback of each estimator is used, and :class:`~sklearn_compat.exceptions.AutoSettingWarning`
says so, once per fit; it also says so when every column of X or of Y is constant (no
candidate can be told apart there).  Duplicated rows do not blind the choice: copies of a
held-out row's target count as its answer, not as competitors (see
:func:`~.holdout.top1_of_similarities`).
"""

import warnings

import numpy as np
from sklearn.utils.validation import _check_sample_weight

from ..exceptions import AutoSettingWarning
from .backend import is_dask_collection
from .holdout import MIN_ROWS, take_rows
from .moment_choice import _sample_rows, constant_row_side
from .refit_choice import choose_by_refit


def resolve(value, fitted_name, estimator, default):
    """The setting in force: the fitted choice for ``"auto"``, else the parameter."""
    if isinstance(value, str) and value == "auto":
        return getattr(estimator, fitted_name, default)
    return value


def _is_auto(value):
    return isinstance(value, str) and value == "auto"


def warn_undecided(estimator_name, why, fallback):
    warnings.warn(
        f"{estimator_name}: 'auto' could not choose from the data ({why}); using "
        f"{fallback}. Set the parameter explicitly to silence this.",
        AutoSettingWarning,
        stacklevel=4,
    )


def checked_input(estimator, X, Y, sample_weight):
    """``(X, Y, sample_weight)`` validated as ``fit`` will (one-line errors first), so that
    the choice reads clean rows; Dask input is passed through (read lazily by rows)."""
    if is_dask_collection(X, Y, sample_weight):
        from .dask import checked_dask_pair

        return checked_dask_pair(X, Y, sample_weight)
    X, Y = estimator._validate_pair(X, Y, reset=True, keep_tensors=True)
    if sample_weight is not None:
        sample_weight = _check_sample_weight(
            np.asarray(sample_weight), X, dtype=np.float64, ensure_non_negative=True
        )
        if not sample_weight.sum() > 0:
            raise ValueError("sample_weight sums to zero: there is nothing to fit.")
    return X, Y, sample_weight


def _constant_columns(estimator, X, Y, sample_weight):
    """Whether every column of X, or of Y, is constant on the rows a choice reads (all
    rows, or the moment choosers' sample of a larger set)."""
    rows = _sample_rows(int(np.shape(X)[0]), getattr(estimator, "random_state", None))
    weights = None if sample_weight is None else np.asarray(sample_weight, np.float64)[rows]
    return constant_row_side(take_rows(X, rows), take_rows(Y, rows), weights)


def sampled_chooser(chooser, sample):
    """``chooser`` (``(options, X, Y, sample_weight)`` of validated input) run on the
    rows ``sample`` only (float64 numpy)."""

    def choose(options, X, Y, sample_weight, **kwargs):
        weights = None if sample_weight is None else np.asarray(sample_weight)[sample]
        return chooser(options, take_rows(X, sample), take_rows(Y, sample), weights, **kwargs)

    return choose


def resolve_by_refit(estimator, X, Y, names, grid, fallback, *, sample_weight=None, chooser=None):
    """Decide the ``"auto"`` parameters of ``estimator`` and set their fitted attributes.

    Parameters
    ----------
    names : dict
        ``{parameter: fitted attribute}``; an explicit parameter is copied as it is.
    grid : list of dict
        Candidate values of the parameters, preferred first (explicit ones override).
    fallback : dict
        The values used, with an :class:`AutoSettingWarning`, when the data are too few.
    chooser : callable, default=None
        ``chooser(options, X, Y, sample_weight) -> (setting or None, scores)``, given the
        validated input; by default
        :func:`choose_by_refit` (one held-out fold, one refit per candidate).

    Returns
    -------
    dict
        ``{parameter: value in force}``.  ``auto_scores_`` is set to the candidates'
        held-out top-1 (None when nothing was scored).
    """
    auto = [name for name in names if _is_auto(getattr(estimator, name))]
    fixed = {name: getattr(estimator, name) for name in names if name not in auto}
    estimator.auto_scores_ = None
    setting = dict(fixed)
    if auto:
        X, Y, sample_weight = checked_input(estimator, X, Y, sample_weight)
        options = {}
        for values in grid:
            option = {**values, **fixed}
            options.setdefault(tuple(sorted(option.items())), option)
        options = list(options.values())
        setting = options[0]
        if len(options) > 1:
            if chooser is None:
                chosen, scores = choose_by_refit(
                    estimator, X, Y, options, sample_weight=sample_weight
                )
            else:
                chosen, scores = chooser(options, X, Y, sample_weight)
            if chosen is None:
                chosen = {**fallback, **fixed}
                warn_undecided(
                    type(estimator).__name__,
                    f"{int(np.shape(X)[0])} rows, fewer than the {MIN_ROWS} needed for a "
                    "held-out slice",
                    ", ".join(f"{name}={chosen[name]!r}" for name in auto),
                )
            elif _constant_columns(estimator, X, Y, sample_weight):
                # Procrustes' rule: no candidate can be told apart on constant rows.
                warn_undecided(
                    type(estimator).__name__,
                    "every column of X or of Y is constant",
                    ", ".join(f"{name}={chosen[name]!r}" for name in auto),
                )
            setting, estimator.auto_scores_ = chosen, scores or None
    for name, attribute in names.items():
        setattr(estimator, attribute, setting[name])
    return setting

"""Whether a trained map beats the orthogonal map it starts from (``lam="auto"``,
``hidden="auto"``).

:class:`~sklearn_compat.LambdaOrthAligner` and
:class:`~sklearn_compat.ResidualAdapterAligner` start from the orthogonal Procrustes map
of the training rows and train away from it (a non-orthogonal part, a residual MLP).  With
their ``"auto"`` default the trained map and ``OrthogonalProcrustesAligner()`` (its own
``"auto"`` centring and scale) are scored by paired top-1 on the same held-out rows
(:mod:`.._core.step_choice`): the early-stopping rows when the fit holds some out (they
are never trained on), else a held-out fold of the rows, on which a second training runs
on the rest.  Where training does not win by more than one paired standard error, the fit
is that Procrustes map of all rows.  (The start itself is not the yardstick: it is
scaled by the ratio of the two spaces' RMS norms, where Procrustes chooses its scale on
held-out rows; on WordLlama -> MiniLM the start scored 0.902 against Procrustes' 0.924.)
"""

import warnings

import numpy as np
from sklearn.utils import check_random_state

from .._core import holdout, step_choice
from .fitting import FittedMap, prepare_fit_data, train_map
from .losses import orthogonality_gap


def mapped(fitted, X):
    """``X`` (user units, float64 numpy) through a :class:`FittedMap`."""
    out = X @ fitted.W + fitted.bias
    if fitted.mlp:
        W1, b1, W2, b2 = fitted.mlp
        out = out + np.maximum(X @ W1 + b1, 0) @ W2 + b2
    return out


def _user_rows(part, data):
    X, Y, _ = part
    return (
        X.detach().cpu().double().numpy() * data.x_scale,
        Y.detach().cpu().double().numpy() * data.y_scale,
    )


def _fitted_baseline(baseline, X, Y):
    with warnings.catch_warnings():
        # Its own advice is not the user's concern here: it is only a yardstick.
        warnings.simplefilter("ignore")
        return baseline().fit(X, Y)


def _as_fitted_map(model, fitted):
    """The Procrustes ``model`` as a :class:`FittedMap` (the declined training's history
    kept)."""
    A, b = model._affine_map()
    scale = fitted.y_scale / fitted.x_scale
    return FittedMap(
        W=np.asarray(A, np.float64),
        bias=np.asarray(b, np.float64),
        forward=None,
        lam=0.0,
        x_scale=fitted.x_scale,
        y_scale=fitted.y_scale,
        orthogonality_gap=float(orthogonality_gap(np.asarray(A) / scale)),
        history=fitted.history,
        n_epochs=fitted.n_epochs,
        best_epoch=fitted.best_epoch,
    )


def decide_trained_step(settings, X, Y, codes, data, fitted, rng, *, step, parameter, baseline):
    """The map to keep: ``fitted`` (the trained one) or ``baseline()`` fitted on all rows.

    ``X``, ``Y``: the validated training rows; ``codes``: their label codes or None;
    ``data``: the prepared rows ``fitted`` was trained on; ``rng``: draws the second
    training's minibatches where one is needed; ``baseline``: makes the unfitted
    :class:`~sklearn_compat.OrthogonalProcrustesAligner` (its ``"auto"`` centring and
    scale) the trained map must beat.  Sets ``settings.step_choice_``, and ``center_`` to
    the baseline's centring where it is kept.
    """
    if settings.bidirectional:
        step_choice.no_evidence(
            settings, step, "bidirectional: the forward adapter is trained with the map"
        )
        return fitted
    if data.valid is not None:
        # The early-stopping rows: never trained on (only their loss picked the epoch).
        X_held, Y_held = _user_rows(data.valid, data)
        trained = fitted
        base = _fitted_baseline(baseline, *_user_rows(data.train, data))
    else:
        folds = holdout.holdout_folds(X.shape[0], settings.random_state)
        if folds is None:
            step_choice.no_evidence(settings, step, "too few rows for a held-out slice")
            return fitted
        held = folds[0]
        keep = np.setdiff1d(np.arange(X.shape[0]), held)
        second = check_random_state(rng.randint(0, 2**31 - 1))
        kept_codes = None if codes is None else codes[keep]
        part = prepare_fit_data(settings, X[keep], Y[keep], kept_codes, second)
        trained = train_map(settings, part, second)
        base = _fitted_baseline(baseline, X[keep], Y[keep])
        X_held, Y_held = np.asarray(X[held], np.float64), np.asarray(Y[held], np.float64)
    kept = step_choice.decide_step(
        settings,
        step,
        holdout.paired_hits(mapped(trained, X_held), Y_held),
        holdout.paired_hits(base.transform(X_held), Y_held),
        parameter=parameter,
        base="OrthogonalProcrustesAligner()",
    )
    if kept:
        return fitted
    model = _fitted_baseline(baseline, X, Y)
    settings.center_ = bool(model.center_)
    return _as_fitted_map(model, fitted)

"""Whether a method's extra step earns its place over the orthogonal map it builds on.

Whitening, refinement rounds, a non-orthogonal part, a residual MLP: each stronger aligner
is orthogonal Procrustes plus one step, and on some pairs of real models the step costs
retrieval (a static model mapped into a transformer's larger space lost 0.03 to 0.11 of
paired top-1 to the rotation).  Their ``"auto"`` defaults therefore decide the step at
``fit`` as Procrustes decides its centring (:mod:`.holdout`): the map with the step and
the map without it are scored by paired top-1 on the same held-out training rows, and the
step is kept only when it wins by more than :data:`STEP_SE` paired standard errors of the
per-row difference (:func:`~.holdout.paired_gain`).  A tie keeps the simpler map; a step
that lost is left out with one :class:`~sklearn_compat.exceptions.StepDeclinedWarning`.

The decision is recorded in the fitted ``step_choice_``, which ``sklearn-compat inspect``
shows (:mod:`.fitted_choices`).
"""

import warnings

import numpy as np

from ..exceptions import StepDeclinedWarning
from .holdout import paired_gain

#: Paired standard errors of held-out top-1 by which the step must beat the map without
#: it.  One: a step with no real gain is kept on about one draw in six, and then costs
#: next to nothing; a step that loses is left out.
STEP_SE = 1.0


def decide_step(estimator, step, hits, base_hits, *, parameter, base="the orthogonal map"):
    """Keep the step or not, record the evidence in ``estimator.step_choice_``, and warn
    once when the step lost.

    Parameters
    ----------
    estimator : aligner
        Gets ``step_choice_``; its class names the warning.
    step : str
        What the step is ("whitening", "refinement", ...).
    hits, base_hits : array-like of bool
        Per held-out row, whether the map with and without the step retrieved it (the same
        rows, in the same order, over every fold scored).
    parameter : str
        The explicit setting that keeps the step anyway (named by the warning).
    base : str
        What the estimator fits without the step.

    Returns
    -------
    bool
        Whether the step is kept.
    """
    hits = np.asarray(hits, dtype=bool)
    base_hits = np.asarray(base_hits, dtype=bool)
    gain, se = paired_gain(hits, base_hits)
    kept = bool(gain > 0 and gain > STEP_SE * se)
    estimator.step_choice_ = {
        "step": step,
        "kept": kept,
        "with_step": float(hits.mean()) if hits.size else float("nan"),
        "without_step": float(base_hits.mean()) if base_hits.size else float("nan"),
        "gain": gain,
        "se": se,
        "n_rows": int(hits.size),
    }
    if not kept and gain < 0:
        warnings.warn(
            f"{type(estimator).__name__}: {step} lost to {base} on held-out training pairs "
            f"(paired top-1 {hits.mean():.3f} against {base_hits.mean():.3f}, "
            f"{gain:+.3f} +/- {se:.3f} paired SE over {hits.size} rows), so it was left "
            f"out; set {parameter} to keep it anyway.",
            StepDeclinedWarning,
            stacklevel=4,
        )
    return kept


def no_evidence(estimator, step, why):
    """Record that the step was decided without held-out evidence (``why``)."""
    estimator.step_choice_ = {"step": step, "kept": None, "why": why}

"""Former home of the ``"auto"`` settings' machinery, kept so that old imports still work.

The module was split by idea: :mod:`.holdout` (held-out folds and their paired top-1),
:mod:`.auto_choice` (resolving an estimator's ``"auto"`` parameters), :mod:`.moment_choice`
and :mod:`.refit_choice` (the two kinds of chooser), :mod:`.fitted_choices` (what a model's
fingerprint records of them) and :mod:`sklearn_compat._core.query_policy` (how
``AlignedNeighbors`` ranks).  New code imports from those modules.
"""

from ..exceptions import AutoSettingWarning
from .auto_choice import (
    checked_input,
    resolve,
    resolve_by_refit,
    sampled_chooser,
    warn_undecided,
)
from .fitted_choices import CHOICE_ATTRIBUTES, fitted_choices
from .holdout import (
    FOLD_ROWS,
    LARGE_N,
    MAX_SCORED_ROWS,
    MIN_ROWS,
    WIDE_SOLVE,
    all_rows,
    holdout_folds,
    paired_top1,
    params_label,
    pick,
    scoring_dtype,
    take_rows,
    top1_of_similarities,
    wide_solve_sample,
)
from .holdout import unit_rows_float32 as unit_rows
from .moment_choice import (
    SAMPLE_ROWS,
    choose_from_moments,
    choose_procrustes_setting,
    constant_side,
    label,
    negligible_offsets,
    negligible_row_offsets,
    uncentred,
    uncentred_stats,
)
from .query_policy import (
    QUERY_CSLS_K,
    QUERY_MARGIN,
    query_comparison_form,
    query_csls_k,
    query_evidence,
    query_path_scores,
)
from .refit_choice import TRAINED_MARGIN, choose_by_refit

__all__ = [
    "AutoSettingWarning",
    "CHOICE_ATTRIBUTES",
    "FOLD_ROWS",
    "LARGE_N",
    "MAX_SCORED_ROWS",
    "MIN_ROWS",
    "QUERY_CSLS_K",
    "QUERY_MARGIN",
    "SAMPLE_ROWS",
    "TRAINED_MARGIN",
    "WIDE_SOLVE",
    "all_rows",
    "checked_input",
    "choose_by_refit",
    "choose_from_moments",
    "choose_procrustes_setting",
    "constant_side",
    "fitted_choices",
    "holdout_folds",
    "label",
    "negligible_offsets",
    "negligible_row_offsets",
    "paired_top1",
    "params_label",
    "pick",
    "query_comparison_form",
    "query_csls_k",
    "query_evidence",
    "query_path_scores",
    "resolve",
    "resolve_by_refit",
    "sampled_chooser",
    "scoring_dtype",
    "take_rows",
    "top1_of_similarities",
    "uncentred",
    "uncentred_stats",
    "unit_rows",
    "warn_undecided",
    "wide_solve_sample",
]

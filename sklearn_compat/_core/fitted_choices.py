"""What the ``"auto"`` parameters resolved to, as recorded in a model's fingerprint."""

import numpy as np

#: Fitted attributes that record what an "auto" parameter resolved to.
CHOICE_ATTRIBUTES = (
    "center_",
    "fit_intercept_",
    "scale_mode_",
    "normalize_",
    "whiten_",
    "dewhiten_",
    "auto_scores_",
    "query_scores_",
    "step_choice_",
)


def fitted_choices(model):
    """``{attribute: value}`` of the settings chosen at fit, as plain builtins."""
    out = {}
    # The attributes fit set, not aliases (AffineAligner's center_ names fit_intercept_).
    fitted = vars(model)
    for name in CHOICE_ATTRIBUTES:
        value = fitted.get(name)
        if isinstance(value, (bool, np.bool_, str)):
            out[name] = value if isinstance(value, str) else bool(value)
        elif name in ("auto_scores_", "query_scores_") and isinstance(value, dict):
            out[name] = {str(k): round(float(v), 4) for k, v in value.items()}
        elif name == "step_choice_" and isinstance(value, dict):
            out[name] = {str(k): _plain(v) for k, v in value.items()}
    return out


def _plain(value):
    """A step choice's entry as a builtin (floats rounded to 4 places)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    return round(float(value), 4)

"""What the ``"auto"`` parameters resolved to, as recorded in a model's fingerprint."""

import numpy as np

#: Fitted attributes that record what an "auto" parameter resolved to.
CHOICE_ATTRIBUTES = (
    "center_",
    "fit_intercept_",
    "scale_mode_",
    "normalize_",
    "auto_scores_",
    "query_scores_",
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
    return out

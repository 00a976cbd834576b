"""Model fingerprints: what a saved model is, what it maps, and what it was trained on.

A fingerprint is a plain dict of builtins (str, int, float, bool, None, lists of str)
kept on the saved estimator as the attribute ``fingerprint_``, so a skops file holds it
without trusting any extra type and ``load_model`` returns it with the model:

- ``library``, ``version``: the package and its version that wrote the file;
- ``estimator``: the class's import path; ``params``: ``get_params(deep=False)`` (values
  that are not builtins are kept as their ``repr``);
- ``n_features_in``, ``n_features_out``; ``feature_names_in``, ``feature_names_out``
  (None when the model has no column names);
- ``n_training_rows`` and ``training_ids_sha256``: the SHA-256 of the sorted training ids
  (as text, one per line), so two models can be checked for the same training items
  without shipping the ids (None when unknown);
- ``chosen``: the settings that ``"auto"`` parameters resolved to at ``fit`` (``center_``,
  ``scale_mode_``, ``normalize_``, ... and ``auto_scores_``, the held-out top-1 of each
  candidate; empty when the model has none);
- ``created``: UTC time of the save (ISO 8601).
"""

import hashlib
import numbers
from datetime import datetime, timezone

import numpy as np

__all__ = ["model_fingerprint", "ids_digest", "format_fingerprint"]


def ids_digest(ids):
    """SHA-256 (hex) of the sorted ids as text, one per line (order-independent)."""
    text = "\n".join(sorted(str(i) for i in np.asarray(ids, dtype=object).ravel()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _builtin(value):
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return repr(value)


def _names(names):
    return None if names is None else [str(n) for n in names]


def model_fingerprint(model, *, training_ids=None, n_training_rows=None):
    """The fingerprint of a fitted model (see the module notes), as plain builtins.

    Parameters
    ----------
    model : fitted estimator
        The model to describe.
    training_ids : array-like, default=None
        Ids of the training rows; their count is ``n_training_rows`` unless given.
    n_training_rows : int, default=None
        Number of training rows, when ``training_ids`` are not given (None: unknown).

    Returns
    -------
    dict
        The fingerprint: only strings, numbers, lists, dicts and None, so it serialises
        to JSON as it is.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat import AffineAligner
    >>> from sklearn_compat.io import model_fingerprint
    >>> X = np.random.default_rng(0).normal(size=(20, 3))
    >>> fp = model_fingerprint(AffineAligner().fit(X, X[:, :2]), training_ids=range(20))
    >>> fp["estimator"], fp["n_features_in"], fp["n_features_out"], fp["n_training_rows"]
    ('sklearn_compat.affine.AffineAligner', 3, 2, 20)
    """
    from .. import __version__
    from .._core.fitted_choices import fitted_choices

    names_out = None
    try:
        names_out = model.get_feature_names_out()
    except Exception:  # noqa: BLE001 - a model without output names
        names_out = None
    n_out = getattr(model, "n_targets_", None)
    if n_out is None and names_out is not None:
        n_out = len(names_out)
    digest = None
    if training_ids is not None:
        training_ids = np.asarray(list(training_ids), dtype=object)
        digest = ids_digest(training_ids)
        if n_training_rows is None:
            n_training_rows = len(training_ids)
    params = model.get_params(deep=False)
    return {
        "library": "sklearn-embedding-compat",
        "version": __version__,
        "estimator": f"{type(model).__module__}.{type(model).__qualname__}",
        "params": {str(k): _builtin(v) for k, v in sorted(params.items())},
        "n_features_in": _builtin(getattr(model, "n_features_in_", None)),
        "n_features_out": _builtin(n_out),
        "feature_names_in": _names(getattr(model, "feature_names_in_", None)),
        "feature_names_out": _names(names_out),
        "n_training_rows": _builtin(n_training_rows),
        "training_ids_sha256": digest,
        "chosen": fitted_choices(model),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def format_fingerprint(fingerprint):
    """Text lines for ``sklearn-compat inspect`` (long name lists shortened)."""
    lines = []
    for key, value in fingerprint.items():
        if key in ("params", "chosen"):
            lines.append(f"{key}:")
            lines.extend(f"  {k} = {v!r}" for k, v in value.items())
            continue
        if isinstance(value, list) and len(value) > 6:
            value = ", ".join(value[:3]) + f", ... ({len(value)} names)"
        elif isinstance(value, list):
            value = ", ".join(value)
        lines.append(f"{key}: {value}")
    return lines

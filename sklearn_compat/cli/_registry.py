"""Small adapters between the command line and the public API: methods and metrics.

A method is an estimator class plus the command-line options that map onto its
parameters; a metric is a function of ``(queries, gallery, labels, device)``.  Each
adapter imports what it needs only when used, so a method or metric whose module is
missing from this build gives a clear "not available" error instead of breaking the
whole command line.
"""

import importlib
import inspect
from dataclasses import dataclass, field

from ..io._common import InputError

__all__ = ["METHODS", "METRICS", "LABEL_METRICS", "NotAvailable", "build_method", "load"]


class NotAvailable(InputError):
    """A method or metric this build of sklearn_compat does not have."""


def load(module, name, what):
    """``module.name``, or :class:`NotAvailable` saying which ``what`` is missing."""
    try:
        return getattr(importlib.import_module(f"sklearn_compat.{module}"), name)
    except (ImportError, AttributeError):
        raise NotAvailable(
            f"{what} is not available in this version of sklearn_compat "
            f"(sklearn_compat.{module}.{name} is missing)"
        ) from None


@dataclass(frozen=True)
class Method:
    """An aligner class and the options of ``fit``/``grid`` that set its parameters.

    ``options`` maps an argparse destination to ``(parameter, convert)``; ``convert``
    turns the option's value into the parameter's (e.g. ``--no-intercept`` into
    ``fit_intercept=False``).
    """

    module: str
    cls: str
    options: dict = field(default_factory=dict)

    def estimator_class(self, name):
        return load(self.module, self.cls, f"method {name!r}")


def _same(value):
    return value


def _negate(value):
    return not value


_DEVICE = {"device": ("device", _same)}

METHODS = {
    "procrustes": Method(
        "procrustes",
        "OrthogonalProcrustesAligner",
        {
            "center": ("center", _same),
            "scale": ("scale", _same),
            "no_reflection": ("allow_reflection", _negate),
            **_DEVICE,
        },
    ),
    "affine": Method(
        "affine",
        "AffineAligner",
        {"alpha": ("alpha", _same), "no_intercept": ("fit_intercept", _negate), **_DEVICE},
    ),
    "lambda-orth": Method(
        "lambda_orth",
        "LambdaOrthAligner",
        {
            "lam": ("lam", _same),
            "epochs": ("max_epochs", _same),
            "batch_size": ("batch_size", _same),
            "lr": ("lr", _same),
            "seed": ("random_state", _same),
            "verbose": ("verbose", _same),
            **_DEVICE,
        },
    ),
}

# Every option any method takes, with its flag, to tell the user which ones do not apply.
METHOD_FLAGS = {
    "center": "--center",
    "scale": "--scale",
    "no_reflection": "--no-reflection",
    "alpha": "--alpha",
    "no_intercept": "--no-intercept",
    "lam": "--lam",
    "epochs": "--epochs",
    "batch_size": "--batch-size",
    "lr": "--lr",
    "seed": "--seed",
    "verbose": "--verbose",
    "device": "--device",
}


def build_method(name, args, **overrides):
    """A new estimator for method ``name`` from the parsed options (unset ones skipped)."""
    method = METHODS[name]
    for dest, flag in METHOD_FLAGS.items():
        if getattr(args, dest, None) not in (None, False) and dest not in method.options:
            raise InputError(f"{flag} does not apply to --method {name}")
    cls = method.estimator_class(name)
    params = {}
    for dest, (param, convert) in method.options.items():
        value = getattr(args, dest, None)
        if value is not None and value is not False:
            params[param] = convert(value)
    params.update(overrides)
    return cls(**params)


# ---------------------------------------------------------------------------- metrics
def _metric(name):
    return load("metrics", name, f"metric function {name}")


def _topk(k):
    def score(Z, Y, labels, device):
        return _metric("paired_topk_accuracy")(Z, Y, k=k, device=device)

    return score


def _mean_cosine(Z, Y, labels, device):
    return _metric("mean_cosine_similarity")(Z, Y, device=device)


def _csls_top1(Z, Y, labels, device):
    fn = _metric("paired_topk_accuracy")
    if "csls_k" not in inspect.signature(fn).parameters:
        raise NotAvailable(
            "CSLS retrieval is not available in this version of sklearn_compat.metrics"
        )
    return fn(Z, Y, k=1, csls_k=10, device=device)


def _cmc_top1(Z, Y, labels, device):
    # Query i and gallery row i are the same item seen by two models: remove it from
    # its own gallery, as the lambda-orthogonality paper's protocol does.
    return _metric("cmc_topk_accuracy")(Z, Y, labels, k=1, exclude_self=True, device=device)


def _map(Z, Y, labels, device):
    return _metric("mean_average_precision")(Z, Y, labels, exclude_self=True, device=device)


# name -> function(queries, gallery, labels, device), in report order.
METRICS = {
    "top1": _topk(1),
    "top5": _topk(5),
    "mean_cosine": _mean_cosine,
    "csls_top1": _csls_top1,
}
LABEL_METRICS = {
    "cmc_top1": _cmc_top1,
    "map": _map,
}

"""Small adapters between the command line and the public API: methods and metrics.

A method is an estimator class plus the command-line options that map onto its
parameters; a metric is a function of ``(queries, gallery, labels, device)``.  Each
adapter imports what it needs only when used, so a method or metric whose module is
missing from this build gives a clear "not available" error instead of breaking the
whole command line.
"""

import argparse
import importlib
import inspect
import math
import warnings
from dataclasses import dataclass, field

from ..exceptions import NotAvailable
from ..io._common import InputError

__all__ = [
    "METHODS",
    "METRICS",
    "LABEL_METRICS",
    "OPTIONS",
    "NotAvailable",
    "UNPAIRED_METHODS",
    "add_method_options",
    "build_method",
    "load",
]


def load(module, name, what):
    """``module.name``, or :class:`NotAvailable` saying which ``what`` is missing."""
    try:
        return getattr(importlib.import_module(f"sklearn_compat.{module}"), name)
    except (ImportError, AttributeError):
        raise NotAvailable(
            f"{what} is not available in this version of sklearn_compat "
            f"(sklearn_compat.{module}.{name} is missing)"
        ) from None


def _same(value):
    return value


def _negate(value):
    return not value


def lam_value(text):
    """A lambda value: a non-negative float or ``inf`` (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(value) or value < 0:
        raise argparse.ArgumentTypeError(f"lambda must be >= 0 or inf, got {text!r}")
    return value


def positive_int(text):
    """An integer >= 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def device_name(text):
    """A well-formed device name; whether it exists is for the command to find out."""
    from .._core.backend import resolve_device

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an absent GPU is not a usage error
            resolve_device(text, for_inference=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


@dataclass(frozen=True)
class Option:
    """One command-line option of the methods, declared once.

    ``argparse`` holds the keyword arguments of ``add_argument`` (``type``, ``action``,
    ``help``...); ``in_grid`` says whether ``grid`` offers it too (``grid`` has its own
    ``--lam`` list, and its reference rows take no method options).
    """

    flag: str
    argparse: dict
    in_grid: bool = True

    @property
    def dest(self):
        return self.flag[2:].replace("-", "_")


def _switch(help):
    # A store_true flag that stays None when absent, so "not given" keeps the default.
    return {"action": "store_true", "default": None, "help": help}


OPTIONS = {
    option.dest: option
    for option in (
        Option(
            "--device",
            {
                "type": device_name,
                "help": "'auto' (default: CUDA when available), 'cpu', 'cuda:N'",
            },
        ),
        Option(
            "--center",
            _switch("centre both sides (default: chosen from the data at fit)"),
            in_grid=False,
        ),
        Option(
            "--no-center",
            _switch("no centring (the uncentred map of release 0.1.0)"),
            in_grid=False,
        ),
        Option(
            "--scale",
            _switch("least-squares isotropic scale (default: chosen from the data at fit)"),
            in_grid=False,
        ),
        Option("--no-scale", _switch("no isotropic scale (s = 1)"), in_grid=False),
        Option("--no-reflection", _switch("rotations only (det = +1)"), in_grid=False),
        Option("--alpha", {"type": float, "help": "ridge penalty"}, in_grid=False),
        Option("--no-intercept", _switch("no bias term"), in_grid=False),
        Option(
            "--lam",
            {"type": lam_value, "help": "orthogonality threshold (0 .. inf)"},
            in_grid=False,
        ),
        Option("--epochs", {"type": positive_int, "help": "max_epochs"}),
        Option("--batch-size", {"type": positive_int, "help": "batch size"}),
        Option("--lr", {"type": float, "help": "learning rate"}),
        Option("--seed", {"type": int, "help": "random_state (repeatable fits)"}),
        Option("--verbose", {"type": int, "help": "training log level"}),
    )
}


@dataclass(frozen=True)
class Method:
    """An aligner class and the parameters its command-line options set.

    ``params`` maps an option's destination (a key of :data:`OPTIONS`) to the estimator
    parameter it sets, or to ``(parameter, convert)`` when the value needs converting (e.g.
    ``--no-intercept`` into ``fit_intercept=False``).
    """

    module: str
    cls: str
    params: dict = field(default_factory=dict)

    def estimator_class(self, name):
        return load(self.module, self.cls, f"method {name!r}")

    def options(self):
        """``{dest: (parameter, convert)}`` with plain names given ``_same``."""
        return {
            dest: (spec, _same) if isinstance(spec, str) else spec
            for dest, spec in self.params.items()
        }


_TRAINING = {
    "epochs": "max_epochs",
    "batch_size": "batch_size",
    "lr": "lr",
    "seed": "random_state",
    "verbose": "verbose",
}

METHODS = {
    "procrustes": Method(
        "procrustes",
        "OrthogonalProcrustesAligner",
        {
            "center": "center",
            "no_center": ("center", _negate),
            "scale": "scale",
            "no_scale": ("scale", _negate),
            "no_reflection": ("allow_reflection", _negate),
            "device": "device",
        },
    ),
    "affine": Method(
        "affine",
        "AffineAligner",
        {"alpha": "alpha", "no_intercept": ("fit_intercept", _negate), "device": "device"},
    ),
    "lambda-orth": Method(
        "lambda_orth",
        "LambdaOrthAligner",
        {"lam": "lam", **_TRAINING, "device": "device"},
    ),
    "whitened": Method("whitened", "WhitenedProcrustesAligner", {"device": "device"}),
    "refined": Method("refined", "RefinedProcrustesAligner", {"device": "device"}),
    "rcsls": Method(
        "rcsls",
        "RCSLSAligner",
        {"center": "center", "no_center": ("center", _negate), "device": "device"},
    ),
    "residual": Method(
        "residual",
        "ResidualAdapterAligner",
        {"lam": "lam", **_TRAINING, "device": "device"},
    ),
    "unpaired": Method(
        "unpaired", "UnpairedProcrustesAligner", {"seed": "random_state", "device": "device"}
    ),
}

#: Methods fitted on two tables whose rows are not paired: ``fit`` joins nothing.
UNPAIRED_METHODS = ("unpaired",)


def add_method_options(parser, *, grid=False):
    """Add every method option to ``parser`` (those ``grid`` offers when ``grid``)."""
    group = parser.add_argument_group("method options (each applies to some methods only)")
    for option in OPTIONS.values():
        if grid and not option.in_grid:
            continue
        users = [name for name, method in METHODS.items() if option.dest in method.params]
        kwargs = dict(option.argparse)
        if len(users) < len(METHODS):
            kwargs["help"] = f"{', '.join(users)}: {kwargs['help']}"
        group.add_argument(option.flag, **kwargs)


def build_method(name, args, **overrides):
    """A new estimator for method ``name`` from the parsed options (unset ones skipped)."""
    method = METHODS[name]
    options = method.options()
    for dest, option in OPTIONS.items():
        if getattr(args, dest, None) not in (None, False) and dest not in options:
            raise InputError(f"{option.flag} does not apply to --method {name}")
    cls = method.estimator_class(name)
    params = {}
    for dest, (param, convert) in options.items():
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

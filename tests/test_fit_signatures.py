"""One convention for the arguments of ``fit``, ``partial_fit`` and ``score`` (issue 33).

See the comment above ``BaseAligner`` in ``sklearn_compat/_core/base.py``: the data
positional, then at most one per-row argument (``sample_weight`` or ``labels``, positional
or keyword as scikit-learn's ``sample_weight``), everything else keyword-only.
"""

import inspect

import pytest

from _helpers import public_estimators

ESTIMATORS = public_estimators()
PER_ROW = {"sample_weight", "labels"}
METHODS = [
    (cls, method)
    for cls in ESTIMATORS
    for method in ("fit", "partial_fit", "score")
    if hasattr(cls, method)
]


@pytest.mark.parametrize(
    "cls, method", METHODS, ids=[f"{cls.__name__}.{method}" for cls, method in METHODS]
)
def test_fit_arguments_follow_the_one_convention(cls, method):
    params = list(inspect.signature(getattr(cls, method)).parameters.values())[1:]
    kinds = inspect.Parameter
    assert all(p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY) for p in params)
    positional = [p.name for p in params if p.kind is kinds.POSITIONAL_OR_KEYWORD]
    keyword_only = [p for p in params if p.kind is kinds.KEYWORD_ONLY]
    # The data, then at most one per-row argument.
    assert positional[0] == "X"
    assert positional[1] in ("Y", "y")
    assert len(positional) <= 3
    if len(positional) == 3:
        assert positional[2] in PER_ROW
    # sample_weight and labels are never keyword-only, everything else is.
    assert not PER_ROW & {p.name for p in keyword_only}
    for p in params[1:]:
        assert p.default is None, f"{cls.__name__}.{method}: {p.name} has no None default"
    # ``y`` is a keyword-only alias where ``Y`` is the target.
    if positional[1] == "Y":
        assert "y" in {p.name for p in keyword_only}


def test_the_convention_covers_every_extra_argument_in_use():
    names = {
        p for cls, method in METHODS for p in inspect.signature(getattr(cls, method)).parameters
    }
    # If a new extra argument appears, decide its place in the convention and test it.
    assert names - {"self", "X", "Y", "y"} == {
        "sample_weight",
        "labels",
        "groups",
        "queries",
        "parallel",
        "X_unpaired",
        "Y_unpaired",
        "pairs",
    }

"""Public names of a package imported on first use (PEP 562).

``import sklearn_compat`` (and so the ``sklearn-compat`` command line, whose module lives
inside the package) would otherwise pay for torch, scikit-learn and pandas before doing
anything; ``sklearn-compat --help`` then took several seconds.  Names resolve to the same
objects as eager imports did, on first attribute access or ``from ... import``.
"""

import importlib
import sys

__all__ = ["lazy_exports"]


def lazy_exports(package, exports):
    """``(__getattr__, __dir__)`` for ``package`` serving ``exports`` lazily.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    exports : dict of str to str
        Public name -> submodule (relative to ``package``, e.g. ``".affine"``) that
        defines it; a submodule exported under its own name maps to itself
        (``{"metrics": ".metrics"}``).
    """

    def __getattr__(name):
        try:
            where = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module = importlib.import_module(where, package)
        value = module if module.__name__ == f"{package}.{name}" else getattr(module, name)
        globals_of(package)[name] = value  # later look-ups skip this function
        return value

    def __dir__():
        return sorted(set(globals_of(package)) | set(exports))

    return __getattr__, __dir__


def globals_of(package):
    return vars(sys.modules[package])

"""Warnings and errors raised by sklearn_compat.

Every warning and error class the package defines lives here, so that callers can filter
or catch them from one public module (``warnings.filterwarnings("ignore",
category=AutoSettingWarning)``, ``except InputError``).  The module imports nothing heavy:
the command line can catch these without loading torch.
"""

__all__ = [
    "AnisotropyWarning",
    "AutoSettingWarning",
    "InputError",
    "NotAvailable",
    "OutputLocked",
    "StepDeclinedWarning",
    "UnderdeterminedFitWarning",
    "UnreliableAlignmentWarning",
]


class AutoSettingWarning(UserWarning):
    """``"auto"`` could not decide from the data and used the documented fallback.

    Examples
    --------
    >>> import warnings
    >>> from sklearn_compat.exceptions import AutoSettingWarning
    >>> warnings.simplefilter("ignore", AutoSettingWarning)
    """


class StepDeclinedWarning(UserWarning):
    """A method's extra step lost to the orthogonal map it builds on, and was left out.

    Whitening (:class:`~sklearn_compat.WhitenedProcrustesAligner`), refinement rounds
    (:class:`~sklearn_compat.RefinedProcrustesAligner`), the non-orthogonal part
    (:class:`~sklearn_compat.LambdaOrthAligner`, :class:`~sklearn_compat.RCSLSAligner`,
    :class:`~sklearn_compat.LambdaOrthAlignerCV`) and the residual MLP
    (:class:`~sklearn_compat.ResidualAdapterAligner`) are each a step on top of orthogonal
    Procrustes.  With their ``"auto"`` default, ``fit`` scores the map with and without the
    step on held-out training pairs; when the step retrieves worse, the estimator fits
    without it and warns once with this class, naming the two held-out scores, their
    paired standard error and the parameter that keeps the step anyway.

    Examples
    --------
    >>> import warnings
    >>> from sklearn_compat.exceptions import StepDeclinedWarning
    >>> warnings.simplefilter("ignore", StepDeclinedWarning)
    """


class UnderdeterminedFitWarning(UserWarning):
    """A map was fitted on fewer pairs than the widths of the two spaces need.

    The fit still returns the documented minimum-norm map; the message says how many pairs
    would determine it.
    """


class AnisotropyWarning(UserWarning):
    """An estimator setting is known to collapse on the anisotropic data it was fitted on."""


class InputError(ValueError):
    """Bad input or output given to the I/O layer or the command line.

    The message is one line that names the file and, where it applies, the row (or CSV
    line) and the column, so a batch script's log says what to fix without a traceback.
    It subclasses ``ValueError`` so library callers can catch it as one.

    Parameters
    ----------
    message : str
        What is wrong, in one line.
    path : str or path-like, default=None
        The file or table concerned; when given, the message starts with it.

    Examples
    --------
    >>> from sklearn_compat.exceptions import InputError
    >>> str(InputError("line 3, column 'e0': not a number: 'x'", path="items.csv"))
    "items.csv: line 3, column 'e0': not a number: 'x'"
    >>> isinstance(InputError("bad"), ValueError)
    True
    """

    def __init__(self, message, *, path=None):
        if path is not None:
            message = f"{path}: {message}"
        super().__init__(message)
        self.path = path


class NotAvailable(InputError):
    """A method or metric this build of sklearn_compat does not have."""


class OutputLocked(InputError):
    """Another running process is writing the same store output (its lock is live).

    Raised before anything is written or deleted; the message names the owner (process id,
    host, start time) and the lock file.  An :class:`InputError`, so the command line
    reports it as one line.
    """


class UnreliableAlignmentWarning(UserWarning):
    """An alignment fitted without (enough) pairs is probably wrong.

    :class:`~sklearn_compat.UnpairedProcrustesAligner` estimates the quality of its map
    without any true pairs (``confidence_``); this warning says the estimate is below the
    estimator's ``min_confidence``, names the figure, and what to do (seed pairs, more
    rows, a supervised aligner).

    Examples
    --------
    >>> import warnings
    >>> from sklearn_compat.exceptions import UnreliableAlignmentWarning
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", UnreliableAlignmentWarning)
    """

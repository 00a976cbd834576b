"""Drift-Adapter's residual MLP adapter, lambda-orthogonality penalised on its linear part."""

from numbers import Integral

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._core import auto_choice, refit_choice
from ._core.backend import apply_affine
from ._lambda.adapter import AffineAdapter
from ._lambda.fitting import fitted_intercept
from ._lambda.residual import ResidualAdapter
from .lambda_orth import LambdaOrthAligner

__all__ = ["ResidualAdapterAligner"]

#: Hidden width that ``hidden="auto"`` trains.
AUTO_HIDDEN = 256


class ResidualAdapterAligner(LambdaOrthAligner):
    """An affine map plus a small residual MLP from X's space into Y's (Drift-Adapter).

    Vejendla, "Drift-Adapter: A Practical Approach to Near Zero-Downtime Embedding Model
    Upgrades in Vector Databases", EMNLP 2025, compares orthogonal Procrustes, a low-rank
    affine map and a residual MLP adapter for querying an old vector index with a new
    model, and finds the residual MLP recovers the most of a full re-index's recall.  Here
    the adapter is

        ``B(x) = x W + b + relu(x W_1 + b_1) W_2 + b_2``

    with ``W`` started at the Procrustes map and the MLP's output layer at zero, so
    training starts from the best orthogonal map and the MLP learns only the nonlinear
    remainder.  It is trained exactly like :class:`LambdaOrthAligner` (same losses, Adam
    loop, early stopping, progress bar and divergence error), and the
    lambda-orthogonality penalty of Ricci et al. (NeurIPS 2025) acts on the linear part
    ``W``, so ``lam`` keeps its meaning.  ``hidden=0`` is exactly
    :class:`LambdaOrthAligner`.

    Every parameter but ``hidden`` means what it means for :class:`LambdaOrthAligner`;
    the three below are restated for their defaults.  ``warm_start`` continues from the
    previous fit's linear part; the MLP starts again from zero.

    Parameters
    ----------
    hidden : int or "auto", default="auto"
        Width of the MLP's hidden layer; 0 removes the MLP.  ``"auto"`` trains a width of
        256 and keeps the trained adapter (the MLP and the non-orthogonal linear part)
        only where it retrieves better than :class:`OrthogonalProcrustesAligner` with its
        defaults, by the rule of :class:`LambdaOrthAligner`'s ``lam="auto"`` (held-out
        paired top-1, more than one paired standard error); otherwise the fit is that
        Procrustes map (``mlp_weights_`` empty), with one
        :class:`~sklearn_compat.exceptions.StepDeclinedWarning` when the adapter lost.  On
        a real pair (a static model into a transformer's larger space) the adapter lost
        0.11 of top-1 to it (:ref:`choosing_a_method`).  ``step_choice_`` holds the
        evidence; with ``hidden="auto"`` this rule replaces ``lam="auto"``'s.

        .. versionchanged:: 0.1
           The default became ``"auto"`` (was 256).
    lam : float in [0, inf] or "auto", default="auto"
        Threshold on the distance of ``W`` from orthogonality (see
        :class:`LambdaOrthAligner`).
    fit_intercept : "auto" or bool, default="auto"
        ``"auto"`` trains both settings (the residual MLP is no part of the Procrustes
        starts that :class:`LambdaOrthAligner`'s choice reads) for a sixth of
        ``max_epochs`` (at most 10 epochs) on the rows less a held-out slice and keeps
        the one with the better held-out paired top-1 (``center_``).  Choosing costs the
        two short runs on top of the fit; how the choice compares with the better
        explicit setting on real pairs: :ref:`benchmarks`.

    Attributes
    ----------
    W_ : ndarray of shape (n_features_in_, n_targets_)
        The linear part, in the user's units (float64).
    bias_ : ndarray of shape (n_targets_,)
        Its bias.
    mlp_weights_ : list of ndarray
        ``[W_1, b_1, W_2, b_2]`` of the MLP in the user's units (float64; empty when
        ``hidden=0``): plain arrays, so the model pickles, loads with skops trusting only
        this class, and a GPU-fitted model runs on a CPU.
    orthogonality_gap_, lam_, x_scale_, y_scale_, history_, n_epochs_, best_epoch_
        As for :class:`LambdaOrthAligner`.
    center_, auto_scores_
        As for :class:`LambdaOrthAligner`: the intercept setting in force, and the
        held-out scores of ``"auto"``.
    step_choice_ : dict or None
        With ``hidden="auto"``: the held-out evidence for the trained adapter (see
        :class:`LambdaOrthAligner`); None for an explicit ``hidden``.

    See Also
    --------
    LambdaOrthAligner : the same without the MLP.
    WhitenedProcrustesAligner : a closed-form linear map that often retrieves as well.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat import ResidualAdapterAligner
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 8))
    >>> Y = np.tanh(X @ rng.normal(size=(8, 6)))
    >>> aligner = ResidualAdapterAligner(hidden=32, max_epochs=20, random_state=0).fit(X, Y)
    >>> [w.shape for w in aligner.mlp_weights_]
    [(8, 32), (32,), (32, 6), (6,)]
    >>> aligner.transform(X).shape
    (400, 6)
    """

    _parameter_constraints: dict = {
        **LambdaOrthAligner._parameter_constraints,
        "hidden": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
    }

    def __init__(
        self,
        hidden="auto",
        lam="auto",
        *,
        sharpness=10.0,
        strict=False,
        alignment_weight=1.0,
        contrastive_weight=0.1,
        temperature=0.1,
        bidirectional=False,
        forward_weight=1.0,
        init="procrustes",
        fit_intercept="auto",
        rescale=True,
        max_epochs=200,
        batch_size=256,
        lr=1e-3,
        early_stopping="auto",
        validation_fraction=0.1,
        n_iter_no_change=10,
        tol=1e-5,
        warm_start=False,
        random_state=None,
        device="auto",
        verbose=0,
    ):
        super().__init__(
            lam=lam,
            sharpness=sharpness,
            strict=strict,
            alignment_weight=alignment_weight,
            contrastive_weight=contrastive_weight,
            temperature=temperature,
            bidirectional=bidirectional,
            forward_weight=forward_weight,
            init=init,
            fit_intercept=fit_intercept,
            rescale=rescale,
            max_epochs=max_epochs,
            batch_size=batch_size,
            lr=lr,
            early_stopping=early_stopping,
            validation_fraction=validation_fraction,
            n_iter_no_change=n_iter_no_change,
            tol=tol,
            warm_start=warm_start,
            random_state=random_state,
            device=device,
            verbose=verbose,
        )
        self.hidden = hidden

    def fit(self, X, Y=None, labels=None, *, y=None):
        # Declared here so that a wrong keyword (sample_weight) names this class, not
        # LambdaOrthAligner, in Python's TypeError.
        return super().fit(X, Y, labels, y=y)

    fit.__doc__ = LambdaOrthAligner.fit.__doc__

    def _resolve_intercept(self, X, Y, labels):
        """Decide ``fit_intercept="auto"`` by training both settings briefly.

        The residual MLP is not part of the Procrustes starts that LambdaOrthAligner's
        choice reads, so the candidates are trained (for a sixth of ``max_epochs``, 1 to
        10 epochs) and scored on the held-out slice.
        """
        auto_choice.resolve_by_refit(
            self,
            X,
            Y,
            {"fit_intercept": "center_"},
            [{"fit_intercept": True}, {"fit_intercept": False}],
            {"fit_intercept": True},
            chooser=lambda options, X_, Y_, _: refit_choice.choose_by_refit(
                self,
                X_,
                Y_,
                options,
                shared_params={
                    "max_epochs": max(1, min(10, int(self.max_epochs) // 6)),
                    "early_stopping": False,
                    "warm_start": False,
                    "verbose": 0,
                    # The candidates train the adapter as such (no step decision).
                    "hidden": self._width(),
                },
                row_params={"labels": labels},
                margin=refit_choice.TRAINED_MARGIN,
            ),
        )

    def _step_is_auto(self):
        return isinstance(self.hidden, str) and self.hidden == "auto"

    def _step_description(self, fitted):
        return {"step": "the residual adapter", "parameter": f"hidden={AUTO_HIDDEN}"}

    def _width(self):
        return AUTO_HIDDEN if self._step_is_auto() else int(self.hidden)

    def _backward_adapter(self, d_x, d_y, W0, b0):
        if self._width() == 0:
            return AffineAdapter(
                d_x, d_y, bias=fitted_intercept(self), strict=self.strict, weight=W0, bias_init=b0
            )
        return ResidualAdapter(
            d_x,
            d_y,
            self._width(),
            bias=fitted_intercept(self),
            strict=self.strict,
            weight=W0,
            bias_init=b0,
        )

    def transform(self, X):
        """Map X into Y's space: the affine part plus the residual MLP.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features_in_)
            Source embeddings.

        Returns
        -------
        ndarray of shape (n_samples, n_targets_)
            In X's float dtype.
        """
        check_is_fitted(self)
        X = self._validate_X(X)
        device = self._compute_device()
        out = apply_affine(X, self.W_, self.bias_, device)
        if self.mlp_weights_:
            W1, b1, W2, b2 = self.mlp_weights_
            hidden = np.maximum(apply_affine(X, W1, b1, device), 0)
            out += apply_affine(hidden, W2, b2, device)
        return out

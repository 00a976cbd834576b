"""lambda-orthogonality regularised alignment (Ricci et al., NeurIPS 2025).

``LambdaOrthAligner`` learns an affine adapter from the new model's space into the old
one's, kept within a tunable distance ``lam`` of orthogonality.  The regulariser itself,
:func:`lambda_orth_penalty`, and the adapter module, :class:`AffineAdapter`, are public so
they can be used on other layers; :class:`LambdaOrthMixin`, :class:`LambdaOrthRegressor`,
:class:`AlignmentLoss` and the :class:`OrthogonalityGap` callback bring the regulariser to your
own skorch nets.
"""

import math
from numbers import Integral, Real

import torch
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._core import auto_choice
from ._core.backend import apply_affine, resolve_device
from ._core.base import BaseAligner
from ._core.few_pairs import warn_if_few_pairs
from ._core.validation import pick_target
from ._lambda.adapter import AffineAdapter
from ._lambda.fitting import (
    StartMap,
    encode_fit_labels,
    prepare_fit_data,
    store_fit,
    train_map,
)
from ._lambda.intercept_choice import choose_intercept
from ._lambda.losses import contrastive_loss, lambda_orth_penalty, orthogonality_gap
from ._lambda.skorch_parts import (
    AlignmentLoss,
    LambdaOrthMixin,
    LambdaOrthRegressor,
    OrthogonalityGap,
)
from ._lambda.step import decide_trained_step
from .procrustes import OrthogonalProcrustesAligner

__all__ = [
    "LambdaOrthAligner",
    "AffineAdapter",
    "AlignmentLoss",
    "LambdaOrthMixin",
    "LambdaOrthRegressor",
    "OrthogonalityGap",
    "lambda_orth_penalty",
    "orthogonality_gap",
    "contrastive_loss",
]


class LambdaOrthAligner(BaseAligner):
    """Affine map from X's space into Y's, kept within ``lam`` of orthogonality.

    Trains an affine adapter ``B(x) = x W + b`` (``W`` of shape (d_x, d_y)) with Adam on
    minibatches to minimise

        ``w_B ||B(x) - y||^2 + w_C L_C + lambda_orth_penalty(W, lam)``

    where ``lambda_orth_penalty = sigmoid(sharpness * (N - lam)) * N`` and
    ``N = ||W W^T - I||_F`` on the smaller side of ``W``.  ``lam`` is a threshold on the
    distance from orthogonality: ``lam = 0`` gives a (softly) orthogonal map that keeps
    the new model's own geometry, like :class:`OrthogonalProcrustesAligner`, and
    ``lam = inf`` an unconstrained affine map that fits the old space best but distorts the
    new one most.  In between, the fitted ``orthogonality_gap_`` rises to a little below
    ``lam`` (by up to about 0.5 with the default ``sharpness``) when the data pull ``W``
    away from orthogonality, or stays at the affine fit's own gap when that is smaller.

    The method is Ricci et al.'s [1]_; read more in docs/methods.md, section
    "lambda-orthogonality".

    Parameters
    ----------
    lam : float in [0, inf] or "auto", default="auto"
        Threshold on ``N``.  ``N / sqrt(d)`` with ``d = min(d_x, d_y)`` is the RMS
        deviation of the squared singular values of ``W`` from 1, so a given ``lam`` allows
        less distortion in a larger space.  ``"auto"`` uses ``0.5 * sqrt(d)``, the relative
        distortion of the paper's ``lam = 12`` at ``d = 512``, in any dimension, and keeps
        the trained map only where it retrieves better than
        :class:`OrthogonalProcrustesAligner` with its defaults: both are scored by paired
        top-1 on the same held-out rows (the early-stopping rows when the fit holds some
        out; otherwise a fifth of the rows, at most 1,000, held out from a second training
        on the rest, which doubles the cost of such small fits), and the trained map must
        win by more than one paired standard error.  Otherwise the fit is that Procrustes
        map of all rows (``lam_ = 0``, ``center_`` its centring, ``history_`` the declined
        training's), with one :class:`~sklearn_compat.exceptions.StepDeclinedWarning` when
        training lost; on a real pair (a static 256-d model into a 384-d transformer) the
        trained map lost 0.025 of top-1 to it (:ref:`choosing_a_method`).
        ``step_choice_`` holds the evidence.  Explicit values are trained as given, and
        so is ``strict=True``.  ``np.inf`` removes the regulariser.

        .. versionchanged:: 0.1
           ``"auto"`` falls back to Procrustes where training does not win on held-out
           rows.
    sharpness : float, default=10.0
        Slope ``alpha`` of the sigmoid switch; not given in the paper.  The penalty never
        quite vanishes below ``lam``: its slope there is about
        ``exp(-alpha (lam - N)) alpha N``, and in the unit-RMS coordinates the squared
        error changes little per unit of ``N`` (about 1e-3 between the orthogonal and
        affine fits of real features), so with ``alpha = 1`` the leftover pull holds ``N``
        far below ``lam``.  ``alpha = 10`` makes the switch close to a hinge: ``N`` rises
        to a little below ``lam``, or to the affine fit's own gap when that is smaller
        (:ref:`lam_tradeoff`).
    strict : bool, default=False
        Keep ``W`` exactly orthogonal (up to the unit conversion ``y_scale_ / x_scale_``)
        through a parametrisation, the paper's strict variant; ``lam`` is then unused and
        ``orthogonality_gap_`` is 0 to rounding.
    alignment_weight : float, default=1.0
        Weight ``w_B`` of the squared error ``||B(x) - y||^2``.
    contrastive_weight : float, default=0.1
        Weight ``w_C`` of the contrastive term: symmetric InfoNCE between ``B(x)`` and
        ``y`` over each minibatch with the pair as the positive, or, when ``labels`` are
        passed to ``fit``, the multi-positive supervised form (every item of the same
        class is a positive).  0 turns it off.
    temperature : float, default=0.1
        Temperature of the contrastive softmax.
    bidirectional : bool, default=False
        Also train a forward adapter ``F(y) = y V + c`` (d_y, d_y) jointly, with the
        paper's ``L_F = ||F(y) - B(x)||^2`` and ``L_C = C(F(y), B(x)) + C(F(y), y)``;
        ``transform_target`` then maps old embeddings into the shared space, for partial
        backfilling.
    forward_weight : float, default=1.0
        Weight ``w_F`` of ``L_F`` (used only when ``bidirectional``).
    init : {"procrustes", "identity", "orthogonal"}, default="procrustes"
        Start of ``W``.  "procrustes" is the orthogonal Procrustes solution (centred when
        the intercept is fitted) of the training rows: the best orthogonal map, so training
        starts where ``lam = 0`` ends and only moves away from orthogonality as far as the
        data ask and ``lam`` allows; it also makes few epochs enough.  "identity" is only
        meaningful when both spaces share a basis (e.g. a fine-tuned model), and
        "orthogonal" (random) starts far from any good map.
    fit_intercept : "auto" or bool, default="auto"
        Learn the bias ``b`` (and start from the centred Procrustes map), or not.
        Neither is best on every pair.  ``"auto"`` decides at ``fit`` from the two
        starts of training: the orthogonal Procrustes maps of the rows with and without
        centring, fitted on the rows less a held-out slice (a fifth of them, at most
        1,000; ``random_state`` draws it) and scored by paired top-1 cosine retrieval of
        the slice.  The bias is kept unless leaving it out wins by more than 0.01.  The
        choice costs two small SVDs, not a fit, and depends only on the rows, never on
        ``lam``, so a search over ``lam`` makes the same choice at every grid point.
        ``center_`` holds the choice, ``auto_scores_`` the scores; a warm start keeps the
        previous fit's.  Below 100 rows it fits the bias and warns with
        :class:`~sklearn_compat.exceptions.AutoSettingWarning`.

        .. versionchanged:: 0.1.0
           ``"auto"`` scores the two Procrustes starts instead of training both
           settings for a sixth of ``max_epochs`` before the fit.
    rescale : bool, default=True
        Divide X and Y by their RMS row norms (``x_scale_``, ``y_scale_``) before training
        and fold the scales back into ``W_`` and ``bias_``.  The losses, ``lr``, ``lam``
        and ``temperature`` then mean the same for embeddings of any scale, and
        orthogonality is measured in these unit-RMS coordinates, which for the
        L2-normalised embeddings of the paper are the user's own.
    max_epochs : int, default=200
        Maximum passes over the training rows.  Training starts at the Procrustes
        solution, so a few epochs already give a good map; moving away from it by ``lam``
        at ``lr = 1e-3`` takes on the order of a thousand Adam steps.
    batch_size : int, default=256
        Rows per minibatch (the last one of an epoch may be smaller).
    lr : float, default=1e-3
        Adam learning rate (the paper's value).
    early_stopping : bool or "auto", default="auto"
        Hold out ``validation_fraction`` of the rows, stop when their loss has not
        improved by ``tol`` for ``n_iter_no_change`` epochs and keep the best epoch's
        weights.  "auto" does so when there are at least 2,000 rows; otherwise (and with
        False) training stops when the training loss stalls in the same way.
    validation_fraction : float in (0, 1), default=0.1
        Share of the rows held out for early stopping.
    n_iter_no_change : int, default=10
        Epochs without improvement before stopping.
    tol : float, default=1e-5
        Smallest improvement of the monitored loss that counts.  The losses are in
        unit-RMS coordinates, where the squared error of a good map is typically 0.01-0.5,
        so the same ``tol`` suits embeddings of any scale.
    warm_start : bool, default=False
        Continue from the previous fit's adapters and scales (with a fresh optimizer);
        ``history_`` and ``n_epochs_`` then accumulate.
    random_state : int, RandomState instance or None, default=None
        Seeds the validation split, the "orthogonal" init and the minibatch order; an int
        makes fits repeatable on the CPU (CUDA kernels may still differ in the last bits).
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where to train and transform.  On CUDA, a fit of more than a few dozen minibatch
        steps replays each full-size step from a CUDA graph recorded after three eager
        steps (the same kernels, without the host's dispatch between them); the last,
        shorter batch of an epoch and ``strict=True`` training run eagerly.
    verbose : int, default=0
        Show a progress bar over epochs when > 0.

    Attributes
    ----------
    W_ : ndarray of shape (n_features_in_, n_targets_)
        The linear part of the map, in the user's units (float64).
    bias_ : ndarray of shape (n_targets_,)
        The bias (zeros unless the intercept was fitted).
    center_ : bool
        Whether the intercept was fitted: the parameter, or what ``"auto"`` chose.
    auto_scores_ : dict or None
        Held-out paired top-1 of each setting that ``"auto"`` scored (None otherwise).
    orthogonality_gap_ : float
        ``N = ||Q Q^T - I||_F`` on the smaller side, for ``Q = W_ * x_scale_ / y_scale_``,
        the matrix the regulariser acted on.
    lam_ : float
        The threshold used (``lam``, or its "auto" value; 0.0 where ``"auto"`` kept the
        Procrustes start).
    step_choice_ : dict or None
        With ``lam="auto"``: the held-out evidence for the trained map against
        ``OrthogonalProcrustesAligner()`` (``kept``, ``with_step``, ``without_step``,
        ``gain``, its paired ``se``, ``n_rows``), or ``kept`` None and ``why`` where it
        was not scored (fewer than 100 rows, ``bidirectional``); None for an explicit
        ``lam``.
    x_scale_, y_scale_ : float
        RMS row norms of X and Y (1.0 unless ``rescale``).
    history_ : dict of lists
        Per-epoch means on the training rows of ``loss`` and its parts (``alignment``,
        ``contrastive``, ``forward``, ``penalty`` when used), ``orthogonality_gap`` and,
        with early stopping on held-out rows, ``valid_loss``.  ``pandas.DataFrame(history_)``
        tabulates it.
    n_epochs_ : int
        Epochs run.
    best_epoch_ : int or None
        The epoch whose weights were kept (held-out early stopping), else None.
    forward_W_ : ndarray of shape (n_targets_, n_targets_)
        Linear part of the forward adapter (``bidirectional`` only).
    forward_bias_ : ndarray of shape (n_targets_,)
        Its bias (``bidirectional`` only).
    n_features_in_ : int
        Width of X.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, when X was a DataFrame with string columns.

    See Also
    --------
    OrthogonalProcrustesAligner : the closed-form ``lam = 0`` end.
    AffineAligner : the closed-form ``lam = inf`` end (least squares).
    lambda_orth_penalty : the regulariser, for your own layers.

    Notes
    -----
    Units.  With ``rescale`` the adapter is trained on ``X / x_scale_`` and
    ``Y / y_scale_``; the fitted map in user units is ``W_ = (y_scale_ / x_scale_) Q`` and
    ``bias_ = y_scale_ c``.  Orthogonality therefore means "a rotation/reflection up to the
    global unit conversion between the two spaces": a conformal map, which is what keeps
    cosine neighbourhoods, and ``orthogonality_gap_`` is computed on exactly the ``Q`` the
    regulariser saw.

    Training runs in float32 on ``device`` whatever the input dtype (the adapters gain
    nothing from float64 under Adam); the fitted attributes are float64 and ``transform``
    returns X's dtype (float64 input beyond float32's range is first brought into it by an
    exact power of two, folded into ``x_scale_``/``y_scale_``).  A diverging fit (a
    non-finite epoch loss, or one more than 10 times above the larger of its starting loss
    and the zero map's squared error, measured on the monitored rows) raises
    ``FloatingPointError`` naming ``lr`` and ``lam`` instead of returning a wrecked map,
    and leaves the estimator as it was.  The strict variant's final ``W`` is projected
    onto the orthogonal matrices in float64, so its gap is at rounding level.  Its
    parametrisation moves continuously, so it keeps the determinant sign of its start: one
    more reason to start at the Procrustes solution, which picks the right one (a square
    "identity" start reaches rotations only).

    Small CPU problems (``batch_size * d_x * d_y`` up to about a million) train with one
    torch thread, restored afterwards: at that size thread synchronisation costs more
    than it saves, and on a loaded machine it is many times slower.

    References
    ----------
    .. [1] Ricci, Biondi, Pernici, Patras, Del Bimbo, "lambda-Orthogonality Regularization
       for Compatible Representation Learning", NeurIPS 2025, arXiv:2509.16664.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import ortho_group
    >>> from sklearn_compat import LambdaOrthAligner
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 16))
    >>> Y = X @ ortho_group.rvs(16, random_state=0)
    >>> aligner = LambdaOrthAligner(lam=2.0, max_epochs=5, random_state=0).fit(X, Y)
    >>> aligner.score(X, Y)
    1.0
    >>> aligner.orthogonality_gap_ < 0.1
    True
    """

    _parameter_constraints: dict = {
        "lam": [Interval(Real, 0, math.inf, closed="both"), StrOptions({"auto"})],
        "sharpness": [Interval(Real, 0, None, closed="neither")],
        "strict": ["boolean"],
        "alignment_weight": [Interval(Real, 0, None, closed="left")],
        "contrastive_weight": [Interval(Real, 0, None, closed="left")],
        "temperature": [Interval(Real, 0, None, closed="neither")],
        "bidirectional": ["boolean"],
        "forward_weight": [Interval(Real, 0, None, closed="left")],
        "init": [StrOptions({"procrustes", "identity", "orthogonal"})],
        "fit_intercept": ["boolean", StrOptions({"auto"})],
        "rescale": ["boolean"],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "early_stopping": ["boolean", StrOptions({"auto"})],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "random_state": ["random_state"],
        "device": [str, torch.device],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
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
        self.lam = lam
        self.sharpness = sharpness
        self.strict = strict
        self.alignment_weight = alignment_weight
        self.contrastive_weight = contrastive_weight
        self.temperature = temperature
        self.bidirectional = bidirectional
        self.forward_weight = forward_weight
        self.init = init
        self.fit_intercept = fit_intercept
        self.rescale = rescale
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.warm_start = warm_start
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, Y=None, labels=None, *, y=None):
        """Train the adapter on paired rows.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
            Source embeddings (the new model's).
        Y : array-like or torch.Tensor of shape (n_samples, n_targets)
            Target embeddings of the same items in the same row order (the old model's).
        labels : array-like of shape (n_samples,), default=None
            Class labels of the items.  When given, the contrastive term becomes the
            supervised multi-positive form.  Route them through a Pipeline or
            GridSearchCV with ``set_fit_request(labels=True)`` and metadata routing on.
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.

        Returns
        -------
        self : object
            Fitted aligner.
        """
        Y = pick_target(Y, y)
        warm = bool(self.warm_start) and hasattr(self, "W_")
        if warm and self.bidirectional and not hasattr(self, "forward_W_"):
            raise ValueError(
                "warm_start with bidirectional=True needs a previous bidirectional fit; "
                "set warm_start=False to start over."
            )
        if not warm:
            # A warm start continues the previous fit's map, with its intercept setting.
            self._resolve_intercept(X, Y, labels)
        rng = check_random_state(self.random_state)
        X, Y = self._validate_pair(X, Y, reset=not warm)
        codes = encode_fit_labels(labels, X.shape[0])
        scales = (self.x_scale_, self.y_scale_) if warm else None
        data = prepare_fit_data(self, X, Y, codes, rng, scales=scales)
        start = self._fitted_map() if warm else None
        fitted = train_map(self, data, rng, start=start)
        if not warm:
            # A warm start continues the previous fit's map and keeps its step choice.
            self.step_choice_ = None
            if self._step_is_auto():
                fitted = decide_trained_step(
                    self,
                    X,
                    Y,
                    codes,
                    data,
                    fitted,
                    rng,
                    baseline=lambda: OrthogonalProcrustesAligner(
                        device=self.device, random_state=self.random_state
                    ),
                    **self._step_description(fitted),
                )
        store_fit(self, fitted, accumulate=warm)
        if not warm:
            warn_if_few_pairs(self, X.shape[0], stacklevel=4)
        return self

    def _step_is_auto(self):
        """Whether the trained step is kept or not from held-out pairs (``lam="auto"``;
        the strict variant is orthogonal already)."""
        auto = (isinstance(self.lam, str) and self.lam == "auto") or getattr(
            self, "_judge_step", False
        )
        return auto and not self.strict

    def _step_description(self, fitted):
        keep = (
            "LambdaOrthAlignerCV(fallback=False)"
            if getattr(self, "_judge_step", False)
            else f"lam={fitted.lam:.3g}"
        )
        return {"step": "the non-orthogonal part", "parameter": keep}

    def _resolve_intercept(self, X, Y, labels):
        """Decide ``fit_intercept="auto"`` (sets ``center_`` and ``auto_scores_``)."""
        auto_choice.resolve_by_refit(
            self,
            X,
            Y,
            {"fit_intercept": "center_"},
            [{"fit_intercept": True}, {"fit_intercept": False}],
            {"fit_intercept": True},
            chooser=self._choose_intercept,
        )

    def _choose_intercept(self, options, X, Y, sample_weight):
        """``fit_intercept="auto"``: the two Procrustes starts scored on a held-out slice."""
        chosen, scores = choose_intercept(
            X, Y, self.random_state, rescale=self.rescale, device=resolve_device(self.device)
        )
        if chosen is None:
            return None, scores
        return {"fit_intercept": chosen}, scores

    def _query_centred(self):
        """``AlignedNeighbors`` compares this map's queries with the raw gallery
        (``gallery="auto"``): the fitted bias already places them where the cosine with
        Y's raw rows retrieves, and centring both on the gallery's mean moves them off."""
        return False

    def _fitted_map(self):
        """This fit's adapters in user units, the start of a warm-started fit."""
        forward = (self.forward_W_, self.forward_bias_) if self.bidirectional else None
        return StartMap(self.W_, self.bias_, forward)

    # ------------------------------------------------------------------ transforms
    def _affine_map(self):
        return self.W_, self.bias_

    def transform_target(self, Y):
        """Map target (old-model) embeddings into the shared space with the forward adapter.

        Needs ``bidirectional=True``.  Used for partial backfilling: the gallery holds
        ``transform_target(old)`` items until they are re-embedded as ``transform(new)``.

        Parameters
        ----------
        Y : array-like of shape (n_samples, n_targets_)
            Embeddings in Y's space.

        Returns
        -------
        ndarray of shape (n_samples, n_targets_)
            In Y's float dtype.
        """
        check_is_fitted(self)
        if not hasattr(self, "forward_W_"):
            raise ValueError(
                "transform_target needs the forward adapter: fit with bidirectional=True."
            )
        Y = self._validate_target(Y, name="Y")
        return apply_affine(Y, self.forward_W_, self.forward_bias_, self._compute_device())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags

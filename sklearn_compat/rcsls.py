"""A linear map trained for retrieval: RCSLS (Joulin et al., EMNLP 2018)."""

import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._core import auto_choice, holdout, refit_choice, step_choice
from ._core.backend import resolve_device, to_torch
from ._core.base import BaseAligner
from ._core.few_pairs import warn_if_few_pairs
from ._core.polar import procrustes_from_cross
from ._core.ranking import paired_topk_share, unit_rows
from ._core.rcsls import clip_spectral_norm, rcsls_loss_and_gradient
from ._core.validation import pick_target, stack_unpaired
from .procrustes import OrthogonalProcrustesAligner

__all__ = ["RCSLSAligner"]

#: Steps that ``max_iter="auto"`` takes when they help (tuned on held-out real pairs).
AUTO_MAX_ITER = 16


def _centred_unit(U, mean):
    """Unit rows ``U`` centred on ``mean`` (when given) and scaled to unit length again."""
    return U if mean is None else unit_rows(U - mean)


class RCSLSAligner(BaseAligner):
    """Linear map trained to retrieve: the relaxed CSLS loss of RCSLS.

    Joulin, Bojanowski, Mikolov, Jégou and Grave, "Loss in Translation: Learning Bilingual
    Word Mapping with a Retrieval Criterion", EMNLP 2018, train the map on the criterion
    used to retrieve with it instead of a squared error: each mapped source row should be
    more similar to its own target than to the target rows crowding around it, and each
    target more similar to its own source than to the mapped source rows crowding around
    it (CSLS, Conneau et al. 2018, made a training loss).  Starting from orthogonal
    Procrustes, full-batch gradient steps lower that loss.  Where retrieval is the use, it
    suits pairs of models that differ by more than a rotation and where no closed form does
    better than Procrustes (:ref:`choosing_a_method`).

    Rows are compared as directions: ``fit`` and ``transform`` scale every row to unit
    length (and, with ``center``, centre it on the unit rows' mean and rescale), so
    ``transform`` returns rows in the space of Y's L2-normalised rows, the space of a
    cosine index (the map is linear in the unit rows, not in the raw ones).

    Read more in docs/methods.md, section "RCSLS".

    Parameters
    ----------
    csls_k : int, default=10
        Size of the neighbour sets of the loss (the paper's k).
    center : "auto" or bool, default="auto"
        Centre each side's unit rows on their mean (over paired and unpaired rows) and
        rescale them to unit length before training; ``transform`` then gives each mapped
        row the typical spread of Y's centred unit rows and adds their mean back.  Neither
        setting is best on every pair (:ref:`centring`).  ``"auto"`` decides at ``fit``:
        both settings are trained for a quarter of ``max_iter`` steps on the pairs less a
        held-out slice (a fifth of them, at most 1,000; ``random_state`` draws it, None
        takes evenly spaced rows), scored by paired top-1 cosine retrieval of the slice,
        and the better one is trained on all pairs; uncentred is kept unless centred wins
        by more than ``0.01`` top-1 (a closer call is within the noise of the short runs and
        the slice's draw).  ``center_`` holds the choice, ``auto_scores_`` the scores.  The
        short runs are needed because the Procrustes start does not tell which setting the
        trained map prefers; choosing costs the two short runs on top of the fit.  Below 100
        pairs it trains uncentred and warns with
        :class:`~sklearn_compat.exceptions.AutoSettingWarning`.
    lr : float, default=5.0
        Initial step size.  A step that raises the loss is undone and the step size halved
        (the paper's schedule), so a large value only costs a few rejected steps.
    max_iter : int or "auto", default="auto"
        Full-batch gradient steps at most.  Between two sentence models more steps (32) can
        do better; retrieving among a large vocabulary (word translation) they overfit the
        dictionary, hence the default.  Watch the held-out top-1 with
        ``validation_fraction`` to set it for a pair.  ``"auto"`` takes 16 steps and keeps
        them only where they retrieve better than :class:`OrthogonalProcrustesAligner`
        with its defaults: the pairs less a held-out slice (a fifth, at most 1,000;
        ``random_state`` draws it) are trained on, and the steps are kept when their paired
        top-1 on the slice beats that Procrustes map's by more than one paired standard
        error; otherwise the fit is that Procrustes map of all pairs (``procrustes_``,
        ``n_iter_ = 0``; ``transform`` is its transform), with one
        :class:`~sklearn_compat.exceptions.StepDeclinedWarning` when the steps lost (the
        unit-row Procrustes start of the steps can itself be 0.03 below it).  This costs
        one more training.  ``step_choice_`` holds the evidence; with
        ``validation_fraction`` set, or below 100 pairs, the 16 steps run undecided (the
        held-out pairs then pick the step to keep, the start included).

        .. versionchanged:: 0.1
           The default became ``"auto"`` (was 16).
    spectral_clip : bool, default=False
        Clip the singular values of the map at 1 after each step (the paper's convex
        relaxation of orthogonality: the map cannot stretch the space).  Off by default:
        ``lr``, ``max_iter`` and this switch were chosen together on held-out pairs of real
        word and sentence pairs, where the clip changed little and cost a little top-1 on
        the test rows.
    validation_fraction : float in [0, 1), default=0.0
        Share of the pairs held out to choose the step to keep (paired top-1 of the held-out
        pairs among themselves) and to stop early; 0 trains on every pair and keeps the
        last step.  Held out pairs are lost to the fit, and a few hundred of them rank too
        coarsely to tell steps apart on an easy pair, so it is off by default.
    n_iter_no_change : int, default=5
        With held-out pairs: stop after this many steps without a better held-out top-1.
    random_state : int, RandomState instance or None, default=None
        Draws the held-out pairs.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the training and transforms run.

    Attributes
    ----------
    W_ : ndarray of shape (n_features_in_, n_targets_)
        The map, applied to the prepared (unit, centred, unit) source rows.
    center_ : bool
        The centring in force: the parameter, or what ``"auto"`` chose.
    auto_scores_ : dict or None
        Held-out paired top-1 of each setting that ``"auto"`` scored (None otherwise).
    mean_x_ : ndarray of shape (n_features_in_,)
        Mean of X's unit rows (zeros unless centred).
    mean_y_ : ndarray of shape (n_targets_,)
        Mean of Y's unit rows, added back by ``transform`` (zeros unless centred).
        :class:`~sklearn_compat.neighbors.AlignedNeighbors` centres the gallery on it.
    spread_y_ : float
        Root mean square norm of Y's centred unit rows: centred, ``transform`` scales
        each mapped row to this norm before adding ``mean_y_`` (1.0 unless centred).
    loss_curve_ : list of float
        Training loss at each accepted step.
    validation_scores_ : list of float
        Held-out top-1 after each step (empty without held-out pairs).
    n_iter_ : int
        Steps taken.
    best_iter_ : int
        Step whose map was kept (0: the Procrustes start).
    procrustes_ : OrthogonalProcrustesAligner or None
        The fitted Procrustes map where ``max_iter="auto"`` declined the steps, else None.
    step_choice_ : dict or None
        With ``max_iter="auto"``: the held-out evidence for the steps (``kept``,
        ``with_step``, ``without_step``, ``gain``, its paired ``se``, ``n_rows``), or
        ``kept`` None and ``why`` where nothing was scored; None for an explicit
        ``max_iter``.
    n_features_in_ : int
        Width of X.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, when X was a DataFrame with string columns.

    See Also
    --------
    OrthogonalProcrustesAligner : the closed-form start of the training.
    RefinedProcrustesAligner : MUSE's refinement, also with unpaired rows.
    sklearn_compat.neighbors.AlignedNeighbors : CSLS retrieval with a fitted map.

    Notes
    -----
    On the query path, :class:`~sklearn_compat.neighbors.AlignedNeighbors` with its
    defaults ranks this map's queries by plain cosine (the loss already demotes crowding
    targets, and the gallery's CSLS on top costs retrieval; :ref:`query_path`) and compares them
    centred exactly when ``center_`` is True, so it ranks as ``transform`` does or better.

    The neighbour sets are drawn from pools: every source row (paired rows and
    ``X_unpaired``) and every target row (paired rows and ``Y_unpaired``); the paper draws
    them from the whole vocabulary of each language, so pass the old index's rows as
    ``Y_unpaired`` when it is at hand.  Each step costs two similarity passes (pairs
    against the target pool, pairs against the mapped source pool), in row blocks of at
    most 128 MiB.  The training runs in float32; ``W_`` is stored in float64 and
    ``transform`` keeps X's dtype.

    References
    ----------
    .. [1] Joulin, Bojanowski, Mikolov, Jégou, Grave, "Loss in Translation: Learning
       Bilingual Word Mapping with a Retrieval Criterion", EMNLP 2018.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import ortho_group
    >>> from sklearn_compat import RCSLSAligner
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 16))
    >>> Y = X @ ortho_group.rvs(16, random_state=0) + 0.3 * rng.normal(size=(400, 16))
    >>> aligner = RCSLSAligner(random_state=0).fit(X[:300], Y[:300])
    >>> aligner.transform(X[300:]).shape
    (100, 16)
    >>> aligner.score(X[300:], Y[300:]) > 0.95
    True
    """

    _parameter_constraints: dict = {
        "csls_k": [Interval(Integral, 1, None, closed="left")],
        "center": ["boolean", StrOptions({"auto"})],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "spectral_clip": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "device": [str, torch.device],
    }

    def __init__(
        self,
        *,
        csls_k=10,
        center="auto",
        lr=5.0,
        max_iter="auto",
        spectral_clip=False,
        validation_fraction=0.0,
        n_iter_no_change=5,
        random_state=None,
        device="auto",
    ):
        self.csls_k = csls_k
        self.center = center
        self.lr = lr
        self.max_iter = max_iter
        self.spectral_clip = spectral_clip
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.random_state = random_state
        self.device = device

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, Y=None, *, X_unpaired=None, Y_unpaired=None, y=None):
        """Train the map on paired rows (and neighbour pools with the unpaired ones).

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_pairs, n_features)
            Source embeddings of the pairs.
        Y : array-like or torch.Tensor of shape (n_pairs, n_targets)
            Target embeddings of the same items, same row order.
        X_unpaired : array-like of shape (n_source_only, n_features), default=None
            More source rows: they join the pool the neighbour sets are drawn from.
        Y_unpaired : array-like of shape (n_target_only, n_targets), default=None
            More target rows (e.g. the old index): they join the target pool.
        y : array-like, default=None
            Alias of ``Y`` under scikit-learn's usual name.

        Returns
        -------
        self : object
            Fitted aligner.
        """
        Y = pick_target(Y, y)
        auto_choice.resolve_by_refit(
            self,
            X,
            Y,
            {"center": "center_"},
            [{"center": False}, {"center": True}],
            {"center": False},
            chooser=lambda options, X_, Y_, _: refit_choice.choose_by_refit(
                self,
                X_,
                Y_,
                options,
                shared_params=self._candidate_params(),
                fit_params={"X_unpaired": X_unpaired, "Y_unpaired": Y_unpaired},
                margin=refit_choice.TRAINED_MARGIN,
            ),
        )
        X, Y = self._validate_pair(X, Y, reset=True)
        sources = stack_unpaired(X, X_unpaired, "X_unpaired")
        targets = stack_unpaired(Y, Y_unpaired, "Y_unpaired")
        device = resolve_device(self.device)
        n = X.shape[0]
        held_out = self._held_out(n)
        f32 = torch.float32
        S, T = unit_rows(to_torch(sources, device, f32)), unit_rows(to_torch(targets, device, f32))
        mean_x = mean_y = None
        spread = 1.0
        if self.center_:
            mean_x, mean_y = S.mean(dim=0), T.mean(dim=0)
            # The pairs are the first n rows of each pool.
            spread = float((T[:n] - mean_y).square().sum(dim=1).mean().sqrt())
        S, T = _centred_unit(S, mean_x), _centred_unit(T, mean_y)
        train = np.setdiff1d(np.arange(n), held_out)
        Xp, Yp = S[:n], T[:n]
        Xt, Yt = Xp[train], Yp[train]
        Xv, Yv = Xp[held_out], Yp[held_out]
        k = min(self.csls_k, S.shape[0], T.shape[0])
        max_iter = self._max_iter()
        self.step_choice_ = None
        self.procrustes_ = None
        if isinstance(self.max_iter, str):
            max_iter = self._auto_steps(X, Xp, Yp, Y, S, T, k, mean_y, spread, len(held_out))
        if max_iter is None:
            return self._fit_procrustes(X, Y)
        W = self._train(Xt, Yt, Xv, Yv, S, T, k, max_iter)
        self.W_ = W.double().cpu().numpy()
        zeros_x, zeros_y = np.zeros(X.shape[1]), np.zeros(Y.shape[1])
        self.mean_x_ = zeros_x if mean_x is None else mean_x.double().cpu().numpy()
        self.mean_y_ = zeros_y if mean_y is None else mean_y.double().cpu().numpy()
        self.spread_y_ = spread
        warn_if_few_pairs(self, n, stacklevel=4)
        return self

    def _candidate_params(self):
        """What the ``"auto"`` candidates train: a quarter of the steps, no held-out pairs
        of their own (the chooser holds out its slice)."""
        return {"max_iter": -(-self._max_iter() // 4), "validation_fraction": 0.0}

    def _max_iter(self):
        return AUTO_MAX_ITER if isinstance(self.max_iter, str) else int(self.max_iter)

    def _auto_steps(self, X, Xp, Yp, Y, S, T, k, mean_y, spread, n_validation):
        """``max_iter="auto"``: :data:`AUTO_MAX_ITER` steps if, trained on the pairs less a
        held-out slice, they beat ``OrthogonalProcrustesAligner()`` on it by more than one
        paired SE; else None (the fit is that Procrustes map).  ``X``, ``Y``: the raw
        pairs (the slice is scored against ``Y``, as ``score`` does); ``Xp``, ``Yp``: the
        prepared pairs; ``S``, ``T``: the pools."""
        n = Xp.shape[0]
        folds = None if n_validation else holdout.holdout_folds(n, self.random_state)
        if folds is None:
            why = "validation_fraction picks the step" if n_validation else "too few pairs"
            step_choice.no_evidence(self, "the RCSLS steps", why)
            return AUTO_MAX_ITER
        held = folds[0]
        X_held, Y_held = np.asarray(X[held], np.float64), np.asarray(Y[held], np.float64)
        kept_rows = np.setdiff1d(np.arange(n), held)
        base = self._procrustes().fit(X[kept_rows], Y[kept_rows])
        keep = torch.as_tensor(kept_rows, device=Xp.device)
        held = torch.as_tensor(held, device=Xp.device)
        empty = Xp[:0]
        Xk, Yk = Xp[keep], Yp[keep]
        trained = self._train(Xk, Yk, empty, empty[:, : Yp.shape[1]], S, T, k, AUTO_MAX_ITER)

        def hits(W):
            Z = self._output(Xp[held] @ W, mean_y, spread)
            return holdout.paired_hits(Z, Y_held)

        kept = step_choice.decide_step(
            self,
            "the RCSLS steps",
            hits(trained),
            holdout.paired_hits(base.transform(X_held), Y_held),
            parameter=f"max_iter={AUTO_MAX_ITER}",
            base="OrthogonalProcrustesAligner()",
        )
        return AUTO_MAX_ITER if kept else None

    def _procrustes(self):
        return OrthogonalProcrustesAligner(device=self.device, random_state=self.random_state)

    def _fit_procrustes(self, X, Y):
        """The declined steps' fit: ``OrthogonalProcrustesAligner()`` on all pairs, kept in
        ``procrustes_`` (``transform`` is its transform)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = self._procrustes().fit(X, Y)
        A, _ = model._affine_map()
        self.procrustes_ = model
        self.center_ = bool(model.center_)
        self.W_ = np.asarray(A, dtype=np.float64)
        self.mean_x_, self.mean_y_ = model.mean_x_.copy(), model.mean_y_.copy()
        self.spread_y_ = 1.0
        self.loss_curve_, self.validation_scores_ = [], []
        self.n_iter_ = self.best_iter_ = 0
        warn_if_few_pairs(self, X.shape[0], stacklevel=5)
        return self

    @staticmethod
    def _output(Z, mean_y, spread):
        """Prepared rows as ``transform`` returns them (float64 numpy)."""
        if mean_y is not None:
            Z = unit_rows(Z) * spread + mean_y
        return Z.double().cpu().numpy()

    def _centred(self):
        # The setting in force (models saved before "auto" existed have no center_).
        return bool(auto_choice.resolve(self.center, "center_", self, False))

    def _held_out(self, n):
        """Row numbers of the held-out pairs (none when too few pairs to spare them)."""
        n_held = int(round(self.validation_fraction * n))
        if n_held < 1 or n - n_held < 2:
            return np.empty(0, dtype=np.int64)
        rng = check_random_state(self.random_state)
        return np.sort(rng.permutation(n)[:n_held])

    def _train(self, X, Y, X_val, Y_val, sources, targets, k, max_iter):
        """Gradient steps from Procrustes; returns the kept map (float32 tensor)."""
        cross = (X.T.double() @ Y.double()).cpu().numpy()
        W = torch.as_tensor(procrustes_from_cross(cross)[0], dtype=X.dtype, device=X.device)
        validate = X_val.shape[0] > 0
        self.loss_curve_, self.validation_scores_ = [], []
        best, best_score, best_iter, since = W, -1.0, 0, 0
        if validate:
            best_score = _paired_top1(X_val @ W, Y_val)
        lr = float(self.lr)
        loss, gradient = rcsls_loss_and_gradient(W, X, Y, sources, targets, k)
        self.loss_curve_.append(loss)
        steps = 0
        for _ in range(max_iter):
            steps += 1
            candidate = W - lr * gradient
            if self.spectral_clip:
                candidate = clip_spectral_norm(candidate)
            new_loss, new_gradient = rcsls_loss_and_gradient(candidate, X, Y, sources, targets, k)
            if not np.isfinite(new_loss):
                raise ValueError(
                    f"RCSLSAligner diverged at step {steps} (loss {new_loss}); lower lr."
                )
            if new_loss > loss:
                # Undo the step and halve the step size.
                lr /= 2
            else:
                W, loss, gradient = candidate, new_loss, new_gradient
                self.loss_curve_.append(loss)
            if not validate:
                best, best_iter = W, steps
                continue
            score = _paired_top1(X_val @ W, Y_val)
            self.validation_scores_.append(score)
            if score > best_score:
                best, best_score, best_iter, since = W, score, steps, 0
            else:
                since += 1
                if since >= self.n_iter_no_change:
                    break
        self.n_iter_ = steps
        self.best_iter_ = best_iter
        return best

    def _maps_unit_rows(self):
        """``transform`` maps into the space of Y's unit rows (see AlignedNeighbors), unless
        the fit is the Procrustes fallback."""
        return getattr(self, "procrustes_", None) is None

    def _query_csls(self):
        """``AlignedNeighbors`` ranks this map's queries by cosine (``csls_k="auto"``).

        The loss already demotes the targets that crowd around the mapped rows; the
        gallery's own crowding on top of it over-corrects.  The Procrustes fallback is
        ranked as Procrustes is (CSLS).
        """
        return getattr(self, "procrustes_", None) is not None

    def transform(self, X):
        """Map X into the space of Y's unit rows.

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
        if getattr(self, "procrustes_", None) is not None:
            return self.procrustes_.transform(X)
        dtype = torch.float64 if X.dtype == np.float64 else torch.float32
        device = self._compute_device()
        T = to_torch(X, device, dtype)
        centred = self._centred()
        mean = to_torch(self.mean_x_, device, dtype) if centred else None
        Z = _centred_unit(unit_rows(T), mean) @ to_torch(self.W_, device, dtype)
        if centred:
            # The map was trained on directions (centred unit targets): give each mapped row
            # the typical spread of Y's centred unit rows before adding their mean back,
            # so that the mean weighs as it does in Y.
            Z = unit_rows(Z) * self.spread_y_
            Z = Z + to_torch(self.mean_y_, device, dtype)
        return Z.cpu().numpy()


def _paired_top1(Z, Y):
    """Share of rows of Z whose most similar row of Y (cosine) is their own partner."""
    return paired_topk_share(Z.cpu().numpy(), Y.cpu().numpy(), device=Z.device)

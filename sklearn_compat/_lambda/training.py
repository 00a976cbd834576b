"""The minibatch training loop of LambdaOrthAligner.

The hot path is written like a bare hand-written torch loop: the data live on the device as
tensors, batches are gathered with a permutation drawn from a seeded generator, and nothing
per step waits for the device (no ``.item()``): losses are summed on the device and read
once per epoch, which is also when finiteness is checked.  On CUDA the full-size steps are
replayed from a recorded graph (:mod:`.steps`).
"""

import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from .losses import contrastive_loss, lambda_orth_penalty, orthogonality_gap, penalty_of_gap
from .steps import StepRunner, make_optimizer

__all__ = ["TrainConfig", "Objective", "train_adapters", "small_problem_threads"]

# A fit has diverged when its monitored loss rises this many times above the larger of its
# starting loss and the squared error of the zero map (mean ||y||^2 weighted, 1 in unit-RMS
# coordinates).  Normal fits stay well below: at lr=0.1 on a planted rotation the loss peaks
# near 6x a start of 0.06, below the floor; a wrecked one (lr >= 1) jumps 100-1000x at once.
DIVERGENCE_FACTOR = 10.0
# Rows that measure the starting level of that guard (an even sample of larger sets).
_LIMIT_ROWS = 16_384

# Below this many multiply-adds per minibatch GEMM (batch x d_x x d_y) a CPU step is a few
# hundred microseconds of work: extra threads cost more than they save, and on a loaded
# machine every OpenMP barrier waits for a descheduled thread (measured 20-50x slower
# with 2 threads than with 1 on a shared 2-core box at d = 64, batch 256).
SMALL_STEP_MACS = 2**20
_threads_lock = threading.Lock()
_threads_state = {"depth": 0, "saved": None}


@contextmanager
def small_problem_threads(enabled):
    """Run torch single-threaded inside the block when ``enabled`` (restored after).

    ``torch.set_num_threads`` is process-wide, so nested and concurrent blocks are counted
    and the original setting comes back when the last one exits.
    """
    if not enabled:
        yield
        return
    with _threads_lock:
        if _threads_state["depth"] == 0:
            _threads_state["saved"] = torch.get_num_threads()
            torch.set_num_threads(1)
        _threads_state["depth"] += 1
    try:
        yield
    finally:
        with _threads_lock:
            _threads_state["depth"] -= 1
            if _threads_state["depth"] == 0:
                torch.set_num_threads(_threads_state["saved"])


@dataclass
class TrainConfig:
    lam: float
    sharpness: float
    strict: bool
    alignment_weight: float
    contrastive_weight: float
    forward_weight: float
    temperature: float
    bidirectional: bool
    max_epochs: int
    batch_size: int
    lr: float
    n_iter_no_change: int
    tol: float
    verbose: int
    # Improvements smaller than this share of the best monitored loss do not count either
    # (0: only ``tol``); the lam path's warm-started fits use it.
    rel_tol: float = 0.0
    # How often the monitored loss is read: after every ``ceil(n_batches / readings)``
    # minibatch steps and at the end of each epoch (1: once per epoch).  The history holds
    # one entry per reading; ``n_iter_no_change`` still counts epochs (as many readings).
    readings_per_epoch: int = 1
    # The patience while the orthogonality constraint binds (see ``constraint_binds``);
    # None: always ``n_iter_no_change``.
    bound_patience: int | None = None


class Objective:
    """The total loss of one batch and its parts, in normalised units.

    ``total = w_B L_B + w_F L_F + w_C L_C + L_lambda`` with
    ``L_B = mean ||B(x) - y||^2``, ``L_F = mean ||F(y) - B(x)||^2`` and
    ``L_C = C(F(y), B(x)) + C(F(y), y)`` with the forward adapter, ``C(B(x), y)`` without.
    Parts that are switched off (weight 0, ``lam = inf``, strict) cost nothing.
    """

    def __init__(self, config):
        self.config = config
        self.use_contrastive = config.contrastive_weight > 0
        self.use_forward = config.bidirectional
        self.use_penalty = not config.strict and not math.isinf(config.lam)
        self.names = ["loss", "alignment"]
        if self.use_forward:
            self.names.append("forward")
        if self.use_contrastive:
            self.names.append("contrastive")
        if self.use_penalty:
            self.names.append("penalty")

    def __call__(self, backward, forward, xb, yb, lb, *, with_penalty=True):
        cfg = self.config
        W = backward.weight  # read once: with ``strict`` each read recomputes the map
        z = xb @ W if backward.bias is None else torch.addmm(backward.bias, xb, W)
        residual = getattr(backward, "residual", None)
        if residual is not None:  # a residual MLP on top of the affine part
            z = z + residual(xb)
        alignment = (z - yb).pow(2).sum(dim=1).mean()
        total = cfg.alignment_weight * alignment
        parts = [alignment]
        if self.use_forward:
            fy = forward(yb)
            forward_term = (fy - z).pow(2).sum(dim=1).mean()
            total = total + cfg.forward_weight * forward_term
            parts.append(forward_term)
        if self.use_contrastive:
            if self.use_forward:
                contrastive = contrastive_loss(fy, z, lb, cfg.temperature) + contrastive_loss(
                    fy, yb, lb, cfg.temperature
                )
            else:
                contrastive = contrastive_loss(z, yb, lb, cfg.temperature)
            total = total + cfg.contrastive_weight * contrastive
            parts.append(contrastive)
        if self.use_penalty and with_penalty:
            penalty = lambda_orth_penalty(W, cfg.lam, cfg.sharpness)
            total = total + penalty
            parts.append(penalty)
        return total, torch.stack([total, *parts]).detach()


def _batches(n, batch_size, order):
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def _snapshot(modules):
    return [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in modules]


def train_adapters(backward, forward, train, valid, config, generator, *, desc):
    """Train ``backward`` (and ``forward`` when bidirectional) with Adam on minibatches.

    Parameters
    ----------
    backward, forward : AffineAdapter or None
        The adapters, already initialised and on the data's device.
    train, valid : tuple of (X, Y, labels) tensors, valid may be None
        Normalised data on the device; labels may be None.
    config : TrainConfig
    generator : torch.Generator
        Draws the minibatch order (on the data's device).
    desc : str
        Label of the progress bar.

    Returns
    -------
    history : dict of lists
        Per-epoch means of the loss and its parts on the training rows, the orthogonality
        gap at the end of the epoch and, with ``valid``, the validation loss.
    n_epochs : int
    best_epoch : int or None
        With ``valid``: the epoch whose weights were restored.

    Raises
    ------
    FloatingPointError
        When an epoch's loss is not finite, or rises ``DIVERGENCE_FACTOR`` times above
        the larger of the starting loss and the zero map's squared error; the modules are
        left at their starting state.
    """
    objective = Objective(config)
    modules = [backward] + ([forward] if config.bidirectional else [])
    params = [p for m in modules for p in m.parameters()]
    X, Y, L = train
    n = X.shape[0]
    device = X.device
    optimizer = make_optimizer(params, config.lr, device)
    history = {name: [] for name in objective.names}
    history["orthogonality_gap"] = []
    if valid is not None:
        history["valid_loss"] = []
    last_good = _snapshot(modules)
    start_state = last_good
    n_batches = max(1, math.ceil(n / config.batch_size))
    read_every = max(1, math.ceil(n_batches / config.readings_per_epoch))
    stopper = _EarlyStopping(
        config,
        patience=config.n_iter_no_change * math.ceil(n_batches / read_every),
        keep_best=valid is not None,
        state=last_good,
    )
    limit = _divergence_limit(objective, backward, forward, train, valid, config)
    sums = torch.zeros(len(objective.names), dtype=X.dtype, device=device)
    # The parametrised weight of ``strict`` is left eager: recording it is untested.
    run_step = StepRunner(
        objective,
        backward,
        forward,
        optimizer,
        train,
        sums,
        batch_size=config.batch_size,
        expected_full_steps=config.max_epochs * (n // config.batch_size),
        capture=not config.strict,
    )
    bar = tqdm(range(config.max_epochs), desc=desc, unit="epoch", disable=not config.verbose)
    epoch = 0
    stop = False
    for epoch in bar:
        sums.zero_()
        rows = 0
        order = torch.randperm(n, generator=generator, device=device)
        for step, idx in enumerate(_batches(n, config.batch_size, order), start=1):
            run_step(idx)
            rows += idx.shape[0]
            if step % read_every and step != n_batches:
                continue
            # A reading: the training loss since the last one, the gap, the held-out loss.
            with torch.no_grad():
                gap = orthogonality_gap(backward.weight)
                summary = [sums / rows, gap.reshape(1)]
                if valid is not None:
                    summary.append(_evaluate(objective, backward, forward, valid, gap=gap))
                summary = torch.cat(summary).cpu().numpy().astype(np.float64)  # one sync
            sums.zero_()
            rows = 0
            monitor = float(summary[-1] if valid is not None else summary[0])
            if not np.all(np.isfinite(summary)) or monitor > limit:
                for module, state in zip(modules, start_state, strict=True):
                    module.load_state_dict(state)
                what = (
                    "the loss is not finite"
                    if not np.all(np.isfinite(summary))
                    else f"the loss rose to {monitor:.3g}, over {DIVERGENCE_FACTOR:g}x its "
                    "starting level"
                )
                raise FloatingPointError(
                    f"Training diverged in epoch {epoch + 1}: {what} "
                    f"(lr={config.lr:g}, lam={config.lam:g}). Lower lr, or check the inputs "
                    "for extreme values."
                )
            last_good = _snapshot(modules)
            values = dict(zip(objective.names, summary[: len(objective.names)], strict=True))
            for name, value in values.items():
                history[name].append(float(value))
            gap = float(summary[len(objective.names)])
            history["orthogonality_gap"].append(gap)
            if valid is not None:
                history["valid_loss"].append(monitor)
            bar.set_postfix(loss=f"{values['loss']:.4g}", gap=f"{gap:.3g}")
            stop = stopper.read(monitor, gap, epoch + 1, last_good)
            if stop:
                break
        if stop:
            break
    bar.close()
    if valid is not None:
        for module, state in zip(modules, stopper.best_state, strict=True):
            module.load_state_dict(state)
    return history, epoch + 1, stopper.best_epoch


class _EarlyStopping:
    """Patience over the readings of the monitored loss (see ``TrainConfig``)."""

    def __init__(self, config, *, patience, keep_best, state):
        self.config, self.patience, self.keep_best = config, patience, keep_best
        self.best, self.stall = math.inf, 0
        self.best_epoch, self.best_state = None, state

    def read(self, monitor, gap, epoch, state):
        """Record one reading taken in ``epoch`` (1-based); True when training should stop."""
        cfg = self.config
        needed = cfg.tol if math.isinf(self.best) else max(cfg.tol, cfg.rel_tol * abs(self.best))
        if monitor < self.best - needed:
            self.best, self.stall = monitor, 0
            if self.keep_best:
                self.best_epoch, self.best_state = epoch, state
            return False
        self.stall += 1
        bound = cfg.bound_patience is not None and constraint_binds(gap, cfg.lam, cfg.sharpness)
        return self.stall >= (cfg.bound_patience if bound else self.patience)


def constraint_binds(gap, lam, sharpness):
    """Whether a map with orthogonality gap ``gap`` sits on the penalty's wall at ``lam``.

    The wall is the sigmoid's rise, ``sigmoid(sharpness (N - lam))`` from about 5e-5 to
    0.993: ``lam - 10 / sharpness <= N <= lam + 5 / sharpness``.  A fit whose data pull
    ``W`` beyond ``lam`` settles there (near ``lam - 6 / sharpness``); further out the
    penalty still pulls the map in, further in it no longer acts.
    """
    return lam - 10.0 / sharpness <= gap <= lam + 5.0 / sharpness


def _divergence_limit(objective, backward, forward, train, valid, config):
    """The monitored loss above which the fit counts as diverged (see DIVERGENCE_FACTOR).

    Measured once before training on the rows the fit monitors (held-out when there are
    any): the objective at the start, and the zero map's weighted squared error as a floor,
    so that a start that is already near-perfect does not make ordinary noise look like
    divergence.
    """
    rows = valid if valid is not None else train
    # A guard needs the level, not every row: an evenly spread sample of rows costs a fixed
    # few dozen batches where the whole set cost a third of an epoch (and, in float64, a
    # copy of Y).
    stride = max(1, math.ceil(rows[0].shape[0] / _LIMIT_ROWS))
    if stride > 1:
        rows = tuple(None if part is None else part[::stride] for part in rows)
    with torch.no_grad():
        start = float(_evaluate(objective, backward, forward, rows))
        sq_y = torch.linalg.vector_norm(rows[1], dim=1, dtype=torch.float64).square()
        zero_map = float(sq_y.mean()) * config.alignment_weight
    if not math.isfinite(start):
        return math.inf  # the first epoch's own finiteness check reports it
    return DIVERGENCE_FACTOR * max(start, zero_map, 1.0 if zero_map == 0 else 0.0)


def _evaluate(objective, backward, forward, valid, *, gap=None):
    """Mean total loss over the held-out rows, in fixed batches (no gradient).

    The penalty does not depend on the rows: it is added once, from ``gap`` (the
    orthogonality gap of ``backward``'s weight, computed here when None).
    """
    X, Y, L = valid
    n = X.shape[0]
    batch_size = objective.config.batch_size
    total = torch.zeros((), dtype=X.dtype, device=X.device)
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        lb = None if L is None else L[start:stop]
        batch = (X[start:stop], Y[start:stop], lb)
        loss, _ = objective(backward, forward, *batch, with_penalty=False)
        total += loss * (stop - start)
    total = total / n
    if objective.use_penalty:
        gap = orthogonality_gap(backward.weight) if gap is None else gap
        total = total + penalty_of_gap(gap, objective.config.lam, objective.config.sharpness)
    return total.reshape(1)

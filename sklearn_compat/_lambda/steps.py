"""One minibatch step of the training loop, run eagerly or replayed from a CUDA graph.

At the default batch of 256 rows a step is about a hundred small kernels (the gather, the
product, the losses, their gradients, Adam).  On a GPU their host-side dispatch outlasts
their run by an order of magnitude, so the loop waits on Python, not on the device.  A CUDA
graph records the step once and replays every later full-size batch with a single launch;
the arithmetic, and so the result, is the same kernel for kernel.

The first ``WARMUP_STEPS`` full batches of a fit run eagerly on a side stream (as CUDA graph
capture requires: lazy initialisation must not happen while recording), then the next one is
recorded and replayed, and so is every full batch after it.  The last, shorter batch of an
epoch runs eagerly.  Nothing is skipped or repeated: the sequence of steps is the eager one.
"""

import torch

__all__ = ["make_optimizer", "StepRunner", "StepOutcome", "WARMUP_STEPS"]

# Eager full-batch steps before recording (torch's guide for whole-network capture uses 3).
WARMUP_STEPS = 3
# Fewer full batches than this per fit: recording costs more than it saves.
_MIN_CAPTURED_STEPS = 16
# Switched off by tests and benchmarks that compare the two paths.
USE_CUDA_GRAPHS = True


class StepOutcome:
    """How a fit's steps ran: ``replays`` (steps replayed from the graph), ``capture_error``
    (why recording was given up, or None) and ``train_rows``."""

    def __init__(self, train_rows):
        self.train_rows = train_rows
        self.replays = 0
        self.capture_error = None


# The outcome of the last fit in this process, for tests and benchmarks (not the runner
# itself, which would keep the training rows on the device alive).
last_outcome = None


def make_optimizer(params, lr, device):
    """Adam; on CUDA the fused kernel with its step count on the device (capturable).

    The fused update is one kernel for every parameter instead of a dozen per tensor, and
    a step count kept on the device is what lets the update be recorded in a graph.
    """
    if device.type == "cuda":
        return torch.optim.Adam(params, lr=lr, fused=True, capturable=True)
    return torch.optim.Adam(params, lr=lr)


class StepRunner:
    """Runs training steps: ``runner(idx)`` takes one Adam step on the rows ``idx``.

    Parameters
    ----------
    objective : callable
        ``objective(backward, forward, xb, yb, lb)`` returning ``(loss, parts)``.
    backward, forward : torch.nn.Module or None
        The adapters being trained.
    optimizer : torch.optim.Optimizer
        Made by :func:`make_optimizer`.
    data : tuple of (X, Y, labels) tensors
        The training rows on the device; labels may be None.
    sums : torch.Tensor
        Accumulates ``parts`` weighted by the batch's rows (updated in place).
    batch_size : int
        The full batch size (the batches that may be replayed).
    expected_full_steps : int
        Full batches the fit will run at most; a graph is recorded only when they are many.
    capture : bool
        Whether recording is allowed at all (CUDA, and a step free of host synchronisation).
    """

    def __init__(
        self,
        objective,
        backward,
        forward,
        optimizer,
        data,
        sums,
        *,
        batch_size,
        expected_full_steps,
        capture,
    ):
        self.objective = objective
        self.backward = backward
        self.forward = forward
        self.optimizer = optimizer
        self.X, self.Y, self.L = data
        self.sums = sums
        self.batch_size = batch_size
        self.capture = (
            capture
            and USE_CUDA_GRAPHS
            and self.X.device.type == "cuda"
            and expected_full_steps >= WARMUP_STEPS + _MIN_CAPTURED_STEPS
        )
        self.graph = None
        self.static_idx = None
        self.warm_steps = 0
        self.side_stream = torch.cuda.Stream(self.X.device) if self.capture else None
        global last_outcome
        self.outcome = last_outcome = StepOutcome(self.X.shape[0])

    def _step(self, idx):
        lb = None if self.L is None else self.L[idx]
        loss, parts = self.objective(self.backward, self.forward, self.X[idx], self.Y[idx], lb)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.sums.add_(parts, alpha=idx.shape[0])

    def __call__(self, idx):
        full = idx.shape[0] == self.batch_size
        if not (self.capture and full):
            self._step(idx)
            return
        if self.graph is not None:
            self.static_idx.copy_(idx)
            self.graph.replay()
            self.outcome.replays += 1
            return
        if self.warm_steps < WARMUP_STEPS:
            current = torch.cuda.current_stream(self.X.device)
            self.side_stream.wait_stream(current)
            with torch.cuda.stream(self.side_stream):
                self._step(idx)
            current.wait_stream(self.side_stream)
            self.warm_steps += 1
            return
        self._record(idx)

    def _record(self, idx):
        """Record one step into a graph, then replay it for ``idx`` (recording runs nothing)."""
        self.static_idx = idx.clone()
        graph = torch.cuda.CUDAGraph()
        # Gradients allocated inside the recording live in the graph's memory, at addresses
        # every replay writes again.
        self.optimizer.zero_grad(set_to_none=True)
        try:
            # "thread_local": only this thread's unsafe calls break the recording, so fits
            # running in other threads (a threaded search) are never disturbed by it.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self._step(self.static_idx)
        except RuntimeError as exc:  # an operation that cannot be recorded: stay eager
            self.capture = False
            self.outcome.capture_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            self.optimizer.zero_grad(set_to_none=True)
            self._step(idx)
            return
        self.graph = graph
        graph.replay()
        self.outcome.replays += 1

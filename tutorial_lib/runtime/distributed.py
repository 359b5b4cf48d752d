"""Several processes, one run: what the RL loop needs from ``accelerate`` (chapter 10).

    accelerate launch --config_file configs/accelerate/ddp.yaml -m tutorial_lib rl --algo ppo ...

``accelerate launch`` starts N copies of the command (one per GPU, or N on a CPU) and tells each
its rank through the environment; ``accelerate``'s :class:`~accelerate.PartialState` joins them into
one process group (NCCL between GPUs, gloo on CPUs). This module is the library's only door to it,
and it is deliberately small: every helper is the identity in a single process, which never
touches ``accelerate`` at all, so a one-process run computes exactly what it always did.

What the loop does with these helpers (``tutorial_lib.rl``, through :mod:`tutorial_lib.rl.whole_batch`
and :mod:`tutorial_lib.rl.update_step`: the algorithms themselves make no process call):

* each process collects its own share of the iteration's turns, from its own seeds;
* :func:`gather` hands every process the whole iteration's episodes, so statistics over the batch
  (ReBN's means and scales, the advantage whitening, the logged metrics) are the global batch's,
  never one process's;
* each process computes the loss of its own turns, divided by the *global* number of tokens, so
  that :func:`sum_gradients` (an all-reduce) leaves every process the gradient one process would
  have computed on all the turns; the same clipped step then keeps the copies identical;
* only the main process writes metrics, checkpoints and models; the others wait at
  :func:`wait_for_everyone` where they would read what it wrote.

Why not ``accelerator.prepare(model)`` (DDP)? DDP averages gradients over processes, overlapping the
all-reduce with the backward pass; the book's losses are normalised by the global token count (a
turn's weight must not depend on which process played it), and the policy is sometimes scored for
log-probabilities without a backward pass at all. One explicit all-reduce per optimiser step keeps
both visible. For a model whose gradients are large next to its compute, DDP's overlap (or FSDP's
sharding) is what to reach for; the equivalence test (``tests/test_distributed.py``) is how to
check that a change keeps the maths.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from typing import Any

import torch

from tutorial_lib.runtime.device import device_kind

#: seconds this process has spent in collective calls since :func:`take_sync_seconds` last read them
#: (``"all"``: every collective; ``"gradients"``: the gradient all-reduce alone). A collective's time
#: includes waiting for the slowest process to arrive, which is what synchronising costs.
_sync_seconds = {"all": 0.0, "gradients": 0.0}
_sync_depth = 0  # a collective built on another (all_true on sum_over_processes) is timed once


@contextlib.contextmanager
def timed_collective(kind: str = "all"):
    """Count the seconds of the collective call(s) inside in :func:`take_sync_seconds` (``kind``
    ``"gradients"``: also as the gradient all-reduce's)."""
    global _sync_depth
    _sync_depth += 1
    start = time.perf_counter()
    try:
        yield
    finally:
        _sync_depth -= 1
        spent = time.perf_counter() - start
        if kind == "gradients":
            _sync_seconds["gradients"] += spent
        if _sync_depth == 0:
            _sync_seconds["all"] += spent


def take_sync_seconds() -> dict[str, float]:
    """Seconds spent in collective calls since the last call (then reset), as metrics:
    ``sync_seconds`` (all of them, waiting for the other processes included) and
    ``grad_allreduce_seconds`` (the gradient all-reduce, part of the first). Zero in one process."""
    taken = {"sync_seconds": _sync_seconds["all"], "grad_allreduce_seconds": _sync_seconds["gradients"]}
    _sync_seconds.update(all=0.0, gradients=0.0)
    return taken


def launched() -> bool:
    """True when this process is one of several started by ``accelerate launch`` (or ``torchrun``)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


@functools.lru_cache(maxsize=1)
def _state():
    """The process group, joined once. On a machine without an accelerator the processes share
    the CPU through gloo (``accelerate`` needs to be told: ``cpu=True``)."""
    from accelerate import PartialState

    return PartialState(cpu=device_kind() == "cpu")


def setup() -> None:
    """Join the process group now, before any model is loaded (so that each process's ``cuda`` is its
    own GPU); nothing in a single process."""
    if launched():
        _state()


def num_processes() -> int:
    return _state().num_processes if launched() else 1


def process_index() -> int:
    return _state().process_index if launched() else 0


def is_main() -> bool:
    return process_index() == 0


def wait_for_everyone() -> None:
    if launched():
        _state().wait_for_everyone()


@contextlib.contextmanager
def main_first():
    """The main process runs the block first (trains and caches a checkpoint, say), then the others
    (which find it in the cache)."""
    if not launched():
        yield
        return
    with _state().main_process_first():
        yield


def share(count: int) -> int:
    """This process's share of ``count`` items split as evenly as possible (earlier ranks take the
    remainder)."""
    n, rank = num_processes(), process_index()
    return count // n + (rank < count % n)


def gather(items: list[Any]) -> list[Any]:
    """Every process's ``items``, concatenated in rank order, on every process (pickled: for
    episodes and small lists, not for large tensors)."""
    if not launched():
        return list(items)
    from accelerate.utils import gather_object

    with timed_collective():
        return gather_object(list(items))


def offsets(count: int) -> tuple[int, int]:
    """(where this process's ``count`` items start in the gathered list, the gathered total)."""
    counts = gather([count])
    rank = process_index()
    return sum(counts[:rank]), sum(counts)


def gather_values(values: torch.Tensor) -> tuple[torch.Tensor, slice]:
    """Every process's 1-D ``values`` concatenated in rank order (the same dtype, exactly), and the
    slice where this process's lie in them. One process: ``values`` itself, and all of it.

    Exchanged as pickled Python lists (:func:`gather`): right for a few numbers per turn (a few
    hundred turns an iteration), a trap for large tensors, which ``accelerate.utils.gather`` sends
    as tensors (padded to one length)."""
    if not launched():
        return values, slice(0, len(values))
    parts = gather([values.tolist()])
    start = sum(len(part) for part in parts[: process_index()])
    everyone = torch.tensor([v for part in parts for v in part], dtype=values.dtype)
    return everyone, slice(start, start + len(values))


def sum_over_processes(value: float | torch.Tensor) -> float | torch.Tensor:
    """The sum of ``value`` over the processes (a float, or a tensor of any shape)."""
    if not launched():
        return value
    from accelerate.utils import reduce

    tensor = torch.as_tensor(value, dtype=torch.float64).to(_state().device)
    with timed_collective():
        total = reduce(tensor.clone(), reduction="sum")
    return float(total) if not torch.is_tensor(value) else total.to(value.dtype).to(value.device)


def sum_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric summed over the processes, in one all-reduce (float64: sums of per-process
    shares of a mean lose nothing); ``metrics`` itself in one process."""
    if not launched():
        return metrics
    totals = sum_over_processes(torch.tensor(list(metrics.values()), dtype=torch.float64)).tolist()
    return dict(zip(metrics, totals))


def all_true(flag: bool) -> bool:
    """True only if ``flag`` is true in every process (a step is taken by all or by none)."""
    if not launched():
        return flag
    return sum_over_processes(0.0 if flag else 1.0) == 0.0


def broadcast(tensor: torch.Tensor) -> torch.Tensor:
    """The main process's ``tensor`` on every process (a minibatch order drawn once)."""
    if not launched():
        return tensor
    from accelerate.utils import broadcast as accelerate_broadcast

    device = _state().device
    with timed_collective():
        return accelerate_broadcast(tensor.to(device), from_process=0).to(tensor.device)


def sum_gradients(parameters: list[torch.nn.Parameter]) -> None:
    """All-reduce the gradients of ``parameters`` (a sum), in one flat buffer; a parameter this
    process's turns did not reach counts as zeros. Each process's loss is already divided by the
    global token count, so the sum is the one-process gradient."""
    if not launched():
        return
    from accelerate.utils import reduce

    params = [p for p in parameters if p.requires_grad]
    if not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    dtype = functools.reduce(torch.promote_types, (g.dtype for g in grads), torch.float32)  # bf16: summed in float32
    flat = torch.cat([g.reshape(-1).to(dtype) for g in grads]).to(_state().device)
    flat = reduce(flat, reduction="sum")
    start = 0
    for p in params:
        size = p.numel()
        p.grad = flat[start : start + size].view_as(p).to(p.dtype).to(p.device).clone()
        start += size

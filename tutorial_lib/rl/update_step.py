"""What an RL update's optimiser step is made of, below every algorithm (chapters 5-6, 9-10).

Holds the context an update computes in (:func:`update_precision`), its micro-batches retried
smaller when the device runs out of memory, and activation checkpointing switched on only where
one turn would not fit without it (:class:`MicroBatches`, sized by
:func:`~tutorial_lib.runtime.memory_plan.microbatch_size`), and the step itself:
gradients summed over the processes, clipped, and skipped when not finite
(:func:`synchronised_step`, :func:`clip_and_step`). Imports ``runtime``, ``lm`` and
:mod:`tutorial_lib.rl.settings`. Chapter 5 teaches the step, chapter 9 the sizing, chapter 10 the
gradient sum.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

import torch

from tutorial_lib.rl.settings import UPDATE_DTYPES, RLSettings
from tutorial_lib.runtime import distributed
from tutorial_lib.runtime.device import end_of_step
from tutorial_lib.runtime.memory_plan import microbatch_size, plan_update, release_device_memory

T = TypeVar("T")


def update_precision(settings: RLSettings, model) -> AbstractContextManager:
    """The context an update runs in (``settings.update_dtype``): nothing for float32, else autocast
    to bfloat16 on the model's device. Matrix products then run in bfloat16 and reductions such as
    the log-softmax in float32 (autocast's own lists); the gradients reach float32 weights."""
    if settings.update_dtype == "float32":
        return nullcontext()
    return torch.autocast(next(model.parameters()).device.type, dtype=UPDATE_DTYPES[settings.update_dtype])


class MicroBatches:
    """One run's micro-batch sizes: :func:`~tutorial_lib.runtime.memory_plan.microbatch_size`'s,
    scaled down for the rest of the run each time the device runs out of memory; and activation
    checkpointing, switched on only where one turn would not fit without it. The memory plan is
    an estimate (and the written ``microbatch_turns`` a guess for some device): an update that does
    not fit is redone with half the turns per pass instead of ending the run. Gradients add up over
    the passes of one update, so the update is the same at any size."""

    def __init__(self, settings: RLSettings, model):
        self.settings, self.model, self.scale = settings, model, 1.0

    def size(self, batch) -> int:
        """Turns per forward/backward pass for ``batch``."""
        return max(1, int(microbatch_size(self.settings, self.model, batch) * self.scale))

    def run(self, batch, in_micro_batches: Callable[[int], T]) -> T:
        """``in_micro_batches(size)``: the caller's whole pass over ``batch``, in micro-batches of at
        most ``size`` turns, with this run's size; if the device runs out of memory, free what the
        failed try held, halve the size and call it again, down to one turn a pass (then the error
        stands). A pass that trains starts by zeroing the gradients, so a try that failed half-way
        leaves nothing behind."""
        while True:
            size = self.size(batch)
            try:
                return in_micro_batches(size)
            except torch.OutOfMemoryError:
                if size == 1:
                    raise
            # out of the ``except`` block, the failed try's tensors (held by the traceback) are free
            release_device_memory(self.model)
            self.scale *= (size // 2) / size
            warnings.warn(f"out of memory at {size} turns a pass: {self.size(batch)} from now on", stacklevel=2)

    def checkpoint_if_needed(self, batch) -> None:
        """Switch activation checkpointing on in the model when, sized to the device, not even one
        turn of ``batch`` fits without it (never off again: a later, shorter batch would fit either
        way)."""
        from tutorial_lib.lm.lm_parts import checkpoint_activations

        plan = plan_update(self.model, batch.turns, size_to_device=self.settings.size_to_device)
        if plan is not None and plan.checkpointing:
            checkpoint_activations(self.model)


class MetricSums:
    """An update's metric sums, kept where they are computed (0-d tensors on the model's device) and
    read to the host once, at the end. Each read of a device value waits for the device: on XLA it
    also cuts the traced graph in two, so a ``float()`` per micro-batch would cost a sync each."""

    def __init__(self, names: tuple[str, ...]):
        self.sums: dict[str, torch.Tensor | float] = dict.fromkeys(names, 0.0)

    def add(self, **values: torch.Tensor) -> None:
        for name, value in values.items():
            self.sums[name] = self.sums[name] + value.detach().float()

    def read(self) -> dict[str, float]:
        """Every sum as a float, in one transfer (a sum nothing was added to is 0.0)."""
        added = [value for value in self.sums.values() if isinstance(value, torch.Tensor)]
        if not added:
            return {name: 0.0 for name in self.sums}
        device = added[0].device
        values = torch.stack([torch.as_tensor(value, dtype=torch.float32, device=device) for value in self.sums.values()])
        return dict(zip(self.sums, values.tolist()))


def trainable_parameters(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    """Every parameter ``optimizer`` steps, over its groups."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def clip_and_step(optimizer: torch.optim.Optimizer, max_grad_norm: float, finite_loss: bool = True) -> tuple[float, float]:
    """Clip the gradient of ``optimizer``'s parameters and step, unless the loss or the gradient is
    not finite: such a step would ruin the weights for good, so it is skipped and counted.
    Returns (gradient norm, 1.0 if skipped else 0.0)."""
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable_parameters(optimizer), max_grad_norm) if finite_loss else torch.tensor(float("nan"))
    if finite_loss and torch.isfinite(grad_norm):
        optimizer.step()
        end_of_step(grad_norm.device)  # XLA: the step is computed here, its graph cut
        return float(grad_norm), 0.0
    optimizer.zero_grad(set_to_none=True)
    # counted in the metrics too; said here because a run whose every step is skipped learns nothing
    # while its curves still look like a run's (it happened: benchmarks/results/small_preset_chapters_cpu.md)
    warnings.warn("an optimiser step was skipped: its loss or gradient was not finite (the run's "
                  "'skipped_steps' / 'skipped_step' metric counts them)", RuntimeWarning, stacklevel=2)
    return float(grad_norm), 1.0


def synchronised_step(optimizer: torch.optim.Optimizer, max_grad_norm: float, finite_loss: bool = True) -> tuple[float, float]:
    """The optimiser step every process takes alike: skipped everywhere if one process's loss was
    not finite, else the gradients summed over the processes (each loss is already divided by the
    global token count), clipped and stepped (:func:`clip_and_step`)."""
    finite_loss = distributed.all_true(finite_loss)
    if finite_loss:
        with distributed.timed_collective("gradients"):  # timed apart: chapter 10's scaling benchmark
            distributed.sum_gradients(trainable_parameters(optimizer))
    return clip_and_step(optimizer, max_grad_norm, finite_loss=finite_loss)

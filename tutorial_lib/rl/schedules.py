"""Learning-rate schedules over a run's iterations (chapters 5-6).

Holds :func:`lr_multiplier` (the factor of one iteration under ``RLSettings.lr_schedule``),
:func:`lr_scheduler` (that factor over an optimiser, stepped once per iteration) and
:func:`step_schedule`. Imports torch and :mod:`tutorial_lib.rl.settings` only. Chapter 5 teaches the
warm-up-stable-decay schedule, chapter 6 PPO's warm-up then cosine.
"""

from __future__ import annotations

import math
import warnings

import torch

from tutorial_lib.rl.settings import RLSettings


def lr_multiplier(iteration: int, settings: RLSettings) -> float:
    """The learning-rate factor of ``iteration`` (0-based): 1 with a constant schedule; else a
    linear warm-up, then a cosine to 0 at the run's last iteration (``warmup_cosine``), or 1 until
    the last ``decay_iterations``, which fall linearly from just under 1 to ``1 / (decay + 1)`` at the
    last iteration (``warmup_stable_decay``: no iteration is spent on a step of size 0)."""
    if settings.lr_schedule == "constant":
        return 1.0
    if iteration < settings.warmup_iterations:
        return (iteration + 1) / (settings.warmup_iterations + 1)
    if settings.lr_schedule == "warmup_stable_decay":
        left = settings.iterations - iteration  # iterations from this one to the end, this one included
        decay = settings.decay_iterations
        return 1.0 if left > decay else left / (decay + 1)
    span = max(settings.iterations - settings.warmup_iterations, 1)
    return 0.5 * (1 + math.cos(math.pi * (iteration - settings.warmup_iterations) / span))


def lr_scheduler(optimizer: torch.optim.Optimizer, settings: RLSettings) -> torch.optim.lr_scheduler.LambdaLR:
    """The schedule ``settings.lr_schedule`` names over ``optimizer``'s learning rates, one
    :func:`step_schedule` per iteration."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda iteration: lr_multiplier(iteration, settings))


def step_schedule(scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    """Move a learning-rate schedule on; quietly when every optimiser step was skipped (torch then
    warns that the schedule stepped before the optimiser)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
        scheduler.step()

"""The settings every RL algorithm of the loop shares (chapters 5-7).

Holds :class:`RLSettings` (collection, optimiser, schedule, logging, validation, with their checks)
and the names its string settings may take. Each algorithm adds its own fields in a subclass
(:class:`~tutorial_lib.rl.reinforce.ReinforceSettings`, :class:`~tutorial_lib.rl.ppo.PPOSettings`);
the presets hold one per game and scale (:func:`tutorial_lib.presets.rl_settings` resolves them).
Imports torch only. Chapter 5 introduces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

#: learning-rate schedules over a run's iterations
LR_SCHEDULES = ("constant", "warmup_cosine", "warmup_stable_decay")
#: the dtypes an update may compute in (:attr:`RLSettings.update_dtype`)
UPDATE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class RLSettings:
    """What every algorithm of the loop shares: collection, optimiser, logging. Each algorithm adds
    its own (:class:`~tutorial_lib.rl.reinforce.ReinforceSettings`, :class:`~tutorial_lib.rl.ppo.PPOSettings`).
    Defaults suit the tiny model on a CPU (chapter 5)."""

    #: collect-then-update iterations
    iterations: int = 30
    #: turns collected per iteration: episodes start until this many turns are played
    turns_per_iteration: int = 256
    #: games played side by side while collecting
    num_envs: int = 32
    learning_rate: float = 1e-4
    #: ``"constant"``; ``"warmup_cosine"``: linear warm-up over ``warmup_iterations``, then a
    #: cosine to 0 at the last iteration; or ``"warmup_stable_decay"``: the warm-up, the full rate,
    #: then a linear fall over the last ``decay_iterations`` (:func:`~tutorial_lib.rl.schedules.lr_multiplier`). A constant rate
    #: keeps moving the policy by about the rate each step, so which iteration a run stops at decides
    #: part of its verdict; a decay at the end lets it settle. Stepped once per iteration
    lr_schedule: str = "constant"
    #: iterations of linear warm-up (the two schedules with a warm-up only)
    warmup_iterations: int = 0
    #: the last iterations over which ``"warmup_stable_decay"`` lowers the rate towards 0
    decay_iterations: int = 0
    adam_betas: tuple[float, float] = (0.9, 0.95)
    max_grad_norm: float = 1.0
    #: turns per forward/backward pass (a micro-batch): memory, not maths; their gradients add up
    #: to one optimiser step
    microbatch_turns: int = 128
    #: size each update's micro-batches to the model, the batch's longest turn and the device's free
    #: memory instead (:func:`~tutorial_lib.runtime.memory_plan.microbatch_size`): ``microbatch_turns`` is then ignored
    size_to_device: bool = False
    #: sampling preset while collecting (``rl``: the model's own distribution)
    sampling: str = "rl"
    #: sampling temperature; the trainer scores with the same one, so the policy being trained is
    #: the tempered one, softmax(logits / T), and the sampler is still exactly that policy. Below 1
    #: a policy that rarely succeeds samples its best answers more often (chapter 6)
    temperature: float = 1.0
    #: beta of the KL penalty to the frozen starting policy, taken from each turn's reward (0: no
    #: reference model): ``r - beta * sum over the action's tokens of (log pi_old - log pi_ref)``
    kl_coef: float = 0.0
    #: the dtype of the update's arithmetic: ``"float32"``, or ``"bfloat16"``: its forward and
    #: backward passes (and the KL reference's scoring) under ``torch.autocast``, with the weights,
    #: gradients and optimiser kept in float32. Pays where the device computes bfloat16 natively (a
    #: GPU; a CPU with AVX512-BF16 or AMX, :func:`~tutorial_lib.runtime.device.cpu_bfloat16_flags`);
    #: elsewhere it is emulated and slower. Sampling stays in the model's own dtype
    update_dtype: str = "float32"
    #: train only the top this many decoder layers (their LoRA adapters, or their weights) and what
    #: sits above them; the lower layers and the embedding stay as the start left them, and the
    #: backward pass stops at the lowest trained layer (:func:`~tutorial_lib.lm.lm_parts.train_top_layers`).
    #: ``None``: every trainable parameter trains
    train_top_layers: int | None = None
    #: options for the game (opponent, world...)
    env_options: dict[str, Any] = field(default_factory=dict)
    #: training episodes use seeds from here up, away from the evaluation seeds (0, 1, 2...)
    first_seed: int = 100_000
    #: cycle through a fixed set of this many seeds from ``first_seed`` (a training split, like
    #: GSM8K's) instead of a fresh game every episode (``None``)
    train_seeds: int | None = None
    #: stop early once this many action tokens have been sampled (``None``: run every iteration);
    #: how chapter 7 gives each algorithm the same budget
    token_budget: int | None = None
    #: checkpoint every this many iterations (and at the end)
    save_every: int = 5
    #: choose the run's model on held-out games (:mod:`~tutorial_lib.rl.validation`): before the
    #: first iteration, every this many and after the last, play ``validation_episodes`` greedy
    #: games and keep the weights that score best on ``validation_metric``, the start included.
    #: 0: no validation, the last iteration's weights are the model. Training is the same either way
    validate_every: int = 0
    validation_episodes: int = 50
    #: a metric of :func:`~tutorial_lib.evaluation.evaluate.summarize` for the game, higher is better
    validation_metric: str = "mean_return"
    #: the validation games' options instead of the training's ``env_options`` (a game's own reward
    #: where training changed it)
    validation_env_options: dict[str, Any] | None = None
    #: validation seeds start here: apart from training's (``first_seed``) and the evaluation's (0 up)
    validation_first_seed: int = 50_000
    seed: int = 0

    def __post_init__(self) -> None:
        # the counts first: the schedule's checks below are stated in them
        for name in ("iterations", "turns_per_iteration", "num_envs", "microbatch_turns", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}; got {self.lr_schedule!r}")
        if self.warmup_iterations < 0:
            raise ValueError(f"warmup_iterations must be >= 0; got {self.warmup_iterations}")
        if self.lr_schedule == "warmup_stable_decay" and not (
                1 <= self.decay_iterations <= self.iterations - self.warmup_iterations):
            raise ValueError(f"warmup_stable_decay needs 1 <= decay_iterations <= iterations - warmup_iterations "
                             f"({self.iterations - self.warmup_iterations}); got {self.decay_iterations}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive; got {self.temperature}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0; got {self.kl_coef}")
        if self.update_dtype not in UPDATE_DTYPES:
            raise ValueError(f"update_dtype must be one of {', '.join(UPDATE_DTYPES)}; got {self.update_dtype!r}")
        if self.train_top_layers is not None and self.train_top_layers < 1:
            raise ValueError(f"train_top_layers must be at least 1 (or None); got {self.train_top_layers}")
        if self.train_seeds is not None and self.train_seeds < 1:
            raise ValueError(f"train_seeds must be at least 1 (or None); got {self.train_seeds}")
        if self.validate_every < 0 or (self.validate_every and self.validation_episodes < 1):
            raise ValueError(f"validate_every must be >= 0 and validation_episodes >= 1; got {self.validate_every} "
                             f"and {self.validation_episodes}")
        if self.validate_every and self.validation_first_seed + self.validation_episodes > self.first_seed:
            raise ValueError(f"validation seeds {self.validation_first_seed}-{self.validation_first_seed + self.validation_episodes - 1} "
                             f"reach the training seeds (from {self.first_seed} up): validation_first_seed must be lower")

"""One RL run's bookkeeping and the plumbing below every algorithm (chapters 5-7, 10).

An algorithm (:class:`~tutorial_lib.rl.reinforce.Reinforce`, :class:`~tutorial_lib.rl.ppo.PPO`) has
one shape, :class:`Algorithm`: an ``optimizer``, ``modules()`` and ``state_dict()`` to checkpoint,
and ``update(rollout)``. Both loops read the same:

    run = Run(policy, game, settings, out_dir="runs/ppo-ttt")   # seeds torch
    ppo = PPO(policy, settings)                                  # fresh modules from the run's seed
    run.restore(ppo)                                             # a resumed run: its checkpoint
    for _ in run.iterations():
        rollout = run.collect()                                  # turns from fresh seeds, the current policy
        metrics = ppo.update(rollout)                            # the algorithm: advantages, loss, steps
        run.end_iteration(metrics, ppo)                          # log; checkpoint when it is time
    result = run.finish(ppo)                                     # the model in out_dir/model

With ``validate_every`` the run also plays held-out greedy games before the first iteration and
every few iterations, and its model is the best weights it passed through, the start included
(:mod:`~tutorial_lib.rl.validation`: early stopping on a validation set, as in supervised learning).

:class:`Run` seeds, collects ``turns_per_iteration`` turns from fresh training seeds, logs
(``metrics.csv``, TensorBoard, a progress bar) and checkpoints everything the next iteration reads,
so that ``resume=True`` (or ``stage=(i, n)`` over notebook cells) continues exactly. The functions
below it are what both algorithms' updates share with several processes (``accelerate launch``,
:mod:`tutorial_lib.runtime.distributed`): the whole batch's episodes, global token counts, one
shuffled minibatch order, and a step whose gradients are summed over the processes. In one
process each is the plain computation.
"""

from __future__ import annotations

import copy
import json
import math
import time
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from tutorial_lib.lm.engine import SamplingWeights
from tutorial_lib.rl.rollout import Rollout, TurnBatch, action_logprobs, collect
from tutorial_lib.rl.validation import Validation
from tutorial_lib.runtime import distributed, durable
from tutorial_lib.runtime.cpu_threads import fit_threads
from tutorial_lib.runtime.progress import progress_bar, quiet_transformers
from tutorial_lib.runtime.tracking import (
    MetricsLog,
    has_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)

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
    #: then a linear fall over the last ``decay_iterations`` (:func:`lr_multiplier`). A constant rate
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
    #: memory instead (:func:`microbatch_size`): ``microbatch_turns`` is then ignored
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
        if self.train_seeds is not None and self.train_seeds < 1:
            raise ValueError(f"train_seeds must be at least 1 (or None); got {self.train_seeds}")
        if self.validate_every < 0 or (self.validate_every and self.validation_episodes < 1):
            raise ValueError(f"validate_every must be >= 0 and validation_episodes >= 1; got {self.validate_every} "
                             f"and {self.validation_episodes}")
        if self.validate_every and self.validation_first_seed + self.validation_episodes > self.first_seed:
            raise ValueError(f"validation seeds {self.validation_first_seed}-{self.validation_first_seed + self.validation_episodes - 1} "
                             f"reach the training seeds (from {self.first_seed} up): validation_first_seed must be lower")


def update_precision(settings: RLSettings, model) -> AbstractContextManager:
    """The context an update runs in (``settings.update_dtype``): nothing for float32, else autocast
    to bfloat16 on the model's device. Matrix products then run in bfloat16 and reductions such as
    the log-softmax in float32 (autocast's own lists); the gradients reach float32 weights."""
    if settings.update_dtype == "float32":
        return nullcontext()
    return torch.autocast(next(model.parameters()).device.type, dtype=UPDATE_DTYPES[settings.update_dtype])


def microbatch_size(settings: RLSettings, model, batch) -> int:
    """Turns per forward/backward pass of an update of ``batch`` (a :class:`~tutorial_lib.rl.rollout.TurnBatch`):
    ``settings.microbatch_turns``, or with ``settings.size_to_device`` on an accelerator as many as
    its free memory holds (:func:`~tutorial_lib.runtime.memory_plan.plan_training`). Changes nothing:
    :func:`checkpoint_if_needed` is what switches checkpointing on."""
    plan = update_plan(settings, model, batch)
    return settings.microbatch_turns if plan is None else plan.micro_batch


class MicroBatches:
    """One run's micro-batch sizes: :func:`microbatch_size`'s, scaled down for the rest of the run
    each time the device runs out of memory. The memory plan is an estimate (and the written
    ``microbatch_turns`` a guess for some device): an update that does not fit is redone with half
    the turns per pass instead of ending the run. Gradients add up over the passes of one update, so
    the update is the same at any size."""

    def __init__(self, settings: RLSettings, model):
        self.settings, self.model, self.scale = settings, model, 1.0

    def size(self, batch) -> int:
        """Turns per forward/backward pass for ``batch``."""
        return max(1, int(microbatch_size(self.settings, self.model, batch) * self.scale))

    def run(self, batch, passes):
        """``passes(size)`` with this run's size for ``batch``; if the device runs out of memory,
        free what the failed try held, halve the size and run ``passes`` again, down to one turn a
        pass (then the error stands). ``passes`` starts by zeroing the gradients, so a try that
        failed half-way leaves nothing behind."""
        while True:
            size = self.size(batch)
            try:
                return passes(size)
            except torch.OutOfMemoryError:
                if size == 1:
                    raise
            # out of the ``except`` block, the failed try's tensors (held by the traceback) are free
            release_device_memory(self.model)
            self.scale *= (size // 2) / size
            warnings.warn(f"out of memory at {size} turns a pass: {self.size(batch)} from now on", stacklevel=2)


def release_device_memory(model) -> None:
    """Hand the allocator's cached blocks back after a failed pass (on CUDA; a CPU has no cache)."""
    import gc

    gc.collect()
    if next(model.parameters()).device.type == "cuda":
        torch.cuda.empty_cache()


def checkpoint_if_needed(settings: RLSettings, model, batch) -> None:
    """Switch activation checkpointing on in ``model`` when, sized to the device, not even one turn
    of ``batch`` fits without it (never off again: a later, shorter batch would fit either way)."""
    from tutorial_lib.lm.lm_parts import checkpoint_activations

    plan = update_plan(settings, model, batch)
    if plan is not None and plan.checkpointing:
        checkpoint_activations(model)


def update_plan(settings: RLSettings, model, batch):
    """The memory plan of an update of ``batch`` with ``settings.size_to_device`` on an accelerator,
    else ``None`` (a CPU keeps the written ``microbatch_turns``)."""
    from tutorial_lib.runtime.memory_plan import plan_training, sizes_by_memory

    if not settings.size_to_device or not sizes_by_memory(model):
        return None
    longest = max(len(t.prompt_ids) + len(t.action_ids) for t in batch.turns)
    scored = max(len(t.action_ids) for t in batch.turns) + 1
    return plan_training(model, examples_per_step=len(batch), tokens_per_example=longest, scored_tokens=scored,
                         divides=False)


class Algorithm(Protocol):
    """What :class:`Run` needs of an RL algorithm (REINFORCE's and PPO's shape)."""

    #: the name in the progress bar and ``rl_settings.json``
    name: str
    #: every trainable parameter's optimiser (checkpointed with the weights)
    optimizer: torch.optim.Optimizer

    def update(self, rollout: Rollout) -> dict[str, float]:
        """Learn from this process's share of the iteration's episodes; return the metrics to log."""

    def modules(self) -> dict[str, torch.nn.Module]:
        """Modules beside the policy (a value head), checkpointed and saved with the model."""

    def state_dict(self) -> dict[str, Any]:
        """Anything else the next iteration reads (a learning-rate schedule)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class RLResult:
    out_dir: Path
    #: one dict of metrics per iteration (also in ``out_dir/metrics.csv`` and TensorBoard)
    history: list[dict[str, float]]
    seconds: float
    #: the algorithm that trained (its optimiser, and modules such as PPO's value model)
    algorithm: Algorithm | None = None
    #: ``False`` for a part of a staged run (``stage=(i, n)``, i < n): checkpointed, no model saved yet
    finished: bool = True
    #: with ``validate_every``: the validation scores by iteration and the one chosen as the model
    #: (:meth:`~tutorial_lib.rl.validation.Validation.summary`; also ``out_dir/validation.json``)
    validation: dict[str, Any] | None = None

    def curve(self, key: str) -> list[float]:
        return [row[key] for row in self.history if key in row]


def sampler_kl_sums(log_ratio: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """Two estimators of KL(sampler || trainer), summed over the masked action tokens.

    ``log_ratio`` is log pi_trainer - log pi_sampler on the sampler's own tokens (Schulman,
    "Approximating KL divergence", 2020): k1 = E[-log r] is unbiased but noisy and can go negative;
    k3 = E[r - 1 - log r] is unbiased and never negative. Both ~0 when the sampler is the policy.
    """
    with torch.no_grad():
        k1 = float((-log_ratio)[mask].sum())
        k3 = float((log_ratio.exp() - 1 - log_ratio)[mask].sum())
    return k1, k3


def frozen_reference(settings: RLSettings, model) -> torch.nn.Module | None:
    """The reference a KL penalty holds the policy near: a frozen copy of ``model`` as it is now
    (the run's start: a resumed run loads its checkpoint into the policy after this copy), or
    ``None`` when ``settings.kl_coef`` is 0.

    A LoRA model's copy has its adapters merged into plain layers (the sampler's
    :class:`~tutorial_lib.lm.engine.SamplingWeights`): the reference never trains, so it need not
    carry the adapters' extra products through every forward pass."""
    if settings.kl_coef <= 0:
        return None
    merged = SamplingWeights(model)
    if merged.mergeable:
        return merged.model()  # a new frozen copy, W + BA once; the policy's own weights untouched
    return copy.deepcopy(model).eval().requires_grad_(False)


def reference_kl(reference: torch.nn.Module, inputs: dict[str, torch.Tensor], logprobs: torch.Tensor,
                 mask: torch.Tensor, temperature: float) -> torch.Tensor:
    """Per turn (a :func:`~tutorial_lib.rl.rollout.collate_turns` batch's rows), the sum over its
    action tokens of ``log pi - log pi_ref``: the k1 estimate of KL(pi || pi_ref) on the sampled
    tokens, which the penalty takes from the turn's reward. ``logprobs`` and ``mask`` are
    (turns, tokens) as :func:`~tutorial_lib.rl.rollout.action_logprobs` returns them."""
    with torch.no_grad():
        ref = action_logprobs(reference, inputs, temperature=temperature).logprobs
        return ((logprobs.to(ref.device) - ref) * mask.to(ref.device)).sum(1).float().cpu()


def clip_and_step(optimizer: torch.optim.Optimizer, max_grad_norm: float, finite_loss: bool = True) -> tuple[float, float]:
    """Clip the gradient of ``optimizer``'s parameters and step, unless the loss or the gradient is
    not finite: such a step would ruin the weights for good, so it is skipped and counted.
    Returns (gradient norm, 1.0 if skipped else 0.0)."""
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable_parameters(optimizer), max_grad_norm) if finite_loss else torch.tensor(float("nan"))
    if finite_loss and torch.isfinite(grad_norm):
        optimizer.step()
        return float(grad_norm), 0.0
    optimizer.zero_grad(set_to_none=True)
    # counted in the metrics too; said here because a run whose every step is skipped learns nothing
    # while its curves still look like a run's (it happened: benchmarks/results/small_preset_chapters_cpu.md)
    warnings.warn("an optimiser step was skipped: its loss or gradient was not finite (the run's "
                  "'skipped_steps' / 'skipped_step' metric counts them)", RuntimeWarning, stacklevel=2)
    return float(grad_norm), 1.0


def trainable_parameters(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    """Every parameter ``optimizer`` steps, over its groups."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def masked_log_ratio(logprobs: torch.Tensor, reference_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log pi - log pi_reference`` per action token, 0 outside ``mask`` (padding compares nothing)."""
    return (logprobs - reference_logprobs).masked_fill(~mask, 0.0)


def whole_batch(rollout: Rollout) -> Rollout:
    """Every process's episodes of this iteration, in rank order (one process: ``rollout`` itself):
    what a statistic over the batch is taken over. Gathered once per rollout: the loop's metrics and
    the algorithm's advantages ask for it, and every process asks the same number of times."""
    if not distributed.launched():
        return rollout
    if rollout.everyone is None:
        records = distributed.gather([rollout.records])
        rollout.everyone = Rollout([r for part in records for r in part], max(distributed.gather([rollout.seconds])))
    return rollout.everyone


def global_token_count(batch: TurnBatch) -> int:
    """The action tokens of every process's part of ``batch``: what a per-token mean divides by."""
    return int(distributed.sum_over_processes(batch.action_tokens))


def shared_minibatches(batch: TurnBatch, minibatch_turns: int) -> Iterator[tuple[TurnBatch | None, int, int]]:
    """One epoch of shuffled minibatches of the whole batch: ``(this process's turns of it or None,
    its action tokens over all processes, its turns over all processes)``.

    The order is drawn from the global generator (checkpointed with the run) by the main process
    and shared, so a minibatch is the same turns it would be in one process; each process computes
    the part it holds.
    """
    turn_tokens, own = distributed.gather_values(batch.action_mask.sum(1))  # every turn's tokens
    order = distributed.broadcast(torch.randperm(len(turn_tokens)))
    for rows in order.split(minibatch_turns):
        mine = rows[(rows >= own.start) & (rows < own.stop)] - own.start  # one process: all rows
        yield (batch.select(mine) if len(mine) else None), int(turn_tokens[rows].sum()), len(rows)


def synchronised_step(optimizer: torch.optim.Optimizer, max_grad_norm: float, finite_loss: bool = True) -> tuple[float, float]:
    """The optimiser step every process takes alike: skipped everywhere if one process's loss was
    not finite, else the gradients summed over the processes (each loss is already divided by the
    global token count), clipped and stepped (:func:`clip_and_step`)."""
    finite_loss = distributed.all_true(finite_loss)
    if finite_loss:
        distributed.sum_gradients(trainable_parameters(optimizer))
    return clip_and_step(optimizer, max_grad_norm, finite_loss=finite_loss)


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


def lr_schedule(optimizer: torch.optim.Optimizer, settings: RLSettings) -> torch.optim.lr_scheduler.LambdaLR:
    """``settings.lr_schedule`` over ``optimizer``'s learning rates, one :func:`step_schedule` per iteration."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda iteration: lr_multiplier(iteration, settings))


def step_schedule(scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    """Move a learning-rate schedule on; quietly when every optimiser step was skipped (torch then
    warns that the schedule stepped before the optimiser)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
        scheduler.step()


def rollout_metrics(rollout: Rollout) -> dict[str, float]:
    """What every algorithm logs about its batch: returns, outcomes, sizes."""
    summary = rollout.summary()
    keep = ["episodes", "mean_return", "success_rate", "invalid_rate", "truncated_rate", "turns", "action_tokens",
            "win_rate", "draw_rate", "loss_rate", "accuracy", "format_accuracy", "mean_score"]
    metrics = {key: float(summary[key]) for key in keep if key in summary}
    metrics["turns_per_episode"] = float(summary["mean_steps"])
    return metrics


def write_run_settings(out_dir: Path, game: str, algo: str, settings) -> None:
    """``out_dir/rl_settings.json``: the game, the algorithm and every setting of the run (and the
    number of processes, when several ran it)."""
    processes = {"processes": distributed.num_processes()} if distributed.launched() else {}
    durable.write_text(out_dir / "rl_settings.json",
        json.dumps({"game": game, "algo": algo, **processes, **asdict(settings)}, indent=1, default=str))


def warn_if_schedule_changed(out_dir: Path, settings: RLSettings, done: int) -> None:
    """Warn when a run is resumed with another number of iterations under a learning-rate schedule
    that spans the run (``warmup_cosine``, ``warmup_stable_decay``): its first ``done`` iterations
    followed the schedule of the shorter or longer run, so the result is not the run of
    ``settings.iterations`` begun afresh (a constant rate, or a resume with the same iterations after
    an interruption, continues exactly)."""
    path = out_dir / "rl_settings.json"
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # a run from before rl_settings.json, or one never written: nothing to compare
    was, now = before.get("iterations"), settings.iterations
    schedules = {before.get("lr_schedule", "constant"), settings.lr_schedule}
    if was is not None and was != now and schedules != {"constant"}:
        warnings.warn(f"resuming a run of {was} iterations as one of {now}: its learning-rate schedule "
                      f"({settings.lr_schedule}) spans the run, so its first {done} iterations followed the "
                      f"schedule of a {was}-iteration run; the result is not the {now}-iteration run begun afresh",
                      stacklevel=3)


def run_progress_bar(algo: str, game: str, *, token_budget: int | None, steps: int, done_steps: int,
                     history: list[dict[str, float]], progress: bool):
    """A run's bar: sampled action tokens against the budget when there is one (the number of steps
    is then not known in advance), steps otherwise; a resumed run's bar starts where it stopped."""
    budgeted = token_budget is not None
    spent = min(sum(row.get("action_tokens", 0) for row in history), token_budget) if budgeted else 0
    return progress_bar(desc=f"{algo} {game}", disable=not progress, unit=" tokens" if budgeted else "it",
                        total=token_budget if budgeted else steps, initial=spent if budgeted else done_steps)


def save_final_model(policy, out_dir: Path, modules: dict[str, torch.nn.Module] | None = None) -> None:
    """The trained model and its tokenizer in ``out_dir/model`` (what ``load_policy`` and the CLI's
    ``evaluate --policy`` read), with extra modules (a value head) beside them as ``<name>.pt``.
    Written by the main process, whole (a crash leaves the older model or this one); the others wait
    until it is there."""
    if not distributed.is_main():
        distributed.wait_for_everyone()
        return
    with durable.building(out_dir / "model") as staging:
        with quiet_transformers():  # a bar for a file of a few MB would be the chapter's noise
            policy.model.save_pretrained(staging)
        policy.tokenizer.save_pretrained(staging)
        for name, module in (modules or {}).items():
            torch.save(module.state_dict(), staging / f"{name}.pt")
    distributed.wait_for_everyone()


def decorrelate(policy, seed: int) -> None:
    """Give a process other than the main one its own random stream (and its policy's, if seeded)."""
    rank = distributed.process_index()
    torch.manual_seed(seed + 1_000_003 * rank)
    if getattr(policy, "seed", None) is not None:
        policy.seed += 1_000_003 * rank


def restore_process_rng(saved: dict[str, Any], out_dir: Path) -> None:
    """After :func:`~tutorial_lib.runtime.tracking.load_checkpoint` (which restored the main process's
    generators): this process's own, from a checkpoint written by as many processes."""
    streams = saved.get("process_rng")
    written_by = len(streams) if streams else 1
    if written_by != distributed.num_processes():
        raise ValueError(f"the checkpoint in {out_dir} was written by {written_by} process(es); resume it with as "
                         f"many (now {distributed.num_processes()}): each process's random state is in it")
    if streams:
        set_rng_state(streams[distributed.process_index()])


class Run:
    """One RL run in ``out_dir``: seeding, resuming, collecting, logging, checkpointing, the final
    model. The algorithm's loop calls it (see the module docstring); it calls nothing back.

    ``settings`` is an :class:`RLSettings` (an algorithm's subclass). ``stage=(i, n)`` runs only the
    i-th of n equal parts of the iterations, so that a long run fits in several notebook cells: part
    i < n ends at a checkpoint (not a saved model), and part i + 1 resumes from it, exactly (the
    schedule still spans all ``settings.iterations``).
    """

    def __init__(self, policy, game: str, settings: RLSettings, *, out_dir: str | Path,
                 resume: bool = False, progress: bool = True, stage: tuple[int, int] = (1, 1)):
        part, parts = stage
        if not 1 <= part <= parts:
            raise ValueError(f"stage must be (i, n) with 1 <= i <= n; got {stage}")
        self.policy, self.game, self.settings = policy, game, settings
        self.part, self.parts, self.progress = part, parts, progress
        self.resume = resume or part > 1
        self.stop = round(settings.iterations * part / parts)
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.start, self.next_seed = 0, settings.first_seed
        self.validation = Validation(game, settings) if settings.validate_every else None
        # before the algorithm builds its modules: a fresh value head is the same in every run with this seed
        torch.manual_seed(settings.seed)

    def restore(self, algorithm: Algorithm) -> None:
        """Once the algorithm exists: a resumed run loads its checkpoint into it (the weights, the
        optimiser, its modules and state, the random generators, the next seed). Opens the metrics
        log and the progress bar."""
        if self.resume:
            # the newest complete checkpoint, after a crash in the middle of writing one
            if not has_checkpoint(self.out_dir / "checkpoint"):
                raise FileNotFoundError(f"nothing to resume in {self.out_dir}: no checkpoint" +
                                        (f" (run stage {self.part - 1} of {self.parts} first)" if self.part > 1 else ""))
            self.start, saved = load_checkpoint(self.out_dir / "checkpoint", self.policy.model, algorithm.optimizer,
                                                modules=algorithm.modules())
            self.next_seed = saved["next_seed"]
            algorithm.load_state_dict(saved.get("algorithm", {}))
            restore_process_rng(saved, self.out_dir)
            if self.validation is not None:
                self.validation.load_state_dict(saved.get("validation", {}))
        elif distributed.process_index() > 0:
            # the modules are built (the same in every process); from here on each process samples
            # its own stream, not a copy of the main one's
            decorrelate(self.policy, self.settings.seed)
        main = distributed.is_main()
        if main:
            if self.resume:
                warn_if_schedule_changed(self.out_dir, self.settings, self.start)
            write_run_settings(self.out_dir, self.game, algorithm.name, self.settings)
        self.log = MetricsLog(self.out_dir, resume_from=self.start if self.resume else None, files=main)
        self.history = list(self.log.rows)
        self.began = time.perf_counter()
        # with a token budget the bar counts sampled tokens (the number of iterations is not known)
        budget = self.settings.token_budget
        self.spent = sum(row.get("action_tokens", 0) for row in self.history)
        self.bar = run_progress_bar(algorithm.name, self.game, token_budget=budget, steps=self.settings.iterations,
                                    done_steps=self.start, history=self.history, progress=self.progress and main)
        self.over_budget = budget is not None and self.spent >= budget  # a resumed part after the budget ran out
        if self.validation is not None and not self.validation.scores:
            # the start (or, for a run begun without validation, the weights it resumes with) is a candidate too
            score = self.validation.consider(self.start, self.policy, algorithm.modules())
            self.bar.set_postfix(val=f"{score:.2f}", refresh=False)

    def iterations(self):
        """The iterations this part of the run trains, stopping once the token budget is spent;
        closes the log and the bar when the loop ends (or fails)."""
        try:
            for iteration in range(self.start, self.stop if not self.over_budget else self.start):
                self.iteration, self.tick = iteration, time.perf_counter()
                yield iteration
                if self.over_budget:
                    break
        finally:
            self.bar.close()
            self.log.close()

    def collect(self) -> Rollout:
        """This iteration's turns, played by the current policy from the next training seeds (this
        process's share of them, when several processes run; :attr:`batch` is everyone's)."""
        settings = self.settings
        n, rank = distributed.num_processes(), distributed.process_index()
        turns = distributed.share(settings.turns_per_iteration)
        if turns < 1:
            raise ValueError(f"turns_per_iteration ({settings.turns_per_iteration}) must be at least the number "
                             f"of processes ({n})")
        # process r plays seeds next_seed + r, + r + n, + r + 2n...: disjoint, and one process plays them all
        seeds = range(self.next_seed + rank, self.next_seed + n * turns + rank, n)  # >= one turn per episode
        if settings.train_seeds is not None:  # a fixed training split, cycled through
            seeds = [settings.first_seed + (s - settings.first_seed) % settings.train_seeds for s in seeds]
        rollout = collect(self.policy, self.game, seeds, env_options=settings.env_options,
                          num_envs=settings.num_envs, turn_budget=turns, sampling=settings.sampling,
                          temperature=None if settings.temperature == 1 else settings.temperature)
        self.sampled = time.perf_counter()
        #: the whole iteration's rollout, every process's episodes in rank order
        self.batch = whole_batch(rollout)
        self.next_seed += n * max(distributed.gather([len(rollout.records)]))  # past every process's last seed
        self.metrics = rollout_metrics(self.batch)  # what the batch was, before the update sees it
        fit_threads()
        return rollout

    def end_iteration(self, update_metrics: dict[str, float], algorithm: Algorithm) -> dict[str, float]:
        """Log the collected batch's and the update's metrics; checkpoint when it is time (the
        algorithm's optimiser, modules and state with the weights). Returns the metrics."""
        settings, iteration = self.settings, self.iteration
        metrics = {**self.metrics, **update_metrics}
        metrics["sample_seconds"] = self.sampled - self.tick
        metrics["train_seconds"] = time.perf_counter() - self.sampled
        budget = settings.token_budget
        self.spent += metrics["action_tokens"]
        over_budget = budget is not None and self.spent >= budget
        postfix = {"ret": f"{metrics['mean_return']:.2f}", "success": f"{metrics['success_rate']:.2f}"}
        if self.validation is not None and self.validation.due(iteration + 1, last=iteration + 1 == settings.iterations or over_budget):
            began = time.perf_counter()
            score = self.validation.consider(iteration + 1, self.policy, algorithm.modules())
            metrics[f"validation_{settings.validation_metric}"] = score
            metrics["validation_seconds"] = time.perf_counter() - began
            postfix["val"] = f"{score:.2f}"
        self.log.write(iteration + 1, metrics)
        self.history.append({"step": iteration + 1, **metrics})
        # refresh=False: a postfix must not redraw the bar (in the book every redraw is a line)
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(min(metrics["action_tokens"], budget - self.bar.n) if budget is not None else 1)
        self.over_budget = over_budget
        if (iteration + 1) % settings.save_every == 0 or iteration + 1 in (self.stop, settings.iterations) or self.over_budget:
            saved = {"next_seed": self.next_seed, "algorithm": algorithm.state_dict()}
            if self.validation is not None:  # the scores so far and the best weights: one whole checkpoint
                saved["validation"] = self.validation.state_dict()
            if distributed.launched():  # every process's generators: a resumed run samples what this one would have
                saved["process_rng"] = distributed.gather([rng_state()])
            if distributed.is_main():
                save_checkpoint(self.out_dir / "checkpoint", self.policy.model, algorithm.optimizer, step=iteration + 1,
                                state=saved, modules=algorithm.modules())
            distributed.wait_for_everyone()  # no process runs ahead of a checkpoint it may resume from
        return metrics

    def finish(self, algorithm: Algorithm) -> RLResult:
        """The run's result; the final model (the algorithm's modules beside it) once the last part has run."""
        self.policy.model.eval()
        seconds = time.perf_counter() - self.began
        if self.part < self.parts and not self.over_budget:  # a part: the next part resumes from its checkpoint
            return RLResult(self.out_dir, self.history, seconds, algorithm, finished=False)
        chosen = None
        if self.validation is not None:
            self.validation.restore_best(self.policy, algorithm.modules())
            chosen = self.validation.summary()
            if distributed.is_main():
                durable.write_text(self.out_dir / "validation.json", json.dumps(chosen, indent=1))
        save_final_model(self.policy, self.out_dir, algorithm.modules())
        return RLResult(self.out_dir, self.history, seconds, algorithm, validation=chosen)

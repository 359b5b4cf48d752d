"""REINFORCE with a baseline per state, for multi-turn text games (chapter 5).

    policy = sft_policy("tictactoe", preset)                 # or load_policy("tiny")
    result = train_reinforce(policy, "tictactoe", ReinforceSettings(iterations=30), out_dir="runs/rl-ttt")
    result.history[-1]                                       # the last iteration's metrics

Holds the algorithm and nothing else: :class:`Reinforce` has the same shape as
:class:`~tutorial_lib.rl.ppo.PPO` (``optimizer``, ``modules()``, ``state_dict()``, ``prepare``,
``update``), and :func:`train_reinforce` is the loop of :mod:`tutorial_lib.rl.rl_loop` around it.
Each iteration collects turns, credits each with its discounted return less a baseline
(:func:`turn_advantages`), and takes one optimiser step on :func:`policy_gradient_loss`. Chapter 5
derives it; chapter 10 shows why its statistics are the whole batch's when several processes run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tutorial_lib.rl.advantages import batch_returns, rebn, rebn_by_state
from tutorial_lib.rl.rl_loop import (
    MicroBatches,
    RLResult,
    RLSettings,
    Run,
    checkpoint_if_needed,
    frozen_reference,
    global_token_count,
    lr_schedule,
    masked_log_ratio,
    reference_kl,
    sampler_kl_sums,
    step_schedule,
    synchronised_step,
    update_precision,
    whole_batch,
)
from tutorial_lib.rl.rollout import Rollout, TurnBatch, action_logprobs
from tutorial_lib.runtime import distributed

NORMALISATIONS = ("rebn_state", "rebn", "none")


@dataclass
class ReinforceSettings(RLSettings):
    """Settings of a REINFORCE run: the loop's (:class:`~tutorial_lib.rl.rl_loop.RLSettings`) and how
    returns become advantages. Defaults suit the tiny model on a CPU (chapter 5)."""

    #: discount per turn
    gamma: float = 0.9
    #: how returns become advantages: ``"rebn_state"`` (baseline per recurring state, then the
    #: batch's scale: :func:`~tutorial_lib.rl.advantages.rebn_by_state`), ``"rebn"`` (GEM's: the
    #: batch mean and std for every turn) or ``"none"`` (raw returns)
    normalise: str = "rebn_state"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.normalise not in NORMALISATIONS:
            raise ValueError(f"normalise must be one of {', '.join(NORMALISATIONS)}; got {self.normalise!r}")
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"gamma must be in [0, 1]; got {self.gamma}")


def turn_advantages(rollout: Rollout, gamma: float, normalise: str,
                    penalties: Sequence[float] | None = None) -> list[float]:
    """One advantage per turn of ``rollout.turns`` (same order): discounted return, then the
    baseline and scale ``normalise`` names. ``penalties`` (one per turn, same order) are taken from
    the turns' rewards first: the KL penalty to the reference."""
    if normalise not in NORMALISATIONS:
        raise ValueError(f"normalise must be one of {', '.join(NORMALISATIONS)}; got {normalise!r}")
    rewards = [list(record.rewards) for record in rollout.records]
    if penalties is not None:
        if len(penalties) != len(rollout.turns):
            raise ValueError(f"{len(penalties)} penalties for {len(rollout.turns)} turns")
        for turn, penalty in zip(rollout.turns, penalties):
            rewards[turn.episode][turn.turn] -= penalty
    returns = batch_returns(rewards, gamma)
    if normalise == "rebn":
        returns = rebn(returns)
    elif normalise == "rebn_state":
        states: list[list[tuple[int, ...]]] = [[] for _ in rollout.records]
        for turn in rollout.turns:  # the state is what the policy read: the prompt's tokens
            states[turn.episode].append(tuple(turn.prompt_ids))
        returns = rebn_by_state(returns, states)
    return [g for episode in returns for g in episode]


def policy_gradient_loss(
    logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    num_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE's loss with importance sampling, summed over the masked action tokens and divided by
    ``num_tokens`` (the batch's, so micro-batches add up to the batch mean); and the log-ratios.

    ``- ratio * A`` per token, ``ratio = pi_theta / pi_sampler``: 1 at the weights that sampled,
    where its gradient is the plain ``- A grad log pi``. ``advantages`` broadcasts against the
    (turns, tokens) log-probs: one per row gives each turn's advantage to its own tokens.
    """
    log_ratio = masked_log_ratio(logprobs, sampler_logprobs, mask)
    loss = -(log_ratio.exp() * advantages * mask).sum() / num_tokens
    return loss, log_ratio


class Reinforce:
    """REINFORCE's state between iterations (the policy and one optimiser) and its update;
    :func:`train_reinforce` is the loop around it."""

    name = "REINFORCE"

    def __init__(self, policy, settings: ReinforceSettings):
        self.policy, self.settings = policy, settings
        self.optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad],
                                           lr=settings.learning_rate, betas=settings.adam_betas, weight_decay=0.0)
        self.scheduler = lr_schedule(self.optimizer, settings)
        self.micro_batches = MicroBatches(settings, policy.model)
        self.reference = frozen_reference(settings, policy.model)  # with kl_coef > 0: the starting policy

    def modules(self) -> dict[str, torch.nn.Module]:
        return {}  # nothing beside the policy (the reference is the start, made again on resume)

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scheduler" in state:  # a checkpoint from before REINFORCE had a schedule: constant
            self.scheduler.load_state_dict(state["scheduler"])

    def prepare(self, rollout: Rollout) -> TurnBatch:
        """This process's turns as a :class:`TurnBatch`, each with its advantage: returns, baseline
        and scale taken over every process's episodes (:func:`~tutorial_lib.rl.rl_loop.whole_batch`),
        from rewards less the KL penalty to the reference when ``kl_coef`` > 0."""
        settings = self.settings
        first, _ = distributed.offsets(len(rollout.turns))  # where this process's turns start
        batch = TurnBatch.of(rollout.turns, self.policy.tokenizer.pad_token_id)
        penalties = None
        if self.reference is not None:
            everyone, _ = distributed.gather_values(self.reference_kl(batch))  # every process's turns, rank order
            penalties = (settings.kl_coef * everyone).tolist()
            self.last_kl_ref = float(everyone.double().sum())
        advantages = turn_advantages(whole_batch(rollout), settings.gamma, settings.normalise,
                                     penalties)[first : first + len(rollout.turns)]
        batch.advantages = torch.tensor(advantages, dtype=torch.float32)
        return batch

    @torch.no_grad()
    def reference_kl(self, batch: TurnBatch) -> torch.Tensor:
        """Per turn of ``batch``, the sum over its action tokens of ``log pi_sampler - log pi_ref``
        (the sampler is the policy as it is now: REINFORCE samples, then steps once)."""
        kl = torch.zeros(len(batch))

        def passes(size: int) -> None:
            for rows in batch.microbatch_rows(size):
                micro = batch.select(rows)
                kl[rows] = reference_kl(self.reference, micro.model_inputs(), micro.sampler_logprobs,
                                        micro.action_mask, self.settings.temperature)

        self.micro_batches.run(batch, passes)
        return kl

    def update(self, rollout: Rollout) -> dict[str, float]:
        """One REINFORCE update on ``rollout``: :meth:`prepare` it, then one optimiser step; the
        learning-rate schedule moves once per iteration."""
        with update_precision(self.settings, self.policy.model):  # float32, or bfloat16 autocast
            batch = self.prepare(rollout)
            metrics = self.step(batch)
        if self.reference is not None:  # per action token of the whole batch, as PPO logs it
            metrics["kl_ref"] = self.last_kl_ref / global_token_count(batch)
        step_schedule(self.scheduler)
        return metrics

    def step(self, batch: TurnBatch) -> dict[str, float]:
        """One optimiser step over ``batch`` (its ``advantages`` set); returns its metrics."""
        settings, model = self.settings, self.policy.model
        if batch.advantages is None:
            raise ValueError("the batch has no advantages: TurnBatch.of(turns, pad_token_id, advantages=...)")
        tokens = global_token_count(batch)  # the loss is a mean over every process's action tokens
        if tokens == 0:
            raise ValueError("no action tokens to train on")
        model.train()
        checkpoint_if_needed(settings, model, batch)

        def passes(size: int) -> dict[str, float]:  # forward and backward in micro-batches: memory, not maths
            self.optimizer.zero_grad(set_to_none=True)
            stats = dict.fromkeys(("loss", "entropy", "kl_k1", "kl_k3", "ratio"), 0.0)
            for micro in batch.split(size):
                scores = action_logprobs(model, micro.model_inputs(), with_entropy=True, temperature=settings.temperature)
                micro = micro.to(scores.logprobs.device)
                mask = micro.action_mask  # (turns, A)
                loss, log_ratio = policy_gradient_loss(
                    scores.logprobs, micro.sampler_logprobs, micro.advantages.unsqueeze(1), mask, tokens)
                loss.backward()  # gradients add up over the micro-batches into one step
                with torch.no_grad():
                    stats["loss"] += float(loss)
                    stats["entropy"] += float(scores.entropy[mask].sum())
                    k1, k3 = sampler_kl_sums(log_ratio, mask)
                    stats["kl_k1"] += k1
                    stats["kl_k3"] += k3
                    stats["ratio"] += float(log_ratio.exp()[mask].sum())
            return stats

        stats = self.micro_batches.run(batch, passes)
        grad_norm, skipped = synchronised_step(self.optimizer, settings.max_grad_norm)
        stats = distributed.sum_metrics(stats)
        return {
            "loss": stats["loss"],
            "entropy": stats["entropy"] / tokens,
            "kl_k1": stats["kl_k1"] / tokens,
            "kl_k3": stats["kl_k3"] / tokens,
            "mean_ratio": stats["ratio"] / tokens,
            "grad_norm": grad_norm,
            "skipped_step": skipped,
        }


def train_reinforce(
    policy,
    game: str,
    settings: ReinforceSettings | None = None,
    *,
    out_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    stage: tuple[int, int] = (1, 1),
) -> RLResult:
    """Train ``policy`` in place with REINFORCE on ``game``; logs, checkpoints and the final model go
    to ``out_dir``. ``resume=True`` continues a stopped run exactly."""
    settings = settings or ReinforceSettings()
    run = Run(policy, game, settings, out_dir=out_dir, resume=resume, progress=progress, stage=stage)
    reinforce = Reinforce(policy, settings)
    run.restore(reinforce)
    for _ in run.iterations():
        rollout = run.collect()  # turns_per_iteration turns from fresh seeds, sampled by the current policy
        metrics = reinforce.update(rollout)  # advantages, then one step
        run.end_iteration(metrics, reinforce)
    return run.finish(reinforce)

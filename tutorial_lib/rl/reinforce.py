"""REINFORCE with a baseline per state, for multi-turn text games (chapter 5).

    policy = sft_policy("tictactoe", preset)                 # or load_policy("tiny")
    result = train(Reinforce, policy, "tictactoe", ReinforceSettings(iterations=30), out_dir="runs/rl-ttt")
    result.history[-1]                                       # the last iteration's metrics

Holds the algorithm and nothing else: :class:`ReinforceSettings`, :func:`turn_advantages` (each
turn's discounted return less a baseline), :func:`policy_gradient_loss` and :class:`Reinforce`,
whose ``update`` reads as :class:`~tutorial_lib.rl.ppo.PPO`'s does: ``prepare`` the rollout (the
advantages, and what to log of them), then ``step`` (losses, backward, the optimiser's step), once
where PPO takes epochs of minibatches. Statistics over the batch are the whole batch's through
:mod:`~tutorial_lib.rl.whole_batch`; this file makes no process call. Imports ``lm`` through
:mod:`~tutorial_lib.rl.rollout`, and ``rl``'s toolkit (``advantages``, ``kl``, ``schedules``,
``settings``, ``update_step``, ``whole_batch``). Chapter 5 derives it; chapter 10 shows why its
statistics are the whole batch's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tutorial_lib.lm.lm_parts import train_top_layers
from tutorial_lib.rl.advantages import batch_returns, rebn, rebn_by_state
from tutorial_lib.rl.kl import frozen_reference, masked_log_ratio, reference_kl, sampler_kl_sums
from tutorial_lib.rl.rollout import Rollout, TurnBatch, action_logprobs
from tutorial_lib.rl.schedules import lr_scheduler, step_schedule
from tutorial_lib.rl.settings import RLSettings
from tutorial_lib.rl.update_step import (
    MetricSums,
    MicroBatches,
    synchronised_step,
    update_precision,
)
from tutorial_lib.rl.whole_batch import gathered, global_sums, global_token_count, own_rows, whole_batch
from tutorial_lib.runtime.device import shape_multiple

NORMALISATIONS = ("rebn_state", "rebn", "none")


@dataclass
class ReinforceSettings(RLSettings):
    """Settings of a REINFORCE run: the loop's (:class:`~tutorial_lib.rl.settings.RLSettings`) and how
    returns become advantages. Defaults suit the tiny model on a CPU (chapter 5)."""

    #: discount per turn
    gamma: float = 0.9
    #: how returns become advantages: ``"rebn_state"`` (baseline per recurring state, then the
    #: batch's scale: :func:`~tutorial_lib.rl.advantages.rebn_by_state`), ``"rebn"`` (GEM's: the
    #: batch mean and std for every turn) or ``"none"`` (raw returns)
    normalise: str = "rebn_state"
    #: score each game's turns in one forward pass, the history they repeat computed once
    #: (:mod:`~tutorial_lib.rl.packed_games`): the same log-probs up to rounding, about half the
    #: tokens of a GuessTheNumber game; micro-batches then hold whole games
    pack_games: bool = False

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
    """REINFORCE's state between iterations (the policy, one optimiser, the learning-rate schedule,
    a frozen reference when ``kl_coef`` > 0) and its update; :func:`~tutorial_lib.rl.rl_loop.train`
    is the loop around it."""

    name = "REINFORCE"
    settings_class = ReinforceSettings

    def __init__(self, policy, settings: ReinforceSettings):
        self.policy, self.settings = policy, settings
        model = policy.model
        self.reference = frozen_reference(settings, model)  # with kl_coef > 0: a frozen copy of the initial policy
        train_top_layers(model, settings.train_top_layers)  # None: every trainable parameter
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                           lr=settings.learning_rate, betas=settings.adam_betas, weight_decay=0.0)
        self.scheduler = lr_scheduler(self.optimizer, settings)
        self.micro_batches = MicroBatches(settings, model)

    def modules(self) -> dict[str, torch.nn.Module]:
        return {}  # nothing beside the policy (the reference is the start, made again on resume)

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scheduler" in state:  # a checkpoint from before REINFORCE had a schedule: constant
            self.scheduler.load_state_dict(state["scheduler"])

    def update(self, rollout: Rollout) -> dict[str, float]:
        """One REINFORCE update on ``rollout``: :meth:`prepare` it, then one optimiser :meth:`step`;
        the learning-rate schedule moves once per iteration. Returns the iteration's metrics."""
        with update_precision(self.settings, self.policy.model):  # float32, or bfloat16 autocast
            batch, info = self.prepare(rollout)
            metrics = self.step(batch)
        step_schedule(self.scheduler)
        return {**metrics, **info}

    def prepare(self, rollout: Rollout) -> tuple[TurnBatch, dict[str, float]]:
        """This process's turns as a :class:`TurnBatch`, each with its advantage (returns, baseline
        and scale taken over the whole batch, from rewards less the KL penalty to the reference when
        ``kl_coef`` > 0), and what to log of it (``kl_ref``, with a reference)."""
        settings = self.settings
        batch = TurnBatch.of(rollout.turns, self.policy.tokenizer.pad_token_id,
                             multiple=shape_multiple(next(self.policy.model.parameters()).device),  # few shapes on XLA
                             packed=settings.pack_games)
        penalties, info = None, {}
        if self.reference is not None:
            ref_kl = gathered(self.reference_kl(batch))  # (T,) every process's turns, in rank order
            penalties = (settings.kl_coef * ref_kl).tolist()
            info["kl_ref"] = float(ref_kl.double().sum()) / max(global_token_count(batch), 1)
        advantages = turn_advantages(whole_batch(rollout), settings.gamma, settings.normalise, penalties)
        batch.advantages = torch.tensor(advantages[own_rows(len(rollout.turns))], dtype=torch.float32)  # (T,)
        return batch, info

    @torch.no_grad()
    def reference_kl(self, batch: TurnBatch) -> torch.Tensor:
        """Per turn of ``batch``, the sum over its action tokens of ``log pi_sampler - log pi_ref``
        (the sampler is the policy as it is now: REINFORCE samples, then steps once)."""
        kl = torch.zeros(len(batch))

        def score_in_micro_batches(size: int) -> None:
            for rows in batch.microbatch_rows(size):
                micro = batch.select(rows)
                kl[rows] = reference_kl(self.reference, micro.model_inputs(), micro.sampler_logprobs,
                                        micro.action_mask, self.settings.temperature)

        self.micro_batches.run(batch, score_in_micro_batches)
        return kl

    def step(self, batch: TurnBatch) -> dict[str, float]:
        """One optimiser step over ``batch`` (its ``advantages`` set): the loss and backward pass,
        micro-batch by micro-batch, the gradients adding up, then the clipped step. The loss is a mean
        over the whole batch's action tokens. Returns the step's metrics."""
        settings, model = self.settings, self.policy.model
        if batch.advantages is None:
            raise ValueError("the batch has no advantages: TurnBatch.of(turns, pad_token_id, advantages=...)")
        tokens = global_token_count(batch)  # the loss is a mean over every process's action tokens
        if tokens == 0:
            raise ValueError("no action tokens to train on")
        model.train()
        self.micro_batches.checkpoint_if_needed(batch)

        def forward_backward(size: int) -> dict[str, float]:  # in micro-batches: memory, not maths
            self.optimizer.zero_grad(set_to_none=True)
            sums = MetricSums(("loss", "entropy", "kl_k1", "kl_k3", "ratio"))
            for micro in batch.split(size):
                scores = action_logprobs(model, micro.model_inputs(), with_entropy=True, temperature=settings.temperature)
                micro = micro.to(scores.logprobs.device)
                mask = micro.action_mask  # (turns, A)
                loss, log_ratio = policy_gradient_loss(
                    scores.logprobs, micro.sampler_logprobs, micro.advantages.unsqueeze(1), mask, tokens)
                loss.backward()  # gradients add up over the micro-batches into one step
                with torch.no_grad():
                    k1, k3 = sampler_kl_sums(log_ratio, mask)  # KL(sampler || policy): ~0, chapter 5
                    sums.add(loss=loss, entropy=torch.where(mask, scores.entropy, 0.0).sum(), kl_k1=k1, kl_k3=k3,
                             ratio=torch.where(mask, log_ratio.exp(), 0.0).sum())
            return sums.read()  # one read of the device an update

        sums = self.micro_batches.run(batch, forward_backward)
        grad_norm, skipped = synchronised_step(self.optimizer, settings.max_grad_norm)
        sums = global_sums(sums)
        return {
            "loss": sums["loss"],
            "entropy": sums["entropy"] / tokens,
            "kl_k1": sums["kl_k1"] / tokens,
            "kl_k3": sums["kl_k3"] / tokens,
            "mean_ratio": sums["ratio"] / tokens,
            "grad_norm": grad_norm,
            "skipped_step": skipped,
        }

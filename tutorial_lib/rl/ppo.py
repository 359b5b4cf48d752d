"""PPO with a value head, for multi-turn text games and single-turn answers (chapter 6).

    policy = sft_policy("cookingworld", preset)              # or load_policy("tiny")
    result = train(PPO, policy, "cookingworld", PPOSettings(iterations=20), out_dir="runs/ppo-cw")
    result.history[-1]      # policy_loss, value_loss, approx_kl, clipfrac, explained_variance, ...

Holds the algorithm and nothing else: :class:`PPOSettings`, the value model, the two clipped losses
and :class:`PPO`, whose methods read in the order they run: ``update`` (``prepare`` the rollout:
score the old policy and critic, the rewards and advantages; then epochs of shuffled minibatches,
one ``step`` each: the three losses, backward, the clipped optimiser step), as
:class:`~tutorial_lib.rl.reinforce.Reinforce`'s do. Statistics over the batch are the whole batch's
through :mod:`~tutorial_lib.rl.whole_batch`; this file makes no process call. Imports ``lm`` and
``rl``'s toolkit (``advantages``, ``kl``, ``rollout``, ``schedules``, ``settings``, ``update_step``,
``whole_batch``).

Chapter 6 argues each implementation detail; the code marks them ``# detail N`` (after Huang et
al., *The 37 Implementation Details of PPO*, ICLR blog track 2022, and CleanRL's ``ppo.py``; the LLM
ones after the GSM8K PPO and TextWorld tutorials): 1 one value per turn, at the turn's last prompt
token; 2 the critic on the policy's backbone or a separate copy; 3 a KL penalty to a frozen
reference in the reward; 4 reward whitening; 5 GAE over turns, bootstrapped where an episode was
truncated; 6 advantage whitening per turn; 7 the clipped surrogate; 8 the clipped value loss;
9 an entropy bonus; 10 epochs over shuffled minibatches, the gradient norm clipped; 11 separate
actor and critic learning rates, warm-up then cosine; 12 a non-finite step skipped; 13 approx-KL
(k3), clip fraction and explained variance. The ratio is taken against the policy's own recompute
before the update (``pi_old``), which agrees with the sampler's log-probs to float precision.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from tutorial_lib.lm.lm_parts import body_hidden_states, hidden_size, train_top_layers
from tutorial_lib.lm.tokenization import left_padded_batch, positions_from_mask
from tutorial_lib.rl.advantages import gae
from tutorial_lib.rl.kl import frozen_reference, masked_log_ratio, reference_kl, sampler_kl_sums
from tutorial_lib.rl.rollout import ActionScores, Rollout, TurnBatch, action_logprobs, state_positions
from tutorial_lib.rl.schedules import lr_scheduler, step_schedule
from tutorial_lib.rl.settings import RLSettings
from tutorial_lib.rl.update_step import (
    MetricSums,
    MicroBatches,
    synchronised_step,
    update_precision,
)
from tutorial_lib.rl.whole_batch import (
    gathered,
    global_sums,
    global_token_count,
    shared_minibatches,
    whiten_whole_batch,
)
from tutorial_lib.runtime.device import shape_multiple

CRITICS = ("shared", "separate")


@dataclass
class PPOSettings(RLSettings):
    """Settings of a PPO run: the loop's (:class:`~tutorial_lib.rl.settings.RLSettings`) and PPO's own.
    ``learning_rate`` is the actor's."""

    #: discount per turn (the GSM8K tutorial's 1: an answer is one turn)
    gamma: float = 1.0
    #: GAE's lambda: 0 uses one TD error, 1 the Monte-Carlo return minus V (the TextWorld tutorial's 0.95)
    gae_lambda: float = 0.95
    #: epsilon of the clipped surrogate
    clip_range: float = 0.2
    #: the value may move at most this far from the old value per update (``None``: unclipped)
    value_clip_range: float | None = 0.5
    #: weight of the value loss in the total loss
    value_coef: float = 0.5
    #: weight of the entropy bonus
    entropy_coef: float = 0.0
    #: passes over each batch
    ppo_epochs: int = 2
    #: turns per optimiser step (a minibatch); split into micro-batches of ``microbatch_turns``
    minibatch_turns: int = 64
    #: divide rewards by their batch standard deviation before GAE
    whiten_rewards: bool = False
    #: normalise advantages to mean 0, std 1 over the batch
    whiten_advantages: bool = True
    #: ``"shared"``: value head on the policy's backbone; ``"separate"``: on a copy of the initial model
    critic: str = "shared"
    #: learning rate of the critic (the value head, and the separate critic's body)
    critic_learning_rate: float = 1e-3
    #: PPO's default schedule: one iteration of warm-up, then a cosine to 0 (RLSettings' fields)
    lr_schedule: str = "warmup_cosine"
    warmup_iterations: int = 1
    #: bootstrap from V(last state) when an episode is truncated by its turn limit
    bootstrap_truncated: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.critic not in CRITICS:
            raise ValueError(f"critic must be one of {', '.join(CRITICS)}; got {self.critic!r}")
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"gamma must be in [0, 1]; got {self.gamma}")
        if not 0 <= self.gae_lambda <= 1:
            raise ValueError(f"gae_lambda must be in [0, 1]; got {self.gae_lambda}")
        if self.clip_range <= 0 or (self.value_clip_range is not None and self.value_clip_range <= 0):
            raise ValueError("clip_range and value_clip_range must be positive (value_clip_range may be None)")
        for name in ("ppo_epochs", "minibatch_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")
        for name in ("value_coef", "entropy_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0; got {getattr(self, name)}")


class ValueModel(torch.nn.Module):
    """V(s) = a linear head on a causal LM's last hidden state at the state's last prompt token.

    ``backbone=None`` reads the policy's hidden states (passed in); otherwise ``backbone`` is a
    separate critic language model whose body this module runs itself.
    """

    def __init__(self, hidden_size: int, backbone=None):
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def from_hidden(self, state_hidden: torch.Tensor) -> torch.Tensor:
        return self.head(state_hidden.to(self.head.weight.dtype)).squeeze(-1)  # float32 (the head is built so)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Values of a :func:`~tutorial_lib.rl.rollout.collate_turns` batch (separate critic only)."""
        hidden = body_hidden_states(self.backbone, batch)
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        return self.from_hidden(hidden[rows, state_positions(batch).to(hidden.device)])


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns): 1 is a perfect critic, 0 no better than a constant."""
    var = returns.var(unbiased=False)
    return float("nan") if var == 0 else float(1 - (returns - values).var(unbiased=False) / var)


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float,
    num_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped policy loss summed over the masked tokens and divided by ``num_tokens``
    (the minibatch's action tokens, so micro-batches add up to the minibatch mean); and the ratios.

    ``advantages`` broadcasts against the (batch, tokens) log-probs: one per row (a turn's
    advantage on each of its tokens) or one per token. Per token, the loss is the *pessimistic*
    bound ``max(-A r, -A clip(r, 1-eps, 1+eps))``: once the ratio has moved past ``1 +- eps`` in the
    direction the advantage favours, the gradient of that token is 0.
    """
    ratio = masked_log_ratio(logprobs, old_logprobs, mask).exp()
    surrogate = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_range, 1 + clip_range))
    return (surrogate * mask).sum() / num_tokens, ratio


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip_range: float | None, num_turns: int
) -> torch.Tensor:
    """``0.5 max((V - R)^2, (V_clipped - R)^2)`` summed and divided by ``num_turns``; ``V_clipped``
    stays within ``clip_range`` of the value before the update (``None``: plain squared error)."""
    error = (values - returns) ** 2
    if clip_range is not None:
        clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
        error = torch.max(error, (clipped - returns) ** 2)
    return 0.5 * error.sum() / num_turns


@dataclass
class OldScores:
    """The no-gradient pass before an update: the policy and the critic as they were when the
    batch was collected (T turns, A tokens in the longest action)."""

    logprobs: torch.Tensor  # (T, A) log pi_old of each action token, right-aligned, 0 outside the mask
    values: torch.Tensor  # (T,) V_old of each turn's state
    ref_kl: torch.Tensor  # (T,) sum over the turn's tokens of log pi_old - log pi_ref (0: no reference)
    kl_sums: dict[str, float]  # KL(sampler || trainer) summed over this process's action tokens, two
    # estimators (k1, k3): ~0 when the sampler is the policy being trained (chapter 5)


#: the statistics of one clipped step, summed over its micro-batches
STEP_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


class PPO:
    """PPO's state between iterations (the policy, a value model, a frozen reference, one optimiser,
    the learning-rate schedule) and its update; :func:`~tutorial_lib.rl.rl_loop.train` is the loop
    around it."""

    name = "PPO"
    settings_class = PPOSettings

    def __init__(self, policy, settings: PPOSettings):
        self.policy, self.settings = policy, settings
        model = policy.model
        backbone = copy.deepcopy(model) if settings.critic == "separate" else None  # detail 2
        self.value_model = ValueModel(hidden_size(model), backbone).to(policy.device)
        self.reference = frozen_reference(settings, model)  # detail 3: a frozen copy of the initial policy
        train_top_layers(model, settings.train_top_layers)  # the actor's; a separate critic trains whole
        actor = [p for p in model.parameters() if p.requires_grad]
        critic = [p for p in self.value_model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(  # detail 11: two learning rates, one optimiser
            [{"params": actor, "lr": settings.learning_rate}, {"params": critic, "lr": settings.critic_learning_rate}],
            betas=settings.adam_betas, weight_decay=0.0,
        )
        self.scheduler = lr_scheduler(self.optimizer, settings)
        self.micro_batches = MicroBatches(settings, model)

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"value_model": self.value_model}

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])

    def update(self, rollout: Rollout) -> dict[str, float]:
        """One PPO update on ``rollout``: :meth:`prepare` it, then epochs x shuffled minibatches, one
        optimiser :meth:`step` each; returns the iteration's metrics."""
        settings = self.settings
        with update_precision(settings, self.policy.model):  # float32, or bfloat16 autocast
            batch, info = self.prepare(rollout)
            steps: list[dict[str, float]] = []
            self.policy.model.train()
            for epoch in range(settings.ppo_epochs):  # detail 10: epochs over shuffled minibatches
                for minibatch, tokens, turns in shared_minibatches(batch, settings.minibatch_turns):
                    steps.append({**self.step(minibatch, tokens, turns), "epoch": epoch})
        metrics = {key: sum(step[key] for step in steps) / len(steps)
                   for key in ("policy_loss", "value_loss", "entropy", "clipfrac", "grad_norm")}
        last_epoch = [step for step in steps if step["epoch"] == settings.ppo_epochs - 1]  # approx-KL: after (nearly) all steps
        metrics["approx_kl"] = sum(step["approx_kl"] for step in last_epoch) / len(last_epoch)
        metrics.update(info, skipped_steps=sum(step["skipped"] for step in steps),
                       learning_rate=self.optimizer.param_groups[0]["lr"])
        step_schedule(self.scheduler)  # detail 11: the schedule moves once per iteration
        self.policy.model.eval()
        return metrics

    def prepare(self, rollout: Rollout) -> tuple[TurnBatch, dict[str, float]]:
        """The rollout as a :class:`TurnBatch` ready for the update -- pi_old, V_old, advantages and
        value targets attached (details 3-6) -- and what to log of it."""
        settings = self.settings
        batch = TurnBatch.of(rollout.turns, self.policy.tokenizer.pad_token_id,
                             multiple=shape_multiple(next(self.policy.model.parameters()).device))  # few shapes on XLA
        old = self.score_old(batch)
        rewards = torch.tensor([t.reward for t in rollout.turns], dtype=torch.float32)  # (T,)
        rewards = rewards - settings.kl_coef * old.ref_kl  # detail 3: KL penalty to the reference
        if settings.whiten_rewards:  # detail 4, over the whole batch
            rewards = whiten_whole_batch(rewards, shift_mean=False)
        bootstrap = self.bootstrap_values(rollout)
        advantages, returns, start = [], [], 0
        for index, record in enumerate(rollout.records):  # detail 5: GAE over each episode's turns
            end = start + record.length
            adv, ret = gae(rewards[start:end], old.values[start:end], settings.gamma, settings.gae_lambda,
                           last_value=bootstrap.get(index, 0.0), terminated=index not in bootstrap)
            advantages.extend(adv)
            returns.extend(ret)
            start = end
        batch.advantages = torch.tensor(advantages, dtype=torch.float32)  # (T,)
        batch.returns = torch.tensor(returns, dtype=torch.float32)  # (T,)
        values, returns, ref_kl = gathered(old.values), gathered(batch.returns), gathered(old.ref_kl)
        tokens = global_token_count(batch)
        kl_sums = global_sums(old.kl_sums)
        info = {"mean_value": float(values.double().mean()),
                "explained_variance": explained_variance(values, returns),
                "kl_ref": float(ref_kl.double().sum()) / max(tokens, 1),
                "kl_k1": kl_sums["kl_k1"] / tokens, "kl_k3": kl_sums["kl_k3"] / tokens}
        if settings.whiten_advantages:  # detail 6, over the whole batch
            batch.advantages = whiten_whole_batch(batch.advantages)
        # the ratio is taken against the policy's own recompute (see the module docstring)
        batch.old_logprobs, batch.old_values = old.logprobs, old.values
        return batch, info

    @torch.no_grad()
    def score_old(self, batch: TurnBatch) -> OldScores:
        """log pi_old, V_old and the KL to the reference of every turn, before any update."""
        logprobs = torch.zeros_like(batch.sampler_logprobs)  # (T, A)
        values = torch.zeros(len(batch))
        ref_kl = torch.zeros(len(batch))
        self.policy.model.eval()

        def score_in_micro_batches(size: int) -> dict[str, float]:
            kl_sums = MetricSums(("kl_k1", "kl_k3"))
            for rows in batch.microbatch_rows(size):
                micro = batch.select(rows)
                inputs = micro.model_inputs()
                scores, micro_values = self.logprobs_and_values(inputs)
                micro = micro.to(scores.logprobs.device)
                mask = micro.action_mask  # (turns, a) with a <= A: this micro-batch's longest action
                k1, k3 = sampler_kl_sums(masked_log_ratio(scores.logprobs, micro.sampler_logprobs, mask), mask)
                kl_sums.add(kl_k1=k1, kl_k3=k3)
                logprobs[rows, logprobs.shape[1] - mask.shape[1] :] = scores.logprobs.cpu()  # right-aligned
                values[rows] = micro_values.float().cpu()
                if self.reference is not None:
                    ref_kl[rows] = reference_kl(self.reference, inputs, scores.logprobs, mask, self.settings.temperature)
            return kl_sums.read()

        kl_sums = self.micro_batches.run(batch, score_in_micro_batches)
        return OldScores(logprobs, values, ref_kl, kl_sums)

    @torch.no_grad()
    def bootstrap_values(self, rollout: Rollout) -> dict[int, float]:
        """V of the state each truncated episode stopped in, by episode index (detail 5)."""
        # an episode that hit its limit but whose game ended there (GuessTheNumber, as in GEM,
        # returns both flags on its last turn) has nothing left to estimate
        truncated = ([i for i, r in enumerate(rollout.records) if r.truncated and not r.terminated]
                     if self.settings.bootstrap_truncated else [])
        if not truncated:
            return {}
        # the prompt the policy would have read next
        prompts = [self.policy.prompt_for(r.game, r.task, r.turns) for r in (rollout.records[i] for i in truncated)]
        inputs = dict(left_padded_batch(self.policy.tokenizer, prompts))
        inputs["position_ids"] = positions_from_mask(inputs["attention_mask"])
        model = self.value_model.backbone or self.policy.model
        hidden = body_hidden_states(model, inputs)[:, -1]  # every prompt ends in the last column
        return dict(zip(truncated, self.value_model.from_hidden(hidden).tolist()))

    def step(self, minibatch: TurnBatch | None, tokens: int, turns: int) -> dict[str, float]:
        """One optimiser step over a minibatch: the three losses and backward over this process's
        part of it (``None``: none of it), micro-batch by micro-batch, the gradients adding up, then
        the clipped step (skipped if a loss was not finite, detail 12). The losses are means over the
        whole minibatch's ``tokens`` and ``turns``. Returns the step's statistics."""
        settings = self.settings
        self.optimizer.zero_grad(set_to_none=True)

        def forward_backward(size: int) -> tuple[dict[str, float], bool]:
            self.optimizer.zero_grad(set_to_none=True)
            sums = MetricSums(STEP_STATS)
            for micro in minibatch.split(size):
                scores, values = self.logprobs_and_values(micro.model_inputs(), with_entropy=True)  # (turns, a), (turns,)
                micro = micro.to(values.device)
                mask = micro.action_mask  # (turns, a)
                policy_loss, ratio = clipped_surrogate(  # detail 7
                    scores.logprobs, micro.old_logprobs, micro.advantages.unsqueeze(1), mask, settings.clip_range, tokens)
                value_loss = clipped_value_loss(values, micro.old_values, micro.returns, settings.value_clip_range, turns)  # detail 8
                entropy = torch.where(mask, scores.entropy, 0.0).sum() / tokens  # detail 9
                loss = policy_loss + settings.value_coef * value_loss
                if settings.entropy_coef:  # without a bonus the entropy is only measured (no backward pass)
                    loss = loss - settings.entropy_coef * entropy
                if not torch.isfinite(loss):  # never step on a non-finite loss (a read of the device)
                    return sums.read(), False
                loss.backward()
                with torch.no_grad():  # detail 13: how far this minibatch's policy has moved
                    sums.add(policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
                             approx_kl=torch.where(mask, ratio - 1 - ratio.log(), 0.0).sum() / tokens,
                             clipfrac=torch.where(mask, (ratio - 1).abs() > settings.clip_range, False).sum() / tokens)
            return sums.read(), True

        if minibatch:
            self.micro_batches.checkpoint_if_needed(minibatch)
            sums, finite = self.micro_batches.run(minibatch, forward_backward)
        else:  # none of the minibatch is this process's: it still takes the step the others take
            sums, finite = dict.fromkeys(STEP_STATS, 0.0), True
        grad_norm, skipped = synchronised_step(self.optimizer, settings.max_grad_norm, finite_loss=finite)  # 10, 12
        return {**global_sums(sums), "grad_norm": grad_norm, "skipped": skipped}

    def logprobs_and_values(self, inputs: dict[str, torch.Tensor], *,
                            with_entropy: bool = False) -> tuple[ActionScores, torch.Tensor]:
        """Action log-probs (and entropy, if asked) and turn values (turns,) of collated turns: one forward
        pass serves both with a shared critic (detail 1: the value of the turn's last prompt token).
        The entropy carries a gradient only when the loss has an entropy bonus."""
        shared = self.value_model.backbone is None
        scores = action_logprobs(self.policy.model, inputs, with_entropy=with_entropy,
                                 entropy_gradient=with_entropy and self.settings.entropy_coef != 0,
                                 with_state_hidden=shared, temperature=self.settings.temperature)
        values = self.value_model.from_hidden(scores.state_hidden) if shared else self.value_model(inputs)
        return scores, values

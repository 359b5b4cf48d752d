"""PPO with a value head, for multi-turn text games and single-turn answers (chapter 6).

    policy = sft_policy("cookingworld", preset)              # or load_policy("tiny")
    result = train_ppo(policy, "cookingworld", PPOSettings(iterations=20), out_dir="runs/ppo-cw")
    result.history[-1]      # policy_loss, value_loss, approx_kl, clipfrac, explained_variance, ...

PPO (Schulman et al. 2017, arXiv:1707.06347) is an actor-critic method: a *critic* V(s) predicts
the return from a state, the advantage of an action is how much better it turned out than that
prediction (GAE), and the *actor* -- the language model -- takes several gradient steps on each
batch, with its probability ratio to the sampling policy clipped so that no step moves it far.
Collection, logging and checkpoints are the shared loop of :mod:`tutorial_lib.rl_loop`.

The implementation details, numbered as chapter 6 discusses them (the PPO ones follow Huang et
al., *The 37 Implementation Details of Proximal Policy Optimization*, ICLR blog track 2022, and
CleanRL's ``ppo.py``; the LLM ones the GSM8K PPO and TextWorld tutorials this book supersedes):

1. **Turn-level values.** One value per turn, read from the last-layer hidden state at the
   turn's last prompt token: the state in which the whole action was chosen. Rewards arrive per
   turn and the game's state changes only between turns, so the turn is the RL time step and a
   token inside an action is not. (Token-level values, as in TRL's old ``PPOTrainer`` and the GSM8K
   tutorial, treat each token as a step with the reward on the last; with gamma = lambda = 1, that
   tutorial's choice, GAE then gives each token ``R - V(token)``.)
2. **The critic** is a linear head on the policy's own backbone (``critic="shared"``: one forward
   pass serves both, and the value loss also shapes the backbone) or on a separate copy of the
   initial model (``critic="separate"``, the GSM8K tutorial's "base model + score head": twice the
   memory, no interference between the two losses). The head starts at zero: V = 0 everywhere.
3. **KL penalty to a frozen reference** (Ziegler et al. 2019, arXiv:1909.08593; the TextWorld
   tutorial's beta 0.2): each turn's reward loses ``kl_coef * sum_tokens (log pi_old - log pi_ref)``,
   which keeps the policy near where it started. ``kl_coef=0`` builds no reference model (the GSM8K
   tutorial's beta 0).
4. **Reward whitening** (optional): rewards divided by their batch standard deviation, mean kept.
5. **GAE(gamma, lambda)** over turns (Schulman et al. 2016, arXiv:1506.02438), bootstrapping from
   V of the state a *truncated* episode stopped in (the game could have gone on); a terminated one
   has nothing after it.
6. **Advantage normalisation** over the batch of turns (detail 7 of the 37).
7. **Clipped surrogate objective**, per action token: ``max(-A r, -A clip(r, 1 - eps, 1 + eps))``
   with ``r = pi_theta / pi_old``, averaged over the minibatch's action tokens.
8. **Clipped value loss** (detail 9): ``0.5 max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)``.
9. **Entropy bonus** ``- entropy_coef * mean token entropy``.
10. **Epochs over shuffled minibatches**; each minibatch is one optimiser step whose forward passes
    (micro-batches) accumulate gradients; the global gradient norm is clipped (detail 11).
11. **Separate learning rates** for actor and critic (two parameter groups of one AdamW), both
    following a per-iteration warm-up then cosine schedule (the GSM8K tutorial's).
12. **Numerical guard**: a step whose loss or gradient norm is not finite is skipped and counted.
13. **Diagnostics**: approx-KL between the policy before and after the update (the k3 estimator,
    Schulman, *Approximating KL divergence*, 2020), clip fraction, explained variance of the values.

``pi_old`` is the policy's own recompute before the update, not the sampler's recorded log-probs:
the two agree to float precision here (the logged ``kl_k3`` says so), and a PPO ratio taken
against the trainer's own numbers measures the update alone.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from .advantages import gae, whiten
from .policies import EpisodeState
from .reinforce import RLSettings
from .rl_loop import Algorithm, RLResult, clip_and_step, run_rl, sampler_kl_sums
from .rollout import Rollout, TurnSample, action_logprobs, collate_turns, last_hidden_states, state_positions
from .tokenization import left_padded_batch

CRITICS = ("shared", "separate")
LR_SCHEDULES = ("constant", "warmup_cosine")


@dataclass
class PPOSettings(RLSettings):
    """Settings of a PPO run: the collection settings of :class:`RLSettings` and PPO's own.
    ``learning_rate`` is the actor's; ``normalise`` (REINFORCE's) is not used."""

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
    #: beta of the KL penalty to the frozen initial policy (0: no reference model)
    kl_coef: float = 0.0
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
    #: ``"warmup_cosine"`` or ``"constant"``, stepped once per iteration
    lr_schedule: str = "warmup_cosine"
    #: iterations of linear warm-up
    warmup_iterations: int = 1
    #: bootstrap from V(last state) when an episode is truncated by its turn limit
    bootstrap_truncated: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.critic not in CRITICS:
            raise ValueError(f"critic must be one of {', '.join(CRITICS)}; got {self.critic!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}; got {self.lr_schedule!r}")
        if not 0 <= self.gae_lambda <= 1:
            raise ValueError(f"gae_lambda must be in [0, 1]; got {self.gae_lambda}")
        if self.clip_range <= 0 or (self.value_clip_range is not None and self.value_clip_range <= 0):
            raise ValueError("clip_range and value_clip_range must be positive (value_clip_range may be None)")
        for name in ("ppo_epochs", "minibatch_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")
        for name in ("value_coef", "entropy_coef", "kl_coef", "warmup_iterations"):
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
        return self.head(state_hidden.float()).squeeze(-1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Values of a :func:`~tutorial_lib.rollout.collate_turns` batch (separate critic only)."""
        hidden = last_hidden_states(self.backbone, batch)
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
    log_ratio = (logprobs - old_logprobs).masked_fill(~mask, 0.0)
    ratio = log_ratio.exp()
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


def lr_multiplier(iteration: int, settings: PPOSettings) -> float:
    """The learning-rate factor of ``iteration`` (0-based): linear warm-up, then cosine to 0."""
    if settings.lr_schedule == "constant":
        return 1.0
    if iteration < settings.warmup_iterations:
        return (iteration + 1) / (settings.warmup_iterations + 1)
    span = max(settings.iterations - settings.warmup_iterations, 1)
    return 0.5 * (1 + math.cos(math.pi * (iteration - settings.warmup_iterations) / span))


@dataclass
class _Scored:
    """What the no-gradient pass before an update knows of each turn."""

    old_logprobs: list[list[float]]
    values: list[float]
    ref_kl: list[float]  # per turn: sum over tokens of log pi_old - log pi_ref (0 without reference)
    kl_k1: float
    kl_k3: float


class PPO(Algorithm):
    """PPO as an :class:`~tutorial_lib.rl_loop.Algorithm` (see the module docstring)."""

    name = "PPO"

    def __init__(self, policy, settings: PPOSettings):
        self.policy, self.settings = policy, settings
        model = policy.model
        hidden_size = model.config.hidden_size if not hasattr(model, "get_base_model") else \
            model.get_base_model().config.hidden_size
        backbone = copy.deepcopy(model) if settings.critic == "separate" else None
        self.value_model = ValueModel(hidden_size, backbone).to(policy.device)
        self.reference = None
        if settings.kl_coef > 0:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        actor = [p for p in model.parameters() if p.requires_grad]
        critic = [p for p in self.value_model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            [{"params": actor, "lr": settings.learning_rate}, {"params": critic, "lr": settings.critic_learning_rate}],
            betas=settings.adam_betas, weight_decay=0.0,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda it: lr_multiplier(it, settings))

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"value_model": self.value_model}

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])

    # -- scoring ----------------------------------------------------------------------------
    def logprobs_and_values(self, batch) -> tuple[Any, torch.Tensor]:
        """Action log-probs (with entropy) and turn values of a collated batch."""
        shared = self.value_model.backbone is None
        scores = action_logprobs(self.policy.model, batch, with_entropy=True, with_state_hidden=shared,
                                 temperature=self.settings.temperature)
        values = self.value_model.from_hidden(scores.state_hidden) if shared else self.value_model(batch)
        return scores, values

    @torch.no_grad()
    def _score(self, turns: Sequence[TurnSample]) -> _Scored:
        pad = self.policy.tokenizer.pad_token_id
        old, values, ref_kl = [], [], []
        k1 = k3 = 0.0
        tokens = sum(len(t.action_ids) for t in turns)
        self.policy.model.eval()
        for start in range(0, len(turns), self.settings.microbatch_turns):
            chunk = turns[start : start + self.settings.microbatch_turns]
            batch = collate_turns(chunk, pad)
            scores, chunk_values = self.logprobs_and_values(batch)
            mask = batch["action_mask"].to(scores.logprobs.device)
            log_ratio = (scores.logprobs - batch["sampler_logprobs"].to(mask.device)).masked_fill(~mask, 0.0)
            # KL(sampler || trainer) two ways, as chapter 5 logs it: ~0 when the sampler is the policy
            chunk_k1, chunk_k3 = sampler_kl_sums(log_ratio, mask)
            k1, k3 = k1 + chunk_k1, k3 + chunk_k3
            if self.reference is not None:
                ref = action_logprobs(self.reference, batch, temperature=self.settings.temperature).logprobs
                ref_kl.extend(((scores.logprobs - ref) * mask).sum(1).tolist())
            else:
                ref_kl.extend([0.0] * len(chunk))
            for row, turn in enumerate(chunk):
                n = len(turn.action_ids)
                old.append(scores.logprobs[row, mask.shape[1] - n :].tolist())
            values.extend(chunk_values.tolist())
        return _Scored(old, values, ref_kl, k1 / tokens, k3 / tokens)

    @torch.no_grad()
    def _bootstrap_values(self, rollout: Rollout) -> dict[int, float]:
        """V of the state each truncated episode stopped in, by episode index."""
        cut = [i for i, r in enumerate(rollout.records) if r.truncated] if self.settings.bootstrap_truncated else []
        if not cut:
            return {}
        prompts = []
        for i in cut:
            record = rollout.records[i]
            # the prompt the policy would have read next (only the task text of the game is needed)
            state = EpisodeState(record.game, SimpleNamespace(task=record.task), record.turns)
            prompts.append(self.policy.prompt(state))
        batch = dict(left_padded_batch(self.policy.tokenizer, prompts))
        batch["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        model = self.value_model.backbone or self.policy.model
        hidden = last_hidden_states(model, batch)[:, -1]
        return dict(zip(cut, self.value_model.from_hidden(hidden).tolist()))

    def advantages(self, rollout: Rollout, scored: _Scored) -> tuple[list[float], list[float], dict[str, float]]:
        """Per turn (rollout order): advantages and value targets, after the KL penalty and GAE."""
        s = self.settings
        rewards = torch.tensor([t.reward for t in rollout.turns], dtype=torch.float32)
        rewards = rewards - s.kl_coef * torch.tensor(scored.ref_kl, dtype=torch.float32)
        if s.whiten_rewards and len(rewards) > 1:
            rewards = whiten(rewards, shift_mean=False)
        bootstrap = self._bootstrap_values(rollout)
        advantages, targets, start = [], [], 0
        for index, record in enumerate(rollout.records):
            end = start + record.length
            adv, ret = gae(rewards[start:end], scored.values[start:end], s.gamma, s.gae_lambda,
                           last_value=bootstrap.get(index, 0.0), terminated=index not in bootstrap)
            advantages.extend(adv)
            targets.extend(ret)
            start = end
        info = {"mean_value": sum(scored.values) / len(scored.values),
                "explained_variance": explained_variance(torch.tensor(scored.values), torch.tensor(targets)),
                "kl_ref": sum(scored.ref_kl) / max(sum(len(t.action_ids) for t in rollout.turns), 1)}
        if s.whiten_advantages and len(advantages) > 1:
            advantages = whiten(torch.tensor(advantages)).tolist()
        return advantages, targets, info

    # -- the update -------------------------------------------------------------------------
    def update(self, rollout: Rollout) -> dict[str, float]:
        s = self.settings
        turns = rollout.turns
        scored = self._score(turns)
        advantages, targets, info = self.advantages(rollout, scored)
        # train against the policy's own log-probs before the update (see the module docstring)
        old_turns = [replace(t, logprobs=lp) for t, lp in zip(turns, scored.old_logprobs)]
        sums: dict[str, float] = {}
        steps = skipped = 0
        self.policy.model.train()
        for epoch in range(s.ppo_epochs):
            order = torch.randperm(len(turns)).tolist()  # the global generator: checkpointed with the run
            for start in range(0, len(order), s.minibatch_turns):
                rows = order[start : start + s.minibatch_turns]
                stats = self._minibatch_step([old_turns[i] for i in rows], [advantages[i] for i in rows],
                                             [targets[i] for i in rows], [scored.values[i] for i in rows])
                steps += 1
                skipped += stats.pop("skipped")
                for key, value in stats.items():
                    if key != "approx_kl" or epoch == s.ppo_epochs - 1:
                        sums[key] = sums.get(key, 0.0) + value
        last_epoch_steps = math.ceil(len(order) / s.minibatch_turns)
        metrics = {key: value / (last_epoch_steps if key == "approx_kl" else steps) for key, value in sums.items()}
        metrics.update(info, kl_k1=scored.kl_k1, kl_k3=scored.kl_k3, skipped_steps=float(skipped),
                       learning_rate=self.optimizer.param_groups[0]["lr"])
        with warnings.catch_warnings():  # when every step was skipped, torch warns of the order
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
            self.scheduler.step()
        self.policy.model.eval()
        return metrics

    def _minibatch_step(self, turns, advantages, targets, old_values) -> dict[str, float]:
        s = self.settings
        tokens = sum(len(t.action_ids) for t in turns)
        self.optimizer.zero_grad(set_to_none=True)
        stats = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clipfrac": 0.0}
        finite = True
        for start in range(0, len(turns), s.microbatch_turns):
            chunk = slice(start, start + s.microbatch_turns)
            batch = collate_turns(turns[chunk], self.policy.tokenizer.pad_token_id)
            scores, values = self.logprobs_and_values(batch)
            device = values.device
            mask = batch["action_mask"].to(device)
            old = batch["sampler_logprobs"].to(device)  # here: pi_old, laid out by collate_turns
            adv = torch.tensor(advantages[chunk], device=device).unsqueeze(1)
            policy_loss, ratio = clipped_surrogate(scores.logprobs, old, adv, mask, s.clip_range, tokens)
            ret = torch.tensor(targets[chunk], device=device)
            old_v = torch.tensor(old_values[chunk], device=device)
            value_loss = clipped_value_loss(values, old_v, ret, s.value_clip_range, len(turns))
            entropy = scores.entropy[mask].sum() / tokens
            loss = policy_loss + s.value_coef * value_loss - s.entropy_coef * entropy
            if not torch.isfinite(loss):
                finite = False
                break
            loss.backward()
            with torch.no_grad():
                stats["policy_loss"] += float(policy_loss)
                stats["value_loss"] += float(value_loss)
                stats["entropy"] += float(entropy)
                stats["approx_kl"] += float((ratio - 1 - ratio.log())[mask].sum()) / tokens
                stats["clipfrac"] += float(((ratio - 1).abs() > s.clip_range)[mask].sum()) / tokens
        grad_norm, skipped = clip_and_step(self.optimizer, s.max_grad_norm, finite_loss=finite)
        return {**stats, "grad_norm": grad_norm, "skipped": skipped}


def train_ppo(
    policy,
    game: str,
    settings: PPOSettings | None = None,
    *,
    out_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    stage: tuple[int, int] = (1, 1),
) -> RLResult:
    """Train ``policy`` in place with PPO on ``game``; logs, checkpoints and the final model (with
    ``value_model.pt`` beside it) go to ``out_dir``; ``result.algorithm.value_model`` is the critic.
    ``resume=True`` continues a stopped run exactly."""
    settings = settings or PPOSettings()
    return run_rl(policy, game, settings, lambda: PPO(policy, settings), out_dir=out_dir, resume=resume,
                  progress=progress, stage=stage)

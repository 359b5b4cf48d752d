"""REINFORCE with return batch-normalisation for multi-turn text games (chapter 5).

    policy = sft_policy("tictactoe", preset)                 # or load_policy("tiny")
    result = train_reinforce(policy, "tictactoe", ReinforceSettings(iterations=30), out_dir="runs/rl-ttt")
    result.history[-1]                                       # the last iteration's metrics

Each iteration:

1. **Collect** episodes with the current policy (:func:`tutorial_lib.rl.rollout.collect`): many games
   side by side, one batched ``generate`` per turn, sampling from the model itself, until a
   budget of turns is full (the GEM training script's recipe). The sampler's log-probs are kept.
2. **Credit** each turn with its discounted return ``G_t = r_t + gamma G_{t+1}``, subtract a
   baseline and normalise over the whole batch of turns. The default, ``"rebn_state"``
   (:func:`~tutorial_lib.rl.advantages.rebn_by_state`), takes as baseline the mean return of the
   batch's turns in the same state (the same prompt) where a state recurs, else the batch mean;
   GEM's ReBN (``"rebn"``) takes the batch mean for every turn, which pushes a nearly
   deterministic policy off its best moves (chapter 5 shows it). The standard deviation sets the
   step size whatever the game's reward scale.
3. **Update** once: each turn's advantage multiplies the log-probs of *that turn's action tokens
   only* (the prompt, and so every observation, is context, never a target), weighted by the
   importance ratio ``pi_theta(a) / pi_sampler(a)``:

       loss = - sum_tokens ratio_t * A_turn(t) / number of action tokens

   Right after collection the two policies are the same weights, so the ratio is 1 and its gradient
   is the plain REINFORCE gradient ``A grad log pi``. It is there because in real systems the
   sampler is another engine (vLLM, a quantised copy, another precision) whose probabilities
   differ from the trainer's; the ratio corrects for that, and the logged KL(sampler || trainer)
   says how large the difference is. Here it stays ~0: a check that sampling and scoring agree.

Adam uses betas (0.9, 0.95), as in the GEM script: a shorter memory of squared gradients than the
default 0.999 suits the non-stationary gradients of RL.

With several processes (``accelerate launch``) the returns are normalised over every process's
turns (:attr:`~tutorial_lib.rl.rl_loop.Run.batch`), each process's loss is divided by the global
number of action tokens, and the gradients are summed over the processes before the step: the
step one process would take on all the turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tutorial_lib.rl.advantages import batch_returns, rebn, rebn_by_state
from tutorial_lib.rl.rl_loop import RLResult, RLSettings, Run, clip_and_step, microbatch_size, sampler_kl_sums
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


def turn_advantages(rollout: Rollout, gamma: float, normalise: str) -> list[float]:
    """One advantage per turn of ``rollout.turns`` (same order): discounted return, then the
    baseline and scale ``normalise`` names."""
    if normalise not in NORMALISATIONS:
        raise ValueError(f"normalise must be one of {', '.join(NORMALISATIONS)}; got {normalise!r}")
    rewards = [record.rewards for record in rollout.records]
    returns = batch_returns(rewards, gamma)
    if normalise == "rebn":
        returns = rebn(returns)
    elif normalise == "rebn_state":
        states: list[list[tuple[int, ...]]] = [[] for _ in rollout.records]
        for turn in rollout.turns:  # the state is what the policy read: the prompt's tokens
            states[turn.episode].append(tuple(turn.prompt_ids))
        returns = rebn_by_state(returns, states)
    return [g for episode in returns for g in episode]


def reinforce_step(model, optimizer, batch: TurnBatch, settings: ReinforceSettings, *,
                   total_tokens: int | None = None) -> dict[str, float]:
    """One optimiser step of REINFORCE with importance sampling over ``batch`` (its ``advantages``
    set, one per turn); returns its metrics. ``total_tokens``: the action tokens of every process's
    batch (default: this batch's), the loss being a mean over all of them."""
    total_tokens = total_tokens or batch.action_tokens  # the loss is a mean over every action token of the batch
    if total_tokens == 0:
        raise ValueError("no action tokens to train on")
    if batch.advantages is None:
        raise ValueError("the batch has no advantages: TurnBatch.of(turns, pad_token_id, advantages=...)")
    model.train()
    optimizer.zero_grad(set_to_none=True)
    sums = {"loss": 0.0, "entropy": 0.0, "kl_k1": 0.0, "kl_k3": 0.0, "ratio": 0.0}
    for micro in batch.split(microbatch_size(settings, model, batch)):  # micro-batches: memory, not maths
        scores = action_logprobs(model, micro.model_inputs(), with_entropy=True, temperature=settings.temperature)
        micro = micro.to(scores.logprobs.device)
        mask = micro.action_mask  # (turns, A)
        log_ratio = (scores.logprobs - micro.sampler_logprobs).masked_fill(~mask, 0.0)  # (turns, A)
        ratio = log_ratio.exp()  # pi_theta / pi_sampler: 1 at unchanged weights, gradient grad log pi
        advantage = micro.advantages.unsqueeze(1) * mask  # (turns, A): each turn's on its own tokens
        loss = -(ratio * advantage * mask).sum() / total_tokens
        loss.backward()  # gradients add up over the micro-batches into one step
        with torch.no_grad():
            sums["loss"] += float(loss)
            sums["entropy"] += float(scores.entropy[mask].sum())
            k1, k3 = sampler_kl_sums(log_ratio, mask)
            sums["kl_k1"] += k1
            sums["kl_k3"] += k3
            sums["ratio"] += float(ratio[mask].sum())
    # several processes: each gradient is its own turns' share of the global mean; their sum is the
    # gradient of the whole batch (and the step, taken from it, the same in every process)
    distributed.sum_gradients([p for group in optimizer.param_groups for p in group["params"]])
    if distributed.launched():
        sums = dict(zip(sums, distributed.sum_over_processes(torch.tensor(list(sums.values()), dtype=torch.float64)).tolist()))
    grad_norm, skipped = clip_and_step(optimizer, settings.max_grad_norm)
    return {
        "loss": sums["loss"],
        "entropy": sums["entropy"] / total_tokens,
        "kl_k1": sums["kl_k1"] / total_tokens,
        "kl_k3": sums["kl_k3"] / total_tokens,
        "mean_ratio": sums["ratio"] / total_tokens,
        "grad_norm": float(grad_norm),
        "skipped_step": skipped,
    }


def reinforce_update(policy, optimizer, rollout: Rollout, settings: ReinforceSettings, *,
                     everyone: Rollout | None = None) -> dict[str, float]:
    """One REINFORCE update on ``rollout``: advantages, then one gradient step; returns its metrics.

    With several processes ``rollout`` is this process's episodes and ``everyone`` every process's
    (``rollout``'s among them, in rank order): returns are normalised over ``everyone``, the loss
    is taken over this process's own turns and divided by ``everyone``'s action tokens.
    """
    everyone = everyone or rollout
    own, _ = distributed.offsets(len(rollout.turns)) if everyone is not rollout else (0, None)
    # returns, baseline and scale over the whole batch; this process trains on its own turns
    advantages = turn_advantages(everyone, settings.gamma, settings.normalise)[own : own + len(rollout.turns)]
    batch = TurnBatch.of(rollout.turns, policy.tokenizer.pad_token_id,
                         advantages=torch.tensor(advantages, dtype=torch.float32))
    total_tokens = sum(len(turn.action_ids) for turn in everyone.turns)
    return reinforce_step(policy.model, optimizer, batch, settings, total_tokens=total_tokens)


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
    """Train ``policy`` in place with REINFORCE (+ ReBN) on ``game``; logs and checkpoints to ``out_dir``.

    ``resume=True`` continues from ``out_dir/checkpoint`` (weights, optimiser, random state,
    iteration): the result equals that of a run never stopped.
    """
    settings = settings or ReinforceSettings()
    run = Run(policy, game, "REINFORCE", settings, out_dir=out_dir, resume=resume, progress=progress, stage=stage)
    optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad],
                                  lr=settings.learning_rate, betas=settings.adam_betas, weight_decay=0.0)
    run.restore(optimizer)
    for _ in run.iterations():
        rollout = run.collect()  # turns_per_iteration turns from fresh seeds, sampled by the current policy
        metrics = reinforce_update(policy, optimizer, rollout, settings, everyone=run.batch)  # one step
        run.end_iteration(metrics, optimizer)
    return run.finish()

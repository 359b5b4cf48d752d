"""Playing many episodes and summarising them (chapter 1; the harness every later chapter uses).

    records = run_episodes("tictactoe", RandomPolicy(), seeds=range(200), env_options={"opponent": "minimax"})
    summarize(records)   # {'episodes': 200, 'mean_return': ..., 'win_rate': ..., 'invalid_rate': ...}

Up to ``batch_size`` games run side by side; each turn the policy is asked once for the actions of
every live game (so a language model makes one batched ``generate`` call per turn), then every
game steps. Finished games are refilled with the next seed until all seeds are played (or, with a
``turn_budget``, until enough turns are played). When the policy offers ``act_samples`` (language
policies do), each record also keeps the sampler's token ids and log-probs of every turn: the
rollouts of the RL chapters (:mod:`tutorial_lib.rollout`) are these same episodes.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import envs
from .policies import EpisodeState, Policy, Sample
from .progress import progress_bar
from .prompts import Turn, build_prompt_text


@dataclass
class EpisodeRecord:
    """One finished episode."""

    game: str
    seed: int
    #: the task text of this episode (it can depend on the seed, e.g. which mark the agent plays)
    task: str
    #: every observation with its ``info``; the last one (after the final step) has no action
    turns: list[Turn]
    rewards: list[float] = field(default_factory=list)
    invalid: list[bool] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    final_info: dict[str, Any] = field(default_factory=dict)
    #: what the sampler produced at each turn (token ids, log-probs), when the policy offers
    #: ``act_samples``; empty otherwise
    samples: list[Sample] = field(default_factory=list, repr=False)

    @property
    def episode_return(self) -> float:
        return float(sum(self.rewards))

    @property
    def length(self) -> int:
        return len(self.rewards)

    @property
    def success(self) -> bool:
        return bool(self.final_info.get("success", False))

    def prompts(self, history_window: int | None = None) -> list[str]:
        """The prompt text of every turn the agent acted on, rebuilt from the record."""
        return [
            build_prompt_text(self.game, self.task, self.turns[: i + 1], history_window=history_window)
            for i in range(self.length)
        ]

    def transcript(self, max_chars: int = 400) -> str:
        """The episode as text: each observation (shortened), the action, its reward."""
        lines = []
        for i, turn in enumerate(self.turns):
            observation = turn.observation if len(turn.observation) <= max_chars else turn.observation[:max_chars] + " ..."
            lines.append(observation)
            if i < len(self.rewards):
                flag = "  [invalid]" if self.invalid[i] else ""
                lines.append(f"  >>> {turn.action!r}  reward={self.rewards[i]:+.2f}{flag}")
        return "\n".join(lines)


def run_episodes(
    game: str,
    policy: Policy,
    seeds: Iterable[int],
    *,
    env_options: dict[str, Any] | None = None,
    batch_size: int = 16,
    turn_budget: int | None = None,
    progress: bool | str = False,
) -> list[EpisodeRecord]:
    """Play one episode per seed with ``policy``; returns the records in seed order.

    With ``turn_budget``, no new episode starts once that many turns have been played; the running
    ones finish (an RL batch wants whole episodes), so the records hold at least that many turns
    unless the seeds run out, and seeds never started have no record.
    """
    seeds = list(seeds)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if turn_budget is not None and turn_budget < 1:
        raise ValueError(f"turn_budget must be at least 1, got {turn_budget}")
    limit = envs.env_class(game).max_parallel or batch_size
    pool = [envs.make(game, **(env_options or {})) for _ in range(min(batch_size, limit, len(seeds)))]
    pending = list(enumerate(seeds))[::-1]  # a stack: pop() hands out seeds in order
    live: list[tuple[int, EpisodeState, EpisodeRecord]] = []
    records: list[EpisodeRecord | None] = [None] * len(seeds)
    turns_played = 0
    bar = progress_bar(total=len(seeds), desc=progress if isinstance(progress, str) else game, disable=not progress)

    def start(env) -> None:
        index, seed = pending.pop()
        observation, info = env.reset(seed=seed)
        state = EpisodeState(game, env, [Turn(observation, info=info)])
        live.append((index, state, EpisodeRecord(game, seed, env.task, state.turns)))

    try:
        for env in pool:
            start(env)
        while live:
            actions, samples = _act(policy, [state for _, state, _ in live])
            if len(actions) != len(live):
                raise RuntimeError(f"policy returned {len(actions)} actions for {len(live)} games")
            turns_played += len(live)
            next_live, free_envs = [], []
            for (index, state, record), action, sample in zip(live, actions, samples):
                if sample is not None:
                    record.samples.append(sample)
                state.turns[-1].action = action
                observation, reward, terminated, truncated, info = state.env.step(action)
                record.rewards.append(reward)
                record.invalid.append(bool(info.get("invalid_action")))
                state.turns.append(Turn(observation, info=info))  # after the last step: never acted on
                if terminated or truncated:
                    record.terminated, record.truncated, record.final_info = terminated, truncated, info
                    records[index] = record
                    free_envs.append(state.env)
                    bar.update()
                else:
                    next_live.append((index, state, record))
            live = next_live
            for env in free_envs:
                if pending and (turn_budget is None or turns_played < turn_budget):
                    start(env)
    finally:
        bar.close()
        for env in pool:
            env.close()
    return [r for r in records if r is not None]  # seeds are started in order: a prefix


def _act(policy: Policy, states: list[EpisodeState]) -> tuple[list[str], list[Sample | None]]:
    """The policy's actions, with the sampler's record of each when the policy can give one."""
    act_samples = getattr(policy, "act_samples", None)
    if act_samples is None:
        return policy.act(states), [None] * len(states)
    samples = act_samples(states)
    return [s.text for s in samples], samples


def steps_per_second(game: str, *, steps: int = 2000, env_options: dict[str, Any] | None = None, seed: int = 0) -> float:
    """Environment steps per second under a random policy (no model): the game's own cost."""
    import random
    import time

    env = envs.make(game, **(env_options or {}))
    rng = random.Random(seed)
    try:
        episode, done_steps = 0, 0
        env.reset(seed=seed)
        start = time.perf_counter()
        while done_steps < steps:
            if env.done:
                episode += 1
                env.reset(seed=seed + episode)
            env.step(env.random_action(rng))
            done_steps += 1
        return steps / (time.perf_counter() - start)
    finally:
        env.close()


#: problems :func:`math_accuracy` plays by default, seen in training and new (a chapter's noise
#: threshold for a change in either accuracy counts these)
MATH_TRAINING_PROBLEMS, MATH_NEW_PROBLEMS = 200, 400


def math_accuracy(
    policy: Policy,
    env_options: dict[str, Any] | None = None,
    *,
    training_problems: int = MATH_TRAINING_PROBLEMS,
    new_problems: int = MATH_NEW_PROBLEMS,
    batch_size: int = 100,
) -> dict[str, float]:
    """Accuracy on math problems the policy trained on and on problems it never saw (chapters 4, 6, 7).

    SFT and RL draw their problems from the generator's train split (seeds 0, 1, ...; GSM8K's train
    split at ``full``), so the first ``training_problems`` seeds of that split are problems the model
    has seen. The test split is drawn from another random stream (GSM8K's test split): new problems.
    A tiny model can score far higher on the first than on the second -- it memorises answers --
    so every math chapter reports both.
    """
    options = {k: v for k, v in (env_options or {}).items() if k != "split"}
    seen = summarize(run_episodes("math", policy, range(training_problems), env_options={**options, "split": "train"},
                                  batch_size=batch_size))
    new = summarize(run_episodes("math", policy, range(new_problems), env_options={**options, "split": "test"},
                                 batch_size=batch_size))
    return {"accuracy (training problems)": seen["accuracy"], "accuracy (new problems)": new["accuracy"],
            "format_accuracy": new["format_accuracy"]}


def summarize(records: Sequence[EpisodeRecord]) -> dict[str, float]:
    """Metrics over finished episodes; every game gets the common ones, plus its own."""
    if not records:
        raise ValueError("no episodes to summarise")
    actions = sum(r.length for r in records)
    metrics: dict[str, float] = {
        "episodes": len(records),
        "mean_return": statistics.fmean(r.episode_return for r in records),
        "success_rate": statistics.fmean(r.success for r in records),
        "mean_steps": statistics.fmean(r.length for r in records),
        "invalid_rate": sum(sum(r.invalid) for r in records) / max(actions, 1),
        "truncated_rate": statistics.fmean(r.truncated for r in records),
    }
    game = records[0].game
    if game == "tictactoe":
        for outcome in ("win", "draw", "loss"):
            metrics[f"{outcome}_rate"] = statistics.fmean(
                r.final_info.get("outcome") == outcome for r in records
            )
    elif game == "cookingworld":
        metrics["mean_score"] = statistics.fmean(r.final_info.get("score", 0.0) for r in records)
    elif game == "guess_the_number":
        metrics["mean_turns"] = metrics["mean_steps"]
    elif game == "math":
        metrics["accuracy"] = statistics.fmean(bool(r.final_info.get("correct")) for r in records)
        metrics["format_accuracy"] = statistics.fmean(bool(r.final_info.get("formatted")) for r in records)
    return metrics

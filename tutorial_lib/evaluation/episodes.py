"""The game loop: many episodes side by side, each turn one call to the policy (chapter 1; the
loop every later chapter plays, evaluates and collects RL batches with).

    records = run_episodes("tictactoe", RandomPolicy(), seeds=range(200), env_options={"opponent": "minimax"})
    records[0].transcript()     # EpisodeRecord: observations, actions, rewards, invalid flags

Up to ``batch_size`` games run side by side; each turn the policy is asked once for the actions of
every live game (so a language model makes one batched ``generate`` call per turn), then every
game steps. Finished games are refilled with the next seed until all seeds are played (or, with a
``turn_budget``, until enough turns are played). When the policy offers ``act_samples`` (language
policies do), each record also keeps the sampler's token ids and log-probs of every turn: the
rollouts of the RL chapters (:mod:`tutorial_lib.rl.rollout`) are these same episodes.
:func:`tutorial_lib.evaluation.evaluate.summarize` turns records into rates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tutorial_lib import envs
from tutorial_lib.lm.policies import EpisodeState, Policy, Sample
from tutorial_lib.lm.prompts import Turn, build_prompt_text
from tutorial_lib.runtime.cpu_threads import fit_threads
from tutorial_lib.runtime.progress import progress_bar


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
            fit_threads()  # a neighbour may have started or stopped since the last turn
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

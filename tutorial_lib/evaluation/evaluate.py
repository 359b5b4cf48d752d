"""Summarising played episodes into the book's metrics (chapter 1; every later chapter).

    records = run_episodes("tictactoe", RandomPolicy(), seeds=range(200), env_options={"opponent": "minimax"})
    summarize(records)   # {'episodes': 200, 'mean_return': ..., 'win_rate': ..., 'invalid_rate': ...}

The episodes themselves are played by :func:`tutorial_lib.evaluation.episodes.run_episodes`; this module
turns them into rates (win, success, invalid...), math accuracy on training and new problems,
and the games' own speed. :func:`evaluate_policy` is the one evaluation the command line, the
chapters and the benchmarks call: a policy on a game's evaluation seeds with a preset's options.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from tutorial_lib import envs
from tutorial_lib.evaluation.episodes import EpisodeRecord, run_episodes
from tutorial_lib.lm.policies import Policy


def evaluate_policy(game: str, policy: Policy, *, preset, episodes: int | None = None,
                    env_options: dict[str, Any] | None = None, first_seed: int = 0, batch_size: int = 100,
                    progress: bool = False, with_records: bool = False, **options):
    """Play ``policy`` on evaluation seeds ``first_seed``.. (training uses seeds from 100,000 up) with
    ``preset``'s options for ``game``, ``env_options`` and ``options`` on top (an opponent, a fold), and
    summarise: what chapters 4-9, the command line and the seed benchmarks compare before and after
    training. ``env_options`` takes a dict such as an RL run's (GuessTheNumber's option ``preset``
    cannot be a keyword here). ``episodes`` defaults to the preset's ``eval_episodes``. With
    ``with_records``, returns ``(summary, records)``."""
    settings = preset.game(game)
    count = settings.eval_episodes if episodes is None else episodes
    records = run_episodes(game, policy, range(first_seed, first_seed + count),
                           env_options={**settings.env_options, **(env_options or {}), **options},
                           batch_size=batch_size, progress=progress)
    return (summarize(records), records) if with_records else summarize(records)


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

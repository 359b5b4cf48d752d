"""Three RL algorithms on one budget (chapter 7): REINFORCE (chapter 5's baseline per state), PPO and GRPO through TRL.

Each starts from chapter 4's math checkpoint, trains on the same split of problems at the same
temperature and constant learning rate, and stops once it has *sampled* the same number of answer
tokens: the budget an RL run pays for. Each run is timed and its peak memory measured.

    settings = comparison_settings(preset)              # what each algorithm runs with
    result = compare_on_math(preset, runs_dir=folder)   # start, final accuracies, histories, costs

Chapter 7 runs it once; ``benchmarks/math_rl_seeds.py`` runs it over several seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tutorial_lib.evaluation.evaluate import math_accuracy
from tutorial_lib.pipeline import sft_policy
from tutorial_lib.presets import Preset, grpo_settings, rl_settings
from tutorial_lib.rl.grpo import GRPOSettings, math_prompt_dataset, train_grpo
from tutorial_lib.rl.ppo import PPO
from tutorial_lib.rl.reinforce import Reinforce
from tutorial_lib.rl.rl_loop import train as train_rl
from tutorial_lib.runtime.device import PeakMemory

ALGORITHMS = ("REINFORCE", "PPO", "GRPO (TRL)")
#: REINFORCE's collection settings taken from chapter 6's PPO, so that both see the same problems
SHARED_WITH_PPO = ("turns_per_iteration", "num_envs", "learning_rate", "temperature", "first_seed", "train_seeds",
                   "env_options")


@dataclass
class Comparison:
    """What :func:`compare_on_math` measured."""

    #: greedy accuracy of the SFT start (``math_accuracy``'s keys)
    start: dict[str, float]
    #: the same after each algorithm's run
    final: dict[str, dict[str, float]] = field(default_factory=dict)
    #: each run's per-update log
    histories: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: sampled tokens, batches, wall seconds and peak memory per algorithm
    costs: dict[str, dict[str, float]] = field(default_factory=dict)
    #: what the peak-memory figure measures on this device
    memory_measure: str = ""


def comparison_settings(preset: Preset, seed: int = 0) -> dict[str, Any]:
    """Each algorithm's settings: chapter 6's math PPO settings are the common ground (split,
    temperature, learning rate), every learning rate constant, and GRPO's token budget for all."""
    ppo = rl_settings("math", preset, "ppo")
    grpo = replace(grpo_settings("math", preset), temperature=ppo.temperature, env_options=ppo.env_options, seed=seed)
    budget = grpo.token_budget
    cap = 1000 if budget else ppo.iterations  # with a budget, the budget decides when to stop
    reinforce = replace(rl_settings("math", preset), **{k: getattr(ppo, k) for k in SHARED_WITH_PPO})
    return {
        "REINFORCE": replace(reinforce, iterations=cap, gamma=1.0, token_budget=budget, seed=seed),
        "PPO": replace(ppo, iterations=cap, token_budget=budget, lr_schedule="constant", seed=seed),
        "GRPO (TRL)": grpo,
    }


def compare_on_math(preset: Preset, *, runs_dir: str | Path, seed: int = 0, data_seed: int | None = None,
                    progress: bool = True) -> Comparison:
    """Run the three algorithms from the same SFT checkpoint (``data_seed``: see
    :func:`tutorial_lib.pipeline.sft_policy`) with RL seed ``seed``; evaluate each greedily."""
    settings = comparison_settings(preset, seed)
    runs_dir = Path(runs_dir)
    result = Comparison(start=math_accuracy(sft_policy("math", preset, data_seed=data_seed),
                                            settings["PPO"].env_options))
    ppo = settings["PPO"]
    split = range(ppo.first_seed, ppo.first_seed + ppo.train_seeds)

    def grpo(policy, settings: GRPOSettings):
        # PPO's split of problems in order, repeated to fill every step (TRL shuffles them)
        steps = settings.prompts_per_step * settings.steps
        dataset = math_prompt_dataset([split[i % len(split)] for i in range(steps)], env_options=settings.env_options)
        return train_grpo(policy, settings, out_dir=runs_dir / "compare-grpo", dataset=dataset, progress=progress)

    # each algorithm's training, under the name its settings have in ``comparison_settings``
    train = {
        "REINFORCE": lambda policy, s: train_rl(Reinforce, policy, "math", s, out_dir=runs_dir / "compare-reinforce",
                                                progress=progress),
        "PPO": lambda policy, s: train_rl(PPO, policy, "math", s, out_dir=runs_dir / "compare-ppo", progress=progress),
        "GRPO (TRL)": grpo,
    }
    for name in ALGORITHMS:
        policy = sft_policy("math", preset, data_seed=data_seed)  # a fresh copy of the same checkpoint for each
        with PeakMemory() as memory:
            run = train[name](policy, settings[name])
        result.histories[name] = run.history
        result.final[name] = math_accuracy(policy, settings["PPO"].env_options)
        result.costs[name] = {"sampled tokens": sum(r["action_tokens"] for r in run.history),
                              "batches": len(run.history), "wall seconds": run.seconds, "peak memory (MiB)": memory.mib}
        result.memory_measure = memory.what
    return result

"""Math RL over several seeds: chapter 6's PPO run and chapter 7's three-algorithm comparison.

    python benchmarks/math_rl_seeds.py [--seeds 0 1 2] [--preset ci] [--out F]

For each seed s: chapter 4's math SFT with data-order seed s (seed 0 is the chapter's checkpoint),
then (1) chapter 6's PPO run with RL seed s and (2) chapter 7's comparison (REINFORCE, PPO,
GRPO on one token budget, ``tutorial_lib.comparison``) with RL seed s, unchanged otherwise. Greedy
accuracy on 200 training problems and 400 new ones, before and after. One JSON line per seed,
study and algorithm (``benchmarks/results/math_rl_seeds.jsonl``, read by chapters 6 and 7).
"""

import argparse
import time

from tutorial_lib.comparison import compare_on_math
from tutorial_lib.evaluation.evaluate import math_accuracy
from tutorial_lib.pipeline import sft_policy
from tutorial_lib.presets import get_preset, rl_settings
from tutorial_lib.records import record_run
from tutorial_lib.rl.ppo import PPO
from tutorial_lib.rl.rl_loop import train
from tutorial_lib.runtime.cache import cache_root

SHORT = {"accuracy (training problems)": "train", "accuracy (new problems)": "new", "format_accuracy": "format"}


def row(seed: int, study: str, algo: str, before: dict, after: dict, seconds: float) -> dict:
    line = {"data_seed": seed, "rl_seed": seed, "study": study, "algo": algo, "rl_seconds": round(seconds, 1)}
    for when, accuracy in (("before", before), ("after", after)):
        line.update({f"{when}_{SHORT[key]}": value for key, value in accuracy.items()})
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--preset", default="ci")
    parser.add_argument("--out", default=None, help="append the JSON lines to this file too")
    args = parser.parse_args()
    preset = get_preset(args.preset)
    for seed in args.seeds:
        runs_dir = cache_root() / "runs" / preset.name / f"math-seed-{seed}"
        policy = sft_policy("math", preset, data_seed=seed)
        settings = rl_settings("math", preset, "ppo", seed=seed)
        before = math_accuracy(policy, settings.env_options)
        start = time.perf_counter()
        train(PPO, policy, "math", settings, out_dir=runs_dir / "ppo-math", progress=False)
        lines = [row(seed, "chapter 6", "PPO", before, math_accuracy(policy, settings.env_options),
                     time.perf_counter() - start)]
        comparison = compare_on_math(preset, runs_dir=runs_dir, seed=seed, data_seed=seed, progress=False)
        lines += [row(seed, "chapter 7", algo, comparison.start, comparison.final[algo],
                      comparison.costs[algo]["wall seconds"]) for algo in comparison.final]
        for line in lines:
            record_run(line, args.out, preset=preset)


if __name__ == "__main__":
    main()

"""Chapter 5's tic-tac-toe REINFORCE over several seeds: does RL improve on SFT, and how reliably?

    python benchmarks/reinforce_seeds.py [--seeds 0 1 2] [--preset ci] [--out results.jsonl]

For each seed s: chapter 4's tic-tac-toe SFT with data-order seed s (seed 0 is the chapter's own
checkpoint, from the cache), then chapter 5's REINFORCE run with RL seed s, unchanged otherwise.
Before and after, greedy play on the chapter's 200 evaluation games against random (the training
opponent) and against minimax (never seen in training). One JSON line per seed, the same keys as
chapter 5 reads (``benchmarks/results/reinforce_tictactoe_seeds.jsonl``). The tiny model's training
is deterministic on one CPU but not across CPUs: the spread over seeds is the spread a reader's
machine can land anywhere in.
"""

import argparse
import json
import time
from dataclasses import replace

from tutorial_lib.evaluate import run_episodes, summarize
from tutorial_lib.models import load_policy
from tutorial_lib.pipeline import expert_data, rl_settings, sft_dir, sft_policy, sft_settings
from tutorial_lib.presets import get_preset
from tutorial_lib.reinforce import train_reinforce
from tutorial_lib.sft import train_sft
from tutorial_lib.tiny_model import cache_root


def evaluate(policy, preset, opponent: str) -> dict[str, float]:
    options = {**preset.game("tictactoe").env_options, "opponent": opponent}
    return summarize(run_episodes("tictactoe", policy, range(200), env_options=options, batch_size=100))


def sft_with_seed(preset, seed: int):
    """Chapter 4's checkpoint for seed 0; the same recipe with another data order otherwise."""
    if seed == 0:
        return sft_policy("tictactoe", preset), str(sft_dir("tictactoe", preset))
    folder = cache_root() / "sft" / f"{sft_dir('tictactoe', preset).name}-data-seed-{seed}"
    if not (folder / "sft_result.json").exists():
        settings = replace(sft_settings("tictactoe", preset), seed=seed, progress=False)
        train_sft(load_policy(preset.model), expert_data("tictactoe", preset), settings, output_dir=folder)
    return load_policy(str(folder)), str(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--preset", default="ci")
    parser.add_argument("--out", default=None, help="append the JSON lines to this file too")
    args = parser.parse_args()
    preset = get_preset(args.preset)
    for seed in args.seeds:
        start = time.perf_counter()
        policy, checkpoint = sft_with_seed(preset, seed)
        sft_seconds = time.perf_counter() - start
        before = {opponent: evaluate(policy, preset, opponent) for opponent in ("random", "minimax")}
        settings = replace(rl_settings("tictactoe", preset), seed=seed)
        run = train_reinforce(policy, "tictactoe", settings,
                              out_dir=cache_root() / "runs" / preset.name / f"reinforce-ttt-seed-{seed}")
        after = {opponent: evaluate(policy, preset, opponent) for opponent in ("random", "minimax")}
        row = {"sft_seed": seed, "rl_seed": seed, "iterations": settings.iterations,
               "learning_rate": settings.learning_rate, "checkpoint": checkpoint,
               "sft_seconds": round(sft_seconds, 1), "rl_seconds": round(run.seconds, 1)}
        for when, results in (("before", before), ("after", after)):
            row.update({f"{when}_win": results["random"]["win_rate"], f"{when}_loss": results["random"]["loss_rate"],
                        f"{when}_invalid": results["random"]["invalid_rate"],
                        f"{when}_minimax_draw": results["minimax"]["draw_rate"],
                        f"{when}_minimax_invalid": results["minimax"]["invalid_rate"]})
        line = json.dumps(row)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()

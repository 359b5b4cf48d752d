"""Cost of PPO iterations: time split into sampling and training, generated tokens per second and
peak memory, on the tiny model, on SmolLM2-135M-Instruct with LoRA (the offline pretrained model,
real weights) or on the Qwen2.5-0.5B-Instruct *architecture* with random weights and LoRA adapters
(chapter 6; the ``full`` preset's model, without a download).

    python benchmarks/ppo_cost.py --model tiny --game math --iterations 3
    python benchmarks/ppo_cost.py --model smollm2-135m --game math --iterations 3
    python benchmarks/ppo_cost.py --model qwen2.5-0.5b --game cookingworld --iterations 3   # a GPU

Random weights cost what trained ones do per token, but a random model never writes an
end-of-sequence token, so every action runs to the game's token limit: the figures are an upper
bound on the sampling cost of a trained model. SmolLM2's real weights can stop, but zero-shot on
math at temperature 1 its answers often run to the limit too: its figures are also an upper bound
on what a run from an SFT checkpoint costs. The first iteration (warm-up, JVM start-up) is
reported apart from the mean of the others. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

from sft_cost import build  # noqa: E402  (same folder: the Qwen architecture and LoRA set-up)

from tutorial_lib.lm.models import OFFLINE_MODELS
from tutorial_lib.lm.policies import LanguagePolicy
from tutorial_lib.presets import get_preset
from tutorial_lib.rl.ppo import PPO, PPOSettings
from tutorial_lib.rl.rl_loop import train as train_rl
from tutorial_lib.runtime.device import PeakMemory, device_kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["tiny", *OFFLINE_MODELS, "qwen2.5-0.5b"], default="tiny")
    parser.add_argument("--game", choices=["math", "cookingworld", "tictactoe", "guess_the_number"], default="math")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--turns", type=int, default=64, help="turns collected per iteration")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--microbatch", type=int, default=8)
    args = parser.parse_args()

    model, tokenizer = build(args.model, "lora" if args.model != "tiny" else "full")
    policy = LanguagePolicy(model, tokenizer, name=args.model)
    env_options = dict(get_preset("ci").game(args.game).env_options)
    if args.game == "cookingworld":
        env_options["fold"] = "train"
    settings = PPOSettings(iterations=args.iterations, turns_per_iteration=args.turns, num_envs=args.num_envs,
                           minibatch_turns=args.turns, microbatch_turns=args.microbatch, env_options=env_options,
                           lr_schedule="constant")
    with tempfile.TemporaryDirectory() as out, PeakMemory() as memory:
        result = train_rl(PPO, policy, args.game, settings, out_dir=out, progress=False)
    rest = result.history[1:] or result.history
    sample = statistics.fmean(r["sample_seconds"] for r in rest)
    train = statistics.fmean(r["train_seconds"] for r in rest)
    tokens = statistics.fmean(r["action_tokens"] for r in rest)
    print(json.dumps({
        "model": args.model, "device": device_kind(), "game": args.game, "turns_per_iteration": args.turns,
        "num_envs": args.num_envs, "trainable_parameters": policy.num_parameters(trainable_only=True),
        "first_iteration_seconds": round(result.history[0]["sample_seconds"] + result.history[0]["train_seconds"], 2),
        "sample_seconds": round(sample, 2), "train_seconds": round(train, 2),
        "sample_share": round(sample / (sample + train), 3),
        "generated_tokens_per_second": round(tokens / sample, 1),
        "peak_memory_mib": round(memory.mib, 1), "memory_measured": memory.what,
    }))


if __name__ == "__main__":
    main()

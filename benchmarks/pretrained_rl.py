"""RL on a pretrained model over seeds: SFT, greedy evaluation, RL, greedy evaluation, one record a run.

    python benchmarks/pretrained_rl.py --preset gpu --tasks ttt-x ttt-o math gtn-100 --seeds 0 1 2 \
        --out benchmarks/results/pretrained_rl_gpu.jsonl --time-limit 540     # on a GPU
    python benchmarks/pretrained_rl.py --preset ci --tasks ttt-x gtn-100 --seeds 0 --iterations 1 \
        --episodes 10 --out /tmp/try.jsonl                                     # the tiny model: a quick try

Each run starts from the preset's SFT checkpoint of the task's game with data-order seed ``s``
(trained here if the cache has none), evaluates it greedily, runs the preset's RL recipe with RL
seed ``s`` on the task's training options, and evaluates again on the same games. The tasks are
those the book's claim rests on (a pretrained model that RL makes better):

* ``ttt-x``, ``ttt-o``: tic-tac-toe playing x (first) or o (second) only; REINFORCE against the
  mixture of random and minimax (chapter 5's rule); draws against minimax, and losses to random.
* ``math``: chapter 6's PPO on the training split; accuracy on problems never trained on (the test
  split) and on training problems.
* ``gtn-100``: GuessTheNumber on 1-100 in 8 turns, a range and turn limit the SFT data (1-10 in 4
  at ``small``/``gpu``) never had; REINFORCE on it; success rate.

A run is skipped when less than ``--time-limit`` minus the time used is left for its estimated
cost (its own previous duration, else ``--run-estimate``), so that a device call of limited length
ends with whole records. Each line: command, device, versions, preset, model, task, game, algo,
seed, iterations, before/after metrics, the RL curves (return, invalid rate, entropy, KL to the
sampler) and the seconds of each stage.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

TASKS = {
    "ttt-x": dict(game="tictactoe", algo="reinforce", train={"agent_mark": "x"}, eval={"agent_mark": "x"}),
    "ttt-o": dict(game="tictactoe", algo="reinforce", train={"agent_mark": "o"}, eval={"agent_mark": "o"}),
    "math": dict(game="math", algo="ppo", train={}, eval={}),
    "gtn-100": dict(game="guess_the_number", algo="reinforce",
                    train={"preset": None, "low": 1, "high": 100, "max_turns": 8},
                    eval={"preset": None, "low": 1, "high": 100, "max_turns": 8}),
}
#: what each task's before/after compares (the first is the claim's metric)
HEADLINE = {"ttt-x": "minimax_draw_rate", "ttt-o": "minimax_draw_rate", "math": "accuracy (new problems)",
            "gtn-100": "success_rate"}
CURVES = ("mean_return", "invalid_rate", "entropy", "kl_k3")


def evaluate(task: str, policy, preset, episodes: int) -> dict[str, float]:
    from tutorial_lib.evaluation.evaluate import evaluate_policy, math_accuracy

    spec = TASKS[task]
    if spec["game"] == "math":
        return math_accuracy(policy, preset.game("math").env_options, training_problems=min(episodes, 200),
                             new_problems=episodes)
    if spec["game"] == "tictactoe":
        results = {}
        for opponent in ("minimax", "random"):
            summary = evaluate_policy("tictactoe", policy, preset=preset, episodes=episodes,
                                      env_options={**spec["eval"], "opponent": opponent})
            results.update({f"{opponent}_{k}": summary[k] for k in ("win_rate", "draw_rate", "loss_rate", "invalid_rate")})
        return results
    summary = evaluate_policy(spec["game"], policy, preset=preset, episodes=episodes, env_options=spec["eval"])
    return {k: summary[k] for k in ("success_rate", "mean_turns", "invalid_rate", "truncated_rate")}


def run(task: str, seed: int, preset, episodes: int, iterations: int | None) -> dict:
    import torch

    from tutorial_lib.pipeline import rl_settings, sft_policy
    from tutorial_lib.rl.ppo import train_ppo
    from tutorial_lib.rl.reinforce import train_reinforce
    from tutorial_lib.runtime.cache import cache_root

    spec = TASKS[task]
    game, algo = spec["game"], spec["algo"]
    start = time.perf_counter()
    policy = sft_policy(game, preset, data_seed=seed)
    sft_seconds = time.perf_counter() - start
    before = evaluate(task, policy, preset, episodes)
    settings = rl_settings(game, preset, algo)
    options = {**settings.env_options, **spec["train"]}  # GuessTheNumber: preset=None and its own range
    settings = replace(settings, seed=seed, env_options=options,
                       **({"iterations": iterations} if iterations else {}))
    torch.manual_seed(seed)
    out_dir = Path(tempfile.mkdtemp(prefix=f"pretrained-rl-{task}-{seed}-", dir=cache_root()))
    train = train_ppo if algo == "ppo" else train_reinforce
    trained = train(policy, game, settings, out_dir=out_dir, progress=False)
    after = evaluate(task, policy, preset, episodes)
    return {"task": task, "game": game, "algo": algo, "seed": seed, "iterations": settings.iterations,
            "turns_per_iteration": settings.turns_per_iteration, "learning_rate": settings.learning_rate,
            "train_options": options, "eval_episodes": episodes,
            "headline": HEADLINE[task],
            **{f"before_{k}": v for k, v in before.items()}, **{f"after_{k}": v for k, v in after.items()},
            "curves": {key: [round(row[key], 4) for row in trained.history if key in row] for key in CURVES},
            "sft_seconds": round(sft_seconds, 1), "rl_seconds": round(trained.seconds, 1),
            "seconds": round(time.perf_counter() - start, 1), "run_dir": str(out_dir)}


def machine() -> dict:
    import peft
    import torch
    import transformers

    from tutorial_lib.runtime.device import cpu_name

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"{cpu_name()}, {torch.get_num_threads()} threads"
    return {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
            "peft": peft.__version__, "python": platform.python_version()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="gpu", help="ci, small, gpu or full (the model: TUTORIAL_MODEL or the preset's)")
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=200, help="evaluation games (math: new problems)")
    parser.add_argument("--iterations", type=int, default=None, help="RL iterations (default: the preset's)")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds this call may take")
    parser.add_argument("--run-estimate", type=float, default=240.0, help="seconds a run takes, until one has")
    parser.add_argument("--out", type=Path, default=None, help="append each run's JSON line here as it ends")
    args = parser.parse_args()

    from tutorial_lib.presets import get_preset
    from tutorial_lib.report import record_run

    preset = get_preset(args.preset)
    command = "python " + " ".join(sys.argv)
    started, took = time.perf_counter(), {}
    for seed in args.seeds:
        for task in args.tasks:
            estimate = took.get(task, args.run_estimate)
            if args.time_limit and time.perf_counter() - started + estimate > args.time_limit:
                print(f"skipped {task} seed {seed}: ~{estimate:.0f} s would pass the {args.time_limit:.0f} s limit",
                      file=sys.stderr, flush=True)
                continue
            row = run(task, seed, preset, args.episodes, args.iterations)
            took[task] = row["seconds"]
            record_run({"command": command, **machine(), **row}, args.out, preset=preset)
            before, after = row[f"before_{HEADLINE[task]}"], row[f"after_{HEADLINE[task]}"]
            print(f"# {task} seed {seed}: {HEADLINE[task]} {before:.3f} -> {after:.3f} ({row['seconds']:.0f} s)",
                  file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

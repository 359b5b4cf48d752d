"""Rollout throughput: batched collection over N games against one game at a time (chapter 5).

    python benchmarks/rollout_throughput.py [--game tictactoe] [--episodes 96] [--model tiny] [--envs 1 8 32]
    python benchmarks/rollout_throughput.py --game guess_the_number --env preset=hard \
        --model ~/.cache/tutorial_lib/sft/<checkpoint> --envs 8 16 32 64 --batch-sizes-only

The baseline is the TextWorld tutorial's loop: one episode at a time, one ``generate`` call per
turn with a batch of one. Against it, :func:`tutorial_lib.rl.rollout.collect` with N games side by
side (one ``generate`` per turn over all live games), and the largest N once more without
prefix sharing (``LanguagePolicy.share_prefix``: the prompts' common start computed once per
batch). Same model, same seeds, same sampling preset (``rl``), in the same run, after a warm-up
call. The settings take turns for ``--repeats``
rounds and each keeps its fastest round, so that a burst of load from other jobs on a shared
machine does not land on one setting only. Prints turns/s and generated tokens/s, their ratios to
the baseline, and a JSON line with the same numbers. ``--batch-sizes-only`` drops the baseline and
the no-sharing row and compares the batch sizes with the smallest. With more episodes than games side
by side the batch refills as games end, which mixes early and late turns and shrinks the prompts'
shared start: on a CPU that, not the batch size, is what slows collection (``benchmarks/results/smollm2_cpu.md``).
"""

import argparse
import json
import time

import torch

from tutorial_lib import envs
from tutorial_lib.__main__ import env_option
from tutorial_lib.lm.models import load_policy
from tutorial_lib.lm.policies import EpisodeState
from tutorial_lib.lm.prompts import Turn
from tutorial_lib.rl.rollout import collect


def one_at_a_time(policy, game: str, seeds: range, env_options: dict) -> dict[str, float]:
    """The tutorial's loop: play each episode to its end before starting the next."""
    env = envs.make(game, **env_options)
    turns = tokens = 0
    start = time.perf_counter()
    try:
        for seed in seeds:
            observation, info = env.reset(seed=seed)
            state = EpisodeState(game, env, [Turn(observation, info=info)])
            while not env.done:
                [sample] = policy.act_samples([state], sampling="rl")
                state.turns[-1].action = sample.text
                observation, _, _, _, info = env.step(sample.text)
                state.turns.append(Turn(observation, info=info))
                turns, tokens = turns + 1, tokens + len(sample.action_ids)
    finally:
        env.close()
    return _speeds(turns, tokens, time.perf_counter() - start)


def batched(policy, game: str, seeds: range, num_envs: int, env_options: dict,
            share_prefix: bool = True) -> dict[str, float]:
    policy.share_prefix = share_prefix
    try:
        rollout = collect(policy, game, seeds, num_envs=num_envs, sampling="rl", env_options=env_options)
    finally:
        policy.share_prefix = True
    summary = rollout.summary()
    return _speeds(summary["turns"], summary["action_tokens"], rollout.seconds)


def _speeds(turns: int, tokens: int, seconds: float) -> dict[str, float]:
    return {
        "turns": turns,
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "turns_per_s": round(turns / seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--game", default="tictactoe", choices=sorted(envs.GAMES))
    parser.add_argument("--episodes", type=int, default=96)
    parser.add_argument("--model", default="tiny", help="'tiny', 'smollm2-135m', a checkpoint folder or a hub id")
    parser.add_argument("--env", type=env_option, action="append", metavar="KEY=VALUE",
                        help="a game option, e.g. --env preset=hard (GuessTheNumber's 1-50 range)")
    parser.add_argument("--batch-sizes-only", action="store_true",
                        help="no one-at-a-time baseline and no no-sharing row; ratios to the smallest batch")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 32], help="games side by side")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; each setting keeps its fastest")
    parser.add_argument("--device", default=None, help="cuda, xla, mps or cpu (default: the best one present)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        # on a CPU shared with other jobs, fewer threads than cores avoids stalls that swamp the timings
        torch.set_num_threads(args.threads)

    policy = load_policy(args.model, device=args.device, seed=0)
    policy.sample(["warm-up"], max_new_tokens=4, sampling="rl")  # first-call costs out of the timings
    seeds = range(args.episodes)
    options = dict(args.env or [])
    settings = {}
    if not args.batch_sizes_only:
        settings["one at a time"] = lambda: one_at_a_time(policy, args.game, seeds, options)
    for n in sorted(args.envs):
        settings[f"batched N={n}"] = lambda n=n: batched(policy, args.game, seeds, n, options)
    if not args.batch_sizes_only:
        # the largest batch again without computing the prompts' shared start once (LanguagePolicy.sample)
        settings[f"N={max(args.envs)} no sharing"] = lambda: batched(policy, args.game, seeds, max(args.envs),
                                                                     options, False)
    rows: dict[str, dict[str, float]] = {}
    for _ in range(args.repeats):
        for name, run in settings.items():
            result = run()
            if name not in rows or result["turns_per_s"] > rows[name]["turns_per_s"]:
                rows[name] = result
    base = next(iter(rows.values()))  # the baseline, or the smallest batch
    for row in rows.values():
        row["x_turns_per_s"] = round(row["turns_per_s"] / base["turns_per_s"], 2)
        row["x_tokens_per_s"] = round(row["tokens_per_s"] / base["tokens_per_s"], 2)

    print(f"{args.game} {options or ''}, {args.episodes} episodes, model {args.model} on {policy.device}, "
          f"{torch.get_num_threads()} CPU threads, best of {args.repeats}; ratios to {next(iter(rows))!r}")
    print(f"{'':16} {'turns':>6} {'tokens':>7} {'s':>7} {'turns/s':>8} {'tokens/s':>9} {'x turns/s':>10} {'x tokens/s':>11}")
    for name, r in rows.items():
        print(
            f"{name:16} {r['turns']:6} {r['tokens']:7} {r['seconds']:7.2f} {r['turns_per_s']:8.1f} "
            f"{r['tokens_per_s']:9.0f} {r['x_turns_per_s']:10.1f} {r['x_tokens_per_s']:11.1f}"
        )
    print(json.dumps({"game": args.game, "env_options": options, "episodes": args.episodes, "model": args.model,
                      "device": str(policy.device), "threads": torch.get_num_threads(), "repeats": args.repeats,
                      "results": rows}))  # fmt: skip


if __name__ == "__main__":
    main()

"""Tic-tac-toe RL over several seeds (chapter 5's REINFORCE, chapter 6's PPO, chapter 7's GRPO on
single moves): does RL improve on SFT, and how reliably?

    python benchmarks/tictactoe_rl_seeds.py --algo reinforce [--seeds 0 1 2] [--preset ci] [--out F]
    python benchmarks/tictactoe_rl_seeds.py --algo ppo [--seeds 0 1 2] [--preset ci] [--out F]
    python benchmarks/tictactoe_rl_seeds.py --algo grpo [--seeds 0 1 2] [--preset ci] [--out F]
    python benchmarks/tictactoe_rl_seeds.py --algo reinforce --sft-epochs 30 [--iterations 120] ...

For each seed s: chapter 4's tic-tac-toe SFT with data-order seed s (seed 0 is the chapter's own
checkpoint, from the cache), then the preset's RL run of the chosen algorithm with RL seed s,
unchanged otherwise. Before and after, greedy play on the chapters' 200 evaluation games against
random (the training opponent) and against minimax (never seen in training). One JSON line per
seed, the keys chapters 5 and 6 read (``benchmarks/results/<algo>_tictactoe_seeds.jsonl``). The
tiny model's training is deterministic on one CPU but not across CPUs: the spread over seeds is
the spread a reader's machine can land anywhere in.

``--sft-epochs N`` trains the SFT start with N epochs instead of the preset's (its own cached
checkpoints; the row says ``sft_epochs``), ``--iterations`` runs RL longer or shorter than the
preset: how much of chapter 4's tic-tac-toe run the RL chapters need, and what RL makes of it.
``--lr-schedule warmup_cosine`` lets the learning rate fall to 0 over the run (its own folders; the
row says ``lr_schedule``): whether the last iterations' checkpoint is steadier than at a constant rate.
"""

import argparse
import time

from tutorial_lib.evaluation.evaluate import evaluate_policy
from tutorial_lib.pipeline import sft_policy, sft_settings, with_sft_changes
from tutorial_lib.presets import get_preset, rl_settings
from tutorial_lib.records import record_run
from tutorial_lib.rl.ppo import PPO
from tutorial_lib.rl.reinforce import Reinforce
from tutorial_lib.rl.rl_loop import train
from tutorial_lib.rl.settings import LR_SCHEDULES
from tutorial_lib.rl.tictactoe_moves import train_grpo_on_moves
from tutorial_lib.runtime.cache import cache_root


def evaluate(policy, preset, opponent: str) -> dict[str, float]:
    return evaluate_policy("tictactoe", policy, preset=preset, episodes=200, opponent=opponent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("reinforce", "ppo", "grpo"), required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--preset", default="ci")
    parser.add_argument("--out", default=None, help="append the JSON lines to this file too")
    parser.add_argument("--sft-epochs", type=int, default=None, help="SFT epochs (default: the preset's)")
    parser.add_argument("--iterations", type=int, default=None, help="RL iterations (default: the preset's)")
    parser.add_argument("--lr-schedule", choices=LR_SCHEDULES, default=None,
                        help="RL learning-rate schedule (default: the preset's; warmup_cosine with no warm-up "
                             "here: a cosine from the preset's rate to 0 at the last iteration)")
    args = parser.parse_args()
    if args.lr_schedule and args.algo == "grpo":
        parser.error("--lr-schedule is for REINFORCE and PPO (GRPO's schedule is TRL's)")
    schedule = dict(lr_schedule=args.lr_schedule, warmup_iterations=0) if args.lr_schedule else {}
    preset = get_preset(args.preset)
    if args.sft_epochs is not None:
        preset = with_sft_changes(preset, "tictactoe", epochs=args.sft_epochs)
    sft_epochs = sft_settings("tictactoe", preset).epochs
    for seed in args.seeds:
        start = time.perf_counter()
        policy = sft_policy("tictactoe", preset, data_seed=seed)
        sft_seconds = time.perf_counter() - start
        before = {opponent: evaluate(policy, preset, opponent) for opponent in ("random", "minimax")}
        settings = rl_settings("tictactoe", preset, args.algo, seed=seed, iterations=args.iterations, **schedule)
        iterations = settings.steps if args.algo == "grpo" else settings.iterations
        out_dir = cache_root() / "runs" / preset.name / (f"{args.algo}-ttt-seed-{seed}-sft-{sft_epochs}-epochs-{iterations}"
                                                         + (f"-{args.lr_schedule}" if args.lr_schedule else ""))
        if args.algo == "grpo":
            run = train_grpo_on_moves(policy, settings, out_dir=out_dir)
        else:
            run = train(PPO if args.algo == "ppo" else Reinforce, policy, "tictactoe", settings, out_dir=out_dir)
        after = {opponent: evaluate(policy, preset, opponent) for opponent in ("random", "minimax")}
        row = {"algo": args.algo, "sft_seed": seed, "sft_epochs": sft_epochs, "rl_seed": seed, "iterations": iterations,
               "action_tokens": sum(r.get("action_tokens", 0) for r in run.history),
               "learning_rate": settings.learning_rate, **({"lr_schedule": args.lr_schedule} if schedule else {}),
               "sft_seconds": round(sft_seconds, 1), "rl_seconds": round(run.seconds, 1)}
        for when, results in (("before", before), ("after", after)):
            row.update({f"{when}_win": results["random"]["win_rate"], f"{when}_loss": results["random"]["loss_rate"],
                        f"{when}_invalid": results["random"]["invalid_rate"],
                        f"{when}_minimax_draw": results["minimax"]["draw_rate"],
                        f"{when}_minimax_invalid": results["minimax"]["invalid_rate"]})
        if args.algo != "grpo":
            row["return_curve"] = [round(r["mean_return"], 3) for r in run.history]
        record_run(row, args.out, preset=preset)


if __name__ == "__main__":
    main()

"""Command line for runs outside notebooks (chapters 3-6): the way a GPU user runs ``full``.

    python -m tutorial_lib data     --game tictactoe --preset ci --out runs/data
    python -m tutorial_lib sft      --game tictactoe --preset ci --out runs/sft-ttt [--data FILE]
    python -m tutorial_lib evaluate --game tictactoe --policy runs/sft-ttt --opponent random \\
                                    --episodes 200 --json
    python -m tutorial_lib rl       --algo reinforce --game tictactoe --preset ci \\
                                    [--init runs/sft-ttt] --out runs/rl-ttt [--resume]
    python -m tutorial_lib rl       --algo ppo --game cookingworld --preset ci --out runs/ppo-cw
    python -m tutorial_lib rl       --algo grpo --game math --preset ci --out runs/grpo-math

``rl`` starts from ``--init`` (a folder written by ``sft``, or ``tiny``), by default from the
chapter-4 checkpoint of the game (trained now if the cache has none); it writes ``metrics.csv``,
TensorBoard logs, a resumable ``checkpoint/`` and the final ``model/`` (PPO adds ``value_model.pt``
to it), and prints one JSON line. A run killed at any instant goes on with ``--resume``: ``rl`` from
its newest complete ``checkpoint/`` (every ``--save-every`` iterations), ``sft`` from its newest
complete ``checkpoint-N`` (every ``--save-steps`` steps), with the weights the uninterrupted run
would have had (``tests/test_crash_safety.py`` kills both and checks).

Every stage takes ``--preset ci|small|gpu|full`` (default: ``TUTORIAL_SCALE``) and smallest-count options
for a smoke run of the whole path (``data --episodes``, ``sft --max-steps``, ``rl --iterations
--turns-per-iteration``, ``evaluate --episodes``): CI runs every stage this way at ``full`` with
``TUTORIAL_MODEL=smollm2-135m``, so the pretrained-model path cannot rot unseen. ``--policy`` and
``--init`` take ``tiny``, an offline model's name (``smollm2-135m``), a hub id or a folder.
Math at ``full`` reads GSM8K through ``datasets`` (network); ``--math-source generated`` uses the
offline generator instead, and only when asked.

``rl`` and ``sft`` also run as several processes (data-parallel; chapter 10)::

    accelerate launch --config_file configs/accelerate/ddp.yaml -m tutorial_lib rl --algo ppo ...

Each process collects and trains on its share; the main process alone writes the outputs and
prints the JSON line.

``evaluate`` prints one JSON object of metrics (``win_rate``, ``draw_rate``, ``loss_rate``,
``invalid_rate`` for tic-tac-toe; ``success_rate``, ``mean_score``, ``mean_steps``,
``invalid_rate`` for CookingWorld; ``success_rate``, ``mean_turns``, ``invalid_rate`` for
GuessTheNumber; ``accuracy``, ``format_accuracy`` for math).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import replace
from pathlib import Path

from tutorial_lib import envs
from tutorial_lib.presets import SCALES, get_preset
from tutorial_lib.runtime import distributed


def _preset(args):
    """The preset, with the command line's count and source options applied."""
    preset = get_preset(args.preset)
    game = preset.game(args.game)
    changes = {}
    if getattr(args, "episodes", None) is not None and args.command == "data":
        changes["expert_episodes"] = args.episodes
    if getattr(args, "math_source", None) and args.game == "math":
        changes["env_options"] = {**game.env_options, "source": args.math_source}
        for field_name in ("ppo", "grpo"):  # an algorithm's own source option follows the command line's
            settings = getattr(game, field_name)
            if settings is not None and "source" in settings.env_options:
                changes[field_name] = replace(settings, env_options={**settings.env_options, "source": args.math_source})
    if changes:
        preset = replace(preset, games={**preset.games, args.game: replace(game, **changes)})
        if args.command == "data" and args.game == "tictactoe" and args.episodes is not None:
            # self-play takes expert_episodes; the games against a random player are capped too
            preset = replace(preset, mcts_vs_random_games=min(preset.mcts_vs_random_games, args.episodes))
    return preset


def _data(args) -> int:
    from tutorial_lib.data.expert_data import load_examples, save_examples
    from tutorial_lib.pipeline import make_expert_data

    preset = _preset(args)
    examples = make_expert_data(args.game, preset, progress=not args.quiet)
    path = save_examples(examples, Path(args.out) / f"{args.game}.jsonl")
    dataset = load_examples(path)
    print(json.dumps({"path": str(path), "examples": len(dataset), "game": args.game, "preset": preset.name}))
    return 0


def _sft(args) -> int:
    from tutorial_lib.data.expert_data import load_examples
    from tutorial_lib.data.sft import train_sft
    from tutorial_lib.lm.models import load_policy
    from tutorial_lib.pipeline import lora_for, make_expert_data, sft_settings

    preset = _preset(args)
    with distributed.main_first():  # expert data made (and cached) once
        examples = (load_examples(args.data).to_list() if args.data
                    else make_expert_data(args.game, preset, progress=not args.quiet))
    settings = sft_settings(args.game, preset)
    if args.epochs is not None:
        settings.epochs = args.epochs
    if args.max_steps is not None:
        settings.max_steps = args.max_steps
    if args.save_steps is not None:
        settings.save_steps = args.save_steps
    with distributed.main_first():  # a model built on first use (the tiny one) is built once
        policy = load_policy(preset.model, lora=lora_for(preset), load_in_4bit=args.load_in_4bit,
                             lora_seed=settings.seed)  # the adapters sft_policy would start from
    if args.load_in_4bit:
        settings.optim = "paged_adamw_8bit"
    # Progress and the Trainer's log lines go to stderr: stdout is the one JSON line below.
    with contextlib.redirect_stdout(sys.stderr):
        result = train_sft(policy, examples, settings, output_dir=args.out, resume=args.resume)
    losses = result.losses
    if distributed.is_main():
        print(json.dumps({"output_dir": str(result.output_dir), "examples": result.examples,
                          "seconds": round(result.seconds, 1), "steps": result.step, "processes": result.processes,
                          "global_batch_size": result.global_batch_size,
                          "first_loss": losses[0][1] if losses else None, "last_loss": losses[-1][1] if losses else None}))
    return 0


def _evaluate(args) -> int:
    from tutorial_lib.evaluation.evaluate import evaluate_policy
    from tutorial_lib.lm.models import load_policy

    preset = _preset(args)
    options = {}
    if args.game == "tictactoe":
        options["opponent"] = args.opponent
        # x and o alternately, unless the preset's options (merged by evaluate_policy) say otherwise
        options["agent_mark"] = preset.game(args.game).env_options.get("agent_mark", "alternate")
    if args.game == "cookingworld":
        options["fold"] = args.fold
    options.update(dict(args.env or []))
    if args.game == "math":  # the generator and GSM8K have a train and a test split, no dev split
        if args.fold == "dev":
            raise ValueError("math has no dev split: use --fold train or --fold test")
        options["split"] = args.fold
    policy = load_policy(args.policy, sampling=args.sampling, seed=args.seed)
    # Test-fold and evaluation seeds start at 0; a different --seed gives other games.
    try:
        metrics = evaluate_policy(args.game, policy, preset=preset, episodes=args.episodes or None, env_options=options,
                                  first_seed=args.seed, batch_size=args.batch_size, progress=not args.json)
    except RuntimeError as error:
        source = {**preset.game(args.game).env_options, **options}.get("source")
        if args.game == "math" and source == "gsm8k":  # GSM8K could not be read
            raise RuntimeError(f"{error}\nOn the command line: --math-source generated uses the offline "
                               "generator instead") from error
        raise
    metrics.update(game=args.game, policy=args.policy, sampling=args.sampling, **({"fold": args.fold} if args.game in ("cookingworld", "math") else {}),
                   **({"opponent": args.opponent} if args.game == "tictactoe" else {}))
    print(json.dumps(metrics) if args.json else "\n".join(f"{k:>16}: {v}" for k, v in metrics.items()))
    return 0


def _rl(args) -> int:
    from tutorial_lib.lm.models import is_pretrained, load_policy
    from tutorial_lib.pipeline import sft_policy
    from tutorial_lib.presets import rl_settings
    from tutorial_lib.rl.grpo import train_grpo
    from tutorial_lib.rl.ppo import PPO
    from tutorial_lib.rl.reinforce import Reinforce
    from tutorial_lib.rl.rl_loop import train

    preset = _preset(args)
    if args.algo == "grpo" and args.game != "math":
        raise ValueError("rl --algo grpo trains math answers (chapter 7's tic-tac-toe moves run from the notebook)")
    if args.update_dtype and args.algo == "grpo":
        raise ValueError("--update-dtype is REINFORCE's and PPO's; GRPO computes in the Trainer's dtype (bfloat16 on a GPU)")
    if args.train_top_layers and args.algo == "grpo":
        raise ValueError("--train-top-layers is REINFORCE's and PPO's")
    if args.validate_every and args.algo == "grpo":
        raise ValueError("--validate-every is REINFORCE's and PPO's; GRPO's Trainer keeps its own checkpoints")
    settings = rl_settings(args.game, preset, args.algo, iterations=args.iterations, save_every=args.save_every,
                           turns_per_iteration=args.turns_per_iteration, update_dtype=args.update_dtype,
                           train_top_layers=args.train_top_layers, pack_games=args.pack_games or None,
                           validate_every=args.validate_every, validation_episodes=args.validation_episodes,
                           validation_metric=args.validation_metric)
    with contextlib.redirect_stdout(sys.stderr):
        # several processes: the main one trains (and caches) a missing SFT checkpoint, the others load it
        with distributed.main_first():
            if args.init:
                # lora=True: a folder of adapters trains them further, a base model gets the default ones
                policy = load_policy(args.init, lora=True if is_pretrained(preset.model) else None)
            else:
                policy = sft_policy(args.game, preset, progress=not args.quiet)
        if args.algo == "grpo":
            result = train_grpo(policy, settings, out_dir=args.out, resume=args.resume, progress=not args.quiet)
        else:
            algorithm = {"reinforce": Reinforce, "ppo": PPO}[args.algo]
            result = train(algorithm, policy, args.game, settings, out_dir=args.out, resume=args.resume,
                           progress=not args.quiet)
    last = result.history[-1] if result.history else {}
    if distributed.is_main():
        print(json.dumps({"output_dir": str(result.out_dir), "model": str(result.out_dir / "model"), "algo": args.algo,
                          "iterations": len(result.history), "seconds": round(result.seconds, 1),
                          "processes": distributed.num_processes(),
                          **({"validation": result.validation} if getattr(result, "validation", None) else {}),
                          "last": {k: last[k] for k in ("mean_return", "success_rate", "invalid_rate") if k in last}}))
    return 0


def env_option(text: str) -> tuple[str, object]:
    """``key=value`` -> (key, value), the value an int when it reads as one."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, int(value) if value.lstrip("-").isdigit() else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tutorial_lib", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--game", required=True, choices=envs.GAMES)
        p.add_argument("--preset", choices=SCALES, default=None,
                       help="ci, small, gpu or full (default: from TUTORIAL_SCALE)")
        p.add_argument("--math-source", choices=["generated", "gsm8k"],
                       help="math problems from the offline generator or GSM8K (default: the preset's)")

    data = commands.add_parser("data", help="make expert data (JSON lines)")
    common(data)
    data.add_argument("--out", required=True)
    data.add_argument("--episodes", type=int, help="expert episodes (self-play games) instead of the preset's")
    data.add_argument("--quiet", action="store_true")
    sft = commands.add_parser("sft", help="supervised fine-tuning on expert data")
    common(sft)
    sft.add_argument("--out", required=True)
    sft.add_argument("--data", help="a JSON-lines file from `data` (made now when omitted)")
    sft.add_argument("--epochs", type=float)
    sft.add_argument("--max-steps", type=int, help="stop after this many optimiser steps")
    sft.add_argument("--save-steps", type=int, help="keep a resumable checkpoint every this many optimiser steps")
    sft.add_argument("--resume", action="store_true",
                     help="continue from the newest complete checkpoint in OUT (written with --save-steps)")
    sft.add_argument("--load-in-4bit", action="store_true", help="QLoRA: 4-bit base weights (CUDA only)")
    sft.add_argument("--quiet", action="store_true")
    ev = commands.add_parser("evaluate", help="play a policy and print its metrics")
    common(ev)
    ev.add_argument("--policy", required=True,
                    help="'tiny', an offline model ('smollm2-135m'), a hub id, or a folder written by `sft` or `rl`")
    ev.add_argument("--opponent", choices=["random", "mcts", "minimax"], default="random")
    ev.add_argument("--episodes", type=int)
    ev.add_argument("--fold", choices=["train", "dev", "test"], default="test",
                    help="CookingWorld's fold of games, or math's split of problems (train or test)")
    ev.add_argument("--sampling", choices=["greedy", "standard", "liberal"], default="greedy")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--batch-size", type=int, default=64)
    ev.add_argument("--env", type=env_option, action="append", metavar="KEY=VALUE",
                    help="a game option for this evaluation, e.g. --env preset=hard (GuessTheNumber's 1-50 range)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    rl = commands.add_parser("rl", help="reinforcement learning from a policy")
    common(rl)
    rl.add_argument("--algo", choices=["reinforce", "ppo", "grpo"], default="reinforce",
                    help="REINFORCE with ReBN (chapter 5), PPO with a value head (chapter 6) or GRPO through TRL "
                         "(chapter 7; math)")
    rl.add_argument("--init", help="starting policy: 'tiny' or a folder (default: the chapter-4 SFT checkpoint)")
    rl.add_argument("--out", required=True)
    rl.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    rl.add_argument("--iterations", type=int, help="RL iterations (GRPO: optimiser steps)")
    rl.add_argument("--turns-per-iteration", type=int)
    rl.add_argument("--save-every", type=int, help="checkpoint every this many iterations (GRPO: optimiser steps)")
    rl.add_argument("--update-dtype", choices=["float32", "bfloat16"],
                    help="the update's arithmetic: bfloat16 autocasts its forward and backward passes (weights and "
                         "optimiser stay float32); fast on a GPU or a CPU with AVX512-BF16 or AMX")
    rl.add_argument("--train-top-layers", type=int,
                    help="train only the top N decoder layers (their LoRA adapters): the backward pass stops at the "
                         "lowest of them, the lower layers keep the start's weights (default: every layer)")
    rl.add_argument("--pack-games", action="store_true",
                    help="REINFORCE: score each game's turns in one forward pass, the history they repeat computed "
                         "once (the same log-probs up to rounding, about half the tokens of a GuessTheNumber game)")
    rl.add_argument("--validate-every", type=int,
                    help="choose the model on held-out greedy games: validate the start, every this many iterations "
                         "and the last, and save the best weights as the model (default: the last iteration's)")
    rl.add_argument("--validation-episodes", type=int, help="validation games (seeds 50,000 up; default 50)")
    rl.add_argument("--validation-metric", help="the summary metric validation ranks by, higher is better "
                                                "(default mean_return; e.g. success_rate, draw_rate, accuracy)")
    rl.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    distributed.setup()  # under accelerate launch: join the other processes before any model loads
    try:
        return {"data": _data, "sft": _sft, "evaluate": _evaluate, "rl": _rl}[args.command](args)
    except (ValueError, FileNotFoundError, RuntimeError) as error:  # ModelUnavailableError included
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

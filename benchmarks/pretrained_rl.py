"""RL on a pretrained model over seeds: SFT, greedy evaluation, RL, greedy evaluation, one record a run.

    python benchmarks/pretrained_rl.py --preset gpu --tasks ttt-x ttt-o math gtn-100 --seeds 0 1 2 \
        --out benchmarks/results/pretrained_rl_gpu.jsonl --time-limit 540     # on a GPU
    python benchmarks/pretrained_rl.py --preset small --tasks gtn-50 --seeds 0 1 2 --iterations 16 \
        --learning-rate 1e-4 --out benchmarks/results/pretrained_rl_cpu.jsonl  # SmolLM2 on a 2-core CPU
    python benchmarks/pretrained_rl.py --preset ci --tasks ttt-x gtn-100 --seeds 0 --iterations 1 \
        --episodes 10 --out /tmp/try.jsonl                                     # the tiny model: a quick try

Each run starts from the preset's SFT checkpoint of the task's game with seed ``s`` (the examples'
order and, for a pretrained model, the LoRA adapters' initial values; trained here if the cache has
none), evaluates it greedily, runs the preset's RL recipe with RL seed ``s`` on the task's training
options, and evaluates again on the same games. The tasks are
those the book's claim rests on (a pretrained model that RL makes better):

* ``ttt-x``, ``ttt-o``: tic-tac-toe playing x (first) or o (second) only; REINFORCE against the
  mixture of random and minimax (chapter 5's rule); draws against minimax, and losses to random.
* ``math``: chapter 6's PPO on the training split; accuracy on problems never trained on (the test
  split) and on training problems.
* ``gtn-50``, ``gtn-100``: GuessTheNumber on 1-50 in 7 turns or 1-100 in 8, ranges and turn limits
  the SFT data (1-10 in 4 at ``small``/``gpu``) never had; REINFORCE on it; success rate.
* ``gtn-50-ranges``: ``gtn-50`` from an SFT start whose binary-search games were on three ranges
  (1-10 in 4 turns, 1-20 in 5, 1-30 in 5; the game's ``ranges`` option), none of them 1-50: the
  preset's SFT recipe otherwise. From 1-10 alone SmolLM2 counts up by one above 10 and RL never
  samples a bisection there (``benchmarks/results/pretrained_rl_cpu.md``); over several ranges it
  learns binary search as a rule of the stated range, which 1-50 then tests.
* ``gtn-50-ranges-40``: the same with a fourth range, 1-40 in 6 turns, so that 1-50 lies 10 beyond
  the data, not 20 (from 1-30, each seed's start bisected the ranges it was trained on and never
  guessed above ~32).

``--reward find`` trains GuessTheNumber on a reward for finding the number only (GEM's rules pay a
wrong last guess by how close it is: 0.94 for one 3 away on 1-50, nearly a win); the evaluation
keeps the game's own rules, so its success rate compares with runs on the game's reward.
``--update-dtype bfloat16`` runs the update's forward and backward passes under bfloat16 autocast
(the weights, sampling and evaluation stay float32): 1.5-2x on a CPU that computes bfloat16
natively (``benchmarks/results/pretrained_rl_cost.jsonl``); its own runs show what it does to learning.
``--train-top-layers N`` trains only the adapters of the top N decoder layers (the lower ones keep
the SFT start's), so the backward pass runs through N layers instead of all of them.
``--pack-games`` scores each game's turns in one forward pass (:mod:`tutorial_lib.rl.packed_games`):
the same log-probs up to rounding, the history the turns repeat computed once.
``--kl-coef`` takes a KL penalty to the SFT start from each turn's reward (the ``kl_coef`` of the
RL settings; the per-iteration ``kl_ref`` curve shows how far the policy went).
``--validate-every N`` chooses the run's model on held-out games (:mod:`tutorial_lib.rl.validation`):
``--validation-episodes`` greedy games on seeds of their own (50,000 up: neither the training's nor
the evaluation's) before RL, every N iterations and after the last; the weights that score best
on the task's headline (its evaluation options) are the model the evaluation after RL judges, the
SFT start included. Training itself is the same as without it.

Every run lives in its own folder under ``--runs`` (named by preset, task, seed and settings), and
a run killed at any point continues where it stopped when the same command is given again: the
evaluation before RL is kept in ``before.json``, RL resumes from its last checkpoint (one per
iteration), and a finished run's line is kept in ``record.json`` and not run twice. On a 2-core CPU
an iteration of SmolLM2 takes minutes, so a run spans sessions if it has to.

The same command with more ``--iterations`` extends a finished REINFORCE run (its learning rate
is constant; PPO's schedule spans the run's iterations, so a longer PPO run is a new one): a line is
recorded for each length. A run is skipped when less than ``--time-limit`` minus the time used is
left for its estimated cost (its own previous duration, else ``--run-estimate``), so that a device call of limited length
ends with whole records. Each line: command, device (the CPU's name and its bfloat16 flags, or
the GPU's), threads, dtype, versions, preset, model, task, game, algo, seed, iterations, turns,
before/after metrics with their standard errors, the RL curves (return, success, invalid rate,
entropy, KL to the sampler, seconds) and the seconds of each stage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

#: GuessTheNumber on 1-50 in 7 turns, the range RL trains and is evaluated on (the SFT data's ranges differ)
GTN_50 = {"preset": None, "low": 1, "high": 50, "max_turns": 7}
TASKS = {
    "ttt-x": dict(game="tictactoe", algo="reinforce", train={"agent_mark": "x"}, eval={"agent_mark": "x"}),
    "ttt-o": dict(game="tictactoe", algo="reinforce", train={"agent_mark": "o"}, eval={"agent_mark": "o"}),
    "math": dict(game="math", algo="ppo", train={}, eval={}),
    "gtn-50": dict(game="guess_the_number", algo="reinforce", train=GTN_50, eval=GTN_50),
    "gtn-100": dict(game="guess_the_number", algo="reinforce",
                    train={"preset": None, "low": 1, "high": 100, "max_turns": 8},
                    eval={"preset": None, "low": 1, "high": 100, "max_turns": 8}),
    "gtn-50-ranges": dict(game="guess_the_number", algo="reinforce", train=GTN_50, eval=GTN_50,
                          sft={"preset": None, "ranges": [[1, 10, 4], [1, 20, 5], [1, 30, 5]]}),
    "gtn-50-ranges-40": dict(game="guess_the_number", algo="reinforce", train=GTN_50, eval=GTN_50,
                             sft={"preset": None, "ranges": [[1, 10, 4], [1, 20, 5], [1, 30, 5], [1, 40, 6]]}),
}
#: what each task's before/after compares (the first is the claim's metric)
HEADLINE = {"ttt-x": "minimax_draw_rate", "ttt-o": "minimax_draw_rate", "math": "accuracy (new problems)",
            "gtn-50": "success_rate", "gtn-100": "success_rate", "gtn-50-ranges": "success_rate",
            "gtn-50-ranges-40": "success_rate"}
#: what validation ranks a task's checkpoints by (``--validate-every``): the headline on the
#: evaluation's own options, over games of validation seeds; math's problems are its training split
VALIDATION = {"ttt-x": ("draw_rate", {"opponent": "minimax"}), "ttt-o": ("draw_rate", {"opponent": "minimax"}),
              "math": ("accuracy", {})}
CURVES = ("mean_return", "success_rate", "invalid_rate", "entropy", "kl_k3", "kl_ref", "turns", "sample_seconds",
          "train_seconds")


def sft_start(task: str, preset, seed: int):
    """The task's SFT policy (data-order seed ``seed``): the preset's checkpoint of the game, or,
    where the task names its own expert games (``sft``), the same recipe on those games, cached
    apart (the expert data and checkpoint folders are named by the settings)."""
    from tutorial_lib.pipeline import sft_policy

    spec = TASKS[task]
    if "sft" in spec:
        settings = preset.game(spec["game"])
        preset = replace(preset, games={**preset.games, spec["game"]: replace(settings, env_options=spec["sft"])})
    return sft_policy(spec["game"], preset, data_seed=seed)


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
    # one wave: every game side by side from its first turn, the fastest way through a fixed set
    summary = evaluate_policy(spec["game"], policy, preset=preset, episodes=episodes, env_options=spec["eval"],
                              batch_size=episodes)
    return {k: summary[k] for k in ("success_rate", "mean_return", "mean_turns", "invalid_rate", "truncated_rate")}


#: greedy games a GuessTheNumber record keeps before and after RL, so that a reader sees what changed
EXAMPLE_GAMES = 8


def example_games(task: str, policy, games: int = EXAMPLE_GAMES) -> list[dict]:
    """The first ``games`` evaluation games of a GuessTheNumber task, greedy, on the evaluation's
    first seeds (played in a batch of their own, so padding may round a near tie otherwise than
    the evaluation did): the secret, the guesses and whether the last one found it."""
    from tutorial_lib import envs
    from tutorial_lib.envs.parsing import parse_boxed_integer
    from tutorial_lib.evaluation.episodes import run_episodes

    spec = TASKS[task]
    records = run_episodes(spec["game"], policy, range(games), env_options=spec["eval"], batch_size=games)
    env = envs.make(spec["game"], **spec["eval"])  # the secret of each seed (a game cut short never says it)
    shown = []
    for record in records:
        env.reset(seed=record.seed)
        shown.append({"seed": record.seed, "secret": env.target,
                      "guesses": [parse_boxed_integer(turn.action or "").value for turn in record.turns[:-1]],
                      "success": record.success})
    env.close()
    return shown


def standard_errors(metrics: dict[str, float], episodes: int) -> dict[str, float]:
    """The standard error of each rate and accuracy: over ``episodes`` games or problems, the invalid
    rate over the turns played where the metrics say how many (a rate per turn; tic-tac-toe's do
    not, so theirs is over games, an upper bound); means have none here."""
    turns = episodes * metrics.get("mean_turns", 1.0)
    return {f"{k}_se": round(math.sqrt(max(v * (1 - v), 0.0) / (turns if k.endswith("invalid_rate") else episodes)), 4)
            for k, v in metrics.items() if (k.endswith("_rate") or k.startswith("accuracy")) and 0 <= v <= 1}


def rl_run_settings(task: str, seed: int, preset, args):
    """The preset's RL settings for the task's game, on the task's training options, with the
    command line's changes."""
    from tutorial_lib.presets import rl_settings

    spec = TASKS[task]
    options = dict(spec["train"])  # added to the preset's (GuessTheNumber: preset=None and its own range)
    if args.reward == "find":
        if spec["game"] != "guess_the_number":
            raise SystemExit(f"--reward find is GuessTheNumber's (no closeness payment); task {task} plays {spec['game']}")
        options["closeness_reward"] = False  # training only: evaluation keeps the game's own rules
    validation = {}
    if args.validate_every:
        metric, options_of_metric = VALIDATION.get(task, ("success_rate", {}))
        validation = dict(validate_every=args.validate_every, validation_episodes=args.validation_episodes,
                          validation_metric=metric, validation_env_options={
                              **preset.game(spec["game"]).env_options, **spec["eval"], **options_of_metric})
    return rl_settings(spec["game"], preset, spec["algo"], seed=seed, env_options=options, save_every=1,
                       iterations=args.iterations, learning_rate=args.learning_rate, num_envs=args.num_envs,
                       turns_per_iteration=args.turns, temperature=args.temperature,
                       kl_coef=args.kl_coef, update_dtype=args.update_dtype,
                       train_top_layers=args.train_top_layers, pack_games=args.pack_games or None, **validation)


#: settings added after the first runs were recorded (their folders were named without them)
LATER_SETTINGS = ("update_dtype", "train_top_layers", "pack_games", "validate_every", "validation_episodes", "validation_metric",
                  "validation_env_options", "validation_first_seed")


def folder_description(settings, episodes: int, model: str, algo: str) -> dict:
    """What names a run's folder: its settings (REINFORCE's without the number of iterations: the
    same command with more ``--iterations`` extends a finished run from its last checkpoint, its
    learning rate being constant, so 12 iterations and then 12 more are the run of 24; PPO's
    learning-rate schedule spans the iterations, so there they are part of it), the evaluation's
    games and the model."""
    named = asdict(replace(settings, iterations=1) if algo == "reinforce" else settings)
    defaults = asdict(type(settings)())
    for later in LATER_SETTINGS:  # a setting added later names a folder only when it differs from its default,
        if later in named and named[later] == defaults[later]:  # so that the runs begun before it still resume
            del named[later]
    return {"settings": named, "episodes": episodes, "model": model}


def run_folder(root: Path, preset, task: str, seed: int, settings, episodes: int) -> Path:
    """Where a run keeps its state: the same command finds the same folder (and resumes there)."""
    described = json.dumps(folder_description(settings, episodes, preset.model, TASKS[task]["algo"]),
                           sort_keys=True, default=str)
    digest = hashlib.sha256(described.encode()).hexdigest()[:10]
    return root / f"{preset.name}-{task}-seed{seed}-{digest}"


def run(task: str, seed: int, preset, args) -> tuple[dict, bool]:
    """One run, or the rest of one an earlier call began; returns its line and whether it is new
    (not yet recorded)."""
    import torch

    from tutorial_lib.rl.ppo import PPO
    from tutorial_lib.rl.reinforce import Reinforce
    from tutorial_lib.rl.rl_loop import train
    from tutorial_lib.runtime.tracking import has_checkpoint

    spec = TASKS[task]
    game, algo, episodes = spec["game"], spec["algo"], args.episodes
    settings = rl_run_settings(task, seed, preset, args)
    folder = run_folder(args.runs, preset, task, seed, settings, episodes)
    folder.mkdir(parents=True, exist_ok=True)
    recorded = json.loads((folder / "record.json").read_text()) if (folder / "record.json").exists() else None
    if recorded and recorded["iterations"] >= settings.iterations:  # finished in an earlier call
        longer = recorded["iterations"] > settings.iterations
        print(f"# {task} seed {seed}: finished earlier ({folder})" +
              (f"; its last line is of {recorded['iterations']} iterations, more than the {settings.iterations} asked "
               "(the shorter run's line, if it was recorded, is in the record file)" if longer else ""),
              file=sys.stderr, flush=True)
        row = recorded
        if game != "guess_the_number" or "after_games" in row:
            return row, False
        # recorded before the records kept games: play them with the SFT and the trained model
        from tutorial_lib.lm.models import load_policy

        row["before_games"] = example_games(task, sft_start(task, preset, seed))
        row["after_games"] = example_games(task, load_policy(str(folder / "model")))
        return row, True
    stages = json.loads((folder / "seconds.json").read_text()) if (folder / "seconds.json").exists() else {}

    def note(stage: str, began: float, *, add: bool = True) -> None:  # seconds per stage, over the calls that ran it
        stages[stage] = round((stages.get(stage, 0.0) if add else 0.0) + time.perf_counter() - began, 1)
        (folder / "seconds.json").write_text(json.dumps(stages))

    began = time.perf_counter()
    policy = sft_start(task, preset, seed)
    if "sft" not in stages:  # a later call only loads the checkpoint the first one trained
        note("sft", began)
    if (folder / "before.json").exists():
        before = json.loads((folder / "before.json").read_text())
    else:
        began = time.perf_counter()
        before = evaluate(task, policy, preset, episodes)
        (folder / "before.json").write_text(json.dumps(before))
        note("evaluate_before", began)
    resume = has_checkpoint(folder / "checkpoint")
    doing = f"extending to {settings.iterations} iterations" if recorded else "resuming" if resume else "starting"
    print(f"# {task} seed {seed}: {doing} RL in {folder}", file=sys.stderr, flush=True)
    torch.manual_seed(seed)
    trained = train(PPO if algo == "ppo" else Reinforce, policy, game, settings, out_dir=folder, resume=resume, progress=True)
    # from the log, which holds every iteration: a call killed in the middle of RL never noted its part
    stages["rl"] = round(sum(r["sample_seconds"] + r["train_seconds"] for r in trained.history), 1)
    began = time.perf_counter()
    after = evaluate(task, policy, preset, episodes)
    note("evaluate_after", began, add=False)  # an extended run's earlier evaluation is not part of it
    if game == "guess_the_number":
        games = {"before_games": example_games(task, sft_start(task, preset, seed)),
                 "after_games": example_games(task, policy)}
    else:
        games = {}
    history = trained.history
    row = {"task": task, "game": game, "algo": algo, "seed": seed, "iterations": settings.iterations,
           "turns_per_iteration": settings.turns_per_iteration, "num_envs": settings.num_envs,
           "learning_rate": settings.learning_rate, "temperature": settings.temperature, "kl_coef": settings.kl_coef,
           "update_dtype": settings.update_dtype, "train_top_layers": settings.train_top_layers,
           "pack_games": getattr(settings, "pack_games", False),
           "validate_every": settings.validate_every, "validation": trained.validation,
           "reward": "find" if settings.env_options.get("closeness_reward") is False else "game",
           "train_options": settings.env_options, "sft_options": spec.get("sft"), "eval_episodes": episodes, "headline": HEADLINE[task],
           "turns": int(sum(r.get("turns", 0) for r in history)),
           **{f"before_{k}": v for k, v in before.items()}, **{f"after_{k}": v for k, v in after.items()},
           **{f"before_{k}": v for k, v in standard_errors(before, episodes).items()},
           **{f"after_{k}": v for k, v in standard_errors(after, episodes).items()},
           "curves": {key: [round(r[key], 4) for r in history if key in r] for key in CURVES},
           "stage_seconds": stages, "rl_seconds": round(sum(r["sample_seconds"] + r["train_seconds"] for r in history), 1),
           "seconds": round(sum(stages.values()), 1), "run_dir": str(folder), **games}
    (folder / "seconds.json").write_text(json.dumps(stages))
    return row, True


def machine() -> dict:
    import peft
    import torch
    import transformers

    from tutorial_lib.runtime.device import cpu_bfloat16_flags, cpu_name

    if torch.cuda.is_available():
        device, dtype = torch.cuda.get_device_name(0), "bfloat16"
    else:
        native = cpu_bfloat16_flags()
        device = f"{cpu_name()} ({'bfloat16 in hardware: ' + ', '.join(native) if native else 'no bfloat16 in hardware'})"
        dtype = "float32"
    return {"device": device, "threads": torch.get_num_threads(), "dtype": dtype, "torch": torch.__version__, "transformers": transformers.__version__,
            "peft": peft.__version__, "python": platform.python_version()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="gpu", help="ci, small, gpu or full (the model: TUTORIAL_MODEL or the preset's)")
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=200, help="evaluation games (math: new problems)")
    parser.add_argument("--iterations", type=int, default=None, help="RL iterations (default: the preset's)")
    parser.add_argument("--learning-rate", type=float, default=None, help="RL learning rate (default: the preset's)")
    parser.add_argument("--num-envs", type=int, default=None, help="games side by side while collecting")
    parser.add_argument("--turns", type=int, default=None, help="turns collected per iteration (running games finish)")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the preset's)")
    parser.add_argument("--reward", choices=("game", "find"), default="game",
                        help="RL's training reward: the game's own (GEM's), or for GuessTheNumber 'find': a win "
                             "pays, a near miss on the last turn does not (evaluation always keeps the game's)")
    parser.add_argument("--kl-coef", type=float, default=None,
                        help="KL penalty to the SFT start, per turn (default: the preset's, 0 for REINFORCE)")
    parser.add_argument("--update-dtype", choices=("float32", "bfloat16"), default=None,
                        help="the RL update's arithmetic: bfloat16 autocasts its forward and backward passes, "
                             "weights and optimiser in float32 (fast where the CPU has AVX512-BF16 or AMX; "
                             "default: the preset's, float32)")
    parser.add_argument("--train-top-layers", type=int, default=None,
                        help="train the LoRA adapters of the top N decoder layers only: the backward pass stops at "
                             "the lowest of them (default: every layer's)")
    parser.add_argument("--pack-games", action="store_true",
                        help="REINFORCE: score each game's turns in one forward pass, the history they repeat "
                             "computed once (the same log-probs up to rounding, fewer tokens through the update)")
    parser.add_argument("--validate-every", type=int, default=0,
                        help="choose the run's model on held-out greedy games: validate the start, every this many "
                             "iterations and the last, and keep the best weights (0: the last iteration's)")
    parser.add_argument("--validation-episodes", type=int, default=50, help="validation games (seeds 50,000 up)")
    parser.add_argument("--runs", type=Path, default=None,
                        help="folder of the runs' own folders (default: the cache's pretrained-rl folder)")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds this call may take")
    parser.add_argument("--run-estimate", type=float, default=240.0, help="seconds a run takes, until one has")
    parser.add_argument("--out", type=Path, default=None, help="append each run's JSON line here as it ends")
    args = parser.parse_args()

    from tutorial_lib.presets import get_preset
    from tutorial_lib.records import record_run
    from tutorial_lib.runtime.cache import cache_root

    preset = get_preset(args.preset)
    args.runs = args.runs or cache_root() / "pretrained-rl"
    command = "python " + " ".join(sys.argv)
    started, took = time.perf_counter(), {}
    for seed in args.seeds:
        for task in args.tasks:
            estimate = took.get(task, args.run_estimate)
            if args.time_limit and time.perf_counter() - started + estimate > args.time_limit:
                print(f"skipped {task} seed {seed}: ~{estimate:.0f} s would pass the {args.time_limit:.0f} s limit",
                      file=sys.stderr, flush=True)
                continue
            row, new = run(task, seed, preset, args)
            took[task] = row["seconds"]
            if new:  # recorded once, by the call that finished it (or completed its games)
                row = {"command": command, **machine(), **row} if "command" not in row else row
                record_run(row, args.out, preset=preset)
                (Path(row["run_dir"]) / "record.json").write_text(json.dumps(row))
            before, after = row[f"before_{HEADLINE[task]}"], row[f"after_{HEADLINE[task]}"]
            print(f"# {task} seed {seed}: {HEADLINE[task]} {before:.3f} -> {after:.3f} ({row['seconds']:.0f} s)",
                  file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

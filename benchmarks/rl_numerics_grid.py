"""An RL recipe over seeds x thread counts x kernel sets: does its conclusion survive another CPU?

    python benchmarks/rl_numerics_grid.py --recipe gtn-reinforce [ttt-reinforce ttt-ppo] [--seeds 0 1 2] [--threads 1 2]
        [--kernels default avx2] [--normalise rebn_state rebn] [--out benchmarks/results/F.jsonl]
        [--train-opponent minimax] [--set learning_rate=5e-4 kl_coef=0.1] [--scratch DIR]
        [--perturb 1 2 3 [--perturb-scale 1e-6] [--perturbed-only]] [--sft-epochs 30] [--evaluate-every 30]

Training on one CPU with one thread setting is deterministic; across CPUs and thread counts the
sums round differently, and an RL run sensitive to that lands somewhere else. Seeds alone do not
sample that variation, so each cell of the grid runs in a fresh process with

* ``TUTORIAL_THREADS`` = 1 or 2 (torch's thread count, fixed for the process), and
* ``--kernels``: ``default`` leaves ``ATEN_CPU_CAPABILITY`` unset (the best kernels torch picks
  for this CPU); any other value sets it (``avx2``, ``avx512``; ``scalar`` sets ``default``, torch's
  unvectorised kernels). Kernels that round differently stand in for another CPU. Each line
  records the capability torch used (``cpu_capability``): on a CPU whose best is AVX2, ``avx2``
  is the default and its cells repeat the default's bit for bit,
* ``--perturb P...``: cells whose SFT checkpoint has each weight multiplied by
  ``1 + scale * N(0, 1)`` (``--perturb-scale``, 1e-6: a few float32 ulps) with the noise drawn from
  seed P, before anything is evaluated: a cheaper stand-in for another CPU's rounding (greedy play
  is mostly unchanged; a run sensitive to rounding takes another path). The unperturbed cell runs
  too, unless ``--perturbed-only`` says it is already recorded,

and its own cache folder, so that the SFT checkpoint RL starts from is trained under the same
numerics, as on a reader's machine (the tiny model and its tokenizer are copied from the main
cache: they are built, not trained). For each seed s: chapter 4's SFT with data-order seed s (seed
0 is the chapter's recipe), greedy evaluation before, the preset's RL run with RL seed s (and the
``--normalise`` choice), greedy evaluation after, on the chapters' 200 evaluation games.

Recipes (the settings are the preset's, as the chapters run them):

* ``gtn-reinforce``: chapter 5's GuessTheNumber REINFORCE; success rate, mean turns.
* ``ttt-reinforce``: chapter 5's tic-tac-toe REINFORCE; draws against minimax, losses to random.
* ``ttt-ppo``: chapter 6's tic-tac-toe PPO, the same evaluations (``--normalise`` does not apply).

Tuning a recipe: ``--sft-epochs N`` trains the SFT start for N epochs instead of the preset's
(checkpoints of their own), ``--set KEY=VALUE`` overrides the RL settings (a Python literal: ``learning_rate=5e-4``,
``kl_coef=0.1``), ``--train-opponent`` changes the opponent RL trains against (tic-tac-toe; the
evaluations stay random and minimax), and ``--scratch DIR`` keeps the cells' caches there, so a
second recipe on the same cells reuses their SFT checkpoints instead of training them again.
``--evaluate-every N`` also evaluates after every N iterations (the run goes in parts that resume
exactly, as the chapters' cells do): one run says where a longer recipe's gain arrives
(``evaluations`` in the line: the iteration and the same metrics as ``after_``).

One JSON line per cell (``record_run``: preset, model, CPU and the cell's numerics in each line).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

TTT = dict(game="tictactoe", opponents=("random", "minimax"), keys=("win_rate", "draw_rate", "loss_rate", "invalid_rate"))
#: one cell at a time copies the built tiny model into a cache folder (:func:`run_cells`)
COPY_LOCK = threading.Lock()

RECIPES = {
    # evaluated on the range RL trains on (chapter 5); tic-tac-toe with the default rules (chapters 5, 6)
    "gtn-reinforce": dict(algo="reinforce", game="guess_the_number", opponents=(None,), eval_training_options=True,
                          keys=("success_rate", "mean_turns", "invalid_rate")),
    "ttt-reinforce": dict(algo="reinforce", **TTT),
    "ttt-ppo": dict(algo="ppo", **TTT),
}


def parse_overrides(pairs: list[str]) -> dict:
    """``["learning_rate=5e-4", "kl_coef=0.1"]`` -> ``{"learning_rate": 0.0005, "kl_coef": 0.1}``."""
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set takes KEY=VALUE, got {pair!r}")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value  # a bare word: a string setting such as normalise=rebn
    return overrides


def perturb_weights(model, scale: float, seed: int) -> None:
    """Each weight of ``model`` times ``1 + scale * N(0, 1)``, the noise from a generator seeded by ``seed``."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for weight in model.parameters():  # a tied weight once
            weight.mul_(1 + scale * torch.randn(weight.shape, generator=generator, dtype=weight.dtype))


def run_cell(recipe: str, seed: int, normalise: str, preset_name: str, overrides: dict | None = None,
             train_opponent: str | None = None, perturb: int | None = None, perturb_scale: float = 1e-6,
             sft_epochs: int | None = None, evaluate_every: int | None = None) -> dict:
    """One cell, in this process (whose numerics the parent set through the environment)."""
    import torch

    from tutorial_lib.evaluation.evaluate import evaluate_policy
    from tutorial_lib.pipeline import sft_policy, sft_settings, with_sft_changes
    from tutorial_lib.presets import get_preset, rl_settings
    from tutorial_lib.records import recipe_settings
    from tutorial_lib.rl.ppo import PPO
    from tutorial_lib.rl.reinforce import Reinforce
    from tutorial_lib.rl.rl_loop import train
    from tutorial_lib.runtime.cache import cache_root
    from tutorial_lib.runtime.device import cpu_name

    spec = RECIPES[recipe]
    game, preset = spec["game"], get_preset(preset_name)
    if sft_epochs is not None:
        preset = with_sft_changes(preset, game, epochs=sft_epochs)
    start = time.perf_counter()
    policy = sft_policy(game, preset, data_seed=seed)
    sft_seconds = time.perf_counter() - start
    if perturb is not None:
        perturb_weights(policy.model, perturb_scale, perturb)

    algo = spec["algo"]
    settings = rl_settings(game, preset, algo, seed=seed)
    if algo == "reinforce":
        settings = replace(settings, normalise=normalise)
    settings = replace(settings, **(overrides or {}))
    if train_opponent:
        settings = replace(settings, env_options={**settings.env_options, "opponent": train_opponent})

    env_options = settings.env_options if spec.get("eval_training_options") else None

    def evaluate() -> dict:  # as the chapters evaluate
        results = {}
        for opponent in spec["opponents"]:
            options = {} if opponent is None else {"opponent": opponent}
            summary = evaluate_policy(game, policy, preset=preset, episodes=200, env_options=env_options, **options)
            prefix = "" if opponent is None else f"{opponent}_"
            results.update({prefix + key: summary[key] for key in spec["keys"]})
        return results

    before = evaluate()
    algorithm = PPO if algo == "ppo" else Reinforce
    # a fresh run folder each time: a kept --scratch must not resume an earlier recipe's run
    out_dir = Path(tempfile.mkdtemp(prefix=f"grid-{recipe}-{seed}-", dir=cache_root()))
    parts = settings.iterations // evaluate_every if evaluate_every else 1
    evaluations, seconds = [], 0.0
    for part in range(1, parts + 1):  # each part resumes the last one's checkpoint: the run of one part, exactly
        run = train(algorithm, policy, game, settings, out_dir=out_dir, progress=False, stage=(part, parts))
        seconds += run.seconds
        if part < parts:
            evaluations.append({"iteration": part * evaluate_every, **evaluate()})
    shutil.rmtree(out_dir, ignore_errors=True)
    after = evaluate()
    return {"recipe": recipe, "seed": seed, "normalise": normalise if algo == "reinforce" else None, "threads": torch.get_num_threads(),
            # the --kernels label: unset is "default", torch's own "default" (unvectorised) is "scalar"
            "kernels": {None: "default", "default": "scalar"}.get(os.environ.get("ATEN_CPU_CAPABILITY"),
                                                                 os.environ.get("ATEN_CPU_CAPABILITY")),
            "cpu": cpu_name(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "sft_epochs": sft_settings(game, preset).epochs,
            "perturbation": None if perturb is None else {"seed": perturb, "scale": perturb_scale},
            "overrides": overrides or {}, "train_opponent": settings.env_options.get("opponent"),
            "iterations": settings.iterations,
            # the whole recipe, so a chapter shows only the cells of the recipe it runs (records.tictactoe_recipe_runs)
            "settings": recipe_settings(settings), "sft_seconds": round(sft_seconds, 1), "rl_seconds": round(seconds, 1),
            **{f"before_{k}": v for k, v in before.items()}, **{f"after_{k}": v for k, v in after.items()},
            "return_curve": [round(row["mean_return"], 3) for row in run.history],
            **({"evaluations": evaluations} if evaluations else {}),
            # with validate_every: the validation scores and the iteration whose weights were kept
            **({"validation": run.validation} if run.validation else {})}


def run_cells(recipes: list[str], kernels: str, threads: int, seed: int, normalises: list[str], preset: str,
              main_cache: Path, scratch: Path, extra: list[str], perturb: int | None = None) -> list[dict]:
    """Every recipe of one (kernels, threads, seed, perturbation) cell, one fresh process each, in one
    cache per (kernels, threads, seed): recipes on the same game share the SFT checkpoint, as chapters
    5 and 6 do, and so do a seed's perturbed cells (each perturbs its own loaded copy)."""
    cache = scratch / f"{kernels}-{threads}-{seed}"  # perturbed cells share their SFT checkpoint
    # the tiny model and its tokenizer are built from a config, not trained: copied as they are, by
    # one cell at a time (two cells of one seed start together and would copy into the same folder)
    with COPY_LOCK:
        for built in main_cache.glob("tiny-*") if main_cache.exists() else []:
            if not (cache / built.name).exists():
                shutil.copytree(built, cache / built.name)
    env = {**os.environ, "TUTORIAL_THREADS": str(threads), "TUTORIAL_CACHE": str(cache)}
    env.pop("OMP_NUM_THREADS", None)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernels != "default":  # "scalar": torch's unvectorised kernels, which torch calls "default"
        env["ATEN_CPU_CAPABILITY"] = "default" if kernels == "scalar" else kernels
    lines = []
    for recipe in recipes:
        for normalise in normalises if RECIPES[recipe]["algo"] == "reinforce" else normalises[:1]:
            out = subprocess.run([sys.executable, __file__, "--recipe", recipe, "--preset", preset,
                                  "--cell", str(seed), normalise, str(perturb), *extra], env=env, capture_output=True,
                                 text=True)
            if out.returncode:
                print(out.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"cell {recipe}/{kernels}/{threads}/{seed}/{normalise}/perturbation {perturb} failed")
            lines.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=sorted(RECIPES), nargs="+", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--kernels", nargs="+", default=["default", "avx2"])
    parser.add_argument("--normalise", nargs="+", default=["rebn_state"])
    parser.add_argument("--preset", default="ci")
    parser.add_argument("--out", default=None, help="append the JSON lines to this file too")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="override RL settings")
    parser.add_argument("--train-opponent", default=None, help="the opponent RL trains against (tic-tac-toe)")
    parser.add_argument("--scratch", default=None, help="keep the cells' caches (SFT checkpoints) in this folder")
    parser.add_argument("--perturb", type=int, nargs="+", default=[], metavar="SEED",
                        help="also run cells from the SFT checkpoint perturbed with these noise seeds")
    parser.add_argument("--perturbed-only", action="store_true",
                        help="run only the perturbed cells (their unperturbed cells are already recorded)")
    parser.add_argument("--perturb-scale", type=float, default=1e-6)
    parser.add_argument("--sft-epochs", type=int, default=None, help="SFT epochs (default: the preset's)")
    parser.add_argument("--evaluate-every", type=int, default=None, metavar="N",
                        help="also evaluate after every N iterations (N divides the run's iterations)")
    parser.add_argument("--cell", nargs=3, metavar=("SEED", "NORMALISE", "PERTURB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:  # a child: one recipe of one cell, its numerics already in the environment
        perturb = None if args.cell[2] == "None" else int(args.cell[2])
        print(json.dumps(run_cell(args.recipe[0], int(args.cell[0]), args.cell[1], args.preset,
                                  parse_overrides(args.set), args.train_opponent, perturb, args.perturb_scale,
                                  args.sft_epochs, args.evaluate_every)))
        return

    from tutorial_lib.presets import get_preset, rl_settings
    from tutorial_lib.records import record_run
    from tutorial_lib.runtime.cache import cache_root

    preset = get_preset(args.preset)
    main_cache = cache_root()
    scratch = Path(args.scratch) if args.scratch else Path(tempfile.mkdtemp(prefix="rl-grid-"))
    scratch.mkdir(parents=True, exist_ok=True)
    overrides = parse_overrides(args.set)  # a malformed --set stops here, before any cell trains
    if args.perturbed_only and not args.perturb:
        raise SystemExit("--perturbed-only needs --perturb: without it there is no cell to run")
    if args.evaluate_every is not None:
        for recipe in args.recipe:
            iterations = overrides.get("iterations", rl_settings(RECIPES[recipe]["game"], preset, RECIPES[recipe]["algo"]).iterations)
            if args.evaluate_every < 1 or iterations % args.evaluate_every:
                raise SystemExit(f"--evaluate-every {args.evaluate_every} must divide {recipe}'s {iterations} iterations")
    extra = [*(["--set", *args.set] if args.set else []),
             *(["--train-opponent", args.train_opponent] if args.train_opponent else []),
             "--perturb-scale", str(args.perturb_scale),
             *(["--sft-epochs", str(args.sft_epochs)] if args.sft_epochs is not None else []),
             *(["--evaluate-every", str(args.evaluate_every)] if args.evaluate_every is not None else [])]
    cores = os.cpu_count() or 1
    failed: list[str] = []
    try:
        for threads in args.threads:
            # cells with a fixed thread count run side by side as long as each gets its own cores,
            # so their numerics are what they would be alone (only their speed is shared)
            cells = [(kernels, seed, perturb) for kernels in args.kernels for seed in args.seeds
                     for perturb in ([] if args.perturbed_only else [None]) + args.perturb]
            with ThreadPoolExecutor(max_workers=max(1, cores // threads)) as pool:
                futures = {pool.submit(run_cells, args.recipe, kernels, threads, seed, args.normalise, args.preset,
                                       main_cache, scratch, extra, perturb): (kernels, threads, seed, perturb)
                           for kernels, seed, perturb in cells}
                for future in as_completed(futures):
                    try:
                        lines = future.result()
                    except (Exception, SystemExit) as error:  # run_cells exits on a failed cell; the others run on
                        failed.append(f"{futures[future]}: {error}")
                        print(f"cell (kernels, threads, seed, perturbation) {futures[future]} failed: {error}",
                              file=sys.stderr, flush=True)
                        continue
                    for line in lines:
                        record_run(line, args.out, preset=preset)
    finally:
        if not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    if failed:
        raise SystemExit(f"{len(failed)} cell(s) failed, the others recorded: " + "; ".join(failed))


if __name__ == "__main__":
    main()

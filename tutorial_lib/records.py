"""The repository's records of runs: multi-seed studies that ``benchmarks/`` scripts write to
``benchmarks/results/*.jsonl`` and chapters read back (chapters 4-10).

    record_run(row, "benchmarks/results/study.jsonl", preset=preset)   # a script, as each run ends
    rows = recorded_runs("study.jsonl", preset)                        # a chapter, this preset's lines

Which lines of a record count (a run repeated bit for bit, a run completed or extended by a later
call) is decided here too, and a recorded run's labels are made here, beside the fields they read
(its name, recipe and CPU in a few words: :func:`pretrained_run_name`, :func:`pretrained_rl_recipe`,
:func:`cpu_label`); the sentences a chapter says about the rows are :mod:`tutorial_lib.report`'s.
Imports the runtime layer only.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from tutorial_lib.runtime import durable
from tutorial_lib.runtime.device import cpu_name

if TYPE_CHECKING:
    from tutorial_lib.presets import Preset


def note(text: str) -> None:
    """Tell the reader why a record's rows are missing, wrapped to the book's page as
    :func:`tutorial_lib.report.say` wraps a sentence."""
    print(textwrap.fill(text, 72))


#: where the repository keeps recorded benchmark runs (a clone has it; a pip install does not)
RESULTS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def distinct_runs(rows: Sequence[dict]) -> list[dict]:
    """The grid's cells, a run that another cell repeated bit for bit counted once: a cell whose
    kernels round like another's (on a CPU whose best kernels are AVX2, the ``avx2`` cells)."""
    return list({(row["seed"], tuple(row.get("return_curve", [])), row["after_minimax_draw_rate"],
                  row["after_random_loss_rate"]): row for row in rows}.values())


#: the records of one tic-tac-toe recipe trained against each opponent (``rl_numerics_grid.py
#: --train-opponent``), and the rows of each that are that recipe (chapters 5 and 6)
TICTACTOE_OPPONENT_RECORDS = {"random": "tictactoe_rl_grid.jsonl", "minimax": "tictactoe_rl_minimax_opponent.jsonl",
                              "mixed": "tictactoe_rl_mixed_opponent.jsonl"}


#: every tic-tac-toe grid record: a chapter's recipe may have cells in any of them (the perturbed
#: and two-thread cells of ``rl_numerics_grid.py --perturb`` were recorded apart)
TICTACTOE_GRID_RECORDS = (*TICTACTOE_OPPONENT_RECORDS.values(), "tictactoe_rl_perturbed.jsonl")

#: RL settings that change how a run computes, not what it learns: a grid row does not record them
PLUMBING_SETTINGS = frozenset({"seed", "save_every", "microbatch_turns", "size_to_device"})


def recipe_settings(settings) -> dict:
    """What an RL recipe is, as a grid row records it: every field of ``settings`` (an
    ``RLSettings`` dataclass) but the plumbing ones, in JSON's types (a tuple reads back as a list)."""
    return json.loads(json.dumps({f.name: getattr(settings, f.name) for f in fields(settings)
                                  if f.name not in PLUMBING_SETTINGS}))


def same_recipe(recorded: dict, current: dict) -> bool:
    """Whether a row's recorded settings are the recipe ``current`` (:func:`recipe_settings`). A
    setting the row does not name was added to the library after it was recorded and is taken to
    have its default then."""
    return all(current.get(key, value) == value for key, value in recorded.items())


def tictactoe_recipe_runs(recipe: str, settings, preset: Preset | None = None) -> list[dict]:
    """Every recorded grid cell of ``recipe`` (``ttt-reinforce``, ``ttt-ppo``) run with exactly the
    RL settings ``settings`` (the ones a chapter trains with): seeds, thread counts, kernel sets and
    perturbed starts, from every tic-tac-toe record. A row without recorded settings is not counted:
    nothing says which recipe it ran."""
    present = [name for name in TICTACTOE_GRID_RECORDS if (RESULTS_DIR / name).exists()]
    rows = [row for name in present or TICTACTOE_GRID_RECORDS[:1] for row in recorded_runs(name, preset)]
    current = recipe_settings(settings)
    return [row for row in rows if row["recipe"] == recipe and "settings" in row and same_recipe(row["settings"], current)]


def tictactoe_opponent_runs(recipe: str, opponent: str, preset: Preset | None = None) -> list[dict]:
    """The recorded grid cells of ``recipe`` (``ttt-reinforce``, ``ttt-ppo``) trained against
    ``opponent``, with the library's default baseline (the ``rebn`` rows compare another one)."""
    return [row for row in recorded_runs(TICTACTOE_OPPONENT_RECORDS[opponent], preset)
            if row["recipe"] == recipe and row.get("normalise") in (None, "rebn_state")]


def recorded_runs(name: str, preset: Preset | None = None) -> list[dict]:
    """The JSON lines of ``benchmarks/results/<name>``: a multi-seed study a chapter reads.

    Such studies cost more than a chapter's budget, so a script in ``benchmarks/`` runs them and a
    chapter plots the record beside its own run. Each line names the preset and model it was recorded
    with; given ``preset``, only the lines of that preset and model come back, since a study of the
    tiny model says nothing about a pretrained model's runs (the chapter is told which presets the
    record has instead). Without a clone of the repository (a pip install) the file is absent: the
    chapter is told so and gets no rows, rather than an error.
    """
    path = RESULTS_DIR / name
    if not path.exists():
        note(f"(The recorded runs {name} ship with the repository's benchmarks/results folder, which this "
            "installation does not have; clone the repository to see them.)")
        return []
    rows = read_json_lines(path)
    if preset is None:
        return rows
    mine = [row for row in rows if (row.get("preset"), row.get("model")) == (preset.name, preset.model)]
    if rows and not mine:
        recorded = sorted({f"{row.get('preset')} with {row.get('model')}" for row in rows})
        note(f"(The recorded runs {name} were made at {' and '.join(recorded)}, none at this chapter's preset "
            f"({preset.name} with {preset.model}): they describe another model's training, so they are not "
            f"shown here. The benchmarks/ script that wrote them records this preset's with --preset {preset.name}.)")
    return mine


def record_run(row: dict, out: str | Path | None = None, *, preset: Preset | None = None) -> None:
    """Print one run of a multi-seed study as a JSON line, and append it to ``out`` if given: the
    lines :func:`recorded_runs` reads back. ``preset``: the preset the run used, written first in the
    line (the name and the model), which is how a chapter keeps to its own preset's records."""
    if preset is not None:
        row = {"preset": preset.name, "model": preset.model, **row}
    if "cpu" not in row:  # floating point differs between CPUs: a record names the one it ran on

        row = {**row, "cpu": cpu_name()}
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        durable.append_line(out, line)  # flushed; a line cut by a kill is dropped, never run into the next


def read_json_lines(path: Path) -> list[dict]:
    """The rows of a record written by :func:`record_run`; a last line cut by a killed writer is
    skipped with a warning, damage elsewhere is an error naming the line."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return durable.parse_lines(path, lines, json.loads, fix="restore the file (git checkout) or delete that line")


#: tic-tac-toe RL from starts nobody tuned on (``heldout_protocol.md``): chapter 4's checkpoint with
#: its weights perturbed, one line per cell, for chapters 5 and 6's recipes
TICTACTOE_HELDOUT_RECORD = "tictactoe_rl_heldout.jsonl"
#: chapter 5's recipe with and without a guard on the same perturbed tuning starts (heldout_protocol.md)
TICTACTOE_GUARDS_RECORD = "tictactoe_rl_guards.jsonl"
#: the verdict cells of heldout_protocol.md: perturbation seeds fixed before any ran, never used to
#: choose a recipe; one line per cell, as ``benchmarks/rl_numerics_grid.py`` writes it
TICTACTOE_VERDICT_RECORD = "tictactoe_rl_verdict.jsonl"
#: how many cells the protocol fixed for each recipe (seeds 9001-9012 with one thread, 9013-9018 with two)
TICTACTOE_VERDICT_CELLS = 18
#: the learning rate chapter 5's REINFORCE recipe was tuned at (its earlier grid, held-out and
#: guard runs, and chapter 6's first PPO recipe) before the verdict cells sent it at half that rate
TICTACTOE_REINFORCE_TUNED_RATE = 1e-3


#: the rollout engine's record (``benchmarks/rollout_engine.py``)
ENGINE_RECORD = "rollout_engine.jsonl"


#: the records of ``benchmarks/pretrained_rl.py`` on a GPU and on a CPU
PRETRAINED_RL_RECORD = "pretrained_rl_gpu.jsonl"
PRETRAINED_RL_CPU_RECORD = "pretrained_rl_cpu.jsonl"
#: the best recipe of :data:`PRETRAINED_RL_CPU_RECORD`, fixed, run again on seeds that played no part
#: in choosing it (each a new SFT start, its adapters drawn from the seed), the update in bfloat16
PRETRAINED_RL_CPU_REPLICATION_RECORD = "pretrained_rl_cpu_replication.jsonl"
#: ``benchmarks/pretrained_rl_cost.py``'s record: one RL update of SmolLM2 under each setting
PRETRAINED_RL_COST_RECORD = "pretrained_rl_cost.jsonl"
#: ``benchmarks/pretrained_rl_guesses.py``'s record: the probability each recorded policy gives every
#: guess after a replayed history (one JSON object)
PRETRAINED_RL_GUESSES_RECORD = "pretrained_rl_guesses.json"


def latest_runs(rows: Sequence[dict]) -> list[dict]:
    """One line per run of a :data:`PRETRAINED_RL_RECORD` and length: a run completed by a later
    call (its example games added) is recorded again, and its last line is the one that counts; a
    run extended by more iterations keeps a line for each length."""
    return list({(row.get("preset"), row["task"], row["seed"], row.get("device"), row.get("run_dir"),
                  row.get("iterations")): row for row in rows}.values())


def pretrained_rl_recipe(row: dict) -> str:
    """A recorded run's RL recipe in words (learning rate, temperature, games per iteration, the
    training reward where it is not the game's own, the KL penalty to the start where there is one,
    the update's dtype where it is not float32, the top layers where only they train, the validation
    that chose the model where one did), as far as its line records it; iterations are left out, so
    that the lengths of one run share a recipe."""
    parts = [f"{label} {row[key]:g}" for key, label in (("learning_rate", "lr"), ("temperature", "T"))
             if row.get(key) is not None]
    if row.get("num_envs") is not None:
        parts.append(f"{row['num_envs']} games")
    if row.get("reward", "game") != "game":
        parts.append(f"reward: {PRETRAINED_RL_REWARDS.get(row['reward'], row['reward'])}")
    if row.get("kl_coef"):
        parts.append(f"KL penalty {row['kl_coef']:g}")
    if row.get("update_dtype", "float32") != "float32":
        parts.append(f"update in {row['update_dtype']}")
    if row.get("train_top_layers"):  # LoRA trained on the top layers only (RLSettings.train_top_layers)
        parts.append(f"top {row['train_top_layers']} layers trained")
    if row.get("validate_every"):
        episodes = (row.get("validation") or {}).get("episodes")
        parts.append(f"model chosen on {episodes or 'held-out'} validation games every {row['validate_every']} iterations")
    return ", ".join(parts)


def cpu_label(device: str) -> str:
    """A recorded device in a few words: ``"Intel(R) Xeon(R) Processor (bfloat16 in hardware: amx_bf16)"``
    -> ``"Intel Xeon"``, ``"AMD EPYC 7B13"`` -> ``"AMD EPYC 7B13"``. The same seed is another SFT start
    on another CPU (its rounding trains other weights), so runs from two CPUs are told apart by it."""
    name = device.split(" (", 1)[0].replace("(R)", "").replace("(TM)", "").replace(" Processor", "")
    return " ".join(name.split())


def pretrained_run_name(row: dict) -> str:
    """A recorded run's game in words, as its line records it, and its seed: ``"1-50 in 7, SFT on
    1-10/20/30/40, seed 0"`` for GuessTheNumber (the range RL trained on, and the SFT data's ranges
    where they are not the preset's), ``"tic-tac-toe as x, seed 0"``; the task's name otherwise."""
    train = row.get("train_options") or {}
    if row.get("game") == "guess_the_number" and train.get("high") is not None:
        name = f"{train.get('low', 1)}-{train['high']} in {train['max_turns']}"
        sft = (row.get("sft_options") or {}).get("ranges")
        if sft:
            name += f", SFT on 1-{'/'.join(str(high) for _, high, _ in sft)}"
    elif row.get("game") == "tictactoe" and train.get("agent_mark"):
        name = f"tic-tac-toe as {train['agent_mark']}"
    else:
        name = row["task"]
    return f"{name}, seed {row['seed']}"


#: what each training reward of ``benchmarks/pretrained_rl.py --reward`` pays, in words
PRETRAINED_RL_REWARDS = {"find": "the find only"}


def longest_runs(rows: Sequence[dict]) -> list[dict]:
    """One line per seed and recipe: of a run recorded at several lengths, its longest."""
    longest: dict[tuple, dict] = {}
    for row in latest_runs(rows):
        recipe = (row.get("preset"), row["task"], row["seed"], row.get("device"), pretrained_rl_recipe(row),
                  row.get("turns_per_iteration"))
        if recipe not in longest or row["iterations"] > longest[recipe]["iterations"]:
            longest[recipe] = row
    return list(longest.values())

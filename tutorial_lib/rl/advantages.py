"""Returns and advantages for multi-turn RL over text games (chapter 5 onwards).

In a text game the policy acts once per *turn*: it writes one action, the game answers with a
reward and the next observation. An episode's rewards are therefore a list with one number per
turn, and every function here works at that level. Policy-gradient methods weight each action's
log-probability by how much better than expected it turned out -- its *advantage* -- so this module
turns per-turn rewards into per-turn returns and advantages. Every token of a turn's action shares
that turn's advantage (the losses in :mod:`tutorial_lib.rl.reinforce` and :mod:`tutorial_lib.rl.ppo`
broadcast it over the action's tokens; chapter 2's loss mask keeps the rest out).

    returns = batch_returns([[0, 0, 1], [0, -1]], gamma=0.9)  # [[0.81, 0.9, 1.0], [-0.9, -1.0]]
    adv = rebn(returns)                                      # REINFORCE with ReBN (chapter 5)
    adv, targets = gae(rewards, values, gamma=1.0, lam=0.95)  # PPO with a value head
    adv = group_normalise(final_rewards, group_size=8)       # GRPO: 8 samples per prompt

The estimators, from simplest to most elaborate:

* **Discounted return** ``G_t = r_t + gamma * G_{t+1}``: what followed turn ``t``.
* **ReBN**, return batch-normalisation (GEM; Liu et al. 2025, *GEM: A Gym for Agentic LLMs*):
  normalise the returns of all turns in the batch to mean 0, std 1. The mean acts as a baseline
  and the scale keeps step sizes steady as rewards change. :func:`rebn_by_state` takes the mean
  per state (prompt) where the batch saw a state more than once: the batch mean credits a state's
  worth to the action taken in it, which pushes a nearly deterministic policy off its best moves.
* **GAE**, generalised advantage estimation (Schulman et al. 2016, *High-Dimensional Continuous
  Control Using Generalized Advantage Estimation*): an exponentially weighted sum of one-step TD
  errors of a learned value ``V(s_t)``; ``lam`` trades bias (0: one TD error) for variance (1: the
  Monte-Carlo return minus ``V``).
* **Group normalisation** (GRPO; Shao et al. 2024, *DeepSeekMath*): several samples of the same
  prompt form a group, and each sample's reward is compared with its group's mean (and divided by
  the group's std, unless ``scale=False`` as in Dr. GRPO; Liu et al. 2025, *Understanding
  R1-Zero-Like Training: A Critical Perspective*).
* **Whitening**: masked normalisation to mean 0, variance 1; PPO whitens its per-turn advantages
  (and scales its rewards) over the whole batch.

Truncation versus termination. An episode that *terminated* (won, lost, finished) has nothing after
its last turn, so the bootstrap value is 0. One that was *truncated* (hit the turn limit) would have
gone on, so its tail is estimated by the value of the state reached after the last turn.

Inputs may be Python lists or 1-D tensors (anything whose items ``float()`` accepts); outputs are
lists of floats, except :func:`whiten`, which works on tensors.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch


def _check_unit_interval(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def _floats(values) -> list[float]:
    return [float(v) for v in values]


def discounted_returns(rewards: Sequence[float], gamma: float, *, bootstrap: float = 0.0) -> list[float]:
    """Per-turn returns of one episode: ``G_t = r_t + gamma * G_{t+1}``.

    ``bootstrap`` stands in for ``G_T``, the return after the last turn: 0 for an episode that
    terminated, an estimate such as ``V(s_T)`` for one that was truncated.
    """
    _check_unit_interval("gamma", gamma)
    returns = []
    running = float(bootstrap)
    for reward in reversed(_floats(rewards)):
        running = reward + gamma * running
        returns.append(running)
    return returns[::-1]


def batch_returns(episodes: Sequence[Sequence[float]], gamma: float) -> list[list[float]]:
    """:func:`discounted_returns` of each episode (all taken as terminated)."""
    _check_unit_interval("gamma", gamma)  # also when the batch is empty: a bad gamma is a bug anyway
    return [discounted_returns(episode, gamma) for episode in episodes]


def rebn(returns_per_episode: Sequence[Sequence[float]], eps: float = 1e-8) -> list[list[float]]:
    """Return batch-normalisation (GEM): ``(G - mean) / (std + eps)`` over every turn of the batch.

    Mean and std are taken over the flattened batch of turns, not per episode, so that long
    episodes count once per turn (as their turns do in the loss). The std is the population std
    (divide by ``n``), so the output has std exactly 1.

    With a single turn, or a batch whose returns are all equal (std at most ``eps``, allowing for
    rounding in the mean), the result is ``G - mean`` -- zeros -- instead of a division by ~0 that
    would blow rounding noise up to order 1: such a batch carries no signal about which actions were
    better, and a zero advantage says exactly that.
    """
    flat = [g for episode in returns_per_episode for g in _floats(episode)]
    if not flat:
        return [[] for _ in returns_per_episode]
    mean = math.fsum(flat) / len(flat)
    std = math.sqrt(math.fsum((g - mean) ** 2 for g in flat) / len(flat))
    scale = 1.0 if std <= eps else std + eps
    return [[(float(g) - mean) / scale for g in episode] for episode in returns_per_episode]


def rebn_by_state(
    returns_per_episode: Sequence[Sequence[float]],
    states_per_episode: Sequence[Sequence[Hashable]],
    eps: float = 1e-8,
) -> list[list[float]]:
    """ReBN with a baseline per state: the book's REINFORCE default (chapter 5).

    Each turn's return minus the mean return of the batch's turns taken *in the same state* (for a
    text game, the same prompt), where the batch saw that state more than once; a state seen once
    falls back to the batch mean, as :func:`rebn`. The centred returns are then divided by their
    population std over the batch (as in :func:`rebn`, so advantages keep std 1).

    Why the state's own mean: with the batch mean as every turn's baseline, a nearly deterministic
    policy that wins every game is pushed off its best opening (chapter 5 shows the collapse and its
    cause); turns that took the same action in the same state here get advantages adding up to 0.
    A baseline that depends only on the state keeps the gradient unbiased (Sutton & Barto 2018, 13.4).
    """
    flat = [g for episode in returns_per_episode for g in _floats(episode)]
    keys = [key for episode in states_per_episode for key in episode]
    if len(keys) != len(flat) or any(len(r) != len(k) for r, k in zip(returns_per_episode, states_per_episode)):
        raise ValueError("need one state per turn: states_per_episode must match returns_per_episode's shape")
    if not flat:
        return [[] for _ in returns_per_episode]
    batch_mean = math.fsum(flat) / len(flat)
    by_state: dict[Hashable, list[float]] = {}
    for key, g in zip(keys, flat):
        by_state.setdefault(key, []).append(g)
    state_mean = {key: math.fsum(gs) / len(gs) for key, gs in by_state.items() if len(gs) > 1}
    centred = [g - state_mean.get(key, batch_mean) for key, g in zip(keys, flat)]
    std = math.sqrt(math.fsum(c * c for c in centred) / len(centred))
    scale = 1.0 if std <= eps else std + eps
    advantages = iter(c / scale for c in centred)
    return [[next(advantages) for _ in episode] for episode in returns_per_episode]


def gae(
    rewards: Sequence[float],
    values: Sequence[float],
    gamma: float,
    lam: float,
    *,
    last_value: float = 0.0,
    terminated: bool = True,
) -> tuple[list[float], list[float]]:
    """Generalised advantage estimation for one episode; returns ``(advantages, returns)``.

    ``values[t]`` is ``V(s_t)``, the value of the state in which turn ``t``'s action was chosen.
    ``delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)`` and ``A_t = delta_t + gamma * lam * A_{t+1}``.
    After the last turn ``V`` is 0 if the episode ``terminated``, else ``last_value`` (the value
    of the state the truncated episode stopped in). ``returns = advantages + values`` are the
    value head's regression targets (the lambda-returns).
    """
    _check_unit_interval("gamma", gamma)
    _check_unit_interval("lam", lam)
    rewards, values = _floats(rewards), _floats(values)
    if len(rewards) != len(values):
        raise ValueError(f"need one value per turn: {len(rewards)} rewards but {len(values)} values")
    next_value = 0.0 if terminated else float(last_value)
    advantages = [0.0] * len(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = values[t]
    return advantages, [a + v for a, v in zip(advantages, values)]


def _sample_std(values: list[float], mean: float) -> float:
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def group_normalise(
    rewards: Sequence[float], group_size: int, *, scale: bool = True, eps: float = 1e-6
) -> list[float]:
    """GRPO advantages: each reward minus its group's mean, divided by the group's std + ``eps``.

    ``rewards`` holds consecutive groups of ``group_size`` samples of the same prompt. With
    ``scale=False`` (Dr. GRPO) the division is skipped: it favours groups whose rewards barely
    differ. A group whose rewards are all equal gets zero advantages either way.

    The std is the *unbiased* one (divide by ``n - 1``), as TRL's ``GRPOTrainer`` computes it
    (``trl.trainer.utils.nanstd`` applies Bessel's correction); for ``group_size == 1`` it is taken
    as 0, as TRL does, so every advantage is 0. TRL adds ``1e-4`` rather than this ``eps``.
    """
    rewards = _floats(rewards)
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    advantages = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        mean = math.fsum(group) / group_size
        std = _sample_std(group, mean) if group_size > 1 else 0.0
        # A constant group has r - mean == 0 already; dividing by 1 keeps that true even with eps=0.
        divisor = std + eps if scale and std > 0 else 1.0
        advantages.extend((r - mean) / divisor for r in group)
    return advantages


def whiten(
    values: torch.Tensor, mask: torch.Tensor | None = None, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """Normalise ``values`` to mean 0 and variance 1 over the entries where ``mask`` is true.

    Statistics come from the masked entries only (padding and prompt tokens must not move them);
    the variance is the population one, and the result is ``(x - mean) / sqrt(var + eps)``. With
    ``shift_mean=False`` the mean is added back, only the scale changes: the usual choice for
    rewards, whose sign matters. Entries outside the mask come back as 0.
    """
    if mask is None:
        mask = torch.ones_like(values, dtype=torch.bool)
    mask = mask.to(torch.bool)
    if mask.shape != values.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from values shape {tuple(values.shape)}")
    count = mask.sum()
    if count == 0:
        raise ValueError("whiten needs at least one unmasked entry")
    # where(), not multiplication: a NaN or inf in a padding slot must not leak into the statistics.
    selected = torch.where(mask, values, torch.zeros_like(values))
    mean = selected.sum() / count
    var = torch.where(mask, (values - mean) ** 2, torch.zeros_like(values)).sum() / count
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask, whitened, torch.zeros_like(whitened))

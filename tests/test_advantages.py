import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tutorial_lib.rl.advantages import (
    batch_returns,
    discounted_returns,
    gae,
    group_normalise,
    rebn,
    whiten,
)

# Tolerances. Returns, GAE, ReBN and group normalisation are Python floats (IEEE double, math.fsum): the
# same on every CPU, and abs 1e-9 / 1e-12 is far above the rounding of their ~20 double operations (seen:
# <1e-15). whiten is torch: on float64 inputs the same; on float32 ones abs 1e-5 is ~100 ulps of the
# values (~1) over sums of <= 20 terms. torch.equal only where both sides are the same computation.
SEEDS = range(8)
REWARDS = st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=20)


def reference_gae(rewards, values, gamma, lam, last_value, terminated):
    """The textbook loop, written independently of the module: deltas first, then accumulate."""
    n = len(rewards)
    next_values = list(values[1:]) + [0.0 if terminated else last_value]
    deltas = [rewards[t] + gamma * next_values[t] - values[t] for t in range(n)]
    advantages = []
    for t in range(n):
        advantages.append(sum((gamma * lam) ** (k - t) * deltas[k] for k in range(t, n)))
    return advantages


def random_episode(rng, length):
    rewards = [rng.choice([0.0, 0.0, 1.0, -1.0, rng.uniform(-2, 2)]) for _ in range(length)]
    values = [rng.uniform(-1, 1) for _ in range(length)]
    return rewards, values


# --- discounted returns ---------------------------------------------------------------------------


def test_discounted_returns_hand_example():
    assert discounted_returns([0, 0, 1], 0.9) == pytest.approx([0.81, 0.9, 1.0])
    assert discounted_returns([1, 1, 1], 1.0) == pytest.approx([3.0, 2.0, 1.0])
    assert discounted_returns([1, 2, 3], 0.0) == pytest.approx([1.0, 2.0, 3.0])
    assert discounted_returns([], 0.9) == []


def test_discounted_returns_bootstrap_for_truncated_episode():
    # G_2 = 1 + 0.5 * 4 = 3; G_1 = 0 + 0.5 * 3; G_0 = 0 + 0.5 * 1.5
    assert discounted_returns([0, 0, 1], 0.5, bootstrap=4.0) == pytest.approx([0.75, 1.5, 3.0])


def test_discounted_returns_accept_tensors():
    assert discounted_returns(torch.tensor([0.0, 0.0, 1.0]), 0.9) == pytest.approx([0.81, 0.9, 1.0])


def test_batch_returns_keeps_episodes_apart():
    assert batch_returns([[0, 0, 1], [0, -1], []], 0.9) == [
        pytest.approx([0.81, 0.9, 1.0]),
        pytest.approx([-0.9, -1.0]),
        [],
    ]


@pytest.mark.parametrize("gamma", [-0.1, 1.01, 2.0, float("nan")])
def test_invalid_gamma_raises(gamma):
    with pytest.raises(ValueError, match="gamma"):
        discounted_returns([1.0], gamma)
    with pytest.raises(ValueError, match="gamma"):
        batch_returns([], gamma)
    with pytest.raises(ValueError, match="gamma"):
        gae([1.0], [0.0], gamma, 0.9)


@pytest.mark.parametrize("lam", [-0.5, 1.5, float("nan")])
def test_invalid_lambda_raises(lam):
    with pytest.raises(ValueError, match="lam"):
        gae([1.0], [0.0], 0.9, lam)


# --- ReBN ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_rebn_has_mean_zero_std_one_over_all_turns(seed):
    rng = random.Random(seed)
    episodes = [[rng.uniform(-3, 5) for _ in range(rng.randint(1, 6))] for _ in range(rng.randint(2, 8))]
    normalised = rebn(episodes)
    assert [len(e) for e in normalised] == [len(e) for e in episodes]
    flat = torch.tensor([g for e in normalised for g in e], dtype=torch.float64)
    assert flat.mean().item() == pytest.approx(0.0, abs=1e-9)
    assert flat.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-6)


def test_rebn_normalises_over_the_batch_not_per_episode():
    # Per-episode normalisation would give [-1, 1] and [-1, 1]; over the batch it does not.
    out = rebn([[0.0, 1.0], [2.0, 3.0]])
    std = math.sqrt(1.25)  # population std of 0, 1, 2, 3
    assert out == [pytest.approx([-1.5 / std, -0.5 / std]), pytest.approx([0.5 / std, 1.5 / std])]


@pytest.mark.parametrize(
    "batch", [[[5.0]], [[2.0, 2.0], [2.0]], [[0.1, 0.1, 0.1], [0.1]], [[-7.0], [-7.0], [-7.0]]]
)
def test_rebn_constant_or_single_turn_batch_gives_zeros(batch):
    out = rebn(batch)
    flat = [g for e in out for g in e]
    assert all(not math.isnan(g) for g in flat)
    assert flat == pytest.approx([0.0] * len(flat), abs=1e-12)


def test_rebn_empty_inputs():
    assert rebn([]) == []
    assert rebn([[], []]) == [[], []]
    assert rebn([[], [1.0, 3.0]]) == [[], pytest.approx([-1.0, 1.0])]


# --- GAE ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("terminated", [True, False])
def test_gae_matches_reference_loop(seed, terminated):
    rng = random.Random(seed)
    rewards, values = random_episode(rng, rng.randint(1, 12))
    gamma, lam, last_value = rng.uniform(0.5, 1.0), rng.uniform(0.0, 1.0), rng.uniform(-2, 2)
    advantages, returns = gae(rewards, values, gamma, lam, last_value=last_value, terminated=terminated)
    expected = reference_gae(rewards, values, gamma, lam, last_value, terminated)
    assert advantages == pytest.approx(expected, abs=1e-9)
    assert returns == pytest.approx([a + v for a, v in zip(expected, values)], abs=1e-9)


def test_gae_truncation_changes_only_through_last_value():
    rewards, values = [0.0, 0.0, 1.0], [0.2, 0.4, 0.6]
    terminated, _ = gae(rewards, values, 0.9, 0.8, last_value=5.0, terminated=True)
    zero_tail, _ = gae(rewards, values, 0.9, 0.8, last_value=0.0, terminated=False)
    truncated, _ = gae(rewards, values, 0.9, 0.8, last_value=5.0, terminated=False)
    assert terminated == pytest.approx(zero_tail)  # terminated ignores last_value
    # The bootstrap enters the last delta with weight gamma and reaches turn t scaled by (gamma*lam)^(T-1-t).
    for t, (a, b) in enumerate(zip(truncated, terminated)):
        assert a - b == pytest.approx(0.9 * 5.0 * (0.9 * 0.8) ** (2 - t))


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_lambda_one_is_monte_carlo_return_minus_value(seed):
    rng = random.Random(seed)
    rewards, values = random_episode(rng, rng.randint(1, 10))
    gamma = rng.uniform(0.0, 1.0)
    advantages, returns = gae(rewards, values, gamma, 1.0)
    mc = discounted_returns(rewards, gamma)
    assert advantages == pytest.approx([g - v for g, v in zip(mc, values)], abs=1e-9)
    assert returns == pytest.approx(mc, abs=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_lambda_one_truncated_bootstraps_with_last_value(seed):
    rng = random.Random(seed)
    rewards, values = random_episode(rng, rng.randint(1, 10))
    _, returns = gae(rewards, values, 0.95, 1.0, last_value=3.0, terminated=False)
    assert returns == pytest.approx(discounted_returns(rewards, 0.95, bootstrap=3.0), abs=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("terminated", [True, False])
def test_gae_lambda_zero_is_one_step_td_error(seed, terminated):
    rng = random.Random(seed)
    rewards, values = random_episode(rng, rng.randint(1, 10))
    advantages, _ = gae(rewards, values, 0.9, 0.0, last_value=1.5, terminated=terminated)
    next_values = values[1:] + [0.0 if terminated else 1.5]
    td = [r + 0.9 * nv - v for r, nv, v in zip(rewards, next_values, values)]
    assert advantages == pytest.approx(td, abs=1e-12)


def test_gae_hand_example():
    # gamma = lam = 1, terminated: advantages are the return-to-go minus V.
    advantages, returns = gae([0.0, 1.0], [0.5, 0.25], 1.0, 1.0)
    assert advantages == pytest.approx([0.5, 0.75])
    assert returns == pytest.approx([1.0, 1.0])


def test_gae_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="one value per turn"):
        gae([0.0, 1.0], [0.0], 0.9, 0.9)


def test_gae_empty_episode():
    assert gae([], [], 0.9, 0.9) == ([], [])


@settings(max_examples=100, deadline=None)
@given(REWARDS, st.floats(0, 1), st.floats(0, 1), st.booleans(), st.floats(-5, 5))
def test_gae_matches_reference_property(rewards, gamma, lam, terminated, last_value):
    values = [0.1 * i for i in range(len(rewards))]
    advantages, _ = gae(rewards, values, gamma, lam, last_value=last_value, terminated=terminated)
    expected = reference_gae(rewards, values, gamma, lam, last_value, terminated)
    assert advantages == pytest.approx(expected, abs=1e-6)


# --- GRPO group normalisation ------------------------------------------------------------------


def test_group_normalise_hand_example():
    # group [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3); group [3, 3, 3, 3]: no signal
    std = math.sqrt(1 / 3)
    out = group_normalise([1.0, 0.0, 0.0, 1.0, 3.0, 3.0, 3.0, 3.0], 4, eps=0.0)
    assert out == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std, 0.0, 0.0, 0.0, 0.0])


def test_group_normalise_without_scaling_is_dr_grpo():
    out = group_normalise([1.0, 0.0, 0.0, 0.0, 2.0, 4.0], 3, scale=False)
    assert out == pytest.approx([2 / 3, -1 / 3, -1 / 3, -2.0, 0.0, 2.0])


@pytest.mark.parametrize("seed", SEEDS)
def test_group_normalise_matches_trl_formula(seed):
    # TRL's GRPOTrainer: (r - group mean) / (unbiased group std + eps), groups of consecutive rows.
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.rand(12, generator=generator, dtype=torch.float64)
    grouped = rewards.view(-1, 4)
    expected = (grouped - grouped.mean(dim=1, keepdim=True)) / (grouped.std(dim=1, keepdim=True) + 1e-4)
    assert group_normalise(rewards, 4, eps=1e-4) == pytest.approx(expected.flatten().tolist(), abs=1e-9)


def test_group_normalise_group_of_one_gives_zeros():
    assert group_normalise([1.0, -2.0, 5.0], 1) == [0.0, 0.0, 0.0]


def test_group_normalise_constant_group_is_not_nan():
    out = group_normalise([0.1, 0.1, 0.1], 3)
    assert out == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)


@pytest.mark.parametrize(("n", "group_size"), [(5, 2), (3, 4), (7, 3)])
def test_group_normalise_rejects_incomplete_groups(n, group_size):
    with pytest.raises(ValueError, match="groups of"):
        group_normalise([0.0] * n, group_size)


def test_group_normalise_rejects_bad_group_size():
    with pytest.raises(ValueError, match="group_size"):
        group_normalise([0.0, 1.0], 0)


# --- whitening ----------------------------------------------------------------------------------


def test_whiten_without_mask_has_mean_zero_variance_one():
    values = torch.randn(5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3 + 2
    out = whiten(values)
    assert out.mean().item() == pytest.approx(0.0, abs=1e-9)
    assert out.var(unbiased=False).item() == pytest.approx(1.0, abs=1e-6)


def test_whiten_ignores_masked_entries():
    values = torch.tensor([[1.0, 2.0, 3.0, 1e6], [float("nan"), 4.0, 5.0, -1e6]])
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 0]])
    out = whiten(values, mask)
    kept = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    expected = (kept - kept.mean()) / torch.sqrt(kept.var(unbiased=False) + 1e-8)
    assert out[mask.bool()].tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    assert out[~mask.bool()].tolist() == [0.0, 0.0, 0.0]
    assert not torch.isnan(out).any()


def test_whiten_same_result_whatever_the_padding_holds():
    mask = torch.tensor([1, 1, 1, 0, 0])
    a = whiten(torch.tensor([1.0, 2.0, 4.0, 0.0, 0.0]), mask)
    b = whiten(torch.tensor([1.0, 2.0, 4.0, 99.0, -3.0]), mask)
    assert torch.equal(a, b)


def test_whiten_keep_mean_only_rescales():
    values = torch.tensor([1.0, 3.0, 5.0, 7.0])
    out = whiten(values, shift_mean=False)
    assert out.mean().item() == pytest.approx(4.0, abs=1e-5)
    assert out.var(unbiased=False).item() == pytest.approx(1.0, abs=1e-5)


def test_whiten_rejects_empty_or_mismatched_mask():
    with pytest.raises(ValueError, match="unmasked"):
        whiten(torch.ones(3), torch.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        whiten(torch.ones(3), torch.ones(4))

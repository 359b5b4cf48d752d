"""PPO with a value head: losses against reference loops, GAE with bootstrapping, the critic
variants, the KL reference, the numerical guard, metrics, checkpoints and resume (chapter 6)."""

import csv
import math

import pytest
import torch

import tutorial_lib.rl.rl_loop as rl_loop
from tutorial_lib.lm.models import load_policy
from tutorial_lib.lm.policies import Sample
from tutorial_lib.lm.tokenization import left_padded_batch
from tutorial_lib.rl.advantages import gae
from tutorial_lib.rl.ppo import (
    PPO,
    PPOSettings,
    clipped_surrogate,
    clipped_value_loss,
    explained_variance,
)
from tutorial_lib.rl.rl_loop import train
from tutorial_lib.rl.rollout import TurnBatch, collect
from tutorial_lib.rl.schedules import lr_multiplier

from .conftest import SMALL

TTT = dict(opponent="random", agent_mark="alternate", invalid_move="forfeit")


def small_settings(**overrides):
    return PPOSettings(**{"iterations": 4, "turns_per_iteration": 12, "num_envs": 4, "minibatch_turns": 6,
                          "microbatch_turns": 4, "learning_rate": 1e-2, "save_every": 2, "env_options": TTT,
                          **overrides})


def fresh_policy(tiny_cache):
    return load_policy("tiny", tiny_config=SMALL)


def weights(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def test_settings_reject_bad_values():
    for bad, match in [({"critic": "twin"}, "critic"), ({"lr_schedule": "step"}, "lr_schedule"),
                       ({"gae_lambda": 1.5}, "gae_lambda"), ({"clip_range": 0}, "clip_range"),
                       ({"ppo_epochs": 0}, "ppo_epochs"), ({"kl_coef": -1}, "kl_coef"), ({"gamma": 2}, "gamma")]:
        with pytest.raises(ValueError, match=match):
            PPOSettings(**bad)


def test_clipped_surrogate_matches_a_token_by_token_reference():
    torch.manual_seed(0)
    # in float64, as the reference loop computes: the maths alone, not float32 rounding
    logprobs = torch.randn(3, 4).double().requires_grad_()
    old = logprobs.detach() + 0.5 * torch.randn(3, 4).double()
    adv = torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64)
    mask = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
    loss, _ = clipped_surrogate(logprobs, old, adv, mask, 0.2, num_tokens=9)
    expected = 0.0
    for i in range(3):
        for j in range(4):
            if mask[i, j]:
                r = math.exp(float(logprobs[i, j].detach() - old[i, j]))
                a = float(adv[i, 0])
                expected += max(-a * r, -a * min(max(r, 0.8), 1.2))
    # float64 both sides: ~30 operations on terms of both signs, |A r| < 5, round to ~1e-15 (absolute, as
    # the terms partly cancel). A wrong clip range, bound or sign moves it by > 1e-2
    assert float(loss.detach()) == pytest.approx(expected / 9, rel=0, abs=1e-12)


def test_clipping_stops_the_gradient_once_the_ratio_has_moved_far_enough():
    # ratios e^0.5 ~ 1.65 (past 1 + eps) and e^-0.5 ~ 0.61 (past 1 - eps), both advantages positive
    logprobs = torch.tensor([[0.5, -0.5]], requires_grad=True)
    loss, _ = clipped_surrogate(logprobs, torch.zeros(1, 2), torch.tensor([[1.0]]), torch.ones(1, 2, dtype=torch.bool),
                                0.2, num_tokens=2)
    loss.backward()
    # the token already far more likely gets no further push; the one that became less likely does
    assert logprobs.grad[0, 0] == 0
    assert logprobs.grad[0, 1] < 0


def test_clipped_value_loss_takes_the_larger_error():
    values, old, returns = torch.tensor([2.0, 0.1]), torch.tensor([0.0, 0.0]), torch.tensor([2.0, 1.0])
    # turn 0: V moved 2.0 from old; clipped to 0.5 -> error (0.5 - 2)^2 = 2.25 > (2 - 2)^2 = 0
    # turn 1: inside the clip range -> (0.1 - 1)^2 = 0.81
    # float32, elementwise ops and a sum of 2 (no order to differ): the same on every CPU, within a few ulps
    assert float(clipped_value_loss(values, old, returns, 0.5, 2)) == pytest.approx(0.5 * (2.25 + 0.81) / 2)
    assert float(clipped_value_loss(values, old, returns, None, 2)) == pytest.approx(0.5 * (0.0 + 0.81) / 2)


def test_explained_variance_and_the_schedule():
    returns = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(returns, returns) == pytest.approx(1.0)
    assert explained_variance(torch.full((3,), 2.0), returns) == pytest.approx(0.0)
    settings = PPOSettings(iterations=10, warmup_iterations=2)
    factors = [lr_multiplier(i, settings) for i in range(10)]
    assert factors[0] < factors[1] < factors[2] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[2:], factors[3:]))  # cosine decay after warm-up
    assert lr_multiplier(5, PPOSettings(lr_schedule="constant")) == 1.0
    # warm-up, the full rate, then a linear fall over the last decay_iterations that never reaches 0
    wsd = PPOSettings(iterations=10, lr_schedule="warmup_stable_decay", warmup_iterations=1, decay_iterations=4)
    assert [lr_multiplier(i, wsd) for i in range(10)] == pytest.approx([0.5, 1, 1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2])
    for bad in (0, 10):  # no decay at all, or a decay that overlaps the warm-up
        with pytest.raises(ValueError, match="decay_iterations"):
            PPOSettings(iterations=10, lr_schedule="warmup_stable_decay", warmup_iterations=1, decay_iterations=bad)


class AlwaysGuessOne:
    """Plays ``\\boxed{1}`` every turn, with real token ids: most games run out of turns (truncated)."""

    def __init__(self, policy):
        self.policy = policy

    def act_samples(self, episodes, sampling=None):
        tok = self.policy.tokenizer
        prompts = [self.policy.prompt(e) for e in episodes]
        batch = left_padded_batch(tok, prompts)
        action = tok("\\boxed{1}", add_special_tokens=False).input_ids + [tok.eos_token_id]
        return [Sample("\\boxed{1}", ids[m.bool()].tolist(), action, [0.0] * len(action))
                for ids, m in zip(batch["input_ids"], batch["attention_mask"])]


def test_gae_bootstraps_truncated_episodes_from_the_value_of_their_last_state(tiny_cache):
    policy = fresh_policy(tiny_cache)
    rollout = collect(AlwaysGuessOne(policy), "guess_the_number", range(8), env_options={"preset": "easy"},
                      num_envs=4, sampling=None)
    cut = [r for r in rollout.records if r.truncated]
    assert cut and any(not r.truncated for r in rollout.records)
    # GuessTheNumber's turn limit ends the game (GEM: terminated and truncated): nothing to bootstrap
    assert all(r.terminated for r in cut)
    settings = PPOSettings(gamma=0.9, gae_lambda=0.8, whiten_advantages=False)
    assert PPO(policy, settings).bootstrap_values(rollout) == {}
    # a game cut by a step limit it could have played past (CookingWorld's) reports only truncated
    for record in cut[: len(cut) // 2 + 1]:
        record.terminated = False
    settings = PPOSettings(gamma=0.9, gae_lambda=0.8, whiten_advantages=False)
    ppo = PPO(policy, settings)
    torch.nn.init.normal_(ppo.value_model.head.weight)  # a critic with something to say
    batch, _ = ppo.prepare(rollout)
    advantages, targets, old_values = batch.advantages.tolist(), batch.returns.tolist(), batch.old_values.tolist()

    start = 0
    for record in rollout.records:
        end = start + record.length
        last_value = 0.0
        if record.truncated and not record.terminated:
            # V of the prompt the policy would read next, computed the plain way
            prompt = policy.prompt_for(record.game, record.task, record.turns)
            ids = policy.tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
            with torch.no_grad():
                hidden = policy.model.model(input_ids=ids).last_hidden_state[:, -1]
                last_value = float(ppo.value_model.from_hidden(hidden))
            assert last_value != 0.0
        adv, ret = gae([t.reward for t in rollout.turns[start:end]], old_values[start:end], 0.9, 0.8,
                       last_value=last_value, terminated=record.terminated)
        # float32, the bootstrap value of a left-padded batch vs of one prompt alone: V ~ 3.5 is a dot
        # product with sum |w h| ~ 17 after 2 layers, in other batch shapes (seen: 1-3 ulps, <1e-6); a
        # wrong state's V or a missing bootstrap moves these by > 1e-2
        assert advantages[start:end] == pytest.approx(adv, abs=1e-4)
        assert targets[start:end] == pytest.approx(ret, abs=1e-4)
        start = end


def test_an_update_makes_positive_advantage_actions_more_likely(tiny_cache):
    torch.manual_seed(0)
    policy = fresh_policy(tiny_cache)
    # an illegal move is replaced by a random legal one, so games are won and lost: returns differ
    options = {**TTT, "invalid_move": "random"}
    rollout = collect(policy, "tictactoe", range(16), env_options=options, num_envs=8)
    ppo = PPO(policy, small_settings(ppo_epochs=4, minibatch_turns=64, lr_schedule="constant", env_options=options))
    batch, _ = ppo.prepare(rollout)
    before = batch.old_logprobs.sum(1)
    metrics = ppo.update(rollout)
    change = (ppo.score_old(batch).logprobs.sum(1) - before).tolist()
    advantages = batch.advantages.tolist()
    up = [c for c, a in zip(change, advantages) if a > 0]
    down = [c for c, a in zip(change, advantages) if a < 0]
    assert up and down
    assert sum(up) / len(up) > sum(down) / len(down)
    assert metrics["approx_kl"] > 0 and metrics["clipfrac"] > 0  # 4 epochs at lr 1e-2 move past the clip
    assert metrics["skipped_steps"] == 0


def test_an_entropy_bonus_raises_the_entropy_and_a_zero_bonus_trains_nothing_into_it(tiny_cache):
    """The entropy enters the loss only under a bonus: with one, an update that would otherwise
    change nothing (every advantage 0, the critic silenced) raises it; with a coefficient of 0 the
    same update leaves the policy as it was."""
    rollout = collect(fresh_policy(tiny_cache), "tictactoe", range(8), env_options=TTT, num_envs=8)
    entropies = {}
    for coef in (0.0, 1.0):
        policy = fresh_policy(tiny_cache)
        ppo = PPO(policy, small_settings(entropy_coef=coef, value_coef=0.0, whiten_advantages=False, gamma=1.0,
                                         lr_schedule="constant"))
        batch, _ = ppo.prepare(rollout)
        batch.advantages = torch.zeros_like(batch.advantages)
        ppo.prepare = lambda _rollout, batch=batch: (batch, {})
        before = weights(policy.model)
        ppo.update(rollout)
        with torch.no_grad():
            scores, _ = ppo.logprobs_and_values(batch.model_inputs(), with_entropy=True)
        entropies[coef] = float(scores.entropy[batch.action_mask].mean())
        assert same(before, weights(policy.model)) == (coef == 0.0)
    assert entropies[1.0] > entropies[0.0]


def test_a_separate_critic_leaves_the_policy_alone(tiny_cache):
    policy = fresh_policy(tiny_cache)
    ppo = PPO(policy, small_settings(critic="separate", learning_rate=0.0, lr_schedule="constant", value_coef=10.0))
    assert ppo.value_model.backbone is not policy.model
    policy_before, critic_before = weights(policy.model), weights(ppo.value_model)
    ppo.update(collect(policy, "tictactoe", range(8), env_options=TTT, num_envs=8))
    assert same(policy_before, weights(policy.model))
    assert not same(critic_before, weights(ppo.value_model))


def test_the_kl_reference_is_frozen_and_starts_equal_to_the_policy(tiny_cache):
    policy = fresh_policy(tiny_cache)
    ppo = PPO(policy, small_settings(kl_coef=0.2, lr_schedule="constant"))
    assert not any(p.requires_grad for p in ppo.reference.parameters())
    rollout = collect(policy, "tictactoe", range(8), env_options=TTT, num_envs=8)
    # the reference is a copy scoring the same inputs: the same float32 computation (seen: exactly 0)
    assert ppo.update(rollout)["kl_ref"] == pytest.approx(0.0, abs=1e-6)
    second = ppo.update(collect(policy, "tictactoe", range(8, 16), env_options=TTT, num_envs=8))
    assert second["kl_ref"] != 0.0  # the policy has moved away from its frozen start


def test_a_non_finite_loss_is_skipped_not_applied(tiny_cache):
    policy = fresh_policy(tiny_cache)
    ppo = PPO(policy, small_settings())
    rollout = collect(policy, "tictactoe", range(4), env_options=TTT, num_envs=4)
    with torch.no_grad():
        ppo.value_model.head.bias.fill_(float("nan"))
    before = weights(policy.model)
    with pytest.warns(RuntimeWarning, match="skipped"):  # said, not only counted
        metrics = ppo.update(rollout)
    assert metrics["skipped_steps"] >= 1
    assert same(before, weights(policy.model))


def test_train_logs_ppo_metrics_and_saves_the_value_model(tiny_cache, tmp_path):
    policy = fresh_policy(tiny_cache)
    result = train(PPO, policy, "tictactoe", small_settings(iterations=2), out_dir=tmp_path, progress=False)
    for key in ("mean_return", "turns_per_episode", "action_tokens", "entropy", "kl_k1", "kl_k3", "success_rate",
                "invalid_rate", "sample_seconds", "train_seconds", "policy_loss", "value_loss", "approx_kl",
                "clipfrac", "explained_variance", "learning_rate", "skipped_steps"):
        assert key in result.history[0], key
    # the sampler is the policy: k3 ~ (log r)^2 / 2 ~ 1e-12, plus float32 rounding of exp, <= 6e-8 a token
    assert abs(result.history[0]["kl_k3"]) < 1e-5
    with (tmp_path / "metrics.csv").open() as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [1, 2]
    saved = torch.load(tmp_path / "model" / "value_model.pt")
    assert torch.equal(saved["head.weight"], result.algorithm.value_model.head.weight)


def test_a_crashed_run_resumes_to_the_uninterrupted_result(tiny_cache, tmp_path, monkeypatch):
    settings = small_settings(lr_schedule="warmup_cosine", warmup_iterations=1)
    straight = fresh_policy(tiny_cache)
    full = train(PPO, straight, "tictactoe", settings, out_dir=tmp_path / "a", progress=False)

    calls = {"n": 0}
    real_collect = rl_loop.collect

    def crash_on_third(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the run is stopped during its third iteration
        return real_collect(*args, **kwargs)

    monkeypatch.setattr(rl_loop, "collect", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        train(PPO, fresh_policy(tiny_cache), "tictactoe", settings, out_dir=tmp_path / "b", progress=False)
    monkeypatch.setattr(rl_loop, "collect", real_collect)
    torch.manual_seed(555)  # anything may happen between the stop and the resume
    resumed_policy = fresh_policy(tiny_cache)
    resumed = train(PPO, resumed_policy, "tictactoe", settings, out_dir=tmp_path / "b", resume=True, progress=False)

    assert same(weights(straight.model), weights(resumed_policy.model))
    assert same(weights(full.algorithm.value_model), weights(resumed.algorithm.value_model))
    assert [r["learning_rate"] for r in resumed.history] == [r["learning_rate"] for r in full.history]
    assert len(resumed.history) == 4


def test_a_run_in_stages_ends_where_one_call_ends(tiny_cache, tmp_path):
    """Two parts (one notebook cell each) train exactly what one call trains; only the last saves the model."""
    settings = small_settings(lr_schedule="warmup_cosine", warmup_iterations=1, save_every=10)
    straight = fresh_policy(tiny_cache)
    full = train(PPO, straight, "tictactoe", settings, out_dir=tmp_path / "a", progress=False)
    with pytest.raises(FileNotFoundError, match="run stage 1 of 2 first"):
        train(PPO, fresh_policy(tiny_cache), "tictactoe", settings, out_dir=tmp_path / "b", progress=False, stage=(2, 2))
    first = train(PPO, fresh_policy(tiny_cache), "tictactoe", settings, out_dir=tmp_path / "b", progress=False,
                      stage=(1, 2))
    assert not first.finished and len(first.history) == 2 and not (tmp_path / "b" / "model").exists()
    staged_policy = fresh_policy(tiny_cache)
    second = train(PPO, staged_policy, "tictactoe", settings, out_dir=tmp_path / "b", progress=False, stage=(2, 2))
    assert second.finished and (tmp_path / "b" / "model" / "value_model.pt").exists()
    assert same(weights(straight.model), weights(staged_policy.model))
    assert [r["mean_return"] for r in second.history] == [r["mean_return"] for r in full.history]
    with pytest.raises(ValueError, match="stage must be"):
        train(PPO, staged_policy, "tictactoe", settings, out_dir=tmp_path / "c", progress=False, stage=(0, 2))


def test_resuming_a_reinforce_checkpoint_with_ppo_says_why_not(tiny_cache, tmp_path):
    from tutorial_lib.rl.reinforce import Reinforce, ReinforceSettings

    train(Reinforce, fresh_policy(tiny_cache), "tictactoe", ReinforceSettings(iterations=1, turns_per_iteration=4, num_envs=4,
                    env_options=TTT), out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="another algorithm"):
        train(PPO, fresh_policy(tiny_cache), "tictactoe", small_settings(), out_dir=tmp_path, resume=True,
                  progress=False)


def test_a_tempered_sampler_is_scored_at_its_own_temperature(tiny_cache):
    policy = fresh_policy(tiny_cache)
    rollout = collect(policy, "tictactoe", range(8), env_options=TTT, num_envs=8, temperature=0.5)
    batch = TurnBatch.of(rollout.turns, policy.tokenizer.pad_token_id)
    tempered = PPO(policy, small_settings(temperature=0.5)).score_old(batch)
    plain = PPO(policy, small_settings()).score_old(batch)
    tokens = sum(len(turn.action_ids) for turn in rollout.turns)
    assert abs(tempered.kl_sums["kl_k3"] / tokens) < 1e-5  # the sampler is the tempered policy
    assert plain.kl_sums["kl_k3"] / tokens > 1e-3  # scored at temperature 1, the same tokens look off-policy
    with pytest.raises(ValueError, match="temperature"):
        collect(policy, "tictactoe", range(2), env_options=TTT, sampling="greedy", temperature=0.5)


def test_a_low_temperature_update_steps_with_a_finite_gradient(tiny_cache):
    """At temperature 0.001 the tiny model's logit gaps exceed float32's ~104-nat range, as SmolLM2's do at
    0.5: some token probabilities underflow to 0. Every optimiser step of `small`'s math PPO was skipped
    for a NaN gradient that came from there (the entropy term, with a coefficient of 0)."""
    torch.manual_seed(0)
    policy = fresh_policy(tiny_cache)
    rollout = collect(policy, "tictactoe", range(8), env_options={**TTT, "invalid_move": "random"}, num_envs=8,
                      temperature=0.001)
    ppo = PPO(policy, small_settings(temperature=0.001, lr_schedule="constant"))
    before = weights(policy.model)
    metrics = ppo.update(rollout)
    assert metrics["skipped_steps"] == 0 and math.isfinite(metrics["grad_norm"])
    assert not same(before, weights(policy.model))


def test_ppo_settings_hold_the_loops_fields_and_ppos_own_only():
    from dataclasses import fields

    from tutorial_lib.rl.reinforce import ReinforceSettings
    from tutorial_lib.rl.settings import RLSettings

    loop = {f.name for f in fields(RLSettings)}
    assert loop <= {f.name for f in fields(PPOSettings)} and loop <= {f.name for f in fields(ReinforceSettings)}
    assert "normalise" not in {f.name for f in fields(PPOSettings)}  # REINFORCE's, not PPO's
    assert PPOSettings().gamma == 1.0 and ReinforceSettings().gamma == 0.9


def test_the_actor_trains_its_top_layer_only_and_a_separate_critic_trains_whole(tiny_cache):
    policy = load_policy("tiny", tiny_config=SMALL, lora=True)
    ppo = PPO(policy, small_settings(train_top_layers=1, critic="separate"))
    actor = {n: p.requires_grad for n, p in policy.model.named_parameters() if "lora_" in n}
    assert actor and all(trains == (".layers.1." in n) for n, trains in actor.items())
    critic = {n: p.requires_grad for n, p in ppo.value_model.named_parameters() if "lora_" in n}
    assert critic and all(critic.values())  # copied before the actor's lower layers were frozen
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if ".layers.0." in n}
    ppo.update(collect(policy, "tictactoe", range(8), env_options=TTT, num_envs=8))
    after = dict(policy.model.named_parameters())
    assert all(torch.equal(after[n], value) for n, value in before.items())

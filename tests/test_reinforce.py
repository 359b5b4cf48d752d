"""REINFORCE with ReBN: the update, its metrics, checkpoints and resume (chapter 5)."""

import csv

import pytest
import torch

from tutorial_lib.lm.models import load_policy
from tutorial_lib.lm.policies import Sample
from tutorial_lib.rl.advantages import rebn
from tutorial_lib.rl.reinforce import Reinforce, ReinforceSettings, turn_advantages
from tutorial_lib.rl.rl_loop import train
from tutorial_lib.rl.rollout import TurnBatch, collect, turn_logprobs
from tutorial_lib.runtime.tracking import MetricsLog, load_checkpoint, save_checkpoint

from .conftest import SMALL

TTT = dict(opponent="random", agent_mark="alternate")


def small_settings(**overrides):
    return ReinforceSettings(**{"iterations": 4, "turns_per_iteration": 12, "num_envs": 4, "microbatch_turns": 5,
                         "learning_rate": 1e-2, "save_every": 2, "env_options": TTT, **overrides})


def fresh_policy(tiny_cache):
    return load_policy("tiny", tiny_config=SMALL)


def weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_settings_reject_bad_values():
    with pytest.raises(ValueError, match="normalise"):
        ReinforceSettings(normalise="batch")
    with pytest.raises(ValueError, match="gamma"):
        ReinforceSettings(gamma=1.5)
    with pytest.raises(ValueError, match="iterations"):
        ReinforceSettings(iterations=0)


def test_turn_advantages_are_rebn_of_discounted_returns(tiny_cache):
    policy = fresh_policy(tiny_cache)
    rollout = collect(policy, "tictactoe", range(6), num_envs=3)
    gamma = 0.5
    expected_returns = []
    for record in rollout.records:
        g, returns = 0.0, []
        for reward in reversed(record.rewards):
            g = reward + gamma * g
            returns.append(g)
        expected_returns.append(returns[::-1])
    flat = [g for ep in rebn(expected_returns) for g in ep]
    assert turn_advantages(rollout, gamma, "rebn") == pytest.approx(flat)
    raw = turn_advantages(rollout, gamma, "none")
    assert raw == pytest.approx([g for ep in expected_returns for g in ep])
    assert len(raw) == len(rollout.turns)


class BinarySearcher:
    """Plays the binary-search expert's guess every turn, with real token ids and one fixed action per
    state: a policy that is right and fully sure of itself, as chapter 4's GuessTheNumber SFT is."""

    def __init__(self, policy):
        self.policy = policy

    def act_samples(self, episodes, sampling=None):
        tok = self.policy.tokenizer
        samples = []
        for episode in episodes:
            text = episode.env.expert_action()  # from what the feedback revealed, not the secret
            prompt = tok(self.policy.prompt(episode), add_special_tokens=False).input_ids
            action = tok(text, add_special_tokens=False).input_ids + [tok.eos_token_id]
            samples.append(Sample(text, prompt, action, [0.0] * len(action)))
        return samples


def test_the_default_moves_nothing_when_every_game_is_won_the_same_way(tiny_cache):
    """Chapter 5's collapse, at its cause. Every game is won by the same play, so no action was
    better than another in its state. GEM's ReBN still scores each opening turn below the batch
    mean (its discounted return is smaller than a last turn's), a steady push down on the best
    opening that Adam turns into full-size steps; the default baseline per state gives those
    turns advantages that cancel, and the gradient is zero."""
    policy = fresh_policy(tiny_cache)
    rollout = collect(BinarySearcher(policy), "guess_the_number", range(40), env_options={"preset": "easy"},
                      num_envs=8, sampling=None)
    assert all(record.success for record in rollout.records)
    assert len({turn.turn for turn in rollout.turns}) > 1  # games of several lengths
    assert ReinforceSettings().normalise == "rebn_state"
    norms = {}
    for normalise in ("rebn", "rebn_state"):
        advantages = turn_advantages(rollout, 0.9, normalise)
        if normalise == "rebn":  # one opening state, one opening move: their advantages add up below 0
            assert sum(a for a, t in zip(advantages, rollout.turns) if t.turn == 0) < -1.0
        params = [p for p in policy.model.parameters() if p.requires_grad]
        metrics = reinforce_step(policy, torch.optim.SGD(params, lr=0.0), batch_of(policy, rollout.turns, advantages),
                                 ReinforceSettings(microbatch_turns=64))
        norms[normalise] = metrics["grad_norm"]
    assert norms["rebn"] > 0, norms
    # rebn_state's gradient is 0 in exact arithmetic; float32 leaves what cancelling ~600 token terms
    # rounds to, ~1e-7..1e-5 of their size (seen: 4e-7 of rebn's norm)
    assert norms["rebn_state"] < 1e-4 * norms["rebn"], norms


def reinforce_step(policy, optimizer, batch, settings):
    """One :meth:`Reinforce.step` of ``batch`` with ``optimizer`` (an SGD at rate 0 changes nothing)."""
    reinforce = Reinforce(policy, settings)
    reinforce.optimizer = optimizer
    return reinforce.step(batch)


def batch_of(policy, turns, advantages):
    return TurnBatch.of(turns, policy.tokenizer.pad_token_id, advantages=torch.tensor(advantages))


def test_a_batch_without_advantages_is_refused(tiny_cache):
    policy = fresh_policy(tiny_cache)
    turns = collect(policy, "tictactoe", range(2), num_envs=2).turns[:2]
    optimizer = torch.optim.SGD(policy.model.parameters(), lr=0.0)
    with pytest.raises(ValueError, match="advantages"):
        reinforce_step(policy, optimizer, TurnBatch.of(turns, policy.tokenizer.pad_token_id), small_settings())


def test_update_raises_the_log_prob_of_positive_advantage_actions(tiny_cache):
    policy = fresh_policy(tiny_cache)
    rollout = collect(policy, "tictactoe", range(4), num_envs=4)
    turns = rollout.turns[:4]
    advantages = [1.0, -1.0, 1.0, -1.0]
    settings = small_settings(learning_rate=1e-2)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-2, betas=(0.9, 0.95))

    def turn_logprob():
        return torch.tensor(turn_logprobs(policy.model, turns, policy.tokenizer.pad_token_id))

    before = turn_logprob()
    metrics = reinforce_step(policy, optimizer, batch_of(policy, turns, advantages), settings)
    after = turn_logprob()
    change = after - before
    assert change[0] > 0 and change[2] > 0
    assert change[1] < 0 and change[3] < 0
    # sampling and scoring used the same weights: the ratio is 1 and both KL estimates ~0, up to float32
    # (generate and the recompute differ by ~1e-6 in a log-prob). k3 >= 0 is the maths only: float32's
    # exp(x) - 1 - x of an ulp-sized x rounds to +-6e-8, either sign
    assert metrics["mean_ratio"] == pytest.approx(1.0, abs=1e-4)
    assert abs(metrics["kl_k1"]) < 1e-4 and abs(metrics["kl_k3"]) < 1e-6
    assert metrics["entropy"] > 0 and metrics["skipped_step"] == 0


def test_prompt_tokens_get_no_gradient_through_the_loss(tiny_cache):
    """Only action tokens carry the advantage: changing a prompt's *labels* cannot matter, but a
    zero advantage everywhere must give a zero gradient."""
    policy = fresh_policy(tiny_cache)
    turns = collect(policy, "tictactoe", range(2), num_envs=2).turns[:2]
    optimizer = torch.optim.SGD(policy.model.parameters(), lr=0.0)
    reinforce_step(policy, optimizer, batch_of(policy, turns, [0.0, 0.0]), small_settings())
    grads = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert all(float(g.abs().max()) == 0.0 for g in grads)


def test_a_non_finite_gradient_is_skipped_not_applied(tiny_cache):
    policy = fresh_policy(tiny_cache)
    turns = collect(policy, "tictactoe", range(2), num_envs=2).turns[:2]
    before = weights(policy.model)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-2)
    with pytest.warns(RuntimeWarning, match="skipped"):
        metrics = reinforce_step(policy, optimizer, batch_of(policy, turns, [float("inf"), 1.0]), small_settings())
    assert metrics["skipped_step"] == 1.0
    after = weights(policy.model)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_train_logs_every_iteration_to_csv_and_tensorboard(tiny_cache, tmp_path):
    policy = fresh_policy(tiny_cache)
    result = train(Reinforce, policy, "tictactoe", small_settings(iterations=2), out_dir=tmp_path, progress=False)
    assert [row["step"] for row in result.history] == [1, 2]
    for key in ("mean_return", "turns_per_episode", "action_tokens", "entropy", "kl_k1", "kl_k3", "success_rate",
                "invalid_rate", "sample_seconds", "train_seconds"):
        assert key in result.history[0], key
    with (tmp_path / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert list((tmp_path / "tensorboard").iterdir())
    reloaded = load_policy(str(tmp_path / "model"))
    state = weights(policy.model)
    assert all(torch.equal(state[k], v) for k, v in weights(reloaded.model).items())


def test_stopping_and_resuming_gives_the_uninterrupted_run(tiny_cache, tmp_path):
    torch.manual_seed(123)
    straight = fresh_policy(tiny_cache)
    full = train(Reinforce, straight, "tictactoe", small_settings(), out_dir=tmp_path / "a", progress=False)

    torch.manual_seed(999)  # a different global RNG state before the first part: settings.seed rules
    first = fresh_policy(tiny_cache)
    train(Reinforce, first, "tictactoe", small_settings(iterations=2), out_dir=tmp_path / "b", progress=False)
    torch.manual_seed(555)  # and anything may happen between the stop and the resume
    resumed_policy = fresh_policy(tiny_cache)  # a new process: fresh weights, restored from the checkpoint
    resumed = train(Reinforce, resumed_policy, "tictactoe", small_settings(), out_dir=tmp_path / "b",
                              resume=True, progress=False)

    a, b = weights(straight.model), weights(resumed_policy.model)
    initial = weights(fresh_policy(tiny_cache).model)
    assert not all(torch.equal(a[k], initial[k]) for k in a)  # it did learn something...
    assert all(torch.equal(a[k], b[k]) for k in a)  # ...and the resumed run learnt exactly the same
    assert [row["mean_return"] for row in resumed.history] == [row["mean_return"] for row in full.history]
    assert len(resumed.history) == 4


def test_resume_without_a_checkpoint_says_so(tiny_cache, tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(Reinforce, fresh_policy(tiny_cache), "tictactoe", small_settings(), out_dir=tmp_path,
                        resume=True, progress=False)


def test_metrics_log_resume_drops_rows_after_the_checkpoint(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=False)
    for step in (1, 2, 3):
        log.write(step, {"x": step * 1.5})
    log.close()
    again = MetricsLog(tmp_path, tensorboard=False, resume_from=2)
    assert [row["step"] for row in again.rows] == [1, 2]
    again.write(3, {"x": 0.0, "y": 1.0})  # a new column later on keeps the file rectangular
    with (tmp_path / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["x"] for r in rows] == ["1.5", "3.0", "0.0"] and rows[0]["y"] == ""


def test_checkpoint_round_trip_restores_optimizer_and_rng(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    save_checkpoint(tmp_path / "ck", model, optimizer, step=7, state={"next_seed": 42})
    expected_draw = torch.rand(3)
    other = torch.nn.Linear(3, 2)
    other_opt = torch.optim.AdamW(other.parameters(), lr=0.1)
    torch.rand(5)
    step, state = load_checkpoint(tmp_path / "ck", other, other_opt)
    assert step == 7 and state == {"next_seed": 42}
    assert torch.equal(torch.rand(3), expected_draw)
    assert torch.equal(other.weight, model.weight)
    assert other_opt.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]
    save_checkpoint(tmp_path / "ck", model, optimizer, step=8)  # replacing an older one
    assert load_checkpoint(tmp_path / "ck", other, other_opt)[0] == 8


def test_a_token_budget_stops_the_run_once_spent(tiny_cache, tmp_path):
    policy = fresh_policy(tiny_cache)
    result = train(Reinforce, policy, "tictactoe", small_settings(iterations=10, token_budget=300), out_dir=tmp_path,
                             progress=False)
    spent = [row["action_tokens"] for row in result.history]
    assert len(spent) < 10
    assert sum(spent) >= 300 > sum(spent[:-1])  # stopped at the first iteration that reached it
    assert (tmp_path / "checkpoint").exists()


def test_a_fixed_training_split_is_cycled_through(tiny_cache, tmp_path, monkeypatch):
    import tutorial_lib.rl.rl_loop as rl_loop

    seen = []
    real_collect = rl_loop.collect

    def spy(policy, game, seeds, **kwargs):
        seen.append(list(seeds))
        return real_collect(policy, game, seeds, **kwargs)

    monkeypatch.setattr(rl_loop, "collect", spy)
    settings = small_settings(iterations=2, first_seed=7, train_seeds=5, env_options={"source": "generated"})
    train(Reinforce, fresh_policy(tiny_cache), "math", settings, out_dir=tmp_path, progress=False)
    assert seen[0][:7] == [7, 8, 9, 10, 11, 7, 8]  # one-turn episodes: the split repeats
    assert all(7 <= s < 12 for batch in seen for s in batch)


def test_an_update_out_of_memory_is_redone_with_smaller_micro_batches(tiny_cache, monkeypatch):
    """The device runs out of memory on the second pass of 4 turns, after a first pass of 6 has put
    its gradients in: the update drops them, halves the turns a pass for the rest of the run, and
    ends with the gradient of an update that never ran out."""
    import tutorial_lib.rl.reinforce as reinforce_module

    policy = fresh_policy(tiny_cache)
    turns = collect(policy, "tictactoe", range(4), num_envs=4).turns[:10]
    advantages = [(-1.0) ** i * (1 + i / 10) for i in range(10)]

    def gradients(settings):
        reinforce_step(policy, torch.optim.SGD(policy.model.parameters(), lr=0.0), batch_of(policy, turns, advantages),
                       settings)
        return {name: p.grad.clone() for name, p in policy.model.named_parameters() if p.grad is not None}

    expected = gradients(small_settings(microbatch_turns=10))
    scored = reinforce_module.action_logprobs

    def short_of_memory(model, inputs, **kwargs):
        if inputs["input_ids"].shape[0] == 4:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return scored(model, inputs, **kwargs)

    monkeypatch.setattr(reinforce_module, "action_logprobs", short_of_memory)
    reinforce = Reinforce(policy, small_settings(microbatch_turns=6))
    reinforce.optimizer = torch.optim.SGD(policy.model.parameters(), lr=0.0)
    with pytest.warns(UserWarning, match="out of memory at 6 turns a pass: 3 from now on"):
        reinforce.step(batch_of(policy, turns, advantages))
    got = {name: p.grad for name, p in policy.model.named_parameters() if p.grad is not None}
    assert got.keys() == expected.keys()
    for name, grad in expected.items():  # the same sum in another order: float32 rounding apart
        assert torch.allclose(got[name], grad, rtol=1e-4, atol=1e-6 * float(grad.abs().max())), name
    assert reinforce.micro_batches.size(batch_of(policy, turns, advantages)) == 3
    monkeypatch.setattr(reinforce_module, "action_logprobs",  # one turn a pass still out of memory: it stands
                        lambda *args, **kwargs: (_ for _ in ()).throw(torch.OutOfMemoryError("simulated")))
    with pytest.raises(torch.OutOfMemoryError), pytest.warns(UserWarning):
        reinforce.step(batch_of(policy, turns, advantages))


def test_a_cosine_schedule_decays_the_rate_and_a_stopped_run_resumes_on_it(tiny_cache, tmp_path):
    settings = small_settings(lr_schedule="warmup_cosine", warmup_iterations=1)
    straight = fresh_policy(tiny_cache)
    full = train(Reinforce, straight, "tictactoe", settings, out_dir=tmp_path / "a", progress=False)
    rates = [group["lr"] for group in full.algorithm.optimizer.param_groups]
    assert rates == [0.0]  # warm-up, then a cosine that ends at the last iteration
    constant = train(Reinforce, fresh_policy(tiny_cache), "tictactoe", small_settings(), out_dir=tmp_path / "c",
                               progress=False)
    assert constant.algorithm.optimizer.param_groups[0]["lr"] == settings.learning_rate

    first = fresh_policy(tiny_cache)  # the same run in two parts, the second in a fresh policy
    train(Reinforce, first, "tictactoe", settings, out_dir=tmp_path / "b", progress=False, stage=(1, 2))
    resumed_policy = fresh_policy(tiny_cache)
    train(Reinforce, resumed_policy, "tictactoe", settings, out_dir=tmp_path / "b", resume=True, progress=False,
                    stage=(2, 2))
    a, b = weights(straight.model), weights(resumed_policy.model)
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="lr_schedule"):
        ReinforceSettings(lr_schedule="linear")


def test_each_kl_penalty_is_taken_from_its_own_turns_reward(tiny_cache):
    policy = fresh_policy(tiny_cache)
    rollout = collect(policy, "tictactoe", range(6), num_envs=3)
    penalties = [0.1 * (i + 1) for i in range(len(rollout.turns))]
    gamma = 0.5
    expected, i = [], 0
    for record in rollout.records:
        g, returns = 0.0, []
        for t in reversed(range(record.length)):
            g = record.rewards[t] - penalties[i + t] + gamma * g
            returns.append(g)
        expected.extend(returns[::-1])
        i += record.length
    assert turn_advantages(rollout, gamma, "none", penalties) == pytest.approx(expected)
    assert rollout.records[0].rewards == [t.reward for t in rollout.turns if t.episode == 0]  # the record is untouched
    with pytest.raises(ValueError, match="penalties"):
        turn_advantages(rollout, gamma, "none", penalties[:-1])


def test_the_kl_reference_is_the_frozen_start_and_logged(tiny_cache):
    policy = fresh_policy(tiny_cache)
    assert Reinforce(policy, small_settings()).reference is None  # no penalty, no copy of the model
    reinforce = Reinforce(policy, small_settings(kl_coef=0.5))
    assert not any(p.requires_grad for p in reinforce.reference.parameters())
    first = reinforce.update(collect(policy, "tictactoe", range(8), env_options=TTT, num_envs=8))
    # the sampler is the start itself: generate's log-probs and the copy's recompute differ by float32
    # rounding, ~1e-6 a token (as the sampler-KL bound above)
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-4)
    second = reinforce.update(collect(policy, "tictactoe", range(8, 16), env_options=TTT, num_envs=8))
    assert abs(second["kl_ref"]) > 1e-3  # the policy has moved away from its frozen start
    with pytest.raises(ValueError, match="kl_coef"):
        ReinforceSettings(kl_coef=-0.1)


def test_a_kl_penalty_keeps_the_policy_nearer_its_start(tiny_cache, tmp_path):
    probe = collect(fresh_policy(tiny_cache), "tictactoe", range(500, 516), env_options=TTT, num_envs=8).turns

    def drift(kl_coef, seed):  # mean |log pi - log pi_start| of the probe's actions after training
        policy = fresh_policy(tiny_cache)
        start = torch.tensor(turn_logprobs(policy.model, probe, policy.tokenizer.pad_token_id))
        train(Reinforce, policy, "tictactoe", small_settings(iterations=6, kl_coef=kl_coef, turns_per_iteration=24, seed=seed),
                        out_dir=tmp_path / f"{kl_coef}-{seed}", progress=False)
        after = torch.tensor(turn_logprobs(policy.model, probe, policy.tokenizer.pad_token_id))
        return float((after - start).abs().mean())

    # over two runs each: seen 0.55-0.69 of the free drift for single runs, over kernels and seeds
    free, held = (sum(drift(kl_coef, seed) for seed in (0, 1)) for kl_coef in (0.0, 5.0))
    assert held < 0.8 * free, (held, free)


def test_training_the_top_layer_leaves_the_lower_layer_and_its_gradient_alone(tiny_cache):
    policy = load_policy("tiny", tiny_config=SMALL, lora=True)  # two layers, LoRA on every linear one
    reinforce = Reinforce(policy, small_settings(train_top_layers=1))
    named = dict(policy.model.named_parameters())
    lower = {n: p for n, p in named.items() if "lora_" in n and ".layers.0." in n}
    upper = {n: p for n, p in named.items() if "lora_" in n and ".layers.1." in n}
    assert lower and upper and not any(p.requires_grad for p in lower.values())
    trained = {id(p) for group in reinforce.optimizer.param_groups for p in group["params"]}
    assert trained == {id(p) for p in upper.values()}
    before = {n: p.detach().clone() for n, p in named.items()}
    reinforce.update(collect(policy, "tictactoe", range(8), env_options=TTT, num_envs=8))
    assert all(torch.equal(p, before[n]) for n, p in lower.items())  # the start's lower adapters, kept exactly
    assert all(p.grad is None for p in lower.values())  # no gradient was computed below the top layer
    assert any(not torch.equal(p, before[n]) for n, p in upper.items())


def test_training_the_top_layers_rejects_counts_the_model_does_not_have(tiny_cache):
    with pytest.raises(ValueError, match="train_top_layers"):
        ReinforceSettings(train_top_layers=0)
    policy = load_policy("tiny", tiny_config=SMALL)
    with pytest.raises(ValueError, match="2 layers; got 3"):
        Reinforce(policy, small_settings(train_top_layers=3))
    # a fully fine-tuned model: the embedding (tied to the output layer here) stops training too
    Reinforce(policy, small_settings(train_top_layers=2))
    assert not policy.model.get_input_embeddings().weight.requires_grad


def test_metric_sums_stay_on_the_device_until_read_once():
    from tutorial_lib.rl.update_step import MetricSums

    sums = MetricSums(("loss", "entropy", "unused"))
    for loss in (0.5, 0.25):
        sums.add(loss=torch.tensor(loss), entropy=torch.tensor([1.0, 2.0]).sum())
    assert all(isinstance(sums.sums[name], torch.Tensor) for name in ("loss", "entropy"))  # nothing read yet
    assert sums.read() == {"loss": 0.75, "entropy": 6.0, "unused": 0.0}
    assert MetricSums(("a",)).read() == {"a": 0.0}

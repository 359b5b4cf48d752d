"""The algorithm contract, the one loop, and the toolkit below REINFORCE and PPO (``rl_loop``, ``whole_batch``, ``update_step``, ``kl``)."""

import inspect

import pytest
import torch

from tutorial_lib.lm.models import load_policy
from tutorial_lib.rl.kl import masked_log_ratio
from tutorial_lib.rl.ppo import PPO, PPOSettings
from tutorial_lib.rl.reinforce import Reinforce, ReinforceSettings
from tutorial_lib.rl.rl_loop import Algorithm, Run, train
from tutorial_lib.rl.rollout import TurnBatch, action_logprobs, collect
from tutorial_lib.rl.update_step import synchronised_step, update_precision
from tutorial_lib.rl.whole_batch import global_token_count, shared_minibatches, whole_batch

from .conftest import SMALL

TTT = dict(opponent="random", agent_mark="alternate")


@pytest.fixture
def policy(tiny_cache):
    return load_policy("tiny", tiny_config=SMALL)


@pytest.fixture
def rollout(policy):
    torch.manual_seed(0)
    return collect(policy, "tictactoe", range(6), num_envs=6, env_options=TTT)


def algorithms(policy):
    return [Reinforce(policy, ReinforceSettings(microbatch_turns=4)),
            PPO(policy, PPOSettings(microbatch_turns=4, minibatch_turns=8))]


def test_both_algorithms_have_the_one_shape(policy):
    """What Run calls, each algorithm has, with the same signature."""
    for algorithm in algorithms(policy):
        for name in ("update", "modules", "state_dict", "load_state_dict"):
            assert list(inspect.signature(getattr(algorithm, name)).parameters) == \
                   list(inspect.signature(getattr(Algorithm, name)).parameters)[1:], (algorithm.name, name)
        assert isinstance(algorithm.optimizer, torch.optim.Optimizer)
        assert isinstance(algorithm.name, str)
        trainable = {id(p) for p in policy.model.parameters() if p.requires_grad}
        stepped = {id(p) for group in algorithm.optimizer.param_groups for p in group["params"]}
        assert trainable <= stepped  # the optimiser steps every trainable weight of the policy


def test_both_algorithms_prepare_then_step_and_make_no_process_call(policy, rollout):
    """One level down the two read alike: ``prepare`` gives a batch with advantages and what to log
    of it, ``step`` takes the optimiser's step; whole-batch statistics come from ``rl.whole_batch``."""
    import tutorial_lib.rl.ppo as ppo_module
    import tutorial_lib.rl.reinforce as reinforce_module

    for algorithm in algorithms(policy):
        batch, info = algorithm.prepare(rollout)
        assert isinstance(batch, TurnBatch) and batch.advantages is not None and isinstance(info, dict)
        assert callable(algorithm.step)
    for module in (reinforce_module, ppo_module):
        assert "distributed." not in inspect.getsource(module), module.__name__


def test_train_takes_the_algorithm_class_or_one_built(policy, tmp_path):
    settings = ReinforceSettings(iterations=1, turns_per_iteration=4, num_envs=4, microbatch_turns=4, env_options=TTT)
    built = Reinforce(policy, settings)
    result = train(built, policy, "tictactoe", out_dir=tmp_path / "built", progress=False)
    assert result.algorithm is built and len(result.history) == 1
    with pytest.raises(ValueError, match="its own policy"):
        train(built, load_policy("tiny", tiny_config=SMALL), "tictactoe", out_dir=tmp_path / "other", progress=False)
    fresh = train(Reinforce, load_policy("tiny", tiny_config=SMALL), "tictactoe", settings, out_dir=tmp_path / "class",
                  progress=False)
    assert isinstance(fresh.algorithm, Reinforce) and fresh.algorithm.settings is settings


def test_reinforce_update_is_prepare_then_one_step(policy, rollout):
    """``update`` adds nothing to its two halves: the same metrics and the same weights."""
    settings = ReinforceSettings(microbatch_turns=4, learning_rate=1e-2)
    start = {k: v.clone() for k, v in policy.model.state_dict().items()}
    torch.manual_seed(1)
    whole = Reinforce(policy, settings).update(rollout)
    after_update = {k: v.clone() for k, v in policy.model.state_dict().items()}
    policy.model.load_state_dict(start)
    torch.manual_seed(1)
    reinforce = Reinforce(policy, settings)
    halves = reinforce.step(reinforce.prepare(rollout)[0])
    assert whole == halves
    assert all(torch.equal(after_update[k], v) for k, v in policy.model.state_dict().items())
    assert any(not torch.equal(start[k], after_update[k]) for k in start)  # it did step


def test_a_bfloat16_update_computes_in_bfloat16_and_steps_float32_weights(policy, rollout):
    """``update_dtype="bfloat16"``: the update's passes autocast (the scores round as bfloat16
    does, 8 significant bits), while weights, gradients and the optimiser's state stay float32."""
    batch = TurnBatch.of(rollout.turns, policy.tokenizer.pad_token_id)
    inputs, mask = batch.model_inputs(), batch.action_mask
    with torch.no_grad():
        exact = action_logprobs(policy.model, inputs).logprobs
        with update_precision(ReinforceSettings(), policy.model):  # float32: nothing changes
            assert not torch.is_autocast_enabled("cpu")
            assert torch.equal(action_logprobs(policy.model, inputs).logprobs, exact)
        with update_precision(ReinforceSettings(update_dtype="bfloat16"), policy.model):
            rounded = action_logprobs(policy.model, inputs).logprobs
    # a log-prob is a difference of logits: each of a few bfloat16 roundings moves it by at most
    # 2**-8 of the largest logit's size; one part in 2**5 is far beyond rounding, far below a wrong model
    scale = 1 + exact[mask].abs().max()
    assert 0 < (rounded - exact)[mask].abs().max() < scale * 2**-5
    for algorithm in (Reinforce(policy, ReinforceSettings(microbatch_turns=4, update_dtype="bfloat16")),
                      PPO(policy, PPOSettings(microbatch_turns=4, minibatch_turns=8, update_dtype="bfloat16"))):
        start = {k: v.clone() for k, v in policy.model.state_dict().items()}
        prepare, seen = algorithm.prepare, []  # the update autocasts by itself, from its first step on
        algorithm.prepare = lambda *a, prepare=prepare, seen=seen: seen.append(torch.is_autocast_enabled("cpu")) or prepare(*a)
        metrics = algorithm.update(rollout)
        assert seen == [True] and not torch.is_autocast_enabled("cpu"), algorithm.name
        assert all(v == v for v in metrics.values() if isinstance(v, float)), algorithm.name  # no NaN
        assert all(p.dtype == torch.float32 for p in policy.model.parameters())
        assert all(s.dtype == torch.float32 for state in algorithm.optimizer.state.values()
                   for s in state.values() if torch.is_tensor(s) and s.is_floating_point())
        assert any(not torch.equal(start[k], v) for k, v in policy.model.state_dict().items()), algorithm.name
    with pytest.raises(ValueError, match="update_dtype"):
        ReinforceSettings(update_dtype="float16")


def test_in_one_process_the_plumbing_is_the_plain_computation(policy, rollout):
    assert whole_batch(rollout) is rollout
    batch = TurnBatch.of(rollout.turns, policy.tokenizer.pad_token_id)
    assert global_token_count(batch) == sum(len(t.action_ids) for t in rollout.turns)
    torch.manual_seed(3)
    parts = list(shared_minibatches(batch, 5))
    torch.manual_seed(3)
    order = torch.randperm(len(batch))  # the same draw: the order comes from the global generator
    assert [len(mine) for mine, _, _ in parts] == [len(rows) for rows in order.split(5)]
    for (mine, tokens, turns), rows in zip(parts, order.split(5)):
        assert [t.action_ids for t in mine.turns] == [rollout.turns[i].action_ids for i in rows.tolist()]
        assert tokens == mine.action_tokens and turns == len(rows)


def test_the_whole_batch_is_gathered_once_per_rollout(policy, rollout, monkeypatch):
    """Under ``accelerate launch`` the loop's metrics and REINFORCE's advantages both ask for every
    process's episodes; the second asks without a second exchange. Here a "launched" run of one
    process, whose gathers are counted."""
    from tutorial_lib.runtime import distributed

    gathers = []
    monkeypatch.setattr(distributed, "launched", lambda: True)
    monkeypatch.setattr(distributed, "gather", lambda items: gathers.append(items) or list(items))
    everyone = whole_batch(rollout)
    assert everyone is not rollout and everyone.records == rollout.records
    exchanged = len(gathers)
    assert whole_batch(rollout) is everyone and len(gathers) == exchanged


def test_masked_log_ratio_compares_only_action_tokens():
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    reference = torch.tensor([[-1.5, -2.0], [0.0, -1.0]])
    mask = torch.tensor([[False, True], [True, True]])
    assert masked_log_ratio(logprobs, reference, mask).tolist() == [[0.0, 0.0], [-0.5, -2.0]]


def test_a_step_after_a_non_finite_loss_changes_nothing():
    layer = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(torch.ones(1, 3)).sum().backward()
    before = [p.detach().clone() for p in layer.parameters()]
    with pytest.warns(RuntimeWarning, match="skipped"):
        _, skipped = synchronised_step(optimizer, 1.0, finite_loss=False)
    assert skipped == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))
    layer(torch.ones(1, 3)).sum().backward()
    norm, skipped = synchronised_step(optimizer, 1.0)
    assert skipped == 0.0 and norm > 0
    assert not all(torch.equal(a, b) for a, b in zip(before, layer.parameters()))


def test_run_names_the_algorithm_it_was_given(policy, tmp_path):
    settings = ReinforceSettings(iterations=1, turns_per_iteration=6, num_envs=3, env_options=TTT)
    run = Run(policy, "tictactoe", settings, out_dir=tmp_path, progress=False)
    reinforce = Reinforce(policy, settings)
    run.restore(reinforce)
    for _ in run.iterations():
        run.end_iteration(reinforce.update(run.collect()), reinforce)
    result = run.finish(reinforce)
    assert result.algorithm is reinforce
    assert '"algo": "REINFORCE"' in (tmp_path / "rl_settings.json").read_text()
    assert (tmp_path / "model").is_dir() and len(result.history) == 1


def test_resuming_with_other_iterations_under_a_schedule_that_spans_the_run_warns(policy, tmp_path):

    def run(out, iterations, resume=False, **schedule):
        settings = ReinforceSettings(iterations=iterations, turns_per_iteration=4, num_envs=4, env_options=TTT, **schedule)
        return train(Reinforce, policy, "tictactoe", settings, out_dir=tmp_path / out, resume=resume, progress=False)

    decay = dict(lr_schedule="warmup_stable_decay", decay_iterations=1)
    run("decayed", 1, **decay)
    with pytest.warns(UserWarning, match="a 1-iteration run; the result is not the 2-iteration run"):
        run("decayed", 2, resume=True, **decay)
    run("constant", 1)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a constant rate continues exactly: nothing to warn about
        run("constant", 2, resume=True)
        run("decayed", 2, resume=True, **decay)  # the same length again: an interrupted run resumed

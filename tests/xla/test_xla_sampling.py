"""Sampling on torch_xla's device: the ``static`` engine's :func:`static_decode` (fixed shapes, no
read per token), through the policy's own ``sample`` and ``collect``. Each recorded log-probability
must be the one the CPU computes for the same token after the same prompt; the bound is
``tests/test_rollout.py``'s (1e-4: float32 through a small network, summed in another order)."""

import copy

import pytest
import torch

torch_xla = pytest.importorskip("torch_xla")
import torch_xla.debug.metrics as met  # noqa: E402

from tutorial_lib.lm.policies import LanguagePolicy  # noqa: E402
from tutorial_lib.rl.rollout import action_logprobs, collate_turns, collect  # noqa: E402
from tutorial_lib.runtime.device import get_device  # noqa: E402

PROMPTS = ["Turn 1 of 4. Make your first guess.", "Board:", "Now:", "Your guess 5 is too low: the number is higher."]


def on_xla(model, tokenizer, **options) -> LanguagePolicy:
    return LanguagePolicy(copy.deepcopy(model).to(get_device("xla")), tokenizer, **options)


def cpu_recompute(model, samples, pad_token_id):
    with torch.no_grad():
        batch = collate_turns(samples, pad_token_id)
        return action_logprobs(model, batch).logprobs, batch


def test_sampling_on_xla_records_what_the_cpu_recomputes_and_compiles_once(tiny_policy, sharp_model):
    policy = on_xla(sharp_model, tiny_policy.tokenizer, sampling="rl", seed=0)
    assert policy.engine == "static"
    samples = policy.sample(PROMPTS, max_new_tokens=12)
    compiled = met.counter_value("UncachedCompile")
    again = policy.sample(PROMPTS[::-1], max_new_tokens=12)  # the same bucket of rows and columns
    assert met.counter_value("UncachedCompile") == compiled, "a second rollout turn compiled new graphs"
    lengths = {len(s.action_ids) for s in samples + again}
    assert len(lengths) > 1 and max(lengths) <= 12  # rows end at their own end of sequence
    assert all(s.action_ids[-1] == tiny_policy.tokenizer.eos_token_id for s in samples if len(s.action_ids) < 12)
    recomputed, batch = cpu_recompute(sharp_model, samples + again, tiny_policy.tokenizer.pad_token_id)
    torch.testing.assert_close(recomputed, batch["sampler_logprobs"], atol=1e-4, rtol=0)


def test_a_rollout_collected_on_xla_scores_as_on_the_cpu(tiny_policy, sharp_model):
    policy = on_xla(sharp_model, tiny_policy.tokenizer, sampling="rl", seed=0)
    rollout = collect(policy, "tictactoe", range(2), env_options=dict(opponent="random"), num_envs=2)
    assert rollout.turns and all(turn.action_ids for turn in rollout.turns)
    recomputed, batch = cpu_recompute(sharp_model, rollout.turns, tiny_policy.tokenizer.pad_token_id)
    torch.testing.assert_close(recomputed, batch["sampler_logprobs"], atol=1e-4, rtol=0)

"""Training sized to the model and the device: micro-batch, accumulation, checkpointing."""

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tutorial_lib.data.sft import SFTSettings, sized_to_device
from tutorial_lib.lm.models import lora_config
from tutorial_lib.rl.rollout import TurnBatch, TurnSample
from tutorial_lib.rl.settings import RLSettings
from tutorial_lib.rl.update_step import MicroBatches
from tutorial_lib.runtime.memory_plan import example_bytes, microbatch_size, plan_training, state_bytes

GiB = 2**30


def room_for(model, examples: float, one: int) -> int:
    """Free bytes (beside the weights, already loaded) that hold the training state and ``examples``
    examples of ``one`` byte each, under the plan's 70% headroom."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return int((state_bytes(model) - weights + examples * one) / 0.7) + 1


def shaped_like(hidden, layers, intermediate, heads, kv_heads, vocab, dtype=torch.bfloat16, lora=True):
    """A model of this shape with no memory behind it (the meta device), LoRA on all linear layers."""
    config = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=intermediate,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab)
    with torch.device("meta"):
        model = LlamaForCausalLM(config).to(dtype)
    if lora:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(True))
    return model


@pytest.fixture(scope="module")
def smollm2_shape():
    return shaped_like(576, 30, 1536, 9, 3, 49152)


def test_a_small_model_on_a_large_card_trains_whole_steps_without_checkpointing(smollm2_shape):
    """The issue's case: SmolLM2-135M with LoRA, 160-token examples, 80 GB free."""
    plan = plan_training(smollm2_shape, examples_per_step=64, tokens_per_example=160, free_bytes=80 * GiB)
    assert (plan.micro_batch, plan.accumulation, plan.checkpointing) == (64, 1, False)
    assert plan.estimated_bytes < plan.budget_bytes
    assert "micro-batch 64 x 1" in plan.describe()


def test_a_large_model_on_a_small_card_accumulates_and_checkpoints():
    """A 7 B model's shape (Qwen2.5-7B, 15 GB in bfloat16) frozen on a 16 GB card: about 1 GB is
    left, and only checkpointing lets one 1,024-token example through."""
    model = shaped_like(3584, 28, 18944, 28, 4, 152064, lora=False)
    model.requires_grad_(False)  # what trains is a few LoRA matrices; their state is negligible here
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    plan = plan_training(model, examples_per_step=64, tokens_per_example=1024, scored_tokens=256,
                         free_bytes=16 * GiB - weights)
    assert (plan.micro_batch, plan.accumulation, plan.checkpointing) == (1, 64, True)
    assert example_bytes(model, 1024, checkpointing=False, scored_tokens=256) > 16 * GiB - weights


def test_the_micro_batch_grows_with_memory_and_divides_the_step(smollm2_shape):
    one = example_bytes(smollm2_shape, 300, checkpointing=False)
    micro = [plan_training(smollm2_shape, examples_per_step=48, tokens_per_example=300,
                           free_bytes=room_for(smollm2_shape, k, one)).micro_batch for k in (1, 5, 13, 48)]
    assert micro == [1, 4, 12, 48]  # the largest divisor of 48 that fits
    rl = plan_training(smollm2_shape, examples_per_step=97, tokens_per_example=300, divides=False,
                       free_bytes=room_for(smollm2_shape, 13, one))
    assert (rl.micro_batch, rl.accumulation) == (13, 8)  # RL turns split with a remainder


def test_checkpointing_only_when_one_example_does_not_fit_without(smollm2_shape):
    without = example_bytes(smollm2_shape, 2000, checkpointing=False)
    with_ = example_bytes(smollm2_shape, 2000, checkpointing=True)
    assert with_ < without
    plan = plan_training(smollm2_shape, examples_per_step=8, tokens_per_example=2000,
                         free_bytes=room_for(smollm2_shape, 1, (with_ + without) // 2))
    assert plan.checkpointing and plan.micro_batch == 1
    with pytest.raises(MemoryError, match="checkpointing"):
        plan_training(smollm2_shape, examples_per_step=8, tokens_per_example=2000, free_bytes=room_for(smollm2_shape, 0, 0))
    with pytest.raises(ValueError, match=">= 1"):
        plan_training(smollm2_shape, examples_per_step=0, tokens_per_example=10, free_bytes=GiB)


def test_sft_sized_to_device_keeps_the_examples_of_a_step(tiny_policy, monkeypatch):
    settings = SFTSettings.for_pretrained(size_to_device=True)  # 8 x 8 with checkpointing, as written
    dataset = {"input_ids": [[1] * 40, [1] * 90], "labels": [[-100] * 30 + [1] * 10, [-100] * 80 + [1] * 10]}
    on_cpu = copy.deepcopy(tiny_policy.model).cpu()  # the tests' model is on the card where there is one
    assert sized_to_device(settings, on_cpu, dataset) == settings  # a CPU keeps them
    monkeypatch.setattr("tutorial_lib.runtime.memory_plan.sizes_by_memory", lambda model: True)  # an accelerator
    monkeypatch.setattr("tutorial_lib.runtime.memory_plan.free_memory_bytes", lambda device=None: 64 * GiB)
    sized = sized_to_device(settings, tiny_policy.model, dataset)
    assert sized.batch_size * sized.gradient_accumulation_steps == 64
    assert (sized.batch_size, sized.gradient_checkpointing) == (64, False)
    with pytest.raises(ValueError, match="micro_batches"):
        SFTSettings(size_to_device=True, batch_size=8, micro_batches=2)


def test_rl_updates_sized_to_device(tiny_policy, monkeypatch):
    turns = [TurnSample(0, t, [1] * (20 + t), [2] * 5, [0.0] * 5, 0.0, False, False, False) for t in range(50)]
    batch = TurnBatch.of(turns, 0)
    assert microbatch_size(RLSettings(microbatch_turns=16), tiny_policy.model, batch) == 16
    model = copy.deepcopy(tiny_policy.model).cpu()
    assert microbatch_size(RLSettings(microbatch_turns=16, size_to_device=True), model, batch) == 16  # a CPU
    monkeypatch.setattr("tutorial_lib.runtime.memory_plan.sizes_by_memory", lambda model: True)  # an accelerator
    monkeypatch.setattr("tutorial_lib.runtime.memory_plan.free_memory_bytes", lambda device=None: 64 * GiB)
    assert microbatch_size(RLSettings(microbatch_turns=16, size_to_device=True), model, batch) == 50
    one = example_bytes(model, 74, checkpointing=False, scored_tokens=6)
    monkeypatch.setattr("tutorial_lib.runtime.memory_plan.free_memory_bytes",
                        lambda device=None: room_for(model, 7.5, one))
    assert microbatch_size(RLSettings(size_to_device=True), model, batch) == 7


def checkpointing(model) -> bool:
    """Whether activation checkpointing is on (transformers 5's name, or 4's)."""
    if hasattr(model, "is_activation_checkpointing"):
        return model.is_activation_checkpointing
    return model.is_gradient_checkpointing


def test_rl_sizing_changes_nothing_and_checkpointing_is_switched_on_apart(tiny_policy, monkeypatch):
    turns = [TurnSample(0, t, [1] * (20 + t), [2] * 5, [0.0] * 5, 0.0, False, False, False) for t in range(50)]
    batch, settings = TurnBatch.of(turns, 0), RLSettings(size_to_device=True)
    model = copy.deepcopy(tiny_policy.model)
    monkeypatch.setattr("tutorial_lib.runtime.memory_plan.sizes_by_memory", lambda model: True)
    without = example_bytes(model, 74, checkpointing=False, scored_tokens=6)
    with_it = example_bytes(model, 74, checkpointing=True, scored_tokens=6)
    assert with_it < without
    # room for one turn with checkpointing and not for one without it
    monkeypatch.setattr("tutorial_lib.runtime.memory_plan.free_memory_bytes",
                        lambda device=None: room_for(model, (with_it + without) / 2 / without, without))
    assert microbatch_size(settings, model, batch) == 1
    assert not checkpointing(model)  # sizing is a question: the model is as it was
    MicroBatches(settings, model).checkpoint_if_needed(batch)
    assert checkpointing(model)
    MicroBatches(settings, model).checkpoint_if_needed(batch)  # once on, asking again changes nothing
    assert checkpointing(model)
    fresh = copy.deepcopy(tiny_policy.model)  # with room for every turn, nothing is switched on
    monkeypatch.setattr("tutorial_lib.runtime.memory_plan.free_memory_bytes", lambda device=None: 64 * GiB)
    MicroBatches(settings, fresh).checkpoint_if_needed(batch)
    assert not checkpointing(fresh)


def test_the_estimate_covers_what_autograd_keeps():
    """The plan's bytes for one turn are at least what a real update's forward keeps for backward
    (a SmolLM2-shaped block, narrower, with LoRA, in bfloat16, padded rows), and not far above: an
    estimate below it ran an H200 out of memory (benchmarks/results/gpu_pretrained_rl.md)."""
    from peft import get_peft_model

    from tutorial_lib.rl.rollout import action_logprobs
    from tutorial_lib.runtime.memory_plan import saved_activation_bytes

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=192, num_hidden_layers=2, intermediate_size=512, num_attention_heads=3,
                         num_key_value_heads=1, vocab_size=4096)
    model = get_peft_model(LlamaForCausalLM(config).to(torch.bfloat16), lora_config(True))
    model.train()
    rows, length, actions = 4, 256, 16
    attention = torch.ones(rows, length, dtype=torch.long)
    attention[: rows // 2, : length // 4] = 0  # left padding in half the rows
    inputs = {"input_ids": torch.randint(0, 4096, (rows, length)), "attention_mask": attention,
              "action_mask": torch.ones(rows, actions, dtype=torch.bool)}
    kept = saved_activation_bytes(model, lambda: action_logprobs(model, inputs, with_entropy=True))
    estimate = rows * example_bytes(model, length, checkpointing=False, scored_tokens=actions)
    assert kept <= estimate <= 2 * kept, (kept, estimate)

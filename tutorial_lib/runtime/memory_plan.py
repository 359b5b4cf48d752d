"""How many examples a forward/backward pass can hold here: training sized to the model and the device
(chapter 9).

    plan = plan_training(policy.model, examples_per_step=64, tokens_per_example=300)
    plan.micro_batch, plan.accumulation, plan.checkpointing   # e.g. 64, 1, False on an 80 GB GPU
    print(plan.describe())

A fixed micro-batch is wrong somewhere: 8 examples with activation checkpointing suits a 7 B
model on a 16 GB card, and leaves an 80 GB card running a 135 M model at a few percent of its
arithmetic, recomputing activations it had room to keep (``benchmarks/sft_sizing.py`` measures
the difference). The optimiser step is a number of examples the *recipe* fixes; how many of them
go through the model at once is memory, not maths. So this module estimates what one example
costs in memory and takes the largest micro-batch that fits, with checkpointing only when not even
one example fits without it.

The estimate, per token and layer, of what backpropagation keeps (16-bit activations take 2
bytes an element, 32-bit 4): ``16 x hidden + 8 x intermediate`` elements. Counted by hand, the
inputs of the attention and MLP projections, the attention output, the normalisations and
residuals come to about ``8 x hidden`` and the MLP's gate, up, activation and product to
``4 x intermediate``; what autograd really keeps is about twice that (RMSNorm's float32 copies,
rotary embeddings' copies of q and k, LoRA's inputs and the padding mask's effects), measured with
:func:`saved_activation_bytes` on SmolLM2's blocks with LoRA: 39.5 KiB a token and layer where the
hand count said 21 (``benchmarks/results/gpu_pretrained_rl.md``). Attention itself keeps O(length)
per token with PyTorch's fused kernels. Korthikanti et al. (2022, arXiv:2205.05198) count
``34 x hidden`` bytes per token and layer for a GPT block in 16-bit, the same order. The output
layer keeps the float32 logits, their log-softmax and, under an entropy bonus, what the entropy
reads: ``16 x vocabulary`` bytes for each token scored (13 measured with the bonus, 4 without it,
when the entropy is only measured; a 49k vocabulary: 0.75 MB a token, more than all of SmolLM2's
layers together). Checkpointing keeps one layer's input per layer instead, and one
layer's activations at a time. The weights, their gradients and Adam's two moments come first. It
is an estimate: ``headroom`` leaves the rest for the allocator's fragmentation and what it does
not count, and an update that runs out of memory all the same halves its micro-batch
(:class:`tutorial_lib.rl.update_step.MicroBatches`).

Holds the estimate (:func:`example_bytes`, :func:`plan_training`) and the sizing of SFT steps and
RL updates by it (:func:`plan_update`, :func:`microbatch_size`). Imports torch only (an RL update's
settings and turns are read by their fields, not imported).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TrainingPlan:
    """A micro-batch and accumulation that make ``examples_per_step``, and whether to checkpoint."""

    micro_batch: int
    accumulation: int
    checkpointing: bool
    #: estimated peak bytes of a step with this plan, and the bytes it was allowed
    estimated_bytes: int
    budget_bytes: int

    def describe(self) -> str:
        return (f"micro-batch {self.micro_batch} x {self.accumulation} accumulated, checkpointing "
                f"{'on' if self.checkpointing else 'off'}: ~{self.estimated_bytes / 2**30:.1f} GiB of the "
                f"{self.budget_bytes / 2**30:.1f} GiB allowed")


def sizes_by_memory(model) -> bool:
    """Whether ``model``'s device is one where training passes are sized by memory: an accelerator.

    On a CPU a pass costs in proportion to its examples (there are no kernel launches to amortise),
    so a larger micro-batch buys no speed there: it pads more examples to its longest one and holds
    more activations in memory the machine shares. So on a CPU the settings as written stand."""
    return next(model.parameters()).device.type != "cpu"


def free_memory_bytes(device: torch.device | str | None = None) -> int:
    """Memory free for training on ``device``: the CUDA allocator's view of the card, a TPU's own
    report (torch_xla's ``get_memory_info``: its limit less what is in use), or the operating
    system's available memory on a CPU (and on XLA's CPU device, which keeps no such count)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type == "xla":
        import torch_xla.core.xla_model as xm

        try:
            info = xm.get_memory_info(device)
            return int(info["bytes_limit"] - info["bytes_used"])
        except RuntimeError:  # "GetAllocatorStats is not supported": XLA on a CPU, whose memory is the host's
            pass
    import psutil

    return int(psutil.virtual_memory().available)


def state_bytes(model) -> int:
    """Weights, plus a gradient and Adam's two moments for each trainable weight."""
    total = 0
    for parameter in model.parameters():
        total += parameter.numel() * parameter.element_size()
        if parameter.requires_grad:
            total += 3 * parameter.numel() * max(parameter.element_size(), 4)  # grad + 2 moments, float32 for LoRA
    return total


def example_bytes(model, tokens: int, *, checkpointing: bool, scored_tokens: int | None = None) -> int:
    """Activation memory of one example of ``tokens`` tokens (``scored_tokens`` of them through the
    output layer: all by default) in a training step (see the module docstring)."""
    # under PEFT's wrapper, the transformers model's config (this layer imports nothing of ``lm``)
    config = (model.get_base_model() if hasattr(model, "get_base_model") else model).config
    hidden, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    intermediate = getattr(config, "intermediate_size", 4 * hidden)
    width = next(model.parameters()).element_size()
    per_layer = tokens * (16 * hidden + 8 * intermediate) * width
    body = (tokens * hidden * width * layers + per_layer) if checkpointing else per_layer * layers
    logits = (scored_tokens if scored_tokens is not None else tokens) * vocab * 16
    return body + logits


def saved_activation_bytes(model, forward) -> int:
    """Bytes of the tensors autograd keeps for the backward pass while ``forward()`` runs: each
    storage counted once, ``model``'s parameters left out (they are the training state, counted
    apart). What :func:`example_bytes` estimates, measured on any device, a CPU included."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def keep(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        forward()
    return sum(saved.values())


def plan_training(
    model,
    *,
    examples_per_step: int,
    tokens_per_example: int,
    scored_tokens: int | None = None,
    free_bytes: int | None = None,
    headroom: float = 0.7,
    divides: bool = True,
) -> TrainingPlan:
    """The largest micro-batch that fits, without checkpointing if one example fits without it
    (see the module docstring). With ``divides`` the micro-batch divides ``examples_per_step`` (an
    SFT step of equal micro-batches); without, it is at most that (RL's turns, split with a
    remainder). ``free_bytes`` defaults to what the model's device has free now;
    :class:`MemoryError` if not even one example fits."""
    if examples_per_step < 1 or tokens_per_example < 1:
        raise ValueError(f"examples_per_step and tokens_per_example must be >= 1; got {examples_per_step}, "
                         f"{tokens_per_example}")
    if free_bytes is None:
        free_bytes = free_memory_bytes(next(model.parameters()).device)
    # the weights are already on the device, so free memory excludes them; the rest of the state is to come
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    budget = int(headroom * free_bytes) - (state_bytes(model) - weights)
    for checkpointing in (False, True):
        one = example_bytes(model, tokens_per_example, checkpointing=checkpointing, scored_tokens=scored_tokens)
        micro = min(examples_per_step, max(budget, 0) // one)
        while divides and micro > 0 and examples_per_step % micro:
            micro -= 1
        if micro > 0:
            return TrainingPlan(micro, -(-examples_per_step // micro), checkpointing,
                                state_bytes(model) + micro * one, int(headroom * free_bytes) + weights)
    raise MemoryError(
        f"one example of {tokens_per_example} tokens needs ~{example_bytes(model, tokens_per_example, checkpointing=True, scored_tokens=scored_tokens) / 2**30:.2f} "
        f"GiB with checkpointing, and {max(budget, 0) / 2**30:.2f} GiB are left for it: use shorter examples, "
        "LoRA or 4-bit weights (load_in_4bit), or a larger device")


def plan_update(model, turns, *, size_to_device: bool) -> TrainingPlan | None:
    """The memory plan of one RL update of ``turns`` (each with ``prompt_ids`` and ``action_ids``:
    a :class:`~tutorial_lib.rl.rollout.TurnBatch`'s) when ``size_to_device`` is asked for and the
    model is on an accelerator; ``None`` otherwise (a CPU keeps the written micro-batch)."""
    if not size_to_device or not sizes_by_memory(model):
        return None
    longest = max(len(t.prompt_ids) + len(t.action_ids) for t in turns)
    scored = max(len(t.action_ids) for t in turns) + 1
    return plan_training(model, examples_per_step=len(turns), tokens_per_example=longest, scored_tokens=scored,
                         divides=False)


def microbatch_size(settings, model, batch) -> int:
    """Turns per forward/backward pass of an RL update of ``batch`` (a ``TurnBatch``):
    ``settings.microbatch_turns``, or with ``settings.size_to_device`` on an accelerator as many as
    its free memory holds (:func:`plan_update`). Changes nothing: switching activation checkpointing
    on is :meth:`tutorial_lib.rl.update_step.MicroBatches.checkpoint_if_needed`'s."""
    plan = plan_update(model, batch.turns, size_to_device=settings.size_to_device)
    return settings.microbatch_turns if plan is None else plan.micro_batch


def release_device_memory(model) -> None:
    """Hand the allocator's cached blocks back after a pass that ran out of memory (on CUDA; a CPU
    has no cache)."""
    import gc

    gc.collect()
    if next(model.parameters()).device.type == "cuda":
        torch.cuda.empty_cache()

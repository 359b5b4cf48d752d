"""A causal language model as a transformer *body* and an *output layer* (chapters 4-8).

    hidden = body_hidden_states(model, batch)            # (batch, length, hidden)
    logits = output_logits(model, hidden[:, -5:-1])      # (batch, 4, vocab), float32

SFT, rollout scoring, PPO's value head and chapter 8 all need the body's last hidden states and
the output layer applied to *a few* of them: an SFT example's completion, an action's tokens, the
state a value head reads. A model's own ``forward`` applies the output layer to every position,
a (batch, length, vocabulary) tensor that is most of a small model's work and, for a large
vocabulary, does not fit in memory. These are the one place that splits a model that way, that
looks through PEFT's LoRA wrapper (the adapters stay active: they live inside the body's layers),
and that applies what a model's forward applies after its output layer (Gemma 2's final-logit
soft-capping), so that every caller scores exactly what ``forward`` and ``generate`` would.
"""

from __future__ import annotations

import re

import torch

BODY_INPUTS = ("input_ids", "attention_mask", "position_ids")


def unwrap_peft(model):
    """The transformers model under PEFT's wrapper (``model`` itself when it has none)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def checkpoint_activations(model) -> None:
    """Switch activation checkpointing on in ``model`` (a PEFT wrapper's base model), if it is not
    already: the backward pass then recomputes each layer's activations instead of keeping them."""
    base = unwrap_peft(model)
    if hasattr(base, "is_activation_checkpointing"):  # transformers 5's name for it
        if not base.is_activation_checkpointing:
            base.activation_checkpointing_enable()
    elif not base.is_gradient_checkpointing:
        base.gradient_checkpointing_enable()


def train_top_layers(model, count: int | None) -> int:
    """Leave trainable only what ``model`` trains in its top ``count`` decoder layers and above them
    (the final norm, an untied output layer, whatever a caller added on top); every trainable
    parameter of a lower layer, and the input embedding, stops requiring a gradient (an output
    layer tied to the embedding with it: a gradient into the embedding would run the backward
    pass through every layer). No activation
    below the lowest trained layer then needs one, so the backward pass ends there: with LoRA on
    the top 8 of SmolLM2's 30 layers it runs through 8 layers, not 30
    (``benchmarks/results/pretrained_rl_cost.md``). What the lower layers learnt before (an SFT
    start's adapters) stays, unchanged. ``None`` changes nothing. Returns how many parameters it froze.
    """
    if count is None:
        return 0
    layers = unwrap_peft(model).config.num_hidden_layers
    if not 1 <= count <= layers:
        raise ValueError(f"train_top_layers must be between 1 and the model's {layers} layers; got {count}")
    embedding = unwrap_peft(model).get_input_embeddings().weight
    frozen = 0
    for name, parameter in model.named_parameters():
        found = re.search(r"\.layers\.(\d+)\.", name)
        below = found is not None and int(found.group(1)) < layers - count
        if parameter.requires_grad and (below or parameter is embedding):
            parameter.requires_grad_(False)
            frozen += 1
    return frozen


def hidden_size(model) -> int:
    """Width of the body's hidden states (what a value head reads)."""
    return unwrap_peft(model).config.hidden_size


def body_hidden_states(model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """(batch, length, hidden) last-layer states of ``model``'s body; ``inputs`` may hold more keys
    than the body takes (labels, an action mask...): only :data:`BODY_INPUTS` are passed."""
    device = next(model.parameters()).device
    body = unwrap_peft(model).base_model
    passed = {k: inputs[k].to(device) for k in BODY_INPUTS if k in inputs}
    mask = passed.get("attention_mask")
    if mask is not None and mask.dim() == 4:  # a layout of its own (packed games): who sees whom
        passed["attention_mask"] = attention_layout(body, mask)
    return body(**passed, use_cache=False).last_hidden_state


def attention_layout(body, allowed: torch.Tensor) -> torch.Tensor:
    """A (batch, 1, length, length) bool mask (True: attends) as ``body``'s attention takes it:
    as it is for SDPA, as an additive bias (0 or the dtype's lowest) for the eager implementation.
    transformers passes a 4D mask through untouched, so the two conventions are the caller's."""
    implementation = getattr(body.config, "_attn_implementation", "eager")
    if implementation == "sdpa":
        return allowed
    if implementation == "eager":
        return torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(torch.float32).min)
    raise ValueError(f"a 4D attention mask (packed games) needs the sdpa or eager attention, not {implementation!r}")


def output_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """The output layer on ``hidden`` (any leading shape), in float32, soft-capped where the model
    is (Gemma 2: ``cap * tanh(logits / cap)``, which its own forward applies)."""
    base = unwrap_peft(model)
    logits = base.get_output_embeddings()(hidden).float()
    softcap = getattr(base.config, "final_logit_softcapping", None)
    return softcap * torch.tanh(logits / softcap) if softcap else logits

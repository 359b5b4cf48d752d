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


def hidden_size(model) -> int:
    """Width of the body's hidden states (what a value head reads)."""
    return unwrap_peft(model).config.hidden_size


def body_hidden_states(model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """(batch, length, hidden) last-layer states of ``model``'s body; ``inputs`` may hold more keys
    than the body takes (labels, an action mask...): only :data:`BODY_INPUTS` are passed."""
    device = next(model.parameters()).device
    body = unwrap_peft(model).base_model
    return body(**{k: inputs[k].to(device) for k in BODY_INPUTS if k in inputs}, use_cache=False).last_hidden_state


def output_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """The output layer on ``hidden`` (any leading shape), in float32, soft-capped where the model
    is (Gemma 2: ``cap * tanh(logits / cap)``, which its own forward applies)."""
    base = unwrap_peft(model)
    logits = base.get_output_embeddings()(hidden).float()
    softcap = getattr(base.config, "final_logit_softcapping", None)
    return softcap * torch.tanh(logits / softcap) if softcap else logits

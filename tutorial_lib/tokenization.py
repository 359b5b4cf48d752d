"""From text to training tensors (chapter 2, *Prompts, tokens and actions*).

Two jobs:

* **Training examples.** A prompt and its completion become ``input_ids``, ``attention_mask`` and
  ``labels``, with the prompt's labels set to ``-100`` so the loss covers only the completion (the
  action): the model is taught what to *write*, not to predict the game's text.
* **Generation batches.** Prompts of different lengths are *left*-padded, so that every row's last
  real token sits at the same position and ``generate`` appends new tokens right after it.

The token-boundary pitfall. Tokenising ``prompt + completion`` as one string is not the same as
tokenising each part and concatenating the ids: BPE may merge characters across the boundary
(``"Move: " + "x(1,1)"`` together gives the token ``" x"``; apart, ``" "`` then ``"x"``). At
generation time the model only ever continues the *prompt's own* tokens, so this library tokenises
the prompt alone and appends the completion's tokens. Training then sees exactly the token sequence
that sampling produces, which RL needs (its log-probabilities are of the sampled tokens) and SFT
should match. ``tests/test_tokenization.py`` shows a case where the two differ.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

IGNORE_INDEX = -100  # the label PyTorch's cross-entropy skips


def encode_prompt_completion(
    tokenizer, prompt: str, completion: str, *, add_eos: bool = True, max_length: int | None = None
) -> dict[str, list[int]]:
    """Token ids for one training example, with the prompt masked out of the labels.

    ``prompt`` is the fully rendered text the model reads (chat template included, see
    :func:`tutorial_lib.prompts.render_chat`). The end-of-sequence token is appended to the
    completion so the model learns to *stop* after its action. If ``max_length`` is given, the
    prompt is cut from the left (its oldest part) -- never the completion.
    """
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    if add_eos and (not completion_ids or completion_ids[-1] != tokenizer.eos_token_id):
        completion_ids = completion_ids + [tokenizer.eos_token_id]
    if max_length is not None:
        if len(completion_ids) >= max_length:
            raise ValueError(
                f"the completion alone has {len(completion_ids)} tokens, max_length is {max_length}"
            )
        prompt_ids = prompt_ids[-(max_length - len(completion_ids)) :]
    input_ids = prompt_ids + completion_ids
    return {
        "input_ids": input_ids,
        "attention_mask": [1] * len(input_ids),
        "labels": [IGNORE_INDEX] * len(prompt_ids) + completion_ids,
    }


def boundary_mismatch(tokenizer, prompt: str, completion: str) -> dict[str, list[str]] | None:
    """Compare joint and separate tokenisation; ``None`` when they agree, else both token lists."""
    joint = tokenizer(prompt + completion, add_special_tokens=False)["input_ids"]
    separate = (
        tokenizer(prompt, add_special_tokens=False)["input_ids"]
        + tokenizer(completion, add_special_tokens=False)["input_ids"]
    )
    if joint == separate:
        return None
    return {
        "together": tokenizer.convert_ids_to_tokens(joint),
        "separately": tokenizer.convert_ids_to_tokens(separate),
    }


def collate_examples(examples: Sequence[dict[str, list[int]]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad encoded examples into a training batch (labels padded with ``-100``)."""
    if not examples:
        raise ValueError("cannot collate an empty list of examples")
    width = max(len(e["input_ids"]) for e in examples)

    def pad(values: list[int], fill: int) -> list[int]:
        return values + [fill] * (width - len(values))

    return {
        "input_ids": torch.tensor([pad(e["input_ids"], pad_token_id) for e in examples]),
        "attention_mask": torch.tensor([pad(e["attention_mask"], 0) for e in examples]),
        "labels": torch.tensor([pad(e["labels"], IGNORE_INDEX) for e in examples]),
    }


def left_padded_batch(tokenizer, prompts: Sequence[str], device: torch.device | str = "cpu"):
    """Tokenise prompts for ``generate``: left padding, attention mask, on ``device``."""
    if not prompts:
        raise ValueError("no prompts to batch")
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token first")
    previous = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        batch = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = previous
    return batch.to(device)

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
from transformers import BatchEncoding

IGNORE_INDEX = -100  # the label PyTorch's cross-entropy skips


def encode_prompt_completion(
    tokenizer, prompt: str, completion: str, *, add_eos: bool = True, max_length: int | None = None
) -> dict[str, list[int]]:
    """Token ids for one training example, with the prompt masked out of the labels.

    ``prompt`` is the fully rendered text the model reads (chat template included, see
    :func:`tutorial_lib.lm.prompts.render_chat`). The end-of-sequence token is appended to the
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


def left_padded_batch(tokenizer, prompts: Sequence[str], device: torch.device | str = "cpu", *, shared_prefix: int = 0):
    """Tokenise prompts for ``generate``: left padding, attention mask, on ``device``.

    ``shared_prefix``: see :func:`pad_prompt_ids`.
    """
    if not prompts:
        raise ValueError("no prompts to batch")
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token first")
    rows = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    return pad_prompt_ids(rows, tokenizer.pad_token_id, shared_prefix=shared_prefix).to(device)


def pad_prompt_ids(rows: Sequence[Sequence[int]], pad_token_id: int, *, shared_prefix: int = 0) -> BatchEncoding:
    """Left-pad token id rows into ``input_ids`` and ``attention_mask`` tensors.

    Built here rather than by the tokenizer's own padding, which converts nested Python lists to
    tensors element by element: for 32 prompts of ~100 tokens that was a tenth of a rollout's time.

    ``shared_prefix`` > 0 keeps each row's first ``shared_prefix`` ids in the first columns and puts
    the padding *after* them: ``start, pads, rest``. Every row still ends in the last column, and
    rows whose starts are equal hold them in the same columns, so the keys and values of each
    distinct start can be computed once and copied to its rows
    (:meth:`tutorial_lib.lm.policies.LanguagePolicy.sample`). ``generate`` numbers positions by
    counting the mask, so each real token keeps the position it has without padding.
    """
    if not rows:
        raise ValueError("no rows to pad")
    if shared_prefix and min(len(row) for row in rows) <= shared_prefix:
        raise ValueError(f"every row needs a token after its first {shared_prefix}")
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        start = width - (len(row) - shared_prefix)
        input_ids[i, start:] = torch.as_tensor(list(row[shared_prefix:]), dtype=torch.long)
        attention_mask[i, start:] = 1
        if shared_prefix:
            input_ids[i, :shared_prefix] = torch.as_tensor(list(row[:shared_prefix]), dtype=torch.long)
            attention_mask[i, :shared_prefix] = 1
    return BatchEncoding({"input_ids": input_ids, "attention_mask": attention_mask})


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded batch as ``generate`` numbers them: each row's first real token
    is 0, then 1, 2, ...; pads get 0. Without them, a model with *absolute* position embeddings
    (GPT-2) reads each padded row at shifted positions and scores it differently; rotary models
    (Llama, Qwen, Gemma) happen not to care, since a uniform shift leaves their attention scores
    unchanged (``tests/test_rollout.py`` shows both)."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def shared_prefixes(rows: Sequence[Sequence[int]], max_groups: int = 4) -> tuple[int, list[int]]:
    """The prompt start worth computing once per distinct value: ``(length, group of each row)``.

    Rows in one group have the same first ``length`` ids. The length maximises the rows' saved
    positions, ``(rows - groups) * length``, among lengths where the rows take at most
    ``max_groups`` distinct starts (tic-tac-toe prompts split in two early, at the player's mark,
    and agree again for a hundred tokens after it). Every row keeps at least one id of its own.
    ``(0, [0, ...])`` when nothing is saved.
    """
    n = len(rows)
    if n == 0:
        return 0, []
    limit = min(len(row) for row in rows) - 1
    groups, best, best_groups = [0] * n, 0, [0] * n
    for j in range(max(limit, 0)):
        # a row's group after position j: its group before, and its token at j
        keys: dict[tuple[int, int], int] = {}
        groups = [keys.setdefault((g, row[j]), len(keys)) for g, row in zip(groups, rows)]
        if len(keys) > max_groups:
            break
        if (n - len(keys)) * (j + 1) > (n - len(set(best_groups))) * best:
            best, best_groups = j + 1, groups
    return (best, best_groups) if best and len(set(best_groups)) < n else (0, [0] * n)

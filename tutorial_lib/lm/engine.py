"""The rollout engine: how a batch of prompts becomes sampled tokens fast (chapter 9, issue of scale).

    engine = pick_engine(model)                       # "compact", "static" or "generate"
    weights = SamplingWeights(peft_model)             # LoRA merged into a copy, refreshed as it trains
    tokens, logprobs = decode(weights.model(), batch, TokenSampler(preset), max_new_tokens=64,
                              eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)

:meth:`~tutorial_lib.lm.policies.LanguagePolicy.sample` calls this module; chapters never need to.
Imports only ``lm``'s own modules. It saves three costs ``model.generate`` on a LoRA model pays
and an RL loop need not (chapter 9 argues each; ``benchmarks/rollout_engine.py`` measures them):
unmerged LoRA (:class:`SamplingWeights` keeps a merged copy, rewritten from the exact base weights
whenever the adapters change, so no rounding accumulates); rows that wait for the slowest (on a
CPU :func:`decode` drops finished rows and their key/value cache); and launches per step (on CUDA,
``generate`` with a static cache and batches rounded to a few shapes, :func:`bucketed`, so one
compilation serves a rollout). Every engine records each token's log-probability under the
distribution it was drawn from, and the trainer's recompute agrees to float rounding
(``tests/test_engine.py``): the engine changes the speed, not the policy.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import transformers
from packaging.version import Version

from tutorial_lib.lm.lm_parts import unwrap_peft
from tutorial_lib.lm.sampling import TokenSampler
from tutorial_lib.lm.tokenization import positions_from_mask

#: the name of a key/value cache in ``generate``'s arguments and a model's output: transformers 5.24
#: renamed ``past_key_values`` to ``cache`` (the old name still works there, but logs a deprecation
#: line into every chapter that samples), and pyproject allows releases on both sides
CACHE_KEYWORD = "cache" if Version(transformers.__version__) >= Version("5.24.0") else "past_key_values"

#: ``generate``: transformers' loop, every row to the slowest one's end (the plain baseline);
#: ``compact``: :func:`decode`, finished rows leave the batch; ``static``: a preallocated key/value
#: cache and a compiled step (CUDA: ``generate`` with a static cache; XLA: :func:`static_decode`)
ENGINES = ("generate", "compact", "static")

#: below this many parameters a model is the book's tiny model (0.2 M), which keeps ``generate``
TINY_PARAMETERS = 5_000_000


def pick_engine(model, device_kind: str | None = None) -> str:
    """The engine for ``model`` where it lives: ``static`` on CUDA and XLA, ``compact`` elsewhere.

    The tiny model of the ``ci`` preset samples with ``generate``: the book's recorded tic-tac-toe
    runs were sampled by it, and the random stream of the compacting loop differs (a shrinking
    batch draws fewer numbers per step), so a reader's build reproduces the records only with it.
    """
    kind = device_kind or next(model.parameters()).device.type
    if kind in ("cuda", "xla"):  # XLA: a growing batch or cache would compile a graph per step
        return "static"
    if unwrap_peft(model).num_parameters() < TINY_PARAMETERS:
        return "generate"
    return "compact"


#: the static engine's shapes are rounded up to these, so that a compiled step is reused across a
#: rollout's turns instead of recompiled for every new number of live games or prompt length
ROW_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024)
COLUMN_MULTIPLE = 64


def bucketed(batch: dict[str, torch.Tensor], pad_token_id: int) -> tuple[dict[str, torch.Tensor], int]:
    """``batch`` (left-padded) grown to a bucket of rows (:data:`ROW_BUCKETS`; beyond the last, a
    multiple of it) and of columns (a multiple of :data:`COLUMN_MULTIPLE`), and the number of real
    rows, which come first. Added rows repeat the first row, so they are ordinary prompts whose
    tokens are dropped; added columns are padding on the left, masked out."""
    rows, columns = batch["input_ids"].shape
    target_rows = next((b for b in ROW_BUCKETS if b >= rows), -(-rows // ROW_BUCKETS[-1]) * ROW_BUCKETS[-1])
    target_columns = -(-columns // COLUMN_MULTIPLE) * COLUMN_MULTIPLE
    grown = {}
    for key, fill in (("input_ids", pad_token_id), ("attention_mask", 0)):
        tensor = batch[key]
        tensor = torch.cat([tensor, tensor[:1].expand(target_rows - rows, -1)]) if target_rows > rows else tensor
        if target_columns > columns:
            tensor = torch.cat([tensor.new_full((target_rows, target_columns - columns), fill), tensor], dim=1)
        grown[key] = tensor
    return grown, rows


def is_quantized(model) -> bool:
    """Whether the model's base weights are quantised (4-bit bitsandbytes): they cannot be merged."""
    base = unwrap_peft(model)
    return bool(getattr(base, "is_loaded_in_4bit", False) or getattr(base, "is_loaded_in_8bit", False))


def _lora_layers(model) -> list[tuple[str, Any]]:
    """(name in the base model, layer) of every LoRA-adapted layer of a PEFT model."""
    from peft.tuners.lora import LoraLayer

    return [(name, module) for name, module in unwrap_peft(model).named_modules() if isinstance(module, LoraLayer)]


class SamplingWeights:
    """The model to sample with: for a PEFT LoRA model, a copy with the adapters merged into its
    weights, rewritten from the exact base weights whenever the adapters changed; otherwise the
    model itself.

    A change is seen through each adapter tensor's version counter, which every in-place update
    (an optimiser step, ``load_state_dict``) increments: checking costs no arithmetic.
    """

    def __init__(self, model, *, merge: bool = True) -> None:
        self.trainer = model
        self._copy = None
        self._stamp: tuple[int, ...] | None = None
        self.merges = 0  # how many times the copy was (re)written: tests and benchmarks read it
        self.mergeable = merge and hasattr(model, "peft_config") and not is_quantized(model) and self._only_lora_trains()

    def _only_lora_trains(self) -> bool:
        # a trainable tensor outside the adapters (``modules_to_save``, a resized embedding) would
        # need its own copy rule; such a model samples through PEFT instead
        return all("lora_" in name for name, p in self.trainer.named_parameters() if p.requires_grad)

    def _current_stamp(self) -> tuple[int, ...]:
        # every adapter tensor, trainable or not: loading other adapter weights changes them too
        return tuple(p._version for name, p in self.trainer.named_parameters() if "lora_" in name)

    @torch.no_grad()
    def model(self):
        """The weights to sample with now."""
        if not self.mergeable:
            return self.trainer
        stamp = self._current_stamp()
        if self._copy is None:
            base = unwrap_peft(self.trainer)
            self._copy = copy.deepcopy(base)  # the adapted layers are replaced below by plain ones
            self._names = [name for name, _ in _lora_layers(self.trainer)]
            for name in self._names:
                layer = self._copy.get_submodule(name)
                parent, _, child = name.rpartition(".")
                self._copy.get_submodule(parent).__setattr__(child, layer.get_base_layer())
            self._copy.requires_grad_(False).eval()
        if stamp != self._stamp:
            layers = dict(_lora_layers(self.trainer))
            for name in self._names:
                layer = layers[name]
                weight = layer.get_base_layer().weight
                delta = sum(layer.get_delta_weight(a) for a in layer.active_adapters if a in layer.lora_A)
                self._copy.get_submodule(name).weight.copy_(weight + delta)  # one rounding, from the exact base
            self._stamp = stamp
            self.merges += 1
        return self._copy


def decode(
    model,
    batch: dict[str, torch.Tensor],
    sampler: TokenSampler,
    *,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    cache=None,
    compact_below: float = 0.75,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample up to ``max_new_tokens`` per row of a left-padded ``batch``; rows that have written
    their end-of-sequence token leave the batch, and their keys and values the cache, once no more
    than ``compact_below`` of the batch's rows are still writing (1.0: at every end).

    ``cache``, if given, already holds the keys and values of the first columns of every row (a
    shared prompt start, :meth:`~tutorial_lib.lm.policies.LanguagePolicy.sample`); the rest of the
    prompt is computed here. Returns ``(tokens, logprobs)``, each (batch, steps) on the CPU: the
    chosen tokens, ``pad_token_id`` after a row's end, and their log-probabilities (0 after the end),
    where ``steps`` is the longest row's length.
    """
    from transformers import DynamicCache

    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    rows, device = input_ids.shape[0], input_ids.device
    positions = positions_from_mask(attention_mask)
    cached = cache.get_seq_length() if cache is not None else 0
    cache = cache if cache is not None else DynamicCache(config=unwrap_peft(model).config)
    output = model(input_ids=input_ids[:, cached:], attention_mask=attention_mask, position_ids=positions[:, cached:],
                   use_cache=True, logits_to_keep=1, **{CACHE_KEYWORD: cache})
    logits = output.logits[:, -1]
    position = positions[:, -1:]
    sequences = input_ids  # what the repetition penalty reads
    active = torch.arange(rows, device=device)  # which original row each batch row is
    writing = torch.ones(rows, dtype=torch.bool, device=device)  # batch rows before their end of sequence
    tokens = torch.full((rows, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    logprobs = torch.zeros((rows, max_new_tokens), dtype=torch.float32, device=device)
    steps = 0
    for step in range(max_new_tokens):
        chosen, chosen_logprobs = sampler.choose(sequences, logits)
        tokens[active[writing], step] = chosen[writing, 0]
        logprobs[active[writing], step] = chosen_logprobs[writing, 0]
        steps = step + 1
        writing = writing & (chosen[:, 0] != eos_token_id)
        still = int(writing.sum())  # one host sync per step: what a CPU pays nothing for
        if step == max_new_tokens - 1 or still == 0:
            break
        if still <= compact_below * len(active):
            # Dropping rows copies every layer's keys and values of the rows kept, so it waits until
            # enough rows have ended to pay for the copy; until then an ended row computes tokens
            # nobody records.
            keep = writing.nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            active, chosen, sequences, writing = active[keep], chosen[keep], sequences[keep], writing[keep]
            attention_mask, position = attention_mask[keep], position[keep]
        sequences = torch.cat([sequences, chosen], dim=1)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(active), 1))], dim=1)
        position = position + 1
        output = model(input_ids=chosen, attention_mask=attention_mask, position_ids=position, use_cache=True,
                       **{CACHE_KEYWORD: cache})
        logits = output.logits[:, -1]
    return tokens[:, :steps].cpu(), logprobs[:, :steps].cpu()


def static_decode(
    model,
    batch: dict[str, torch.Tensor],
    sampler: TokenSampler,
    *,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`decode` for a compiling device (XLA): every tensor keeps its shape for the whole call,
    so each step runs one graph compiled once. The key/value cache is preallocated for the prompt
    and ``max_new_tokens`` (``StaticCache``), the attention mask spans it from the start (the new
    columns switched on as they are written), the step index is a tensor on the device, and no
    value is read to the host until the end: rows that have ended keep computing tokens, which are
    dropped afterwards. ``batch`` should be :func:`bucketed`, so that the next call reuses the
    graphs. The repetition penalty, if the sampler has one, reads the prompt only. Returns what
    :func:`decode` returns: ``(tokens, logprobs)`` on the CPU, ``pad_token_id`` and 0 after a row's end.
    """
    from transformers import StaticCache

    from tutorial_lib.runtime.device import end_of_step

    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    rows, columns = input_ids.shape
    device = input_ids.device
    base = unwrap_peft(model)
    cache = StaticCache(config=base.config, max_cache_len=columns + max_new_tokens)
    mask = torch.cat([attention_mask, attention_mask.new_zeros((rows, max_new_tokens))], dim=1)
    positions = positions_from_mask(attention_mask)
    output = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                   cache_position=torch.arange(columns, device=device), **{CACHE_KEYWORD: cache})
    logits = output.logits[:, -1]
    position = positions[:, -1:]
    column = torch.full((1,), columns, dtype=torch.long, device=device)  # the cache column of the next token
    tokens = torch.full((rows, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    logprobs = torch.zeros((rows, max_new_tokens), dtype=torch.float32, device=device)
    for _ in range(max_new_tokens):
        chosen, chosen_logprobs = sampler.choose(input_ids, logits)
        step = column - columns
        tokens = tokens.index_copy(1, step, chosen)
        logprobs = logprobs.index_copy(1, step, chosen_logprobs.float())
        mask = mask.index_fill(1, column, 1)
        position = position + 1
        output = model(input_ids=chosen, attention_mask=mask, position_ids=position, use_cache=True,
                       cache_position=column, **{CACHE_KEYWORD: cache})
        logits = output.logits[:, -1]
        column = column + 1
        end_of_step(device)  # one graph a step, the same each step; nothing read to the host
    tokens, logprobs = tokens.cpu(), logprobs.cpu()
    ended = (tokens == eos_token_id).cumsum(1) - (tokens == eos_token_id).long() > 0  # after a row's end
    tokens[ended], logprobs[ended] = pad_token_id, 0.0
    steps = int((~ended).sum(1).max())  # the longest row, its end included
    return tokens[:, :steps], logprobs[:, :steps]

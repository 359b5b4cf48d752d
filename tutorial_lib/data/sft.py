"""Supervised fine-tuning on expert examples, through TRL's ``SFTTrainer`` (chapter 4).

    policy = load_policy("tiny")
    result = train_sft(policy, examples, SFTSettings(epochs=3), output_dir="runs/sft-tictactoe")
    tuned = load_policy(result.output_dir)

Examples are tokenised here, not by TRL: the prompt is rendered with the tokenizer's chat template
and tokenised *alone*, the completion's tokens (ending with the end-of-turn token) are appended,
and every prompt label is ``-100`` (:func:`tutorial_lib.lm.tokenization.encode_prompt_completion`).
So training sees exactly the token sequence that generation produces (chapter 2's token-boundary
pitfall), and the loss is on the action only. ``SFTTrainer`` accepts such pre-tokenised data as
is and does the rest: batching and padding, the optimiser and schedule, logging, checkpoints.

Three regimes, one function:

* full fine-tuning (the tiny model);
* LoRA through PEFT (``SFTSettings.lora``): only low-rank adapters train;
* QLoRA (``load_policy(..., load_in_4bit=True)`` plus LoRA): 4-bit frozen base weights and a paged
  8-bit AdamW (``optim="paged_adamw_8bit"``), as in the TextWorld tutorial. CUDA only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from tutorial_lib.lm.lm_parts import BODY_INPUTS, body_hidden_states, output_logits
from tutorial_lib.lm.policies import LanguagePolicy
from tutorial_lib.lm.prompts import render_chat
from tutorial_lib.lm.tokenization import IGNORE_INDEX, encode_prompt_completion
from tutorial_lib.runtime import distributed, durable
from tutorial_lib.runtime.cache import folder_lock
from tutorial_lib.runtime.cpu_threads import trainer_callback as threads_callback
from tutorial_lib.runtime.device import default_dtype, device_kind, shape_multiple
from tutorial_lib.runtime.progress import quiet_transformers


@dataclass
class SFTSettings:
    """Training settings. Defaults suit the tiny model on a CPU; see ``for_pretrained``."""

    #: passes over the data
    epochs: float = 3.0
    #: stop after this many optimiser steps, whatever ``epochs`` says (``None``: run the epochs). A
    #: pretrained model on a CPU is budgeted in steps: a fraction of one epoch already fits its data
    max_steps: int | None = None
    #: peak learning rate (linear warm-up, then cosine decay)
    learning_rate: float = 1e-3
    #: examples per optimiser step per device
    batch_size: int = 16
    #: micro-batches accumulated into one optimiser step
    gradient_accumulation_steps: int = 1
    warmup_ratio: float = 0.05
    #: learning-rate schedule after warm-up (a ``transformers`` scheduler name: ``cosine``,
    #: ``constant``, ``linear``...); other optimiser options go in ``extra`` (e.g. ``adam_beta2``)
    lr_scheduler: str = "cosine"
    weight_decay: float = 0.0
    #: recompute activations in the backward pass instead of storing them: saves GPU memory on a
    #: real model, but on the tiny model it only costs time (TRL turns it on by default; ~30% of a
    #: CPU step measured at ci)
    gradient_checkpointing: bool = False
    #: choose ``batch_size`` (the micro-batch), ``gradient_accumulation_steps`` and
    #: ``gradient_checkpointing`` from the model's size, the longest example and the device's free
    #: memory (:func:`tutorial_lib.runtime.memory_plan.plan_training`), keeping the examples of an
    #: optimiser step, ``batch_size x gradient_accumulation_steps``: a 135 M model on an 80 GB card
    #: then trains 64 examples a pass without checkpointing where the written settings said 8 with it
    size_to_device: bool = False
    #: longest example in tokens; longer prompts lose their oldest tokens, never the completion
    max_length: int = 1024
    #: ``k > 0``: batch examples of similar length, sorted within random groups of ``k`` batches
    #: (:class:`LengthBatches`), so that less of a batch is padding; ``0``: batches drawn at random.
    #: A random batch of 16 CookingWorld examples (157-550 tokens) is 35% padding, 14% with k=4,
    #: 1% with k=50 -- but the larger k, the more a batch holds turns from the same stage of a game
    group_by_length: int = 0
    #: ``m > 1``: cut each batch into ``m`` micro-batches of similar length and accumulate their
    #: gradients. Unlike ``group_by_length`` the optimiser step sees the same kind of batch as with
    #: ``m = 1`` (a random draw of ``batch_size`` examples, the same update up to float rounding);
    #: only the padding goes. ``transformers``' ``BatchRebalanceSampler`` does the cutting, sizing the
    #: micro-batches so that each costs about the same (more short examples, fewer long ones).
    micro_batches: int = 1
    #: train on each distinct (prompt, completion) once, its loss weighted by how often it occurs: the
    #: same loss as the repeated examples, for fewer tokens. GuessTheNumber's 2,901 examples at ``ci``
    #: are 10 distinct ones (binary search on 1-10 visits 10 states), so an epoch is one step of 10.
    #: Needs one micro-batch per optimiser step (the weights normalise within it)
    merge_duplicates: bool = False
    #: optimiser name understood by ``transformers`` (``paged_adamw_8bit`` for QLoRA on CUDA)
    optim: str = "adamw_torch"
    #: log the loss every this many optimiser steps
    logging_steps: int = 10
    #: keep a checkpoint every this many steps (``None``: only the final model)
    save_steps: int | None = None
    seed: int = 0
    #: where to write TensorBoard logs: ``"tensorboard"`` or ``"none"``
    report_to: str = "tensorboard"
    #: show the Trainer's progress bar (a live table in Jupyter)
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 (or None); got {self.max_steps}")
        if not 0 <= self.warmup_ratio < 1:  # a share of the steps (TRL would read 1 or more as a count)
            raise ValueError(f"warmup_ratio is a share of the steps, from 0 up to (not including) 1; got {self.warmup_ratio}")
        if self.micro_batches < 1 or self.batch_size % self.micro_batches:
            raise ValueError(f"micro_batches must be >= 1 and divide batch_size ({self.batch_size}); "
                             f"got {self.micro_batches}")
        if self.size_to_device and self.micro_batches > 1:
            raise ValueError("size_to_device chooses the micro-batch itself; leave micro_batches at 1")
        if self.merge_duplicates and (self.micro_batches > 1 or self.gradient_accumulation_steps > 1
                                      or self.size_to_device):
            raise ValueError("merge_duplicates weights the examples within one micro-batch: leave micro_batches and "
                             "gradient_accumulation_steps at 1 and size_to_device off")
        if self.micro_batches > 1 and self.group_by_length:
            raise ValueError("use group_by_length or micro_batches, not both: micro-batches already group "
                             "each batch's examples by length")

    @classmethod
    def for_pretrained(cls, **overrides) -> SFTSettings:
        """Settings for LoRA on a pretrained model (the TextWorld and OpenSpiel tutorials' scale)."""
        return cls(**{"epochs": 1.0, "learning_rate": 2e-4, "batch_size": 8, "gradient_accumulation_steps": 8,
                      "gradient_checkpointing": True, **overrides})


@dataclass
class SFTResult:
    output_dir: Path
    #: ``trainer.state.log_history``: one dict per logging step (loss, learning rate, ...)
    log_history: list[dict[str, Any]]
    seconds: float
    examples: int
    trained_tokens: int
    #: share of the token positions the model ran on that were padding (see ``group_by_length``)
    padding_fraction: float = 0.0
    #: ``False`` for a part of a staged run (``train_sft(stage=(i, n))``, i < n): no model saved yet
    finished: bool = True
    #: optimiser steps done so far, and in the whole run
    step: int = 0
    total_steps: int = 0
    #: processes that trained (``accelerate launch``), and the examples of one optimiser step over all
    #: of them (per-device batch x accumulation x processes)
    processes: int = 1
    global_batch_size: int = 0
    #: distinct examples trained on (``SFTSettings.merge_duplicates``; otherwise ``examples``)
    distinct_examples: int = 0

    @property
    def losses(self) -> list[tuple[int, float]]:
        """(step, training loss) pairs, for a loss curve."""
        return [(row["step"], row["loss"]) for row in self.log_history if "loss" in row]


def tokenize_examples(tokenizer, examples: Sequence[dict[str, Any]], max_length: int = 1024,
                      merge_duplicates: bool = False):
    """A ``datasets.Dataset`` of ``input_ids`` and ``labels`` (prompt masked) from prompt/completion rows.

    ``merge_duplicates``: one row per distinct token sequence and labels, in order of first
    appearance, with a ``weight`` column counting its copies.
    """
    import datasets

    rows: dict[tuple, dict[str, Any]] = {}
    for number, example in enumerate(examples):
        prompt = render_chat(tokenizer, [{"role": "user", "content": example["prompt"]}])
        encoded = encode_prompt_completion(tokenizer, prompt, example["completion"], max_length=max_length)
        key = (tuple(encoded["input_ids"]), tuple(encoded["labels"])) if merge_duplicates else number
        row = rows.setdefault(key, {"input_ids": encoded["input_ids"], "labels": encoded["labels"], "weight": 0})
        row["weight"] += 1
    if not rows:
        raise ValueError("no examples to train on")
    dataset = datasets.Dataset.from_list(list(rows.values()))
    return dataset if merge_duplicates else dataset.remove_columns("weight")


def completion_logits(model, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token logits at the labelled (completion) positions only, and their target ids.

    A causal LM's forward computes logits for every position, but SFT on an action uses only the
    few positions of the completion (tic-tac-toe: 4 of ~120). The output layer is then most of the
    work for a small model (vocabulary x hidden size per position), so the transformer body runs
    on the whole sequence and the output layer only where there is a label. Same loss, same
    gradients, ~2x faster steps for the tiny model on a CPU.
    """
    targets = inputs["labels"][:, 1:]
    keep = targets != IGNORE_INDEX  # position t predicts token t+1
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        # several processes (accelerate launch): DDP averages the gradients through hooks its own
        # forward sets, so the whole model runs through it, logits at every position included
        body_inputs = {k: inputs[k] for k in BODY_INPUTS if k in inputs}
        return model(**body_inputs, use_cache=False).logits[:, :-1][keep].float(), targets[keep]
    hidden = body_hidden_states(model, inputs)  # (batch, length, hidden)
    return output_logits(model, hidden[:, :-1][keep]), targets[keep]  # (labelled tokens, vocab)


class LengthBatches(torch.utils.data.Sampler):
    """Batches of examples of similar length, in random order (``SFTSettings.group_by_length``).

    Each epoch: shuffle the examples, cut them into groups of ``group_batches`` batches, sort each
    group by length and cut it into batches, then shuffle the *batches*. ``transformers``'
    ``LengthGroupedSampler`` (groups of 50 batches) stops before that last shuffle: within each
    group the batches run from the longest examples to the shortest. On CookingWorld, where a
    prompt's length tracks how far into the game its turn is, that sawtooth cost most of what the
    model learnt (test success .84 -> .19 at the same steps); with the batches shuffled, .38: a
    batch that holds only late turns, or only early ones, is a poorer gradient than a mixed one.
    Groups of 4 batches did no better (.25; one seed each, ``benchmarks/results/sft_recipe.md``).
    Draws from torch's global generator, which the Trainer seeds.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, group_batches: int = 50) -> None:
        if batch_size < 1 or group_batches < 1:
            raise ValueError(f"batch_size and group_batches must be >= 1; got {batch_size}, {group_batches}")
        self.lengths, self.batch_size, self.group_batches = list(lengths), batch_size, group_batches

    def __len__(self) -> int:
        return len(self.lengths)

    def batches(self) -> list[list[int]]:
        order = torch.randperm(len(self.lengths)).tolist()
        group = self.batch_size * self.group_batches
        full, partial = [], []
        for start in range(0, len(order), group):
            ranked = sorted(order[start:start + group], key=self.lengths.__getitem__)
            for i in range(0, len(ranked), self.batch_size):
                batch = ranked[i:i + self.batch_size]
                (full if len(batch) == self.batch_size else partial).append(batch)
        shuffled = [full[i] for i in torch.randperm(len(full)).tolist()]
        # a short batch goes last: the DataLoader cuts the index stream every batch_size indices
        return shuffled + partial

    def __iter__(self):
        return iter([i for batch in self.batches() for i in batch])


def _completion_only_trainer():
    """``SFTTrainer`` with its loss computed by :func:`completion_logits` (its logging kept)."""
    from transformers.trainer_pt_utils import BatchRebalanceSampler
    from trl import SFTTrainer

    class CompletionOnlySFTTrainer(SFTTrainer):
        #: [real tokens, token positions] of the training batches so far
        padding_seen = None
        group_by_length = 0

        def _get_train_sampler(self, train_dataset=None):
            if not self.group_by_length:
                sampler = super()._get_train_sampler(train_dataset)
                if isinstance(sampler, BatchRebalanceSampler):
                    # transformers builds it with its default seed (42) whatever the arguments say
                    sampler.seed = self.args.data_seed
                return sampler
            dataset = self.train_dataset if train_dataset is None else train_dataset
            return LengthBatches([len(ids) for ids in dataset["input_ids"]], self.args.per_device_train_batch_size,
                                 self.group_by_length)

        def _set_signature_columns_if_needed(self):
            super()._set_signature_columns_if_needed()
            if "weight" not in self._signature_columns:  # merge_duplicates' counts reach the collator
                self._signature_columns = [*self._signature_columns, "weight"]

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            weight = inputs.pop("weight", None)
            logits, targets = completion_logits(model, inputs)
            if weight is not None:
                # each labelled token counts as many times as its example occurred in the data
                labelled = inputs["labels"][:, 1:] != IGNORE_INDEX  # the positions completion_logits kept
                token_weight = weight[:, None].expand_as(labelled)[labelled].to(logits.dtype)
                total = (torch.nn.functional.cross_entropy(logits, targets, reduction="none") * token_weight).sum()
                count = token_weight.sum()
                if self.args.world_size > 1:  # the weighted count of every process's micro-batch
                    count = self.accelerator.reduce(count.detach(), reduction="sum")
                loss = total / count.clamp(min=1) * self.args.world_size  # DDP averages the processes' gradients
            else:
                total = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
                count = targets.numel() if num_items_in_batch is None else num_items_in_batch
                loss = total / torch.as_tensor(count, device=total.device).clamp(min=1)
            if (weight is None and num_items_in_batch is not None and self.args.average_tokens_across_devices
                    and self.args.world_size > 1):
                # several processes: the count is all of theirs, and DDP averages their gradients, so N x
                # (this process's sum / the global count) averages to the batch's (as the Trainer's own
                # compute_loss does)
                loss = loss * self.args.world_size
            with torch.no_grad():  # the same training metrics SFTTrainer logs
                mode = "train" if model.training else "eval"
                logp = torch.log_softmax(logits, dim=-1)
                n = max(targets.numel(), 1)
                self._metrics[mode]["entropy"].append(float(-(logp.exp() * logp).sum(-1).sum() / n))
                self._metrics[mode]["mean_token_accuracy"].append(float((logits.argmax(-1) == targets).sum() / n))
                if mode == "train":
                    mask = inputs.get("attention_mask")
                    real = int(mask.sum()) if mask is not None else inputs["input_ids"].numel()
                    self._total_train_tokens += real
                    self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
                    self.padding_seen[0] += real
                    self.padding_seen[1] += inputs["input_ids"].numel()
            return (loss, {"logits": logits}) if return_outputs else loss

    return CompletionOnlySFTTrainer


def _whole_global_batches(dataset, global_batch: int):
    """``dataset`` padded with rows of weight 0 to whole batches of every process together.

    Under ``accelerate launch`` a short last batch is filled up with rows from the start of the
    data (accelerate's ``even_batches``), which would count those rows twice; a row of weight 0
    adds nothing to the loss or to its normaliser. One process needs none: its last batch is short.
    """
    import datasets

    short = -len(dataset) % global_batch if distributed.num_processes() > 1 else 0
    if not short:
        return dataset
    filler = dataset.select([0] * short).map(lambda row: {"weight": 0})
    return datasets.concatenate_datasets([dataset, filler])


def _weighted(collate):
    """``collate`` for rows that carry a ``weight``: their weights come back as one tensor."""

    def collate_weighted(rows: list[dict[str, Any]]) -> dict[str, Any]:
        weights = torch.tensor([row["weight"] for row in rows], dtype=torch.float32)
        batch = collate([{k: v for k, v in row.items() if k != "weight"} for row in rows])
        return {**batch, "weight": weights}

    return collate_weighted


#: the file that says a folder is being trained in stages (``train_sft(stage=(i, n))``, n > 1), and by
#: which process: ``{"pid", "host", "parts_done", "parts"}``. Its parts run as separate calls (a
#: notebook's cells) and no lock is held between them, so a reader that finds no finished model
#: there learns from this file whether a live process is about to finish one
#: (``pipeline.sft_policy`` waits for it). Written when part 1 starts, removed by the last part
#: before the model is sealed.
STAGED_RUN = "sft_staged_run.json"


def staged_run_writer(output_dir: str | Path) -> dict | None:
    """The process training ``output_dir`` in stages, while it is alive: :data:`STAGED_RUN`'s
    contents. ``None`` when no staged run is unfinished there or its process has died (a killed
    kernel will not finish it). A writer on another host (a shared cache) is taken as alive."""
    try:
        writer = json.loads((Path(output_dir) / STAGED_RUN).read_text())
        pid, host = int(writer["pid"]), writer["host"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if host == socket.gethostname() and not durable.process_alive(pid):
        return None
    return writer


def _mark_staged_run(output_dir: Path, parts_done: int, parts: int) -> None:
    durable.write_text(output_dir / STAGED_RUN, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                            "parts_done": parts_done, "parts": parts}))


def _checkpoints(output_dir: Path) -> list[Path]:
    """The run's resumable stops that were written whole, oldest first (half-written ones go)."""
    return durable.trainer_checkpoints(output_dir)


def _stop_at_fraction(fraction: float):
    """A callback that stops training at ``fraction`` of its steps and saves a resumable checkpoint."""
    from transformers import TrainerCallback

    class StopAtFraction(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= round(state.max_steps * fraction):
                control.should_save = control.should_training_stop = True
            return control

    return StopAtFraction()


def per_process_batch(settings: SFTSettings) -> int:
    """Examples per forward pass in each process: a micro-batch, split over the processes of an
    ``accelerate launch`` run, so that an optimiser step sees ``batch_size`` examples however many
    processes share it (the recipe does not change when it scales out)."""
    micro, processes = settings.batch_size // settings.micro_batches, distributed.num_processes()
    if micro % processes:
        raise ValueError(f"a micro-batch of {micro} examples (batch_size {settings.batch_size} / micro_batches "
                         f"{settings.micro_batches}) does not split over {processes} processes")
    return micro // processes


def sized_to_device(settings: SFTSettings, model, dataset) -> SFTSettings:
    """``settings`` with the micro-batch, accumulation and checkpointing of
    :func:`~tutorial_lib.runtime.memory_plan.plan_training` for ``model`` and the longest example
    of ``dataset``; the examples per optimiser step (per process) stay as written. On a CPU the
    settings stand as written (:func:`~tutorial_lib.runtime.memory_plan.sizes_by_memory`)."""
    from tutorial_lib.runtime.memory_plan import plan_training, sizes_by_memory

    if not sizes_by_memory(model):
        return settings
    longest = max(len(ids) for ids in dataset["input_ids"])
    scored = max(sum(label != IGNORE_INDEX for label in row) for row in dataset["labels"])
    plan = plan_training(model, examples_per_step=settings.batch_size * settings.gradient_accumulation_steps,
                         tokens_per_example=longest, scored_tokens=scored)
    return replace(settings, batch_size=plan.micro_batch, gradient_accumulation_steps=plan.accumulation,
                   gradient_checkpointing=plan.checkpointing)


def sft_config(settings: SFTSettings, output_dir: Path, device: torch.device | None = None):
    """TRL's ``SFTConfig`` for ``settings``: where each of our settings goes in the Trainer's terms.
    ``device``: the model's; on XLA the batches are padded to a few fixed lengths."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(output_dir),
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps if settings.max_steps is not None else -1,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=per_process_batch(settings),
        gradient_accumulation_steps=settings.gradient_accumulation_steps * settings.micro_batches,
        # the batch sampler that cuts each optimiser step's examples into micro-batches (the loss is
        # summed over them and divided by their completion tokens: compute_loss's num_items_in_batch)
        **({"train_sampling_strategy": "batch_rebalance"} if settings.micro_batches > 1 else {}),
        # a share of the steps: transformers 5 reads a warmup_steps in [0, 1) as a ratio of the run's steps
        warmup_steps=settings.warmup_ratio,
        lr_scheduler_type=settings.lr_scheduler,
        weight_decay=settings.weight_decay,
        activation_checkpointing=settings.gradient_checkpointing,  # the new name of gradient checkpointing
        max_length=settings.max_length,
        optim=settings.optim,
        # a run shorter than the logging interval still logs its loss once
        logging_steps=min(settings.logging_steps, settings.max_steps or settings.logging_steps),
        save_strategy="steps" if settings.save_steps else "no",
        save_steps=settings.save_steps or 500,
        seed=settings.seed,
        data_seed=settings.seed,
        report_to=[] if settings.report_to == "none" else [settings.report_to],
        disable_tqdm=not settings.progress,
        dataset_num_proc=None,
        # mixed precision where the hardware has it; full float32 on CPU (exact, and as fast there)
        bf16=default_dtype() == torch.bfloat16,
        use_cpu=device_kind() == "cpu",
        # on XLA a few fixed lengths, not each batch's longest: every new shape compiles a graph
        **{**({"pad_to_multiple_of": multiple} if (multiple := shape_multiple(device or "cpu")) > 1 else {}),
           **settings.extra},
    )


def train_sft(
    policy: LanguagePolicy,
    examples: Sequence[dict[str, Any]],
    settings: SFTSettings | None = None,
    *,
    output_dir: str | Path,
    resume: bool = False,
    stage: tuple[int, int] = (1, 1),
) -> SFTResult:
    """Fine-tune ``policy.model`` in place on ``examples``; save the result to ``output_dir``.

    ``stage=(i, n)`` trains only the i-th of n equal parts of the run, so that a long run fits in
    several notebook cells (or survives an interruption). Part i < n stops at a checkpoint in
    ``output_dir`` that holds the weights, the optimiser, the schedule and the random generators;
    part i + 1 resumes from it, and the n parts train exactly what one call would
    (``tests/test_sft.py`` checks the weights). Only the last part saves the model and
    ``sft_result.json``; ``SFTResult.finished`` says which kind of result came back.
    """
    # held for the whole part: another process must not train into (or load half of) this folder.
    # Under accelerate launch the processes train it together: the main one holds the lock.
    with folder_lock(output_dir) if distributed.is_main() else contextlib.nullcontext():
        return _train_sft(policy, examples, settings or SFTSettings(), Path(output_dir), resume, stage)


def _train_sft(policy: LanguagePolicy, examples: Sequence[dict[str, Any]], settings: SFTSettings, output_dir: Path,
               resume: bool, stage: tuple[int, int]) -> SFTResult:
    settings = replace(settings)  # checked again: fields may have been set after it was made
    part, parts = stage
    if not 1 <= part <= parts:
        raise ValueError(f"stage must be (i, n) with 1 <= i <= n; got {stage}")
    if part > 1 and not _checkpoints(output_dir):
        raise FileNotFoundError(f"stage {part} of {parts} resumes from a checkpoint in {output_dir}, and there is "
                                f"none: run stage {part - 1} first")
    if part == 1 and parts > 1 and not resume:
        for stale in _checkpoints(output_dir):  # an interrupted earlier run's stops: part 2 must resume from ours
            shutil.rmtree(stale)
    if resume and not _checkpoints(output_dir):
        raise FileNotFoundError(f"no complete checkpoint in {output_dir} to resume from: start without resume")
    if distributed.is_main():
        # the folder's files are rewritten in place from here on: until the new seal at the end, no
        # reader takes them for a finished model
        durable.unseal(output_dir)
        if parts > 1:  # and between this call and the last part's, a reader knows who finishes them
            _mark_staged_run(output_dir, part - 1, parts)
    dataset = tokenize_examples(policy.tokenizer, examples, settings.max_length, settings.merge_duplicates)
    if settings.size_to_device:
        settings = sized_to_device(settings, policy.model, dataset)
    weights = dataset["weight"] if settings.merge_duplicates else [1] * len(dataset)
    # an epoch's labelled tokens and examples, each distinct example counted as often as it occurs
    trained_tokens = sum(w * sum(label != IGNORE_INDEX for label in row) for w, row in zip(weights, dataset["labels"]))
    counts = {"distinct_examples": len(dataset)}
    num_examples = sum(weights)
    if settings.merge_duplicates:
        dataset = _whole_global_batches(dataset, per_process_batch(settings) * distributed.num_processes())
    config = sft_config(settings, output_dir, next(policy.model.parameters()).device)
    # The Trainer's informational lines are not the chapter's point; its progress bars are shown
    # when settings.progress asks for them.
    with quiet_transformers(progress_bars=settings.progress):
        trainer = _completion_only_trainer()(model=policy.model, args=config, train_dataset=dataset,
                                             processing_class=policy.tokenizer)
        trainer.padding_seen, trainer.group_by_length = [0, 0], settings.group_by_length
        if settings.merge_duplicates:
            trainer.data_collator = _weighted(trainer.data_collator)
        trainer.add_callback(threads_callback())
        trainer.add_callback(durable.sealing_callback())  # each checkpoint trusted once written whole
        if not settings.progress:
            from transformers import PrinterCallback

            # with tqdm off the Trainer prints every log dict instead: hundreds of lines in a chapter
            # (the losses stay in trainer.state.log_history, which SFTResult keeps)
            trainer.remove_callback(PrinterCallback)
        if part < parts:
            trainer.add_callback(_stop_at_fraction(part / parts))
        start = time.perf_counter()
        # the newest checkpoint written whole (the Trainer's own choice would be the newest folder)
        trainer.train(resume_from_checkpoint=str(_checkpoints(output_dir)[-1]) if resume or part > 1 else None)
        seconds = time.perf_counter() - start
        policy.model.eval()
        # time and padding add up over the parts of a staged run (the Trainer's own state does not keep them)
        tally_file = output_dir / "sft_stages.json"
        tally = json.loads(tally_file.read_text()) if part > 1 and tally_file.exists() else {"seconds": 0.0, "padding": [0, 0]}
        tally = {"seconds": tally["seconds"] + seconds,
                 "padding": [a + b for a, b in zip(tally["padding"], trainer.padding_seen)]}
        seconds = tally["seconds"]
        if part < parts:
            if distributed.is_main():
                durable.write_text(tally_file, json.dumps(tally))
                _mark_staged_run(output_dir, part, parts)
            return SFTResult(output_dir, list(trainer.state.log_history), seconds, num_examples, int(trained_tokens),
                             finished=False, step=trainer.state.global_step, total_steps=trainer.state.max_steps,
                             **counts)
        trainer.save_model(str(output_dir))  # the main process writes it (the Trainer's should_save)
    args = trainer.args
    shape = {"processes": args.world_size,
             "global_batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
             **counts}
    if not distributed.is_main():  # one process writes the outputs
        distributed.wait_for_everyone()
        return SFTResult(output_dir, list(trainer.state.log_history), seconds, num_examples, int(trained_tokens),
                         step=trainer.state.global_step, total_steps=trainer.state.max_steps, **shape)
    policy.tokenizer.save_pretrained(output_dir)
    if parts > 1:  # the run is whole: its resumable stops are not needed
        for checkpoint in _checkpoints(output_dir):
            shutil.rmtree(checkpoint)
    tally_file.unlink(missing_ok=True)
    (output_dir / STAGED_RUN).unlink(missing_ok=True)  # before the seal: a sealed folder lists no marker
    real, positions = tally["padding"]
    padding = round(1 - real / positions, 4) if positions else 0.0
    result = SFTResult(output_dir, list(trainer.state.log_history), seconds, num_examples, int(trained_tokens), padding,
                       step=trainer.state.global_step, total_steps=trainer.state.max_steps, **shape)
    durable.write_text(output_dir / "sft_result.json", json.dumps(
        {"settings": asdict(settings), "seconds": seconds, "examples": num_examples, "trained_tokens": int(trained_tokens),
         "padding_fraction": padding, "log_history": result.log_history, **shape},
        indent=1,
    ))
    durable.seal(output_dir)  # the last write: from here on a reader may trust the folder
    distributed.wait_for_everyone()
    return result

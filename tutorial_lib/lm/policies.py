"""Policies: anything that turns a batch of game states into a batch of action texts (chapters 1-2).

    actions = policy.act(episodes)      # one action text per live episode
    samples = policy.act_samples(episodes)  # language policies: texts with token ids and log-probs

A :class:`LanguagePolicy` builds each episode's prompt, renders it with the tokenizer's chat
template and samples the whole batch in one call to its engine (:mod:`tutorial_lib.lm.engine`:
transformers' ``generate``, its static-cache version, or the ``compact`` decoder that drops finished
rows). The baselines --
:class:`RandomPolicy` and :class:`ExpertPolicy` -- implement ``act`` too, so the evaluation
harness treats every policy alike. For RL (chapter 5), :meth:`LanguagePolicy.sample` also returns
what the sampler saw and drew: the prompt's and the action's token ids, and each action token's
log-probability under the distribution it was drawn from (see :class:`Sample`).
"""

from __future__ import annotations

import inspect
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from transformers import LogitsProcessorList

from tutorial_lib.envs.base import TextEnv
from tutorial_lib.lm.engine import (
    CACHE_KEYWORD,
    ENGINES,
    SamplingWeights,
    bucketed,
    decode,
    pick_engine,
    static_decode,
)
from tutorial_lib.lm.lm_parts import unwrap_peft
from tutorial_lib.lm.prompts import PromptSpec, Turn, build_messages, render_chat
from tutorial_lib.lm.sampling import SAMPLING, TokenSampler
from tutorial_lib.lm.tokenization import pad_prompt_ids, shared_prefixes

#: the shortest common prompt start worth computing once per batch (see ``LanguagePolicy.sample``)
MIN_SHARED_PREFIX = 16

#: how many tokens an action may take, per game (math needs room for its working; a tic-tac-toe
#: move is 9 tokens, and the worked lines before it, ``GameSettings.worked_lines``, 33-41 more)
MAX_NEW_TOKENS: dict[str, int] = {"tictactoe": 64, "cookingworld": 16, "guess_the_number": 16, "math": 128}


@dataclass
class EpisodeState:
    """A live episode as a policy sees it: the game, its environment and the turns so far (the last
    one not yet acted on)."""

    game: str
    env: TextEnv
    turns: list[Turn] = field(default_factory=list)

    @property
    def info(self) -> dict[str, Any]:
        """The game's latest ``info`` (valid actions, invalid flag...)."""
        return self.turns[-1].info if self.turns else {}


@dataclass
class Sample:
    """One completion as the sampler produced it: what an RL update trains on.

    ``logprobs[i]`` is the log-probability of ``action_ids[i]`` under the distribution it was
    actually drawn from: ``generate``'s *scores*, i.e. the model's logits after every logits
    processor (temperature, top-k, top-p, repetition penalty...). That is the sampler's
    probability, the denominator of the importance ratio pi_theta(a) / pi_sampler(a).

    * With the ``rl`` preset no processor changes the logits, so these are exactly
      ``log_softmax(logits)`` of the model: what the trainer recomputes
      (:func:`tutorial_lib.rl.rollout.action_logprobs`), equal up to float rounding.
    * With top-k / top-p the sampler renormalises over the kept tokens, so each recorded
      log-prob is *higher* than the trainer's ``log_softmax(logits / T)``. We record the sampler's
      value on purpose: the ratio then sees the truncation as the off-policy effect it is
      (ratio < 1 at unchanged weights), instead of hiding it.
    * Greedy decoding draws nothing and applies no temperature, top-k or top-p: the values are the
      model's log-probs at temperature 1.
    """

    #: the decoded action, special tokens dropped (what the game receives)
    text: str
    #: the prompt's token ids, without padding
    prompt_ids: list[int]
    #: the generated ids up to and including the first end-of-sequence token (none after it)
    action_ids: list[int]
    #: one log-probability per action token (see above)
    logprobs: list[float]


class Policy(Protocol):
    def act(self, episodes: Sequence[EpisodeState]) -> list[str]: ...


class RandomPolicy:
    """A uniformly random well-formed action (a random legal move, a random guess...)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def act(self, episodes: Sequence[EpisodeState]) -> list[str]:
        return [e.env.random_action(self.rng) for e in episodes]


class ExpertPolicy:
    """The game's expert: minimax, the gold path, binary search, the worked solution."""

    def act(self, episodes: Sequence[EpisodeState]) -> list[str]:
        return [e.env.expert_action() for e in episodes]


class LanguagePolicy:
    """A causal language model and its tokenizer, acting through prompts.

    ``sampling`` names a preset of :data:`SAMPLING`; ``history_window`` overrides the game's
    default (see :mod:`tutorial_lib.lm.prompts`). ``prompt_spec`` replaces the game's whole
    :class:`~tutorial_lib.lm.prompts.PromptSpec`: a policy then reads prompts laid out differently from
    its training data, which chapter 8 measures (leave it ``None`` otherwise).

    ``share_prefix``: when every prompt of a batch starts with the same tokens (the game's
    instructions), compute that start once and copy its keys and values to every row instead of
    running it through the model once per row (see :meth:`sample`).

    ``engine`` is how tokens are sampled (:mod:`tutorial_lib.lm.engine`): ``"generate"``
    (transformers' loop), ``"compact"`` (finished rows leave the batch) or ``"static"`` (a static
    cache, shapes in buckets; on CUDA ``generate`` compiles its step); ``None`` picks by model and
    device. Every engine samples a LoRA model through a merged copy of its weights where it can
    (``merge_lora=False``: through the adapters, as PEFT computes them; benchmarks compare the two).
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        name: str = "",
        sampling: str = "greedy",
        history_window: int | None = None,
        prompt_spec: PromptSpec | None = None,
        seed: int | None = None,
        share_prefix: bool = True,
        engine: str | None = None,
        merge_lora: bool = True,
    ) -> None:
        if sampling not in SAMPLING:
            raise ValueError(f"unknown sampling preset {sampling!r}; choose one of {', '.join(SAMPLING)}")
        if engine is not None and engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token  # needed for batched (padded) generation
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.sampling, self.history_window, self.seed = sampling, history_window, seed
        self.prompt_spec = prompt_spec
        self.share_prefix = share_prefix
        self.engine = engine or pick_engine(model)  # "static" runs anywhere; only CUDA compiles its step
        self.sampling_weights = SamplingWeights(model, merge=merge_lora)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad or not trainable_only)

    def prompt(self, episode: EpisodeState) -> str:
        """The exact text the model reads for ``episode``'s current turn."""
        return self.prompt_for(episode.game, episode.env.task, episode.turns)

    def prompt_for(self, game: str, task: str, turns: Sequence[Turn]) -> str:
        """The text the model reads after ``turns`` (the last one not yet acted on) of ``game`` with
        the task text ``task``: a live episode's prompt, or one rebuilt from a finished
        :class:`~tutorial_lib.evaluation.episodes.EpisodeRecord` (``record.game, record.task, record.turns[:t + 1]``)."""
        messages = build_messages(game, task, turns, history_window=self.history_window, spec=self.prompt_spec)
        return render_chat(self.tokenizer, messages)

    @torch.no_grad()
    def sample(
        self, prompts: Sequence[str], *, max_new_tokens: int = 32, sampling: str | dict | None = None
    ) -> list[Sample]:
        """Complete every prompt in one batched call to the engine; token ids and log-probs included."""
        # a preset's name, or its generate settings themselves (RL at another temperature, chapter 6)
        preset = sampling if isinstance(sampling, dict) else SAMPLING[sampling or self.sampling]
        rows = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        # a static cache is allocated by generate for whole prompts: no shared start to hand it
        share = self.share_prefix and self.engine != "static"
        shared, groups = shared_prefixes(rows) if share else (0, [])
        shared = shared if shared >= MIN_SHARED_PREFIX else 0
        batch = pad_prompt_ids(rows, self.tokenizer.pad_token_id, shared_prefix=shared).to(self.device)
        if self.seed is not None and preset["do_sample"]:
            torch.manual_seed(self.seed)
            self.seed += 1  # a fresh but reproducible stream for the next call
        model = self.sampling_weights.model()  # LoRA merged into a copy where possible (engine module)
        was_training = self.model.training
        self.model.eval()
        try:
            # Prefix sharing. The prompts of one game start alike (instructions, task: 72 of
            # GuessTheNumber's ~100 tokens, 85 of CookingWorld's ~300; tic-tac-toe's ~120 in two
            # versions, one per mark). On a CPU the prefill of 32 prompts is most of a turn's time,
            # so each distinct start runs once and its cache is copied to its rows; ``generate``
            # then runs only the rest. The logits are those of the full prompts up to float
            # rounding (tests check).
            cache = self._prefix_cache(model, batch["input_ids"][:, :shared], groups) if shared else None
            # The sampler chooses each token and keeps its log-probability (tutorial_lib.lm.sampling):
            # cheaper than generate's own sampling, and no per-step (batch, vocab) scores are kept.
            sampler = TokenSampler(preset)
            if self.engine == "compact":
                new_tokens, logprobs = decode(model, batch, sampler, max_new_tokens=max_new_tokens,
                                              eos_token_id=self.tokenizer.eos_token_id,
                                              pad_token_id=self.tokenizer.pad_token_id, cache=cache)
            elif self.engine == "static" and batch["input_ids"].device.type == "xla":
                # XLA: every shape fixed and no read per token (generate's loop would compile each step)
                batch, real = bucketed(batch, self.tokenizer.pad_token_id)
                new_tokens, logprobs = static_decode(model, batch, sampler, max_new_tokens=max_new_tokens,
                                                     eos_token_id=self.tokenizer.eos_token_id,
                                                     pad_token_id=self.tokenizer.pad_token_id)
                new_tokens, logprobs = new_tokens[:real], logprobs[:real]
            else:
                new_tokens = self._generate(model, batch, cache, sampler, max_new_tokens)
                logprobs = sampler.logprobs(new_tokens.shape[1])[: new_tokens.shape[0]]  # real rows only
        finally:
            self.model.train(was_training)
        lengths = _action_lengths(new_tokens, self.tokenizer.eos_token_id)
        action_ids = [row[:n].tolist() for row, n in zip(new_tokens, lengths)]
        texts = self.tokenizer.batch_decode(action_ids, skip_special_tokens=True)
        prompt_ids = [list(row) for row in rows]
        return [
            Sample(text, prompt, action, row[:n].tolist())
            for text, prompt, action, row, n in zip(texts, prompt_ids, action_ids, logprobs, lengths)
        ]

    def _generate(self, model, batch, cache, sampler: TokenSampler, max_new_tokens: int) -> torch.Tensor:
        """The new tokens of ``generate`` (the ``generate`` and ``static`` engines), on the CPU.

        ``generate`` runs greedy over the sampler's one finite score; the checkpoint's generation
        config cannot add a penalty or a warper of its own (do_sample and the penalty are set)."""
        static, rows = {}, batch["input_ids"].shape[0]
        if self.engine == "static":
            # shapes in buckets, so that the step compiled for one turn serves the next ones
            batch, rows = bucketed(batch, self.tokenizer.pad_token_id)
            static = {"cache_implementation": "static"}
        with warnings.catch_warnings():
            # some transformers releases warn that generate's past_key_values is to be called
            # cache; the old name still works and says nothing the reader can act on
            warnings.filterwarnings("ignore", message="`past_key_values` is deprecated", category=FutureWarning)
            sequences = model.generate(
                **batch,
                **({CACHE_KEYWORD: cache} if cache is not None else {}),
                **static,
                do_sample=False,
                repetition_penalty=1.0,
                logits_processor=LogitsProcessorList([sampler]),
                max_new_tokens=max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
            )
        # With left padding every prompt ends at the same column, so new tokens start there.
        return sequences[:rows, batch["input_ids"].shape[1] :].cpu()  # one transfer, not one per row

    def _prefix_cache(self, model, prefix_ids: torch.Tensor, groups: list[int]):
        """The key/value cache of every row's ``prefix_ids``, computed once per group of equal rows."""
        first = {g: i for i, g in reversed(list(enumerate(groups)))}  # one row per group, by group id
        distinct = prefix_ids[[first[g] for g in range(len(first))]]
        base = unwrap_peft(model)
        # only the cache is wanted: skip the (n, vocab) logits where the model allows it
        extra = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(base.forward).parameters else {}
        output = model(input_ids=distinct, attention_mask=torch.ones_like(distinct), use_cache=True, **extra)
        cache = output[CACHE_KEYWORD]
        cache.batch_select_indices(torch.tensor(groups, device=prefix_ids.device))
        return cache

    def generate(
        self, prompts: Sequence[str], *, max_new_tokens: int = 32, sampling: str | None = None
    ) -> list[str]:
        """Complete every prompt in one batched call to the engine; returns the new text only."""
        return [s.text for s in self.sample(prompts, max_new_tokens=max_new_tokens, sampling=sampling)]

    def act_samples(self, episodes: Sequence[EpisodeState], *, sampling: str | dict | None = None) -> list[Sample]:
        """One :class:`Sample` per live episode, from one batched call to the engine."""
        if not episodes:
            return []
        max_new = max(MAX_NEW_TOKENS.get(e.game, 32) for e in episodes)
        return self.sample([self.prompt(e) for e in episodes], max_new_tokens=max_new, sampling=sampling)

    def act(self, episodes: Sequence[EpisodeState]) -> list[str]:
        return [s.text for s in self.act_samples(episodes)]


def _action_lengths(tokens: torch.Tensor, eos_token_id: int) -> list[int]:
    """Per row: tokens up to and including the first end-of-sequence token (all if there is none).

    After a row's end of sequence ``generate`` pads it (with ``pad_token_id``, which may equal the
    eos id) while longer rows go on; those pads were never sampled and belong to no action.
    """
    is_eos = tokens == eos_token_id
    first = is_eos.int().argmax(dim=1)  # index of the first eos (0 when there is none)
    return torch.where(is_eos.any(dim=1), first + 1, tokens.shape[1]).tolist()

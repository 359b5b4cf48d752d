"""Policies: anything that turns a batch of game states into a batch of action texts (chapters 1-2).

    actions = policy.act(episodes)      # one action text per live episode

A :class:`LanguagePolicy` builds each episode's prompt, renders it with the tokenizer's chat
template and makes ONE batched ``generate`` call for the whole batch. The baselines --
:class:`RandomPolicy` and :class:`ExpertPolicy` -- implement the same method, so the evaluation
harness treats every policy alike.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .envs.base import TextEnv
from .prompts import Turn, build_messages, render_chat
from .tokenization import left_padded_batch

#: sampling presets of the GSM8K PPO tutorial
SAMPLING: dict[str, dict[str, Any]] = {
    "greedy": dict(do_sample=False),
    "standard": dict(do_sample=True, temperature=0.7, top_k=50, top_p=0.95),
    "liberal": dict(do_sample=True, temperature=0.85, top_k=2000, top_p=1.0),
}

#: how many tokens an action may take, per game (math needs room for its working)
MAX_NEW_TOKENS: dict[str, int] = {"tictactoe": 16, "cookingworld": 16, "guess_the_number": 16, "math": 128}


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
    default (see :mod:`tutorial_lib.prompts`).
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        name: str = "",
        sampling: str = "greedy",
        history_window: int | None = None,
        seed: int | None = None,
    ) -> None:
        if sampling not in SAMPLING:
            raise ValueError(f"unknown sampling preset {sampling!r}; choose one of {', '.join(SAMPLING)}")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token  # needed for batched (padded) generation
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.sampling, self.history_window, self.seed = sampling, history_window, seed

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad or not trainable_only)

    def prompt(self, episode: EpisodeState) -> str:
        """The exact text the model reads for ``episode``'s current turn."""
        messages = build_messages(episode.game, episode.env.task, episode.turns, history_window=self.history_window)
        return render_chat(self.tokenizer, messages)

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[str], *, max_new_tokens: int = 32, sampling: str | None = None
    ) -> list[str]:
        """Complete every prompt with ONE batched ``generate`` call; returns the new text only."""
        preset = SAMPLING[sampling or self.sampling]
        batch = left_padded_batch(self.tokenizer, prompts, self.device)
        if self.seed is not None and preset["do_sample"]:
            torch.manual_seed(self.seed)
            self.seed += 1  # a fresh but reproducible stream for the next call
        was_training = self.model.training
        self.model.eval()
        output = self.model.generate(
            **batch,
            **preset,
            max_new_tokens=max_new_tokens,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
        )
        self.model.train(was_training)
        # With left padding every prompt ends at the same column, so new tokens start there.
        new_tokens = output[:, batch["input_ids"].shape[1] :]
        return self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)

    def act(self, episodes: Sequence[EpisodeState]) -> list[str]:
        if not episodes:
            return []
        games = {e.game for e in episodes}
        max_new = max(MAX_NEW_TOKENS.get(g, 32) for g in games)
        return self.generate([self.prompt(e) for e in episodes], max_new_tokens=max_new)

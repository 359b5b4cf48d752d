"""Collecting episodes for RL, and scoring their actions under the current weights (chapter 5 on).

    rollout = collect(policy, "guess_the_number", seeds=range(64), num_envs=32)
    rollout.summary()        # episodes, turns, action tokens, mean return, success / invalid rate, seconds
    rollout.turns[0]         # TurnSample: prompt_ids, action_ids, logprobs, reward, terminated, ...
    batch = collate_turns(rollout.turns, tokenizer.pad_token_id)
    scores = action_logprobs(policy.model, batch)   # with gradients: the trainer's side

Holds the *collect* phase of every RL algorithm (REINFORCE, PPO, GRPO) and the tensor plumbing
of the *update* phase: :class:`TurnBatch`, :func:`action_logprobs`. Imports ``lm`` and
``evaluation``. Chapter 5 teaches why N games advance together (one batched ``generate`` per turn,
``benchmarks/rollout_throughput.py`` measures it), why prompts are padded on the left, and why the
sampler's log-probs are kept: the importance ratio's denominator is known only to the sampler, and
recomputing it (``tests/test_rollout.py``, to 1e-4) is how a run notices a sampler that is not the
policy. :class:`TurnSample` keeps ``terminated`` (the game ended: nothing to bootstrap) apart from
``truncated`` (cut by a turn limit: a critic bootstraps, chapter 6), as the game's ``step`` returned them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol

import torch

from tutorial_lib.evaluation.episodes import EpisodeRecord, run_episodes
from tutorial_lib.evaluation.evaluate import summarize
from tutorial_lib.lm.lm_parts import body_hidden_states, output_logits
from tutorial_lib.lm.sampling import SAMPLING
from tutorial_lib.lm.tokenization import positions_from_mask
from tutorial_lib.rl.packed_games import games_in_micro_batches, pack_games


class TokenizedTurn(Protocol):
    """What :func:`collate_turns` needs of a turn (a :class:`~tutorial_lib.lm.policies.Sample` or a
    :class:`TurnSample`)."""

    prompt_ids: list[int]
    action_ids: list[int]
    logprobs: list[float]


@dataclass(frozen=True)
class TurnSample:
    """One acted turn of a rollout, flattened for training."""

    #: index of the episode in :attr:`Rollout.records`, and of the turn within it
    episode: int
    turn: int
    prompt_ids: list[int]
    action_ids: list[int]
    #: the sampler's log-probability of each action token
    logprobs: list[float]
    reward: float
    #: the game could not parse the action, or it was illegal
    invalid: bool
    #: the game ended at this turn (an end state) ...
    terminated: bool
    #: ... or was cut by its turn limit at this turn
    truncated: bool

    @property
    def last(self) -> bool:
        """The episode's final turn (every collected episode is played to its end)."""
        return self.terminated or self.truncated


@dataclass
class Rollout:
    """Finished episodes from :func:`collect`, with per-turn views for training."""

    records: list[EpisodeRecord]
    #: wall-clock time the collection took
    seconds: float
    #: every process's episodes, once :func:`~tutorial_lib.rl.whole_batch.whole_batch` has gathered them
    everyone: Rollout | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def turns(self) -> list[TurnSample]:
        """Every acted turn of every episode, episode by episode."""
        return [turn for index, record in enumerate(self.records) for turn in _turn_samples(index, record)]

    @property
    def returns(self) -> list[float]:
        """Undiscounted return of each episode."""
        return [r.episode_return for r in self.records]

    @property
    def lengths(self) -> list[int]:
        """Turns of each episode."""
        return [r.length for r in self.records]

    def summary(self) -> dict[str, float]:
        """The harness's metrics (:func:`~tutorial_lib.evaluation.evaluate.summarize`) plus sizes and speed."""
        turns = len(self.turns)
        tokens = sum(len(t.action_ids) for t in self.turns)
        return {
            **summarize(self.records),
            "turns": turns,
            "action_tokens": tokens,
            "mean_action_tokens": tokens / turns,
            "seconds": self.seconds,
            "turns_per_second": turns / self.seconds,
            "tokens_per_second": tokens / self.seconds,
        }


def _turn_samples(index: int, record: EpisodeRecord) -> list[TurnSample]:
    if len(record.samples) != record.length:
        raise ValueError(
            f"episode {index} (seed {record.seed}) has {len(record.samples)} samples for {record.length} "
            "turns: was it played by a policy without act_samples?"
        )
    final = record.length - 1
    return [
        TurnSample(
            episode=index,
            turn=t,
            prompt_ids=sample.prompt_ids,
            action_ids=sample.action_ids,
            logprobs=sample.logprobs,
            reward=record.rewards[t],
            invalid=record.invalid[t],
            terminated=record.terminated and t == final,
            truncated=record.truncated and t == final,
        )
        for t, sample in enumerate(record.samples)
    ]


def collect(
    policy,
    game: str,
    seeds: Iterable[int],
    *,
    env_options: dict[str, Any] | None = None,
    num_envs: int = 32,
    turn_budget: int | None = None,
    sampling: str | None = "rl",
    temperature: float | None = None,
    progress: bool | str = False,
) -> Rollout:
    """Play episodes with ``num_envs`` games side by side, one batched ``generate`` per turn.

    One episode per seed; with ``turn_budget``, new episodes stop starting once that many turns are
    played (the GEM recipe: "collect until a batch of turns is full"), so pass more seeds than you
    expect to need. ``temperature`` overrides the preset's (the trainer must then score with the
    same temperature, :func:`action_logprobs`). ``sampling`` names the preset of :data:`~tutorial_lib.lm.sampling.SAMPLING` to
    sample with (``None``: the policy's own); the default ``rl`` samples from the model itself, so
    that the sampler is the policy being trained. ``policy`` must offer ``act_samples`` (a
    :class:`~tutorial_lib.lm.policies.LanguagePolicy` does).
    """
    if not hasattr(policy, "act_samples"):
        raise TypeError(f"{type(policy).__name__} has no act_samples: RL needs token ids and log-probs")
    # Bind the preset for this call only: the caller's policy keeps its own preset and seed stream.
    if temperature is not None:

        if sampling is None or not SAMPLING[sampling].get("do_sample"):
            raise ValueError("temperature needs a sampling preset that samples (e.g. 'rl')")
        sampling = {**SAMPLING[sampling], "temperature": temperature}
    sampler = policy if sampling is None else _WithPreset(policy, sampling)
    start = time.perf_counter()
    records = run_episodes(
        game,
        sampler,
        seeds,
        env_options=env_options,
        batch_size=num_envs,
        turn_budget=turn_budget,
        progress=progress,
    )
    return Rollout(records, time.perf_counter() - start)


@dataclass
class _WithPreset:
    """``policy``, sampling with another preset."""

    policy: Any
    sampling: str | dict

    def act_samples(self, episodes):
        return self.policy.act_samples(episodes, sampling=self.sampling)


# -- the trainer's side: scoring actions under the current weights ------------------------------
def round_up(width: int, multiple: int) -> int:
    """``width`` rounded up to a multiple of ``multiple`` (1: unchanged)."""
    return -(-width // multiple) * multiple


def action_columns(turns: Sequence[TokenizedTurn], multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``action_mask`` (bool) and ``sampler_logprobs`` (0 outside the mask), (turns, A), each
    action right-aligned on the last ``A`` columns (``A`` = longest action, rounded up to a multiple
    of ``multiple``: XLA's few fixed shapes): the per-token layout of :func:`collate_turns`, without
    the token ids."""
    if not turns:
        raise ValueError("no turns to collate")
    actions = max(len(t.action_ids) for t in turns)
    if actions == 0:
        raise ValueError("no action tokens to score")
    actions = round_up(actions, multiple)
    action_mask = torch.zeros((len(turns), actions), dtype=torch.bool)
    sampler_logprobs = torch.zeros((len(turns), actions), dtype=torch.float32)
    for row, turn in enumerate(turns):
        n = len(turn.action_ids)
        if n:
            action_mask[row, actions - n :] = True
            sampler_logprobs[row, actions - n :] = torch.tensor(turn.logprobs)
    return action_mask, sampler_logprobs


def collate_turns(turns: Sequence[TokenizedTurn], pad_token_id: int, multiple: int = 1) -> dict[str, torch.Tensor]:
    """Batch ``prompt + action`` sequences for a forward pass, laid out as ``generate`` saw them.

    Rows are *left*-padded, so every action ends in the last column and all action tokens lie in
    the last ``A`` columns (``A`` = longest action): the model then needs logits for those columns
    only (``logits_to_keep``), not a (batch, length, vocab) tensor that for a large vocabulary
    would not fit in memory.

    Returns ``input_ids``, ``attention_mask`` and ``position_ids`` (batch, length), with positions
    counted from each row's first real token as ``generate`` counts them; and, right-aligned on the
    last ``A`` columns, ``action_mask`` (bool) and ``sampler_logprobs`` (0 outside the mask).
    ``multiple`` > 1 rounds both widths up to its multiples (more left padding, masked out), so
    that a compiling device (XLA) sees a few shapes (:func:`~tutorial_lib.runtime.device.shape_multiple`).
    """
    action_mask, sampler_logprobs = action_columns(turns, multiple)  # checks for turns and action tokens
    # one column more than the actions: the logit that predicts the first action token
    width = round_up(max(max(len(t.prompt_ids) + len(t.action_ids) for t in turns), action_mask.shape[1] + 1), multiple)
    input_ids = torch.full((len(turns), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(turns), width), dtype=torch.long)
    for row, turn in enumerate(turns):
        ids = turn.prompt_ids + turn.action_ids
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention_mask[row, width - len(ids) :] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": positions_from_mask(attention_mask),  # numbered as generate numbered them
        "action_mask": action_mask,
        "sampler_logprobs": sampler_logprobs,
    }


@dataclass
class TurnBatch:
    """Turns collated once for an update, with what the algorithm attaches to each turn.

    ``T`` turns, ``A`` tokens in the longest action. Per-token tensors are right-aligned on ``A``
    columns, as :func:`collate_turns` lays them out (0 outside ``action_mask``). The token ids are
    collated per micro-batch (:meth:`model_inputs`), each padded to its own longest row, since one
    long prompt would otherwise pad every forward pass of the update.

    REINFORCE fills ``advantages``; PPO also ``old_logprobs``, ``old_values`` and ``returns``.
    ``multiple``: the widths are rounded up to its multiples (:func:`collate_turns`), on XLA.
    """

    turns: list[TurnSample]
    pad_token_id: int
    action_mask: torch.Tensor  # (T, A) bool: which columns hold an action token
    sampler_logprobs: torch.Tensor  # (T, A) log pi_sampler(a_t), recorded while sampling
    advantages: torch.Tensor | None = None  # (T,) one per turn, shared by its action tokens
    old_logprobs: torch.Tensor | None = None  # (T, A) log pi_old(a_t): the policy before this update
    old_values: torch.Tensor | None = None  # (T,) V_old(s): the critic before this update
    returns: torch.Tensor | None = None  # (T,) the critic's regression targets
    multiple: int = 1  # widths rounded up to multiples of this (XLA's fixed shapes)
    packed: bool = False  # one row per game, not per turn (packed_games)

    @classmethod
    def of(cls, turns: Sequence[TurnSample], pad_token_id: int, multiple: int = 1, packed: bool = False,
           **tensors: torch.Tensor) -> TurnBatch:
        """Collate ``turns``; ``tensors`` (e.g. ``advantages=``) are attached as they are. ``packed``:
        each game's turns in one row (:mod:`~tutorial_lib.rl.packed_games`)."""
        return cls(list(turns), pad_token_id, *action_columns(turns, multiple), multiple=multiple,
                   packed=packed, **tensors)  # token ids: per micro-batch

    def __len__(self) -> int:
        return len(self.turns)

    @property
    def action_tokens(self) -> int:
        """Action tokens in the batch: what a per-token loss is averaged over."""
        return int(self.action_mask.sum())

    def select(self, rows: torch.Tensor | Sequence[int]) -> TurnBatch:
        """The turns at ``rows`` (a minibatch), per-token tensors trimmed to their longest action."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        width = round_up(int(self.action_mask[rows].sum(1).max()), self.multiple)

        def take(tensor):
            if tensor is None:
                return None
            return tensor[rows, -width:] if tensor.dim() == 2 else tensor[rows]

        return TurnBatch([self.turns[i] for i in rows.tolist()], self.pad_token_id, multiple=self.multiple,
                         packed=self.packed, **{f.name: take(getattr(self, f.name)) for f in fields(self)
                                                if f.name not in ("turns", "pad_token_id", "multiple", "packed")})

    def microbatch_rows(self, size: int) -> list[torch.Tensor]:
        """The rows of each micro-batch of at most ``size`` turns, turns of like length together.

        Each micro-batch is padded to its own longest turn. In game order a game's first turn (a
        short prompt) sits beside its last (the whole history), so much of every forward pass would
        be padding; sorted by length, almost none is. The gradients add up to the same step however
        the turns are grouped (micro-batches are memory, not maths). Packed, a micro-batch holds
        whole games (:func:`~tutorial_lib.rl.packed_games.games_in_micro_batches`).
        """
        if self.packed:
            return [torch.tensor(rows) for rows in games_in_micro_batches(self.turns, size)]
        lengths = torch.tensor([len(t.prompt_ids) + len(t.action_ids) for t in self.turns])
        return list(torch.sort(lengths, stable=True).indices.split(size))

    def split(self, size: int) -> Iterator[TurnBatch]:
        """Micro-batches of at most ``size`` turns, in :meth:`microbatch_rows`' groups."""
        for rows in self.microbatch_rows(size):
            yield self.select(rows)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """``input_ids``, ``attention_mask``, ``position_ids`` and ``action_mask`` for a forward pass:
        a row per turn, or packed, a row per game and where each action token's state lies in it."""
        if self.packed:
            return {**pack_games(self.turns, self.pad_token_id, self.action_mask.shape[1], self.multiple),
                    "action_mask": self.action_mask}
        return collate_turns(self.turns, self.pad_token_id, self.multiple)

    def to(self, device: torch.device | str) -> TurnBatch:
        """The same batch with its tensors on ``device``."""
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self)
                                if isinstance(getattr(self, f.name), torch.Tensor)})


@dataclass
class ActionScores:
    """Per action token, right-aligned like ``action_mask``; 0 outside the mask."""

    #: log pi(a_t | prompt, a_<t) under the current weights (carries gradients)
    logprobs: torch.Tensor
    #: entropy of the next-token distribution at each action token (``None`` unless asked)
    entropy: torch.Tensor | None = None
    #: (batch, hidden) last-layer hidden state at each row's last prompt token: the state in which
    #: the action was chosen, what a value head reads (``None`` unless asked)
    state_hidden: torch.Tensor | None = None


def state_positions(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Column of each row's last prompt token in a :func:`collate_turns` batch (actions are
    right-aligned, so it is ``length - 1 - action length``)."""
    return batch["input_ids"].shape[1] - 1 - batch["action_mask"].sum(1)


def token_entropy(log_probs: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each distribution over the last dimension, from its log-probabilities,
    with a gradient that stays finite.

    A token whose probability underflows to exactly 0 in float32 (log-prob below ~-104: a
    pretrained model's logit gaps exceed that once divided by a temperature of 0.5) adds 0, as
    -p log p should. ``torch.special.entr(p)`` also gives 0 there, but its gradient is -(log p + 1)
    = inf at p = 0, and inf x (dp/dlog p = 0) is NaN: one such token turns the whole step's
    gradient into NaN, even with an entropy coefficient of 0 (0 x NaN is NaN). Here such tokens
    (and tokens masked to -inf) contribute a constant 0 instead.
    """
    probs = log_probs.exp()
    finite_log_probs = log_probs.masked_fill(probs == 0, 0.0)
    return -(probs * finite_log_probs).sum(-1)


def action_logprobs(
    model,
    batch: dict[str, torch.Tensor],
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_gradient: bool = False,
    with_state_hidden: bool = False,
) -> ActionScores:
    """Log-probs of the action tokens of a :func:`collate_turns` batch under ``model``'s weights.

    Runs with gradients unless the caller disables them, so REINFORCE / PPO can backpropagate
    through the result. ``temperature`` divides the logits first, as sampling did; with top-k /
    top-p the sampler renormalised over fewer tokens, which this (the policy's full distribution)
    does not (see :class:`~tutorial_lib.lm.policies.Sample`). Dropout makes a model in training mode
    score differently from the sampler, which ran in eval mode.

    The body runs over every column, the output layer only over the action columns: a
    (batch, length, vocab) logits tensor would not fit in memory for a large vocabulary.
    ``with_state_hidden`` also returns the hidden state a value head reads (PPO, chapter 6).
    ``with_entropy`` returns each action token's entropy as a measurement, outside autograd; only an
    entropy bonus needs its gradient (``entropy_gradient``). Its full-vocabulary graph would otherwise
    triple what the output layer keeps for backpropagation, for a gradient of exact zeros when the
    bonus's coefficient is 0 (``benchmarks/entropy_graph.py``).

    ``batch`` may also be packed (:func:`~tutorial_lib.rl.packed_games.pack_games`: a row per game);
    its ``score_rows`` and ``score_columns`` then say where each action token's state lies, and the
    scores come back in the same (turns, A) layout.
    """
    hidden = body_hidden_states(model, batch)  # (batch, length, hidden)
    mask = batch["action_mask"].to(hidden.device)  # (batch, A)
    actions = mask.shape[1]
    if "score_columns" in batch:  # packed games (packed_games): each state wherever its game put it
        states = hidden[batch["score_rows"].to(hidden.device), batch["score_columns"].to(hidden.device)]
        targets = batch["action_ids"].to(hidden.device)
    else:
        # the logit at column c predicts the token at c + 1: the last `actions` tokens need the
        # logits of the `actions + 1` last columns but the final one
        states = hidden[:, -actions - 1 : -1]  # (batch, A, hidden)
        targets = batch["input_ids"][:, -actions:].to(hidden.device)
    logits = output_logits(model, states)  # (turns, A, vocab)
    log_probs = (logits / temperature).log_softmax(-1)
    chosen = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy or entropy_gradient:
        with torch.set_grad_enabled(entropy_gradient and torch.is_grad_enabled()):
            entropy = token_entropy(log_probs).masked_fill(~mask, 0.0)
    state_hidden = None
    if with_state_hidden:
        turns = torch.arange(mask.shape[0], device=hidden.device)
        if "score_columns" in batch:  # the state that predicts the first action token
            state_hidden = states[turns, (actions - mask.sum(1)).clamp(max=actions - 1).to(hidden.device)]
        else:
            state_hidden = hidden[turns, state_positions(batch).to(hidden.device)]
    return ActionScores(chosen.masked_fill(~mask, 0.0), entropy, state_hidden)


@torch.no_grad()
def turn_logprobs(model, turns: Sequence[TokenizedTurn], pad_token_id: int, *, microbatch_turns: int = 64,
                  temperature: float = 1.0) -> list[float]:
    """Total log-probability of each turn's action under ``model``'s current weights, scored in
    micro-batches without gradients (what a trainer's ratio would use at unchanged weights)."""
    totals: list[float] = []
    for start in range(0, len(turns), microbatch_turns):
        batch = collate_turns(turns[start : start + microbatch_turns], pad_token_id)
        totals += action_logprobs(model, batch, temperature=temperature).logprobs.sum(1).tolist()
    return totals

"""A game's turns scored in one forward pass: the history every turn repeats, computed once.

    inputs = pack_games(turns, pad_token_id, actions=A)   # one row per game, not per turn
    scores = action_logprobs(model, inputs)                # the same (turns, A) log-probs

A turn's prompt repeats the game so far. Turn 5 of GuessTheNumber reads the instructions and turns
1-4, which turn 4 read too, up to its own last lines; scored row by row
(:func:`~tutorial_lib.rl.rollout.collate_turns`), a 1-50 game of five turns of 106 to 238 tokens
passes 872 tokens through the model for five short answers. Packed, a game is one sequence: its
longest turn (the *main* one, usually the last) whole, then each other turn's *tail*, the tokens
after the longest start it shares with the main one::

    main turn:  [instructions | turn 1 > 25 | turn 2 > 37 | turn 3 > 31 | Now: turn 4 ... > 34]
    turn 3:     main[:p3], then its own tail [Now: turn 3 ... > 31]

A 4D attention mask lets each tail token see the first ``p`` tokens of the main turn and its own
tail before it, nothing else; each token is numbered at its position in its own turn (the rotary
position its own row gives it). So every action token's log-prob is the one its own row gives, the
same maths up to the rounding of a different summation: the packing is exact, and a game of
GuessTheNumber passes about half the tokens (``benchmarks/pretrained_rl_cost.py``: the ``packed
games`` rows). The update's cost is its tokens, so that is the saving.

The turns are laid out for :func:`~tutorial_lib.rl.rollout.action_logprobs`: ``score_rows`` and
``score_columns`` (turns, A) give the packed position of the state that predicts each action token,
right-aligned on ``A`` columns like ``action_mask``, and ``action_ids`` the tokens themselves.
``RLSettings.pack_games`` switches it on; micro-batches then hold whole games
(:meth:`~tutorial_lib.rl.rollout.TurnBatch.microbatch_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch


class GameTurn(Protocol):
    """What packing needs of a turn (a :class:`~tutorial_lib.rl.rollout.TurnSample`)."""

    episode: int
    prompt_ids: list[int]
    action_ids: list[int]


def shared_start(a: Sequence[int], b: Sequence[int]) -> int:
    """How many first ids ``a`` and ``b`` have in common."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class PackedGame:
    """One game's turns as one sequence.

    ``segments``: ``(start, end, shared)`` for each stretch of the sequence: its tokens see the
    first ``shared`` tokens of the main turn (``[0, shared)``) and the stretch itself up to them.
    ``scores[k]``: for turn ``k``'s action tokens in order, the packed index of the state that
    predicts each (the token before it in its own turn)."""

    ids: list[int]
    positions: list[int]
    segments: list[tuple[int, int, int]]
    scores: list[list[int]]


def pack_game(turns: Sequence[GameTurn]) -> PackedGame:
    """Lay ``turns`` (one game's, any order) out as one sequence: the longest turn whole, then each
    other turn's tokens after the start it shares with that one. A turn always keeps its action
    tokens in its own tail, so the share stops at its prompt's end."""
    if not turns:
        raise ValueError("no turns to pack")
    sequences = [list(turn.prompt_ids) + list(turn.action_ids) for turn in turns]
    if any(not turn.prompt_ids for turn in turns):
        raise ValueError("a turn without prompt tokens has no state to predict its first action token from")
    main = max(range(len(turns)), key=lambda k: len(sequences[k]))
    ids = list(sequences[main])
    positions = list(range(len(ids)))
    segments = [(0, len(ids), 0)]
    scores: list[list[int]] = []
    for k, (turn, sequence) in enumerate(zip(turns, sequences)):
        prompt = len(turn.prompt_ids)
        if k == main:
            where = list(range(len(sequence)))
        else:
            shared = min(shared_start(sequence, sequences[main]), prompt)
            start = len(ids)
            ids += sequence[shared:]
            positions += range(shared, len(sequence))
            segments.append((start, len(ids), shared))
            where = list(range(shared)) + list(range(start, len(ids)))
        # the state at the token before each action token predicts it
        scores.append([where[j - 1] for j in range(prompt, len(sequence))])
    return PackedGame(ids, positions, segments, scores)


def visibility(game: PackedGame, width: int) -> torch.Tensor:
    """(width, width) bool: which packed tokens each token attends to. Columns past the game (its
    padding) see only themselves, so no row is empty (an empty row is NaN in attention, and a NaN
    value times a weight of 0 is still NaN for every row that masks it out)."""
    allowed = torch.zeros((width, width), dtype=torch.bool)
    for start, end, shared in game.segments:
        allowed[start:end, start:end] = torch.ones((end - start, end - start), dtype=torch.bool).tril()
        allowed[start:end, :shared] = True
    padding = torch.arange(len(game.ids), width)
    allowed[padding, padding] = True
    return allowed


def rows_by_game(turns: Sequence[GameTurn]) -> list[list[int]]:
    """The rows of ``turns`` grouped by ``episode``, games in order of first appearance."""
    games: dict[int, list[int]] = {}
    for row, turn in enumerate(turns):
        games.setdefault(turn.episode, []).append(row)
    return list(games.values())


def pack_games(turns: Sequence[GameTurn], pad_token_id: int, actions: int, multiple: int = 1) -> dict[str, torch.Tensor]:
    """``turns`` grouped by ``episode`` into one row per game, for a forward pass.

    Returns ``input_ids`` and ``position_ids`` (games, width), ``attention_mask`` (games, 1, width,
    width) bool (True: attends), and per turn, right-aligned on ``actions`` columns as
    :func:`~tutorial_lib.rl.rollout.collate_turns` lays them out, ``score_rows`` and
    ``score_columns`` (where the state predicting each action token sits) and ``action_ids``.
    ``multiple`` > 1 rounds the width up to its multiples (XLA's few shapes)."""
    packed = [(rows, pack_game([turns[row] for row in rows])) for rows in rows_by_game(turns)]
    width = max(len(game.ids) for _, game in packed)
    width = -(-width // multiple) * multiple
    input_ids = torch.full((len(packed), width), pad_token_id, dtype=torch.long)
    position_ids = torch.zeros((len(packed), width), dtype=torch.long)
    attention_mask = torch.zeros((len(packed), 1, width, width), dtype=torch.bool)
    score_rows = torch.zeros((len(turns), actions), dtype=torch.long)
    score_columns = torch.zeros((len(turns), actions), dtype=torch.long)
    action_ids = torch.full((len(turns), actions), pad_token_id, dtype=torch.long)
    for g, (rows, game) in enumerate(packed):
        input_ids[g, : len(game.ids)] = torch.tensor(game.ids)
        position_ids[g, : len(game.positions)] = torch.tensor(game.positions)
        attention_mask[g, 0] = visibility(game, width)
        for row, where in zip(rows, game.scores):
            n = len(where)
            if n > actions:
                raise ValueError(f"a turn has {n} action tokens for {actions} columns")
            if n:
                score_rows[row, actions - n :] = g
                score_columns[row, actions - n :] = torch.tensor(where)
                action_ids[row, actions - n :] = torch.tensor(turns[row].action_ids)
    return {"input_ids": input_ids, "position_ids": position_ids, "attention_mask": attention_mask,
            "score_rows": score_rows, "score_columns": score_columns, "action_ids": action_ids}


def games_in_micro_batches(turns: Sequence[GameTurn], size: int) -> list[list[int]]:
    """The rows of ``turns`` in micro-batches of whole games, games of like length together, at most
    ``size`` turns each unless one game alone has more (a game is never split: its turns share the
    pass that computes their common history)."""
    def longest(rows: list[int]) -> int:
        return max(len(turns[row].prompt_ids) + len(turns[row].action_ids) for row in rows)

    batches: list[list[int]] = []
    for rows in sorted(rows_by_game(turns), key=longest):
        if batches and len(batches[-1]) + len(rows) <= size:
            batches[-1] += rows
        else:
            batches.append(list(rows))
    return batches

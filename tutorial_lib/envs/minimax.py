"""The minimax player: perfect play for tic-tac-toe, by negamax over OpenSpiel states (chapters 1, 3, 7).

Tic-tac-toe's ``minimax`` opponent and its ``expert_action`` play :func:`minimax_move`; chapter 3's
expert data and chapter 7's move reward read the values of :func:`minimax_values`. (Each game's
own expert, e.g. CookingWorld's gold path, is its environment's ``expert_action``; turning expert
play into SFT examples is :mod:`tutorial_lib.data.expert_data`.)

Negamax is minimax written once for both players: in a two-player zero-sum game the value of a
position for the player to move is the maximum over moves of *minus* the value of the resulting
position for the opponent. Tic-tac-toe has only 5,478 reachable positions but about 550,000
move orders reach them, so the values are memoised by position (the board and the player to
move), not by history: the first call solves the whole game in well under a second, and every
later call is a dictionary look-up.
"""

from __future__ import annotations

import random

import pyspiel

# (board text, player to move) -> value of that position for the player to move
_VALUE_CACHE: dict[tuple[str, int], int] = {}


def _key(state: pyspiel.State) -> tuple[str, int]:
    return str(state), state.current_player()


def _value(state: pyspiel.State) -> int:
    """Game-theoretic value (+1 / 0 / -1) of a non-terminal state for the player to move."""
    key = _key(state)
    if key not in _VALUE_CACHE:
        _VALUE_CACHE[key] = max(_action_values(state).values())
    return _VALUE_CACHE[key]


def _action_values(state: pyspiel.State) -> dict[int, int]:
    player = state.current_player()
    values = {}
    for action in state.legal_actions():
        child = state.child(action)
        if child.is_terminal():
            values[action] = round(child.returns()[player])
        else:
            # players alternate, so the child's player to move is the opponent: negate
            values[action] = -_value(child)
    return values


def minimax_values(state: pyspiel.State) -> dict[int, int]:
    """Value of each legal action for the player to move: +1 win, 0 draw, -1 loss."""
    if state.is_terminal():
        raise ValueError("minimax_values needs a state that is not terminal")
    return _action_values(state)


def minimax_actions(state: pyspiel.State) -> list[int]:
    """All optimal actions (every tie), sorted by action id."""
    values = minimax_values(state)
    best = max(values.values())
    return sorted(action for action, value in values.items() if value == best)


def minimax_move(state: pyspiel.State, rng: random.Random | None = None) -> int:
    """One optimal action: a random one of the ties when ``rng`` is given, else the lowest id.

    Breaking ties at random matters for imitation: a deterministic expert shows the learner only
    one line of play, and its games all look alike.
    """
    actions = minimax_actions(state)
    return rng.choice(actions) if rng is not None else actions[0]

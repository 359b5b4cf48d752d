"""Tic-tac-toe as single moves with a verifiable reward: GRPO's kind of task (chapter 7).

    dataset = position_dataset(range(200))         # positions of random games, the policy's prompts
    result = train_grpo(policy, settings, out_dir="runs/grpo-ttt", dataset=dataset, reward=minimax_reward,
                        game="tictactoe")

GRPO scores a group of answers to one prompt and needs no critic, which suits tasks where an
answer can be checked on the spot (a math result, a unit test). A whole game of tic-tac-toe is not
such a task: its reward arrives at the end, after the opponent's replies. A single move is: the
game is small enough to solve, so the value of every move is known exactly (:mod:`tutorial_lib.envs.minimax`,
negamax). :func:`minimax_reward` gives a move the value of the position it leads to under perfect
play by both sides (+1 a forced win, 0 a draw, -1 a forced loss), and -1 to text that names no
legal move (as the ``forfeit`` rule of chapters 5 and 6 does). A move that throws away a draw or a
win scores below its group's mean, whatever the opponent in front of it would have done.

The positions come from games in which *both* sides play uniformly random legal moves (against
the ``random`` opponent), so they cover the board far more widely than the expert data did; the
prompt of each is built as :class:`~tutorial_lib.lm.policies.LanguagePolicy` builds it in a game.
Evaluation stays the whole game, against opponents the positions never came from (minimax).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

import pyspiel

from tutorial_lib import envs
from tutorial_lib.envs.minimax import minimax_values
from tutorial_lib.envs.parsing import parse_tictactoe_move
from tutorial_lib.envs.tictactoe import legal_moves
from tutorial_lib.lm.prompts import Turn, build_messages
from tutorial_lib.rl.grpo import completion_text, train_grpo

GAME = "tictactoe"
#: reward of text that names no legal move (the forfeit rule's loss)
INVALID_REWARD = -1.0
#: random games whose decisive positions make the training set (400 give ~1,000 positions, more
#: than a ``ci`` run's 40 steps x 16 prompts draw)
TRAINING_GAMES = 400


def position_dataset(seeds: Iterable[int], *, env_options: dict[str, Any] | None = None, decisive: bool = False):
    """Every position in which the agent moves in one random game per seed, as TRL's conversational
    ``prompt`` with the ``moves`` played so far (OpenSpiel action ids) for :func:`minimax_reward`.

    ``env_options`` as for ``envs.make("tictactoe", ...)``; ``agent_mark`` defaults to
    ``"alternate"`` (x on even seeds, o on odd ones). The agent's own moves are uniformly random,
    drawn from a generator seeded by the seed. ``decisive=True`` keeps only the positions where the
    choice matters (the legal moves do not all have the same value): in the others every answer of
    a group that names a legal move scores alike, and GRPO learns nothing from the group.
    """
    import datasets

    options = {"opponent": "random", "agent_mark": "alternate", **(env_options or {})}
    env = envs.make(GAME, **options)
    rows = []
    for seed in seeds:
        observation, info = env.reset(seed=seed)
        rng, turns = random.Random(seed), []
        while True:
            turns.append(Turn(observation, info=info))
            state = env.state
            if not decisive or len(set(minimax_values(state).values())) > 1:
                rows.append({
                    "prompt": build_messages(GAME, env.task, turns),
                    "moves": [int(a) for a in state.history()],
                    "mark": env.mark,
                    "seed": int(seed),
                })
            action = env.random_action(rng)
            turns[-1].action = action
            observation, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
    if not rows:
        raise ValueError("no seeds: the dataset would be empty")
    return datasets.Dataset.from_list(rows)


def move_state(moves: Sequence[int]) -> pyspiel.State:
    """The OpenSpiel state after ``moves`` (action ids, as in the ``moves`` column) from the empty board."""
    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    for action in moves:
        state.apply_action(int(action))
    return state


def score_move(moves: Sequence[int], text: str) -> tuple[float, dict[str, Any]]:
    """The reward of ``text`` as the next move after ``moves``, and what it was (never raises on ``text``).

    ``info``: ``valid`` (a legal move of the player to move), ``optimal`` (as good as the best
    move), ``value`` (the move's value, ``None`` when invalid) and ``best`` (the position's value).
    """
    state = move_state(moves)
    if state.is_terminal():
        raise ValueError(f"the game after moves {list(moves)} is over: no move to score")
    values = minimax_values(state)
    best = max(values.values())
    parsed = parse_tictactoe_move(text if isinstance(text, str) else "")
    legal = legal_moves(state)
    if not parsed.ok or parsed.value not in legal:
        return INVALID_REWARD, {"valid": False, "optimal": False, "value": None, "best": best}
    value = values[legal[parsed.value]]
    return float(value), {"valid": True, "optimal": value == best, "value": value, "best": best}


def minimax_reward(completions: Sequence[Any], moves: Sequence[Sequence[int]], log_metric=None,
                   **kwargs) -> list[float]:
    """TRL reward function: each completion's move scored by :func:`score_move` (+1 / 0 / -1).

    ``moves`` is a column of :func:`position_dataset`, which TRL passes by name. With TRL's
    ``log_metric``, the batch's share of legal moves (``valid_rate``) and of optimal moves
    (``optimal_rate``) are logged too.
    """

    if len(moves) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(moves)} positions")
    rewards, valid, optimal = [], 0, 0
    for completion, history in zip(completions, moves):
        reward, info = score_move(history, completion_text(completion))
        rewards.append(reward)
        valid += info["valid"]
        optimal += info["optimal"]
    if log_metric is not None and rewards:
        log_metric("valid_rate", valid / len(rewards))
        log_metric("optimal_rate", optimal / len(rewards))
    return rewards


def train_grpo_on_moves(policy, settings, *, out_dir, games: int = TRAINING_GAMES, progress: bool = True,
                        env_options: dict[str, Any] | None = None):
    """GRPO (:func:`tutorial_lib.rl.grpo.train_grpo`) on the decisive positions of ``games`` random
    games from seed ``settings.first_seed`` on (far from the evaluation seeds 0, 1, 2...), rewarded
    by :func:`minimax_reward`. ``settings.max_completion_length`` should leave room for the worked
    lines a chapter 4 policy writes before its move (``MAX_NEW_TOKENS["tictactoe"]``)."""

    seeds = range(settings.first_seed, settings.first_seed + games)
    dataset = position_dataset(seeds, env_options=env_options, decisive=True)
    return train_grpo(policy, settings, out_dir=out_dir, progress=progress, dataset=dataset, reward=minimax_reward,
                      game=GAME)

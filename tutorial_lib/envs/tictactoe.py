"""Tic-tac-toe against a built-in opponent, as a text game (chapter 1 teaches it).

The agent writes ``<move>x(1,2)</move>``; the opponent (random, MCTS or minimax) replies inside
the same ``step``, so from the agent's side this is a single-player environment. The game itself
is OpenSpiel's ``tic_tac_toe``; its action strings (``x(row,col)``) are the move format.

    env = TicTacToeEnv(opponent="mcts", agent_mark="alternate")
    observation, info = env.reset(seed=3)
    observation, reward, terminated, truncated, info = env.step(env.expert_action())
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pyspiel
from open_spiel.python.algorithms import mcts

from tutorial_lib.envs.base import StepResult, TextEnv
from tutorial_lib.envs.minimax import minimax_move
from tutorial_lib.envs.parsing import parse_tictactoe_move

MOVE_FORMAT_EXAMPLE = "<move>x(1,2)</move>"

OPPONENTS = ("random", "mcts", "minimax", "mixed")
AGENT_MARKS = ("x", "o", "alternate")
INVALID_MOVE_MODES = ("random", "forfeit")
_OUTCOME_TEXT = {"win": "You win.", "draw": "Draw.", "loss": "You lose."}


def board_text(state: pyspiel.State) -> str:
    """The board with one token per square, e.g. ``"Board:\\n. . .\\n. x .\\n. . o"``.

    OpenSpiel prints rows as ``"..x"``; spacing the marks apart keeps a tokenizer from merging
    squares (``"..x"`` may be one token), so the model sees each square separately.
    """
    rows = str(state).splitlines()
    return "Board:\n" + "\n".join(" ".join(row) for row in rows)


#: the eight lines of three squares, as (row, col) triples
LINES = [tuple((r, c) for c in range(3)) for r in range(3)] + [tuple((r, c) for r in range(3)) for c in range(3)] + [
    ((0, 0), (1, 1), (2, 2)), ((0, 2), (1, 1), (2, 0))]


def _board_rows(board: str) -> list[list[str]]:
    """The 3x3 cells of ``board_text``'s text (or of a prompt holding it)."""
    rows = [line.split() for line in board.split("Board:")[-1].strip().splitlines()[:3]]
    if len(rows) != 3 or any(len(row) != 3 or any(cell not in "xo." for cell in row) for row in rows):
        raise ValueError(f"not a tic-tac-toe board: {board!r}")
    return rows


def _completion(cells: list[str], mark: str) -> int | None:
    """The index of the empty cell with which ``mark`` completes this line of three, if any."""
    return cells.index(".") if cells.count(mark) == 2 and cells.count(".") == 1 else None


def completing_squares(board: str, mark: str) -> set[tuple[int, int]]:
    """The empty squares where ``mark`` would complete three in a row, read from ``board_text``'s
    text (or a prompt holding it): where ``mark`` wins by playing now, or, for the opponent's mark,
    where the player to move must block (chapter 4 counts how often a policy does either)."""
    rows = _board_rows(board)
    squares = set()
    for line in LINES:
        index = _completion([rows[r][c] for r, c in line], mark)
        if index is not None:
            squares.add(line[index])
    return squares


def worked_lines(board: str) -> str:
    """The board's eight lines written out, each followed by the square that completes it.

    ``". . o - . x . - ... o x . -"``: rows top to bottom, then columns, then the two diagonals
    (:data:`LINES`' order); after each line's three cells, the move that would complete it
    (``o(0,2)``, with the mark of the player who has two there) or ``-``. Written before the move
    in tic-tac-toe's SFT completions (``GameSettings.worked_lines``): a model trained from scratch
    that must find "two of a kind and an empty square" in one step did not learn it, but it learns
    to copy each cell (a fixed distance back in the prompt) and to judge three cells it has just
    written (chapter 4). No label and no separators: every token here is written at every turn of
    training, sampling and evaluation, and a line is always four words. (A first version, with
    ``"Lines: "`` in front and ``" | "`` between lines, was 11 tokens longer and did not learn
    better: benchmarks/results/sft_recipe.md.)
    """
    rows = _board_rows(board)
    parts = []
    for line in LINES:
        cells = [rows[r][c] for r, c in line]
        verdict = "-"
        for mark in "xo":
            index = _completion(cells, mark)
            if index is not None:
                verdict = f"{mark}({line[index][0]},{line[index][1]})"
                break
        parts.append(f"{' '.join(cells)} {verdict}")
    return " ".join(parts)


def task_text(mark: str) -> str:
    """The instructions for the player of ``mark`` (also used to build expert data).

    Short on purpose: it is repeated in every prompt, and with a small model every token of
    boilerplate is compute not spent on the board.
    """
    first = "you move first" if mark == "x" else "x moves first"
    return (
        f"Tic-tac-toe: you play {mark} ({first}). Three in a row, column or diagonal wins. "
        f"Rows and columns are numbered 0 to 2 from the top left; '.' is empty. "
        f"Write your move as <move>{mark}(row,col)</move>."
    )


def legal_moves(state: pyspiel.State) -> dict[str, int]:
    """The player to move's legal moves, as {OpenSpiel action string (``"x(1,2)"``): action id}."""
    if state.is_terminal():
        return {}
    player = state.current_player()
    return {state.action_to_string(player, a): a for a in state.legal_actions()}


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")


def _check_positive(name: str, value: Any, kind: type) -> None:
    # bool is a subclass of int, but True simulations is a bug, not a number
    if isinstance(value, bool) or not isinstance(value, (kind, int)) or not value > 0:
        raise ValueError(f"{name} must be a positive {kind.__name__}; got {value!r}")


class TicTacToeEnv(TextEnv):
    """Tic-tac-toe for one agent against a built-in opponent.

    Args:
        opponent: ``"random"`` (uniform legal moves), ``"mcts"`` (OpenSpiel's ``MCTSBot`` with
            random rollouts), ``"minimax"`` (perfect play, random among optimal moves) or
            ``"mixed"`` (each game against random or minimax, half and half, drawn from the seed:
            an RL opponent that offers wins and punishes every mistake; ``info["opponent"]`` names
            the game's).
        agent_mark: ``"x"`` (moves first), ``"o"``, or ``"alternate"``: x on even seeds, o on odd
            ones, so an evaluation over many seeds covers both sides (x when the seed is None).
        mcts_simulations, mcts_uct_c, mcts_rollouts: the MCTS opponent's settings.
        invalid_move: what happens when the agent's text does not parse or names an illegal
            move. ``"random"`` plays a uniformly random legal move for it (the OpenSpiel
            tutorial's fallback); ``"forfeit"`` ends the game as a loss.

    Reward is +1 / 0 / -1 for a win / draw / loss on the step that ends the game, 0 otherwise.
    """

    name = "tictactoe"

    def __init__(
        self,
        opponent: str = "random",
        agent_mark: str = "x",
        mcts_simulations: int = 1000,
        mcts_uct_c: float = 2 * math.sqrt(2),
        mcts_rollouts: int = 1,
        invalid_move: str = "random",
    ) -> None:
        super().__init__()
        _check_choice("opponent", opponent, OPPONENTS)
        _check_choice("agent_mark", agent_mark, AGENT_MARKS)
        _check_choice("invalid_move", invalid_move, INVALID_MOVE_MODES)
        _check_positive("mcts_simulations", mcts_simulations, int)
        _check_positive("mcts_uct_c", mcts_uct_c, float)
        _check_positive("mcts_rollouts", mcts_rollouts, int)
        self.opponent = opponent
        self._game_opponent = opponent  # the opponent of the game being played ("mixed" draws one per game)
        self.agent_mark = agent_mark
        self.mcts_simulations = int(mcts_simulations)
        self.mcts_uct_c = float(mcts_uct_c)
        self.mcts_rollouts = int(mcts_rollouts)
        self.invalid_move = invalid_move

        self._game = pyspiel.load_game("tic_tac_toe")
        self._state = self._game.new_initial_state()
        self._mark = "o" if agent_mark == "o" else "x"
        self._opponent_rng = random.Random(0)
        self._mcts_bot: mcts.MCTSBot | None = None

    # -- what the agent sees ------------------------------------------------------------------
    @property
    def task(self) -> str:
        return task_text(self._mark)

    @property
    def state(self) -> pyspiel.State:
        """A copy of the OpenSpiel state (for experts and tests; changing it changes nothing)."""
        return self._state.clone()

    @property
    def mark(self) -> str:
        """The agent's mark in the current episode."""
        return self._mark

    # -- the episode --------------------------------------------------------------------------
    def _reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        if self.agent_mark == "alternate":
            self._mark = "o" if seed is not None and seed % 2 == 1 else "x"
        else:
            self._mark = self.agent_mark
        self._agent = 0 if self._mark == "x" else 1  # OpenSpiel: player 0 is x and moves first
        self._state = self._game.new_initial_state()

        # The opponent draws from its own generator, seeded from the reset seed, so that calling
        # expert_action() (which uses self._rng) never changes what the opponent plays.
        opponent_seed = self._rng.getrandbits(32)
        self._opponent_rng = random.Random(opponent_seed)
        self._game_opponent = self.opponent
        if self.opponent == "mixed":
            self._game_opponent = self._opponent_rng.choice(("random", "minimax"))
        if self.opponent == "mcts":
            random_state = np.random.RandomState(opponent_seed)
            self._mcts_bot = mcts.MCTSBot(
                self._game,
                uct_c=self.mcts_uct_c,
                max_simulations=self.mcts_simulations,
                evaluator=mcts.RandomRolloutEvaluator(self.mcts_rollouts, random_state),
                solve=True,
                random_state=random_state,
            )

        opponent_move = self._opponent_reply() if self._agent == 1 else None
        return board_text(self._state), self._info(opponent_move=opponent_move)

    def _step(self, action_text: str) -> StepResult:
        action, error = self._read_move(action_text)
        if error is not None and self.invalid_move == "forfeit":
            observation = f"{board_text(self._state)}\n{_OUTCOME_TEXT['loss']}"
            info = self._info(error=error, outcome="loss")
            return observation, -1.0, True, False, info
        if action is None:  # invalid, "random" mode: play a random legal move for the agent
            action = self._rng.choice(self._state.legal_actions())
        self._state.apply_action(action)

        opponent_move = None if self._state.is_terminal() else self._opponent_reply()
        observation = board_text(self._state)
        if not self._state.is_terminal():
            info = self._info(error=error, opponent_move=opponent_move)
            return observation, 0.0, False, False, info
        reward = round(self._state.returns()[self._agent])
        outcome = {1: "win", 0: "draw", -1: "loss"}[reward]
        observation = f"{observation}\n{_OUTCOME_TEXT[outcome]}"
        info = self._info(error=error, opponent_move=opponent_move, outcome=outcome)
        return observation, float(reward), True, False, info

    def _read_move(self, action_text: str) -> tuple[int | None, str | None]:
        """The agent's action id, or the reason the text is not a legal move."""
        parsed = parse_tictactoe_move(action_text)
        if not parsed.ok:
            return None, parsed.error
        move = parsed.value
        legal = self._legal_moves()
        if move in legal:
            return legal[move], None
        if not move.startswith(self._mark):
            return None, f"{move} uses the wrong mark: you play {self._mark}"
        row, col = (int(n) for n in move[2:-1].split(","))
        if not (0 <= row <= 2 and 0 <= col <= 2):
            return None, f"{move} is off the board: rows and columns are 0 to 2"
        return None, f"{move} is illegal: square ({row},{col}) is taken"

    def _opponent_reply(self) -> str:
        """Play the opponent's move on the current state and return it as text."""
        player = self._state.current_player()
        if self._game_opponent == "random":
            action = self._opponent_rng.choice(self._state.legal_actions())
        elif self._game_opponent == "minimax":
            action = minimax_move(self._state, self._opponent_rng)
        else:
            assert self._mcts_bot is not None
            action = self._mcts_bot.step(self._state)
        move = self._state.action_to_string(player, action)
        self._state.apply_action(action)
        return move

    def _legal_moves(self) -> dict[str, int]:
        """The agent's legal moves now (the agent is the player to move between steps)."""
        return legal_moves(self._state)

    def _info(
        self,
        error: str | None = None,
        opponent_move: str | None = None,
        outcome: str | None = None,
    ) -> dict[str, Any]:
        info: dict[str, Any] = {
            "valid_actions": [] if outcome else list(self._legal_moves()),
            "mark": self._mark,
            "opponent": self._game_opponent,
            "opponent_move": opponent_move,
            "invalid_action": error is not None,
            "parse_error": error,
        }
        if outcome is not None:
            info["outcome"] = outcome
            info["success"] = outcome == "win"
        return info

    # -- reference policies -------------------------------------------------------------------
    def expert_action(self) -> str:
        """Perfect play (minimax), ties broken at random with the episode's generator."""
        self._require_running()
        action = minimax_move(self._state, self._rng)
        return f"<move>{self._state.action_to_string(self._agent, action)}</move>"

    def random_action(self, rng: random.Random) -> str:
        """A uniformly random legal move, well formed."""
        self._require_running()
        action = rng.choice(self._state.legal_actions())
        return f"<move>{self._state.action_to_string(self._agent, action)}</move>"

    def _require_running(self) -> None:
        if self.done:
            raise RuntimeError("the episode has ended (or not started); call reset() first")

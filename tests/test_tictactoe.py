"""Tests of the tic-tac-toe game and its minimax expert."""

from __future__ import annotations

import random

import pyspiel
import pytest

from tutorial_lib.envs.minimax import minimax_actions, minimax_move, minimax_values
from tutorial_lib.envs.tictactoe import (
    LINES,
    MOVE_FORMAT_EXAMPLE,
    TicTacToeEnv,
    board_text,
    completing_squares,
    worked_lines,
)

GAME = pyspiel.load_game("tic_tac_toe")


def position(*actions: int) -> pyspiel.State:
    """The state after the given action ids (0..8, row-major; x moves first)."""
    state = GAME.new_initial_state()
    for action in actions:
        state.apply_action(action)
    return state


def marks(observation: str, mark: str) -> int:
    """How many of ``mark`` the board in an observation shows."""
    return observation.split().count(mark)


def play(env: TicTacToeEnv, seed: int, policy) -> tuple[list, dict]:
    """Play one episode; return the transcript and the final info."""
    observation, info = env.reset(seed=seed)
    transcript = [observation]
    done = False
    while not done:
        observation, reward, terminated, truncated, info = env.step(policy(env))
        transcript.append((observation, reward))
        done = terminated or truncated
    return transcript, info


# -- board text -------------------------------------------------------------------------------
def test_board_text_one_token_per_square():
    text = board_text(position(4, 8))  # x centre, o bottom-right
    assert text == "Board:\n. . .\n. x .\n. . o"
    rows = text.splitlines()[1:]
    assert len(rows) == 3
    assert all(len(row.split()) == 3 for row in rows)


def test_observation_and_task():
    env = TicTacToeEnv(agent_mark="o")
    observation, info = env.reset(seed=1)
    assert marks(observation, "x") == 1 and marks(observation, "o") == 0  # opponent moved first
    assert info["mark"] == "o" and len(info["valid_actions"]) == 8
    assert all(move.startswith("o(") for move in info["valid_actions"])
    assert "<move>o(row,col)</move>" in env.task and "0 to 2" in env.task
    assert MOVE_FORMAT_EXAMPLE == "<move>x(1,2)</move>"


# -- options ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"opponent": "alphazero"}, "opponent must be one of 'random', 'mcts', 'minimax'"),
        ({"agent_mark": "X"}, "agent_mark must be one of"),
        ({"invalid_move": "skip"}, "invalid_move must be one of 'random', 'forfeit'"),
        ({"mcts_simulations": 0}, "mcts_simulations must be a positive int"),
        ({"mcts_rollouts": True}, "mcts_rollouts must be a positive int"),
        ({"mcts_uct_c": -1.0}, "mcts_uct_c must be a positive float"),
    ],
)
def test_bad_options_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TicTacToeEnv(**kwargs)


def test_alternate_mark_follows_seed_parity():
    env = TicTacToeEnv(agent_mark="alternate")
    assert [env.reset(seed=s)[1]["mark"] for s in range(4)] == ["x", "o", "x", "o"]
    assert env.reset(seed=None)[1]["mark"] == "x"


# -- minimax ----------------------------------------------------------------------------------
def test_minimax_empty_board_is_a_draw():
    assert minimax_values(GAME.new_initial_state()) == {a: 0 for a in range(9)}


def test_minimax_takes_the_win():
    # x: 0, 1; o: 3, 4; x to move. Square 2 completes the top row.
    state = position(0, 3, 1, 4)
    values = minimax_values(state)
    assert values[2] == 1
    assert minimax_actions(state) == [2]  # blocking at 5 only draws
    assert values[8] == -1  # o then completes the middle row


def test_minimax_blocks_the_loss():
    # x: 0, 1; o: 4; o to move and must block square 2, else x wins.
    state = position(0, 4, 1)
    assert minimax_actions(state) == [2]
    assert minimax_values(state)[2] == 0
    assert all(v == -1 for a, v in minimax_values(state).items() if a != 2)


def test_minimax_move_tie_breaking():
    state = GAME.new_initial_state()
    assert minimax_move(state) == 0  # lowest id without rng
    rng = random.Random(0)
    assert len({minimax_move(state, rng) for _ in range(50)}) > 1


def test_minimax_refuses_terminal_state():
    with pytest.raises(ValueError):
        minimax_values(position(0, 3, 1, 4, 2))


# -- play -------------------------------------------------------------------------------------
def expert(env: TicTacToeEnv) -> str:
    return env.expert_action()


@pytest.mark.parametrize("mark", ["x", "o"])
def test_minimax_vs_minimax_always_draws(mark):
    env = TicTacToeEnv(opponent="minimax", agent_mark=mark)
    for seed in range(5):
        transcript, info = play(env, seed, expert)
        assert info["outcome"] == "draw" and transcript[-1][1] == 0.0
        assert transcript[-1][0].endswith("\nDraw.")


def test_expert_never_loses_to_random():
    env = TicTacToeEnv(opponent="random", agent_mark="alternate")
    outcomes = [play(env, seed, expert)[1]["outcome"] for seed in range(100)]
    assert "loss" not in outcomes
    assert outcomes.count("win") > 70


def test_random_vs_random_outcomes_are_plausible():
    # Known rates for uniform random play: x wins ~58%, o ~29%, draws ~13%.
    env = TicTacToeEnv(opponent="random", agent_mark="x")
    rng = random.Random(0)
    outcomes = [
        play(env, seed, lambda e: e.random_action(rng))[1]["outcome"] for seed in range(400)
    ]
    x_wins, o_wins, draws = (outcomes.count(k) for k in ("win", "loss", "draw"))
    assert 0.48 < x_wins / 400 < 0.68 and 0.20 < o_wins / 400 < 0.38 and draws > 20


def test_rewards_and_info_at_the_end():
    env = TicTacToeEnv(opponent="random")
    rng = random.Random(1)
    for seed in range(20):
        transcript, info = play(env, seed, lambda e: e.random_action(rng))
        rewards = [reward for _, reward in transcript[1:]]
        assert all(r == 0.0 for r in rewards[:-1])
        assert rewards[-1] == {"win": 1.0, "draw": 0.0, "loss": -1.0}[info["outcome"]]
        assert info["success"] == (info["outcome"] == "win")
        assert info["valid_actions"] == []
        assert len(rewards) <= 5


# -- invalid moves ----------------------------------------------------------------------------
def test_unparseable_text_plays_a_random_move():
    env = TicTacToeEnv(opponent="random")
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("I think the centre is best")
    assert info["invalid_action"] and info["parse_error"]
    assert marks(observation, "x") == 1 and marks(observation, "o") == 1  # game went on
    assert not terminated and reward == 0.0 and len(info["valid_actions"]) == 7


def test_forfeit_mode_loses_at_once():
    env = TicTacToeEnv(invalid_move="forfeit")
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("pass")
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert info["outcome"] == "loss" and info["success"] is False and info["invalid_action"]
    assert observation.endswith("\nYou lose.")
    with pytest.raises(RuntimeError):
        env.step("<move>x(1,1)</move>")


def test_wrong_mark_is_invalid():
    env = TicTacToeEnv(invalid_move="forfeit")
    env.reset(seed=0)
    _, reward, _, _, info = env.step("<move>o(1,1)</move>")
    assert info["invalid_action"] and "wrong mark" in info["parse_error"] and reward == -1.0


def test_occupied_and_off_board_squares_are_invalid():
    env = TicTacToeEnv(opponent="minimax")
    env.reset(seed=0)
    _, _, _, _, info = env.step("<move>x(1,1)</move>")
    assert not info["invalid_action"]
    opponent_move = info["opponent_move"]  # e.g. "o(0,0)"
    taken = "x" + opponent_move[1:]
    _, _, _, _, info = env.step(f"<move>{taken}</move>")
    assert info["invalid_action"] and "taken" in info["parse_error"]
    env.reset(seed=0)
    _, _, _, _, info = env.step("<move>x(3,0)</move>")
    assert info["invalid_action"] and "off the board" in info["parse_error"]


@pytest.mark.parametrize("invalid_move", ["random", "forfeit"])
def test_a_row_or_column_too_long_for_int_is_an_invalid_move(invalid_move):
    # int() refuses more than 4,300 digits: this text used to raise ValueError out of step()
    env = TicTacToeEnv(agent_mark="o", invalid_move=invalid_move)
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("<move>o(2," + "9" * 5000 + ")</move>")
    assert info["invalid_action"] and "row/column number too long" in info["parse_error"]
    if invalid_move == "random":  # the game went on, with a random move played for the agent
        assert marks(observation, "o") == 1 and not terminated and reward == 0.0
    else:
        assert terminated and reward == -1.0 and info["outcome"] == "loss"
    # a long-ish number is read, and is off the board
    env.reset(seed=0)
    _, _, _, _, info = env.step("<move>o(2,999999)</move>")
    assert info["invalid_action"] and "off the board" in info["parse_error"]


def test_step_after_the_end_raises():
    env = TicTacToeEnv()
    play(env, 0, expert)
    with pytest.raises(RuntimeError):
        env.step("<move>x(0,0)</move>")


# -- reproducibility --------------------------------------------------------------------------
@pytest.mark.parametrize("opponent", ["random", "mcts", "minimax"])
def test_same_seed_same_game(opponent):
    def run(seed: int, call_expert: bool) -> list:
        env = TicTacToeEnv(opponent=opponent, agent_mark="alternate", mcts_simulations=50)
        rng = random.Random(seed)

        def policy(e: TicTacToeEnv) -> str:
            if call_expert:  # consulting the expert must not change the opponent's play
                e.expert_action()
            return e.random_action(rng)

        return play(env, seed, policy)[0]

    for seed in (0, 1):
        assert run(seed, False) == run(seed, False) == run(seed, True)


def test_mcts_opponent_beats_random_agent():
    env = TicTacToeEnv(opponent="mcts", mcts_simulations=50)
    rng = random.Random(0)
    outcomes = [play(env, seed, lambda e: e.random_action(rng))[1]["outcome"] for seed in range(10)]
    assert outcomes.count("win") <= 3


def test_state_property_is_a_copy():
    env = TicTacToeEnv()
    env.reset(seed=0)
    env.state.apply_action(4)
    assert env.state.history() == []


def test_completing_squares_are_the_moves_that_win_at_once():
    """Checked against OpenSpiel on the positions of 200 random games: the squares where the
    player to move completes a line are exactly its moves that end the game with a win; for the
    other mark, exactly the squares that would win for it if it were its turn."""
    rng, checked = random.Random(0), 0
    for _ in range(200):
        state = GAME.new_initial_state()
        while not state.is_terminal():
            player = state.current_player()
            board = board_text(state)
            for who, mark in ((player, "xo"[player]), (1 - player, "xo"[1 - player])):
                winning = set()
                for action in state.legal_actions():
                    cells = list(str(state).replace("\n", ""))
                    cells[action] = mark
                    rows = [cells[i:i + 3] for i in (0, 3, 6)]
                    lines = rows + [list(col) for col in zip(*rows)] + [[rows[i][i] for i in range(3)],
                                                                        [rows[i][2 - i] for i in range(3)]]
                    if [mark] * 3 in lines:
                        winning.add(divmod(action, 3))
                if who == player:  # the same answer from OpenSpiel's own rules
                    assert winning == {divmod(a, 3) for a in state.legal_actions()
                                       if (s := state.child(a)).is_terminal() and s.returns()[player] == 1}
                assert completing_squares(board, mark) == winning
                checked += bool(winning)
            state.apply_action(rng.choice(state.legal_actions()))
    assert checked > 100
    with pytest.raises(ValueError, match="not a tic-tac-toe board"):
        completing_squares("Board:\nx o\n. . .", "x")


def test_worked_lines_copy_every_line_and_name_the_squares_that_complete_them():
    """On the positions of 100 random games: each of the 8 four-word parts holds its line's cells
    as the board shows them, and the squares named after the lines are, for each mark, exactly
    ``completing_squares`` (itself checked against OpenSpiel above)."""
    rng = random.Random(1)
    named_any = 0
    for _ in range(100):
        state = GAME.new_initial_state()
        while not state.is_terminal():
            board = board_text(state)
            text = worked_lines(board)
            words = text.split(" ")
            parts = [words[i:i + 4] for i in range(0, len(words), 4)]
            cells = list(str(state).replace("\n", ""))
            named = {"x": set(), "o": set()}
            assert len(words) == 4 * len(LINES)
            for part, line in zip(parts, LINES):
                *shown, verdict = part
                assert shown == [cells[3 * r + c] for r, c in line]
                if verdict != "-":
                    named[verdict[0]].add((int(verdict[2]), int(verdict[4])))
            for mark in "xo":
                assert named[mark] == completing_squares(board, mark)
            named_any += bool(named["x"] or named["o"])
            state.apply_action(rng.choice(state.legal_actions()))
    assert named_any > 50


def test_the_mixed_opponent_is_random_or_minimax_per_game_drawn_from_the_seed():
    env = TicTacToeEnv(opponent="mixed", agent_mark="alternate")
    drawn = {}
    for seed in range(40):
        _, info = env.reset(seed=seed)
        drawn[seed] = info["opponent"]
    assert set(drawn.values()) == {"random", "minimax"}
    assert 10 <= sum(v == "minimax" for v in drawn.values()) <= 30  # about half and half
    again = TicTacToeEnv(opponent="mixed", agent_mark="alternate")
    assert all(again.reset(seed=seed)[1]["opponent"] == opponent for seed, opponent in drawn.items())
    # a minimax game is a minimax game: it never loses, whatever the agent plays
    minimax_seeds = [seed for seed, opponent in drawn.items() if opponent == "minimax"][:5]
    for seed in minimax_seeds:
        _, info = env.reset(seed=seed)
        done = False
        while not done:  # the first legal move every turn: a poor player
            _, _, terminated, truncated, info = env.step(f"<move>{info['valid_actions'][0]}</move>")
            done = terminated or truncated
        assert info["outcome"] != "win"

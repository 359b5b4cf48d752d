"""Tic-tac-toe as single moves with the minimax reward: chapter 7's GRPO task."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tutorial_lib.envs.minimax import minimax_values
from tutorial_lib.envs.tictactoe import board_text
from tutorial_lib.lm.models import load_policy
from tutorial_lib.rl.grpo import GRPOSettings, train_grpo
from tutorial_lib.rl.tictactoe_moves import (
    INVALID_REWARD,
    minimax_reward,
    move_state,
    position_dataset,
    score_move,
)

from .conftest import SMALL

# x(0,0) o(1,0) x(0,1) o(1,1): x to move; x(0,2) wins, anything but x(1,2) lets o win at once
ATTACK = [0, 3, 1, 4]


def test_a_move_scores_its_value_under_perfect_play():
    assert score_move(ATTACK, "<move>x(0,2)</move>") == (1.0, {"valid": True, "optimal": True, "value": 1, "best": 1})
    reward, info = score_move(ATTACK, "<move>x(2,2)</move>")  # o then completes the middle row
    assert reward == -1.0 and info["valid"] and not info["optimal"]
    # x(1,2) blocks o and keeps a draw-or-better position: its value is what negamax says
    reward, info = score_move(ATTACK, "x(1,2)")
    assert reward == minimax_values(move_state(ATTACK))[5] and info["valid"]


@pytest.mark.parametrize("text", ["<move>o(0,2)</move>", "<move>x(0,0)</move>", "<move>x(3,1)</move>", "", "pass",
                                  "<move>x(2," + "9" * 5000 + ")</move>"])
def test_wrong_mark_taken_off_board_or_garbage_is_invalid_and_scored_as_a_forfeit(text):
    reward, info = score_move(ATTACK, text)
    assert reward == INVALID_REWARD and not info["valid"] and info["value"] is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_no_text_makes_the_reward_raise(text):
    reward, _ = score_move(ATTACK, text)
    assert reward in (-1.0, 0.0, 1.0)


def test_reward_function_logs_legal_and_optimal_shares():
    logged = {}
    rewards = minimax_reward(["<move>x(0,2)</move>", [{"role": "assistant", "content": "<move>x(2,2)</move>"}], "?"],
                             moves=[ATTACK] * 3, log_metric=logged.__setitem__)
    assert rewards == [1.0, -1.0, INVALID_REWARD]
    assert logged == {"valid_rate": pytest.approx(2 / 3), "optimal_rate": pytest.approx(1 / 3)}
    with pytest.raises(ValueError, match="positions"):
        minimax_reward(["a", "b"], moves=[ATTACK])
    with pytest.raises(ValueError, match="is over"):
        score_move([0, 3, 1, 4, 2], "<move>o(2,2)</move>")


def test_positions_are_the_games_own_prompts_and_both_marks_move():
    dataset = position_dataset(range(6))
    assert {row["mark"] for row in dataset} == {"x", "o"}
    for row in dataset:
        state = move_state(row["moves"])
        assert not state.is_terminal()
        assert state.current_player() == (0 if row["mark"] == "x" else 1)
        assert board_text(state) in row["prompt"][-1]["content"]  # the prompt shows the position scored
    assert position_dataset(range(6))["moves"] == dataset["moves"]  # a seed always deals the same game
    with pytest.raises(ValueError, match="empty"):
        position_dataset([])


def test_grpo_trains_on_moves_through_the_same_trainer(tiny_cache, tmp_path):
    torch.manual_seed(0)
    policy = load_policy("tiny", tiny_config=SMALL)
    settings = GRPOSettings(steps=2, prompts_per_step=2, num_generations=4, max_completion_length=12,
                            learning_rate=1e-3)
    result = train_grpo(policy, settings, out_dir=tmp_path, progress=False, dataset=position_dataset(range(4)),
                        reward=minimax_reward, game="tictactoe")
    assert [row["step"] for row in result.history] == [1, 2]
    assert {"valid_rate", "optimal_rate", "invalid_rate", "mean_return"} <= set(result.history[0])
    assert (tmp_path / "model").exists()
    with pytest.raises(ValueError, match="both its dataset and its reward"):
        train_grpo(policy, settings, out_dir=tmp_path / "x", progress=False, game="tictactoe")

import pytest

from tutorial_lib import envs
from tutorial_lib.lm.prompts import Turn, build_messages, build_prompt_text, prompt_spec


def test_registry_names_and_errors():
    assert set(envs.GAMES) == {"tictactoe", "cookingworld", "guess_the_number", "math"}
    assert set(envs.GAME_TITLES) == set(envs.GAMES)  # every game has its name in words
    with pytest.raises(ValueError, match="the games are"):
        envs.make("chess")
    with pytest.raises(TypeError, match="its options are .*preset"):
        envs.make("guess_the_number", difficulty="easy")


def test_prompt_shows_task_window_observation_and_valid_actions():
    turns = [Turn(f"room {i}", f"go {i}") for i in range(5)] + [Turn("kitchen")]
    info = {"valid_actions": ["open fridge", "go west"]}
    text = build_prompt_text("cookingworld", "Cook a meal.", turns, info, history_window=2)
    assert text.startswith("Cook a meal.")
    assert "room 3" in text and "> go 4" in text and "room 2" not in text  # only the last two turns
    assert text.index("Now:\nkitchen") > text.index("> go 4")
    assert "Valid actions: open fridge | go west" in text
    assert text.rstrip().endswith(prompt_spec("cookingworld").answer_format)


def test_window_zero_and_games_without_action_lists():
    turns = [Turn("first", "\\boxed{5}"), Turn("higher")]
    assert "first" not in build_prompt_text("guess_the_number", "Guess.", turns, history_window=0)
    text = build_prompt_text("guess_the_number", "Guess.", turns, {"valid_actions": ["1"]})
    assert "first" in text and "Valid actions" not in text  # GuessTheNumber lists no actions


def test_prompt_errors_and_messages():
    with pytest.raises(ValueError, match="at least the current observation"):
        build_prompt_text("math", "Solve.", [])
    with pytest.raises(ValueError, match="no prompt template"):
        build_prompt_text("chess", "Play.", [Turn("board")])
    with pytest.raises(ValueError, match=">= 0"):
        build_prompt_text("math", "Solve.", [Turn("1+1?")], history_window=-1)
    messages = build_messages("math", "Solve.", [Turn("1+1?")])
    assert messages == [{"role": "user", "content": build_prompt_text("math", "Solve.", [Turn("1+1?")])}]

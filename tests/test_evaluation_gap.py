"""Chapter 8's one library addition: evaluating with a prompt laid out differently from the data's."""

from dataclasses import replace

from tutorial_lib.lm.policies import EpisodeState
from tutorial_lib.lm.prompts import Turn, build_messages, build_prompt_text, prompt_spec, render_chat

RECIPE = "Gather all following ingredients and follow the directions to prepare this tasty meal.\nslice the apple"
TURNS = [
    Turn("You are in the kitchen.", "read cookbook"),
    Turn(RECIPE, "take apple"),
    Turn("You take the apple.", "slice apple"),
    Turn("You slice the apple.", info={"valid_actions": ["prepare meal", "look around"]}),
]
#: the TextWorld tutorial's layout: a window of recent observations, no action list, no memory
WINDOW_ONLY = replace(prompt_spec("cookingworld"), history_window=2, action_history=0, remember_prefix=None)


def test_spec_none_is_the_games_own_spec():
    default = build_prompt_text("cookingworld", "Cook.", TURNS)
    assert build_prompt_text("cookingworld", "Cook.", TURNS, spec=prompt_spec("cookingworld")) == default
    assert "Your actions so far: read cookbook, take apple, slice apple" in default
    assert "Remembered:\n" + RECIPE in default and "Recent turns" not in default


def test_another_spec_changes_the_layout():
    text = build_prompt_text("cookingworld", "Cook.", TURNS, spec=WINDOW_ONLY)
    assert "Your actions so far" not in text and "Remembered" not in text
    # the last two (observation, action) pairs, then the current observation
    assert "Recent turns:\n" + RECIPE + "\n> take apple\nYou take the apple.\n> slice apple" in text
    assert "read cookbook" not in text
    assert "Now:\nYou slice the apple." in text and "Valid actions: prepare meal | look around" in text
    # history_window still overrides the spec's window
    assert RECIPE not in build_prompt_text("cookingworld", "Cook.", TURNS, spec=WINDOW_ONLY, history_window=1)
    assert build_messages("cookingworld", "Cook.", TURNS, spec=WINDOW_ONLY) == [{"role": "user", "content": text}]


def test_language_policy_plays_with_its_prompt_spec(tiny_policy):
    class Env:
        task = "Cook."

    episode = EpisodeState("cookingworld", Env(), TURNS)
    assert tiny_policy.prompt_spec is None
    default = render_chat(tiny_policy.tokenizer, build_messages("cookingworld", "Cook.", TURNS))
    assert tiny_policy.prompt(episode) == default
    tiny_policy.prompt_spec = WINDOW_ONLY
    try:
        expected = render_chat(tiny_policy.tokenizer, build_messages("cookingworld", "Cook.", TURNS, spec=WINDOW_ONLY))
        assert tiny_policy.prompt(episode) == expected != default
    finally:
        tiny_policy.prompt_spec = None

"""No text a model can write may crash a game, and no integer-like seed may either.

Model output is arbitrary text: an untrained policy writes 5,000-digit numbers, NUL bytes, lone
surrogates and megabytes of one character. The base protocol (``tutorial_lib/envs/base.py``) says
``step`` never raises on the text's content; the property tests below hold every game's ``step`` to
that, with strategies aimed at the places parsers break: long digit runs inside otherwise
well-formed answers (``<move>x(…,…)</move>``, ``\\boxed{…}``, ``#### …``; Python's ``int()`` refuses
strings of more than 4,300 digits), very long strings, control characters and surrogates.

CookingWorld starts a JVM, so one env serves the whole module and its properties run few examples.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tutorial_lib import envs
from tutorial_lib.envs.parsing import (
    parse_boxed_integer,
    parse_final_answer,
    parse_text_action,
    parse_tictactoe_move,
)

# -- strategies ---------------------------------------------------------------------------------
#: digits as ``\d`` sees them: ASCII and a few other scripts (Arabic-Indic, Devanagari, maths bold)
DIGITS = "0123456789" + "٠١٢٣٤٥٦٧٨٩" + "०१२३४५६७८९" + "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗"
NONZERO = [d for d in DIGITS if int(d) != 0]
#: past this many digits ``int(str)`` raises ValueError (sys.get_int_max_str_digits())
INT_STR_LIMIT = 4300


def digit_runs(min_size: int, max_size: int) -> st.SearchStrategy[str]:
    """A number of ``min_size`` to ``max_size`` digits that does not start with 0 (built by
    repetition: Hypothesis draws long text slowly)."""

    def build(lead: str, chunk: str, size: int) -> str:
        return lead + (chunk * (size // len(chunk) + 1))[: size - 1]

    return st.builds(
        build,
        st.sampled_from(NONZERO),
        st.text(st.sampled_from(DIGITS), min_size=1, max_size=6),
        st.integers(min_size, max_size),
    )


HUGE_NUMBERS = digit_runs(INT_STR_LIMIT + 1, INT_STR_LIMIT + 1500)
#: every character there is, surrogates included (st.text leaves them out unless asked)
ANY_CHAR = st.characters(exclude_categories=())
WEIRD_CHARS = st.one_of(
    st.characters(categories=["Cs"]),  # lone surrogates, e.g. '\ud800'
    st.characters(categories=["Cc"]),  # control characters: NUL, escape, DEL, \x85 (a line break)
    st.sampled_from(["\x00", "\u2028", "\u2029", "\ufeff", "\u200b", "\U0010ffff", "\r", "\x0b"]),
)
#: text around an answer that cannot itself hold an answer
PADDING = st.text(st.characters(exclude_characters="()<>{}#\\", exclude_categories=()), max_size=12)
SPACE = st.sampled_from(["", " ", "  ", "\t", "\n"])


def long_text(min_size: int = 1_000, max_size: int = 60_000) -> st.SearchStrategy[str]:
    """Very long text: a short chunk of any characters repeated."""
    return st.builds(
        lambda chunk, size: (chunk * (size // len(chunk) + 1))[:size],
        st.text(ANY_CHAR, min_size=1, max_size=8),
        st.integers(min_size, max_size),
    )


ANSWER_FRAGMENTS = st.sampled_from(
    ["<move>", "</move>", "x(", "o(", ",", ")", "\\boxed{", "}", "####", "$", "1,000", ".", "-", "\n", " " * 50]
)
HOSTILE_TEXT = st.one_of(
    st.text(ANY_CHAR),
    st.text(WEIRD_CHARS, min_size=1),
    long_text(),
    st.lists(st.one_of(ANSWER_FRAGMENTS, WEIRD_CHARS, HUGE_NUMBERS, long_text(100, 3_000)), max_size=8).map("".join),
)


@st.composite
def tictactoe_moves_with_a_long_number(draw, numbers=HUGE_NUMBERS) -> str:
    """``<move>x(…,…)</move>`` (or the bare form) with a long number as its row, column or both."""
    long_one = draw(numbers)
    other = draw(st.one_of(numbers, st.sampled_from("012")))
    row, col = (long_one, other) if draw(st.booleans()) else (other, long_one)
    mark = draw(st.sampled_from("xoXO"))
    s = [draw(SPACE) for _ in range(5)]
    move = f"{mark}{s[0]}({s[1]}{row}{s[2]},{s[3]}{col}{s[4]})"
    if draw(st.booleans()):
        move = f"<move>{draw(SPACE)}{move}{draw(SPACE)}</move>"
    else:
        move = " " + move  # the bare form starts at a word boundary
    return draw(PADDING) + move + draw(PADDING)


@st.composite
def boxed_long_numbers(draw, numbers=HUGE_NUMBERS) -> str:
    # GEM's form, digits alone in the braces: a sign or a space makes it no guess at all
    return draw(PADDING) + f"\\boxed{{{draw(numbers)}}}" + draw(PADDING)


@st.composite
def final_answers_with_long_numbers(draw, numbers=HUGE_NUMBERS) -> str:
    digits = draw(numbers)
    point = draw(st.sampled_from([len(digits), len(digits) // 2, 1]))  # where the "." goes, if any
    whole, fraction = digits[:point], digits[point:]
    if draw(st.booleans()):  # thousands separators, as in "#### 1,200"
        whole = ",".join(whole[i : i + 3] for i in range(0, len(whole), 3))
    number = f"{whole}.{fraction}" if fraction else whole
    prefix = draw(st.sampled_from(["", "$", "-", "$ -"]))
    return draw(PADDING) + f"####{draw(SPACE)}{prefix}{number}" + draw(PADDING)


def check_step_result(result) -> dict:
    """A well-formed ``step`` result; returns its info."""
    assert isinstance(result, tuple) and len(result) == 5
    observation, reward, terminated, truncated, info = result
    assert isinstance(observation, str)
    assert isinstance(reward, float) and math.isfinite(reward)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert isinstance(info, dict) and isinstance(info["invalid_action"], bool)
    assert (info["parse_error"] is None) == (not info["invalid_action"])
    return info


FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- the parsers --------------------------------------------------------------------------------
@FAST
@given(
    tictactoe_moves_with_a_long_number(),
    boxed_long_numbers(),
    final_answers_with_long_numbers(),
)
def test_parsers_reject_numbers_too_long_for_int(move, boxed, answer):
    for parse, text in [
        (parse_tictactoe_move, move),
        (parse_boxed_integer, boxed),
        (parse_final_answer, answer),
    ]:
        result = parse(text)
        assert not result.ok and result.value is None
        assert "too long" in result.error


@settings(max_examples=60, deadline=None)
@given(HOSTILE_TEXT)
def test_parsers_never_raise_on_hostile_text(text):
    for parse in (parse_tictactoe_move, parse_boxed_integer, parse_final_answer, parse_text_action):
        result = parse(text)
        assert result.ok == (result.error is None)
    parse_text_action(text, ["look around", "take cookbook"])


@pytest.mark.parametrize(
    "text",
    [
        "####" + " " * 20_000 + "x",  # quadratic in the regex "####\s*\$?\s*": 9 s before the fix
        "#### $" + " " * 20_000 + "x",
        ("####" + " " * 300) * 60,
        "<move>x(" + " " * 20_000,
        "x(1," * 20_000,
        "\\boxed{" + " " * 20_000,
        "#### " + "1," * 20_000 + ".",
    ],
)
def test_parsers_take_linear_time(text):
    for parse in (parse_tictactoe_move, parse_boxed_integer, parse_final_answer, parse_text_action):
        start = time.perf_counter()
        parse(text)
        assert time.perf_counter() - start < 1.0, parse.__name__


# -- tic-tac-toe --------------------------------------------------------------------------------
TICTACTOE_OPTIONS = [
    dict(opponent="random"),
    dict(opponent="minimax", agent_mark="o"),
    dict(opponent="mcts", mcts_simulations=8, agent_mark="alternate"),
    dict(opponent="minimax", invalid_move="forfeit"),
]


@pytest.mark.parametrize("options", TICTACTOE_OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_tictactoe_long_numbers_are_invalid_moves(options):
    env = envs.make("tictactoe", **options)

    @FAST
    @given(tictactoe_moves_with_a_long_number(), st.integers(0, 2**32))
    def check(text, seed):
        env.reset(seed=seed)
        info = check_step_result(env.step(text))
        assert info["invalid_action"] is True
        assert "too long" in info["parse_error"]
        if options.get("invalid_move") == "forfeit":
            assert env.done and info["outcome"] == "loss"

    check()


@pytest.mark.parametrize("options", TICTACTOE_OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_tictactoe_moves_off_the_board_are_invalid(options):
    env = envs.make("tictactoe", **options)

    @FAST
    @given(tictactoe_moves_with_a_long_number(digit_runs(2, 40)), st.integers(0, 2**32))
    def check(text, seed):
        env.reset(seed=seed)
        info = check_step_result(env.step(text))
        assert info["invalid_action"] is True

    check()


# -- GuessTheNumber and math ----------------------------------------------------------------------
@FAST
@given(boxed_long_numbers(digit_runs(3, INT_STR_LIMIT + 1500)), st.integers(0, 10**6))
def test_guess_the_number_long_numbers_are_invalid_guesses(text, seed):
    env = envs.make("guess_the_number", preset="hard")
    env.reset(seed=seed)
    info = check_step_result(env.step(text))
    assert info["invalid_action"] is True and not info.get("success")


@FAST
@given(final_answers_with_long_numbers(digit_runs(50, INT_STR_LIMIT + 1500)), st.integers(0, 10**6))
def test_math_long_numbers_are_invalid_answers(text, seed):
    env = envs.make("math")
    env.reset(seed=seed)
    result = env.step(text)
    info = check_step_result(result)
    assert info["invalid_action"] is True and "too long" in info["parse_error"]
    assert result[1] == 0.0  # no format reward either


# -- every game: any text at all --------------------------------------------------------------------
NON_JVM_GAMES = [
    ("tictactoe", dict(opponent="random")),
    ("tictactoe", dict(opponent="minimax", agent_mark="alternate")),
    ("tictactoe", dict(opponent="mcts", mcts_simulations=8)),
    ("guess_the_number", dict(preset="hard")),
    ("math", dict()),
]


@pytest.mark.parametrize(("game", "options"), NON_JVM_GAMES, ids=lambda x: x if isinstance(x, str) else "")
def test_step_never_raises_on_hostile_text(game, options):
    env = envs.make(game, **options)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(HOSTILE_TEXT, min_size=1, max_size=6), st.integers(0, 2**32))
    def check(texts, seed):
        env.reset(seed=seed)
        for text in texts:  # a whole episode of garbage, so mid-game states are reached too
            check_step_result(env.step(text))
            if env.done:
                break

    check()


# -- CookingWorld: one JVM for the module -------------------------------------------------------------
@pytest.fixture(scope="module")
def cookingworld():
    env = envs.make("cookingworld")
    yield env
    env.close()


COOKINGWORLD = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_cookingworld_never_raises_on_hostile_text(cookingworld):
    @COOKINGWORLD
    @given(st.lists(HOSTILE_TEXT, min_size=1, max_size=4), st.integers(0, 999))
    def check(texts, seed):
        cookingworld.reset(seed=seed)
        all_invalid = True
        for text in texts:
            info = check_step_result(cookingworld.step(text))
            all_invalid &= info["invalid_action"]
            if cookingworld.done:
                break
        # the game still works afterwards: the garbage changed nothing, so the gold path still holds
        if all_invalid and not cookingworld.done:
            info = check_step_result(cookingworld.step(cookingworld.expert_action()))
            assert not info["invalid_action"] and info["valid_actions"]

    check()


def test_cookingworld_weird_characters_make_a_command_invalid(cookingworld):
    @COOKINGWORLD
    @given(st.text(WEIRD_CHARS.filter(lambda c: not c.isspace()), min_size=1, max_size=5), st.integers(0, 999))
    def check(weird, seed):
        cookingworld.reset(seed=seed)
        command = cookingworld.expert_action()
        info = check_step_result(cookingworld.step(command[:3] + weird + command[3:]))
        assert info["invalid_action"] is True
        # the valid command, then a new line of garbage: the first line is the command
        info = check_step_result(cookingworld.step(command + "\n" + weird * 1000))
        assert info["invalid_action"] is False

    check()


# -- seeds: any integer-like value, nothing else ----------------------------------------------------
ALL_GAMES = ["tictactoe", "guess_the_number", "math", "cookingworld"]


@pytest.fixture
def game_env(request, cookingworld):
    if request.param == "cookingworld":
        return cookingworld
    options = dict(agent_mark="alternate") if request.param == "tictactoe" else {}
    return envs.make(request.param, **options)


@pytest.mark.parametrize("game_env", ALL_GAMES, indirect=True)
@pytest.mark.parametrize("seed", [np.int64(7), np.int32(7), np.uint64(7), np.int8(7)], ids=repr)
def test_reset_accepts_integer_like_seeds(game_env, seed):
    observation, info = game_env.reset(seed=seed)
    assert (observation, info) == game_env.reset(seed=7)
    expert_text = game_env.expert_action()
    assert game_env.reset(seed=seed) == (observation, info)
    assert game_env.expert_action() == expert_text  # the same episode, hidden state included


@pytest.mark.parametrize("game_env", ALL_GAMES, indirect=True)
@pytest.mark.parametrize("seed", [1.5, 7.0, "7", b"7", True, np.float64(7), [7]], ids=repr)
def test_reset_rejects_non_integer_seeds(game_env, seed):
    with pytest.raises(TypeError, match=r"seed must be an int .*or None"):
        game_env.reset(seed=seed)

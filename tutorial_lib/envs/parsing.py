"""Reading actions out of model text (chapter 2, *Prompts, tokens and actions*).

Every parser here takes *any* string and returns a :class:`Parsed` -- a value or the reason there is
none. None of them raises: text that does not parse is an ordinary event in RL (an untrained policy
produces little else), so it is counted and penalised by the game, never allowed to crash a rollout.
The property tests in ``tests/test_parsing.py`` feed them arbitrary Unicode to hold them to that, and
``tests/test_hostile_input.py`` adds what breaks parsers in practice: answers that are well formed
except for a number thousands of digits long (Python's ``int()`` refuses more than 4,300), very long
text, control characters and lone surrogates. Every number is therefore length-checked before it
is converted, and every pattern runs in time linear in the text.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """The outcome of parsing: ``value`` when ``error`` is ``None``."""

    value: T | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _fail(reason: str) -> Parsed:
    return Parsed(None, reason)


# -- tic-tac-toe: <move>x(1,2)</move> ----------------------------------------------------------
_MOVE_TAGGED = re.compile(r"<move>\s*([xoXO])\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*</move>")
_MOVE_BARE = re.compile(r"\b([xoXO])\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
#: a row or column written with more digits than this is refused before int() reads it (int() of
#: more than 4,300 digits raises, and is slow long before that). Leading zeros count: no one
#: writes row 1 as 0000001.
_MAX_MOVE_DIGITS = 6


def parse_tictactoe_move(text: str) -> Parsed[str]:
    """Return the move as OpenSpiel writes it, e.g. ``"x(1,2)"``.

    The answer format asks for ``<move>x(1,2)</move>``; a bare ``x(1,2)`` is accepted too, since
    the tags carry no information. The *first* well-formed move counts: a model that keeps talking
    after its answer is not rewarded for a later, different move. Whether the move is legal on the
    current board is the game's decision, not the parser's.
    """
    if not isinstance(text, str):
        return _fail(f"expected text, got {type(text).__name__}")
    match = _MOVE_TAGGED.search(text) or _MOVE_BARE.search(text)
    if match is None:
        return _fail("no move of the form <move>x(row,col)</move>")
    mark, row, col = match.group(1).lower(), match.group(2), match.group(3)
    if max(len(row), len(col)) > _MAX_MOVE_DIGITS:
        return _fail(f"row/column number too long (more than {_MAX_MOVE_DIGITS} digits)")
    return Parsed(f"{mark}({int(row)},{int(col)})")


# -- GuessTheNumber: \boxed{N} -------------------------------------------------------------------
# GEM's own pattern (gem/envs/game_env/guess_the_number.py): digits only, nothing else inside the
# braces: no sign, no spaces. ``\d`` is Python's, so other scripts' decimal digits count as well.
_BOXED_INT = re.compile(r"\\boxed\{(\d+)\}")
# GEM reads the digits with int(), which refuses more than Python's limit on an integer's digits
# (4,300 by default): such an answer is a format error there, and here (and int() stays fast).
_MAX_GUESS_DIGITS = sys.get_int_max_str_digits() or 4300


def parse_boxed_integer(text: str) -> Parsed[int]:
    """Return the integer in the *last* ``\\boxed{N}`` that holds only digits, exactly as GEM's
    GuessTheNumber reads a guess (``\\boxed{ 7 }`` and ``\\boxed{-4}`` are not guesses there)."""
    if not isinstance(text, str):
        return _fail(f"expected text, got {type(text).__name__}")
    matches = _BOXED_INT.findall(text)
    if not matches:
        return _fail("no \\boxed{N} with only digits inside")
    digits = matches[-1]
    if len(digits) > _MAX_GUESS_DIGITS:
        return _fail(f"number too long (more than {_MAX_GUESS_DIGITS} digits)")
    return Parsed(int(digits))


# -- math: the answer after #### -----------------------------------------------------------------
# "\s*(?:\$\s*)?" rather than "\s*\$?\s*": two \s* side by side split a run of spaces every possible
# way before giving up, quadratic in its length ("####" and 20,000 spaces took 9 s).
_FINAL_ANSWER = re.compile(r"####\s*(?:\$\s*)?(-?[\d,]*\.?\d+)")
_MAX_ANSWER_CHARS = 40  # digits, sign and point: far more than any answer; Fraction() of more is slow


def parse_final_answer(text: str) -> Parsed[Fraction]:
    """Return the number after the last ``####`` (GSM8K's convention) as an exact fraction.

    Thousands separators and a leading ``$`` are allowed (``#### $1,200``). Fractions compare
    exactly, so ``#### 3.50`` and ``#### 3.5`` are the same answer.
    """
    if not isinstance(text, str):
        return _fail(f"expected text, got {type(text).__name__}")
    matches = _FINAL_ANSWER.findall(text)
    if not matches:
        return _fail("no number after ####")
    raw = matches[-1].replace(",", "")
    if len(raw) > _MAX_ANSWER_CHARS:
        return _fail(f"number too long (more than {_MAX_ANSWER_CHARS} characters)")
    try:
        return Parsed(Fraction(raw))
    except (ValueError, ZeroDivisionError):
        return _fail(f"cannot read {raw!r} as a number")


# -- CookingWorld: a free-text command -----------------------------------------------------------
_SPACES = re.compile(r"\s+")


def normalise_command(text: str) -> str:
    """Lower-case, single-spaced, without a trailing full stop: how commands are compared."""
    return _SPACES.sub(" ", text).strip().rstrip(".").strip().lower()


def parse_text_action(text: str, valid_actions: list[str] | None = None) -> Parsed[str]:
    """Return the command on the first non-empty line of ``text``.

    When ``valid_actions`` is given, the command must be one of them (after normalising case and
    spaces); the returned value is then spelled exactly as in ``valid_actions``.
    """
    if not isinstance(text, str):
        return _fail(f"expected text, got {type(text).__name__}")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return _fail("empty command")
    command = normalise_command(lines[0])
    if not command:
        return _fail("empty command")
    if valid_actions is None:
        return Parsed(command)
    by_normal_form = {normalise_command(a): a for a in valid_actions}
    if command not in by_normal_form:
        return _fail(f"{command[:60]!r} is not a valid action here")
    return Parsed(by_normal_form[command])

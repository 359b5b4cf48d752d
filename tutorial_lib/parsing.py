"""Reading actions out of model text (chapter 2, *Prompts, tokens and actions*).

Every parser here takes *any* string and returns a :class:`Parsed` -- a value or the reason there is
none. None of them raises: text that does not parse is an ordinary event in RL (an untrained policy
produces little else), so it is counted and penalised by the game, never allowed to crash a rollout.
The property tests in ``tests/test_parsing.py`` feed them arbitrary Unicode to hold them to that.
"""

from __future__ import annotations

import re
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
    mark, row, col = match.group(1).lower(), int(match.group(2)), int(match.group(3))
    return Parsed(f"{mark}({row},{col})")


# -- GuessTheNumber: \boxed{N} -------------------------------------------------------------------
_BOXED_INT = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


def parse_boxed_integer(text: str) -> Parsed[int]:
    """Return the integer in the *last* ``\\boxed{...}``, as GEM's GuessTheNumber reads guesses."""
    if not isinstance(text, str):
        return _fail(f"expected text, got {type(text).__name__}")
    matches = _BOXED_INT.findall(text)
    if not matches:
        return _fail("no integer inside \\boxed{}")
    digits = matches[-1]
    if len(digits.lstrip("-")) > 18:  # int() of a huge string is slow and no range is that wide
        return _fail("number too long")
    return Parsed(int(digits))


# -- math: the answer after #### -----------------------------------------------------------------
_FINAL_ANSWER = re.compile(r"####\s*\$?\s*(-?[\d,]*\.?\d+)")


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
    if len(raw) > 40:
        return _fail("number too long")
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

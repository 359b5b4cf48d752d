"""GuessTheNumber, a multi-turn game with GEM's rules (chapter 1; trained on in chapter 5).

The player guesses a secret integer in ``[low, high]`` and hears "higher" or "lower" after each
guess. The rules are GEM's ``game:GuessTheNumber`` (https://github.com/axon-rl/gem,
``gem/envs/game_env/guess_the_number.py``), reward, end and cut-off flag alike, for any answer
text; ``tests/test_gem_rules.py`` plays thousands of answers through both and compares every step.
Implemented here so the book does not depend on GEM:

* a guess is the number in the last ``\\boxed{N}`` holding only digits (``\\boxed{ 7 }``,
  ``\\boxed{-3}`` and ``\\boxed{seven}`` are no guess);
* no guess, or a guess of 0 (GEM tests ``if not guess``), is a *format error*: reward -0.1 and the
  episode ends;
* a correct guess ends the episode with reward +1;
* a guess outside the range, or one already made, is invalid: reward ``invalid_guess_reward``
  (0, GEM's ``invalid_action_reward``), the turn is used up, the game goes on;
* on the last turn the game ends whatever the guess: a wrong guess inside the range earns the
  partial reward ``1 - |guess - target| / (high - low)``, a repeated one included (GEM pays it),
  one outside the range ``invalid_guess_reward``. ``closeness_reward=False`` pays 0 there instead:
  a reward for finding the number and nothing else (GEM's partial reward pays a last guess 3 away
  on 1-50 0.94, nearly what a win earns, so it barely tells a near miss from a find).

When the turns run out the step returns ``terminated=True`` *and* ``truncated=True``, as GEM does:
the game is over (its last reward says how close the guess was; nothing follows to bootstrap
from), and the flag says it ended on the turn limit. A format error on the last turn carries the
same flag.

Two presets: ``easy`` (1-10, 4 turns) and ``hard`` (1-50, 7 turns). Binary search, the expert,
always wins both: it needs at most ceil(log2(10 + 1)) = 4 and ceil(log2(50 + 1)) = 6 guesses.

``ranges`` (with ``preset=None``) makes one game of several: each reset draws one ``(low, high,
max_turns)`` from the list with the episode's seed, and the task states it. Expert data over
several ranges teaches binary search as a rule of the stated range rather than as one fixed
sequence of guesses (chapter 9's SmolLM2 runs: a policy that saw 1-10 only counts up by one
above 10).
"""

from __future__ import annotations

import operator
import random
from collections.abc import Sequence
from typing import Any

from tutorial_lib.envs.base import StepResult, TextEnv
from tutorial_lib.envs.parsing import parse_boxed_integer

PRESETS: dict[str, dict[str, int]] = {
    "easy": dict(low=1, high=10, max_turns=4),
    "hard": dict(low=1, high=50, max_turns=7),
}

SUCCESS_REWARD = 1.0
FORMAT_ERROR_REWARD = -0.1


def _checked_range(spec: Sequence[int]) -> tuple[int, int, int]:
    """``(low, high, max_turns)`` as ints, or a ``ValueError`` that says what is wrong."""
    try:
        low, high, max_turns = (operator.index(v) for v in spec)
    except (TypeError, ValueError):
        raise ValueError(f"a range is (low, high, max_turns), three integers; got {spec!r}") from None
    if not low < high:
        raise ValueError(f"need low < high, got low={low}, high={high}")
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    return low, high, max_turns


class GuessTheNumberEnv(TextEnv):
    """Guess a secret integer in as few turns as possible; see the module docstring for rules."""

    name = "guess_the_number"

    def __init__(
        self,
        preset: str | None = "easy",
        *,
        low: int | None = None,
        high: int | None = None,
        max_turns: int | None = None,
        invalid_guess_reward: float = 0.0,
        closeness_reward: bool = True,
        ranges: Sequence[Sequence[int]] | None = None,
    ) -> None:
        super().__init__()
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)} or None")
        if ranges is not None:
            if preset is not None or any(v is not None for v in (low, high, max_turns)):
                raise ValueError("ranges takes the place of preset, low, high and max_turns: "
                                 "pass preset=None and none of the others")
            self.ranges = tuple(_checked_range(r) for r in ranges)
            if not self.ranges:
                raise ValueError("ranges is empty: give at least one (low, high, max_turns)")
        else:
            settings = dict(PRESETS[preset]) if preset else {}
            for key, value in (("low", low), ("high", high), ("max_turns", max_turns)):
                if value is not None:
                    settings[key] = value
            missing = {"low", "high", "max_turns"} - settings.keys()
            if missing:
                raise ValueError(f"preset=None needs low, high and max_turns (or ranges); missing {sorted(missing)}")
            self.ranges = (_checked_range((settings["low"], settings["high"], settings["max_turns"])),)
        self.low, self.high, self.max_turns = self.ranges[0]
        self.invalid_guess_reward = float(invalid_guess_reward)
        self.closeness_reward = bool(closeness_reward)
        self.target = self.low
        self.guesses: list[int] = []
        # What the player has learnt so far: the target lies in [known_low, known_high].
        self.known_low, self.known_high = self.low, self.high

    @property
    def task(self) -> str:
        return (
            f"You are playing Guess The Number. Guess the secret number between {self.low} and "
            f"{self.high} (inclusive) within {self.max_turns} turns. After each guess you are told "
            "whether the secret is higher or lower. Write your guess as \\boxed{N}."
        )

    def _reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        if len(self.ranges) > 1:  # one range draws nothing here: its games keep the secrets they always had
            self.low, self.high, self.max_turns = self._rng.choice(self.ranges)
        self.target = self._rng.randint(self.low, self.high)
        self.guesses = []
        self.known_low, self.known_high = self.low, self.high
        return f"Turn 1 of {self.max_turns}. Make your first guess.", {}

    def _step(self, action_text: str) -> StepResult:
        turn = self.num_steps
        last_turn = turn >= self.max_turns
        parsed = parse_boxed_integer(action_text)
        if not parsed.ok or parsed.value == 0:
            error = parsed.error if not parsed.ok else "a guess of 0 counts as no guess (GEM's rule)"
            info = dict(invalid_action=True, parse_error=error, success=False)
            return "You did not write a guess as \\boxed{N}. Game over.", FORMAT_ERROR_REWARD, True, last_turn, info
        guess = parsed.value
        info: dict[str, Any] = dict(guess=guess)
        in_range = self.low <= guess <= self.high
        if not in_range:
            reward, info["invalid_action"] = self.invalid_guess_reward, True
            info["parse_error"] = f"guess {guess} is outside {self.low}..{self.high}"
            feedback = f"Your guess {guess} is outside the range {self.low} to {self.high}."
        elif guess in self.guesses:
            reward, info["invalid_action"] = self.invalid_guess_reward, True
            info["parse_error"] = f"{guess} was guessed before"
            feedback = f"You already guessed {guess}."
        elif guess == self.target:
            self.guesses.append(guess)
            info["success"] = True
            return f"Correct! The number was {self.target}.", SUCCESS_REWARD, True, False, info
        else:
            self.guesses.append(guess)
            reward = 0.0
            if guess < self.target:
                self.known_low = max(self.known_low, guess + 1)
                feedback = f"Your guess {guess} is too low: the number is higher."
            else:
                self.known_high = min(self.known_high, guess - 1)
                feedback = f"Your guess {guess} is too high: the number is lower."
        if last_turn:
            info["success"] = False
            if in_range and self.closeness_reward:  # a repeated guess too: GEM pays how close it is
                reward = 1.0 - abs(guess - self.target) / (self.high - self.low)
            return f"{feedback} No turns left; the number was {self.target}.", reward, True, True, info
        return f"{feedback} Turn {turn + 1} of {self.max_turns}.", reward, False, False, info

    def expert_action(self) -> str:
        """Binary search over what the feedback has revealed (it never reads the secret)."""
        return f"\\boxed{{{(self.known_low + self.known_high) // 2}}}"

    def random_action(self, rng: random.Random) -> str:
        return f"\\boxed{{{rng.randint(self.low, self.high)}}}"

"""GuessTheNumber, a multi-turn game with GEM's rules (chapter 1; trained on in chapter 5).

The player guesses a secret integer in ``[low, high]`` and hears "higher" or "lower" after each
guess. Rules, as in GEM's ``game:GuessTheNumber`` (https://github.com/axon-rl/gem), implemented here
so the book does not depend on GEM:

* a guess is the integer in the last ``\\boxed{...}`` of the answer;
* a correct guess ends the episode with reward +1;
* an answer with no boxed integer ends the episode with reward -0.1 (a format error);
* a guess outside the range, or one already made, is invalid: reward ``invalid_guess_reward``
  (0 by default), the turn is used up, the game goes on;
* when the turns run out, the last guess earns the partial reward ``1 - |guess - target| / (high -
  low)`` (if it was a valid guess), and the episode is *truncated*.

Two presets: ``easy`` (1-10, 4 turns) and ``hard`` (1-50, 7 turns). Binary search, the expert,
always wins both: it needs at most ceil(log2(10 + 1)) = 4 and ceil(log2(50 + 1)) = 6 guesses.
"""

from __future__ import annotations

import random
from typing import Any

from ..parsing import parse_boxed_integer
from .base import StepResult, TextEnv

PRESETS: dict[str, dict[str, int]] = {
    "easy": dict(low=1, high=10, max_turns=4),
    "hard": dict(low=1, high=50, max_turns=7),
}

SUCCESS_REWARD = 1.0
FORMAT_ERROR_REWARD = -0.1


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
    ) -> None:
        super().__init__()
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)} or None")
        settings = dict(PRESETS[preset]) if preset else {}
        for key, value in (("low", low), ("high", high), ("max_turns", max_turns)):
            if value is not None:
                settings[key] = value
        missing = {"low", "high", "max_turns"} - settings.keys()
        if missing:
            raise ValueError(f"preset=None needs low, high and max_turns; missing {sorted(missing)}")
        self.low, self.high, self.max_turns = settings["low"], settings["high"], settings["max_turns"]
        if not self.low < self.high:
            raise ValueError(f"need low < high, got low={self.low}, high={self.high}")
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")
        self.invalid_guess_reward = float(invalid_guess_reward)
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
        self.target = self._rng.randint(self.low, self.high)
        self.guesses = []
        self.known_low, self.known_high = self.low, self.high
        return f"Turn 1 of {self.max_turns}. Make your first guess.", {}

    def _step(self, action_text: str) -> StepResult:
        turn = self.num_steps
        parsed = parse_boxed_integer(action_text)
        if not parsed.ok:
            info = dict(invalid_action=True, parse_error=parsed.error, success=False)
            return "You did not write a guess as \\boxed{N}. Game over.", FORMAT_ERROR_REWARD, True, False, info
        guess = parsed.value
        info: dict[str, Any] = dict(guess=guess)
        if not self.low <= guess <= self.high:
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
        if turn >= self.max_turns:
            info["success"] = False
            if not info.get("invalid_action"):
                reward = 1.0 - abs(guess - self.target) / (self.high - self.low)
            return f"{feedback} No turns left; the number was {self.target}.", reward, False, True, info
        return f"{feedback} Turn {turn + 1} of {self.max_turns}.", reward, False, False, info

    def expert_action(self) -> str:
        """Binary search over what the feedback has revealed (it never reads the secret)."""
        return f"\\boxed{{{(self.known_low + self.known_high) // 2}}}"

    def random_action(self, rng: random.Random) -> str:
        return f"\\boxed{{{rng.randint(self.low, self.high)}}}"

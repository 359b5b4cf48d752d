"""The protocol every text game in the book follows (chapter 1, *Text games as RL environments*).

A game is a Gymnasium-style environment whose observations and actions are strings:

    observation, info = env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("<move>x(1,1)</move>")

``step`` takes the model's raw text. Parsing it is the game's job, because what counts as a
well-formed answer (``\\boxed{7}``, ``#### 42``, ``x(1,2)``) is part of the game's rules, and a
rollout must never crash on text that does not parse: the game counts it, applies its penalty or
documented fallback, and reports it in ``info``.

Keys every game puts in ``info``:

* ``valid_actions`` -- list of action strings, for games that have a finite action set
  (tic-tac-toe, CookingWorld); absent otherwise.
* ``invalid_action`` -- ``True`` when the text passed to the last ``step`` did not parse or named an
  illegal action (always ``False`` after ``reset``).
* ``parse_error`` -- a short human-readable reason when ``invalid_action`` is true, else ``None``.
* ``success`` -- at the end of an episode, whether the agent achieved the goal.

``terminated`` means the game reached an end state (won, lost, answered); ``truncated`` means the
episode was cut by a step or turn limit. They are kept apart because a value function must not
bootstrap through a termination but should through a truncation.
"""

from __future__ import annotations

import abc
import operator
import random
from typing import Any

StepResult = tuple[str, float, bool, bool, dict[str, Any]]


def _check_seed(seed: Any) -> int | None:
    """``seed`` as a Python int (or None); a clear TypeError for anything that is not an integer."""
    if seed is None:
        return None
    if not isinstance(seed, bool):
        try:
            return operator.index(seed)
        except TypeError:
            pass
    raise TypeError(
        f"seed must be an int (a Python int or a numpy integer such as np.int64) or None; "
        f"got {seed!r} of type {type(seed).__name__}"
    )


class TextEnv(abc.ABC):
    """Base class of the four games. Subclasses implement ``_reset``, ``_step`` and the experts."""

    #: registry name, e.g. ``"tictactoe"``
    name: str = ""
    #: at most this many copies run side by side in :func:`tutorial_lib.evaluation.episodes.run_episodes`
    #: (``None``: no limit). Games with a heavy process behind each copy set it.
    max_parallel: int | None = None
    #: whether an invalid action is a turn that changes nothing but the text (so an expert's plan
    #: still applies after one: chapter 3's recovery data). Elsewhere an illegal tic-tac-toe move
    #: is replaced or loses, and an invalid guess or answer uses up a turn or ends the episode.
    invalid_action_changes_nothing: bool = False

    def __init__(self) -> None:
        self._done = True
        self._rng = random.Random(0)
        self.num_steps = 0

    # -- the Gymnasium-style API ------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start a new episode. The same seed gives the same episode.

        ``seed`` is ``None`` (a random episode) or an integer: a Python ``int`` or anything that
        says it is one through ``__index__`` (``numpy.int64`` and the other numpy integer types),
        and it reaches the game as a Python ``int``, so ``np.int64(7)`` and ``7`` give the same
        episode. Anything else raises ``TypeError``: a float (``1.5``, and ``7.0`` too, which would
        otherwise seed a different episode than ``7`` in some games), a string, and ``True`` or
        ``False``, which are ints to Python but a bug as a seed.
        """
        seed = _check_seed(seed)
        self._rng = random.Random(seed)
        self.num_steps = 0
        observation, info = self._reset(seed)
        info.setdefault("invalid_action", False)
        info.setdefault("parse_error", None)
        self._done = False
        return observation, info

    def step(self, action_text: str) -> StepResult:
        """Play the model's raw text as one action. Never raises on the text's content."""
        if self._done:
            raise RuntimeError(
                f"{type(self).__name__}.step() called after the episode ended; call reset() first"
            )
        if not isinstance(action_text, str):
            raise TypeError(f"action_text must be a str, got {type(action_text).__name__}")
        self.num_steps += 1
        observation, reward, terminated, truncated, info = self._step(action_text)
        info.setdefault("invalid_action", False)
        info.setdefault("parse_error", None)
        self._done = terminated or truncated
        return observation, float(reward), bool(terminated), bool(truncated), info

    @property
    def done(self) -> bool:
        """Whether the current episode has ended (or none was started)."""
        return self._done

    # -- what subclasses provide ------------------------------------------------------------
    @property
    @abc.abstractmethod
    def task(self) -> str:
        """The instructions a player needs for this episode (goes at the top of the prompt)."""

    @abc.abstractmethod
    def _reset(self, seed: int | None) -> tuple[str, dict[str, Any]]: ...

    @abc.abstractmethod
    def _step(self, action_text: str) -> StepResult: ...

    @abc.abstractmethod
    def expert_action(self) -> str:
        """The text the game's expert would write now (minimax, gold path, binary search, worked
        answer). Experts may read the game's hidden state; learned policies see only text."""

    @abc.abstractmethod
    def random_action(self, rng: random.Random) -> str:
        """A uniformly random *well-formed* action: the baseline every policy must beat."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release external resources (the CookingWorld JVM)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

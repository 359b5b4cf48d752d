"""The four text games and the registry that builds them (chapter 1).

    from tutorial_lib import envs
    env = envs.make("guess_the_number", preset="hard")

Names: ``"tictactoe"``, ``"cookingworld"``, ``"guess_the_number"``, ``"math"``. Games are imported
lazily so that, say, the math chapter never starts a Java VM. Their modules: ``tictactoe``,
``cookingworld``, ``guess_the_number``, ``math_problems``. Beside the games: ``base`` (the
``TextEnv`` protocol every game follows), ``parsing`` (reading actions out of model text, chapter
2) and ``minimax`` (perfect tic-tac-toe, chapters 1, 3 and 7). A game knows nothing of language
models or learning: this package imports nothing else of ``tutorial_lib``.
"""

from __future__ import annotations

import importlib
import inspect

from tutorial_lib.envs.base import StepResult, TextEnv

_REGISTRY: dict[str, str] = {
    "tictactoe": "tutorial_lib.envs.tictactoe:TicTacToeEnv",
    "cookingworld": "tutorial_lib.envs.cookingworld:CookingWorldEnv",
    "guess_the_number": "tutorial_lib.envs.guess_the_number:GuessTheNumberEnv",
    "math": "tutorial_lib.envs.math_problems:MathEnv",
}

GAMES: tuple[str, ...] = tuple(_REGISTRY)

#: each game's name as the book writes it in prose, titles and legends
GAME_TITLES: dict[str, str] = {"tictactoe": "tic-tac-toe", "cookingworld": "CookingWorld",
                               "guess_the_number": "GuessTheNumber", "math": "math"}


def env_class(name: str) -> type[TextEnv]:
    """The class registered under ``name``."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown game {name!r}; the games are {', '.join(GAMES)}")
    module_name, class_name = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def make(name: str, **options) -> TextEnv:
    """Build the game ``name`` with its options; an unknown option is an error that lists the rest."""
    cls = env_class(name)
    accepted = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise TypeError(f"{name} has no option {', '.join(unknown)}; its options are {', '.join(accepted)}")
    return cls(**options)


__all__ = ["GAMES", "StepResult", "TextEnv", "env_class", "make"]

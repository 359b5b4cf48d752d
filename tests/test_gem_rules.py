"""GuessTheNumber plays by GEM's rules, step for step: reward, end and cut-off flag for any answer.

GEM's own file (``gem/envs/game_env/guess_the_number.py`` from the ``gem-llm`` wheel, which
``make install`` installs without its heavy dependencies) is loaded as it ships, with only the two
small modules it imports (``gem.core``, ``gem.utils.constants``, ``gem.utils.seeding``), not GEM's
package ``__init__`` (which registers every environment and imports reasoning-gym). Both games get
the same range, turns, secret and answers; every step's reward, ``terminated`` and ``truncated``
must agree.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tutorial_lib.envs.guess_the_number import GuessTheNumberEnv

_SPEC = importlib.util.find_spec("gem")
pytestmark = pytest.mark.skipif(
    _SPEC is None, reason="gem-llm is not installed (make install adds it with --no-deps)"
)


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gem_game_class():
    """GEM's ``GuessTheNumberEnv`` class, from its own file; ``sys.modules`` restored afterwards."""
    root = Path(_SPEC.submodule_search_locations[0])
    saved = {name: module for name, module in sys.modules.items() if name == "gem" or name.startswith("gem.")}
    try:
        for package in ("gem", "gem.utils", "gem.envs", "gem.envs.game_env"):
            module = types.ModuleType(package)
            module.__path__ = [str(root.joinpath(*package.split(".")[1:]))]
            sys.modules[package] = module
        _load("gem.utils.seeding", root / "utils" / "seeding.py")
        _load("gem.utils.constants", root / "utils" / "constants.py")
        _load("gem.core", root / "core.py")
        yield _load("gem.envs.game_env.guess_the_number", root / "envs" / "game_env" / "guess_the_number.py").GuessTheNumberEnv
    finally:
        for name in [n for n in sys.modules if n == "gem" or n.startswith("gem.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def play_both(gem_class, preset: str, seed: int, answers: list[str]) -> list[tuple]:
    """Play ``answers`` in both games on the same secret; the steps where they differ."""
    ours = GuessTheNumberEnv(preset)
    ours.reset(seed=seed)
    theirs = gem_class(min_number=ours.low, max_number=ours.high, max_turns=ours.max_turns)
    theirs.reset()
    theirs.game_number = ours.target  # GEM draws its secret from the global RNG: give it ours
    differences = []
    for turn, answer in enumerate(answers, start=1):
        _, reward, terminated, truncated, _ = ours.step(answer)
        _, gem_reward, gem_terminated, gem_truncated, _ = theirs.step(answer)
        mine, gems = (reward, terminated, truncated), (float(gem_reward), bool(gem_terminated), bool(gem_truncated))
        if mine != gems:
            differences.append((turn, answer, mine, gems))
        if terminated or truncated or gem_terminated or gem_truncated:
            break
    return differences


def answer_for(rng: random.Random, low: int, high: int, earlier: list[str]) -> str:
    """One answer of the kinds that tell rules apart: well formed, malformed, repeated, outside."""
    number = rng.choice([rng.randint(low, high), 0, low - 1, high + 1, -rng.randint(1, 9), 10**rng.randint(2, 30)])
    kind = rng.randrange(13)
    if kind == 0 and earlier:
        return rng.choice(earlier)  # the same answer again
    return [
        f"\\boxed{{{number}}}",
        f"\\boxed{{ {number} }}",
        f"I think \\boxed{{{number}}}.",
        f"\\boxed{{{number}}} or maybe \\boxed{{{rng.randint(low, high)}}}",
        f"\\boxed{{{rng.randint(low, high)}}} no: \\boxed{{x{number}}}",
        f"\\boxed{{0{number}}}",
        f"{number}",
        "\\boxed{}",
        f"\\boxed{{{number}.5}}",
        f"\\boxed{{{'٣' if number % 2 else '7'}}}",  # another script's digit
        f"\\boxed{{{'9' * rng.choice([4300, 4301])}}}",  # Python's limit on int()'s digits
        f"\\boxed{{{number}",
    ][kind % 12]


@pytest.mark.parametrize("preset", ["easy", "hard"])
def test_our_rules_are_gems_on_generated_games(gem_game_class, preset):
    rng = random.Random(preset)
    low, high = (1, 10) if preset == "easy" else (1, 50)
    steps, differences = 0, []
    for seed in range(600):
        answers: list[str] = []
        for _ in range(8):
            answers.append(answer_for(rng, low, high, answers))
        found = play_both(gem_game_class, preset, seed, answers)
        differences += found
        steps += len(answers)
    assert not differences, f"{len(differences)} differing steps, e.g. {differences[:3]}"


def test_the_classes_of_difference_once_found_are_covered(gem_game_class):
    """The three kinds of step where the rules once disagreed, named one by one."""
    # answers GEM rejects as a format error: spaces in the braces, zero, a negative number
    for answer in ("\\boxed{ 5 }", "\\boxed{0}", "\\boxed{-3}"):
        assert not play_both(gem_game_class, "easy", 3, [answer])
    # a repeated guess on the last turn earns the partial reward
    assert not play_both(gem_game_class, "easy", 3, ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}", "\\boxed{3}"])
    # a format error on the last turn is flagged as cut off
    assert not play_both(gem_game_class, "easy", 3, ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}", "no idea"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=40) | st.builds("\\boxed{{{}}}".format, st.text(max_size=6)), min_size=1, max_size=8))
def test_our_rules_are_gems_for_any_text(gem_game_class, answers):
    assert not play_both(gem_game_class, "easy", 5, answers)

"""CookingWorld from TextWorld-Express, as a text game (chapter 1 teaches it).

The agent is in a small house and must find the cookbook, gather the recipe's ingredients, prepare
them as the recipe says (slice, fry, ...) and then ``prepare meal`` and ``eat meal``. Every turn the
game lists its valid commands, so the action set is finite but changes from turn to turn.

    env = CookingWorldEnv(fold="train")
    observation, info = env.reset(seed=3)
    observation, reward, terminated, truncated, info = env.step("take cookbook")

**The default world** is ``TUTORIAL_WORLD``: 3 rooms with doors, 2 recipe ingredients and 2
distractor items, the small world of the TextWorld tutorial. (TWX's own defaults, 11 rooms, 3
ingredients and 10 distractors, give gold paths of 25 to 119 steps, too long for a first model.)
``limit_inventory_size`` is 0 (no carrying limit; TWX defaults to 1, a capacity of 4 items). In
this world the gold paths measure the same either way, but a limit gives a learner one more way
to get stuck; the option is there for those who want the harder game.

**Why the step limit is 32, not 16.** The tutorial cut episodes at 16 steps. Measured over all
1000 games of each fold, the gold path (TWX's expert plan, see ``gold_path``) of this world is 10
to 25 steps long, median 20 on train and 18 on dev and test: only 21% of train games (34% of
test games) can be won in 16 steps *even by the expert*, so a 16-step limit makes most games
unwinnable and caps every policy's success rate far below 1. At 32 every gold path fits, with at
least 7 steps to spare for looking around or a wrong turn, while a random agent still wins almost
none (it truncates or fails). ``step_limit="tutorial"`` restores 16 for comparison with the tutorial.

**The default limit fits each game: at least 32, and never less than the gold path plus 7.** A
fixed 32 is right for this world only. Larger worlds have longer plans: with ``num_locations=4,
num_ingredients=3, include_doors=0`` six of the first 200 train games need 33 to 40 steps (train
seed 38: 35), and TWX's own defaults up to 119, so under a fixed 32 the expert itself would fail
them and a perfect imitator could not reach a success rate of 1. So the default
(``step_limit="default"``) is ``max(32, len(gold_path) + GOLD_PATH_SLACK)`` with
``GOLD_PATH_SLACK = 7``, the margin this world's longest plan has under 32: in this world it is
always 32; elsewhere every game can be won, with room for a wrong turn. It depends on the game
alone (the same seed, the same limit). The gold path costs a TWX replay to compute, so it is
computed only when an episode reaches 32 steps (or when ``step_limit`` or ``gold_path`` is read):
shorter episodes pay nothing. An explicit int (``step_limit=16``, or ``32``) and the name
``"tutorial"`` (16) are honoured exactly, whatever the game.

**Seeds and folds.** TWX keeps train, dev and test games apart by seed range: the valid seeds are
0-999 (train), 10000-10999 (dev) and 20000-20999 (test), and the fold is an input of the
generator too.
``reset(seed)`` uses game seed ``fold_seeds[seed % 1000]``, so seed 5 is TWX seed 5 on train and
TWX seed 20005 on test; the same (fold, seed) is always the same game, train and test never share
one, and seeds 1000 apart are the same game. ``info["game_seed"]`` is the TWX seed used. A seed of
``None`` draws a fold seed at random.

**Invalid commands.** ``step`` reads the first line of the model's text as a command
(:func:`~tutorial_lib.envs.parsing.parse_text_action`, case and spacing are forgiven). A command that
is not among the valid actions is not sent to TWX: the turn is used up (it counts toward the step
limit), the game state does not change, the reward is 0, ``info["invalid_action"]`` is true with
the reason in ``info["parse_error"]``, and the observation says so and repeats the description of
the current room.

**Reward** is the change in TWX's *normalised* score (info key ``score``, raw points divided by
the points available, in [0, 1]), so an episode's rewards sum to its final normalised score: 1.0
for a won game. Points come for taking and preparing each ingredient and for the meal. The
episode terminates when TWX reports task success (the meal is eaten) or task failure (e.g. an
ingredient eaten instead of the meal), and is truncated at the step limit.
"""

from __future__ import annotations

import atexit
import operator
import os
import random
import re
import subprocess
from typing import Any

from tutorial_lib.envs.base import StepResult, TextEnv
from tutorial_lib.envs.parsing import parse_text_action

TUTORIAL_WORLD = dict(num_locations=3, include_doors=1, num_distractor_items=2, num_ingredients=2)
#: the named step limits. "default" is the *least* default limit: see GOLD_PATH_SLACK and the
#: module docstring. An int passed as ``step_limit`` (32 included) is a fixed limit.
STEP_LIMITS = {"default": 32, "tutorial": 16}
#: the default limit is ``max(STEP_LIMITS["default"], len(gold_path) + GOLD_PATH_SLACK)``
GOLD_PATH_SLACK = 7
FOLDS = ("train", "dev", "test")

# TWX's valid ranges for CookingWorld parameters (its README); checked here, before any JVM starts.
_WORLD_RANGES = {
    "num_locations": (1, 11),
    "num_ingredients": (1, 5),
    "num_distractor_items": (0, 10),
    "include_doors": (0, 1),
    "limit_inventory_size": (0, 1),
}
_TWX_NAMES = {
    "num_locations": "numLocations",
    "include_doors": "includeDoors",
    "num_distractor_items": "numDistractorItems",
    "num_ingredients": "numIngredients",
    "limit_inventory_size": "limitInventorySize",
}
# TWX's engine never ends an episode by itself; our step limit does. Its own limit only sets a
# ``done`` flag that we do not read, so it is set out of the way.
_TWX_STEP_LIMIT = 10**9
_ACTIVE = "_tutorial_lib_active_env"  # attribute marking which env last reset a (shared) JVM


class _IdleJVMs:
    """The JVMs this process started whose envs have closed, kept for the next envs.

    A JVM costs ~0.2 s to start and its first games run slower while Java compiles the engine; an
    evaluation of 100 games on 16 envs used to start 16 of them and shut them down at its end, so
    every evaluation in a chapter paid that again (plus ~0.2 s per env to read its fold's seeds).
    A closed env hands its JVM back here instead; the next env takes it and ``load``s its own world
    (TWX games are generated from the seed, so nothing of the earlier game survives a ``reset``).
    At most ``CookingWorldEnv.max_parallel`` (~100 MB each) are kept; :func:`close_idle_jvms`, or
    the process's exit, shuts them down. A forked child never takes its parent's: they are bound
    to the parent's sockets.
    """

    def __init__(self) -> None:
        self.pid, self.jvms = os.getpid(), []

    def take(self) -> Any:
        if self.pid != os.getpid():  # a fork: the parent's JVMs are not this process's to use
            self.pid, self.jvms = os.getpid(), []
        while self.jvms:
            java = self.jvms.pop()
            if _jvm_running(java):
                return java
        from textworld_express import TextWorldExpressEnv  # imported late: starts nothing

        return TextWorldExpressEnv(envStepLimit=_TWX_STEP_LIMIT)

    def give_back(self, java: Any, keep: int) -> None:
        if self.pid == os.getpid() and len(self.jvms) < keep and _jvm_running(java):
            setattr(java, _ACTIVE, None)
            self.jvms.append(java)
        else:
            _shut_down(java)

    def close_all(self) -> None:
        if self.pid == os.getpid():
            while self.jvms:
                _shut_down(self.jvms.pop())


_IDLE = _IdleJVMs()
atexit.register(_IDLE.close_all)
# TWX's valid game seeds of each fold (fixed lists of ~1,000 ints, ~0.2 s to read through py4j)
_FOLD_SEEDS: dict[str, list[int]] = {}


def close_idle_jvms() -> None:
    """Shut down the JVMs that closed CookingWorld envs left for reuse (the process's exit does too)."""
    _IDLE.close_all()


def _java_process(java: Any) -> subprocess.Popen | None:
    return getattr(getattr(java, "_gateway", None), "java_process", None)


def _jvm_running(java: Any) -> bool:
    process = _java_process(java)
    return process is None or process.poll() is None


def _shut_down(java: Any) -> None:
    java.close()
    # TWX's own ``__del__`` closes again, and writes to the JVM's stdin if the process is still
    # running: wait for it to exit, or that later write hits a closed pipe (BrokenPipeError,
    # reported at some random garbage collection).
    process = _java_process(java)
    if process is not None:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def clean_text(text: str) -> str:
    """Single spaces inside lines, no blank-line runs, no leading or trailing whitespace."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _resolve_step_limit(step_limit: int | str) -> int | None:
    """The fixed limit ``step_limit`` asks for, or ``None`` for the default (fitted to each game)."""
    if isinstance(step_limit, str):
        if step_limit not in STEP_LIMITS:
            names = f"'default' (fitted to the game, at least {STEP_LIMITS['default']}), " + ", ".join(
                f"{k!r} ({v})" for k, v in STEP_LIMITS.items() if k != "default"
            )
            raise ValueError(f"unknown step_limit name {step_limit!r}; the names are {names}")
        return None if step_limit == "default" else STEP_LIMITS[step_limit]
    limit = None
    if not isinstance(step_limit, bool):  # True is an int to Python, and a bug here
        try:
            limit = operator.index(step_limit)  # ints, numpy ints; not floats
        except TypeError:
            pass
    if limit is None or limit < 1:
        raise ValueError(
            f"step_limit must be an int >= 1 or one of {', '.join(map(repr, STEP_LIMITS))}; "
            f"got {step_limit!r}"
        )
    return limit


def describe_world(world: dict[str, Any]) -> str:
    """A world's settings in words, e.g. "3 rooms with doors, 2 ingredients, 2 distractor items";
    a setting the dict leaves out is TUTORIAL_WORLD's, as the environment fills it; keys that are
    not world settings (an env's other options, such as ``step_limit``) are ignored."""
    world = {**TUTORIAL_WORLD, **_check_world({k: v for k, v in world.items() if k in _WORLD_RANGES})}

    def count(n: int, noun: str) -> str:
        return f"{n} {noun}{'' if n == 1 else 's'}"

    doors = "with doors" if world["include_doors"] else "without doors"
    return (f"{count(world['num_locations'], 'room')} {doors}, {count(world['num_ingredients'], 'ingredient')}, "
            f"{count(world['num_distractor_items'], 'distractor item')}")


def _check_world(world: dict[str, Any]) -> dict[str, int]:
    checked = {}
    for key, value in world.items():
        low, high = _WORLD_RANGES[key]
        binary = high == 1
        ok_type = isinstance(value, int) and (binary or not isinstance(value, bool))
        if not ok_type or not low <= value <= high:
            raise ValueError(f"{key} must be an int from {low} to {high}; got {value!r}")
        checked[key] = int(value)
    return checked


class CookingWorldEnv(TextEnv):
    """TextWorld-Express CookingWorld with text actions, seeded folds and a gold-path expert.

    Args:
        fold: ``"train"``, ``"dev"`` or ``"test"``: which of TWX's disjoint game sets to play.
        step_limit: turns per episode (invalid commands count): ``"default"``, fitted to each
            game so that its gold path fits with room to spare (``max(32, len(gold_path) + 7)``,
            see the module docstring), or a fixed limit honoured exactly: an int >= 1 or
            ``"tutorial"`` (16). ``env.step_limit`` is the current episode's limit.
        num_locations, include_doors, num_distractor_items, num_ingredients,
        limit_inventory_size: the world, as TWX's ``numLocations`` (1-11), ``includeDoors``
            (0/1), ``numDistractorItems`` (0-10), ``numIngredients`` (1-5) and
            ``limitInventorySize`` (0/1). The defaults are ``TUTORIAL_WORLD`` without an
            inventory limit.
        java_env: a ``textworld_express.TextWorldExpressEnv`` to use instead of starting a JVM of
            our own, so that many envs can share one. The JVM holds one game at a time, so an env
            whose game another env replaced replays its own actions first (correct, but slower
            than one JVM per env when episodes interleave). ``close()`` leaves a shared JVM
            running.

    The JVM starts on the first ``reset`` (about 0.2 s, 0.5 s with the first game's warm-up) and is
    reused by every later one; ``close()`` shuts it down. The env is also a context manager.
    """

    name = "cookingworld"
    # Each copy runs its own Java VM (~0.5 s to start, ~100 MB): 16 side by side keeps a batched
    # language-model rollout fast without filling a laptop's memory.
    max_parallel = 16
    invalid_action_changes_nothing = True  # "Invalid command ... Nothing happens."

    def __init__(
        self,
        fold: str = "train",
        step_limit: int | str = "default",
        num_locations: int = TUTORIAL_WORLD["num_locations"],
        include_doors: int = TUTORIAL_WORLD["include_doors"],
        num_distractor_items: int = TUTORIAL_WORLD["num_distractor_items"],
        num_ingredients: int = TUTORIAL_WORLD["num_ingredients"],
        limit_inventory_size: int = 0,
        java_env: Any = None,
    ) -> None:
        super().__init__()
        if fold not in FOLDS:
            raise ValueError(f"fold must be one of {', '.join(map(repr, FOLDS))}; got {fold!r}")
        self.fold = fold
        self._fixed_step_limit = _resolve_step_limit(step_limit)  # None: fitted to each game
        self.world = _check_world(
            dict(
                num_locations=num_locations,
                include_doors=include_doors,
                num_distractor_items=num_distractor_items,
                num_ingredients=num_ingredients,
                limit_inventory_size=limit_inventory_size,
            )
        )
        self._game_params = ",".join(f"{_TWX_NAMES[k]}={v}" for k, v in self.world.items())
        self._java = java_env
        self._owns_java = java_env is None
        # per-episode state
        self.game_seed: int | None = None
        self._task = ""
        self._gold: list[str] | None = None
        self._played: list[str] = []  # the valid actions played this episode, in order
        self._valid_actions: list[str] = []
        self._look = ""
        self._score = 0.0

    # -- the JVM ------------------------------------------------------------------------------
    def _java_env(self) -> Any:
        if self._java is None:
            self._java = _IDLE.take()
        return self._java

    def fold_seeds(self) -> list[int]:
        """TWX's valid game seeds of this env's fold (starts the JVM if needed)."""
        if self.fold not in _FOLD_SEEDS:
            java = self._java_env()
            getter = {
                "train": java.getValidSeedsTrain,
                "dev": java.getValidSeedsDev,
                "test": java.getValidSeedsTest,
            }[self.fold]
            _FOLD_SEEDS[self.fold] = [int(seed) for seed in getter()]
        return _FOLD_SEEDS[self.fold]

    def close(self) -> None:
        """Give back the JVM if this env started it (the next env reuses it: :class:`_IdleJVMs`);
        a later ``reset`` takes one again. A shared JVM (``java_env=``) is left as it is."""
        if self._java is not None and self._owns_java:
            java, self._java = self._java, None
            _IDLE.give_back(java, keep=self.max_parallel)
        self._done = True

    # -- the episode --------------------------------------------------------------------------
    @property
    def task(self) -> str:
        """TWX's task description, e.g. "You are hungry! Let's cook a delicious meal. ..."."""
        return self._task

    @property
    def step_limit(self) -> int:
        """The current episode's step limit: the fixed one asked for, or by default
        ``max(32, len(gold_path) + GOLD_PATH_SLACK)`` (32 before the first ``reset``). Reading it
        computes the gold path, if that is not known yet."""
        if self._fixed_step_limit is not None:
            return self._fixed_step_limit
        if self.game_seed is None:
            return STEP_LIMITS["default"]
        return max(STEP_LIMITS["default"], len(self.gold_path) + GOLD_PATH_SLACK)

    def _out_of_steps(self) -> bool:
        """Whether the episode is at its step limit (``num_steps`` counts the current step)."""
        if self._fixed_step_limit is None and self.num_steps < STEP_LIMITS["default"]:
            return False  # the default limit is never lower: no need to compute the gold path
        return self.num_steps >= self.step_limit

    @property
    def gold_path(self) -> list[str]:
        """A winning action sequence for this episode: TWX's gold path, all of it valid here."""
        if self.game_seed is None:
            raise RuntimeError("no game yet; call reset() first")
        if self._gold is None:
            self._gold = self._compute_gold_path()
        return list(self._gold)

    def _reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        seeds = self.fold_seeds()
        if seed is None:
            index = random.randrange(len(seeds))
        else:  # TextEnv.reset has made it a Python int
            index = seed % len(seeds)
        self.game_seed = int(seeds[index])
        twx_info = self._twx_reset(gold=False)
        self._gold = None  # computed on demand: see _compute_gold_path
        self._task = clean_text(twx_info["taskDescription"])
        self._played = []
        self._score = 0.0
        return clean_text(twx_info["observation"]), self._absorb(twx_info)

    def _twx_reset(self, gold: bool) -> dict[str, Any]:
        java = self._java_env()
        # load() costs ~7 ms, 20 resets' worth: only when the (maybe shared) JVM has other params
        if (java.gameName, java.gameParams) != ("cookingworld", self._game_params):
            java.load("cookingworld", self._game_params)
        _, twx_info = java.reset(seed=self.game_seed, gameFold=self.fold, generateGoldPath=gold)
        setattr(java, _ACTIVE, self)
        return twx_info

    def _compute_gold_path(self) -> list[str]:
        """TWX's gold path for this episode, without its no-op commands.

        TWX's planner sometimes re-opens a container that is already open (in about 14% of games);
        TWX answers "Unknown action" and nothing changes, and the command is not among the valid
        actions, so this env would reject it. Replaying the plan once and keeping only the
        commands that were valid when played gives a gold path this env accepts. Generating the
        plan (~2 ms) and replaying it (~4 ms) is done only when asked for; the game is then
        reset and the agent's actions replayed, which restores the state exactly (TWX games are
        deterministic, and generating the plan does not change the game).
        """
        twx_info = self._twx_reset(gold=True)
        java = self._java
        gold = []
        for action in java.getGoldActionSequence():
            if action in twx_info["validActions"]:
                gold.append(action)
                _, _, _, twx_info = java.step(action)
        self._twx_reset(gold=False)
        for action in self._played:
            java.step(action)
        return gold

    def _absorb(self, twx_info: dict[str, Any]) -> dict[str, Any]:
        """Keep what later steps need from a TWX response and build our ``info``."""
        self._valid_actions = sorted(twx_info["validActions"])
        self._look = clean_text(twx_info["look"])
        return self._info(twx_info["tasksuccess"], twx_info["taskfailure"])

    def _info(self, success: bool, failure: bool) -> dict[str, Any]:
        return {
            "valid_actions": list(self._valid_actions),
            "score": self._score,
            "success": bool(success),
            "failure": bool(failure),
            "game_seed": self.game_seed,
            "fold": self.fold,
        }

    def _claim_jvm(self) -> Any:
        """The JVM, holding this env's game (replayed if another env sharing it played since)."""
        java = self._java_env()
        if getattr(java, _ACTIVE, None) is not self:
            self._twx_reset(gold=False)
            for action in self._played:  # TWX games are deterministic: this restores the state
                java.step(action)
        return java

    def _step(self, action_text: str) -> StepResult:
        java = self._claim_jvm()
        truncated = self._out_of_steps()
        parsed = parse_text_action(action_text, self._valid_actions)
        if not parsed.ok:
            observation = f"Invalid command: {parsed.error}. Nothing happens.\n{self._look}"
            info = self._info(False, False)
            info.update(invalid_action=True, parse_error=parsed.error)
            return observation, 0.0, False, truncated, info
        twx_observation, _, _, twx_info = java.step(parsed.value)
        self._played.append(parsed.value)
        score = float(twx_info["score"])
        reward, self._score = score - self._score, score
        info = self._absorb(twx_info)
        terminated = info["success"] or info["failure"]
        return clean_text(twx_observation), reward, terminated, truncated and not terminated, info

    # -- baselines ----------------------------------------------------------------------------
    def expert_action(self) -> str:
        """The next gold-path action, while every valid action so far followed the gold path.

        Invalid commands do not count as leaving the path (they change nothing). Once the agent
        has played any other action, the gold path no longer applies and this raises.
        """
        if self.done:
            raise RuntimeError("no episode in progress; call reset() first")
        gold = self.gold_path
        # the gold path wins when completed, so an episode in progress has played less of it
        for k, (played, expected) in enumerate(zip(self._played, gold, strict=False)):
            if played != expected:
                raise RuntimeError(
                    f"the agent left the gold path at move {k + 1} ({played!r} instead of "
                    f"{expected!r}); the gold path is only defined along itself"
                )
        return gold[len(self._played)]

    def random_action(self, rng: random.Random) -> str:
        """A uniformly random valid action."""
        return rng.choice(self._valid_actions)

"""Tests of the CookingWorld game (TextWorld-Express) and its gold-path expert.

One JVM is started for the module and shared by the envs below (``java_env=``), so the whole file
pays the JVM's start-up cost a few times (once more in each test of an env's own JVM).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from textworld_express import TextWorldExpressEnv

from tutorial_lib import envs
from tutorial_lib.envs.cookingworld import (
    GOLD_PATH_SLACK,
    STEP_LIMITS,
    TUTORIAL_WORLD,
    CookingWorldEnv,
    close_idle_jvms,
    describe_world,
)


@pytest.fixture(scope="module")
def java():
    java_env = TextWorldExpressEnv(envStepLimit=10**9)
    yield java_env
    java_env.close()


@pytest.fixture(scope="module")
def env(java):
    return CookingWorldEnv(java_env=java)


@pytest.fixture(scope="module")
def test_env(java):
    return CookingWorldEnv(fold="test", java_env=java)


def play(env: CookingWorldEnv, seed: int, policy) -> tuple[list, list[float], dict, bool, bool]:
    """One episode: the observations, the rewards, the final info, terminated, truncated."""
    observation, info = env.reset(seed=seed)
    observations, rewards = [observation], []
    terminated = truncated = False
    while not (terminated or truncated):
        observation, reward, terminated, truncated, info = env.step(policy(env))
        observations.append(observation)
        rewards.append(reward)
    return observations, rewards, info, terminated, truncated


@pytest.mark.parametrize("fold", ["train", "test"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 17, 999])
def test_gold_path_wins_within_the_default_limit(java, fold, seed):
    env = CookingWorldEnv(fold=fold, java_env=java)
    _, rewards, info, terminated, truncated = play(env, seed, lambda e: e.expert_action())
    assert terminated and not truncated
    assert info["success"] and not info["failure"]
    assert not info["invalid_action"]
    assert env.num_steps == len(env.gold_path) <= STEP_LIMITS["default"]
    assert sum(rewards) == pytest.approx(1.0)
    assert info["score"] == pytest.approx(1.0)
    assert all(r >= 0 for r in rewards) and any(r > 0 for r in rewards[:-1])  # shaped, not sparse


def test_gold_path_drops_twx_no_op_commands(env, java):
    # TWX's raw plan for train game 2 re-opens an open cupboard, a command TWX does not accept
    java.load("cookingworld", env._game_params)
    java.reset(seed=2, gameFold="train", generateGoldPath=True)
    raw = list(java.getGoldActionSequence())
    _, info = env.reset(seed=2)
    gold = env.gold_path
    assert raw.count("open kitchen cupboard") == 2 and gold.count("open kitchen cupboard") == 1
    assert len(gold) == len(raw) - 1
    for action in gold:  # every gold action is valid when it is played
        assert action in info["valid_actions"]
        *_, info = env.step(action)
    assert info["success"]


def test_reset_info_and_observation(env):
    observation, info = env.reset(seed=3)
    assert observation.startswith("You are in the kitchen.")
    assert "  " not in observation and observation == observation.strip()
    assert "cook" in env.task.lower()
    assert info["valid_actions"] == sorted(info["valid_actions"])
    assert "take cookbook" in info["valid_actions"] or "look around" in info["valid_actions"]
    assert info["score"] == 0.0
    assert info["invalid_action"] is False and info["parse_error"] is None
    assert info["success"] is False and info["failure"] is False
    assert info["game_seed"] == 3 and info["fold"] == "train"


def test_folds_are_disjoint_and_differ(env, test_env):
    train_seeds, test_seeds = set(env.fold_seeds()), set(test_env.fold_seeds())
    assert train_seeds and test_seeds and not train_seeds & test_seeds
    for seed in range(8):
        train_obs, train_info = env.reset(seed=seed)
        test_obs, test_info = test_env.reset(seed=seed)
        assert train_info["game_seed"] in train_seeds and test_info["game_seed"] in test_seeds
        # a map can repeat across folds, but then the recipe differs
        assert (train_obs, env.gold_path) != (test_obs, test_env.gold_path)


def test_same_seed_same_game(env):
    def random_transcript(seed: int) -> list:
        rng = random.Random(seed)
        return play(env, seed, lambda e: e.random_action(rng))[0]

    assert random_transcript(11) == random_transcript(11)
    assert random_transcript(11) != random_transcript(12)
    # seeds wrap around the fold's 1000 games
    assert env.reset(seed=5)[0] == env.reset(seed=5 + len(env.fold_seeds()))[0]
    assert env.reset(seed=5)[1]["game_seed"] == env.reset(seed=1005)[1]["game_seed"]


def test_invalid_text_uses_a_turn_and_changes_nothing(env):
    _, info = env.reset(seed=4)
    expert = env.expert_action()
    observation, reward, terminated, truncated, after = env.step("fly to the moon")
    assert after["invalid_action"] is True
    assert "fly to the moon" in after["parse_error"]
    assert "Invalid command" in observation and "You are in the kitchen" in observation
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert env.num_steps == 1
    assert after["valid_actions"] == info["valid_actions"] and after["score"] == info["score"]
    assert env.expert_action() == expert  # an invalid command does not leave the gold path

    # forgiving about case, spacing, a full stop and anything after the first line
    _, _, _, _, info = env.step(f"  {expert.upper()}.  \nbecause I should look first")
    assert not info["invalid_action"]

    # the gold path interleaved with invalid text still wins, with every turn counted
    for action in env.gold_path[1:]:
        env.step("")
        *_, info = env.step(action)
    assert info["success"]
    assert env.num_steps == 2 * len(env.gold_path)


def test_step_limit_by_name_truncates_a_long_gold_path(java):
    env = CookingWorldEnv(step_limit="tutorial", java_env=java)
    assert env.step_limit == 16
    seed = next(s for s in range(50) if env.reset(seed=s) and len(env.gold_path) > 16)
    _, rewards, info, terminated, truncated = play(env, seed, lambda e: e.expert_action())
    assert truncated and not terminated
    assert env.num_steps == 16 and not info["success"]
    assert sum(rewards) == pytest.approx(info["score"])
    assert 0 < info["score"] < 1


def test_step_limit_counts_invalid_turns(java):
    env = CookingWorldEnv(step_limit=3, java_env=java)
    env.reset(seed=0)
    results = [env.step("xyzzy") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    with pytest.raises(RuntimeError):
        env.step("look around")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(fold="validation"), "'train', 'dev', 'test'"),
        (dict(step_limit="long"), "'tutorial'"),
        (dict(step_limit=0), ">= 1"),
        (dict(step_limit=2.5), ">= 1"),
        (dict(num_locations=12), "num_locations must be an int from 1 to 11"),
        (dict(num_locations=0), "from 1 to 11"),
        (dict(num_ingredients=6), "num_ingredients must be an int from 1 to 5"),
        (dict(num_distractor_items=-1), "from 0 to 10"),
        (dict(include_doors=2), "include_doors must be an int from 0 to 1"),
        (dict(limit_inventory_size="yes"), "limit_inventory_size"),
    ],
)
def test_bad_options_raise_value_error(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        CookingWorldEnv(**options)


def test_expert_is_only_defined_along_the_gold_path(env):
    _, info = env.reset(seed=6)
    off_path = next(a for a in info["valid_actions"] if a != env.expert_action())
    env.step(off_path)
    with pytest.raises(RuntimeError, match="gold path is only defined along itself"):
        env.expert_action()


def test_random_agent_mostly_fails(env):
    rng = random.Random(0)
    wins = 0
    for seed in range(30):
        _, rewards, info, terminated, truncated = play(env, seed, lambda e: e.random_action(rng))
        assert not info["invalid_action"]
        assert sum(rewards) == pytest.approx(info["score"])  # also when the game is lost
        assert terminated == (info["success"] or info["failure"])
        wins += info["success"]
    assert wins <= 3


def test_envs_sharing_a_jvm_may_interleave(java):
    first, second = CookingWorldEnv(java_env=java), CookingWorldEnv(fold="test", java_env=java)
    rng = random.Random(1)
    alone = play(first, 8, lambda e: e.random_action(rng))[0]
    # the same episode, with another env resetting and stepping the shared JVM between its steps
    rng, other = random.Random(1), random.Random(2)
    observations = [first.reset(seed=8)[0]]
    while not first.done:
        second.reset(seed=len(observations))
        second.step(second.random_action(other))
        observations.append(first.step(first.random_action(rng))[0])
    assert observations == alone
    first.close()  # a shared JVM is not ours to close
    assert second.reset(seed=2)[0]


def test_own_jvm_starts_lazily_and_a_closed_env_hands_it_to_the_next():
    close_idle_jvms()  # whatever earlier tests left: this one counts its own
    with CookingWorldEnv(num_locations=1, num_ingredients=1) as env:
        assert env._java is None  # nothing started before reset
        first = env.reset(seed=0)[0]
        java = env._java
        env.reset(seed=1)
        assert env._java is java  # reused across resets
    # closed: the JVM waits, running, for the next env of this process (no new start-up)
    assert env._java is None and java._gateway.java_process.poll() is None
    with CookingWorldEnv(num_locations=3, num_ingredients=2) as other:
        other.reset(seed=5)
        assert other._java is java  # taken, and loaded with this env's own world
        assert not other.step(other.expert_action())[4]["invalid_action"]
    with CookingWorldEnv(num_locations=1, num_ingredients=1) as again:
        # the first world's game again: nothing of the other world's game survives a reset
        assert again.reset(seed=0)[0] == first and again._java is java
    env.reset(seed=1)  # a closed env takes a JVM again
    assert env._java is java
    env.close()
    close_idle_jvms()
    # exited already: TWX's own __del__ would otherwise write to a closing JVM's stdin
    assert java._gateway.java_process.poll() is not None


def test_a_forked_child_starts_its_own_jvm_and_leaves_the_parents():
    import os

    close_idle_jvms()
    with CookingWorldEnv(num_locations=1, num_ingredients=1) as env:
        env.reset(seed=0)
        java = env._java
    child = os.fork()
    if child == 0:  # the child: the parent's idle JVM is bound to the parent's sockets
        code = 1
        try:
            with CookingWorldEnv(num_locations=1, num_ingredients=1) as own:
                own.reset(seed=0)
                code = 0 if own._java is not java else 2
            close_idle_jvms()
        finally:
            os._exit(code)
    assert os.waitpid(child, 0)[1] == 0
    with CookingWorldEnv(num_locations=1, num_ingredients=1) as env:
        env.reset(seed=2)
        assert env._java is java  # still the parent's, and still running
    close_idle_jvms()


def test_registry_builds_it():
    env = envs.make("cookingworld", fold="dev", step_limit="tutorial")
    assert isinstance(env, CookingWorldEnv) and env.step_limit == 16 and env.fold == "dev"


# -- the default step limit fits every game's gold path ----------------------------------------
#: a larger world than the tutorial's: some of its train games have gold paths longer than 32
LARGER_WORLD = dict(num_locations=4, num_ingredients=3, include_doors=0)


def test_default_step_limit_lets_the_expert_finish_long_games(java):
    env = CookingWorldEnv(java_env=java, **LARGER_WORLD)
    seed = next(s for s in range(60) if env.reset(seed=s) and len(env.gold_path) > STEP_LIMITS["default"])
    gold = len(env.gold_path)
    _, rewards, info, terminated, truncated = play(env, seed, lambda e: e.expert_action())
    assert terminated and not truncated and info["success"]
    assert env.num_steps == gold
    assert env.step_limit == gold + GOLD_PATH_SLACK
    # room for a few wrong turns too: invalid text costs a turn each
    env.reset(seed=seed)
    for _ in range(GOLD_PATH_SLACK):
        assert not env.step("wander about")[3]
    _, rewards, info, terminated, truncated = play_on(env, lambda e: e.expert_action())
    assert terminated and not truncated and info["success"]
    assert env.num_steps == env.step_limit


def play_on(env: CookingWorldEnv, policy):
    """Finish the current episode: like ``play`` without the reset."""
    rewards, terminated, truncated, info = [], False, False, {}
    while not (terminated or truncated):
        _, reward, terminated, truncated, info = env.step(policy(env))
        rewards.append(reward)
    return None, rewards, info, terminated, truncated


def test_default_step_limit_is_never_below_32(env):
    env.reset(seed=0)
    assert len(env.gold_path) + GOLD_PATH_SLACK < STEP_LIMITS["default"] == env.step_limit
    env.reset(seed=0)
    results = [env.step("wander about") for _ in range(STEP_LIMITS["default"])]
    assert [r[3] for r in results] == [False] * (STEP_LIMITS["default"] - 1) + [True]


@pytest.mark.parametrize("step_limit", [16, "tutorial", 32, np.int64(20)], ids=repr)
def test_explicit_step_limit_is_honoured_exactly(java, step_limit):
    env = CookingWorldEnv(java_env=java, step_limit=step_limit, **LARGER_WORLD)
    limit = STEP_LIMITS["tutorial"] if step_limit == "tutorial" else int(step_limit)
    assert env.step_limit == limit
    seed = 38  # a 35-step gold path (longer than every limit here)
    _, rewards, info, terminated, truncated = play(env, seed, lambda e: e.expert_action())
    assert len(env.gold_path) > limit
    assert truncated and not terminated and not info["success"]
    assert env.num_steps == env.step_limit == limit


def test_describe_world_in_words():
    assert describe_world(TUTORIAL_WORLD) == "3 rooms with doors, 2 ingredients, 2 distractor items"
    # counts of one are singular, left-out settings are the tutorial's, other options are ignored
    assert describe_world({"num_locations": 1, "include_doors": 0, "num_ingredients": 1, "step_limit": 16}) == (
        "1 room without doors, 1 ingredient, 2 distractor items")
    with pytest.raises(ValueError, match="num_locations"):
        describe_world({"num_locations": 12})

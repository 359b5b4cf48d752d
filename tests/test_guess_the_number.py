import pytest

from tutorial_lib import envs
from tutorial_lib.envs.guess_the_number import FORMAT_ERROR_REWARD, PRESETS


def play(env, guesses):
    results = []
    for guess in guesses:
        results.append(env.step(guess))
        if env.done:
            break
    return results


def test_correct_guess_wins_plus_one():
    env = envs.make("guess_the_number", preset="easy")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(f"I think \\boxed{{{env.target}}}")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)


def test_feedback_says_higher_or_lower():
    env = envs.make("guess_the_number", low=1, high=100, max_turns=5, preset=None)
    env.reset(seed=1)
    low_guess = env.target - 1 if env.target > 1 else None
    if low_guess:
        obs, *_ = env.step(f"\\boxed{{{low_guess}}}")
        assert "higher" in obs


def test_unparseable_answer_ends_with_penalty():
    env = envs.make("guess_the_number")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("five")
    assert reward == FORMAT_ERROR_REWARD and terminated and not truncated
    assert info["invalid_action"] and info["parse_error"]


def test_out_of_range_and_repeated_guesses_are_invalid_but_the_game_goes_on():
    env = envs.make("guess_the_number", preset="hard")
    env.reset(seed=3)
    wrong = 1 if env.target != 1 else 2
    _, reward, terminated, _, info = env.step("\\boxed{99}")
    assert info["invalid_action"] and reward == 0.0 and not terminated
    env.step(f"\\boxed{{{wrong}}}")
    _, _, terminated, _, info = env.step(f"\\boxed{{{wrong}}}")
    assert info["invalid_action"] and not terminated


def test_running_out_of_turns_gives_partial_reward_and_ends_with_both_flags():
    env = envs.make("guess_the_number", preset="easy")
    for seed in range(50):
        env.reset(seed=seed)
        if env.target not in (1, 2, 3, 4):
            break
    results = play(env, [f"\\boxed{{{g}}}" for g in (1, 2, 3, 4)])
    _, reward, terminated, truncated, info = results[-1]
    # GEM's flags: the game is over (terminated) and it ended on the turn limit (truncated)
    assert truncated and terminated and not info["success"]
    assert reward == pytest.approx(1 - abs(4 - env.target) / (10 - 1))


def test_without_closeness_reward_only_a_find_pays():
    env = envs.make("guess_the_number", preset="easy", closeness_reward=False)
    seed = next(s for s in range(50) if env.reset(seed=s) and env.target not in (1, 2, 3, 4))
    env.reset(seed=seed)
    results = play(env, [f"\\boxed{{{g}}}" for g in (1, 2, 3, 4)])
    _, reward, terminated, truncated, info = results[-1]
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, True, False)
    env.reset(seed=seed)  # a find still earns the win; format errors keep their penalty
    assert env.step(f"\\boxed{{{env.target}}}")[1] == 1.0
    env.reset(seed=seed)
    assert env.step("no guess")[1] == FORMAT_ERROR_REWARD


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_binary_search_expert_always_wins(preset):
    env = envs.make("guess_the_number", preset=preset)
    for seed in range(60):
        env.reset(seed=seed)
        while not env.done:
            _, reward, *_ = env.step(env.expert_action())
        assert reward == 1.0


def test_expert_does_not_read_the_secret():
    a, b = envs.make("guess_the_number"), envs.make("guess_the_number")
    a.reset(seed=0)
    b.reset(seed=0)
    b.target = 1 if a.target != 1 else 2
    assert a.expert_action() == b.expert_action()  # same knowledge, same guess


def test_same_seed_same_secret_and_bad_options():
    a, b = envs.make("guess_the_number"), envs.make("guess_the_number")
    assert [a.reset(seed=s) or a.target for s in range(20)] == [b.reset(seed=s) or b.target for s in range(20)]
    with pytest.raises(ValueError, match="unknown preset"):
        envs.make("guess_the_number", preset="medium")
    with pytest.raises(ValueError, match="low < high"):
        envs.make("guess_the_number", preset=None, low=5, high=5, max_turns=3)
    with pytest.raises(RuntimeError, match="reset"):
        envs.make("guess_the_number").step("\\boxed{1}")


RANGES = [(1, 10, 4), (1, 20, 5), (1, 30, 5)]


def test_ranges_draw_one_range_per_game_and_state_it():
    env = envs.make("guess_the_number", preset=None, ranges=RANGES)
    seen = {}
    for seed in range(90):
        env.reset(seed=seed)
        seen.setdefault((env.low, env.high, env.max_turns), []).append(env.target)
        assert f"between {env.low} and {env.high}" in env.task and f"within {env.max_turns} turns" in env.task
        assert env.low <= env.target <= env.high
        while not env.done:  # binary search over the range drawn wins every one of them
            _, reward, *_ = env.step(env.expert_action())
        assert reward == 1.0
    assert set(seen) == set(RANGES)  # every range is drawn
    assert max(seen[(1, 30, 5)]) > 20  # the wide range's secrets are not the narrow one's
    again = envs.make("guess_the_number", preset=None, ranges=RANGES)
    again.reset(seed=7)
    env.reset(seed=7)
    assert (again.high, again.target) == (env.high, env.target)  # the seed fixes range and secret


def test_ranges_reject_bad_specs_and_a_second_way_to_set_the_range():
    with pytest.raises(ValueError, match="takes the place"):
        envs.make("guess_the_number", ranges=RANGES)  # the default preset "easy" is a second range
    with pytest.raises(ValueError, match="takes the place"):
        envs.make("guess_the_number", preset=None, high=50, ranges=RANGES)
    with pytest.raises(ValueError, match="three integers"):
        envs.make("guess_the_number", preset=None, ranges=[(1, 10)])
    with pytest.raises(ValueError, match="three integers"):
        envs.make("guess_the_number", preset=None, ranges=[(1, 10.5, 4)])
    with pytest.raises(ValueError, match="low < high"):
        envs.make("guess_the_number", preset=None, ranges=[(1, 10, 4), (9, 9, 3)])
    with pytest.raises(ValueError, match="empty"):
        envs.make("guess_the_number", preset=None, ranges=[])
    # JSON-shaped options (lists, as a settings file or a record holds them) work the same
    env = envs.make("guess_the_number", preset=None, ranges=[[1, 10, 4], [1, 20, 5]])
    env.reset(seed=3)
    assert (env.low, env.high, env.max_turns) in {(1, 10, 4), (1, 20, 5)}

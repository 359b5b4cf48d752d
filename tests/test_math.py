from fractions import Fraction

import pytest

from tutorial_lib import envs
from tutorial_lib.envs import math_problems
from tutorial_lib.envs.math_problems import LEVELS, generate_problem, gsm8k_record_to_problem


@pytest.mark.parametrize("level", LEVELS)
def test_generated_solutions_are_right_and_show_their_arithmetic(level):
    for seed in range(50):
        problem = generate_problem(seed, level)
        *steps, final = problem.solution.splitlines()
        assert final == f"#### {problem.answer}"
        assert len(steps) == level  # one line per operation
        for step in steps:  # every "a op b = c" in the working is true
            for a, op, b, c in __import__("re").findall(r"(\d+) ([-+*]) (\d+) = (\d+)", step):
                assert eval(f"{a}{op}{b}") == int(c)
        assert problem.answer >= 0


def test_generator_is_seeded_and_splits_differ():
    assert generate_problem(7, 2) == generate_problem(7, 2)
    train = {generate_problem(s, "mixed", "train").question for s in range(100)}
    test = {generate_problem(s, "mixed", "test").question for s in range(100)}
    assert len(train) > 90 and len(train & test) < 5


def test_rewards_correct_format_only_and_nothing():
    env = envs.make("math", level=1)
    env.reset(seed=0)
    assert env.step(env.expert_action())[1] == 1.0
    env.reset(seed=0)
    wrong = env.problem.answer + 1
    _, reward, terminated, _, info = env.step(f"#### {wrong}")
    assert reward == 0.1 and terminated and info["formatted"] and not info["correct"]
    env.reset(seed=0)
    _, reward, _, _, info = env.step(f"the answer is {env.problem.answer}")
    assert reward == 0.0 and info["invalid_action"]


def test_gsm8k_rows_convert_and_load_through_datasets(monkeypatch):
    import datasets

    rows = [
        {"question": "Q1?", "answer": "2 * 3 = <<2*3=6>>6\n#### 6"},
        {"question": "Q2?", "answer": "It costs $1,250.\n#### 1,250"},
    ]
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: datasets.Dataset.from_list(rows))
    problems = math_problems.load_gsm8k("test")
    assert [p.answer for p in problems] == [Fraction(6), Fraction(1250)]
    env = envs.make("math", source="gsm8k", split="test")
    env.reset(seed=1)
    assert env.step("#### 1250")[1] == 1.0
    with pytest.raises(ValueError, match="####"):
        gsm8k_record_to_problem({"question": "?", "answer": "no final answer"})


def test_gsm8k_offline_error_names_the_generator(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(RuntimeError, match="source='generated'"):
        math_problems.load_gsm8k()

"""``benchmarks/pretrained_rl_guesses.py``: the probability a policy gives each whole guess after a
replayed history, and what is left of the range."""

import importlib.util
from pathlib import Path

import pytest

from tests.conftest import SMALL

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "pretrained_rl_guesses.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("pretrained_rl_guesses", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_guess_distribution_replays_the_feedback_and_scores_every_guess(script, tiny_cache):
    from tutorial_lib.lm.models import load_policy

    policy = load_policy("tiny", tiny_config=SMALL)
    found = script.guess_distribution(policy, [5, 8, 9, 10, 20], secret=15)
    assert found["range_left"] == [11, 19]  # 10 too low, 20 too high
    assert 0 < found["near_middle"] <= found["inside"] <= found["mass_on_guesses"] <= 1 + 1e-6
    probabilities = [p for _, p in found["likeliest"]]
    assert probabilities == sorted(probabilities, reverse=True) and len(probabilities) == 4
    with pytest.raises(ValueError, match="1-50"):
        script.guess_distribution(policy, [], secret=51)

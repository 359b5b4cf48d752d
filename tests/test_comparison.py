"""Chapter 7's comparison: the three algorithms get the same problems, temperature, learning rate,
token budget and seed (tutorial_lib.comparison)."""

import pytest

from tutorial_lib.comparison import ALGORITHMS, SHARED_WITH_PPO, comparison_settings
from tutorial_lib.presets import get_preset, rl_settings


@pytest.mark.parametrize("preset_name", ["ci", "full"])
def test_the_three_algorithms_share_their_ground(preset_name):
    preset = get_preset(preset_name)
    settings = comparison_settings(preset, seed=3)
    assert tuple(settings) == ALGORITHMS
    reinforce, ppo, grpo = (settings[name] for name in ALGORITHMS)
    chapter_six = rl_settings("math", preset, "ppo")
    for key in SHARED_WITH_PPO:
        assert getattr(reinforce, key) == getattr(ppo, key) == getattr(chapter_six, key)
    assert grpo.temperature == ppo.temperature and grpo.env_options == ppo.env_options
    assert grpo.learning_rate == ppo.learning_rate  # the presets give GRPO chapter 6's learning rate
    assert reinforce.token_budget == ppo.token_budget == grpo.token_budget
    assert ppo.lr_schedule == "constant" and grpo.lr_scheduler == "constant"
    assert reinforce.seed == ppo.seed == grpo.seed == 3
    assert reinforce.gamma == 1.0  # an answer is one turn


def test_without_a_budget_ppo_and_reinforce_run_chapter_six_iterations():
    preset = get_preset("full")  # no token budget at full: each algorithm's own count decides
    settings = comparison_settings(preset)
    assert settings["GRPO (TRL)"].token_budget is None
    iterations = rl_settings("math", preset, "ppo").iterations
    assert settings["PPO"].iterations == settings["REINFORCE"].iterations == iterations

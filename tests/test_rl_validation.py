"""Choosing an RL run's model on held-out validation games (``tutorial_lib.rl.validation``)."""

import json
from dataclasses import replace

import pytest
import torch

from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import summarize
from tutorial_lib.lm.models import load_policy
from tutorial_lib.rl import validation as validation_module
from tutorial_lib.rl.ppo import PPO, PPOSettings
from tutorial_lib.rl.reinforce import Reinforce, ReinforceSettings
from tutorial_lib.rl.rl_loop import train

from .conftest import SMALL

TTT = dict(opponent="random", agent_mark="alternate")


def settings(**overrides):
    return ReinforceSettings(**{"iterations": 4, "turns_per_iteration": 12, "num_envs": 4, "microbatch_turns": 6,
                                "learning_rate": 1e-2, "save_every": 1, "env_options": TTT, **overrides})


def weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def scripted_scores(monkeypatch):
    """Validation scores in a given order (the choice is then known), each still played for real."""
    order = []
    real = validation_module.Validation.score

    def score(self, policy):
        real(self, policy)
        return order.pop(0)

    monkeypatch.setattr(validation_module.Validation, "score", score)
    return order


def test_the_model_is_the_best_validated_weights_and_training_is_unchanged(tiny_cache, tmp_path, scripted_scores):
    """Validated at 0, 2 and 4 iterations with scores .5, .9, .1: the model is the weights after 2
    iterations (those of a 2-iteration run), while every sampled batch is the plain run's."""
    last = load_policy("tiny", tiny_config=SMALL)
    plain = train(Reinforce, last, "tictactoe", settings(), out_dir=tmp_path / "plain", progress=False)
    two = load_policy("tiny", tiny_config=SMALL)
    train(Reinforce, two, "tictactoe", settings(iterations=2), out_dir=tmp_path / "two", progress=False)

    scripted_scores.extend([0.5, 0.9, 0.1])
    policy = load_policy("tiny", tiny_config=SMALL)
    chosen = train(Reinforce, policy, "tictactoe", settings(validate_every=2, validation_episodes=4),
                             out_dir=tmp_path / "validated", progress=False)
    assert [r["mean_return"] for r in chosen.history] == [r["mean_return"] for r in plain.history]
    assert chosen.validation["scores"] == {"0": 0.5, "2": 0.9, "4": 0.1}
    assert chosen.validation["best_iteration"] == 2
    assert same(weights(policy.model), weights(two.model)) and not same(weights(policy.model), weights(last.model))
    saved = load_policy(str(tmp_path / "validated" / "model"))
    assert same(weights(saved.model), weights(two.model))
    assert json.loads((tmp_path / "validated" / "validation.json").read_text())["best_iteration"] == 2
    logged = {r["step"]: r for r in chosen.history}
    assert "validation_mean_return" in logged[2] and "validation_mean_return" not in logged[3]


def test_a_run_that_only_loses_keeps_its_start(tiny_cache, tmp_path, scripted_scores):
    scripted_scores.extend([0.7, 0.2, 0.7])  # a tie with the start keeps the start
    start = load_policy("tiny", tiny_config=SMALL)
    before = weights(start.model)
    result = train(Reinforce, start, "tictactoe", settings(iterations=2, validate_every=1, validation_episodes=4),
                             out_dir=tmp_path, progress=False)
    assert result.validation["best_iteration"] == 0
    assert same(weights(start.model), before)


def test_the_score_is_the_greedy_metric_on_the_validation_seeds(tiny_cache, tmp_path):
    """What validation reports is the policy's greedy play on seeds 50,000 up with the validation
    options (here against minimax, while training plays random), not anything of the training batch."""
    policy = load_policy("tiny", tiny_config=SMALL)
    result = train(Reinforce, policy, "tictactoe", settings(iterations=1, learning_rate=0.0, validate_every=1,
                                                             validation_episodes=6, validation_metric="loss_rate",
                                                             validation_env_options={"opponent": "minimax"}),
                             out_dir=tmp_path, progress=False)
    expected = summarize(run_episodes("tictactoe", policy, range(50_000, 50_006), env_options={"opponent": "minimax"},
                                      batch_size=6))["loss_rate"]
    assert result.validation["scores"]["0"] == pytest.approx(expected)
    assert result.validation["metric"] == "loss_rate" and result.validation["first_seed"] == 50_000


def test_a_stopped_run_resumes_with_its_validation_and_chooses_the_same(tiny_cache, tmp_path, scripted_scores):
    scripted_scores.extend([0.1, 0.8, 0.3, 0.4, 0.2])
    whole = load_policy("tiny", tiny_config=SMALL)
    straight = train(Reinforce, whole, "tictactoe", settings(validate_every=1, validation_episodes=4),
                               out_dir=tmp_path / "a", progress=False)

    scripted_scores.extend([0.1, 0.8, 0.3])  # the first part validates 0, 1, 2
    train(Reinforce, load_policy("tiny", tiny_config=SMALL), "tictactoe", settings(validate_every=1, validation_episodes=4),
                    out_dir=tmp_path / "b", progress=False, stage=(1, 2))
    scripted_scores.extend([0.4, 0.2])  # a new process: the scores so far and the best weights come from the checkpoint
    resumed_policy = load_policy("tiny", tiny_config=SMALL)
    resumed = train(Reinforce, resumed_policy, "tictactoe", settings(validate_every=1, validation_episodes=4),
                              out_dir=tmp_path / "b", progress=False, stage=(2, 2))
    assert resumed.validation == straight.validation and resumed.validation["best_iteration"] == 1
    assert same(weights(resumed_policy.model), weights(whole.model))


def test_ppo_keeps_the_value_model_of_the_chosen_weights(tiny_cache, tmp_path, scripted_scores):
    scripted_scores.extend([0.2, 0.9, 0.3])
    ppo_settings = PPOSettings(iterations=2, turns_per_iteration=8, num_envs=4, microbatch_turns=8, minibatch_turns=8,
                               ppo_epochs=1, save_every=1, env_options=TTT, validate_every=1, validation_episodes=4,
                               lr_schedule="constant")
    one = train(PPO, load_policy("tiny", tiny_config=SMALL), "tictactoe", replace(ppo_settings, iterations=1, validate_every=0),
                    out_dir=tmp_path / "one", progress=False)
    chosen = train(PPO, load_policy("tiny", tiny_config=SMALL), "tictactoe", ppo_settings, out_dir=tmp_path / "two",
                       progress=False)
    assert chosen.validation["best_iteration"] == 1
    for name, module in chosen.algorithm.modules().items():
        assert same(weights(module), weights(one.algorithm.modules()[name])), name


def test_validation_settings_are_checked():
    with pytest.raises(ValueError, match="reach the training seeds"):
        settings(validate_every=2, validation_first_seed=99_990, validation_episodes=50)
    with pytest.raises(ValueError, match="validate_every"):
        settings(validate_every=-1)


def test_an_unknown_metric_is_named_with_the_game_s_own(tiny_cache, tmp_path):
    with pytest.raises(ValueError, match="not a metric of tictactoe.*draw_rate"):
        train(Reinforce, load_policy("tiny", tiny_config=SMALL), "tictactoe",
                        settings(iterations=1, validate_every=1, validation_episodes=2, validation_metric="accuracy"),
                        out_dir=tmp_path, progress=False)

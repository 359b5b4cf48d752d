import pytest

from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.evaluate import math_accuracy, summarize
from tutorial_lib.lm.policies import ExpertPolicy, RandomPolicy


class CountingPolicy:
    """Wraps a policy and records the batch size of every call."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def act(self, episodes):
        self.calls.append(len(episodes))
        return self.inner.act(episodes)


@pytest.mark.parametrize("game", ["guess_the_number", "math", "tictactoe"])
def test_batched_play_matches_one_at_a_time(game):
    one = run_episodes(game, ExpertPolicy(), range(30), batch_size=1)
    many = run_episodes(game, ExpertPolicy(), range(30), batch_size=8)
    assert [r.seed for r in many] == list(range(30))
    assert [r.rewards for r in one] == [r.rewards for r in many]
    assert [[t.observation for t in r.turns] for r in one] == [[t.observation for t in r.turns] for r in many]


def test_policy_is_asked_once_per_turn_for_all_live_games():
    policy = CountingPolicy(ExpertPolicy())
    records = run_episodes("guess_the_number", policy, range(16), batch_size=16)
    assert policy.calls[0] == 16  # the first turn of all sixteen games in one call
    assert sum(policy.calls) == sum(r.length for r in records)
    assert len(policy.calls) == max(r.length for r in records)


def test_summaries_per_game():
    ttt = summarize(run_episodes("tictactoe", ExpertPolicy(), range(40), env_options={"agent_mark": "alternate"}))
    assert ttt["loss_rate"] == 0 and ttt["win_rate"] + ttt["draw_rate"] == pytest.approx(1)
    math = summarize(run_episodes("math", RandomPolicy(0), range(40)))
    assert math["format_accuracy"] == 1.0 and math["accuracy"] < 0.2
    gtn = summarize(run_episodes("guess_the_number", ExpertPolicy(), range(40)))
    assert gtn["success_rate"] == 1.0 and gtn["mean_turns"] <= 4 and gtn["invalid_rate"] == 0


class Garbage:
    def act(self, episodes):
        return ["¯\\_(ツ)_/¯"] * len(episodes)


def test_unparseable_output_is_counted_never_raised():
    for game in ("tictactoe", "guess_the_number", "math"):
        metrics = summarize(run_episodes(game, Garbage(), range(10)))
        assert metrics["invalid_rate"] == 1.0, game


def test_a_turn_budget_stops_new_episodes_and_lets_running_ones_finish():
    records = run_episodes("guess_the_number", ExpertPolicy(), range(100), batch_size=4, turn_budget=10)
    turns = sum(r.length for r in records)
    assert [r.seed for r in records] == list(range(len(records)))
    assert all(r.terminated or r.truncated for r in records)
    # at least the budget; beyond it only what the four games running at that point still played
    assert 10 <= turns < 10 + 4 * 4 and len(records) < 100


def test_records_keep_samples_only_from_policies_that_give_them(tiny_policy):
    records = run_episodes("tictactoe", tiny_policy, range(2))
    assert all(len(r.samples) == r.length and r.samples[0].action_ids for r in records)
    assert [r.samples[i].text for r in records for i in range(r.length)] == [
        t.action for r in records for t in r.turns[:-1]
    ]
    assert run_episodes("tictactoe", ExpertPolicy(), range(2))[0].samples == []


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        run_episodes("math", RandomPolicy(), range(3), batch_size=0)
    with pytest.raises(ValueError, match="turn_budget"):
        run_episodes("math", RandomPolicy(), range(3), turn_budget=0)
    with pytest.raises(ValueError, match="no episodes"):
        summarize([])


def test_heavy_games_cap_how_many_copies_run_at_once(monkeypatch):
    from tutorial_lib import envs
    from tutorial_lib.envs.guess_the_number import GuessTheNumberEnv

    made = []
    original = envs.make

    def counting_make(name, **options):
        made.append(name)
        return original(name, **options)

    monkeypatch.setattr(envs, "make", counting_make)
    monkeypatch.setattr(GuessTheNumberEnv, "max_parallel", 3)
    records = run_episodes("guess_the_number", ExpertPolicy(), range(10), batch_size=100)
    assert len(made) == 3 and len(records) == 10 and all(r.success for r in records)


class TrainSplitMemoriser:
    """Knows the answers of the training split only; on any other problem it writes a wrong one."""

    def act(self, episodes):
        return [e.env.expert_action() if e.env.split == "train" else "#### -1" for e in episodes]


def test_math_accuracy_separates_training_problems_from_new_ones():
    metrics = math_accuracy(TrainSplitMemoriser(), {"source": "generated", "level": 1, "split": "test"},
                            training_problems=5, new_problems=7, batch_size=4)
    assert metrics == {"accuracy (training problems)": 1.0, "accuracy (new problems)": 0.0, "format_accuracy": 1.0}


def test_evaluate_policy_plays_the_presets_options_with_the_callers_on_top():
    from tutorial_lib.evaluation.evaluate import evaluate_policy
    from tutorial_lib.presets import get_preset

    preset = get_preset("ci")
    summary = evaluate_policy("tictactoe", RandomPolicy(3), preset=preset, episodes=12, opponent="minimax")
    options = {**preset.game("tictactoe").env_options, "opponent": "minimax"}
    assert summary == summarize(run_episodes("tictactoe", RandomPolicy(3), range(12), env_options=options))
    assert summary["episodes"] == 12 and summary["win_rate"] == 0.0  # nobody beats minimax
    default = evaluate_policy("guess_the_number", RandomPolicy(0), preset=preset)
    assert default["episodes"] == preset.game("guess_the_number").eval_episodes


def test_evaluate_policy_takes_an_rl_runs_options_even_guess_the_numbers_preset():
    # chapter 5 evaluates where REINFORCE trains; GuessTheNumber's range option is named "preset"
    from tutorial_lib.evaluation.evaluate import evaluate_policy
    from tutorial_lib.presets import get_preset

    hard = evaluate_policy("guess_the_number", RandomPolicy(0), preset=get_preset("ci"), episodes=8,
                           env_options={"preset": "hard"})
    expected = run_episodes("guess_the_number", RandomPolicy(0), range(8), env_options={"preset": "hard"})
    assert hard == summarize(expected)

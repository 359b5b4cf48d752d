"""Whether a change is more than noise (``tutorial_lib.evaluation.stats``)."""

import math

import pytest

from tutorial_lib.evaluation import stats
from tutorial_lib.evaluation.evaluate import MATH_NEW_PROBLEMS, MATH_TRAINING_PROBLEMS


def test_rate_noise_is_two_standard_errors_of_a_difference():
    # .5 and .5 over 100 games each: sqrt(.25/100 + .25/100) = .0707..., twice that
    assert stats.rate_noise(0.5, 0.5, 100) == pytest.approx(2 * math.sqrt(0.005))
    # more games, less noise
    assert stats.rate_noise(0.3, 0.4, 1000) < stats.rate_noise(0.3, 0.4, 100)


def test_rates_at_the_edge_still_have_noise():
    # 0 wins out of 200 twice is not a sure difference of exactly 0
    assert stats.rate_noise(0.0, 0.0, 200) > 0
    assert stats.rate_noise(1.0, 1.0, 200) == pytest.approx(stats.rate_noise(0.0, 0.0, 200))


def test_rate_noise_rejects_empty_evaluations():
    with pytest.raises(ValueError, match="episodes"):
        stats.rate_noise(0.5, 0.5, 0)


@pytest.mark.parametrize(
    ("before", "after", "higher_is_better", "verdict"),
    [
        (0.50, 0.52, True, "noise"),  # 2 points on 200 games: noise
        (0.20, 0.60, True, "better"),
        (0.20, 0.60, False, "worse"),  # a loss rate that rose
        (0.40, 0.05, False, "better"),  # a loss rate that fell
    ],
)
def test_verdicts(before, after, higher_is_better, verdict):
    change = stats.compare_rates("rate", before, after, 200, higher_is_better=higher_is_better)
    assert change.verdict == verdict
    sentence = str(change)
    assert f"{before:.3f}" in sentence and f"{after:.3f}" in sentence
    assert ("within the noise" in sentence) == (verdict == "noise")
    if verdict != "noise":
        assert ("rose" if after > before else "fell") in sentence and verdict in sentence


def test_compare_summaries_counts_the_games_even_for_a_rate_per_action():
    before = {"episodes": 200, "mean_steps": 4.0, "loss_rate": 0.10, "invalid_rate": 0.02, "win_rate": 0.5}
    after = {"episodes": 200, "mean_steps": 5.0, "loss_rate": 0.02, "invalid_rate": 0.01, "win_rate": 0.5}
    loss = stats.compare_summaries("loss", before, after, "loss_rate")
    assert loss.verdict == "better"  # a loss rate that fell
    assert loss.noise == pytest.approx(stats.rate_noise(0.10, 0.02, 200))
    invalid = stats.compare_summaries("invalid", before, after, "invalid_rate")
    # a rate per action: still counted over the 200 games, the independent draws, not the 800 and
    # 1,000 moves played (which would give a narrower, overconfident bar)
    assert invalid.noise == pytest.approx(stats.rate_noise(0.02, 0.01, 200, 200))
    assert invalid.noise > stats.rate_noise(0.02, 0.01, 800, 1000)
    assert stats.compare_summaries("win", before, after, "win_rate").verdict == "noise"


def test_compare_math_uses_math_accuracys_problem_counts():

    before = {"accuracy (training problems)": 0.2, "accuracy (new problems)": 0.05}
    after = {"accuracy (training problems)": 0.4, "accuracy (new problems)": 0.06}
    training, new = stats.compare_math(before, after)
    assert training.verdict == "better" and new.verdict == "noise"
    assert training.noise == pytest.approx(stats.rate_noise(0.2, 0.4, MATH_TRAINING_PROBLEMS))
    assert new.noise == pytest.approx(stats.rate_noise(0.05, 0.06, MATH_NEW_PROBLEMS))
    assert str(training).startswith("greedy accuracy on training problems rose")


def test_compare_halves_judges_a_curve_against_its_own_batch_to_batch_spread():
    steady_rise = [{"x": v} for v in (0.10, 0.12, 0.11, 0.13, 0.50, 0.52, 0.51, 0.53)]
    change = stats.compare_halves(steady_rise, "x", "accuracy")
    assert change.verdict == "better" and change.before == pytest.approx(0.115) and change.after == pytest.approx(0.515)
    wandering = [{"x": v} for v in (0.0, 1.0, 0.0, 1.0, 0.2, 0.9, 0.1, 1.0)]  # same means within its spread
    assert stats.compare_halves(wandering, "x", "accuracy").verdict == "noise"
    assert stats.compare_halves(steady_rise, "x", "loss", higher_is_better=False).verdict == "worse"
    with pytest.raises(ValueError, match="at least 4"):
        stats.compare_halves(steady_rise[:3], "x", "accuracy")


def test_paired_comparison_sees_a_change_the_unpaired_bar_calls_noise():
    # 100 games; the second condition wins the same 40 games as the first and 10 more
    before = [1] * 40 + [0] * 60
    after = [1] * 50 + [0] * 50
    paired = stats.compare_paired("success", before, after)
    # by hand: differences are ten 1s and ninety 0s, variance .1 x .9 = .09, bar 2 sqrt(.09 / 100) = .06
    assert paired.noise == pytest.approx(0.06) and paired.difference == pytest.approx(0.1)
    assert paired.verdict == "better"
    unpaired = stats.compare_rates("success", 0.4, 0.5, 100)  # 2 sqrt(.24/100 + .25/100) = .14
    assert unpaired.noise == pytest.approx(0.14) and unpaired.verdict == "noise"
    # the same wins, lost on other games: the pairing no longer helps
    swapped = stats.compare_paired("success", before, [0] * 40 + [1] * 50 + [0] * 10)
    assert swapped.noise > unpaired.noise


def test_paired_comparison_of_identical_results_is_noise_with_a_bar_above_zero():
    same = stats.compare_paired("success", [1, 0, 1, 1], [1, 0, 1, 1])
    assert same.difference == 0 and same.noise > 0 and same.verdict == "noise"
    with pytest.raises(ValueError, match="one per game"):
        stats.compare_paired("success", [1, 0], [1])
    with pytest.raises(ValueError, match="no games"):
        stats.compare_paired("success", [], [])


def test_paired_records_are_matched_by_seed_not_by_position():
    from types import SimpleNamespace as Record

    before = [Record(seed=s, success=s < 5) for s in range(10)]
    after = [Record(seed=s, success=s < 5) for s in reversed(range(10))]  # the same games, listed backwards
    change = stats.compare_paired_records("success", before, after)
    # matched by seed no game differs: the bar counts half a game of ten differing, 2 sqrt(.05 x .95 / 10)
    assert change.difference == 0 and change.noise == pytest.approx(2 * math.sqrt(0.05 * 0.95 / 10))
    with pytest.raises(ValueError, match="same seeds"):
        stats.compare_paired_records("success", before, after[:-1])


def test_paired_records_take_a_function_of_a_record_as_the_value():
    from types import SimpleNamespace as Record

    before = [Record(seed=s, steps=5) for s in range(10)]
    after = [Record(seed=s, steps=30 if s < 4 else 5) for s in reversed(range(10))]
    change = stats.compare_paired_records("long games", before, after, key=lambda record: record.steps >= 20,
                                          higher_is_better=False)
    # four of ten games became long: +.4, a worse change beyond the paired bar 2 sqrt(.24 / 10) = .31
    assert change.difference == pytest.approx(0.4) and change.verdict == "worse"

"""Chapter 8's reading of the evaluation gap: the terms add up to the gap, their noise is what
repeated games show, and the summary pairs each effect with its fix."""

import pytest

from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.generalisation_gap import (
    Effect,
    averaged_over_orders,
    averaged_term_noise,
    gap_decomposition,
    gap_terms,
    gold_lengths,
    success_bars,
    summary_table,
)
from tutorial_lib.evaluation.stats import rate_noise
from tutorial_lib.lm.policies import ExpertPolicy

VERDICTS = ("better", "noise", "worse")
GAMES = 100  # games behind each rate in the comparisons built below


# --- the decomposition ------------------------------------------------------------------------------

@pytest.mark.parametrize("rates", [(0.6, 0.3, 0.4, 0.15), (0.2, 0.5, 0.1, 0.7), (0.0, 0.0, 1.0, 1.0),
                                   (0.37, 0.11, 0.59, 0.23)])
def test_the_terms_of_either_order_add_up_to_the_whole_gap(rates):
    sampled_train, _, _, greedy_test = rates
    whole = greedy_test - sampled_train
    terms = gap_decomposition(*rates)
    for first in ("games", "decoding"):
        assert terms[f"games ({first} first)"] + terms[f"decoding ({first} first)"] == pytest.approx(whole)
    assert sum(averaged_over_orders(terms).values()) == pytest.approx(whole)


def test_each_term_compares_the_corners_its_change_moves_between():
    sampled_train, sampled_test, greedy_train, greedy_test = 0.8, 0.5, 0.6, 0.2
    assert gap_terms(sampled_train, sampled_test, greedy_train, greedy_test) == {
        "games (games first)": (0.8, 0.5),  # sampled play, training games -> test games
        "decoding (games first)": (0.5, 0.2),  # test games, sampled -> greedy
        "decoding (decoding first)": (0.8, 0.6),  # training games, sampled -> greedy
        "games (decoding first)": (0.6, 0.2),  # greedy play, training games -> test games
    }
    terms = gap_decomposition(sampled_train, sampled_test, greedy_train, greedy_test)
    # each term is after minus before: a change that lowers success is negative, one that raises it positive
    assert terms["games (games first)"] == pytest.approx(-0.3)
    assert gap_decomposition(0.2, 0.5, 0.2, 0.5)["games (games first)"] == pytest.approx(0.3)
    assert averaged_over_orders(terms) == pytest.approx({"games": -(0.3 + 0.4) / 2, "decoding": -(0.3 + 0.2) / 2})


# --- the summary ------------------------------------------------------------------------------------

EFFECTS = [
    Effect("a. memorisation", "success, greedy", "training games", 0.5, "held-out test games", 0.3),
    Effect("a. memorisation", "success, greedy", "training games", 0.5, "unseen train-fold games", 0.4),
    Effect("b. decoding", "success, training games", "sampled (T=1)", 0.6, "greedy", 0.5),
    Effect("b. decoding", "success, test games", "sampled (T=1)", 0.4, "greedy", 0.3),
    Effect("d. tokenisation", "sampled turns scored on other tokens", "text tokenised again", 0.1,
           "sampled ids kept", 0.0),
    Effect("e. step limit", "success, gold path", "16 steps", 0.2, "32 steps", 1.0),
]


def test_success_bars_one_panel_per_effect_with_labels_that_tell_the_pairs_apart():
    panels = success_bars(EFFECTS)
    assert list(panels) == ["a. memorisation", "b. decoding", "e. step limit"]  # no success rows in d
    # the pairs of a differ in their matched games: those name them, without the shared metric
    assert list(panels["a. memorisation"]) == ["training games vs\nheld-out test games",
                                               "training games vs\nunseen train-fold\ngames"]
    # the pairs of b share their conditions: the label adds the games each pair holds fixed, and
    # drops the mismatched condition's parenthesis
    assert list(panels["b. decoding"]) == ["sampled vs greedy,\ntraining games", "sampled vs greedy,\ntest games"]
    assert panels["b. decoding"]["sampled vs greedy,\ntest games"] == {"mismatched": 0.4, "matched / fixed": 0.3}
    assert panels["e. step limit"] == {"16 steps vs 32 steps,\ngold path": {"mismatched": 0.2, "matched / fixed": 1.0}}


def test_summary_table_gives_each_effect_its_fix():
    fixes = {"a": "report the test fold", "b": "compare like with like", "d": "score the sampled ids",
             "e": "a longer limit"}
    table = summary_table(EFFECTS, fixes)
    assert list(table.columns) == ["effect", "metric", "mismatched", "value (mismatched)", "matched / fixed",
                                   "value (matched)", "fix"]
    assert table["fix"].tolist() == ["report the test fold"] * 2 + ["compare like with like"] * 2 + [
        "score the sampled ids", "a longer limit"]
    assert table.loc[4, "value (mismatched)"] == 0.1 and table.loc[4, "matched / fixed"] == "sampled ids kept"
    with pytest.raises(KeyError):  # an effect without a fix is a mistake, not a blank cell
        summary_table(EFFECTS, {k: v for k, v in fixes.items() if k != "e"})


# --- the step limit's cap ---------------------------------------------------------------------------

@pytest.mark.parametrize("fold", ["train", "test"])
def test_gold_lengths_are_how_long_the_expert_plays_each_game(fold):
    world = dict(num_locations=1, num_ingredients=1, num_distractor_items=1)
    seeds = [3, 0, 1]
    lengths = gold_lengths(world, fold, seeds)
    assert len(lengths) == len(seeds)  # one per game, in the order given
    expert = run_episodes("cookingworld", ExpertPolicy(), seeds, env_options={**world, "fold": fold}, batch_size=1)
    assert all(r.success for r in expert)  # the gold path wins, in exactly its own number of steps
    assert dict(zip(seeds, lengths)) == {r.seed: r.length for r in expert}


def test_the_noise_of_an_averaged_term_is_what_repeated_games_show():
    """Replay the chapter's design many times with known success probabilities: the spread of the
    term averaged over orders and three sampling draws matches the bar's two standard errors, and
    averaging the two orders' own bars would overstate it."""
    import numpy as np

    rng = np.random.default_rng(0)
    games, draws, trials = 100, 3, 20_000
    p_sampled, p_greedy = (0.39, 0.30), (0.27, 0.34)  # (training, test) success of each decoding
    greedy = rng.binomial(games, p_greedy, size=(trials, 2)) / games
    sampled = rng.binomial(games, p_sampled, size=(trials, draws, 2)) / games
    # the decoding term, averaged over the orders and the draws: greedy minus sampled, both game sets
    terms = ((greedy[:, None, :] - sampled).mean(axis=2)).mean(axis=1)
    bar = averaged_term_noise([p_sampled] * draws, p_greedy, games)
    assert 2 * terms.std() == pytest.approx(bar, rel=0.03)
    orders_bar = sum(rate_noise(*pair, games) for pair in (
        (p_sampled[0], p_greedy[0]), (p_sampled[1], p_greedy[1]))) / 2  # the old rule, one draw
    assert orders_bar > 1.3 * averaged_term_noise([p_sampled], p_greedy, games)
    with pytest.raises(ValueError, match="no sampling draws"):
        averaged_term_noise([], p_greedy, games)

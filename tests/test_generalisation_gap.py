"""Chapter 8's reading of the evaluation gap: the terms add up to the gap, and every sentence
claims only what its verdicts say."""

import itertools
from types import SimpleNamespace

import pytest

from tutorial_lib.evaluation.episodes import run_episodes
from tutorial_lib.evaluation.generalisation_gap import (
    Effect,
    averaged_over_orders,
    averaged_term_noise,
    fold_finding,
    gap_decomposition,
    gap_terms,
    gold_lengths,
    larger_term_finding,
    sign_across_draws,
    success_bars,
    summary_table,
)
from tutorial_lib.evaluation.stats import compare_rates, rate_noise
from tutorial_lib.lm.policies import ExpertPolicy

VERDICTS = ("better", "noise", "worse")
GAMES = 100  # games behind each rate in the comparisons built below


# --- the decomposition ------------------------------------------------------------------------------

@pytest.mark.parametrize("rates", [(0.6, 0.3, 0.4, 0.15), (0.2, 0.5, 0.1, 0.7), (0.0, 0.0, 1.0, 1.0),
                                   (0.37, 0.11, 0.59, 0.23)])
def test_the_terms_of_either_order_add_up_to_the_whole_gap(rates):
    sampled_train, _, _, greedy_test = rates
    whole = sampled_train - greedy_test
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
    # a change that lowers success costs it (positive); one that raises it helps (negative)
    assert terms["games (games first)"] == pytest.approx(0.3)
    assert gap_decomposition(0.2, 0.5, 0.2, 0.5)["games (games first)"] == pytest.approx(-0.3)
    assert averaged_over_orders(terms) == pytest.approx({"games": (0.3 + 0.4) / 2, "decoding": (0.3 + 0.2) / 2})


@pytest.mark.parametrize(("costs", "phrase"), [
    ([0.1, 0.2, 0.05], "costs success in every draw"),
    ([-0.1, -0.2, -0.05], "helps in every draw"),
    ([0.0, 0.1, 0.2], "costs success or nothing in every draw"),
    ([0.0, -0.1, 0.0], "helps or changes nothing in every draw"),
    ([0.0, 0.0, 0.0], "changes nothing in every draw"),
    ([0.1, -0.1, 0.0], "changes sign between draws"),
])
def test_the_sign_of_a_term_across_draws(costs, phrase):
    assert sign_across_draws(costs) == phrase


def test_the_larger_term_is_named_only_when_it_is_larger_in_every_draw():
    noise = {"games": 0.05, "decoding": 0.05}
    games_larger = {"games": [0.3, 0.25, 0.35], "decoding": [0.1, -0.05, 0.2]}
    assert larger_term_finding(games_larger, noise, 64) == (
        "The larger term is games in every draw, and its mean is beyond the noise of 64 games a side "
        "(it costs success on average).")
    helps = {"games": [0.1, 0.0, 0.1], "decoding": [-0.3, -0.25, -0.35]}
    assert "decoding in every draw" in larger_term_finding(helps, noise, 64)
    assert "adds success on average" in larger_term_finding(helps, noise, 64)
    within = larger_term_finding(games_larger, {"games": 0.5, "decoding": 0.5}, 64)
    assert "within the noise of 64 games" in within and "0.500" in within and "beyond" not in within
    swaps = {"games": [0.3, 0.05, 0.35], "decoding": [0.1, -0.2, 0.2]}  # decoding is larger in the second draw
    assert larger_term_finding(swaps, noise, 64).startswith("Which term is larger changes between draws")


# --- the fold finding -------------------------------------------------------------------------------

def fold_changes(training, unseen, test):
    """The three comparisons the chapter makes, from greedy success on each set of games."""
    return (compare_rates("memorisation", training, unseen, GAMES),
            compare_rates("fold shift", unseen, test, GAMES),
            compare_rates("the two together", training, test, GAMES))


# (training, unseen train-fold, test) success -> the verdicts they give over GAMES games, and a
# phrase that branch of fold_finding says
BRANCHES = [
    ((0.9, 0.5, 0.1), ("worse", "worse", "worse"), "that is memorisation. The change of fold lost more success"),
    ((0.9, 0.5, 0.5), ("worse", "noise", "worse"), "that is memorisation. The change of fold lost nothing"),
    ((0.9, 0.1, 0.5), ("worse", "better", "worse"), "that is memorisation. The change of fold even gained"),
    ((0.5, 0.2, 0.45), ("worse", "better", "noise"), "they scored within noise of the training games"),
    ((0.5, 0.35, 0.4), ("worse", "noise", "noise"), "The test games scored within noise of the unseen"),
    ((0.5, 0.2, 0.8), ("worse", "better", "better"), "they scored above the training games"),
    ((0.8, 0.8, 0.3), ("noise", "worse", "worse"), "is fold shift, not memorisation: new games of the training "
                                                   "fold did as well as"),
    ((0.5, 0.9, 0.1), ("better", "worse", "worse"), "did better than the training games"),
    ((0.5, 0.6, 0.4), ("noise", "worse", "noise"), "may be an easier set"),
    ((0.6, 0.5, 0.4), ("noise", "noise", "worse"), "Neither step alone loses success"),
    ((0.4, 0.5, 0.6), ("noise", "noise", "better"), "one set of games even scored above another"),
    ((0.5, 0.5, 0.5), ("noise", "noise", "noise"), "No step differs beyond the noise"),
]


@pytest.mark.parametrize(("rates", "verdicts", "phrase"), BRANCHES)
def test_every_branch_of_the_fold_finding_from_measured_rates(rates, verdicts, phrase):
    changes = fold_changes(*rates)
    assert tuple(c.verdict for c in changes) == verdicts  # the rates do give the branch they are meant to
    sentence = fold_finding(*changes)
    assert phrase in sentence


def test_each_outcome_of_the_fold_finding_reads_differently():
    sentences = [fold_finding(*fold_changes(*rates)) for rates, _, _ in BRANCHES]
    assert len(set(sentences)) == len(BRANCHES)


# What a sentence asserts, and the verdicts under which it may: (phrase, predicate on the verdicts of
# (memorisation, fold shift, whole gap)). A phrase that appears under other verdicts contradicts them.
CLAIMS = [
    ("that is memorisation", lambda m, s, w: m == "worse" and w == "worse"),
    ("fold shift on top of it", lambda m, s, w: s == "worse" and w == "worse"),
    ("is fold shift", lambda m, s, w: s == "worse" and w == "worse"),
    ("no memorisation", lambda m, s, w: m != "worse"),
    ("neither memorisation", lambda m, s, w: m != "worse"),
    ("not shown to be memorisation", lambda m, s, w: m == "worse" and w != "worse"),
    ("unseen train-fold games scored below the training games beyond noise", lambda m, s, w: m == "worse"),
    ("test games scored below the unseen train-fold games beyond noise", lambda m, s, w: s == "worse"),
    ("scored above the training games", lambda m, s, w: w == "better"),
    ("scored within noise of the training games", lambda m, s, w: w == "noise"),
    ("scored above the unseen train-fold games", lambda m, s, w: s == "better"),
    ("scored within noise of the unseen train-fold games", lambda m, s, w: s == "noise"),
    ("scored below the unseen train-fold games", lambda m, s, w: s == "worse"),
    ("did as well as the training games", lambda m, s, w: m == "noise"),
    ("did better than the training games", lambda m, s, w: m == "better"),
    ("lost nothing beyond noise", lambda m, s, w: s == "noise"),
    ("even gained success beyond noise", lambda m, s, w: s == "better"),
    ("the test fold scored below both", lambda m, s, w: s == "worse" and w == "worse"),
    ("Neither step alone loses success", lambda m, s, w: m != "worse" and s != "worse" and w == "worse"),
    ("No step loses success beyond noise", lambda m, s, w: "worse" not in (m, s, w)),
    ("No step differs", lambda m, s, w: (m, s, w) == ("noise", "noise", "noise")),
]


@pytest.mark.parametrize("verdicts", list(itertools.product(VERDICTS, repeat=3)))
def test_a_fold_finding_never_contradicts_its_verdicts(verdicts):
    # every combination, even those three real comparisons cannot give (the function must not
    # rely on arithmetic between verdicts that are each judged against their own noise)
    sentence = fold_finding(*(SimpleNamespace(verdict=v) for v in verdicts))
    for phrase, allowed in CLAIMS:
        if phrase in sentence:
            assert allowed(*verdicts), f"{phrase!r} under {verdicts}: {sentence}"
    # memorisation is affirmed exactly when the training games beat new games of both folds
    assert ("that is memorisation" in sentence) == (verdicts[0] == "worse" and verdicts[2] == "worse")
    # and fold shift exactly when the test fold lost to both other sets
    affirms_shift = "fold shift on top of it" in sentence or "is fold shift" in sentence
    assert affirms_shift == (verdicts[1] == "worse" and verdicts[2] == "worse")


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

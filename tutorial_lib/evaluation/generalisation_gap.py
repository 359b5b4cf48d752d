"""Reading why evaluation lags training (chapter 8).

Training-time returns are sampled play on the training games; evaluation is greedy play on the
test fold. This module splits the gap between them into what each change costs, and turns the
measured comparisons into sentences that claim no more than their verdicts. :func:`gold_lengths`
measures the cap a step limit puts on both: a game whose gold path is longer than the limit cannot
be won in time by anything that imitates the expert.

Every sentence builder takes verdicts already judged against noise (``"better"``, ``"noise"`` or
``"worse"``, as :class:`tutorial_lib.evaluation.stats.Change` gives them).
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tutorial_lib import envs
from tutorial_lib.evaluation.stats import Change, rate_variance

#: the two changes between training-time collection and evaluation
CHANGES = ("games", "decoding")


def term_name(change: str, first: str) -> str:
    """``"games (decoding first)"``: a change, and which of the two changes was made first."""
    return f"{change} ({first} first)"


def gap_terms(sampled_train: float, sampled_test: float, greedy_train: float,
              greedy_test: float) -> dict[str, tuple[float, float]]:
    """The success rates (before, after) that each change compares, made in either order.

    The four rates are the corners of a 2x2 table (decoding x games); going from sampled training
    games to greedy test games passes through one of the two other corners, so each change has a
    cost made first and one made second, and the two need not agree.
    """
    return {term_name("games", "games"): (sampled_train, sampled_test),
            term_name("decoding", "games"): (sampled_test, greedy_test),
            term_name("decoding", "decoding"): (sampled_train, greedy_train),
            term_name("games", "decoding"): (greedy_train, greedy_test)}


def gap_decomposition(sampled_train: float, sampled_test: float, greedy_train: float,
                      greedy_test: float) -> dict[str, float]:
    """Success each change costs: the rate before it minus the rate after it (negative: it helps).
    In either order the two terms add up to the whole gap, ``sampled_train - greedy_test``."""
    return {term: before - after
            for term, (before, after) in gap_terms(sampled_train, sampled_test, greedy_train, greedy_test).items()}


def averaged_over_orders(terms: Mapping[str, float]) -> dict[str, float]:
    """Each change's term (or its noise) averaged over the two orders, so that neither change is
    favoured by being made first; the averaged terms still add up to the whole gap."""
    return {change: (terms[term_name(change, "games")] + terms[term_name(change, "decoding")]) / 2
            for change in CHANGES}


def averaged_term_noise(sampled_rates: Sequence[tuple[float, float]], greedy_rates: tuple[float, float],
                        episodes: int) -> float:
    """Two standard errors of a change's term averaged over the two orders (:func:`averaged_over_orders`)
    and over the sampling draws. ``sampled_rates`` holds each draw's (training, test) success under
    sampling, ``greedy_rates`` greedy play's (training, test), which no draw changes; every rate is
    over ``episodes`` independent games.

    Either term, averaged over the orders, is half the sum of four differences' worth of corners:
    each of the four corners enters once with weight 1/2, so its variance is a quarter of theirs,
    summed. The greedy corners are the same in every draw; the sampled ones are averaged over the
    D draws, which divides their variance by D. (Averaging the two orders' own noise bars instead
    would count each corner twice over: a bar about 1.4 times too wide.)"""
    if not sampled_rates:
        raise ValueError("no sampling draws")
    draws = len(sampled_rates)
    sampled = sum(rate_variance(rate, episodes) for pair in sampled_rates for rate in pair) / draws ** 2
    greedy = sum(rate_variance(rate, episodes) for rate in greedy_rates)
    return 2 * (0.25 * (sampled + greedy)) ** 0.5


def sign_across_draws(costs: Sequence[float]) -> str:
    """How a term's sign behaves over sampling draws, for ``"it ..."``: only a term with one sign in
    every draw can be a finding (whether it exceeds the noise of the games is a separate check)."""
    costs = [float(c) for c in costs]
    if not costs:
        raise ValueError("no draws")
    if all(c > 0 for c in costs):
        return "costs success in every draw"
    if all(c < 0 for c in costs):
        return "helps in every draw"
    if all(c == 0 for c in costs):  # say so plainly: "costs success or nothing" would suggest a cost
        return "changes nothing in every draw"
    if all(c >= 0 for c in costs):
        return "costs success or nothing in every draw"
    if all(c <= 0 for c in costs):
        return "helps or changes nothing in every draw"
    return "changes sign between draws"


def larger_term_finding(per_draw: Mapping[str, Sequence[float]], noise: Mapping[str, float], games: int) -> str:
    """Which term of the gap is larger, as a sentence: ``per_draw`` holds each term's cost in every
    sampling draw, ``noise`` its two standard errors, ``games`` the games behind each rate.

    A term counts as the larger one only if it is larger in every draw, and its mean is called
    beyond noise only if it exceeds that term's own noise.
    """
    terms = list(per_draw)
    draws = list(zip(*(per_draw[term] for term in terms)))
    if not draws:
        raise ValueError("no draws")
    # per draw, the term of largest magnitude; a tie goes to the first term
    larger = {max(range(len(terms)), key=lambda i: abs(draw[i])) for draw in draws}
    if len(larger) > 1:
        return "Which term is larger changes between draws: in this run neither dominates beyond the noise."
    term = terms[larger.pop()]
    mean = statistics.fmean(per_draw[term])
    if abs(mean) > noise[term]:
        return (f"The larger term is {term} in every draw, and its mean is beyond the noise of {games} games a side "
                f"(it {'costs' if mean > 0 else 'adds'} success on average).")
    return (f"The larger term is {term} in every draw, but its mean is within the noise of {games} games a side "
            f"(two standard errors: {noise[term]:.3f}): more games would be needed to settle it.")


_SCORED = {"better": "above", "noise": "within noise of", "worse": "below"}


def fold_finding(memorisation: Change, fold_shift: Change, whole_gap: Change) -> str:
    """What greedy success on training games, unseen train-fold games and test games shows.

    ``memorisation``: training games to unseen train-fold games; ``fold_shift``: unseen
    train-fold games to test games; ``whole_gap``: training games to test games. Each is judged
    against the noise of its own games, so the three verdicts need not add up, and each branch
    names only what its verdicts say.
    """
    mem, shift, whole = memorisation.verdict, fold_shift.verdict, whole_gap.verdict
    if mem == "worse" and whole == "worse":
        return ("The policy did better on the games it was trained on than on new games of either fold, beyond "
                "noise: that is memorisation. The change of fold " + {
                    "worse": "lost more success again: fold shift on top of it.",
                    "noise": "lost nothing beyond noise.",
                    "better": "even gained success beyond noise: the two sets of new games are not equally hard, "
                              "so the size of the memorisation term depends on which new games measure it."}[shift])
    if mem == "worse":  # the test games held up against the training games: the unseen train-fold set is the odd one
        return ("The unseen train-fold games scored below the training games beyond noise, but the test games did "
                f"not (they scored {_SCORED[whole]} the training games). So the drop is not shown to be "
                "memorisation, since new games of the other fold did not suffer it: the unseen train-fold games "
                "may just be harder for this policy, and this run cannot tell the two apart. The test games "
                f"scored {_SCORED[shift]} the unseen train-fold games.")
    if shift == "worse" and whole == "worse":
        return ("The success lost beyond noise is fold shift, not memorisation: new games of the training fold "
                f"did {'as well as' if mem == 'noise' else 'better than'} the training games, and the test fold "
                "scored below both.")
    if shift == "worse":  # below the unseen train-fold games, not below the training games
        return ("The test games scored below the unseen train-fold games beyond noise, but not below the training "
                "games: the unseen train-fold games may be an easier set, so this run shows neither memorisation "
                "nor a fold shift it can tell from the difficulty of the games.")
    if whole == "worse":
        return ("Neither step alone loses success beyond the noise of its games, but the two together do: the test "
                "games scored below the training games, and this run cannot say whether memorisation or fold "
                "shift costs it.")
    if "better" in (mem, shift, whole):
        return ("No step loses success beyond noise, and one set of games even scored above another beyond noise: "
                "the sets are not equally hard for this policy, and this run shows no memorisation and no fold "
                "shift.")
    return ("No step differs beyond the noise of its games: this run shows no memorisation and no fold shift "
            "it can tell from noise.")


@dataclass(frozen=True)
class Effect:
    """One row of the chapter's summary: a metric under the mismatched condition (as training-time
    collection or a buggy pipeline has it) and under the matched, fixed one."""

    effect: str  #: the section's letter, then the effect: ``"a. games: seen vs unseen"``
    metric: str  #: what is measured, then what the pair holds fixed: ``"success, test games"``
    mismatched: str
    value_mismatched: float
    matched: str
    value_matched: float


#: the summary table's column for each field of :class:`Effect`
SUMMARY_COLUMNS = {"effect": "effect", "metric": "metric", "mismatched": "mismatched",
                   "value_mismatched": "value (mismatched)", "matched": "matched / fixed",
                   "value_matched": "value (matched)"}


def summary_table(effects: Sequence[Effect], fixes: Mapping[str, str]):
    """The effects as a table, each with its fix; ``fixes`` is keyed by the effect's section letter
    (the text before its first ``.``), and an effect without one is an error, not a blank cell."""
    import pandas as pd

    table = pd.DataFrame([{column: getattr(e, field) for field, column in SUMMARY_COLUMNS.items()} for e in effects],
                         columns=list(SUMMARY_COLUMNS.values()))
    table["fix"] = [fixes[e.effect.split(".")[0]] for e in effects]
    return table


def bar_label(effect: Effect, with_metric: bool = True, width: int = 21) -> str:
    """A bar pair's name: the two conditions (the mismatched one without its parenthesis), and
    what the pair holds fixed, wrapped to ``width`` characters to fit under a bar."""
    text = f"{effect.mismatched.split(' (')[0]} vs {effect.matched}"
    if with_metric:
        text += f", {effect.metric.removeprefix('success, ')}"
    return textwrap.fill(text, width, break_on_hyphens=False)


def success_bars(effects: Sequence[Effect]) -> dict[str, dict[str, dict[str, float]]]:
    """The success-rate rows as bar pairs, one panel per effect in the order given:
    ``{effect: {bar label: {"mismatched": value, "matched / fixed": value}}}``.

    Where the pairs of a panel differ in their matched condition, that already tells them apart
    and the label leaves out the metric; otherwise the label ends with what the pair holds fixed.
    """
    rows = [e for e in effects if e.metric.startswith("success")]
    panels = {}
    for name in dict.fromkeys(e.effect for e in rows):
        pairs = [e for e in rows if e.effect == name]
        named_by_condition = len({e.matched for e in pairs}) > 1
        panels[name] = {bar_label(e, with_metric=not named_by_condition): {"mismatched": e.value_mismatched,
                                                                          "matched / fixed": e.value_matched}
                        for e in pairs}
    return panels


def gold_lengths(env_options: Mapping[str, Any], fold: str, seeds: Iterable[int]) -> list[int]:
    """The length of the gold path (the expert's plan) of each CookingWorld game ``seeds`` of
    ``fold``, in the world ``env_options``: what a step limit must leave room for."""
    with envs.make("cookingworld", fold=fold, **env_options) as env:  # closing the game stops its JVM
        lengths = []
        for seed in seeds:
            env.reset(seed=seed)
            lengths.append(len(env.gold_path))
        return lengths

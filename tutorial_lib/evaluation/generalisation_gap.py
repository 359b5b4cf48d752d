"""Reading why evaluation lags training (chapter 8).

Training-time returns are sampled play on the training games; evaluation is greedy play on the
test fold. This module splits the gap between them into what each change does to success, and
turns the measured comparisons into a summary table and bars. :func:`gold_lengths`
measures the cap a step limit puts on both: a game whose gold path is longer than the limit cannot
be won in time by anything that imitates the expert.

Every sentence builder takes verdicts already judged against noise (``"better"``, ``"noise"`` or
``"worse"``, as :class:`tutorial_lib.evaluation.stats.Change` gives them).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tutorial_lib import envs
from tutorial_lib.evaluation.stats import rate_variance

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
    """The change of success each change makes: the rate after it minus the rate before it
    (negative: it costs success). In either order the two terms add up to the whole change,
    ``greedy_test - sampled_train``."""
    return {term: after - before
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

"""Whether a change is more than noise: the statistics every chapter's verdicts rest on.

    change = compare_rates("loss rate", before["loss_rate"], after["loss_rate"], episodes=200,
                           higher_is_better=False)
    change.verdict          # "better", "worse" or "noise"

A difference is *noise* when it is within two standard errors of the difference of two rates
measured over their games: another set of evaluation games could move it that far. Imports only
``evaluation.evaluate`` (its problem counts); :mod:`tutorial_lib.report` turns verdicts into sentences.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tutorial_lib.evaluation.evaluate import MATH_NEW_PROBLEMS, MATH_TRAINING_PROBLEMS


def rate_noise(before: float, after: float, episodes: int, episodes_after: int | None = None) -> float:
    """Two standard errors of ``after - before`` for rates measured over independent episodes.

    A rate of exactly 0 or 1 has no spread of its own; it is counted as half an episode away from
    the edge, so that 0 against 0 over 200 games is not called a sure difference of 0.
    """
    if episodes < 1 or (episodes_after is not None and episodes_after < 1):
        raise ValueError("episodes must be at least 1")
    n1, n2 = episodes, episodes_after or episodes

    return 2 * math.sqrt(rate_variance(before, n1) + rate_variance(after, n2))


def rate_variance(rate: float, episodes: int) -> float:
    """The variance of a rate over ``episodes`` independent episodes, p(1 - p)/n, with a rate of 0
    or 1 counted half an episode from the edge (as :func:`rate_noise` counts it)."""
    if episodes < 1:
        raise ValueError("episodes must be at least 1")
    rate = min(max(rate, 0.5 / episodes), 1 - 0.5 / episodes)
    return rate * (1 - rate) / episodes


@dataclass(frozen=True)
class Change:
    """A metric before and after, and whether the difference is more than noise."""

    name: str
    before: float
    after: float
    noise: float
    higher_is_better: bool = True

    @property
    def difference(self) -> float:
        return self.after - self.before

    @property
    def verdict(self) -> str:
        """``"better"``, ``"worse"`` or ``"noise"`` (within two standard errors)."""
        if abs(self.difference) <= self.noise:
            return "noise"
        return "better" if (self.difference > 0) == self.higher_is_better else "worse"

    def __str__(self) -> str:
        if self.verdict == "noise":
            return (f"{self.name} went from {self.before:.3f} to {self.after:.3f}, within the noise "
                    f"(two standard errors: {self.noise:.3f})")
        verb = "rose" if self.difference > 0 else "fell"
        return f"{self.name} {verb} from {self.before:.3f} to {self.after:.3f} ({self.verdict})"


def compare_rates(name: str, before: float, after: float, episodes: int, episodes_after: int | None = None,
                  higher_is_better: bool = True) -> Change:
    """A rate before and after, measured over ``episodes`` games (``episodes_after`` for the second,
    if different). For a rate per action (the invalid-action rate) pass the number of games too
    (:func:`compare_summaries` says why)."""
    return Change(name, float(before), float(after), rate_noise(before, after, episodes, episodes_after),
                  higher_is_better)


def paired_noise(before: Sequence[float], after: Sequence[float]) -> float:
    """Two standard errors of ``mean(after) - mean(before)`` where entry i of both lists is one
    game played twice (the same seed, two conditions): the spread of the per-game differences.

    When the two conditions tend to win and lose the same games, this bar is narrower than
    :func:`rate_noise`'s, which treats the two rates as measured on independent games. Where no
    game differs, the differences are counted as if half a game did (as :func:`rate_variance`
    counts a rate of 0 or 1), so that identical results are not called a sure difference of 0.
    """
    if len(before) != len(after):
        raise ValueError(f"paired outcomes need one per game in both lists; got {len(before)} and {len(after)}")
    if not before:
        raise ValueError("no games to compare")
    n = len(before)
    differences = [float(a) - float(b) for b, a in zip(before, after)]
    variance = max(statistics.pvariance(differences), rate_variance(0.0, n) * n)  # >= half a game differing by 1
    return 2 * math.sqrt(variance / n)


def compare_paired(name: str, before: Sequence[float], after: Sequence[float], higher_is_better: bool = True) -> Change:
    """Per-game outcomes (1 won, 0 not; or any per-game score) of the same games under two
    conditions, compared game by game: the means, with :func:`paired_noise` as the bar."""
    noise = paired_noise(before, after)  # checks the lists first
    return Change(name, statistics.fmean(map(float, before)), statistics.fmean(map(float, after)), noise,
                  higher_is_better)


def compare_paired_records(name: str, before: Sequence, after: Sequence, key="success",
                           higher_is_better: bool = True) -> Change:
    """:func:`compare_paired` on two lists of episode records (``EpisodeRecord``), matched by seed.
    ``key`` is the per-game value compared: a field name (``success``, ``truncated``...) or a
    function of a record (``lambda record: record.steps >= 20``). Every seed must be in both."""
    value = key if callable(key) else (lambda record: getattr(record, key))
    first, second = ({record.seed: value(record) for record in records} for records in (before, after))
    if first.keys() != second.keys() or len(first) != len(before) or len(second) != len(after):
        raise ValueError("paired records need the same seeds, each once, on both sides")
    seeds = sorted(first)
    return compare_paired(name, [first[s] for s in seeds], [second[s] for s in seeds], higher_is_better)


#: summary metrics where a fall is an improvement (every other rate a chapter compares should rise)
LOWER_IS_BETTER = frozenset({"loss_rate", "invalid_rate", "truncated_rate"})


def compare_summaries(name: str, before: dict, after: dict, key: str) -> Change:
    """``key`` of two :func:`~tutorial_lib.evaluation.evaluate.summarize` results, with the noise of
    the summaries' episodes. For the invalid-action rate, a rate per action, the episodes are still
    the count: the actions of one game are not independent draws (a policy that writes one illegal
    move in a position tends to write more in that game), so counting them as independent would
    narrow the noise below what reruns show. Counting games instead is the conservative choice: the
    variance of a game's share of invalid actions is at most p(1 - p)."""

    def count(summary: dict) -> int:
        return max(1, round(summary["episodes"]))

    return compare_rates(name, before[key], after[key], count(before), count(after),
                         higher_is_better=key not in LOWER_IS_BETTER)


def compare_math(before: dict, after: dict, prefix: str = "greedy accuracy on") -> list[Change]:
    """Both accuracies of two :func:`~tutorial_lib.evaluation.evaluate.math_accuracy` results (its default
    problem counts), training problems first."""

    return [compare_rates(f"{prefix} {which} problems", before[f"accuracy ({which} problems)"],
                          after[f"accuracy ({which} problems)"], count)
            for which, count in (("training", MATH_TRAINING_PROBLEMS), ("new", MATH_NEW_PROBLEMS))]


def spread(values: Sequence[float]) -> str:
    """``"mean 0.512 (min 0.470, max 0.560, 3 runs)"``: how a result varies over seeds."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no values")
    return (f"mean {statistics.fmean(values):.3f} (min {min(values):.3f}, max {max(values):.3f}, "
            f"{len(values)} run{'s' if len(values) > 1 else ''})")


def run_verdicts(rows: Sequence[dict], name: str, before_key: str, after_key: str, episodes: int,
                 higher_is_better: bool = True) -> list[str]:
    """Each recorded run's verdict on one before/after change (:func:`compare_rates`): ``"better"``,
    ``"noise"`` or ``"worse"``."""
    return [compare_rates(name, row[before_key], row[after_key], episodes, higher_is_better=higher_is_better).verdict
            for row in rows]


def halves(history: Sequence[dict], key: str) -> tuple[float, float]:
    """Mean of ``key`` over the first and the second half of a run's iterations (training curves
    are noisy from one batch to the next; half-run means are steadier than any single point)."""
    values = [float(row[key]) for row in history if key in row]
    if len(values) < 2:
        raise ValueError(f"need at least 2 iterations with {key!r}; got {len(values)}")
    half = len(values) // 2
    return statistics.fmean(values[:half]), statistics.fmean(values[half:])


def compare_halves(history: Sequence[dict], key: str, label: str, higher_is_better: bool = True) -> Change:
    """``key``'s mean over the first and the second half of a run, as a :class:`Change` whose noise is
    two standard errors of their difference, estimated from how much the logged values vary from
    one update to the next (so a curve that wanders by a batch's luck reads as ``"noise"``)."""
    values = [float(row[key]) for row in history if key in row]
    half = len(values) // 2
    first, second = values[:half], values[half:]
    if len(first) < 2:
        raise ValueError(f"need at least 4 iterations with {key!r} (2 per half); got {len(values)}")
    noise = 2 * math.sqrt(statistics.variance(first) / len(first) + statistics.variance(second) / len(second))
    return Change(label, statistics.fmean(first), statistics.fmean(second), noise, higher_is_better)

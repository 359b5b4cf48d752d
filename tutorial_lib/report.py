"""Sentences a notebook's own results decide, tables of recorded runs, and code shown as it runs.

A chapter that states a result in prose must not write the number down: the tiny model's training
is deterministic on one CPU but not across CPUs, so a reader's run differs from the authors'. A
cell judges the change (:mod:`tutorial_lib.evaluation.stats`) and prints the sentence instead::

    change = compare_rates("loss rate", before["loss_rate"], after["loss_rate"], episodes=200,
                           higher_is_better=False)
    say(f"Against random, the {change}.")   # "... loss rate fell from 0.040 to 0.010 (better)."

Recorded runs (``benchmarks/results/*.jsonl``, read by :mod:`tutorial_lib.records`) are summarised
here over seeds. A chapter that derives a loss shows the library's code with :func:`show_source`,
read from the installed source when the cell runs, so that the prose and the code it explains
cannot drift.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tutorial_lib.evaluation.stats import compare_rates, halves, run_verdicts, spread
from tutorial_lib.records import (
    TICTACTOE_GUARDS_RECORD,
    TICTACTOE_HELDOUT_RECORD,
    TICTACTOE_OPPONENT_RECORDS,
    TICTACTOE_VERDICT_CELLS,
    TICTACTOE_VERDICT_RECORD,
    cpu_label,
    distinct_runs,
    latest_runs,
    longest_runs,
    pretrained_rl_recipe,
    pretrained_run_name,
    recorded_runs,
    same_recipe,
    tictactoe_opponent_runs,
)

if TYPE_CHECKING:
    from tutorial_lib.presets import Preset

# the book's output boxes show about 75 characters of monospace before they scroll
WIDTH = 72


def wrapped(text: str, width: int = WIDTH) -> str:
    """``text`` with each line longer than ``width`` folded, so that a printed prompt, task or transcript
    fits the page; shorter lines are kept exactly as they are."""
    return "\n".join(textwrap.fill(line, width) if len(line) > width else line for line in text.splitlines())


def say(*sentences: str, width: int = WIDTH) -> None:
    """Print sentences as one paragraph wrapped to the page (a notebook's output is not reflowed)."""
    print(textwrap.fill(" ".join(s.strip() for s in sentences if s.strip()), width))


def glue(name: str, value, display: bool = False) -> None:
    """myst_nb's ``glue`` for a chapter's sentences, a numpy scalar turned into a Python number first:
    the book formats a glued value with Python's format spec (``{glue:text}`name:.3f```), which a
    ``numpy.float64`` fails in the build's text role."""
    from myst_nb import glue as myst_glue  # only the notebooks need myst_nb

    myst_glue(name, value.item() if getattr(value, "ndim", None) == 0 else value, display=display)


def glue_change(prefix: str, change):
    """A before/after :class:`~tutorial_lib.evaluation.stats.Change` as glue: ``prefix_before``,
    ``_after``, ``_noise`` (two standard errors) and ``_verdict``, the phrase a sentence reads out
    ("no change" where the two agree to the three decimals a page prints, "a change within noise",
    "a rise beyond noise", "a fall beyond noise")."""
    glue(f"{prefix}_before", float(change.before))
    glue(f"{prefix}_after", float(change.after))
    glue(f"{prefix}_noise", float(change.noise))
    if round(change.before, 3) == round(change.after, 3):
        verdict = "no change"
    elif change.verdict == "noise":
        verdict = "a change within noise"
    else:
        verdict = f"a {'rise' if change.difference > 0 else 'fall'} beyond noise"
    glue(f"{prefix}_verdict", verdict)
    return change


def tidy(frame, digits: int = 3, by: str = "column", decimals: dict | None = None):
    """``frame`` styled for the page: one number format per column (``by="row"``: per row, for a
    table whose rows are the metrics), counts as integers with thousands separators, every other
    number with ``digits`` decimals, or with ``decimals[label]`` for the columns (rows) it names
    (``{"mean steps": 1}``); text escaped for HTML (a styled table writes its cells as HTML,
    where ``<move>`` would vanish as a tag). A column counts when all its numbers are whole and one
    is above 1: a rate of 0 or 1 keeps its decimals (``1.000``)."""
    import html
    import numbers

    import pandas as pd

    def is_number(value) -> bool:
        return isinstance(value, numbers.Number) and not isinstance(value, bool) and value == value

    decimals = decimals or {}
    labels = frame.index if by == "row" else frame.columns
    unknown = set(decimals) - set(labels)
    if unknown:
        raise KeyError(f"decimals names {sorted(unknown)}, which the table's {by}s do not hold")

    def formatter(values, label):
        numeric = [v for v in values if is_number(v)]
        counts = numeric and all(float(v).is_integer() for v in numeric) and max(abs(v) for v in numeric) > 1
        spec = "{:,.0f}" if counts else f"{{:.{decimals.get(label, digits)}f}}"
        return lambda value: spec.format(value) if is_number(value) else html.escape(str(value))

    styler = frame.style
    if by == "row":
        for label, row in frame.iterrows():
            styler = styler.format(formatter(row.tolist(), label), subset=pd.IndexSlice[[label], :], na_rep="")
    else:
        for column in frame.columns:
            styler = styler.format(formatter(frame[column].tolist(), column), subset=[column], na_rep="")
    return styler


def count_phrase(count: int, of: int, what: str) -> str:
    """``"2 of 3 seeds"``, ``"all 3 seeds"``, ``"none of the 3 seeds"``, ``"1 of 1 seed"``,
    ``"both seeds"``, ``"neither of the 2 seeds"``."""
    if of == 1:
        return f"{count} of 1 {what.removesuffix('s')}"
    if count == of:
        return f"both {what}" if of == 2 else f"all {of} {what}"
    if count == 0:
        return f"neither of the 2 {what}" if of == 2 else f"none of the {of} {what}"
    return f"{count} of {of} {what}"


def across_runs(rows: Sequence[dict], name: str, before_key: str, after_key: str, episodes: int,
                higher_is_better: bool = True) -> str:
    """How one before/after change fared over recorded runs (seeds): each run's verdict, as
    :func:`compare_rates` gives it over ``episodes``, counted, and the spread before and after.

        "draws against minimax: better in all 3 runs (before: mean ..., after: mean ...)"
    """
    if not rows:
        raise ValueError("no runs")
    verdicts = run_verdicts(rows, name, before_key, after_key, episodes, higher_is_better)
    phrases = {"better": "better", "noise": "within noise", "worse": "worse"}
    counted = ", ".join(f"{phrase} in {count_phrase(verdicts.count(verdict), len(rows), 'runs')}"
                        for verdict, phrase in phrases.items() if verdict in verdicts)
    return (f"{name}: {counted} (before: {spread([row[before_key] for row in rows])}; after: "
            f"{spread([row[after_key] for row in rows])})")


#: tic-tac-toe's before/after changes that chapters 5 and 6 judge: (name, key, higher is better)
TICTACTOE_CHANGES = (("draws against minimax", "minimax_draw_rate", True),
                     ("losses against random", "random_loss_rate", False))


def tictactoe_opponents(recipe: str, preset: Preset | None = None, episodes: int = 200, iterations: int | None = None):
    """One row per training opponent: over that record's distinct runs, how many moved each change
    of :data:`TICTACTOE_CHANGES` beyond noise, either way (chapters 5 and 6: which opponent to train
    against). Each cell counts the runs "better / within noise / worse", e.g. ``"2 / 0 / 0"``.
    ``iterations``: only the runs of that length (the opponents' records hold one recipe of each
    algorithm, the mixed record more than one)."""
    import pandas as pd

    table = {}
    for opponent in TICTACTOE_OPPONENT_RECORDS:
        runs = distinct_runs([row for row in tictactoe_opponent_runs(recipe, opponent, preset)
                              if iterations is None or row.get("iterations") == iterations])
        if not runs:
            continue
        row = {"runs": len(runs)}
        for name, key, better in TICTACTOE_CHANGES:
            verdicts = run_verdicts(runs, name, f"before_{key}", f"after_{key}", episodes, better)
            row[name.replace("against", "vs")] = " / ".join(str(verdicts.count(v)) for v in ("better", "noise", "worse"))
        table[opponent] = row
    frame = pd.DataFrame(table).T
    frame.index.name = "trained against"
    return frame


def grid_holds(rows: Sequence[dict]) -> str:
    """What a recorded grid holds, counted: its runs, seeds, thread counts, kernel sets and CPUs
    (a chapter says it before reading a grid, so that a reader weighs it by what it covers)."""
    def values(column: str, what: str) -> str:
        # a column some rows lack reads as None, or NaN from a data frame's records (NaN != NaN)
        found = sorted({row[column] for row in rows if row.get(column) is not None and row[column] == row[column]},
                       key=str)
        return f"{len(found)} {what}{'s' if len(found) != 1 else ''} ({', '.join(map(str, found)) or 'none named'})"

    perturbed = sum(isinstance(row.get("perturbation"), dict) for row in rows)  # NaN from a data frame: none
    return (f"{len(rows)} runs over {values('seed', 'seed')}, {values('threads', 'thread count')}, "
            f"{values('kernels', 'kernel set')}, recorded on {values('cpu', 'CPU')}"
            + (f"; {perturbed} of them from a perturbed start" if perturbed else ""))


#: the words a page gives the metrics of :func:`~tutorial_lib.evaluation.evaluate.summarize` (a
#: table's labels), so that every chapter names a metric the same way
METRIC_WORDS = {"success_rate": "success", "win_rate": "wins", "draw_rate": "draws", "loss_rate": "losses",
                "invalid_rate": "invalid actions", "truncated_rate": "cut at the step limit",
                "mean_return": "mean return", "mean_score": "mean score", "mean_steps": "mean steps",
                "mean_turns": "turns per game", "accuracy": "accuracy", "format_accuracy": "well-formed answers",
                "episodes": "games"}


def metrics_table(frame, by: str = "column", **words: str):
    """:func:`tidy` for a table of metrics: their labels in words (:data:`METRIC_WORDS`, then
    ``words`` for this table: ``success_rate="greedy success"``), and a mean of steps or turns with
    one decimal. ``by="row"`` when the metrics are the rows."""
    names = {**METRIC_WORDS, **words}
    frame = frame.rename(index=names) if by == "row" else frame.rename(columns=names)
    labels = set(frame.index if by == "row" else frame.columns)
    return tidy(frame, by=by, decimals={names[key]: 1 for key in ("mean_steps", "mean_turns") if names[key] in labels})


def heldout_cells(recipe: str, level: float = 0.85):
    """The held-out cells of a tic-tac-toe recipe (``ttt-reinforce``, ``ttt-ppo``) as a table, with
    how many reached ``level`` draws against minimax and how many fell below their start's draws
    (a collapse): ``(frame, reached, collapsed)``. ``len(frame)`` is the number of cells."""
    import pandas as pd

    rows = [row for row in recorded_runs(TICTACTOE_HELDOUT_RECORD) if row["recipe"] == recipe]
    frame = pd.DataFrame({
        "start": [row["start"] for row in rows],
        "draws vs minimax before": [row["before_minimax_draw_rate"] for row in rows],
        "draws vs minimax after": [row["after_minimax_draw_rate"] for row in rows],
        "losses to random after": ["not recorded" if row["after_random_loss_rate"] is None
                                   else f"{row['after_random_loss_rate']:.3f}" for row in rows],
        "losses vs the start": [{"noise": "within noise", "worse": "worse",
                                 "better": "better"}[row["random_losses_verdict"]] for row in rows],
        f"reached {level:g}": ["yes" if row["after_minimax_draw_rate"] >= level else "no" for row in rows],
    }).set_index("start")
    reached = int(sum(row["after_minimax_draw_rate"] >= level for row in rows))
    collapsed = int(sum(row["after_minimax_draw_rate"] < row["before_minimax_draw_rate"] for row in rows))
    return frame, reached, collapsed


def verdict_cells(recipe: str, settings: dict, level: float = 0.85, share: float = 0.9, episodes: int = 200):
    """The verdict cells of ``heldout_protocol.md`` for one tic-tac-toe recipe: ``recipe``
    (``ttt-reinforce``, ``ttt-ppo``) run with exactly ``settings`` (:func:`~tutorial_lib.records.recipe_settings`),
    from :data:`~tutorial_lib.records.TICTACTOE_VERDICT_RECORD`. Returns ``(frame, summary)``: one
    row a cell (draws against minimax and losses to random before and after, and whether the losses
    ended worse than the start's beyond two standard errors over ``episodes`` games), and the count
    the protocol judges: ``cells``, ``reached`` (draws at or above ``level``), ``worse`` (losses worse
    beyond noise), ``needed`` (``share`` of the protocol's cells), and ``holds``: ``None`` until every
    cell the protocol fixed is recorded, then whether enough reached the level with none worse."""
    import math

    import pandas as pd

    rows = [row for row in recorded_runs(TICTACTOE_VERDICT_RECORD)
            if row["recipe"] == recipe and same_recipe(row["settings"], settings)]
    rows.sort(key=lambda row: row["perturbation"]["seed"])
    worse = [compare_rates("losses", row["before_random_loss_rate"], row["after_random_loss_rate"], episodes,
                           higher_is_better=False).verdict == "worse" for row in rows]
    frame = pd.DataFrame({
        "threads": [str(row["threads"]) for row in rows],  # a label: 1 must not print as a rate, 1.000
        "draws vs minimax before": [row["before_minimax_draw_rate"] for row in rows],
        "draws vs minimax after": [row["after_minimax_draw_rate"] for row in rows],
        "losses to random before": [row["before_random_loss_rate"] for row in rows],
        "losses to random after": [row["after_random_loss_rate"] for row in rows],
        "losses vs the start": ["worse" if bad else "not worse" for bad in worse],
        f"reached {level:g}": ["yes" if row["after_minimax_draw_rate"] >= level else "no" for row in rows],
    }, index=pd.Index([row["perturbation"]["seed"] for row in rows], name="perturbation seed"))
    reached = sum(row["after_minimax_draw_rate"] >= level for row in rows)
    needed = math.ceil(share * TICTACTOE_VERDICT_CELLS)
    summary = {"cells": len(rows), "reached": int(reached), "worse": int(sum(worse)), "needed": needed,
               "holds": None if len({row["perturbation"]["seed"] for row in rows}) < TICTACTOE_VERDICT_CELLS
               else bool(reached >= needed and not any(worse))}
    return frame, summary


def guard_name(overrides: dict | None) -> str | None:
    """The guard a guards-record line ran with, from its RL-setting overrides: ``"no guard"``,
    ``"validation"`` (``validate_every``), ``"KL penalty β 0.1"``, ``"learning rate 0.0005"``;
    ``None`` for a combination :func:`guard_cells` does not show."""
    overrides = overrides or {}
    if not overrides:
        return "no guard"
    if "validate_every" in overrides and set(overrides) <= {"validate_every", "validation_episodes"}:
        return "validation"
    if set(overrides) == {"kl_coef"}:
        return f"KL penalty β {overrides['kl_coef']:g}"
    if set(overrides) == {"learning_rate"}:
        return f"learning rate {overrides['learning_rate']:g}"
    return None


def guard_runs(recipe: str) -> dict[tuple[str, int], dict[str, dict]]:
    """The guards record's runs of ``recipe`` by start and guard (:func:`guard_name`), in the
    record's order: ``{(build, seed): {guard: line}}``. A start is a build's SFT checkpoint (``build``
    names the CPU that trained it, ``""`` for a record without one) and a perturbation seed."""
    cells: dict[tuple[str, int], dict[str, dict]] = {}
    for row in recorded_runs(TICTACTOE_GUARDS_RECORD):
        name = guard_name(row.get("overrides"))
        if row["recipe"] != recipe or name is None:
            continue
        build = f"{row['cpu']} ({row['cpu_capability']}) build, " if row.get("cpu") and row.get("cpu_capability") else ""
        cells.setdefault((build, row["perturbation"]["seed"]), {})[name] = row
    return cells


def collapsed_start(recipe: str = "ttt-reinforce"):
    """The tuning start of the guards record on which ``recipe`` without a guard ended lowest in draws
    against minimax, among those also run with a guard on training itself (a KL penalty, a lower
    learning rate): ``(label, {guard: line})``, the guards in the record's order; ``(None, {})``
    if there is none. A chapter draws its recorded curves: a collapse and what held it."""
    not_on_training = {"no guard", "validation"}  # validation only chooses among a run's weights
    starts = {key: runs for key, runs in guard_runs(recipe).items()
              if "no guard" in runs and set(runs) - not_on_training}
    if not starts:
        return None, {}
    (build, seed), runs = min(starts.items(), key=lambda item: item[1]["no guard"]["after_minimax_draw_rate"])
    return f"{build}perturbed (seed {seed})", {name: run for name, run in runs.items() if name != "validation"}


def guard_cells(recipe: str = "ttt-reinforce", level: float = 0.85, episodes: int = 200):
    """Each perturbed tuning start of ``recipe`` run with at least one guard, and without one where recorded
    (validation, ``validate_every``; a KL penalty, a lower learning rate: :func:`guard_name`), from
    :data:`~tutorial_lib.records.TICTACTOE_GUARDS_RECORD`: one row a start, draws against minimax
    and losses to random after each run, and the iteration validation kept. A start is a build's SFT
    checkpoint (the CPU that trained it) and a perturbation seed: the same seed on another build's
    checkpoint is another start. Returns ``(frame, summary)``: for each guard, the starts at or
    above ``level``, the starts whose losses to random ended worse than their start's beyond noise
    (``"<guard>, worse losses"``) and the starts it ran on (``"<guard>, starts"``); and ``"time
    ratio"``, the validated runs' seconds over the unguarded ones' (what validating costs), over
    the pairs not timed beside other work (a line with ``shared_cpu``)."""
    import pandas as pd

    cells = guard_runs(recipe)
    guards = list(dict.fromkeys(["no guard", "validation", *(name for runs in cells.values() for name in runs)]))
    counts = {key: 0 for guard in guards for key in (guard, f"{guard}, worse losses", f"{guard}, starts")}
    table, seconds = {}, {"no guard": 0.0, "validation": 0.0}
    for (build, seed), runs in sorted(cells.items()):
        if not set(runs) - {"no guard"}:  # a start still waiting for a guarded run
            continue
        line = {}
        for guard in guards:
            run = runs.get(guard)
            if run is None:
                continue
            worse = compare_rates("losses", run["before_random_loss_rate"], run["after_random_loss_rate"], episodes,
                                  higher_is_better=False).verdict == "worse"
            line[("draws vs minimax", guard)] = run["after_minimax_draw_rate"]
            line[("losses to random", guard)] = run["after_random_loss_rate"]
            counts[guard] += run["after_minimax_draw_rate"] >= level
            counts[f"{guard}, worse losses"] += worse
            counts[f"{guard}, starts"] += 1
        pair = [runs.get(g) for g in ("no guard", "validation")]
        if all(pair) and not any(run.get("shared_cpu") for run in pair):  # beside other work: no timing
            for guard in seconds:
                seconds[guard] += runs[guard].get("rl_seconds", 0.0)
        start = next(iter(runs.values()))  # every run of a start evaluated the same checkpoint before RL
        line[("draws vs minimax", "SFT start")] = start["before_minimax_draw_rate"]
        line[("losses to random", "SFT start")] = start["before_random_loss_rate"]
        line[("validation kept", "iteration")] = runs["validation"]["validation"]["best_iteration"] \
            if "validation" in runs else float("nan")
        table[f"{build}perturbed (seed {seed})"] = line
    frame = pd.DataFrame(table).T
    if len(frame):
        frame = frame[[(m, g) for m in ("draws vs minimax", "losses to random") for g in ("SFT start", *guards)
                       if (m, g) in frame.columns] + [("validation kept", "iteration")]]
    summary = {key: int(value) for key, value in counts.items()}
    summary["time ratio"] = seconds["validation"] / seconds["no guard"] if seconds["no guard"] else float("nan")
    return frame, summary


def perturbation_label(perturbation: dict | None) -> str:
    """A grid cell's start as its table shows it: ``"no"``, or the noise's seed and scale
    (``rl_numerics_grid.py --perturb``: the SFT weights times 1 + scale x N(0, 1))."""
    if not isinstance(perturbation, dict):  # None, or NaN where a data frame's row lacks it
        return "no"
    return f"noise seed {perturbation['seed']}, {perturbation['scale']:g}"


def tictactoe_grid(rows: Sequence[dict], episodes: int = 200):
    """Tic-tac-toe runs over the numerics grid (``benchmarks/rl_numerics_grid.py``): says how each
    change of :data:`TICTACTOE_CHANGES` fared (:func:`across_runs`) and returns the runs as a table,
    one row per kernel set, thread count, seed and perturbation of the start (chapters 5 and 6)."""
    import pandas as pd

    distinct = distinct_runs(rows)
    repeats = len(rows) - len(distinct)
    machines = " and ".join(sorted({row.get("cpu", "an unnamed CPU") for row in rows}))
    say(f"Over the numerics grid (seeds, thread counts, kernel sets, perturbed starts; recorded on {machines}, {episodes} games each"
        + (f"; {count_phrase(repeats, len(rows), 'cells')} repeated another cell's run bit for bit and count once"
           if repeats else "") + "):",
        "; ".join(across_runs(distinct, name, f"before_{key}", f"after_{key}", episodes, higher_is_better=better)
                  for name, key, better in TICTACTOE_CHANGES) + ".")
    columns = [f"{when}_{key}" for _, key, _ in TICTACTOE_CHANGES for when in ("before", "after")]
    frame = pd.DataFrame([{**row, "perturbed": perturbation_label(row.get("perturbation"))} for row in rows])
    # sorted, so that each seed's perturbed rows sit under its unperturbed row ("no" sorts before "noise seed")
    table = frame.set_index(["kernels", "threads", "seed", "perturbed"])[columns].sort_index()
    return table.rename(columns=lambda column: column.replace("_rate", "").replace("_", " ")).round(3)


def grid_paths(rows: Sequence[dict], key: str) -> dict[str, list[tuple[int, float]]]:
    """Each grid cell's greedy ``key`` (``minimax_draw_rate``) along its run: the start, the
    evaluations ``rl_numerics_grid.py --evaluate-every`` recorded on the way, and the end, as
    ``(iteration, value)`` points under the cell's name (seed, perturbation, kernels, threads), for
    :func:`~tutorial_lib.plotting.evaluation_paths`. A cell repeated bit for bit is drawn once."""
    paths = {}
    for row in distinct_runs(rows):
        perturbed = isinstance(row.get("perturbation"), dict)
        name = (f"seed {row['seed']}" + (f", {perturbation_label(row['perturbation'])}" if perturbed else "")
                + f", {row.get('kernels')}, {row.get('threads')} thread{'s' if row.get('threads') != 1 else ''}")
        middle = [(point["iteration"], point[key]) for point in row.get("evaluations", []) if key in point]
        paths[name] = [(0, row[f"before_{key}"]), *middle, (row["iterations"], row[f"after_{key}"])]
    return paths


def level_counts(paths: dict[str, list[tuple[int, float]]], level: float, half: int) -> tuple[str, str]:
    """How many of :func:`grid_paths`' cells were at or above ``level`` at iteration ``half`` and at
    their end: a sentence (with the ends' range), and the count at the end as a phrase for a summary
    (``"all 8 cells"``)."""
    at_half = [value for path in paths.values() for iteration, value in path if iteration == half]
    ends = [path[-1][1] for path in paths.values()]
    at_end = count_phrase(sum(value >= level for value in ends), len(ends), "cells")
    return (f"at or above {level:.2f} in {count_phrase(sum(value >= level for value in at_half), len(at_half), 'cells')} "
            f"at iteration {half}, in {at_end} at the end (ends {min(ends):.3f} to {max(ends):.3f})"), at_end


def trend(history: Sequence[dict], key: str, label: str | None = None, digits: int = 3) -> str:
    """``"explained variance 0.120 over the first half of the run, 0.310 over the second"``."""
    first, second = halves(history, key)
    return (f"{label or key.replace('_', ' ')} {first:.{digits}f} over the first half of the run, "
            f"{second:.{digits}f} over the second")


def source_text(obj) -> str:
    """``obj``'s source code (a function, a class or a method), dedented."""
    return textwrap.dedent(inspect.getsource(obj))


def show_source(obj) -> None:
    """Show ``obj``'s source under its full name: in a notebook highlighted, its long lines wrapped to the
    page (a code block would scroll them out of sight); printed elsewhere."""
    name = f"{obj.__module__}.{obj.__qualname__}"
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:  # pragma: no cover - IPython comes with jupyter
        shell = None
    if shell is None:
        print(f"# {name}\n{source_text(obj)}")
        return
    from IPython.display import HTML, display
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    code = highlight(source_text(obj), PythonLexer(), HtmlFormatter(noclasses=True, nobackground=True))
    wrap = "white-space: pre-wrap; font-size: 0.85em;"
    code = (code.replace('<pre style="', f'<pre style="{wrap} ', 1) if '<pre style="' in code
            else code.replace("<pre", f'<pre style="{wrap}"', 1))
    display(HTML(f"<p><code>{name}</code></p>{code}"))


#: what each task of ``benchmarks/pretrained_rl.py`` claims: (name, higher is better)
PRETRAINED_RL_CLAIMS = {"minimax_draw_rate": ("draws against minimax", True),
                        "accuracy (new problems)": ("accuracy on new problems", True),
                        "success_rate": ("success rate", True)}


def pretrained_rl_summary(rows: Sequence[dict]):
    """Says, per task of a :data:`~tutorial_lib.records.PRETRAINED_RL_RECORD`, how its claimed metric fared over the
    recorded seeds (:func:`across_runs` over each seed's longest run, with the device and model),
    and returns one row per run and length with its verdict (two standard errors, :func:`compare_rates`)."""
    import pandas as pd

    rows = latest_runs(rows)
    if not rows:
        raise ValueError("no recorded runs")
    for task, recipe in dict.fromkeys((row["task"], pretrained_rl_recipe(row)) for row in rows):
        runs = [row for row in longest_runs(rows)  # a seed counts once per recipe
                if row["task"] == task and pretrained_rl_recipe(row) == recipe]
        key = runs[0]["headline"]
        name, better = PRETRAINED_RL_CLAIMS[key]
        devices = " and ".join(sorted({row["device"] for row in runs}))
        lengths = " or ".join(str(n) for n in sorted({row["iterations"] for row in runs}))
        say(f"{task}{', ' + recipe if recipe else ''} ({runs[0]['algo']}, {runs[0]['model']} on {devices}, "
            f"each seed's longest run: {lengths} iterations, "
            f"{runs[0]['eval_episodes']} games or problems each):", across_runs(runs, name, f"before_{key}", f"after_{key}", runs[0]["eval_episodes"],
                                           higher_is_better=better) + ".")

    def verdict(row: dict) -> str:
        key = row["headline"]
        return compare_rates("", row[f"before_{key}"], row[f"after_{key}"], row["eval_episodes"],
                             higher_is_better=PRETRAINED_RL_CLAIMS[key][1]).verdict

    table = pd.DataFrame([{"task": row["task"], "recipe": pretrained_rl_recipe(row), "seed": row["seed"],
                           "device": cpu_label(row.get("device", "")), "iterations": row["iterations"],
                           "before": row[f"before_{row['headline']}"], "after": row[f"after_{row['headline']}"],
                           "verdict": verdict(row), "metric": PRETRAINED_RL_CLAIMS[row["headline"]][0],
                           "minutes": row["seconds"] / 60}
                          for row in rows]).set_index(["task", "recipe", "seed"])
    if any(row.get("validation") for row in rows):  # the weights judged: the last iteration's, or validation's choice
        table.insert(table.columns.get_loc("after"), "model of iteration",
                     [(row.get("validation") or {}).get("best_iteration", row["iterations"]) for row in rows])
    return table.round(3)


def pretrained_rl_histories(rows: Sequence[dict]) -> dict[str, list[dict]]:
    """Each recorded run's per-iteration curves as the histories :func:`~tutorial_lib.plotting.learning_curves`
    plots, named by task and seed (and the recipe and the CPU, where the rows hold several); a run recorded at
    several lengths is plotted once, at its longest."""
    rows = longest_runs(rows)
    several = len({pretrained_rl_recipe(row) for row in rows}) > 1
    cpus = len({cpu_label(row.get("device", "")) for row in rows}) > 1  # a seed is another start on another CPU
    histories = {}
    for row in rows:
        curves = row.get("curves", {})
        steps = max((len(values) for values in curves.values()), default=0)
        recipe = f", {pretrained_rl_recipe(row)}" if several else ""
        cpu = f" ({cpu_label(row.get('device', ''))})" if cpus else ""
        histories[f"{pretrained_run_name(row)}{cpu}{recipe}"] = [
            {"step": i + 1, **{key: values[i] for key, values in curves.items() if i < len(values)}} for i in range(steps)]
    return histories


def guessing_games(rows: Sequence[dict], limit: int = 6):
    """The example GuessTheNumber games of recorded runs whose guesses changed, before and after RL,
    at most ``limit`` a run: a table of the secret and each policy's guesses (``+`` marks a game won)."""
    import pandas as pd

    def shown(game: dict) -> str:
        guesses = " ".join("?" if guess is None else str(guess) for guess in game["guesses"])
        return guesses + (" +" if game["success"] else "")

    table = []
    rows = latest_runs(rows)
    several = len({pretrained_rl_recipe(row) for row in rows}) > 1
    for row in rows:
        recipe = f", {pretrained_rl_recipe(row)}" if several else ""
        changed = [(before, after) for before, after in zip(row.get("before_games", []), row.get("after_games", []))
                   if before["guesses"] != after["guesses"]]
        for before, after in changed[:limit]:
            table.append({"run": f"{pretrained_run_name(row)}, {row['iterations']} iterations{recipe}",
                          "secret": before["secret"], "SFT's guesses": shown(before), "after RL": shown(after)})
    return pd.DataFrame(table)



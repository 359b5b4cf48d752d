"""The book's charts, in one place so every chapter draws them alike (all chapters)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt

from tutorial_lib.evaluation.stats import Change

#: the line styles of runs past the colour cycle's ten (see :func:`learning_curves`)
LINE_STYLES = ("-", "--", ":")
COLORS = {"random": "#c44e52", "expert": "#4c72b0", "win": "#55a868", "draw": "#8c8c8c", "loss": "#c44e52"}


def bar_compare(
    values: Mapping[str, Mapping[str, float]], *, title: str, ylabel: str, ax=None, ylim=(0, 1.05),
    label_size: float = 9,
):
    """Grouped bars: ``values[group][series]``, e.g. success rate per game for random vs expert.
    Each bar carries its value, in ``label_size`` points (at the book's page width a figure of
    7-8 inches is shown at about its size, so 9 points stay readable)."""
    ax = ax or plt.subplots(figsize=(7, 3.2))[1]
    groups = list(values)
    series = list(dict.fromkeys(s for g in groups for s in values[g]))
    width = 0.8 / len(series)
    for i, name in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ys = [values[group].get(name, 0.0) for group in groups]
        bars = ax.bar(xs, ys, width, label=name, color=COLORS.get(name))
        ax.bar_label(bars, fmt="%.2f", fontsize=label_size)
    ax.set_xticks(range(len(groups)), groups)
    ax.set(title=title, ylabel=ylabel, ylim=ylim)
    ax.legend(frameon=False)
    return ax


def stacked_outcomes(rows: Mapping[str, Mapping[str, float]], *, title: str, ax=None):
    """Horizontal stacked bars of win / draw / loss rates, one bar per matchup."""
    ax = ax or plt.subplots(figsize=(7, 0.5 + 0.45 * len(rows)))[1]
    labels = list(rows)
    left = [0.0] * len(labels)
    for outcome in ("win", "draw", "loss"):
        widths = [rows[label][f"{outcome}_rate"] for label in labels]
        ax.barh(labels, widths, left=left, color=COLORS[outcome], label=outcome)
        left = [a + b for a, b in zip(left, widths)]
    ax.set(xlim=(0, 1), title=title, xlabel="fraction of games")
    ax.invert_yaxis()
    ax.legend(ncol=3, frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0 + 0.5 / len(rows)))
    return ax


def length_histogram(lengths: Mapping[str, Sequence[int]], *, limits: Mapping[str, int], title: str, ax=None):
    """Histogram of episode lengths per group, with vertical lines at step limits."""
    ax = ax or plt.subplots(figsize=(7, 3))[1]
    everything = [n for group in lengths.values() for n in group]
    bins = range(min(everything), max(everything) + 2)
    for name, group in lengths.items():
        # outlines, not see-through bars: two filled histograms mix into a colour that reads as a third
        ax.hist(group, bins=bins, histtype="step", linewidth=1.5, label=name, align="left")
    for name, limit in limits.items():
        ax.axvline(limit + 0.5, color="k", linestyle="--", linewidth=1)
        # along the line, inside the axes: a label beside the line runs off the right edge
        ax.text(limit + 0.3, ax.get_ylim()[1] * 0.97, f"{name} limit {limit}", fontsize=9, rotation=90,
                ha="right", va="top", bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1))
    ax.set(title=title, xlabel="steps", ylabel="games")
    # beside the axes: inside, it runs across the limit lines and their labels
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1))
    return ax


def token_strip(tokens: Sequence[str], trained: Sequence[bool], *, title: str, ax=None):
    """Tokens as boxes in reading order; trained (unmasked) tokens highlighted: a loss mask, drawn."""
    per_row = 10  # an inch a box at the default width: room for a 13-character token at 8 pt
    rows = (len(tokens) + per_row - 1) // per_row
    ax = ax or plt.subplots(figsize=(10, 0.45 * rows + 0.6))[1]
    for i, (token, on) in enumerate(zip(tokens, trained)):
        r, c = divmod(i, per_row)
        ax.add_patch(plt.Rectangle((c, -r), 0.95, 0.8, color="#4c72b0" if on else "#dddddd"))
        label = token.replace("Ġ", "·").replace("Ċ", "\\n")
        ax.text(c + 0.47, -r + 0.4, label[:14], ha="center", va="center", fontsize=8, color="white" if on else "black")
    ax.set(xlim=(0, per_row), ylim=(-rows + 0.8, 0.9), title=title)
    ax.axis("off")
    return ax


#: a panel's title in words for the metrics the RL runs log (any other key: its name, spaced)
METRIC_TITLES = {
    "mean_return": "mean return",
    "accuracy": "share of right answers",
    "success_rate": "share of games won",
    "loss_rate": "share of games lost",
    "invalid_rate": "share of invalid actions",
    "grad_norm": "gradient norm",
    "optimal_rate": "share of optimal moves",
    "entropy": "entropy of the action tokens (nats)",
    "turns_per_episode": "turns per game",
    "explained_variance": "critic's explained variance",
    "clipfrac": "clip fraction (share of tokens clipped)",
    "approx_kl": "approx-KL, policy before -> after update (nats)",
    "kl_ref": "KL to the SFT policy, per token (nats)",
    "frac_reward_zero_std": "tied share (groups with one reward for all)",
}


def learning_curves(
    runs: Mapping[str, Sequence[Mapping[str, float]]], keys: Sequence[str], *, title: str, smooth: int = 3,
    columns: int | None = None, x_label: str = "iteration",
):
    """One panel per metric in ``keys`` (titled in words, :data:`METRIC_TITLES`), one line per run;
    ``runs[name]`` is a list of per-iteration metric dicts (``RLResult.history``). Lines are a
    running mean over ``smooth`` iterations, the raw values faint behind them: one iteration's batch
    is noisy. A legend names the runs when there is more than one (the title names a single run),
    below the panels, where it hides no line however long the run names are.

    The panels fill a grid ``columns`` wide (by default up to three across, two for four panels), so
    that the figure stays within about 8 inches, the width of the book's page, whatever the number
    of metrics; a row of five panels would be shrunk until its labels could not be read."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    columns = columns or (len(keys) if len(keys) <= 3 else 2 if len(keys) == 4 else 3)
    rows = -(-len(keys) // columns)
    width = {1: 4.5, 2: 7.0}.get(columns, 8.0)
    # the legend's rows: side by side where the names are short, one name a row where they are long
    legend_columns = 1 if len(runs) < 2 or max(map(len, runs)) > 30 else min(len(runs), 3)
    legend_rows = -(-len(runs) // legend_columns) if len(runs) > 1 else 0
    legend_height = 0.25 * legend_rows + (0.1 if legend_rows else 0)
    height = 2.5 * rows + 0.5 + legend_height
    fig, axes = plt.subplots(rows, columns, figsize=(width, height), squeeze=False)
    panels = [ax for row in axes for ax in row]
    for ax in panels[len(keys):]:  # a grid with more cells than metrics: leave the rest empty
        ax.set_visible(False)
    for ax, key in zip(panels, keys):
        for index, (name, history) in enumerate(runs.items()):
            steps = [row["step"] for row in history if key in row]
            values = [row[key] for row in history if key in row]
            smoothed = [sum(values[max(0, i - smooth + 1) : i + 1]) / len(values[max(0, i - smooth + 1) : i + 1])
                        for i in range(len(values))]
            # matplotlib cycles ten colours: the eleventh run is dashed, so no two runs look alike
            style = LINE_STYLES[(index // 10) % len(LINE_STYLES)]
            (line,) = ax.plot(steps, smoothed, label=name, linestyle=style)
            ax.plot(steps, values, color=line.get_color(), alpha=0.25, linewidth=0.8)
        # wrapped to the panel's width (about eleven characters an inch at 11 points): a long
        # title would run into its neighbour's
        ax.set_title(textwrap.fill(METRIC_TITLES.get(key, key.replace("_", " ")), int(width / columns * 11)),
                     fontsize=11)
        ax.set_xlabel(x_label)
        # iterations are whole numbers; about one tick label in every 0.6 inch, so that a narrow
        # panel's labels ("80", "100", "120") do not run together
        ax.xaxis.set_major_locator(MaxNLocator(nbins=max(3, int(width / columns * 1.6)), integer=True))
        ax.grid(alpha=0.3)
    # wrapped to the figure's width (about ten characters an inch at this size): a long title
    # would run off both edges
    fig.suptitle(textwrap.fill(title, int(width * 10)), fontsize=12)
    if len(runs) > 1:
        handles, labels = panels[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=legend_columns, fontsize=9, frameon=False)
        fig.tight_layout(rect=(0, legend_height / height, 1, 1))
    else:
        fig.tight_layout()
    return fig


#: the colour of each verdict of :class:`~tutorial_lib.evaluation.stats.Change` (green up, red down, grey noise)
VERDICT_COLORS = {"better": "#55a868", "noise": "#8c8c8c", "worse": "#c44e52"}


def before_after(groups: Mapping[str, Mapping[str, Change]], *, title: str, xlabel: str, ax=None):
    """Each run's metric before and after as an arrow, one row a run, the rows of one recipe (a
    group) together under its name: ``groups[recipe][run] = compare_rates(...)``. The arrow's colour
    is the verdict (:data:`VERDICT_COLORS`); the faint bar around its head spans the noise margin
    (two standard errors) either side: where the arrow's tail lies inside it, the change is noise.
    Where a table lists many runs' verdicts, this shows at a glance which recipe moved every seed,
    and how far from where each began."""
    rows = [(group, run, change) for group, runs in groups.items() for run, change in runs.items()]
    if not rows:
        raise ValueError("no runs to plot")
    height = 0.8 + 0.32 * (len(rows) + len(groups))
    ax = ax or plt.subplots(figsize=(8, height))[1]
    y, ticks, labels = 0.0, [], []
    for group, runs in groups.items():
        # about 130 characters of 8 points fit the 8-inch figure
        ax.text(0.0, y, textwrap.shorten(group, 130), transform=ax.get_yaxis_transform(), fontsize=8,
                fontweight="bold", va="center")
        y += 1
        for run, change in runs.items():
            colour = VERDICT_COLORS[change.verdict]
            ax.annotate("", xy=(change.after, y), xytext=(change.before, y),
                        arrowprops=dict(arrowstyle="->", color=colour, lw=1.8))
            ax.plot([change.before], [y], "o", color=colour, markersize=4)
            ax.errorbar([change.before + change.difference], [y], xerr=[[change.noise], [change.noise]], fmt="none",
                        ecolor=colour, alpha=0.35, capsize=3)
            ticks.append(y)
            labels.append(run)
            y += 1
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_ylim(y - 0.5, -0.7)  # the first group at the top
    ax.set_xlim(0, 1)
    ax.set(title=title, xlabel=xlabel)
    ax.grid(axis="x", alpha=0.3)
    handles = [plt.Line2D([], [], color=colour, lw=2, label=verdict if verdict != "noise" else "within noise")
               for verdict, colour in VERDICT_COLORS.items()]
    ax.legend(handles=handles, frameon=False, fontsize=8, loc="lower right")
    return ax


def evaluation_paths(groups: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]], *, title: str, ylabel: str,
                     level: float | None = None):
    """Greedy evaluations along training, one line a run, one panel a recipe: ``groups[recipe][run]``
    is the run's ``(iteration, value)`` points, from its start to its end
    (:func:`~tutorial_lib.report.grid_paths`). The panels share their axes, so two recipes from the
    same starts compare at a glance; ``level`` draws a dotted line at a value the runs are meant to
    reach. Where a table gives each run's end, this shows when the change arrived and whether the
    run still moved at its end."""
    groups = {group: {run: path for run, path in runs.items() if path} for group, runs in groups.items()}
    if not any(groups.values()):
        raise ValueError("no runs to plot")
    fig, axes = plt.subplots(1, len(groups), figsize=(min(8.0, 3.6 * len(groups) + 0.6), 3.4), sharex=True,
                             sharey=True, squeeze=False)
    for ax, (group, runs) in zip(axes[0], groups.items()):
        for run, path in runs.items():
            x, y = zip(*path)
            ax.plot(x, y, marker="o", markersize=3, alpha=0.85, label=run)
        if level is not None:
            ax.axhline(level, color="black", linestyle=":", linewidth=1)
        ax.set_title(textwrap.fill(f"{group} ({len(runs)} run{'s' if len(runs) != 1 else ''})", 40), fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    fig.suptitle(textwrap.fill(title, 80), fontsize=11)
    fig.tight_layout()
    return fig

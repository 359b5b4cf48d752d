"""The book's learning-curve figure: panels titled in words, a legend only where it names something."""

import matplotlib
import pytest

matplotlib.use("Agg")

from tutorial_lib.plotting import METRIC_TITLES, learning_curves  # noqa: E402


def history(offset):
    return [{"step": i, "mean_return": offset + 0.1 * i, "clipfrac": 0.01 * i, "custom_metric": 1.0} for i in range(5)]


def test_panels_are_titled_in_words_and_a_single_run_has_no_legend():
    fig = learning_curves({"only": history(0)}, ["mean_return", "clipfrac", "custom_metric"], title="t")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    # titles wrap to the panel width: compare the words
    assert [ax.get_title().replace("\n", " ") for ax in axes] == [METRIC_TITLES["mean_return"], "clip fraction (share of tokens clipped)", "custom metric"]
    assert all(ax.get_xlabel() == "iteration" for ax in axes)
    assert axes[0].get_legend() is None


def test_several_runs_get_a_legend_below_the_panels_and_a_chosen_x_label():
    fig = learning_curves({"a": history(0), "b": history(1)}, ["mean_return"], title="t", x_label="GRPO step")
    ax = fig.axes[0]
    (legend,) = fig.legends
    assert [text.get_text() for text in legend.get_texts()] == ["a", "b"]
    assert ax.get_legend() is None  # not over the first panel's lines
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert legend.get_window_extent(renderer).y1 <= ax.get_tightbbox(renderer).y0 + 1  # below it
    assert ax.get_xlabel() == "GRPO step"
    smoothed = ax.lines[2].get_ydata()  # run b's running mean over 3 points: 1.0, 1.05, 1.1, 1.2, 1.3
    assert list(smoothed) == pytest.approx([1.0, 1.05, 1.1, 1.2, 1.3])


def test_long_run_names_get_a_row_each_and_the_iterations_whole_numbers():
    names = [f"GuessTheNumber 1-50 from SFT on several ranges, seed {seed}" for seed in range(4)]
    fig = learning_curves({name: history(i) for i, name in enumerate(names)}, ["mean_return", "entropy"], title="t")
    (legend,) = fig.legends
    assert legend._ncols == 1
    fig.canvas.draw()
    assert all(float(tick).is_integer() for tick in fig.axes[0].get_xticks())


def test_more_runs_than_colours_still_look_apart_and_long_panel_titles_stay_apart():
    runs = {f"run {i}": history(i) for i in range(11)}
    fig = learning_curves(runs, ["success_rate", "mean_return", "invalid_rate", "entropy", "kl_ref"], title="t")
    ax = fig.axes[0]
    smoothed = ax.lines[::2]  # each run draws its running mean, then its raw values faintly
    looks = {(line.get_color(), line.get_linestyle()) for line in smoothed}
    assert len(looks) == 11  # the eleventh run shares the first's colour, not its style
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    # the bottom row's two titles (entropy, KL to the SFT policy) are the longest: they must not meet
    left, right = (panel.title.get_window_extent(renderer) for panel in fig.axes[3:5])
    assert left.x1 <= right.x0


def test_before_after_draws_one_arrow_a_run_coloured_by_its_verdict():
    from matplotlib.colors import to_hex

    from tutorial_lib.evaluation.stats import compare_rates
    from tutorial_lib.plotting import VERDICT_COLORS, before_after

    groups = {"recipe A": {"seed 0": compare_rates("", .455, .775, 200), "seed 3": compare_rates("", .81, .52, 200)},
              "recipe B": {"seed 0": compare_rates("", .455, .44, 200)}}
    ax = before_after(groups, title="t", xlabel="greedy success")
    arrows = [a for a in ax.get_children() if type(a).__name__ == "Annotation"]
    assert len(arrows) == 3
    assert [to_hex(a.arrow_patch.get_edgecolor()) for a in arrows] == [
        VERDICT_COLORS["better"], VERDICT_COLORS["worse"], VERDICT_COLORS["noise"]]
    assert [a.xy[0] for a in arrows] == [.775, .52, .44] and [a.xyann[0] for a in arrows] == [.455, .81, .455]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["seed 0", "seed 3", "seed 0"]
    headers = [t.get_text() for t in ax.texts if type(t).__name__ == "Text"]
    assert headers == ["recipe A", "recipe B"]  # each group named once, above its runs
    matplotlib.pyplot.close("all")
    with pytest.raises(ValueError, match="no runs"):
        before_after({}, title="t", xlabel="x")


def test_tick_labels_of_narrow_panels_do_not_overlap():
    long = [{"step": i, "mean_return": 0.0, "clipfrac": 0.0, "entropy": 1.0} for i in range(1, 161)]
    fig = learning_curves({"run": long}, ["mean_return", "clipfrac", "entropy"], title="t")  # three panels a row
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [label.get_window_extent(renderer) for label in ax.get_xticklabels() if label.get_text()]
        assert len(boxes) >= 3
        assert all(left.x1 + 2 < right.x0 for left, right in zip(boxes, boxes[1:])), [b.x0 for b in boxes]

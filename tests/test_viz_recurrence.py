"""Chapter 02 figures: each draws the given measurements on labelled axes; bad input is
named."""

from __future__ import annotations

import pytest
from IPython.core.formatters import PNGFormatter
from matplotlib.figure import Figure

from transformer_book.course.figures.recurrence import (
    accuracy_vs_length,
    accuracy_vs_position,
    gradient_vs_distance,
    memory_vs_length,
    sweep_by_position,
    time_vs_length,
)
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure
LENGTHS = [16, 32, 64, 128]


def curves(ax) -> dict[str, list[float]]:
    return {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}


def test_time_vs_length_is_log_log_in_ms_with_guides() -> None:
    fig = time_vs_length(LENGTHS, {"rnn": [1e-3, 2e-3, 4e-3, 8e-3], "attention": [1e-3] * 4},
                         title="t")
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_title() == "t" and "ms" in ax.get_ylabel() and "length" in ax.get_xlabel()
    drawn = curves(ax)
    assert drawn["rnn"] == pytest.approx([1.0, 2.0, 4.0, 8.0])
    assert drawn["attention"] == pytest.approx([1.0] * 4)
    # the guides start at half the lowest first point, so none lies under a curve of its slope
    assert drawn["∝ L (guide)"] == pytest.approx([0.5, 1.0, 2.0, 4.0])
    assert drawn["∝ L² (guide)"] == pytest.approx([0.5, 2.0, 8.0, 32.0])
    low = curves(time_vs_length(LENGTHS, {"a": [4e-3] * 4, "b": [2e-3] * 4}).axes[0])
    assert low["∝ L (guide)"][0] == pytest.approx(1.0), "half the lowest curve's first point"


def test_memory_vs_length_draws_bytes_and_the_batch_that_fits() -> None:
    per_example = [1e4, 2e4, 4e4, 8e4]
    fig = memory_vs_length(LENGTHS, {"rnn": per_example}, budget_bytes=2**30)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes
    assert curves(left)["rnn"] == pytest.approx([b / 2**20 for b in per_example])
    assert curves(right)["rnn"] == [2**30 // b for b in per_example]
    assert right.get_title() == "Largest batch within 1 GiB of activations"


@pytest.mark.parametrize("budget", [0, -1.0, float("inf"), "1 GiB"])
def test_memory_vs_length_rejects_bad_budget(budget) -> None:
    with pytest.raises(BookError, match="budget_bytes: expected a finite number > 0"):
        memory_vs_length(LENGTHS, {"rnn": [1.0] * 4}, budget_bytes=budget)


def test_gradient_vs_distance_orders_distance_backwards() -> None:
    norms = {"γ = 0.5": [1e-6, 1e-4, 1e-2, 1.0], "γ = 2": [1e3, 1e2, 10, 1]}
    fig = gradient_vs_distance(norms)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    assert curves(ax) == norms
    assert list(ax.get_lines()[0].get_xdata()) == [3, 2, 1, 0], "entry 0 is the farthest input"
    assert ax.get_yscale() == "log"


def test_accuracy_vs_length_shades_untrained_lengths() -> None:
    fig = accuracy_vs_length([3, 4, 5, 6], {"exact": [1.0, 0.9, 0.5, 0.1]}, trained_max=4,
                             chance=0.1)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    labels = ax.get_legend_handles_labels()[1]
    assert labels == ["longer than any training example", "exact", "chance (tokens)"]
    assert curves(ax)["exact"] == [1.0, 0.9, 0.5, 0.1]
    assert list(ax.get_xticks()) == [3, 4, 5, 6]
    shaded = accuracy_vs_length([3, 4], {"exact": [1.0, 0.9]}, trained_max=4).axes[0]
    assert shaded.get_legend_handles_labels()[1] == ["exact"], "nothing longer than training"


def test_accuracy_vs_position_draws_one_bar_per_position() -> None:
    fig = accuracy_vs_position([1.0, 0.8, 0.5], chance=0.1)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    (bars,) = ax.containers
    assert [patch.get_height() for patch in bars] == [1.0, 0.8, 0.5]
    assert [patch.get_x() + patch.get_width() / 2 for patch in bars] == pytest.approx([1, 2, 3])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["chance"]


def test_accuracy_vs_position_draws_named_series_side_by_side() -> None:
    fig = accuracy_vs_position({"teacher forced": [1.0, 0.9], "greedy": [1.0, 0.5]})
    (ax,) = fig.axes
    forced, greedy = ax.containers
    assert [p.get_height() for p in greedy] == [1.0, 0.5]
    assert forced[0].get_x() + forced[0].get_width() == pytest.approx(greedy[0].get_x())
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["teacher forced", "greedy"]


def test_sweep_by_position_draws_the_mean_and_the_range_of_the_seeds() -> None:
    runs = [[1.0, 0.5, 0.2], [0.8, 0.3, 0.2], [0.9, 0.4, 0.5]]
    fig = sweep_by_position({"teacher forced": {"H = 32, 3000 steps": runs},
                             "greedy": {"H = 32, 300 steps": runs}}, chance=0.1)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes
    assert curves(left)["H = 32, 3000 steps"] == pytest.approx([0.9, 0.4, 0.3])
    assert left.get_lines()[0].get_linestyle() == "-", "3000 steps: solid"
    assert right.get_lines()[0].get_linestyle() == "--", "300 steps: dashed"
    three = sweep_by_position({"tf": {f"H = 128, {s} steps": runs for s in (300, 1000, 3000)}})
    styles = [line.get_linestyle() for line in three.axes[0].get_lines()]
    assert len(set(styles)) == 3, f"1,000 and 3,000 steps are drawn apart: {styles}"
    (band,) = left.collections
    edge = band.get_paths()[0].vertices[:, 1]
    low, high = edge.min(), edge.max()
    assert (low, high) == pytest.approx((0.2, 1.0))
    assert [left.get_title(), right.get_title()] == ["teacher forced", "greedy"]


@pytest.mark.parametrize(("call", "message"), [
    (lambda: time_vs_length(LENGTHS, {"rnn": [0.0, 1.0, 2.0, 3.0]}),
     r"seconds\['rnn'\]: expected positive values"),
    (lambda: time_vs_length(LENGTHS, {"rnn": [1.0, 2.0]}), r"seconds\['rnn'\]: expected 4 values"),
    (lambda: time_vs_length(LENGTHS, {}), "seconds: expected at least one named curve"),
    (lambda: time_vs_length([], {"rnn": []}), "x: expected a non-empty 1-D sequence"),
    (lambda: accuracy_vs_length([1, 2], {"a": [1.0, float("nan")]}, trained_max=1),
     r"accuracy\['a'\]: expected finite values"),
    (lambda: gradient_vs_distance({"a": [1.0, 2.0], "b": [1.0]}),
     "norms: expected curves of equal length"),
    (lambda: accuracy_vs_position([]), "accuracy: expected a non-empty 1-D sequence"),
    (lambda: accuracy_vs_position({"a": [1.0], "b": [1.0, 0.5]}),
     "accuracy: expected series of equal length"),
    (lambda: sweep_by_position({"tf": {"a": [1.0, 0.5]}}),
     r"panels\['tf'\]\['a'\]: expected a seeds"),
    (lambda: sweep_by_position({}), "panels: expected at least one panel"),
])
def test_bad_input_names_the_argument(call, message) -> None:
    with pytest.raises(BookError, match=message):
        call()

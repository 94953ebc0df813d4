"""Chapter 02 figures: each returns a Figure with labelled axes; bad input is named."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from transformer_book.course.figures.recurrence import (
    accuracy_vs_length,
    accuracy_vs_position,
    gradient_vs_distance,
    memory_vs_length,
    time_vs_length,
)

LENGTHS = [16, 32, 64, 128]


def is_png_figure(fig: Figure) -> bool:
    return isinstance(fig, Figure) and fig._repr_png_().startswith(b"\x89PNG")


def test_time_vs_length_is_log_log_with_guides() -> None:
    fig = time_vs_length(LENGTHS, {"rnn": [1e-3, 2e-3, 4e-3, 8e-3], "attention": [1e-3] * 4})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert len(ax.get_lines()) == 4, "two curves and two guide lines"
    assert is_png_figure(fig)


def test_time_vs_length_rejects_non_positive_times() -> None:
    with pytest.raises(ValueError, match=r"seconds\['rnn'\]: expected positive values"):
        time_vs_length(LENGTHS, {"rnn": [0.0, 1.0, 2.0, 3.0]})


def test_time_vs_length_rejects_wrong_number_of_values() -> None:
    with pytest.raises(ValueError, match=r"seconds\['rnn'\]: expected 4 values"):
        time_vs_length(LENGTHS, {"rnn": [1.0, 2.0]})


def test_memory_vs_length_has_two_panels() -> None:
    fig = memory_vs_length(LENGTHS, {"rnn": [1e4, 2e4, 4e4, 8e4]}, budget_bytes=2**30)
    assert len(fig.axes) == 2
    assert "1 GiB" in fig.axes[1].get_title()
    assert is_png_figure(fig)


def test_memory_vs_length_rejects_bad_budget() -> None:
    with pytest.raises(ValueError, match="budget_bytes: expected a positive number"):
        memory_vs_length(LENGTHS, {"rnn": [1.0] * 4}, budget_bytes=0)


def test_gradient_vs_distance_orders_distance_backwards() -> None:
    fig = gradient_vs_distance({"γ = 0.5": [1e-6, 1e-4, 1e-2, 1.0], "γ = 2": [1e3, 1e2, 10, 1]})
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [3, 2, 1, 0], "entry 0 is the farthest input"
    assert fig.axes[0].get_yscale() == "log"
    assert is_png_figure(fig)


def test_gradient_vs_distance_rejects_unequal_curves() -> None:
    with pytest.raises(ValueError, match="norms: expected curves of equal length"):
        gradient_vs_distance({"a": [1.0, 2.0], "b": [1.0]})


def test_accuracy_vs_length_shades_untrained_lengths() -> None:
    fig = accuracy_vs_length([3, 4, 5, 6], {"exact": [1.0, 0.9, 0.5, 0.1]}, trained_max=4,
                             chance=0.1)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "longer than any training example" in labels and "chance (tokens)" in labels
    assert is_png_figure(fig)


def test_accuracy_vs_position_draws_one_bar_per_position() -> None:
    fig = accuracy_vs_position([1.0, 0.8, 0.5], chance=0.1)
    assert len(fig.axes[0].patches) == 3
    assert is_png_figure(fig)


def test_accuracy_vs_position_rejects_empty_input() -> None:
    with pytest.raises(ValueError, match="accuracy: expected a non-empty 1-D sequence"):
        accuracy_vs_position([])

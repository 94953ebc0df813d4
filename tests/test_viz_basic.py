"""The figure toolkit: styled figures Jupyter shows once, checked arrays, the general plots
(grouped bars, line plots) and the preface's chapter map."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from IPython.core.formatters import PNGFormatter
from matplotlib.figure import Figure

from transformer_book.course.figures import as_array, new_figure
from transformer_book.course.figures.basic import grouped_bars, line_plot
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def test_new_figure_is_shown_by_jupyter_as_a_png():
    fig, axes = new_figure(2, 3, width=4.0, height=2.0)
    assert isinstance(fig, Figure)
    assert axes.shape == (2, 3) and fig.get_size_inches().tolist() == [4.0, 2.0]
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    _, single = new_figure()
    assert not hasattr(single, "shape"), "a 1 x 1 grid is one Axes"


def test_as_array_accepts_tensors_and_lists():
    grad = torch.tensor([[1.0, 2.0]], requires_grad=True)
    np.testing.assert_array_equal(as_array(grad, "w", 2), [[1.0, 2.0]])
    assert as_array([1, 2, 3], "x", 1, size=3, positive=True).dtype == np.float64


@pytest.mark.parametrize(("call", "message"), [
    (lambda: as_array("abc", "x", 1), "x: expected a 1-D array or tensor of numbers"),
    (lambda: as_array([[1.0]], "x", 1), "x: expected a non-empty 1-D array"),
    (lambda: as_array([], "x", 1), "x: expected a non-empty 1-D array"),
    (lambda: as_array([1.0, 2.0], "x", 1, size=3), "x: expected 3 values"),
    (lambda: as_array([1.0, np.inf], "x", 1), "x: expected finite values"),
    (lambda: as_array([1.0, 0.0], "x", 1, positive=True), r"x: expected positive values \(log"),
])
def test_as_array_names_the_argument(call, message):
    with pytest.raises(BookError, match=message):
        call()


def test_grouped_bars_draw_one_bar_per_category_and_series():
    fig = grouped_bars(["a", "b", "c"], {"T = 1": [0.2, 0.3, 0.5], "T = 2": [0.3, 0.3, 0.4]},
                       title="softmax", ylabel="p")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    first, second = ax.containers
    assert [p.get_height() for p in first] == [0.2, 0.3, 0.5]
    assert [p.get_height() for p in second] == [0.3, 0.3, 0.4]
    centres = [p.get_x() + p.get_width() / 2 for p in first + second]
    assert centres == pytest.approx([-0.2, 0.8, 1.8, 0.2, 1.2, 2.2]), "side by side"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert (ax.get_title(), ax.get_ylabel()) == ("softmax", "p")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["T = 1", "T = 2"]
    assert grouped_bars(["a"], {"only": [1.0]}).axes[0].get_legend() is None


def test_line_plot_draws_each_series_over_x():
    fig = line_plot([1, 2, 4], {"x": [1, 2, 3], "y": [3, 2, 1]}, title="t", xlabel="n",
                    ylabel="v", logx=True, logy=True)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    assert {line.get_label(): list(line.get_ydata()) for line in ax.lines} == \
        {"x": [1, 2, 3], "y": [3, 2, 1]}
    assert list(ax.lines[0].get_xdata()) == [1, 2, 4]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("t", "n", "v")


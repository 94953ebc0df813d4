"""The convolution figures: they draw the given wiring and costs, label them and reject bad
input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from IPython.core.formatters import PNGFormatter
from matplotlib.figure import Figure

from transformer_book.course.figures.convolution import (
    cost_curves,
    dependency_sets,
    dilation_diagram,
    path_length_plot,
    receptive_field_map,
)
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def test_dependency_sets_follow_the_wiring():
    sets = dependency_sets((1, 2, 4), kernel_size=3, length=16)
    assert sets[-1] == {15}
    assert sets[0] == set(range(1, 16)), "1 + 2·(1 + 2 + 4) = 15 inputs, no holes"
    assert dependency_sets((2,), kernel_size=3, length=12)[0] == {7, 9, 11}
    assert dependency_sets((1, 1), kernel_size=3, length=3)[0] == {0, 1, 2}, "clipped at 0"


def test_dilation_diagram_titles_count_the_inputs():
    fig = dilation_diagram({"a": (1, 1, 1), "b": (1, 2, 4)}, kernel_size=3, length=16,
                           title="t")
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    assert fig.get_suptitle() == "t"
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["a\noutput 15 sees 7 inputs", "b\noutput 15 sees 15 inputs"]
    labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert labels == ["input", "layer 1 (d=1)", "layer 2 (d=2)", "layer 3 (d=4)"]
    assert fig.axes[0].get_xlabel() == "position"


def test_receptive_field_map_shows_the_fields_and_counts_them():
    fields = torch.zeros(3, 10, dtype=torch.bool)
    for m in range(3):
        fields[m, 9 - 2 * (m + 1): 10] = True
    other = np.ones((2, 10), dtype=bool)
    fig = receptive_field_map({"stack": fields, "other": other}, output_position=9,
                              title="fields")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    stack, second = fig.axes
    np.testing.assert_array_equal(stack.images[0].get_array(), fields.numpy())
    np.testing.assert_array_equal(second.images[0].get_array(), other)
    assert [t.get_text() for t in stack.texts] == ["sees 3", "sees 5", "sees 7"]
    assert stack.get_title() == "stack (outlined: output position 9)"
    assert second.get_xlabel() == "input position" and fig.get_suptitle() == "fields"
    assert "output position 9" in receptive_field_map({"a": other}).axes[0].get_title(), \
        "the last position by default"


def test_path_length_plot_draws_each_series_and_a_zoomed_panel():
    series = {"conv": [4, 8, 16], "attention": [1, 1, 1]}
    fig = path_length_plot([8, 16, 32], series, zoom_below=10, title="paths")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    assert [ax.get_title() for ax in fig.axes] == ["all models", "zoom: up to 10 layers"]
    assert fig.axes[1].get_ylim() == (0.0, 10.0)
    for ax in fig.axes:
        assert ax.get_xscale() == "log"
        assert {line.get_label(): list(line.get_ydata()) for line in ax.lines} == series
        assert list(ax.lines[0].get_xdata()) == [8, 16, 32]
    same = path_length_plot([8, 16], {"ConvS2S": [4, 8], "Neural GPU": [4, 8]}, zoom_below=5)
    under, over = same.axes[1].lines
    assert under.get_linewidth() > over.get_linewidth(), "coinciding curves: the first shows"
    assert under.get_linestyle() != over.get_linestyle()
    assert [ax.get_title() for ax in path_length_plot([8, 16], {"a": [1, 2]}).axes] == \
        ["all models"]


def test_path_length_plot_stops_a_curve_at_unmeasured_lengths():
    fig = path_length_plot([8, 16, 32], {"conv": [4, 8, 16], "gpu": [4, 8, None]})
    ydata = fig.axes[0].lines[1].get_ydata()
    assert list(ydata[:2]) == [4, 8] and np.isnan(ydata[2])
    with pytest.raises(BookError, match=r"series\['gpu'\]"):
        path_length_plot([8, 16], {"gpu": [None, None]})


def test_cost_curves_are_log_log_with_a_marker():
    fig = cost_curves([8, 16, 32], {"a": [1.0, 4.0, 16.0], "b": [2.0, 4.0, 8.0]},
                      marker_x=16, marker_label="n = d", ylabel="FLOPs")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_ylabel() == "FLOPs" and ax.get_xlabel() == "sequence length n"
    assert [t.get_text() for t in ax.texts] == ["n = d"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    curves = {line.get_label(): list(line.get_ydata()) for line in ax.lines if line.get_label()
              in ("a", "b")}
    assert curves == {"a": [1.0, 4.0, 16.0], "b": [2.0, 4.0, 8.0]}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dilation_diagram({}, 3, 8), "layouts: expected a mapping"),
        (lambda: dilation_diagram({"a": (1, 0)}, 3, 8), "dilations: expected an integer >= 1"),
        (lambda: dilation_diagram({"a": (1,)}, 0, 8), "kernel_size: expected an integer >= 1"),
        (lambda: receptive_field_map({"a": np.ones(4)}),
         r"fields\['a'\]: expected a non-empty 2-D"),
        (lambda: receptive_field_map({"a": np.ones((2, 4)), "b": np.ones((2, 5))}),
         "fields: expected arrays of one length"),
        (lambda: receptive_field_map({"a": np.ones((2, 4))}, output_position=4),
         "output_position: expected an integer >= 0 and <= 3"),
        (lambda: cost_curves([8, 16], {"a": [1.0, 0.0]}), r"series\['a'\]: expected 2 positive"),
        (lambda: path_length_plot([8], {"a": [1]}), "ns: expected at least two"),
        (lambda: path_length_plot([8, 16], {"a": [1]}), r"series\['a'\]: expected 2 values"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(BookError, match=message):
        call()

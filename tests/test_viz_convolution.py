"""Smoke tests of the convolution figures: they draw, label, count and reject bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from transformer_book.course.figures.convolution import (
    cost_curves,
    dependency_sets,
    dilation_diagram,
    path_length_plot,
    receptive_field_map,
)


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
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["a\noutput 15 sees 7 inputs", "b\noutput 15 sees 15 inputs"]
    labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert labels == ["input", "layer 1 (d=1)", "layer 2 (d=2)", "layer 3 (d=4)"]
    fig._repr_png_()


def test_receptive_field_map_writes_counts_and_outlines_the_output():
    fields = torch.zeros(3, 10, dtype=torch.bool)
    for m in range(3):
        fields[m, 9 - 2 * (m + 1): 10] = True
    fig = receptive_field_map({"stack": fields, "other": np.ones((2, 10), dtype=bool)},
                              output_position=9, title="fields")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["sees 3", "sees 5", "sees 7"]
    assert "output position 9" in ax.get_title()
    assert fig.axes[-1].get_xlabel() == "input position"
    fig._repr_png_()


def test_path_length_plot_has_a_zoomed_panel():
    fig = path_length_plot([8, 16, 32], {"conv": [4, 8, 16], "attention": [1, 1, 1]},
                           zoom_below=10, title="paths")
    assert len(fig.axes) == 2
    assert fig.axes[1].get_ylim() == (0.0, 10.0)
    assert fig.axes[0].get_xscale() == "log"
    assert len(path_length_plot([8, 16], {"a": [1, 2]}).axes) == 1
    fig._repr_png_()


def test_cost_curves_are_log_log_with_a_marker():
    fig = cost_curves([8, 16, 32], {"a": [1.0, 4.0, 16.0], "b": [2.0, 4.0, 8.0]},
                      marker_x=16, marker_label="n = d", ylabel="FLOPs")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.texts] == ["n = d"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    fig._repr_png_()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dilation_diagram({}, 3, 8), "layouts: expected a mapping"),
        (lambda: dilation_diagram({"a": (1, 0)}, 3, 8), "dilations"),
        (lambda: receptive_field_map({"a": np.ones(4)}),
         r"fields\['a'\]: expected a non-empty 2-D"),
        (lambda: receptive_field_map({"a": np.ones((2, 4)), "b": np.ones((2, 5))}),
         "fields: expected arrays of one length"),
        (lambda: receptive_field_map({"a": np.ones((2, 4))}, output_position=4),
         "output_position: expected an integer in"),
        (lambda: cost_curves([8, 16], {"a": [1.0, 0.0]}), r"series\['a'\]: expected 2 positive"),
        (lambda: path_length_plot([8], {"a": [1]}), "ns: expected at least two"),
        (lambda: path_length_plot([8, 16], {"a": [1]}), r"series\['a'\]: expected 2 values"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()

"""The self-attention figures: they draw the given measurements, label them and reject bad
input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from IPython.core.formatters import PNGFormatter
from matplotlib.figure import Figure

from transformer_book.course.figures.selfattention import (
    cost_per_layer,
    line_panels,
    variance_vs_dk,
)
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def lines_by_label(ax) -> dict[str, object]:
    return {line.get_label(): line for line in ax.lines}


def test_variance_vs_dk_draws_measurements_and_theory():
    d_ks = [1, 2, 4, 8]
    unscaled, scaled = torch.tensor([1.0, 2.1, 3.9, 8.2]), [1.0, 1.05, 0.97, 1.02]
    fig = variance_vs_dk(d_ks, unscaled, scaled, title="t")
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "d_k" in ax.get_xlabel() and ax.get_title() == "t"
    lines = lines_by_label(ax)
    np.testing.assert_allclose(lines["theory: $d_k$"].get_ydata(), d_ks)
    np.testing.assert_allclose(lines["theory: 1"].get_ydata(), [1, 1, 1, 1])
    np.testing.assert_allclose(lines[r"measured Var$(q \cdot k)$"].get_ydata(), unscaled,
                               rtol=1e-6)
    np.testing.assert_allclose(lines[r"measured Var$(q \cdot k / \sqrt{d_k})$"].get_ydata(),
                               scaled)
    for line in lines.values():
        np.testing.assert_allclose(line.get_xdata(), d_ks)


def test_line_panels_share_colours_legends_and_references():
    panels = {"a": {"unscaled": [1, 2, 3], "scaled": [1, 1, 1]},
              "b": {"scaled": [0.5, 0.4, 0.3], "unscaled": [1e-1, 1e-2, 1e-3]}}
    fig = line_panels([1, 2, 4], panels, xlabel="x", ylabels=["ya", "yb"], logx=True,
                      logy=[False, True], references={"b": (0.2, "floor")}, suptitle="s")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    first, second = fig.axes
    assert fig.get_suptitle() == "s"
    assert [first.get_title(), second.get_title()] == ["a", "b"]
    assert [first.get_ylabel(), second.get_ylabel()] == ["ya", "yb"]
    assert first.get_xlabel() == second.get_xlabel() == "x"
    assert first.get_xscale() == "log" and first.get_yscale() == "linear"
    assert second.get_yscale() == "log"
    for ax, (title, series) in zip(fig.axes, panels.items(), strict=True):
        lines = lines_by_label(ax)
        for label, values in series.items():
            np.testing.assert_allclose(lines[label].get_ydata(), values)
            np.testing.assert_allclose(lines[label].get_xdata(), [1, 2, 4])
            assert lines[label].get_color() == lines_by_label(first)[label].get_color(), \
                f"{title}: one colour per series label"
    np.testing.assert_allclose(lines_by_label(second)["floor"].get_ydata(), [0.2, 0.2])
    assert [t.get_text() for t in first.get_legend().get_texts()] == ["unscaled", "scaled"]
    assert "floor" in [t.get_text() for t in second.get_legend().get_texts()]


def test_line_panels_legend_once_without_references():
    fig = line_panels([1, 2], {"a": {"s": [1, 2]}, "b": {"s": [2, 1]}})
    first, second = fig.axes
    assert first.get_legend() is not None and second.get_legend() is None


def test_cost_per_layer_marks_n_equals_d():
    ns = [16, 32, 64]
    flops = {"attention": [1.0, 4.0, 16.0], "rnn": [2.0, 4.0, 8.0]}
    seconds = {"attention": [1e-4, 3e-4, 1e-3]}
    fig = cost_per_layer(ns, flops, seconds, d=32, suptitle="t")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes
    assert left.get_title() == "counted (Table 1)"
    assert right.get_title() == "measured on this machine"
    assert fig.get_suptitle() == "t"
    for ax, data in ((left, flops), (right, seconds)):
        lines = lines_by_label(ax)
        for label, values in data.items():
            np.testing.assert_allclose(lines[label].get_ydata(), values)
        np.testing.assert_allclose(lines["n = d = 32"].get_xdata(), [32, 32])
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert lines_by_label(left)["attention"].get_color() == \
        lines_by_label(right)["attention"].get_color()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: variance_vs_dk([1, 2], [1.0], [1.0, 1.0]), r"unscaled: expected 2 values"),
        (lambda: variance_vs_dk([1, 2], [1.0, 0.0], [1.0, 1.0]), r"unscaled: expected positive"),
        (lambda: variance_vs_dk([[1, 2]], [1.0], [1.0]), r"d_ks: expected a non-empty 1-D"),
        (lambda: variance_vs_dk([1, 2], [1.0, float("nan")], [1, 1]), r"unscaled: expected finite"),
        (lambda: variance_vs_dk(["a"], [1.0], [1.0]), r"d_ks: expected a 1-D array or tensor"),
        (lambda: line_panels([1, 2], {}), r"panels: expected a non-empty mapping"),
        (lambda: line_panels([1, 2], {"a": {"s": [1, 2]}}, logy=[True, False]),
         r"logy: expected 1 flags"),
        (lambda: line_panels([1, 2], {"a": {"s": [1, 2]}}, ylabels=["y", "z"]),
         r"ylabels: expected 1 labels"),
        (lambda: line_panels([1, 2], {"a": {"s": [1, 2]}}, references={"b": (1.0, "r")}),
         r"references: expected keys among the panel titles"),
        (lambda: line_panels([1, 2], {"a": {}}), r"panels\['a'\]: expected a non-empty mapping"),
        (lambda: line_panels([1, 2], {"a": {"s": [1, 2, 3]}}), r"panels\['a'\]\['s'\]: expected 2"),
        (lambda: line_panels([1, 2], {"a": {"s": [1, -2]}}, logy=True),
         r"panels\['a'\]\['s'\]: expected positive"),
        (lambda: cost_per_layer([1, 2], {"a": [1, 2]}, {"a": [1, 2]}, d=0),
         r"d: expected an integer >= 1"),
        (lambda: cost_per_layer([1, 2], {}, {"a": [1, 2]}, d=2), r"flops: expected a non-empty"),
        (lambda: cost_per_layer([1, 2], {"a": [1, 2]}, {"a": [1]}, d=2),
         r"seconds\['a'\]: expected 2 values"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(BookError, match=message):
        call()


def test_time_ratio_panels_draw_each_kind_in_its_style():
    from transformer_book.course.figures.selfattention import time_ratio_panels

    panels = {
        "batch 1, d = 16": {"recorded": {"nn.RNN": ([8, 16, 32], [0.5, 1.0, 2.0])},
                            "live": {"nn.RNN": ([8, 32], [0.6, 2.2])},
                            "counted": {"nn.RNN": ([8, 32], [2.5, 4.0])}},
        "batch 8, d = 16": {"recorded": {"nn.LSTM": ([8, 16], [0.2, 0.4]),
                                         "nn.RNN": ([8, 16], [0.3, 0.5])}},
    }
    fig = time_ratio_panels(panels, suptitle="s")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    first, second = fig.axes[:2]
    assert fig.get_suptitle() == "s" and first.get_title() == "batch 1, d = 16"
    lines = lines_by_label(first)
    assert lines["nn.RNN (live)"].get_linestyle() == "--"
    assert lines["nn.RNN (counted)"].get_linestyle() == ":"
    np.testing.assert_allclose(lines["nn.RNN (recorded)"].get_ydata(), [0.5, 1.0, 2.0])
    assert lines["nn.RNN (recorded)"].get_color() == lines_by_label(second)[
        "nn.RNN (recorded)"].get_color(), "a layer keeps its colour across panels"
    assert first.get_xscale() == "log" and first.get_yscale() == "log"
    with pytest.raises(BookError, match="kinds"):
        time_ratio_panels({"p": {"guessed": {"nn.RNN": ([1], [1])}}})
    with pytest.raises(BookError, match="ratios"):
        time_ratio_panels({"p": {"live": {"nn.RNN": ([1, 2], [1])}}})

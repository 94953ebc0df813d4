"""Smoke tests of the self-attention figures: they draw, label and reject bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from transformer_book.course.figures.selfattention import (
    cost_per_layer,
    line_panels,
    variance_vs_dk,
)


def test_variance_vs_dk_draws_measurements_and_theory():
    d_ks = [1, 2, 4, 8]
    fig = variance_vs_dk(d_ks, torch.tensor([1.0, 2.1, 3.9, 8.2]), [1.0, 1.05, 0.97, 1.02])
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    assert len(ax.lines) == 4, "two theory lines, two measured series"
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "d_k" in ax.get_xlabel()
    np.testing.assert_allclose(ax.lines[0].get_ydata(), d_ks)  # the line Var = d_k
    fig._repr_png_()


def test_line_panels_share_colours_legends_and_references():
    panels = {"a": {"unscaled": [1, 2, 3], "scaled": [1, 1, 1]},
              "b": {"scaled": [0.5, 0.4, 0.3], "unscaled": [1e-1, 1e-2, 1e-3]}}
    fig = line_panels([1, 2, 4], panels, xlabel="x", ylabels=["ya", "yb"], logx=True,
                      logy=[False, True], references={"b": (0.2, "floor")}, suptitle="s")
    first, second = fig.axes
    assert [first.get_title(), second.get_title()] == ["a", "b"]
    assert first.get_ylabel() == "ya" and second.get_yscale() == "log"
    colour = {line.get_label(): line.get_color() for line in first.lines}
    for line in second.lines[:2]:
        assert line.get_color() == colour[line.get_label()], "one colour per series label"
    assert second.lines[-1].get_label() == "floor"
    assert first.get_legend() is not None
    fig._repr_png_()


def test_cost_per_layer_marks_n_equals_d():
    ns = [16, 32, 64]
    fig = cost_per_layer(ns, {"attention": [1.0, 4.0, 16.0], "rnn": [2.0, 4.0, 8.0]},
                         {"attention": [1e-4, 3e-4, 1e-3]}, d=32, suptitle="t")
    left, right = fig.axes
    assert left.get_title() == "counted (Table 1)"
    assert right.get_title() == "measured on this machine"
    assert any(line.get_label() == "n = d = 32" for line in left.lines)
    assert left.get_xscale() == "log" and right.get_yscale() == "log"
    fig._repr_png_()


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
         r"d: expected a positive"),
        (lambda: cost_per_layer([1, 2], {}, {"a": [1, 2]}, d=2), r"flops: expected a non-empty"),
        (lambda: cost_per_layer([1, 2], {"a": [1, 2]}, {"a": [1]}, d=2),
         r"seconds\['a'\]: expected 2 values"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()

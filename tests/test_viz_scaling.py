"""Smoke tests of viz.scaling: each figure builds, has its labels, and rejects bad data."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from transformer_book.course.figures.scaling import flops_breakdown, layer_costs, training_time_bars


def test_flops_breakdown_stacks_to_100_percent():
    fig = flops_breakdown([16, 64], {"attention": [1.0, 4.0], "dense": [3.0, 4.0]}, title="t")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([25.0, 50.0, 75.0, 50.0])
    assert ax.get_title() == "t" and "%" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["attention", "dense"]
    fig._repr_png_()


def test_layer_costs_has_two_labelled_log_panels():
    fig = layer_costs([16, 32], {"a": [0.001, 0.002]}, {"a": [2**20, 2**21]}, suptitle="s")
    left, right = fig.axes
    assert left.get_xscale() == "log" and right.get_yscale() == "log"
    assert "ms" in left.get_ylabel() and "MiB" in right.get_ylabel()
    assert list(right.lines[0].get_ydata()) == [1.0, 2.0]
    fig._repr_png_()


def test_training_time_bars_annotate_hours_and_minutes():
    fig = training_time_bars(["paper", "H200"], [12.0, 0.5], measured=[True, False], title="t")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["12.0 h", "30 min"]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["reported / measured", "estimated from FLOPs"]
    fig._repr_png_()


@pytest.mark.parametrize(("call", "match"), [
    (lambda: flops_breakdown([16], {"a": [1.0, 2.0]}), r"components\['a'\]: expected 1 values"),
    (lambda: flops_breakdown([16], {"a": [0.0]}), "components: expected a positive total"),
    (lambda: layer_costs([], {}, {}), "x: expected at least one point"),
    (lambda: training_time_bars(["a"], [0.0]), "hours: expected positive durations"),
    (lambda: training_time_bars(["a", "b"], [1.0]), "hours: expected 2 values"),
    (lambda: training_time_bars(["a"], [1.0], measured=[True, False]), "measured: expected 1"),
])
def test_bad_data_is_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()

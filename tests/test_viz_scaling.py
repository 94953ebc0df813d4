"""Chapter 12's figures: each draws the given costs on labelled axes and rejects bad data."""

from __future__ import annotations

import pytest
from IPython.core.formatters import PNGFormatter
from matplotlib.figure import Figure

from transformer_book.course.figures.scaling import flops_breakdown, layer_costs, training_time_bars
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def test_flops_breakdown_stacks_to_100_percent():
    fig = flops_breakdown([16, 64], {"attention": [1.0, 4.0], "dense": [3.0, 4.0]}, title="t")
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    attention, dense = ax.containers
    assert [p.get_height() for p in attention] == pytest.approx([25.0, 50.0])
    assert [p.get_height() for p in dense] == pytest.approx([75.0, 50.0])
    assert [p.get_y() for p in dense] == pytest.approx([25.0, 50.0]), "stacked on attention"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "64"]
    assert ax.get_title() == "t" and "%" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["attention", "dense"]


def test_layer_costs_draws_ms_and_mib_on_log_axes():
    fig = layer_costs([16, 32], {"a": [0.001, 0.002]}, {"a": [2**20, 2**21]}, suptitle="s")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes
    assert fig.get_suptitle() == "s"
    assert left.get_xscale() == "log" and right.get_yscale() == "log"
    assert "ms" in left.get_ylabel() and "MiB" in right.get_ylabel()
    assert list(left.lines[0].get_ydata()) == pytest.approx([1.0, 2.0])
    assert list(right.lines[0].get_ydata()) == [1.0, 2.0]
    assert list(right.lines[0].get_xdata()) == [16, 32]


def test_training_time_bars_annotate_hours_and_minutes():
    fig = training_time_bars(["paper", "H200"], [12.0, 0.5], measured=[True, False], title="t")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    (bars,) = ax.containers
    assert [p.get_width() for p in bars] == [12.0, 0.5]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["paper", "H200"]
    assert bars[0].get_y() > bars[1].get_y(), "the first label on top"
    assert [t.get_text() for t in ax.texts] == ["12.0 h", "30 min"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["reported / measured", "estimated from FLOPs"]
    estimates = training_time_bars(["a"], [2.0]).axes[0].get_legend().get_texts()
    assert [t.get_text() for t in estimates] == ["estimated from FLOPs"]


@pytest.mark.parametrize(("call", "match"), [
    (lambda: flops_breakdown([16], {"a": [1.0, 2.0]}), r"components\['a'\]: expected 1 values"),
    (lambda: flops_breakdown([16], {"a": [0.0]}), "components: expected a positive total"),
    (lambda: layer_costs([], {}, {}), "x: expected at least one point"),
    (lambda: layer_costs([1], {"a": [1.0]}, {"a": []}), r"memory_bytes\['a'\]: expected 1"),
    (lambda: training_time_bars(["a"], [0.0]), "hours: expected positive durations"),
    (lambda: training_time_bars(["a", "b"], [1.0]), "hours: expected 2 values"),
    (lambda: training_time_bars(["a"], [1.0], measured=[True, False]), "measured: expected 1"),
])
def test_bad_data_is_refused(call, match):
    with pytest.raises(BookError, match=match):
        call()

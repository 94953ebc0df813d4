"""The full-model figures: they draw the given counts and curves, label them and reject bad
input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from IPython.core.formatters import PNGFormatter
from matplotlib.figure import Figure

from transformer_book.course.figures.model import parameter_breakdown, training_curves
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def test_parameter_breakdown_stacks_components_and_writes_totals():
    components = {"embeddings": [2e6, 19e6], "encoder": [0.1e6, 19e6], "decoder": [0.2e6, 25e6]}
    fig = parameter_breakdown(["tiny", "base"], components, title="where the parameters live")
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    segments = {bars.get_label(): bars for bars in ax.containers}
    assert list(segments) == list(components)
    for label, counts in components.items():
        widths = [patch.get_width() for patch in segments[label]]
        assert widths == pytest.approx([c / 1e6 for c in counts]), "in millions"
    starts = [patch.get_x() for patch in segments["encoder"]]
    assert starts == pytest.approx([2.0, 19.0]), "each segment starts where the previous ends"
    ticks = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks(), strict=True)}
    assert ticks["tiny"] > ticks["base"], "the first model is drawn on top"
    texts = [t.get_text() for t in ax.texts]
    assert " 63.0" in texts and " 2.3" in texts, "each bar ends with its total"
    assert "30%" in texts, "the share of a wide segment: 19 of 63 million"
    assert ax.get_xlabel() == "millions of parameters"
    assert ax.get_title() == "where the parameters live"


@pytest.mark.parametrize(("call", "message"), [
    (lambda: parameter_breakdown(["x", "y"], {"a": [1.0]}),
     r"components\['a'\]: expected 2 values"),
    (lambda: parameter_breakdown(["x"], {"a": [-1.0]}), r"components\['a'\]: expected counts >= 0"),
    (lambda: parameter_breakdown(["x"], {"a": [0.0]}), "components: expected a positive total"),
    (lambda: parameter_breakdown([], {"a": []}), "models: expected at least one"),
    (lambda: parameter_breakdown(["x"], {"a": [1.0]}, unit=0),
     "unit: expected a finite number > 0"),
])
def test_parameter_breakdown_rejects_bad_counts(call, message):
    with pytest.raises(BookError, match=message):
        call()


def test_training_curves_draw_loss_floor_and_accuracy():
    steps = np.arange(1, 11)
    losses = torch.linspace(2.0, 0.6, 10)
    fig = training_curves(steps, losses, [5, 10], [0.4, 0.95], loss_floor=0.55, title="reverse")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes
    assert fig.get_suptitle() == "reverse"
    assert left.get_title() == "loss" and right.get_title() == "held-out accuracy"
    curves = {line.get_label(): line for line in left.lines}
    np.testing.assert_allclose(curves["training loss"].get_xdata(), steps)
    np.testing.assert_allclose(curves["training loss"].get_ydata(), losses.numpy(), rtol=1e-6)
    np.testing.assert_allclose(curves["lowest possible loss"].get_ydata(), [0.55, 0.55])
    np.testing.assert_allclose(right.lines[0].get_xdata(), [5, 10])
    np.testing.assert_allclose(right.lines[0].get_ydata(), [40.0, 95.0])
    assert right.get_ylabel() == "held-out accuracy (%)"


@pytest.mark.parametrize(("call", "message"), [
    (lambda: training_curves([1, 2, 3], [1.0, 2.0], [1], [0.5]), "losses: expected 3 values"),
    (lambda: training_curves([1], [1.0], [1], [95.0]),
     r"accuracies: expected fractions in \[0, 1\]"),
    (lambda: training_curves([1, 2], [1.0, float("nan")], [1], [0.5]),
     "losses: expected finite values"),
    (lambda: training_curves([1], [1.0], [1, 2], [0.5]), "accuracies: expected 2 values"),
])
def test_training_curves_reject_mismatched_or_impossible_values(call, message):
    with pytest.raises(BookError, match=message):
        call()

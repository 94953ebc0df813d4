"""Smoke tests of the full-model figures: they draw, label and reject bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from transformer_book.course.figures.model import parameter_breakdown, training_curves


def test_parameter_breakdown_stacks_components_and_writes_totals():
    fig = parameter_breakdown(["tiny", "base"], {"embeddings": [2e6, 19e6],
                                                 "encoder": [0.1e6, 19e6],
                                                 "decoder": [0.2e6, 25e6]},
                              title="where the parameters live")
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    assert len(ax.patches) == 6, "one segment per (model, component)"
    ticks = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks(), strict=True)}
    assert ticks["tiny"] > ticks["base"], "the first model is drawn on top"
    texts = [t.get_text() for t in ax.texts]
    assert " 63.0" in texts and " 2.3" in texts, "each bar ends with its total"
    assert ax.get_xlabel() == "millions of parameters"
    fig._repr_png_()


def test_parameter_breakdown_rejects_bad_counts():
    with pytest.raises(ValueError, match=r"components\['a'\]: expected 2 values"):
        parameter_breakdown(["x", "y"], {"a": [1.0]})
    with pytest.raises(ValueError, match="counts >= 0"):
        parameter_breakdown(["x"], {"a": [-1.0]})
    with pytest.raises(ValueError, match="models: expected at least one"):
        parameter_breakdown([], {"a": []})


def test_training_curves_draw_loss_floor_and_accuracy():
    steps = np.arange(1, 11)
    fig = training_curves(steps, torch.linspace(2.0, 0.6, 10), [5, 10], [0.4, 0.95],
                          loss_floor=0.55, title="reverse")
    left, right = fig.axes
    assert left.get_title() == "loss" and len(left.lines) == 2
    assert left.lines[1].get_label() == "lowest possible loss"
    np.testing.assert_allclose(right.lines[0].get_ydata(), [40.0, 95.0])
    assert "accuracy" in right.get_ylabel()
    fig._repr_png_()


def test_training_curves_reject_mismatched_or_impossible_values():
    with pytest.raises(ValueError, match="losses: expected 3 values"):
        training_curves([1, 2, 3], [1.0, 2.0], [1], [0.5])
    with pytest.raises(ValueError, match=r"accuracies: expected fractions in \[0, 1\]"):
        training_curves([1], [1.0], [1], [95.0])
    with pytest.raises(ValueError, match="losses: expected finite values"):
        training_curves([1, 2], [1.0, float("nan")], [1], [0.5])

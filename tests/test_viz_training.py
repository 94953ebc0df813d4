"""Smoke tests of chapters 10-11's figures: they draw, label and reject bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from transformer_book.course.figures.training import (
    label_smoothing_targets,
    length_scatter,
    lr_schedules,
    token_budget_batches,
    training_curves,
)


def test_token_budget_batches_draws_the_budget_curve_and_histograms():
    fig = token_budget_batches([10, 20, 40], [100, 50, 25], 1000,
                               {"by length": [0.05, 0.1, 0.02], "random": [0.4, 0.5, 0.3]})
    assert isinstance(fig, Figure)
    left, right = fig.axes
    assert "longest" in left.get_xlabel() and "sentences" in left.get_ylabel()
    curve = left.lines[0]
    np.testing.assert_allclose(curve.get_xdata() * curve.get_ydata(), 1000)
    assert len(right.patches) > 0 and right.get_legend() is not None
    fig._repr_png_()


def test_token_budget_batches_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="sizes"):
        token_budget_batches([10, 20], [1], 100, {"a": [0.1]})


def test_label_smoothing_targets_marks_each_minimum():
    p = np.linspace(0.01, 0.99, 50)
    fig = label_smoothing_targets(["a", "b", "c"], [1, 0, 0], [0.93, 0.03, 0.03], p,
                                  {"ε = 0": -np.log(p), "ε = 0.1": (p - 0.9) ** 2},
                                  epsilon=0.1, title="t")
    left, right = fig.axes
    assert len(left.patches) == 6
    assert len(right.lines) == 4, "two curves and two minima"
    assert right.lines[3].get_xdata()[0] == pytest.approx(p[np.argmin((p - 0.9) ** 2)])
    fig._repr_png_()


def test_label_smoothing_targets_rejects_wrong_labels():
    with pytest.raises(ValueError, match="tokens"):
        label_smoothing_targets(["a"], [1, 0], [0.9, 0.1], [0.5], {"x": [1.0]}, epsilon=0.1)


def test_lr_schedules_marks_the_budget():
    steps = np.arange(1, 101)
    fig = lr_schedules(steps, {"a": steps * 1e-4, "b": np.full(100, 5e-3)}, budget=50,
                       title="t")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "optimizer step"
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    assert [float(d.get_ydata()[0]) for d in dots] == pytest.approx([50e-4, 5e-3])
    fig._repr_png_()


def test_training_curves_one_and_several_runs():
    run = {"step": list(range(1, 101)), "loss": torch.linspace(9, 3, 100),
           "eval_step": [50, 100], "val_loss": [5.0, 4.0], "bleu": [3.0, 9.0]}
    fig = training_curves({"run": run}, smooth=10, title="t")
    left, right = fig.axes
    assert len(left.lines) == 2 and len(right.lines) == 1
    fig = training_curves({"a": run, "b": {"step": [1, 2, 3], "loss": [3, 2, 1]}}, logx=True)
    assert fig.axes[0].get_xscale() == "log"
    fig._repr_png_()
    with pytest.raises(ValueError, match="loss"):
        training_curves({"bad": {"step": [1, 2], "loss": [1.0]}})


def test_length_scatter_draws_the_diagonal():
    fig = length_scatter([5, 10, 15], {"greedy": [4, 10, 16], "beam": [5, 9, 15]}, title="t")
    (ax,) = fig.axes
    assert ax.lines[-1].get_label() == "same length"
    assert len(ax.collections) == 2
    fig._repr_png_()


def test_training_curves_skip_evaluations_without_bleu():
    run = {"step": [1, 2, 3, 4], "loss": [4.0, 3.0, 2.5, 2.0], "eval_step": [2, 4],
           "val_loss": [3.1, 2.2], "bleu": [float("nan"), 12.5]}
    fig = training_curves({"a": run, "b": {**run, "bleu": [float("nan")] * 2}})
    drawn = fig.axes[1].get_lines()
    assert len(drawn) == 1 and list(drawn[0].get_xdata()) == [4.0], "only the known BLEU point"
    with pytest.raises(ValueError, match="bleu"):
        training_curves({"bad": {**run, "bleu": [1.0]}})
    with pytest.raises(ValueError, match="finite"):
        training_curves({"bad": {**run, "loss": [1.0, float("inf"), 1.0, 1.0]}})

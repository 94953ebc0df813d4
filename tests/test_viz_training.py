"""Chapters 10-11's figures: they draw the given batches, targets, schedules and curves,
label them and reject bad input; moving_average smooths a curve."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from IPython.core.formatters import PNGFormatter
from matplotlib.figure import Figure

from transformer_book.course.figures.training import (
    label_smoothing_targets,
    length_scatter,
    lr_schedules,
    moving_average,
    token_budget_batches,
    training_curves,
)
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def lines_by_label(ax) -> dict[str, object]:
    return {line.get_label(): line for line in ax.lines}


def test_token_budget_batches_draws_the_batches_the_budget_curve_and_histograms():
    padding = {"by length": [0.05, 0.1, 0.02], "random": [0.4, 0.5, 0.3]}
    fig = token_budget_batches([10, 20, 40], [100, 50, 25], 1000, padding, title="t")
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes
    assert fig.get_suptitle() == "t"
    assert "longest" in left.get_xlabel() and "sentences" in left.get_ylabel()
    assert left.collections[0].get_offsets().tolist() == [[10, 100], [20, 50], [40, 25]]
    curve = lines_by_label(left)["budget: sentences x longest = 1,000"]
    np.testing.assert_allclose(curve.get_xdata() * curve.get_ydata(), 1000)
    counted = [sum(patch.get_height() for patch in bars) for bars in right.containers]
    assert counted == [3, 3], "one histogram per strategy, every batch counted"
    assert [t.get_text() for t in right.get_legend().get_texts()] == list(padding)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: token_budget_batches([10, 20], [1], 100, {"a": [0.1]}), "sizes: expected 2 values"),
    (lambda: token_budget_batches([10], [1], 0, {"a": [0.1]}), "max_tokens: expected an integer"),
    (lambda: token_budget_batches([10], [1], 100, {}), "padding: expected at least one"),
])
def test_token_budget_batches_rejects_bad_input(call, message):
    with pytest.raises(BookError, match=message):
        call()


def test_label_smoothing_targets_draws_both_targets_and_marks_each_minimum():
    p = np.linspace(0.01, 0.99, 50)
    losses = {"ε = 0": -np.log(p), "ε = 0.1": (p - 0.9) ** 2}
    fig = label_smoothing_targets(["a", "b", "c"], [1, 0, 0], [0.93, 0.03, 0.03], p, losses,
                                  epsilon=0.1, title="t")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes
    one_hot, smoothed = left.containers
    assert [patch.get_height() for patch in one_hot] == [1, 0, 0]
    assert [patch.get_height() for patch in smoothed] == pytest.approx([0.93, 0.03, 0.03])
    assert [t.get_text() for t in left.get_xticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in left.get_legend().get_texts()] == \
        ["one-hot (ε = 0)", "label-smoothed (ε = 0.1)"]
    curves = lines_by_label(right)
    for label, values in losses.items():
        np.testing.assert_allclose(curves[label].get_ydata(), values)
    dots = [line for line in right.lines if line.get_marker() == "o"]
    assert [float(d.get_xdata()[0]) for d in dots] == pytest.approx(
        [p[np.argmin(v)] for v in losses.values()]), "each curve's minimum"


def test_label_smoothing_targets_rejects_wrong_labels():
    with pytest.raises(BookError, match="tokens: expected 2 labels"):
        label_smoothing_targets(["a"], [1, 0], [0.9, 0.1], [0.5], {"x": [1.0]}, epsilon=0.1)
    with pytest.raises(BookError, match=r"losses\['x'\]: expected 1 values"):
        label_smoothing_targets(["a"], [1], [1], [0.5], {"x": [1.0, 2.0]}, epsilon=0.1)


def test_lr_schedules_draw_each_schedule_and_mark_the_budget():
    steps = np.arange(1, 101)
    schedules = {"a": steps * 1e-4, "b": np.full(100, 5e-3)}
    fig = lr_schedules(steps, schedules, budget=50, title="t")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "optimizer step" and ax.get_title() == "t"
    lines = lines_by_label(ax)
    for label, values in schedules.items():
        np.testing.assert_allclose(lines[label].get_ydata(), values)
    np.testing.assert_allclose(lines["end of the budget"].get_xdata(), [50, 50])
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    assert [float(d.get_ydata()[0]) for d in dots] == pytest.approx([50e-4, 5e-3])
    with pytest.raises(BookError, match=r"schedules\['a'\]: expected 100 values"):
        lr_schedules(steps, {"a": [1.0]})


def test_training_curves_draw_smoothed_loss_validation_and_bleu():
    loss = torch.linspace(9, 3, 100)
    run = {"step": list(range(1, 101)), "loss": loss, "eval_step": [50, 100],
           "val_loss": [5.0, 4.0], "bleu": [3.0, 9.0]}
    fig = training_curves({"run": run}, smooth=10, title="t")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes
    assert fig.get_suptitle() == "t" and [left.get_title(), right.get_title()] == ["loss", "BLEU"]
    lines = lines_by_label(left)
    np.testing.assert_allclose(lines["train (mean of 10 steps)"].get_ydata(),
                               moving_average(loss.numpy(), 10), rtol=1e-6)
    assert list(lines["validation"].get_xdata()) == [50, 100]
    assert list(lines["validation"].get_ydata()) == [5.0, 4.0]
    assert [list(line.get_ydata()) for line in right.lines] == [[3.0, 9.0]]
    assert right.get_legend() is None, "one run: no legend needed"


def test_training_curves_of_several_runs_are_labelled_by_run():
    run = {"step": [1, 2, 3], "loss": [3.0, 2.0, 1.0], "eval_step": [3], "bleu": [7.0]}
    fig = training_curves({"a": run, "b": {"step": [1, 2, 3], "loss": [3, 2, 1]}}, smooth=1,
                          logx=True)
    left, right = fig.axes
    assert left.get_xscale() == "log" and right.get_xscale() == "log"
    assert [line.get_label() for line in left.lines] == \
        ["a: train (mean of 1 steps)", "b: train (mean of 1 steps)"]
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["a"]
    with pytest.raises(BookError, match=r"runs\['bad'\]\['loss'\]: expected 2 values"):
        training_curves({"bad": {"step": [1, 2], "loss": [1.0]}})
    with pytest.raises(BookError, match="runs: expected at least one run"):
        training_curves({})


def test_training_curves_skip_evaluations_without_bleu():
    run = {"step": [1, 2, 3, 4], "loss": [4.0, 3.0, 2.5, 2.0], "eval_step": [2, 4],
           "val_loss": [3.1, 2.2], "bleu": [float("nan"), 12.5]}
    fig = training_curves({"a": run, "b": {**run, "bleu": [float("nan")] * 2}})
    drawn = fig.axes[1].get_lines()
    assert [(list(line.get_xdata()), line.get_label()) for line in drawn] == [([4.0], "a")], \
        "only the known BLEU point"
    with pytest.raises(BookError, match=r"runs\['bad'\]\['bleu'\]: expected 2 values"):
        training_curves({"bad": {**run, "bleu": [1.0]}})
    with pytest.raises(BookError, match="finite"):
        training_curves({"bad": {**run, "loss": [1.0, float("inf"), 1.0, 1.0]}})


def test_length_scatter_draws_each_decoder_and_the_diagonal():
    reference = [5, 10, 15]
    hypotheses = {"greedy": [4, 10, 16], "beam": [5, 9, 15]}
    fig = length_scatter(reference, hypotheses, title="t", unit="tokens")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "reference length (tokens)" and ax.get_title() == "t"
    for points, values in zip(ax.collections, hypotheses.values(), strict=True):
        xy = points.get_offsets()
        assert xy[:, 1].tolist() == values
        assert np.abs(xy[:, 0] - reference).max() <= 0.25, "jittered, never by a whole word"
    np.testing.assert_allclose(lines_by_label(ax)["same length"].get_ydata(), [0, 15])
    with pytest.raises(BookError, match=r"hypothesis_lengths\['x'\]: expected 3 values"):
        length_scatter(reference, {"x": [1]})


def test_moving_average_keeps_the_length_or_full_windows_only():
    values = [1.0, 3.0, 5.0, 7.0]
    np.testing.assert_allclose(moving_average(values, 2), [1.0, 2.0, 4.0, 6.0])
    np.testing.assert_allclose(moving_average(values, 2, partial=False), [2.0, 4.0, 6.0])
    np.testing.assert_allclose(moving_average(values, 3), [1.0, 2.0, 3.0, 5.0])
    np.testing.assert_allclose(moving_average(values, 1), values)
    np.testing.assert_allclose(moving_average(values, 10), values, err_msg="window too long")
    with pytest.raises(BookError, match="window: expected an integer >= 1"):
        moving_average(values, 0)

"""Figures for chapters 10 and 11: batches, label smoothing, schedules, curves, lengths.

Each function takes plain data (lists, arrays or tensors) and returns a
:class:`matplotlib.figure.Figure` built with :func:`transformer_book.course.figures.new_figure`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import PALETTE, as_array, new_figure
from transformer_book.util.validation import require, require_positive_int

__all__ = [
    "label_smoothing_targets",
    "length_scatter",
    "lr_schedules",
    "moving_average",
    "token_budget_batches",
    "training_curves",
]


def token_budget_batches(
    longest: Sequence[int],
    sizes: Sequence[int],
    max_tokens: int,
    padding: Mapping[str, Sequence[float]],
    *,
    title: str = "",
) -> Figure:
    """Left: each batch's sentence count against its longest sentence, under the budget
    curve ``sentences · longest <= max_tokens`` (Section 5.1). Right: histograms of the
    padding fraction per batch for each batching strategy in ``padding``."""
    x = as_array(longest, "longest", 1)
    y = as_array(sizes, "sizes", 1, size=x.size)
    require_positive_int(max_tokens, "max_tokens")
    require(len(padding) > 0, "padding", "at least one strategy", "none")
    fig, (left, right) = new_figure(1, 2, width=10.0, height=3.8)
    left.scatter(x, y, s=9, alpha=0.6, color=PALETTE[0], label="one batch")
    grid = np.linspace(max(x.min(), 1.0), x.max(), 200)
    left.plot(grid, max_tokens / grid, color=PALETTE[1],
              label=f"budget: sentences x longest = {max_tokens:,}")
    left.set_xlabel("longest sentence in the batch (BPE tokens)")
    left.set_ylabel("sentences in the batch")
    left.set_title("token-budget batches: short sentences, big batches")
    left.legend()
    bins = np.linspace(0.0, 1.0, 41)
    for index, (label, values) in enumerate(padding.items()):
        right.hist(as_array(values, f"padding[{label!r}]", 1), bins=bins, alpha=0.6,
                   color=PALETTE[index % len(PALETTE)], label=label)
    right.set_xlabel("fraction of the batch that is padding")
    right.set_ylabel("batches")
    right.set_title("padding per batch")
    right.legend()
    if title:
        fig.suptitle(title)
    return fig


def label_smoothing_targets(
    tokens: Sequence[str],
    one_hot: Sequence[float],
    smoothed: Sequence[float],
    p_true: Sequence[float],
    losses: Mapping[str, Sequence[float]],
    *,
    epsilon: float,
    title: str = "",
) -> Figure:
    """Left: the training target for one token, one-hot against label-smoothed (bars over a
    small vocabulary ``tokens``). Right: the loss as a function of the probability the
    model gives the true token, one curve per entry of ``losses``, minima marked."""
    hard, soft = as_array(one_hot, "one_hot", 1), as_array(smoothed, "smoothed", 1)
    require(len(tokens) == hard.size == soft.size, "tokens",
            f"{hard.size} labels (one per class)", len(tokens))
    p = as_array(p_true, "p_true", 1)
    fig, (left, right) = new_figure(1, 2, width=10.0, height=3.6)
    positions = np.arange(hard.size)
    left.bar(positions - 0.2, hard, 0.4, label="one-hot (ε = 0)")
    left.bar(positions + 0.2, soft, 0.4, label=f"label-smoothed (ε = {epsilon:g})")
    left.set_xticks(positions, list(tokens), rotation=45, ha="right")
    left.set_ylabel("target probability")
    left.set_title("the target distribution for one token")
    left.legend()
    for index, (label, values) in enumerate(losses.items()):
        curve = as_array(values, f"losses[{label!r}]", 1, size=p.size)
        colour = PALETTE[index % len(PALETTE)]
        right.plot(p, curve, color=colour, label=label)
        best = int(np.argmin(curve))
        right.plot([p[best]], [curve[best]], "o", color=colour)
    right.set_xlabel("probability the model gives the true token")
    right.set_ylabel("loss per token (nats)")
    right.set_title("where the loss is lowest (dots)")
    right.legend()
    if title:
        fig.suptitle(title)
    return fig


def lr_schedules(
    steps: Sequence[int],
    schedules: Mapping[str, Sequence[float]],
    *,
    budget: int | None = None,
    budget_label: str = "end of the budget",
    title: str = "",
) -> Figure:
    """Learning rate against step for each schedule, with a vertical line at ``budget`` and
    each schedule's rate there marked by a dot."""
    x = as_array(steps, "steps", 1)
    require(len(schedules) > 0, "schedules", "at least one schedule", "none")
    fig, ax = new_figure(width=7.0, height=3.8)
    for index, (label, values) in enumerate(schedules.items()):
        y = as_array(values, f"schedules[{label!r}]", 1, size=x.size)
        colour = PALETTE[index % len(PALETTE)]
        ax.plot(x, y, color=colour, label=label)
        if budget is not None:
            ax.plot([budget], [np.interp(budget, x, y)], "o", color=colour)
    if budget is not None:
        ax.axvline(budget, color=PALETTE[-1], linestyle="--", label=budget_label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax.set_title(title)
    ax.legend()
    return fig


def moving_average(values: Sequence[float] | np.ndarray, window: int, *, partial: bool = True
                   ) -> np.ndarray:
    """The mean of each ``window`` consecutive values, for smoothing noisy training curves.

    ``partial=True`` keeps the length: the first ``window - 1`` points average the values
    seen so far. ``partial=False`` keeps only full windows (``len(values) - window + 1``
    points). A window of 1, or longer than the values, returns them unchanged.
    """
    require_positive_int(window, "window")
    values = np.asarray(values, dtype=float)
    if window <= 1 or values.size < window:
        return values
    kernel = np.ones(window) / window
    full = np.convolve(values, kernel, mode="valid")  # (n - window + 1,)
    if not partial:
        return full
    head = np.cumsum(values[: window - 1]) / np.arange(1, window)
    return np.concatenate([head, full])


def training_curves(
    runs: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    smooth: int = 25,
    logx: bool = False,
    title: str = "",
) -> Figure:
    """Loss and BLEU over optimizer steps for one or more runs.

    Each run maps ``"step"`` and ``"loss"`` (training loss per step, drawn as a moving
    average over ``smooth`` steps) and optionally ``"eval_step"`` with ``"val_loss"`` and
    ``"bleu"``. Left panel: training (solid) and validation (dashed, dots) loss; right panel:
    BLEU. One colour per run.
    """
    require(len(runs) > 0, "runs", "at least one run", "none")
    fig, (left, right) = new_figure(1, 2, width=10.5, height=3.8)
    any_bleu = False
    for index, (label, run) in enumerate(runs.items()):
        colour = PALETTE[index % len(PALETTE)]
        steps = as_array(run["step"], f"runs[{label!r}]['step']", 1)
        loss = as_array(run["loss"], f"runs[{label!r}]['loss']", 1, size=steps.size)
        name = "" if len(runs) == 1 else f"{label}: "
        left.plot(steps, moving_average(loss, smooth), color=colour,
                  label=f"{name}train (mean of {smooth} steps)")
        if run.get("eval_step") is not None and len(run["eval_step"]) > 0:
            eval_steps = as_array(run["eval_step"], f"runs[{label!r}]['eval_step']", 1)
            if run.get("val_loss") is not None:
                val = as_array(run["val_loss"], f"runs[{label!r}]['val_loss']", 1,
                               size=eval_steps.size)
                left.plot(eval_steps, val, "o--", color=colour, markersize=4,
                          label=f"{name}validation")
            if run.get("bleu") is not None:
                # A record may lack BLEU at some evaluations (NaN): draw the others.
                raw = np.asarray(run["bleu"], dtype=float)
                require(raw.ndim == 1, f"runs[{label!r}]['bleu']", "a 1-D sequence",
                        f"shape {raw.shape}")
                require(raw.size == eval_steps.size, f"runs[{label!r}]['bleu']",
                        f"{eval_steps.size} values (one per evaluation)", raw.size)
                known = np.isfinite(raw)
                if known.any():
                    right.plot(eval_steps[known], raw[known], "o-", color=colour,
                               markersize=4, label=label)
                    any_bleu = True
    left.set_xlabel("optimizer step")
    left.set_ylabel("label-smoothed loss (nats per token)")
    left.set_title("loss")
    left.legend(fontsize=8 if len(runs) > 1 else None)
    right.set_xlabel("optimizer step")
    right.set_ylabel("BLEU (greedy, validation subset)")
    right.set_title("BLEU")
    if any_bleu and len(runs) > 1:
        right.legend(fontsize=8)
    if logx:
        left.set_xscale("log")
        right.set_xscale("log")
    if title:
        fig.suptitle(title)
    return fig


def length_scatter(
    reference_lengths: Sequence[int],
    hypothesis_lengths: Mapping[str, Sequence[int]],
    *,
    title: str = "",
    unit: str = "words",
) -> Figure:
    """Hypothesis length against reference length for each decoder, with the diagonal
    (same length) drawn; points below it are translations shorter than the reference."""
    ref = as_array(reference_lengths, "reference_lengths", 1)
    require(len(hypothesis_lengths) > 0, "hypothesis_lengths", "at least one series", "none")
    fig, ax = new_figure(width=5.6, height=4.4)
    jitter = np.random.default_rng(0)
    for index, (label, values) in enumerate(hypothesis_lengths.items()):
        hyp = as_array(values, f"hypothesis_lengths[{label!r}]", 1, size=ref.size)
        shift = jitter.uniform(-0.25, 0.25, ref.size)  # separate overlapping integer points
        ax.scatter(ref + shift, hyp, s=8, alpha=0.45, color=PALETTE[index % len(PALETTE)],
                   label=label)
    top = float(ref.max())
    ax.plot([0, top], [0, top], color=PALETTE[-1], linestyle="--", label="same length")
    ax.set_xlabel(f"reference length ({unit})")
    ax.set_ylabel(f"translation length ({unit})")
    ax.set_title(title)
    ax.legend()
    return fig

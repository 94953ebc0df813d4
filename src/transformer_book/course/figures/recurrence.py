"""Figures for chapter 02: what the recurrence costs, measured.

- :func:`time_vs_length`: forward time against sequence length, log-log, with guide lines
  of slope 1 and 2 (Vaswani et al., 2017, Section 1: the "inherently sequential nature
  [of recurrent models] precludes parallelization within training examples").
- :func:`memory_vs_length`: activation memory per example and the largest batch that fits
  a budget ("memory constraints limit batching across examples", Section 1).
- :func:`gradient_vs_distance`: ``||∂h_T/∂x_t||`` against the distance ``T - t``, log-y.
- :func:`accuracy_vs_length` and :func:`accuracy_vs_position`: how a fixed-size encoder
  state fails as sequences grow; :func:`sweep_by_position`: the same per output position,
  mean and spread over seeds, for several state sizes and training lengths.

Every function takes data and returns a :class:`matplotlib.figure.Figure` built with
:func:`transformer_book.course.figures.new_figure`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import PALETTE, new_figure
from transformer_book.util.validation import require, require_positive_number

__all__ = [
    "accuracy_vs_length",
    "accuracy_vs_position",
    "gradient_vs_distance",
    "memory_vs_length",
    "sweep_by_position",
    "time_vs_length",
]


def _series(x: Sequence[float], series: Mapping[str, Sequence[float]], argument: str,
            positive: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Check that every curve has one finite value per x (positive for log axes)."""
    xs = np.asarray(x, dtype=float)
    require(xs.ndim == 1 and xs.size > 0, "x", "a non-empty 1-D sequence", f"shape {xs.shape}")
    require(len(series) > 0, argument, "at least one named curve", "none")
    curves = {}
    for name, values in series.items():
        ys = np.asarray(values, dtype=float)
        require(ys.shape == xs.shape, f"{argument}[{name!r}]", f"{xs.size} values (one per x)",
                f"shape {ys.shape}")
        require(bool(np.isfinite(ys).all()), f"{argument}[{name!r}]", "finite values",
                "NaN or infinity")
        if positive:
            require(bool((ys > 0).all()), f"{argument}[{name!r}]",
                    "positive values (the axis is logarithmic)", f"minimum {ys.min():g}")
        curves[name] = ys
    return xs, curves


def _guides(ax, xs: np.ndarray, anchor: float, slopes: Sequence[int]) -> None:
    """Dashed grey lines of the given log-log slopes through ``(xs[0], anchor)``."""
    for slope, style in zip(slopes, (":", "--"), strict=False):
        ax.plot(xs, anchor * (xs / xs[0]) ** slope, linestyle=style, color="#8c8c8c",
                linewidth=1.0, label=f"∝ L{'' if slope == 1 else '²'} (guide)")


def time_vs_length(
    lengths: Sequence[int],
    seconds: Mapping[str, Sequence[float]],
    *,
    title: str = "Forward time against sequence length",
) -> Figure:
    """Log-log plot of wall time (drawn in ms) against length L, one curve per model.

    Grey guides of slope 1 (∝ L, dotted) and 2 (∝ L², dashed) start at half the lowest
    curve's first point: below every curve, so that neither hides under a curve of the same
    slope, and a curve's slope can be read against them.
    """
    xs, curves = _series(lengths, seconds, "seconds", positive=True)
    fig, ax = new_figure(width=6.4, height=4.0)
    for name, ys in curves.items():
        ax.plot(xs, ys * 1e3, marker="o", markersize=4, label=name)
    _guides(ax, xs, 0.5 * min(ys[0] for ys in curves.values()) * 1e3, (1, 2))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L (tokens)")
    ax.set_ylabel("forward time (ms, log scale)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def memory_vs_length(
    lengths: Sequence[int],
    bytes_per_example: Mapping[str, Sequence[float]],
    budget_bytes: float,
) -> Figure:
    """Two log-log panels: activation bytes per example, and the batch that fits a budget.

    Left: bytes saved for the backward pass per example. Right: ``floor(budget / bytes)``,
    the largest batch whose activations fit ``budget_bytes``.
    """
    xs, curves = _series(lengths, bytes_per_example, "bytes_per_example", positive=True)
    require_positive_number(budget_bytes, "budget_bytes")
    fig, (left, right) = new_figure(1, 2, width=9.6, height=3.8)
    for name, ys in curves.items():
        left.plot(xs, ys / 2**20, marker="o", markersize=4, label=name)
        right.plot(xs, np.floor(budget_bytes / ys), marker="o", markersize=4, label=name)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length L (tokens)")
    left.set_ylabel("MiB saved for backward, per example")
    left.set_title("Activation memory per example")
    right.set_ylabel("examples per batch (log scale)")
    right.set_title(f"Largest batch within {budget_bytes / 2**30:g} GiB of activations")
    left.legend(fontsize=8)
    return fig


def gradient_vs_distance(
    norms: Mapping[str, Sequence[float]],
    *,
    title: str = "How much the last state depends on each input",
) -> Figure:
    """Log-y plot of ``||∂h_T/∂x_t||`` against the distance ``T - t``, one curve per RNN.

    Each curve is ordered as :func:`transformer_book.baselines.rnn.gradient_norm_by_distance`
    returns it: entry 0 is the input farthest from h_T (t = 1), the last entry the
    nearest (t = T, distance 0).
    """
    lengths = {len(values) for values in norms.values()}
    require(len(lengths) == 1, "norms", "curves of equal length", sorted(lengths))
    length = lengths.pop()
    distance = np.arange(length)[::-1]  # entry t is T-1-t steps from the output
    xs, curves = _series(distance, norms, "norms", positive=True)
    fig, ax = new_figure(width=6.4, height=4.0)
    for name, ys in curves.items():
        ax.plot(xs, ys, marker="o", markersize=2.5, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("distance T − t (steps between input x_t and the last state h_T)")
    ax.set_ylabel("‖∂h_T / ∂x_t‖ (log scale)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def accuracy_vs_length(
    lengths: Sequence[int],
    accuracy: Mapping[str, Sequence[float]],
    *,
    trained_max: int,
    chance: float | None = None,
    title: str = "Accuracy against source length",
) -> Figure:
    """Accuracy curves against source length; lengths above ``trained_max`` are shaded.

    ``chance`` draws a dotted horizontal line (e.g. the token accuracy of random guessing).
    """
    xs, curves = _series(lengths, accuracy, "accuracy")
    fig, ax = new_figure(width=6.4, height=3.8)
    if xs.max() > trained_max:
        ax.axvspan(trained_max + 0.5, xs.max() + 0.5, color=PALETTE[5], alpha=0.15,
                   label="longer than any training example")
    for name, ys in curves.items():
        ax.plot(xs, ys, marker="o", markersize=4, label=name)
    if chance is not None:
        ax.axhline(chance, linestyle=":", color="#555555", linewidth=1.0, label="chance (tokens)")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xticks(xs)
    ax.set_xlabel("source length (tokens)")
    ax.set_ylabel("accuracy on held-out examples")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def accuracy_vs_position(
    accuracy: Sequence[float] | Mapping[str, Sequence[float]],
    *,
    chance: float | None = None,
    title: str = "Accuracy of each output token",
) -> Figure:
    """Bars of token accuracy at output positions 1..T (position 1 is generated first).

    One sequence draws one bar per position; a mapping ``{name: accuracies}`` draws the
    named series side by side at each position, with a legend.
    """
    named = accuracy if isinstance(accuracy, Mapping) else {"": accuracy}
    require(len(named) > 0, "accuracy", "at least one named series", "none")
    series = {}
    for name, values in named.items():
        ys = np.asarray(values, dtype=float)
        argument = f"accuracy[{name!r}]" if name else "accuracy"
        require(ys.ndim == 1 and ys.size > 0, argument, "a non-empty 1-D sequence",
                f"shape {ys.shape}")
        series[name] = ys
    sizes = {ys.size for ys in series.values()}
    require(len(sizes) == 1, "accuracy", "series of equal length", sorted(sizes))
    fig, ax = new_figure(width=6.4, height=3.4)
    positions = np.arange(1, sizes.pop() + 1)
    width = 0.8 / len(series)
    for i, (name, ys) in enumerate(series.items()):
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar(positions + offset, ys, width=width, color=PALETTE[i % len(PALETTE)],
               label=name or None)
    if chance is not None:
        ax.axhline(chance, linestyle=":", color="#555555", linewidth=1.0, label="chance")
    if chance is not None or len(series) > 1:
        ax.legend(fontsize=8)
    ax.set_ylim(0, 1.03)
    ax.set_xticks(positions)
    ax.set_xlabel("output position (1 = first token the decoder writes)")
    ax.set_ylabel("token accuracy")
    ax.set_title(title)
    return fig


def _steps(label: str) -> int:
    """The step count a label ends with (``"H = 32, 1000 steps"``: 1000), else 0."""
    words = label.split()
    return int(words[-2]) if len(words) >= 2 and words[-1] == "steps" and words[-2].isdigit() else 0


def sweep_by_position(
    panels: Mapping[str, Mapping[str, Sequence[Sequence[float]]]],
    *,
    chance: float | None = None,
    title: str = "Accuracy of each output token, mean and range over seeds",
) -> Figure:
    """One panel per entry of ``panels`` (e.g. teacher forced, greedy); in each, one curve
    per configuration ``{label: seeds x positions}``: the mean over seeds as a line and the
    range (lowest to highest seed) as a band. A label's step count (``"..., 1000 steps"``)
    picks its line style, one per count (dashed, solid, dotted, dash-dot from the fewest),
    and a label's H picks its colour when it names one.
    """
    require(len(panels) > 0, "panels", "at least one panel", "none")
    counts = sorted({_steps(label) for curves in panels.values() for label in curves})
    styles = dict(zip(counts, ("--", "-", ":", "-.") * len(counts), strict=False))
    fig, axes = new_figure(1, len(panels), width=4.8 * len(panels), height=3.8)
    axes = np.atleast_1d(axes)
    for ax, (panel, curves) in zip(axes, panels.items(), strict=True):
        require(len(curves) > 0, f"panels[{panel!r}]", "at least one curve", "none")
        for i, (label, runs) in enumerate(curves.items()):
            ys = np.asarray(runs, dtype=float)
            require(ys.ndim == 2 and ys.size > 0, f"panels[{panel!r}][{label!r}]",
                    "a seeds x positions table", f"shape {ys.shape}")
            xs = np.arange(1, ys.shape[1] + 1)
            colour = next((PALETTE[k] for k, h in enumerate(("H = 32", "H = 128", "H = 512"))
                           if label.startswith(h + ",")), PALETTE[i % len(PALETTE)])
            style = styles[_steps(label)]
            ax.plot(xs, ys.mean(axis=0), linestyle=style, marker="o", markersize=3,
                    color=colour, label=label)
            ax.fill_between(xs, ys.min(axis=0), ys.max(axis=0), color=colour, alpha=0.15)
        if chance is not None:
            ax.axhline(chance, linestyle=":", color="#555555", linewidth=1.0, label="chance")
        ax.set_ylim(0, 1.03)
        ax.set_xticks(xs)
        ax.set_xlabel("output position")
        ax.set_title(panel)
    axes[0].set_ylabel("token accuracy")
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig

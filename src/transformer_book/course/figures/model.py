"""Figures for the full model (chapter 09): where the parameters live, how training went.

    fig = parameter_breakdown(["tiny", "base"], {"embeddings": [2.4e6, 19e6], ...})
    fig = training_curves(steps, losses, eval_steps, accuracies, loss_floor=0.56)

Attention maps of the trained model are drawn with :mod:`transformer_book.course.figures.attention`;
plain curves with :func:`transformer_book.course.figures.basic.line_plot`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import PALETTE, as_array, new_figure
from transformer_book.util.validation import require, require_positive_number

__all__ = ["parameter_breakdown", "training_curves"]


def parameter_breakdown(
    models: Sequence[str],
    components: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    unit: float = 1e6,
    unit_label: str = "millions of parameters",
    width: float = 7.0,
    height: float | None = None,
) -> Figure:
    """Horizontal stacked bars: one bar per model, one coloured segment per component.

    ``models`` names the bars (e.g. presets); ``components`` maps a component name
    (embeddings, encoder layers, ...) to one parameter count per model. Counts are divided
    by ``unit`` (default: millions); each bar ends with its total and each segment is
    labelled with its share of the total when it is wide enough to hold the text.
    """
    names = [str(m) for m in models]
    require(len(names) > 0, "models", "at least one model name", "none")
    require(isinstance(components, Mapping) and len(components) > 0, "components",
            "a non-empty mapping component -> counts", type(components).__name__)
    require_positive_number(unit, "unit")
    counts = {label: as_array(values, f"components[{label!r}]", 1, size=len(names)) / unit
              for label, values in components.items()}
    for label, values in counts.items():
        require(bool((values >= 0).all()), f"components[{label!r}]", "counts >= 0",
                values.tolist())
    totals = sum(counts.values())
    require(bool((totals > 0).all()), "components", "a positive total for every model",
            totals.tolist())
    fig, ax = new_figure(width=width, height=height or 0.55 * len(names) + 1.9)
    rows = np.arange(len(names))[::-1]  # first model on top
    left = np.zeros(len(names))
    for index, (label, values) in enumerate(counts.items()):
        colour = PALETTE[index % len(PALETTE)]
        ax.barh(rows, values, left=left, color=colour, label=label, height=0.6)
        for row, start, value, total in zip(rows, left, values, totals, strict=True):
            if value / totals.max() > 0.07:  # wide enough to hold "42%"
                ax.text(start + value / 2, row, f"{100 * value / total:.0f}%", ha="center",
                        va="center", color="white", fontsize=8)
        left = left + values
    for row, total in zip(rows, totals, strict=True):
        ax.text(total, row, f" {total:,.1f}", va="center", fontsize=9)
    ax.set_yticks(rows, names)
    ax.set_xlim(0, totals.max() * 1.15)
    ax.set_xlabel(unit_label)
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.grid(False, axis="y")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(counts), fontsize=8)
    return fig


def training_curves(
    steps: Sequence[float],
    losses: Sequence[float],
    eval_steps: Sequence[float],
    accuracies: Sequence[float],
    *,
    loss_floor: float | None = None,
    floor_label: str = "lowest possible loss",
    title: str = "",
    accuracy_label: str = "held-out accuracy",
    width: float = 8.0,
    height: float = 3.4,
) -> Figure:
    """Two panels: the training loss per step (left) and a held-out accuracy (right).

    ``losses`` has one value per entry of ``steps``; ``accuracies`` (fractions in [0, 1])
    one per entry of ``eval_steps``. ``loss_floor`` draws a dotted line, e.g. the entropy
    of the label-smoothed targets, below which a smoothed loss cannot go.
    """
    xs = as_array(steps, "steps", 1)
    ys = as_array(losses, "losses", 1, size=xs.size)
    eval_xs = as_array(eval_steps, "eval_steps", 1)
    accs = as_array(accuracies, "accuracies", 1, size=eval_xs.size)
    require(bool(((accs >= 0) & (accs <= 1)).all()), "accuracies", "fractions in [0, 1]",
            accs.tolist())
    fig, (left, right) = new_figure(1, 2, width=width, height=height)
    left.plot(xs, ys, color=PALETTE[0], linewidth=1.0, label="training loss")
    if loss_floor is not None:
        left.axhline(loss_floor, color="black", linestyle=":", linewidth=1.0, label=floor_label)
    left.set_xlabel("optimizer step")
    left.set_ylabel("label-smoothed cross-entropy")
    left.set_title("loss")
    left.legend(fontsize=8)
    right.plot(eval_xs, 100 * accs, color=PALETTE[1], marker="o", markersize=3.5)
    right.set_ylim(-2, 102)
    right.set_xlabel("optimizer step")
    right.set_ylabel(f"{accuracy_label} (%)")
    right.set_title(accuracy_label)
    if title:
        fig.suptitle(title)
    return fig

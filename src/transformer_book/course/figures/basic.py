"""General-purpose figures: grouped bars and line plots in the course style."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import new_figure


def grouped_bars(
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    ylabel: str = "",
    width: float = 6.0,
    height: float = 3.4,
) -> Figure:
    """One group of bars per category, one bar per series (e.g. softmax at several temperatures)."""
    fig, ax = new_figure(width=width, height=height)
    positions = np.arange(len(categories))
    bar_width = 0.8 / max(len(series), 1)
    for index, (label, values) in enumerate(series.items()):
        offset = (index - (len(series) - 1) / 2) * bar_width
        ax.bar(positions + offset, values, bar_width, label=label)
    ax.set_xticks(positions, list(categories))
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend()
    return fig


def line_plot(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    logx: bool = False,
    logy: bool = False,
    width: float = 6.0,
    height: float = 3.6,
) -> Figure:
    """Several curves over a shared x axis, with markers and optional log scales."""
    fig, ax = new_figure(width=width, height=height)
    for label, values in series.items():
        ax.plot(x, values, marker="o", markersize=3.5, label=label)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend()
    return fig

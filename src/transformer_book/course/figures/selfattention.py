"""Figures for self-attention (chapter 05) and multi-head attention (chapter 06).

- :func:`variance_vs_dk`: the variance of ``q · k`` against ``d_k``, measured points beside
  the line ``d_k`` that Section 3.2.1's footnote predicts, scaled and unscaled.
- :func:`line_panels`: a row of line plots over one shared x axis (softmax saturation and
  its gradient against ``d_k``, training curves, ...).
- :func:`cost_per_layer`: FLOPs and measured time per layer against the sequence length
  ``n``, log-log, with the line ``n = d`` where Table 1's two costs meet.
- :func:`time_ratio_panels`: the speed study (chapter 05): the time of self-attention over
  the time of each other layer against ``n``, recorded, live and counted, one panel per
  (batch, d).

Attention heatmaps come from :mod:`transformer_book.course.figures.attention`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import PALETTE, as_array, new_figure
from transformer_book.util.validation import require, require_positive_int

__all__ = ["cost_per_layer", "line_panels", "time_ratio_panels", "variance_vs_dk"]


def variance_vs_dk(
    d_ks: Sequence[int],
    unscaled: Sequence[float],
    scaled: Sequence[float],
    *,
    title: str = "Variance of the attention score for unit-variance q and k",
    width: float = 6.0,
    height: float = 3.8,
) -> Figure:
    """Measured ``Var(q · k)`` and ``Var(q · k / √d_k)`` against ``d_k`` (log-log).

    ``d_ks``, ``unscaled`` and ``scaled`` are 1-D, one value per ``d_k``. The dashed lines
    are the predictions of Section 3.2.1, footnote 4: ``Var(q · k) = d_k`` and, after
    dividing by ``√d_k``, ``1``.
    """
    x = as_array(d_ks, "d_ks", 1, positive=True)
    raw = as_array(unscaled, "unscaled", 1, size=len(x), positive=True)
    norm = as_array(scaled, "scaled", 1, size=len(x), positive=True)
    fig, ax = new_figure(width=width, height=height)
    ax.plot(x, x, "--", color=PALETTE[0], linewidth=1.2, label="theory: $d_k$")
    ax.plot(x, np.ones_like(x), "--", color=PALETTE[1], linewidth=1.2, label="theory: 1")
    ax.plot(x, raw, "o", color=PALETTE[0], label=r"measured Var$(q \cdot k)$")
    ax.plot(x, norm, "s", color=PALETTE[1], label=r"measured Var$(q \cdot k / \sqrt{d_k})$")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("$d_k$ (dimension of queries and keys)")
    ax.set_ylabel("variance of the score")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def _plot_series(ax: Any, xs: np.ndarray, series: Mapping[str, Any], colours: dict[str, str],
                 argument: str, *, positive: bool) -> None:
    """One line with dots per entry of ``series`` (label -> one value per x), coloured by
    label: ``colours`` remembers the colour of each label across panels."""
    require(isinstance(series, Mapping) and len(series) > 0, argument,
            "a non-empty mapping label -> values", type(series).__name__)
    for label, values in series.items():
        colour = colours.setdefault(label, PALETTE[len(colours) % len(PALETTE)])
        ys = as_array(values, f"{argument}[{label!r}]", 1, size=len(xs), positive=positive)
        ax.plot(xs, ys, marker="o", markersize=3.5, color=colour, label=label)


def line_panels(
    x: Sequence[float],
    panels: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    xlabel: str = "",
    ylabels: Sequence[str] | None = None,
    logx: bool = False,
    logy: Sequence[bool] | bool = False,
    references: Mapping[str, tuple[float, str]] | None = None,
    suptitle: str = "",
    panel_width: float = 3.4,
    height: float = 3.4,
) -> Figure:
    """One panel per entry of ``panels`` (``title -> {series label -> values}``), side by side.

    Every series has one value per entry of ``x``; series with the same label share a colour
    across panels, and the legend is drawn once, in the first panel. ``ylabels`` gives one y
    label per panel, ``logy`` one flag per panel (or one for all); ``logx`` puts x on a
    base-2 log scale. ``references`` maps a panel title to ``(y, label)``: a dotted
    horizontal line such as the largest possible entropy.
    """
    xs = as_array(x, "x", 1, positive=logx)
    require(isinstance(panels, Mapping) and len(panels) > 0, "panels",
            "a non-empty mapping title -> {label: values}", type(panels).__name__)
    count = len(panels)
    flags = [bool(logy)] * count if isinstance(logy, bool) else [bool(f) for f in logy]
    require(len(flags) == count, "logy", f"{count} flags (one per panel)", f"{len(flags)} flags")
    if ylabels is not None:
        ylabels = list(ylabels)
        require(len(ylabels) == count, "ylabels", f"{count} labels (one per panel)",
                f"{len(ylabels)} labels")
    references = dict(references or {})
    unknown = sorted(set(references) - set(panels))
    require(not unknown, "references", f"keys among the panel titles {list(panels)}", unknown)
    fig, axes = new_figure(1, count, width=panel_width * count, height=height)
    axes = np.atleast_1d(axes)
    colours: dict[str, str] = {}
    for index, (ax, (title, series)) in enumerate(zip(axes, panels.items(), strict=True)):
        _plot_series(ax, xs, series, colours, f"panels[{title!r}]", positive=flags[index])
        if title in references:
            y, text = references[title]
            ax.axhline(y, color="black", linestyle=":", linewidth=1.0, label=text)
        if logx:
            ax.set_xscale("log", base=2)
        if flags[index]:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        if ylabels is not None:
            ax.set_ylabel(ylabels[index])
        if index == 0 or title in references:
            ax.legend(fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def cost_per_layer(
    ns: Sequence[int],
    flops: Mapping[str, Sequence[float]],
    seconds: Mapping[str, Sequence[float]],
    *,
    d: int,
    suptitle: str = "",
    width: float = 10.0,
    height: float = 3.8,
) -> Figure:
    """Two log-log panels against the sequence length ``n``: FLOPs per layer (left) and the
    measured time per layer (right), one curve per layer type.

    ``ns`` is 1-D; every series in ``flops`` and ``seconds`` has one positive value per
    ``n``. A dotted vertical line marks ``n = d``, where Table 1's ``O(n²·d)`` of
    self-attention meets the ``O(n·d²)`` of a recurrent layer. Series with the same label
    share a colour in both panels.
    """
    xs = as_array(ns, "ns", 1, positive=True)
    require_positive_int(d, "d")
    fig, axes = new_figure(1, 2, width=width, height=height)
    colours: dict[str, str] = {}
    for ax, (name, data, ylabel) in zip(
        axes, (("flops", flops, "FLOPs per layer"), ("seconds", seconds, "seconds per layer")),
        strict=True,
    ):
        _plot_series(ax, xs, data, colours, name, positive=True)
        ax.axvline(d, color="black", linestyle=":", linewidth=1.0, label=f"n = d = {d}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    axes[0].set_title("counted (Table 1)")
    axes[1].set_title("measured on this machine")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


_RATIO_STYLES = {  # kind of series -> line style
    "recorded": {"linestyle": "-", "marker": "o", "markersize": 3.5},
    "live": {"linestyle": "--", "marker": "s", "markersize": 5, "markerfacecolor": "none"},
    "counted": {"linestyle": ":", "linewidth": 1.2},
}


def time_ratio_panels(
    panels: Mapping[str, Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]]],
    *,
    ylabel: str = "time of self-attention / time of the layer",
    suptitle: str = "",
    panel_width: float = 3.6,
    height: float = 3.4,
) -> Figure:
    """One log-log panel per entry of ``panels``: ``title -> {kind -> {layer -> (ns,
    ratios)}}``, ``kind`` one of ``"recorded"`` (solid, dots), ``"live"`` (dashed, open
    squares) and ``"counted"`` (dotted: a ratio of FLOPs). A layer keeps its colour in every
    panel and kind; the solid line at 1 marks equal cost, below it self-attention is cheaper.
    Each series has its own lengths ``ns``; the legend is drawn in the first panel.
    """
    require(isinstance(panels, Mapping) and len(panels) > 0, "panels",
            "a non-empty mapping title -> {kind: {layer: (ns, ratios)}}", type(panels).__name__)
    fig, axes = new_figure(1, len(panels), width=panel_width * len(panels), height=height)
    colours: dict[str, str] = {}
    for index, (ax, (title, kinds)) in enumerate(zip(np.atleast_1d(axes), panels.items(),
                                                     strict=True)):
        unknown = sorted(set(kinds) - set(_RATIO_STYLES))
        require(not unknown, f"panels[{title!r}]", f"kinds among {list(_RATIO_STYLES)}",
                unknown)
        for kind, series in kinds.items():
            for layer, (ns, ratios) in series.items():
                xs = as_array(ns, f"panels[{title!r}][{kind!r}][{layer!r}] ns", 1,
                              positive=True)
                ys = as_array(ratios, f"panels[{title!r}][{kind!r}][{layer!r}] ratios", 1,
                              size=len(xs), positive=True)
                colour = colours.setdefault(layer, PALETTE[len(colours) % len(PALETTE)])
                ax.plot(xs, ys, color=colour, label=f"{layer} ({kind})", **_RATIO_STYLES[kind])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("sequence length n")
        if index == 0:
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
    if suptitle:
        fig.suptitle(suptitle)
    return fig

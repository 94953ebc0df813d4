"""Figures for convolutional sequence models (chapter 03): receptive fields and costs.

- :func:`dilation_diagram` draws the wiring of a stack of causal convolutions, one dot per
  position and layer, and highlights every unit the last output depends on (the picture
  of WaveNet and ByteNet's dilated stacks, Kalchbrenner et al., 2016, Figure 1).
- :func:`receptive_field_map` draws measured receptive fields: row m is "which inputs
  does the output see after m layers", as :func:`transformer_book.baselines.conv.receptive_field`
  returns them.
- :func:`path_length_plot` draws layers needed against n on a log-2 axis, with a zoomed
  second panel for the short paths.
- :func:`cost_curves` draws cost against sequence length on log-log axes, with an optional
  vertical marker (e.g. n = d, where self-attention and recurrence cost the same, Vaswani
  et al., 2017, Section 4).

    fig = dilation_diagram({"ConvS2S": (1, 1, 1), "ByteNet": (1, 2, 4)}, kernel_size=3,
                           length=16)
    fig = receptive_field_map({"dilated": fields}, output_position=63)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from transformer_book.course.figures import PALETTE, new_figure
from transformer_book.util.validation import bad_input, require, require_int, require_positive_int

__all__ = [
    "cost_curves",
    "dependency_sets",
    "dilation_diagram",
    "path_length_plot",
    "receptive_field_map",
]

_FADED = "#d9d9d9"


def dependency_sets(dilations: Sequence[int], kernel_size: int, length: int) -> list[set[int]]:
    """Positions, layer by layer, that the last output of a causal stack depends on.

    Layer ``l`` (1-based) is a causal convolution of width ``kernel_size`` and dilation
    ``dilations[l-1]``: unit t reads t - j·d for j = 0..k-1. Returns ``sets`` with
    ``sets[0]`` the inputs and ``sets[-1] == {length - 1}``.
    """
    kernel_size = require_positive_int(kernel_size, "kernel_size")
    length = require_positive_int(length, "length")
    dilations = [require_positive_int(d, "dilations") for d in dilations]
    require(len(dilations) >= 1, "dilations", "at least one layer", dilations)
    sets = [{length - 1}]
    for dilation in reversed(dilations):
        below = {t - j * dilation for t in sets[0] for j in range(kernel_size)}
        sets.insert(0, {t for t in below if t >= 0})
    return sets


def dilation_diagram(layouts: Mapping[str, Sequence[int]], kernel_size: int, length: int,
                     *, title: str = "") -> Figure:
    """One panel per stack: dots for units, lines for the connections of causal convolutions.

    ``layouts`` maps a panel title to the dilations of its layers, e.g. ``{"ByteNet":
    (1, 2, 4)}``. Grey lines are every connection; coloured lines and dots are the units
    the last output (top right) depends on, down to the inputs it sees.
    """
    require(isinstance(layouts, Mapping) and len(layouts) >= 1, "layouts",
            "a mapping of panel titles to dilations", type(layouts).__name__)
    kernel_size = require_positive_int(kernel_size, "kernel_size")
    length = require_positive_int(length, "length")
    depth = max(len(dilations) for dilations in layouts.values())
    fig, axes = new_figure(1, len(layouts), width=4.6 * len(layouts), height=0.75 * depth + 1.6)
    axes = np.atleast_1d(axes)
    for index, (ax, (name, dilations)) in enumerate(zip(axes, layouts.items(), strict=True)):
        colour = PALETTE[index % len(PALETTE)]
        sets = dependency_sets(dilations, kernel_size, length)
        for layer, dilation in enumerate(dilations, start=1):
            for t in range(length):
                for j in range(kernel_size):
                    source = t - j * dilation
                    if source < 0:
                        continue
                    used = t in sets[layer] and source in sets[layer - 1]
                    ax.plot([source, t], [layer - 1, layer], color=colour if used else _FADED,
                            linewidth=1.4 if used else 0.6, zorder=2 if used else 1)
        for layer, used in enumerate(sets):
            xs = np.arange(length)
            seen = np.array([t in used for t in xs])
            ax.scatter(xs[~seen], np.full((~seen).sum(), layer), s=14, color="white",
                       edgecolors="#9a9a9a", linewidths=0.8, zorder=3)
            ax.scatter(xs[seen], np.full(seen.sum(), layer), s=22, color=colour, zorder=4)
        ax.set_yticks(range(len(dilations) + 1),
                      ["input"] + [f"layer {m} (d={d})" for m, d in enumerate(dilations, 1)])
        ax.set_xlabel("position")
        ax.set_title(f"{name}\noutput {length - 1} sees {len(sets[0])} inputs")
        ax.grid(False)
        ax.set_xlim(-0.6, length - 0.4)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if title:
        fig.suptitle(title)
    return fig


def _as_fields(fields: Any, argument: str) -> np.ndarray:
    if hasattr(fields, "detach"):
        fields = fields.detach().to("cpu").numpy()
    array = np.asarray(fields)
    require(array.ndim == 2 and array.size > 0, argument,
            "a non-empty 2-D array (layers × input positions)", f"shape {array.shape}")
    return array.astype(bool)


def receptive_field_map(fields: Mapping[str, Any], *, output_position: int | None = None,
                        title: str = "") -> Figure:
    """Measured receptive fields, one panel per model, one row per depth.

    ``fields`` maps a panel title to a boolean array ``(layers, length)``: row m - 1 is
    True where the input reaches the output after m layers. ``output_position`` (default:
    the last) is outlined. The number of inputs seen is written at the end of each row.
    """
    require(isinstance(fields, Mapping) and len(fields) >= 1, "fields",
            "a mapping of panel titles to (layers, length) arrays", type(fields).__name__)
    arrays = {name: _as_fields(value, f"fields[{name!r}]") for name, value in fields.items()}
    lengths = {array.shape[1] for array in arrays.values()}
    require(len(lengths) == 1, "fields", "arrays of one length", sorted(lengths))
    length = lengths.pop()
    position = length - 1 if output_position is None else output_position
    require_int(position, "output_position", minimum=0, maximum=length - 1)
    heights = [array.shape[0] + 1.2 for array in arrays.values()]
    fig, axes = new_figure(len(arrays), 1, width=8.0, height=0.32 * sum(heights) + 0.8,
                           gridspec_kw={"height_ratios": heights})
    axes = np.atleast_1d(axes)
    for index, (ax, (name, array)) in enumerate(zip(axes, arrays.items(), strict=True)):
        cmap = ListedColormap(["white", PALETTE[index % len(PALETTE)]])
        ax.imshow(array, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest",
                  extent=(-0.5, length - 0.5, array.shape[0] + 0.5, 0.5))
        ax.axvspan(position - 0.5, position + 0.5, fill=False, edgecolor="black", linewidth=1.2)
        for row in range(array.shape[0]):
            ax.text(length - 0.5 + length * 0.01, row + 1, f"sees {int(array[row].sum())}",
                    va="center", ha="left", fontsize=8)
        ax.set_xlim(-0.5, length + 0.5)
        ax.set_yticks(range(1, array.shape[0] + 1))
        ax.set_ylabel("layers")
        ax.set_title(f"{name} (outlined: output position {position})")
        ax.grid(False)
    axes[-1].set_xlabel("input position")
    if title:
        fig.suptitle(title)
    return fig


def cost_curves(ns: Sequence[float], series: Mapping[str, Sequence[float]], *,
                marker_x: float | None = None, marker_label: str = "", title: str = "",
                xlabel: str = "sequence length n", ylabel: str = "") -> Figure:
    """Curves of cost against n on log-log axes (base 2 for n), with an optional marker line."""
    ns = _check_series(ns, series, positive=True)
    fig, ax = new_figure(width=6.4, height=4.0)
    for label, values in series.items():
        ax.plot(ns, [float(v) for v in values], marker="o", markersize=3.5, label=label)
    if marker_x is not None:
        ax.axvline(marker_x, color="#555555", linestyle="--", linewidth=1)
        if marker_label:
            ax.text(marker_x * 1.08, 0.04, marker_label, transform=ax.get_xaxis_transform(),
                    fontsize=9, color="#333333")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    return fig


def _check_series(ns: Sequence[float], series: Mapping[str, Sequence[float]],
                  positive: bool, missing_ok: bool = False) -> list[float]:
    ns = [float(n) for n in ns]
    require(len(ns) >= 2 and all(n > 0 for n in ns), "ns", "at least two positive lengths", ns)
    require(isinstance(series, Mapping) and len(series) >= 1, "series",
            "a mapping of labels to values", type(series).__name__)
    for label, values in series.items():
        values = [v if missing_ok and v is None else float(v) for v in values]
        if len(values) != len(ns) or (positive and not all(v > 0 for v in values)) or \
                all(v is None for v in values):
            measured = sum(v is not None for v in values)
            raise bad_input(f"series[{label!r}]",
                       f"{len(ns)} {'positive ' if positive else ''}values (one per n, "
                       "at least one not None)", f"{len(values)} values, {measured} not None")
    return ns


_MARKERS = ("o", "s", "^", "D", "v", "P")
_STYLES = ("-", "--", "-.", ":")


def path_length_plot(ns: Sequence[int], series: Mapping[str, Sequence[int]], *,
                     zoom_below: float | None = None, title: str = "") -> Figure:
    """Layers needed to connect position n to position 1, against n (log-2 axis).

    The left panel shows every series; the right one (when ``zoom_below`` is given) the
    same curves with the y axis cut at ``zoom_below``, so the short paths are readable.
    On a log n axis a straight line is O(log n) and an upward curve is O(n). A value of
    ``None`` is a length that was not measured: the curve stops there.
    """
    ns = _check_series(ns, series, positive=False, missing_ok=True)
    panels = 2 if zoom_below is not None else 1
    fig, axes = new_figure(1, panels, width=5.2 * panels, height=3.8)
    axes = np.atleast_1d(axes)
    for index, ax in enumerate(axes):
        for number, (label, values) in enumerate(series.items()):
            marker = _MARKERS[number % len(_MARKERS)]
            # a marker, a line style and a width each, the first drawn widest: curves that
            # coincide (ConvS2S's and the Neural GPU's) stay visible one under the other
            ax.plot(ns, [np.nan if v is None else float(v) for v in values], marker=marker,
                    markersize=4 + 2 * (len(series) - 1 - number), markerfacecolor="none",
                    linestyle=_STYLES[number % len(_STYLES)],
                    linewidth=1.2 + 1.2 * (len(series) - 1 - number), label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length n (log scale)")
        ax.set_ylabel("layers needed")
        if index == 1:
            ax.set_ylim(0, zoom_below)
            ax.set_title(f"zoom: up to {zoom_below:g} layers")
        else:
            ax.set_title("all models")
    axes[0].legend()
    if title:
        fig.suptitle(title)
    return fig

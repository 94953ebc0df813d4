"""Figures for chapter 12 (scaling up): where the FLOPs go, Table 1 measured, training time.

- :func:`flops_breakdown`: the share of a model's FLOPs per component as sentences grow.
- :func:`layer_costs`: time and memory of one layer against n, one curve per layer kind.
- :func:`training_time_bars`: how long one training run takes on several setups (log scale).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from transformer_book.course.figures import PALETTE, new_figure
from transformer_book.util.validation import require


def _check_series(x: Sequence[float], series: Mapping[str, Sequence[float]], name: str) -> None:
    require(len(x) > 0, "x", "at least one point", len(x))
    for label, values in series.items():
        require(len(values) == len(x), f"{name}[{label!r}]", f"{len(x)} values (one per x)",
                len(values))


def flops_breakdown(
    lengths: Sequence[int],
    components: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    xlabel: str = "sentence length n (source = target)",
    width: float = 7.0,
    height: float = 3.8,
) -> Figure:
    """Stacked shares (in %) of each component's FLOPs, one bar per length.

    ``components`` maps a label to FLOPs per length (same order as ``lengths``); each bar
    sums to 100 %, so the figure shows how the O(n²) attention terms take over from the
    O(n) weight-matrix products as n grows.
    """
    _check_series(lengths, components, "components")
    values = np.array([list(v) for v in components.values()], dtype=float)  # (C, len)
    totals = values.sum(axis=0)
    require(bool((totals > 0).all()), "components", "a positive total at every length",
            totals.tolist())
    shares = 100.0 * values / totals  # (C, len)
    fig, ax = new_figure(width=width, height=height)
    positions = np.arange(len(lengths))
    bottom = np.zeros(len(lengths))
    for label, share in zip(components, shares, strict=True):
        ax.bar(positions, share, 0.7, bottom=bottom, label=label)
        bottom += share
    ax.set_xticks(positions, [str(n) for n in lengths])
    ax.set_ylim(0, 100)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of forward FLOPs (%)")
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    return fig


def layer_costs(
    ns: Sequence[int],
    seconds: Mapping[str, Sequence[float]],
    memory_bytes: Mapping[str, Sequence[float]],
    *,
    suptitle: str = "",
    width: float = 9.0,
    height: float = 3.6,
) -> Figure:
    """Two log-log panels against the sequence length n: time per call (left, in ms) and
    bytes kept for the backward pass (right, in MiB), one curve per layer kind."""
    _check_series(ns, seconds, "seconds")
    _check_series(ns, memory_bytes, "memory_bytes")
    fig, (left, right) = new_figure(1, 2, width=width, height=height)
    for label, values in seconds.items():
        left.plot(ns, [1e3 * s for s in values], marker="o", markersize=3.5, label=label)
    for label, values in memory_bytes.items():
        right.plot(ns, [b / 2**20 for b in values], marker="o", markersize=3.5, label=label)
    for ax, ylabel, title in (
        (left, "ms per forward + backward", "time (measured, this machine)"),
        (right, "MiB saved for backward", "activation memory (measured)"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    left.legend(fontsize=8)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def training_time_bars(
    labels: Sequence[str],
    hours: Sequence[float],
    *,
    title: str = "",
    measured: Sequence[bool] | None = None,
    width: float = 7.0,
    height: float = 3.2,
) -> Figure:
    """Horizontal bars of training time (log scale), each annotated with its duration.

    ``measured[i]`` marks bars that are reported or measured times rather than estimates;
    they are drawn in the first palette colour, estimates in the second, and the legend
    says which is which.
    """
    require(len(labels) == len(hours) > 0, "hours", f"{len(labels)} values (one per label)",
            len(hours))
    require(all(h > 0 for h in hours), "hours", "positive durations", list(hours))
    measured = [False] * len(labels) if measured is None else list(measured)
    require(len(measured) == len(labels), "measured", f"{len(labels)} flags", len(measured))
    fig, ax = new_figure(width=width, height=height)
    positions = np.arange(len(labels))[::-1]  # first label on top
    ax.barh(positions, hours, 0.6, color=[PALETTE[0] if m else PALETTE[1] for m in measured])
    for y, h in zip(positions, hours, strict=True):
        text = f"{h:.1f} h" if h >= 1 else f"{60 * h:.0f} min"
        ax.text(h * 1.08, y, text, va="center", fontsize=9)
    ax.set_yticks(positions, list(labels))
    ax.set_xscale("log")
    ax.set_xlim(min(hours) / 2, max(hours) * 4)
    ax.set_xlabel("hours (log scale)")
    ax.set_title(title)
    handles = [Patch(color=PALETTE[0], label="reported / measured"),
               Patch(color=PALETTE[1], label="estimated from FLOPs")]
    ax.legend(handles=[h for h, used in zip(handles, (any(measured), not all(measured)),
                                            strict=True) if used], fontsize=8, loc="lower right")
    return fig

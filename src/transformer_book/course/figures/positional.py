"""Positional-encoding figures (chapter 08): the sinusoid table, relative offsets, and
accuracy against sequence length or position for several positional schemes.

    fig = encoding_heatmap(pe, curves=[0, 2, 8, 16])
    fig = offset_similarity(gram, offsets, {"pos = 0": dots_0, "pos = 20": dots_20})
    fig = accuracy_vs_length(lengths, {"sinusoidal": acc_s, "learned": acc_l}, train_max=16)
    fig = accuracy_vs_position({"sinusoidal": seeds_s}, train_max=16, live={"sinusoidal": a})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import DIVERGING, HEATMAP, PALETTE, as_array, new_figure
from transformer_book.util.validation import require, require_int, require_number

__all__ = ["accuracy_vs_length", "accuracy_vs_position", "encoding_heatmap", "offset_similarity"]


def encoding_heatmap(
    pe: Any,
    *,
    curves: Sequence[int] | None = None,
    title: str = "Sinusoidal positional encoding",
    width: float | None = None,
    height: float = 3.8,
) -> Figure:
    """The table ``pe (L, d_model)`` as a heatmap: positions as rows, dimensions as columns,
    values on a diverging scale from -1 to 1.

    With ``curves`` (dimension indices), a second panel draws those columns against the
    position, so the different wavelengths can be read.
    """
    table = as_array(pe, "pe", 2)
    length, d_model = table.shape
    columns = list(curves or [])
    for c in columns:
        require_int(c, "curves", minimum=0, maximum=d_model - 1)
    panels = 2 if columns else 1
    fig, axes = new_figure(1, panels, width=width or (11.0 if columns else 6.0), height=height)
    ax = axes[0] if columns else axes
    image = ax.imshow(table, cmap=DIVERGING, vmin=-1.0, vmax=1.0, aspect="auto",
                      interpolation="nearest")
    ax.grid(False)
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="PE(pos, dim)", shrink=0.9)
    if columns:
        right = axes[1]
        positions = np.arange(length)
        for index, c in enumerate(columns):
            kind = "sin" if c % 2 == 0 else "cos"
            right.plot(positions, table[:, c], color=PALETTE[index % len(PALETTE)],
                       label=f"dim {c} ({kind})")
        right.set_xlabel("position")
        right.set_ylabel("PE(pos, dim)")
        right.set_title("Columns as curves: longer waves to the right")
        right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4)
    return fig


def offset_similarity(
    gram: Any,
    offsets: Any,
    curves: Mapping[str, Any],
    *,
    title: str = "PE(pos) · PE(pos + k) depends only on k",
    width: float = 11.0,
    height: float = 4.0,
) -> Figure:
    """Left: the Gram matrix ``gram (L, L)`` of dot products ``PE(i) · PE(j)``. Right: each
    curve of ``curves`` (label -> values, one per offset) against ``offsets`` (k)."""
    matrix = as_array(gram, "gram", 2)
    ks = as_array(offsets, "offsets", 1)
    require(len(curves) > 0, "curves", "at least one curve", "none")
    fig, (left, right) = new_figure(1, 2, width=width, height=height)
    image = left.imshow(matrix, cmap=HEATMAP, aspect="auto", interpolation="nearest")
    left.grid(False)
    left.set_xlabel("position j")
    left.set_ylabel("position i")
    left.set_title("PE(i) · PE(j)")
    fig.colorbar(image, ax=left, label="dot product", shrink=0.9)
    styles = ["-", "--", ":", "-."]
    for index, (label, values) in enumerate(curves.items()):
        right.plot(ks, as_array(values, f"curves[{label!r}]", 1, size=len(ks)),
                   linestyle=styles[index % len(styles)], linewidth=2.4 - 0.4 * (index % 4),
                   color=PALETTE[index % len(PALETTE)], label=label)
    right.set_xlabel("offset k")
    right.set_ylabel("PE(pos) · PE(pos + k)")
    right.set_title(title)
    right.legend(fontsize=8)
    return fig


def accuracy_vs_length(
    lengths: Sequence[int],
    series: Mapping[str, Sequence[float]],
    *,
    train_max: int,
    chance: float | None = None,
    title: str = "",
    ylabel: str = "accuracy",
    width: float = 6.4,
    height: float = 3.8,
) -> Figure:
    """Accuracy against sequence length, one line per scheme; lengths up to ``train_max``
    (those seen in training) are shaded, and ``chance``, when given, is a dotted line."""
    xs = as_array(list(lengths), "lengths", 1)
    require(len(series) > 0, "series", "at least one line", "none")
    require_number(train_max, "train_max")
    fig, ax = new_figure(width=width, height=height)
    ax.axvspan(xs.min() - 0.5, train_max + 0.5, color=PALETTE[-1], alpha=0.15,
               label="lengths seen in training")
    for index, (label, values) in enumerate(series.items()):
        ax.plot(xs, as_array(list(values), f"series[{label!r}]", 1, size=len(xs)), marker="o",
                markersize=3.5, color=PALETTE[index % (len(PALETTE) - 1)], label=label)
    if chance is not None:
        ax.axhline(chance, color="black", linestyle=":", linewidth=1,
                   label=f"chance ({chance:.2f})")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("sequence length")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="best")
    return fig


def accuracy_vs_position(
    seeds: Mapping[str, Any],
    *,
    train_max: int,
    live: Mapping[str, Any] | None = None,
    chance: float | None = None,
    title: str = "",
    width: float = 7.2,
    height: float = 4.6,
) -> Figure:
    """Accuracy at each position, one colour per scheme: ``seeds`` maps a label to a
    ``(seeds, L)`` array (NaN where a position has no label), drawn as the mean over seeds
    with a band from the smallest to the largest seed; ``live`` (label -> ``(L,)``) adds the
    seed run live as a thin dashed line. Positions below ``train_max`` are shaded."""
    require(len(seeds) > 0, "seeds", "at least one scheme", "none")
    require_number(train_max, "train_max")
    live = dict(live or {})
    require(set(live) <= set(seeds), "live", f"labels among {list(seeds)}", list(live))
    fig, ax = new_figure(width=width, height=height)
    ax.axvspan(-0.5, train_max - 0.5, color=PALETTE[-1], alpha=0.15,
               label="positions seen in training")
    for index, (label, runs) in enumerate(seeds.items()):
        raw = np.asarray(runs.detach().cpu() if hasattr(runs, "detach") else runs, dtype=float)
        require(raw.ndim == 2, f"seeds[{label!r}]", "a (seeds, L) array", f"shape {raw.shape}")
        scored = ~np.isnan(raw).all(axis=0)  # positions without a label are left out
        table = as_array(raw[:, scored], f"seeds[{label!r}]", 2)
        positions = np.arange(raw.shape[1])[scored]
        colour = PALETTE[index % (len(PALETTE) - 1)]
        ax.fill_between(positions, np.nanmin(table, 0), np.nanmax(table, 0), color=colour,
                        alpha=0.25, linewidth=0)
        ax.plot(positions, np.nanmean(table, 0), color=colour,
                label=f"{label} (mean of {table.shape[0]} seeds, band: min to max)")
        if label in live:
            line = np.asarray(live[label], dtype=float)
            require(line.shape == scored.shape, f"live[{label!r}]", f"{len(scored)} values",
                    f"shape {line.shape}")
            ax.plot(positions, as_array(line[scored], f"live[{label!r}]", 1), color=colour,
                    linestyle="--", linewidth=0.9)
    if chance is not None:
        ax.axhline(chance, color="black", linestyle=":", linewidth=1,
                   label=f"chance ({chance:.2f})")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("position t")
    ax.set_ylabel("accuracy at position t")
    ax.set_title(title)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    return fig

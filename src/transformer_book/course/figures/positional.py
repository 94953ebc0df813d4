"""Positional-encoding figures (chapter 08): the sinusoid table, relative offsets, and
accuracy against sequence length for several positional schemes.

    fig = encoding_heatmap(pe, curves=[0, 2, 8, 16])
    fig = offset_similarity(gram, offsets, {"pos = 0": dots_0, "pos = 20": dots_20})
    fig = accuracy_vs_length(lengths, {"sinusoidal": acc_s, "learned": acc_l}, train_max=16)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import DIVERGING, HEATMAP, PALETTE, as_array, new_figure
from transformer_book.util.validation import require, require_int, require_number

__all__ = ["accuracy_vs_length", "encoding_heatmap", "offset_similarity"]


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

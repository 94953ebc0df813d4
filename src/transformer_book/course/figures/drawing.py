"""The drawing kit of the course's diagrams: a :class:`Diagram` (a figure that carries its
alt text), a canvas in equal-aspect data units, and boxes, arrows, lines and grids of
coloured cells drawn on it. Every diagram module builds on these, so that all diagrams
share one look: 7 in wide at most, no text under 8 pt.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.patches import FancyBboxPatch, Rectangle

from transformer_book.course.figures import DISPLAY_DPI, PALETTE, PIXEL_DENSITY, BookFigure
from transformer_book.util.validation import is_integer, require

__all__ = ["ATTENTION", "CROSS", "EMBED", "FFN", "FONT", "NORM", "OUTPUT", "WIDTH", "Diagram",
           "arrow", "box", "canvas", "check_count", "check_tokens", "grid", "label_width",
           "line", "solid", "tint", "title", "values"]

WIDTH = 7.0  # inches: 770 px at DISPLAY_DPI, inside the book's 784-px column
FONT = 8.5  # points; nothing is drawn smaller than 8


class Diagram(BookFigure):
    """A :class:`BookFigure` with a one-sentence ``alt_text`` for readers who cannot see it."""

    def __init__(self, alt_text: str, width: float, height: float) -> None:
        super().__init__(figsize=(width, height), layout="constrained")
        require(isinstance(alt_text, str) and alt_text.strip() != "", "alt_text",
                "a non-empty sentence", repr(alt_text))
        self.alt_text = alt_text

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=DISPLAY_DPI * PIXEL_DENSITY,
                     metadata={"Description": self.alt_text})
        return buffer.getvalue()


def tint(colour: str, amount: float = 0.7) -> tuple[float, float, float]:
    """``colour`` mixed with ``amount`` of white: a box's face."""
    r, g, b = to_rgb(colour)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


ATTENTION, FFN, NORM, EMBED, OUTPUT, CROSS = (
    tint(PALETTE[1]), tint(PALETTE[0]), tint("#d9c13a", 0.55), tint(PALETTE[3]),
    tint(PALETTE[2]), tint(PALETTE[4]))


def canvas(alt_text: str, xlim: tuple[float, float], ylim: tuple[float, float],
            ncols: int = 1, width: float = WIDTH, height: float | None = None,
            ) -> tuple[Diagram, list[Axes]]:
    """A diagram of ``ncols`` blank panels with equal-aspect data units, ``xlim`` × ``ylim``
    each; the height follows from the aspect unless given."""
    if height is None:
        aspect = (ylim[1] - ylim[0]) / ((xlim[1] - xlim[0]) * ncols)
        height = min(max(width * aspect, 1.6), 9.0)
    fig = Diagram(alt_text, width, height)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    for ax in axes:
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        ax.set_aspect("equal")
        ax.set_axis_off()
    return fig, axes


def box(ax: Axes, x: float, y: float, w: float, h: float, text: str = "",
         face: object = "white", *, size: float = FONT, edge: str = "black",
         style: str = "-", weight: str = "normal") -> None:
    """A rounded box centred at ``(x, y)`` with ``text`` in its middle."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, linewidth=1.0, linestyle=style,
                                boxstyle=f"round,pad=0,rounding_size={min(w, h) * 0.18}",
                                facecolor=face, edgecolor=edge))
    if text:
        ax.text(x, y, text, ha="center", va="center", fontsize=size, weight=weight)


def arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], *,
           colour: object = "black", width: float = 1.0, style: str = "-|>",
           connection: str = "arc3") -> None:
    """An arrow from ``start`` to ``end`` (its head at ``end``)."""
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle=style, color=colour, linewidth=width, shrinkA=0,
                                shrinkB=0, mutation_scale=9, connectionstyle=connection))


def line(ax: Axes, xs: Sequence[float], ys: Sequence[float], colour: object = "black",
          width: float = 1.0, **kw: Any) -> None:
    ax.plot(xs, ys, color=colour, linewidth=width, solid_capstyle="butt", **kw)


def grid(ax: Axes, x: float, y: float, colours: np.ndarray, cell: float = 1.0, *,
          texts: np.ndarray | None = None, size: float = FONT, edge: str = "white",
          cell_h: float | None = None) -> None:
    """A grid of coloured cells, ``colours (rows, cols, 3)``, its top-left corner at
    ``(x, y)``; row 0 on top. ``texts`` writes one string in each cell."""
    rows, cols = colours.shape[:2]
    ch = cell if cell_h is None else cell_h
    for i in range(rows):
        for j in range(cols):
            ax.add_patch(Rectangle((x + j * cell, y - (i + 1) * ch), cell, ch,
                                   facecolor=colours[i, j], edgecolor=edge, linewidth=0.8))
            if texts is not None:
                r, g, b = colours[i, j][:3]
                dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
                ax.text(x + (j + 0.5) * cell, y - (i + 0.5) * ch, texts[i, j], ha="center",
                        va="center", fontsize=size, color="white" if dark else "black")
    ax.add_patch(Rectangle((x, y - rows * ch), cols * cell, rows * ch, fill=False,
                           edgecolor="black", linewidth=0.8))


def values(array: np.ndarray, cmap: str = "RdBu_r") -> np.ndarray:
    """Colours of a matrix of numbers on a symmetric diverging scale."""
    scale = float(np.abs(array).max()) or 1.0
    return np.asarray(matplotlib.colormaps[cmap](0.5 + 0.4 * array / scale))[..., :3]


def solid(rows: int, cols: int, colour: object) -> np.ndarray:
    return np.broadcast_to(np.asarray(to_rgb(colour)), (rows, cols, 3)).copy()  # type: ignore[arg-type]


def check_tokens(tokens: Sequence[str], argument: str, maximum: int = 8) -> list[str]:
    require(not isinstance(tokens, str) and isinstance(tokens, Sequence), argument,
            "a sequence of token strings", type(tokens).__name__)
    words = list(tokens)
    require(1 <= len(words) <= maximum, argument, f"1 to {maximum} tokens", len(words))
    require(all(isinstance(w, str) and w.strip() and len(w) <= 10 for w in words), argument,
            "non-empty strings of at most 10 characters", words)
    return words


def check_count(value: object, argument: str, minimum: int, maximum: int) -> int:
    require(is_integer(value) and minimum <= value <= maximum, argument,  # type: ignore[operator]
            f"an int in [{minimum}, {maximum}]", repr(value))
    return value  # type: ignore[return-value]


def title(ax: Axes, x: float, y: float, text: str, size: float = FONT, **kw: Any) -> None:
    ax.text(x, y, text, ha="center", va="bottom", fontsize=size, **kw)


def label_width(words: Sequence[str]) -> float:
    """About how many cell units (at the diagrams' scale) the longest word takes."""
    return 0.28 * max(len(w) for w in words) + 0.3

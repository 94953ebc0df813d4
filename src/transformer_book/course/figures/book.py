"""Figures about the book itself: the map of the chapters in the preface."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from transformer_book.course.figures import PALETTE, new_figure

__all__ = ["chapter_map"]

_ARROW_GREY = "#777777"


def chapter_map(parts: Sequence[tuple[str, Sequence[tuple[str, str, bool]]]]) -> Figure:
    """Draw the course as three columns of chapter boxes joined by arrows.

    ``parts`` is ``[(part_title, [(number, title, available), ...]), ...]``; chapters
    not yet available are drawn dashed and grey.
    """
    width = 3.4 * len(parts)
    tallest = max(len(chapters) for _, chapters in parts)
    fig, ax = new_figure(width=width, height=0.75 * tallest + 1.2)
    ax.set_axis_off()
    ax.set_xlim(0, len(parts))
    ax.set_ylim(-tallest - 0.2, 1.0)
    previous_bottom = None
    for column, (part_title, chapters) in enumerate(parts):
        colour = PALETTE[column % len(PALETTE)]
        ax.text(column + 0.5, 0.55, part_title, ha="center", va="center", fontsize=12,
                fontweight="bold", color=colour)
        for row, chapter in enumerate(chapters):
            _chapter_box(ax, column, row, chapter, colour)
        if previous_bottom is not None:  # from the last chapter of the previous part
            ax.add_patch(FancyArrowPatch(previous_bottom, (column + 0.06, -0.5),
                                         connectionstyle="arc3,rad=-0.25", arrowstyle="-|>",
                                         mutation_scale=10, color=_ARROW_GREY))
        previous_bottom = (column + 0.94, -len(chapters) + 0.5)
    return fig


def _chapter_box(ax: Any, column: int, row: int, chapter: tuple[str, str, bool],
                 colour: str) -> None:
    """One chapter's box at ``(column, row)`` and, below the first, an arrow from the box
    above; a chapter not yet available is dashed and grey."""
    number, title, available = chapter
    y = -row - 0.5
    ax.add_patch(FancyBboxPatch(
        (column + 0.06, y - 0.34), 0.88, 0.68, boxstyle="round,pad=0.02",
        facecolor=colour if available else "white", alpha=0.9 if available else 1.0,
        edgecolor=colour if available else "#9a9a9a", linestyle="-" if available else "--",
        linewidth=1.2,
    ))
    ax.text(column + 0.5, y, f"{number}  {title}", ha="center", va="center", fontsize=9,
            wrap=True, color="white" if available else "#6f6f6f")
    if row > 0:
        ax.add_patch(FancyArrowPatch((column + 0.5, y + 0.66), (column + 0.5, y + 0.36),
                                     arrowstyle="-|>", mutation_scale=9, color=_ARROW_GREY))

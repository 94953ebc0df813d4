"""Runs over seeds as a reader should see them: every seed, the mean, the spread, and the
one seed a chapter ran live (chapter 04's hop counts, chapter 08's positional schemes).

    fig = seed_points({"1 hop": [0.36, 0.43, 0.45], "2 hops": [1.0, 1.0, 0.99]},
                      live={"1 hop": 0.36, "2 hops": 1.0}, ylabel="answer accuracy")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import PALETTE, as_array, new_figure
from transformer_book.util.validation import require

__all__ = ["seed_points"]


def seed_points(
    runs: Mapping[str, Sequence[float]],
    *,
    live: Mapping[str, float] | None = None,
    chance: float | None = None,
    title: str = "",
    ylabel: str = "",
    width: float = 6.0,
    height: float = 3.6,
) -> Figure:
    """One column per group of ``runs`` (label -> one value per seed): a bar at the mean, a
    line from the smallest to the largest seed, a dot per seed, and a star at the ``live``
    value of the group when given. ``chance`` draws a dotted line."""
    require(len(runs) > 0, "runs", "at least one group of seeds", "none")
    live = dict(live or {})
    require(set(live) <= set(runs), "live", f"labels among {list(runs)}", list(live))
    fig, ax = new_figure(width=width, height=height)
    for index, (label, values) in enumerate(runs.items()):
        seeds = as_array(list(values), f"runs[{label!r}]", 1)
        colour = PALETTE[index % (len(PALETTE) - 1)]
        ax.bar(index, seeds.mean(), 0.6, color=colour, alpha=0.35,
               label="mean over seeds" if index == 0 else None)
        ax.vlines(index, seeds.min(), seeds.max(), color=colour, linewidth=2)
        offsets = np.linspace(-0.12, 0.12, len(seeds)) if len(seeds) > 1 else np.zeros(1)
        ax.scatter(index + offsets, seeds, color=colour, s=18, zorder=3,
                   label="one recorded seed" if index == 0 else None)
        if label in live:
            ax.scatter([index + 0.22], [live[label]], marker="*", s=120, color="black",
                       zorder=4, label="the seed run live" if index == 0 else None)
    if chance is not None:
        ax.axhline(chance, color="black", linestyle=":", linewidth=1,
                   label=f"chance ({chance:.2f})")
    ax.set_xticks(range(len(runs)), list(runs))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="best")
    return fig

"""Figures for the book, in one consistent style.

Every figure function takes data and returns a :class:`matplotlib.figure.Figure`
(never calls ``plt.show``), so notebooks stay free of styling code: a cell ends with
``fig`` and Jupyter draws it once. Topic modules (``viz.attention``, ``viz.curves``,
...) build on :func:`new_figure` and the palette here.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure

PALETTE = ("#1f5f8b", "#e07a1f", "#2e8b57", "#b03a48", "#6a4c93", "#8c8c8c")
HEATMAP = "viridis"
DIVERGING = "RdBu_r"

_STYLE = {
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.frameon": False,
    "figure.dpi": 100,
}


class BookFigure(Figure):
    """A matplotlib ``Figure`` that Jupyter draws as a PNG without pyplot's global state."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=110)
        return buffer.getvalue()


def new_figure(
    nrows: int = 1, ncols: int = 1, *, width: float = 6.0, height: float = 3.6, **subplot_kw
) -> tuple[Figure, object]:
    """A styled figure with an ``nrows`` × ``ncols`` grid; returns ``(fig, axes)``.

    ``axes`` is a single Axes for a 1×1 grid, otherwise a NumPy array of Axes.
    The figure is not registered with pyplot, so it is shown exactly once.
    """
    import matplotlib

    with matplotlib.rc_context(_STYLE):
        fig = BookFigure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=True, **subplot_kw)
    for ax in axes.flat if hasattr(axes, "flat") else [axes]:
        ax.spines[["top", "right"]].set_visible(False)
        ax.grid(True, alpha=0.3)
        ax.set_prop_cycle(color=PALETTE)
    return fig, axes

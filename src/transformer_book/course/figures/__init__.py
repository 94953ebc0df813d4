"""Figures for the book, in one consistent style.

Every figure function takes data and returns a :class:`matplotlib.figure.Figure`
(never calls ``plt.show``), so notebooks stay free of styling code: a cell ends with
``fig`` and Jupyter draws it once. One module per chapter's topic (``figures.attention``,
``figures.training``, ...) builds on :func:`new_figure` and the palette here.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from transformer_book.util.validation import bad_input, require

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


# Figures are laid out for 110 pixels per inch and drawn at twice that, so that they stay
# sharp on high-density screens and when a reader zooms in (the PNG says its display size).
DISPLAY_DPI = 110
PIXEL_DENSITY = 2


class BookFigure(Figure):
    """A matplotlib ``Figure`` that Jupyter draws as a PNG without pyplot's global state.

    The PNG has ``PIXEL_DENSITY`` × the pixels of its display size, which it records in the
    output's metadata (``width``/``height`` in CSS pixels), so the book and Jupyter show it
    at the size it was laid out for.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=DISPLAY_DPI * PIXEL_DENSITY)
        return buffer.getvalue()

    def _repr_mimebundle_(self, include=None, exclude=None):
        """The PNG with its display size, which Jupyter and the book use to scale it."""
        data = self._repr_png_()
        width, height = _png_size(data)
        size = {"width": width // PIXEL_DENSITY, "height": height // PIXEL_DENSITY}
        return {"image/png": data}, {"image/png": size}


def _png_size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` in pixels, read from a PNG's IHDR chunk."""
    require(data[:8] == b"\x89PNG\r\n\x1a\n", "data", "PNG bytes", f"{data[:8]!r}")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


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


def as_array(values: Any, argument: str, ndim: int, *, size: int | None = None,
             positive: bool = False) -> np.ndarray:
    """A non-empty, finite float NumPy array of ``ndim`` dimensions, from a tensor (any device,
    with or without grad), an array or nested lists; ``size`` fixes the length of a 1-D array
    and ``positive`` requires values > 0 (log axes). Anything else is a ``BookError`` that
    names ``argument``."""
    if hasattr(values, "detach"):  # torch.Tensor
        values = values.detach().to("cpu").double().numpy()
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise bad_input(argument, f"a {ndim}-D array or tensor of numbers",
                   type(values).__name__) from None
    require(array.ndim == ndim and array.size > 0, argument, f"a non-empty {ndim}-D array",
            f"shape {array.shape}")
    if size is not None:
        require(array.size == size, argument, f"{size} values", f"{array.size} values")
    require(bool(np.isfinite(array).all()), argument, "finite values", "NaN or infinity")
    if positive:
        require(bool((array > 0).all()), argument, "positive values (log scale)",
                f"minimum {array.min():g}")
    return array

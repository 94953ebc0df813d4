"""Attention figures: heatmaps of attention weights, alone or in a grid of panels.

Rows are queries, columns are keys: entry ``(i, j)`` is how much query ``i`` takes from
value ``j``, so each row of a softmax attention matrix sums to one. Chapters 04-11 draw
every attention matrix through :func:`attention_heatmap` or :func:`attention_grid`, so all
of them share one look: ``viridis``, labelled ticks, a colour bar, and the numbers written
in the cells when the matrix is small enough to read them.

    fig = attention_heatmap(weights, x_labels=src_tokens, y_labels=tgt_tokens,
                            title="Cross-attention")
    fig = attention_grid(per_head_weights, x_labels=tokens, y_labels=tokens,
                         titles=[f"head {h}" for h in range(8)])

:func:`regression_fits` draws the curves of attention pooling used as a regressor
(Nadaraya-Watson, chapter 04).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import HEATMAP, PALETTE, as_array, new_figure
from transformer_book.util.validation import require, require_positive_int

__all__ = ["attention_grid", "attention_heatmap", "draw_attention", "regression_fits"]

#: Matrices with at most this many rows and columns get their values written in the cells
#: when ``annotate`` is left at None.
ANNOTATE_MAX_SIDE = 12
#: At most this many tick labels are drawn per axis; longer label lists are thinned.
MAX_TICKS = 40


def _check_labels(labels: Sequence[Any] | None, size: int, argument: str) -> list[str] | None:
    if labels is None:
        return None
    labels = [str(label) for label in labels]
    require(len(labels) == size, argument, f"{size} labels (one per {argument[0]} position)",
            f"{len(labels)} labels")
    return labels


def _ticks(labels: list[str] | None, size: int, max_ticks: int) -> tuple[np.ndarray, list[str]]:
    """Tick positions and texts, thinned to at most ``max_ticks`` per axis."""
    step = max(1, math.ceil(size / max_ticks))
    positions = np.arange(0, size, step)
    texts = [labels[i] if labels is not None else str(i) for i in positions]
    return positions, texts


def draw_attention(
    ax: Any,
    weights: Any,
    x_labels: Sequence[Any] | None = None,
    y_labels: Sequence[Any] | None = None,
    title: str = "",
    *,
    xlabel: str = "keys",
    ylabel: str = "queries",
    annotate: bool | None = None,
    vmin: float | None = 0.0,
    vmax: float | None = None,
    fmt: str = ".2f",
    cmap: str = HEATMAP,
    max_ticks: int = MAX_TICKS,
) -> Any:
    """Draw one attention matrix ``weights (L_q, L_k)`` on the Axes ``ax``; return the image.

    Building block of :func:`attention_heatmap` and :func:`attention_grid`, for figures that
    put a heatmap beside other plots. ``vmin``/``vmax`` fix the colour scale (``vmax=None``:
    the matrix's maximum); ``annotate=None`` writes the values when both sides are at most
    :data:`ANNOTATE_MAX_SIDE`. At most ``max_ticks`` labels are drawn per axis (evenly
    thinned).
    """
    matrix = as_array(weights, "weights", 2)
    rows, cols = matrix.shape
    x_text = _check_labels(x_labels, cols, "x_labels")
    y_text = _check_labels(y_labels, rows, "y_labels")
    low = float(matrix.min()) if vmin is None else vmin
    high = float(matrix.max()) if vmax is None else vmax
    if high <= low:
        high = low + 1e-12
    image = ax.imshow(matrix, cmap=cmap, vmin=low, vmax=high, aspect="auto",
                      interpolation="nearest")
    ax.grid(False)
    ax.spines[:].set_visible(False)
    require_positive_int(max_ticks, "max_ticks")
    _label_axes(ax, x_text, y_text, (rows, cols), max_ticks)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(_wrap(title, _axes_width_inches(ax)))
    if annotate is None:
        annotate = max(rows, cols) <= ANNOTATE_MAX_SIDE
    if annotate:
        _write_values(ax, matrix, low + 0.5 * (high - low), fmt)
    return image


def _label_axes(ax: Any, x_text: list[str] | None, y_text: list[str] | None,
                shape: tuple[int, int], max_ticks: int) -> None:
    """Tick labels of a ``(rows, cols)`` heatmap; x labels turn 60° when they do not fit flat."""
    rows, cols = shape
    positions, texts = _ticks(x_text, cols, max_ticks)
    y_longest = max(len(t) for t in _ticks(y_text, rows, max_ticks)[1])
    cells_width = _axes_width_inches(ax) - 0.55 - _CHAR_INCHES * y_longest  # minus y labels
    rotate = _needs_rotation(texts, cells_width)
    ax.set_xticks(positions, texts, rotation=60 if rotate else 0,
                  ha="right" if rotate else "center",
                  rotation_mode="anchor" if rotate else "default")
    positions, texts = _ticks(y_text, rows, max_ticks)
    ax.set_yticks(positions, texts)
    ax.tick_params(length=0, labelsize=8 if max(rows, cols) > 15 else 9)


def _write_values(ax: Any, matrix: np.ndarray, middle: float, fmt: str) -> None:
    """Each entry of ``matrix (rows, cols)`` in its cell: black on light cells (above
    ``middle``), white on dark ones."""
    rows, cols = matrix.shape
    size = 8 if max(rows, cols) <= 8 else 6.5
    for i in range(rows):
        for j in range(cols):
            value = matrix[i, j]
            ax.text(j, i, format(value, fmt), ha="center", va="center", fontsize=size,
                    color="black" if value > middle else "white")


def _wrap(title: str, width_inches: float) -> str:
    """Break a title into lines that fit ``width_inches`` at the title font size."""
    return "\n".join(textwrap.wrap(title, max(int(width_inches * 11), 20)))


def _axes_width_inches(ax: Any) -> float:
    return ax.get_position().width * ax.figure.get_figwidth()


def _needs_rotation(texts: Sequence[str], width_inches: float) -> bool:
    """Rotate x tick labels when, written flat, they would not fit side by side."""
    return sum(len(t) + 2 for t in texts) * _CHAR_INCHES > width_inches


#: Rough width of one tick-label character at font size 9, in inches.
_CHAR_INCHES = 0.075


def _longest(labels: Sequence[Any] | None, size: int, max_ticks: int) -> tuple[int, int]:
    """Length of the longest drawn label and the total characters of all drawn labels."""
    texts = _ticks(None if labels is None else [str(x) for x in labels], size, max_ticks)[1]
    return max(len(t) for t in texts), sum(len(t) + 2 for t in texts)


def _panel_size(rows: int, cols: int, x_labels: Sequence[Any] | None,
                y_labels: Sequence[Any] | None, max_ticks: int) -> tuple[float, float]:
    """Width and height (inches) of one heatmap panel with its tick labels, no colour bar."""
    require_positive_int(max_ticks, "max_ticks")
    x_labels = _check_labels(x_labels, cols, "x_labels")
    y_labels = _check_labels(y_labels, rows, "y_labels")
    cells_w = min(max(0.42 * cols, 2.0), 6.0)
    cells_h = min(max(0.36 * rows, 1.4), 5.5)
    x_longest, x_total = _longest(x_labels, cols, max_ticks)
    y_longest, _ = _longest(y_labels, rows, max_ticks)
    rotated = x_total * _CHAR_INCHES > cells_w
    left = 0.55 + _CHAR_INCHES * y_longest  # y tick labels and the y label
    bottom = 0.5 + (0.87 * _CHAR_INCHES * x_longest if rotated else 0.2)
    return cells_w + left, cells_h + bottom + 0.45  # + the title


def attention_heatmap(
    weights: Any,
    x_labels: Sequence[Any] | None = None,
    y_labels: Sequence[Any] | None = None,
    title: str = "",
    *,
    xlabel: str = "keys",
    ylabel: str = "queries",
    annotate: bool | None = None,
    vmin: float | None = 0.0,
    vmax: float | None = None,
    fmt: str = ".2f",
    colorbar_label: str = "attention weight",
    width: float | None = None,
    height: float | None = None,
    max_ticks: int = MAX_TICKS,
) -> Figure:
    """A heatmap of one attention matrix ``weights (L_q, L_k)``: queries as rows, keys as columns.

    ``weights`` is a tensor (any device; detached for you) or an array. ``x_labels`` name the
    ``L_k`` keys (e.g. source tokens), ``y_labels`` the ``L_q`` queries. The colour scale
    starts at ``vmin=0`` (weights are non-negative; pass ``vmin=None`` for raw scores) and
    ends at ``vmax`` (default: the largest entry). Values are written in the cells when
    ``annotate`` is True, or when it is None and the matrix is at most 12 × 12.
    """
    matrix = as_array(weights, "weights", 2)
    auto_width, auto_height = _panel_size(*matrix.shape, x_labels, y_labels, max_ticks)
    fig, ax = new_figure(width=width or auto_width + 1.1, height=height or auto_height)
    image = draw_attention(ax, matrix, x_labels, y_labels, "", xlabel=xlabel, ylabel=ylabel,
                           annotate=annotate, vmin=vmin, vmax=vmax, fmt=fmt, max_ticks=max_ticks)
    fig.colorbar(image, ax=ax, label=colorbar_label, shrink=0.9)
    if title:  # centred over the whole figure, so long tick labels never push it off the edge
        fig.suptitle(_wrap(title, fig.get_figwidth()), fontsize=11)
    return fig


def _per_panel(labels: Any, count: int, argument: str) -> list[Sequence[Any] | None]:
    """One label list per panel from None, one shared list, or a list of lists."""
    if labels is None:
        return [None] * count
    labels = list(labels)
    if labels and all(isinstance(item, (list, tuple)) for item in labels):
        require(len(labels) == count, argument, f"{count} label lists (one per panel)",
                f"{len(labels)} lists")
        return labels
    return [labels] * count


def _as_matrices(weights_list: Any) -> list[np.ndarray]:
    """The panels of :func:`attention_grid`: a sequence of 2-D matrices, or the ``n``
    matrices of a 3-D tensor ``(n, L_q, L_k)``."""
    if hasattr(weights_list, "detach") and weights_list.ndim == 3:
        weights_list = list(weights_list.unbind(0))
    require(isinstance(weights_list, Sequence) and len(weights_list) > 0, "weights_list",
            "a non-empty sequence of 2-D matrices or a 3-D tensor", type(weights_list).__name__)
    return [as_array(w, f"weights_list[{i}]", 2) for i, w in enumerate(weights_list)]


def _largest_panel(matrices: Sequence[np.ndarray], x_per: Sequence[Any], y_per: Sequence[Any],
                   max_ticks: int) -> tuple[float, float]:
    """Width and height (inches) that fit every panel of a grid, each at most 5.5."""
    sizes = [_panel_size(*m.shape, x, y, max_ticks)
             for m, x, y in zip(matrices, x_per, y_per, strict=True)]
    return min(max(w for w, _ in sizes), 5.5), min(max(h for _, h in sizes), 5.5)


def _fill_grid(axes: np.ndarray, matrices: Sequence[np.ndarray], x_per: Sequence[Any],
               y_per: Sequence[Any], titles: Sequence[str] | None, *, xlabel: str, ylabel: str,
               **draw: Any) -> Any:
    """Draw matrix ``i`` on panel ``i`` of ``axes (nrows, ncols)`` and hide the panels left
    over; only the left column gets ``ylabel`` and only the lowest panel of each column
    ``xlabel``. Returns the last image (for the shared colour bar)."""
    nrows, ncols = axes.shape
    count = len(matrices)
    image = None
    for index, ax in enumerate(axes.flat):
        if index >= count:
            ax.set_visible(False)
            continue
        row, col = divmod(index, ncols)
        image = draw_attention(
            ax, matrices[index], x_per[index], y_per[index],
            titles[index] if titles is not None else "",
            xlabel=xlabel if row == nrows - 1 or index + ncols >= count else "",
            ylabel=ylabel if col == 0 else "", **draw,
        )
    return image


def attention_grid(
    weights_list: Any,
    x_labels: Any = None,
    y_labels: Any = None,
    titles: Sequence[str] | None = None,
    *,
    suptitle: str = "",
    ncols: int | None = None,
    xlabel: str = "keys",
    ylabel: str = "queries",
    annotate: bool | None = None,
    vmin: float | None = 0.0,
    vmax: float | None = None,
    fmt: str = ".2f",
    colorbar_label: str = "attention weight",
    panel_width: float | None = None,
    panel_height: float | None = None,
    max_ticks: int = MAX_TICKS,
) -> Figure:
    """Several attention matrices side by side, on one shared colour scale and colour bar.

    ``weights_list`` is a sequence of ``(L_q, L_k)`` matrices (their sizes may differ) or a
    3-D tensor ``(n, L_q, L_k)``, e.g. the ``h`` heads of one layer. ``x_labels`` and
    ``y_labels`` are either one list shared by every panel or one list per panel;
    ``titles`` has one string per panel. ``ncols`` defaults to all panels in one row (at
    most 4 per row). The colour scale runs from ``vmin`` to ``vmax`` (default: the largest
    entry of all panels), so panels compare at a glance. Only the left column carries the
    y label and only the bottom row the x label.
    """
    matrices = _as_matrices(weights_list)
    count = len(matrices)
    if titles is not None:
        titles = list(titles)
        require(len(titles) == count, "titles", f"{count} titles (one per panel)",
                f"{len(titles)} titles")
    ncols = min(require_positive_int(min(count, 4) if ncols is None else ncols, "ncols"), count)
    nrows = math.ceil(count / ncols)
    x_per = _per_panel(x_labels, count, "x_labels")
    y_per = _per_panel(y_labels, count, "y_labels")
    auto_width, auto_height = _largest_panel(matrices, x_per, y_per, max_ticks)
    width = (panel_width or auto_width) * ncols + 1.1  # + the colour bar
    height = (panel_height or auto_height) * nrows + (0.4 if suptitle else 0.0)
    fig, axes = new_figure(nrows, ncols, width=width, height=height)
    axes = np.atleast_1d(axes).reshape(nrows, ncols)
    high = max(float(m.max()) for m in matrices) if vmax is None else vmax
    low = min(float(m.min()) for m in matrices) if vmin is None else vmin
    image = _fill_grid(axes, matrices, x_per, y_per, titles, xlabel=xlabel, ylabel=ylabel,
                       annotate=annotate, vmin=low, vmax=high, fmt=fmt, max_ticks=max_ticks)
    fig.colorbar(image, ax=list(axes.flat[:count]), label=colorbar_label, shrink=0.9)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def regression_fits(
    x_train: Any,
    y_train: Any,
    x_eval: Any,
    fits: Mapping[str, Any],
    *,
    truth: Any = None,
    title: str = "",
    xlabel: str = "x",
    ylabel: str = "y",
    width: float = 6.4,
    height: float = 3.8,
) -> Figure:
    """Training points as dots and each fitted curve over ``x_eval`` as a line.

    ``x_train``, ``y_train`` ``(n,)``; ``x_eval`` ``(m,)``; ``fits`` maps a label to the
    predictions at ``x_eval`` ``(m,)``; ``truth`` ``(m,)``, when given, is drawn dashed in
    black. Chapter 04 uses it for attention pooling as kernel regression (Nadaraya, 1964;
    Watson, 1964).
    """
    x_train = as_array(x_train, "x_train", 1)
    y_train = as_array(y_train, "y_train", 1)
    require(len(y_train) == len(x_train), "y_train", f"{len(x_train)} values (as x_train)",
            f"{len(y_train)} values")
    x_eval = as_array(x_eval, "x_eval", 1)
    curves = {label: as_array(values, f"fits[{label!r}]", 1) for label, values in fits.items()}
    if truth is not None:
        curves_truth = as_array(truth, "truth", 1)
        require(len(curves_truth) == len(x_eval), "truth", f"{len(x_eval)} values (as x_eval)",
                f"{len(curves_truth)} values")
    for label, values in curves.items():
        require(len(values) == len(x_eval), f"fits[{label!r}]",
                f"{len(x_eval)} values (as x_eval)", f"{len(values)} values")
    fig, ax = new_figure(width=width, height=height)
    ax.scatter(x_train, y_train, s=12, color=PALETTE[-1], alpha=0.6, label="training data",
               zorder=1)
    if truth is not None:
        ax.plot(x_eval, curves_truth, "--", color="black", linewidth=1.2, label="truth", zorder=3)
    for index, (label, values) in enumerate(curves.items()):
        ax.plot(x_eval, values, color=PALETTE[index % (len(PALETTE) - 1)], linewidth=2,
                label=label, zorder=2)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, loc="best")
    return fig

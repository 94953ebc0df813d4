"""Figures for the ablations (chapter 13): Table 3 of the paper beside a few-minute run.

    fig = ablation_chart(rows, {"this run": [...], "paper": [...]}, {"this run": [...], ...},
                         noise=(0.8, 0.5))

Each panel shows, per variant, how far it moved from its own baseline -- the relative
change in validation perplexity and the change in BLEU -- for each source of numbers, so
that the *direction* of an effect can be compared even though the scales differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import PALETTE, new_figure
from transformer_book.util.validation import fail, require, require_positive_number

__all__ = ["ablation_chart"]


def _series(series: Mapping[str, Sequence[float]], rows: int, argument: str
            ) -> dict[str, np.ndarray]:
    """Check ``series`` (label -> one number or NaN per row)."""
    require(isinstance(series, Mapping) and len(series) > 0, argument,
            "a non-empty mapping label -> values", type(series).__name__)
    out = {}
    for label, values in series.items():
        try:
            array = np.asarray(values, dtype=float)
        except (TypeError, ValueError):
            raise fail(f"{argument}[{label!r}]", "a sequence of numbers",
                       type(values).__name__) from None
        require(array.shape == (rows,), f"{argument}[{label!r}]", f"{rows} values (one per row)",
                f"shape {array.shape}")
        require(not bool(np.isinf(array).any()), f"{argument}[{label!r}]",
                "finite values or NaN (missing)", "infinity")
        out[str(label)] = array
    return out


def ablation_chart(
    rows: Sequence[str],
    ppl_change: Mapping[str, Sequence[float]],
    bleu_change: Mapping[str, Sequence[float]],
    *,
    noise: tuple[float, float] | None = None,
    title: str = "",
    width: float = 9.0,
    height: float | None = None,
) -> Figure:
    """Two panels of horizontal grouped bars, one group per variant (row).

    Left: relative change of validation perplexity against the baseline, in percent
    (positive = worse). Right: change in BLEU, in points (negative = worse). Each series
    (e.g. "this run", "paper, Table 3") gets one bar per row; NaN means "no such row" and
    draws nothing. ``noise = (ppl_percent, bleu_points)`` shades ± that band around zero:
    the seed-to-seed spread of the baseline, inside which a change is not distinguishable
    from noise.
    """
    names = [str(r) for r in rows]
    require(len(names) > 0, "rows", "at least one row name", "none")
    ppl = _series(ppl_change, len(names), "ppl_change")
    bleu = _series(bleu_change, len(names), "bleu_change")
    if noise is not None:
        require(len(noise) == 2, "noise", "(ppl_percent, bleu_points)", repr(noise))
        noise = tuple(require_positive_number(v, "noise", allow_zero=True) for v in noise)
    height = height if height is not None else 1.2 + 0.42 * len(names)
    fig, (left, right) = new_figure(1, 2, width=width, height=height, sharey=True)
    positions = np.arange(len(names))[::-1]  # first row at the top
    panels = ((left, ppl, "perplexity vs baseline (%, + is worse)", 0),
              (right, bleu, "BLEU vs baseline (points, − is worse)", 1))
    for ax, series, xlabel, index in panels:
        bar = 0.8 / len(series)
        for k, (label, values) in enumerate(series.items()):
            offset = ((len(series) - 1) / 2 - k) * bar
            ax.barh(positions + offset, np.nan_to_num(values), bar, label=label,
                    color=PALETTE[k % len(PALETTE)])
        if noise is not None and noise[index] > 0:
            ax.axvspan(-noise[index], noise[index], color="0.6", alpha=0.25, lw=0, zorder=0,
                       label="seed-to-seed spread of the baseline")
        ax.axvline(0.0, color="0.2", lw=0.8)
        ax.set_xlabel(xlabel)
    left.set_yticks(positions, names)
    handles, labels = right.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig

"""Figures for the ablations (chapter 13): Table 3 of the paper beside a few-minute run.

    fig = ablation_chart(rows, {"this run": [...], "paper": [...]}, {"this run": [...], ...},
                         ppl_error={"this run": [...]}, bleu_error={"this run": [...]})

Each panel shows, per variant, how far it moved from its own baseline -- the relative
change in validation perplexity and the change in BLEU -- for each source of numbers, so
that the *direction* of an effect can be compared even though the scales differ. Error bars
(e.g. the 95% interval of a difference of means over seeds) show which changes the seeds
can tell from noise: a bar whose interval crosses zero cannot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from transformer_book.course.figures import PALETTE, new_figure
from transformer_book.util.validation import bad_input, require, require_positive_number

__all__ = ["ablation_chart"]


def _series(series: Mapping[str, Sequence[float]], rows: int, argument: str,
            allow_empty: bool = False) -> dict[str, np.ndarray]:
    """Check ``series`` (label -> one number or NaN per row)."""
    require(isinstance(series, Mapping) and (allow_empty or len(series) > 0), argument,
            "a non-empty mapping label -> values", type(series).__name__)
    out = {}
    for label, values in series.items():
        try:
            array = np.asarray(values, dtype=float)
        except (TypeError, ValueError):
            raise bad_input(f"{argument}[{label!r}]", "a sequence of numbers",
                       type(values).__name__) from None
        require(array.shape == (rows,), f"{argument}[{label!r}]", f"{rows} values (one per row)",
                f"shape {array.shape}")
        require(not bool(np.isinf(array).any()), f"{argument}[{label!r}]",
                "finite values or NaN (missing)", "infinity")
        out[str(label)] = array
    return out


def _errors(errors: Mapping[str, Sequence[float]] | None, series: dict[str, np.ndarray],
            argument: str) -> dict[str, np.ndarray]:
    """Check ``errors`` (label of a series -> one half-width >= 0 or NaN per row)."""
    out = _series(errors if errors is not None else {}, len(next(iter(series.values()))),
                  argument, allow_empty=True)
    for label, array in out.items():
        require(label in series, argument, f"labels among the series {list(series)}",
                repr(label))
        require(not bool((array < 0).any()), f"{argument}[{label!r}]",
                "half-widths >= 0 (or NaN)", "a negative value")
    return out


def ablation_chart(
    rows: Sequence[str],
    ppl_change: Mapping[str, Sequence[float]],
    bleu_change: Mapping[str, Sequence[float]],
    *,
    ppl_error: Mapping[str, Sequence[float]] | None = None,
    bleu_error: Mapping[str, Sequence[float]] | None = None,
    noise: tuple[float, float] | None = None,
    error_label: str = "95% interval over seeds",
    title: str = "",
    width: float = 9.0,
    height: float | None = None,
) -> Figure:
    """Two panels of horizontal grouped bars, one group per variant (row).

    Left: relative change of validation perplexity against the baseline, in percent
    (positive = worse). Right: change in BLEU, in points (negative = worse). Each series
    (e.g. "this run", "paper, Table 3") gets one bar per row; NaN means "no such row" and
    draws nothing. ``ppl_error`` / ``bleu_error`` map a series' label to one error-bar
    half-width per row (NaN: no bar), drawn as ± that around the bar's end and named
    ``error_label`` in the legend. ``noise = (ppl_percent, bleu_points)`` shades ± that band
    around zero (e.g. the seed-to-seed spread of the baseline).
    """
    names = [str(r) for r in rows]
    require(len(names) > 0, "rows", "at least one row name", "none")
    ppl = _series(ppl_change, len(names), "ppl_change")
    bleu = _series(bleu_change, len(names), "bleu_change")
    errors = (_errors(ppl_error, ppl, "ppl_error"), _errors(bleu_error, bleu, "bleu_error"))
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
        offsets = {label: ((len(series) - 1) / 2 - k) * bar for k, label in enumerate(series)}
        for k, (label, values) in enumerate(series.items()):
            ax.barh(positions + offsets[label], np.nan_to_num(values), bar, label=label,
                    color=PALETTE[k % len(PALETTE)])
        for k, (label, error) in enumerate(errors[index].items()):  # one legend entry
            ax.errorbar(np.nan_to_num(series[label]), positions + offsets[label], xerr=error,
                        fmt="none", ecolor="0.15", elinewidth=0.9, capsize=2.5,
                        label=error_label if k == 0 else "_nolegend_")
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

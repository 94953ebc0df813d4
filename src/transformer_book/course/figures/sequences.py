"""Figures for chapter 01: what sequences look like, sentence lengths, padded batches.

Every function takes data (lists, NumPy arrays or tensors) and returns a
:class:`matplotlib.figure.Figure` built with :func:`transformer_book.course.figures.new_figure`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.colors import ListedColormap, LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from transformer_book.course.figures import PALETTE, new_figure
from transformer_book.util.validation import require, require_int, require_positive_int

__all__ = ["length_overview", "padded_batches", "sequence_gallery"]

_PAD_GREY = "#d9d9d9"


def _as_1d(values, argument: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    require(array.ndim == 1 and array.size > 0, argument, "a non-empty 1-D sequence of numbers",
            f"shape {array.shape}")
    return array


def sequence_gallery(
    text_tokens: Sequence[str],
    audio: Sequence[float],
    sample_rate: int,
    frame_length: int,
    prices: Sequence[float],
    temperatures: Sequence[float],
    dna: str,
    dna_one_hot,
) -> Figure:
    """Five sequences as small multiples, one panel each (5 axes, stacked).

    Args:
        text_tokens: the tokens of one sentence, drawn as numbered boxes.
        audio: a waveform of ``N`` samples at ``sample_rate`` Hz; it is cut into
            non-overlapping frames of ``frame_length`` samples (shaded alternately).
        prices: one price per day.
        temperatures: one temperature per hour.
        dna: the bases, e.g. ``"ACGT..."`` (length ``T``).
        dna_one_hot: ``(T, 4)`` one-hot rows for ``A, C, G, T``, drawn as a 4 x T strip.
    """
    require(len(text_tokens) > 0, "text_tokens", "at least one token", "none")
    wave = _as_1d(audio, "audio")
    price = _as_1d(prices, "prices")
    temp = _as_1d(temperatures, "temperatures")
    require_positive_int(sample_rate, "sample_rate")
    require_int(frame_length, "frame_length", minimum=1, maximum=wave.size)
    one_hot = np.asarray(dna_one_hot, dtype=float)
    require(one_hot.shape == (len(dna), 4), "dna_one_hot", f"shape ({len(dna)}, 4) for the "
            f"{len(dna)} bases of dna", f"shape {one_hot.shape}")

    fig, axes = new_figure(5, 1, width=8.0, height=9.6)
    ax_text, ax_audio, ax_price, ax_temp, ax_dna = axes
    _text_panel(ax_text, text_tokens)
    _audio_panel(ax_audio, wave, sample_rate, frame_length)

    ax_price.plot(np.arange(1, price.size + 1), price, color=PALETTE[2], lw=1.2)
    ax_price.set_title(f"prices (generated random walk): {price.size} days")
    ax_price.set_xlabel("day")
    ax_price.set_ylabel("price")

    ax_temp.plot(np.arange(temp.size), temp, color=PALETTE[3], lw=1.0)
    ax_temp.set_title(f"temperatures (generated daily cycle + noise): {temp.size} hours")
    ax_temp.set_xlabel("hour")
    ax_temp.set_ylabel("°C")
    ax_temp.set_xticks(np.arange(0, temp.size + 1, 24))

    _dna_panel(ax_dna, dna, one_hot)
    return fig


def _text_panel(ax: Any, tokens: Sequence[str]) -> None:
    """One box per token, its position (from 1) underneath."""
    for position, token in enumerate(tokens):
        ax.text(position, 0.0, token, ha="center", va="center", fontsize=9,
                bbox={"boxstyle": "round,pad=0.3", "facecolor": "#e8f0f7",
                      "edgecolor": PALETTE[0]})
        ax.text(position, -0.7, str(position + 1), ha="center", va="center", fontsize=8,
                color="#555555")
    ax.set_xlim(-0.7, len(tokens) - 0.3)
    ax.set_ylim(-1.1, 0.6)
    ax.set_axis_off()
    ax.set_title(f"text: {len(tokens)} tokens (a Multi30k caption; numbers are positions)")


def _audio_panel(ax: Any, wave: np.ndarray, sample_rate: int, frame_length: int) -> None:
    """The waveform ``wave (N,)`` over time, its frames of ``frame_length`` samples shaded
    alternately."""
    seconds = np.arange(wave.size) / sample_rate
    n_frames = wave.size // frame_length
    for frame in range(n_frames):
        start, stop = frame * frame_length / sample_rate, (frame + 1) * frame_length / sample_rate
        ax.axvspan(start, stop, color=PALETTE[1], alpha=0.12 if frame % 2 else 0.0, lw=0)
    ax.plot(seconds, wave, color=PALETTE[0], lw=0.8)
    ax.set_title(f"audio (generated chirp): {n_frames} frames of {frame_length} samples "
                 f"({1000 * frame_length / sample_rate:.0f} ms each)")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("amplitude")


def _dna_panel(ax: Any, dna: str, one_hot: np.ndarray) -> None:
    """The one-hot rows ``one_hot (T, 4)`` of the bases as a 4 x T strip of cells."""
    ax.imshow(one_hot.T, aspect="auto", cmap=ListedColormap(["white", PALETTE[4]]),
              interpolation="nearest", vmin=0, vmax=1)
    ax.set_yticks(range(4), ["A", "C", "G", "T"])
    ax.set_xticks(range(len(dna)), list(dna), fontsize=7)
    ax.grid(False)
    # Thin white lines between cells, so that runs of the same base stay countable.
    ax.set_xticks(np.arange(-0.5, len(dna)), minor=True)
    ax.set_yticks(np.arange(-0.5, 4), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.8, alpha=1.0)
    ax.tick_params(which="minor", length=0)
    ax.set_title(f"DNA (generated at random): {len(dna)} bases, one-hot (a filled cell = 1)")
    ax.set_xlabel("base (position along the strand)")


def length_overview(
    src_lengths: Sequence[int],
    tgt_lengths: Sequence[int],
    src_label: str = "German",
    tgt_label: str = "English",
) -> Figure:
    """Length histograms of both sides (left) and source vs target length (right); 2 axes.

    The right panel draws each distinct ``(source length, target length)`` pair once,
    coloured by how many sentence pairs have it (log scale), with the line ``y = x``.
    A colour bar adds a third axes.
    """
    src = np.asarray(src_lengths, dtype=int)
    tgt = np.asarray(tgt_lengths, dtype=int)
    require(src.ndim == 1 and src.size > 0, "src_lengths", "a non-empty list of lengths",
            f"shape {src.shape}")
    require(tgt.shape == src.shape, "tgt_lengths", f"{src.size} lengths, one per source",
            f"shape {tgt.shape}")

    fig, (ax_hist, ax_scatter) = new_figure(1, 2, width=10.0, height=3.9)
    bins = np.arange(0.5, max(src.max(), tgt.max()) + 1.5)
    for lengths, colour, label in ((src, PALETTE[0], src_label), (tgt, PALETTE[1], tgt_label)):
        ax_hist.hist(lengths, bins=bins, histtype="stepfilled", alpha=0.45, color=colour,
                     label=label)
    ax_hist.set_title("sentence lengths")
    ax_hist.set_xlabel("words per sentence")
    ax_hist.set_ylabel("sentences")
    ax_hist.legend()

    counts = Counter(zip(src.tolist(), tgt.tolist(), strict=True))
    pairs = np.array(sorted(counts))
    weights = np.array([counts[tuple(p)] for p in pairs.tolist()])
    points = ax_scatter.scatter(pairs[:, 0], pairs[:, 1], c=weights, s=12, cmap="viridis",
                                norm=LogNorm(vmin=1, vmax=weights.max()), marker="s")
    top = max(src.max(), tgt.max()) + 1
    ax_scatter.plot([0, top], [0, top], color="#444444", lw=1, ls="--", label="y = x")
    ax_scatter.set_xlim(0, top)
    ax_scatter.set_ylim(0, top)
    ax_scatter.set_aspect("equal")
    ax_scatter.set_title(f"{tgt_label} length against {src_label} length")
    ax_scatter.set_xlabel(f"{src_label} words")
    ax_scatter.set_ylabel(f"{tgt_label} words")
    ax_scatter.legend(loc="upper left")
    fig.colorbar(points, ax=ax_scatter, label="sentence pairs")
    return fig


def padded_batches(batches: Mapping[str, Sequence[int]], ncols: int = 2) -> Figure:
    """Each batch as its padded ``(B, L)`` grid: real tokens coloured, ``<pad>`` grey.

    ``batches`` maps a panel title to the token lengths of the batch's sentences; every
    row is one sentence, padded to the longest in its batch. Panels are laid out
    ``ncols`` to a row (one axes per batch), all with the same axes limits so the waste
    can be compared by eye.
    """
    require(isinstance(batches, Mapping) and len(batches) > 0, "batches",
            "a non-empty mapping of title -> lengths", repr(batches)[:80])
    require_positive_int(ncols, "ncols")
    for title, lengths in batches.items():
        ok = len(lengths) > 0 and all(isinstance(n, int) and n >= 1 for n in lengths)
        require(ok, f"batches[{title!r}]", "a non-empty list of positive integer lengths",
                repr(lengths)[:80])
    widest = max(max(lengths) for lengths in batches.values())
    tallest = max(len(lengths) for lengths in batches.values())
    ncols = min(ncols, len(batches))
    nrows = -(-len(batches) // ncols)
    fig, axes = new_figure(nrows, ncols, width=4.6 * ncols, height=2.9 * nrows + 0.5)
    axes = np.atleast_1d(axes).ravel()
    colours = ListedColormap(["white", _PAD_GREY, PALETTE[0]])
    for ax, (title, lengths) in zip(axes, batches.items(), strict=False):
        longest = max(lengths)
        grid = np.zeros((tallest, widest))  # 0 = outside the batch
        for row, n in enumerate(lengths):
            grid[row, :longest] = 1  # padding
            grid[row, :n] = 2  # real tokens
        ax.imshow(grid, cmap=colours, vmin=0, vmax=2, aspect="auto", interpolation="nearest")
        waste = 1 - sum(lengths) / (len(lengths) * longest)
        ax.set_title(f"{title}\n{len(lengths)} x {longest} slots, {100 * waste:.0f}% padding")
        ax.set_xlabel("position (token)")
        ax.set_ylabel("sentence in the batch")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.grid(False)
    for ax in axes[len(batches):]:
        ax.set_axis_off()
    handles = [Patch(color=PALETTE[0], label="real token"), Patch(color=_PAD_GREY, label="<pad>")]
    fig.legend(handles=handles, loc="outside lower center", ncols=2)
    return fig

"""Diagrams of the model's parts, drawn by the course's own code (no image files).

    fig = transformer_figure(model)      # the paper's Figure 1, read from a Transformer
    fig = qkv_figure(("The", "dog", "is", "eating"))
    fig.alt_text                         # one sentence for the cell's mystnb.image.alt

Every function returns a :class:`~transformer_book.course.figures.drawing.Diagram`: a
:class:`~transformer_book.course.figures.BookFigure` that carries its ``alt_text`` (also
written into the PNG as its ``Description``). The layouts fit the book's code column (at
most 7 in wide at the book's display density). The diagrams of the other chapters (path
lengths, the training pipeline, weighted averaging, the book's loop, positions, data
parallelism, Table 3's knobs) live in :mod:`~transformer_book.course.figures.chapter_diagrams`
and are importable from here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.patches import Circle, FancyBboxPatch, Rectangle
from torch import nn

from transformer_book.course.figures import PALETTE
from transformer_book.course.figures.chapter_diagrams import (
    book_loop_figure,
    data_parallel_figure,
    path_length_figure,
    positions_figure,
    table3_knobs_figure,
    training_pipeline_figure,
    weighted_average_figure,
)
from transformer_book.course.figures.drawing import (
    ATTENTION,
    CROSS,
    EMBED,
    FFN,
    FONT,
    NORM,
    OUTPUT,
    Diagram,
    arrow,
    box,
    canvas,
    check_count,
    check_tokens,
    grid,
    label_width,
    line,
    solid,
    tint,
    title,
    values,
)
from transformer_book.inference.beam import BeamTrace
from transformer_book.nn.attention import causal_mask, padding_mask
from transformer_book.nn.layers import EncoderLayer
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import is_integer, is_real, require

__all__ = ["BEAM_STATUSES", "BeamNode", "Diagram", "beam_tree", "beam_tree_figure",
           "book_loop_figure", "cross_attention_figure", "data_parallel_figure",
           "kv_cache_figure", "mask_figure", "multi_head_figure", "path_length_figure",
           "positions_figure", "qkv_figure", "recurrence_vs_attention_figure",
           "table3_knobs_figure", "training_pipeline_figure", "transformer_figure",
           "weighted_average_figure"]

# --------------------------------------------------------------------------- Figure 1

_GAP = 0.5  # vertical space between two boxes of a stack
_BOX_W = 4.2


def _stack_items(sublayers: Sequence[tuple[str, object, str, float]], pre_ln: bool,
                 ) -> tuple[list[tuple[str, object, str, float]], list[tuple[int, int]]]:
    """The boxes of one layer, bottom-up, and its residual connections as ``(first box of
    the sublayer, its add box)``: post-LN ``sublayer, Add & Norm``; pre-LN ``LayerNorm,
    sublayer, Add``."""
    items: list[tuple[str, object, str, float]] = []
    skips = []
    for sublayer in sublayers:
        start = len(items)
        if pre_ln:
            items.append(("LayerNorm", NORM, "norm", 0.5))
        items.append(sublayer)
        items.append(("Add" if pre_ln else "Add & Norm", NORM, "add", 0.5))
        skips.append((start, len(items) - 1))
    return items, skips


def _stack(ax: Axes, cx: float, y0: float, items: Sequence[tuple[str, object, str, float]],
           skips: Sequence[tuple[int, int]], side: int) -> list[tuple[float, float]]:
    """Draw a layer's boxes from ``y0`` up, centred on ``cx``, with the arrows between them,
    three-way Q/K/V inputs into self-attention and the residual paths on ``side`` (-1 left,
    +1 right). Returns each box's ``(bottom, top)``."""
    spans = []
    y = y0
    for text, face, _, h in items:
        box(ax, cx, y + h / 2, _BOX_W, h, text, face)
        spans.append((y, y + h))
        y += h + _GAP
    offset = _BOX_W * 0.3
    for i, (_, _, kind, _) in enumerate(items):
        bottom = spans[i][0]
        branch = bottom - 0.2
        if i > 0:
            arrow(ax, (cx, spans[i - 1][1]), (cx, bottom))
        if kind == "self":
            for dx in (-offset, offset):
                line(ax, [cx, cx + dx], [branch, branch])
                arrow(ax, (cx + dx, branch), (cx + dx, bottom))
    lane = cx + side * (_BOX_W / 2 + 0.4)
    for start, add in skips:
        branch = spans[start][0] - 0.2
        y_add = (spans[add][0] + spans[add][1]) / 2
        line(ax, [cx, lane, lane], [branch, branch, y_add])
        arrow(ax, (lane, y_add), (cx + side * _BOX_W / 2, y_add))
    return spans


def transformer_figure(model: object) -> Diagram:
    """The paper's Figure 1 drawn from ``model`` (a
    :class:`~transformer_book.nn.transformer.Transformer`): the encoder and decoder stacks
    with their layer counts, d_model, h, d_k and d_ff read from the model's modules, post-LN
    boxes (``Add & Norm`` after each sublayer) or pre-LN ones (``LayerNorm`` before each
    sublayer) as its layers are built, and the final LayerNorms where the stacks have them."""
    require(isinstance(model, Transformer), "model", "a transformer_book Transformer",
            type(model).__name__)
    assert isinstance(model, Transformer)
    enc_layers, dec_layers = list(model.encoder.layers), list(model.decoder.layers)
    first = enc_layers[0]
    assert isinstance(first, EncoderLayer)
    attention = first.self_attn
    d, h, d_k = attention.d_model, attention.num_heads, attention.d_k
    d_ff = first.ffn.linear1.out_features
    pre_ln = bool(first.norm_first)
    vocab = model.generator.out_features
    heads = f"h = {h}, d_k = {d_k}"
    ffn = ("Feed Forward", FFN, "ffn", 1.0)
    enc_items, enc_skips = _stack_items(
        [(f"Multi-Head\nSelf-Attention\n{heads}", ATTENTION, "self", 1.3),
         (f"{ffn[0]}\nd_ff = {d_ff}", FFN, "ffn", 1.0)], pre_ln)
    dec_items, dec_skips = _stack_items(
        [(f"Masked Multi-Head\nSelf-Attention\n{heads}", ATTENTION, "self", 1.3),
         (f"Multi-Head\nCross-Attention\n{heads}", CROSS, "cross", 1.3),
         (f"{ffn[0]}\nd_ff = {d_ff}", FFN, "ffn", 1.0)], pre_ln)
    ex, dx, base = 4.6, 11.4, 4.0
    height = sum(item[3] + _GAP for item in dec_items) - _GAP  # the taller stack
    final = 0.0 if isinstance(model.decoder.norm, nn.Identity) else 0.8
    top = base + height + 0.2 + final + 2.5 + 1.4
    norm_kind = "pre-LN: LayerNorm before each sublayer" if pre_ln else \
        "post-LN: LayerNorm after each residual add"
    alt = (f"The Transformer as built: an encoder of N = {len(enc_layers)} identical layers "
           f"(self-attention, then feed-forward) and a decoder of N = {len(dec_layers)} "
           f"layers (masked self-attention, cross-attention over the encoder output, "
           f"feed-forward), with d_model = {d}, h = {h} heads of d_k = {d_k}, d_ff = {d_ff}, "
           f"{norm_kind}, residual connections around every sublayer, and a linear layer "
           f"and softmax over {vocab} tokens on top.")
    fig, (ax,) = canvas(alt, (0.0, 16.0), (0.0, top))
    ax.text(8.0, top - 0.3, f"d_model = {d}, h = {h}, d_k = d_v = {d_k}, d_ff = {d_ff}\n"
            f"{norm_kind}", ha="center", va="top", fontsize=9)
    scale = f"× √d_model = √{d}"
    for cx, side, items, skips, name, layers in (
            (ex, -1, enc_items, enc_skips, "Input", enc_layers),
            (dx, 1, dec_items, dec_skips, "Output", dec_layers)):
        ax.text(cx, 0.25, "Inputs (source ids)" if side < 0 else "Outputs (shifted right)",
                ha="center", va="center", fontsize=FONT)
        box(ax, cx, 1.15, _BOX_W, 0.9, f"{name} Embedding\n{scale}", EMBED)
        arrow(ax, (cx, 0.45), (cx, 0.7))
        ax.add_patch(Circle((cx, 2.35), 0.22, facecolor="white", edgecolor="black"))
        ax.text(cx, 2.35, "+", ha="center", va="center", fontsize=10)
        arrow(ax, (cx, 1.6), (cx, 2.13))
        px = cx + side * 2.2
        ax.text(px + side * 0.15, 2.35, f"Positional\nEncoding\n({model.config.positional})",
                ha="left" if side > 0 else "right", va="center", fontsize=FONT)
        arrow(ax, (px, 2.35), (cx + side * 0.22, 2.35))
        arrow(ax, (cx, 2.57), (cx, base))
        spans = _stack(ax, cx, base, items, skips, side)
        frame_x = (cx - _BOX_W / 2 - 0.3, cx + _BOX_W / 2 + 0.3)
        frame_x = (frame_x[0] - 0.45, frame_x[1]) if side < 0 else \
            (frame_x[0], frame_x[1] + 0.45)
        frame_top = spans[-1][1] + 0.2
        if side < 0:
            enc_frame_top = frame_top
        ax.add_patch(FancyBboxPatch((frame_x[0], base - 0.4), frame_x[1] - frame_x[0],
                                    frame_top - base + 0.4, facecolor="none",
                                    edgecolor=PALETTE[5], linewidth=1.2,
                                    boxstyle="round,pad=0,rounding_size=0.3"))
        label_x = frame_x[0] - 0.15 if side < 0 else frame_x[1] + 0.15
        ax.text(label_x, (base + frame_top) / 2, f"N = {len(layers)}\n×",
                ha="right" if side < 0 else "left", va="center", fontsize=10, weight="bold")
        y = frame_top
        if not isinstance(model.encoder.norm if side < 0 else model.decoder.norm,
                          nn.Identity):
            arrow(ax, (cx, spans[-1][1]), (cx, y + 0.3))
            box(ax, cx, y + 0.55, _BOX_W, 0.5, "LayerNorm (final)", NORM)
            y += 0.8
        if side < 0:
            memory_top = y if y > frame_top else spans[-1][1]
        else:
            arrow(ax, (cx, y if y > frame_top else spans[-1][1]), (cx, y + 0.3))
            box(ax, cx, y + 0.65, _BOX_W, 0.7, f"Linear\n{d} → V = {vocab}", OUTPUT)
            arrow(ax, (cx, y + 1.0), (cx, y + 1.3))
            box(ax, cx, y + 1.55, _BOX_W, 0.5, "Softmax", OUTPUT)
            arrow(ax, (cx, y + 1.8), (cx, y + 2.1))
            ax.text(cx, y + 2.3, "Output probabilities", ha="center", va="center",
                    fontsize=FONT)
            cross = next(i for i, item in enumerate(items) if item[2] == "cross")
            cross_bottom = spans[cross][0]
    # The encoder's output (memory) feeds every decoder layer's cross-attention as K and V.
    mid = (ex + _BOX_W / 2 + 0.3 + dx - _BOX_W / 2 - 0.3) / 2
    branch = cross_bottom - 0.2
    lift = max(memory_top, enc_frame_top) + 0.35
    line(ax, [ex, ex, mid, mid, dx - _BOX_W * 0.3], [memory_top, lift, lift, branch, branch],
          colour=PALETTE[4], width=1.4)
    arrow(ax, (dx - _BOX_W * 0.3, branch), (dx - _BOX_W * 0.3, cross_bottom),
           colour=PALETTE[4], width=1.4)
    ax.text(mid - 0.12, (lift + branch) / 2, "K, V\n(memory)", ha="right", va="center",
            fontsize=FONT, color=PALETTE[4])
    ax.text(dx + 0.12, branch - 0.02, "Q", ha="left", va="top", fontsize=FONT)
    return fig



# --------------------------------------------------------------------------- attention


def qkv_figure(tokens: Sequence[str] = ("The", "dog", "is", "eating"), *, seed: int = 0,
               ) -> Diagram:
    """Scaled dot-product self-attention on one sequence, computed as it is drawn.

    ``X`` (one row per token, d_model = 4, random from ``seed``) is projected by ``W^Q``,
    ``W^K``, ``W^V`` into ``Q``, ``K``, ``V`` (d_k = 3); the scores ``Q Kᵀ / √d_k`` go
    through a row-wise softmax into the weights ``A`` (printed), and ``Z = A V``. Colours
    show the values (blue negative, red positive)."""
    words = check_tokens(tokens, "tokens", 6)
    require(is_integer(seed) and seed >= 0, "seed", "an int >= 0", repr(seed))
    n, d, d_k, g = len(words), 4, 3, 1.5
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w_q, w_k, w_v = (rng.standard_normal((d, d_k)) / np.sqrt(d) * 2 for _ in range(3))
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.T / np.sqrt(d_k)
    weights = np.exp(scores - scores.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    z = weights @ v
    lw = label_width(words)
    top_q, top_k, top_v = 3 * n + 2 * g, 2 * n + g, float(n)
    qkv_x = lw + d + 2.6
    s_x = qkv_x + d_k + 1.6 + lw
    a_x = s_x + n + 2.2
    s_top = (top_q + top_k) / 2  # centred between Q and K
    ylim = (-0.2, top_q + 1.0)
    alt = (f"Self-attention on the tokens {' '.join(words)}: the {n} × {d} matrix X is "
           f"multiplied by W^Q, W^K and W^V into Q, K and V ({n} × {d_k}); the {n} × {n} "
           f"scores Q Kᵀ / √{d_k} go through a softmax along each row into attention "
           f"weights, which average the rows of V into the output Z = A V.")
    fig, (ax,) = canvas(alt, (0.0, a_x + max(n, d_k) + 0.3), ylim)
    x_top = top_k
    for i, word in enumerate(words):
        ax.text(lw - 0.15, x_top - i - 0.5, word, ha="right", va="center", fontsize=FONT)
        ax.text(s_x - 0.15, s_top - i - 0.5, word, ha="right", va="center", fontsize=FONT)
    grid(ax, lw, x_top, values(x))
    title(ax, lw + d / 2, x_top + 0.2, f"X ({n} × {d})")
    for name, top, matrix in (("Q", top_q, q), ("K", top_k, k), ("V", top_v, v)):
        grid(ax, qkv_x, top, values(matrix))
        title(ax, qkv_x + d_k / 2, top + 0.2, f"${name} = XW^{name}$")
        start = (lw + d + 0.15, x_top - n / 2)
        end = (qkv_x - 0.15, top - n / 2)
        arrow(ax, start, end)
        mid = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
        if name == "K":
            ax.text(mid[0], mid[1] + 0.12, "$W^K$", ha="center", va="bottom", fontsize=9)
        else:
            ax.text(mid[0] - 0.25, mid[1], f"$W^{name}$", ha="right", va="center", fontsize=9)
    join = s_x - lw - 0.2
    for top in (top_q, top_k):
        arrow(ax, (qkv_x + d_k + 0.15, top - n / 2), (join, s_top - n / 2))
    grid(ax, s_x, s_top, values(scores))
    for j, word in enumerate(words):
        for left in (s_x, a_x):
            ax.text(left + j + 0.5, s_top + 0.1, word, ha="center", va="bottom",
                    fontsize=FONT, rotation=90)
    label_top = s_top + label_width(words) + 0.1
    title(ax, s_x + n / 2, label_top, f"Q Kᵀ / √{d_k}")
    arrow(ax, (s_x + n + 0.15, s_top - n / 2), (a_x - 0.15, s_top - n / 2))
    ax.text(s_x + n + 1.1, s_top - n / 2 + 0.2, "softmax", ha="center", va="bottom",
            fontsize=FONT)
    grid(ax, a_x, s_top, np.asarray(matplotlib.colormaps["viridis"](weights))[..., :3],
          texts=np.vectorize(lambda p: f"{p:.2f}".lstrip("0"))(weights), size=8)
    title(ax, a_x + n / 2, label_top, "A (rows sum to 1)")
    z_x = a_x + (n - d_k) / 2
    grid(ax, z_x, top_v, values(z))
    ax.text(z_x + d_k + 0.2, top_v - n / 2, "Z = A V", ha="left", va="center", fontsize=FONT)
    arrow(ax, (a_x + n / 2, s_top - n - 0.15), (a_x + n / 2, top_v + 0.15))
    arrow(ax, (qkv_x + d_k + 0.15, top_v - n / 2), (z_x - 0.15, top_v - n / 2))
    return fig


def mask_figure(lengths: Sequence[int] = (5, 3), causal_size: int = 5) -> Diagram:
    """The two masks of the package (True = may attend), computed by
    :func:`~transformer_book.nn.attention.padding_mask` and
    :func:`~transformer_book.nn.attention.causal_mask`: a padded batch of sentences of
    ``lengths`` tokens and its ``(B, 1, 1, L)`` padding mask, that mask broadcast over the
    query positions of the shortest sentence, and the ``(L, L)`` causal mask of
    ``causal_size`` positions."""
    require(not isinstance(lengths, str) and isinstance(lengths, Sequence)
            and 1 <= len(lengths) <= 5, "lengths", "1 to 5 sentence lengths", repr(lengths))
    sizes = [check_count(n, "lengths", 1, 8) for n in lengths]
    size = check_count(causal_size, "causal_size", 1, 8)
    b, length = len(sizes), max(sizes)
    ids = torch.tensor([[7] * n + [0] * (length - n) for n in sizes])
    pad = padding_mask(ids, pad_id=0)  # (B, 1, 1, L)
    causal = causal_mask(size)
    short = int(np.argmin(sizes))
    yes, no = tint(PALETTE[2], 0.45), tint(PALETTE[5], 0.75)

    def cells(mask: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        m = mask.numpy()
        return (np.where(m[..., None], np.asarray(yes), np.asarray(no)),
                np.where(m, "T", "F"))

    alt = (f"Masks, True meaning may attend: a padded batch of {b} sentences of lengths "
           f"{', '.join(map(str, sizes))} and its padding mask of shape ({b}, 1, 1, {length}), "
           f"False at the pad positions; that mask broadcast over the {length} query rows of "
           f"sentence {short + 1}; and the {size} × {size} causal mask, True on and below the "
           f"diagonal so that position i sees only positions up to i.")
    gap = 3.2
    left = 1.6
    width = left + length + gap + length + gap + size + 0.3
    top = max(2 * b + 3.4, length + 1.0, size + 1.6)
    fig, (ax,) = canvas(alt, (0.0, width), (0.0, top + 0.8))
    tokens = np.where(pad[:, 0, 0].numpy(), "w", "pad")
    words = np.array([[f"w{j + 1}" if t == "w" else "pad" for j, t in enumerate(row)]
                      for row in tokens])
    grid(ax, left, top, np.where((tokens == "w")[..., None], np.asarray(tint(PALETTE[0])),
                                  np.asarray(no)), texts=words, size=8)
    title(ax, left + length / 2, top + 0.15, f"padded batch (B, L) = ({b}, {length})")
    mask_top = top - b - 1.3
    colours, marks = cells(pad[:, 0, 0])
    grid(ax, left, mask_top, colours, texts=marks)
    title(ax, left + length / 2, mask_top + 0.15, f"padding_mask: ({b}, 1, 1, {length})")
    for i in range(b):
        for y in (top, mask_top):
            ax.text(left - 0.15, y - i - 0.5, f"s{i + 1}", ha="right", va="center",
                    fontsize=FONT)
    ax.text(left + length / 2, mask_top - b - 0.3,
            "True = may attend (a real key);\nbroadcasts to (B, h, L_q, L_k)",
            ha="center", va="top", fontsize=FONT)
    # The shortest sentence's row, broadcast over its query positions.
    bx = left + length + gap
    colours, marks = cells(pad[short, 0].expand(length, length))
    grid(ax, bx, top, colours, texts=marks)
    title(ax, bx + length / 2, top + 0.15,
           f"s{short + 1}'s row over its queries: ({length}, {length})")
    cx = bx + length + gap
    colours, marks = cells(causal)
    grid(ax, cx, top, colours, texts=marks)
    title(ax, cx + size / 2, top + 0.15, f"causal_mask({size}): ({size}, {size})")
    for x0, n in ((bx, length), (cx, size)):
        ax.text(x0 + n / 2, top - n - 0.2, "key position j →", ha="center", va="top",
                fontsize=FONT)
        ax.text(x0 - 0.2, top - n / 2, "query\ni ↓", ha="right", va="center", fontsize=FONT)
    ax.text(cx + size / 2, top - size - 0.9, "True where j ≤ i", ha="center", va="top",
            fontsize=FONT)
    return fig


def multi_head_figure(d_model: int = 8, heads: int = 2) -> Diagram:
    """Multi-head attention's bookkeeping: ``Q``, ``K``, ``V`` (L × d_model, L = 3) are cut
    into ``heads`` column blocks of d_k = d_model / h, each head attends with its own block,
    the h outputs (L × d_k each) are concatenated back to L × d_model and multiplied by
    ``W^O``. One colour per head."""
    d = check_count(d_model, "d_model", 2, 32)
    h = check_count(heads, "heads", 1, 4)
    require(d % h == 0, "d_model", f"a multiple of heads={h}", d)
    d_k, length = d // h, 3
    c = 6.0 / d  # cell size: every L × d_model grid is 6 units wide
    colours = [tint(PALETTE[i], 0.45) for i in range(h)]
    by_head = np.stack([np.asarray(colours[j // d_k]) for j in range(d)])
    blocks = np.broadcast_to(by_head, (length, d, 3))
    gap, row_h = 1.3, 0.75
    grid_h = length * row_h
    stack_h = 3 * grid_h + 2 * gap
    top = stack_h + 0.9
    alt = (f"Multi-head attention with d_model = {d} and h = {h}: the queries, keys and "
           f"values are each cut into {h} blocks of d_k = {d_k} columns, every head computes "
           f"attention on its own block, and the {h} head outputs are concatenated back to "
           f"{d} columns and multiplied by W^O.")
    fig, (ax,) = canvas(alt, (-1.4, 32.0), (-0.2, top + 1.0))
    ax.text(15.0, top + 0.9, f"d_model = {d} = h × d_k = {h} × {d_k}", ha="center",
            va="top", fontsize=9)
    for k, name in enumerate(("Q", "K", "V")):
        y = top - 0.4 - k * (grid_h + gap)
        grid(ax, 0.0, y, blocks, c, cell_h=row_h)
        ax.text(-0.2, y - grid_h / 2, f"${name}$", ha="right", va="center", fontsize=9)
    for i in range(h):
        ax.text((i + 0.5) * d_k * c, top - 0.3, f"head {i + 1}", ha="center", va="bottom",
                fontsize=FONT, color=PALETTE[i])
    box_h = min(2.2, (stack_h - (h - 1) * 0.4) / h)
    box_x, box_w, concat_x, out_x = 11.2, 6.4, 17.5, 25.6
    centre_y = top - 0.4 - stack_h / 2
    grid_top = centre_y + grid_h / 2
    for i in range(h):
        y = top - 0.4 - i * (box_h + 0.4) - box_h / 2 - (stack_h - h * box_h - (h - 1) * 0.4) / 2
        box(ax, box_x, y, box_w, box_h,
             f"head {i + 1} (columns {i * d_k + 1}–{(i + 1) * d_k})\n"
             f"Attention($Q_{i + 1}, K_{i + 1}, V_{i + 1}$)", colours[i], size=8)
        arrow(ax, (6.2, centre_y), (box_x - box_w / 2, y), colour=PALETTE[i])
        arrow(ax, (box_x + box_w / 2, y), (concat_x - 0.15, grid_top - grid_h / 2),
               colour=PALETTE[i])
    grid(ax, concat_x, grid_top, blocks, c, cell_h=row_h)
    title(ax, concat_x + 3.0, grid_top + 0.15, f"Concat: {length} × {d}")
    arrow(ax, (concat_x + 6.15, centre_y), (out_x - 0.15, centre_y))
    ax.text(concat_x + 6.0 + 0.75, centre_y + 0.15, "$W^O$", ha="center", va="bottom",
            fontsize=9)
    grid(ax, out_x, grid_top, solid(length, d, tint(PALETTE[5], 0.5)), c,
          cell_h=row_h)
    title(ax, out_x + 3.0, grid_top + 0.15, f"output: {length} × {d}")
    ax.text(box_x, top - 0.4 - stack_h - 0.1, f"each head: L × d_k = {length} × {d_k}",
            ha="center", va="top", fontsize=FONT)
    return fig


def cross_attention_figure(source: Sequence[str] = ("Le", "chien", "mange"),
                           target: Sequence[str] = ("The", "dog", "is", "eating"),
                           ) -> Diagram:
    """Cross-attention: every decoder position (a query from the target prefix) attends
    over every encoder position (keys and values from the source sentence), drawn as the
    lines between the two and as the ``(T, S)`` grid of pairs; the last target position's
    lines are highlighted."""
    src = check_tokens(source, "source")
    tgt = check_tokens(target, "target")
    s, t = len(src), len(tgt)
    step = 2.3
    span = max(s, t) * step
    alt = (f"Cross-attention: each of the {t} target positions ({' '.join(tgt)}) sends a "
           f"query from the decoder to all {s} source positions ({' '.join(src)}), whose "
           f"keys and values come from the encoder output, so the weights form a {t} × {s} "
           f"grid with no causal mask.")
    lw = label_width(tgt)
    grid_x = span + 1.4 + lw
    fig, (ax,) = canvas(alt, (-0.3, grid_x + s + 0.3), (0.0, 3.2 + t / 2 + label_width(src)))

    def xs(n: int) -> list[float]:
        return [(span - n * step) / 2 + (i + 0.5) * step for i in range(n)]

    top_y, bottom_y = 5.0, 1.0
    for i, x0 in enumerate(xs(t)):
        for x1 in xs(s):
            last = i == t - 1
            line(ax, [x0, x1], [top_y - 0.4, bottom_y + 0.4],
                  PALETTE[1] if last else tint(PALETTE[5], 0.3), 1.6 if last else 0.8,
                  zorder=2 if last else 1)
    for x0, word in zip(xs(t), tgt, strict=True):
        box(ax, x0, top_y, 2.0, 0.8, word, ATTENTION)
    for x1, word in zip(xs(s), src, strict=True):
        box(ax, x1, bottom_y, 2.0, 0.8, word, CROSS)
    ax.text(span / 2, top_y + 0.6, "decoder: queries Q (T × d_model)", ha="center",
            va="bottom", fontsize=FONT)
    ax.text(span / 2, bottom_y - 0.6, "encoder output: keys K, values V (S × d_model)",
            ha="center", va="top", fontsize=FONT)
    grid_top = 3.0 + t / 2
    grid(ax, grid_x, grid_top, solid(t, s, tint(PALETTE[2], 0.45)))
    grid(ax, grid_x, grid_top - t + 1, solid(1, s, tint(PALETTE[1], 0.3)))
    for i, word in enumerate(tgt):
        ax.text(grid_x - 0.15, grid_top - i - 0.5, word, ha="right", va="center",
                fontsize=FONT)
    for j, word in enumerate(src):
        ax.text(grid_x + j + 0.5, grid_top + 0.1, word, ha="center", va="bottom",
                fontsize=FONT, rotation=90)
    ax.text(grid_x + s / 2, grid_top - t - 0.2, f"weights (T, S) = ({t}, {s})\nall pairs",
            ha="center", va="top", fontsize=FONT)
    return fig


def recurrence_vs_attention_figure(n: int = 5) -> Diagram:
    """A recurrent network's chain ``h_t = f(h_{t-1}, x_t)``: ``n`` steps, one after the
    other, and self-attention's ``n²`` pairs, all in one step."""
    size = check_count(n, "n", 2, 8)
    step = 1.5
    width = size * step
    alt = (f"Left, a recurrent network reads x_1 to x_{size} in {size} sequential steps, each "
           f"hidden state waiting for the previous one, so x_1 reaches h_{size} through "
           f"{size - 1} steps; right, self-attention connects all {size * size} pairs of the "
           f"{size} positions in one parallel step, every path of length 1.")
    fig, (ax,) = canvas(alt, (-0.3, 2 * width + 1.8), (-0.7, 5.0))
    for panel, x_left in enumerate((0.0, width + 1.5)):
        xs = [x_left + (i + 0.5) * step for i in range(size)]
        for i, x in enumerate(xs):
            box(ax, x, 0.5, 1.0, 0.7, f"$x_{i + 1}$", EMBED, size=9)
            box(ax, x, 3.0, 1.0, 0.7, f"$h_{i + 1}$" if panel == 0 else f"$z_{i + 1}$",
                 ATTENTION if panel else FFN, size=9)
        if panel == 0:
            for i, x in enumerate(xs):
                arrow(ax, (x, 0.85), (x, 2.65))
                ax.text(x, -0.1, f"step {i + 1}", ha="center", va="top", fontsize=8)
                if i:
                    arrow(ax, (xs[i - 1] + 0.5, 3.0), (x - 0.5, 3.0), colour=PALETTE[3])
            title = f"recurrence: {size} sequential steps"
        else:
            for x0 in xs:
                for x1 in xs:
                    line(ax, [x0, x1], [0.85, 2.65], tint(PALETTE[1], 0.2), 0.7)
            ax.text(x_left + width / 2, -0.1, "step 1 (all at once)", ha="center", va="top",
                    fontsize=8)
            title = f"self-attention: 1 step, {size * size} pairs"
        ax.text(x_left + width / 2, 4.3, title, ha="center", va="bottom", fontsize=9)
        ax.text(x_left + width / 2, 3.7, "path x₁ → last output: " +
                (f"{size - 1} steps" if panel == 0 else "1 step"), ha="center", va="bottom",
                fontsize=8)
    return fig


def kv_cache_figure(steps: int = 4) -> Diagram:
    """Incremental decoding with a key/value cache: at step t the new token's query attends
    to t keys and values, of which t − 1 are read from the cache and one is computed and
    appended (``(B, h, t, d_k)`` after step t)."""
    n = check_count(steps, "steps", 1, 8)
    k_x = 5.6
    v_x = k_x + n + 1.6
    note_x = v_x + n + 0.6
    total = n * (n + 1) // 2
    alt = (f"A key/value cache over {n} decoding steps: at step t the new token's query "
           f"attends to t keys and t values, t − 1 read from the cache and one computed and "
           f"appended, so the decoder computes {n} keys and values in all instead of "
           f"{total} when every step recomputes the whole prefix.")
    row = 1.5
    top = n * row + 0.4
    fig, (ax,) = canvas(alt, (0.0, max(note_x + 4.6, 22.0)), (-2.1, top + 1.0))
    new, old = tint(PALETTE[1], 0.35), tint(PALETTE[5], 0.7)
    for header, x in (("query", 4.3), ("K cache", k_x + n / 2), ("V cache", v_x + n / 2)):
        ax.text(x, top + 0.2, header, ha="center", va="bottom", fontsize=9)
    for t in range(1, n + 1):
        y = top - (t - 1) * row - 0.3
        ax.text(0.1, y - 0.5, f"step {t}: input y{t - 1}" if t > 1 else "step 1: <bos>",
                ha="left", va="center", fontsize=FONT)
        grid(ax, 3.8, y, solid(1, 1, new), texts=np.array([[f"q{t}"]]), size=8)
        for x, name in ((k_x, "k"), (v_x, "v")):
            colours = np.stack([np.asarray(old)] * (t - 1) + [np.asarray(new)])[None]
            grid(ax, x, y, colours, texts=np.array([[f"{name}{j + 1}" for j in range(t)]]),
                  size=8)
        arrow(ax, (4.9, y - 0.5), (k_x - 0.15, y - 0.5), colour=PALETTE[5])
        ax.text(note_x, y - 0.5, f"computes 1, reads {t - 1}", ha="left", va="center",
                fontsize=FONT)
    for face, label, x in ((new, "computed at this step", 0.4), (old, "read from the cache",
                                                                   k_x + 1.2)):
        ax.add_patch(Rectangle((x, -1.0), 0.7, 0.7, facecolor=face, edgecolor="black",
                               linewidth=0.8))
        ax.text(x + 0.9, -0.65, label, ha="left", va="center", fontsize=FONT)
    ax.text(0.4, -1.35, f"after step t the cache holds (B, h, t, d_k); keys and values "
            f"computed over {n} steps: {n} with the cache, {total} without", ha="left",
            va="top", fontsize=FONT)
    return fig


# --------------------------------------------------------------------------- beam search

BEAM_STATUSES = ("kept", "finished", "dropped")


@dataclass(frozen=True)
class BeamNode:
    """One hypothesis prefix of a beam search, for :func:`beam_tree_figure`.

    ``token`` is the last token of the prefix (the root is ``<bos>``), ``log_prob`` the
    prefix's cumulative log-probability (0 at the root), ``status`` what the search did with
    it: ``"kept"`` (among the K live hypotheses that go on), ``"finished"`` (an ``<eos>``
    among the top K, moved to the finished list with ``score = log P / lp``) or
    ``"dropped"`` (a candidate that neither lives on nor finishes). ``children`` are the
    candidates the search ranked after it (kept prefixes only)."""

    token: str
    log_prob: float = 0.0
    status: str = "kept"
    children: tuple[BeamNode, ...] = ()
    score: float | None = None


def _check_node(node: object, where: str, depth: int) -> tuple[int, int]:
    """Check a tree's node; returns (its leaves, its depth below)."""
    require(isinstance(node, BeamNode), where, "a BeamNode", type(node).__name__)
    assert isinstance(node, BeamNode)
    require(isinstance(node.token, str) and 0 < len(node.token) <= 10, f"{where}.token",
            "a string of 1 to 10 characters", repr(node.token))
    require(is_real(node.log_prob) and math.isfinite(node.log_prob) and node.log_prob <= 0,
            f"{where}.log_prob", "a finite log-probability <= 0", repr(node.log_prob))
    require(node.status in BEAM_STATUSES, f"{where}.status", f"one of {BEAM_STATUSES}",
            repr(node.status))
    require(isinstance(node.children, tuple), f"{where}.children", "a tuple of BeamNode",
            type(node.children).__name__)
    require(node.status == "kept" or not node.children, f"{where}.children",
            f"none for a {node.status} hypothesis", len(node.children))
    if node.status == "finished":
        require(node.score is not None and is_real(node.score) and math.isfinite(node.score),
                f"{where}.score", "a finite score (log P / lp) for a finished hypothesis",
                repr(node.score))
    require(depth <= 10, "tree", "at most 10 steps deep", f"more than {depth}")
    if not node.children:
        return 1, 0
    counts = [_check_node(child, f"{where}.children[{i}]", depth + 1)
              for i, child in enumerate(node.children)]
    return sum(c[0] for c in counts), 1 + max(c[1] for c in counts)


def beam_tree_figure(tree: BeamNode) -> Diagram:
    """A beam search drawn as the tree of the prefixes it ranked: one column per step,
    each node the prefix's last token and cumulative log-probability; kept hypotheses in
    blue, finished ones (``<eos>``) in green with their length-penalised score, dropped
    candidates dashed and grey."""
    leaves, depth = _check_node(tree, "tree", 0)
    require(leaves <= 20, "tree", "at most 20 leaves", leaves)
    column, pitch = 3.2, 1.4  # units between steps, between leaves
    positions: dict[int, tuple[float, float]] = {}
    counter = [0.0]

    def place(node: BeamNode, level: int) -> float:
        if node.children:
            y = float(np.mean([place(child, level + 1) for child in node.children]))
        else:
            y = -counter[0]
            counter[0] += pitch
        positions[id(node)] = (level * column, y)
        return y

    place(tree, 0)
    faces = {"kept": tint(PALETTE[0], 0.6), "finished": tint(PALETTE[2], 0.5),
             "dropped": tint(PALETTE[5], 0.8)}

    def draw(node: BeamNode) -> None:
        x, y = positions[id(node)]
        for child in node.children:
            cx, cy = positions[id(child)]
            line(ax, [x + 1.25, cx - 1.25], [y, cy],
                  PALETTE[5] if child.status == "dropped" else "black", 0.9,
                  linestyle="--" if child.status == "dropped" else "-")
            draw(child)
        dropped = node.status == "dropped"
        box(ax, x, y, 2.5, 1.15, f"{node.token}\n{node.log_prob:.2f}", faces[node.status],
             size=8, edge=PALETTE[5] if dropped else "black",
             style="--" if dropped else "-")
        if node.status == "finished":
            ax.text(x + 1.35, y, f"score\n{node.score:.2f}", ha="left", va="center",
                    fontsize=8, color=PALETTE[2])

    bottom = -(leaves - 1) * pitch
    width = (depth + 1) * column + 1.0
    alt_counts: dict[str, int] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        alt_counts[node.status] = alt_counts.get(node.status, 0) + 1
        stack.extend(node.children)
    alt = (f"A beam search over {depth} steps drawn as a tree from {tree.token}: "
           f"{alt_counts.get('kept', 0)} kept prefixes, {alt_counts.get('finished', 0)} "
           f"finished hypotheses with their length-penalised scores and "
           f"{alt_counts.get('dropped', 0)} dropped candidates, each node showing its token "
           f"and cumulative log-probability.")
    fig, (ax,) = canvas(alt, (-1.4, max(width, 9.0)), (bottom - 2.0, 0.8))
    draw(tree)
    for i, status in enumerate(BEAM_STATUSES):
        x = -0.8 + i * 3.8
        ax.add_patch(Rectangle((x, bottom - 1.6), 0.6, 0.45, facecolor=faces[status],
                               edgecolor="black", linewidth=0.8,
                               linestyle="--" if status == "dropped" else "-"))
        ax.text(x + 0.75, bottom - 1.38, status, ha="left", va="center", fontsize=FONT)
    return fig


def beam_tree(trace: BeamTrace, token_text: Callable[[int], str], sentence: int = 0,
              max_steps: int | None = None) -> BeamNode:
    """The tree of sentence ``sentence``'s beam search, from the ``trace`` that
    :func:`~transformer_book.inference.beam.beam_search` filled: the root is ``<bos>``,
    each ranked candidate a node (kept, finished or dropped, as the search decided), under
    the kept hypothesis it extends. ``token_text`` turns an id into the node's label (cut
    to 10 characters); ``max_steps`` keeps only the first steps (the kept hypotheses of the
    last step shown become leaves)."""
    require(isinstance(trace, BeamTrace) and trace.steps, "trace",
            "a BeamTrace filled by beam_search", repr(trace)[:60])
    require(callable(token_text), "token_text", "a function from an id to a string",
            type(token_text).__name__)
    sentence = check_count(sentence, "sentence", 0, len(trace.steps) - 1)
    steps = trace.steps[sentence]
    if max_steps is not None:
        steps = steps[: check_count(max_steps, "max_steps", 1, 10)]

    def label(token: int) -> str:
        text = str(token_text(token)).strip()
        return (text or "␣")[:10]

    def children(t: int, slot: int) -> tuple[BeamNode, ...]:
        if t >= len(steps):
            return ()
        return tuple(
            BeamNode(label(c.token), float(c.log_prob), c.status,
                     children(t + 1, c.slot) if c.status == "kept" and c.slot is not None
                     else (), c.score)
            for c in steps[t] if c.parent == slot)

    return BeamNode("<bos>", 0.0, "kept", children(0, 0))

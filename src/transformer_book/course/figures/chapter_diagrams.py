"""Diagrams that open the chapters outside the model's parts, drawn by the course's own code.

    fig = path_length_figure(n=8)                    # ch03: RNN, ByteNet, ConvS2S, attention
    fig = weighted_average_figure((0.2, 0.5, 0.3))   # ch04: Output = 0.2·A + 0.5·B + 0.3·C
    fig = training_pipeline_figure(pairs, tokenizer) # ch10: text to label-smoothed loss
    fig.alt_text                                     # for the cell's mystnb.image.alt

Each function computes what it draws with the package (layer counts from
:func:`~transformer_book.baselines.conv.layers_to_connect`, batches from
:class:`~transformer_book.data.batching.TokenBudgetSampler`, attention from
:func:`~transformer_book.nn.attention.scaled_dot_product_attention`, ...) and returns a
:class:`~transformer_book.course.figures.drawing.Diagram` with its alt text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.patches import Circle, Rectangle

from transformer_book.baselines.conv import ConvS2SStack, DilatedConvStack, layers_to_connect
from transformer_book.course.figures import PALETTE
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
    line,
    tint,
    values,
)
from transformer_book.data.batching import TokenBudgetSampler
from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.nn.attention import scaled_dot_product_attention
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.positional import sinusoidal_encoding
from transformer_book.nn.transformer import Transformer
from transformer_book.train.objective import smoothed_target_distribution
from transformer_book.util.validation import is_real, require

__all__ = ["BOOK_MAP", "book_loop_figure", "data_parallel_figure", "path_length_figure",
           "positions_figure", "table3_knobs_figure", "training_pipeline_figure",
           "weighted_average_figure"]


# --------------------------------------------------------------------------- ch03


def _cone(n: int, layers: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """The edges into the last position's receptive cone, layer by layer (top first): for a
    causal convolution of kernel k and dilation d, output t reads t, t - d, ..., t - (k-1)d."""
    reach = {n - 1}
    edges: list[list[tuple[int, int]]] = []
    for k, d in reversed(layers):
        step = [(t - j * d, t) for t in sorted(reach) for j in range(k) if t - j * d >= 0]
        edges.append(step)
        reach = {source for source, _ in step}
    return edges


def path_length_figure(n: int = 8, kernel_size: int = 3) -> Diagram:
    """The maximum path length of Table 1 (Vaswani et al., 2017) for ``n`` positions: how
    many steps or layers before the last output depends on the first input, in a recurrent
    network (n − 1 recurrent steps), ByteNet (dilated causal convolutions of kernel 2 and
    dilations 1, 2, 4, ...: O(log n) layers), ConvS2S (causal convolutions of kernel
    ``kernel_size``: O(n/k) layers) and self-attention (one layer). The convolution layer
    counts are measured on the package's own stacks by
    :func:`~transformer_book.baselines.conv.layers_to_connect` (from gradients), not typed;
    the edges drawn are those into the last output's receptive cone."""
    n = check_count(n, "n", 3, 12)
    k = check_count(kernel_size, "kernel_size", 2, 5)
    with torch.random.fork_rng(devices=[]):  # the stacks' random weights, seeded here
        torch.manual_seed(0)  # without touching the caller's generator
        byte_layers = layers_to_connect(  # 2 channels: a LayerNorm over one is constant
            lambda m: DilatedConvStack(2, 2, tuple(2 ** i for i in range(m))), n, channels=2)
        conv_layers = layers_to_connect(lambda m: ConvS2SStack(2, k, m, causal=True), n,
                                        channels=2)
    panels = (
        ("recurrent network", f"{n - 1} sequential steps", n - 1, "rnn", 1),
        ("self-attention", "1 layer", 1, "attention", 1),
        ("ByteNet-style, k = 2", f"{byte_layers} layers (log₂ {n} = {math.log2(n):.1f})",
         byte_layers, "dilated", byte_layers),
        (f"ConvS2S: k = {k}", f"{conv_layers} layers (⌈({n} − 1)/{k - 1}⌉)", conv_layers,
         "conv", conv_layers))
    alt = (f"How far the first input is from the last output among {n} positions: a "
           f"recurrent network passes it through {n - 1} sequential steps, self-attention "
           f"connects them in 1 layer, a ByteNet stack of dilated convolutions (kernel 2, "
           f"dilations doubling) needs {byte_layers} layers and a ConvS2S stack of kernel "
           f"{k} needs {conv_layers} layers, the layer counts measured on the package's "
           f"stacks.")
    step, row = 0.9, 1.05
    panel_w = n * step + 0.6
    rows_top = max(2, byte_layers + 1, conv_layers + 1)
    bottom_h = rows_top * row + 1.3
    fig, (ax,) = canvas(alt, (-0.2, 2 * panel_w + 0.6), (-0.3, bottom_h + row + 1.3))
    for index, (name, path, _, kind, depth) in enumerate(panels):
        x0 = (index % 2) * (panel_w + 0.6)
        y0 = 0.0 if index >= 2 else bottom_h
        xs = [x0 + 0.3 + (i + 0.5) * step for i in range(n)]
        levels = depth + 1 if kind in ("dilated", "conv") else 2
        ys = [y0 + 0.3 + level * row for level in range(levels)]
        if kind == "rnn":
            for i in range(n - 1):
                arrow(ax, (xs[i] + 0.22, ys[1]), (xs[i + 1] - 0.22, ys[1]), colour=PALETTE[3])
            for x in xs:
                line(ax, [x, x], [ys[0], ys[1]], tint(PALETTE[5], 0.4), 0.8)
        elif kind == "attention":
            for x in xs:
                line(ax, [x, xs[-1]], [ys[0], ys[1]], PALETTE[1], 0.9)
        else:
            layers = ([(2, 2 ** i) for i in range(depth)] if kind == "dilated"
                      else [(k, 1)] * depth)
            for level, edges in enumerate(_cone(n, layers)):
                upper = ys[depth - level]
                for source, target in edges:
                    line(ax, [xs[source], xs[target]], [upper - row, upper], PALETTE[0], 0.9)
        for level, y in enumerate(ys):
            for i, x in enumerate(xs):
                first_or_last = (level == 0 and i == 0) or (level == levels - 1 and i == n - 1)
                face = tint(PALETTE[3], 0.3) if first_or_last else "white"
                ax.add_patch(_dot(x, y, face))
        head = ys[-1] + 0.45 if index < 2 else y0 + 0.3 + (rows_top - 1) * row + 0.45
        ax.text(x0 + 0.3, head, name, ha="left", va="bottom", fontsize=9, weight="bold")
        ax.text(x0 + panel_w - 0.3, head, path, ha="right", va="bottom",
                fontsize=FONT, color=PALETTE[3])
    ax.text(2 * panel_w + 0.5, -0.25, "bottom row: inputs x₁ … xₙ; red: first input, "
            "last output", ha="right", va="bottom", fontsize=8)
    return fig


def _dot(x: float, y: float, face: object) -> Circle:
    return Circle((x, y), 0.2, facecolor=face, edgecolor="black", linewidth=0.8, zorder=3)


# --------------------------------------------------------------------------- ch04


def weighted_average_figure(weights: Sequence[float] = (0.2, 0.5, 0.3),
                            names: Sequence[str] = ("A", "B", "C"), *, size: int = 4,
                            seed: int = 0) -> Diagram:
    """Attention as weighted averaging (Section 3.2's "weighted sum of the values"):
    ``Output = Σ_i w_i · V_i`` for value vectors of ``size`` numbers (random from
    ``seed``) and ``weights`` that are non-negative and sum to 1, each vector printed
    with its numbers and the output computed as it is drawn."""
    words = check_tokens(names, "names", 5)
    require(not isinstance(weights, str) and isinstance(weights, Sequence)
            and len(weights) == len(words), "weights", f"{len(words)} numbers, one per name",
            repr(weights))
    require(all(is_real(w) and 0 <= w <= 1 for w in weights), "weights",
            "numbers in [0, 1]", repr(weights))
    require(abs(sum(weights) - 1) < 1e-6, "weights", "numbers that sum to 1",
            f"a sum of {sum(weights):g}")
    d = check_count(size, "size", 2, 6)
    require(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0, "seed",
            "an int >= 0", repr(seed))
    rng = np.random.default_rng(seed)
    vectors = np.round(rng.uniform(-1, 1, (len(words), d)), 1)
    output = np.asarray(weights) @ vectors  # (n,) @ (n, d) -> (d,)
    formula = " + ".join(f"{w:g}·{name}" for w, name in zip(weights, words, strict=True))
    alt = (f"Attention as a weighted average: Output = {formula}, each of the "
           f"{len(words)} value vectors of {d} numbers scaled by its weight (the weights are "
           f"non-negative and sum to 1) and added, so the output leans towards "
           f"{words[int(np.argmax(weights))]}, the vector with the largest weight.")
    cell, gap = 1.0, 1.9
    width = len(words) * (cell + gap) + 1.4 + cell + 0.4
    fig, (ax,) = canvas(alt, (-0.8, width), (-1.6, d + 1.7))
    scale = float(np.abs(np.vstack([vectors, output[None]])).max())
    def texts(array: np.ndarray, digits: int) -> np.ndarray:
        return np.vectorize(lambda v: f"{v:.{digits}f}".replace("-", "−"))(array)

    for i, (name, w) in enumerate(zip(words, weights, strict=True)):
        x = i * (cell + gap) + 0.9
        ax.text(x - 0.15, d / 2, f"{w:g} ·", ha="right", va="center", fontsize=10,
                color=PALETTE[1], weight="bold")
        grid(ax, x, d, values(vectors[i][:, None] / scale), cell,
             texts=texts(vectors[i][:, None], 1), size=8)
        ax.text(x + cell / 2, d + 0.2, name, ha="center", va="bottom", fontsize=10)
        bar = w * (gap - 0.4)
        ax.add_patch(Rectangle((x - 0.6, -1.2), max(bar, 0.02), 0.35,
                               facecolor=tint(PALETTE[1], 0.3), edgecolor="none"))
        ax.text(x - 0.6, -0.75, f"weight {w:g}", ha="left", va="bottom", fontsize=8)
        sign = "+" if i < len(words) - 1 else "="
        ax.text(x + cell + 0.35, d / 2, sign, ha="center", va="center", fontsize=12)
    x = len(words) * (cell + gap) + 0.6
    grid(ax, x, d, values(output[:, None] / scale), cell, texts=texts(output[:, None], 2),
         size=8)
    ax.text(x + cell / 2, d + 0.2, "Output", ha="center", va="bottom", fontsize=10)
    ax.text(width / 2 - 0.4, d + 1.0, f"Output = {formula}", ha="center", va="bottom",
            fontsize=10)
    return fig


# --------------------------------------------------------------------------- ch10


def _shorten(text: str, limit: int = 58) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def training_pipeline_figure(pairs: Sequence[tuple[str, str]], tokenizer: BPETokenizer, *,
                             max_tokens: int = 48, smoothing: float = 0.1,
                             model: Transformer | None = None) -> Diagram:
    """One training step's data path, drawn from real data: the first of ``pairs`` (source,
    target sentences) as text; its source cut into BPE pieces and ids by ``tokenizer``
    (Section 5.1); all ``pairs`` grouped into batches by length under a budget of
    ``max_tokens`` padded tokens per side (:class:`~transformer_book.data.batching
    .TokenBudgetSampler`, Section 5.1's "batched together by approximate sequence
    length"); the model mapping a ``(B, S)`` batch to ``(B, T, V)`` logits (its sizes
    read from ``model`` when given); and the label-smoothed target row of the first
    target token (:func:`~transformer_book.train.objective.smoothed_target_distribution`,
    Section 5.4, ``ε_ls = smoothing``)."""
    require(isinstance(tokenizer, BPETokenizer), "tokenizer", "a BPETokenizer",
            type(tokenizer).__name__)
    require(not isinstance(pairs, str) and isinstance(pairs, Sequence) and
            2 <= len(pairs) <= 24, "pairs", "2 to 24 (source, target) pairs",
            f"{len(pairs) if isinstance(pairs, Sequence) else type(pairs).__name__}")
    require(all(isinstance(p, tuple) and len(p) == 2 and all(isinstance(s, str) and s.strip()
                                                             for s in p) for p in pairs),
            "pairs", "(source, target) tuples of non-empty strings", repr(pairs[0])[:60])
    require(is_real(smoothing) and 0 <= smoothing < 1, "smoothing", "a number in [0, 1)",
            repr(smoothing))
    require(model is None or isinstance(model, Transformer), "model",
            "a transformer_book Transformer or None", type(model).__name__)
    src_ids = [tokenizer.encode(s, add_eos=True) for s, _ in pairs]
    tgt_ids = [tokenizer.encode(t, add_eos=True) for _, t in pairs]
    require(isinstance(max_tokens, int) and not isinstance(max_tokens, bool)
            and max_tokens >= max(map(len, src_ids + tgt_ids)), "max_tokens",
            f"an int >= the longest sentence ({max(map(len, src_ids + tgt_ids))} tokens)",
            repr(max_tokens))
    sampler = TokenBudgetSampler([len(s) for s in src_ids], max_tokens,
                                 tgt_lengths=[len(t) for t in tgt_ids], shuffle=False)
    batches = sampler.batches()
    vocab = tokenizer.vocab_size
    first = tokenizer.id_to_token(tgt_ids[0][0])
    row = smoothed_target_distribution(torch.tensor([tgt_ids[0][0]]), vocab, smoothing)[0]
    true_p, other_p = float(row[tgt_ids[0][0]]), float(row.min())
    pieces = tokenizer.tokens(pairs[0][0])
    sizes = (f"N = {len(model.encoder.layers)}, d_model = {model.config.d_model}, "
             f"h = {model.config.num_heads}" if model is not None else "encoder-decoder")
    alt = (f"From text to loss: the German sentence '{_shorten(pairs[0][0], 40)}' is cut "
           f"into {len(pieces)} BPE pieces; {len(pairs)} sentence pairs sorted by length fall "
           f"into {len(batches)} batches of at most {max_tokens} padded tokens per side; the "
           f"Transformer ({sizes}) maps a batch to logits over {vocab} tokens; and the loss "
           f"compares them with a label-smoothed target that puts {true_p:.3f} on the right "
           f"token and {other_p:.1e} on each other one (ε_ls = {smoothing:g}).")
    fig, (ax,) = canvas(alt, (0.0, 20.0), (1.7, 19.0))
    left = 3.0
    bands = {"text": (18.0, 0.7), "BPE": (15.4, 0.7), "batches": (11.5, 2.1),
             "model": (8.2, 0.8), "loss": (4.1, 1.6)}
    for name, (y, _) in bands.items():
        ax.text(0.1, y, name, ha="left", va="center", fontsize=9, weight="bold",
                color=PALETTE[0])
    names = list(bands)
    for upper, lower in pairwise(names):
        (y0, h0), (y1, h1) = bands[upper], bands[lower]
        arrow(ax, (19.3, y0 - h0), (19.3, y1 + h1), colour=PALETTE[5])
    ax.text(left, 18.35, "de: " + _shorten(pairs[0][0]), ha="left", va="center",
            fontsize=FONT)
    ax.text(left, 17.65, "en: " + _shorten(pairs[0][1]), ha="left", va="center",
            fontsize=FONT)
    shown = pieces[:8]
    cell_w = 15.6 / 8
    for i, (piece, token_id) in enumerate(zip(shown, src_ids[0], strict=False)):
        x = left + i * cell_w + cell_w / 2
        box(ax, x, 15.65, cell_w - 0.2, 0.8, repr(piece)[1:-1].replace(" ", "␣"), EMBED,
            size=8)
        ax.text(x, 15.05, str(token_id), ha="center", va="top", fontsize=8)
    ax.text(left + 8 * cell_w - 0.1, 14.45, f"{len(pieces)} pieces in all (ids below)"
            if len(pieces) > 8 else "ids below the pieces", ha="right", va="top", fontsize=8)
    _draw_batches(ax, batches, [len(s) for s in src_ids], left, 13.1, max_tokens)
    box(ax, 11.0, bands["model"][0], 15.0, 1.6,
        f"Transformer ({sizes})\nsource (B, S) and target (B, T) → logits (B, T, V = {vocab})",
        tint(PALETTE[4], 0.7), size=9)
    _draw_target(ax, first, true_p, other_p, smoothing, vocab, 2.6)
    return fig


def _draw_batches(ax: Axes, batches: Sequence[Sequence[int]], lengths: Sequence[int],
                  left: float, top: float, budget: int) -> None:
    """Up to four batches side by side: one row per sentence, real tokens blue, padding
    grey, captioned ``B × longest = padded ≤ budget``."""
    shown = batches[:4]
    widths = [max(lengths[i] for i in batch) for batch in shown]
    cell = min(0.4, (16.0 - 0.8 * (len(shown) - 1)) / sum(widths))
    cell_h = min(0.45, 2.6 / max(len(batch) for batch in shown))
    x = left
    for batch, length in zip(shown, widths, strict=True):
        real = np.array([[j < lengths[i] for j in range(length)] for i in batch])
        colours = np.where(real[..., None], np.asarray(tint(PALETTE[0], 0.3)),
                           np.asarray(tint(PALETTE[5], 0.7)))
        grid(ax, x, top, colours, cell, edge="white", cell_h=cell_h)
        ax.text(x, top - len(batch) * cell_h - 0.15,
                f"{len(batch)} × {length} = {len(batch) * length}\n≤ {budget}", ha="left",
                va="top", fontsize=8)
        x += length * cell + 0.8
    more = f" (the first 4 of {len(batches)})" if len(batches) > 4 else ""
    ax.text(left, top + 0.15, f"{len(batches)} batches, sentences sorted by length{more}: "
            "real tokens blue, padding grey", ha="left", va="bottom", fontsize=8)


def _draw_target(ax: Axes, token: str, true_p: float, other_p: float, smoothing: float,
                 vocab: int, bottom: float) -> None:
    """The smoothed target row as bars, from ``bottom`` up: the right token and a few of
    the others."""
    names = [token.replace("Ġ", "␣")[:8]] + ["other"] * 5
    heights = [true_p] + [other_p] * 5
    for i, (name, p) in enumerate(zip(names, heights, strict=True)):
        x = 3.6 + i * 1.3
        ax.add_patch(Rectangle((x - 0.4, bottom), 0.8, max(p, 0.0) * 2.4,
                               facecolor=tint(PALETTE[2], 0.3 if i == 0 else 0.6),
                               edgecolor="black", linewidth=0.6))
        ax.text(x, bottom - 0.1, name, ha="center", va="top", fontsize=8)
    ax.text(3.6, bottom + true_p * 2.4 + 0.1, f"{true_p:.3f}", ha="center", va="bottom",
            fontsize=8)
    ax.text(11.0, bottom + 2.0, f"target row of the first target token (ε_ls = "
            f"{smoothing:g}):\n{true_p:.3f} on the right token, {other_p:.1e} on each of "
            f"the other {vocab - 1}", ha="left", va="center", fontsize=8)
    ax.text(11.0, bottom + 0.5, "loss = (1 − ε)·(−log p[y]) + ε·mean(−log p)", ha="left",
            va="center", fontsize=8)


# --------------------------------------------------------------------------- ch00

#: The course's map: each part and its chapters, as the table of contents lists them.
BOOK_MAP = (
    ("Part I — Sequences", ("00 How to use", "01 Sequences", "02 Recurrent networks",
                            "03 Convolutions")),
    ("Part II — Attention", ("04 Weighted averaging", "05 Self-attention", "06 Multi-head",
                             "07 Cross-attention", "08 Positions")),
    ("Part III — The Transformer", ("09 The full model", "10 Training", "11 Decoding",
                                    "12 Scaling up", "13 Ablations")),
)


def book_loop_figure(chapters: Sequence[tuple[str, Sequence[str]]] = BOOK_MAP) -> Diagram:
    """How the book works: each chapter is a loop of read (the question and the idea),
    run (the notebook's cells, top to bottom), exercise (write the function) and check
    (``check("NN.K", fn)`` runs its tests at once), above the course's map from sequences
    to the Transformer (``chapters``: each part's caption and its chapters)."""
    require(not isinstance(chapters, str) and isinstance(chapters, Sequence)
            and 1 <= len(chapters) <= 4, "chapters", "1 to 4 (part, chapters) pairs",
            repr(chapters)[:60])
    for part in chapters:
        require(isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], str)
                and not isinstance(part[1], str) and 1 <= len(part[1]) <= 6
                and all(isinstance(c, str) and 0 < len(c) <= 24 for c in part[1]),
                "chapters", "(caption, 1 to 6 chapter names of at most 24 characters)",
                repr(part)[:60])
    total = sum(len(part[1]) for part in chapters)
    steps = (("read", "the question,\nthe idea, a diagram"),
             ("run", "the cells, top to bottom:\nmeasure, plot, compare"),
             ("exercise", "write the function\nyourself"),
             ("check", 'check("NN.K", fn):\npass or what failed'))
    alt = ("How the book works: every chapter is a loop of read (the question, the idea and "
           "a diagram), run (the notebook's cells, top to bottom), exercise (write a "
           "function yourself) and check (its tests run at once and say what failed), "
           f"then the next chapter; below, the map of the {total} chapters in "
           f"{len(chapters)} parts, from sequences to the Transformer.")
    rows = max(len(part[1]) for part in chapters)
    fig, (ax,) = canvas(alt, (0.0, 20.0), (-(rows - 1) * 1.05 - 0.6, 6.4))
    xs = [2.6 + i * 4.9 for i in range(4)]
    for i, (x, (name, note)) in enumerate(zip(xs, steps, strict=True)):
        box(ax, x, 4.6, 3.6, 1.0, name, (ATTENTION, FFN, EMBED, OUTPUT)[i], size=10,
            weight="bold")
        ax.text(x, 3.75, note, ha="center", va="top", fontsize=8)
        if i < 3:
            arrow(ax, (x + 1.85, 4.6), (xs[i + 1] - 1.85, 4.6))
    arrow(ax, (xs[3], 5.12), (xs[0], 5.12), connection="arc3,rad=0.12", colour=PALETTE[5])
    ax.text(10.0, 6.1, "next chapter", ha="center", va="bottom", fontsize=8,
            color=PALETTE[5])
    column = 20.0 / len(chapters)
    for p, (caption, names) in enumerate(chapters):
        x = p * column + column / 2
        ax.text(x, 1.0, caption, ha="center", va="center", fontsize=9, weight="bold")
        for j, name in enumerate(names):
            box(ax, x, 0.1 - j * 1.05, column - 0.6, 0.8, name,
                tint(PALETTE[p % len(PALETTE)], 0.8), size=8.5)
        if p < len(chapters) - 1:
            arrow(ax, (x + column / 2 - 0.25, 1.0), (x + column / 2 + 0.25, 1.0))
    return fig


# --------------------------------------------------------------------------- ch08


def positions_figure(tokens: Sequence[str] = ("dog", "bites", "man"), *, size: int = 4,
                     seed: int = 0) -> Diagram:
    """Attention without positions is permutation-equivariant (Section 3.5): self-attention
    (``Q = K = V = X``, :func:`~transformer_book.nn.attention.scaled_dot_product_attention`)
    on the tokens and on the tokens reversed gives the same output rows, reversed: no
    token's output knows where it stands. Adding the sinusoidal position vectors
    (:func:`~transformer_book.nn.positional.sinusoidal_encoding`) to the embeddings breaks
    the tie: the first token's output changes when it moves. Embeddings of ``size``
    numbers are random from ``seed``; both differences are computed as drawn."""
    words = check_tokens(tokens, "tokens", 5)
    require(len(set(words)) == len(words) and len(words) >= 2, "tokens",
            "2 or more distinct tokens", words)
    d = check_count(size, "size", 2, 6)
    require(d % 2 == 0, "size", "an even size (sines and cosines in pairs)", d)
    require(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0, "seed",
            "an int >= 0", repr(seed))
    n = len(words)
    generator = torch.Generator().manual_seed(seed)
    embed = torch.randn(n, d, generator=generator, dtype=torch.float64)  # (n, d)
    flip = torch.arange(n - 1, -1, -1)
    pe = sinusoidal_encoding(n, d, dtype=torch.float64)  # (n, d)

    def attend(x: torch.Tensor) -> torch.Tensor:
        return scaled_dot_product_attention(x, x, x)[0]  # (n, d)

    plain, plain_flipped = attend(embed), attend(embed[flip])
    equivariance = float((plain_flipped - plain[flip]).abs().max())
    same = "< 1e-12" if equivariance < 1e-12 else f"= {equivariance:.0e}"
    placed, placed_flipped = attend(embed + pe), attend(embed[flip] + pe)
    moved = float((placed_flipped[n - 1] - placed[0]).abs().max())
    order = " ".join(words)
    reverse = " ".join(reversed(words))
    alt = (f"Left, self-attention without positions on '{order}' and '{reverse}': the "
           f"output rows are the same, only reordered (largest difference {same}), "
           f"so '{words[0]}' gets the same output wherever it stands; right, with sinusoidal "
           f"position vectors added to the embeddings, '{words[0]}' at position 1 and at "
           f"position {n} get outputs that differ by up to {moved:.2f}.")
    fig, axes = canvas(alt, (0.0, 9.0), (-1.3, 2 * d + 3.4), ncols=2)
    scale = float(max(plain.abs().max(), placed.abs().max()))
    for ax, outputs, inputs, heading, note in (
            (axes[0], (plain, plain_flipped), (embed, embed[flip]), "no positions: x",
             f"same rows, reordered:\nmax |Δ| {same}"),
            (axes[1], (placed, placed_flipped), (embed + pe, embed[flip] + pe),
             "with positions: x + p",
             f"'{words[0]}' moved: its output\nchanges by up to {moved:.2f}")):
        for r, (label, out, inp) in enumerate(((order, outputs[0], inputs[0]),
                                               (reverse, outputs[1], inputs[1]))):
            top = 2 * d + 2.4 - r * (d + 1.5)
            ax.text(0.1, top + 0.15, label, ha="left", va="bottom", fontsize=FONT)
            sentence = words if r == 0 else list(reversed(words))
            cell = 0.6
            grid(ax, 0.2, top, values(inp.numpy().T / scale), cell, cell_h=d * 0.9 / d)
            grid(ax, 5.0, top, values(out.numpy().T / scale), cell, cell_h=0.9)
            arrow(ax, (0.4 + n * cell, top - d * 0.45), (4.8, top - d * 0.45))
            ax.text(2.9, top - d * 0.45 + 0.1, "attention", ha="center", va="bottom",
                    fontsize=8)
            for j, word in enumerate(sentence):
                face = PALETTE[3] if word == words[0] else "black"
                for x in (0.2, 5.0):
                    ax.text(x + (j + 0.5) * cell, top - d * 0.9 - 0.1, word[:5],
                            ha="center", va="top", fontsize=8, color=face, rotation=90)
        ax.text(4.5, 2 * d + 3.3, heading, ha="center", va="top", fontsize=9,
                weight="bold")
        ax.text(4.5, -0.6, note, ha="center", va="center", fontsize=FONT)
    return fig


# --------------------------------------------------------------------------- ch12


def data_parallel_figure(lengths: Sequence[int], max_tokens: int, world_size: int = 4,
                         ) -> Diagram:
    """Data-parallel training as ``torchrun --nproc_per_node=world_size`` runs it: every
    process holds a replica of the model, takes its own share of the token-budget batches
    (:class:`~transformer_book.data.batching.TokenBudgetSampler` with ``num_replicas`` and
    ``rank``: batches r, r + world_size, ...; computed here for ``lengths``), computes its
    gradients, and an all-reduce averages them so every replica takes the same step."""
    ranks = check_count(world_size, "world_size", 2, 8)
    require(not isinstance(lengths, str) and isinstance(lengths, Sequence)
            and len(lengths) >= ranks, "lengths", f"at least {ranks} example lengths",
            repr(lengths)[:60])
    shares = [TokenBudgetSampler(lengths, max_tokens, shuffle=True, seed=0,
                                 num_replicas=ranks, rank=r) for r in range(ranks)]
    everything = len(shares[0].batches())
    taken = [list(iter(share)) for share in shares]
    alt = (f"Data-parallel training with torchrun and {ranks} processes: the {everything} "
           f"token-budget batches of an epoch are dealt out in turn, {len(taken[0])} to each "
           f"process; each process runs the same model replica forward and backward on its "
           f"own batches, an all-reduce averages the {ranks} gradients, and every replica "
           f"takes the same optimizer step, so the weights stay identical.")
    column = 18.0 / ranks
    fig, (ax,) = canvas(alt, (0.0, 19.0), (0.0, 11.6))
    ax.text(9.5, 11.3, f"torchrun --nproc_per_node={ranks} … : {ranks} processes, one per GPU",
            ha="center", va="top", fontsize=9, family="monospace")
    for r in range(ranks):
        x = 0.5 + r * column + column / 2
        tokens = sum(lengths[i] for batch in taken[r] for i in batch)
        box(ax, x, 9.6, column - 0.4, 1.0, f"rank {r}\n{len(taken[r])} batches", EMBED,
            size=8)
        ax.text(x, 8.95, f"{tokens} tokens", ha="center", va="top", fontsize=8)
        arrow(ax, (x, 8.4), (x, 7.9))
        box(ax, x, 7.3, column - 0.4, 1.1, "replica\n(same weights)", ATTENTION, size=8)
        arrow(ax, (x, 6.75), (x, 6.25))
        box(ax, x, 5.7, column - 0.4, 1.0, f"forward,\nbackward → g{r}", FFN, size=8)
        arrow(ax, (x, 5.2), (x, 4.5))
        arrow(ax, (x, 3.3), (x, 2.6))
        box(ax, x, 2.0, column - 0.4, 1.1, "optimizer\nstep", NORM, size=8)
    box(ax, 9.5, 3.9, 18.0, 1.1, f"all-reduce: g = (g0 + … + g{ranks - 1}) / {ranks}, "
        "the same average on every rank", CROSS, size=9)
    ax.text(9.5, 0.7, f"the {everything} batches of an epoch, dealt in turn: rank r takes "
            f"batches r, r + {ranks}, r + {2 * ranks}, …", ha="center", va="center",
            fontsize=8)
    return fig


# --------------------------------------------------------------------------- ch13


def table3_knobs_figure(config: TransformerConfig) -> Diagram:
    """Where Table 3's knobs sit in the model, with their values read from ``config``:
    (A) the number of heads h and (B) the key size d_k in every attention sublayer, (D)
    the dropout P_drop on every sublayer's output and on the embedding sums (Section 5.4)
    and the label smoothing ε_ls in the loss, (E) the positions added to the embeddings."""
    require(isinstance(config, TransformerConfig), "config", "a TransformerConfig",
            type(config).__name__)
    alt = (f"Where Table 3's knobs act on the model: (A) h = {config.num_heads} heads and "
           f"(B) d_k = {config.d_k} in every attention sublayer, (D) dropout P_drop = "
           f"{config.dropout:g} on each sublayer output and on the embedding sums and label "
           f"smoothing ε_ls = {config.label_smoothing:g} in the loss, and (E) the "
           f"{config.positional} positions added to the embeddings; the model has N = "
           f"{config.num_encoder_layers} encoder and {config.num_decoder_layers} decoder "
           f"layers of d_model = {config.d_model}.")
    fig, (ax,) = canvas(alt, (0.0, 17.0), (0.0, 12.2))
    cx = 5.0
    stack = (("embedding + positions", EMBED, 0.95), ("multi-head attention", ATTENTION, 2.9),
             ("Add & Norm", NORM, 4.3), ("feed-forward", FFN, 5.6), ("Add & Norm", NORM, 7.0),
             ("linear + softmax", OUTPUT, 8.9), ("loss", tint(PALETTE[3], 0.75), 10.5))
    for text, face, y in stack:
        box(ax, cx, y, 5.2, 0.9, text, face, size=9)
    for (_, _, lower), (_, _, upper) in pairwise(stack):
        arrow(ax, (cx, lower + 0.45), (cx, upper - 0.45))
    ax.add_patch(Rectangle((cx - 3.0, 2.2), 6.0, 5.5, fill=False, edgecolor=PALETTE[5],
                           linestyle="--", linewidth=1.0))
    ax.text(cx - 3.15, 4.95, f"N = {config.num_encoder_layers} ×", ha="right", va="center",
            fontsize=9)
    knobs = (("(A) heads", f"h = {config.num_heads}", 2.9),
             ("(B) key size", f"d_k = {config.d_k} (d_model = {config.d_model})", 2.9),
             ("(D) dropout", f"P_drop = {config.dropout:g} on sublayer outputs", 4.3),
             ("(D) dropout", f"P_drop = {config.dropout:g} on embedding sums", 0.95),
             ("(D) label smoothing", f"ε_ls = {config.label_smoothing:g}", 10.5),
             ("(E) positions", config.positional, 0.95))
    for i, (name, value, y) in enumerate(knobs):
        ty = y + (0.45 if i in (0, 3) else -0.45 if i in (1, 5) else 0.0)
        box(ax, 12.6, ty, 7.6, 0.8, f"{name}: {value}", tint(PALETTE[1], 0.8), size=8.5)
        line(ax, [cx + 2.6, 8.8], [y, ty], PALETTE[1], 0.9)
    ax.text(12.6, 11.7, "Table 3's knobs, read from the config", ha="center", va="center",
            fontsize=9, weight="bold")
    return fig

"""A small attention encoder-decoder whose cross-attention learns an alignment (chapter 07).

Section 3.2.3: "In "encoder-decoder attention" layers, the queries come from the previous
decoder layer, and the memory keys and values come from the output of the encoder. This
allows every position in the decoder to attend over all positions in the input sequence.
This mimics the typical encoder-decoder attention mechanisms in sequence-to-sequence models
such as [Bahdanau et al., 2015]."

:class:`Aligner` is built only from the parts of Part II: token embeddings, a positional
encoding (:func:`~transformer_book.nn.positional.positional_encoding`) and the Transformer's
own layers, :class:`~transformer_book.nn.layers.EncoderLayer` and
:class:`~transformer_book.nn.layers.DecoderLayer` (post-LN, as in the paper, and without
dropout). Their :class:`~transformer_book.nn.attention.MultiHeadAttention` is used three ways:

- encoder self-attention over the source (padding mask on the keys);
- decoder *masked* self-attention over the target prefix (causal mask);
- decoder cross-attention: queries from the decoder, keys and values from the encoder output
  (the *memory*), with the source padding mask.

Each sub-layer is wrapped as ``LayerNorm(x + Sublayer(x))`` with a small feed-forward
network after the attention, the arrangement chapter 09 explains; here they only make the
toy model train quickly. The decoder's cross-attention has its own number of heads
(``cross_heads``, default 1), so that its weights *are* the alignment and can be drawn.

Token ids follow the course: ``<pad> <bos> <eos> <unk>`` = 0, 1, 2, 3; toy tokens start at 4
(:func:`transformer_book.data.toy.make_toy_task`). Sequences are right padded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from transformer_book.data.batching import pad_sequences
from transformer_book.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_book.data.toy import Example, require_examples
from transformer_book.nn.attention import MultiHeadAttention, padding_mask
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.layers import DecoderLayer, EncoderLayer
from transformer_book.nn.positional import positional_encoding, require_positional_kind
from transformer_book.toy.fit import fit_teacher_forced
from transformer_book.util.validation import (
    require,
    require_int,
    require_positive_int,
    require_tensor,
)

__all__ = [
    "Aligner",
    "AlignerConfig",
    "alignment_accuracy",
    "expected_alignment",
    "greedy_decode",
    "layer_config",
    "require_widths",
    "sequence_accuracy",
    "train_aligner",
]

def require_widths(d_model: int, d_ff: int, **heads: int) -> None:
    """The widths of a toy model's layers: ``d_model`` and ``d_ff`` positive integers, and
    each head count in ``heads`` (by its name) a positive divisor of ``d_model``."""
    require_positive_int(d_model, "d_model")
    require_positive_int(d_ff, "d_ff")
    for name, count in heads.items():
        require_positive_int(count, name)
        require(d_model % count == 0, name, f"a divisor of d_model={d_model}", count)


def layer_config(vocab_size: int, d_model: int, num_heads: int, d_ff: int) -> TransformerConfig:
    """The settings of the real layers (:mod:`transformer_book.nn.layers`) inside a toy model:
    the paper's post-LN ``LayerNorm(x + Sublayer(x))`` and no dropout (toy runs are short and
    their data endless)."""
    return TransformerConfig(vocab_size=vocab_size, d_model=d_model, num_heads=num_heads,
                             d_ff=d_ff, dropout=0.0, attention_dropout=0.0, norm_first=False)


@dataclass(frozen=True)
class AlignerConfig:
    """Sizes of an :class:`Aligner`.

    Attributes:
        vocab_size: ids including the four specials (toy tasks use 16).
        d_model: width of every vector.
        num_heads: heads of the two self-attentions.
        cross_heads: heads of the cross-attention (1: its weights are one alignment).
        d_ff: inner width of the feed-forward networks.
        encoder_layers, decoder_layers: how many layers of each.
        max_len: longest sequence the positional table covers.
        positions: a kind of :data:`~transformer_book.nn.positional.POSITIONAL_ENCODINGS`
            (``"sinusoidal"``, ``"learned"``, ``"fourier"``, ``"none"``, or one registered
            there).
    """

    vocab_size: int = 16
    d_model: int = 32
    num_heads: int = 4
    cross_heads: int = 1
    d_ff: int = 64
    encoder_layers: int = 2
    decoder_layers: int = 1
    max_len: int = 64
    positions: str = "sinusoidal"

    def __post_init__(self) -> None:
        require_int(self.vocab_size, "vocab_size", minimum=5)
        require_widths(self.d_model, self.d_ff, num_heads=self.num_heads,
                       cross_heads=self.cross_heads)
        require_positive_int(self.encoder_layers, "encoder_layers")
        require_positive_int(self.decoder_layers, "decoder_layers")
        require_positive_int(self.max_len, "max_len")
        require_positional_kind(self.positions, "positions")


def _decoder_layer(config: AlignerConfig) -> DecoderLayer:
    """The real :class:`~transformer_book.nn.layers.DecoderLayer`, its cross-attention with
    ``config.cross_heads`` heads.

    A :class:`~transformer_book.nn.attention.MultiHeadAttention`'s weights have the same shapes
    for any number of heads, so the layer keeps the cross-attention weights it was built with,
    only split into ``cross_heads`` heads; building the replacement draws no random numbers, so
    a seed gives the same initial model whatever ``cross_heads`` is.
    """
    layer = DecoderLayer(layer_config(config.vocab_size, config.d_model, config.num_heads,
                                      config.d_ff))
    if config.cross_heads != config.num_heads:
        with torch.random.fork_rng(devices=[]):
            cross = MultiHeadAttention(config.d_model, config.cross_heads)
        cross.load_state_dict(layer.cross_attn.state_dict())
        layer.cross_attn = cross
    return layer


class Aligner(nn.Module):
    """A small Transformer-style encoder-decoder for toy transductions (reverse, sort).

    ``encode(src (B, S)) -> memory (B, S, d_model)``;
    ``decode(tgt_in (B, T), memory, src, need_weights=False) -> (logits (B, T, vocab),
    cross weights: one (B, cross_heads, T, S) per decoder layer, or [])``;
    ``forward(src, tgt_in) -> logits (B, T, vocab)``. Source and target share one embedding
    table, scaled by √d_model (Section 3.4), then the positional encoding is added
    (Section 3.5).
    """

    def __init__(self, config: AlignerConfig) -> None:
        super().__init__()
        require(isinstance(config, AlignerConfig), "config", "an AlignerConfig",
                type(config).__name__)
        self.config = config
        d = config.d_model
        self.pad_id = PAD_ID
        self.embedding = nn.Embedding(config.vocab_size, d)
        nn.init.normal_(self.embedding.weight, std=d**-0.5)  # × √d_model: entries of size ~1
        self.positions = positional_encoding(config.positions, d, config.max_len)  # no dropout
        layers = layer_config(config.vocab_size, d, config.num_heads, config.d_ff)
        self.encoder = nn.ModuleList(EncoderLayer(layers) for _ in range(config.encoder_layers))
        self.decoder = nn.ModuleList(_decoder_layer(config)
                                     for _ in range(config.decoder_layers))
        self.generator = nn.Linear(d, config.vocab_size)

    def _embed(self, ids: torch.Tensor, name: str) -> torch.Tensor:
        require_tensor(ids, name, ndim=2)
        require(not ids.is_floating_point(), name, "an integer tensor of token ids", ids.dtype)
        require(ids.shape[1] <= self.config.max_len, name,
                f"at most max_len={self.config.max_len} positions", f"shape {tuple(ids.shape)}")
        x = self.embedding(ids) * math.sqrt(self.config.d_model)  # (B, L) -> (B, L, d_model)
        return self.positions(x)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """Source ids ``(B, S)`` -> memory ``(B, S, d_model)``; padding is never attended to."""
        x = self._embed(src, "src")
        mask = padding_mask(src, self.pad_id)  # (B, 1, 1, S)
        for layer in self.encoder:
            x, _ = layer(x, mask)
        return x

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        src: torch.Tensor,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Target prefix ``(B, T)`` and memory ``(B, S, d_model)`` -> logits ``(B, T, vocab)``
        and, with ``need_weights``, each decoder layer's cross-attention weights
        ``(B, cross_heads, T, S)``."""
        y = self._embed(tgt_in, "tgt_in")
        require(memory.shape[:2] == src.shape, "memory", f"shape (B, S)={tuple(src.shape)} + "
                "(d_model,), as src", f"shape {tuple(memory.shape)}")
        memory_mask = padding_mask(src, self.pad_id)  # (B, 1, 1, S)
        weights = []
        for layer in self.decoder:
            y, _, cross = layer(y, memory, memory_mask=memory_mask, need_weights=need_weights)
            if need_weights:
                weights.append(cross)
        return self.generator(y), weights

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        logits, _ = self.decode(tgt_in, self.encode(src), src)
        return logits


# --------------------------------------------------------------------------- training


def train_aligner(
    model: Aligner,
    examples: Sequence[Example],
    steps: int,
    batch_size: int = 64,
    lr: float = 4e-3,
    seed: int = 0,
) -> list[float]:
    """Teacher-forced training with Adam (β₂ = 0.98, Section 5.3) and gradients clipped to
    norm 1; returns the loss of every step.

    Each step samples ``batch_size`` pairs, feeds ``<bos> y`` to the decoder and minimises
    the cross-entropy of ``y <eos>`` over non-pad positions
    (:func:`~transformer_book.toy.fit.fit_teacher_forced`). The learning rate warms up
    linearly over the first 10% of the steps, then decays linearly to zero. Runs on the
    device of the model's parameters.
    """
    require(isinstance(model, Aligner), "model", "an Aligner", type(model).__name__)
    require_examples(examples, model.config.vocab_size)
    return fit_teacher_forced(model, examples, steps, batch_size, lr, seed=seed,
                              betas=(0.9, 0.98), clip_norm=1.0, warmup=True)


@torch.no_grad()
def greedy_decode(
    model: Aligner, src: torch.Tensor, max_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of ``max_len`` tokens for ``src (B, S)``.

    Returns ``tokens (B, max_len)`` (without ``<bos>``; cut them at the first ``<eos>``) and
    the last decoder layer's cross-attention weights ``(B, cross_heads, max_len, S)``: row
    ``t`` is where output ``t`` looked in the source.
    """
    require_positive_int(max_len, "max_len")
    was_training = model.training
    model.eval()
    memory = model.encode(src)  # computed once, reused at every step
    tokens = torch.full((src.shape[0], 1), BOS_ID, dtype=torch.long, device=src.device)
    for _ in range(max_len):
        logits, _ = model.decode(tokens, memory, src)  # (B, t, vocab)
        tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    _, weights = model.decode(tokens[:, :-1], memory, src, need_weights=True)
    model.train(was_training)
    return tokens[:, 1:], weights[-1]


def sequence_accuracy(model: Aligner, examples: Sequence[Example], batch_size: int = 256) -> float:
    """Fraction of ``examples`` whose greedy output equals the target exactly, then stops."""
    require_examples(examples, model.config.vocab_size)
    device = next(model.parameters()).device
    correct = 0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        max_len = max(len(t) for _, t in chunk) + 1  # room for <eos>
        src = pad_sequences([s for s, _ in chunk], PAD_ID).to(device)  # (B, S)
        tokens, _ = greedy_decode(model, src, max_len)
        for row, (_, tgt) in zip(tokens.tolist(), chunk, strict=True):
            cut = row.index(EOS_ID) if EOS_ID in row else len(row)
            correct += row[:cut] == list(tgt)
    return correct / len(examples)


# --------------------------------------------------------------------------- alignments


def expected_alignment(task: str, source: Sequence[int]) -> list[list[int]]:
    """For each output position, the source positions it should read (its *alignment*).

    ``"copy"``: output ``i`` reads source ``i``; ``"reverse"``: source ``L - 1 - i``;
    ``"sort"``: every source position that holds the ``i``-th smallest value (ties give
    several).
    """
    require(task in ("copy", "reverse", "sort"), "task", "'copy', 'reverse' or 'sort'",
            repr(task))
    length = len(source)
    require(length > 0, "source", "a non-empty list of ids", "[]")
    if task == "copy":
        return [[i] for i in range(length)]
    if task == "reverse":
        return [[length - 1 - i] for i in range(length)]
    ordered = sorted(source)
    return [[j for j, value in enumerate(source) if value == v] for v in ordered]


def alignment_accuracy(weights: torch.Tensor, expected: Sequence[Sequence[int]]) -> float:
    """Fraction of rows of ``weights (T, S)`` whose largest entry is in the expected positions.

    ``expected[i]`` lists the acceptable source positions of output ``i`` (see
    :func:`expected_alignment`); ``len(expected)`` must equal ``T``.
    """
    require_tensor(weights, "weights", ndim=2, floating=True)
    require(len(expected) == weights.shape[0], "expected",
            f"{weights.shape[0]} lists (one per row of weights)", f"{len(expected)} lists")
    pairs = zip(weights, expected, strict=True)
    hits = [int(row.argmax()) in set(allowed) for row, allowed in pairs]
    return sum(hits) / len(hits)

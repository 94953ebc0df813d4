"""The Transformer's layers and stacks (Vaswani et al., 2017, Section 3.1), built from
:class:`~transformer_book.nn.attention.MultiHeadAttention`.

Section 3.1: "The encoder is composed of a stack of N = 6 identical layers. Each layer has two
sub-layers. The first is a multi-head self-attention mechanism, and the second is a simple,
position-wise fully connected feed-forward network. We employ a residual connection around
each of the two sub-layers, followed by layer normalization. That is, the output of each
sub-layer is LayerNorm(x + Sublayer(x))". "The decoder ... inserts a third sub-layer, which
performs multi-head attention over the output of the encoder stack."

Residual dropout (Section 5.4): "We apply dropout to the output of each sub-layer, before it
is added to the sub-layer input and normalized."

``norm_first=False`` (default) is the paper's post-LN ``LayerNorm(x + Dropout(Sublayer(x)))``;
``norm_first=True`` is pre-LN ``x + Dropout(Sublayer(LayerNorm(x)))``. With
``config.final_norm`` each stack ends with one more LayerNorm, as ``nn.Transformer`` builds
its encoder and decoder (``encoder.norm`` / ``decoder.norm`` always exist there), so that its
weights load one to one. Pre-LN needs that final norm (the residual stream is never
normalised otherwise); the paper's post-LN stacks have none (each layer already ends in a
LayerNorm), so by default post-LN stacks end with ``nn.Identity``.

Masks are boolean, True = may attend (see :mod:`transformer_book.nn.attention`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.nn.attention import MultiHeadAttention
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.kv_cache import KV, DecoderCache
from transformer_book.nn.masks import shifted_causal_mask
from transformer_book.util.validation import checking, require, require_positive_int

__all__ = ["Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "FeedForward"]


class FeedForward(nn.Module):
    """Section 3.3, position-wise feed-forward network: ``FFN(x) = max(0, xW1 + b1)W2 + b2``.

    "This consists of two linear transformations with a ReLU activation in between ... The
    dimensionality of input and output is d_model = 512, and the inner-layer has
    dimensionality d_ff = 2048." ``forward(x (B, L, d_model)) -> (B, L, d_model)``; the same
    weights act on every position. (The paper puts no dropout inside; ``nn.Transformer``
    does, which matters only in training.)
    """

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        require_positive_int(d_model, "d_model")
        require_positive_int(d_ff, "d_ff")
        self.linear1 = nn.Linear(d_model, d_ff)  # W1, b1
        self.linear2 = nn.Linear(d_ff, d_model)  # W2, b2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, L, d_model) -> (B, L, d_ff) -> (B, L, d_model)
        return self.linear2(F.relu(self.linear1(x)))


class _Residual(nn.Module):
    """Shared by both layer kinds: where the LayerNorm goes and the residual dropout."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        self.dropout = nn.Dropout(config.dropout)

    def _in(self, x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        """The sub-layer's input: ``LayerNorm(x)`` for pre-LN, ``x`` for post-LN."""
        return norm(x) if self.norm_first else x

    def _out(self, x: torch.Tensor, sublayer_out: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        """``LayerNorm(x + Dropout(out))`` (post-LN) or ``x + Dropout(out)`` (pre-LN)."""
        x = x + self.dropout(sublayer_out)
        return x if self.norm_first else norm(x)


class EncoderLayer(_Residual):
    """One encoder layer: self-attention, then the feed-forward network (Section 3.1).

    ``forward(x (B, S, d_model), mask=None, need_weights=False)`` -> ``(x (B, S, d_model),
    weights (B, h, S, S) or None)``. ``mask`` (True = may attend) is usually the source
    :func:`~transformer_book.nn.attention.padding_mask` ``(B, 1, 1, S)``. ``need_weights`` runs
    the teaching path of the attention and returns its weights.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        d, eps = config.d_model, config.layer_norm_eps
        self.self_attn = MultiHeadAttention(d, config.num_heads, config.attention_dropout)
        self.ffn = FeedForward(d, config.d_ff)
        self.norm1 = nn.LayerNorm(d, eps=eps)
        self.norm2 = nn.LayerNorm(d, eps=eps)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self._in(x, self.norm1)
        out, weights = self.self_attn(h, h, h, mask=mask, need_weights=need_weights)
        x = self._out(x, out, self.norm1)
        x = self._out(x, self.ffn(self._in(x, self.norm2)), self.norm2)
        return x, weights


class DecoderLayer(_Residual):
    """One decoder layer: masked self-attention, cross-attention over the encoder output,
    then the feed-forward network (Section 3.1).

    Section 3.2.3: "In 'encoder-decoder attention' layers, the queries come from the previous
    decoder layer, and the memory keys and values come from the output of the encoder." The
    self-attention is causal ("We also modify the self-attention sub-layer in the decoder
    stack to prevent positions from attending to subsequent positions").

    ``forward(x (N, T, d_model), memory (B, S, d_model), memory_mask=None, cache=None,
    index=0, need_weights=False)`` -> ``(x (N, T, d_model), self_weights (N, h, T, t+T) or
    None, cross_weights (N, h, T, S) or None)``. ``x`` holds G = N / B hypotheses per source
    sentence, rows ``i·G .. i·G + G - 1`` for sentence i (G = 1 usually; beam search has G =
    K). Without a cache ``x`` is the whole target prefix and the causal mask comes from
    SDPA's ``is_causal``. With a :class:`DecoderCache`, ``x`` holds only the new tokens:
    their keys/values are appended to ``cache.self_kv[index]`` (a :class:`KV`) and the
    cross-attention k/v are projected once.

    Target padding needs no key mask here: targets are right-padded, so the causal mask
    already hides every pad from every real position (pad query rows are don't-care).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        d, h, eps = config.d_model, config.num_heads, config.layer_norm_eps
        self.self_attn = MultiHeadAttention(d, h, config.attention_dropout)
        self.cross_attn = MultiHeadAttention(d, h, config.attention_dropout)
        self.ffn = FeedForward(d, config.d_ff)
        self.norm1 = nn.LayerNorm(d, eps=eps)
        self.norm2 = nn.LayerNorm(d, eps=eps)
        self.norm3 = nn.LayerNorm(d, eps=eps)

    def _self_attention(
        self, h: torch.Tensor, cache: DecoderCache | None, index: int, need_weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attn = self.self_attn
        if cache is None:
            return attn(h, h, h, is_causal=True, need_weights=need_weights)
        k_new, v_new = attn.project_kv(h, h)  # (N, h, T_new, d_k)
        q = attn.project_query(h)  # (N, h, T_new, d_k)
        if attn.rotate is not None:  # the new positions, rotated before they are cached
            offset = cache.self_kv[index].length if index < len(cache.self_kv) else 0
            q, k_new = attn.rotate(q, offset), attn.rotate(k_new, offset)
        k, v = cache.extend(index, k_new, v_new)  # (N, h, t + T_new, d_k)
        t_new, t_all = h.shape[1], k.shape[2]
        if t_new == 1:  # one new token sees the whole past: no mask at all
            return attn.attend(q, k, v, need_weights=need_weights)
        if t_new == t_all:  # first call: plain top-left causal mask
            return attn.attend(q, k, v, is_causal=True, need_weights=need_weights)
        # New query i sits at position t_all - t_new + i and sees keys 0 .. that position.
        mask = shifted_causal_mask(t_new, t_all, h.device)  # (T_new, t + T_new)
        return attn.attend(q, k, v, mask=mask, need_weights=need_weights)

    def _cross_attention(
        self, h: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor | None,
        cache: DecoderCache | None, index: int, need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Cross-attention of ``h (B·G, T, d_model)``, G hypotheses per source sentence,
        over ``memory (B, S, d_model)``. Queries attend independently of each other, so a
        sentence's G·T queries are attended in one row, ``(B, G·T, d_model)``, against one
        copy of its keys and values (beam search never repeats the memory K times)."""
        (n, t, d), b = h.shape, memory.shape[0]
        g = n // b
        attn = self.cross_attn
        if cache is None:
            kv = attn.project_kv(memory, memory)  # (B, h, S, d_k) twice
        else:
            if index >= len(cache.cross_kv):  # once per sentence
                cache.cross_kv.append(KV.of(*attn.project_kv(memory, memory)))
            kv = cache.cross_kv[index].cached()
        q = attn.project_query(h.reshape(b, g * t, d))  # (B, heads, G·T, d_k)
        out, weights = attn.attend(q, *kv, mask=memory_mask,
                                   need_weights=need_weights)  # (B, G·T, d_model)
        if weights is not None:  # (B, heads, G·T, S) -> (B·G, heads, T, S)
            weights = weights.unflatten(2, (g, t)).transpose(1, 2).flatten(0, 1)
        return out.reshape(n, t, d), weights  # (B, G·T, d_model) -> (B·G, T, d_model)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        cache: DecoderCache | None = None,
        index: int = 0,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        out, self_weights = self._self_attention(self._in(x, self.norm1), cache, index,
                                                 need_weights)
        x = self._out(x, out, self.norm1)
        out, cross_weights = self._cross_attention(self._in(x, self.norm2), memory, memory_mask,
                                                   cache, index, need_weights)
        x = self._out(x, out, self.norm2)
        x = self._out(x, self.ffn(self._in(x, self.norm3)), self.norm3)
        return x, self_weights, cross_weights


def _final_norm(config: TransformerConfig) -> nn.Module:
    """The stack's last module: a LayerNorm with ``config.final_norm``, else the identity."""
    if config.final_norm:
        return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
    return nn.Identity()


class Encoder(nn.Module):
    """Section 3.1: "a stack of N = 6 identical layers", then, with ``config.final_norm``,
    a final LayerNorm (as in ``nn.Transformer``; see the module docstring).

    ``forward(x (B, S, d_model), mask=None, need_weights=False)`` -> ``(memory (B, S,
    d_model), weights)`` with ``weights`` a list of N ``(B, h, S, S)`` (empty unless
    ``need_weights``).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config)
                                    for _ in range(config.num_encoder_layers))
        self.norm = _final_norm(config)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask, need_weights)
            if need_weights:
                weights.append(w)
        return self.norm(x), weights


class Decoder(nn.Module):
    """Section 3.1: "The decoder is also composed of a stack of N = 6 identical layers",
    then, with ``config.final_norm``, a final LayerNorm (as in ``nn.Transformer``).

    ``forward(x (N, T, d_model), memory (B, S, d_model), memory_mask=None, cache=None,
    need_weights=False)`` -> ``(y (N, T, d_model), self_weights, cross_weights)``, the
    weight lists holding one ``(N, h, T, ·)`` tensor per layer when ``need_weights``. N is
    a multiple of B: G = N / B hypotheses per sentence, as in :class:`DecoderLayer`.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config)
                                    for _ in range(config.num_decoder_layers))
        self.norm = _final_norm(config)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        if checking():
            _check_decoder_input(x, memory, cache)
        self_weights, cross_weights = [], []
        for i, layer in enumerate(self.layers):
            x, sw, cw = layer(x, memory, memory_mask, cache, i, need_weights)
            if need_weights:
                self_weights.append(sw)
                cross_weights.append(cw)
        return self.norm(x), self_weights, cross_weights


def _check_decoder_input(x: torch.Tensor, memory: torch.Tensor,
                         cache: DecoderCache | None) -> None:
    """G = N / B hypotheses per sentence, and a cache that holds as many (metadata only)."""
    n, b = x.shape[0], memory.shape[0]
    require(n % b == 0, "x", f"G hypotheses for each of the B={b} memory rows (N = G·B)",
            f"N={n}")
    if cache is not None:
        require(cache.batch_size in (None, n), "cache",
                f"a cache of N={n} hypotheses (as x)", f"a cache of {cache.batch_size}")
        sentences = cache.cross_kv[0].rows if cache.cross_kv else b
        require(sentences == b, "cache",
                f"cross-attention keys of B={b} sentences (as memory)", f"keys of {sentences}")

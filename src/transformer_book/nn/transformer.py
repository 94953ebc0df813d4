"""The encoder-decoder Transformer of *Attention Is All You Need* (Vaswani et al., 2017).

Figure 1 in code: embeddings (scaled by √d_model) plus positional encodings, the encoder
stack, the decoder stack with cross-attention over the encoder output, and the pre-softmax
linear projection to the vocabulary. The layers live in :mod:`transformer_book.nn.layers`,
the hyperparameters in :class:`~transformer_book.nn.config.TransformerConfig`.

    model = Transformer(TransformerConfig.preset("base", vocab_size=37000))
    logits = model(src_ids, tgt_ids)          # (B, S), (B, T) -> (B, T, V)
    memory = model.encode(src_ids)            # (B, S, d_model)
    logits = model.decode(tgt_ids, memory, src_ids)

Incremental decoding: ``cache = model.new_cache()``, then ``model.decode(new_ids, memory,
src_ids, cache=cache)`` with only the new tokens ``(B, t_new)`` each call.
"""

from __future__ import annotations

import math
from typing import Literal, overload

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.nn.attention import MultiHeadAttention, padding_mask
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.kv_cache import DecoderCache
from transformer_book.nn.layers import Decoder, DecoderLayer, Encoder
from transformer_book.nn.masks import readable_without_sync
from transformer_book.nn.positional import positional_encoding
from transformer_book.util.validation import bad_input, checking, require, require_tensor

__all__ = [
    "Transformer",
    "count_parameters",
    "cross_attention_weights",
]

_ID_DTYPES = (torch.int64, torch.int32)


def _positional(config: TransformerConfig) -> nn.Module:
    return positional_encoding(config.positional, config.d_model, config.max_len, config.dropout)


class Transformer(nn.Module):
    """Figure 1 of the paper: ``forward(src_ids (B, S), tgt_ids (B, T)) -> logits (B, T, V)``.

    Section 3.4: "we use learned embeddings to convert the input tokens and output tokens to
    vectors of dimension d_model ... we share the same weight matrix between the two
    embedding layers and the pre-softmax linear transformation ... In the embedding layers,
    we multiply those weights by √d_model." With ``config.tie_embeddings`` the source and
    target embeddings and ``generator.weight`` are one ``(V, d_model)`` matrix (a joint
    vocabulary); otherwise three. Embeddings start at N(0, d_model^-1), so after the √d_model
    scale they have unit variance, like the positional encodings they are added to.

    Section 5.4: "we apply dropout to the sums of the embeddings and the positional
    encodings in both the encoder and decoder stacks" (inside the positional modules).

    ``tgt_ids`` is the decoder input (``<bos> y_1 ... y_{T-1}``, right-padded); logits at
    position t predict ``y_{t+1}``. Padding masks come from ``config.pad_id``; the causal
    mask is built inside. Ids must be a 2-D integer tensor with at most ``config.max_len``
    positions (longer inputs raise a ``BookError``, they are never silently truncated) and
    values in ``[0, vocab_size)``. :meth:`forward`, :meth:`encode` and :meth:`decode` check
    the shapes on every call and, on the CPU, the values too (one ``aminmax``); on a GPU
    they leave the values to the entry points (translation, decoding), which call
    :meth:`check_ids` once, because reading values there makes the host wait for the device
    at every step. Nothing is checked while ``torch.compile`` traces.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        require(isinstance(config, TransformerConfig), "config", "a TransformerConfig",
                type(config).__name__)
        self.config = config
        d, vocab = config.d_model, config.vocab_size
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        # Like nn.Transformer._reset_parameters: Xavier-uniform for every matrix of the stacks.
        for p in (*self.encoder.parameters(), *self.decoder.parameters()):
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        self.src_embed = nn.Embedding(vocab, d)
        self.tgt_embed = self.src_embed if config.tie_embeddings else nn.Embedding(vocab, d)
        # The pre-softmax linear transformation (Section 3.4: no bias, unless config says so).
        self.generator = nn.Linear(d, vocab, bias=config.generator_bias)
        for embedding in {self.src_embed, self.tgt_embed}:
            nn.init.normal_(embedding.weight, std=d**-0.5)
        if config.generator_bias:
            nn.init.zeros_(self.generator.bias)
        if config.tie_embeddings:
            self.generator.weight = self.tgt_embed.weight
        self.src_pos = _positional(config)
        self.tgt_pos = _positional(config)
        self.embed_scale = math.sqrt(d)
        self._attach_positions()

    def _attach_positions(self) -> None:
        """A position scheme that acts on queries and keys (a ``rotate`` method: rotary) is
        handed to every self-attention of its stack (cross-attention is left alone)."""
        for positions, stack in ((self.src_pos, self.encoder), (self.tgt_pos, self.decoder)):
            rotate = getattr(positions, "rotate", None)
            if rotate is None:
                continue
            require(self.config.d_k % 2 == 0, "config", f"heads of an even width for "
                    f"positional={self.config.positional!r} (feature pairs)",
                    f"d_k = {self.config.d_k}")
            for layer in stack.layers:
                layer.self_attn.rotate = rotate  # type: ignore[union-attr]

    # ------------------------------------------------------------------ checks and masks

    def check_ids(self, ids: torch.Tensor, name: str, offset: int = 0) -> None:
        """:meth:`check_id_shape`, and every id inside the vocabulary ``[0, vocab_size)``; a
        ``BookError`` names the first id outside it and where it sits. Reading the values
        synchronises the host with the device: entry points call this once per batch on any
        device, the model's own methods on the CPU alone (:meth:`_check_ids_of_call`)."""
        self.check_id_shape(ids, name, offset)
        vocab = self.config.vocab_size
        lo, hi = (int(t) for t in torch.aminmax(ids))
        if lo < 0 or hi >= vocab:
            bad = lo if lo < 0 else hi
            row, position = (int(i) for i in (ids == bad).nonzero()[0])
            raise bad_input(name, f"token ids in [0, vocab_size={vocab})",
                       f"id {bad} at row {row}, position {position}")

    def _check_ids_of_call(self, ids: torch.Tensor, name: str, offset: int = 0) -> None:
        """What :meth:`forward`, :meth:`encode` and :meth:`decode` check on every call: the
        values too (:meth:`check_ids`) where reading them is free (a CPU tensor: one
        ``aminmax``, microseconds), the shape alone on a GPU (:meth:`check_id_shape`), where
        an out-of-range id fails inside the embedding as a device-side assert."""
        if readable_without_sync(ids):
            self.check_ids(ids, name, offset)
        else:
            self.check_id_shape(ids, name, offset)

    def check_id_shape(self, ids: torch.Tensor, name: str, offset: int = 0) -> None:
        """2-D integer ids, no longer than ``max_len`` positions after ``offset`` cached
        ones: metadata only (no sync), what :meth:`forward`, :meth:`encode` and
        :meth:`decode` check on every call on a GPU (nothing while ``torch.compile``
        traces)."""
        config = self.config
        require_tensor(ids, name, ndim=2)
        require(ids.dtype in _ID_DTYPES, name, "an integer tensor (torch.long) of token ids",
                f"dtype {ids.dtype}")
        require(ids.shape[0] > 0 and ids.shape[1] > 0, name, "a non-empty (B, L) tensor",
                f"shape {tuple(ids.shape)}")
        require(offset + ids.shape[1] <= config.max_len, name,
                f"at most max_len={config.max_len} positions (an error, not truncation)",
                f"length {ids.shape[1]}" + (f" after {offset} cached positions" if offset else ""))

    def source_mask(self, src_ids: torch.Tensor) -> torch.Tensor:
        """Keys that are real source tokens, bool ``(B, 1, 1, S)`` (the fast path drops a
        mask that hides nothing where reading it is free)."""
        return padding_mask(src_ids, self.config.pad_id)  # (B, S) -> (B, 1, 1, S)

    def new_cache(self) -> DecoderCache:
        """An empty :class:`DecoderCache` for incremental :meth:`decode`."""
        return DecoderCache()

    # ------------------------------------------------------------------ the model

    @overload
    def encode(self, src_ids: torch.Tensor, need_weights: Literal[False] = False
               ) -> torch.Tensor: ...
    @overload
    def encode(self, src_ids: torch.Tensor, need_weights: Literal[True]
               ) -> tuple[torch.Tensor, list[torch.Tensor]]: ...
    def encode(
        self, src_ids: torch.Tensor, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """The encoder: ``src_ids (B, S)`` -> ``memory (B, S, d_model)``.

        With ``need_weights`` the teaching path runs and the result is ``(memory,
        weights)``, ``weights`` a list of one ``(B, h, S, S)`` tensor per layer.
        """
        if checking():
            self._check_ids_of_call(src_ids, "src_ids")
        x = self.src_pos(self.src_embed(src_ids) * self.embed_scale)  # (B, S, d_model)
        memory, weights = self.encoder(x, self.source_mask(src_ids), need_weights)
        return (memory, weights) if need_weights else memory

    @overload
    def decode(self, tgt_ids: torch.Tensor, memory: torch.Tensor, src_ids: torch.Tensor,
               cache: DecoderCache | None = None, need_weights: Literal[False] = False
               ) -> torch.Tensor: ...
    @overload
    def decode(self, tgt_ids: torch.Tensor, memory: torch.Tensor, src_ids: torch.Tensor,
               cache: DecoderCache | None = None, *, need_weights: Literal[True]
               ) -> tuple[torch.Tensor, dict[str, list[torch.Tensor]]]: ...
    def decode(
        self,
        tgt_ids: torch.Tensor,
        memory: torch.Tensor,
        src_ids: torch.Tensor,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, list[torch.Tensor]]]:
        """The decoder and the output projection: ``tgt_ids (N, T)``, ``memory (B, S,
        d_model)``, ``src_ids (B, S)`` (for its padding mask) -> ``logits (N, T, V)``.

        Usually N = B. Beam search decodes G hypotheses of each sentence at once: N = G·B,
        rows ``i·G .. i·G + G - 1`` of ``tgt_ids`` continue sentence i, and all G attend to
        its one copy of ``memory``.

        With ``cache`` (:meth:`new_cache`), ``tgt_ids`` are only the *new* tokens: they sit
        at positions ``cache.length ...``, attend to the cached keys/values and are appended
        to them. Cached and uncached decoding give the same logits.

        With ``need_weights`` the teaching path runs and the result is ``(logits,
        {"self": [...], "cross": [...]})``: per layer, self-attention weights ``(N, h, T,
        cache.length + T)`` and cross-attention weights ``(N, h, T, S)`` (for alignment plots).
        """
        offset = 0 if cache is None else cache.length
        if checking():
            self._check_decode(tgt_ids, memory, src_ids, offset)
        y = self.tgt_pos(self.tgt_embed(tgt_ids) * self.embed_scale, offset)  # (B, T, d_model)
        y, self_w, cross_w = self.decoder(y, memory, self.source_mask(src_ids), cache,
                                          need_weights)
        logits = self.generator(y)  # (B, T, d_model) -> (B, T, V)
        return (logits, {"self": self_w, "cross": cross_w}) if need_weights else logits

    def _check_decode(self, tgt_ids: torch.Tensor, memory: torch.Tensor, src_ids: torch.Tensor,
                      offset: int) -> None:
        self._check_ids_of_call(tgt_ids, "tgt_ids", offset)
        self._check_ids_of_call(src_ids, "src_ids")
        require_tensor(memory, "memory", ndim=3, floating=True)
        b, s = src_ids.shape
        require(memory.shape == (b, s, self.config.d_model), "memory",
                f"shape (B={b}, S={s}, d_model={self.config.d_model}) to match src_ids",
                f"shape {tuple(memory.shape)}")
        require(tgt_ids.shape[0] % b == 0, "tgt_ids",
                f"batch size a multiple of {b} (G hypotheses per sentence of src_ids)",
                f"shape {tuple(tgt_ids.shape)}")

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        """``src_ids (B, S)``, ``tgt_ids (B, T)`` -> ``logits (B, T, V)`` (teacher forcing).

        The same as ``decode(tgt_ids, encode(src_ids), src_ids)``, checking the ids (their
        values on the CPU alone, see the class docstring) and building the source mask once.
        """
        return self.generator(self.hidden(src_ids, tgt_ids))  # (B, T, d_model) -> (B, T, V)

    def hidden(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` without the generator: the decoder's last states ``(B, T, d_model)``
        (the training loss's fast path projects them itself,
        :mod:`~transformer_book.train.fused_loss`)."""
        if checking():
            self._check_ids_of_call(src_ids, "src_ids")
            self._check_ids_of_call(tgt_ids, "tgt_ids")
            require(tgt_ids.shape[0] == src_ids.shape[0], "tgt_ids",
                    f"batch size {src_ids.shape[0]} (as src_ids)",
                    f"shape {tuple(tgt_ids.shape)}")
        src_mask = self.source_mask(src_ids)  # (B, 1, 1, S)
        x = self.src_pos(self.src_embed(src_ids) * self.embed_scale)  # (B, S, d_model)
        memory, _ = self.encoder(x, src_mask)  # (B, S, d_model)
        y = self.tgt_pos(self.tgt_embed(tgt_ids) * self.embed_scale)  # (B, T, d_model)
        y, _, _ = self.decoder(y, memory, src_mask)  # (B, T, d_model)
        return y

    # ------------------------------------------------------------------ nn.Transformer

    @classmethod
    def from_torch(
        cls,
        transformer: nn.Transformer,
        embedding: nn.Embedding,
        generator: nn.Linear,
        config: TransformerConfig,
    ) -> Transformer:
        """Copy the weights of ``nn.Transformer`` + one shared ``nn.Embedding`` + an
        ``nn.Linear`` generator into a new :class:`Transformer`.

        The result computes what this reference computes (dropout off)::

            emb = lambda ids: embedding(ids) * √d_model + PE        # sinusoidal, Section 3.5
            h = transformer(emb(src), emb(tgt), tgt_mask=causal, src_key_padding_mask=...,
                            tgt_key_padding_mask=..., memory_key_padding_mask=...)
            logits = generator(h)

        (``batch_first`` does not change the weights.) The embedding serves source and
        target; with ``config.tie_embeddings`` the generator's weight must equal it.
        ``nn.Transformer`` always ends its stacks with a LayerNorm, so ``config`` must have
        ``final_norm=True`` (its layout, not the paper's default), and
        ``config.generator_bias`` must say whether ``generator`` has a bias.
        """
        _check_torch_layout(transformer, embedding, generator, config)
        enc, dec = transformer.encoder, transformer.decoder
        layers = (*enc.layers, *dec.layers)
        weight = embedding.weight
        ours = cls(config).to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            pairs = [(ours.encoder.norm, enc.norm), (ours.decoder.norm, dec.norm)]
            for mine, theirs in zip((*ours.encoder.layers, *ours.decoder.layers), layers,
                                    strict=True):
                pairs += [(mine.self_attn, theirs.self_attn), (mine.ffn.linear1, theirs.linear1),
                          (mine.ffn.linear2, theirs.linear2), (mine.norm1, theirs.norm1),
                          (mine.norm2, theirs.norm2)]
                if isinstance(mine, DecoderLayer):
                    pairs += [(mine.cross_attn, theirs.multihead_attn), (mine.norm3, theirs.norm3)]
            for mine, theirs in pairs:
                if isinstance(theirs, nn.MultiheadAttention):
                    theirs = MultiHeadAttention.from_torch(theirs)  # packed in_proj, same layout
                mine.load_state_dict(theirs.state_dict())
            ours.src_embed.weight.copy_(weight)
            ours.tgt_embed.weight.copy_(weight)
            ours.generator.weight.copy_(generator.weight)
            if generator.bias is not None:
                ours.generator.bias.copy_(generator.bias)
        return ours


def _check_torch_layout(transformer: nn.Transformer, embedding: nn.Embedding,
                        generator: nn.Linear, config: TransformerConfig) -> None:
    """What :meth:`Transformer.from_torch` needs: the same sizes as ``config``, ReLU,
    final norms, and tied weights when ``config`` ties them."""
    require(isinstance(transformer, nn.Transformer), "transformer", "an nn.Transformer",
            type(transformer).__name__)
    require(isinstance(embedding, nn.Embedding), "embedding", "an nn.Embedding",
            type(embedding).__name__)
    require(isinstance(generator, nn.Linear), "generator", "an nn.Linear",
            type(generator).__name__)
    d, vocab = config.d_model, config.vocab_size
    enc, dec = transformer.encoder, transformer.decoder
    layers = (*enc.layers, *dec.layers)
    require(transformer.d_model == d and transformer.nhead == config.num_heads,
            "transformer", f"d_model={d}, nhead={config.num_heads} (as config)",
            f"d_model={transformer.d_model}, nhead={transformer.nhead}")
    require((len(enc.layers), len(dec.layers))
            == (config.num_encoder_layers, config.num_decoder_layers), "transformer",
            f"{config.num_encoder_layers} + {config.num_decoder_layers} layers (as config)",
            f"{len(enc.layers)} + {len(dec.layers)}")
    require(all(layer.linear1.out_features == config.d_ff for layer in layers),
            "transformer", f"dim_feedforward={config.d_ff} (as config)",
            layers[0].linear1.out_features)
    require(all(layer.norm_first == config.norm_first for layer in layers), "transformer",
            f"norm_first={config.norm_first} (as config)", layers[0].norm_first)
    relu = (F.relu, torch.relu)
    require(all(layer.activation in relu or isinstance(layer.activation, nn.ReLU)
                for layer in layers),
            "transformer", "ReLU activations (Section 3.3)", "another activation")
    require(enc.norm is not None and dec.norm is not None, "transformer",
            "final encoder/decoder LayerNorms (as nn.Transformer builds them)", "None")
    require(config.final_norm is True, "config", "final_norm=True (nn.Transformer's stacks end "
            "in a LayerNorm; TransformerConfig(..., final_norm=True, generator_bias=True))",
            "final_norm=False")
    require((generator.bias is not None) == config.generator_bias, "generator",
            f"{'a' if config.generator_bias else 'no'} bias (config.generator_bias="
            f"{config.generator_bias})", "a bias" if generator.bias is not None else "no bias")
    require(tuple(embedding.weight.shape) == (vocab, d), "embedding",
            f"weight shape (vocab_size={vocab}, d_model={d})", tuple(embedding.weight.shape))
    require(tuple(generator.weight.shape) == (vocab, d), "generator",
            f"weight shape (vocab_size={vocab}, d_model={d})", tuple(generator.weight.shape))
    if config.tie_embeddings:
        require(torch.equal(generator.weight, embedding.weight), "generator",
                "weights equal to the embedding's (config.tie_embeddings=True)",
                "different weights")


def count_parameters(model: nn.Module) -> int:
    """Number of distinct trainable parameters (tied matrices counted once).

    Table 3 lists 65 × 10^6 for the base model with a shared 37000-token vocabulary.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def cross_attention_weights(
    model: Transformer, src_ids: torch.Tensor, tgt_ids: torch.Tensor
) -> torch.Tensor:
    """Encoder-decoder attention of every decoder layer, for alignment plots:
    ``(num_decoder_layers, B, h, T, S)``, rows summing to one over real source tokens.

    Runs the teaching path without gradients (the model's train/eval mode is respected).
    """
    with torch.no_grad():
        memory = model.encode(src_ids)
        _, attention = model.decode(tgt_ids, memory, src_ids, need_weights=True)
    return torch.stack(attention["cross"])  # L tensors (B, h, T, S) -> (L, B, h, T, S)

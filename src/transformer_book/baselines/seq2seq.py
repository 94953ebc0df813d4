"""A GRU encoder-decoder for toy tasks, with optional additive (Bahdanau) attention.

Chapter 02 trains it without attention: the decoder starts from the encoder's final state
and sees nothing else. Bahdanau et al. (2015), Section 1: "A potential issue with this
encoder-decoder approach is that a neural network needs to be able to compress all the
necessary information of a source sentence into a fixed-length vector." Chapter 04 turns
attention on: every decoder step attends over all encoder states (Section 3.1), scored by
:class:`~transformer_book.nn.attention.AdditiveScore`.

Token ids follow the course: ``<pad> <bos> <eos> <unk>`` = 0, 1, 2, 3. Examples are
``(src, tgt)`` pairs of ``list[int]`` without special tokens (as made by
``transformer_book.data.toy.make_toy_task``); the training function,
:func:`transformer_book.toy.fit.train_seq2seq`, adds ``<bos>``/``<eos>``. Sequences are
right padded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import nn

from transformer_book.data.batching import pad_sequences
from transformer_book.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_book.data.toy import Example, require_examples
from transformer_book.nn.attention import AdditiveScore, masked_softmax
from transformer_book.util.validation import (
    require,
    require_bool,
    require_int,
    require_positive_int,
    require_tensor,
)

__all__ = ["Seq2SeqGRU", "sequence_accuracy", "token_accuracy"]


class Seq2SeqGRU(nn.Module):
    """GRU encoder-decoder (Cho et al., 2014; Sutskever et al., 2014), optionally attentive.

    Without attention the decoder's initial state is the encoder's state after the last
    real source token, and that fixed-length vector is all it sees of the source (the
    bottleneck of Bahdanau et al., 2015, Section 1). With ``attention=True`` each step
    computes ``c_i = attention(s_{i-1}, encoder states)`` (Section 3.1), feeds
    ``[embed(y_{i-1}); c_i]`` to the GRU cell and predicts from ``[s_i; c_i]``.

    Args:
        vocab_size: V, shared by source and target (ids 0..3 are the special tokens).
        embed_dim: E, token embedding size.
        hidden_dim: H, GRU state size (and the attention's hidden size).
        attention: use additive attention over the encoder states.
        pad_id: padding id; padded source positions are never attended to.
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_dim: int,
                 attention: bool = False, pad_id: int = PAD_ID) -> None:
        super().__init__()
        self.vocab_size = require_int(vocab_size, "vocab_size", minimum=2)
        require_positive_int(embed_dim, "embed_dim")
        self.hidden_dim = require_positive_int(hidden_dim, "hidden_dim")
        self.pad_id = require_int(pad_id, "pad_id", minimum=0, maximum=vocab_size - 1)
        self.use_attention = require_bool(attention, "attention")
        context_dim = hidden_dim if self.use_attention else 0
        self.src_embed = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.encoder = nn.GRU(embed_dim, hidden_dim, batch_first=True)
        self.decoder = nn.GRU(embed_dim + context_dim, hidden_dim, batch_first=True)
        self.attention = (AdditiveScore(hidden_dim, hidden_dim, hidden_dim)
                          if self.use_attention else None)
        self.out = nn.Linear(hidden_dim + context_dim, vocab_size)

    def _check_ids(self, ids: torch.Tensor, name: str) -> None:
        """Shape and dtype of ``ids (B, L)``: metadata only, no synchronisation."""
        require_tensor(ids, name, ndim=2, dtype=(torch.int64, torch.int32))
        require(ids.shape[1] >= 1, name, "a sequence of length >= 1", f"shape {tuple(ids.shape)}")

    def _check_source_values(self, src: torch.Tensor) -> None:
        """Ids of ``src (B, S)`` in range, a real token in every row (reads the values)."""
        self._check_ids(src, "src")
        low, high = (int(i) for i in torch.aminmax(src))
        require(low >= 0 and high < self.vocab_size, "src", f"ids in [0, {self.vocab_size})",
                f"ids in [{low}, {high}]")
        require(bool((src != self.pad_id).any(dim=1).all()), "src",
                "at least one non-pad token per row", "a row of padding only")

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run the encoder GRU over ``src`` ``(B, S)`` (right padded).

        Returns the encoder states ``(B, S, H)``, the state after each row's last non-pad
        token ``(B, H)``, and the key mask ``(B, S)`` (True = real token).
        """
        self._check_ids(src, "src")
        mask = src != self.pad_id  # (B, S), True = real token
        lengths = mask.sum(dim=1)  # (B,)
        states, _ = self.encoder(self.src_embed(src))  # (B, S, E) -> (B, S, H)
        rows = torch.arange(src.shape[0], device=src.device)
        final = states[rows, lengths - 1]  # (B, H): the state after the last real token
        return states, final, mask

    def _step(self, y_prev: torch.Tensor, state: torch.Tensor, enc_states: torch.Tensor,
              mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One decoder step: ``y_prev`` ``(B,)`` -> logits ``(B, V)``, state ``(B, H)``, weights."""
        embedded = self.tgt_embed(y_prev)  # (B,) -> (B, E)
        weights = None
        if self.attention is not None:
            scores = self.attention(state.unsqueeze(1), enc_states)  # (B, 1, H) -> (B, 1, S)
            weights = masked_softmax(scores, mask.unsqueeze(1))  # mask (B, S) -> (B, 1, S)
            context = (weights @ enc_states).squeeze(1)  # (B, 1, S) @ (B, S, H) -> (B, H)
            weights = weights.squeeze(1)  # (B, 1, S) -> (B, S)
            embedded = torch.cat([embedded, context], dim=-1)  # (B, E + H)
        # one step of the GRU: (B, 1, E [+ H]) with state (1, B, H) -> (1, B, H) -> (B, H)
        state = self.decoder(embedded.unsqueeze(1), state.unsqueeze(0))[1][0]
        if self.attention is not None:
            return self.out(torch.cat([state, context], dim=-1)), state, weights
        return self.out(state), state, None

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor,
                need_weights: bool = False
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing: ``src`` ``(B, S)``, ``tgt_in`` ``(B, T)`` (starting with ``<bos>``).

        Returns logits ``(B, T, V)``; with ``need_weights`` also the weights ``(B, T, S)``
        (None without attention).
        """
        self._check_ids(tgt_in, "tgt_in")
        enc_states, state, mask = self.encode(src)
        require(tgt_in.shape[0] == src.shape[0], "tgt_in", f"batch size {src.shape[0]}",
                tgt_in.shape[0])
        if self.attention is None:  # nothing depends on the source but s_0: one fused call
            # (B, T, E) with s_0 (1, B, H) -> (B, T, H) -> (B, T, V)
            out = self.out(self.decoder(self.tgt_embed(tgt_in), state.unsqueeze(0))[0])
            return (out, None) if need_weights else out
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            step_logits, state, step_weights = self._step(tgt_in[:, t], state, enc_states, mask)
            logits.append(step_logits)
            weights.append(step_weights)
        out = torch.stack(logits, dim=1)  # T x (B, V) -> (B, T, V)
        return (out, torch.stack(weights, dim=1)) if need_weights else out

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, max_len: int, bos_id: int = BOS_ID,
                      eos_id: int = EOS_ID) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed back the most likely token until every row has emitted ``<eos>``.

        Args:
            src: ``(B, S)`` source ids, right padded.
            max_len: most tokens to generate per row.

        Returns:
            ``tokens`` ``(B, T)`` with T <= max_len (no ``<bos>``; the ``<eos>`` is kept and
            followed by ``pad_id``), and attention weights ``(B, T, S)`` or None.
        """
        max_len = require_positive_int(max_len, "max_len")
        self._check_source_values(src)
        was_training = self.training
        self.eval()
        enc_states, state, mask = self.encode(src)
        y = torch.full((src.shape[0],), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros_like(y, dtype=torch.bool)
        tokens, weights = [], []
        for _ in range(max_len):
            logits, state, step_weights = self._step(y, state, enc_states, mask)
            y = logits.argmax(dim=-1).masked_fill(done, self.pad_id)  # (B,)
            tokens.append(y)
            weights.append(step_weights)
            done = done | (y == eos_id)
            if bool(done.all()):
                break
        self.train(was_training)
        return (torch.stack(tokens, dim=1),
                torch.stack(weights, dim=1) if self.use_attention else None)


def _predict_by_length(model: Seq2SeqGRU, examples: Sequence[Example], batch_size: int,
                       bos_id: int, eos_id: int) -> dict[int, list[tuple[list[int], list[int]]]]:
    """Greedy predictions (cut at ``<eos>``) paired with targets, grouped by source length."""
    require_examples(examples, model.vocab_size)
    batch_size = require_positive_int(batch_size, "batch_size")
    device = next(model.parameters()).device
    groups: dict[int, list[Example]] = defaultdict(list)
    for src, tgt in examples:
        groups[len(src)].append((src, tgt))
    pairs: dict[int, list[tuple[list[int], list[int]]]] = {}
    for length in sorted(groups):
        group = groups[length]
        pairs[length] = []
        for start in range(0, len(group), batch_size):
            chunk = group[start:start + batch_size]
            max_len = max(len(t) for _, t in chunk) + 1  # room for <eos>
            src = pad_sequences([s for s, _ in chunk], model.pad_id).to(device)  # (B, S)
            tokens, _ = model.greedy_decode(src, max_len, bos_id=bos_id, eos_id=eos_id)
            for row, (_, tgt) in zip(tokens.tolist(), chunk, strict=True):
                cut = row.index(eos_id) if eos_id in row else len(row)
                pairs[length].append((row[:cut], list(tgt)))
    return pairs


def sequence_accuracy(model: Seq2SeqGRU, examples: Sequence[Example], batch_size: int = 256,
                      bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> dict[int, float]:
    """Exact-match accuracy of greedy decoding per source length: ``{length: fraction}``.

    A prediction counts only if it equals the target token for token and then stops.
    Chapters plot it against length to show where the fixed-size bottleneck breaks.
    """
    pairs = _predict_by_length(model, examples, batch_size, bos_id, eos_id)
    return {n: sum(p == t for p, t in rows) / len(rows) for n, rows in pairs.items()}


def token_accuracy(model: Seq2SeqGRU, examples: Sequence[Example], batch_size: int = 256,
                   bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> float:
    """Fraction of target tokens that greedy decoding gets right at their position."""
    pairs = _predict_by_length(model, examples, batch_size, bos_id, eos_id)
    rows = [row for group in pairs.values() for row in group]
    correct = sum(sum(a == b for a, b in zip(p, t, strict=False)) for p, t in rows)
    return correct / sum(len(t) for _, t in rows)

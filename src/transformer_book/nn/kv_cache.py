"""The decoder's key/value cache for incremental decoding (Vaswani et al., 2017, Section 6.1).

Decoding one token at a time, step t would re-run the decoder on the whole prefix (O(t²)
work over a sentence). Keys and values of past positions do not change, so each decoder
layer keeps them: its self-attention's grow by one position per step, its cross-attention's
(projections of the encoder output) are computed once per sentence. Beam search reorders
the self-attention entries along the chosen beams and drops finished sentences.

:class:`DecoderCache` is the teaching path: its buffers grow as decoding goes (``torch.cat``
at each step of greedy search). :class:`StaticDecoderCache` is a fast path
(``generate(..., cache="static")``): each layer's self-attention buffers are allocated
once, ``(N, h, max_length, d_k)``, and every step writes its keys and values in place at
the next position; tests prove it equal to :class:`DecoderCache` and to decoding without a
cache, and ``benchmarks/bench_fast.py`` times it against :class:`DecoderCache`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["KV", "DecoderCache", "StaticDecoderCache", "StaticKV"]


@dataclass
class KV:
    """One attention layer's cached keys and values.

    ``k, v``: ``(N, h, T, d_k)`` buffers for N rows (hypotheses, or source sentences for
    cross-attention), of which the first ``length`` positions are filled (``length <= T``);
    positions ``length ..`` are room that :meth:`reorder` leaves for the next
    :meth:`append`, so that beam search copies the cache once per step, not twice.
    """

    k: torch.Tensor
    v: torch.Tensor
    length: int

    @classmethod
    def of(cls, k: torch.Tensor, v: torch.Tensor) -> KV:
        """Keys and values ``(N, h, t, d_k)``, every position filled."""
        return cls(k, v, k.shape[2])

    @property
    def rows(self) -> int:
        """N, the rows cached."""
        return self.k.shape[0]

    def cached(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The filled positions: ``k, v (N, h, length, d_k)`` (views, no copy)."""
        return self.k[:, :, : self.length], self.v[:, :, : self.length]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new positions ``k, v (N, h, T_new, d_k)`` after the cached ones, in the
        room :meth:`reorder` left if there is enough (else by ``torch.cat``), and return
        the whole ``(N, h, length + T_new, d_k)`` pair."""
        end = self.length + k.shape[2]
        if end <= self.k.shape[2]:  # room left by reorder: write in place
            self.k[:, :, self.length : end], self.v[:, :, self.length : end] = k, v
        else:
            past_k, past_v = self.cached()
            self.k, self.v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        self.length = end
        return self.cached()

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (long ``(N',)``, repeats allowed), copied into buffers with
        room for one more position: ``(N, h, length, d_k) -> (N', h, length + 1, d_k)``."""
        self._copy_rows(index, self.length + 1)

    def _copy_rows(self, index: torch.Tensor, positions: int) -> None:
        """New buffers ``(N', h, positions, d_k)`` holding rows ``index`` of the filled
        positions (``positions >= length``)."""
        past_k, past_v = self.cached()
        shape = (index.shape[0], past_k.shape[1], positions, past_k.shape[3])
        self.k, self.v = past_k.new_empty(shape), past_v.new_empty(shape)
        torch.index_select(past_k, 0, index, out=self.k[:, :, : self.length])
        torch.index_select(past_v, 0, index, out=self.v[:, :, : self.length])

    def select(self, index: torch.Tensor) -> KV:
        """A new entry of rows ``index`` (long ``(N',)``), without room."""
        k, v = self.cached()
        return KV.of(k.index_select(0, index), v.index_select(0, index))


@dataclass
class DecoderCache:
    """Keys and values the decoder keeps between steps of incremental decoding.

    ``self_kv[i]``: layer i's self-attention :class:`KV`, ``(N, h, t, d_k)`` for the N
    hypotheses being decoded, extended by the new tokens at every call. ``cross_kv[i]``:
    layer i's cross-attention :class:`KV`, ``(B, h, S, d_k)`` for the B source sentences,
    projected from the encoder memory once (first call) and reused. Greedy decoding has
    one hypothesis per sentence (N = B); beam search has K (N = B·K), and the K hypotheses
    of a sentence share its one copy of the cross-attention keys and values.
    """

    self_kv: list[KV] = field(default_factory=list)
    cross_kv: list[KV] = field(default_factory=list)

    @property
    def length(self) -> int:
        """t, the target positions seen so far (the next token's position)."""
        return self.self_kv[0].length if self.self_kv else 0

    @property
    def batch_size(self) -> int | None:
        """N, the number of hypotheses cached (``None`` before the first call)."""
        return self.self_kv[0].rows if self.self_kv else None

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new tokens' ``k, v (N, h, T_new, d_k)`` to layer ``layer``'s
        self-attention cache and return the whole ``(N, h, t + T_new, d_k)`` pair."""
        if layer == len(self.self_kv):  # first call: nothing cached yet
            self.self_kv.append(KV.of(k, v))
            return k, v
        return self.self_kv[layer].append(k, v)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep hypotheses ``index`` (long ``(N',)``) of the self-attention cache (beam
        search: each new hypothesis continues the one it extends), with room for the next
        position.

        Cross-attention k/v are left alone: they depend only on the source sentence, and
        beam search reorders hypotheses within a sentence, never across sentences.
        """
        for entry in self.self_kv:
            entry.reorder(index)

    def select(self, sentences: torch.Tensor, hypotheses: torch.Tensor | None = None) -> None:
        """Keep source sentences ``sentences`` (long ``(B',)``) of the cross-attention
        cache and their hypotheses ``hypotheses`` (long ``(N',)``; default ``sentences``,
        one hypothesis per sentence) of the self-attention cache."""
        self.reorder(sentences if hypotheses is None else hypotheses)
        self.cross_kv = [entry.select(sentences) for entry in self.cross_kv]


@dataclass
class StaticKV(KV):
    """A :class:`KV` whose buffers always span ``capacity`` positions, ``(N, h, capacity,
    d_k)``, allocated once: :meth:`append` writes in place at positions ``length ..``, and
    :meth:`reorder` copies the filled positions into a second pair of buffers of that size,
    kept from one reorder to the next (the two pairs take turns: nothing is allocated while
    beam search goes on). Appending past ``capacity`` falls back to :class:`KV`'s
    ``torch.cat`` (never needed when ``capacity`` is the longest output)."""

    capacity: int = 0
    spare: tuple[torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def allocate(cls, k: torch.Tensor, v: torch.Tensor, capacity: int) -> StaticKV:
        """Buffers of ``max(capacity, t)`` positions holding ``k, v (N, h, t, d_k)`` first."""
        n, h, t, d = k.shape
        shape = (n, h, max(capacity, t), d)  # (N, h, capacity, d_k)
        entry = cls(k.new_empty(shape), v.new_empty(shape), 0, capacity=shape[2])
        entry.append(k, v)
        return entry

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (long ``(N',)``): ``(N, h, capacity, d_k) -> (N', h,
        capacity, d_k)``, the filled positions copied into the spare buffers, which become
        the cache (and the cache's, the spare ones)."""
        if self.length + 1 > self.k.shape[2]:  # past capacity: KV's growing buffers
            self._copy_rows(index, self.length + 1)
            return
        rows = index.shape[0]
        if self.spare is None or self.spare[0].shape[0] < rows:
            shape = (rows, *self.k.shape[1:])
            self.spare = (self.k.new_empty(shape), self.v.new_empty(shape))
        k, v = self.spare[0][:rows], self.spare[1][:rows]
        past_k, past_v = self.cached()
        torch.index_select(past_k, 0, index, out=k[:, :, : self.length])
        torch.index_select(past_v, 0, index, out=v[:, :, : self.length])
        self.spare, self.k, self.v = (self.k, self.v), k, v


@dataclass
class StaticDecoderCache(DecoderCache):
    """A :class:`DecoderCache` whose self-attention keys and values sit in buffers of
    ``max_length`` positions (:class:`StaticKV`), allocated at the first call and written in
    place by position after it: no buffer grows, no past position is copied while
    decoding (only when :meth:`select` drops finished sentences). ``max_length``: the most
    target positions decoded, ``<bos>`` included (greedy search: its longest output + 1)."""

    max_length: int = 1

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`DecoderCache.extend`, with the first call allocating the full buffers."""
        if layer == len(self.self_kv):  # first call: allocate max_length positions
            entry = StaticKV.allocate(k, v, self.max_length)
            self.self_kv.append(entry)
            return entry.cached()
        return self.self_kv[layer].append(k, v)

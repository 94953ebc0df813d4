"""The decoder's key/value cache for incremental decoding (Vaswani et al., 2017, Section 6.1).

Decoding one token at a time, step t would re-run the decoder on the whole prefix (O(t²)
work over a sentence). Keys and values of past positions do not change, so each decoder
layer keeps them: its self-attention's grow by one position per step, its cross-attention's
(projections of the encoder output) are computed once per sentence. Beam search reorders
the self-attention entries along the chosen beams and drops finished sentences.
"""

from __future__ import annotations

import torch

__all__ = ["KV", "DecoderCache"]

KV = tuple[torch.Tensor, torch.Tensor]


class DecoderCache:
    """Keys and values the decoder keeps between steps of incremental decoding.

    ``self_kv[i]``: layer i's self-attention ``(k, v)``, each ``(N, h, t, d_k)`` for the N
    hypotheses being decoded, extended by the new tokens at every call. ``cross_kv[i]``:
    layer i's cross-attention ``(k, v)``, each ``(B, h, S, d_k)`` for the B source
    sentences, projected from the encoder memory once (first call) and reused. Greedy
    decoding has one hypothesis per sentence (N = B); beam search has K (N = B·K), and the
    K hypotheses of a sentence share its one copy of the cross-attention keys and values.
    ``length`` is t, the number of target positions seen so far (the position offset).

    Beam search reorders the cache at every step, and appending copies it too
    (``torch.cat``). :meth:`reorder` therefore copies into tensors with room for one more
    position, which the next :meth:`extend` fills in place: one copy per step, not two.
    """

    def __init__(self) -> None:
        self._self: list[list] = []  # per layer: [k, v, t], k and v (N, h, t + room, d_k)
        self.cross_kv: list[KV] = []

    @property
    def self_kv(self) -> list[KV]:
        """Each layer's ``(k, v)``, ``(N, h, t, d_k)``."""
        return [(k[:, :, :t], v[:, :, :t]) for k, v, t in self._self]

    @self_kv.setter
    def self_kv(self, pairs: list[KV]) -> None:
        self._self = [[k, v, k.shape[2]] for k, v in pairs]

    @property
    def length(self) -> int:
        return self._self[0][2] if self._self else 0

    @property
    def batch_size(self) -> int | None:
        """N, the number of hypotheses cached (``None`` before the first call)."""
        return self._self[0][0].shape[0] if self._self else None

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> KV:
        """Append the new tokens' ``k, v (N, h, T_new, d_k)`` to layer ``layer``'s
        self-attention cache and return the whole ``(N, h, t + T_new, d_k)`` pair."""
        if layer == len(self._self):  # first call: nothing cached yet
            self._self.append([k, v, k.shape[2]])
            return k, v
        entry = self._self[layer]
        past_k, past_v, t = entry
        end = t + k.shape[2]
        if end <= past_k.shape[2]:  # room left by reorder: write in place
            past_k[:, :, t:end], past_v[:, :, t:end] = k, v
        else:
            entry[0] = torch.cat([past_k[:, :, :t], k], dim=2)
            entry[1] = torch.cat([past_v[:, :, :t], v], dim=2)
        entry[2] = end
        return entry[0][:, :, :end], entry[1][:, :, :end]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep hypotheses ``index`` (long ``(N',)``) of the self-attention cache (beam
        search: each new hypothesis continues the one it extends), with room for the next
        position.

        Cross-attention k/v are left alone: they depend only on the source sentence, and
        beam search reorders hypotheses within a sentence, never across sentences.
        """
        for entry in self._self:
            t = entry[2]
            for i in (0, 1):  # (N, h, t, d_k) -> (N', h, t + 1, d_k), the last position empty
                past = entry[i][:, :, :t]
                heads, d_k = past.shape[1], past.shape[3]
                entry[i] = past.new_empty((index.shape[0], heads, t + 1, d_k))
                torch.index_select(past, 0, index, out=entry[i][:, :, :t])

    def select(self, sentences: torch.Tensor, hypotheses: torch.Tensor | None = None) -> None:
        """Keep source sentences ``sentences`` (long ``(B',)``) of the cross-attention
        cache and their hypotheses ``hypotheses`` (long ``(N',)``; default ``sentences``,
        one hypothesis per sentence) of the self-attention cache."""
        self.reorder(sentences if hypotheses is None else hypotheses)
        self.cross_kv = [(k.index_select(0, sentences), v.index_select(0, sentences))
                         for k, v in self.cross_kv]

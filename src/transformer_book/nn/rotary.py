"""Rotary position embeddings (Su et al., 2021, RoFormer): positions as rotations of the
queries and keys, a position scheme that acts inside attention.

Nothing is added to the embeddings. Each self-attention rotates every pair of features
``(x_{2i}, x_{2i+1})`` of a head's query and key at position ``m`` by the angle ``m·θ_i``,
``θ_i = base^{-2i/d_k}`` (the frequencies of Section 3.5's sinusoids)::

    (x_{2i}, x_{2i+1}) -> (x_{2i} cos mθ_i - x_{2i+1} sin mθ_i, x_{2i} sin mθ_i + x_{2i+1} cos mθ_i)

so that ``q_m · k_n`` depends on the positions only through ``m - n``: attention sees
relative positions. Cross-attention is left alone (its queries and keys are positions of two
different sentences). With a key/value cache the new keys are rotated at their own
positions before they are cached, and the new queries at theirs (``offset``).

:class:`RotaryPositions` is an entry of
:data:`~transformer_book.nn.positional.POSITIONAL_ENCODINGS` (``positional = "rotary"``):
its ``forward`` adds nothing (dropout only), its :meth:`~RotaryPositions.rotate` is what the
:class:`~transformer_book.nn.transformer.Transformer` hands its self-attention modules.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_book.util.validation import (
    checking,
    require,
    require_positive_int,
    require_probability,
)

__all__ = ["RotaryPositions", "rotate_pairs"]


def rotate_pairs(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """``x (..., T, d)`` with its feature pairs rotated by position (``offset .. offset + T -
    1``): the module docstring's formula, ``d`` even. Angles are computed in float64 and the
    result has ``x``'s dtype."""
    t, d = x.shape[-2], x.shape[-1]
    two_i = torch.arange(0, d, 2, dtype=torch.float64, device=x.device)
    theta = torch.exp(-two_i * (math.log(base) / d))  # (d/2,)
    positions = torch.arange(offset, offset + t, dtype=torch.float64, device=x.device)
    angles = positions[:, None] * theta[None, :]  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class RotaryPositions(nn.Module):
    """Rotary positions for ``max_len`` positions: ``forward(x (B, L, d_model), offset=0) ->
    dropout(x)`` (nothing added), ``rotate(q_or_k (N, h, T, d_k), offset)`` the rotation
    (:func:`rotate_pairs`; ``d_k`` even)."""

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0,
                 base: float = 10000.0) -> None:
        super().__init__()
        self.d_model = require_positive_int(d_model, "d_model")
        self.max_len = require_positive_int(max_len, "max_len")
        self.dropout = nn.Dropout(require_probability(dropout, "dropout"))
        self.base = base

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        if checking():
            require(x.ndim == 3 and x.shape[-1] == self.d_model, "x",
                    f"shape (B, L, d_model={self.d_model})", f"shape {tuple(x.shape)}")
            require(offset + x.shape[1] <= self.max_len, "x", f"at most max_len={self.max_len} "
                    "positions", f"positions up to {offset + x.shape[1]}")
        return self.dropout(x)

    def rotate(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """The heads ``x (N, h, T, d_k)`` at positions ``offset ..``, rotated."""
        if checking():
            require(x.shape[-1] % 2 == 0, "x", "heads of an even width d_k (feature pairs)",
                    f"d_k = {x.shape[-1]}")
        return rotate_pairs(x, offset, self.base)

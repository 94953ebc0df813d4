"""Positional encodings (Vaswani et al., 2017, Section 3.5).

"Since our model contains no recurrence and no convolution, in order for the model to make
use of the order of the sequence, we must inject some information about the relative or
absolute position of the tokens in the sequence. To this end, we add 'positional encodings'
to the input embeddings at the bottoms of the encoder and decoder stacks."

Every kind of positional encoding is a module ``forward(x (B, L, d_model), offset=0) ->
(B, L, d_model)`` that adds a position-dependent vector to each embedding, then dropout. The
kinds live in one registry, :data:`POSITIONAL_ENCODINGS` (name -> builder ``(d_model,
max_len, dropout) -> module``), and :func:`positional_encoding` builds one by name: the
Transformer (``TransformerConfig.positional``) and the toy models of Part II both build their
positions through it. A new kind is one line::

    POSITIONAL_ENCODINGS.register("mine", MyPositionalEncoding)  # (d_model, max_len, dropout)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from transformer_book.util.registry import Registry
from transformer_book.util.validation import (
    checking,
    is_integer,
    is_real,
    require,
    require_int,
    require_positive_int,
    require_positive_number,
    require_probability,
    require_tensor,
)

__all__ = [
    "POSITIONAL_ENCODINGS",
    "FourierPositionalEncoding",
    "LearnedPositionalEmbedding",
    "NoPositions",
    "SinusoidalPositionalEncoding",
    "positional_encoding",
    "relative_offset_matrix",
    "require_positional_kind",
    "sinusoidal_encoding",
]


def _require_even_d_model(d_model: int) -> int:
    require_positive_int(d_model, "d_model")
    require(d_model % 2 == 0, "d_model", "an even integer (sin/cos pairs)", d_model)
    return d_model


def _require_base(base: float) -> float:
    ok = is_real(base) and base > 1
    require(ok, "base", "a number > 1", repr(base))
    return float(base)


def _frequencies(d_model: int, base: float, dtype: torch.dtype, device=None) -> torch.Tensor:
    """``ω_i = 1 / base^{2i/d_model}`` for ``i = 0 .. d_model/2 - 1``: shape ``(d_model / 2,)``."""
    two_i = torch.arange(0, d_model, 2, dtype=dtype, device=device)
    return torch.exp(-two_i * (math.log(base) / d_model))


def sinusoidal_encoding(
    length: int,
    d_model: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Section 3.5: ``PE(pos, 2i) = sin(pos / 10000^{2i/d_model})``, ``PE(pos, 2i+1) = cos(...)``.

    "Each dimension of the positional encoding corresponds to a sinusoid. The wavelengths
    form a geometric progression from 2π to 10000 · 2π." Returns ``(length, d_model)``;
    ``d_model`` must be even.
    """
    require_positive_int(length, "length")
    _require_even_d_model(d_model)
    base = _require_base(base)
    pos = torch.arange(length, dtype=torch.float64, device=device).unsqueeze(1)  # (L, 1)
    angles = pos * _frequencies(d_model, base, torch.float64, device)  # (L, 1)·(d/2,) -> (L, d/2)
    # (L, d/2) twice -> (L, d/2, 2) -> (L, d): sin in even columns, cos in odd ones
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(length, d_model)
    return pe.to(dtype)


def relative_offset_matrix(
    k: int | float, d_model: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """The linear map ``M_k`` with ``PE(pos + k) = M_k @ PE(pos)`` for every ``pos``.

    Section 3.5: "We chose this function because we hypothesized it would allow the model to
    easily learn to attend by relative positions, since for any fixed offset k, PE_{pos+k} can
    be represented as a linear function of PE_pos." ``M_k`` is block diagonal, ``(d_model,
    d_model)``, each ``2 × 2`` block the rotation ``[[cos ω_i k, sin ω_i k], [-sin ω_i k,
    cos ω_i k]]`` acting on ``(sin ω_i pos, cos ω_i pos)``. For rows of a ``(L, d_model)``
    encoding: ``PE[pos + k] = PE[pos] @ M_k.T``.
    """
    require(is_real(k), "k", "a number (offset)",
            repr(k))
    _require_even_d_model(d_model)
    angles = float(k) * _frequencies(d_model, _require_base(base), torch.float64)  # (d/2,)
    c, s = angles.cos(), angles.sin()
    # four (d/2,) -> (d/2, 2, 2) rotation blocks
    blocks = torch.stack((torch.stack((c, s), -1), torch.stack((-s, c), -1)), dim=-2)
    return torch.block_diag(*blocks.unbind(0)).to(dtype)  # (d_model, d_model)


class _FixedTable(nn.Module):
    """A fixed table ``pe (max_len, d_model)`` added to the embeddings, then dropout:
    ``forward(x (B, L, d_model), offset=0)`` adds positions ``offset .. offset + L - 1``
    (``offset`` serves incremental decoding). Subclasses fill ``pe``."""

    pe: torch.Tensor
    d_model: int
    max_len: int
    dropout: nn.Dropout

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        if checking():  # metadata only, and not while tracing
            _check_positions(x, self.d_model, self.max_len, offset)
        pe = self.pe[offset : offset + x.shape[1]].to(x.dtype)  # (L, d_model)
        return self.dropout(x + pe)  # (B, L, d_model) + (L, d_model) broadcasts over B


class SinusoidalPositionalEncoding(_FixedTable):
    """Adds :func:`sinusoidal_encoding` to embeddings, then dropout (Section 5.4: "we apply
    dropout to the sums of the embeddings and the positional encodings").

    The table ``pe (max_len, d_model)`` is a non-persistent buffer, not a parameter.
    ``forward(x (B, L, d_model), offset=0)`` -> ``(B, L, d_model)``, adding positions
    ``offset .. offset + L - 1`` (``offset`` serves incremental decoding).
    """

    pe: torch.Tensor

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model = _require_even_d_model(d_model)
        self.max_len = require_positive_int(max_len, "max_len")
        self.dropout = nn.Dropout(require_probability(dropout, "dropout"))
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)


class LearnedPositionalEmbedding(nn.Module):
    """Learned positions (Section 3.5: "We also experimented with using learned positional
    embeddings instead, and found that the two versions produced nearly identical results",
    Table 3 row (E)): a trainable ``(max_len, d_model)`` table.

    Same interface as :class:`SinusoidalPositionalEncoding`: ``forward(x (B, L, d_model),
    offset=0)`` -> ``x + table[offset : offset + L]``, then dropout.
    """

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.max_len = require_positive_int(max_len, "max_len")
        self.d_model = require_positive_int(d_model, "d_model")
        dropout = require_probability(dropout, "dropout")
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        if checking():  # metadata only, and not while tracing
            _check_positions(x, self.d_model, self.max_len, offset)
        pe = self.embedding.weight[offset : offset + x.shape[1]]  # (L, d_model)
        return self.dropout(x + pe)  # (B, L, d_model) + (L, d_model) broadcasts over B


class FourierPositionalEncoding(_FixedTable):
    """Random Fourier features of the position (Rahimi & Recht, 2007, "Random Features for
    Large-Scale Kernel Machines"; Tancik et al., 2020, "Fourier Features Let Networks Learn
    High Frequency Functions in Low Dimensional Domains", whose ``γ(v) = [cos 2πBv, sin 2πBv]``
    with ``B ~ N(0, σ²)`` this is for the one coordinate ``v = pos``).

    The same table as :func:`sinusoidal_encoding`, ``PE(pos, 2i) = sin(ω_i pos)``,
    ``PE(pos, 2i+1) = cos(ω_i pos)``, but the ``d_model / 2`` angular frequencies ``ω_i`` are
    drawn from ``N(0, scale²)`` (radians per position) instead of Section 3.5's geometric
    progression. It keeps what Section 3.5 chose sinusoids for: ``PE(pos + k)`` is a rotation
    of ``PE(pos)`` (a linear function of it) for every offset ``k``; and by Bochner's theorem
    the dot product of two positions depends on their offset alone, ``PE(p) · PE(q) =
    Σ_i cos(ω_i (p - q)) ≈ (d_model / 2) · exp(-scale² (p - q)² / 2)``, a Gaussian kernel
    about ``1 / scale`` positions wide.

    The frequencies come from a generator seeded with ``seed`` (the global random state is
    not touched), so every model of one ``d_model`` has the same table and, like the
    sinusoids, it is a non-persistent buffer: checkpoints do not store it.
    ``forward(x (B, L, d_model), offset=0)`` -> ``x + PE[offset : offset + L]``, then dropout.
    """

    pe: torch.Tensor
    frequencies: torch.Tensor

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0, *, scale: float = 1.0,
                 seed: int = 0) -> None:
        super().__init__()
        self.d_model = _require_even_d_model(d_model)
        self.max_len = require_positive_int(max_len, "max_len")
        self.dropout = nn.Dropout(require_probability(dropout, "dropout"))
        scale = require_positive_number(scale, "scale")
        generator = torch.Generator().manual_seed(require_int(seed, "seed", minimum=0))
        omega = torch.randn(d_model // 2, generator=generator, dtype=torch.float64) * scale
        self.register_buffer("frequencies", omega.float(), persistent=False)  # (d_model / 2,)
        angles = torch.arange(max_len, dtype=torch.float64).unsqueeze(1) * omega  # (L, d/2)
        # (L, d/2) twice -> (L, d/2, 2) -> (L, d): sin in even columns, cos in odd ones
        pe = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(max_len, d_model)
        self.register_buffer("pe", pe.float(), persistent=False)


class NoPositions(nn.Module):
    """No positions: ``forward(x (B, L, d_model), offset=0) -> dropout(x)``.

    Without positions attention is permutation-equivariant and a model sees its input as a
    bag of tokens (chapter 08 shows what that costs; Table 3's row (E) compares only the two
    kinds above).
    """

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model = require_positive_int(d_model, "d_model")
        self.max_len = require_positive_int(max_len, "max_len")
        self.dropout = nn.Dropout(require_probability(dropout, "dropout"))

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        if checking():  # metadata only, and not while tracing
            _check_positions(x, self.d_model, self.max_len, offset)
        return self.dropout(x)


#: Every positional encoding by name: a builder ``(d_model, max_len, dropout) -> module``
#: whose ``forward(x (B, L, d_model), offset=0)`` returns ``(B, L, d_model)``. The one list
#: of kinds: ``TransformerConfig.positional`` and the toy models accept exactly these keys.
#: Open to outside packages (entry-point group ``transformer_book.positional_encodings``, or a
#: ``--plugin`` module calling ``POSITIONAL_ENCODINGS.register``).
POSITIONAL_ENCODINGS: Registry[Callable[[int, int, float], nn.Module]] = Registry(
    "positional encoding", "transformer_book.positional_encodings", {
        "sinusoidal": SinusoidalPositionalEncoding,  # Section 3.5
        "learned": LearnedPositionalEmbedding,  # Table 3, row (E)
        "fourier": FourierPositionalEncoding,  # random Fourier features (Tancik et al., 2020)
        "none": NoPositions,  # a bag of tokens (chapter 08)
        "rotary": "transformer_book.nn.rotary:RotaryPositions",  # Su et al. (2021)
    })


def require_positional_kind(kind: object, argument: str = "kind") -> str:
    """Return ``kind`` if it names a registered positional encoding, else raise a
    ``BookError`` naming ``argument`` and listing the kinds of :data:`POSITIONAL_ENCODINGS`."""
    require(isinstance(kind, str), argument,
            f"one of {sorted(POSITIONAL_ENCODINGS.names())}", repr(kind))
    assert isinstance(kind, str), "checked just above"
    POSITIONAL_ENCODINGS.get(kind, argument)
    return kind


def positional_encoding(kind: str, d_model: int, max_len: int,
                        dropout: float = 0.0) -> nn.Module:
    """The positional encoding ``kind`` of :data:`POSITIONAL_ENCODINGS` for ``max_len``
    positions of width ``d_model``, with ``dropout`` on the sums (Section 5.4: "we apply
    dropout to the sums of the embeddings and the positional encodings").

    The module maps ``x (B, L, d_model)`` (``offset + L <= max_len``) to ``(B, L, d_model)``.
    An unknown ``kind`` raises a ``BookError`` listing the registered kinds.
    """
    return POSITIONAL_ENCODINGS.get(require_positional_kind(kind))(d_model, max_len, dropout)


def _check_positions(x: torch.Tensor, d_model: int, max_len: int, offset: int) -> None:
    require_tensor(x, "x", ndim=3, floating=True)
    require(x.shape[-1] == d_model, "x", f"shape (B, L, d_model={d_model})",
            f"shape {tuple(x.shape)}")
    require(is_integer(offset) and offset >= 0, "offset",
            "an integer >= 0", repr(offset))
    require(offset + x.shape[1] <= max_len, "x",
            f"offset + length <= max_len={max_len}",
            f"length {x.shape[1]} at offset {offset} (up to position {offset + x.shape[1]})")

"""What the heads of a trained Transformer attend to: by offset or by content (chapters 06, 07).

Section 3.2.2 of the paper: "Multi-head attention allows the model to jointly attend to
information from different representation subspaces at different positions", and its
appendix shows heads that "appear to exhibit behavior related to the syntactic and semantic
structure of the sentences". This module measures two kinds of head on real sentences,
read-only (it calls the model's teaching path, :meth:`Transformer.encode` /
:meth:`Transformer.decode` with ``need_weights``, and changes nothing):

- an **offset head** puts its weight at a fixed distance from the query (the previous
  token, the next one): :func:`offset_mass` gives the mean weight at each offset;
- a **content head** puts its weight on particular tokens, wherever they are.

To tell them apart, :func:`head_roles` fits two one-table predictors of a head's weights on
one half of the sentences and scores them on the other half: the *offset predictor*
``q(j | i) ∝ m(j - i)`` (one number per offset) and the *content predictor* ``q(j | i) ∝
s(x_j)`` (one number per key token, how much weight that token draws relative to a uniform
row). A predictor's score is the overlap ``Σ_j min(p(j | i), q(j | i))`` of the real row and
the predicted one, averaged over the held-out query rows: 1 is a perfect prediction.

Three controls rule out the plain explanations of a good fit: the *position predictor*
``q(j | i) ∝ a(j)`` (one number per absolute key position), the *first-key predictor* (all
weight on key 0, the decoder's ``<bos>``) and the *self predictor* (all weight on the query's
own position). A head whose weights the first key or its own position explain is a sink or
a self-reader, whatever the offset or content fit says; :data:`CONTROLS` names them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from transformer_book.util.validation import require, require_tensor

__all__ = ["CONTROLS", "allowed_keys", "head_roles", "offset_mass", "self_attention_maps"]

# The fits that an offset or a content head must beat (besides "uniform_fit").
CONTROLS = ("position_fit", "first_key_fit", "self_fit")


def self_attention_maps(model: nn.Module, src_ids: torch.Tensor,
                        tgt_in: torch.Tensor | None = None) -> dict[str, list[torch.Tensor]]:
    """Per-head self-attention weights of a trained encoder-decoder, without gradients.

    ``src_ids (B, S)`` (right-padded) -> ``{"encoder": [(B, h, S, S)] * N}``; with the
    decoder's input ``tgt_in (B, T)`` also ``"decoder"`` (masked self-attention, ``(B, h, T,
    T)`` per layer) and ``"cross"`` (``(B, h, T, S)`` per layer). ``model`` is a
    :class:`~transformer_book.nn.transformer.Transformer`; its train/eval mode is respected.
    """
    require(hasattr(model, "encode") and hasattr(model, "decode"), "model",
            "a Transformer (with encode and decode)", type(model).__name__)
    with torch.no_grad():
        memory, encoder = model.encode(src_ids, need_weights=True)
        maps = {"encoder": encoder}
        if tgt_in is not None:
            _, decoder = model.decode(tgt_in, memory, src_ids, need_weights=True)
            maps["decoder"], maps["cross"] = decoder["self"], decoder["cross"]
    return maps


def allowed_keys(lengths: torch.Tensor, size: int, causal: bool = False) -> torch.Tensor:
    """``(B, size, size)`` bool: query ``i`` may attend key ``j`` (both real, ``j <= i`` when
    ``causal``). ``lengths (B,)`` are the real lengths of right-padded sequences."""
    require_tensor(lengths, "lengths", ndim=1)
    require(bool((lengths >= 1).all()) and int(lengths.max()) <= size, "lengths",
            f"lengths from 1 to {size}", lengths.tolist())
    real = torch.arange(size, device=lengths.device) < lengths[:, None]  # (B, size)
    allowed = real[:, :, None] & real[:, None, :]  # (B, size, size)
    if causal:
        allowed &= torch.ones(size, size, dtype=torch.bool, device=lengths.device).tril()
    return allowed


def offset_mass(weights: torch.Tensor, lengths: torch.Tensor, offsets: Sequence[int],
                causal: bool = False) -> torch.Tensor:
    """Mean weight a head gives the key at ``i + offset``, per head: ``(h, len(offsets))``.

    ``weights (B, h, L, L)`` of right-padded sequences of real ``lengths (B,)``. The mean
    runs over the sentences and over the queries ``i`` whose key ``i + offset`` exists (is
    real, and not in the future when ``causal``); an offset no query has gives 0.
    """
    require_tensor(weights, "weights", ndim=4, floating=True)
    size = weights.shape[-1]
    require(weights.shape[-2] == size, "weights", "shape (B, h, L, L) (self-attention)",
            f"shape {tuple(weights.shape)}")
    allowed = allowed_keys(lengths, size, causal)  # (B, L, L)
    columns = []
    for offset in offsets:
        require(isinstance(offset, int) and abs(offset) < size, "offsets",
                f"integers with |offset| < L={size}", list(offsets))
        keep = allowed.diagonal(offset=offset, dim1=-2, dim2=-1)  # (B, L - |offset|)
        diagonal = weights.diagonal(offset=offset, dim1=-2, dim2=-1)  # (B, h, L - |offset|)
        count = keep.sum()
        total = (diagonal * keep[:, None]).sum(dim=(0, 2))  # (h,)
        columns.append(total / count if count > 0 else torch.zeros_like(total))
    return torch.stack(columns, dim=-1)  # (h, len(offsets))


def _overlap(weights: torch.Tensor, predicted: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Mean over real query rows of Σ_j min(p, q), per head: ``(h,)``."""
    predicted = predicted * allowed[:, None]
    predicted = predicted / predicted.sum(-1, keepdim=True).clamp_min(1e-12)
    rows = torch.minimum(weights * allowed[:, None], predicted).sum(-1)  # (B, h, L)
    real_rows = allowed.any(-1)  # (B, L)
    return (rows * real_rows[:, None]).sum(dim=(0, 2)) / real_rows.sum()


def _offset_table(weights: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Mean weight at every offset -(L-1)..(L-1), per head: ``(h, 2L - 1)`` (tiny floor)."""
    size = weights.shape[-1]
    columns = []
    for offset in range(1 - size, size):
        keep = allowed.diagonal(offset=offset, dim1=-2, dim2=-1)
        diagonal = weights.diagonal(offset=offset, dim1=-2, dim2=-1)
        columns.append((diagonal * keep[:, None]).sum(dim=(0, 2)) / keep.sum().clamp_min(1))
    return torch.stack(columns, dim=-1).clamp_min(1e-6)


def _content_table(weights: torch.Tensor, ids: torch.Tensor, allowed: torch.Tensor,
                   vocab_size: int) -> torch.Tensor:
    """Mean weight each key token draws, relative to a uniform row: ``(h, vocab_size)``;
    tokens never seen as keys get 1 (uniform)."""
    keys_per_row = allowed.sum(-1, keepdim=True).clamp_min(1)  # (B, L, 1)
    relative = weights * keys_per_row[:, None]  # (B, h, L, L): 1 = a uniform row's weight
    key_ids = ids[:, None, :].expand_as(allowed)[allowed]  # (M,)
    picked = relative.permute(1, 0, 2, 3)[:, allowed]  # (h, M)
    heads = weights.shape[1]
    total = torch.zeros(heads, vocab_size, dtype=weights.dtype, device=weights.device)
    total.index_add_(1, key_ids, picked)
    count = torch.zeros(vocab_size, dtype=weights.dtype, device=weights.device)
    count.index_add_(0, key_ids, torch.ones_like(key_ids, dtype=weights.dtype))
    return torch.where(count > 0, total / count.clamp_min(1), torch.ones_like(total))


def head_roles(weights: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor,
               vocab_size: int, causal: bool = False) -> dict[str, torch.Tensor]:
    """How well offsets and how well key contents predict each head's weights, held out.

    ``weights (B, h, L, L)`` of the right-padded token ``ids (B, L)`` with real ``lengths
    (B,)``. Both predictors (module docstring) are fitted on the first half of the
    sentences and scored on the second half. Returns ``{"offset_fit": (h,), "content_fit":
    (h,)}`` (overlaps in [0, 1]), ``"uniform_fit": (h,)``, the score of a uniform row, the
    baseline that neither predictor should fall below, and the :data:`CONTROLS`
    (``"position_fit"``, ``"first_key_fit"``, ``"self_fit"``, each ``(h,)``).
    """
    require_tensor(ids, "ids", ndim=2)
    require(weights.ndim == 4 and weights.shape[0] == ids.shape[0] >= 2
            and weights.shape[-1] == ids.shape[1], "weights",
            f"shape (B, h, L, L) with B >= 2 and L matching ids {tuple(ids.shape)}",
            f"shape {tuple(weights.shape)}")
    allowed = allowed_keys(lengths, ids.shape[1], causal)
    half = ids.shape[0] // 2
    fit, test = slice(0, half), slice(half, None)
    size = ids.shape[1]
    table = _offset_table(weights[fit], allowed[fit])  # (h, 2L - 1)
    distance = torch.arange(size)[None, :] - torch.arange(size)[:, None] + size - 1  # j - i
    offset_guess = table[:, distance][None]  # (1, h, L, L)
    salience = _content_table(weights[fit], ids[fit], allowed[fit], vocab_size)  # (h, V)
    content_guess = salience[:, ids[test]].permute(1, 0, 2)[:, :, None, :]  # (B', h, 1, L)
    test_weights, test_allowed = weights[test], allowed[test]
    fit_allowed = allowed[fit]
    by_position = (weights[fit] * fit_allowed[:, None]).sum(dim=(0, 2))  # (h, L)
    rows_reaching = fit_allowed.sum(dim=(0, 1)).clamp_min(1)  # (L,): rows that may read key j
    position_guess = (by_position / rows_reaching).clamp_min(1e-6)[None, :, None, :]
    first_key = torch.zeros(size, dtype=weights.dtype, device=weights.device)
    first_key[0] = 1.0
    itself = torch.eye(size, dtype=weights.dtype, device=weights.device)
    return {
        "offset_fit": _overlap(test_weights, offset_guess.expand_as(test_weights), test_allowed),
        "position_fit": _overlap(test_weights, position_guess.expand_as(test_weights),
                                 test_allowed),
        "first_key_fit": _overlap(test_weights, first_key.expand_as(test_weights),
                                  test_allowed),
        "self_fit": _overlap(test_weights, itself.expand_as(test_weights), test_allowed),
        "content_fit": _overlap(test_weights, content_guess.expand_as(test_weights),
                                test_allowed),
        "uniform_fit": _overlap(test_weights, torch.ones_like(test_weights), test_allowed),
    }

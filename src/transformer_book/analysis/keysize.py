"""Table 3, row (B) of *Attention Is All You Need* (Vaswani et al., 2017): a smaller key size.

Row (B) shrinks the key size d_k while h and d_v stay fixed. The package's model ties
d_k = d_v = d_model / h, so :func:`restrict_key_size` keeps only the first ``d_k`` query and
key dimensions of every head (a fixed 0/1 mask on W^Q and W^K) and rescales the queries so
the scores are divided by √d_k of the *reduced* size, exactly as in a model built with the
smaller d_k. The ablations (:mod:`transformer_book.analysis.ablation`) use it.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils import parametrize

from transformer_book.nn.attention import MultiHeadAttention
from transformer_book.util.validation import require, require_int

__all__ = ["KeySizeMask", "restrict_key_size"]


class KeySizeMask(nn.Module):
    """Parametrization of a packed ``in_proj`` weight ``(3·d_model, d_model)`` or bias
    ``(3·d_model,)``: each head keeps the first ``d_k`` of its query and key rows.

    Kept query rows are multiplied by √(d_head / d_k), so that the attention's division by
    √d_head becomes a division by √d_k (Section 3.2.1). Value rows are untouched (d_v stays
    d_model / h), as in Table 3, row (B).
    """

    def __init__(self, d_model: int, num_heads: int, d_k: int) -> None:
        super().__init__()
        d_head = d_model // num_heads
        require_int(d_k, "d_k", minimum=1, maximum=d_head)  # at most d_model / h
        keep = torch.zeros(num_heads, d_head)  # (h, d_head): 1 for the kept dimensions
        keep[:, :d_k] = 1.0
        keep = keep.reshape(d_model)  # (h, d_head) -> (d_model,), head-major like the rows
        scale = torch.cat([keep * math.sqrt(d_head / d_k), keep, torch.ones(d_model)])
        self.register_buffer("scale", scale)  # (3·d_model,): [Q rows; K rows; V rows]

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        if weight.ndim == 2:  # (3·d_model, d_model): scale whole rows
            return weight * self.scale.to(weight.dtype).unsqueeze(1)
        return weight * self.scale.to(weight.dtype)  # (3·d_model,)


def restrict_key_size(model: nn.Module, d_k: int) -> int:
    """Give every :class:`~transformer_book.nn.attention.MultiHeadAttention` in ``model``
    queries and keys of ``d_k`` dimensions per head (Table 3, row (B)), in place.

    Returns the number of parameters that no longer influence the output (the masked query
    and key rows), so ``count_parameters(model) - returned`` is the size of a model built
    with the smaller d_k.
    """
    modules = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    require(bool(modules), "model", "a module containing MultiHeadAttention layers",
            type(model).__name__)
    unused = 0
    for m in modules:
        mask = KeySizeMask(m.d_model, m.num_heads, d_k).to(m.in_proj.weight.device)
        parametrize.register_parametrization(m.in_proj, "weight", mask)
        dropped = 2 * m.num_heads * (m.d_k - d_k)  # query and key rows removed per module
        unused += dropped * m.d_model
        if m.in_proj.bias is not None:
            parametrize.register_parametrization(m.in_proj, "bias", mask)
            unused += dropped
    return unused

"""Attention pooling: Nadaraya–Watson kernel regression, the oldest form of attention
(Nadaraya, 1964; Watson, 1964), which chapter 04 starts from.

The output for a query is a weighted average of the values, each weighted by how close its
key is to the query under a Gaussian kernel. The weights are a softmax over the keys, as in
Section 3.2's attention, only with a fixed similarity instead of a learned one.
:func:`attention_pooling` has a fixed bandwidth; :class:`NadarayaWatson` learns the kernel
width.
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_book.util.validation import (
    require,
    require_number,
    require_positive_number,
    require_tensor,
)

__all__ = ["NadarayaWatson", "attention_pooling"]


def _nadaraya_watson(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: torch.Tensor | float
) -> tuple[torch.Tensor, torch.Tensor]:
    require_tensor(queries, "queries", ndim=1, floating=True)
    require_tensor(keys, "keys", ndim=1, floating=True)
    require_tensor(values, "values", ndim=(1, 2), floating=True)
    require(
        values.shape[0] == keys.shape[0], "values", f"{keys.shape[0]} rows (one per key)",
        f"shape {tuple(values.shape)}",
    )
    # (m,) -> (m, 1) minus (n,) -> (1, n) = (m, n) differences
    diffs = (queries.unsqueeze(1) - keys.unsqueeze(0)) * scale
    weights = torch.softmax(-(diffs**2) / 2, dim=-1)  # (m, n), rows sum to 1
    return weights @ values, weights  # (m,) or (m, d)


def attention_pooling(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bandwidth: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nadaraya–Watson kernel regression: attention with a fixed Gaussian kernel.

    ``f(q) = Σ_i softmax_i(-(q - k_i)² / (2σ²)) v_i`` with ``σ = bandwidth``: the output is a
    weighted average of the values, each weighted by how close its key is to the query.

    Shapes: ``queries (m,)``, ``keys (n,)``, ``values (n,)`` or ``(n, d)``;
    returns ``output (m,)`` or ``(m, d)`` and ``weights (m, n)`` whose rows sum to one.
    """
    bandwidth = require_positive_number(bandwidth, "bandwidth")
    return _nadaraya_watson(queries, keys, values, 1.0 / bandwidth)


class NadarayaWatson(nn.Module):
    """Attention pooling with a learnable kernel width ``w``: kernel ``exp(-((q - k)·w)²/2)``.

    ``forward(queries (m,), keys (n,), values (n,) or (n, d))`` returns ``(output, weights
    (m, n))`` like :func:`attention_pooling` with ``bandwidth = 1 / w``.
    """

    def __init__(self, init_w: float = 1.0) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(require_number(init_w, "init_w")))

    def forward(
        self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _nadaraya_watson(queries, keys, values, self.w)

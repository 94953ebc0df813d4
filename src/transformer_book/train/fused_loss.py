"""The training loss's fast path: the generator and label-smoothed cross-entropy in one pass.

The plain path (:func:`~transformer_book.train.objective.label_smoothed_cross_entropy` on
``model(src, tgt)``) builds the logits ``(N, V)`` of every target position, padding
included, then their log-softmax ``(N, V)``, and autograd keeps both for the backward, which
walks them again (log-softmax's backward, then the generator's). With the small preset's
vocabulary of 8,000 and a batch of ~4,500 target tokens, each of those tensors is ~140 MB.

:func:`fused_label_smoothed_loss` takes the decoder's last states instead
(:meth:`~transformer_book.nn.transformer.Transformer.hidden`) and, in chunks of ``rows``
positions that are not padding, computes the logits ``z = h Wᵀ + b``, the loss of Section
5.4 per position,

    loss = logsumexp(z) - (1 - ε) · z[y] - ε · mean_v z[v],

which is ``(1 - ε) · (-log p[y]) + ε · mean_v(-log p[v])``, and at once its gradient
``∂loss/∂z = softmax(z) - (1 - ε) · onehot(y) - ε / V``, pushed through the generator
(``∂/∂h = g W``, ``∂/∂W = gᵀ h``, ``∂/∂b = Σ g``). Only the chunk's ``(rows, V)`` block
exists at a time; the backward then only scales the gradients it kept. The matrix products
are those of the plain path (none is added, those of padding are skipped). Under autocast
they run in autocast's dtype, the softmax and the loss in float32, and the weight's gradient
is summed in float32, as autograd sums it into a float32 ``.grad``.

``tests/test_fused_loss.py`` proves it equal to the plain path in float64 (loss and every
gradient, with padding, a bias and tied embeddings); ``benchmarks/bench_fast.py`` times it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.util.validation import (
    require,
    require_number,
    require_positive_int,
    require_tensor,
)

__all__ = ["DEFAULT_ROWS", "fused_label_smoothed_loss"]

#: Positions per chunk: a (512, 8000) float32 block is 16 MB.
DEFAULT_ROWS = 512


def fused_label_smoothed_loss(hidden: torch.Tensor, generator: nn.Linear, targets: torch.Tensor,
                              smoothing: float, ignore_index: int, *,
                              rows: int = DEFAULT_ROWS) -> torch.Tensor:
    """``label_smoothed_cross_entropy(generator(hidden), targets, smoothing, ignore_index,
    reduction="sum")``, without the ``(N, V)`` logits (see the module docstring).

    Args:
        hidden: ``(B, T, d_model)`` decoder states (or ``(N, d_model)``).
        generator: the ``nn.Linear(d_model, V)`` output projection.
        targets: ``(B, T)`` (or ``(N,)``) ids; ``ignore_index`` (padding) counts nothing.
        smoothing: ε_ls in [0, 1].
        ignore_index: the padding id.
        rows: positions per chunk.

    Returns:
        The summed loss, a float32 (float64 for float64 inputs) scalar.
    """
    require_tensor(hidden, "hidden", ndim=(2, 3), floating=True)
    require_tensor(targets, "targets", ndim=(1, 2), dtype=(torch.int64, torch.int32))
    require(targets.shape == hidden.shape[:-1], "targets",
            f"shape {tuple(hidden.shape[:-1])} (hidden's without d_model)", tuple(targets.shape))
    require(isinstance(generator, nn.Linear), "generator", "an nn.Linear",
            type(generator).__name__)
    smoothing = require_number(smoothing, "smoothing", minimum=0.0, maximum=1.0)
    rows = require_positive_int(rows, "rows")
    flat = targets.reshape(-1)
    keep = flat != ignore_index
    kept_hidden = hidden.reshape(-1, hidden.shape[-1])[keep]  # (n, d): padding dropped
    tensors = (kept_hidden, generator.weight, generator.bias)
    want = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    return _ProjectedLoss.apply(*tensors, flat[keep].long(), smoothing, rows, want)


def _matmul_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The dtype autocast would multiply in (``hidden``'s own without autocast)."""
    kind = hidden.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else hidden.dtype


class _ProjectedLoss(torch.autograd.Function):
    """The summed loss; its forward also computes the gradients (when ``want``)."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                targets: torch.Tensor, smoothing: float, rows: int, want: bool
                ) -> torch.Tensor:
        dtype = _matmul_dtype(hidden)
        compute = torch.promote_types(hidden.dtype, torch.float32)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(dtype)  # (V, d), cast once (autocast casts at every call)
            b = None if bias is None else bias.to(dtype)
            vocab = weight.shape[0]
            total = torch.zeros((), dtype=compute, device=hidden.device)
            grad_h = torch.empty_like(hidden) if want else None
            grad_w = (torch.zeros(weight.shape, dtype=compute, device=weight.device)
                      if want else None)
            grad_b = None
            if want and bias is not None:
                grad_b = torch.zeros(bias.shape, dtype=compute, device=bias.device)
            for start in range(0, hidden.shape[0], rows):
                h = hidden[start:start + rows].to(dtype)  # (c, d)
                y = targets[start:start + rows, None]  # (c, 1)
                z = F.linear(h, w, b).to(compute)  # (c, V)
                picked, mean = z.gather(-1, y), z.mean(-1, True)  # (c, 1) each
                top = z.amax(-1, keepdim=True)  # (c, 1)
                e = z.sub_(top).exp_()  # exp(z - max), in place of z
                s = e.sum(-1, keepdim=True)  # (c, 1)
                lse = top + s.log()  # logsumexp(z)
                total += (lse - (1.0 - smoothing) * picked - smoothing * mean).sum()
                if grad_h is None or grad_w is None:  # no gradients wanted
                    continue
                g = e.div_(s).sub_(smoothing / vocab)  # softmax(z) - ε/V, in place
                g.scatter_add_(-1, y, torch.full_like(picked, smoothing - 1.0))
                g = g.to(dtype)
                grad_h[start:start + rows] = (g @ w).to(hidden.dtype)  # (c, V)(V, d)
                grad_w += (g.T @ h).to(compute)  # (V, c)(c, d)
                if grad_b is not None:
                    grad_b += g.sum(0, dtype=compute)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        return total

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_h, grad_w, grad_b = ctx.saved_tensors
        scaled = (None if g is None else g * grad_out.to(g.dtype) for g in (grad_h, grad_w, grad_b))
        return (*scaled, None, None, None, None)

"""Mask plumbing shared by the attention layers: checking a mask's shape, and the causal
masks of (cached) decoding (Vaswani et al., 2017, Section 3.2.3).

The masks a reader builds, :func:`~transformer_book.nn.attention.padding_mask` and
:func:`~transformer_book.nn.attention.causal_mask`, live with attention. Masks are boolean
and **True means "may attend"**.

Reading a mask's values (``bool(mask.all())``) on a GPU makes the host wait for the device,
and inside ``torch.compile`` it breaks the graph; on the CPU it costs nothing and lets
attention skip work (no mask at all, no fully masked row to zero). :func:`free_to_read`
tells the two apart: the layers ask it before any such test, and otherwise take the
branch-free path, which gives the same values.
"""

from __future__ import annotations

import torch

from transformer_book.util.validation import require, require_tensor

__all__ = ["check_mask", "free_to_read", "shifted_causal_mask", "with_causal"]


def free_to_read(t: torch.Tensor) -> bool:
    """Whether reading ``t``'s values on the host is free: a CPU tensor (nothing to wait
    for) outside ``torch.compile``'s tracing (no graph to break)."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def check_mask(mask: torch.Tensor, scores_shape: tuple[int, ...]) -> None:
    """A boolean mask (True = may attend) broadcastable to ``scores_shape`` (metadata only)."""
    require_tensor(mask, "mask")
    require(mask.dtype == torch.bool, "mask", "a boolean tensor (True = may attend)",
            f"dtype {mask.dtype}")
    # Broadcastable to exactly the scores' shape: right-aligned, each dim 1 or equal. (A
    # plain loop: torch.broadcast_shapes costs tens of µs, on every decoding step.)
    ok = len(mask.shape) <= len(scores_shape) and all(
        m in (1, s) for m, s in zip(reversed(mask.shape), reversed(scores_shape), strict=False))
    require(ok, "mask", f"a shape broadcastable to {scores_shape}", f"shape {tuple(mask.shape)}")


def with_causal(mask: torch.Tensor | None, l_q: int, l_k: int,
                device: torch.device | str | None) -> torch.Tensor:
    """``mask & causal``, the causal mask ``(L_q, L_k)`` top-left aligned (query i sees keys
    0 .. i), as ``F.scaled_dot_product_attention(is_causal=True)`` builds it."""
    causal = torch.ones(l_q, l_k, dtype=torch.bool, device=device).tril()
    return causal if mask is None else mask & causal


def shifted_causal_mask(new: int, total: int, device: torch.device | str | None) -> torch.Tensor:
    """Bool ``(new, total)``: the last ``new`` of ``total`` positions as queries, each seeing
    the keys up to its own position (bottom-right aligned: a chunk of new tokens after
    ``total - new`` cached ones)."""
    rows = torch.arange(total - new, total, device=device)[:, None]  # (new, 1): positions
    return torch.arange(total, device=device)[None, :] <= rows  # (1, total) <= (new, 1)

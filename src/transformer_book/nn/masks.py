"""The plumbing shared by the attention layers: checking their inputs and masks, and the
causal masks of (cached) decoding (Vaswani et al., 2017, Section 3.2.3).

The masks a reader builds, :func:`~transformer_book.nn.attention.padding_mask` and
:func:`~transformer_book.nn.attention.causal_mask`, and the softmax that applies them,
:func:`~transformer_book.nn.attention.masked_softmax`, live with attention. Masks are boolean
and **True means "may attend"**.

Reading a tensor's values on the host (``bool(t.all())``, ``t.max()``) makes the host wait
for a GPU, and inside ``torch.compile`` it breaks the graph; on the CPU it costs nothing.
:func:`readable_without_sync` tells the two apart: the checks of values (finite inputs,
token ids in range) and the fast path's CPU shortcuts ask it first.
"""

from __future__ import annotations

import torch

from transformer_book.util.validation import (
    bad_input,
    require,
    require_finite_tensor,
    require_tensor,
)

__all__ = ["check_like", "check_mask", "check_qk", "readable_without_sync",
           "shifted_causal_mask", "with_causal"]


def readable_without_sync(t: torch.Tensor) -> bool:
    """Whether the host can read ``t``'s values for free: a CPU tensor (no device to wait
    for) outside ``torch.compile``'s tracing (no graph to break)."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def check_qk(q: torch.Tensor, k: torch.Tensor, values: bool = True) -> None:
    """Queries ``q (..., L_q, d_k)`` and keys ``k (..., L_k, d_k)`` of one dtype and device,
    batch dimensions broadcastable; finite values where reading is free (``values``)."""
    require_tensor(q, "q", floating=True)
    require_tensor(k, "k", floating=True)
    require(q.ndim >= 2, "q", "a tensor of shape (..., L_q, d_k)", f"shape {tuple(q.shape)}")
    require(k.ndim >= 2, "k", "a tensor of shape (..., L_k, d_k)", f"shape {tuple(k.shape)}")
    require(q.shape[-1] == k.shape[-1], "k", f"last dimension d_k={q.shape[-1]} (as q)",
            f"shape {tuple(k.shape)}")
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise bad_input(
            "k", f"batch dimensions broadcastable with q's {tuple(q.shape[:-2])}",
            f"shape {tuple(k.shape)}",
        ) from None
    check_like(k, "k", q, values)


def check_like(t: torch.Tensor, name: str, q: torch.Tensor, values: bool = True) -> None:
    """``t`` has ``q``'s dtype and device (metadata), and, with ``values``, finite values
    where reading them is free (:func:`readable_without_sync`: a CPU tensor, not
    compiling)."""
    require(t.dtype == q.dtype, name, f"dtype {q.dtype} (as q)", t.dtype)
    require(t.device == q.device, name, f"a tensor on {q.device} (as q)", t.device)
    if not values:
        return
    for argument, value in ((name, t),) if name != "k" else (("q", q), ("k", t)):
        if readable_without_sync(value):
            require_finite_tensor(value, argument)


def check_mask(mask: torch.Tensor, scores_shape: tuple[int, ...],
               device: torch.device | None = None) -> None:
    """A boolean mask (True = may attend) broadcastable to ``scores_shape``, on ``device``
    when given (metadata only)."""
    require_tensor(mask, "mask")
    require(mask.dtype == torch.bool, "mask", "a boolean tensor (True = may attend)",
            f"dtype {mask.dtype}")
    require(device is None or mask.device == device, "mask", f"a tensor on {device}",
            mask.device)
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


"""The plumbing shared by the attention layers: checking their inputs and masks, the
masked softmax, and the causal masks of (cached) decoding (Vaswani et al., 2017,
Section 3.2.3).

The masks a reader builds, :func:`~transformer_book.nn.attention.padding_mask` and
:func:`~transformer_book.nn.attention.causal_mask`, live with attention; the softmax that
applies a mask, :func:`masked_softmax`, is written here and met in attention (which
re-exports it). Masks are boolean and **True means "may attend"**.

Reading a mask's values (``bool(mask.all())``) on a GPU makes the host wait for the device,
and inside ``torch.compile`` it breaks the graph; on the CPU it costs nothing and lets
attention skip work (no mask at all, no fully masked row to zero). :func:`free_to_read`
tells the two apart: the layers ask it before any such test, and otherwise take the
branch-free path, which gives the same values.
"""

from __future__ import annotations

import math

import torch

from transformer_book.util.validation import (
    fail,
    require,
    require_finite_tensor,
    require_tensor,
)

__all__ = ["check_like", "check_mask", "check_qk", "free_to_read", "shifted_causal_mask",
           "with_causal"]


def free_to_read(t: torch.Tensor) -> bool:
    """Whether reading ``t``'s values on the host is free: a CPU tensor (nothing to wait
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
        raise fail(
            "k", f"batch dimensions broadcastable with q's {tuple(q.shape[:-2])}",
            f"shape {tuple(k.shape)}",
        ) from None
    check_like(k, "k", q, values)


def check_like(t: torch.Tensor, name: str, q: torch.Tensor, values: bool = True) -> None:
    """``t`` has ``q``'s dtype and device (metadata), and, with ``values``, finite values
    where reading them is free (:func:`~transformer_book.nn.masks.free_to_read`: a CPU
    tensor, not compiling)."""
    require(t.dtype == q.dtype, name, f"dtype {q.dtype} (as q)", t.dtype)
    require(t.device == q.device, name, f"a tensor on {q.device} (as q)", t.device)
    if not values:
        return
    for argument, value in ((name, t),) if name != "k" else (("q", q), ("k", t)):
        if free_to_read(value):
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


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dimension that gives masked entries (mask False) weight zero.

    Masked scores become the most negative finite number, so beside any unmasked score their
    weight underflows to exactly zero. A row whose entries are all masked would come out
    uniform instead; it gets all-zero weights (never NaN, finite gradients).
    ``scores (..., L_q, L_k)`` floating point, ``mask`` boolean broadcastable to it. Where
    reading is free (a CPU tensor, not compiling), scores must be free of NaN and +inf
    (-inf, a score that is never chosen, is allowed) and no row may come out NaN.
    """
    require_tensor(scores, "scores", floating=True)
    require(scores.ndim >= 1, "scores", "a tensor of shape (..., L_k)", "a 0-D tensor")
    if mask is not None:
        check_mask(mask, tuple(scores.shape), scores.device)
    if free_to_read(scores):
        bad = torch.isnan(scores) | (scores == math.inf)
        require(not bool(bad.any()), "scores", "no NaN or +inf", "NaN or +inf")
    weights = _masked_softmax(scores, mask)
    if free_to_read(weights):
        require(not bool(torch.isnan(weights).any()), "scores",
                "a finite score for each row's unmasked keys", "a row whose scores are all -inf")
    return weights


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """:func:`masked_softmax` without its checks (inputs already checked)."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
    nothing_to_attend = ~mask.any(dim=-1, keepdim=True)  # (..., L_q or 1, 1): the small mask
    if not free_to_read(mask) or bool(nothing_to_attend.any()):  # on a GPU: fill, never ask
        weights = weights.masked_fill(nothing_to_attend, 0.0)
    return weights

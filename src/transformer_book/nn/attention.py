"""Attention, from weighted averages to multi-head attention (Vaswani et al., 2017).

Section 3.2: "An attention function can be described as mapping a query and a set of
key-value pairs to an output, where the query, keys, values, and output are all vectors.
The output is computed as a weighted sum of the values, where the weight assigned to each
value is computed by a compatibility function of the query with the corresponding key."

This module holds, in the order the book meets them: scoring functions (dot, scaled dot,
additive), the padding and causal masks, :func:`masked_softmax`,
:func:`scaled_dot_product_attention` (the teaching path: the paper's formula written out,
returning the weights), and :class:`MultiHeadAttention`. Nadaraya–Watson attention pooling
and the end-to-end memory network, which came before it, live in
:mod:`transformer_book.baselines`.

Every speed trick sits in one place, :func:`fast_attention`, the fast path: the teaching
path's output (tested equal), by the quickest route on the device, without the weights.
:class:`MultiHeadAttention` takes it unless asked for the weights.

Masks are boolean and **True means "may attend"** throughout the package.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.nn.masks import (
    check_like,
    check_mask,
    check_qk,
    readable_without_sync,
    with_causal,
)
from transformer_book.util.validation import (
    bad_input,
    checking,
    is_integer,
    require,
    require_bool,
    require_finite_tensor,
    require_positive_int,
    require_probability,
    require_tensor,
)

__all__ = [
    "FEW_QUERIES", "AdditiveScore", "MultiHeadAttention", "causal_mask", "dot_score",
    "fast_attention", "masked_softmax", "padding_mask", "scaled_dot_product_attention",
    "scaled_dot_score",
]


# --------------------------------------------------------------------------- scores


def dot_score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Dot-product compatibility ``q · k``: ``q (..., L_q, d)``, ``k (..., L_k, d)`` -> scores
    ``(..., L_q, L_k)``.

    Section 3.2.1: "Dot-product attention is identical to our algorithm, except for the
    scaling factor of 1/√d_k."
    """
    check_qk(q, k)
    return q @ k.transpose(-2, -1)  # (..., L_q, d) @ (..., d, L_k) -> (..., L_q, L_k)


def scaled_dot_score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scaled dot product ``q · k / √d_k``: ``q (..., L_q, d_k)``, ``k (..., L_k, d_k)`` ->
    scores ``(..., L_q, L_k)``.

    Section 3.2.1: "We suspect that for large values of d_k, the dot products grow large in
    magnitude, pushing the softmax function into regions where it has extremely small
    gradients. To counteract this effect, we scale the dot products by 1/√d_k."
    """
    return dot_score(q, k) / math.sqrt(q.shape[-1])


class AdditiveScore(nn.Module):
    """Additive (Bahdanau et al., 2015) compatibility ``w_v · tanh(W_q q + W_k k)``.

    Section 3.2.1: "Additive attention computes the compatibility function using a
    feed-forward network with a single hidden layer."

    ``forward(q (..., L_q, q_dim), k (..., L_k, k_dim))`` -> scores ``(..., L_q, L_k)``.
    """

    def __init__(self, q_dim: int, k_dim: int, hidden: int) -> None:
        super().__init__()
        self.q_dim = require_positive_int(q_dim, "q_dim")
        self.k_dim = require_positive_int(k_dim, "k_dim")
        require_positive_int(hidden, "hidden")
        self.w_q = nn.Linear(q_dim, hidden, bias=False)
        self.w_k = nn.Linear(k_dim, hidden, bias=False)
        self.w_v = nn.Linear(hidden, 1, bias=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        require_tensor(q, "q", floating=True)
        require_tensor(k, "k", floating=True)
        require(q.ndim >= 2 and q.shape[-1] == self.q_dim, "q", f"shape (..., L_q, {self.q_dim})",
                f"shape {tuple(q.shape)}")
        require(k.ndim >= 2 and k.shape[-1] == self.k_dim, "k", f"shape (..., L_k, {self.k_dim})",
                f"shape {tuple(k.shape)}")
        # (..., L_q, 1, hidden) + (..., 1, L_k, hidden) -> (..., L_q, L_k, hidden)
        features = torch.tanh(self.w_q(q).unsqueeze(-2) + self.w_k(k).unsqueeze(-3))
        return self.w_v(features).squeeze(-1)  # (..., L_q, L_k, 1) -> (..., L_q, L_k)


# --------------------------------------------------------------------------- masks


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Keys that are real tokens: ``ids (B, L)`` -> bool ``(B, 1, 1, L)``, True where
    ``ids != pad_id``.

    The shape broadcasts against attention scores ``(B, h, L_q, L_k)`` (every head, every
    query sees the same keys). Combine with :func:`causal_mask` by ``&``.
    """
    require_tensor(ids, "ids", ndim=2)
    require(not ids.is_floating_point(), "ids", "an integer tensor of token ids", ids.dtype)
    require(is_integer(pad_id), "pad_id", "an integer",
            repr(pad_id))
    return (ids != pad_id)[:, None, None, :]  # (B, L) -> (B, 1, 1, L)


def causal_mask(length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Lower-triangular bool ``(length, length)``: position i may attend to positions j <= i.

    Section 3.2.3: "We need to prevent leftward information flow in the decoder to preserve
    the auto-regressive property." Broadcasts against ``(B, h, L, L)`` scores.
    """
    require_positive_int(length, "length")
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


# --------------------------------------------------------------------------- softmax


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dimension that gives masked entries (mask False) weight zero.

    Section 3.2.3: "We implement this inside of scaled dot-product attention by masking out
    (setting to −∞) all values in the input of the softmax which correspond to illegal
    connections." Masked scores become the most negative finite number instead, so beside
    any unmasked score their weight underflows to exactly zero, and a row whose entries are
    all masked (uniform, or NaN with −∞) gets all-zero weights: never NaN, finite gradients.

    ``scores (..., L_q, L_k)`` floating point, ``mask`` boolean broadcastable to it (True =
    may attend) or None; returns weights of the scores' shape. Where reading is free (a CPU
    tensor, not compiling: :func:`~transformer_book.nn.masks.readable_without_sync`), scores
    must be free of NaN and +inf (−inf, a score that is never chosen, is allowed) and no row
    may come out NaN.
    """
    require_tensor(scores, "scores", floating=True)
    require(scores.ndim >= 1, "scores", "a tensor of shape (..., L_k)", "a 0-D tensor")
    if mask is not None:
        check_mask(mask, tuple(scores.shape), scores.device)
    if readable_without_sync(scores):
        bad = torch.isnan(scores) | (scores == math.inf)
        require(not bool(bad.any()), "scores", "no NaN or +inf", "NaN or +inf")
    weights = _masked_softmax(scores, mask)
    if readable_without_sync(weights):
        require(not bool(torch.isnan(weights).any()), "scores",
                "a finite score for each row's unmasked keys", "a row whose scores are all -inf")
    return weights


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """:func:`masked_softmax` without its checks, for inputs already checked."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
    nothing_to_attend = ~mask.any(dim=-1, keepdim=True)  # (..., L_q or 1, 1)
    return weights.masked_fill(nothing_to_attend, 0.0)  # fully masked rows: all zero


# --------------------------------------------------------------------------- the teaching path


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Section 3.2.1, Scaled Dot-Product Attention: the teaching path.

    "We compute the dot products of the query with all keys, divide each by √d_k, and apply
    a softmax function to obtain the weights on the values":
    ``Attention(Q, K, V) = softmax(QKᵀ / √d_k) V``.

    Shapes: ``q (..., L_q, d_k)``, ``k (..., L_k, d_k)``, ``v (..., L_k, d_v)``; ``mask``
    boolean broadcastable to ``(..., L_q, L_k)``, True = may attend. Returns
    ``output (..., L_q, d_v)`` and ``weights (..., L_q, L_k)`` (before dropout; rows sum to
    one, or are all zero for a query whose keys are all masked, whose output is then zero).
    ``dropout_p`` drops weights (Section 5.4) and is applied whenever it is positive.

    Every argument is checked (shapes, dtypes, devices, and, where reading is free, finite
    values); :func:`fast_attention` gives the same output faster, without the weights."""
    check_qk(q, k, values=False)  # values: read once, from the output, below
    require_tensor(v, "v", floating=True)
    require(v.ndim >= 2 and v.shape[-2] == k.shape[-2], "v", f"shape (..., L_k={k.shape[-2]}, d_v)",
            f"shape {tuple(v.shape)}")
    check_like(v, "v", q, values=False)
    require_probability(dropout_p, "dropout_p")
    if mask is not None:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        check_mask(mask, (*batch, q.shape[-2], k.shape[-2]), q.device)
    out, weights = _attention(q, k, v, mask, dropout_p)
    if readable_without_sync(out) and not bool(torch.isfinite(out.detach()).all()):  # one read
        for name, value in (("q", q), ("k", k), ("v", v)):
            require_finite_tensor(value, name)
        raise bad_input("q, k", "scores q·kᵀ/√d_k that are finite", "scores that overflow")
    return out, weights


def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
    dropout_p: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The teaching path's arithmetic, for checked inputs (shapes as in
    :func:`scaled_dot_product_attention`): ``softmax(QKᵀ / √d_k) V`` and the weights."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # scaled_dot_score: (..., L_q, L_k)
    weights = _masked_softmax(scores, mask)  # (..., L_q, L_k), masked keys weigh zero
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights  # Section 5.4
    return dropped @ v, weights  # (..., L_q, L_k) @ (..., L_k, d_v) -> (..., L_q, d_v)


# --------------------------------------------------------------------------- the fast path

# Route 3 of the fast path, measured by the decoding rows of benchmarks/bench_sdpa.py. On the
# CPU, PyTorch's fused SDPA kernel pays a fixed cost per block of queries and head that a few
# queries cannot amortise. Without gradients (B=128 h=4 L_k=20 d_k=32, padding mask,
# 1 thread), the explicit matmul + softmax + matmul is 1.42x as fast as the fused kernel for
# 1 query per head (a greedy step), 1.26x for 4 (beam 4's hypotheses of one sentence), 1.07x
# for 16, and 0.48x for 32 (the fused kernel wins from there on). Only without gradients or
# dropout (the explicit backward would keep the L_q x L_k weights): decoding steps.
FEW_QUERIES = 16


def fast_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
    is_causal: bool = False, dropout_p: float = 0.0,
) -> torch.Tensor:
    """The fast path: the output of the teaching path,
    ``scaled_dot_product_attention(q, k, v, mask & causal, dropout_p)[0]`` (tested equal,
    up to rounding), by the quickest route on the device, without the weights.

    ``q (B, h, L_q, d_k)``, ``k (B, h, L_k, d_k)``, ``v (B, h, L_k, d_v)`` ->
    ``(B, h, L_q, d_v)``; ``mask`` as in the teaching path; ``is_causal`` adds the top-left
    causal mask (query i sees keys 0 .. i). Only the plain values ``is_causal`` and
    ``dropout_p`` are checked (no tensor is read; :class:`MultiHeadAttention` checks the
    tensors' metadata). The routes, each a measured speed-up that keeps the values:

    1. Under CPU bf16 autocast the core runs in fp32 (the projections around it stay in
       bf16): torch's CPU flash-attention backward is ~14x slower in bf16
       (``benchmarks/bench_precision.py``).
    2. On the CPU, where reading a mask is free, a mask that hides nothing is dropped.
    3. On the CPU, without gradients or dropout, at most :data:`FEW_QUERIES` queries (a
       decoding step) take the teaching formula, faster there than the fused kernel.
    4. Otherwise PyTorch's fused ``F.scaled_dot_product_attention``. A query that sees no
       key would get NaN from it: it attends to every key instead (finite values and
       gradients) and its output is zeroed, the teaching path's result. On the CPU the
       zeroing is skipped when every query sees a key; on a GPU or while compiling, masks
       are never read on the host and the zeroing always runs.
    """
    if checking():
        require_bool(is_causal, "is_causal")
        require_probability(dropout_p, "dropout_p")
    on_cpu = q.device.type == "cpu"
    if on_cpu and torch.is_autocast_enabled("cpu"):  # 1
        with torch.autocast("cpu", enabled=False):
            return fast_attention(q.float(), k.float(), v.float(), mask, is_causal, dropout_p)
    if mask is not None and readable_without_sync(mask) and bool(mask.all()):  # 2
        mask = None
    l_q, l_k = q.shape[-2], k.shape[-2]
    if on_cpu and l_q <= FEW_QUERIES and dropout_p == 0.0 and not torch.is_grad_enabled():  # 3
        if is_causal:
            mask = with_causal(mask, l_q, l_k, q.device)
        return _attention(q, k, v, mask, 0.0)[0]
    if mask is None:  # 4, SDPA building the causal mask itself
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    if is_causal:
        mask = with_causal(mask, l_q, l_k, q.device)
    row_ok = mask.any(-1, keepdim=True)  # (..., L_q or 1, 1): does the query see any key?
    if readable_without_sync(row_ok) and bool(row_ok.all()):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~row_ok, dropout_p=dropout_p)
    return out * row_ok


class MultiHeadAttention(nn.Module):
    """Section 3.2.2, Multi-Head Attention.

    "Instead of performing a single attention function with d_model-dimensional keys, values
    and queries, we found it beneficial to linearly project the queries, keys and values h
    times with different, learned linear projections to d_k, d_k and d_v dimensions":
    ``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with
    ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`` and ``d_k = d_v = d_model / h``.

    The three input projections are packed in ``in_proj`` (weight ``(3·d_model, d_model)``,
    rows ``[W^Q; W^K; W^V]``, as in ``nn.MultiheadAttention``); ``out_proj`` is ``W^O``.

    ``forward(query (B, L_q, d_model), key (B, L_k, d_model), value (B, L_k, d_model),
    mask=None, is_causal=False, need_weights=False)`` returns ``(output (B, L_q, d_model),
    weights (B, h, L_q, L_k) or None)``; self-attention passes the same tensor three times
    (and gets one packed projection). ``mask`` is boolean, True = may attend, shaped
    ``(L_q, L_k)``, ``(B, L_q, L_k)`` or broadcastable to ``(B, h, L_q, L_k)`` (e.g.
    :func:`padding_mask`'s ``(B, 1, 1, L_k)``); ``is_causal`` adds the top-left
    :func:`causal_mask`. With ``need_weights=True`` the teaching path (the arithmetic of
    :func:`scaled_dot_product_attention`) runs and returns per-head weights; otherwise the
    fast path (:func:`fast_attention`), which gives the same output. Queries whose keys are
    all masked get a zero attention output on both paths (then ``out_proj`` adds its bias).
    Only metadata is checked (shapes, dtypes: no device sync), and nothing while
    ``torch.compile`` traces.

    Incremental decoding projects once and attends many times: ``forward`` is
    :meth:`project_query` and :meth:`project_kv`, then :meth:`attend` on the head-split
    tensors; a :class:`~transformer_book.nn.kv_cache.DecoderCache` keeps ``project_kv``'s
    results between steps (cross-attention's once per sentence, self-attention's growing
    by one token per step), so a step is ``attend(project_query(y_t), k, v)``.

    ``rotate`` (``None`` by default) is a position scheme acting on queries and keys, ``(heads
    (B, h, L, d_k), offset) -> heads``: self-attention's ``forward`` rotates both at positions
    ``0 ..``; a cached decoder rotates the new ones at theirs
    (:class:`~transformer_book.nn.rotary.RotaryPositions`).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        require_positive_int(d_model, "d_model")
        require_positive_int(num_heads, "num_heads")
        require(d_model % num_heads == 0, "num_heads", f"a divisor of d_model={d_model}",
                num_heads)
        self.dropout = require_probability(dropout, "dropout")
        require_bool(bias, "bias")
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        # A position scheme acting on queries and keys (rotary): (heads, offset) -> heads.
        self.rotate: Callable[[torch.Tensor, int], torch.Tensor] | None = None
        nn.init.xavier_uniform_(self.in_proj.weight)
        if bias:
            nn.init.zeros_(self.in_proj.bias)
            nn.init.zeros_(self.out_proj.bias)

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of ``nn.MultiheadAttention`` (read with ``batch_first`` semantics)."""
        require(isinstance(m, nn.MultiheadAttention), "m", "an nn.MultiheadAttention",
                type(m).__name__)
        require(m._qkv_same_embed_dim, "m", "kdim == vdim == embed_dim", (m.kdim, m.vdim))
        require(m.bias_k is None and not m.add_zero_attn, "m",
                "no add_bias_kv and no add_zero_attn", "a module using them")
        ours = cls(m.embed_dim, m.num_heads, m.dropout, bias=m.in_proj_bias is not None)
        ours = ours.to(device=m.in_proj_weight.device, dtype=m.in_proj_weight.dtype)
        with torch.no_grad():
            ours.in_proj.weight.copy_(m.in_proj_weight)
            ours.out_proj.weight.copy_(m.out_proj.weight)
            if m.in_proj_bias is not None:
                ours.in_proj.bias.copy_(m.in_proj_bias)
                ours.out_proj.bias.copy_(m.out_proj.bias)
        return ours

    def _split_heads(self, x: torch.Tensor, parts: int) -> tuple[torch.Tensor, ...]:
        b, length = x.shape[:2]
        # (B, L, parts·d_model) -> (B, L, parts, h, d_k) -> (parts, B, h, L, d_k); one copy
        # into contiguous heads makes the fused kernels faster than strided views.
        x = x.view(b, length, parts, self.num_heads, self.d_k).permute(2, 0, 3, 1, 4)
        return tuple(x.contiguous().unbind(0))

    def _project(self, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """Apply rows ``start·d_model : stop·d_model`` of ``in_proj`` (0 = Q, 1 = K, 2 = V)."""
        rows = slice(start * self.d_model, stop * self.d_model)
        bias = None if self.in_proj.bias is None else self.in_proj.bias[rows]
        return F.linear(x, self.in_proj.weight[rows], bias)  # (B, L, d) -> (B, L, parts·d)

    def _check_input(self, x: torch.Tensor, name: str, b_l: tuple[int, int] | None = None
                     ) -> None:
        """``x (B, L, d_model)``, with ``(B, L) = b_l`` when given (metadata only: inside a
        model a NaN is caught where it surfaces, as a non-finite loss at the training step)."""
        require_tensor(x, name, ndim=3, floating=True)
        where = "B, L" if b_l is None else f"{b_l[0]}, {b_l[1]}"
        require(x.shape[-1] == self.d_model and (b_l is None or x.shape[:2] == b_l), name,
                f"shape ({where}, d_model={self.d_model})", f"shape {tuple(x.shape)}")
        weight = self.in_proj.weight
        require(x.device == weight.device, name, f"a tensor on {weight.device} (the module's)",
                x.device)
        require(x.dtype == weight.dtype or torch.is_autocast_enabled(x.device.type), name,
                f"dtype {weight.dtype} (the module's; or run under autocast)", x.dtype)

    def project_query(self, query: torch.Tensor) -> torch.Tensor:
        """``query (B, L_q, d_model)`` -> head-split ``Q W^Q``, ``(B, h, L_q, d_k)``."""
        if checking():
            self._check_input(query, "query")
        return self._split_heads(self._project(query, 0, 1), 1)[0]

    def project_kv(
        self, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``key, value (B, L_k, d_model)`` -> head-split ``K W^K, V W^V``, two
        ``(B, h, L_k, d_k)`` (one packed projection when ``value is key``)."""
        if checking():
            self._check_input(key, "key")
            self._check_input(value, "value", (key.shape[0], key.shape[1]))
        if value is key:
            k, v = self._split_heads(self._project(key, 1, 3), 2)  # packed W^K, W^V
            return k, v
        (k,) = self._split_heads(self._project(key, 1, 2), 1)
        (v,) = self._split_heads(self._project(value, 2, 3), 1)
        return k, v

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        mask: torch.Tensor | None = None, is_causal: bool = False, need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention over projected heads: ``q (B, h, L_q, d_k)``, ``k, v (B, h, L_k, d_k)``
        -> ``(W^O Concat(heads) (B, L_q, d_model), weights (B, h, L_q, L_k) or None)``;
        ``mask``, ``is_causal`` and ``need_weights`` as in :meth:`forward`."""
        b, _, l_q, _ = q.shape
        if mask is not None and mask.ndim == 3:
            mask = mask.unsqueeze(1)  # (B, L_q, L_k) -> (B, 1, L_q, L_k)
        if checking():
            require_bool(is_causal, "is_causal")
            require_bool(need_weights, "need_weights")
            self._check_heads(q, k, v, mask)
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:  # the teaching path, Section 3.2.1, with its weights (for plots)
            if is_causal:
                mask = with_causal(mask, l_q, k.shape[2], q.device)
            out, weights = _attention(q, k, v, mask, dropout_p)
        else:  # the fast path: the same output
            out, weights = fast_attention(q, k, v, mask, is_causal, dropout_p), None
        # (B, h, L_q, d_k) -> (B, L_q, h, d_k) -> (B, L_q, d_model)
        out = out.transpose(1, 2).reshape(b, l_q, self.d_model)
        return self.out_proj(out), weights

    def _check_heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor | None) -> None:
        for name, t in (("q", q), ("k", k), ("v", v)):
            require_tensor(t, name, ndim=4, floating=True)
            ok = t.shape[0] == q.shape[0] and t.shape[1:4:2] == (self.num_heads, self.d_k)
            require(ok and (name != "v" or t.shape[2] == k.shape[2]), name,
                    f"shape (B={q.shape[0]}, h={self.num_heads}, L, d_k={self.d_k}), v's L as k's",
                    f"shape {tuple(t.shape)}")
            require(t.dtype == q.dtype and t.device == q.device, name,
                    f"dtype {q.dtype} on {q.device} (as q)", f"{t.dtype} on {t.device}")
        if mask is not None:
            check_mask(mask, (q.shape[0], self.num_heads, q.shape[2], k.shape[2]), q.device)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value``; see the class docstring."""
        if not (key is query and value is query):
            return self.attend(self.project_query(query), *self.project_kv(key, value),
                               mask, is_causal, need_weights)
        if checking():
            self._check_input(query, "query")
        q, k, v = self._split_heads(self.in_proj(query), 3)  # self-attention: packed Q, K, V
        if self.rotate is not None:  # positions 0 .. L - 1 as rotations (rotary)
            q, k = self.rotate(q, 0), self.rotate(k, 0)
        return self.attend(q, k, v, mask, is_causal, need_weights)

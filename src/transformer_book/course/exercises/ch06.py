"""Checkers for chapter 06 (multi-head attention)."""

from __future__ import annotations

import contextlib

import torch

from transformer_book.course.exercises.core import (
    LoopOver,
    attempt,
    exercise,
    expect_close,
    expect_tensor,
    fresh_generator,
    random_int,
)
from transformer_book.nn.attention import MultiHeadAttention, causal_mask, padding_mask


@exercise("06.1", "split_heads")
def check_split_heads(split_heads) -> str:
    """``split_heads(x, h)``: ``(..., L, d_model)`` -> ``(..., h, L, d_model // h)``, head ``i``
    holding columns ``i·d_k .. (i+1)·d_k`` of every position."""
    generator = fresh_generator()
    cases = []
    for index in range(15):
        batch = tuple(random_int(1, 3, generator) for _ in range(index % 3))  # 0, 1 or 2 dims
        heads, d_k = random_int(1, 4, generator), random_int(1, 5, generator)
        length = random_int(1, 6, generator)
        x = torch.randn(*batch, length, heads * d_k, generator=generator, dtype=torch.float64)
        cases.append((x, heads, f"x of shape {tuple(x.shape)} with h={heads}"))
    x = torch.arange(2 * 3 * 8, dtype=torch.float64).view(2, 3, 8)
    cases.append((x, 8, "h = d_model (every head gets one column)"))
    cases.append((x, 1, "h = 1 (a single head holds everything)"))
    for x, heads, what in cases:
        d_k = x.shape[-1] // heads
        # (..., L, d_model) -> (..., L, h, d_k) -> (..., h, L, d_k)
        expected = x.unflatten(-1, (heads, d_k)).transpose(-3, -2)
        received = attempt(split_heads, x.clone(), heads, what=what)
        expect_tensor(received, what=what, shape=tuple(expected.shape))
        # exact: a split moves numbers, it computes none (the failure names an entry)
        expect_close(received, expected, what=what, atol=0.0, rtol=0.0)
    return (
        f"matched the reference on {len(cases)} fresh tensors with 0 to 2 leading dimensions, "
        "including h = 1 and h = d_model; head i holds columns i·d_k to (i+1)·d_k"
    )


def _reference(query, key, value, weights, heads, mask) -> torch.Tensor:
    w_q, w_k, w_v, w_o = weights
    d_model = query.shape[-1]
    layer = MultiHeadAttention(d_model, heads, bias=False).double()
    with torch.no_grad():
        layer.in_proj.weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))  # rows [W^Q; W^K; W^V]ᵀ
        layer.out_proj.weight.copy_(w_o.T)
        out, _ = layer(query, key, value, mask=mask, need_weights=True)
    return out


@contextlib.contextmanager
def _attention_layers_refused():
    """While it is open, building the package's or PyTorch's multi-head attention layer
    raises: 06.2 asks for the heads written out around one scaled dot-product attention."""

    def refuse(self, *args, **kwargs):
        raise RuntimeError(f"this exercise writes multi-head attention itself: split the "
                           f"heads and call scaled_dot_product_attention once, without "
                           f"{type(self).__module__}.{type(self).__qualname__}")

    classes: tuple[type[torch.nn.Module], ...] = (MultiHeadAttention, torch.nn.MultiheadAttention)
    originals = [layer.__init__ for layer in classes]
    for layer in classes:
        layer.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        for layer, original in zip(classes, originals, strict=True):
            layer.__init__ = original  # type: ignore[method-assign]


def _head_probe_inputs(heads: int, generator: torch.Generator) -> list[tuple]:
    """``multi_head_attention``'s arguments with ``heads`` heads of 2 dimensions: self-attention
    without a mask and with a causal one, cross-attention with a padding mask."""
    d_model = 2 * heads
    query = torch.randn(2, 3, d_model, generator=generator, dtype=torch.float64)
    memory = torch.randn(2, 4, d_model, generator=generator, dtype=torch.float64)
    weights = [torch.randn(d_model, d_model, generator=generator, dtype=torch.float64)
               for _ in range(4)]
    keys_ok = padding_mask(torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]), 0)  # (2, 1, 1, 4)
    return [(query, query, query, *weights, heads, None),
            (query, query, query, *weights, heads, causal_mask(3)),
            (query, memory, memory, *weights, heads, keys_ok)]


NO_LOOP_OVER_HEADS = LoopOver(
    "the h heads", inputs=_head_probe_inputs, sizes=(2, 8), size_name="h",
    advice="split the projections into heads (B, h, L, d_k) and call "
    "scaled_dot_product_attention once for all of them")


@exercise("06.2", "multi_head_attention", forbids=[NO_LOOP_OVER_HEADS])
def check_multi_head_attention(multi_head_attention) -> str:
    """``multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, h, mask=None)`` must equal
    the package's ``MultiHeadAttention`` (no biases) for self- and cross-attention, with masks."""
    generator = fresh_generator()
    cases = []
    for index in range(12):
        batch, heads = random_int(1, 3, generator), random_int(1, 4, generator)
        d_k = random_int(1, 4, generator)
        d_model = heads * d_k
        l_q = random_int(1, 6, generator)
        cross = index % 2 == 1
        l_k = random_int(1, 7, generator) if cross else l_q
        query = torch.randn(batch, l_q, d_model, generator=generator, dtype=torch.float64)
        key, value = query, query
        if cross:
            key, value = torch.randn(2, batch, l_k, d_model, generator=generator,
                                     dtype=torch.float64).unbind(0)
        weights = tuple(torch.randn(d_model, d_model, generator=generator, dtype=torch.float64)
                        / d_model**0.5 for _ in range(4))
        kind = ("no mask", "padding mask", "causal mask")[index % 3]
        if kind == "padding mask":
            ids = torch.randint(1, 9, (batch, l_k), generator=generator)
            ids[0, random_int(0, l_k - 1, generator):] = 0  # pad the end of the first sequence
            mask = padding_mask(ids, 0)  # (B, 1, 1, L_k)
        elif kind == "causal mask" and l_q == l_k:
            mask = causal_mask(l_q)  # (L, L)
        else:
            kind, mask = "no mask", None
        what = (f"{'cross' if cross else 'self'}-attention with h={heads}, "
                f"query {tuple(query.shape)}, key/value length {l_k}, {kind}")
        cases.append((query, key, value, weights, heads, mask, what))
    query = torch.randn(2, 4, 6, generator=generator, dtype=torch.float64)
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[1, 0, 2] = False  # query 2 of the second example sees no key
    weights = tuple(torch.randn(6, 6, generator=generator, dtype=torch.float64) for _ in range(4))
    cases.append((query, query, query, weights, 3, mask, "a query whose keys are all masked"))
    for query, key, value, weights, heads, mask, what in cases:
        expected = _reference(query, key, value, weights, heads, mask)
        with _attention_layers_refused():
            received = attempt(multi_head_attention, query.clone(), key.clone(), value.clone(),
                               *(w.clone() for w in weights), heads,
                               None if mask is None else mask.clone(), what=what)
        expect_close(received, expected, what=what, atol=1e-9, rtol=1e-7)
    return (
        f"matched transformer_book's MultiHeadAttention (no biases) on {len(cases)} fresh cases: "
        "self- and cross-attention, 1 to 4 heads, padding and causal masks, a fully masked query"
    )

"""Checkers for chapter 06 (multi-head attention).

- 06.1 ``split_heads(x, h)``: ``(..., L, d_model)`` -> ``(..., h, L, d_k)`` for any number of
  leading dimensions, compared exactly with the reference split. The exercise hands the
  learner :func:`split_heads_first_attempt`, the chapter's ``view`` + ``transpose(1, 2)``
  with the shapes read from ``x``, to predict, measure and fix.
- 06.2 ``multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None)``,
  ``key_mask (B, L_k)`` True at the real keys: compared with the package's
  :class:`~transformer_book.nn.attention.MultiHeadAttention` (no biases) for self- and
  cross-attention. The exercise hands the learner :func:`multi_head_attention_first_attempt`,
  which masks the heads with the ``(B, 1, L_k)`` mask of one head at a time; while the
  learner's function runs, the package's and PyTorch's layers refuse to be built, and a loop
  over the heads is refused.
"""

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
from transformer_book.nn.attention import MultiHeadAttention, scaled_dot_product_attention

__all__ = ["multi_head_attention_first_attempt", "split_heads_first_attempt"]


def split_heads_first_attempt(x: torch.Tensor, h: int) -> torch.Tensor:
    """Exercise 06.1's first attempt, with its bug: the chapter's split, ``view`` then
    ``transpose(1, 2)``, with the shapes read from ``x``. Right for ``x (B, L, d_model)``
    -> ``(B, h, L, d_k)`` only: ``transpose(1, 2)`` names the axes of a 3-D input."""
    # (..., L, d_model) -> (..., L, h, d_k) -> axes 1 and 2 swapped
    return x.view(*x.shape[:-1], h, x.shape[-1] // h).transpose(1, 2)


def multi_head_attention_first_attempt(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, W_q: torch.Tensor,
    W_k: torch.Tensor, W_v: torch.Tensor, W_o: torch.Tensor, h: int,
    key_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exercise 06.2's first attempt, with its bug: the heads split as in the chapter, masked
    with ``key_mask[:, None, :]``, the ``(B, 1, L_k)`` mask that one head at a time accepts.

    ``query (B, L_q, d_model)``, ``key`` and ``value (B, L_k, d_model)``, the weights
    ``(d_model, d_model)``, ``key_mask (B, L_k)`` True at the real keys or None ->
    ``(B, L_q, d_model)`` (Section 3.2.2)."""
    d_k = query.shape[-1] // h

    def split(t: torch.Tensor) -> torch.Tensor:  # (B, L, d_model) -> (B, h, L, d_k)
        return t.unflatten(-1, (h, d_k)).transpose(1, 2)

    mask = None if key_mask is None else key_mask[:, None, :]  # (B, L_k) -> (B, 1, L_k)
    out, _ = scaled_dot_product_attention(split(query @ W_q), split(key @ W_k),
                                          split(value @ W_v), mask)  # (B, h, L_q, d_k)
    # (B, h, L_q, d_k) -> (B, L_q, h, d_k) -> (B, L_q, d_model)
    return out.transpose(1, 2).flatten(-2) @ W_o


@exercise("06.1", "split_heads")
def check_split_heads(split_heads) -> str:
    """``split_heads(x, h)``: ``(..., L, d_model)`` -> ``(..., h, L, d_model // h)``, head ``i``
    holding columns ``i·d_k .. (i+1)·d_k`` of every position, whatever the number of leading
    dimensions (the chapter's ``transpose(1, 2)`` is right for ``(B, L, d_model)`` only)."""
    generator = fresh_generator()
    cases = []
    for index in range(15):
        batch = tuple(random_int(1, 3, generator) for _ in range(index % 3))  # 0, 1 or 2 dims
        heads, d_k = random_int(1, 4, generator), random_int(1, 5, generator)
        length = random_int(1, 6, generator)
        x = torch.randn(*batch, length, heads * d_k, generator=generator, dtype=torch.float64)
        cases.append((x, heads, f"x of shape {tuple(x.shape)} with h={heads}"))
    x = torch.arange(2 * 3 * 8, dtype=torch.float64).view(2, 3, 8)
    cases.append((x, 8, "x of shape (2, 3, 8) with h = d_model = 8 (one column per head)"))
    cases.append((x, 1, "x of shape (2, 3, 8) with h = 1 (a single head holds everything)"))
    # shapes where a wrong pair of axes still gives the expected shape: only the numbers differ
    x = torch.randn(3, 9, generator=generator, dtype=torch.float64)
    cases.append((x, 3, "x of shape (3, 9) with h=3 (L = h = d_k = 3, no leading dimension)"))
    x = torch.randn(1, 2, 2, 4, generator=generator, dtype=torch.float64)
    cases.append((x, 2, "x of shape (1, 2, 2, 4) with h=2 (2 leading dimensions, the second "
                        "equal to L and to h)"))
    for x, heads, what in cases:
        d_k = x.shape[-1] // heads
        # (..., L, d_model) -> (..., L, h, d_k) -> (..., h, L, d_k)
        expected = x.unflatten(-1, (heads, d_k)).transpose(-3, -2)
        received = attempt(split_heads, x.clone(), heads, what=what)
        expect_tensor(received, what=what, shape=tuple(expected.shape))
        # exact: a split moves numbers, it computes none (the failure names an entry)
        expect_close(received, expected, what=what, atol=0.0, rtol=0.0)
    return (
        f"matched the reference on {len(cases)} fresh tensors of 2 to 4 dimensions, "
        "including h = 1 and h = d_model; head i holds columns i·d_k to (i+1)·d_k"
    )


def _reference(query, key, value, weights, heads, key_mask) -> torch.Tensor:
    """The package's layer (no biases) loaded with ``weights``, keys masked by ``key_mask``."""
    w_q, w_k, w_v, w_o = weights
    d_model = query.shape[-1]
    layer = MultiHeadAttention(d_model, heads, bias=False).double()
    with torch.no_grad():
        layer.in_proj.weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))  # rows [W^Q; W^K; W^V]ᵀ
        layer.out_proj.weight.copy_(w_o.T)
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, L_k)
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


def _key_mask(lengths: list[int], width: int) -> torch.Tensor:
    """Right padding: ``(B, width)``, True at the first ``lengths[b]`` keys of example b."""
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


def _head_probe_inputs(heads: int, generator: torch.Generator) -> list[tuple]:
    """``multi_head_attention``'s arguments with ``heads`` heads of 2 dimensions:
    self-attention without a mask, cross-attention with a padded memory."""
    d_model = 2 * heads
    query = torch.randn(2, 3, d_model, generator=generator, dtype=torch.float64)
    memory = torch.randn(2, 4, d_model, generator=generator, dtype=torch.float64)
    weights = [torch.randn(d_model, d_model, generator=generator, dtype=torch.float64)
               for _ in range(4)]
    return [(query, query, query, *weights, heads, None),
            (query, memory, memory, *weights, heads, _key_mask([4, 2], 4))]


NO_LOOP_OVER_HEADS = LoopOver(
    "the h heads", inputs=_head_probe_inputs, sizes=(2, 8), size_name="h",
    advice="split the projections into heads (B, h, L, d_k) and call "
    "scaled_dot_product_attention once for all of them")


def _random_case(index: int, generator: torch.Generator) -> tuple:
    """Self-attention (even ``index``) or cross-attention, 1 to 3 examples, 1 to 4 heads,
    with a padded key mask two times in three."""
    batch, heads = random_int(1, 3, generator), random_int(1, 4, generator)
    d_model = heads * random_int(1, 4, generator)
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
    key_mask = None
    if index % 3:  # right padding, each example keeping at least one key
        key_mask = _key_mask([random_int(1, l_k, generator) for _ in range(batch)], l_k)
    padding = "no key_mask" if key_mask is None else f"key lengths {key_mask.sum(-1).tolist()}"
    what = (f"{'cross' if cross else 'self'}-attention with B={batch}, h={heads}, query "
            f"{tuple(query.shape)}, key/value length {l_k}, {padding}")
    return query, key, value, weights, heads, key_mask, what


def _attention_cases(generator: torch.Generator) -> list[tuple]:
    """Fresh random cases, then fixed shapes that catch a mask lined up with the wrong axis:
    as many examples as heads, the examples padded differently."""
    cases = [_random_case(index, generator) for index in range(12)]
    for batch, heads, l_q, l_k, lengths in ((2, 2, 3, 3, [3, 1]), (3, 3, 4, 5, [5, 2, 4]),
                                            (1, 2, 2, 4, [3])):
        query = torch.randn(batch, l_q, 2 * heads, generator=generator, dtype=torch.float64)
        memory = torch.randn(batch, l_k, 2 * heads, generator=generator, dtype=torch.float64)
        key = query if l_q == l_k else memory
        weights = tuple(torch.randn(2 * heads, 2 * heads, generator=generator,
                                    dtype=torch.float64) for _ in range(4))
        cases.append((query, key, key, weights, heads, _key_mask(lengths, l_k),
                      f"{'self' if l_q == l_k else 'cross'}-attention with B={batch}, "
                      f"h={heads}, L_q={l_q}, L_k={l_k}, key lengths {lengths}"))
    query = torch.randn(2, 4, 6, generator=generator, dtype=torch.float64)
    weights = tuple(torch.randn(6, 6, generator=generator, dtype=torch.float64) for _ in range(4))
    cases.append((query, query, query, weights, 3, _key_mask([4, 0], 4),
                  "B=2, h=3, the second example's keys all padding (its output: zeros)"))
    return cases


@exercise("06.2", "multi_head_attention", forbids=[NO_LOOP_OVER_HEADS])
def check_multi_head_attention(multi_head_attention) -> str:
    """``multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None)``, with
    ``key_mask (B, L_k)`` True at the real keys, must equal the package's
    ``MultiHeadAttention`` (no biases) for self- and cross-attention, padded or not."""
    cases = _attention_cases(fresh_generator())
    for query, key, value, weights, heads, key_mask, what in cases:
        expected = _reference(query, key, value, weights, heads, key_mask)
        with _attention_layers_refused():
            received = attempt(multi_head_attention, query.clone(), key.clone(), value.clone(),
                               *(w.clone() for w in weights), heads,
                               None if key_mask is None else key_mask.clone(), what=what)
        expect_close(received, expected, what=what, atol=1e-9, rtol=1e-7)
    return (
        f"matched transformer_book's MultiHeadAttention (no biases) on {len(cases)} fresh "
        "cases: self- and cross-attention, 1 to 4 heads, 1 to 3 examples, padded and not, "
        "an example with no real key"
    )

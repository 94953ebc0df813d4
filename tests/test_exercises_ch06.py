"""Chapter 06's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import torch

from transformer_book.course.exercises import run_check
from transformer_book.nn.attention import scaled_dot_product_attention


def split_heads(x, h):
    return x.unflatten(-1, (h, x.shape[-1] // h)).transpose(-3, -2)


def multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, h, mask=None):
    out, _ = scaled_dot_product_attention(split_heads(query @ W_q, h), split_heads(key @ W_k, h),
                                          split_heads(value @ W_v, h), mask)
    return out.transpose(1, 2).flatten(-2) @ W_o


def test_06_1_passes_view_and_transpose_and_fails_view_alone():
    assert run_check("06.1", split_heads).passed
    view_alone = lambda x, h: x.reshape(*x.shape[:-2], h, x.shape[-2], x.shape[-1] // h)  # noqa: E731
    result = run_check("06.1", view_alone)
    assert result.status == "failed" and "expected" in result.detail


def test_06_1_not_attempted():
    def stub(x, h):
        raise NotImplementedError("Exercise 06.1: write your solution here")

    assert run_check("06.1", stub).status == "not attempted"


def test_06_2_passes_the_batched_version_and_fails_common_slips():
    assert run_check("06.2", multi_head_attention).passed
    no_output_projection = lambda q, k, v, W_q, W_k, W_v, W_o, h, mask=None: (  # noqa: E731
        multi_head_attention(q, k, v, W_q, W_k, W_v, torch.eye(W_o.shape[0], dtype=W_o.dtype),
                             h, mask))
    assert run_check("06.2", no_output_projection).status == "failed"
    self_only = lambda q, k, v, W_q, W_k, W_v, W_o, h, mask=None: (  # noqa: E731
        multi_head_attention(q, q, q, W_q, W_k, W_v, W_o, h, mask if mask is None or
                             mask.shape[-1] == q.shape[1] else None))
    assert run_check("06.2", self_only).status == "failed"
    ignores_mask = lambda q, k, v, W_q, W_k, W_v, W_o, h, mask=None: (  # noqa: E731
        multi_head_attention(q, k, v, W_q, W_k, W_v, W_o, h))
    assert run_check("06.2", ignores_mask).status == "failed"


def test_06_2_refuses_the_package_layer_and_a_loop_over_heads():
    def package_layer(query, key, value, W_q, W_k, W_v, W_o, h, mask=None):
        from transformer_book.nn.attention import MultiHeadAttention

        layer = MultiHeadAttention(query.shape[-1], h, bias=False).double()
        with torch.no_grad():
            layer.in_proj.weight.copy_(torch.cat([W_q.T, W_k.T, W_v.T]))
            layer.out_proj.weight.copy_(W_o.T)
            return layer(query, key, value, mask=mask)[0]

    result = run_check("06.2", package_layer)
    assert result.status == "failed" and "MultiHeadAttention" in result.detail

    def loop_over_heads(query, key, value, W_q, W_k, W_v, W_o, h, mask=None):
        d_k = query.shape[-1] // h
        heads = []
        for i in range(h):
            cols = slice(i * d_k, (i + 1) * d_k)
            heads.append(scaled_dot_product_attention(
                query @ W_q[:, cols], key @ W_k[:, cols], value @ W_v[:, cols],
                None if mask is None else mask[:, 0] if mask.ndim == 4 else mask)[0])
        return torch.cat(heads, -1) @ W_o

    result = run_check("06.2", loop_over_heads)
    assert result.status == "failed" and "loops over the h heads" in result.detail

"""Chapter 06's checkers accept correct answers and reject the first attempts that the
exercises ask the learner to debug."""

from __future__ import annotations

import pytest
import torch

from transformer_book.course.exercises import run_check
from transformer_book.course.exercises.ch06 import (
    multi_head_attention_first_attempt,
    split_heads_first_attempt,
)
from transformer_book.nn.attention import scaled_dot_product_attention


def split_heads(x, h):
    return x.unflatten(-1, (h, x.shape[-1] // h)).transpose(-3, -2)


def multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
    mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, L_k)
    out, _ = scaled_dot_product_attention(split_heads(query @ W_q, h), split_heads(key @ W_k, h),
                                          split_heads(value @ W_v, h), mask)
    return out.transpose(1, 2).flatten(-2) @ W_o


def test_06_1_passes_negative_axes_and_fails_the_first_attempt():
    assert run_check("06.1", split_heads).passed
    result = run_check("06.1", lambda x, h: split_heads_first_attempt(x, h))
    assert result.status == "failed" and "expected" in result.detail


def test_06_1_first_attempt_is_right_for_three_dimensions_only():
    x = torch.randn(2, 5, 8)
    assert torch.equal(split_heads_first_attempt(x, 2), split_heads(x, 2))
    assert split_heads_first_attempt(torch.randn(5, 8), 2).shape == (5, 4, 2)
    assert split_heads_first_attempt(torch.randn(3, 2, 5, 8), 2).shape == (3, 5, 2, 2, 4)
    square = torch.arange(8.0).view(2, 4)  # L = h = d_k = 2: the right shape, wrong numbers
    assert split_heads_first_attempt(square, 2).shape == split_heads(square, 2).shape
    assert not torch.equal(split_heads_first_attempt(square, 2), split_heads(square, 2))


def test_06_1_not_attempted():
    def stub(x, h):
        raise NotImplementedError("Exercise 06.1: write your solution here")

    assert run_check("06.1", stub).status == "not attempted"


def test_06_2_passes_the_batched_version_and_fails_the_first_attempt():
    assert run_check("06.2", multi_head_attention).passed
    result = run_check("06.2", lambda *args: multi_head_attention_first_attempt(*args))
    assert result.status == "failed" and "B=" in result.detail


def test_06_2_first_attempt_is_right_for_one_example_and_silently_wrong_when_b_equals_h():
    torch.manual_seed(0)
    weights = [torch.randn(4, 4, dtype=torch.float64) for _ in range(4)]
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    keys_ok = torch.tensor([[True, True, True], [True, False, False]])
    one = (x[:1], x[:1], x[:1], *weights, 2, keys_ok[:1])
    attempt = multi_head_attention_first_attempt
    assert torch.allclose(attempt(*one), multi_head_attention(*one))
    both = (x, x, x, *weights, 2, keys_ok)  # B = h = 2: runs, wrong numbers
    assert not torch.allclose(attempt(*both), multi_head_attention(*both))
    three = (torch.cat([x, x[:1]]), torch.cat([x, x[:1]]), torch.cat([x, x[:1]]), *weights, 2,
             torch.cat([keys_ok, keys_ok[:1]]))  # B = 3, h = 2: the mask does not broadcast
    with pytest.raises(ValueError, match="mask: expected a shape broadcastable"):
        attempt(*three)


def test_06_2_fails_common_slips():
    no_output_projection = lambda q, k, v, W_q, W_k, W_v, W_o, h, m=None: (  # noqa: E731
        multi_head_attention(q, k, v, W_q, W_k, W_v, torch.eye(W_o.shape[0], dtype=W_o.dtype),
                             h, m))
    assert run_check("06.2", no_output_projection).status == "failed"
    ignores_mask = lambda q, k, v, W_q, W_k, W_v, W_o, h, m=None: (  # noqa: E731
        multi_head_attention(q, k, v, W_q, W_k, W_v, W_o, h))
    assert run_check("06.2", ignores_mask).status == "failed"


def test_06_2_refuses_the_package_layer_and_a_loop_over_heads():
    def package_layer(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
        from transformer_book.nn.attention import MultiHeadAttention

        layer = MultiHeadAttention(query.shape[-1], h, bias=False).double()
        with torch.no_grad():
            layer.in_proj.weight.copy_(torch.cat([W_q.T, W_k.T, W_v.T]))
            layer.out_proj.weight.copy_(W_o.T)
            mask = None if key_mask is None else key_mask[:, None, None, :]
            return layer(query, key, value, mask=mask)[0]

    result = run_check("06.2", package_layer)
    assert result.status == "failed" and "MultiHeadAttention" in result.detail

    def loop_over_heads(query, key, value, W_q, W_k, W_v, W_o, h, key_mask=None):
        d_k = query.shape[-1] // h
        heads = []
        for i in range(h):
            cols = slice(i * d_k, (i + 1) * d_k)
            heads.append(scaled_dot_product_attention(
                query @ W_q[:, cols], key @ W_k[:, cols], value @ W_v[:, cols],
                None if key_mask is None else key_mask[:, None, :])[0])
        return torch.cat(heads, -1) @ W_o

    result = run_check("06.2", loop_over_heads)
    assert result.status == "failed" and "loops over the h heads" in result.detail

"""Chapter 05's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import math

import torch

from transformer_book.course.exercises import run_check


def safe_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights


def naive_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def test_05_1_passes_the_safe_version_and_fails_the_nan_one():
    assert run_check("05.1", safe_attention).passed
    result = run_check("05.1", naive_attention)
    assert result.status == "failed" and "NaN" in result.detail


def test_05_1_rejects_a_missing_scale_and_a_single_return_value():
    unscaled = lambda q, k, v, mask=None: safe_attention(q * math.sqrt(q.shape[-1]), k, v, mask)  # noqa: E731
    assert run_check("05.1", unscaled).status == "failed"
    result = run_check("05.1", lambda q, k, v, mask=None: safe_attention(q, k, v, mask)[0])
    assert result.status == "failed" and "tuple" in result.detail


def test_05_1_not_attempted():
    def stub(q, k, v, mask=None):
        raise NotImplementedError("Exercise 05.1: write your solution here")

    assert run_check("05.1", stub).status == "not attempted"


def test_05_2_passes_the_closed_form_and_fails_a_transposed_sign():
    def jacobian(scores):
        p = torch.softmax(scores, dim=-1)
        return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)

    assert run_check("05.2", jacobian).passed
    assert run_check("05.2", lambda s: -jacobian(s)).status == "failed"
    only_diagonal = lambda s: torch.diag_embed(torch.softmax(s, -1))  # noqa: E731
    assert run_check("05.2", only_diagonal).status == "failed"


def test_05_3_passes_the_combined_mask_and_fails_either_half():
    def decoder_mask(ids, pad_id):
        length = ids.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        return (ids != pad_id)[:, None, None, :] & causal

    assert run_check("05.3", decoder_mask).passed
    padding_only = lambda ids, pad_id: (ids != pad_id)[:, None, None, :].expand(  # noqa: E731
        -1, 1, ids.shape[1], -1)
    assert run_check("05.3", padding_only).status == "failed"
    as_floats = lambda ids, pad_id: decoder_mask(ids, pad_id).float()  # noqa: E731
    result = run_check("05.3", as_floats)
    assert result.status == "failed" and "boolean" in result.detail

"""Chapter 05's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import math

import torch

from transformer_book.course.exercises import run_check


def strength_for(weight, length, d_k):
    return math.sqrt(d_k) * math.log(weight * (length - 1) / (1 - weight))


def test_05_1_passes_the_derived_strength_and_fails_the_classic_slips():
    assert run_check("05.1", strength_for).passed
    without_scale = lambda w, n, d: strength_for(w, n, 1)  # noqa: E731  forgets √d_k
    assert run_check("05.1", without_scale).status == "failed"
    all_keys = lambda w, n, d: math.sqrt(d) * math.log(w * n / (1 - w))  # noqa: E731  L, not L-1
    assert run_check("05.1", all_keys).status == "failed"
    odds_only = lambda w, n, d: math.sqrt(d) * math.log(w / (1 - w))  # noqa: E731  one other key
    assert run_check("05.1", odds_only).status == "failed"
    result = run_check("05.1", lambda w, n, d: "six")
    assert result.status == "failed" and "number" in result.detail


def test_05_1_not_attempted():
    def stub(weight, length, d_k):
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


def depends_on(attend, x):
    x = x.clone().requires_grad_(True)
    out = attend(x)  # (L, d)
    rows = [torch.autograd.grad(out[i].sum(), x, retain_graph=True)[0].ne(0).any(dim=-1)
            for i in range(out.shape[0])]
    return torch.stack(rows)  # (L, L)


def test_05_3_passes_autograd_and_keeps_the_prediction_to_the_learner():
    """No spoiler: the verdict does not say which maskings leak (05.1's does not give the
    weight over 40 keys either)."""
    result = run_check("05.3", depends_on)
    assert result.passed
    assert "causal" not in result.detail and "sees" not in result.detail
    assert "40 keys" not in run_check("05.1", lambda w, n, d: d**0.5 * __import__(
        "math").log(w * (n - 1) / (1 - w))).detail


def test_05_3_fails_a_mask_read_off_the_code_and_a_transposed_answer():
    def looks_causal(attend, x):  # trusts the mask instead of measuring
        return torch.ones(x.shape[0], x.shape[0], dtype=torch.bool).tril()

    assert run_check("05.3", looks_causal).status == "failed"
    transposed = lambda attend, x: depends_on(attend, x).T  # noqa: E731
    assert run_check("05.3", transposed).status == "failed"
    as_floats = lambda attend, x: depends_on(attend, x).float()  # noqa: E731
    result = run_check("05.3", as_floats)
    assert result.status == "failed" and "boolean" in result.detail

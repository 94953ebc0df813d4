"""Chapter 04 checkers: the additive score's first attempt and its fix, and what 04.2's
check refuses; the wrong-answer catalogue is in tests/test_exercise_catalogue_00_05.py."""

from __future__ import annotations

import torch

from transformer_book.course.exercises.ch04 import additive_score_first_attempt
from transformer_book.course.exercises.core import run_check
from transformer_book.nn.attention import AdditiveScore


def additive_score(q, k, W_q, W_k, v):
    return torch.tanh((q @ W_q).unsqueeze(-2) + (k @ W_k).unsqueeze(-3)) @ v


def _scorer(generator: torch.Generator) -> tuple[AdditiveScore, tuple[torch.Tensor, ...]]:
    scorer = AdditiveScore(6, 5, 7).double()
    with torch.no_grad():
        for parameter in scorer.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator,
                                        dtype=torch.float64))
    return scorer, (scorer.w_q.weight.T, scorer.w_k.weight.T, scorer.w_v.weight[0])


def test_the_first_attempt_gives_every_query_the_same_weights() -> None:
    """04.2 (a): a query term plus a key term; the softmax over the keys drops the first."""
    generator = torch.Generator().manual_seed(0)
    scorer, weights = _scorer(generator)
    q = torch.randn(2, 4, 6, generator=generator, dtype=torch.float64)  # (B, L_q, d_q)
    k = torch.randn(2, 9, 5, generator=generator, dtype=torch.float64)  # (B, L_k, d_k)
    with torch.no_grad():
        attempt = torch.softmax(additive_score_first_attempt(q, k, *weights), dim=-1)
        right = torch.softmax(scorer(q, k), dim=-1)
    assert attempt.shape == right.shape == (2, 4, 9)
    assert torch.allclose(attempt, attempt[:, :1].expand_as(attempt), atol=1e-12)
    assert (right - right[:, :1]).abs().max() > 0.05
    assert torch.allclose(additive_score(q, k, *weights), scorer(q, k), atol=1e-12)


def test_the_check_passes_the_fix_and_fails_the_attempt() -> None:
    assert run_check("04.2", additive_score).passed

    def copied(*args):
        return additive_score_first_attempt(*args)

    result = run_check("04.2", copied)
    assert result.status == "failed", result.message
    assert result.detail.startswith("additive_score: for q of shape (3, 2), k of shape (5, 4)")
    imported = run_check("04.2", additive_score_first_attempt)
    assert imported.status == "failed" and "not your own function" in imported.detail


def test_the_check_refuses_the_package_module_and_puts_it_back() -> None:
    forward = AdditiveScore.forward

    def wrapped(q, k, W_q, W_k, v):
        return AdditiveScore(W_q.shape[0], W_k.shape[0], W_q.shape[1]).double()(q, k)

    result = run_check("04.2", wrapped)
    assert result.status == "failed"
    assert "writes the additive score itself" in result.detail, result.detail
    assert AdditiveScore.forward is forward, "AdditiveScore works again after the check"
    assert AdditiveScore(2, 3, 4)(torch.randn(1, 2), torch.randn(5, 3)).shape == (1, 5)


def test_checker_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(11)
    before = torch.get_rng_state()
    run_check("04.2", additive_score)
    assert torch.equal(before, torch.get_rng_state())

"""Chapter 11's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import torch

from transformer_book.course.exercises import run_check


def test_11_1_passes_the_formula_for_ints_and_tensors():
    assert run_check("11.1", lambda length, alpha: ((5 + length) / 6) ** alpha).passed
    assert run_check("11.1", lambda length, alpha: length**alpha).status == "failed"
    wrong_base = lambda length, alpha: ((6 + length) / 6) ** alpha  # noqa: E731
    assert run_check("11.1", wrong_base).status == "failed"


def test_11_1_not_attempted():
    def stub(length, alpha):
        raise NotImplementedError("Exercise 11.1: write your solution here")

    assert run_check("11.1", stub).status == "not attempted"


def beam_step(log_probs, beam_scores, beam_size):
    vocab = log_probs.shape[-1]
    scores, index = (beam_scores[:, None] + log_probs).flatten().topk(beam_size)
    return scores, index // vocab, index % vocab


def test_11_2_passes_the_flattened_top_k():
    assert run_check("11.2", beam_step).passed


def test_11_2_rejects_per_beam_top_k_and_forgotten_scores():
    def per_beam(log_probs, beam_scores, beam_size):  # best token of each beam, not overall
        best, token = (beam_scores[:, None] + log_probs).max(-1)
        scores, beams = best.topk(min(beam_size, best.numel()))
        if scores.numel() < beam_size:
            raise ValueError("not enough beams")
        return scores, beams, token[beams]

    assert run_check("11.2", per_beam).status == "failed"

    def ignores_history(log_probs, beam_scores, beam_size):
        return beam_step(log_probs, torch.zeros_like(beam_scores), beam_size)

    assert run_check("11.2", ignores_history).status == "failed"
    result = run_check("11.2", lambda lp, s, k: beam_step(lp, s, k)[:2])
    assert result.status == "failed" and "tuple" in result.detail

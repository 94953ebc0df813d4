"""Chapter 10's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from transformer_book.course.exercises import run_check


def noam(step, d_model, warmup_steps):
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def smoothed(logits, targets, eps, pad_id):
    vocab = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1),
                           ignore_index=pad_id, label_smoothing=eps)


def test_10_1_passes_eq_3_and_fails_common_slips():
    assert run_check("10.1", noam).passed
    no_scale = lambda s, d, w: min(s**-0.5, s * w**-1.5)  # noqa: E731
    assert run_check("10.1", no_scale).status == "failed"
    wrong_power = lambda s, d, w: d**-0.5 * min(s**-0.5, s * w**-0.5)  # noqa: E731
    assert run_check("10.1", wrong_power).status == "failed"
    tensor_answer = lambda s, d, w: torch.tensor(noam(s, d, w), dtype=torch.float64)  # noqa: E731
    assert run_check("10.1", tensor_answer).passed


def test_10_1_not_attempted():
    def stub(step, d_model, warmup_steps):
        raise NotImplementedError("Exercise 10.1: write your solution here")

    assert run_check("10.1", stub).status == "not attempted"


def test_10_2_passes_cross_entropy_and_the_closed_form():
    assert run_check("10.2", smoothed).passed

    def closed_form(logits, targets, eps, pad_id):
        logp = torch.log_softmax(logits, dim=-1)
        nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        loss = (1 - eps) * nll - eps * logp.mean(-1)
        keep = targets != pad_id
        return loss[keep].mean()

    assert run_check("10.2", closed_form).passed


def test_10_2_rejects_padding_counted_or_unstable_logs():
    def counts_padding(logits, targets, eps, pad_id):
        vocab = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), label_smoothing=eps)

    assert run_check("10.2", counts_padding).status == "failed"

    def unstable(logits, targets, eps, pad_id):
        logp = torch.softmax(logits, dim=-1).log()
        nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        loss = (1 - eps) * nll - eps * logp.mean(-1)
        return loss[targets != pad_id].mean()

    result = run_check("10.2", unstable)
    assert result.status == "failed"

    def smoothing_over_others(logits, targets, eps, pad_id):  # ε/(V-1) on the other classes
        vocab = logits.shape[-1]
        logp = torch.log_softmax(logits, dim=-1)
        q = torch.full_like(logp, eps / (vocab - 1)).scatter(
            -1, targets.unsqueeze(-1), 1 - eps)
        loss = -(q * logp).sum(-1)
        return loss[targets != pad_id].mean()

    assert run_check("10.2", smoothing_over_others).status == "failed"

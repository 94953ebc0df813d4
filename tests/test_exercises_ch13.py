"""Chapter 13's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from transformer_book.course.exercises import run_check


def count(d_model, h, d_k):
    d_v = d_model // h
    qk = 2 * (d_model * h * d_k + h * d_k)
    return qk + d_model * h * d_v + h * d_v + h * d_v * d_model + d_model


def test_13_1_passes_the_formula_and_fails_common_slips():
    assert run_check("13.1", count).passed
    assert run_check("13.1", lambda d, h, k: 4 * d * d + 4 * d).status == "failed"  # ignores d_k
    assert run_check("13.1", lambda d, h, k: count(d, h, k) - d).status == "failed"  # no out bias
    assert run_check("13.1", lambda d, h, k: float(count(d, h, k))).status == "failed"


def test_13_2_passes_exp_nll_and_fails_when_padding_is_counted():
    def ppl(logits, targets, pad_id=0):
        return math.exp(F.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                        ignore_index=pad_id).item())

    assert run_check("13.2", ppl).passed
    wrong = lambda logits, targets, pad_id=0: math.exp(  # noqa: E731
        F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item())
    result = run_check("13.2", wrong)
    assert result.status == "failed" and "padding" in result.detail
    assert run_check("13.2", lambda lo, t, pad_id=0: torch.tensor(1.0)).status == "failed"


def test_13_not_attempted():
    def stub(*args, **kwargs):
        raise NotImplementedError

    assert run_check("13.1", stub).status == "not attempted"
    assert run_check("13.2", stub).status == "not attempted"


def test_13_2_reads_pad_id_and_says_so_when_it_is_ignored():
    def always_id_0(logits, targets, pad_id=0):
        keep = targets != 0
        nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
        return math.exp(float(nll[keep].mean()))

    for _ in range(50):  # fresh inputs each time: sentences of one token (all id 0) too
        result = run_check("13.2", always_id_0)
        assert result.status == "failed" and "pad_id=" in result.detail
        assert "the padding is pad_id, not always id 0" in result.detail, result.detail

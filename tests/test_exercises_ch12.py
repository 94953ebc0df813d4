"""Chapter 12's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import pytest

from transformer_book.analysis.compute import transformer_flops
from transformer_book.course.exercises import run_check


def forward_flops(config, src_len, tgt_len):
    return transformer_flops(config, src_len, tgt_len).total


def test_12_1_accepts_the_count_and_names_missing_terms():
    assert run_check("12.1", forward_flops).passed
    no_attention = lambda c, s, t: transformer_flops(c, s, t).dense  # noqa: E731
    result = run_check("12.1", no_attention)
    assert result.status == "failed" and "attention products" in result.detail
    halved = lambda c, s, t: forward_flops(c, s, t) // 2  # noqa: E731
    assert "2 FLOPs per multiply-add" in run_check("12.1", halved).detail
    assert run_check("12.1", lambda c, s, t: "many").status == "failed"


def test_12_1_not_attempted():
    def stub(config, src_len, tgt_len):
        raise NotImplementedError("Exercise 12.1: write your solution here")

    assert run_check("12.1", stub).status == "not attempted"


def good_mfu(tokens_per_second, flops_per_token, peak):
    if tokens_per_second <= 0:
        raise ValueError("tokens_per_second: expected a positive number")
    return tokens_per_second * flops_per_token / peak


@pytest.mark.parametrize(("candidate", "message"), [
    (lambda tps, fpt, peak: tps * fpt / peak, "expected a ValueError"),
    (lambda tps, fpt, peak: 100 * tps * fpt / peak, "expected"),
    (lambda tps, fpt, peak: tps * fpt / peak if tps > 0 else 1 / 0, "ZeroDivisionError"),
])
def test_12_2_rejects_percentages_and_silent_zero_throughput(candidate, message):
    result = run_check("12.2", candidate)
    assert result.status == "failed" and message in result.detail


def test_12_2_accepts_a_correct_mfu_and_reports_not_attempted():
    assert run_check("12.2", good_mfu).passed

    def stub(tokens_per_second, flops_per_token, peak):
        raise NotImplementedError("Exercise 12.2: write your solution here")

    assert run_check("12.2", stub).status == "not attempted"

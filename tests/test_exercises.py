"""The self-checking exercise machinery: pass, fail with details, not attempted."""

from __future__ import annotations

import pytest
import torch

from transformer_book.course.exercises.core import REGISTRY, check, load_all, run_check
from transformer_book.util.validation import BookError


def good_softmax(x, dim=-1):
    shifted = x - x.max(dim=dim, keepdim=True).values
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


def test_every_chapter_module_registers_its_checkers():
    load_all()
    assert "00.1" in REGISTRY
    assert all(key[:2].isdigit() and key[2] == "." for key in REGISTRY)


def test_correct_answer_passes_and_says_what_was_verified(capsys):
    check("00.1", good_softmax)
    out = capsys.readouterr().out
    assert out.startswith("✓ Exercise 00.1 passed: softmax: matched torch.softmax")


def test_not_attempted_is_said_plainly():
    def stub(x, dim=-1):
        raise NotImplementedError("Exercise 00.1: write your solution here")

    result = run_check("00.1", stub)
    assert result.status == "not attempted"
    assert "NotImplementedError" in result.message and "Traceback" not in result.message


def test_overflowing_softmax_fails_naming_the_input():
    result = run_check("00.1", lambda x, dim=-1: x.exp() / x.exp().sum(dim=dim, keepdim=True))
    assert result.status == "failed"
    assert "±1000" in result.detail and "NaN" in result.detail


def test_wrong_values_report_expected_and_received():
    result = run_check("00.1", lambda x, dim=-1: x)
    assert result.status == "failed"
    assert "expected" in result.detail and "received" in result.detail


def test_an_exception_in_the_answer_is_reported_not_raised():
    def crashes(x, dim=-1):
        return x.reshape(-1, 7)

    result = run_check("00.1", crashes)
    assert result.status == "failed"
    assert "your function raised RuntimeError" in result.detail


def test_wrong_shape_is_reported():
    result = run_check("00.1", lambda x, dim=-1: good_softmax(x, dim=dim).sum(dim=dim))
    assert result.status == "failed" and "shape" in result.detail


def test_checks_use_fresh_inputs_each_run():
    seen = []

    def spy(x, dim=-1):
        seen.append(x.clone())
        return good_softmax(x, dim)

    run_check("00.1", spy)
    first = list(seen)
    seen.clear()
    run_check("00.1", spy)
    pairs = zip(first, seen, strict=True)
    assert any(a.shape != b.shape or not torch.equal(a, b) for a, b in pairs)


def test_unknown_exercise_lists_known_ones():
    with pytest.raises(BookError, match=r"exercise_id: expected one of .*00\.1.*received '99\.9'"):
        run_check("99.9", good_softmax)


def test_non_callable_answer_fails_cleanly():
    assert run_check("00.1", 42).status == "failed"  # type: ignore[arg-type]

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


# ------------------------------------------------------------------ what an exercise forbids


def test_short_names_match_every_route_to_one_torch_function():
    from transformer_book.course.exercises.core import run_recorded, short_name

    x = torch.randn(2, 3, dtype=torch.float64)
    routes = [lambda: torch.softmax(x, -1), lambda: x.softmax(-1),
              lambda: torch.nn.functional.softmax(x, -1), lambda: torch._softmax(x, -1, False),
              lambda: torch.ops.aten._softmax(x, -1, False), lambda: torch.special.softmax(x, -1),
              lambda: torch.nn.Softmax(-1)(x)]
    for route in routes:
        _, trace = run_recorded(route)
        assert {short_name(name) for name in trace.calls} == {"softmax"}, trace.calls
    assert short_name("torch.Tensor.requires_grad.__set__") == "requires_grad.__set__"


def test_a_registration_refuses_what_is_not_a_rule():
    from transformer_book.course.exercises.core import exercise

    with pytest.raises(BookError, match=r"forbids: expected Rule objects .*received str"):
        exercise("99.8", "nothing", forbids=["softmax"])  # type: ignore[list-item]
    assert "99.8" not in REGISTRY


def test_rules_fire_only_on_what_they_forbid():
    from transformer_book.course.exercises.core import Calls, LoopOver, UsesAutograd, run_recorded

    x = torch.randn(3, 4, dtype=torch.float64)
    _, plain = run_recorded(good_softmax, x)
    assert Calls({"softmax"}).seen(plain) is None and UsesAutograd().seen(plain) is None
    _, vmapped = run_recorded(torch.func.vmap(lambda r: r.exp() / r.exp().sum()), x)
    assert UsesAutograd().seen(vmapped) is None, "vmap alone is not autograd"
    _, grads = run_recorded(lambda s: torch.func.grad(lambda r: r.exp().sum())(s[0]), x)
    assert "torch.func grad transform" in UsesAutograd().seen(grads)
    given = x.clone().requires_grad_(True)  # inputs that already track grad are not the answer's
    _, tracked = run_recorded(lambda s: (s * 2).sum(), given)
    assert UsesAutograd().seen(tracked) is None

    def inputs(size, generator):
        return [(torch.randn(size, generator=generator),)]

    rule = LoopOver("the positions", inputs=inputs, sizes=(4, 9), size_name="L")
    assert rule.probe(lambda v: v.cumsum(0)) is None
    said = rule.probe(lambda v: torch.stack([v[: i + 1].sum() for i in range(len(v))]))
    assert said.startswith("makes ") and "at L = 4 and" in said and said.endswith("positions")


def test_a_forbidden_call_is_named_even_when_the_answer_then_fails():
    def borrows_then_crashes(x, dim=-1):
        torch.softmax(x, dim=dim)
        raise RuntimeError("later")

    result = run_check("00.1", borrows_then_crashes)
    assert result.status == "failed" and "calls torch.softmax, which" in result.detail

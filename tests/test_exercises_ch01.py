"""Chapter 01 checkers: a right answer passes, wrong answers fail with details, stubs say so."""

from __future__ import annotations

import torch

from transformer_book.course.exercises.ch01 import (
    expected_padding_reference,
    merge_by_replace,
    merge_pair,
)
from transformer_book.course.exercises.core import run_check
from transformer_book.data.batching import padding_fraction


def test_merge_pair_is_left_to_right_and_non_overlapping() -> None:
    assert merge_pair(("a", "a", "a"), ("a", "a")) == ("aa", "a")
    assert merge_pair(("l", "o", "w", "l", "o"), ("l", "o")) == ("lo", "w", "lo")
    assert merge_pair(("es", "t"), ("s", "t")) == ("es", "t")
    assert merge_by_replace(("es", "t"), ("s", "t")) == ("est",), "the bug the exercise hides"


def test_a_counterexample_passes_and_non_counterexamples_fail() -> None:
    assert run_check("01.1", lambda: (("es", "t"), ("s", "t"))).passed
    assert run_check("01.1", lambda: (("Ġl", "o", "w"), ("l", "o"))).passed
    verdict = run_check("01.1", lambda: (("Ġn", "e", "w", "es", "t"), ("s", "t"))).detail
    # stored under the book's solution toggle, the verdict must not answer the exercise
    assert "es" not in verdict.split(": ", 1)[1] and "boundary" not in verdict, verdict
    assert "5 symbols" in verdict and "4 symbols against 5" in verdict, verdict
    overlap = run_check("01.1", lambda: (("a", "a", "a"), ("a", "a")))
    assert overlap.status == "failed" and "not a counterexample" in overlap.detail
    spaced = run_check("01.1", lambda: (("a b", "c"), ("b", "c")))
    assert spaced.status == "failed" and "without spaces" in spaced.detail
    assert run_check("01.1", lambda: (("a", "b"), ("a", "b", "c"))).status == "failed"
    assert run_check("01.1", lambda: "es t").status == "failed"


def expected_padding(lengths, batch_size):
    lengths = sorted(lengths)
    n = len(lengths)
    expected_max = 0.0
    for level in range(1, lengths[-1] + 1):
        below = sum(length < level for length in lengths)
        expected_max += 1 - (below / n) ** batch_size
    return 1 - sum(lengths) / n / expected_max


def test_expected_padding_passes_and_matches_a_simulation() -> None:
    result = run_check("01.2", expected_padding)
    assert result.passed, result.message
    generator = torch.Generator().manual_seed(5)
    lengths = torch.randint(1, 40, (500,), generator=generator).tolist()
    draws = torch.randint(0, 500, (4000, 16), generator=generator).tolist()
    simulated = padding_fraction(draws, lengths)
    assert abs(simulated - expected_padding_reference(lengths, 16)) < 0.01


def test_wrong_padding_formulas_fail() -> None:
    def mean_over_longest(lengths, batch_size):  # ignores the batch size
        return 1 - sum(lengths) / len(lengths) / max(lengths)

    def one_too_many(lengths, batch_size):  # the longest of B + 1 draws
        return expected_padding(lengths, batch_size + 1)

    for wrong in (mean_over_longest, one_too_many):
        result = run_check("01.2", wrong)
        assert result.status == "failed" and "expected" in result.detail, wrong.__name__


def test_checkers_leave_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    run_check("01.1", lambda: (("es", "t"), ("s", "t")))
    run_check("01.2", expected_padding)
    assert torch.equal(before, torch.get_rng_state()), "the notebook's seeded cells stay seeded"


def test_stubs_are_not_attempted() -> None:
    def stub(*args):
        raise NotImplementedError("Exercise 01.1: write your solution here")

    for exercise_id in ("01.1", "01.2"):
        assert run_check(exercise_id, stub).status == "not attempted"

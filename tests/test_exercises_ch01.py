"""Chapter 01 checkers: a right answer passes, wrong answers fail with details, stubs say so."""

from __future__ import annotations

import torch

from transformer_book.course.exercises.core import run_check
from transformer_book.data.batching import TokenBudgetSampler, pad_sequences, token_mask


def pad_and_mask(sequences, pad_id=0):
    ids = pad_sequences(sequences, pad_id=pad_id)
    return ids, token_mask(ids, pad_id=pad_id)


def bucket_by_length(lengths, max_tokens):
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current = [], []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > max_tokens:
            batches.append(current)
            current = []
        current.append(i)
    batches.append(current)
    return batches


def test_correct_answers_pass() -> None:
    for exercise_id, answer in (("01.1", pad_and_mask), ("01.2", bucket_by_length)):
        result = run_check(exercise_id, answer)
        assert result.passed, result.message


def test_reference_bucketing_is_the_sampler_without_shuffle() -> None:
    lengths = [5, 1, 3, 3, 9, 2, 2, 7]
    assert bucket_by_length(lengths, 9) == TokenBudgetSampler(lengths, 9, shuffle=False).batches()


def test_checkers_leave_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    run_check("01.1", pad_and_mask)
    run_check("01.2", bucket_by_length)
    assert torch.equal(before, torch.get_rng_state()), "the notebook's seeded cells stay seeded"


def test_left_padding_fails_naming_the_row() -> None:
    def left_padded(sequences, pad_id=0):
        longest = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
        for row, seq in enumerate(sequences):
            ids[row, longest - len(seq):] = torch.tensor(seq)
        return ids, ids != pad_id

    result = run_check("01.1", left_padded)
    assert result.status == "failed" and "row" in result.detail and "should be" in result.detail


def test_inverted_mask_and_wrong_dtype_fail() -> None:
    def inverted(sequences, pad_id=0):
        ids, mask = pad_and_mask(sequences, pad_id)
        return ids, ~mask

    def float_mask(sequences, pad_id=0):
        ids, mask = pad_and_mask(sequences, pad_id)
        return ids, mask.float()

    assert "True = real token" in run_check("01.1", inverted).detail
    assert "torch.bool" in run_check("01.1", float_mask).detail


def test_over_budget_and_missing_indices_fail() -> None:
    def one_batch(lengths, max_tokens):
        return [list(range(len(lengths)))]

    def drops_last(lengths, max_tokens):
        return [[i] for i in range(len(lengths) - 1)] or [[]]

    assert "tokens" in run_check("01.2", one_batch).detail
    assert "exactly one batch" in run_check("01.2", drops_last).detail


def test_valid_but_different_bucketing_fails_with_explanation() -> None:
    def singletons(lengths, max_tokens):
        return [[i] for i in range(len(lengths))]

    result = run_check("01.2", singletons)
    assert result.status == "failed" and "greedy cut" in result.detail


def test_stubs_are_not_attempted() -> None:
    def stub(*args):
        raise NotImplementedError("Exercise 01.1: write your solution here")

    for exercise_id in ("01.1", "01.2"):
        assert run_check(exercise_id, stub).status == "not attempted"

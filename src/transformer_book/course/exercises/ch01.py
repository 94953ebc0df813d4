"""Checkers for chapter 01 (sequence modelling and transduction)."""

from __future__ import annotations

import torch

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_tensor,
    fresh_generator,
    random_int,
)
from transformer_book.data.batching import TokenBudgetSampler, pad_sequences, token_mask


def _expect_same_rows(received: torch.Tensor, expected: torch.Tensor, *, what: str,
                      sequences: list[list[int]]) -> None:
    """Fail naming the first row that differs, with its input sequence."""
    for row, (got, want) in enumerate(zip(received.tolist(), expected.tolist(), strict=True)):
        if got != want:
            raise ExerciseFailure(
                f"for {what}, row {row} (input {sequences[row]}) should be {want}, received {got}"
            )


@exercise("01.1", "pad_and_mask")
def check_pad_and_mask(pad_and_mask) -> str:
    """``pad_and_mask(sequences, pad_id)`` must equal ``pad_sequences`` + ``token_mask``."""
    generator = fresh_generator()
    cases = []
    for _ in range(20):
        batch = random_int(1, 8, generator)
        pad_id = random_int(0, 5, generator)
        # Real tokens never use the pad id (ids pad_id+1 ... pad_id+100).
        sequences = []
        for _ in range(batch):
            length = random_int(1, 12, generator)
            ids = torch.randint(1, 101, (length,), generator=generator) + pad_id
            sequences.append(ids.tolist())
        what = f"{batch} sequences of random lengths with pad_id={pad_id}"
        cases.append((sequences, pad_id, what))
    length = random_int(1, 9, generator)
    equal = [(torch.randint(4, 50, (length,), generator=generator)).tolist() for _ in range(4)]
    cases.append((equal, 0, f"4 sequences that all have length {length} (no padding needed)"))
    single = (torch.randint(4, 50, (random_int(1, 9, generator),), generator=generator)).tolist()
    cases.append(([single], 0, "a batch holding a single sequence"))
    cases.append(([[7], [8, 9, 10, 11, 12]], 0, "lengths 1 and 5"))
    for sequences, pad_id, what in cases:
        expected_ids = pad_sequences(sequences, pad_id=pad_id)
        expected_mask = token_mask(expected_ids, pad_id=pad_id)
        received = attempt(pad_and_mask, [list(s) for s in sequences], pad_id, what=what)
        if not (isinstance(received, tuple) and len(received) == 2):
            raise ExerciseFailure(
                f"for {what}, expected a tuple (ids, mask), received {received!r:.80}"
            )
        ids, mask = received
        ids = expect_tensor(ids, what=f"ids for {what}", shape=tuple(expected_ids.shape))
        mask = expect_tensor(mask, what=f"mask for {what}", shape=tuple(expected_mask.shape))
        if ids.dtype != torch.long:
            raise ExerciseFailure(
                f"for {what}, ids should have dtype torch.long, received {ids.dtype}"
            )
        if mask.dtype != torch.bool:
            raise ExerciseFailure(
                f"for {what}, mask should have dtype torch.bool, received {mask.dtype}"
            )
        _expect_same_rows(ids, expected_ids, what=f"ids for {what}", sequences=sequences)
        _expect_same_rows(mask, expected_mask, what=f"mask for {what} (True = real token)",
                          sequences=sequences)
    return (
        f"matched pad_sequences and token_mask on {len(cases)} fresh random batches, "
        "including pad ids other than 0, equal lengths and a single sequence"
    )


@exercise("01.2", "bucket_by_length")
def check_bucket_by_length(bucket_by_length) -> str:
    """``bucket_by_length(lengths, max_tokens)`` must cut the sorted indices greedily."""
    generator = fresh_generator()
    cases = []
    for _ in range(15):
        n = random_int(1, 200, generator)
        lengths = torch.randint(1, 41, (n,), generator=generator).tolist()
        max_tokens = random_int(max(lengths), 400, generator)
        cases.append((lengths, max_tokens, f"{n} random lengths with max_tokens={max_tokens}"))
    cases.append(([5], 5, "a single example that fills the budget exactly"))
    cases.append(([3] * 10, 12, "ten examples of equal length 3 with max_tokens=12"))
    cases.append(([9, 2, 9, 2, 9], 9, "max_tokens equal to the longest example (9)"))
    cases.append(([4, 1, 3, 2], 1000, "a budget large enough for everything"))
    for lengths, max_tokens, what in cases:
        received = attempt(bucket_by_length, list(lengths), max_tokens, what=what)
        if not isinstance(received, list) or not all(isinstance(b, list) for b in received):
            raise ExerciseFailure(f"for {what}, expected a list of lists of indices, "
                                  f"received {type(received).__name__}")
        flat = [i for batch in received for i in batch]
        if sorted(flat) != list(range(len(lengths))):
            raise ExerciseFailure(f"for {what}, every index 0..{len(lengths) - 1} must appear in "
                                  "exactly one batch")
        for batch in received:
            if not batch:
                raise ExerciseFailure(f"for {what}, a batch is empty")
            longest = max(lengths[i] for i in batch)
            cost = len(batch) * longest
            if cost > max_tokens:
                raise ExerciseFailure(f"for {what}, batch {batch[:8]} costs {len(batch)} x "
                                      f"{longest} = {cost} > {max_tokens} tokens")
        expected = TokenBudgetSampler(lengths, max_tokens, shuffle=False).batches()
        if received != expected:
            raise ExerciseFailure(
                f"for {what}, the batches respect the budget but are not the greedy cut of the "
                f"indices sorted by length (ties: smaller index first); expected "
                f"{len(expected)} batches starting {expected[0][:6]}, received {len(received)} "
                f"starting {received[0][:6]}"
            )
    return (
        f"matched the greedy length-sorted cut on {len(cases)} fresh cases: every index in exactly "
        "one batch, every batch within max_tokens, including a single example and equal lengths"
    )

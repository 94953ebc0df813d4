"""Checkers for chapter 01 (sequence modelling and transduction)."""

from __future__ import annotations

import math
import numbers
from collections import Counter

import torch

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_close,
    fresh_generator,
    random_int,
)

__all__ = ["expected_padding_reference", "merge_by_replace", "merge_pair"]


def merge_pair(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    """One BPE merge done right: join each non-overlapping ``pair``, left to right."""
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return tuple(merged)


def merge_by_replace(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    """The merge of exercise 01.1, with its bug: text replacement on the spaced symbols."""
    return tuple(" ".join(symbols).replace(" ".join(pair), "".join(pair)).split(" "))


def _expect_symbols(value, what: str) -> tuple[str, ...]:
    if not isinstance(value, (tuple, list)) or not value or not all(
            isinstance(s, str) and s and " " not in s for s in value):
        raise ExerciseFailure(f"{what} should be a non-empty tuple of non-empty strings without "
                              f"spaces (BPE symbols), received {value!r:.80}")
    return tuple(value)


@exercise("01.1", "counterexample")
def check_counterexample(counterexample) -> str:
    """``counterexample()`` must return ``(symbols, pair)`` on which ``merge_by_replace`` errs."""
    received = attempt(counterexample, what="counterexample()")
    if not (isinstance(received, tuple) and len(received) == 2):
        raise ExerciseFailure(f"expected a tuple (symbols, pair), received {received!r:.80}")
    symbols = _expect_symbols(received[0], "symbols")
    pair = _expect_symbols(received[1], "pair")
    if len(pair) != 2:
        raise ExerciseFailure(f"pair should hold two symbols, received {len(pair)}: {pair}")
    right, wrong = merge_pair(symbols, pair), merge_by_replace(symbols, pair)
    if right == wrong:
        raise ExerciseFailure(
            f"on symbols={symbols} and pair={pair} both merges give {right}: not a counterexample "
            "(overlaps such as ('a', 'a', 'a') are handled left to right by both; look at "
            "symbols longer than one character)")
    # The verdict stays under the book's solution toggle as output: it names no symbols and
    # no reason, so that it cannot answer the exercise for a reader who has not tried it.
    return (f"merge_by_replace and a correct merge turn your word of {len(symbols)} symbols "
            f"into different words ({len(wrong)} symbols against {len(right)}): a "
            "counterexample")


def expected_padding_reference(lengths: list[int], batch_size: int) -> float:
    """Padding share of many batches of ``batch_size`` lengths drawn with replacement.

    Over many batches the share tends to ``1 - E[length] / E[max of B lengths]``, with
    ``E[max] = sum_l P(max >= l) = sum_l (1 - F(l - 1)^B)`` for the empirical CDF F.
    """
    counts = Counter(lengths)
    total, below, expected_max = len(lengths), 0, 0.0
    for length in range(1, max(counts) + 1):
        expected_max += 1 - (below / total) ** batch_size  # P(max >= length)
        below += counts.get(length, 0)
    return 1 - (sum(lengths) / total) / expected_max


@exercise("01.2", "expected_padding")
def check_expected_padding(expected_padding) -> str:
    """``expected_padding(lengths, batch_size)`` must equal the limit share of padding."""
    generator = fresh_generator()
    cases = []
    for _ in range(12):
        n = random_int(1, 300, generator)
        top = random_int(1, 60, generator)
        lengths = torch.randint(1, top + 1, (n,), generator=generator).tolist()
        cases.append((lengths, random_int(1, 200, generator), f"{n} random lengths up to {top}"))
    cases += [([5, 5, 5, 5], 8, "equal lengths (no padding, whatever the batch)"),
              ([3, 9, 1, 12], 1, "batch_size 1 (a batch never pads)"),
              ([1, 2], 2, "lengths 1 and 2 in batches of 2"),
              ([1] * 99 + [40], 50, "one long outlier in 100")]
    for lengths, batch_size, what in cases:
        what = f"{what}, batch_size={batch_size}"
        received = attempt(expected_padding, list(lengths), batch_size, what=what)
        if isinstance(received, torch.Tensor) and received.numel() == 1:
            received = received.item()
        if (not isinstance(received, numbers.Real) or isinstance(received, bool)
                or not math.isfinite(received)):
            raise ExerciseFailure(f"for {what}, expected a number, received {received!r:.60}")
        expected = expected_padding_reference(lengths, batch_size)
        expect_close(torch.tensor(float(received), dtype=torch.float64),
                     torch.tensor(expected, dtype=torch.float64), what=what, atol=1e-9, rtol=0.0)
    lengths = torch.randint(1, 30, (50,), generator=generator).tolist()
    draws = torch.randint(0, 50, (20000, 8), generator=generator)  # 20,000 batches of 8
    batch_lengths = torch.tensor(lengths)[draws]  # (20000, 8)
    simulated = 1 - batch_lengths.sum().item() / (8 * batch_lengths.amax(dim=1).sum().item())
    received = attempt(expected_padding, lengths, 8, what="50 lengths, batch_size=8")
    if abs(float(received) - simulated) > 0.01:
        raise ExerciseFailure(f"a simulation of 20,000 batches gives {simulated:.4f}, "
                              f"received {float(received):.4f}")
    return (f"matched the exact limit on {len(cases)} fresh cases (equal lengths, batch size 1, "
            "an outlier) and a simulation of 20,000 random batches")

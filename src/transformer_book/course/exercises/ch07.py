"""Checkers for chapter 07 (cross-attention and the encoder-decoder)."""

from __future__ import annotations

import copy
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
from transformer_book.nn.attention import scaled_dot_product_attention
from transformer_book.toy.aligner import alignment_accuracy, expected_alignment


def _pair(received, what: str) -> tuple:
    if not (isinstance(received, tuple) and len(received) == 2):
        raise ExerciseFailure(
            f"for {what}, expected a tuple (output, weights), received {type(received).__name__}"
        )
    return received


def _source_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """True at the real tokens of right-padded sources: ``lengths (B,)`` -> ``(B, width)``."""
    return torch.arange(width) < lengths[:, None]


@exercise("07.1", "padded_cross_attention")
def check_cross_attention(cross_attention) -> str:
    """``padded_cross_attention(decoder_states, encoder_states, W_q, W_k, W_v, memory_mask=None)``
    must equal the package's scaled dot-product attention with queries from the decoder and
    keys and values from the encoder, padding masked."""
    generator = fresh_generator()
    cases = []
    for index in range(16):
        batch, l_q, l_k = (random_int(1, high, generator) for high in (4, 6, 7))
        d_model = random_int(2, 8, generator)
        d_k, d_v = random_int(1, 6, generator), random_int(1, 5, generator)
        dec = torch.randn(batch, l_q, d_model, generator=generator, dtype=torch.float64)
        enc = torch.randn(batch, l_k, d_model, generator=generator, dtype=torch.float64)
        w_q = torch.randn(d_model, d_k, generator=generator, dtype=torch.float64)
        w_k = torch.randn(d_model, d_k, generator=generator, dtype=torch.float64)
        w_v = torch.randn(d_model, d_v, generator=generator, dtype=torch.float64)
        if index % 3 == 0:
            mask, kind = None, "no mask"
        else:  # right padding: every source keeps at least its first token
            lengths = torch.randint(1, l_k + 1, (batch,), generator=generator)
            mask, kind = _source_mask(lengths, l_k), "a padded memory"
        cases.append((dec, enc, w_q, w_k, w_v, mask,
                      f"decoder_states {tuple(dec.shape)}, encoder_states {tuple(enc.shape)}, "
                      f"d_k={d_k}, d_v={d_v} with {kind}"))
    dec = torch.randn(2, 3, 4, generator=generator, dtype=torch.float64)
    enc = torch.randn(2, 4, 4, generator=generator, dtype=torch.float64)
    eye = torch.eye(4, dtype=torch.float64)
    cases.append((dec, enc, eye, eye, eye, torch.tensor([[True] * 4, [True, True, False, False]]),
                  "L_q=3 target positions, L_k=4 source positions, the second source padded"))
    big = 20.0 * torch.randn(1, 2, 6, generator=generator, dtype=torch.float64)
    big_memory = 20.0 * torch.randn(1, 5, 6, generator=generator, dtype=torch.float64)
    w = torch.randn(6, 6, generator=generator, dtype=torch.float64)
    cases.append((big, big_memory, w, w, w, torch.tensor([[True, True, True, False, False]]),
                  "large scores (a nearly one-hot alignment) and padding"))
    for dec, enc, w_q, w_k, w_v, mask, what in cases:
        keys_ok = None if mask is None else mask[:, None, :]  # (B, L_k) -> (B, 1, L_k)
        expected_out, expected_weights = scaled_dot_product_attention(
            dec @ w_q, enc @ w_k, enc @ w_v, keys_ok
        )
        received = _pair(attempt(cross_attention, dec.clone(), enc.clone(), w_q.clone(),
                                 w_k.clone(), w_v.clone(),
                                 None if mask is None else mask.clone(), what=what), what)
        expect_close(received[1], expected_weights, what=f"the weights for {what}",
                     atol=1e-9, rtol=1e-7)
        expect_close(received[0], expected_out, what=f"the output for {what}", atol=1e-9, rtol=1e-7)
    return (
        f"matched transformer_book's scaled_dot_product_attention(dec @ W_q, enc @ W_k, "
        f"enc @ W_v) on {len(cases)} fresh inputs with L_q != L_k, d_v != d_k, with and without "
        "a padded memory (zero weight on padding), and large scores"
    )


def _as_number(received, what: str) -> float:
    if isinstance(received, torch.Tensor) and received.numel() == 1:
        return float(received)
    if isinstance(received, numbers.Real) and not isinstance(received, bool):
        return float(received)
    raise ExerciseFailure(f"for {what}, expected a number, received {type(received).__name__}")


def _reference_accuracy(weights: torch.Tensor, lengths: torch.Tensor) -> float:
    """Hits over all real output positions, via the package's per-example alignment check."""
    hits, total = 0.0, 0
    for b, n in enumerate(lengths.tolist()):
        expected = expected_alignment("reverse", list(range(n)))
        hits += alignment_accuracy(weights[b, :n, :], expected) * n
        total += n
    return hits / total


def _random_alignments(batch: int, width: int, lengths: torch.Tensor, right: float,
                       generator: torch.Generator) -> torch.Tensor:
    """Softmax weights ``(B, T=width, S=width)``, zero on padding; a fraction ``right`` of the
    real rows has its largest weight on the reversal's source position."""
    scores = torch.randn(batch, width, width, generator=generator, dtype=torch.float64)
    keys_ok = _source_mask(lengths, width)[:, None, :]  # (B, 1, S)
    for b, n in enumerate(lengths.tolist()):
        for t in range(width):
            if t < n and float(torch.rand(1, generator=generator)) < right:
                scores[b, t, n - 1 - t] += 8.0  # plant the correct alignment
            elif t < n:
                scores[b, t, n - 1 - t] -= 8.0  # make sure this row misses
            else:
                scores[b, t, random_int(0, n - 1, generator)] += 8.0  # a padded output row
    weights = torch.softmax(scores.masked_fill(~keys_ok, float("-inf")), dim=-1)
    return weights


@exercise("07.2", "reversal_alignment_accuracy")
def check_reversal_alignment_accuracy(reversal_alignment_accuracy) -> str:
    """``reversal_alignment_accuracy(weights (B, T, S), src_lengths (B,))`` must give the
    fraction of real output positions ``t < n_b`` whose largest weight sits on ``n_b - 1 - t``,
    over the whole batch, padded rows ignored."""
    generator = fresh_generator()
    cases = []
    for index in range(12):
        batch, width = random_int(1, 5, generator), random_int(1, 9, generator)
        lengths = torch.randint(1, width + 1, (batch,), generator=generator)
        lengths[0] = width  # the longest source fills the padded width
        right = (0.0, 0.5, 0.8, 1.0)[index % 4]
        weights = _random_alignments(batch, width, lengths, right, generator)
        cases.append((weights, lengths, f"weights {tuple(weights.shape)}, src_lengths "
                                        f"{lengths.tolist()}"))
    lengths = torch.tensor([1])
    cases.append((torch.ones(1, 1, 1, dtype=torch.float64), lengths, "a single one-token source"))
    lengths = torch.tensor([5, 2])
    cases.append((_random_alignments(2, 5, lengths, 1.0, generator), lengths,
                  "every real row right (padded rows point elsewhere)"))
    lengths = torch.tensor([4, 4, 1])
    cases.append((_random_alignments(3, 4, lengths, 0.0, generator), lengths,
                  "no real row right"))
    for weights, lengths, what in cases:
        expected = _reference_accuracy(weights, lengths)
        received = attempt(reversal_alignment_accuracy, weights.clone(), lengths.clone(),
                           what=what)
        value = _as_number(received, what)
        expect_close(torch.tensor(value, dtype=torch.float64),
                     torch.tensor(expected, dtype=torch.float64), what=what, atol=1e-9)
    return (
        f"matched the reference on {len(cases)} fresh padded batches of cross-attention "
        "weights (accuracies from 0 to 1), ignoring the rows of padded outputs, one-token "
        "sources included"
    )


def _content_blind_reference(sources: list[list[int]], task: str) -> float:
    """The best alignment that sees only (source length n, output position i): for each
    (n, i) the source position most often among the acceptable ones, over ``sources``;
    returns the fraction of all output rows it gets right."""
    counts: dict[tuple[int, int], Counter] = {}
    rows = 0
    for source in sources:
        for i, allowed in enumerate(expected_alignment(task, source)):
            counts.setdefault((len(source), i), Counter()).update(allowed)
            rows += 1
    return sum(max(c.values()) for c in counts.values()) / rows


def _random_sources(count: int, max_len: int, vocab: int,
                    generator: torch.Generator) -> list[list[int]]:
    return [[random_int(4, 3 + vocab, generator) for _ in range(random_int(1, max_len, generator))]
            for _ in range(count)]


@exercise("07.5", "content_blind_accuracy")
def check_content_blind_accuracy(content_blind_accuracy) -> str:
    """``content_blind_accuracy(sources, task)``: the fraction of output rows that the best
    alignment depending only on (source length, output position) gets right, ties counted
    as :func:`~transformer_book.toy.aligner.expected_alignment` lists them."""
    generator = fresh_generator()
    cases = []
    for index in range(15):
        task = ("sort", "reverse", "copy")[index % 3]
        vocab = (2, 5, 40)[(index // 3) % 3]  # many repeats, some, almost none
        sources = _random_sources(random_int(1, 60, generator), random_int(1, 9, generator),
                                  vocab, generator)
        cases.append((sources, task, f"{len(sources)} {task} sources over {vocab} tokens"))
    cases.append(([[7, 5, 9]], "sort", "one sort source [7, 5, 9]"))
    cases.append(([[6, 6, 6, 6]] * 3, "sort", "sources of one repeated token"))
    distinct = [torch.randperm(6, generator=generator).add(4).tolist() for _ in range(200)]
    cases.append((distinct, "sort", "200 sort sources of 6 distinct tokens"))
    for sources, task, what in cases:
        expected = _content_blind_reference(sources, task)
        received = attempt(content_blind_accuracy, copy.deepcopy(sources), task, what=what)
        value = _as_number(received, what)
        expect_close(torch.tensor(value, dtype=torch.float64),
                     torch.tensor(expected, dtype=torch.float64), what=what, atol=1e-9)
    return (
        f"matched the reference on {len(cases)} fresh sets of sources (sort, reverse and copy; "
        "many, few and no repeated tokens; mixed lengths), counting every acceptable position "
        "of a tie as right"
    )

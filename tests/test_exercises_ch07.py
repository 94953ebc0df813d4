"""Chapter 07's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import math

import torch

from transformer_book.course.exercises import run_check


def cross_attention(decoder_states, encoder_states, W_q, W_k, W_v, memory_mask=None):
    q, k, v = decoder_states @ W_q, encoder_states @ W_k, encoder_states @ W_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, L_q, L_k)
    if memory_mask is not None:
        scores = scores.masked_fill(~memory_mask[:, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def test_07_1_passes_and_rejects_swapped_roles_missing_mask_and_scale():
    assert run_check("07.1", cross_attention).passed
    swapped = lambda d, e, wq, wk, wv, m=None: cross_attention(e, d, wq, wk, wv, None)  # noqa: E731
    assert run_check("07.1", swapped).status == "failed"
    unmasked = lambda d, e, wq, wk, wv, m=None: cross_attention(d, e, wq, wk, wv, None)  # noqa: E731
    result = run_check("07.1", unmasked)
    assert result.status == "failed" and "padd" in result.detail
    unscaled = lambda d, e, wq, wk, wv, m=None: cross_attention(  # noqa: E731
        d * math.sqrt(wq.shape[1]), e, wq, wk, wv, m)
    assert run_check("07.1", unscaled).status == "failed"
    result = run_check("07.1", lambda *args: cross_attention(*args)[0])
    assert result.status == "failed" and "tuple" in result.detail


def test_07_1_not_attempted():
    def stub(decoder_states, encoder_states, W_q, W_k, W_v, memory_mask=None):
        raise NotImplementedError("Exercise 07.1: write your solution here")

    assert run_check("07.1", stub).status == "not attempted"


def reversal_alignment_accuracy(weights, src_lengths):
    hits, total = 0, 0
    for b, n in enumerate(src_lengths.tolist()):
        picked = weights[b, :n].argmax(dim=-1)  # (n,)
        hits += int((picked == torch.arange(n - 1, -1, -1)).sum())
        total += n
    return hits / total


def test_07_2_passes_and_rejects_padded_rows_and_per_example_means():
    assert run_check("07.2", reversal_alignment_accuracy).passed
    as_tensor = lambda w, n: torch.tensor(reversal_alignment_accuracy(w, n))  # noqa: E731
    assert run_check("07.2", as_tensor).passed

    def counts_padded_rows(weights, src_lengths):
        width = weights.shape[1]
        target = torch.stack([torch.arange(width).flip(0) - (width - n)
                              for n in src_lengths.tolist()])
        return float((weights.argmax(-1) == target).double().mean())

    assert run_check("07.2", counts_padded_rows).status == "failed"

    def mean_of_means(weights, src_lengths):
        scores = [reversal_alignment_accuracy(weights[b:b + 1], src_lengths[b:b + 1])
                  for b in range(len(src_lengths))]
        return sum(scores) / len(scores)

    assert run_check("07.2", mean_of_means).status == "failed"
    result = run_check("07.2", lambda w, n: "1.0")
    assert result.status == "failed" and "number" in result.detail


def test_07_2_not_attempted():
    def stub(weights, src_lengths):
        raise NotImplementedError("Exercise 07.2: write your solution here")

    assert run_check("07.2", stub).status == "not attempted"


def content_blind_accuracy(sources, task, first_only=False, by_length=True):
    from collections import Counter

    from transformer_book.toy.aligner import expected_alignment

    counts, rows = {}, 0
    for source in sources:
        for i, allowed in enumerate(expected_alignment(task, source)):
            key = (len(source), i) if by_length else i
            counts.setdefault(key, Counter()).update(allowed[:1] if first_only else allowed)
            rows += 1
    return sum(max(c.values()) for c in counts.values()) / rows


def test_07_5_passes_and_rejects_ignored_ties_and_ignored_lengths():
    assert run_check("07.5", content_blind_accuracy).passed
    as_tensor = lambda s, t: torch.tensor(content_blind_accuracy(s, t))  # noqa: E731
    assert run_check("07.5", as_tensor).passed
    first_only = lambda s, t: content_blind_accuracy(s, t, first_only=True)  # noqa: E731
    assert run_check("07.5", first_only).status == "failed"
    no_lengths = lambda s, t: content_blind_accuracy(s, t, by_length=False)  # noqa: E731
    assert run_check("07.5", no_lengths).status == "failed"
    assert run_check("07.5", lambda s, t: "0.5").status == "failed"


def test_07_5_distinct_sort_sources_give_one_over_n():
    """The derivation the exercise asks for: n distinct tokens in random order put the i-th
    smallest at a uniform position, so a content-blind alignment gets 1/n of the rows."""
    generator = torch.Generator().manual_seed(0)
    sources = [torch.randperm(5, generator=generator).add(4).tolist() for _ in range(20000)]
    assert abs(content_blind_accuracy(sources, "sort") - 1 / 5) < 0.01
    assert content_blind_accuracy(sources, "reverse") == 1.0

"""Checkers for chapter 13 (ablations)."""

from __future__ import annotations

import math

import torch

from transformer_book.analysis.ablation import restrict_key_size
from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_equal,
    fresh_generator,
)
from transformer_book.nn.attention import MultiHeadAttention
from transformer_book.nn.transformer import count_parameters
from transformer_book.train.objective import label_smoothed_cross_entropy


def _reference_count(d_model: int, h: int, d_k: int) -> int:
    module = MultiHeadAttention(d_model, h)
    unused = restrict_key_size(module, d_k)
    return count_parameters(module) - unused


@exercise("13.1", "attention_parameter_count")
def check_attention_parameter_count(candidate) -> str:
    """Parameters of one multi-head attention sub-layer with key size ``d_k``, d_v = d_model/h."""
    gen = fresh_generator()
    cases = [(512, 8, 64, "the paper's base layer (d_model=512, h=8, d_k=64)"),
             (512, 8, 16, "Table 3 row (B), d_k=16"),
             (512, 1, 512, "one head (d_model=512, h=1, d_k=512)"),
             (8, 8, 1, "one dimension per head (d_model=8, h=8, d_k=1)")]
    for _ in range(6):
        h = int(torch.randint(1, 9, (1,), generator=gen))
        d_head = int(torch.randint(1, 17, (1,), generator=gen))
        d_k = int(torch.randint(1, d_head + 1, (1,), generator=gen))
        cases.append((h * d_head, h, d_k, f"d_model={h * d_head}, h={h}, d_k={d_k}"))
    for d_model, h, d_k, what in cases:
        received = attempt(candidate, d_model, h, d_k, what=what)
        if isinstance(received, (torch.Tensor, bool)) or not isinstance(received, int):
            raise ExerciseFailure(f"for {what}, expected a Python int, received "
                                  f"{type(received).__name__}")
        expect_equal(received, _reference_count(d_model, h, d_k), what=what)
    return (f"matched the package's MultiHeadAttention (with restrict_key_size) on {len(cases)} "
            "shapes, including the paper's base layer, row (B) and one dimension per head")


@exercise("13.2", "perplexity")
def check_perplexity(candidate) -> str:
    """exp(mean unsmoothed NLL over non-padding targets)."""
    gen = fresh_generator()
    cases = []
    for index in range(6):  # half with padding id 0, half with another one (pad_id=...)
        b, t, v = (int(torch.randint(1, 5, (1,), generator=gen)),
                   int(torch.randint(1, 7, (1,), generator=gen)),
                   int(torch.randint(3, 12, (1,), generator=gen)))
        pad_id = 0 if index < 3 else int(torch.randint(1, v, (1,), generator=gen))
        logits = torch.randn(b, t, v, generator=gen, dtype=torch.float64) * 3
        targets = torch.randint(0, v, (b, t), generator=gen)
        # the first token of every sentence is real: id 0 when pad_id is another id
        targets[:, 0] = 0 if pad_id else targets[:, 0].clamp(min=1)
        targets[:, 1:] = targets[:, 1:].masked_fill(targets[:, 1:] == pad_id, (pad_id + 1) % v)
        targets[:, 1:] = targets[:, 1:].masked_fill(
            torch.rand(b, t - 1, generator=gen) < 0.3, pad_id)
        what = (f"logits of shape {(b, t, v)} with some padding (id 0)" if not pad_id else
                f"logits of shape {(b, t, v)} with pad_id={pad_id} (id 0 a real token)")
        cases.append((logits, targets, pad_id, what))
    logits = torch.randn(2, 5, 7, generator=gen, dtype=torch.float64)
    targets = torch.zeros(2, 5, dtype=torch.long)
    targets[1, 0] = 3
    cases.append((logits, targets, 0, "a batch that is all padding but one token"))
    logits = torch.randn(3, 5, 6, generator=gen, dtype=torch.float64) * 3
    targets = torch.tensor([[1, 2, 3, 4, 5], [5, 4, 0, 0, 0], [3, 0, 0, 0, 0]])
    cases.append((logits, targets, 0, "sentences of 5, 2 and 1 tokens (a mean over tokens, "
                  "not over sentences)"))
    sure = torch.full((1, 3, 4), -30.0, dtype=torch.float64)
    sure[0, torch.arange(3), torch.tensor([1, 2, 3])] = 30.0
    cases.append((sure, torch.tensor([[1, 2, 3]]), 0,
                  "a model that is certain and right (ppl 1)"))
    for logits, targets, pad_id, what in cases:
        # pad_id left at its default of 0, or passed when it is another id
        extra = {"pad_id": pad_id} if pad_id else {}
        received = attempt(candidate, logits.clone(), targets.clone(), what=what, **extra)
        try:
            value = float(received)
        except (TypeError, ValueError):
            raise ExerciseFailure(f"for {what}, expected a number, received "
                                  f"{type(received).__name__}") from None
        expected = math.exp(float(label_smoothed_cross_entropy(logits, targets, 0.0, pad_id)))
        if not math.isfinite(value) or abs(value - expected) > 1e-6 * max(1.0, expected):
            hint = ""
            with_padding = math.exp(float(label_smoothed_cross_entropy(logits, targets, 0.0, -1)))
            if abs(value - with_padding) < 1e-6 * max(1.0, with_padding):
                hint = " (did you count the padding positions?)"
            elif pad_id and not bool((targets != 0).any()):
                # every target is id 0, a real token: taking id 0 for padding leaves
                # nothing to score, so such an answer is not finite
                if not math.isfinite(value):
                    hint = " (the padding is pad_id, not always id 0)"
            elif pad_id:  # the padding taken to be id 0 whatever pad_id says
                pad_zero = math.exp(float(label_smoothed_cross_entropy(logits, targets, 0.0, 0)))
                if abs(value - pad_zero) < 1e-6 * max(1.0, pad_zero):
                    hint = " (the padding is pad_id, not always id 0)"
            raise ExerciseFailure(f"for {what}, expected {expected:.6g}, received {value:.6g}"
                                  + hint)
    return (f"matched exp(cross-entropy without smoothing, padding ignored) on {len(cases)} "
            "fresh batches, including almost-all padding, sentences of unequal lengths and a "
            "certain, correct model")

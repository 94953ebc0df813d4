"""Checkers for chapter 10 (training on real data)."""

from __future__ import annotations

import math

import torch

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_close,
    fresh_generator,
    random_int,
)
from transformer_book.train.objective import label_smoothed_cross_entropy, noam_lr


@exercise("10.1", "noam_lr")
def check_noam_lr(candidate) -> str:
    """``noam_lr(step, d_model, warmup_steps)`` must equal eq. 3 (the package's ``noam_lr``)
    for steps counted from 1, at the peak, around it and far beyond it."""
    generator = fresh_generator()
    cases = []
    for _ in range(25):
        d_model = 2 ** random_int(4, 11, generator)  # 16 .. 2048
        warmup = random_int(1, 8000, generator)
        step = random_int(1, 4 * warmup + 10, generator)
        cases.append((step, d_model, warmup, f"step={step}, d_model={d_model}, "
                                             f"warmup_steps={warmup}"))
    d_model = 2 ** random_int(6, 10, generator)
    warmup = random_int(2, 5000, generator)
    for step, note in ((1, "the first step"), (warmup, "the peak, step == warmup_steps"),
                       (warmup - 1, "one step before the peak"),
                       (warmup + 1, "one step after the peak"),
                       (100 * warmup, "far into the decay")):
        cases.append((step, d_model, warmup, f"{note} (step={step}, d_model={d_model}, "
                                             f"warmup_steps={warmup})"))
    cases.append((1, 512, 1, "warmup_steps=1 (no warmup at all)"))
    cases.append((4000, 512, 4000, "the paper's base model at its peak"))
    for step, d_model, warmup, what in cases:
        received = attempt(candidate, step, d_model, warmup, what=what)
        if isinstance(received, torch.Tensor) and received.numel() == 1:
            received = float(received)
        if not isinstance(received, (int, float)) or isinstance(received, bool):
            raise ExerciseFailure(f"for {what}, expected a number, received "
                                  f"{type(received).__name__}")
        expected = noam_lr(step, d_model, warmup)
        if not math.isclose(float(received), expected, rel_tol=1e-9, abs_tol=0.0):
            raise ExerciseFailure(f"for {what}, expected {expected:.6e}, received "
                                  f"{float(received):.6e}")
    return (f"matched transformer_book's noam_lr (eq. 3) at {len(cases)} fresh steps, "
            "including step 1, the peak at warmup_steps, its neighbours and the long decay")


@exercise("10.2", "label_smoothed_loss")
def check_label_smoothed_loss(candidate) -> str:
    """``label_smoothed_loss(logits, targets, eps, pad_id)`` must equal the package's
    label-smoothed cross-entropy (mean over non-padding targets)."""
    generator = fresh_generator()
    cases = []
    for index in range(16):
        vocab = random_int(2, 40, generator)
        pad_id = random_int(0, vocab - 1, generator)
        batch, length = random_int(1, 4, generator), random_int(1, 7, generator)
        eps = (0.0, 0.1, float(torch.rand(1, generator=generator)))[index % 3]
        logits = 3 * torch.randn(batch, length, vocab, generator=generator, dtype=torch.float64)
        targets = torch.randint(0, vocab, (batch, length), generator=generator)
        lengths = torch.randint(1, length + 1, (batch,), generator=generator)
        targets[torch.arange(length) >= lengths[:, None]] = pad_id  # right padding
        targets[0, 0] = (pad_id + 1) % vocab  # at least one real token
        cases.append((logits, targets, eps, pad_id,
                      f"logits {tuple(logits.shape)}, pad_id={pad_id}, eps={eps:.3g}"))
    logits = torch.tensor([[[1000.0, -1000.0, 0.0], [0.0, 1000.0, -1000.0]]],
                          dtype=torch.float64)
    cases.append((logits, torch.tensor([[1, 0]]), 0.1, 0,
                  "logits near ±1000 (take log_softmax, never log of softmax)"))
    flat = torch.randn(6, 9, generator=generator, dtype=torch.float64)
    cases.append((flat, torch.tensor([3, 0, 0, 8, 0, 1]), 0.1, 0,
                  "flat (N, V) logits with half of the targets padding"))
    cases.append((flat, torch.tensor([3, 5, 2, 8, 7, 1]), 1.0, 0,
                  "eps = 1 (a uniform target)"))
    for logits, targets, eps, pad_id, what in cases:
        expected = label_smoothed_cross_entropy(logits, targets, eps, pad_id)
        received = attempt(candidate, logits.clone(), targets.clone(), eps, pad_id, what=what)
        expect_close(received, expected, what=what, atol=1e-9, rtol=1e-9)
    return (f"matched label_smoothed_cross_entropy on {len(cases)} fresh batches with padding, "
            "eps from 0 to 1, tiny and flat vocabularies and logits near ±1000")

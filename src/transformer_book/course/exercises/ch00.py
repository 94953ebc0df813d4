"""Checkers for chapter 00 (how to use this book)."""

from __future__ import annotations

import torch

from transformer_book.course.exercises.core import (
    attempt,
    exercise,
    expect_close,
    fresh_generator,
)


@exercise("00.1", "softmax")
def check_softmax(softmax) -> str:
    """``softmax(x, dim=-1)`` must equal ``torch.softmax`` and survive huge logits."""
    generator = fresh_generator()
    cases = []
    for _ in range(20):
        ndim = int(torch.randint(1, 4, (1,), generator=generator))
        shape = tuple(int(s) for s in torch.randint(1, 7, (ndim,), generator=generator))
        scale = float(torch.empty(1).uniform_(0.1, 10.0, generator=generator))
        x = torch.randn(shape, generator=generator, dtype=torch.float64) * scale
        dim = int(torch.randint(-ndim, ndim, (1,), generator=generator))
        cases.append((x, dim, f"x of shape {shape} with dim={dim}"))
    huge = torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]], dtype=torch.float64)
    cases.append((huge, -1, "logits near ±1000 (exp overflows unless you subtract the max)"))
    cases.append(
        (torch.randn(4, 1, generator=generator, dtype=torch.float64), -1, "one element per row")
    )
    for x, dim, what in cases:
        received = attempt(softmax, x.clone(), dim=dim, what=what)
        expect_close(received, torch.softmax(x, dim=dim), what=what, atol=1e-9, rtol=1e-7)
    return (
        f"matched torch.softmax on {len(cases)} fresh random inputs of 1 to 3 dimensions, "
        "any dim, including logits near ±1000 and single-element rows"
    )

"""Checkers for chapter 00 (how to use this book)."""

from __future__ import annotations

import torch

from transformer_book.course.exercises.core import (
    Calls,
    attempt,
    exercise,
    expect_close,
    fresh_generator,
)

NO_SOFTMAX = Calls({"softmax", "log_softmax", "softmin"},
                   advice="compute it from exp, max and sum (softmax(x) = softmax(x - c) for "
                   "any constant c)")


def _spread_rows(generator: torch.Generator, dtype: torch.dtype, reach: float) -> torch.Tensor:
    """Rows whose largest and smallest logits lie about ``2 · reach`` apart *within the row*:
    only a shift by the row's maximum keeps every exponent finite (a shift by the mean or
    the minimum overflows)."""
    rows, length = 4, 5
    x = torch.empty(rows, length, dtype=dtype).uniform_(-reach, reach, generator=generator)
    for row in range(rows):  # one logit near +reach and one near -reach in every row
        high, low = torch.randperm(length, generator=generator)[:2].tolist()
        x[row, high] = reach * float(torch.empty(1).uniform_(0.8, 1.0, generator=generator))
        x[row, low] = -reach * float(torch.empty(1).uniform_(0.8, 1.0, generator=generator))
    return x


@exercise("00.1", "softmax", forbids=[NO_SOFTMAX])
def check_softmax(softmax) -> str:
    """``softmax(x, dim=-1)`` must equal ``torch.softmax``, survive huge logits and logits
    far apart within one row, in float64 and float32, without calling a softmax."""
    generator = fresh_generator()
    cases = []
    for _ in range(15):  # with the 7 fixed cases below, 22 (the count the chapter prints)
        ndim = int(torch.randint(1, 4, (1,), generator=generator))
        shape = tuple(int(s) for s in torch.randint(1, 7, (ndim,), generator=generator))
        scale = float(torch.empty(1).uniform_(0.1, 10.0, generator=generator))
        x = torch.randn(shape, generator=generator, dtype=torch.float64) * scale
        dim = int(torch.randint(-ndim, ndim, (1,), generator=generator))
        cases.append((x, dim, f"x of shape {shape} with dim={dim}"))
    huge = torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]], dtype=torch.float64)
    cases.append((huge, -1, "logits near ±1000 (exp overflows unless you subtract the max)"))
    cases.append((torch.tensor([[1000.0, -1000.0]], dtype=torch.float64), -1,
                  "the row [1000, -1000] (a shift by the mean or the minimum overflows)"))
    spread = _spread_rows(generator, torch.float64, 1000.0)
    cases.append((spread, -1, "float64 rows whose logits span about ±1000 within the row"))
    cases.append((spread.T.contiguous(), 0, "the same rows as columns, with dim=0"))
    cases.append((torch.tensor([[0.0, 100.0], [-100.0, 100.0]]), -1,
                  "float32 rows [0, 100] and [-100, 100] (float32's exp overflows past 88.7)"))
    cases.append((_spread_rows(generator, torch.float32, 100.0), 1,
                  "float32 rows whose logits span about ±100 within the row, dim=1"))
    cases.append(
        (torch.randn(4, 1, generator=generator, dtype=torch.float64), -1, "one element per row")
    )
    for x, dim, what in cases:
        received = attempt(softmax, x.clone(), dim=dim, what=what)
        tolerance = (1e-9, 1e-7) if x.dtype == torch.float64 else (1e-6, 1e-5)
        expect_close(received, torch.softmax(x, dim=dim), what=what, atol=tolerance[0],
                     rtol=tolerance[1])
    return (
        f"matched torch.softmax on {len(cases)} fresh random inputs of 1 to 3 dimensions, "
        "any dim, including logits near ±1000 and single-element rows"
    )

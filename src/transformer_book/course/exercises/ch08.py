"""Checkers for chapter 08 (positional encoding)."""

from __future__ import annotations

import contextlib

import torch

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    LoopOver,
    attempt,
    exercise,
    expect_close,
    expect_tensor,
    fresh_generator,
    random_int,
)
from transformer_book.nn import positional
from transformer_book.nn.positional import relative_offset_matrix, sinusoidal_encoding


def _float64(received, what: str, shape: tuple[int, ...]) -> torch.Tensor:
    received = expect_tensor(received, what=what, shape=shape)
    if not received.is_floating_point():
        raise ExerciseFailure(f"for {what}, expected a floating-point tensor, received "
                              f"dtype {received.dtype}")
    return received.detach().to(torch.float64)


@contextlib.contextmanager
def _package_encodings_refused():
    """While it is open, the package's sinusoids (``sinusoidal_encoding``,
    ``relative_offset_matrix`` and the modules built on them all read ``_frequencies``)
    raise: 08.1 and 08.2 ask for the table and the rotation written out."""
    original = positional._frequencies

    def refuse(*args, **kwargs):
        raise RuntimeError("this exercise builds the sinusoids itself: compute them from "
                           "positions and frequencies rather than with transformer_book's "
                           "sinusoidal_encoding or relative_offset_matrix")

    positional._frequencies = refuse
    try:
        yield
    finally:
        positional._frequencies = original


def _table_probe_inputs(size: int, generator: torch.Generator) -> list[tuple]:
    """``sinusoid_table``'s arguments with ``size`` positions and ``size`` columns, so that a
    loop over either shows."""
    return [(size, size, 10000.0), (size, size, float(random_int(2, 500, generator)))]


NO_LOOPS = LoopOver(
    "positions or columns", inputs=_table_probe_inputs, sizes=(12, 36),
    size_name="length = d_model",
    advice="build a column of positions (length, 1) and a row of frequencies (d_model/2,): "
    "their product is every angle at once")


@exercise("08.1", "sinusoid_table", forbids=[NO_LOOPS])
def check_sinusoidal_encoding(candidate) -> str:
    """``sinusoid_table(length, d_model, base=10000.0)`` must equal the package's table
    ``(length, d_model)``: sin in even columns, cos in odd ones (Section 3.5)."""
    generator = fresh_generator()
    cases = []
    for index in range(12):
        length, d_model = random_int(1, 60, generator), 2 * random_int(1, 32, generator)
        base = (10000.0, 10000.0, 100.0, float(random_int(2, 5000, generator)))[index % 4]
        cases.append((length, d_model, base))
    cases += [(1, 2, 10000.0), (50, 2, 10000.0), (1, 64, 10000.0), (64, 512, 10000.0)]
    for length, d_model, base in cases:
        what = f"length={length}, d_model={d_model}, base={base:g}"
        expected = sinusoidal_encoding(length, d_model, base, dtype=torch.float64)
        with _package_encodings_refused():
            received = attempt(candidate, length, d_model, base=base, what=what)
        expect_close(_float64(received, what, (length, d_model)), expected, what=what,
                     atol=1e-5, rtol=0.0)
    return (
        f"matched transformer_book's sinusoidal_encoding on {len(cases)} fresh sizes (lengths "
        "1 to 64, even d_model from 2 to 512, several bases)"
    )


@exercise("08.2", "offset_rotation")
def check_offset_rotation(candidate) -> str:
    """``offset_rotation(k, d_model, base=10000.0)`` must be the matrix ``M_k`` with
    ``PE(pos + k) = M_k PE(pos)`` for every position: a block-diagonal rotation."""
    generator = fresh_generator()
    cases: list[tuple[float, int, float]] = []
    for index in range(12):
        d_model = 2 * random_int(1, 12, generator)
        base = 10000.0 if index % 3 else float(random_int(2, 500, generator))
        cases.append((random_int(-30, 30, generator), d_model, base))
    cases += [(0, 8, 10000.0), (1, 2, 10000.0), (-7, 16, 10000.0), (0.5, 6, 10000.0)]
    for k, d_model, base in cases:
        what = f"k={k}, d_model={d_model}, base={base:g}"
        with _package_encodings_refused():
            raw = attempt(candidate, k, d_model, base=base, what=what)
        received = _float64(raw, what, (d_model, d_model))
        # float64 to 1e-8; float32 (or another float type) as closely as 08.1's tables
        atol = 1e-8 if raw.dtype == torch.float64 else 1e-5
        pe = sinusoidal_encoding(100, d_model, base, dtype=torch.float64)  # (100, d_model)
        if float(k).is_integer():  # the defining property, on every row pos with pos + k in
            rows = torch.arange(max(0, -int(k)), min(100, 100 - int(k)))  # the table
            moved = pe[rows] @ received.T  # (n, d_model): M_k PE(pos) for each row
            expect_close(moved, pe[rows + int(k)], what=f"PE(pos + k) = M_k PE(pos) with {what}",
                         atol=atol, rtol=0.0)
        expected = relative_offset_matrix(k, d_model, base)
        expect_close(received, expected, what=what, atol=atol, rtol=0.0)
    return (
        f"M_k PE(pos) equalled PE(pos + k) for every position of a 100-row table, and M_k "
        f"matched relative_offset_matrix, on {len(cases)} fresh offsets (negative, zero and "
        "fractional), widths and bases"
    )

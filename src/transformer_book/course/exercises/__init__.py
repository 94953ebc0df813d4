"""Self-checking exercises. Chapters call ``check("CC.N", your_function)``.

The core (registry, ``check`` and the checkers' helpers) lives in
:mod:`transformer_book.course.exercises.core`; each chapter's checkers live in ``chCC.py``
beside it and are loaded on first use (:func:`~transformer_book.course.exercises.core.load_all`).
"""

from __future__ import annotations

from transformer_book.course.exercises.core import (
    REGISTRY,
    CheckResult,
    ExerciseFailure,
    attempt,
    check,
    exercise,
    expect_close,
    expect_equal,
    expect_tensor,
    fresh_generator,
    load_all,
    random_int,
    run_check,
)

__all__ = [
    "REGISTRY",
    "CheckResult",
    "ExerciseFailure",
    "attempt",
    "check",
    "exercise",
    "expect_close",
    "expect_equal",
    "expect_tensor",
    "fresh_generator",
    "load_all",
    "random_int",
    "run_check",
]


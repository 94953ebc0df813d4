"""Self-checking exercises. Chapters call ``check("CC.N", your_function)``.

The core (registry, ``check`` and the checkers' helpers) lives in
:mod:`transformer_book.course.exercises.core`; each chapter's checkers live in ``chCC.py``
beside it and are loaded on first use.
"""

from __future__ import annotations

import importlib
import pkgutil

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
    "run_check",
]


def load_all() -> None:
    """Import every ``chCC`` module so that its checkers register themselves."""
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("ch"):
            importlib.import_module(f"{__name__}.{info.name}")

"""The spread of one metric over seeds, and whether a new run lies within it.

A verdict from training runs rests on several seeds with their spread shown. A chapter that
cannot afford the seeds reads them from a record (``results/``) and runs one seed live;
:func:`within_spread` says whether that live run agrees with the recorded ones.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from transformer_book.util.validation import require, require_number

__all__ = ["seed_spread", "within_spread"]


def seed_spread(values: Sequence[float]) -> dict[str, float]:
    """``{"n", "mean", "sd", "min", "max"}`` of one metric over seeds; ``sd`` is the sample
    standard deviation (divides by n - 1), 0 for a single value."""
    require(isinstance(values, Sequence) and len(values) > 0, "values",
            "a non-empty sequence of numbers", repr(values))
    numbers = [float(require_number(v, "values")) for v in values]
    sd = statistics.stdev(numbers) if len(numbers) > 1 else 0.0
    return {"n": len(numbers), "mean": statistics.fmean(numbers), "sd": sd,
            "min": min(numbers), "max": max(numbers)}


def within_spread(value: float, spread: Mapping[str, float], tolerance: float) -> bool:
    """Whether ``value`` (finite) lies in ``[min - tolerance, max + tolerance]`` of a
    :func:`seed_spread` summary."""
    value = float(require_number(value, "value"))
    tolerance = float(require_number(tolerance, "tolerance"))
    require(tolerance >= 0, "tolerance", "a number >= 0", tolerance)
    require(isinstance(spread, Mapping) and {"min", "max"} <= set(spread), "spread",
            "a seed_spread summary with 'min' and 'max'", repr(spread))
    return spread["min"] - tolerance <= value <= spread["max"] + tolerance

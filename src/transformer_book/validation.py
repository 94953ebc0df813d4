"""Argument checks shared by every module.

Bad input must get a ``ValueError`` that names the argument, what was expected and
what was received -- never a silent NaN or a crash deep inside torch. These helpers
keep those messages uniform.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def fail(argument: str, expected: str, received: Any) -> ValueError:
    """Build the course's standard error: ``"<argument>: expected <...>, received <...>"``."""
    return ValueError(f"{argument}: expected {expected}, received {received}")


def require(condition: bool, argument: str, expected: str, received: Any) -> None:
    """Raise :func:`fail`'s ``ValueError`` unless ``condition`` holds."""
    if not condition:
        raise fail(argument, expected, received)


def require_positive_int(value: Any, argument: str, minimum: int = 1) -> int:
    """Return ``value`` if it is an ``int`` >= ``minimum``; raise a ``ValueError`` otherwise."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    require(ok, argument, f"an integer >= {minimum}", repr(value))
    return value


def require_probability(value: Any, argument: str) -> float:
    """Return ``value`` if it lies in [0, 1); dropout rates and smoothing use this."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value < 1.0
    require(ok, argument, "a number in [0, 1)", repr(value))
    return float(value)


def require_tensor(
    value: Any,
    argument: str,
    *,
    ndim: int | Sequence[int] | None = None,
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    floating: bool = False,
) -> torch.Tensor:
    """Check that ``value`` is a tensor with the given rank and dtype; return it."""
    require(isinstance(value, torch.Tensor), argument, "a torch.Tensor", type(value).__name__)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        wanted = " or ".join(str(n) for n in allowed)
        require(
            value.ndim in allowed, argument, f"a {wanted}-D tensor", f"shape {tuple(value.shape)}"
        )
    if dtype is not None:
        allowed_dtypes = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        names = " or ".join(str(d) for d in allowed_dtypes)
        require(value.dtype in allowed_dtypes, argument, f"dtype {names}", value.dtype)
    if floating:
        require(value.is_floating_point(), argument, "a floating-point tensor", value.dtype)
    return value

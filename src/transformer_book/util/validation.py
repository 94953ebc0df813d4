"""Argument checks shared by every module: one error class, one family of ``require_*``.

Bad input must get a :class:`BookError` that names the argument, what was expected and
what was received -- never a silent NaN or a crash deep inside torch. Every deliberate
refusal in the package raises it (through these helpers), so the command line can tell a
user's mistake (exit 2, one line) from a bug (a traceback).

Checks of shape, dtype and device read only a tensor's metadata, so they run anywhere, a
module's ``forward`` included. A check of values (:func:`require_finite_tensor`) reads the
tensor and so synchronises the host with a GPU: it runs at an entry point, or where reading
is free (a CPU tensor, outside ``torch.compile``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

__all__ = [
    "BookError",
    "bad_input",
    "checking",
    "is_integer",
    "is_real",
    "require",
    "require_bool",
    "require_finite_tensor",
    "require_int",
    "require_number",
    "require_one_of",
    "require_positive_int",
    "require_positive_number",
    "require_probability",
    "require_tensor",
    "unchecked",
]


class BookError(ValueError):
    """A deliberate refusal: ``"<argument>: expected <...>, received <...>"``.

    A ``ValueError``, so ``except ValueError`` still catches it; the CLI catches this class
    alone, so any other exception is a bug and shows its traceback.
    """


def bad_input(argument: str, expected: str, received: Any) -> BookError:
    """The course's standard error, returned for the caller to raise (``raise
    bad_input(...)``): ``"<argument>: expected <...>, received <...>"``."""
    return BookError(f"{argument}: expected {expected}, received {received}")


def require(condition: bool, argument: str, expected: str, received: Any) -> None:
    """Raise :func:`bad_input`'s :class:`BookError` unless ``condition`` holds."""
    if not condition:
        raise bad_input(argument, expected, received)


def is_integer(value: Any) -> bool:
    """Whether ``value`` is a Python ``int`` and not a ``bool`` (``True`` is an ``int`` to
    ``isinstance``, never a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """Whether ``value`` is a Python ``int`` or ``float`` and not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def require_bool(value: Any, argument: str) -> bool:
    """Return ``value`` if it is a ``bool`` (not 0/1, not a string)."""
    require(isinstance(value, bool), argument, "True or False", repr(value))
    return value


def require_int(value: Any, argument: str, minimum: int | None = None,
                maximum: int | None = None) -> int:
    """Return ``value`` if it is an ``int`` (not a ``bool``) within ``[minimum, maximum]``."""
    bounds = ("" if minimum is None else f" >= {minimum}") + (
        "" if maximum is None else f"{' and' if minimum is not None else ''} <= {maximum}")
    ok = (is_integer(value)
          and (minimum is None or value >= minimum) and (maximum is None or value <= maximum))
    require(ok, argument, f"an integer{bounds}", repr(value))
    return value


def require_positive_int(value: Any, argument: str) -> int:
    """Return ``value`` if it is an ``int`` >= 1 (other bounds: :func:`require_int`)."""
    return require_int(value, argument, minimum=1)


def require_number(value: Any, argument: str, minimum: float | None = None,
                   maximum: float | None = None) -> float:
    """Return ``value`` as a float if it is a finite real number within ``[minimum, maximum]``.

    Strings (``"0.1"``), bools, NaN and infinities are refused.
    """
    bounds = ("" if minimum is None else f" >= {minimum:g}") + (
        "" if maximum is None else f"{' and' if minimum is not None else ''} <= {maximum:g}")
    ok = (is_real(value) and math.isfinite(value)
          and (minimum is None or value >= minimum) and (maximum is None or value <= maximum))
    require(ok, argument, f"a finite number{bounds}", repr(value))
    return float(value)


def require_positive_number(value: Any, argument: str, allow_zero: bool = False) -> float:
    """Return ``value`` as a float if it is a finite number > 0 (>= 0 with ``allow_zero``)."""
    ok = is_real(value) and math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    require(ok, argument, f"a finite number {'>=' if allow_zero else '>'} 0", repr(value))
    return float(value)


def require_probability(value: Any, argument: str) -> float:
    """Return ``value`` as a float if it lies in [0, 1); dropout rates and smoothing use this."""
    ok = is_real(value) and 0.0 <= value < 1.0
    require(ok, argument, "a number in [0, 1)", repr(value))
    return float(value)


def require_one_of(value: Any, argument: str, choices: Collection[Any]) -> Any:
    """Return ``value`` if it is one of ``choices``; the message lists them (in their order
    for a list or tuple, sorted for a set or the keys of a dict)."""
    try:
        ok = value in choices
    except TypeError:  # an unhashable value against a set
        ok = False
    shown = list(choices) if isinstance(choices, Sequence) else sorted(choices, key=str)
    require(ok, argument, f"one of {shown}", repr(value))
    return value


def require_tensor(
    value: Any,
    argument: str,
    *,
    ndim: int | Sequence[int] | None = None,
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    floating: bool = False,
) -> torch.Tensor:
    """Check that ``value`` is a tensor with the given rank and dtype; return it.

    Reads only metadata (shape, dtype): no host-device synchronisation.
    """
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


def require_finite_tensor(value: torch.Tensor, argument: str) -> torch.Tensor:
    """Refuse NaN or infinity in a floating tensor. This reads the values, so it synchronises
    with the device: call it at an entry point, never inside ``forward``."""
    if value.is_floating_point() and not bool(torch.isfinite(value.detach()).all()):
        raise bad_input(argument, "finite values", "NaN or infinity")
    return value


# The one switch of the checks inside modules (the shapes, dtypes and devices each layer
# checks on every call): on, unless a caller that has checked its inputs at the boundary
# turns them off for a loop over the model (unchecked()).
_CHECKING = [True]


def checking() -> bool:
    """Whether the checks inside modules run: not inside :func:`unchecked`, and not while
    ``torch.compile`` traces (a check would break the graph)."""
    return _CHECKING[-1] and not torch.compiler.is_compiling()


@contextmanager
def unchecked() -> Iterator[None]:
    """Inside the block, modules skip their own checks (:func:`checking` is false): for a
    caller that checked what it hands them once, at its entry (decoding's loop,
    :func:`~transformer_book.inference.generate.generate`). One switch for the process."""
    _CHECKING.append(False)
    try:
        yield
    finally:
        _CHECKING.pop()

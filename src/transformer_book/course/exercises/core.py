"""Self-checking exercises: the registry, ``check`` and the helpers checkers use.

A chapter's exercise cell defines a function; the next cell calls
``check("05.1", scaled_dot_product)``. The checker registered under ``"05.1"`` calls
the learner's function on *fresh* random inputs (a new seed every run, edge cases
included) and compares with a reference. ``check`` then prints one of

- ``✓ Exercise 05.1 passed: <what was verified>``
- ``○ Exercise 05.1 not attempted yet: ...`` (the function raised ``NotImplementedError``)
- ``✗ Exercise 05.1 failed: <input>, expected <...>, received <...>``

and never a bare traceback. An answer that is not the learner's own function (one taken
from ``torch``, ``transformer_book``, another installed library or the standard library,
e.g. ``check("05.1", scaled_dot_product_attention)``) fails without being run:
``✗ ... this is transformer_book.nn.attention.scaled_dot_product_attention, not your own
function`` (:func:`foreign_origin`). A wrapper written in the notebook that calls such a
function is the learner's own and is checked like any other answer.

Writing a checker::

    @exercise("05.1", "scaled dot-product attention")
    def _check(candidate):
        gen = fresh_generator()
        q = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
        out = attempt(candidate, q, q, q, what="q=k=v of shape (2, 3, 4)")
        expect_close(out, reference(q, q, q), what="q=k=v of shape (2, 3, 4)")
        return "matched the reference on ... fresh random inputs"
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import sys
import sysconfig
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from transformer_book.util.validation import bad_input

Status = Literal["passed", "failed", "not attempted"]
Checker = Callable[[Callable[..., Any]], str]

# The width of the book's code column: a printed verdict wraps there.
LINE_WIDTH = 88
SYMBOLS: dict[str, str] = {"passed": "✓", "failed": "✗", "not attempted": "○"}


class ExerciseFailure(Exception):
    """Raised by a checker when the learner's answer is wrong; the message says how."""


@dataclass(frozen=True)
class Exercise:
    """A registered exercise: its id (``"CC.N"``), a short title and its checker."""

    exercise_id: str
    title: str
    checker: Checker


@dataclass(frozen=True)
class CheckResult:
    """The outcome of checking one answer."""

    exercise_id: str
    status: Status
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def message(self) -> str:
        return f"{SYMBOLS[self.status]} Exercise {self.exercise_id} {self.status}: {self.detail}"


REGISTRY: dict[str, Exercise] = {}


def exercise(exercise_id: str, title: str) -> Callable[[Checker], Checker]:
    """Decorator that registers ``checker`` under ``exercise_id`` (e.g. ``"00.1"``)."""

    def register(checker: Checker) -> Checker:
        if exercise_id in REGISTRY:
            raise bad_input("exercise_id", "an id registered once",
                            f"{exercise_id!r} a second time")
        REGISTRY[exercise_id] = Exercise(exercise_id, title, checker)
        return checker

    return register


def load_all() -> None:
    """Import every ``chCC`` module beside this one, so that its checkers register."""
    package = __name__.rpartition(".")[0]  # transformer_book.course.exercises
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name.startswith("ch"):
            importlib.import_module(f"{package}.{info.name}")


def _lookup(exercise_id: str) -> Exercise:
    """The registered exercise: its chapter's module first (``"05.1"``: ``ch05``), else all."""
    if exercise_id not in REGISTRY and isinstance(exercise_id, str) and exercise_id[:2].isdigit():
        with contextlib.suppress(ModuleNotFoundError):
            importlib.import_module(f"{__name__.rpartition('.')[0]}.ch{exercise_id[:2]}")
    if exercise_id not in REGISTRY:
        load_all()
    if exercise_id not in REGISTRY:
        raise bad_input("exercise_id", f"one of {', '.join(sorted(REGISTRY)) or 'none'}",
                   repr(exercise_id))
    return REGISTRY[exercise_id]


_LIBRARY_PREFIXES = ("torch", "transformer_book", "numpy", "builtins")


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    return tuple(os.path.join(os.path.realpath(paths[n]), "") for n in names if n in paths)


def _defining_module(candidate: Any) -> str | None:
    """The module that defined ``candidate``: a function's ``__module__``, a builtin method's
    class, a callable object's class."""
    module = getattr(candidate, "__module__", None)
    if isinstance(module, str):
        return module
    for owner in (getattr(candidate, "__objclass__", None), getattr(candidate, "__self__", None)):
        if owner is not None:
            owner = owner if isinstance(owner, type) else type(owner)
            return owner.__module__
    return type(candidate).__module__


def foreign_origin(candidate: Any) -> str | None:
    """``"<module>.<name>"`` when ``candidate`` comes from ``torch``, ``transformer_book``,
    ``numpy``, the standard library or any installed library; ``None`` when it was defined
    by the learner (in a notebook, ``__module__`` is ``"__main__"``) or in a local file."""
    module = _defining_module(candidate)
    if not module or module == "__main__":
        return None
    name = getattr(candidate, "__qualname__", None) or type(candidate).__qualname__
    if name.startswith("_") and "." in name:  # torch._VariableFunctionsClass.softmax
        name = getattr(candidate, "__name__", name)
    label = f"{module}.{name}"
    if module.split(".")[0] in _LIBRARY_PREFIXES or module in sys.builtin_module_names:
        return label
    origin = getattr(sys.modules.get(module), "__file__", None)
    if origin and os.path.realpath(origin).startswith(_library_dirs()):
        return label
    return None


def run_check(exercise_id: str, candidate: Callable[..., Any]) -> CheckResult:
    """Run the checker for ``exercise_id`` on ``candidate`` and return a :class:`CheckResult`.

    A ``candidate`` that :func:`foreign_origin` traces to a library fails without being run.
    """
    entry = _lookup(exercise_id)
    if not callable(candidate):
        return CheckResult(
            exercise_id, "failed", f"expected a function, received {type(candidate).__name__}"
        )
    borrowed = foreign_origin(candidate)
    if borrowed is not None:
        return CheckResult(
            exercise_id, "failed",
            f"{entry.title}: this is {borrowed}, not your own function: write it "
            "yourself in the notebook and check that.",
        )
    try:
        verified = entry.checker(candidate)
    except NotImplementedError:
        return CheckResult(
            exercise_id,
            "not attempted",
            f"{entry.title} still raises NotImplementedError. Replace that line with your "
            "code and run both cells again.",
        )
    except ExerciseFailure as failure:
        return CheckResult(exercise_id, "failed", f"{entry.title}: {failure}")
    return CheckResult(exercise_id, "passed", f"{entry.title}: {verified}")


def check(exercise_id: str, candidate: Callable[..., Any]) -> None:
    """Check the learner's ``candidate`` for ``exercise_id`` and print the verdict, wrapped
    to the book's code column (:data:`LINE_WIDTH` characters)."""
    message = run_check(exercise_id, candidate).message
    print(textwrap.fill(message, LINE_WIDTH, subsequent_indent="  ", break_long_words=False,
                        break_on_hyphens=False))


# --------------------------------------------------------------------------- helpers


def random_int(low: int, high: int, generator: torch.Generator) -> int:
    """A random integer in ``[low, high]`` from ``generator`` (the checkers' fresh inputs)."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def fresh_generator(device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` seeded from the operating system: new inputs every run."""
    generator = torch.Generator(device=device)
    generator.manual_seed(int.from_bytes(os.urandom(8), "little") & (2**63 - 1))
    return generator


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        if value.numel() <= 12:
            numbers = [round(float(x), 4) for x in value.detach().flatten()]
            return f"tensor of shape {tuple(value.shape)} {numbers}"
        return f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def attempt(candidate: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> Any:
    """Call the learner's function; turn any error except ``NotImplementedError`` into a failure."""
    try:
        return candidate(*args, **kwargs)
    except NotImplementedError:
        raise
    except Exception as error:
        raise ExerciseFailure(
            f"for {what}, your function raised {type(error).__name__}: {error}"
        ) from None


def expect_tensor(
    received: Any, *, what: str, shape: tuple[int, ...] | None = None
) -> torch.Tensor:
    """Fail unless ``received`` is a tensor (of ``shape``, when given)."""
    if not isinstance(received, torch.Tensor):
        raise ExerciseFailure(f"for {what}, expected a tensor, received {_short(received)}")
    if shape is not None and tuple(received.shape) != tuple(shape):
        raise ExerciseFailure(
            f"for {what}, expected shape {tuple(shape)}, received shape {tuple(received.shape)}"
        )
    if received.is_floating_point() and not torch.isfinite(received).all():
        raise ExerciseFailure(f"for {what}, the result contains NaN or infinity")
    return received


def expect_close(
    received: Any,
    expected: torch.Tensor,
    *,
    what: str,
    atol: float = 1e-6,
    rtol: float = 1e-5,
) -> None:
    """Fail unless ``received`` is a tensor close to ``expected``, naming the worst entry."""
    received = expect_tensor(received, what=what, shape=tuple(expected.shape))
    difference = (received.detach().to(expected.dtype) - expected).abs()
    tolerance = atol + rtol * expected.abs()
    if bool((difference <= tolerance).all()):
        return
    worst = tuple(
        int(i) for i in torch.nonzero(difference - tolerance == (difference - tolerance).max())[0]
    )
    raise ExerciseFailure(
        f"for {what}, at index {worst} expected {float(expected[worst]):.6g}, "
        f"received {float(received[worst]):.6g} (max abs difference {float(difference.max()):.3g})"
    )


def expect_equal(received: Any, expected: Any, *, what: str) -> None:
    """Fail unless ``received == expected`` (tensors compared element-wise)."""
    if isinstance(expected, torch.Tensor):
        received = expect_tensor(received, what=what, shape=tuple(expected.shape))
        same = bool(torch.equal(received.to(expected.dtype), expected))
    else:
        same = received == expected
    if not same:
        raise ExerciseFailure(
            f"for {what}, expected {_short(expected)}, received {_short(received)}"
        )

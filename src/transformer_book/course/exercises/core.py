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

What an exercise forbids
------------------------

An exercise may ask the learner not to take a shortcut ("not ``torch.softmax``",
"without autograd", "no loop over the L positions"). The registration says so, and the
rule is enforced *while the learner's function runs*, whatever name or wrapper it hides
behind::

    @exercise("00.1", "softmax", forbids=[
        Calls({"softmax", "log_softmax"}, advice="compute it from exp, max and sum")])
    @exercise("05.2", "softmax_jacobian", forbids=[
        UsesAutograd(advice="write J = diag(p) - p pᵀ from p itself")])
    @exercise("03.1", "causal_conv1d", forbids=[
        LoopOver("the L positions", inputs=make_inputs, advice="pad once, then ...")])

:func:`run_check` hands the checker a guarded copy of the candidate: each call runs under a
:class:`~torch.overrides.TorchFunctionMode` that records every torch function the candidate
calls (outermost calls only: what ``torch.nn.functional.softmax`` calls inside is not
recorded, ``torch.nn.functional.softmax`` is), whether a result requires grad and whether
a ``torch.func`` transform is active (:class:`Trace`). After each call every rule reads the
trace (:meth:`Rule.seen`); after the checker passes, a rule may also probe the candidate on
inputs of its own (:meth:`Rule.probe`, used by :class:`LoopOver`, which runs it at two sizes
and fails when the number of torch calls grows with the size). A rule that fires fails the
answer, in ``check`` and in ``grade`` alike, with one message naming the rule::

    ✗ Exercise 00.1 failed: softmax: your function calls torch.softmax, which this exercise
      asks you not to use: compute it from exp, max and sum

The three rules are :class:`Calls` (named torch functions, matched by their last name with
leading underscores dropped, so ``torch.softmax``, ``Tensor.softmax``, ``F.softmax``,
``torch._softmax`` and ``torch.ops.aten._softmax`` are all ``"softmax"``), :class:`UsesAutograd`
(backward passes, ``torch.autograd.grad``, ``requires_grad``, ``torch.func`` grad and jvp
transforms, dual tensors) and :class:`LoopOver`. A new rule subclasses :class:`Rule`. Torch
calls made by a function the checker passes *into* the candidate count as the candidate's
(a rule should not forbid what such a callback does). Code that switches torch's function
modes off (``torch._C.DisableTorchFunction``) is not seen: the rules catch shortcuts, not a
determined cheat.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import sys
import sysconfig
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch.overrides import TorchFunctionMode, resolve_name

from transformer_book.util.validation import bad_input

Status = Literal["passed", "failed", "not attempted"]
Checker = Callable[[Callable[..., Any]], str]

# The width of the book's code column: a printed verdict wraps there.
LINE_WIDTH = 88
SYMBOLS: dict[str, str] = {"passed": "✓", "failed": "✗", "not attempted": "○"}


class ExerciseFailure(Exception):
    """Raised by a checker when the learner's answer is wrong; the message says how."""


class ForbiddenUse(ExerciseFailure):
    """Raised when the learner's function does what its exercise forbids (a :class:`Rule`)."""


# ------------------------------------------------------------------ what an exercise forbids


@dataclass
class Trace:
    """What one call of the learner's function did, as a :class:`TorchFunctionMode` saw it.

    ``calls`` counts the torch functions called, by full name (``"torch.softmax"``,
    ``"torch.Tensor.softmax"``, ``"torch.nn.functional.softmax"``, ``"aten._softmax.default"``);
    ``grad_results`` says whether a result required grad although no argument did (autograd
    recorded a graph); ``transforms`` holds the ``torch.func`` transforms active during a call
    (``"Grad"`` for ``jacrev``/``grad``/``vjp``, ``"Jvp"`` for ``jacfwd``/``jvp``, ``"Vmap"``).
    """

    calls: Counter[str] = field(default_factory=Counter)
    grad_results: bool = False
    transforms: set[str] = field(default_factory=set)

    @property
    def total(self) -> int:
        """The number of torch calls."""
        return sum(self.calls.values())


def _function_name(func: Any) -> str:
    """``"torch.softmax"``, ``"torch.Tensor.softmax"``, ``"torch.autograd.grad"``, ...."""
    name = resolve_name(func)
    if name:
        return name
    module = getattr(func, "__module__", None) or "torch"
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    return f"{module}.{qualname}".replace("torch._VariableFunctionsClass.", "torch.")


def short_name(name: str) -> str:
    """A torch function's last name without leading underscores, the name :class:`Calls`
    matches: ``"torch._softmax"`` and ``"aten._softmax.default"`` are ``"softmax"``,
    ``"torch.Tensor.requires_grad.__set__"`` is ``"requires_grad.__set__"``."""
    parts = name.split(".")
    if parts[0] in ("aten", "prims") and len(parts) > 1:
        return parts[1].lstrip("_")
    if len(parts) > 1 and parts[-1] in ("__get__", "__set__"):
        return f"{parts[-2]}.{parts[-1]}"
    return parts[-1].lstrip("_") or parts[-1]


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


class _Recorder(TorchFunctionMode):
    """Records every outermost torch call made while it is active into :attr:`trace`."""

    def __init__(self) -> None:
        super().__init__()
        self.trace = Trace()

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.trace.calls[_function_name(func)] += 1
        interpreter = torch._C._functorch.peek_interpreter_stack()
        if interpreter is not None:
            self.trace.transforms.add(str(interpreter.key()).rpartition(".")[2])
        result = func(*args, **kwargs)
        if not self.trace.grad_results and any(t.requires_grad for t in _tensors(result)):
            inputs = (*_tensors(args), *_tensors(kwargs))
            self.trace.grad_results = not any(t.requires_grad for t in inputs)
        return result


def run_recorded(function: Callable[..., Any], *args: Any, **kwargs: Any
                 ) -> tuple[Any, Trace]:
    """``(function(*args, **kwargs), its Trace)``: the call, with every torch call it makes
    recorded (exceptions propagate)."""
    recorder = _Recorder()
    with recorder:
        result = function(*args, **kwargs)
    return result, recorder.trace


class Rule:
    """Something an exercise forbids. :meth:`seen` reads the :class:`Trace` of each call the
    checker makes; :meth:`probe` may run the candidate once more after the checker passed.
    Each returns ``None`` (allowed) or what the candidate did, which ends the sentence
    ``"your function <did>, which this exercise asks you not to use: <advice>"``."""

    advice: str = ""
    asks = "not to use"  # ... which this exercise asks you <asks>: <advice>

    def seen(self, trace: Trace) -> str | None:
        return None

    def probe(self, candidate: Callable[..., Any]) -> str | None:
        return None

    def refusal(self, did: str) -> ForbiddenUse:
        return ForbiddenUse(f"your function {did}, which this exercise asks you {self.asks}: "
                            f"{self.advice}")


@dataclass(frozen=True)
class Calls(Rule):
    """Forbids calling a torch function whose :func:`short_name` is in ``names``
    (``Calls({"softmax", "log_softmax"}, advice=...)``)."""

    names: frozenset[str] | set[str]
    advice: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", frozenset(self.names))

    def seen(self, trace: Trace) -> str | None:
        found = sorted(name for name in trace.calls if short_name(name) in self.names)
        return f"calls {' and '.join(found)}" if found else None


_AUTOGRAD_CALLS = {"grad", "backward", "requires_grad_", "requires_grad.__set__", "make_dual",
                   "unpack_dual", "jacobian", "hessian", "vjp", "jvp", "jacrev", "jacfwd"}


@dataclass(frozen=True)
class UsesAutograd(Rule):
    """Forbids automatic differentiation in any form: ``backward``, ``torch.autograd.grad``,
    ``torch.autograd.functional``, ``requires_grad``, a result that requires grad, the
    ``torch.func`` grad and jvp transforms (``jacrev``, ``jacfwd``, ``grad``, ``vjp``, ``jvp``)
    and forward-mode dual tensors. ``vmap`` alone is allowed."""

    advice: str = ""

    def seen(self, trace: Trace) -> str | None:
        found = sorted(name for name in trace.calls if short_name(name) in _AUTOGRAD_CALLS)
        if "Grad" in trace.transforms or "Jvp" in trace.transforms:
            return ("uses autograd (it runs under a torch.func "
                    f"{'grad' if 'Grad' in trace.transforms else 'jvp'} transform, as "
                    "jacrev, jacfwd, grad, vjp and jvp do)")
        if found:
            return f"uses autograd (it calls {' and '.join(found)})"
        if trace.grad_results:
            return "uses autograd (it makes tensors that require grad)"
        return None


@dataclass(frozen=True)
class LoopOver(Rule):
    """Forbids a Python loop over ``what`` (``"the L positions"``): at each of ``sizes`` the
    candidate is run on every argument tuple of ``inputs(size, generator)`` (several, so
    that each branch of an answer is probed: ``bias`` given and ``None``, say), and it fails
    if the number of torch calls it makes grows with the size. Choose sizes beyond any
    threshold a correct answer may branch on (a kernel's reach, say)."""

    what: str
    inputs: Callable[[int, torch.Generator], list[tuple[Any, ...]]]
    advice: str = ""
    sizes: tuple[int, int] = (12, 36)
    size_name: str = "size"
    asks = "not to do"

    def probe(self, candidate: Callable[..., Any]) -> str | None:
        generator = fresh_generator()
        counts = []
        for size in self.sizes:
            try:
                counts.append(sum(run_recorded(candidate, *arguments)[1].total
                                  for arguments in self.inputs(size, generator)))
            except NotImplementedError:
                raise
            except Exception as error:
                raise ExerciseFailure(f"for inputs with {self.size_name} = {size}, your "
                                      "function raised "
                                      f"{type(error).__name__}: {error}") from None
        (small, large), (few, many) = self.sizes, counts
        if many <= few:
            return None
        return (f"makes {few} torch calls at {self.size_name} = {small} and {many} at "
                f"{self.size_name} = {large}: it loops over {self.what}")


def _guarded(candidate: Callable[..., Any], rules: tuple[Rule, ...]) -> Callable[..., Any]:
    """``candidate``, each call recorded and read by ``rules`` (:class:`ForbiddenUse`)."""
    if not rules:
        return candidate

    def guarded(*args: Any, **kwargs: Any) -> Any:
        recorder = _Recorder()
        error: BaseException | None = None
        try:
            with recorder:
                result = candidate(*args, **kwargs)
        except Exception as raised:  # the rules speak first: a shortcut may fail later on
            error = raised
        for rule in rules:
            did = rule.seen(recorder.trace)
            if did is not None:
                raise rule.refusal(did) from None
        if error is not None:
            raise error
        return result

    return guarded


@dataclass(frozen=True)
class Exercise:
    """A registered exercise: its id (``"CC.N"``), a short title, its checker and the
    :class:`Rule` s it enforces on the learner's function (``forbids``)."""

    exercise_id: str
    title: str
    checker: Checker
    forbids: tuple[Rule, ...] = ()


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


def exercise(exercise_id: str, title: str, *, forbids: Iterable[Rule] = ()
             ) -> Callable[[Checker], Checker]:
    """Decorator that registers ``checker`` under ``exercise_id`` (e.g. ``"00.1"``), with the
    :class:`Rule` s (``forbids``) that :func:`run_check` enforces while the answer runs."""
    rules = tuple(forbids)
    for rule in rules:
        if not isinstance(rule, Rule):
            raise bad_input("forbids", "Rule objects (Calls, UsesAutograd, LoopOver)",
                            type(rule).__name__)

    def register(checker: Checker) -> Checker:
        if exercise_id in REGISTRY:
            raise bad_input("exercise_id", "an id registered once",
                            f"{exercise_id!r} a second time")
        REGISTRY[exercise_id] = Exercise(exercise_id, title, checker, rules)
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

    A ``candidate`` that :func:`foreign_origin` traces to a library fails without being run;
    one that breaks a rule of the exercise (``forbids``) fails naming the rule. Whatever
    happens, the result is a verdict, never an exception (``KeyboardInterrupt`` aside).
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
        verified = entry.checker(_guarded(candidate, entry.forbids))
        for rule in entry.forbids:
            did = rule.probe(candidate)
            if did is not None:
                raise rule.refusal(did)
    except NotImplementedError:
        return CheckResult(
            exercise_id,
            "not attempted",
            f"{entry.title} still raises NotImplementedError. Replace that line with your "
            "code and run both cells again.",
        )
    except ExerciseFailure as failure:
        return CheckResult(exercise_id, "failed", f"{entry.title}: {failure}")
    except Exception as error:  # a call the checker made outside attempt()
        return CheckResult(exercise_id, "failed", f"{entry.title}: the check stopped on "
                           f"{type(error).__name__}: {error}")
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
    except (NotImplementedError, ExerciseFailure):  # ExerciseFailure: a rule was broken
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
        bad = tuple(int(i) for i in torch.nonzero(~torch.isfinite(received.detach()))[0])
        raise ExerciseFailure(f"for {what}, expected finite numbers, received "
                              f"{float(received[bad])} at index {bad} (the result contains "
                              "NaN or infinity)")
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
    where = f" at index {worst}" if worst else ""
    raise ExerciseFailure(
        f"for {what},{where} expected {float(expected[worst]):.6g}, "
        f"received {float(received[worst]):.6g} (max abs difference {float(difference.max()):.3g})"
    )


def expect_equal(received: Any, expected: Any, *, what: str) -> None:
    """Fail unless ``received == expected`` (tensors compared element-wise)."""
    if isinstance(expected, torch.Tensor):
        received = expect_tensor(received, what=what, shape=tuple(expected.shape))
        differ = received.detach().to(expected.dtype) != expected
        if bool(differ.any()):
            where = tuple(int(i) for i in torch.nonzero(differ)[0])
            raise ExerciseFailure(
                f"for {what}, at index {where} expected {expected[where].item()}, received "
                f"{received[where].item()} ({int(differ.sum())} of {differ.numel()} entries "
                "differ)")
        return
    if received != expected:
        raise ExerciseFailure(
            f"for {what}, expected {_short(expected)}, received {_short(received)}"
        )

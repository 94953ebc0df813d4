"""Checkers for chapter 10 (training on real data)."""

from __future__ import annotations

import contextlib
import math

import torch
from torch.optim import adam as torch_adam

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_close,
    fresh_generator,
    random_int,
)
from transformer_book.train.objective import ADAM_BETAS, label_smoothed_cross_entropy, noam_lr


def reference_loss_floor(eps: float, vocab_size: int) -> float:
    """The smallest label-smoothed loss any prediction can reach (Section 5.4): the entropy
    of the target ``q = (1 - ε)·[v = y] + ε / V``, where the loss is lowest (``p = q``).
    ``0 · log 0`` counts as 0, so ε = 0 gives 0 (reached only as the logits grow without
    bound)."""
    on_target = 1.0 - eps + eps / vocab_size
    off_target = eps / vocab_size
    floor = -on_target * math.log(on_target)
    if off_target > 0:
        floor -= (vocab_size - 1) * off_target * math.log(off_target)
    return floor


def package_loss_at_target(eps: float, vocab_size: int) -> float:
    """``label_smoothed_cross_entropy`` for a model that predicts the target ``q`` itself
    (float64), ε > 0: the value :func:`reference_loss_floor` must equal."""
    q = torch.full((1, vocab_size), eps / vocab_size, dtype=torch.float64)
    q[0, 1] += 1 - eps  # the reference token is 1; <pad> = 0 is ignored, never a target here
    return float(label_smoothed_cross_entropy(q.log(), torch.tensor([1]), eps, 0))


def _number(received, what: str) -> float:
    if isinstance(received, torch.Tensor) and received.numel() == 1:
        received = float(received)
    if not isinstance(received, (int, float)) or isinstance(received, bool):
        raise ExerciseFailure(f"for {what}, expected a number, received "
                              f"{type(received).__name__}")
    return float(received)


@exercise("10.1", "smoothed_loss_floor")
def check_smoothed_loss_floor(candidate) -> str:
    """``smoothed_loss_floor(eps, vocab_size)`` must be the minimum of the package's
    label-smoothed loss over all predictions: its value at ``p = q`` (ε > 0), 0 at ε = 0."""
    generator = fresh_generator()
    cases = []
    for _ in range(20):
        vocab = random_int(2, 40_000, generator)
        eps = float(torch.rand(1, generator=generator))
        cases.append((eps, vocab, f"eps={eps:.4g}, vocab_size={vocab}"))
    cases += [(0.1, 37_000, "the paper: eps=0.1, vocab_size=37000"),
              (0.1, 4000, "this chapter's run: eps=0.1, vocab_size=4000"),
              (0.0, random_int(2, 5000, generator), "eps=0 (no smoothing: 0 · log 0 is 0)"),
              (1.0, random_int(2, 5000, generator), "eps=1 (a uniform target)"),
              (0.5, 2, "eps=0.5, vocab_size=2")]
    for eps, vocab, what in cases:
        received = _number(attempt(candidate, eps, vocab, what=what), what)
        expected = package_loss_at_target(eps, vocab) if eps > 0 else 0.0
        if not math.isclose(received, expected, rel_tol=1e-7, abs_tol=1e-9):
            raise ExerciseFailure(f"for {what}, expected {expected:.6f} nats (the package's "
                                  f"loss where it is lowest), received {received:.6f}")
    return (f"matched the minimum of label_smoothed_cross_entropy for {len(cases)} fresh "
            "(eps, V), including eps = 0, eps = 1, V = 2 and the paper's V = 37,000")


def torch_adam_updates(gradients: torch.Tensor, lrs: torch.Tensor, betas: tuple[float, float],
                       eps: float) -> torch.Tensor:
    """The change of one float64 parameter at each step under ``torch.optim.Adam`` (what
    :func:`transformer_book.train.make_optimizer` builds), given its gradient and the rate
    of each step: ``(T,), (T,) -> (T,)``."""
    weight = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
    optimizer = torch.optim.Adam([weight], lr=1.0, betas=betas, eps=eps)
    updates = []
    for grad, lr in zip(gradients.tolist(), lrs.tolist(), strict=True):
        optimizer.param_groups[0]["lr"] = lr
        before = weight.item()
        weight.grad = torch.tensor(grad, dtype=torch.float64)
        optimizer.step()
        updates.append(weight.item() - before)
    return torch.tensor(updates, dtype=torch.float64)


def _adam_cases(generator: torch.Generator) -> list[tuple]:
    cases = []
    for index in range(14):
        steps = random_int(1, 40, generator)
        scale = 10.0 ** float(torch.empty(1).uniform_(-8, 3, generator=generator))
        grads = scale * torch.randn(steps, generator=generator, dtype=torch.float64)
        d_model, warmup = 2 ** random_int(5, 10, generator), random_int(1, 60, generator)
        lrs = torch.tensor([noam_lr(s, d_model, warmup) for s in range(1, steps + 1)],
                           dtype=torch.float64)
        betas = ADAM_BETAS if index % 2 else (float(torch.empty(1).uniform_(0.5, 0.95,
                                              generator=generator)), 0.999)
        eps = (1e-9, 1e-8, 1e-3)[index % 3]
        cases.append((grads, lrs, betas, eps, f"{steps} steps of gradients ~{scale:.1e}, "
                      f"Noam rates (d_model={d_model}, warmup={warmup}), betas={betas}, "
                      f"eps={eps:g}"))
    tiny = torch.full((8,), 1e-5, dtype=torch.float64)
    cases.append((tiny, torch.full((8,), 1e-3, dtype=torch.float64), ADAM_BETAS, 1e-9,
                  "8 steps of the same tiny gradient 1e-5 at lr 1e-3"))
    first = torch.tensor([3e-7], dtype=torch.float64)
    cases.append((first, torch.tensor([2e-3], dtype=torch.float64), ADAM_BETAS, 1e-9,
                  "a single first step with gradient 3e-7"))
    zeros = torch.zeros(5, dtype=torch.float64)
    cases.append((zeros, torch.full((5,), 1e-3, dtype=torch.float64), ADAM_BETAS, 1e-9,
                  "zero gradients (no update at all)"))
    flip = torch.tensor([1.0, -1.0, 1.0, -1.0, 50.0, 0.0], dtype=torch.float64)
    cases.append((flip, torch.full((6,), 0.01, dtype=torch.float64), ADAM_BETAS, 1e-9,
                  "gradients that flip sign, then one spike"))
    return cases


@contextlib.contextmanager
def _no_torch_optimizers():
    """While it is open, building a ``torch.optim`` optimizer or calling Adam's update
    functions raises: 10.2 asks for Adam's arithmetic written out, not run by PyTorch."""

    def refuse(*args, **kwargs):
        raise RuntimeError("this exercise writes Adam's update itself (moving averages, bias "
                           "corrections, eps): compute it without torch.optim")

    targets: list[tuple[object, str]] = [(torch.optim.Optimizer, "__init__")]
    targets += [(torch_adam, name) for name in ("adam", "_single_tensor_adam",
                                                "_multi_tensor_adam", "_fused_adam")
                if hasattr(torch_adam, name)]
    originals = [(owner, name, getattr(owner, name)) for owner, name in targets]
    for owner, name, _ in originals:
        setattr(owner, name, refuse)
    try:
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


@exercise("10.2", "adam_updates")
def check_adam_updates(candidate) -> str:
    """``adam_updates(gradients, lrs, betas, eps)`` must return the change of a scalar
    parameter at each step under Adam (bias-corrected moments, ε outside the root), as
    ``torch.optim.Adam`` computes it."""
    cases = _adam_cases(fresh_generator())
    for grads, lrs, betas, eps, what in cases:
        expected = torch_adam_updates(grads, lrs, betas, eps)
        with _no_torch_optimizers():
            received = attempt(candidate, grads.clone(), lrs.clone(), betas, eps, what=what)
        if isinstance(received, (list, tuple)):  # a list of numbers is fine too
            received = attempt(lambda r: torch.tensor([float(x) for x in r]), received,
                               what=f"the list returned for {what}")
        expect_close(received, expected, what=what, atol=1e-12 * float(lrs.max()), rtol=1e-6)
    return (f"matched torch.optim.Adam step by step on {len(cases)} fresh gradient sequences "
            "with scales from 1e-8 to 1e3, Noam rates, several betas and eps, zero and tiny "
            "gradients")

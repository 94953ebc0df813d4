"""Checkers for chapter 05 (self-attention)."""

from __future__ import annotations

import math
import numbers

import torch

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    UsesAutograd,
    attempt,
    exercise,
    expect_close,
    expect_equal,
    fresh_generator,
    random_int,
)


def _weight_of_match(strength: float, length: int, d_k: int) -> float:
    """The weight a query gives the one key it matches (score strength/√d_k) among
    ``length`` keys whose other scores are 0: the softmax the chapter's hand-made layer runs."""
    scores = torch.zeros(length, dtype=torch.float64)
    scores[0] = strength / math.sqrt(d_k)
    return float(torch.softmax(scores, dim=0)[0])


@exercise("05.1", "strength_for")
def check_strength_for(strength_for) -> str:
    """``strength_for(weight, length, d_k)`` must return the strength that makes the
    hand-made layer give ``weight`` to the matching key among ``length`` keys of width
    ``d_k``: ``√d_k · ln(weight · (length - 1) / (1 - weight))``."""
    generator = fresh_generator()
    cases = [(0.870, 4, 4, "the chapter's 'The' -> 'dog' (0.870 over 4 keys, d_k = 4)"),
             (0.9, 40, 64, "weight 0.9 over 40 keys with the paper's d_k = 64"),
             (0.5, 2, 1, "weight 0.5 over 2 keys (equal scores)")]
    for _ in range(12):
        length = random_int(2, 64, generator)
        d_k = (1, 4, 16, 64, 512)[random_int(0, 4, generator)]
        low = 1.0 / length
        weight = low + (0.999 - low) * float(torch.rand(1, generator=generator))
        cases.append((weight, length, d_k, f"weight {weight:.4f} over {length} keys, d_k = {d_k}"))
    for weight, length, d_k, what in cases:
        received = attempt(strength_for, weight, length, d_k, what=what)
        if isinstance(received, torch.Tensor) and received.numel() == 1:
            received = float(received)
        if (not isinstance(received, numbers.Real) or isinstance(received, bool)
                or not math.isfinite(received)):
            raise ExerciseFailure(f"for {what}, expected a finite number, received {received!r}")
        received = float(received)
        expected = math.sqrt(d_k) * math.log(weight * (length - 1) / (1 - weight))
        got = _weight_of_match(received, length, d_k)
        # float32 precision is enough: the weight it gives must be right to 1e-6; the
        # strength itself only to 1e-4 relative, since near weight 1 it is ill-conditioned
        # (1 - weight holds few float32 digits) and a wrong formula is off by far more
        if abs(got - weight) > 1e-6 or abs(received - expected) > 1e-4 * max(1.0, abs(expected)):
            raise ExerciseFailure(
                f"for {what}, your strength {received:.6g} gives the matching key weight "
                f"{got:.6f}, expected {weight:.6f} (strength {expected:.6g})")
    # What it implies for 40 keys answers the exercise's prediction: the chapter prints it
    # behind a toggle, not here.
    return (
        f"on {len(cases)} cases (the chapter's 0.870, the paper's d_k = 64, {len(cases) - 3} "
        "fresh weights, lengths and widths) your strength gives exactly the weight asked for"
    )


def _reference_jacobian(scores: torch.Tensor) -> torch.Tensor:
    """Autograd's Jacobian of the softmax over the last dim: ``(..., L)`` -> ``(..., L, L)``.

    Row ``i`` is the gradient of ``softmax(scores)[..., i]``, one backward pass per row.
    """
    scores = scores.detach().requires_grad_(True)
    p = torch.softmax(scores, dim=-1)  # (..., L)
    rows = [torch.autograd.grad(p[..., i].sum(), scores, retain_graph=True)[0]  # (..., L)
            for i in range(p.shape[-1])]
    return torch.stack(rows, dim=-2)  # L x (..., L) -> (..., L, L): [..., i, j] = ∂p_i/∂s_j


@exercise("05.2", "softmax_jacobian", forbids=[UsesAutograd(
    advice="build J = diag(p) - p pᵀ from p = softmax(scores) itself")])
def check_softmax_jacobian(softmax_jacobian) -> str:
    """``softmax_jacobian(scores)`` must equal autograd's Jacobian, entry ``[..., i, j] =
    ∂softmax_i / ∂score_j``, without using autograd itself."""
    generator = fresh_generator()
    cases = []
    for index in range(14):
        batch = tuple(random_int(1, 3, generator) for _ in range(index % 3))
        length = random_int(1, 9, generator)
        scale = (0.5, 3.0, 40.0)[index % 3]
        scores = scale * torch.randn(*batch, length, generator=generator, dtype=torch.float64)
        cases.append((scores, f"scores of shape {tuple(scores.shape)} (scale {scale:g})"))
    cases.append((torch.tensor([[2.0, 2.0, 2.0, 2.0]], dtype=torch.float64),
                  "equal scores (the uniform softmax)"))
    cases.append((torch.tensor([[500.0, 0.0, -500.0]], dtype=torch.float64),
                  "saturated scores [500, 0, -500] (an almost one-hot softmax)"))
    cases.append((torch.tensor([[0.7]], dtype=torch.float64), "a single score"))
    for scores, what in cases:
        expected = _reference_jacobian(scores)
        received = attempt(softmax_jacobian, scores.clone(), what=what)
        expect_close(received, expected, what=what, atol=1e-10, rtol=1e-7)
    return (
        f"matched autograd's Jacobian on {len(cases)} fresh score tensors with 0 to 2 batch "
        "dimensions, including uniform, saturated and single-entry rows"
    )


def _causal_candidates(d: int, generator: torch.Generator) -> dict[str, object]:
    """The four maskings of exercise 05.3 (A is right), as functions of ``x (L, d)`` with
    fixed random projections: ``scores (L, L)`` masked four ways, then weights @ values."""
    w_q, w_k, w_v = (torch.randn(d, d, generator=generator, dtype=torch.float64)
                     for _ in range(3))

    def attention(masking):
        def attend(x):
            scores = (x @ w_q) @ (x @ w_k).T / math.sqrt(d)  # (L, L)
            return masking(scores, torch.ones_like(scores, dtype=torch.bool)) @ (x @ w_v)
        return attend

    minus = float("-inf")
    return {
        "A": attention(lambda s, ones: s.masked_fill(~ones.tril(), minus).softmax(-1)),
        "B": attention(lambda s, ones: s.masked_fill(~ones.triu(), minus).softmax(-1)),
        "C": attention(lambda s, ones: s.masked_fill(~ones.tril(1), minus).softmax(-1)),
        "D": attention(lambda s, ones: s.softmax(-1) * ones.tril()),
        "no mask": attention(lambda s, ones: s.softmax(-1)),
    }


def _true_dependence(attend, x: torch.Tensor) -> torch.Tensor:
    """``[i, j]`` True where output ``i`` of ``attend(x)`` depends on input ``j`` (autograd's
    full Jacobian, ``(L, d, L, d)``, non-zero in block ``(i, j)``)."""
    jacobian = torch.autograd.functional.jacobian(attend, x)  # (L, d, L, d)
    return jacobian.abs().amax(dim=(1, 3)) != 0  # (L, L)


def _dependence_of(depends_on, attend, x: torch.Tensor, what: str) -> torch.Tensor:
    """The learner's dependence matrix for ``attend`` on ``x``, checked against autograd's."""
    received = attempt(depends_on, attend, x.clone(), what=what)
    if not isinstance(received, torch.Tensor) or received.dtype != torch.bool:
        kind = received.dtype if isinstance(received, torch.Tensor) else type(received).__name__
        raise ExerciseFailure(f"for {what}, expected a boolean tensor, received {kind}")
    expect_equal(received, _true_dependence(attend, x), what=what)
    return received


@exercise("05.3", "depends_on")
def check_depends_on(depends_on) -> str:
    """``depends_on(attend, x)`` must return the boolean ``(L, L)`` matrix whose ``[i, j]``
    says whether output ``i`` of ``attend(x)`` changes with input ``j``, measured with
    autograd, for the four maskings of the exercise and an unmasked attention."""
    generator = fresh_generator()
    for _ in range(3):
        length, d = random_int(2, 7, generator), random_int(2, 5, generator)
        for name, attend in _causal_candidates(d, generator).items():
            x = torch.randn(length, d, generator=generator, dtype=torch.float64)
            _dependence_of(depends_on, attend, x, f"masking {name} on x of shape {(length, d)}")
    # Which maskings leak is the exercise's prediction: the verdict does not say it (the
    # learner prints depends_on's matrices, the solution explains them).
    return (
        "matched autograd's dependence of every output on every input for the four maskings "
        "and an unmasked attention on 3 fresh sizes: print your function's matrix for each "
        "masking to see which ones leak"
    )

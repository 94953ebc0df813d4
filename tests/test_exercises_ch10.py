"""Chapter 10's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import math

import torch

from transformer_book.course.exercises import run_check
from transformer_book.course.exercises.ch10 import (
    package_loss_at_target,
    reference_loss_floor,
    torch_adam_updates,
)
from transformer_book.train import label_smoothed_cross_entropy


def floor(eps, vocab_size):
    on, off = 1 - eps + eps / vocab_size, eps / vocab_size
    return -on * math.log(on) - ((vocab_size - 1) * off * math.log(off) if off else 0.0)


def test_the_reference_floor_is_the_packages_minimum():
    generator = torch.Generator().manual_seed(0)
    for eps, vocab in ((0.1, 4000), (0.3, 7), (1.0, 5), (0.05, 2)):
        at_target = package_loss_at_target(eps, vocab)
        assert math.isclose(reference_loss_floor(eps, vocab), at_target, rel_tol=1e-12)
        logits = 4 * torch.randn(200, vocab, generator=generator, dtype=torch.float64)
        targets = torch.ones(200, dtype=torch.long)
        losses = label_smoothed_cross_entropy(logits, targets, eps, 0, reduction="none")
        assert bool((losses >= at_target - 1e-12).all()), "no prediction goes below the floor"
    assert reference_loss_floor(0.0, 100) == 0.0


def test_10_1_passes_the_entropy_of_the_target():
    assert run_check("10.1", floor).passed
    as_tensor = lambda e, v: torch.tensor(floor(e, v))  # noqa: E731
    assert run_check("10.1", as_tensor).passed


def test_10_1_rejects_the_classic_mistakes():
    def reference_nll_only(eps, vocab_size):  # -log p[y] at the optimum: perplexity's floor
        return -math.log(1 - eps + eps / vocab_size)

    assert run_check("10.1", reference_nll_only).status == "failed"

    def zero_log_zero_is_nan(eps, vocab_size):  # eps = 0 gives 0 · log 0 = nan
        on, off = 1 - eps + eps / vocab_size, eps / vocab_size
        with torch.no_grad():
            return float(-on * math.log(on) - (vocab_size - 1) * off * torch.tensor(off).log())

    result = run_check("10.1", zero_log_zero_is_nan)
    assert result.status == "failed" and "eps=0" in result.detail

    def others_only(eps, vocab_size):  # ε / (V - 1) on the other tokens, 1 - ε on the reference
        off = eps / (vocab_size - 1)
        on_term = -(1 - eps) * math.log(1 - eps) if eps < 1 else 0.0
        return on_term - (eps * math.log(off) if off else 0.0)

    assert run_check("10.1", others_only).status == "failed"
    assert run_check("10.1", lambda eps, vocab_size: 0.0).status == "failed"


def test_10_1_not_attempted():
    def stub(eps, vocab_size):
        raise NotImplementedError("Exercise 10.1: write your solution here")

    assert run_check("10.1", stub).status == "not attempted"


def adam(gradients, lrs, betas=(0.9, 0.98), eps=1e-9, correct=True, eps_inside=False):
    m = v = 0.0
    out = []
    for t, (g, lr) in enumerate(zip(gradients.tolist(), lrs.tolist(), strict=True), start=1):
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat = m / (1 - betas[0] ** t) if correct else m
        v_hat = v / (1 - betas[1] ** t) if correct else v
        root = math.sqrt(v_hat + eps) if eps_inside else math.sqrt(v_hat) + eps
        out.append(-lr * m_hat / root)
    return torch.tensor(out, dtype=torch.float64)


def test_the_reference_is_torch_adam():
    gradients = torch.tensor([1e-5, -2e-5, 3.0, 0.0], dtype=torch.float64)
    lrs = torch.tensor([1e-3, 2e-3, 3e-3, 1e-3], dtype=torch.float64)
    assert torch.allclose(torch_adam_updates(gradients, lrs, (0.9, 0.98), 1e-9),
                          adam(gradients, lrs), rtol=1e-9, atol=0)


def test_10_2_passes_adam_as_a_tensor_or_a_list():
    assert run_check("10.2", adam).passed
    as_list = lambda g, lr, betas, eps: adam(g, lr, betas, eps).tolist()  # noqa: E731
    assert run_check("10.2", as_list).passed


def test_10_2_rejects_the_classic_mistakes():
    no_bias_correction = lambda g, lr, b, e: adam(g, lr, b, e, correct=False)  # noqa: E731
    assert run_check("10.2", no_bias_correction).status == "failed"
    eps_inside = lambda g, lr, b, e: adam(g, lr, b, e, eps_inside=True)  # noqa: E731
    assert run_check("10.2", eps_inside).status == "failed"
    wrong_sign = lambda g, lr, b, e: -adam(g, lr, b, e)  # noqa: E731
    assert run_check("10.2", wrong_sign).status == "failed"
    sgd = lambda g, lr, b, e: -lr * g  # noqa: E731
    assert run_check("10.2", sgd).status == "failed"
    swapped_betas = lambda g, lr, b, e: adam(g, lr, (b[1], b[0]), e)  # noqa: E731
    assert run_check("10.2", swapped_betas).status == "failed"


def test_10_2_not_attempted():
    def stub(gradients, lrs, betas=(0.9, 0.98), eps=1e-9):
        raise NotImplementedError("Exercise 10.2: write your solution here")

    assert run_check("10.2", stub).status == "not attempted"


def test_10_2_refuses_torch_optim_in_any_form():
    wraps_adam = lambda g, lr, betas, eps: torch_adam_updates(g, lr, betas, eps)  # noqa: E731
    result = run_check("10.2", wraps_adam)
    assert result.status == "failed" and "without torch.optim" in result.detail

    def functional(gradients, lrs, betas, eps):
        from torch.optim.adam import adam as adam_function

        weight, updates = torch.zeros((), dtype=torch.float64), []
        m, v, step = torch.zeros_like(weight), torch.zeros_like(weight), torch.tensor(0.0)
        for g, lr in zip(gradients, lrs, strict=True):
            before = weight.clone()
            adam_function([weight], [g.clone()], [m], [v], [], [step], amsgrad=False,
                          beta1=betas[0], beta2=betas[1], lr=float(lr), weight_decay=0.0,
                          eps=eps, maximize=False)
            updates.append(float(weight - before))
        return torch.tensor(updates, dtype=torch.float64)

    result = run_check("10.2", functional)
    assert result.status == "failed" and "without torch.optim" in result.detail
    assert run_check("10.2", adam).passed  # torch.optim works again after a check
    assert torch.allclose(torch_adam_updates(torch.ones(2, dtype=torch.float64),
                                             torch.ones(2, dtype=torch.float64), (0.9, 0.98),
                                             1e-9), adam(torch.ones(2, dtype=torch.float64),
                                                         torch.ones(2, dtype=torch.float64)))

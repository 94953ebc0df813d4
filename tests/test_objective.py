"""Label-smoothed cross-entropy (Section 5.4) and the warmup schedule (Section 5.3)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_book.train.objective import (
    MAX_LR,
    REDUCTIONS,
    count_tokens,
    label_smoothed_cross_entropy,
    make_optimizer,
    noam_lr,
    smoothed_target_distribution,
)
from transformer_book.util.validation import BookError

PAD = 0


def _batch(seed, B=3, T=5, V=11, pad_from=None):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=generator, dtype=torch.float64)
    targets = torch.randint(1, V, (B, T), generator=generator)
    targets[0, 3:] = PAD  # padded sequences
    targets[2, 1:] = PAD
    return logits, targets


@pytest.mark.parametrize("smoothing", [0.0, 0.05, 0.1, 0.3, 1.0])
def test_equals_pytorch_cross_entropy(smoothing):
    logits, targets = _batch(0)
    ours = label_smoothed_cross_entropy(logits, targets, smoothing=smoothing, ignore_index=PAD)
    theirs = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1),
                             label_smoothing=smoothing, ignore_index=PAD)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    assert ours.dtype == torch.float64


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), smoothing=st.floats(0.0, 0.9), pad=st.integers(0, 3),
       n=st.integers(1, 12), vocab=st.integers(4, 20))
def test_equals_pytorch_2d_inputs(seed, smoothing, pad, n, vocab):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, vocab, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, vocab, (n,), generator=generator)
    targets[0] = (pad + 1) % vocab  # at least one real token
    ours = label_smoothed_cross_entropy(logits, targets, smoothing, ignore_index=pad)
    theirs = F.cross_entropy(logits, targets, label_smoothing=smoothing, ignore_index=pad)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


def test_sum_and_none_reductions_and_token_counts():
    logits, targets = _batch(1)
    per_token = label_smoothed_cross_entropy(logits, targets, reduction="none")
    assert per_token.shape == targets.shape
    assert torch.all(per_token[targets == PAD] == 0)
    total = label_smoothed_cross_entropy(logits, targets, reduction="sum")
    count = count_tokens(targets, ignore_index=PAD)
    assert int(count) == int((targets != PAD).sum()) == 15 - 2 - 4
    mean = label_smoothed_cross_entropy(logits, targets)
    torch.testing.assert_close(total / count, mean)
    torch.testing.assert_close(per_token.sum(), total)


def test_accumulation_of_sums_equals_the_big_batch_mean():
    logits, targets = _batch(2, B=4)
    halves = [(logits[:2], targets[:2]), (logits[2:], targets[2:])]
    total = sum(label_smoothed_cross_entropy(x, y, reduction="sum") for x, y in halves)
    count = sum(count_tokens(y) for _, y in halves)
    torch.testing.assert_close(total / count, label_smoothed_cross_entropy(logits, targets))


def test_half_precision_logits_are_computed_in_float32():
    logits, targets = _batch(3)
    loss = label_smoothed_cross_entropy(logits.to(torch.bfloat16), targets)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


def test_gradient_flows_and_ignores_padding():
    logits, targets = _batch(4)
    logits.requires_grad_(True)
    label_smoothed_cross_entropy(logits, targets).backward()
    assert torch.all(logits.grad[targets == PAD] == 0)
    assert logits.grad[targets != PAD].abs().sum() > 0


def test_smoothed_distribution_matches_the_loss():
    logits, targets = _batch(5)
    V, eps = 11, 0.1
    dist = smoothed_target_distribution(targets, V, eps, pad_id=PAD)
    assert dist.shape == (targets.numel(), V)
    keep = targets.reshape(-1) != PAD
    torch.testing.assert_close(dist[keep].sum(-1), torch.ones(int(keep.sum())))
    assert torch.all(dist[~keep] == 0)
    row = dist[0]
    assert math.isclose(row[targets[0, 0]].item(), 1 - eps + eps / V, rel_tol=1e-6)
    assert math.isclose(row.min().item(), eps / V, rel_tol=1e-6)
    # Cross-entropy against the rows is the loss.
    log_probs = F.log_softmax(logits.reshape(-1, V), -1)
    manual = -(dist.double() * log_probs).sum(-1)[keep].mean()
    torch.testing.assert_close(manual, label_smoothed_cross_entropy(logits, targets, eps))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: label_smoothed_cross_entropy(torch.randn(2, 3, 4), torch.ones(2, 4).long()),
         r"targets: expected shape \(2, 3\) .*received shape \(2, 4\)"),
        (lambda: label_smoothed_cross_entropy(torch.randn(4), torch.ones(4).long()),
         r"logits: expected a 2 or 3-D tensor, received shape \(4,\)"),
        (lambda: label_smoothed_cross_entropy(torch.randn(2, 4), torch.ones(2)),
         r"targets: expected dtype torch.int64 or torch.int32"),
        (lambda: label_smoothed_cross_entropy(torch.randn(2, 4), torch.tensor([1, 4])),
         r"targets: expected ids in \[0, 4\) outside padding, received ids from 1 to 4"),
        (lambda: label_smoothed_cross_entropy(torch.randn(2, 4), torch.tensor([0, 0])),
         r"targets: expected at least one token other than ignore_index=0, received only"),
        (lambda: label_smoothed_cross_entropy(torch.randn(2, 4), torch.tensor([1, 2]), 1.5),
         r"smoothing: expected a finite number >= 0 and <= 1, received 1.5"),
        (lambda: label_smoothed_cross_entropy(torch.randn(2, 4), torch.tensor([1, 2]),
                                              reduction="avg"),
         r"reduction: expected one of \['mean', 'sum', 'none'\], received 'avg'"),
        (lambda: smoothed_target_distribution(torch.tensor([1, 9]), 5),
         r"targets: expected ids in \[0, 5\), received ids from 1 to 9"),
        (lambda: smoothed_target_distribution(torch.tensor([1]), 0),
         r"vocab_size: expected an integer >= 1, received 0"),
        (lambda: count_tokens(torch.randn(3)), r"targets: expected dtype"),
    ],
)
def test_bad_loss_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_unchecked_loss_is_the_same_without_reading_the_targets():
    logits, targets = torch.randn(3, 5, 11), torch.randint(0, 11, (3, 5))
    for reduction in REDUCTIONS:
        assert torch.equal(label_smoothed_cross_entropy(logits, targets, reduction=reduction),
                           label_smoothed_cross_entropy(logits, targets, reduction=reduction,
                                                        check=False))
    # Without the check, a batch of padding only averages over nothing: NaN, not an error.
    only_padding = label_smoothed_cross_entropy(logits, torch.zeros(3, 5, dtype=torch.long),
                                                check=False)
    assert torch.isnan(only_padding)
    with pytest.raises(ValueError, match="check: expected True or False"):
        label_smoothed_cross_entropy(logits, targets, check=1)


def test_all_padding_sums_to_zero():
    loss = label_smoothed_cross_entropy(torch.randn(2, 4), torch.tensor([0, 0]), reduction="sum")
    assert loss.item() == 0.0


# ------------------------------------------------------------------------------ schedule


def test_noam_values():
    # Section 5.3, eq. 3 with d_model = 512, warmup = 4000.
    assert noam_lr(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert noam_lr(4000, 512, 4000) == pytest.approx(512**-0.5 * 4000**-0.5)
    assert noam_lr(4000, 512, 4000) == pytest.approx(6.987712e-4, rel=1e-6)
    assert noam_lr(16000, 512, 4000) == pytest.approx(512**-0.5 * 16000**-0.5)
    assert noam_lr(100, 512, 4000, factor=2.0) == pytest.approx(2 * 512**-0.5 * 100 * 4000**-1.5)
    assert noam_lr(0, 512, 4000) == noam_lr(1, 512, 4000)


def test_noam_peaks_at_warmup():
    rates = [noam_lr(s, 256, 400) for s in range(1, 2001)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == 400
    assert all(a < b for a, b in itertools.pairwise(rates[:400]))
    assert all(a > b for a, b in itertools.pairwise(rates[399:]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"warmup_steps": 0}, r"warmup_steps: expected an integer >= 1, received 0"),
        ({"d_model": 0}, r"d_model: expected an integer >= 1, received 0"),
        ({"step": -1}, r"step: expected an integer >= 0, received -1"),
        ({"factor": 0.0}, r"factor: expected a finite number > 0, received 0.0"),
        ({"factor": float("nan")}, r"factor: expected a finite number > 0, received nan"),
    ],
)
def test_noam_bad_inputs(kwargs, match):
    args = {"step": 10, "d_model": 512, "warmup_steps": 4000, **kwargs}
    with pytest.raises(ValueError, match=match):
        noam_lr(**args)
    if "step" not in kwargs:
        with pytest.raises(ValueError, match=match):
            make_optimizer(nn.Linear(2, 2), args["d_model"], args["warmup_steps"],
                           args.get("factor", 1.0))


def test_a_learning_rate_adam_cannot_represent_is_refused():
    """lr_factor = 1e45 used to crash inside torch's Adam ("value cannot be converted to type
    float without overflow"); the schedule's peak is checked when the optimizer is made."""
    for factor in (1e45, 1e300):
        with pytest.raises(BookError, match=r"^factor: expected a factor whose peak learning "
                           r"rate .* at most 3\.4e\+37 .*received 1e\+(45|300) \(peak "):
            make_optimizer(nn.Linear(2, 2), 512, 4000, factor)
    peak_factor = MAX_LR * (512 * 4000) ** 0.5 * 0.5
    optimizer, _ = make_optimizer(nn.Linear(2, 2), 512, 4000, peak_factor)  # just below
    assert optimizer.param_groups[0]["lr"] < MAX_LR


def test_noam_refuses_a_rate_that_is_not_a_finite_float():
    for args in ((10**400, 512, 4000), (1, 10**400, 4000), (10**400, 512, 10**400)):
        with pytest.raises(BookError, match=r"^noam_lr\(step, d_model, warmup_steps, factor\): "
                           r"expected a finite number, received inf$"):
            noam_lr(*args)
    assert noam_lr(1, 1, 1, 1e308) == 1e308, "the largest finite rates still pass"


def test_optimizer_follows_the_schedule():
    model = nn.Linear(3, 2)
    optimizer, scheduler = make_optimizer(model, d_model=64, warmup_steps=5, factor=2.0)
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9
    for step in range(1, 13):
        assert group["lr"] == pytest.approx(noam_lr(step, 64, 5, 2.0)), step
        model(torch.randn(4, 3)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()


def test_optimizer_accepts_parameters_and_skips_frozen():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model[0].requires_grad_(False)
    optimizer, _ = make_optimizer(model, 8, 10)
    assert len(optimizer.param_groups[0]["params"]) == 2
    optimizer, _ = make_optimizer(list(model[1].parameters()), 8, 10)
    assert len(optimizer.param_groups[0]["params"]) == 2
    with pytest.raises(ValueError, match=r"model: expected at least one trainable parameter"):
        make_optimizer(model[0], 8, 10)


def _padded_rows(seed, n, vocab, pad, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, vocab, generator=generator, dtype=dtype) * 3
    targets = torch.randint(0, vocab, (n,), generator=generator)
    targets[0] = (pad + 1) % vocab  # at least one real token
    targets[-1] = pad  # and at least one padding position
    return logits, targets


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), smoothing=st.floats(0.0, 1.0), pad=st.integers(0, 3),
       n=st.integers(2, 12), vocab=st.integers(4, 20))
def test_every_reduction_equals_pytorch_with_padding(seed, smoothing, pad, n, vocab):
    logits, targets = _padded_rows(seed, n, vocab, pad)
    for reduction in REDUCTIONS:
        ours = label_smoothed_cross_entropy(logits, targets, smoothing, pad, reduction)
        theirs = F.cross_entropy(logits, targets, label_smoothing=smoothing, ignore_index=pad,
                                 reduction=reduction)
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), smoothing=st.floats(0.0, 1.0), n=st.integers(2, 12),
       vocab=st.integers(4, 20))
def test_equals_the_logsumexp_form(seed, smoothing, n, vocab):
    # -(1 - ε)·log p[y] - (ε / V)·Σ_v log p[v] with log p[v] = x[v] - logsumexp(x):
    # no log-softmax and no target rows, ε / V on every class (the true one included).
    logits, targets = _padded_rows(seed, n, vocab, PAD)
    lse = torch.logsumexp(logits, dim=-1)
    true_logit = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    expected = (lse - (1 - smoothing) * true_logit - smoothing * logits.mean(-1))
    expected = expected * (targets != PAD)
    ours = label_smoothed_cross_entropy(logits, targets, smoothing, PAD, "none")
    torch.testing.assert_close(ours, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gradient_passes_gradcheck_and_equals_pytorch(reduction):
    logits, targets = _padded_rows(6, 7, 5, PAD)
    logits.requires_grad_(True)

    def loss(x):
        return label_smoothed_cross_entropy(x, targets, 0.1, PAD, reduction)

    assert torch.autograd.gradcheck(loss, (logits,))
    weights = torch.randn(targets.shape, dtype=torch.float64) if reduction == "none" else None
    ours = torch.autograd.grad(loss(logits), logits, weights)[0]
    theirs = torch.autograd.grad(
        F.cross_entropy(logits, targets, label_smoothing=0.1, ignore_index=PAD,
                        reduction=reduction), logits, weights)[0]
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    assert torch.all(ours[targets == PAD] == 0)

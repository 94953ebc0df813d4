"""Checkers for chapter 05 (self-attention)."""

from __future__ import annotations

import torch

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_close,
    expect_equal,
    fresh_generator,
    random_int,
)
from transformer_book.nn.attention import causal_mask, padding_mask, scaled_dot_product_attention


def _pair(received, what: str) -> tuple:
    if not (isinstance(received, tuple) and len(received) == 2):
        raise ExerciseFailure(
            f"for {what}, expected a tuple (values, attention), received {type(received).__name__}"
        )
    return received


@exercise("05.1", "scaled_dot_product with masks")
def check_scaled_dot_product(scaled_dot_product) -> str:
    """``scaled_dot_product(q, k, v, mask=None)`` must equal the package, masks included, and
    give zero weights and zero values (not NaN) to a query whose keys are all masked."""
    generator = fresh_generator()
    cases = []
    for index in range(18):
        batch = tuple(random_int(1, 3, generator) for _ in range(index % 3))  # 0, 1 or 2 dims
        l_q, l_k = random_int(1, 6, generator), random_int(1, 7, generator)
        d_k, d_v = random_int(1, 8, generator), random_int(1, 5, generator)
        q = torch.randn(*batch, l_q, d_k, generator=generator, dtype=torch.float64)
        k = torch.randn(*batch, l_k, d_k, generator=generator, dtype=torch.float64)
        v = torch.randn(*batch, l_k, d_v, generator=generator, dtype=torch.float64)
        kind = ("no mask", "random mask", "causal mask", "padding mask")[index % 4]
        if kind == "no mask":
            mask = None
        elif kind == "random mask":
            mask = torch.rand(*batch, l_q, l_k, generator=generator) < 0.6
        elif kind == "causal mask":
            k = torch.randn(*batch, l_q, d_k, generator=generator, dtype=torch.float64)
            v = torch.randn(*batch, l_q, d_v, generator=generator, dtype=torch.float64)
            mask = causal_mask(l_q)
        else:  # one mask row shared by every query: shape (..., 1, L_k)
            mask = torch.rand(*batch, 1, l_k, generator=generator) < 0.7
        cases.append((q, k, v, mask, f"q {tuple(q.shape)}, k {tuple(k.shape)}, "
                                      f"v {tuple(v.shape)} with {kind}"))
    q = torch.randn(2, 4, 3, generator=generator, dtype=torch.float64)
    v = torch.randn(2, 4, 5, generator=generator, dtype=torch.float64)
    mask = torch.ones(2, 4, 4, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of the first example sees no key at all
    mask[1, :, 2] = False
    cases.append((q, q, v, mask, "a mask whose row for one query is all False"))
    everything_masked = torch.zeros(1, 3, 2, dtype=torch.bool)
    x = torch.randn(1, 2, 4, generator=generator, dtype=torch.float64)
    cases.append((torch.randn(1, 3, 4, generator=generator, dtype=torch.float64), x, x,
                  everything_masked, "a mask that is False everywhere"))
    large = 30.0 * torch.randn(1, 5, 16, generator=generator, dtype=torch.float64)
    cases.append((large, large, large, causal_mask(5), "large scores with a causal mask"))
    for q, k, v, mask, what in cases:
        expected_values, expected_weights = scaled_dot_product_attention(q, k, v, mask)
        received = _pair(attempt(scaled_dot_product, q.clone(), k.clone(), v.clone(),
                                 None if mask is None else mask.clone(), what=what), what)
        expect_close(received[1], expected_weights, what=f"the attention weights for {what}",
                     atol=1e-9, rtol=1e-7)
        expect_close(received[0], expected_values, what=f"the values for {what}",
                     atol=1e-9, rtol=1e-7)
    return (
        f"matched transformer_book's scaled_dot_product_attention (values and weights) on "
        f"{len(cases)} fresh inputs with 0 to 2 batch dimensions, no mask, random, causal and "
        "padding masks, fully masked rows (zeros, not NaN) and large scores"
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


@exercise("05.2", "softmax_jacobian")
def check_softmax_jacobian(softmax_jacobian) -> str:
    """``softmax_jacobian(scores)`` must equal autograd's Jacobian, entry ``[..., i, j] =
    ∂softmax_i / ∂score_j``."""
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


@exercise("05.3", "decoder_mask")
def check_decoder_mask(decoder_mask) -> str:
    """``decoder_mask(ids, pad_id)`` must equal ``padding_mask(ids, pad_id) & causal_mask(L)``,
    a boolean ``(B, 1, L, L)`` tensor."""
    generator = fresh_generator()
    cases = []
    for _ in range(12):
        batch, length = random_int(1, 4, generator), random_int(1, 9, generator)
        pad_id = random_int(0, 3, generator)
        ids = torch.randint(0, 8, (batch, length), generator=generator)
        lengths = torch.randint(1, length + 1, (batch,), generator=generator)
        ids[torch.arange(length) >= lengths[:, None]] = pad_id  # right padding
        cases.append((ids, pad_id, f"ids of shape {(batch, length)} with pad_id={pad_id}"))
    cases.append((torch.tensor([[0, 0, 5, 6]]), 0, "left padding (the first query sees no key)"))
    cases.append((torch.tensor([[1, 1, 1]]), 1, "a sequence made only of padding"))
    cases.append((torch.tensor([[4]]), 0, "a single token"))
    for ids, pad_id, what in cases:
        length = ids.shape[1]
        expected = padding_mask(ids, pad_id) & causal_mask(length)  # (B, 1, L, L)
        received = attempt(decoder_mask, ids.clone(), pad_id, what=what)
        if not isinstance(received, torch.Tensor) or received.dtype != torch.bool:
            kind = received.dtype if isinstance(received, torch.Tensor) else type(received).__name__
            raise ExerciseFailure(f"for {what}, expected a boolean tensor, received {kind}")
        expect_equal(received, expected, what=what)
    return (
        f"matched padding_mask & causal_mask on {len(cases)} fresh batches, shape (B, 1, L, L), "
        "including left padding, all-padding rows and a single token"
    )

"""Checkers for chapter 03 (convolutional sequence models)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from transformer_book.baselines.conv import CausalConv1d, receptive_field
from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_close,
    expect_equal,
    fresh_generator,
    random_int,
)


@exercise("03.1", "causal_conv1d")
def check_causal_conv1d(causal_conv1d) -> str:
    """``causal_conv1d(x, weight, bias, dilation)`` must equal the package's CausalConv1d."""
    generator = fresh_generator()
    shapes = []
    # (batch, length, C_in, C_out, kernel_size, dilation)
    bounds = ((1, 3), (1, 20), (1, 4), (1, 4), (1, 5), (1, 4))
    for _ in range(16):
        shapes.append(tuple(random_int(low, high, generator) for low, high in bounds))
    shapes += [
        (2, 9, 3, 2, 1, 3),  # kernel 1: a position-wise linear map, dilation irrelevant
        (1, 1, 2, 3, 3, 2),  # a single position: only the last tap sees real input
        (2, 5, 2, 2, 3, 4),  # the kernel spans more than the sequence: mostly padding
    ]
    for index, (batch, length, c_in, c_out, k, dilation) in enumerate(shapes):
        x = torch.randn(batch, length, c_in, generator=generator, dtype=torch.float64)
        weight = torch.randn(c_out, c_in, k, generator=generator, dtype=torch.float64)
        use_bias = index % 4 != 3
        bias = torch.randn(c_out, generator=generator, dtype=torch.float64) if use_bias else None
        what = (f"x of shape {(batch, length, c_in)}, weight of shape {(c_out, c_in, k)}, "
                f"dilation={dilation}, bias={'a tensor' if use_bias else 'None'}")
        reference = CausalConv1d(c_in, c_out, k, dilation).double()
        with torch.no_grad():
            reference.conv.weight.copy_(weight)
            reference.conv.bias.copy_(bias if use_bias else torch.zeros(c_out, dtype=torch.float64))
            expected = reference(x)  # (B, L, C_out)
        torch_says = F.conv1d(F.pad(x.transpose(1, 2), ((k - 1) * dilation, 0)), weight, bias,
                              dilation=dilation).transpose(1, 2)
        if not torch.allclose(expected, torch_says, atol=1e-12):  # pragma: no cover
            raise RuntimeError("the reference disagrees with torch's conv1d")
        received = attempt(causal_conv1d, x.clone(), weight.clone(),
                           None if bias is None else bias.clone(), dilation, what=what)
        expect_close(received, expected, what=what, atol=1e-9, rtol=1e-7)
    x = torch.randn(1, 12, 2, generator=generator, dtype=torch.float64)
    weight = torch.randn(3, 2, 3, generator=generator, dtype=torch.float64)
    changed = x.clone()
    changed[0, 7] += 1.0
    what = "a change at position 7 (outputs 0..6 must not move: causality)"
    before = attempt(causal_conv1d, x, weight, None, 2, what=what)
    after = attempt(causal_conv1d, changed, weight, None, 2, what=what)
    expect_close(after[:, :7], before[:, :7], what=what, atol=1e-12, rtol=0.0)
    return (
        f"matched the package's CausalConv1d (and torch's conv1d) on {len(shapes)} fresh random "
        "inputs, including kernel 1, length 1, kernels wider than the sequence and bias=None, "
        "and never let an output see a later input"
    )


@exercise("03.2", "receptive_field_span")
def check_receptive_field_span(receptive_field_span) -> str:
    """``receptive_field_span(kernel_size, dilations)`` must equal the span gradients measure."""
    generator = fresh_generator()
    stacks = []
    for _ in range(12):
        layers = random_int(1, 5, generator)
        stacks.append((random_int(1, 5, generator),
                       tuple(random_int(1, 8, generator) for _ in range(layers))))
    stacks += [(1, (1, 2, 4)), (3, (1,)), (3, (1, 2, 4, 8, 16)), (2, (1, 1, 1, 1)), (3, (2, 4))]
    for kernel_size, dilations in stacks:
        what = f"kernel_size={kernel_size}, dilations={dilations}"
        model = nn.Sequential(*(CausalConv1d(2, 2, kernel_size, d) for d in dilations)).double()
        length = 1 + kernel_size * sum(dilations) + random_int(1, 4, generator)
        field = receptive_field(model, length, channels=2)  # (length,), output = length - 1
        earliest = int(field.nonzero()[0])
        measured = length - earliest  # positions earliest, ..., length - 1
        received = attempt(receptive_field_span, kernel_size, list(dilations), what=what)
        if isinstance(received, torch.Tensor):
            if received.numel() != 1:
                raise ExerciseFailure(f"for {what}, expected one integer, received a tensor "
                                      f"of shape {tuple(received.shape)}")
            received = received.item()
        expect_equal(received, measured, what=what)
    return (
        f"matched the span measured from gradients on {len(stacks)} fresh random stacks of "
        "causal convolutions, including kernel 1, one layer, ByteNet's dilations "
        "1, 2, 4, 8, 16 and dilations that leave holes"
    )

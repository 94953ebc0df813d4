"""Checkers for chapter 03 (convolutional sequence models)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from transformer_book.baselines.conv import CausalConv1d, DilatedConvStack, layers_to_connect
from transformer_book.course.exercises.core import (
    LoopOver,
    attempt,
    exercise,
    expect_close,
    expect_equal,
    fresh_generator,
    random_int,
)


def _probe_inputs(length: int, generator: torch.Generator) -> list[tuple]:
    """``causal_conv1d``'s arguments at ``length`` (kernel 3, dilation 2: a reach of 4 past
    which no correct answer branches), once with a bias and once with ``None``."""
    x = torch.randn(2, length, 3, generator=generator, dtype=torch.float64)
    weight = torch.randn(4, 3, 3, generator=generator, dtype=torch.float64)
    bias = torch.randn(4, generator=generator, dtype=torch.float64)
    return [(x, weight, bias, 2), (x, weight, None, 2)]


NO_LOOP_OVER_L = LoopOver(
    "the L positions", inputs=_probe_inputs, sizes=(12, 36), size_name="L",
    advice="pad once, then gather the k shifted copies of the sequence (a loop over the k "
    "taps is fine) or use Tensor.unfold")


@exercise("03.1", "causal_conv1d", forbids=[NO_LOOP_OVER_L])
def check_causal_conv1d(causal_conv1d) -> str:
    """``causal_conv1d(x, weight, bias, dilation)`` must equal the package's CausalConv1d,
    without a loop over the positions (:data:`NO_LOOP_OVER_L`)."""
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
        with torch.random.fork_rng(devices=[]):  # its initial weights: the notebook's RNG stays
            reference = CausalConv1d(c_in, c_out, k, dilation).double()
        with torch.no_grad():
            reference.conv.weight.copy_(weight)
            if reference.conv.bias is not None:
                reference.conv.bias.copy_(torch.zeros(c_out, dtype=torch.float64)
                                          if bias is None else bias)
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


def _capped_layers(n: int, kernel_size: int, max_dilation: int) -> int:
    """Reference: walk the dilations 1, 2, 4, ..., max_dilation, 1, 2, ... until n is seen."""
    layers, seen, dilation = 0, 1, 1
    while seen < n:
        seen += (kernel_size - 1) * dilation
        dilation = 1 if dilation == max_dilation else 2 * dilation
        layers += 1
    return layers


def _capped_stack(kernel_size: int, max_dilation: int) -> Callable[[int], nn.Module]:
    block = [2**i for i in range(max_dilation.bit_length())]  # 1, 2, ..., max_dilation

    def make(m: int) -> nn.Module:
        torch.manual_seed(m)
        return DilatedConvStack(2, kernel_size, [block[i % len(block)] for i in range(m)]).double()
    return make


@exercise("03.2", "bytenet_layers")
def check_bytenet_layers(bytenet_layers) -> str:
    """``bytenet_layers(n, kernel_size, max_dilation)`` must equal the measured path length."""
    generator = fresh_generator()
    cases = [(random_int(2, 4000, generator), random_int(2, 5, generator),
              2 ** random_int(0, 5, generator)) for _ in range(40)]
    cases += [(128, 3, 16), (256, 3, 16), (512, 3, 16), (1, 3, 16), (2, 2, 1), (63, 3, 16),
              (64, 3, 16), (31, 2, 16), (32, 2, 16)]
    measured = [(random_int(2, 40, generator), random_int(2, 4, generator),
                 2 ** random_int(0, 3, generator)) for _ in range(4)] + [(40, 3, 4)]
    with torch.random.fork_rng(devices=[]):  # the stacks seed the RNG: keep the notebook's
        for n, k, r in measured:  # the reference itself, against gradients on the real stack
            if layers_to_connect(_capped_stack(k, r), n, channels=2) != _capped_layers(n, k, r):
                raise RuntimeError(f"reference disagrees with gradients at {(n, k, r)}")
    for n, k, r in cases + measured:
        what = f"n={n}, kernel_size={k}, max_dilation={r} (dilations 1, 2, ..., {r} repeated)"
        received = attempt(bytenet_layers, n, k, r, what=what)
        if isinstance(received, torch.Tensor) and received.numel() == 1:
            received = received.item()
        expect_equal(received, _capped_layers(n, k, r), what=what)
    return (
        f"matched the fewest layers on {len(cases) + len(measured)} cases (lengths up to 4000, "
        "kernels 2-5, caps 1-32, n = 1), five of them measured from gradients through "
        "DilatedConvStack"
    )

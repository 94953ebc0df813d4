"""Chapter 03 checkers: a right answer passes, wrong answers fail with details, stubs say so."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from transformer_book.course.exercises import run_check


def causal_conv1d(x, weight, bias, dilation=1):
    k = weight.shape[-1]
    padded = F.pad(x.transpose(1, 2), ((k - 1) * dilation, 0))  # (B, C_in, pad + L)
    return F.conv1d(padded, weight, bias, dilation=dilation).transpose(1, 2)


def centred_conv1d(x, weight, bias, dilation=1):
    k = weight.shape[-1]
    total = (k - 1) * dilation
    padded = F.pad(x.transpose(1, 2), (total // 2, total - total // 2))
    return F.conv1d(padded, weight, bias, dilation=dilation).transpose(1, 2)


def ignores_dilation(x, weight, bias, dilation=1):
    return causal_conv1d(x, weight, bias, 1)


def stub(*args, **kwargs):
    raise NotImplementedError("Exercise 03.1: write your solution here")


def test_causal_conv1d_checker():
    assert run_check("03.1", causal_conv1d).passed
    for wrong in (centred_conv1d, ignores_dilation):
        result = run_check("03.1", wrong)
        assert result.status == "failed" and "expected" in result.detail, result.message
    assert run_check("03.1", stub).status == "not attempted"


def bytenet_layers(n, kernel_size, max_dilation):
    """Closed form: whole blocks of dilations 1..r add (k-1)(2r-1) positions each."""
    block = (kernel_size - 1) * (2 * max_dilation - 1)
    full, rest = divmod(n - 1, block)
    layers, reach, dilation = full * max_dilation.bit_length(), 0, 1
    while reach < rest:
        reach += (kernel_size - 1) * dilation
        dilation *= 2
        layers += 1
    return layers


def test_bytenet_layers_checker():
    result = run_check("03.2", bytenet_layers)
    assert result.passed, result.message
    as_tensor = run_check("03.2", lambda n, k, r: torch.tensor(bytenet_layers(n, k, r)))
    assert as_tensor.passed, as_tensor.message
    assert bytenet_layers(512, 3, 16) == 44, "the chapter's measured table"


def test_bytenet_layers_checker_rejects_common_mistakes():
    def unlimited(n, kernel_size, max_dilation):  # forgets the cap: logarithmic
        layers, seen, dilation = 0, 1, 1
        while seen < n:
            seen, dilation, layers = seen + (kernel_size - 1) * dilation, 2 * dilation, layers + 1
        return layers

    def counts_inputs(n, kernel_size, max_dilation):  # a block adds k·r inputs, not (k-1)(2r-1)
        return -(-(n - 1) // (kernel_size * max_dilation)) * max_dilation.bit_length()

    def no_empty_case(n, kernel_size, max_dilation):
        return max(1, bytenet_layers(n, kernel_size, max_dilation))

    for wrong in (unlimited, counts_inputs, no_empty_case):
        result = run_check("03.2", wrong)
        assert result.status == "failed" and "expected" in result.detail, wrong.__name__
    assert run_check("03.2", stub).status == "not attempted"

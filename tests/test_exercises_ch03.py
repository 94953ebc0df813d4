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


def test_receptive_field_span_checker():
    assert run_check("03.2", lambda k, dilations: 1 + (k - 1) * sum(dilations)).passed
    as_tensor = run_check("03.2", lambda k, d: torch.tensor(1 + (k - 1) * sum(d)))
    assert as_tensor.passed, as_tensor.message
    no_plus_one = run_check("03.2", lambda k, dilations: (k - 1) * sum(dilations))
    assert no_plus_one.status == "failed" and "expected" in no_plus_one.detail
    assert run_check("03.2", lambda k, dilations: k * len(dilations)).status == "failed"
    assert run_check("03.2", stub).status == "not attempted"

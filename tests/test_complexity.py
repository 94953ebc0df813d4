"""Table 1's per-layer costs, checked against PyTorch's own FLOP counter."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from transformer_book.analysis.complexity import (
    conv_flops_per_layer,
    recurrent_flops_per_layer,
    self_attention_flops_per_layer,
)
from transformer_book.baselines.rnn import RNN
from transformer_book.util.validation import BookError


def counted(fn, *args) -> int:
    with FlopCounterMode(display=False) as counter:
        fn(*args)
    return counter.get_total_flops()


@pytest.mark.parametrize(("n", "d"), [(1, 1), (7, 4), (16, 8)])
def test_self_attention_flops_match_the_counter(n: int, d: int) -> None:
    x = torch.randn(n, d)
    proj = [nn.Linear(d, d, bias=False) for _ in range(4)]

    def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.T / d**0.5, dim=-1) @ v  # (n, n) @ (n, d)

    def layer(x: torch.Tensor) -> torch.Tensor:
        return proj[3](core(proj[0](x), proj[1](x), proj[2](x)))

    assert counted(core, x, x, x) == self_attention_flops_per_layer(n, d), "2·2·n²·d"
    assert counted(layer, x) == self_attention_flops_per_layer(n, d, include_projections=True)


@pytest.mark.parametrize(("n", "d"), [(1, 3), (6, 5)])
def test_recurrent_flops_match_the_counter(n: int, d: int) -> None:
    assert counted(RNN(d, d), torch.randn(1, n, d)) == recurrent_flops_per_layer(n, d)


@pytest.mark.parametrize(("n", "d", "k"), [(1, 2, 1), (9, 4, 3), (12, 3, 5)])
def test_conv_flops_match_the_counter(n: int, d: int, k: int) -> None:
    conv = nn.Conv1d(d, d, k, bias=False)
    x = F.pad(torch.randn(1, d, n), (k - 1, 0))  # n outputs
    assert counted(conv, x) == conv_flops_per_layer(n, d, k), "2·n·k·d²"


def test_table_1_crossover_n_equals_d() -> None:
    d = 512
    assert self_attention_flops_per_layer(256, d) < recurrent_flops_per_layer(256, d)
    assert self_attention_flops_per_layer(1024, d) > recurrent_flops_per_layer(1024, d)
    assert self_attention_flops_per_layer(d, d) == recurrent_flops_per_layer(d, d), "n = d"


def test_bad_inputs_raise_value_errors() -> None:
    with pytest.raises(BookError, match="n: expected an integer >= 1, received 0"):
        self_attention_flops_per_layer(0, 4)
    with pytest.raises(BookError, match="d: expected an integer >= 1, received -2"):
        recurrent_flops_per_layer(3, -2)
    with pytest.raises(BookError, match="k: expected an integer >= 1, received 0"):
        conv_flops_per_layer(3, 4, 0)

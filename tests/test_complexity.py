"""Table 1's per-layer costs, checked against PyTorch's own FLOP counter; the timing of
the layers (no timing is asserted, only that it is measured) and the operation count."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from transformer_book.analysis.complexity import (
    conv_flops_per_layer,
    count_operations,
    profile_operators,
    recurrent_flops_per_layer,
    self_attention_flops_per_layer,
    sequence_layer_output,
    table_1_layers,
    time_layers,
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


def test_table_1_layers_map_sequences_to_sequences() -> None:
    torch.manual_seed(0)
    layers = table_1_layers(8, heads=2, kernel_size=3)
    assert list(layers)[:3] == ["self-attention", "recurrent (loop)", "convolution"]
    assert {"nn.RNN", "nn.LSTM", "nn.GRU"} <= set(layers), "the fused library kernels"
    assert isinstance(layers["nn.LSTM"], nn.LSTM) and isinstance(layers["nn.GRU"], nn.GRU)
    x = torch.randn(2, 5, 8)
    for name, layer in layers.items():
        assert sequence_layer_output(layer, x).shape == (2, 5, 8), name


def test_time_layers_returns_positive_times_and_restores_threads() -> None:
    torch.manual_seed(0)
    layers = table_1_layers(8, heads=2)
    before = torch.get_num_threads()
    for threads, clock in ((1, None), (None, None), (2, None), (1, "wall")):
        seconds = time_layers(layers, [3, 6], batch=2, d=8, repeats=1, threads=threads,
                              clock=clock)
        assert list(seconds) == list(layers)
        for name, values in seconds.items():
            assert len(values) == 2 and all(isinstance(t, float) and t > 0 for t in values), name
        assert torch.get_num_threads() == before
    for name, layer in layers.items():  # every layer ran forward and backward
        assert all(p.grad is not None for p in layer.parameters()), name


def test_time_layers_refuses_bad_arguments() -> None:
    layers = table_1_layers(4, heads=1)
    with pytest.raises(BookError, match="layers: expected a non-empty mapping"):
        time_layers({}, [3], batch=1, d=4)
    with pytest.raises(BookError, match="ns: expected at least one sequence length"):
        time_layers(layers, [], batch=1, d=4)
    with pytest.raises(BookError, match="ns: expected an integer >= 1, received 0"):
        time_layers(layers, [0], batch=1, d=4)
    with pytest.raises(BookError, match="threads: expected an integer >= 1, received 0"):
        time_layers(layers, [3], batch=1, d=4, threads=0)
    with pytest.raises(BookError, match="clock: expected one of"):
        time_layers(layers, [3], batch=1, d=4, clock="sundial")
    with pytest.raises(BookError, match="d: expected a multiple of heads=3"):
        table_1_layers(4, heads=3)


def test_count_operations_counts_kernels_not_views_nor_sizes() -> None:
    def ops(n: int) -> int:
        a = torch.randn(n, n, requires_grad=True)
        return count_operations(lambda: (a.t() @ a).relu().sum().backward())

    assert ops(3) == ops(50), "the count depends on the operations, not on their sizes"
    x = torch.randn(4, 4)
    assert count_operations(lambda: x.t().unsqueeze(0)[:, 1:]) == 0, "views launch no kernel"
    assert count_operations(lambda: x + 1) == 1
    with pytest.raises(BookError, match="fn: expected a function of no arguments"):
        count_operations(3)


def test_profile_operators_ranks_the_time_and_leaves_stderr_working(capfd) -> None:
    a = torch.randn(200, 200)
    rows = profile_operators(lambda: (a @ a).relu(), count=3)
    assert rows[0]["op"] == "aten::mm" and rows[0]["calls_per_call"] == 1
    assert sum(row["share"] for row in rows) == pytest.approx(1.0)
    assert [r["self_ms_per_call"] for r in rows] == sorted(
        (r["self_ms_per_call"] for r in rows), reverse=True)
    assert "profiler_start" not in capfd.readouterr().err, "the C++ lines are kept out"
    import os
    os.write(2, b"still here\n")
    assert capfd.readouterr().err == "still here\n", "file descriptor 2 restored"
    with pytest.raises(BookError, match="count: expected an integer >= 1, received 0"):
        profile_operators(lambda: a @ a, count=0)

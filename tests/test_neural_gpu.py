"""The CGRU and Neural GPU: the paper's equations in float64, the measured path, bad input."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from transformer_book.baselines.conv import layers_to_connect, receptive_field
from transformer_book.baselines.neural_gpu import CGRU, NeuralGPU, path_length_neural_gpu
from transformer_book.util.validation import BookError


def _cgru_from_scratch(cgru: CGRU, s: torch.Tensor) -> torch.Tensor:
    """Kaiser & Sutskever (2016), Section 2, written with F.conv2d on (B, C, W, H)."""
    grid = s.permute(0, 3, 1, 2)
    pad = (cgru.kernel_width // 2, cgru.kernel_height // 2)
    weight_u, weight_r = cgru.gates.weight.chunk(2, dim=0)
    bias_u, bias_r = cgru.gates.bias.chunk(2, dim=0)
    u = torch.sigmoid(F.conv2d(grid, weight_u, bias_u, padding=pad))
    r = torch.sigmoid(F.conv2d(grid, weight_r, bias_r, padding=pad))
    c = torch.tanh(F.conv2d(r * grid, cgru.candidate.weight, cgru.candidate.bias, padding=pad))
    return (u * grid + (1 - u) * c).permute(0, 2, 3, 1)


@pytest.mark.parametrize("kernel", [(3, 3), (1, 1), (5, 3), (3, 1)])
def test_cgru_is_the_papers_equation(kernel: tuple[int, int]) -> None:
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator)))
        cgru = CGRU(5, *kernel).double()
        s = torch.randn(2, 7, 3, 5, generator=generator, dtype=torch.float64)
        assert torch.allclose(cgru(s), _cgru_from_scratch(cgru, s), atol=1e-12)


def test_update_gate_open_keeps_the_memory() -> None:
    cgru = CGRU(4).double()
    with torch.no_grad():
        cgru.gates.weight.zero_()
        cgru.gates.bias.fill_(50.0)  # u = σ(50) ≈ 1: s passes through unchanged
    s = torch.randn(1, 6, 2, 4, dtype=torch.float64)
    assert torch.allclose(cgru(s), s, atol=1e-15)


def test_neural_gpu_shapes_and_row_zero() -> None:
    model = NeuralGPU(6, num_steps=3, height=4, layers_per_step=2).double()
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    assert model(x).shape == (2, 9, 6)
    assert len(model.cgrus) == 2


@pytest.mark.parametrize("layers_per_step, kernel_width", [(1, 3), (2, 3), (1, 5)])
def test_measured_path_equals_the_closed_form(layers_per_step: int, kernel_width: int) -> None:
    for n in (2, 5, 9, 17):
        def make(m: int) -> NeuralGPU:
            torch.manual_seed(m)
            return NeuralGPU(3, m, height=2, layers_per_step=layers_per_step,
                             kernel_width=kernel_width).double()

        expected = path_length_neural_gpu(n, kernel_width, layers_per_step)
        assert layers_to_connect(make, n, channels=3) == expected, n


def test_one_cgru_reaches_two_positions_each_way() -> None:
    torch.manual_seed(0)
    field = receptive_field(NeuralGPU(3, 1, height=1, kernel_height=1).double(), 11,
                            position=5, channels=3)
    assert field.nonzero().flatten().tolist() == [3, 4, 5, 6, 7]


def test_path_length_closed_form_values() -> None:
    assert [path_length_neural_gpu(n) for n in (1, 2, 3, 4, 8, 512)] == [0, 1, 1, 2, 4, 256]
    assert path_length_neural_gpu(512, layers_per_step=2) == 128


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(BookError, match="kernel_width"):
        CGRU(4, kernel_width=2)
    with pytest.raises(BookError, match="kernel_width"):
        path_length_neural_gpu(8, kernel_width=1)
    with pytest.raises(BookError, match="num_steps"):
        NeuralGPU(4, 0)
    with pytest.raises(BookError, match="x"):
        NeuralGPU(4, 2)(torch.randn(1, 5, 3))
    with pytest.raises(BookError, match="s"):
        CGRU(4)(torch.randn(1, 5, 4))

"""Tests of transformer_book.nn.positional (Section 3.5)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_book.nn.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    relative_offset_matrix,
    sinusoidal_encoding,
)

F64 = torch.float64


def test_sinusoidal_encoding_matches_the_paper_formula() -> None:
    pe = sinusoidal_encoding(20, 8, dtype=F64)
    assert pe.shape == (20, 8) and pe.dtype == F64
    for pos in (0, 1, 7, 19):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    assert sinusoidal_encoding(3, 4).dtype == torch.float32
    other_base = sinusoidal_encoding(5, 4, base=100.0, dtype=F64)
    assert other_base[3, 2].item() == pytest.approx(math.sin(3 / 100 ** (2 / 4)))


@settings(max_examples=40, deadline=None)
@given(
    half=st.integers(1, 16), pos=st.integers(0, 500), k=st.integers(-200, 200),
)
def test_relative_offset_is_a_linear_map(half: int, pos: int, k: int) -> None:
    d_model = 2 * half
    table = sinusoidal_encoding(max(pos, pos + k) + 1, d_model, dtype=F64)
    m = relative_offset_matrix(k, d_model)
    assert m.shape == (d_model, d_model)
    if pos + k >= 0:
        torch.testing.assert_close(m @ table[pos], table[pos + k], atol=1e-9, rtol=0)
        torch.testing.assert_close(table[pos] @ m.T, table[pos + k], atol=1e-9, rtol=0)
    # orthogonal, independent of pos, and M_{-k} undoes M_k
    torch.testing.assert_close(m @ m.T, torch.eye(d_model, dtype=F64))
    inverse = relative_offset_matrix(-k, d_model)
    torch.testing.assert_close(inverse @ m, torch.eye(d_model, dtype=F64))


def test_relative_offset_for_a_whole_table() -> None:
    table = sinusoidal_encoding(100, 16, dtype=F64)
    for k in (1, 5, 37):
        shifted = table[:-k] @ relative_offset_matrix(k, 16).T
        torch.testing.assert_close(shifted, table[k:], atol=1e-10, rtol=0)


def test_sinusoidal_module_adds_a_buffer() -> None:
    module = SinusoidalPositionalEncoding(8, max_len=50)
    assert list(module.parameters()) == []
    assert "pe" in dict(module.named_buffers())
    x = torch.randn(3, 10, 8)
    torch.testing.assert_close(module(x), x + sinusoidal_encoding(10, 8))
    torch.testing.assert_close(module(x, offset=4), x + sinusoidal_encoding(14, 8)[4:])
    torch.testing.assert_close(module.to(F64)(x.double()), x.double() + sinusoidal_encoding(10, 8))


def test_dropout_applies_in_training_only() -> None:
    module = SinusoidalPositionalEncoding(8, max_len=20, dropout=0.5)
    x = torch.randn(2, 10, 8)
    assert not torch.allclose(module.train()(x), x + sinusoidal_encoding(10, 8))
    torch.testing.assert_close(module.eval()(x), x + sinusoidal_encoding(10, 8))


def test_learned_positional_embedding() -> None:
    module = LearnedPositionalEmbedding(max_len=12, d_model=6)
    assert [p.shape for p in module.parameters()] == [(12, 6)]
    x = torch.zeros(2, 5, 6)
    out = module(x, offset=3)
    torch.testing.assert_close(out[0], module.embedding.weight[3:8])
    out.sum().backward()
    assert module.embedding.weight.grad[3:8].abs().sum() > 0
    assert module.embedding.weight.grad[:3].abs().sum() == 0


def test_positional_errors() -> None:
    with pytest.raises(
        ValueError,
        match=r"d_model: expected an even integer \(sin/cos pairs\), received 7",
    ):
        sinusoidal_encoding(10, 7)
    with pytest.raises(ValueError, match=r"d_model: expected an even integer"):
        SinusoidalPositionalEncoding(5)
    with pytest.raises(ValueError, match=r"d_model: expected an even integer"):
        relative_offset_matrix(1, 3)
    with pytest.raises(ValueError, match=r"length: expected an integer >= 1"):
        sinusoidal_encoding(0, 4)
    with pytest.raises(ValueError, match=r"base: expected a number > 1"):
        sinusoidal_encoding(3, 4, base=1.0)
    with pytest.raises(ValueError, match=r"k: expected a number"):
        relative_offset_matrix("1", 4)
    module = SinusoidalPositionalEncoding(8, max_len=16)
    with pytest.raises(
        ValueError,
        match=r"x: expected offset \+ length <= max_len=16, received length 20",
    ):
        module(torch.zeros(1, 20, 8))
    with pytest.raises(ValueError, match=r"max_len=16, received length 10 at offset 8"):
        module(torch.zeros(1, 10, 8), offset=8)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, L, d_model=8\)"):
        module(torch.zeros(1, 4, 6))
    with pytest.raises(ValueError, match=r"offset: expected an integer >= 0"):
        module(torch.zeros(1, 4, 8), offset=-1)
    learned = LearnedPositionalEmbedding(8, 4)
    with pytest.raises(
        ValueError,
        match=r"x: expected offset \+ length <= max_len=4, received length 5",
    ):
        learned(torch.zeros(1, 5, 8))

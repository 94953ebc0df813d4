"""The positional-encoding seam: one registry and one factory for the Transformer and the toy
models, the random-Fourier-feature kind added through it, and a kind registered by one line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.positional import (
    POSITIONAL_ENCODINGS,
    FourierPositionalEncoding,
    LearnedPositionalEmbedding,
    NoPositions,
    SinusoidalPositionalEncoding,
    positional_encoding,
    sinusoidal_encoding,
)
from transformer_book.nn.transformer import Transformer
from transformer_book.run.config import RunConfig
from transformer_book.toy.aligner import Aligner, AlignerConfig
from transformer_book.toy.positions import PositionProbe, ProbeConfig
from transformer_book.util.validation import BookError

F64 = torch.float64


class ScaledSinusoids(nn.Module):
    """A kind the package does not have: Section 3.5's table times a constant (the test's)."""

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("pe", 0.5 * sinusoidal_encoding(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.dropout(x + self.pe[offset : offset + x.shape[1]])


@pytest.mark.parametrize(("kind", "cls"), [("sinusoidal", SinusoidalPositionalEncoding),
                                           ("learned", LearnedPositionalEmbedding),
                                           ("fourier", FourierPositionalEncoding),
                                           ("none", NoPositions)])
def test_the_factory_builds_every_registered_kind(kind, cls) -> None:
    layer = positional_encoding(kind, 8, 10, dropout=0.25)
    assert type(layer) is cls
    assert layer.dropout.p == 0.25, "the factory passes dropout on"
    layer.eval()
    x = torch.randn(2, 10, 8)
    assert layer(x).shape == (2, 10, 8)
    assert layer(x[:, :3], offset=7).shape == (2, 3, 8)
    with pytest.raises(BookError, match="offset \\+ length <= max_len=10"):
        layer(x[:, :4], offset=7)


def test_the_transformer_and_the_toys_accept_exactly_the_registered_kinds() -> None:
    assert set(POSITIONAL_ENCODINGS) == {"sinusoidal", "learned", "fourier", "none", "rotary"}
    listed = r"\['fourier', 'learned', 'none', 'rotary', 'sinusoidal'\], received 'alibi'"
    for build, argument in [
        (lambda: TransformerConfig(vocab_size=16, positional="alibi"), "positional"),
        (lambda: AlignerConfig(positions="alibi"), "positions"),
        (lambda: ProbeConfig(positions="alibi"), "positions"),
        (lambda: positional_encoding("alibi", 8, 4), "kind"),
    ]:
        with pytest.raises(BookError, match=f"^{argument}: expected one of {listed}$"):
            build()
    with pytest.raises(BookError, match=r"\[model\] positional: expected one of \['fourier'"):
        RunConfig.from_dict({"model": {"preset": "tiny", "positional": "alibi"}})


def test_a_transformer_with_fourier_positions_orders_its_input() -> None:
    torch.manual_seed(0)
    config = TransformerConfig.preset("tiny", vocab_size=20, positional="fourier", max_len=16)
    model = Transformer(config).eval()
    assert isinstance(model.src_pos, FourierPositionalEncoding)
    src, tgt = torch.tensor([[5, 6, 7, 8, 9]]), torch.tensor([[1, 4, 5]])
    swapped = torch.tensor([[6, 5, 7, 8, 9]])
    logits = model(src, tgt)
    assert logits.shape == (1, 3, 20)
    assert not torch.allclose(logits, model(swapped, tgt), atol=1e-4), \
        "with positions, swapping two source tokens changes the output"
    assert "src_pos.pe" not in model.state_dict(), "a fixed table is not saved"


def test_fourier_features_are_rotations_of_each_other_and_a_kernel_of_the_offset() -> None:
    d_model, length = 512, 64
    layer = FourierPositionalEncoding(d_model, length)
    pe, omega = layer.pe.to(F64), layer.frequencies.to(F64)
    assert pe.shape == (length, d_model) and omega.shape == (d_model // 2,)
    # sin² + cos² = 1 in every pair: each row has norm² d_model / 2, like the sinusoids
    torch.testing.assert_close(pe.square().sum(-1), torch.full((length,), d_model / 2.0,
                                                                dtype=F64), atol=1e-4, rtol=0)
    # PE(pos + k) is the rotation by ω_i k of every (sin, cos) pair of PE(pos)
    k = 5
    c, s = (omega * k).cos(), (omega * k).sin()
    sin, cos = pe[:-k, 0::2], pe[:-k, 1::2]
    torch.testing.assert_close(pe[k:, 0::2], sin * c + cos * s, atol=1e-5, rtol=0)
    torch.testing.assert_close(pe[k:, 1::2], cos * c - sin * s, atol=1e-5, rtol=0)
    # the dot product depends on the offset alone: ≈ (d/2) exp(-offset² / 2) for scale 1
    gram = pe @ pe.T  # (L, L)
    for offset in (1, 2):
        diagonal = gram.diagonal(offset)
        assert diagonal.std() < 1e-3 * d_model, "one value along each diagonal"
        expected = d_model / 2 * torch.exp(torch.tensor(-offset**2 / 2.0))
        assert abs(diagonal.mean() - expected) < 0.15 * d_model / 2, (offset, diagonal.mean())


def test_fourier_tables_are_seeded_and_leave_the_global_random_state_alone() -> None:
    torch.manual_seed(3)
    state = torch.get_rng_state()
    first = FourierPositionalEncoding(16, 8)
    assert torch.equal(torch.get_rng_state(), state), "no draw from the global generator"
    assert torch.equal(first.pe, FourierPositionalEncoding(16, 8).pe)
    assert not torch.equal(first.pe, FourierPositionalEncoding(16, 8, seed=1).pe)
    wider = FourierPositionalEncoding(16, 8, scale=4.0)
    torch.testing.assert_close(wider.frequencies, 4.0 * first.frequencies)
    with pytest.raises(BookError, match="d_model: expected an even integer"):
        FourierPositionalEncoding(7, 8)
    with pytest.raises(BookError, match="scale: expected a finite number > 0"):
        FourierPositionalEncoding(8, 8, scale=0.0)


def test_a_kind_registered_by_one_line_builds_a_transformer_and_a_toy_aligner(
        request) -> None:
    POSITIONAL_ENCODINGS.register("scaled-sinusoidal", ScaledSinusoids)  # the one line
    request.addfinalizer(lambda: POSITIONAL_ENCODINGS.unregister("scaled-sinusoidal"))

    config = TransformerConfig.preset("tiny", vocab_size=20, positional="scaled-sinusoidal",
                                      max_len=16, dropout=0.0)
    model = Transformer(config).eval()
    assert isinstance(model.src_pos, ScaledSinusoids)
    assert isinstance(model.tgt_pos, ScaledSinusoids)
    assert model(torch.tensor([[5, 6, 7]]), torch.tensor([[1, 4]])).shape == (1, 2, 20)

    aligner = Aligner(AlignerConfig(d_model=16, d_ff=32, num_heads=2, max_len=12,
                                    positions="scaled-sinusoidal")).eval()
    assert isinstance(aligner.positions, ScaledSinusoids)
    src = torch.tensor([[5, 6, 7, 8]])
    assert aligner(src, torch.tensor([[1, 8, 7]])).shape == (1, 3, 16)
    x = torch.zeros(1, 4, 16)
    torch.testing.assert_close(aligner.positions(x), 0.5 * sinusoidal_encoding(4, 16)[None])

    probe = PositionProbe(ProbeConfig(positions="scaled-sinusoidal"))
    assert probe.positions.pe.shape[0] >= 4096, "a fixed table covers long test lengths"


def test_a_learned_probe_table_has_max_len_rows_and_fixed_ones_are_long() -> None:
    assert PositionProbe(ProbeConfig(positions="learned", max_len=20)).positions.max_len == 20
    for kind in ("sinusoidal", "fourier", "none"):
        assert PositionProbe(ProbeConfig(positions=kind, max_len=20)).positions.max_len == 4096

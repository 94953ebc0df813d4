"""Causal and dilated convolutions, ConvS2S blocks, receptive fields and path lengths."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F

from transformer_book.baselines.conv import (
    CausalConv1d,
    ConvS2SBlock,
    ConvS2SStack,
    DilatedConvStack,
    SequenceConv1d,
    glu,
    layers_to_connect,
    path_length_convs2s,
    path_length_dilated,
    receptive_field,
)


def naive_causal_conv(conv: CausalConv1d, x: torch.Tensor) -> torch.Tensor:
    """y[b, t, o] = bias[o] + Σ_j Σ_c w[o, c, j] · x[b, t - (k-1-j)·d, c], zero before 0."""
    weight, bias = conv.conv.weight, conv.conv.bias  # (C_out, C_in, k), (C_out,)
    k, d = conv.kernel_size, conv.dilation
    batch, length, _ = x.shape
    y = torch.zeros(batch, length, conv.channels_out, dtype=x.dtype)
    for t in range(length):
        y[:, t] = bias
        for j in range(k):
            source = t - (k - 1 - j) * d
            if source >= 0:
                y[:, t] += x[:, source] @ weight[:, :, j].T
    return y


@settings(max_examples=12, deadline=None)
@given(
    k=st.integers(1, 4),
    dilation=st.integers(1, 4),
    length=st.integers(1, 12),
    c_in=st.integers(1, 3),
    c_out=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_causal_conv_equals_naive_loop_float64(k: int, dilation: int, length: int, c_in: int,
                                               c_out: int, seed: int) -> None:
    torch.manual_seed(seed)
    conv = CausalConv1d(c_in, c_out, k, dilation).double()
    x = torch.randn(2, length, c_in, dtype=torch.float64)
    y = conv(x)
    assert y.shape == (2, length, c_out), "(B, L, C_in) -> (B, L, C_out), length kept"
    torch.testing.assert_close(y, naive_causal_conv(conv, x), rtol=1e-12, atol=1e-12)


def test_causal_conv_loads_nn_conv1d_weights() -> None:
    theirs = nn.Conv1d(3, 4, 3, dilation=2).double()
    ours = CausalConv1d(3, 4, 3, dilation=2).double()
    ours.conv.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 7, 3, dtype=torch.float64)
    ref = theirs(F.pad(x.transpose(1, 2), (4, 0))).transpose(1, 2)
    torch.testing.assert_close(ours(x), ref, rtol=1e-12, atol=1e-12)


def centred_reference(conv: SequenceConv1d, x: torch.Tensor) -> torch.Tensor:
    return conv.conv(F.pad(x.transpose(1, 2), conv.padding)).transpose(1, 2)


def test_non_causal_conv_is_centred_for_odd_kernels() -> None:
    conv = SequenceConv1d(2, 2, 3, causal=False).double()
    assert conv.padding == (1, 1), "k = 3: one zero on each side"
    field = receptive_field(conv, 7, position=3, channels=2)
    assert field.tolist() == [False, False, True, True, True, False, False], "sees t-1..t+1"
    nn.init.ones_(conv.conv.weight)
    x = torch.randn(1, 5, 2, dtype=torch.float64)
    torch.testing.assert_close(conv(x), centred_reference(conv, x))


CAUSAL_MODELS = {
    "causal conv": lambda: CausalConv1d(3, 3, 3, dilation=2),
    "dilated stack": lambda: DilatedConvStack(3, 3, (1, 2, 4)),
    "convs2s decoder": lambda: ConvS2SStack(3, 3, 3, causal=True),
}


@pytest.mark.parametrize("name", sorted(CAUSAL_MODELS))
def test_causality_via_gradients(name: str) -> None:
    torch.manual_seed(0)
    model = CAUSAL_MODELS[name]()
    for position in range(10):
        field = receptive_field(model, 10, position=position, channels=3)
        assert not field[position + 1:].any(), f"{name}: output {position} sees no future input"
        assert field[position], f"{name}: output {position} sees its own input"


@pytest.mark.parametrize(("kernel_size", "dilations"), [(2, (1, 2, 4)), (3, (1, 2, 4, 8)),
                                                        (3, (1, 3, 9)), (4, (2, 1))])
def test_dilated_stack_receptive_field_matches_closed_form(kernel_size: int,
                                                           dilations: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = DilatedConvStack(4, kernel_size, dilations)
    size = 1 + (kernel_size - 1) * sum(dilations)
    field = receptive_field(model, 40)
    assert field.sum().item() == size, "1 + (k-1)·Σd positions"
    assert field[-size:].all(), "and they are the last ones: a contiguous causal window"


def test_convs2s_receptive_field_grows_by_k_minus_1_per_layer() -> None:
    torch.manual_seed(0)
    for layers in (1, 2, 3):
        causal = receptive_field(ConvS2SStack(4, 3, layers, causal=True), 20)
        assert causal.sum().item() == 1 + 2 * layers, "causal: k - 1 = 2 more per layer"
        centred = receptive_field(ConvS2SStack(4, 5, layers), 30, position=15)
        assert centred.sum().item() == 1 + 4 * layers, "centred: (k-1)/2 on each side"


@pytest.mark.parametrize("n", [2, 5, 9, 10, 16])
def test_measured_path_lengths_equal_closed_forms(n: int) -> None:
    torch.manual_seed(0)
    for k in (3, 4):
        convs2s = layers_to_connect(lambda m, k=k: ConvS2SStack(2, k, m, causal=True), n, 2)
        assert convs2s == path_length_convs2s(n, k) == math.ceil((n - 1) / (k - 1)), "linear"
    for k in (2, 3):
        dilated = layers_to_connect(
            lambda m, k=k: DilatedConvStack(2, k, tuple(k**i for i in range(m))), n, 2)
        assert dilated == path_length_dilated(n, k) == math.ceil(math.log(n, k) - 1e-9), "log"
    bytenet = layers_to_connect(lambda m: DilatedConvStack(2, 3, tuple(2**i for i in range(m))),
                                n, 2)
    assert bytenet == path_length_dilated(n, 3, dilation_base=2), "ByteNet: k=3, doubling"
    if n <= 10:
        centred = layers_to_connect(lambda m: ConvS2SStack(2, 3, m), n, 2)
        assert centred == path_length_convs2s(n, 3, causal=False) == n - 1, "encoder: 1 a layer"


def test_path_length_closed_forms_on_known_values() -> None:
    assert [path_length_convs2s(n, 3) for n in (1, 2, 3, 4, 5, 100)] == [0, 1, 1, 2, 2, 50]
    assert [path_length_dilated(n, 2) for n in (1, 2, 3, 4, 5, 1024, 1025)] == [
        0, 1, 2, 2, 3, 10, 11]
    assert path_length_dilated(3**7, 3) == 7 and path_length_dilated(3**7 + 1, 3) == 8


class SelfAttention(nn.Module):
    """(B, L, C) -> (B, L, C) wrapper around nn.MultiheadAttention, optionally causal."""

    def __init__(self, channels: int, causal: bool = False) -> None:
        super().__init__()
        self.channels, self.causal = channels, causal
        self.attention = nn.MultiheadAttention(channels, 1, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        mask = (torch.triu(torch.ones(length, length, dtype=torch.bool), 1)
                if self.causal else None)  # True = may NOT attend, as nn.MultiheadAttention
        return self.attention(x, x, x, attn_mask=mask, need_weights=False)[0]


def test_self_attention_connects_everything_in_one_layer() -> None:
    torch.manual_seed(0)
    assert receptive_field(SelfAttention(4), 12, position=0).all(), "every position, 1 layer"
    causal = receptive_field(SelfAttention(4, causal=True), 12, position=5)
    assert causal.tolist() == [True] * 6 + [False] * 6, "causal mask: only the past"
    layers = layers_to_connect(lambda m: nn.Sequential(*(SelfAttention(4) for _ in range(m))),
                               50, 4)
    assert layers == 1, "maximum path length O(1)"
    # a plain function works too: a running sum is causal with an unbounded window
    assert receptive_field(lambda x: x.cumsum(dim=1), 6, position=2, channels=1).tolist() == [
        True, True, True, False, False, False]


def test_glu_halves_channels_and_equals_torch() -> None:
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    assert glu(x).shape == (2, 5, 4), "2C -> C"
    torch.testing.assert_close(glu(x), F.glu(x, dim=-1), rtol=0, atol=0)
    block = ConvS2SBlock(4, 3).double()
    assert block.conv.channels_out == 8, "the convolution produces 2C channels"
    expected = (x[..., :4] + glu(block.conv(x[..., :4]))) * math.sqrt(0.5)
    torch.testing.assert_close(block(x[..., :4]), expected, rtol=0, atol=0)
    assert block(x[..., :4]).shape == (2, 5, 4), "the block keeps (B, L, C)"


def test_receptive_field_restores_training_mode() -> None:
    model = ConvS2SStack(2, 3, 2)
    model.train()
    receptive_field(model, 5)
    assert model.training, "the probe leaves the model in the mode it found"


def test_bad_inputs_raise_value_errors() -> None:
    with pytest.raises(ValueError, match="kernel_size: expected an integer >= 1, received 0"):
        CausalConv1d(2, 2, 0)
    with pytest.raises(ValueError, match="dilation: expected an integer >= 1, received 0"):
        CausalConv1d(2, 2, 3, dilation=0)
    with pytest.raises(ValueError, match="dilations: expected an integer >= 1, received -1"):
        DilatedConvStack(2, 3, (1, -1))
    with pytest.raises(ValueError, match=r"dilations: expected at least one dilation"):
        DilatedConvStack(2, 3, ())
    with pytest.raises(ValueError, match="num_layers: expected an integer >= 1, received 0"):
        ConvS2SStack(2, 3, 0)
    conv = CausalConv1d(2, 3, 3)
    with pytest.raises(ValueError, match="x: expected a sequence of length >= 1"):
        conv(torch.randn(1, 0, 2))
    with pytest.raises(ValueError, match="x: expected a 3-D tensor, received shape"):
        conv(torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, L, 2\), received \(1, 5, 3\)"):
        conv(torch.randn(1, 5, 3))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, L, 4\)"):
        DilatedConvStack(4)(torch.randn(1, 5, 2))
    with pytest.raises(ValueError, match="x: expected an even last dimension"):
        glu(torch.randn(2, 3))
    with pytest.raises(ValueError, match="length: expected an integer >= 1, received 0"):
        receptive_field(conv, 0, channels=2)
    with pytest.raises(ValueError, match=r"position: expected an integer >= -4 and <= 3"):
        receptive_field(conv, 4, position=4, channels=2)
    with pytest.raises(ValueError, match="channels: expected an integer"):
        receptive_field(conv, 4)
    with pytest.raises(ValueError, match=r"model: expected a map to shape \(1, 4, C'\)"):
        receptive_field(lambda x: x.sum(dim=1), 4, channels=2)
    with pytest.raises(ValueError, match="make_model: expected a model that connects"):
        layers_to_connect(lambda m: ConvS2SStack(2, 3, m, causal=True), 10, 2, max_layers=2)
    with pytest.raises(ValueError, match="k: expected an integer >= 2, received 1"):
        path_length_convs2s(5, 1)
    with pytest.raises(ValueError, match="k: expected an integer >= 3, received 2"):
        path_length_convs2s(5, 2, causal=False)
    with pytest.raises(ValueError, match="n: expected an integer >= 1, received 0"):
        path_length_dilated(0, 3)

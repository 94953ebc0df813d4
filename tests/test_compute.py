"""FLOP counts checked against PyTorch's FlopCounterMode; hardware table, MFU, time estimates."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from transformer_book.analysis.compute import (
    HARDWARE,
    PAPER_GPU_TFLOPS,
    FlopBreakdown,
    autograd_depth,
    estimate_training_time,
    find_accelerator,
    mfu,
    paper_training_cost,
    peak_flops,
    saved_tensor_bytes,
    training_flops,
    training_flops_per_token,
    transformer_flops,
)
from transformer_book.baselines.rnn import RNN
from transformer_book.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import BookError

VOCAB = 97


def _model(**overrides) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig.preset("tiny", VOCAB, dropout=0.0, **overrides)
    return Transformer(config).eval()


def _ids(batch: int, length: int, pad_from: int | None = None) -> torch.Tensor:
    ids = torch.randint(4, VOCAB, (batch, length))
    if pad_from is not None:
        ids[0, pad_from:] = 0  # right-pad one sentence: the padding mask path
    return ids


def _counted(model: Transformer, src: torch.Tensor, tgt: torch.Tensor, backward: bool,
             math_attention: bool = True) -> int:
    """FLOPs FlopCounterMode sees; the MATH backend runs attention as visible matmuls."""
    counter = FlopCounterMode(display=False)
    backend = sdpa_kernel(SDPBackend.MATH) if math_attention else sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])
    with backend, counter:
        logits = model(src, tgt)
        if backward:
            logits.float().sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize(("batch", "src_len", "tgt_len", "overrides"), [
    (3, 7, 5, {}),
    (2, 11, 13, {"num_encoder_layers": 1, "num_decoder_layers": 3}),
    (1, 4, 9, {"tie_embeddings": False, "d_ff": 96, "num_heads": 2}),
])
def test_forward_count_equals_flop_counter_exactly(batch, src_len, tgt_len, overrides):
    model = _model(**overrides)
    src, tgt = _ids(batch, src_len), _ids(batch, tgt_len)
    expected = transformer_flops(model.config, src_len, tgt_len, batch).total
    assert _counted(model, src, tgt, backward=False) == expected


def test_padding_does_not_change_the_count():
    model = _model()
    src = _ids(2, 9, pad_from=4)  # a source padding mask is built and used
    assert _counted(model, src, _ids(2, 6), backward=False) == transformer_flops(
        model.config, 9, 6, 2).total


def test_training_step_is_three_forwards_exactly():
    model = _model().train()  # dropout is 0: train mode changes nothing in the arithmetic
    src, tgt = _ids(2, 8, pad_from=5), _ids(2, 6)
    forward = transformer_flops(model.config, 8, 6, 2).total
    assert _counted(model, src, tgt, backward=True) == 3 * forward
    assert training_flops(model.config, 8, 6, 2) == 3 * forward


def test_fused_cpu_attention_is_invisible_to_the_counter():
    """The residual the chapter explains: FlopCounterMode has no formula for the CPU's fused
    SDPA kernel, so with it only the dense (weight-matrix) part is counted."""
    model = _model()
    src, tgt = _ids(2, 7), _ids(2, 5)
    breakdown = transformer_flops(model.config, 7, 5, 2)
    assert _counted(model, src, tgt, backward=False, math_attention=False) == breakdown.dense
    assert breakdown.attention > 0


def test_components_follow_the_formulas():
    config = TransformerConfig.preset("base", 37000)
    one = transformer_flops(config, 10, 10)
    two = transformer_flops(config, 20, 20)
    assert two.encoder_attention == 4 * one.encoder_attention, "attention grows as n²"
    assert two.encoder_feed_forward == 2 * one.encoder_feed_forward, "dense terms grow as n"
    assert one.output_projection == 2 * 10 * 512 * 37000
    assert one.encoder_projections == 6 * 4 * 2 * 10 * 512 * 512
    assert one.decoder_cross_attention == 6 * 2 * 2 * 10 * 10 * 512
    assert transformer_flops(config, 10, 10, batch=4).total == 4 * one.total
    heads = transformer_flops(config.replace(num_heads=16), 10, 10)
    assert heads == one, "the head count does not change the cost (Section 3.2.2)"
    assert one.total == one.attention + one.dense
    assert one.scaled(3).total == 3 * one.total
    assert set(one.as_dict()) == {f for f in FlopBreakdown.__dataclass_fields__}


def test_per_token_count_is_about_six_weights_per_pair():
    config = TransformerConfig.preset("base", 37000)
    per_token = training_flops_per_token(config, 8, 8)
    assert per_token == training_flops(config, 8, 8) / 16
    encoder = 6 * (4 * 512**2 + 2 * 512 * 2048)
    decoder = 6 * (8 * 512**2 + 2 * 512 * 2048)
    weights = encoder + decoder + 512 * 37000  # every matrix once, the generator included
    assert 6 * weights < 2 * per_token < 1.02 * 6 * weights, "short sentences: ~6P per pair"


@pytest.mark.parametrize(("call", "match"), [
    (lambda c: transformer_flops(c, 0, 5), "src_len: expected an integer >= 1"),
    (lambda c: transformer_flops(c, 5, 2.5), "tgt_len: expected an integer >= 1"),
    (lambda c: transformer_flops(c, 5, 5, batch=-1), "batch: expected an integer >= 1"),
    (lambda c: transformer_flops({"d_model": 8}, 5, 5), "config: expected a TransformerConfig"),
    (lambda c: training_flops_per_token(c, 5, 0), "tgt_len"),
    (lambda c: transformer_flops(c, 3, 3).scaled(0), "factor"),
])
def test_bad_counting_inputs(call, match):
    with pytest.raises(BookError, match=match):
        call(TransformerConfig.preset("tiny", VOCAB))


# ------------------------------------------------------------------------------ hardware


def test_datasheet_figures():
    assert HARDWARE["P100-PCIe"].peak_tflops["fp32"] == 9.3
    assert HARDWARE["P100-SXM2"].peak_tflops["fp32"] == 10.6
    assert (HARDWARE["P100-PCIe"].peak_tflops["fp16"], HARDWARE["P100-SXM2"].peak_tflops["fp16"]) \
        == (18.7, 21.2)
    assert HARDWARE["P100-PCIe"].memory_gb == 16 and HARDWARE["P100-PCIe"].bandwidth_gb_s == 732
    assert HARDWARE["T4"].peak_tflops == {"fp32": 8.1, "fp16": 65.0}
    assert HARDWARE["T4"].memory_gb == 16
    assert HARDWARE["A100"].peak_tflops["bf16"] == 312.0
    assert HARDWARE["H100"].peak_tflops["bf16"] == HARDWARE["H200"].peak_tflops["bf16"] == 989.5
    assert HARDWARE["H200"].memory_gb == 141
    assert PAPER_GPU_TFLOPS == {"K80": 2.8, "K40": 3.7, "M40": 6.0, "P100": 9.5}
    for accelerator in HARDWARE.values():
        assert "datasheet" in accelerator.source and "https://" in accelerator.source


@pytest.mark.parametrize(("name", "key"), [
    ("H200", "H200"), ("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", "H100-PCIe"), ("Tesla T4", "T4"), ("NVIDIA A100-SXM4-80GB", "A100"),
    ("Tesla P100-PCIE-16GB", "P100-PCIe"), ("tesla p100-sxm2-16gb", "P100-SXM2"),
])
def test_device_names_as_torch_reports_them(name, key):
    assert find_accelerator(name).name == key


def test_peak_flops_in_flops_per_second():
    assert peak_flops("H200", "bf16") == 989.5e12
    assert peak_flops("Tesla T4", "fp16") == 65e12


@pytest.mark.parametrize(("device", "precision", "match"), [
    ("V100", "fp32", r"device_name: expected one of \['A100', 'H100', 'H100-PCIe', 'H200', "
                     r"'P100-PCIe', 'P100-SXM2', 'T4'\]"),
    ("", "fp32", "device_name: expected a non-empty string"),
    ("T4", "bf16", r"precision: expected one of \['fp16', 'fp32'\] for T4, received 'bf16'"),
    ("P100-PCIe", "bf16", "precision: expected one of"),
    ("H200", 16, "precision: expected a string"),
])
def test_unknown_devices_and_precisions(device, precision, match):
    with pytest.raises(BookError, match=match):
        peak_flops(device, precision)


def test_mfu():
    # 10,000 tokens/s at 1 GFLOP per token = 1e13 FLOP/s of 989.5e12 peak
    assert mfu(10_000, 1e9, "H200", "bf16") == pytest.approx(1e13 / 989.5e12)
    assert mfu(10_000, 1e9, "H200", "bf16", num_devices=2) == pytest.approx(1e13 / 1979e12)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"tokens_per_second": 0}, "tokens_per_second: expected a finite number > 0"),
    ({"tokens_per_second": -5.0}, "tokens_per_second: expected a finite number > 0"),
    ({"tokens_per_second": math.nan}, "tokens_per_second"),
    ({"flops_per_token": 0}, "flops_per_token: expected a finite number > 0"),
    ({"num_devices": 0}, "num_devices: expected an integer >= 1"),
    ({"device_name": "TPU"}, "device_name"),
])
def test_mfu_bad_inputs(kwargs, match):
    args = {"tokens_per_second": 1000.0, "flops_per_token": 1e9, "device_name": "T4",
            "precision": "fp16", **kwargs}
    with pytest.raises(BookError, match=match):
        mfu(**args)


def test_estimate_is_the_inverse_of_mfu():
    config = TransformerConfig.preset("base", 37000)
    tokens = 5e9
    seconds = estimate_training_time(config, tokens, "A100", "bf16", 0.4, num_devices=8)
    per_token = training_flops_per_token(config, 32, 32)
    assert mfu(tokens / seconds, per_token, "A100", "bf16", 8) == pytest.approx(0.4)
    longer = estimate_training_time(config, tokens, "A100", "bf16", 0.4, src_len=128,
                                    tgt_len=128)
    assert longer > 8 * seconds, "longer sentences: more attention FLOPs per token"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"tokens": 0}, "tokens: expected a finite number > 0"),
    ({"mfu": 0.0}, "mfu: expected a finite number > 0"),
    ({"mfu": 1.5}, "mfu: expected a finite number <= 1, received 1.5"),
    ({"num_devices": 0}, "num_devices"),
    ({"precision": "bf16"}, "precision"),
    ({"src_len": 0}, "src_len"),
])
def test_estimate_bad_inputs(kwargs, match):
    args = {"config": TransformerConfig.preset("tiny", VOCAB), "tokens": 1e6,
            "device_name": "T4", "precision": "fp16", "mfu": 0.3, **kwargs}
    with pytest.raises(BookError, match=match):
        estimate_training_time(**args)


def test_paper_table_2_costs():
    base = paper_training_cost(12, 8, PAPER_GPU_TFLOPS["P100"])
    big = paper_training_cost(3.5 * 24, 8, PAPER_GPU_TFLOPS["P100"])
    assert f"{base:.1e}" == "3.3e+18" and f"{big:.1e}" == "2.3e+19", "Table 2's two figures"
    with pytest.raises(BookError, match="num_gpus: expected an integer >= 1"):
        paper_training_cost(12, 0, 9.5)
    with pytest.raises(BookError, match="hours: expected a finite number > 0"):
        paper_training_cost(-1, 8, 9.5)


# ------------------------------------------------------------------------------ measuring


def test_saved_bytes_of_explicit_attention_include_the_weights():
    """Explicit attention keeps the (B, h, L, L) weights for backward; the count sees them."""

    b, h, n, d = 2, 3, 16, 8
    q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))
    explicit = saved_tensor_bytes(lambda: scaled_dot_product_attention(q, k, v)[0])
    weights = b * h * n * n * 4  # float32
    assert explicit >= weights + 3 * b * h * n * d * 4, "weights plus q, k, v"
    q2, k2, v2 = (torch.randn(b, h, 2 * n, d, requires_grad=True) for _ in range(3))
    longer = saved_tensor_bytes(lambda: scaled_dot_product_attention(q2, k2, v2)[0])
    assert longer == explicit + 3 * weights + 3 * b * h * n * d * 4, \
        "doubling n: 4 x the weights, 2 x q, k, v"


def test_saved_bytes_exclude_parameters_and_count_storages_once():
    linear = torch.nn.Linear(16, 16, bias=False)
    x = torch.randn(4, 16, requires_grad=True)
    assert saved_tensor_bytes(lambda: linear(x), linear.parameters()) == x.numel() * 4
    assert saved_tensor_bytes(lambda: linear(x)) == (x.numel() + 16 * 16) * 4
    y = torch.randn(8, requires_grad=True)
    assert saved_tensor_bytes(lambda: y * y) == 8 * 4, "one storage saved twice counts once"
    with pytest.raises(BookError, match="fn: expected a function returning a tensor that "
                                         "requires grad"):
        saved_tensor_bytes(lambda: torch.ones(3))


def test_autograd_depth_is_constant_for_attention_and_linear_in_n_for_a_recurrence():
    torch.manual_seed(0)
    attention, rnn = MultiHeadAttention(8, 2), RNN(8, 8)
    depths = {}
    for n in (4, 8, 16):
        x = torch.randn(1, n, 8, requires_grad=True)
        depths[n] = (autograd_depth(attention(x, x, x)[0]), autograd_depth(rnn(x)[0]))
    assert depths[4][0] == depths[8][0] == depths[16][0], "attention: O(1) sequential steps"
    eight_more, four_more = depths[16][1] - depths[8][1], depths[8][1] - depths[4][1]
    assert eight_more == 2 * four_more > 0, \
        "a recurrence: the same number of operations per extra position, O(n)"
    a = torch.randn(3, requires_grad=True)
    assert autograd_depth((a * 2).sum()) == 2, "mul then sum"
    with pytest.raises(BookError, match="output: expected a tensor produced by operations"):
        autograd_depth(a)

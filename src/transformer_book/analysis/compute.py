"""What training costs: FLOP counts, accelerator peaks, model FLOPs utilisation, time, and
two exact measurements of a layer (activation memory, sequential depth).

Vaswani et al. (2017), Table 2 gives a "training cost (FLOPs)" for each model, footnote 5:
"We estimate the number of floating point operations used to train a model by multiplying
the training time, the number of GPUs used, and an estimate of the sustained
single-precision floating-point capacity of each GPU." Section 5.2: "We trained our models
on one machine with 8 NVIDIA P100 GPUs. [...] We trained the base models for a total of
100,000 steps or 12 hours." This module counts the same cost from the model's shapes instead
of from the clock, so the two can be compared (chapter 12).

Conventions of every count here:

- FLOPs = 2 x multiply-adds (a multiply-add is two floating-point operations, as in hardware
  peak figures and :mod:`transformer_book.analysis.complexity`).
- Only matrix products are counted: the linear layers (attention projections, feed-forward
  network, output projection to the vocabulary) and the two attention products ``QKᵀ`` and
  ``weights·V``. LayerNorm, softmax, ReLU, dropout, bias additions, residual sums,
  embeddings and positional encodings are left out: they are O(n·d) element-wise work,
  under 1 % of the total for every model of the book, and ``FlopCounterMode`` does not count
  them either (``tests/test_compute.py`` checks the count against it, exactly).
- Attention is counted dense: the causal mask does not halve ``QKᵀ`` (the kernels compute
  the full square and mask it), and padding counts as tokens.
- Training = forward + backward, the backward costing **twice** the forward (one product for
  the gradient of the activations, one for the gradient of the weights), so a training step
  is ``3 x`` the forward FLOPs. For a model with P weights that is the familiar ``6·P`` FLOPs
  per token, plus the attention terms.

Table 1 of the paper is measured with :func:`saved_tensor_bytes` (memory kept for the
backward pass) and :func:`autograd_depth` (the longest chain of operations that must run one
after another: the "sequential operations" column).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

import torch

from transformer_book.nn.config import TransformerConfig
from transformer_book.util.validation import (
    bad_input,
    require,
    require_number,
    require_positive_int,
    require_positive_number,
)

__all__ = [
    "BACKWARD_FACTOR",
    "HARDWARE",
    "PAPER_GPU_TFLOPS",
    "Accelerator",
    "FlopBreakdown",
    "autograd_depth",
    "estimate_training_time",
    "find_accelerator",
    "mfu",
    "paper_training_cost",
    "peak_flops",
    "saved_tensor_bytes",
    "training_flops",
    "training_flops_per_token",
    "transformer_flops",
]

BACKWARD_FACTOR = 2  # backward = 2 x forward (activation gradients + weight gradients)


# ------------------------------------------------------------------------------ counting


@dataclass(frozen=True)
class FlopBreakdown:
    """FLOPs of one pass of the encoder-decoder, by component (all layers of a stack summed).

    ``*_projections``: the attention's linear maps (W^Q, W^K, W^V, W^O); ``*_attention``:
    the two products ``QKᵀ`` and ``weights·V`` (Section 3.2.1), the only terms that grow
    with the square of the length; ``*_feed_forward``: Section 3.3's two linear maps;
    ``output_projection``: the pre-softmax linear transformation to the vocabulary.
    """

    encoder_projections: int
    encoder_attention: int
    encoder_feed_forward: int
    decoder_self_projections: int
    decoder_self_attention: int
    decoder_cross_projections: int
    decoder_cross_attention: int
    decoder_feed_forward: int
    output_projection: int

    @property
    def total(self) -> int:
        """All counted FLOPs."""
        return sum(self.as_dict().values())

    @property
    def attention(self) -> int:
        """The ``QKᵀ`` and ``weights·V`` products only: the O(n²·d) part of Table 1."""
        return self.encoder_attention + self.decoder_self_attention + self.decoder_cross_attention

    @property
    def dense(self) -> int:
        """Everything else: products with weight matrices, O(n·d²) (2 x weights x tokens)."""
        return self.total - self.attention

    def as_dict(self) -> dict[str, int]:
        """``{component: FLOPs}`` in the order of the fields."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def scaled(self, factor: int) -> FlopBreakdown:
        """Every component multiplied by ``factor`` (e.g. 3 for a training step)."""
        require_positive_int(factor, "factor")
        return FlopBreakdown(**{k: v * factor for k, v in self.as_dict().items()})


def _check_config(config: TransformerConfig) -> None:
    require(isinstance(config, TransformerConfig), "config", "a TransformerConfig",
            type(config).__name__)


def transformer_flops(config: TransformerConfig, src_len: int, tgt_len: int,
                      batch: int = 1) -> FlopBreakdown:
    """Forward FLOPs of ``Transformer(config)`` on ``batch`` pairs of ``src_len`` source and
    ``tgt_len`` target positions (teacher forcing: logits for all ``tgt_len`` positions).

    With S = src_len, T = tgt_len, d = d_model, N_e / N_d layers, V = vocab_size, per pair:

    ==========================  =====================================================
    encoder projections         N_e · 4 · (2·S·d²)          (W^Q, W^K, W^V, W^O)
    encoder attention           N_e · 2 · (2·S²·d)          (QKᵀ and weights·V)
    encoder feed-forward        N_e · 2 · (2·S·d·d_ff)
    decoder self projections    N_d · 4 · (2·T·d²)
    decoder self attention      N_d · 2 · (2·T²·d)          (dense, despite the mask)
    decoder cross projections   N_d · (2·(2·T·d²) + 2·(2·S·d²))  (Q, O on T; K, V on S)
    decoder cross attention     N_d · 2 · (2·T·S·d)
    decoder feed-forward        N_d · 2 · (2·T·d·d_ff)
    output projection           2·T·d·V
    ==========================  =====================================================

    The head count does not appear: h heads of width d/h cost what one head of width d
    costs (Section 3.2.2: "the total computational cost is similar to that of single-head
    attention with full dimensionality"). See the module docstring for what is not counted.
    """
    _check_config(config)
    s = require_positive_int(src_len, "src_len")
    t = require_positive_int(tgt_len, "tgt_len")
    b = require_positive_int(batch, "batch")
    d, ff, v = config.d_model, config.d_ff, config.vocab_size
    n_enc, n_dec = config.num_encoder_layers, config.num_decoder_layers

    def linear(tokens: int, d_in: int, d_out: int) -> int:
        return 2 * b * tokens * d_in * d_out  # (B·L, d_in) @ (d_in, d_out)

    def attend(queries: int, keys: int) -> int:
        return 2 * (2 * b * queries * keys * d)  # QKᵀ and weights·V over all heads

    return FlopBreakdown(
        encoder_projections=n_enc * 4 * linear(s, d, d),
        encoder_attention=n_enc * attend(s, s),
        encoder_feed_forward=n_enc * (linear(s, d, ff) + linear(s, ff, d)),
        decoder_self_projections=n_dec * 4 * linear(t, d, d),
        decoder_self_attention=n_dec * attend(t, t),
        decoder_cross_projections=n_dec * (2 * linear(t, d, d) + 2 * linear(s, d, d)),
        decoder_cross_attention=n_dec * attend(t, s),
        decoder_feed_forward=n_dec * (linear(t, d, ff) + linear(t, ff, d)),
        output_projection=linear(t, d, v),
    )


def training_flops(config: TransformerConfig, src_len: int, tgt_len: int,
                   batch: int = 1) -> int:
    """FLOPs of one training step (forward + backward) on ``batch`` pairs:
    ``(1 + BACKWARD_FACTOR) x`` :func:`transformer_flops` ``.total`` = 3 x forward.

    The optimizer's update (a few element-wise operations per weight) is not counted.
    """
    return (1 + BACKWARD_FACTOR) * transformer_flops(config, src_len, tgt_len, batch).total


def training_flops_per_token(config: TransformerConfig, src_len: int, tgt_len: int) -> float:
    """Training FLOPs per token, counting source **and** target tokens as the training loop's
    tokens/s does: ``training_flops(config, S, T) / (S + T)``.

    Each weight matrix is used once per token of its side, so a source-target pair of
    tokens costs about ``6·P`` training FLOPs (P: the weights of every matrix, the output
    projection included, embeddings excluded) and a token about ``3·P``; the attention
    terms add ``O(n·d)`` per token, small while n is much smaller than d_model.
    """
    s = require_positive_int(src_len, "src_len")
    t = require_positive_int(tgt_len, "tgt_len")
    return training_flops(config, s, t) / (s + t)


# ------------------------------------------------------------------------------ hardware


@dataclass(frozen=True)
class Accelerator:
    """One accelerator's datasheet figures.

    ``peak_tflops`` maps a precision ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8") to the
    vendor's **dense** peak in TFLOP/s (tensor cores where the chip has them; figures quoted
    "with sparsity" are halved). ``memory_gb`` is the device memory, ``bandwidth_gb_s`` its
    bandwidth, ``source`` the datasheet the numbers come from.
    """

    name: str
    peak_tflops: dict[str, float]
    memory_gb: float
    bandwidth_gb_s: float
    source: str


_P100 = "NVIDIA Tesla P100 datasheet (2016), https://www.nvidia.com/en-us/data-center/tesla-p100/"
HARDWARE: dict[str, Accelerator] = {
    accelerator.name: accelerator for accelerator in (
        Accelerator("P100-PCIe", {"fp64": 4.7, "fp32": 9.3, "fp16": 18.7}, 16, 732,
                    _P100 + " (PCIe card, 16 GB HBM2)"),
        Accelerator("P100-SXM2", {"fp64": 5.3, "fp32": 10.6, "fp16": 21.2}, 16, 732,
                    _P100 + " (NVLink / SXM2 module, 16 GB HBM2)"),
        Accelerator("T4", {"fp32": 8.1, "fp16": 65.0}, 16, 320,
                    "NVIDIA T4 Tensor Core GPU datasheet (2018), "
                    "https://www.nvidia.com/en-us/data-center/tesla-t4/ (fp16: mixed-precision "
                    "tensor cores; Turing has no bf16)"),
        Accelerator("A100", {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0,
                             "fp16": 312.0}, 80, 2039,
                    "NVIDIA A100 Tensor Core GPU datasheet (2021), "
                    "https://www.nvidia.com/en-us/data-center/a100/ (80 GB SXM; dense, "
                    "the datasheet's sparsity figures are twice these)"),
        Accelerator("H100-PCIe", {"fp64": 26.0, "fp32": 51.0, "tf32": 378.0, "bf16": 756.0,
                                  "fp16": 756.0, "fp8": 1513.0}, 80, 2000,
                    "NVIDIA H100 Tensor Core GPU datasheet (2023), "
                    "https://www.nvidia.com/en-us/data-center/h100/ (PCIe; dense = half the "
                    "quoted sparsity figures)"),
        Accelerator("H100", {"fp64": 34.0, "fp32": 67.0, "tf32": 494.5, "bf16": 989.5,
                             "fp16": 989.5, "fp8": 1979.0}, 80, 3350,
                    "NVIDIA H100 Tensor Core GPU datasheet (2023), "
                    "https://www.nvidia.com/en-us/data-center/h100/ (SXM5; dense = half the "
                    "quoted sparsity figures)"),
        Accelerator("H200", {"fp64": 34.0, "fp32": 67.0, "tf32": 494.5, "bf16": 989.5,
                             "fp16": 989.5, "fp8": 1979.0}, 141, 4800,
                    "NVIDIA H200 Tensor Core GPU datasheet (2024), "
                    "https://www.nvidia.com/en-us/data-center/h200/ (SXM; dense = half the "
                    "quoted sparsity figures)"),
    )
}

# Vaswani et al. (2017), Table 2, footnote 5: "We used values of 2.8, 3.7, 6.0 and 9.5 TFLOPS
# for K80, K40, M40 and P100, respectively" (sustained single precision, their estimate).
PAPER_GPU_TFLOPS: dict[str, float] = {"K80": 2.8, "K40": 3.7, "M40": 6.0, "P100": 9.5}


def _key(name: str) -> str:
    return "".join(ch for ch in name.upper() if ch.isalnum())


def find_accelerator(device_name: str) -> Accelerator:
    """The :data:`HARDWARE` entry for ``device_name``.

    Accepts the table's keys ("H200", "p100-pcie") and the names ``torch.cuda.get_device_name``
    reports ("NVIDIA H200", "Tesla T4", "NVIDIA A100-SXM4-80GB", "Tesla P100-PCIE-16GB"):
    case, spaces and hyphens are ignored and the longest key contained in the name wins.
    An unknown name raises a ``BookError`` listing the known ones.
    """
    require(isinstance(device_name, str) and device_name.strip() != "", "device_name",
            "a non-empty string", repr(device_name))
    wanted = _key(device_name)
    for name in sorted(HARDWARE, key=len, reverse=True):
        if _key(name) == wanted:
            return HARDWARE[name]
    for name in sorted(HARDWARE, key=len, reverse=True):
        if _key(name) in wanted:
            return HARDWARE[name]
    raise bad_input("device_name", f"one of {sorted(HARDWARE)} (or a name containing one)",
               repr(device_name))


def peak_flops(device_name: str, precision: str) -> float:
    """Dense peak of ``device_name`` in ``precision``, in FLOP/s (not TFLOP/s).

    ``peak_flops("H200", "bf16") == 989.5e12``. A precision the chip lacks (bf16 on a T4 or a
    P100) raises a ``BookError`` listing the ones it has.
    """
    accelerator = find_accelerator(device_name)
    require(isinstance(precision, str), "precision", "a string such as 'bf16'", repr(precision))
    require(precision in accelerator.peak_tflops, "precision",
            f"one of {sorted(accelerator.peak_tflops)} for {accelerator.name}", repr(precision))
    return accelerator.peak_tflops[precision] * 1e12


def mfu(tokens_per_second: float, flops_per_token: float, device_name: str, precision: str,
        num_devices: int = 1) -> float:
    """Model FLOPs utilisation: the fraction of the hardware's peak the model's FLOPs use.

    ``MFU = tokens_per_second x flops_per_token / (num_devices x peak_flops(device,
    precision))``. ``flops_per_token`` is the model's count (e.g.
    :func:`training_flops_per_token`), not what the hardware executed, so recomputation or
    padding never raises it. ``tokens_per_second`` is the throughput of all devices together.
    """
    tps = require_positive_number(tokens_per_second, "tokens_per_second")
    fpt = require_positive_number(flops_per_token, "flops_per_token")
    devices = require_positive_int(num_devices, "num_devices")
    return tps * fpt / (devices * peak_flops(device_name, precision))


def estimate_training_time(config: TransformerConfig, tokens: float, device_name: str,
                           precision: str, mfu: float, num_devices: int = 1, *,
                           src_len: int = 32, tgt_len: int = 32) -> float:
    """Seconds to train ``config`` on ``tokens`` source + target tokens at utilisation ``mfu``.

    ``tokens x training_flops_per_token(config, src_len, tgt_len) / (num_devices x
    peak_flops(device_name, precision) x mfu)``. ``src_len``/``tgt_len`` only size the
    attention terms (sentences of about 32 tokens by default; for n much smaller than
    d_model they change the result by a few per cent). ``mfu`` is in (0, 1].
    """
    _check_config(config)
    total = require_positive_number(tokens, "tokens")
    utilisation = require_positive_number(mfu, "mfu")
    require_number(utilisation, "mfu", maximum=1.0)  # with the line above: (0, 1]
    devices = require_positive_int(num_devices, "num_devices")
    per_token = training_flops_per_token(config, src_len, tgt_len)
    return total * per_token / (devices * peak_flops(device_name, precision) * utilisation)


def paper_training_cost(hours: float, num_gpus: int, tflops_per_gpu: float) -> float:
    """Table 2's estimate, footnote 5: training time x number of GPUs x sustained FLOP/s.

    ``paper_training_cost(12, 8, PAPER_GPU_TFLOPS["P100"])`` is the base model's
    ``12 x 3600 x 8 x 9.5e12 ≈ 3.3e18`` FLOPs.
    """
    h = require_positive_number(hours, "hours")
    gpus = require_positive_int(num_gpus, "num_gpus")
    rate = require_positive_number(tflops_per_gpu, "tflops_per_gpu")
    return h * 3600.0 * gpus * rate * 1e12


# ------------------------------------------------------------------------------ measuring


def saved_tensor_bytes(fn: Callable[[], torch.Tensor],
                       exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes autograd keeps for the backward pass while ``fn()`` runs: activation memory.

    Every tensor an operation saves for its backward is recorded (through
    ``torch.autograd.graph.saved_tensors_hooks``) and each underlying storage is counted
    once, at its full size. Tensors sharing storage with ``exclude`` (pass the parameters:
    weights stay in memory anyway) are left out. Device independent, so it measures on a CPU
    what a GPU would have to hold: e.g. the ``(B, h, L, L)`` weights explicit attention keeps
    and fused attention does not.
    """
    excluded = {t.untyped_storage().data_ptr() for t in exclude}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in excluded:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = fn()
    require(isinstance(out, torch.Tensor) and out.requires_grad, "fn",
            "a function returning a tensor that requires grad", type(out).__name__)
    return sum(storages.values())


def autograd_depth(output: torch.Tensor) -> int:
    """Length of the longest chain of operations in ``output``'s autograd graph.

    Operations on one chain must run one after another, whatever the hardware: this is
    Table 1's "minimum number of sequential operations", measured (in autograd nodes, so
    only its growth with n is meaningful: O(1) for attention and convolutions, O(n) for a
    recurrent layer). Leaves (inputs, weights) count 0.
    """
    require(isinstance(output, torch.Tensor) and output.grad_fn is not None, "output",
            "a tensor produced by operations on tensors that require grad",
            type(output).__name__ if not isinstance(output, torch.Tensor) else "a leaf tensor")
    depth: dict[Any, int] = {}
    stack: list[tuple[Any, bool]] = [(output.grad_fn, False)]
    while stack:  # iterative post-order DFS: recurrent graphs are thousands of nodes deep
        node, expanded = stack.pop()
        if node in depth:
            continue
        children = [child for child, _ in node.next_functions
                    if child is not None and type(child).__name__ != "AccumulateGrad"]
        if expanded:
            depth[node] = 1 + max((depth[child] for child in children), default=0)
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in children if child not in depth)
    return depth[output.grad_fn]

"""Cost per layer of self-attention, recurrent and convolutional layers (Table 1, counted).

Vaswani et al. (2017), Table 1 gives the complexity per layer: self-attention O(n²·d),
recurrent O(n·d²), convolutional O(k·n·d²). Section 4: "self-attention layers are faster
than recurrent layers when the sequence length n is smaller than the representation
dimensionality d". These functions count exactly, for a sequence of n positions with d
features in and out, ignoring biases, nonlinearities and softmax:

============================  ===================================  =============
layer                         multiply-adds                        Table 1
============================  ===================================  =============
self-attention (core)         n·n·d (Q Kᵀ) + n·n·d (weights · V)   O(n²·d)
  + projections (optional)    4·n·d² (W^Q, W^K, W^V, W^O)
recurrent (Elman)             n·(d² + d²) (W_ih x_t and W_hh h)    O(n·d²)
convolution, kernel k         n·k·d² (k·d inputs per output unit)  O(k·n·d²)
============================  ===================================  =============

Each function returns FLOPs, counting a multiply-add as 2 floating-point operations
(the usual convention of hardware peak figures).

FLOPs are not time. :func:`time_layers` times the layers of :func:`table_1_layers` (one of
each kind of Table 1, plus the fused library recurrent layers ``nn.RNN``, ``nn.LSTM`` and
``nn.GRU``, the fair opponents of a recurrence unrolled in Python), and
:func:`count_operations` counts the operations a step dispatches: on a GPU each is a kernel
launch, a fixed cost that no amount of parallel hardware removes (chapter 12).
:func:`profile_operators` says where a step's time goes, operator by operator.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from transformer_book.baselines.conv import SequenceConv1d
from transformer_book.baselines.rnn import RNN
from transformer_book.nn.attention import MultiHeadAttention
from transformer_book.util.timing import CLOCKS, best_time
from transformer_book.util.validation import require, require_one_of, require_positive_int

__all__ = [
    "conv_flops_per_layer",
    "count_operations",
    "profile_operators",
    "recurrent_flops_per_layer",
    "self_attention_flops_per_layer",
    "sequence_layer_output",
    "table_1_layers",
    "time_layers",
]


def self_attention_flops_per_layer(n: int, d: int, include_projections: bool = False) -> int:
    """FLOPs of one self-attention layer over n positions of width d: ``2·(2·n²·d)``.

    The scores Q Kᵀ are n·n dot products of length d (n²·d multiply-adds); the weighted
    sum of the values is another n²·d. ``include_projections`` adds the four d x d
    projections of multi-head attention (4·n·d² multiply-adds, Section 3.2.2), which
    Table 1's O(n²·d) leaves out.
    """
    n, d = require_positive_int(n, "n"), require_positive_int(d, "d")
    multiply_adds = 2 * n * n * d + (4 * n * d * d if include_projections else 0)
    return 2 * multiply_adds


def recurrent_flops_per_layer(n: int, d: int) -> int:
    """FLOPs of an Elman RNN layer over n steps, input and state width d: ``2·(2·n·d²)``.

    Each step computes W_ih x_t and W_hh h_{t-1}, two d x d matrix-vector products. A GRU
    does three times and an LSTM four times this; the O(n·d²) is the same.
    """
    n, d = require_positive_int(n, "n"), require_positive_int(d, "d")
    return 2 * (2 * n * d * d)


def conv_flops_per_layer(n: int, d: int, k: int) -> int:
    """FLOPs of a width-k convolution over n positions, d channels in and out: ``2·(n·k·d²)``.

    Each of the n·d output units sums k·d weighted inputs (zero padding keeps n outputs;
    the products with padding zeros are counted, as a dense kernel computes them).
    """
    n, d = require_positive_int(n, "n"), require_positive_int(d, "d")
    k = require_positive_int(k, "k")
    return 2 * (n * k * d * d)


# ------------------------------------------------------------------------------ measuring


def table_1_layers(d: int, heads: int = 4, kernel_size: int = 3) -> dict[str, nn.Module]:
    """One layer of width ``d`` of each kind, for timing against each other (chapter 12).

    The three kinds of Table 1 first, the book's own implementations: ``"self-attention"``
    (:class:`~transformer_book.nn.attention.MultiHeadAttention`, ``heads`` heads, PyTorch's
    fused attention kernel), ``"recurrent (loop)"`` (:class:`~transformer_book.baselines.rnn.RNN`,
    an Elman layer unrolled step by step in Python) and ``"convolution"``
    (:class:`~transformer_book.baselines.conv.SequenceConv1d`, width ``kernel_size``). Then
    the recurrent layers as real systems ran them, in the library's fused kernels (cuDNN on
    an NVIDIA GPU; oneDNN or ATen's C++ loop on a CPU): ``"nn.RNN"`` (the same Elman layer),
    ``"nn.LSTM"`` and ``"nn.GRU"``. Every layer maps ``(B, n, d)`` to ``(B, n, d)`` through
    :func:`sequence_layer_output`. Weights come from the global RNG (seed it first).
    """
    d = require_positive_int(d, "d")
    heads = require_positive_int(heads, "heads")
    require(d % heads == 0, "d", f"a multiple of heads={heads}", d)
    kernel_size = require_positive_int(kernel_size, "kernel_size")
    return {
        "self-attention": MultiHeadAttention(d, heads),
        "recurrent (loop)": RNN(d, d),
        "convolution": SequenceConv1d(d, d, kernel_size=kernel_size, causal=False),
        "nn.RNN": nn.RNN(d, d, batch_first=True),
        "nn.LSTM": nn.LSTM(d, d, batch_first=True),
        "nn.GRU": nn.GRU(d, d, batch_first=True),
    }


def sequence_layer_output(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The output sequence of ``layer`` on ``x (B, n, d)``: ``(B, n, d)``.

    Self-attention gets ``x`` as query, key and value; recurrent layers return
    ``(outputs, state)`` and give their outputs.
    """
    out = layer(x, x, x) if isinstance(layer, MultiHeadAttention) else layer(x)
    return out[0] if isinstance(out, tuple) else out


def time_layers(layers: Mapping[str, nn.Module], ns: Sequence[int], batch: int, d: int, *,
                repeats: int = 3, threads: int | None = 1, clock: str | None = None,
                seed: int = 0) -> dict[str, list[float]]:
    """Seconds of one forward + backward pass of each layer, for each length in ``ns``.

    Each layer runs :func:`sequence_layer_output` on a ``(batch, n, d)`` input that requires
    grad, then backward from the sum of its output, as in training. The time is the fastest
    of ``repeats`` calls after one warm-up (:func:`~transformer_book.util.timing.best_time`).
    ``clock=None`` picks it: on a CPU with ``threads=1``, this process's CPU time on one
    torch thread (steady on a busy machine); with more threads (``None``: leave torch's
    setting) or on a GPU, the wall clock (``"wall"`` or ``"cpu"`` force one). On a GPU each
    call waits for its kernels to finish. The thread setting is restored afterwards.
    Returns ``{name: [seconds for each n]}``.
    """
    require(isinstance(layers, Mapping) and len(layers) > 0
            and all(isinstance(m, nn.Module) for m in layers.values()), "layers",
            "a non-empty mapping of names to nn.Module", type(layers).__name__)
    require(len(ns) > 0, "ns", "at least one sequence length", list(ns))
    ns = [require_positive_int(n, "ns") for n in ns]
    batch, d = require_positive_int(batch, "batch"), require_positive_int(d, "d")
    repeats = require_positive_int(repeats, "repeats")
    if threads is not None:
        threads = require_positive_int(threads, "threads")
    if clock is not None:
        require_one_of(clock, "clock", CLOCKS)
    generator = torch.Generator().manual_seed(seed)
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    seconds: dict[str, list[float]] = {name: [] for name in layers}
    try:
        for n in ns:
            x_cpu = torch.randn(batch, n, d, generator=generator)
            for name, layer in layers.items():
                seconds[name].append(_time_pass(layer, x_cpu, repeats, threads == 1, clock))
    finally:
        torch.set_num_threads(previous)
    return seconds


def _time_pass(layer: nn.Module, x_cpu: torch.Tensor, repeats: int, one_thread: bool,
               clock: str | None) -> float:
    """Fastest forward + backward of ``layer`` on a copy of ``x_cpu`` on the layer's device."""
    weight = next(layer.parameters(), x_cpu)  # a layer without weights runs where x is
    x = x_cpu.to(device=weight.device, dtype=weight.dtype).requires_grad_()
    on_gpu = x.device.type == "cuda"

    def train_pass() -> None:
        sequence_layer_output(layer, x).sum().backward()
        if on_gpu:
            torch.cuda.synchronize(x.device)

    if clock is None:
        clock = "cpu" if one_thread and not on_gpu else "wall"
    return best_time(train_pass, repeats=repeats, clock=clock)


class _OperationCounter(TorchDispatchMode):
    """Counts the tensor operations dispatched inside it, views (no kernel) excluded."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.count += 1
        return func(*args, **(kwargs or {}))


def count_operations(fn: Callable[[], object]) -> int:
    """The number of tensor operations ``fn()`` dispatches, views excluded.

    Counted below autograd, so a ``backward()`` inside ``fn`` counts its operations too. On
    a GPU, in eager mode, each is (about) one kernel launch: the host spends microseconds
    issuing it and the GPU microseconds running it, however small it is. The count depends
    on the model's structure (layers, sub-layers, dropout) and on which kernels the device
    picks, not on the sizes of the tensors.
    """
    require(callable(fn), "fn", "a function of no arguments", type(fn).__name__)
    counter = _OperationCounter()
    with counter:
        fn()
    return counter.count


def profile_operators(fn: Callable[[], object], count: int = 2) -> list[dict[str, Any]]:
    """Where ``fn()``'s time goes: every operator it runs, by self CPU time, over ``count``
    calls after one untimed call (``torch.profiler``). Each row: ``op`` (e.g. ``aten::mm``),
    ``self_ms_per_call`` (its own time, without the operators it calls), ``share`` of all
    the operators' self time, ``calls_per_call``; the largest first."""
    require(callable(fn), "fn", "a function of no arguments", type(fn).__name__)
    count = require_positive_int(count, "count")
    fn()
    with _quiet_native_stderr(), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU]) as profiled:
        for _ in range(count):
            fn()
    events = [e for e in profiled.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    return [{"op": e.key, "self_ms_per_call": e.self_cpu_time_total / 1e3 / count,
             "share": e.self_cpu_time_total / total, "calls_per_call": e.count / count}
            for e in events]


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """File descriptor 2 sent to the null device: the profiler's C++ library prints a line
    as it starts and one as it stops, which no setting turns off."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w", encoding="utf-8") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)

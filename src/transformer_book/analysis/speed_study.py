"""The course's one speed study: self-attention against recurrent and convolutional layers.

Section 4 of Vaswani et al. (2017) compares layers by Table 1's counts and concludes that
"self-attention layers are faster than recurrent layers when the sequence length n is
smaller than the representation dimensionality d". This module measures that claim once,
under conventions stated here (:data:`CONVENTIONS`), so that every chapter quotes the same
numbers (chapter 05 runs and plots it; ``scripts/speed_study.py`` records the full grid):

- **per layer, as a model uses it**: ``"self-attention"`` is
  :class:`~transformer_book.nn.attention.MultiHeadAttention` *with* its four d x d
  projections W^Q, W^K, W^V, W^O (Table 1's O(n²·d) counts the attention products alone);
  ``"nn.RNN"`` (Elman) and ``"nn.LSTM"`` are PyTorch's fused recurrent layers with their
  input and recurrent weights; ``"convolution"`` is a width-3
  :class:`~transformer_book.baselines.conv.SequenceConv1d`. Each maps (B, n, d) -> (B, n, d).
- **forward + backward** (one training pass: backward from the sum of the output) and
  **forward only** (inference), timed separately;
- **float32**, **2 threads** on a CPU (``torch.set_num_threads(2)``; on a GPU the threads
  only issue kernels) timed by the **wall clock** (with 2 threads, CPU time would add both
  threads' seconds), on a GPU after ``torch.cuda.synchronize``. The record also holds **1
  thread**, timed by this process's CPU time: the one setting a busy machine can measure
  (chapter 05's live run), since a second thread must wait for whatever holds the other core;
- the layers of one grid point are timed **interleaved** (:func:`~transformer_book.util.
  timing.measure`), the fastest of ``repeats`` calls each, so a change of machine load hits
  them alike; what the course reports is the **ratio** of two such times.

Counted, the crossover is exact (:func:`counted_crossover`): the attention products alone
(4n²d FLOPs) equal an Elman layer (4nd²) at n = d, Table 1's line; with the projections
(4n²d + 8nd²) self-attention never does fewer FLOPs than an Elman layer or a width-3
convolution (6nd²) and fewer than an LSTM (16nd²) while n < 2d. Measured
(:func:`measured_crossover`), the crossover moves again, with the hardware, the batch and d.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_book.analysis.complexity import (
    conv_flops_per_layer,
    recurrent_flops_per_layer,
    self_attention_flops_per_layer,
    sequence_layer_output,
    table_1_layers,
)
from transformer_book.util.records import read_records
from transformer_book.util.timing import measure
from transformer_book.util.validation import require, require_one_of, require_positive_int

__all__ = [
    "CONVENTIONS",
    "LAYERS",
    "MODES",
    "OPPONENTS",
    "RECORD_KIND",
    "counted_crossover",
    "counted_flops",
    "crossover_rows",
    "describe_crossover",
    "measured_crossover",
    "quiet_studies",
    "run_speed_study",
    "study_curves",
    "study_layers",
]

LAYERS = ("self-attention", "nn.RNN", "nn.LSTM", "convolution")
OPPONENTS = LAYERS[1:]
MODES = ("forward+backward", "forward")
KERNEL_SIZE = 3
RECORD_KIND = "speed"  # records are results/speed-study-<device>-<UTC time>.json
CONVENTIONS = {
    "layers": {
        "self-attention": "MultiHeadAttention with its projections W^Q, W^K, W^V, W^O",
        "nn.RNN": "torch.nn.RNN (Elman, tanh), fused, input and recurrent weights",
        "nn.LSTM": "torch.nn.LSTM, fused, input and recurrent weights",
        "convolution": f"SequenceConv1d, kernel width {KERNEL_SIZE}, centred",
    },
    "dtype": "float32",
    "threads": 2,
    "also_recorded": "1 thread, timed by the process's CPU time (steady on a busy machine)",
    "clock": "2 threads: wall (perf_counter); 1 thread: CPU time; GPU calls synchronised",
    "timing": "layers of one point interleaved; fastest of `repeats` calls after a warm-up",
    "modes": {"forward+backward": "one training pass: backward from the sum of the output",
              "forward": "inference, under torch.no_grad"},
}
# FLOPs of each opponent as a multiple of an Elman layer's 4·n·d² (LSTM: four gates; a
# width-k convolution: n·k·d² multiply-adds against the Elman layer's 2·n·d²).
_ELMAN_MULTIPLE = {"nn.RNN": 1.0, "nn.LSTM": 4.0, "convolution": KERNEL_SIZE / 2}


def study_layers(d: int, heads: int = 4) -> dict[str, nn.Module]:
    """The four layers of the study at width ``d``, in the order of :data:`LAYERS`, taken
    from :func:`~transformer_book.analysis.complexity.table_1_layers` (weights from the
    global RNG: seed it first)."""
    every = table_1_layers(d, heads=heads, kernel_size=KERNEL_SIZE)
    return {name: every[name] for name in LAYERS}


def counted_flops(name: str, n: int, d: int) -> int:
    """Forward FLOPs of layer ``name`` (one of :data:`LAYERS`) on one sequence of ``n``
    positions of width ``d``, from :mod:`~transformer_book.analysis.complexity`."""
    require_one_of(name, "name", LAYERS)
    if name == "self-attention":
        return self_attention_flops_per_layer(n, d, include_projections=True)
    if name == "convolution":
        return conv_flops_per_layer(n, d, KERNEL_SIZE)
    return round(_ELMAN_MULTIPLE[name] * recurrent_flops_per_layer(n, d))


def counted_crossover(opponent: str, d: int, include_projections: bool = True) -> float | None:
    """The length n at which self-attention's FLOPs equal ``opponent``'s, or ``None`` if
    self-attention never does fewer.

    Solving ``4n²d + 8nd²·p = c·4nd²`` (``p = 1`` with the projections, ``c`` the opponent's
    multiple of an Elman layer: 1, 4 for an LSTM, 3/2 for the width-3 convolution) gives
    ``n = (c - 2p)·d``; self-attention is the cheaper layer below it.
    """
    require_one_of(opponent, "opponent", OPPONENTS)
    d = require_positive_int(d, "d")
    n = (_ELMAN_MULTIPLE[opponent] - (2.0 if include_projections else 0.0)) * d
    return n if n > 0 else None


def measured_crossover(ns: Sequence[int], attention: Sequence[float],
                       opponent: Sequence[float]) -> float:
    """The length at which self-attention's time first reaches ``opponent``'s.

    Between the last grid length where attention is faster and the next, the ratio of the
    times is interpolated linearly in log n and log ratio. ``0.0``: attention is slower
    already at ``ns[0]``; ``math.inf``: it is faster at every length measured.
    """
    require(len(ns) > 0 and len(ns) == len(attention) == len(opponent), "ns",
            "lengths with one time of each layer per length",
            f"{len(ns)} lengths, {len(attention)} and {len(opponent)} times")
    ratios = [a / o for a, o in zip(attention, opponent, strict=True)]
    if ratios[0] >= 1:
        return 0.0
    for i in range(1, len(ratios)):
        if ratios[i] >= 1:
            x0, x1 = math.log(ns[i - 1]), math.log(ns[i])
            y0, y1 = math.log(ratios[i - 1]), math.log(ratios[i])
            return math.exp(x0 + (x1 - x0) * (0 - y0) / (y1 - y0))
    return math.inf


def describe_crossover(n: float | None, ns: Sequence[int] | None = None) -> str:
    """A crossover for a table. Counted (``ns=None``): ``"never"`` for ``None``, else the
    length. Measured on the grid ``ns``: ``"< 16"`` / ``"> 4096"`` beyond it, else ``"≈ "``
    and the length to two significant digits."""
    if n is None:
        return "never"
    if ns is None:
        return str(int(n)) if float(n).is_integer() else f"{n:.3g}"
    if n == 0.0:
        return f"< {min(ns)}"
    if math.isinf(n):
        return f"> {max(ns)}"
    return f"≈ {float(f'{n:.2g}'):g}"


def _timed_calls(layers: Mapping[str, nn.Module], x: torch.Tensor,
                 mode: str) -> dict[str, Any]:
    """One call per layer: a training pass or a forward pass on ``x``, synchronised on a GPU."""
    on_gpu = x.device.type == "cuda"

    def call(layer: nn.Module):
        def run() -> None:
            if mode == "forward":
                with torch.no_grad():
                    sequence_layer_output(layer, x)
            else:
                sequence_layer_output(layer, x).sum().backward()
            if on_gpu:
                torch.cuda.synchronize(x.device)
        return run

    return {name: call(layer) for name, layer in layers.items()}


def _time_point(layers: Mapping[str, nn.Module], x: torch.Tensor, mode: str,
                repeats: int, threads: int) -> dict[str, float]:
    """The fastest of ``repeats`` interleaved calls of every layer on ``x``, in seconds: CPU
    seconds on one CPU thread, wall seconds otherwise."""
    x = x.detach().requires_grad_(mode != "forward")
    clock = "cpu" if threads == 1 and x.device.type == "cpu" else "wall"
    times = measure(_timed_calls(layers, x, mode), repeats=repeats, warmup=1, clock=clock)
    return {name: min(seconds) for name, seconds in times.items()}


def run_speed_study(batches: Sequence[int], ds: Sequence[int], ns: Sequence[int], *,
                    modes: Sequence[str] = MODES, threads: Sequence[int] = (2,),
                    repeats: int = 3, max_tokens: int | None = None,
                    device: str | torch.device = "cpu", heads: int = 4,
                    seed: int = 0) -> list[dict[str, Any]]:
    """Time the four layers of :func:`study_layers` over the grid ``batches x ds x ns``, for
    each mode and thread count.

    ``max_tokens`` skips the points with ``batch · n`` above it (the largest products would
    take minutes on a CPU). Returns one dict per point: ``threads``, ``batch``, ``d``, ``n``,
    ``mode`` and ``seconds`` (``{layer: seconds}``); the thread setting is restored.
    """
    batches = [require_positive_int(b, "batches") for b in batches]
    ds = [require_positive_int(d, "ds") for d in ds]
    ns = [require_positive_int(n, "ns") for n in ns]
    threads = [require_positive_int(t, "threads") for t in threads]
    require(min(len(batches), len(ds), len(ns), len(threads)) > 0, "batches, ds, ns, threads",
            "at least one value each", (batches, ds, ns, threads))
    modes = [require_one_of(mode, "modes", MODES) for mode in modes]
    repeats = require_positive_int(repeats, "repeats")
    device = torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    previous = torch.get_num_threads()
    points: list[dict[str, Any]] = []
    try:
        for d in ds:
            torch.manual_seed(seed)
            layers = {name: layer.to(device) for name, layer in study_layers(d, heads).items()}
            for batch in batches:
                for n in ns:
                    if max_tokens is not None and batch * n > max_tokens:
                        continue
                    x = torch.randn(batch, n, d, generator=generator).to(device)
                    for count in threads:
                        torch.set_num_threads(count)
                        points.extend(
                            {"threads": count, "batch": batch, "d": d, "n": n, "mode": mode,
                             "seconds": _time_point(layers, x, mode, repeats, count)}
                            for mode in modes)
    finally:
        torch.set_num_threads(previous)
    return points


def study_curves(points: Sequence[Mapping[str, Any]], mode: str = "forward+backward",
                 threads: int | None = 2) -> dict[tuple[int, int], dict[str, Any]]:
    """The points of one ``mode`` and thread count (``None``: any) as curves:
    ``{(batch, d): {"ns": [...], "seconds": {layer: [...]}}}``, lengths ascending."""
    require_one_of(mode, "mode", MODES)
    curves: dict[tuple[int, int], dict[str, Any]] = {}
    for point in sorted(points, key=lambda p: (p["batch"], p["d"], p["n"])):
        if point["mode"] != mode or threads not in (None, point["threads"]):
            continue
        curve = curves.setdefault((point["batch"], point["d"]),
                                  {"ns": [], "seconds": {name: [] for name in LAYERS}})
        curve["ns"].append(point["n"])
        for name in LAYERS:
            curve["seconds"][name].append(point["seconds"][name])
    return curves


def quiet_studies(results_dir: str | Path, device_type: str = "cpu") -> list[dict[str, Any]]:
    """The speed-study records in ``results_dir`` measured on ``device_type`` (``"cpu"``,
    ``"cuda"``), oldest first, leaving out a CPU record whose 1-minute load average reached
    its core count before or after the run: its 2-thread times include the wait for a core."""
    def quiet(record: Mapping[str, Any]) -> bool:
        load, cores = record.get("load_average"), record["hardware"].get("cpu_count")
        if device_type != "cpu" or not load or not cores:
            return True
        return max(load["before"][0], load["after"][0]) < cores

    return [r for r in read_records(results_dir, RECORD_KIND)
            if r.get("experiment") == "speed-study"
            and r.get("hardware", {}).get("device") == device_type and quiet(r)]


def _spread(crossovers: Sequence[float], ns: Sequence[int]) -> str:
    """One crossover per repeat of the study: the median, and the range when they differ
    (``"≈ 1200 [1100–1300]"``)."""
    middle = describe_crossover(statistics.median(crossovers), ns)
    low, high = (describe_crossover(x, ns) for x in (min(crossovers), max(crossovers)))
    if low == high:
        return middle
    return f"{middle} [{low.removeprefix('≈ ')} to {high.removeprefix('≈ ')}]"


def crossover_rows(studies: Sequence[Mapping[str, Any]], mode: str = "forward+backward",
                   threads: int = 2) -> list[dict[str, Any]]:
    """One row per (batch, d, opponent) of the first record in ``studies`` (repeats of the
    study on one kind of device): the counted crossover (``"counted"``) and the measured
    one with ``threads`` threads (``"measured"``), the median over the repeats with their
    range (:func:`describe_crossover`), and ``"repeats"``, how many records had the point."""
    require(len(studies) > 0, "studies", "at least one speed-study record", "none")
    curves = [study_curves(study["points"], mode, threads) for study in studies]
    rows = []
    for (batch, d), first in curves[0].items():
        for opponent in OPPONENTS:
            found = [c[batch, d] for c in curves if (batch, d) in c]
            crossovers = [measured_crossover(c["ns"], c["seconds"]["self-attention"],
                                             c["seconds"][opponent]) for c in found]
            rows.append({"batch": batch, "d": d, "opponent": opponent,
                         "counted": describe_crossover(counted_crossover(opponent, d)),
                         "measured": _spread(crossovers, first["ns"]),
                         "repeats": len(found)})
    return rows

"""Where and how a training step runs: mixed precision and several processes (DDP).

Mixed precision (not in the paper, which trained in fp32 on P100s) is chosen by measurement,
not by the hardware's name. ``[train] precision = "auto"`` times one matrix product the size
of the model's feed-forward layer, in fp32 and under 16-bit autocast, on the device the run
trains on (:func:`choose_precision`, a fraction of a second), and trains in 16 bits where that
product is at least 1.2 times faster: bf16 on a CPU (fast wherever the CPU multiplies bf16 in
hardware, AVX512-BF16 or AMX, and many times slower where it only emulates them), on Apple
GPUs and on CUDA GPUs with native bf16 (compute capability 8.0 and above: A100, H100, RTX 30xx
and later); fp16 with loss scaling (``GradScaler``) on older CUDA GPUs (a T4, a V100), where
bf16 is only emulated. Under CPU autocast the products run in bf16 while the loss, attention's
softmax (:func:`transformer_book.nn.attention.fast_attention`) and the optimizer's weights stay
in fp32. An explicit "bf16" is honoured wherever bf16 autocast runs, and refused only where it
does not (or, on CUDA below 8.0, where fp16 is the 16-bit format the GPU has). An optimizer
step the scaler skips (inf/NaN in the fp16 gradients) is reported by :func:`optimizer_step`,
so that the learning rate schedule does not advance on it.

Several processes: ``torchrun`` sets RANK, WORLD_SIZE and LOCAL_RANK; :func:`setup_distributed`
joins the process group (NCCL on CUDA, gloo on CPU).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from transformer_book.run.config import PRECISIONS
from transformer_book.util.env import device_name, get_device
from transformer_book.util.validation import bad_input, is_integer, require, require_one_of

__all__ = [
    "BF16_CAPABILITY",
    "DistInfo",
    "PrecisionChoice",
    "all_reduce",
    "autocast",
    "choose_precision",
    "make_scaler",
    "optimizer_step",
    "resolve_precision",
    "setup_distributed",
    "time_product",
]

# The first compute capability with bf16 tensor cores (Ampere); below it bf16 is emulated.
BF16_CAPABILITY = (8, 0)

# "auto" trains in 16 bits where one product is at least this many times faster than in fp32.
_MARGIN = 1.2
# The timed product is (rows, d_model) @ (d_model, d_ff). Its rows double from _ROWS[0] until
# fp32's time grows with them (the work, not the overheads or a busy machine's stalls, is
# timed) and a product of each precision takes _TARGET_SECONDS together, up to _ROWS[1] rows
# and within _BUDGET_SECONDS of timed products.
_ROWS = (8, 16_384)
_TARGET_SECONDS = 0.01
_BUDGET_SECONDS = 0.4
# fp32's and 16 bits' times over their times at half the rows: the work, not stalls, timed
_GROWTH = (1.5, 1.2)
_REPEATS = 5  # at the final size (fewer where the budget ends); their median is kept

# One product of fp32 inputs of ``shape`` (rows, inner, outer) under ``precision``'s autocast
# on a device: its seconds.
Timer = Callable[[str, torch.device, tuple[int, int, int]], float]


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a run trains in, and why: ``precision`` ("fp32", "bf16" or "fp16") for
    the ``asked`` ``[train] precision``; under "auto", the ``shape`` (rows, d_model, d_ff) of
    the timed product and the median ``seconds`` of one product per precision."""

    precision: str
    asked: str
    reason: str
    shape: tuple[int, int, int] | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def speedup(self) -> float | None:
        """fp32 seconds over 16-bit seconds of the timed product (``None`` if untimed)."""
        low = [name for name in self.seconds if name != "fp32"]
        return self.seconds["fp32"] / self.seconds[low[0]] if low else None

    def as_record(self) -> dict[str, Any]:
        """The choice as a run record's JSON: precision, asked, reason, and the timing."""
        timed = None if self.shape is None else {
            "shape": list(self.shape), "seconds": dict(self.seconds), "speedup": self.speedup,
            "margin": _MARGIN}
        return {"precision": self.precision, "asked": self.asked, "reason": self.reason,
                "matmul": timed}


def time_product(precision: str, device: torch.device, shape: tuple[int, int, int]) -> float:
    """Seconds of one ``(rows, inner) @ (inner, outer)`` product of fp32 operands on
    ``device`` under ``precision``'s :func:`autocast` (the casts included, as in a training
    step), measured between two synchronisations. The operands are drawn from a generator of
    their own, not from torch's global one, and are made outside the timed span."""
    rows, inner, outer = shape
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(rows, inner, device=device, generator=generator)
    b = torch.randn(inner, outer, device=device, generator=generator)
    _synchronize(device)
    start = time.perf_counter()
    with autocast(precision, device):
        a @ b
    _synchronize(device)
    return time.perf_counter() - start


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _runs(precision: str, device: torch.device) -> bool:
    """Whether a product under ``precision``'s autocast runs on ``device`` and comes out in
    that dtype (an autocast that does not support it warns and multiplies in fp32)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ones = torch.ones(2, 2, device=device)
            with torch.autocast(device_type=device.type, dtype=dtype):
                return (ones @ ones).dtype == dtype
    except (RuntimeError, AssertionError):  # no such device, or no autocast for it
        return False


def _time_both(low: str, device: torch.device, width: tuple[int, int],
               timer: Timer) -> tuple[tuple[int, int, int], dict[str, float], bool]:
    """The product's shape, the median seconds of one product in fp32 and ``low``, and
    whether the timings can be trusted to favour ``low``: both products' times grew with the
    rows (the fastest of fp32's at least 1.5x, of ``low``'s at least 1.2x, the fastest at
    half the rows) and the fastest are also at least 1.2x apart in ``low``'s favour. A stall
    only adds time, so the fastest of a few products is the work's, not a busy machine's.

    One untimed product of each at the smallest size, then one of each per size, the rows
    doubling until fp32's time grows with them and the two take ``_TARGET_SECONDS``, then
    ``_REPEATS`` interleaved products of each at the final size and at half of it, all
    within ``_BUDGET_SECONDS`` of timed products (``timer``'s own answers)."""
    names = ("fp32", low)
    rows, spent = _ROWS[0], 0.0
    for name in names:  # warm-up: kernels chosen, libraries loaded
        spent += timer(name, device, (rows, *width))
    half: dict[str, list[float]] = {}  # the times at half the rows
    while True:
        shape = (rows, *width)
        times = {name: [timer(name, device, shape)] for name in names}
        pair = sum(t[0] for t in times.values())
        spent += pair
        grows = bool(half) and times["fp32"][0] >= _GROWTH[0] * half["fp32"][0]
        if (grows and pair >= _TARGET_SECONDS) or rows >= _ROWS[1] \
                or spent + 2 * pair > _BUDGET_SECONDS:
            break
        half, rows = times, rows * 2
    cost = pair + sum(t[0] for t in half.values())
    for _ in range(_REPEATS - 1):
        if spent + cost > _BUDGET_SECONDS:
            break
        for name in names:
            times[name].append(timer(name, device, shape))
            if half:
                half[name].append(timer(name, device, (rows // 2, *width)))
        spent += cost
    trusted = bool(half) and min(times["fp32"]) >= _MARGIN * min(times[low]) and all(
        min(times[name]) >= factor * min(half[name])
        for name, factor in zip(names, _GROWTH, strict=True))
    return shape, {name: statistics.median(ts) for name, ts in times.items()}, trusted


def _cuda_capability(device: torch.device) -> tuple[int, int]:
    major, minor = torch.cuda.get_device_capability(device)
    return major, minor


def _choose(precision: str, device: torch.device, width: tuple[int, int],
            timer: Timer) -> PrecisionChoice:
    where = device_name(device)
    if precision == "fp32":
        return PrecisionChoice("fp32", precision, "asked for")
    cuda = device.type == "cuda"
    if precision == "fp16":
        if cuda:
            return PrecisionChoice("fp16", precision, "asked for (with loss scaling)")
        return PrecisionChoice("fp32", precision, f"fp16 autocast is for CUDA; {where} "
                               "trains in fp32")
    native = cuda and _cuda_capability(device) >= BF16_CAPABILITY
    if precision == "bf16":
        if cuda and not native:
            major, minor = _cuda_capability(device)
            raise bad_input("precision", f"'auto', 'fp16' or 'fp32' on {where} (compute "
                            f"capability {major}.{minor} < 8.0: bf16 is only emulated, several "
                            "times slower)", repr(precision))
        if not cuda and not _runs("bf16", device):
            raise bad_input("precision", f"'auto' or 'fp32' on {where} (bf16 autocast does "
                            f"not run on {device.type})", repr(precision))
        return PrecisionChoice("bf16", precision, "asked for")
    low = "fp16" if cuda and not native else "bf16"
    if not cuda and not _runs(low, device):
        return PrecisionChoice("fp32", precision, f"bf16 autocast does not run on {where}")
    shape, seconds, trusted = _time_both(low, device, width, timer)
    speedup = seconds["fp32"] / seconds[low]
    chosen = low if trusted and speedup >= _MARGIN else "fp32"
    product = "x".join(map(str, shape))
    reason = (f"a {product} product took {1e3 * seconds[low]:.3g} ms in {low} and "
              f"{1e3 * seconds['fp32']:.3g} ms in fp32 on {where}: {speedup:.2f}x, "
              f"{'at least' if speedup >= _MARGIN else 'under'} {_MARGIN}x")
    if speedup >= _MARGIN and not trusted:
        reason += ("; but the times did not grow with the rows, or their fastest disagree "
                   "(overheads, or a busy machine's stalls), so they cannot favour 16 bits")
    return PrecisionChoice(chosen, precision, reason, shape, seconds)


def choose_precision(precision: str, device: torch.device | str, *,
                     width: tuple[int, int] = (512, 2048), timer: Timer | None = None,
                     info: DistInfo | None = None) -> PrecisionChoice:
    """The precision a training step runs in on ``device``, for ``[train] precision``, with
    the reason (and, for "auto", the timings) for the run's record.

    "auto" times one product of a ``(rows, d_model) @ (d_model, d_ff)`` size (``width`` is
    ``(d_model, d_ff)``; the rows double, up to 16,384, until fp32's time grows with them) in
    fp32 and in 16 bits -- bf16, or fp16 on a CUDA GPU below compute capability 8.0 -- and
    picks 16 bits where its median is at least 1.2 times faster, else fp32. It keeps fp32
    too where the timings do not hold up: the products' times did not grow with their rows
    at the size reached, or the fastest products disagree with the medians (overheads or a
    busy machine's stalls were timed, not the work; wrongly trusting them could put a run on
    emulated bf16, many times slower). The timed products stop at 0.4 s, so on a CPU that
    only emulates bf16 the timing ends at a small size. ``timer`` replaces
    :func:`time_product` (tests).

    "bf16" is kept wherever bf16 autocast runs (any CPU: emulated ones are slow, not wrong);
    it is refused where it does not run (a device without bf16 autocast) and on CUDA below
    8.0 (only emulated, several times slower than that GPU's fp16: ask for "auto" or "fp16").
    "fp32" is kept; "fp16" is kept on CUDA (with a ``GradScaler``, :func:`make_scaler`) and
    is "fp32" elsewhere. Under several processes (``info``), rank 0's choice is every
    process's, so that no two processes train in different precisions.
    """
    require_one_of(precision, "precision", PRECISIONS)
    require(isinstance(width, (tuple, list)) and len(width) == 2
            and all(is_integer(w) and w > 0 for w in width), "width",
            "(d_model, d_ff), two positive ints", repr(width))
    choice = _choose(precision, torch.device(device), (width[0], width[1]),
                     timer or time_product)
    if info is not None and info.enabled:
        shared: list[Any] = [choice]
        dist.broadcast_object_list(shared, src=0)
        choice = shared[0]
    return choice


def resolve_precision(precision: str, device: torch.device | str, **options: Any) -> str:
    """:func:`choose_precision`'s precision alone ("fp32", "bf16" or "fp16")."""
    return choose_precision(precision, device, **options).precision


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast context of a resolved ``precision`` ("fp32": none; "bf16"/"fp16":
    ``torch.autocast`` to that dtype on ``device``'s type)."""
    require_one_of(precision, "precision", PRECISIONS[1:])
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def make_scaler(precision: str, device: torch.device | str) -> torch.amp.GradScaler | None:
    """A ``GradScaler`` for a resolved "fp16" (loss scaling keeps small fp16 gradients from
    flushing to zero), ``None`` for "fp32" and "bf16" (bf16 has fp32's exponent range)."""
    require_one_of(precision, "precision", PRECISIONS[1:])
    return torch.amp.GradScaler(torch.device(device).type) if precision == "fp16" else None


def optimizer_step(optimizer: torch.optim.Optimizer,
                   scaler: torch.amp.GradScaler | None) -> bool:
    """Step ``optimizer`` (through ``scaler`` in fp16) and say whether it stepped.

    Without a scaler the step is always taken (``True``). With one, ``scaler.step`` skips
    the update when the fp16 gradients hold inf/NaN and ``scaler.update`` then lowers the
    scale: ``False`` is returned, and the caller must not advance the learning-rate
    schedule (eq. 3 counts updates). ``scaler.unscale_(optimizer)`` may have been called
    before (to clip the gradients). The scale is read before and after the step (fp16
    only; ``scaler.step`` itself reads the inf check from the device anyway).
    """
    if scaler is None:
        optimizer.step()
        return True
    before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() >= before


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def setup_distributed(device: torch.device | str | None) -> tuple[DistInfo, torch.device]:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK), if any."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if "RANK" not in os.environ or world <= 1:
        return DistInfo(), torch.device(device) if device is not None else get_device()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        chosen, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(chosen)
    else:
        chosen, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
    return DistInfo(rank, world, local_rank), chosen


def all_reduce(value: torch.Tensor, info: DistInfo, op: Any = None) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(value, op=op or dist.ReduceOp.SUM)
    return value

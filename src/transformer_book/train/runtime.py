"""Where and how a training step runs: mixed precision and several processes (DDP).

Mixed precision (not in the paper, which trained in fp32 on P100s): on CUDA, "auto" means
bf16 autocast on a GPU with native bf16 (compute capability 8.0 and above: A100, H100, RTX 30xx
and later) and fp16 with loss scaling (``GradScaler``) below it (a T4, a V100), where bf16 is
only emulated and several times slower (``torch.cuda.is_bf16_supported()`` counts emulation,
so it is not asked). On a CPU, "auto" means bf16 autocast where the CPU multiplies bf16
matrices in hardware (Intel AMX: Sapphire Rapids and later), which made a training step of
the small preset 1.38x faster on 2 cores (``benchmarks/bench_precision.py``, with
attention's core kept in fp32: :func:`transformer_book.nn.attention.fast_attention`), and fp32
on every other CPU and on Apple GPUs. An optimizer step the scaler skips
(inf/NaN in the fp16 gradients) is reported by :func:`optimizer_step`, so that the learning
rate schedule does not advance on it.

Several processes: ``torchrun`` sets RANK, WORLD_SIZE and LOCAL_RANK; :func:`setup_distributed`
joins the process group (NCCL on CUDA, gloo on CPU).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from transformer_book.run.config import PRECISIONS
from transformer_book.util.env import device_name, get_device
from transformer_book.util.validation import require, require_one_of

__all__ = [
    "BF16_CAPABILITY",
    "DistInfo",
    "all_reduce",
    "autocast",
    "cpu_has_native_bf16",
    "make_scaler",
    "optimizer_step",
    "resolve_precision",
    "setup_distributed",
]

# The first compute capability with bf16 tensor cores (Ampere); below it bf16 is emulated.
BF16_CAPABILITY = (8, 0)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bf16 matrix units (Intel AMX tiles), which make bf16 autocast
    faster than fp32; without them (AVX-512 alone, AMD, ARM) bf16 gains nothing.

    Read from ``torch.cpu.get_capabilities()`` (its ``amx_tile`` flag); a PyTorch too old to
    offer it counts as no AMX, so "auto" stays fp32 there.
    """
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    return capabilities is not None and bool(capabilities().get("amx_tile", False))


def resolve_precision(precision: str, device: torch.device | str) -> str:
    """The precision a training step runs in on ``device``, for ``[train] precision``.

    On a CPU with bf16 matrix units (:func:`cpu_has_native_bf16`), "auto" and "bf16" are
    "bf16"; on any other CPU and on Apple GPUs, "fp32" whatever was asked (autocast gains
    nothing there); "fp32" and "fp16" are "fp32" on every CPU (CPU fp16 autocast is slow).
    On CUDA, "auto" is "bf16" on compute capability >= 8.0 (native bf16 tensor cores, no
    loss scaling needed) and "fp16" below (with a ``GradScaler``, :func:`make_scaler`);
    "fp32" and "fp16" are kept; "bf16" below 8.0 is refused (only emulated there, several
    times slower than fp16: ask for "auto" or "fp16").
    """
    require_one_of(precision, "precision", PRECISIONS)
    device = torch.device(device)
    if device.type == "cpu" and precision in ("auto", "bf16") and cpu_has_native_bf16():
        return "bf16"
    if device.type != "cuda":
        return "fp32"
    capability = tuple(torch.cuda.get_device_capability(device))
    native = capability >= BF16_CAPABILITY
    if precision == "auto":
        return "bf16" if native else "fp16"
    require(precision != "bf16" or native, "precision",
            f"'auto', 'fp16' or 'fp32' on {device_name(device)} (compute capability "
            f"{capability[0]}.{capability[1]} < 8.0: bf16 is only emulated, several times "
            "slower)", repr(precision))
    return precision


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

"""Where and how a training step runs: mixed precision and several processes (DDP).

Mixed precision (not in the paper, which trained in fp32 on P100s): on CUDA, "auto" means
bf16 autocast where the GPU supports it and fp16 with loss scaling (``GradScaler``)
otherwise; CPUs and Apple GPUs train in fp32.

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

from transformer_book.util.env import get_device

__all__ = ["DistInfo", "all_reduce", "autocast", "resolve_precision", "setup_distributed"]


def resolve_precision(precision: str, device: torch.device) -> str:
    """fp32 off CUDA; on CUDA "auto" is bf16 where supported, else fp16 (loss scaling)."""
    if device.type != "cuda":
        return "fp32"
    if precision == "auto":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return precision


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


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

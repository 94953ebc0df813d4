"""The reader's environment: device choice, seeding and a report of versions.

Every chapter starts with ``set_seed(0)`` and ``device = get_device()`` so that it runs
the same way on a laptop CPU, on Colab's GPU or on a workstation.
"""

from __future__ import annotations

import os
import platform
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from transformer_book.util.validation import BookError, bad_input, require, require_int

__all__ = [
    "DEVICE_ORDER",
    "cpu_name",
    "device_name",
    "environment_report",
    "format_report",
    "get_device",
    "in_colab",
    "require_device",
    "set_seed",
    "torch_threads",
]

DEVICE_ORDER = ("cuda", "mps", "cpu")

_REPORTED_PACKAGES = (
    "torch",
    "numpy",
    "tokenizers",
    "sacrebleu",
    "safetensors",
    "matplotlib",
    "transformer_book",
)


def _available(kind: str) -> bool:
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "mps":
        return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()
    return kind == "cpu"


def get_device(prefer: str | None = None) -> torch.device:
    """Return the device to compute on.

    With ``prefer=None`` it picks the first available of cuda, mps and cpu. With
    ``prefer="cuda"`` (or ``"mps"``/``"cpu"``, optionally with an index like
    ``"cuda:1"``) it returns that device or raises a :class:`BookError` saying what is missing.
    """
    if prefer is None:
        return torch.device(next(kind for kind in DEVICE_ORDER if _available(kind)))
    kind = prefer.split(":", 1)[0] if isinstance(prefer, str) else None
    require(kind in DEVICE_ORDER, "prefer", f"None or one of {DEVICE_ORDER}", repr(prefer))
    if not _available(kind):
        have = [k for k in DEVICE_ORDER if _available(k)]
        raise BookError(
            f"prefer: {prefer!r} was requested but this machine has no {kind} device "
            f"(available: {', '.join(have)}); call get_device() to pick the best available one"
        )
    return torch.device(prefer)


def require_device(device: torch.device | str, argument: str = "device") -> torch.device:
    """``device`` as a ``torch.device`` if it names one this machine has (cpu, mps, cuda or
    cuda:N); a :class:`BookError` naming ``argument`` otherwise, before any work starts."""
    try:
        wanted = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise bad_input(argument, "cpu, cuda, cuda:N or mps", repr(device)) from None
    require(wanted.type in DEVICE_ORDER, argument, "cpu, cuda, cuda:N or mps", repr(device))
    have = [kind for kind in DEVICE_ORDER if _available(kind)]
    count = torch.cuda.device_count() if wanted.type == "cuda" and "cuda" in have else 1
    shown = [f"cuda:0 to cuda:{count - 1}" if kind == "cuda" else kind for kind in have]
    require(wanted.type in have and (wanted.index or 0) < count, argument,
            f"a device this machine has ({', '.join(shown)})", repr(device))
    return wanted


def device_name(device: torch.device | str) -> str:
    """What ``device`` is: the GPU's name, ``"Apple GPU (Metal)"`` or the CPU's name."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple GPU (Metal)"
    return cpu_name()


# The instruction sets that tell apart CPUs of one model name (a virtual machine's "AMD
# EPYC" may have AVX-512 with bf16 or AVX2 alone): flag in /proc/cpuinfo -> label.
CPU_FEATURES = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX512-BF16"),
                ("amx_tile", "AMX"))


def cpu_name(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name (Linux's ``/proc/cpuinfo``) with the vector instruction sets it
    has (:data:`CPU_FEATURES`, e.g. ``"AMD EPYC (AVX2, AVX-512, AVX512-BF16)"``), else what
    ``platform`` knows (``"arm"``, ``"x86_64"``): records name the machine they ran on."""
    name, flags = "", set[str]()
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip() and not name:
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    if not name:
        return platform.processor() or platform.machine()
    features = [label for flag, label in CPU_FEATURES if flag in flags]
    return f"{name} ({', '.join(features)})" if features else name


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run torch on ``count`` intra-op threads inside the block and restore the previous
    setting after it (tiny models and timings are steadier on one thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def set_seed(seed: int = 0) -> None:
    """Seed Python's, NumPy's and PyTorch's generators (all devices) with ``seed``."""
    require_int(seed, "seed", minimum=0)
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeds the legacy global generator on purpose
    torch.manual_seed(seed)


def in_colab() -> bool:
    """True when running inside Google Colab."""
    return "google.colab" in sys.modules


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment_report() -> dict[str, object]:
    """Versions, device and threads, as a dictionary (chapter 00 prints it).

    Keys: ``python``, ``platform``, ``packages`` (name -> version), ``device``,
    ``device_name``, ``cpu_count``, ``torch_threads``, ``in_colab``.
    """
    device = get_device()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "packages": {name: _version(name) for name in _REPORTED_PACKAGES},
        "device": device.type,
        "device_name": device_name(device),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "in_colab": in_colab(),
    }


def format_report(report: dict[str, object] | None = None) -> str:
    """Render :func:`environment_report` as aligned ``key: value`` lines."""
    report = environment_report() if report is None else report
    lines = []
    for key, value in report.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines.extend(f"  {name:<17} {version}" for name, version in value.items())
        else:
            lines.append(f"{key:<19} {value}")
    return "\n".join(lines)

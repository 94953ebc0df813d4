"""Speed of the teaching attention (explicit matmul + softmax) against PyTorch's fused SDPA.

Usage: ``python benchmarks/bench_sdpa.py [--quick] [--json PATH] [--clock cpu]``.

Our :func:`transformer_book.attention.scaled_dot_product_attention` computes
``softmax(QKᵀ/√d_k) V`` step by step and returns the weights (for plots);
``torch.nn.functional.scaled_dot_product_attention`` fuses the same computation (and on a
GPU never stores the L x L weights). Forward + backward on ``(B, h, L, d_k)`` tensors,
without a mask and with a padding mask. Rows: ``ours`` and ``reference`` in ms per call,
``ratio = reference / ours`` (>= 1: ours at least as fast); the teaching path is expected to
be slower, the goal is to stay within 2x (ratio >= 0.5).

Medians of interleaved repeats after warmup, on one intra-op thread (the course machine's
2 cores are shared); ``--clock cpu`` times this process's CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from transformer_book.attention import scaled_dot_product_attention

FULL = [(32, 8, 128, 64), (32, 8, 256, 64)]  # B, h, L, d_k
QUICK = [(8, 8, 64, 64)]
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
GOAL = 0.5


def _measure(calls: dict[str, Callable[[], None]], repeats: int,
             clock: str = "wall") -> dict[str, list[float]]:
    """Seconds per call for each callable, interleaved, after two warmup calls each."""
    now = CLOCKS[clock]
    for _ in range(2):
        for call in calls.values():
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(repeats):
        for name in (list(calls) if i % 2 == 0 else list(reversed(calls))):
            start = now()
            calls[name]()
            times[name].append(now() - start)
    return times


def bench_one(batch: int, heads: int, length: int, d_k: int, masked: bool, repeats: int,
              clock: str = "wall") -> dict:
    """One comparison at one size; returns a result row."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, length, d_k, generator=g, requires_grad=True)
               for _ in range(3))
    mask = None
    if masked:  # right padding: sentence b keeps its first lengths[b] keys
        lengths = torch.randint(length // 2, length + 1, (batch,), generator=g)
        mask = (torch.arange(length)[None, :] < lengths[:, None])[:, None, None, :]  # (B,1,1,L)

    def step(fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def call() -> None:
            for t in (q, k, v):
                t.grad = None
            fn().sum().backward()
        return call

    times = _measure({
        "ours": step(lambda: scaled_dot_product_attention(q, k, v, mask)[0]),
        "reference": step(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)),
    }, repeats, clock)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    best = {name: min(ts) for name, ts in times.items()}
    return {
        "name": f"attention core{' (padding mask)' if masked else ''}, B={batch} h={heads} "
                f"L={length} d_k={d_k}",
        "unit": "ms", "ours": 1e3 * median["ours"], "reference": 1e3 * median["reference"],
        "ratio": median["reference"] / median["ours"],
        "ratio_best": best["reference"] / best["ours"], "goal": GOAL,
        "clock": clock, "threads": torch.get_num_threads(),
    }


def run(quick: bool = False, clock: str = "wall") -> list[dict]:
    """Every size without and with a padding mask; ``quick`` is one small size."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.enable_grad():
            return [bench_one(*size, masked=masked, repeats=3 if quick else 9, clock=clock)
                    for size in (QUICK if quick else FULL) for masked in (False, True)]
    finally:
        torch.set_num_threads(threads)


def _print(rows: list[dict]) -> None:
    print(f"{'benchmark':<52} | {'ours ms':>8} {'ref ms':>8} | {'ratio':>6} {'goal':>5}")
    for r in rows:
        print(f"{r['name']:<52} | {r['ours']:8.2f} {r['reference']:8.2f} | {r['ratio']:6.2f} "
              f"{r['goal']:5.2f}")


def _write_json(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(rows, f, indent=2)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small size, fewer repeats")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time, or this process's CPU time (steadier on a busy machine)")
    args = parser.parse_args(argv)
    rows = run(quick=args.quick, clock=args.clock)
    _print(rows)
    if args.json is not None:
        _write_json(rows, args.json)
    return rows


if __name__ == "__main__":
    main()

"""Speed of our MultiHeadAttention against ``nn.MultiheadAttention`` (forward + backward, CPU).

Usage: ``python benchmarks/bench_attention.py [--quick] [--json PATH]``.

Each row reports ``ratio = torch_time / our_time`` (>= 1 means ours is at least as fast) for
the fast path (``need_weights=False``, fused SDPA) and for the teaching path
(``need_weights=True``, explicit matmul + softmax), on self-attention with the same weights.
Timings are medians of interleaved repeats in one process, after warmup (``*_ratio``);
``*_ratio_best`` compares best-of-repeats, which other processes on the machine disturb less.
``--threads N`` sets torch's intra-op threads (default: torch's choice); on a shared, busy
machine ``--threads 1 --clock cpu`` measures CPU time instead of wall time.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
from _common import command_line, measure  # benchmarks/_common.py
from torch import nn

from transformer_book.nn.attention import MultiHeadAttention

MAIN = (32, 128, 512, 8)  # B, L, d_model, h
SWEEP = [(32, length, d, 8) for d in (256, 512) for length in (32, 64, 128, 256)]
QUICK_SWEEP = [(32, length, 256, 8) for length in (32, 128)]


def _step(module: nn.Module, x: torch.Tensor, call: Callable) -> Callable[[], None]:
    def step() -> None:
        module.zero_grad(set_to_none=True)
        x.grad = None
        out = call(module, x)
        out.sum().backward()

    return step


def bench_one(
    batch: int, length: int, d_model: int, heads: int, repeats: int, clock: str = "wall"
) -> dict:
    """Time the three variants at one size; return one result row."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(d_model, heads, batch_first=True)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(batch, length, d_model, requires_grad=True)
    steps = {
        "torch": _step(ref, x, lambda m, t: m(t, t, t, need_weights=False)[0]),
        "fast": _step(ours, x, lambda m, t: m(t, t, t)[0]),
        "teaching": _step(ours, x, lambda m, t: m(t, t, t, need_weights=True)[0]),
    }
    times = measure(steps, repeats=repeats, warmup=max(2, repeats // 5), clock=clock)
    seconds = {name: statistics.median(ts) for name, ts in times.items()}
    best = {name: min(ts) for name, ts in times.items()}
    return {
        "benchmark": "attention",
        "B": batch, "L": length, "d_model": d_model, "heads": heads,
        "torch_ms": 1e3 * seconds["torch"],
        "fast_ms": 1e3 * seconds["fast"],
        "teaching_ms": 1e3 * seconds["teaching"],
        "fast_ratio": seconds["torch"] / seconds["fast"],
        "teaching_ratio": seconds["torch"] / seconds["teaching"],
        "fast_ratio_best": best["torch"] / best["fast"],  # best-of-repeats, less load-sensitive
        "teaching_ratio_best": best["torch"] / best["teaching"],
        "threads": torch.get_num_threads(),
        "clock": clock,
    }


def run(quick: bool = False, clock: str = "wall") -> list[dict]:
    """Main size then the sweep; ``quick`` uses fewer sizes and repeats (for smoke runs).

    ``clock="cpu"`` times with ``time.process_time`` (CPU seconds of this process): with one
    thread it ignores time other processes take from us, so ratios stay stable on a busy
    machine; ``"wall"`` (default) is the latency a user sees.
    """
    repeats = 7 if quick else 15
    sizes = [MAIN, *(s for s in (QUICK_SWEEP if quick else SWEEP) if s != MAIN)]
    rows = []
    with torch.enable_grad():
        for size in sizes:
            row = bench_one(*size, repeats=repeats, clock=clock)
            row["main"] = size == MAIN
            rows.append(row)
    return rows


def _print(rows: list[dict]) -> None:
    print(f"{'B':>3} {'L':>4} {'d':>4} {'h':>2} | {'torch ms':>9} {'fast ms':>9} "
          f"{'teach ms':>9} | {'fast ratio':>10} {'teach ratio':>11} | {'best fast':>9} "
          f"{'best teach':>10}")
    for r in rows:
        print(f"{r['B']:>3} {r['L']:>4} {r['d_model']:>4} {r['heads']:>2} | "
              f"{r['torch_ms']:9.2f} {r['fast_ms']:9.2f} {r['teaching_ms']:9.2f} | "
              f"{r['fast_ratio']:10.2f} {r['teaching_ratio']:11.2f} | "
              f"{r['fast_ratio_best']:9.2f} {r['teaching_ratio_best']:10.2f}"
              + ("  (main)" * r["main"]))


main = command_line(__doc__, run, _print)


if __name__ == "__main__":
    main()

"""Speed of the teaching attention (explicit matmul + softmax) against PyTorch's fused SDPA.

Usage: ``python benchmarks/bench_sdpa.py [--quick] [--json PATH] [--clock cpu]``.

Our :func:`transformer_book.nn.attention.scaled_dot_product_attention` computes
``softmax(QKᵀ/√d_k) V`` step by step and returns the weights (for plots);
``torch.nn.functional.scaled_dot_product_attention`` fuses the same computation (and on a
GPU never stores the L x L weights). Forward + backward on ``(B, h, L, d_k)`` tensors,
without a mask and with a padding mask. Rows: ``ours`` and ``reference`` in ms per call,
``ratio = reference / ours`` (>= 1: ours at least as fast); the teaching path is expected to
be slower, the goal is to stay within 2x (ratio >= 0.5).

Decoding rows: a decoding step asks for a few queries per head (one per hypothesis, or the
K beams of a sentence against its source), without gradients. There
:func:`~transformer_book.nn.attention.fast_attention`, MultiHeadAttention's fast path, runs
the teaching formula on the CPU (for at most ``FEW_QUERIES`` queries) because it beats the
fused kernel: the fast path against the fused kernel, forward only, under
``torch.no_grad()``, with a padding mask, goal ratio >= 1. These rows are the measurement
behind ``FEW_QUERIES`` (see its comment).

Medians of interleaved repeats after warmup, on one intra-op thread (the course machine's
2 cores are shared); ``--clock cpu`` times this process's CPU seconds.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _common import command_line, measure, one_thread  # benchmarks/_common.py

from transformer_book.nn.attention import (
    FEW_QUERIES,
    fast_attention,
    scaled_dot_product_attention,
)

FULL = [(32, 8, 128, 64), (32, 8, 256, 64)]  # B, h, L, d_k
QUICK = [(8, 8, 64, 64)]
GOAL = 0.5
# Decoding steps: (B, h, L_q, L_k, d_k). Greedy: one query per sentence; beam 4: a
# sentence's 4 hypotheses against its source, as the decoder's cross-attention groups them.
# The last row sits at nn.attention.FEW_QUERIES, the most queries the explicit formula serves.
DECODING = [(512, 4, 1, 20, 32), (128, 4, 4, 20, 32), (128, 4, FEW_QUERIES, 20, 32)]
DECODING_QUICK = [(64, 4, 4, 12, 32)]
DECODING_GOAL = 1.0


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

    times = measure({
        "ours": step(lambda: scaled_dot_product_attention(q, k, v, mask)[0]),
        "reference": step(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)),
    }, repeats, warmup=2, clock=clock)
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


def bench_decoding(batch: int, heads: int, queries: int, keys: int, d_k: int, repeats: int,
                   clock: str = "wall") -> dict:
    """The fast path (the teaching formula there) against the fused kernel at a decoding
    step's size, forward only without gradients, with a padding mask (the source's)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, queries, d_k, generator=g)
    k, v = (torch.randn(batch, heads, keys, d_k, generator=g) for _ in range(2))
    lengths = torch.randint(keys // 2, keys + 1, (batch,), generator=g)
    mask = (torch.arange(keys)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, L_k)
    with torch.no_grad():
        times = measure({
            "ours": lambda: fast_attention(q, k, v, mask),  # the teaching formula, here
            "reference": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        }, repeats, warmup=2, clock=clock)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    return {
        "name": f"decoding step attention, B={batch} h={heads} L_q={queries} L_k={keys} "
                f"d_k={d_k}",
        "unit": "ms", "ours": 1e3 * median["ours"], "reference": 1e3 * median["reference"],
        "ratio": median["reference"] / median["ours"], "goal": DECODING_GOAL,
        "clock": clock, "threads": torch.get_num_threads(),
    }


def run(quick: bool = False, clock: str = "wall") -> list[dict]:
    """Every size without and with a padding mask, then the decoding sizes; ``quick`` is one
    small size of each."""
    repeats = 3 if quick else 9
    with one_thread():
        with torch.enable_grad():
            rows = [bench_one(*size, masked=masked, repeats=repeats, clock=clock)
                    for size in (QUICK if quick else FULL) for masked in (False, True)]
        return rows + [bench_decoding(*size, repeats=10 * repeats, clock=clock)
                       for size in (DECODING_QUICK if quick else DECODING)]


def _print(rows: list[dict]) -> None:
    print(f"{'benchmark':<52} | {'ours ms':>8} {'ref ms':>8} | {'ratio':>6} {'goal':>5}")
    for r in rows:
        print(f"{r['name']:<52} | {r['ours']:8.2f} {r['reference']:8.2f} | {r['ratio']:6.2f} "
              f"{r['goal']:5.2f}")


main = command_line(__doc__, run, _print)


if __name__ == "__main__":
    main()

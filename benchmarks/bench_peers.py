"""A training step of the course's Transformer against its peers, and the share of this CPU's
matrix-product peak that the step reaches.

Usage: ``python benchmarks/bench_peers.py [--quick] [--clock cpu] [--results results]
[--json PATH]``; ``make bench`` runs it through ``run_all.py``.

The model is ``configs/small.toml``'s (the small preset: d_model 256, 3 + 3 layers, dropout
0.2, tied embeddings, 7.6 M parameters) and the batch 64 pairs of 16 source and 16 target
tokens of random ids, unpadded (:func:`mfu.synthetic_batch`). One step is bench_model's:
forward, label-smoothed cross-entropy (ε = 0.1), backward, Adam. Timed in one process, on one
intra-op thread, in interleaved repeats (medians reported, ``ratio = peer time / ours``, > 1:
the course is faster):

* ``MarianMTModel`` holding the same weights
  (:func:`~transformer_book.interop.hf_export.to_marian`; its fp32 logits on the batch are
  checked against the course model's before timing, ``max_abs_logit_difference``);
* ``nn.Transformer`` with the same weights (bench_model's :func:`~bench_model.equal_models`:
  the course model in that layout, final norms and a generator bias);
* the course's fast paths (``transformer-book train --fast``): the same weights with
  :func:`~transformer_book.nn.dropout.use_fast_dropout` and the generator and loss in one pass
  (:func:`~transformer_book.train.fused_loss.fused_label_smoothed_loss`), against Marian
  (goal :data:`FAST_GOAL`);
* all again under CPU bf16 autocast, where this CPU multiplies bf16 faster than fp32: the
  product that ``precision = "auto"`` times
  (:func:`~transformer_book.train.runtime.choose_precision`) decides, and its reason is in the
  record where it does not.

The peak is measured, not looked up: the best of a few ``n × n @ n × n`` fp32 products on one
thread (n = 2048), and bf16 where the product above picked it. The step's FLOPs are
:func:`~transformer_book.analysis.compute.training_flops` (3 x the forward's matrix
products) and also what ``FlopCounterMode`` counts in one step; ``mfu`` = FLOPs / median
step seconds / peak. Beside it, ``torch.profiler``'s top operators by self CPU time in a few
steps of the course model, each with its share of the step.

The record (``peers-<UTC>.json`` under ``--results``, nothing written without it) names the
CPU and the load average before and after: the ratios belong to that machine and load.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _common import CLOCKS, measure, one_thread, write_json  # benchmarks/_common.py
from bench_model import _step, equal_models
from mfu import ROOT, synthetic_batch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from transformer_book.analysis.complexity import profile_operators
from transformer_book.analysis.compute import training_flops
from transformer_book.interop.hf_export import to_marian
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.dropout import use_fast_dropout
from transformer_book.nn.transformer import Transformer
from transformer_book.run.config import load_run_config
from transformer_book.train.fused_loss import fused_label_smoothed_loss
from transformer_book.train.runtime import choose_precision
from transformer_book.util.env import cpu_name
from transformer_book.util.records import command_line, git_commit, hardware_info, utc_timestamp

CONFIG = ROOT / "configs" / "small.toml"
FULL = dict(batch=64, length=16, gemm=2048, repeats=7, gemm_repeats=5, profile_steps=3)
QUICK = dict(batch=4, length=8, gemm=256, repeats=2, gemm_repeats=2, profile_steps=1)
TOP_OPS = 15
#: Goals: the same arithmetic as the peers, no slower than 0.9 of them; the fast paths 1.3x.
GOAL = 0.9
FAST_GOAL = 1.3
FAST = "ours (fast)"


class MarianPair(nn.Module):
    """``MarianMTModel`` called as the course model is, ``(src, tgt) -> logits``: the source
    padding mask, decoder inputs ``tgt``, no labels (the loss is the same function for both)."""

    def __init__(self, marian: nn.Module, pad_id: int) -> None:
        super().__init__()
        self.marian = marian
        self.pad_id = pad_id

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.marian(input_ids=src, attention_mask=src.ne(self.pad_id),
                           decoder_input_ids=tgt).logits


def small_config() -> TransformerConfig:
    """``configs/small.toml``'s model (its vocabulary, dropout, label smoothing)."""
    run_config = load_run_config(CONFIG)
    return run_config.model_config(run_config.data.vocab_size)


def make_batch(config: TransformerConfig, batch: int, length: int) -> tuple[torch.Tensor,
                                                                            torch.Tensor]:
    """``src (B, L)`` and ``tgt (B, L + 1)`` (``<bos>`` first) of random ids, unpadded."""
    step_batch = synthetic_batch(config, batch * length, length, torch.device("cpu"), seed=0)
    ((src, tgt_in, tgt_out),) = step_batch.micro
    return src, torch.cat([tgt_in, tgt_out[:, -1:]], dim=1)


def models(config: TransformerConfig, length: int) -> dict[str, nn.Module]:
    """The four models, in training mode: the course's and Marian with one set of weights,
    and bench_model's pair (the course's in ``nn.Transformer``'s layout, and that module)."""
    torch.manual_seed(0)
    ours = Transformer(config)
    marian = MarianPair(to_marian(ours), config.pad_id)
    fast = copy.deepcopy(ours)
    use_fast_dropout(fast)
    reference, ours_torch_layout = equal_models(length, config.dropout)
    return {"ours": ours.train(), "marian": marian.train(), FAST: fast.train(),
            "ours (nn.Transformer layout)": ours_torch_layout.train(),
            "nn.Transformer": reference.train()}


def logit_difference(ours: nn.Module, marian: nn.Module, src: torch.Tensor,
                     tgt: torch.Tensor) -> float:
    """``max |logits_ours - logits_marian|`` in eval mode on the batch (the models' dtype):
    the proof that Marian holds the same weights."""
    modes = [(model, model.training) for model in (ours, marian)]
    try:
        with torch.no_grad():
            return float((ours.eval()(src, tgt[:, :-1]) - marian.eval()(src, tgt[:, :-1]))
                         .abs().max())
    finally:
        for model, training in modes:
            model.train(training)


def steps(named: dict[str, nn.Module], src: torch.Tensor, tgt: torch.Tensor,
          precision: str) -> dict[str, Callable[[], None]]:
    """bench_model's step for each model (its own Adam), under bf16 autocast for ``"bf16"``."""
    adam = dict(lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    calls = {}
    for name, model in named.items():
        make = _fused_step if name == FAST else _step
        step = make(model, torch.optim.Adam(model.parameters(), **adam), src, tgt)
        calls[name] = step if precision == "fp32" else _autocast(step)
    return calls


def _fused_step(model: Transformer, optimizer: torch.optim.Optimizer, src: torch.Tensor,
                tgt: torch.Tensor) -> Callable[[], None]:
    """bench_model's step with the loss's fast path (the same loss, mean over the targets)."""
    targets = tgt[:, 1:]
    count = int((targets != 0).sum())

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        total = fused_label_smoothed_loss(model.hidden(src, tgt[:, :-1]), model.generator,
                                          targets, 0.1, 0)
        (total / count).backward()
        optimizer.step()

    return step


def _autocast(step: Callable[[], None]) -> Callable[[], None]:
    def call() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            step()

    return call


def gemm_peak(n: int, repeats: int, dtype: torch.dtype, clock: str = "wall") -> dict[str, Any]:
    """The best FLOP/s of ``repeats`` ``(n, n) @ (n, n)`` products (2 n³ FLOPs each) after one
    untimed product, on ``clock`` (the steps' clock, so that MFU compares like with like)."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(dtype) for _ in range(2))
    times = measure({"matmul": lambda: torch.mm(a, b)}, repeats=repeats, warmup=1,
                    clock=clock)["matmul"]
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), "best_seconds": min(times),
            "seconds": times, "clock": clock,
            "flops_per_second": 2 * n**3 / min(times)}


def counted_flops(step: Callable[[], None]) -> int:
    """FLOPs ``FlopCounterMode`` counts in one call of ``step`` (attention through the MATH
    backend: the counter has no formula for the CPU's fused kernel)."""
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter:
        step()
    return counter.get_total_flops()


def profile(step: Callable[[], None], count: int, top: int = TOP_OPS) -> list[dict[str, Any]]:
    """The ``top`` operators by self CPU time over ``count`` calls of ``step`` (after one
    untimed call; :func:`~transformer_book.analysis.complexity.profile_operators`):
    milliseconds a step, share of the step's self time, calls a step."""
    return [{"op": row["op"], "self_ms_per_step": row["self_ms_per_call"],
             "share": row["share"], "calls_per_step": row["calls_per_call"]}
            for row in profile_operators(step, count)[:top]]


def _pair(times: dict[str, list[float]], ours: str, peer: str) -> dict[str, float]:
    """Median ratio of per-repeat ratios, and the ratio of medians."""
    ratios = [p / o for o, p in zip(times[ours], times[peer], strict=True)]
    return {"ratio": statistics.median(ratios),
            "ratio_of_medians": statistics.median(times[peer]) / statistics.median(times[ours]),
            "ratio_best": min(times[peer]) / min(times[ours])}


def measure_peers(quick: bool = False, clock: str = "wall") -> dict[str, Any]:
    """The whole comparison on one thread: the record without its command and git fields."""
    size = QUICK if quick else FULL
    b, length = size["batch"], size["length"]
    load_before = os.getloadavg()
    started = time.perf_counter()
    with one_thread(), torch.enable_grad():
        config = small_config()
        src, tgt = make_batch(config, b, length)
        named = models(config, length)
        difference = logit_difference(named["ours"], named["marian"], src, tgt)
        choice = choose_precision("auto", "cpu", width=(config.d_model, config.d_ff))
        precisions = ["fp32"] + (["bf16"] if choice.precision == "bf16" else [])
        flops = training_flops(config, length, length, b)
        peak = {"fp32": gemm_peak(size["gemm"], size["gemm_repeats"], torch.float32, clock)}
        if "bf16" in precisions:
            peak["bf16"] = gemm_peak(size["gemm"], size["gemm_repeats"], torch.bfloat16,
                                      clock)
        by_precision: dict[str, Any] = {}
        for precision in precisions:
            calls = steps(named, src, tgt, precision)
            times = measure(calls, repeats=size["repeats"], warmup=2, clock=clock)
            seconds = statistics.median(times["ours"])
            by_precision[precision] = {
                "seconds": times,
                "median_seconds": {name: statistics.median(ts) for name, ts in times.items()},
                "marian": _pair(times, "ours", "marian"),
                "nn.Transformer": _pair(times, "ours (nn.Transformer layout)", "nn.Transformer"),
                "fast": _pair(times, FAST, "marian"),
                "flops_per_second": flops / seconds,
                "mfu": flops / seconds / peak[precision]["flops_per_second"],
            }
        fp32_steps = steps({"ours": named["ours"]}, src, tgt, "fp32")
        counted = counted_flops(fp32_steps["ours"])
        ops = profile(fp32_steps["ours"], size["profile_steps"])
    parameters = sum(p.numel() for p in named["ours"].parameters())
    return {
        "cpu": cpu_name(), "threads": 1, "clock": clock, "quick": quick,
        "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
        "config": CONFIG.stem, "parameters": parameters,
        "batch": {"pairs": b, "source_tokens": length, "target_tokens": length},
        "max_abs_logit_difference": difference,
        "bf16": {"chosen": choice.precision, "reason": choice.reason,
                 "product_speedup": choice.speedup},
        "flops_per_step": flops, "counted_flops_per_step": counted,
        "counted_over_formula": counted / flops, "peak": peak,
        "bf16_over_fp32_peak": (peak["bf16"]["flops_per_second"]
                                / peak["fp32"]["flops_per_second"] if "bf16" in peak else None),
        "precisions": by_precision, "profile": ops,
        "wall_seconds": time.perf_counter() - started,
    }


def rows(measured: dict[str, Any]) -> list[dict]:
    """``run_all``'s rows: each peer against the course, per precision; ratio = peer / ours."""
    out = []
    cpu, batch = measured["cpu"], measured["batch"]
    size = f"{batch['pairs']}x{batch['source_tokens']}+{batch['target_tokens']}"
    for precision, m in measured["precisions"].items():
        for peer, ours in (("marian", "ours"), ("nn.Transformer", "ours (nn.Transformer "
                                                                  "layout)")):
            label = "MarianMTModel" if peer == "marian" else peer
            out.append({
                "name": f"train step small {size} {precision}, course vs {label} ({cpu}, "
                        "1 thread)",
                "unit": "s", "ours": m["median_seconds"][ours],
                "reference": m["median_seconds"][peer], **m[peer], "goal": GOAL,
                "mfu": m["mfu"], "cpu": cpu, "clock": measured["clock"]})
        out.append({
            "name": f"train step small {size} {precision}, course --fast vs MarianMTModel "
                    f"({cpu}, 1 thread)",
            "unit": "s", "ours": m["median_seconds"][FAST],
            "reference": m["median_seconds"]["marian"], **m["fast"], "goal": FAST_GOAL,
            "cpu": cpu, "clock": measured["clock"]})
    return out


def format_table(measured: dict[str, Any]) -> str:
    """The ratios, the peak and MFU, and the profile."""
    lines = [f"{measured['cpu']}, 1 thread, load average {measured['load_average_before'][0]:.2f}"
             f" -> {measured['load_average_after'][0]:.2f}; {measured['parameters']:,} "
             f"parameters; Marian logits within {measured['max_abs_logit_difference']:.2e}"]
    for precision, m in measured["precisions"].items():
        peak = measured["peak"][precision]
        lines.append(f"{precision}: ours {1e3 * m['median_seconds']['ours']:.1f} ms/step; "
                     f"Marian / ours {m['marian']['ratio']:.2f}, nn.Transformer / ours "
                     f"{m['nn.Transformer']['ratio']:.2f}, Marian / ours --fast "
                     f"{m['fast']['ratio']:.2f}; {m['flops_per_second'] / 1e9:.2f} "
                     f"GFLOP/s of a {peak['n']}^3 matmul's {peak['flops_per_second'] / 1e9:.2f}"
                     f": MFU {100 * m['mfu']:.1f} %")
    bf16 = measured["bf16"]
    if "bf16" not in measured["precisions"]:
        lines.append(f"bf16 not timed: {bf16['reason']}")
    lines.append(f"{'op':<48} {'ms/step':>8} {'share':>6} {'calls':>6}")
    for op in measured["profile"]:
        lines.append(f"{op['op'][:48]:<48} {op['self_ms_per_step']:>8.2f} "
                     f"{100 * op['share']:>5.1f}% {op['calls_per_step']:>6.0f}")
    return "\n".join(lines)


def run(quick: bool = False, clock: str = "wall") -> list[dict]:
    """What ``run_all.py`` calls: the comparison, its table printed, its rows returned."""
    measured = measure_peers(quick, clock)
    print(format_table(measured))
    return rows(measured)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a few seconds)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time, or this process's CPU time (busy machines)")
    parser.add_argument("--results", type=Path, default=None,
                        help="write <results>/peers-<UTC>.json")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    measured = measure_peers(args.quick, args.clock)
    print(format_table(measured))
    found = rows(measured)
    record = {"kind": "peers", "command": command_line(["python", "benchmarks/bench_peers.py",
                                                        *(sys.argv[1:] if argv is None
                                                          else argv)]),
              "git": git_commit(), "hardware": hardware_info("cpu"), **measured, "rows": found}
    if args.json is not None:
        write_json(found, args.json)
    if args.results is not None:
        print(f"record: {write_json(record, args.results / f'peers-{utc_timestamp()}.json')}")
    return record


if __name__ == "__main__":
    main()

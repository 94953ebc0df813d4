"""Model FLOPs utilisation of the paper's base model: tokens/s, FLOP/s and MFU of a training step.

Usage, from the repository root::

    python benchmarks/mfu.py [--config configs/base.toml] [--device cuda] [--tokens 25000]
                             [--length 32] [--steps 100] [--warmup 5] [--precision auto]
                             [--modes eager compile] [--backend inductor] [--results results]
    python benchmarks/mfu.py --steps 2 --tokens 512 --device cpu     # end to end on a CPU

The model is ``--config``'s ``[model]`` (the base model of Table 3 by default: N = 6,
d_model 512, d_ff 2048, h 8, dropout 0.1) with ``[data] vocab_size`` entries, in training
mode. One step is the package's own :func:`~transformer_book.train.step.train_step`
(forward under autocast, label-smoothed loss, backward, clipping as configured, Adam and
eq. 3's schedule) on a batch of ``--tokens`` source and ``--tokens`` target tokens (Section
5.1: "approximately 25000 source tokens and 25000 target tokens"), ``--tokens // --length``
sentence pairs of ``--length`` random ids each, without padding. ``--precision auto`` is
the training run's choice (:func:`~transformer_book.train.runtime.choose_precision`): a
product of the model's feed-forward size timed in fp32 and in 16 bits on the device, bf16
autocast (fp16 with loss scaling on a GPU without native bf16) where it is clearly faster,
else fp32; the choice, why and its timings are in the record (``precision_choice``).

Each mode (``eager``, then ``compile``: ``torch.compile(model, fullgraph=True)``) gets a
fresh model, ``--warmup`` untimed steps (the compilation happens in the first) and
``--steps`` timed ones, each ended by the step's own read of the loss (a synchronisation).
Reported per mode: seconds per step (median and mean), tokens/s (source + target, as the
training loop counts them), the achieved FLOP/s by
:func:`~transformer_book.analysis.compute.training_flops` (the model's count, 3 x the
forward's matrix products), the same from ``torch.utils.flop_counter.FlopCounterMode`` run
on one step of the same batch (both are reported, with their ratio; on a CPU the count runs
attention through the MATH backend, since the counter has no formula for the CPU's fused
kernel), and MFU against the device's dense peak for the precision in
:data:`~transformer_book.analysis.compute.HARDWARE` (``null`` for a device the table lacks,
a CPU for one). nanoGPT's 37 % on an A100 is the mark the course aims to beat on an
H100/H200-class GPU.

The JSON record goes to ``--results`` (``mfu-<config>-<device>-<UTC time>.json``, written by
:func:`~transformer_book.util.records.write_record`) and its path is printed as
``record: PATH``. A mode that fails (e.g. ``torch.compile`` without a working compiler) is
recorded with its error, the others still run, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from transformer_book.analysis.compute import (
    find_accelerator,
    mfu,
    peak_flops,
    training_flops,
    transformer_flops,
)
from transformer_book.data.tokenizer import BOS_ID
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.config import RunConfig, load_run_config
from transformer_book.train.corpus import StepBatch
from transformer_book.train.objective import make_optimizer
from transformer_book.train.runtime import choose_precision, make_scaler
from transformer_book.train.step import Trainer, train_step
from transformer_book.util.env import device_name, get_device
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record
from transformer_book.util.timing import Stopwatch
from transformer_book.util.validation import BookError

ROOT = Path(__file__).resolve().parents[1]
MODES = ("eager", "compile")
FIRST_ID = 4  # ids 0-3 are <pad>, <bos>, <eos>, <unk>


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "base.toml",
                        help="run config whose [model] is measured (default: the base model)")
    parser.add_argument("--device", default=None, help="cuda, cpu, ... (default: the best)")
    parser.add_argument("--tokens", type=int, default=25_000, help="tokens per side a step")
    parser.add_argument("--length", type=int, default=32, help="tokens per sentence")
    parser.add_argument("--steps", type=int, default=100, help="timed steps per mode")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--precision", default="auto", help="auto, bf16, fp16 or fp32")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    for name in ("tokens", "length", "steps", "warmup"):
        minimum = 0 if name == "warmup" else 1
        if getattr(args, name) < minimum:
            parser.error(f"--{name}: expected an integer >= {minimum}, received "
                         f"{getattr(args, name)}")
    if args.tokens < args.length:
        parser.error(f"--tokens: expected at least --length ({args.length}) tokens, received "
                     f"{args.tokens}")
    return args


def synthetic_batch(config: TransformerConfig, tokens: int, length: int,
                    device: torch.device, seed: int) -> StepBatch:
    """``tokens // length`` pairs of ``length`` random ids a side, no padding: one micro-batch
    ``(src (B, L), tgt_in (B, L), tgt_out (B, L))``; ``tgt_in`` starts with ``<bos>``."""
    generator = torch.Generator().manual_seed(seed)
    b = tokens // length
    src = torch.randint(FIRST_ID, config.vocab_size, (b, length), generator=generator)
    tgt = torch.randint(FIRST_ID, config.vocab_size, (b, length + 1), generator=generator)
    tgt[:, 0] = BOS_ID
    micro = [(src.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device))]
    return StepBatch(micro, target_tokens=b * length, source_tokens=b * length)


def new_trainer(run_config: RunConfig, config: TransformerConfig, precision: str,
                device: torch.device, compiled: bool, backend: str, seed: int) -> Trainer:
    """A fresh model (the same weights for every mode), Adam and eq. 3 as ``[train]`` says;
    ``compiled``: the trainer calls ``torch.compile(model, fullgraph=True)``."""
    torch.manual_seed(seed)
    model = Transformer(config).to(device).train()
    t = run_config.train
    optimizer, scheduler = make_optimizer(model, config.d_model, t.warmup_steps, t.lr_factor)
    called = torch.compile(model, fullgraph=True, backend=backend) if compiled else model
    return Trainer(called, optimizer, scheduler, config.label_smoothing, precision,
                   t.clip_norm, make_scaler(precision, device))


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(trainer: Trainer, batch: StepBatch, warmup: int, steps: int,
               device: torch.device) -> dict[str, Any]:
    """Seconds of each warm-up step and each timed step (each ends with train_step's read
    of the loss, so the device has finished it) and of the timed steps together."""
    warmup_seconds = []
    for _ in range(warmup):
        with Stopwatch() as watch:
            train_step(trainer, batch)
        warmup_seconds.append(watch.seconds)
    _synchronize(device)
    per_step = []
    with Stopwatch() as total:
        for _ in range(steps):
            with Stopwatch() as watch:
                train_step(trainer, batch)
            per_step.append(watch.seconds)
        _synchronize(device)
    return {"warmup_seconds": warmup_seconds, "step_seconds": per_step,
            "total_seconds": total.seconds}


def count_flops(trainer: Trainer, batch: StepBatch, device: torch.device) -> int:
    """FLOPs ``FlopCounterMode`` counts in one training step of ``trainer`` on ``batch``
    (the MATH attention backend on a CPU, whose fused kernel the counter cannot see)."""
    backend = sdpa_kernel(SDPBackend.MATH) if device.type == "cpu" else contextlib.nullcontext()
    counter = FlopCounterMode(display=False)
    with backend, counter:
        train_step(trainer, batch)
    return counter.get_total_flops()


def peak(device: torch.device, precision: str) -> dict[str, Any]:
    """The device's table entry and dense peak for ``precision`` (``None`` if unknown)."""
    name = device_name(device)
    try:
        accelerator = find_accelerator(name) if device.type == "cuda" else None
        flops = peak_flops(accelerator.name, precision) if accelerator else None
    except BookError as error:  # a GPU the table lacks, or a precision the chip lacks
        return {"device_name": name, "accelerator": None, "peak_flops": None,
                "note": str(error)}
    return {"device_name": name, "accelerator": accelerator.name if accelerator else None,
            "peak_flops": flops,
            "note": None if flops else "no peak in compute.HARDWARE for this device"}


def summarise(timing: dict[str, Any], step_flops: int, counted: int | None,
              tokens_per_step: int, flops_per_token: float, hardware: dict[str, Any],
              precision: str) -> dict[str, Any]:
    """One mode's row: time per step, tokens/s, FLOP/s (formula and counter), MFU."""
    seconds = timing["total_seconds"] / len(timing["step_seconds"])
    tokens_per_second = tokens_per_step / seconds
    utilisation = None
    if hardware["peak_flops"]:
        utilisation = mfu(tokens_per_second, flops_per_token, hardware["accelerator"],
                          precision)
    return {
        "seconds_per_step": seconds,
        "median_seconds_per_step": statistics.median(timing["step_seconds"]),
        "tokens_per_second": tokens_per_second,
        "flops_per_second": step_flops / seconds,
        "counted_flops_per_second": counted / seconds if counted is not None else None,
        "mfu": utilisation,
        "first_step_seconds": timing["warmup_seconds"][0] if timing["warmup_seconds"] else None,
        **timing,
    }


def _max_memory(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**30


def run_mode(mode: str, args: argparse.Namespace, run_config: RunConfig,
             config: TransformerConfig, precision: str, device: torch.device,
             batch: StepBatch) -> dict[str, Any]:
    """Warm up, time and (eager only) count one mode; its row without the summary."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if mode == "compile":
        torch._dynamo.reset()
    trainer = new_trainer(run_config, config, precision, device, mode == "compile",
                          args.backend, args.seed)
    timing = time_steps(trainer, batch, args.warmup, args.steps, device)
    counted = count_flops(trainer, batch, device) if mode == "eager" else None
    parameters = sum(p.numel() for group in trainer.optimizer.param_groups
                     for p in group["params"])  # tied weights once
    return {"timing": timing, "counted": counted, "max_memory_gib": _max_memory(device),
            "parameters": parameters}


def measure_modes(args: argparse.Namespace, run_config: RunConfig, config: TransformerConfig,
                  precision: str, device: torch.device) -> dict[str, Any]:
    """Every mode of ``--modes``, one after another, each on a fresh model."""
    batch = synthetic_batch(config, args.tokens, args.length, device, args.seed)
    pairs = args.tokens // args.length
    tokens_per_step = batch.source_tokens + batch.target_tokens
    step_flops = training_flops(config, args.length, args.length, pairs)
    hardware = peak(device, precision)
    modes: dict[str, Any] = {}
    counted, parameters = None, None
    for mode in args.modes:
        try:
            result = run_mode(mode, args, run_config, config, precision, device, batch)
        except (RuntimeError, AssertionError, NotImplementedError, OSError) as error:
            traceback.print_exc()
            modes[mode] = {"error": f"{type(error).__name__}: {error}".splitlines()[0]}
            continue
        counted = result["counted"] if result["counted"] is not None else counted
        parameters = result["parameters"]
        modes[mode] = {**summarise(result["timing"], step_flops, counted, tokens_per_step,
                                   step_flops / tokens_per_step, hardware, precision),
                       "max_memory_gib": result["max_memory_gib"]}
    return {"parameters": parameters,
            "batch": {"pairs": pairs, "length": args.length, "tokens_per_step": tokens_per_step},
            "hardware_peak": hardware, "flops_per_step": step_flops,
            "counted_flops_per_step": counted,
            "counted_over_formula": counted / step_flops if counted is not None else None,
            "forward_breakdown": transformer_flops(config, args.length, args.length,
                                                   pairs).as_dict(),
            "modes": modes}


def _print(record: dict[str, Any]) -> None:
    peak_info = record["hardware_peak"]
    print(f"{record['config']}: {record['parameters'] or 0:,} parameters, "
          f"{record['batch']['tokens_per_step']:,} tokens a step, {record['precision']} on "
          f"{peak_info['device_name']} (peak {peak_info['peak_flops'] or 'unknown'})")
    ratio = record["counted_over_formula"]
    print(f"FLOPs a step: {record['flops_per_step']:.4g} (formula), "
          f"{record['counted_flops_per_step'] or float('nan'):.4g} (FlopCounterMode), "
          f"ratio {ratio if ratio is not None else float('nan'):.4f}")
    for mode, row in record["modes"].items():
        if "error" in row:
            print(f"{mode}: failed: {row['error']}")
            continue
        shown = f"{100 * row['mfu']:.1f} %" if row["mfu"] is not None else "n/a"
        print(f"{mode}: {1000 * row['seconds_per_step']:.1f} ms/step, "
              f"{row['tokens_per_second']:,.0f} tokens/s, "
              f"{row['flops_per_second'] / 1e12:.2f} TFLOP/s, MFU {shown}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        device = get_device(args.device)
        run_config = load_run_config(args.config)
        config = run_config.model_config(run_config.data.vocab_size)
        choice = choose_precision(args.precision, device, width=(config.d_model, config.d_ff))
        precision = choice.precision
    except BookError as error:
        print(f"mfu: error: {error}", file=sys.stderr)
        return 2
    measured = measure_modes(args, run_config, config, precision, device)
    command = command_line(None if argv is None else ["benchmarks/mfu.py", *argv])
    record = {"kind": "mfu", "command": command,
              "git": git_commit(), "hardware": hardware_info(device),
              "config": args.config.stem, "model_config": config.to_dict(),
              "precision": precision, "precision_choice": choice.as_record(),
              "steps": args.steps, "warmup": args.warmup,
              "backend": args.backend, **measured}
    _print(record)
    path = write_record(args.results, "mfu", f"{args.config.stem}-{device.type}", record)
    print(f"record: {path}")
    return 1 if any("error" in row for row in measured["modes"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())

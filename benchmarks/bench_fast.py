"""The package's opt-in fast paths against the default ones: dropout's cheaper masks, the
fused generator and loss, and greedy search's static key/value cache.

Usage: ``python benchmarks/bench_fast.py [--quick] [--clock cpu] [--json PATH]``; ``make
bench`` runs it through ``run_all.py``.

Rows (``ratio = reference seconds / ours``, > 1: the fast path is faster), each timed in
one process, on one intra-op thread, in interleaved repeats (medians), the CPU and the load
average before and after named in every row (``cpu``, ``load_average``):

- ``dropout``: :func:`~transformer_book.nn.dropout.fast_dropout` against ``F.dropout``,
  forward and backward, p = 0.2, on the residual stream of a step of ``configs/small.toml``'s
  model as ``bench_peers`` times it (64 pairs of 16 tokens: ``(64, 16, 256)``), in fp32 and
  in bf16 (the dtype the sub-layers give dropout under CPU bf16 autocast). Goal 1.
- ``train step``: that whole step (forward, label-smoothed loss, backward, Adam; dropout 0.2)
  with :func:`~transformer_book.nn.dropout.use_fast_dropout` against the same model with
  ``nn.Dropout``, in fp32 and under bf16 autocast (``precision = "bf16"``; what ``"auto"``
  picks on this CPU, and why, is in the row: :func:`~transformer_book.train.runtime.
  choose_precision`). At full size the row also gives the share of each step's self CPU
  time spent drawing masks (``mask_share``: ``bernoulli_``; ``random_`` and ``ge``), from
  ``torch.profiler``. Goal 1.
- ``train step --fast``: the same step with both fast paths (``transformer-book train
  --fast``: those masks, and the generator and loss in one pass,
  :mod:`~transformer_book.train.fused_loss`) against the plain one. Goal 1.
  The bf16 step rows are timed only where ``"auto"`` picks bf16 on this CPU.
- ``regional torch.compile`` (full size only): the plain fp32 step with each encoder and
  decoder layer compiled in place (``layer.compile()``, inductor) against eager; the row holds
  the seconds the first, compiling, call took (``compile_seconds``). Goal 1.
- ``greedy static cache``: ``greedy_decode(cache="static")``
  (:class:`~transformer_book.nn.kv_cache.StaticDecoderCache`) against the default growing
  cache, the small preset with random weights in eval mode, 50 tokens (``min_len`` fixes the
  steps, as in ``bench_decode``), at batch 64 and batch 1. Goal 1.
- ``decoding steps unchecked``: the cached decoding steps of that model with the modules'
  own checks switched off (:func:`~transformer_book.util.validation.unchecked`, as
  :func:`~transformer_book.inference.generate.generate`'s loop runs them) against the same
  steps checked, at batch 64 and batch 1. Goal 1.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from _common import command_line, measure, medians, one_thread  # benchmarks/_common.py
from bench_peers import FAST, make_batch, profile, small_config, steps

from transformer_book.inference.greedy import greedy_decode
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.dropout import fast_dropout, use_fast_dropout
from transformer_book.nn.transformer import Transformer
from transformer_book.train.runtime import choose_precision
from transformer_book.util.env import cpu_name
from transformer_book.util.validation import unchecked

FULL = dict(batch=64, length=16, repeats=7, decode_batches=(64, 1), decode_steps=50,
            decode_repeats=5, quick=False)
QUICK = dict(batch=4, length=8, repeats=2, decode_batches=(4,), decode_steps=8,
             decode_repeats=1, quick=True)
#: The operators that draw dropout masks: nn.Dropout's, and fast_dropout's draw and compare.
MASK_OPS = {"reference": ("aten::bernoulli_",), "ours": ("aten::random_", "aten::ge")}
P_DROP = 0.2
GOAL = 1.0


def run(quick: bool = False, clock: str = "wall") -> list[dict]:
    """Every row at the quick or full size (see the module docstring)."""
    size = QUICK if quick else FULL
    cpu = cpu_name()
    rows: list[dict] = []
    with one_thread():
        for name, timed in [*_dropout_rows(size, clock), *_step_rows(size, clock),
                            *_compile_rows(size, clock), *_decode_rows(size, clock)]:
            load = list(os.getloadavg())
            row = timed()
            rows.append({**row, "name": f"{name} ({cpu}, 1 thread)", "unit": "s",
                         "ratio": row["reference"] / row["ours"], "goal": GOAL, "cpu": cpu,
                         "clock": clock, "load_average": [load[0], os.getloadavg()[0]]})
    return rows


Timed = tuple[str, Callable[[], dict[str, Any]]]


def _pair(calls: dict[str, Callable[[], object]], repeats: int, clock: str
          ) -> dict[str, Any]:
    """``ours`` and ``reference`` medians of interleaved repeats."""
    t = medians(measure(calls, repeats, clock=clock))
    return {"ours": t["ours"], "reference": t["reference"]}


def _dropout_rows(size: dict, clock: str) -> list[Timed]:
    shape = (size["batch"], size["length"], 256)  # the small preset's residual stream

    def timed(dtype: torch.dtype) -> dict[str, Any]:
        torch.manual_seed(0)
        x = torch.randn(shape, dtype=dtype, requires_grad=True)
        grad = torch.randn(shape, dtype=dtype)
        calls = {"ours": lambda: fast_dropout(x, P_DROP).backward(grad),
                 "reference": lambda: F.dropout(x, P_DROP, True).backward(grad)}
        return _pair(calls, size["repeats"] * 3, clock)

    label = "x".join(map(str, shape))
    return [(f"dropout p={P_DROP} fwd+bwd {label} {name}, fast_dropout vs F.dropout",
             lambda dtype=dtype: timed(dtype))  # type: ignore[misc]
            for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))]


def _step_rows(size: dict, clock: str) -> list[Timed]:
    config = small_config()
    choice = choose_precision("auto", "cpu", width=(config.d_model, config.d_ff))

    def timed(precision: str, fused: bool) -> dict[str, Any]:
        src, tgt = make_batch(config, size["batch"], size["length"])
        torch.manual_seed(0)
        plain = Transformer(config).train()
        fast = Transformer(config).train()
        fast.load_state_dict(plain.state_dict())
        use_fast_dropout(fast)
        named = steps({FAST if fused else "ours": fast, "reference": plain}, src, tgt, precision)
        calls = {"ours": named[FAST if fused else "ours"], "reference": named["reference"]}
        row = {**_pair(calls, size["repeats"], clock), "auto_precision": choice.precision,
               "auto_reason": choice.reason}
        if not size.get("quick") and not fused:  # where the step's time goes: the masks' share
            row["mask_share"] = {name: _share(profile(call, 2), MASK_OPS[name])
                                 for name, call in (("ours", calls["ours"]),
                                                    ("reference", calls["reference"]))}
        return row

    label = f"{size['batch']}x{size['length']}+{size['length']}"
    # bf16 only where "auto" would train in it (emulated bf16 takes seconds a step)
    precisions = ["fp32"] + (["bf16"] if choice.precision == "bf16" else [])
    return [(f"train step small {label} {precision}, "
             + ("--fast (masks + fused loss) vs plain" if fused else
                "fast dropout vs nn.Dropout"),
             lambda precision=precision, fused=fused: timed(precision, fused))  # type: ignore[misc]
            for precision in precisions for fused in (False, True)]


def _compile_rows(size: dict, clock: str) -> list[Timed]:
    """Regional compilation at full size only (compiling takes a minute or more)."""
    if size.get("quick"):
        return []
    config = small_config()

    def timed() -> dict[str, Any]:
        src, tgt = make_batch(config, size["batch"], size["length"])
        torch.manual_seed(0)
        plain = Transformer(config).train()
        compiled = Transformer(config).train()
        compiled.load_state_dict(plain.state_dict())
        for layer in [*compiled.encoder.layers, *compiled.decoder.layers]:
            layer.compile()  # in place: each layer's forward (and backward) compiled
        calls = steps({"ours": compiled, "reference": plain}, src, tgt, "fp32")
        started = time.perf_counter()
        calls["ours"]()  # the first call compiles
        return {**_pair(calls, size["repeats"], clock),
                "compile_seconds": time.perf_counter() - started}

    label = f"{size['batch']}x{size['length']}+{size['length']}"
    return [(f"train step small {label} fp32, regional torch.compile (each layer) vs eager",
             timed)]


def _share(top: list[dict[str, Any]], ops: tuple[str, ...]) -> float:
    """The share of a step's self CPU time spent in ``ops`` (from :func:`profile`'s rows)."""
    return sum(row["share"] for row in top if row["op"] in ops)


def _decode_rows(size: dict, clock: str) -> list[Timed]:
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("small", 8000, max_len=128)).eval()
    steps_ = size["decode_steps"]
    fixed = dict(max_len_a=0.0, max_len_b=steps_, min_len=steps_)

    def timed(batch: int) -> dict[str, Any]:
        src = torch.randint(4, 8000, (batch, 20))
        same = greedy_decode(model, src, cache="static", **fixed) == \
            greedy_decode(model, src, **fixed)
        calls = {"ours": lambda: greedy_decode(model, src, cache="static", **fixed),
                 "reference": lambda: greedy_decode(model, src, **fixed)}
        return {**_pair(calls, size["decode_repeats"], clock), "same_tokens": same}

    def unchecked_steps(batch: int) -> dict[str, Any]:
        src = torch.randint(4, 8000, (batch, 20))
        with torch.no_grad():
            memory = model.encode(src)

        def steps() -> None:  # the cached decoding steps generate's loop runs
            cache, token = model.new_cache(), torch.full((batch, 1), 1)
            with torch.no_grad():
                for _ in range(steps_):
                    model.decode(token, memory, src, cache=cache)

        def unchecked_loop() -> None:
            with unchecked():
                steps()

        return _pair({"ours": unchecked_loop, "reference": steps}, size["decode_repeats"],
                     clock)

    return [*[(f"greedy static cache vs growing cache, B={batch}, {steps_} tokens",
               lambda batch=batch: timed(batch))  # type: ignore[misc]
              for batch in size["decode_batches"]],
            *[(f"decoding steps unchecked vs checked, B={batch}, {steps_} steps",
               lambda batch=batch: unchecked_steps(batch))  # type: ignore[misc]
              for batch in size["decode_batches"]]]


def _print(rows: list[dict]) -> None:
    width = max([len(r["name"]) for r in rows] + [10])
    print(f"{'benchmark':<{width}} | {'ours s':>9} {'ref s':>9} | {'ratio':>6} | load")
    for r in rows:
        print(f"{r['name']:<{width}} | {r['ours']:9.4f} {r['reference']:9.4f} | "
              f"{r['ratio']:6.2f} | {r['load_average'][0]:.2f} -> {r['load_average'][1]:.2f}")


main = command_line(__doc__, run, _print)


if __name__ == "__main__":
    main()

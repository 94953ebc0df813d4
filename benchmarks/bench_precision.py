"""bf16 autocast against fp32 on this CPU: the product ``"auto"`` times, then a training step.

Usage: ``python benchmarks/bench_precision.py [--quick] [--json PATH]``.

The first row is what ``[train] precision = "auto"`` measures before a run
(:func:`~transformer_book.train.runtime.choose_precision`): one product of the small preset's
feed-forward size, ``(rows, 256) @ (256, 1024)``, under bf16 autocast and in fp32, the median
of a few, with the shape reached, the choice it makes and why. Where it picks bf16 (a CPU
that multiplies bf16 in hardware: AVX512-BF16 or AMX), two more rows time what that choice
does to a training step: under bf16 autocast the projections, the feed-forward layers and
the generator multiply in bf16, while attention's core stays in fp32
(:func:`~transformer_book.nn.attention.fast_attention`), because torch's CPU
flash-attention backward is far slower in bf16; the last row times that: the same bf16 step
with the core left to autocast (in bf16), against the fp32 core. Where ``"auto"`` picks
fp32 (bf16 only emulated, many times slower), a step in bf16 would take minutes and is not
timed: the product's row says why.

One step is the course's :func:`~transformer_book.train.step.train_step` (forward,
label-smoothed cross-entropy, backward, Adam, the step-size schedule) on a batch of
~4,500 target tokens of random ids at the small preset (``configs/small.toml``'s model,
dropout 0.2), on 2 intra-op threads as the course's CPU run uses them. ``ratio`` is fp32
time / bf16 time (>= 1: bf16 at least as fast); the goal, 1.2, is the margin from which
``"auto"`` picks bf16. Every row names the CPU (``cpu``): the ratios belong to it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from unittest import mock

import torch
import torch.nn.functional as F
from _common import command_line, measure  # benchmarks/_common.py

from transformer_book.nn import attention
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.train.corpus import make_step_batch
from transformer_book.train.objective import make_optimizer
from transformer_book.train.runtime import choose_precision
from transformer_book.train.step import Trainer, train_step
from transformer_book.util.env import cpu_name, torch_threads

VOCAB = 8000
THREADS = 2
FULL = dict(batch=160, length=28)  # 4,480 target tokens, as configs/small.toml's batches
QUICK = dict(batch=32, length=16)


def _core_in_autocast(q, k, v, mask, is_causal, dropout_p):
    """The fused core without the fp32 detour: SDPA as autocast leaves it (bf16)."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    if is_causal:
        mask = attention.with_causal(mask, q.shape[-2], k.shape[-2], q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


def _config(length: int) -> TransformerConfig:
    return TransformerConfig.preset("small", VOCAB, dropout=0.2, max_len=length + 2)


def _stepper(precision: str, batch: int, length: int) -> Callable[[], None]:
    config = _config(length)
    torch.manual_seed(0)
    model = Transformer(config).train()
    optimizer, scheduler = make_optimizer(model, config.d_model, warmup_steps=400)
    trainer = Trainer(model, optimizer, scheduler, label_smoothing=0.1, precision=precision,
                      clip_norm=1.0)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, VOCAB, (batch, length), generator=g).tolist()
    tgt = torch.randint(4, VOCAB, (batch, length), generator=g).tolist()
    step_batch = make_step_batch(src, tgt, [list(range(batch))], torch.device("cpu"))
    return lambda: train_step(trainer, step_batch)


def _product_row(cpu: str, config: TransformerConfig) -> dict:
    """What "auto" times and picks on this CPU (wall clock: the choice's own timer)."""
    choice = choose_precision("auto", "cpu", width=(config.d_model, config.d_ff))
    seconds = choice.seconds
    return {"name": f"feed-forward product small, bf16 autocast vs fp32 ({cpu}, "
                    f"{THREADS} threads)",
            "unit": "ms", "ours": 1e3 * seconds["bf16"], "reference": 1e3 * seconds["fp32"],
            "ratio": choice.speedup, "goal": 1.2, "clock": "wall", "cpu": cpu,
            "threads": THREADS, "shape": list(choice.shape), "auto": choice.precision,
            "reason": choice.reason}


def run(quick: bool = False, clock: str = "wall") -> list[dict]:
    """The product "auto" times; where it picks bf16, fp32 against bf16 autocast (fp32
    core) for a step, and the fp32 core against a bf16 core."""
    size = QUICK if quick else FULL
    repeats = 3 if quick else 5
    tokens = size["batch"] * (2 * size["length"] + 1)  # source + target (with <eos>)
    cpu = cpu_name()
    with torch_threads(THREADS), torch.enable_grad():
        product = _product_row(cpu, _config(size["length"]))
        if product["auto"] != "bf16":
            return [product]
        steps = {name: _stepper(name, **size) for name in ("fp32", "bf16")}
        times = measure(steps, repeats=repeats, warmup=2, clock=clock)
        with mock.patch.object(attention, "fast_attention", _core_in_autocast):
            core_times = measure({"bf16 core": _stepper("bf16", **size)}, repeats=repeats,
                                 warmup=2, clock=clock)
    t = {name: statistics.median(ts) for name, ts in {**times, **core_times}.items()}
    return [
        product,
        {"name": f"train step small, bf16 autocast vs fp32 ({cpu}, {THREADS} threads, "
                 f"{tokens} tokens)",
         "unit": "tokens/s", "ours": tokens / t["bf16"], "reference": tokens / t["fp32"],
         "ratio": t["fp32"] / t["bf16"], "goal": 1.2, "clock": clock, "cpu": cpu,
         "threads": THREADS},
        {"name": f"train step small bf16, attention core fp32 vs bf16 ({cpu}, {THREADS} "
                 "threads)",
         "unit": "tokens/s", "ours": tokens / t["bf16"], "reference": tokens / t["bf16 core"],
         "ratio": t["bf16 core"] / t["bf16"], "goal": 1.0, "clock": clock, "cpu": cpu,
         "threads": THREADS},
    ]


def _print(rows: list[dict]) -> None:
    for r in rows:
        print(f"{r['name']:<80} | {r['ours']:9.2f} {r['reference']:9.2f} {r['unit']} | "
              f"{r['ratio']:5.2f} (goal {r['goal']})")
    product = rows[0]
    print(f"precision 'auto' picks {product['auto']} here: {product['reason']}")
    if len(rows) == 1:
        print("a bf16 training step is not timed where 'auto' keeps fp32")


main = command_line(__doc__, run, _print)


if __name__ == "__main__":
    main()

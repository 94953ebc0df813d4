"""A training step in the precision ``"auto"`` picks on this CPU, against the same step in fp32.

Usage: ``python benchmarks/bench_precision.py [--quick] [--json PATH]``.

On a CPU with bf16 matrix units (Intel AMX, :func:`~transformer_book.train.runtime.
cpu_has_native_bf16`), ``[train] precision = "auto"`` trains under bf16 autocast: the
projections, the feed-forward layers and the generator multiply in bf16, while attention's
core stays in fp32 (:func:`~transformer_book.nn.attention.fast_attention`), because torch's
CPU flash-attention backward is far slower in bf16. A second row times that choice: the
same bf16 step with the core left to autocast (in bf16), against the fp32 core.

One step is the course's :func:`~transformer_book.train.step.train_step` (forward,
label-smoothed cross-entropy, backward, Adam, the step-size schedule) on a batch of
~4,500 target tokens of random ids at the small preset (``configs/small.toml``'s model,
dropout 0.2), on 2 intra-op threads as the course's CPU run uses them. ``ratio`` is fp32
time / bf16 time (>= 1: bf16 at least as fast); the goal, 1.2, is what makes it worth
changing the arithmetic. On a CPU without AMX, ``"auto"`` is fp32 and there is nothing to
compare: the benchmark returns no rows.
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
from transformer_book.train.runtime import cpu_has_native_bf16
from transformer_book.train.step import Trainer, train_step
from transformer_book.util.env import torch_threads

VOCAB = 8000
FULL = dict(batch=160, length=28)  # 4,480 target tokens, as configs/small.toml's batches
QUICK = dict(batch=32, length=16)


def _core_in_autocast(q, k, v, mask, is_causal, dropout_p):
    """The fused core without the fp32 detour: SDPA as autocast leaves it (bf16)."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    if is_causal:
        mask = attention.with_causal(mask, q.shape[-2], k.shape[-2], q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


def _stepper(precision: str, batch: int, length: int) -> Callable[[], None]:
    config = TransformerConfig.preset("small", VOCAB, dropout=0.2, max_len=length + 2)
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


def run(quick: bool = False, clock: str = "wall") -> list[dict]:
    """fp32 against bf16 autocast (fp32 core), and the fp32 core against a bf16 core."""
    if not cpu_has_native_bf16():
        print("this CPU has no bf16 matrix units (AMX): precision 'auto' is fp32 here")
        return []
    size = QUICK if quick else FULL
    repeats = 3 if quick else 5
    tokens = size["batch"] * (2 * size["length"] + 1)  # source + target (with <eos>)
    with torch_threads(2), torch.enable_grad():
        steps = {name: _stepper(name, **size) for name in ("fp32", "bf16")}
        times = measure(steps, repeats=repeats, warmup=2, clock=clock)
        with mock.patch.object(attention, "fast_attention", _core_in_autocast):
            core_times = measure({"bf16 core": _stepper("bf16", **size)}, repeats=repeats,
                                 warmup=2, clock=clock)
    t = {name: statistics.median(ts) for name, ts in {**times, **core_times}.items()}
    return [
        {"name": f"train step small, bf16 autocast vs fp32 (CPU, 2 threads, {tokens} tokens)",
         "unit": "tokens/s", "ours": tokens / t["bf16"], "reference": tokens / t["fp32"],
         "ratio": t["fp32"] / t["bf16"], "goal": 1.2, "clock": clock},
        {"name": "train step small bf16, attention core fp32 vs bf16 (CPU, 2 threads)",
         "unit": "tokens/s", "ours": tokens / t["bf16"], "reference": tokens / t["bf16 core"],
         "ratio": t["bf16 core"] / t["bf16"], "goal": 1.0, "clock": clock},
    ]


def _print(rows: list[dict]) -> None:
    for r in rows:
        print(f"{r['name']:<72} | {r['ours']:8.0f} {r['reference']:8.0f} tok/s | "
              f"{r['ratio']:5.2f} (goal {r['goal']})")


main = command_line(__doc__, run, _print)


if __name__ == "__main__":
    main()

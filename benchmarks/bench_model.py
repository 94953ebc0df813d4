"""Speed of a training step of our Transformer against the same model built from ``nn.Transformer``.

Usage: ``python benchmarks/bench_model.py [--quick] [--json PATH]``.

One step = forward + label-smoothed cross-entropy + backward + Adam step, on a padded batch of
random token ids (lengths drawn like real sentences, right-padded). The reference is
``nn.Transformer(batch_first=True)`` with the same dimensions and weights, a shared
``nn.Embedding`` (× √d_model), sinusoidal positions, a tied generator, the bool causal mask
and the three key-padding masks -- what a careful user of PyTorch's module would write.
Both run in training mode with dropout 0.1 (``nn.Transformer`` applies one more dropout, inside
the feed-forward network) and, in a second row, with dropout 0 (identical arithmetic).

Each row reports tokens/s (source + target tokens) for ``ours`` and ``reference`` and
``ratio = ours / reference`` (>= 1 means ours is at least as fast). Timings are medians of
interleaved repeats in one process, after warmup (``ratio_best``: best-of-repeats), on one
intra-op thread (the 2 CPU cores of the course machine are shared; one thread keeps the ratio
steady under load). ``--clock cpu`` times this process's CPU seconds instead of wall time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _common import command_line, measure, one_thread  # benchmarks/_common.py
from torch import nn

from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.positional import sinusoidal_encoding
from transformer_book.nn.transformer import Transformer

VOCAB = 8000
FULL = dict(batch=64, max_len=32)  # ~4000 source + target tokens per batch, as asked
QUICK = dict(batch=16, max_len=24)


class Reference(nn.Module):
    """``nn.Transformer`` with shared embeddings, sinusoidal positions and a tied generator."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.Transformer(
            config.d_model, config.num_heads, config.num_encoder_layers,
            config.num_decoder_layers, config.d_ff, config.dropout, batch_first=True)
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.generator = nn.Linear(config.d_model, config.vocab_size)
        self.generator.weight = self.embedding.weight
        self.dropout = nn.Dropout(config.dropout)
        self.register_buffer("pe", sinusoidal_encoding(config.max_len, config.d_model))

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids) * math.sqrt(self.config.d_model) + self.pe[: ids.shape[1]]
        return self.dropout(x)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        pad = self.config.pad_id
        t = tgt.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).triu(1)  # True = masked
        h = self.transformer(self.embed(src), self.embed(tgt), tgt_mask=causal,
                             src_key_padding_mask=src == pad, tgt_key_padding_mask=tgt == pad,
                             memory_key_padding_mask=src == pad, tgt_is_causal=True)
        return self.generator(h)


def make_batch(batch: int, max_len: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random right-padded ``src (B, S)``, ``tgt (B, T+1)``, lengths in [max_len/2, max_len]."""
    g = torch.Generator().manual_seed(seed)
    ids = []
    for length in (max_len, max_len + 1):
        x = torch.randint(4, VOCAB, (batch, length), generator=g)
        lengths = torch.randint(length // 2, length + 1, (batch,), generator=g)
        lengths[0] = length
        x[torch.arange(length)[None, :] >= lengths[:, None]] = 0
        ids.append(x)
    return ids[0], ids[1]


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, src: torch.Tensor,
          tgt: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        logits = model(src, tgt[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1),
                               ignore_index=0, label_smoothing=0.1)
        loss.backward()
        optimizer.step()

    return step


def equal_models(max_len: int, dropout: float, preset: str = "small"
                 ) -> tuple[Reference, Transformer]:
    """The reference and ours with the same weights: ours in nn.Transformer's layout (final
    norms, a generator bias), so that the weights copy one to one."""
    config = TransformerConfig.preset(preset, VOCAB, dropout=dropout, max_len=max_len + 1,
                                      final_norm=True, generator_bias=True)
    torch.manual_seed(0)
    ref = Reference(config)
    return ref, Transformer.from_torch(ref.transformer, ref.embedding, ref.generator, config)


def bench_one(batch: int, max_len: int, dropout: float, repeats: int, clock: str = "wall") -> dict:
    """One training-step comparison at the small preset's dimensions."""
    ref, ours = equal_models(max_len, dropout)
    ref, ours = ref.train(), ours.train()
    src, tgt = make_batch(batch, max_len)
    tokens = int((src != 0).sum() + (tgt[:, :-1] != 0).sum())
    adam = dict(lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    times = measure({
        "ours": _step(ours, torch.optim.Adam(ours.parameters(), **adam), src, tgt),
        "reference": _step(ref, torch.optim.Adam(ref.parameters(), **adam), src, tgt),
    }, repeats=repeats, warmup=2, clock=clock)
    seconds = {name: statistics.median(ts) for name, ts in times.items()}
    best = {name: min(ts) for name, ts in times.items()}
    return {
        "name": f"train step small B={batch} L<={max_len} dropout={dropout}",
        "unit": "tokens/s",
        "ours": tokens / seconds["ours"],
        "reference": tokens / seconds["reference"],
        "ratio": seconds["reference"] / seconds["ours"],
        "ratio_best": best["reference"] / best["ours"],  # best-of-repeats, less load-sensitive
        "tokens": tokens,
        "clock": clock,
        "threads": torch.get_num_threads(),
    }


def run(quick: bool = False, clock: str = "wall") -> list[dict]:
    """Dropout 0.1 (training as in the paper) then dropout 0 (the same arithmetic).

    ``clock="cpu"`` times with ``time.process_time`` (this process's CPU seconds; with one
    thread it ignores time other processes take from us); ``"wall"`` is what a user sees.
    """
    size = QUICK if quick else FULL
    repeats = 3 if quick else 5
    with one_thread(), torch.enable_grad():
        return [bench_one(**size, dropout=p, repeats=repeats, clock=clock)
                for p in (0.1, 0.0)]


def _print(rows: list[dict]) -> None:
    print(f"{'benchmark':<44} | {'ours tok/s':>11} {'ref tok/s':>11} | {'ratio':>6} {'best':>6}")
    for r in rows:
        print(f"{r['name']:<44} | {r['ours']:11.0f} {r['reference']:11.0f} | {r['ratio']:6.2f} "
              f"{r['ratio_best']:6.2f}")


main = command_line(__doc__, run, _print)


if __name__ == "__main__":
    main()

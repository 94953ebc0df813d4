"""What greedy and beam search share: the checks at their entry, evaluation mode, and the
decoder stepped one token at a time with a key/value cache (Section 6.1).

KV cache: the decoder keeps each layer's self-attention keys and values and extends them by
one token per step, so step t costs O(t) instead of re-running the whole prefix (O(t²));
the cross-attention keys and values are projected from the encoder output once per
sentence (:class:`~transformer_book.nn.kv_cache.DecoderCache`). With ``cache="static"``, the
stepper keeps them in a :class:`~transformer_book.nn.kv_cache.StaticDecoderCache` instead,
allocated once to the longest output and written in place. With ``"compiled"``, each
step runs ``torch.compile``'s code for the decoder (inductor: fused kernels, far fewer
operations issued from Python), compiled once per process for each kind of step it meets
(the first step, later ones, one sentence left): tens of seconds on a CPU
(``benchmarks/bench_engines.py`` records it), which only a long decoding pays back.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from transformer_book.nn.kv_cache import DecoderCache, StaticDecoderCache
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import require, require_int

__all__ = ["CACHES", "Stepper", "check_decoding", "evaluation_mode"]

#: The decoder's key/value caches a search may use (:class:`Stepper`): the same tokens.
CACHES = ("growing", "static", "compiled", "none")


@contextmanager
def evaluation_mode(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no gradients; the model's mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def check_decoding(model: Transformer, src_ids: torch.Tensor, min_len: int) -> None:
    """The checks every search runs once, at its entry: a :class:`Transformer`, source ids
    it can read (values included: the one host-device synchronisation), ``min_len >= 0``."""
    require(isinstance(model, Transformer), "model", "a transformer_book Transformer",
            type(model).__name__)
    model.check_ids(src_ids, "src_ids")
    require_int(min_len, "min_len", minimum=0)
    require(model.config.max_len >= 2, "model", "config.max_len >= 2 to decode",
            model.config.max_len)


class Stepper:
    """The decoder, one step at a time, for N hypotheses of B source sentences.

    ``step(fed) -> (N, V)``: log-probabilities of the next token (or, with
    ``normalize=False``, the logits, which rank the tokens the same: greedy search needs
    only the best one); ``<pad>`` and ``<bos>`` get ``-inf``. ``fed`` is the last token of
    each hypothesis ``(N, 1)`` (with a cache, which holds the past), or the whole prefix
    ``(N, t)`` (``cache="none"``: the same results, O(t²) work). The N rows hold G = N / B
    hypotheses for each sentence of ``src_ids (B, S)`` and ``memory (B, S, d_model)``, rows
    ``i·G .. i·G + G - 1`` for sentence i.

    ``reorder(rows)`` makes the cache follow ``rows`` (long ``(N',)``) of the previous
    step's hypotheses (beam search). ``select(sentences, rows)`` keeps only ``sentences``
    (long ``(B',)``), source and memory included, so that finished sentences stop costing
    work, and makes the cache follow ``rows`` of theirs in the same copy.

    ``cache`` is one of :data:`CACHES`: ``"growing"`` (a
    :class:`~transformer_book.nn.kv_cache.DecoderCache`), ``"static"`` (a
    :class:`~transformer_book.nn.kv_cache.StaticDecoderCache` of ``max_length`` positions:
    the same scores, no growing buffers), ``"compiled"`` (that cache, the decoder run as
    ``torch.compile(model.decode, dynamic=True)``: the same scores up to float rounding, the
    same tokens, tested in float64) or ``"none"``.
    """

    def __init__(self, model: Transformer, src_ids: torch.Tensor, memory: torch.Tensor,
                 cache: str = "growing", normalize: bool = True, max_length: int = 1) -> None:
        self.model, self.src, self.memory, self.normalize = model, src_ids, memory, normalize
        self.decode = (torch.compile(model.decode, dynamic=True) if cache == "compiled"
                       else model.decode)
        self.cache: DecoderCache | None = None
        if cache == "growing":
            self.cache = model.new_cache()
        elif cache in ("static", "compiled"):
            self.cache = StaticDecoderCache(max_length=max_length)
        config = model.config
        self.never = torch.tensor([config.pad_id, config.bos_id], device=src_ids.device)

    def step(self, fed: torch.Tensor) -> torch.Tensor:
        logits = self.decode(fed, self.memory, self.src, cache=self.cache)  # (N, T, V)
        assert isinstance(logits, torch.Tensor), "decode without need_weights: a tensor"
        # (N, T, V) -> (N, V), in float32 at least (bf16/fp16 logits are promoted; a float64
        # model keeps float64, so a float64 reference can check the search exactly).
        scores = logits[:, -1].to(torch.promote_types(logits.dtype, torch.float32)).contiguous()
        if self.normalize:
            torch.log_softmax(scores, dim=-1, out=scores)  # in place: no second (N, V) tensor
        return scores.index_fill_(1, self.never, -math.inf)  # never generate <pad> or <bos>

    def reorder(self, rows: torch.Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(rows)

    def select(self, sentences: torch.Tensor, rows: torch.Tensor) -> None:
        self.src = self.src.index_select(0, sentences)  # (B, S) -> (B', S)
        self.memory = self.memory.index_select(0, sentences)  # (B', S, d_model)
        if self.cache is not None and self.cache.batch_size is not None:
            self.cache.select(sentences, rows)

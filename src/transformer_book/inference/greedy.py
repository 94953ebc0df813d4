"""Greedy search: the most probable next token, until ``<eos>`` (Vaswani et al., 2017,
Section 6.1, with beam size 1), batched, with the decoder's key/value cache.

Outputs are lists of token ids without ``<bos>``, ``<eos>`` or padding. Each sentence may
generate :func:`~transformer_book.inference.lengths.output_length_limits` tokens: by
default its source length + 50 (Section 6.1), within the positions the model has.
:func:`token_by_token` is the loop, for any rule that picks one token per step (sampling,
:class:`~transformer_book.inference.decoding.Sampling`, is another).

One fast path, ``fast=True``: the keys and values sit in a
:class:`~transformer_book.nn.kv_cache.StaticDecoderCache`, allocated once to the longest
output and written in place at each step, instead of buffers that grow by ``torch.cat``
(the same tokens: tested equal in float64; timed in ``benchmarks/bench_fast.py``).
``compiled=True`` adds, on that path, a decoding step compiled by ``torch.compile`` (the
same tokens in float64; tens of seconds to compile, once per process, paid back over a
long decoding; both timed in ``benchmarks/bench_engines.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from transformer_book.inference.lengths import output_length_limits
from transformer_book.inference.stepper import Stepper, check_decoding, evaluation_mode
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import require, require_bool

__all__ = ["greedy_decode", "most_probable", "token_by_token"]


def greedy_decode(
    model: Transformer,
    src_ids: torch.Tensor,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    use_cache: bool = True,
    min_len: int = 0,
    fast: bool = False,
    compiled: bool = False,
) -> list[list[int]]:
    """Pick the most probable next token until ``<eos>``, batched: ``src_ids (B, S)`` ->
    B lists of ids (no ``<bos>``/``<eos>``/pad).

    Each sentence stops at its own ``<eos>`` or after ``max_len_a · |x| + max_len_b``
    tokens, ``|x|`` its source length (Section 6.1: a = 1, b = 50; a fixed N tokens is
    ``max_len_a=0, max_len_b=N``), at most ``config.max_len - 1``. ``<eos>`` is forbidden
    before ``min_len`` tokens (``min_len = max_len_b`` with ``max_len_a=0`` forces exactly
    that many steps, e.g. to time decoding). ``use_cache=False`` re-runs the decoder on
    the whole prefix at every step (same output). ``fast=True`` (with the cache) keeps the
    keys and values in buffers allocated once to the longest output (same output);
    ``compiled=True`` (with ``fast``) runs each step as ``torch.compile``'s code (same output).
    """
    # The logits rank the tokens as the log-probabilities do: no softmax needed.
    return token_by_token(model, src_ids, most_probable, max_len_a, max_len_b, use_cache,
                          min_len, log_probs=False, fast=fast, compiled=compiled)


def most_probable(scores: torch.Tensor) -> torch.Tensor:
    """``scores (N, V) -> (N,)``: the first maximum of each row, as argmax (but faster)."""
    return scores.max(-1).indices


def token_by_token(
    model: Transformer,
    src_ids: torch.Tensor,
    choose: Callable[[torch.Tensor], torch.Tensor],
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    use_cache: bool = True,
    min_len: int = 0,
    log_probs: bool = True,
    fast: bool = False,
    compiled: bool = False,
) -> list[list[int]]:
    """One hypothesis per sentence, one token per step, ``choose`` picking it:
    ``src_ids (B, S)`` -> B lists of ids (no ``<bos>``/``<eos>``/pad).

    At every step ``choose(scores (N, V)) -> tokens (N,)`` gets the next token's
    log-probabilities for the N sentences still being decoded (``log_probs=False``: the
    logits, the same up to a constant per row), ``-inf`` for ``<pad>``, ``<bos>`` and,
    before ``min_len`` tokens, ``<eos>``. Greedy search chooses the best token
    (:func:`most_probable`), sampling draws one. Lengths, ``min_len`` and ``use_cache``
    as in :func:`greedy_decode`; finished sentences leave the batch. ``fast=True`` (with
    ``use_cache``): the static cache of :func:`greedy_decode`'s fast path; ``compiled=True``
    (with ``fast``): its compiled step.
    """
    check_decoding(model, src_ids, min_len)
    require_bool(fast, "fast")
    require_bool(compiled, "compiled")
    require(use_cache or not fast, "fast", "False without the cache (use_cache=False)", fast)
    require(fast or not compiled, "compiled", "False without the fast path (fast=False)",
            compiled)
    config = model.config
    limits = output_length_limits(src_ids, config.pad_id, max_len_a, max_len_b, config.max_len)
    longest = int(limits.max())
    b, device = src_ids.shape[0], src_ids.device
    tokens = torch.full((b, longest + 1), config.pad_id, dtype=torch.long,
                        device=device)  # (B, longest + 1): column t + 1 holds step t's token
    with evaluation_mode(model):
        memory = model.encode(src_ids)  # (B, S, d_model)
        assert isinstance(memory, torch.Tensor), "encode without need_weights: a tensor"
        stepper = Stepper(model, src_ids, memory, use_cache, normalize=log_probs,
                          max_length=longest if fast else None, compiled=compiled)
        prefix = torch.full((b, 1), config.bos_id, dtype=torch.long, device=device)
        live = torch.arange(b, device=device)  # the sentences still being decoded
        for t in range(longest):
            scores = stepper.step(prefix)  # (N, V) for the N live sentences
            if t < min_len:
                scores[:, config.eos_id] = -math.inf
            token = choose(scores)  # (N,)
            tokens[live, t + 1] = token
            # (N, t+1) -> (N, t+2); the fast path's cache holds the past: (N, 1), the last token
            prefix = token[:, None] if fast else torch.cat([prefix, token[:, None]], dim=1)
            going = (token != config.eos_id) & (t + 1 < limits[live])  # (N,)
            if not bool(going.all()):  # finished sentences leave the batch
                if not bool(going.any()):
                    break
                keep = going.nonzero().squeeze(1)
                live, prefix = live[keep], prefix[keep]
                stepper.select(keep, keep)
    return [_strip(row, config) for row in tokens[:, 1:].tolist()]


def _strip(ids: Sequence[int], config: TransformerConfig) -> list[int]:
    """Cut at the first ``<eos>``, drop padding."""
    out = []
    for i in ids:
        if i == config.eos_id:
            break
        if i != config.pad_id:
            out.append(i)
    return out

"""Greedy search: the most probable next token, until ``<eos>`` (Vaswani et al., 2017,
Section 6.1, with beam size 1), batched, with the decoder's key/value cache.

Outputs are lists of token ids without ``<bos>``, ``<eos>`` or padding. Each sentence may
generate :func:`~transformer_book.inference.lengths.output_length_limits` tokens: by
default its source length + 50 (Section 6.1), within the positions the model has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from transformer_book.inference.lengths import output_length_limits
from transformer_book.inference.stepper import Stepper, check_decoding, evaluation_mode
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer

__all__ = ["greedy_decode"]


def greedy_decode(
    model: Transformer,
    src_ids: torch.Tensor,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    use_cache: bool = True,
    min_len: int = 0,
) -> list[list[int]]:
    """Pick the most probable next token until ``<eos>``, batched: ``src_ids (B, S)`` ->
    B lists of ids (no ``<bos>``/``<eos>``/pad).

    Each sentence stops at its own ``<eos>`` or after ``max_len_a · |x| + max_len_b``
    tokens, ``|x|`` its source length (Section 6.1: a = 1, b = 50; a fixed N tokens is
    ``max_len_a=0, max_len_b=N``), at most ``config.max_len - 1``. ``<eos>`` is forbidden
    before ``min_len`` tokens (``min_len = max_len_b`` with ``max_len_a=0`` forces exactly
    that many steps, e.g. to time decoding). ``use_cache=False`` re-runs the decoder on
    the whole prefix at every step (same output).
    """
    check_decoding(model, src_ids, min_len)
    config = model.config
    limits = output_length_limits(src_ids, config.pad_id, max_len_a, max_len_b, config.max_len)
    longest = int(limits.max())
    b, device = src_ids.shape[0], src_ids.device
    tokens = torch.full((b, longest + 1), config.pad_id, dtype=torch.long,
                        device=device)  # (B, longest + 1): column t + 1 holds step t's token
    with evaluation_mode(model):
        memory = model.encode(src_ids)  # (B, S, d_model)
        stepper = Stepper(model, src_ids, memory, use_cache, normalize=False)
        prefix = torch.full((b, 1), config.bos_id, dtype=torch.long, device=device)
        live = torch.arange(b, device=device)  # the sentences still being decoded
        for t in range(longest):
            logits = stepper.step(prefix)  # (N, V) for the N live sentences
            if t < min_len:
                logits[:, config.eos_id] = -math.inf
            token = logits.max(-1).indices  # (N,): the first maximum, as argmax (but faster)
            tokens[live, t + 1] = token
            prefix = torch.cat([prefix, token[:, None]], dim=1)  # (N, t+1) -> (N, t+2)
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

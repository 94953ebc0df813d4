"""Greedy search: the most probable next token, until ``<eos>`` (Vaswani et al., 2017,
Section 6.1, with beam size 1), as a step rule of :func:`~.generate.generate`.

Outputs are lists of token ids without ``<bos>``, ``<eos>`` or padding. Each sentence may
generate :func:`~transformer_book.inference.lengths.output_length_limits` tokens: by
default its source length + 50 (Section 6.1), within the positions the model has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from transformer_book.inference.generate import Limits, StepRule, generate
from transformer_book.nn.transformer import Transformer

__all__ = ["Greedy", "greedy_decode"]


@dataclass(frozen=True)
class Greedy(StepRule):
    """The most probable token at every step: one candidate per sentence, from the logits
    (they rank the tokens as the log-probabilities do: no softmax)."""

    @property
    def normalize(self) -> bool:
        return False

    def step(self, t: int, logp: torch.Tensor, scores: torch.Tensor, state: Any
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        best, token = logp[:, 0].max(-1)  # (B, 1, V) -> (B,): the first maximum, as argmax
        return scores + best[:, None], token[:, None], torch.zeros_like(token)[:, None]


def greedy_decode(model: Transformer, src_ids: torch.Tensor, max_len_a: float = 1.0,
                  max_len_b: int = 50, *, min_len: int = 0, cache: str = "growing"
                  ) -> list[list[int]]:
    """Greedy search, batched: ``src_ids (B, S)`` -> B lists of ids (no
    ``<bos>``/``<eos>``/pad): :func:`~.generate.generate` with :class:`Greedy`.

    Each sentence stops at its own ``<eos>`` or after ``max_len_a · |x| + max_len_b``
    tokens, ``|x|`` its source length (Section 6.1: a = 1, b = 50; a fixed N tokens is
    ``max_len_a=0, max_len_b=N``), at most ``config.max_len - 1``. ``<eos>`` is forbidden
    before ``min_len`` tokens (``min_len = max_len_b`` with ``max_len_a=0`` forces exactly
    that many steps, e.g. to time decoding). ``cache``: one of
    :data:`~.generate.CACHES` (the same tokens).
    """
    return generate(model, src_ids, Greedy(), Limits(max_len_a, max_len_b, min_len),
                    cache=cache)

"""Beam search with a length penalty (Vaswani et al., 2017, Section 6.1), batched, with the
decoder's key/value cache.

Section 6.1: "we used beam search with a beam size of 4 and length penalty α = 0.6 [Wu et
al., 2016] ... We set the maximum output length during inference to input length + 50, but
terminate early when possible."

The length penalty of Wu et al. (2016) is ``lp(Y) = ((5 + |Y|) / 6)^α`` and a hypothesis
scores ``log P(Y | X) / lp(Y)``; ``|Y|`` counts the generated tokens including the final
``<eos>``. With α = 0 the score is the plain log-probability. α lies in ``[0, MAX_ALPHA]``:
Wu et al. tune it in [0, 1] and beyond a few units it only divides every score by a huge
lp (α = 10 already makes lp(200 tokens) ~ 10^15); an infinite or very large α would flatten
every score to -0.0 (or overflow), so it is refused, like a beam wider than the vocabulary.

Beam search is a step rule (:class:`Beam`) of :func:`~.generate.generate`, which reorders
the self-attention cache along the chosen beams, finishes hypotheses and stops sentences;
the K beams of a sentence share one copy of its encoder memory and cross-attention keys
and values, and the first step decodes only ``<bos>``, once per sentence. Each step ranks
its candidates by blocks (:func:`fast_top_candidates`: the values of ``topk``,
:func:`top_candidates`, a few times faster for a large vocabulary on the CPU).

``beam_search(..., trace=BeamTrace())`` also records, step by step and sentence by sentence,
every candidate the search ranked and what it did with it (kept, finished or dropped): the
tree a figure draws. Tracing reads the candidates to the host each step and changes nothing
else: the traced search returns the same ids.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, overload

import torch
import torch.nn.functional as F

from transformer_book.inference.generate import BeamTrace, Limits, StepRule, generate
from transformer_book.inference.greedy import Greedy
from transformer_book.inference.stepper import evaluation_mode
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.config import MAX_ALPHA
from transformer_book.util.validation import (
    is_integer,
    require,
    require_int,
    require_number,
    require_one_of,
    require_positive_int,
    require_tensor,
)

__all__ = ["STOPPING_RULES", "TOP_BLOCKS", "Beam", "beam_search", "check_alpha",
           "check_beam_size", "fast_top_candidates", "length_penalty", "score_hypothesis",
           "top_candidates"]

# How beam search decides that a sentence is done (see beam_search's docstring).
STOPPING_RULES = ("exact", "k_finished")
# Block sizes fast_top_candidates may rank candidates by (the largest that divides the row).
TOP_BLOCKS = (64, 32, 16, 8)


def check_alpha(alpha: float, max_len: int | None = None, argument: str = "alpha") -> float:
    """``alpha`` as a float if it is a finite number in ``[0, MAX_ALPHA]`` whose length
    penalty stays finite in float32 up to ``max_len`` tokens (the decoder's positions)."""
    alpha = require_number(alpha, argument, minimum=0, maximum=MAX_ALPHA)
    if max_len is not None:
        require(((5 + max_len) / 6) ** alpha < torch.finfo(torch.float32).max, argument,
                f"a length penalty that stays finite in float32 for {max_len} tokens",
                f"{alpha:g}")
    return alpha


@overload
def length_penalty(length: int, alpha: float) -> float: ...
@overload
def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor: ...
def length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """Wu et al. (2016): ``lp(Y) = ((5 + |Y|) / 6)^α``, α in ``[0, MAX_ALPHA]``; a tensor
    of lengths gives a tensor of penalties."""
    return ((5 + length) / 6) ** check_alpha(alpha)


@dataclass(frozen=True)
class Beam(StepRule):
    """Beam search of ``beam_size`` hypotheses with length penalty ``alpha`` and stopping
    rule ``stop``, as a step rule of :func:`~.generate.generate`: every extension of every
    live hypothesis, the 2K best by cumulative log-probability (:func:`fast_top_candidates`).

    ``stop``: ``"exact"`` (the default) stops a sentence as soon as no live hypothesis can
    beat its best finished one, never earlier; ``"k_finished"`` also once ``beam_size``
    hypotheses have finished, as fairseq does (fewer steps, but a better translation that
    needed a few more tokens may be missed). A beam of one is greedy search (the ``[decode]``
    section's ``beam_size = 1``). ``alpha`` and ``stop`` are checked with a beam of one too:
    a value that is recorded must be one that could have been used."""

    beam_size: int = field(default=4, metadata={
        "help": "hypotheses kept, 1 (greedy) to the vocabulary size"})
    alpha: float = field(default=0.6, metadata={
        "help": f"the length penalty's exponent, 0 to {MAX_ALPHA:g}"})
    stop: str = field(default="exact", metadata={
        "help": "exact (stop when no live hypothesis can win) or k_finished (once beam-size "
        "hypotheses have finished, as fairseq)"})

    def __post_init__(self) -> None:
        require_positive_int(self.beam_size, "beam_size")
        check_alpha(self.alpha)
        require_one_of(self.stop, "stop", STOPPING_RULES)

    @property
    def width(self) -> int:
        return self.beam_size

    # A beam of one runs as greedy search (one candidate, from the logits); beam_search's
    # own rule keeps the width-one beam of 2 candidates (_WidthOneBeam).
    greedy_at_one: ClassVar[bool] = True

    @property
    def ranked(self) -> bool:
        return self.beam_size > 1 or not self.greedy_at_one

    @property
    def normalize(self) -> bool:
        return self.ranked

    def check(self, config: TransformerConfig) -> None:
        check_beam_size(self.beam_size, config.vocab_size)
        check_alpha(self.alpha, config.max_len)

    def step(self, t: int, logp: torch.Tensor, scores: torch.Tensor, state: Any
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not self.ranked:
            return Greedy().step(t, logp, scores, state)
        b, width, vocab = logp.shape
        # (B, W, 1) + (B, W, V) -> (B, W·V): every extension of every live hypothesis
        totals = logp.add_(scores[:, :, None]).view(b, width * vocab)
        cand, idx = fast_top_candidates(totals, 2 * self.beam_size)  # (B, 2K) each
        return cand, idx % vocab, idx // vocab

    def length_penalty(self, length: torch.Tensor | int) -> torch.Tensor | float:
        return length_penalty(length, self.alpha)

    def done(self, best: torch.Tensor, bound: torch.Tensor, finished: torch.Tensor
             ) -> torch.Tensor:
        stop = best >= bound
        return stop | (finished >= self.beam_size) if self.stop == "k_finished" else stop


@dataclass(frozen=True)
class _WidthOneBeam(Beam):
    """:class:`Beam` whose beam of one is a beam too (2 candidates a step, finished
    hypotheses ranked by score): :func:`beam_search` with ``beam_size=1``."""

    greedy_at_one: ClassVar[bool] = False


def beam_search(model: Transformer, src_ids: torch.Tensor, beam_size: int = 4,
                alpha: float = 0.6, max_len_a: float = 1.0, max_len_b: int = 50, *,
                min_len: int = 0, stop: str = "exact", cache: str = "growing",
                trace: BeamTrace | None = None) -> list[list[int]]:
    """Beam search with the length penalty of Wu et al. (2016), batched over B sentences
    (``B · beam_size`` decoder rows): ``src_ids (B, S)`` -> B lists of ids;
    :func:`~.generate.generate` with :class:`Beam`.

    Each step extends every live hypothesis by every token, keeps the ``2 · beam_size``
    best by log-probability, moves those ending in ``<eos>`` among the top ``beam_size`` to
    the sentence's finished list with score ``log P / lp``, and keeps alive the
    ``beam_size`` best of the 2K that do not end in ``<eos>``. A sentence stops when no
    live hypothesis can still beat its best finished one (or by ``stop``, :class:`Beam`)
    or at its maximum length ``max_len_a · source length + max_len_b`` (Section 6.1: a =
    1, b = 50), where ``<eos>`` is forced. Returns the best finished hypothesis of each
    sentence; ``min_len`` forbids ``<eos>`` before that many tokens (a beam of one is a
    beam here, of 2 candidates a step: the :class:`Beam` strategy makes it greedy search);
    ``cache``: one of
    :data:`~.generate.CACHES`. ``trace``, a :class:`~.generate.BeamTrace`, is filled with
    every step's ranked candidates of every sentence and what became of them.
    """
    return generate(model, src_ids, _WidthOneBeam(beam_size, alpha, stop),
                    Limits(max_len_a, max_len_b, min_len), cache=cache, trace=trace)


def check_beam_size(beam_size: int, vocab_size: int, argument: str = "beam_size") -> int:
    """``beam_size`` if it is an integer in ``[1, vocab_size]``. A wider beam holds only dead
    (``-inf``) hypotheses at the first step, and from ``vocab_size - 2`` on ``<eos>`` is
    always among the first step's survivors: the empty translation then often wins."""
    return require_int(beam_size, argument, minimum=1, maximum=vocab_size)


def top_candidates(candidates: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``n`` largest of each row, best first, ``(B, C) -> values, indices (B, n)``; a
    row with fewer than ``n`` candidates (a tiny vocabulary at the first step) is padded
    with ``-inf`` at index 0, a dead candidate like those of a row's own ``-inf`` entries.
    """
    values, indices = candidates.topk(min(n, candidates.shape[1]), dim=1)
    missing = n - values.shape[1]
    if missing:
        values = F.pad(values, (0, missing), value=-math.inf)
        indices = F.pad(indices, (0, missing), value=0)
    return values, indices


def fast_top_candidates(candidates: torch.Tensor, n: int
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`top_candidates`' fast path, for long rows: the same values, best first.

    A row of C = K·V candidates is long and n = 2K is small, so the search goes by blocks
    (of a size in :data:`TOP_BLOCKS`): the n largest values lie in the n blocks with the
    largest maxima (a block holding one of them has a maximum at least as large), and only
    those n blocks are ranked in full. Among equal values the indices may differ from
    ``topk``'s (whose order of ties is its own); each points at its value. A row no block
    size fits (short, or C not a multiple) goes to :func:`top_candidates`.
    """
    b, c = candidates.shape
    block = next((size for size in TOP_BLOCKS if c % size == 0 and c >= 4 * n * size), 0)
    if not block:
        return top_candidates(candidates, n)
    maxima = candidates.view(b, c // block, block).amax(-1)  # (B, C / block)
    _, blocks = maxima.topk(n, dim=1)  # (B, n)
    # (B, n, 1) · block + (block,) -> (B, n·block): the candidates of those blocks
    idx = (blocks[:, :, None] * block + torch.arange(block, device=blocks.device)).view(b, -1)
    values, at = candidates.gather(1, idx).topk(n, dim=1)  # (B, n)
    return values, idx.gather(1, at)


def score_hypothesis(
    model: Transformer, src_ids: torch.Tensor, hyp: Sequence[int], alpha: float = 0.6
) -> float:
    """``log P(hyp <eos> | src) / lp`` with ``lp = ((5 + |hyp| + 1) / 6)^α``, the score
    :func:`beam_search` maximises. ``src_ids`` is one sentence, ``(S,)`` or ``(1, S)``."""
    require_tensor(src_ids, "src_ids", ndim=(1, 2))
    src = src_ids.view(1, -1) if src_ids.ndim == 1 else src_ids
    require(src.shape[0] == 1, "src_ids", "one sentence, (S,) or (1, S)", tuple(src_ids.shape))
    require(isinstance(hyp, Sequence) and not isinstance(hyp, (str, bytes))
            and all(is_integer(t) for t in hyp), "hyp",
            "a list of integer token ids", repr(hyp)[:80])
    config = model.config
    alpha = check_alpha(alpha, config.max_len)
    ids = torch.tensor([config.bos_id, *hyp, config.eos_id], device=src.device)[None]  # (1, n+2)
    model.check_ids(src, "src_ids")
    model.check_ids(ids[:, :-1], "hyp")  # <bos> hyp: the decoder's input
    with evaluation_mode(model):
        logp = torch.log_softmax(model(src, ids[:, :-1]).float(), dim=-1)  # (1, n+1, V)
        total = logp.gather(-1, ids[:, 1:, None]).sum()  # log P of each next token, summed
    return float(total) / length_penalty(len(hyp) + 1, alpha)

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

Beam search reorders the self-attention cache along the chosen beams with ``index_select``
(:meth:`~transformer_book.nn.kv_cache.DecoderCache.reorder`); the K beams of a sentence
share one copy of its encoder memory and cross-attention keys and values, and the first
step decodes only ``<bos>``, once per sentence. Lengths come from
:func:`~transformer_book.inference.lengths.output_length_limits`, as for greedy search.

Each step ranks its candidates with ``topk`` (:func:`top_candidates`); one fast path,
``beam_search(..., fast=True)``, ranks them by blocks (:func:`fast_top_candidates`), which
is what translating (the :class:`~transformer_book.inference.decoding.Beam` strategy) uses.

``beam_search(..., trace=BeamTrace())`` also records, step by step and sentence by sentence,
every candidate the search ranked and what it did with it (kept, finished or dropped): the
tree a figure draws. Tracing reads the candidates to the host each step and changes nothing
else: the traced search returns the same ids.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import overload

import torch
import torch.nn.functional as F

from transformer_book.inference.lengths import output_length_limits
from transformer_book.inference.stepper import Stepper, check_decoding, evaluation_mode
from transformer_book.nn.transformer import Transformer
from transformer_book.run.config import MAX_ALPHA
from transformer_book.util.validation import (
    is_integer,
    require,
    require_bool,
    require_int,
    require_number,
    require_tensor,
)

__all__ = ["STOPPING_RULES", "TOP_BLOCKS", "BeamCandidate", "BeamTrace", "beam_search",
           "check_alpha", "check_beam_size", "fast_top_candidates", "length_penalty",
           "score_hypothesis", "top_candidates"]

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
class BeamCandidate:
    """One of the 2K candidates a beam-search step ranked for a sentence.

    ``parent`` is the hypothesis it extends: its ``slot`` among the previous step's kept
    candidates (0 at the first step, which extends ``<bos>`` alone); ``token`` the id it
    appends; ``log_prob`` the prefix's cumulative log-probability; ``status`` ``"kept"``
    (lives on, as hypothesis ``slot`` of the next step), ``"finished"`` (an ``<eos>`` among
    the top K, with ``score = log P / lp``) or ``"dropped"`` (neither)."""

    parent: int
    token: int
    log_prob: float
    status: str
    slot: int | None = None
    score: float | None = None


@dataclass
class BeamTrace:
    """What :func:`beam_search` did, filled in when passed as ``trace``:
    ``steps[i][t]`` lists sentence ``i``'s ranked candidates at step ``t``, best first
    (candidates of ``-inf`` log-probability, dead from the start, are left out)."""

    steps: list[list[list[BeamCandidate]]] = field(default_factory=list)


@dataclass
class _Search:
    """Beam search's state for the B sentences still being decoded, one row each.

    ``scores (B, W)``: log-probabilities of the live hypotheses (W = 1 at the first step,
    then K); ``best (B,)``: the best finished score / lp; ``count (B,)``: finished
    hypotheses; ``limits (B,)``: output-length limits; ``final_lp (B,)``: the largest lp a
    sentence can get; ``sentence``: each row's index in the input.
    """

    scores: torch.Tensor
    best: torch.Tensor
    count: torch.Tensor
    done: torch.Tensor
    limits: torch.Tensor
    final_lp: torch.Tensor
    sentence: list[int]

    @classmethod
    def start(cls, limits: torch.Tensor, alpha: float, dtype: torch.dtype) -> _Search:
        b, device = limits.shape[0], limits.device
        return cls(scores=torch.zeros((b, 1), dtype=dtype, device=device),
                   best=torch.full((b,), -math.inf, dtype=dtype, device=device),
                   count=torch.zeros(b, dtype=torch.long, device=device),
                   done=torch.zeros(b, dtype=torch.bool, device=device),
                   limits=limits, final_lp=length_penalty(limits.to(dtype) + 1, alpha),
                   sentence=list(range(b)))

    def keep(self, rows: torch.Tensor) -> None:
        """Keep sentences ``rows`` (long ``(B',)``): ``(B, ...) -> (B', ...)``."""
        for name in ("scores", "best", "count", "done", "limits", "final_lp"):
            setattr(self, name, getattr(self, name)[rows])
        self.sentence = [self.sentence[i] for i in rows.tolist()]


def _restrict(logp: torch.Tensor, t: int, limits: torch.Tensor, min_len: int,
              eos_id: int) -> torch.Tensor:
    """In place on ``logp (B, W, V)``: no ``<eos>`` before ``min_len`` tokens, nothing but
    ``<eos>`` once a sentence reaches its limit. Returns that ``forced (B,)`` mask."""
    forced = t >= limits  # (B,): only <eos> may follow (beats min_len)
    if t < min_len:
        logp[~forced, :, eos_id] = -math.inf
    if bool(forced.any()):
        ids = torch.arange(logp.shape[-1], device=logp.device)
        logp[forced] = logp[forced].index_fill(-1, ids[ids != eos_id], -math.inf)
    return forced


def _finish(search: _Search, finished: list[list[tuple[float, list[int]]]],
            cand: torch.Tensor, token: torch.Tensor, rows: torch.Tensor, prefix: torch.Tensor,
            t: int, alpha: float, eos_id: int) -> None:
    """Move the candidates among the top K of ``cand (B, 2K)`` that end in ``<eos>`` to
    their sentence's ``finished`` list, scored ``log P / lp``."""
    k = cand.shape[1] // 2
    ends = (token == eos_id) & cand.isfinite()
    ends[:, k:] = False  # only <eos> among the top K finishes a hypothesis ...
    if bool(ends.any()):
        lp = length_penalty(t + 1, alpha)
        at, slot = ends.nonzero(as_tuple=True)
        ended = [score / lp for score in cand[at, slot].tolist()]
        for i, score, hyp in zip(at.tolist(), ended, prefix[rows[at, slot], 1:].tolist(),
                                 strict=True):
            finished[search.sentence[i]].append((score, hyp))
        search.best.scatter_reduce_(
            0, at, torch.tensor(ended, dtype=search.best.dtype, device=cand.device),
            reduce="amax")
        search.count += ends.sum(1)


def _survive(search: _Search, cand: torch.Tensor, token: torch.Tensor, rows: torch.Tensor,
             eos_id: int, forced: torch.Tensor, stop: str,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The K best candidates not ending in ``<eos>`` live on: ``(B, 2K) -> (B, K)`` scores
    (into ``search``), tokens, the prefix rows they extend and their places among the 2K;
    marks the sentences done.

    ... and no ``<eos>`` among all 2K lives on (as in fairseq): an ``<eos>`` ranked between
    K and 2K is dropped, never extended past its end. Each of the K live hypotheses has one
    ``<eos>`` extension, so at least K of the 2K candidates do not end in it."""
    k2 = cand.shape[1]
    ended = token == eos_id  # (B, 2K): finished (the top K) or dropped (the rest)
    order = (ended.long() * k2 + torch.arange(k2, device=cand.device)).argsort(dim=1)
    keep = order[:, : k2 // 2]
    search.scores, token = cand.gather(1, keep), token.gather(1, keep)  # (B, K) each
    rows = rows.gather(1, keep)  # (B, K): the prefix row each survivor extends
    # Done when no live hypothesis can beat the best finished one any more.
    bound = search.scores.max(1).values / search.final_lp  # (B,)
    search.done |= (search.best >= bound) | forced
    if stop == "k_finished":
        search.done |= search.count >= k2 // 2
    return token, rows, keep


def _record(trace: BeamTrace, search: _Search, cand: torch.Tensor, token: torch.Tensor,
            beam: torch.Tensor, keep: torch.Tensor, t: int, alpha: float, eos_id: int,
            ) -> None:
    """Append step ``t``'s candidates ``(B, 2K)`` of each sentence still decoded to
    ``trace``: the ``keep (B, K)`` places live on, ``<eos>`` among the top K finishes (as
    :func:`_finish` and :func:`_survive` decide), the rest is dropped."""
    k = cand.shape[1] // 2
    lp = length_penalty(t + 1, alpha)
    for row, (values, tokens, parents, kept) in enumerate(zip(
            cand.tolist(), token.tolist(), beam.tolist(), keep.tolist(), strict=True)):
        slots = {place: slot for slot, place in enumerate(kept)}
        step = []
        for place, (value, tok, parent) in enumerate(zip(values, tokens, parents,
                                                           strict=True)):
            if not math.isfinite(value):
                continue
            if place in slots:
                status, extra = "kept", {"slot": slots[place]}
            elif tok == eos_id and place < k:
                status, extra = "finished", {"score": value / lp}
            else:
                status, extra = "dropped", {}
            step.append(BeamCandidate(parent, tok, value, status, **extra))
        trace.steps[search.sentence[row]].append(step)


def beam_search(
    model: Transformer,
    src_ids: torch.Tensor,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    use_cache: bool = True,
    min_len: int = 0,
    stop: str = "exact",
    fast: bool = False,
    trace: BeamTrace | None = None,
) -> list[list[int]]:
    """Beam search with the length penalty of Wu et al. (2016), batched over B sentences
    (``B · beam_size`` decoder rows): ``src_ids (B, S)`` -> B lists of ids.

    Each step extends every live hypothesis by every token, keeps the ``2 · beam_size``
    best by log-probability, moves those ending in ``<eos>`` among the top ``beam_size`` to
    the sentence's finished list with score ``log P / lp``, and keeps alive the
    ``beam_size`` best of the 2K that do not end in ``<eos>`` (an ``<eos>`` ranked below
    ``beam_size`` is dropped: it neither finishes nor lives on). A sentence stops when no
    live hypothesis can still beat its best finished one (log-probabilities only fall, lp
    is at most lp(max length)) or at its maximum length ``max_len_a · source length +
    max_len_b`` (Section 6.1: a = 1, b = 50), where ``<eos>`` is forced. Returns the best
    finished hypothesis of each sentence; ``min_len`` forbids ``<eos>`` before that many.

    ``stop`` is the stopping rule. ``"exact"`` (the default) is the one above: the search
    stops as soon as its answer is known, never earlier. ``"k_finished"`` also stops a
    sentence once ``beam_size`` hypotheses have finished, as fairseq does: fewer steps, but
    a better translation that needed a few more tokens may be missed (with beam size 1 it
    is greedy decoding for every α). ``beam_size <= vocab_size``, ``0 <= α <= MAX_ALPHA``.

    The 2K best candidates of each step are those of ``topk`` (:func:`top_candidates`);
    ``fast=True`` ranks them by blocks instead (:func:`fast_top_candidates`: the same
    values, a few times faster for a large vocabulary on the CPU).

    ``trace``, a :class:`BeamTrace`, is filled with every step's ranked candidates of every
    sentence and what became of them (its previous contents are replaced).
    """
    require(stop in STOPPING_RULES, "stop", f"one of {STOPPING_RULES}", repr(stop))
    require_bool(fast, "fast")
    top = fast_top_candidates if fast else top_candidates
    check_decoding(model, src_ids, min_len)
    config, device = model.config, src_ids.device
    k = check_beam_size(beam_size, config.vocab_size)
    alpha = check_alpha(alpha, config.max_len)
    limits = output_length_limits(src_ids, config.pad_id, max_len_a, max_len_b, config.max_len)
    b, vocab = src_ids.shape[0], config.vocab_size
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    if trace is not None:
        require(isinstance(trace, BeamTrace), "trace", "a BeamTrace or None",
                type(trace).__name__)
        trace.steps = [[] for _ in range(b)]
    with evaluation_mode(model):
        memory = model.encode(src_ids)  # (B, S, d_model): one copy, shared by the K beams
        assert isinstance(memory, torch.Tensor), "encode without need_weights: a tensor"
        stepper = Stepper(model, src_ids, memory, use_cache)
        # Sentence i's hypotheses: rows i·W .. i·W + W - 1 of prefix (W = 1, <bos>, then K).
        prefix = torch.full((b, 1), config.bos_id, dtype=torch.long, device=device)
        # Scores in the stepper's dtype: float32, or float64 for a float64 model.
        search = _Search.start(limits, alpha, torch.promote_types(memory.dtype, torch.float32))
        for t in range(int(limits.max()) + 1):
            width = search.scores.shape[1]
            logp = stepper.step(prefix).view(b, width, vocab)  # (B·W, V) -> (B, W, V)
            forced = _restrict(logp, t, search.limits, min_len, config.eos_id)
            # (B, W, 1) + (B, W, V) -> (B, W·V): every extension of every live hypothesis
            totals = logp.add_(search.scores[:, :, None]).view(b, width * vocab)
            cand, idx = top(totals, 2 * k)
            beam, token = idx // vocab, idx % vocab  # (B, 2K) each
            rows = beam + torch.arange(b, device=device)[:, None] * width  # (B, 2K) of prefix
            _finish(search, finished, cand, token, rows, prefix, t, alpha, config.eos_id)
            ranked = token
            token, rows, keep = _survive(search, cand, token, rows, config.eos_id, forced,
                                         stop)
            if trace is not None:
                _record(trace, search, cand, ranked, beam, keep, t, alpha, config.eos_id)
            if bool(search.done.all()):
                break
            prefix, b = _follow(search, stepper, prefix, token, rows), len(search.sentence)
    return [max(hyps)[1] for hyps in finished]


def check_beam_size(beam_size: int, vocab_size: int, argument: str = "beam_size") -> int:
    """``beam_size`` if it is an integer in ``[1, vocab_size]``. A wider beam holds only dead
    (``-inf``) hypotheses at the first step, and from ``vocab_size - 2`` on ``<eos>`` is
    always among the first step's survivors: the empty translation then often wins."""
    return require_int(beam_size, argument, minimum=1, maximum=vocab_size)


def _follow(search: _Search, stepper: Stepper, prefix: torch.Tensor, token: torch.Tensor,
            rows: torch.Tensor) -> torch.Tensor:
    """The next step's prefixes ``(B'·K, t + 2)``: each survivor ``token (B, K)`` appended to
    the prefix row ``rows (B, K)`` it extends; finished sentences leave the batch, and the
    cache follows the survivors (one copy: drop and reorder at once)."""
    if bool(search.done.any()):
        keep = (~search.done).nonzero().squeeze(1)  # (B',)
        rows, token = rows[keep], token[keep]  # (B', K)
        stepper.select(keep, rows.view(-1))
        search.keep(keep)
    else:
        stepper.reorder(rows.view(-1))
    return torch.cat([prefix[rows.view(-1)], token.view(-1, 1)], dim=1)  # (B'·K, t + 2)


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

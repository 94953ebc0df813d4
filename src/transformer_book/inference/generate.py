"""Decoding as one loop and a step rule (Section 6.1): :func:`generate`.

Every decoding strategy of the package is a **step rule**, as fairseq's ``Search``: given
the next token's log-probabilities of the W live hypotheses of each of B sentences and
their scores so far, it proposes C candidates per sentence::

    step(t, logp (B, W, V), scores (B, W), state) -> scores (B, C), tokens (B, C), parents (B, C)

``parents`` are the hypotheses (``0 .. W-1``) the candidates extend, ``scores`` their new
cumulative scores. Greedy search proposes the best token (C = 1), sampling draws one, beam
search the 2K best extensions. Everything else is :func:`generate`'s, once for all of them:
encoding the sources, the decoder's key/value cache, the output-length limits
(:func:`~transformer_book.inference.lengths.output_length_limits`), ``<eos>`` forbidden
before ``min_len`` and forced at a sentence's limit, finishing hypotheses, following the
survivors (the cache reordered, finished sentences out of the batch) and the answer.

The loop's rules for the candidates, in order of rank (fairseq's):

- an ``<eos>`` among the first K (the rule's :attr:`StepRule.width`) finishes its
  hypothesis, with score ``scores / lp(|Y|)`` (the rule's :meth:`StepRule.length_penalty`,
  ``|Y|`` counting ``<eos>``); an ``<eos>`` ranked lower is dropped;
- the K best candidates not ending in ``<eos>`` live on, as the next step's hypotheses;
- a sentence is done when its rule says so (:meth:`StepRule.done`: by default when no live
  hypothesis can still beat its best finished one, since log-probabilities only fall and lp
  is at most lp(limit + 1)), or at its limit; the best finished hypothesis is its answer.

A rule that keeps one hypothesis (``ranked = False``: greedy search, sampling) has no
finished hypotheses to compare: its first ``<eos>`` ends the sentence, and so does its
limit, without the step that would only force ``<eos>``.

The tokens are never copied along the beams: each step keeps its tokens and parents (one
``(B, K)`` write each), and the answer is read back from them once, at the end.

``cache``: ``"growing"`` (the default: the keys and values of
:class:`~transformer_book.nn.kv_cache.DecoderCache`, extended by ``torch.cat``),
``"static"`` (a :class:`~transformer_book.nn.kv_cache.StaticDecoderCache` allocated once to
the longest output), ``"compiled"`` (that static cache with the decoder compiled by
``torch.compile``) or ``"none"`` (the whole prefix decoded at every step: the O(t²)
reference). All give the same tokens (tested in float64); which is fastest depends on the
machine (``benchmarks/bench_engines.py`` measures them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from transformer_book.inference.lengths import output_length_limits
from transformer_book.inference.stepper import CACHES, Stepper, check_decoding, evaluation_mode
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import (
    require,
    require_int,
    require_number,
    require_one_of,
    unchecked,
)

__all__ = ["CACHES", "BeamCandidate", "BeamTrace", "Limits", "StepRule", "generate"]


@dataclass(frozen=True)
class Limits:
    """How long each output may be: at most ``max_len_a · |x| + max_len_b`` tokens for a
    source of ``|x|`` tokens (Section 6.1: a = 1, b = 50; a fixed N tokens is ``a = 0, b =
    N``), within the model's positions, and no ``<eos>`` before ``min_len`` tokens."""

    max_len_a: float = 1.0
    max_len_b: int = 50
    min_len: int = 0

    def __post_init__(self) -> None:
        require_number(self.max_len_a, "max_len_a", minimum=0)
        require_int(self.max_len_b, "max_len_b", minimum=0)
        require_int(self.min_len, "min_len", minimum=0)


class StepRule:
    """What a decoding strategy is: a step rule (see the module docstring). A subclass
    defines :meth:`step` and overrides the properties it changes; the rest has defaults.

    Properties:
        width: K, the hypotheses each sentence keeps (1: greedy search, sampling).
        normalize: the rule reads log-probabilities (``True``) or logits (``False``: they
            rank the tokens the same; greedy search needs no softmax).
        ranked: finished hypotheses compete by score (beam search); ``False``: the rule
            keeps one hypothesis, whose first ``<eos>`` (or limit) is the answer.
    """

    @property
    def width(self) -> int:
        return 1

    @property
    def normalize(self) -> bool:
        return True

    @property
    def ranked(self) -> bool:
        return False

    def check(self, config: TransformerConfig) -> None:
        """Refuse settings this model cannot use (a ``BookError``), before any decoding."""

    def begin(self, device: torch.device) -> Any:
        """The state one call of :func:`generate` hands every :meth:`step` (a sampler's
        seeded generator); ``None`` by default."""
        return None

    def step(self, t: int, logp: torch.Tensor, scores: torch.Tensor, state: Any
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step ``t``'s candidates: ``logp (B, W, V)``, ``scores (B, W)`` -> their scores,
        tokens and parents, ``(B, C)`` each, best first, C >= :attr:`width`."""
        raise NotImplementedError

    def length_penalty(self, length: torch.Tensor | int) -> torch.Tensor | float:
        """What a finished hypothesis' score is divided by, for its length (``<eos>``
        counted); 1 by default."""
        return 1.0

    def done(self, best: torch.Tensor, bound: torch.Tensor, finished: torch.Tensor
             ) -> torch.Tensor:
        """Which sentences stop (bool ``(B,)``), given their best finished score, the best
        score a live hypothesis could still reach and how many hypotheses have finished;
        by default when no live hypothesis can win."""
        return best >= bound


@dataclass(frozen=True)
class BeamCandidate:
    """One candidate a step ranked for a sentence, in :class:`BeamTrace`.

    ``parent`` is the hypothesis it extends: its ``slot`` among the previous step's kept
    candidates (0 at the first step, which extends ``<bos>`` alone); ``token`` the id it
    appends; ``log_prob`` the prefix's cumulative score; ``status`` ``"kept"`` (lives on,
    as hypothesis ``slot`` of the next step), ``"finished"`` (an ``<eos>`` among the top K,
    with ``score = log P / lp``) or ``"dropped"`` (neither)."""

    parent: int
    token: int
    log_prob: float
    status: str
    slot: int | None = None
    score: float | None = None


@dataclass
class BeamTrace:
    """What :func:`generate` did, filled in when passed as ``trace``: ``steps[i][t]`` lists
    sentence ``i``'s ranked candidates at step ``t``, best first (candidates of ``-inf``
    score, dead from the start, are left out)."""

    steps: list[list[list[BeamCandidate]]] = field(default_factory=list)


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


@dataclass
class _Search:
    """The loop's state, one row per sentence still decoded (``live``: their indices in
    the input), and per input sentence the best finished hypothesis so far: its score, the
    step ``at`` of its last token, that ``token`` and its ``parent`` slot at step ``at - 1``
    (``at = -1``: none yet)."""

    live: torch.Tensor
    scores: torch.Tensor
    limits: torch.Tensor
    bound_lp: torch.Tensor | float
    count: torch.Tensor
    best: torch.Tensor
    at: torch.Tensor
    token: torch.Tensor
    parent: torch.Tensor

    def finish(self, rows: torch.Tensor, score: torch.Tensor, t: int, token: torch.Tensor,
               parent: torch.Tensor) -> None:
        """Rows ``rows`` (of the live sentences) finish a hypothesis of ``score``, ending at
        step ``t`` in ``token``, extending ``parent``; it becomes their answer if better."""
        sentence = self.live[rows]
        better = score > self.best[sentence]  # strictly: the first of equal ones stays
        sentence = sentence[better]
        self.best[sentence] = score[better]
        self.at[sentence] = t
        self.token[sentence], self.parent[sentence] = token[better], parent[better]

    def keep(self, rows: torch.Tensor) -> None:
        """Only the live sentences ``rows`` (long ``(B',)``) go on."""
        self.live, self.scores, self.limits, self.count = (
            self.live[rows], self.scores[rows], self.limits[rows], self.count[rows])
        if isinstance(self.bound_lp, torch.Tensor):
            self.bound_lp = self.bound_lp[rows]


def generate(model: Transformer, src_ids: torch.Tensor, strategy: StepRule,
             limits: Limits | None = None, *, cache: str = "growing",
             trace: BeamTrace | None = None) -> list[list[int]]:
    """Decode ``src_ids (B, S)`` with the step rule ``strategy``: B lists of token ids,
    without ``<bos>``, ``<eos>`` or padding (see the module docstring).

    ``limits``: the output lengths (:class:`Limits`; default Section 6.1's |x| + 50).
    ``cache``: one of :data:`CACHES` (the same tokens; different speeds). ``trace``, a
    :class:`BeamTrace`, is filled with every step's ranked candidates of every sentence and
    what became of them (its previous contents are replaced; the tokens are the same).
    """
    require(isinstance(strategy, StepRule), "strategy",
            "a decoding strategy (a StepRule, e.g. Beam(beam_size=4))", type(strategy).__name__)
    limits = Limits() if limits is None else limits
    require(isinstance(limits, Limits), "limits", "a Limits or None", type(limits).__name__)
    require_one_of(cache, "cache", CACHES)
    check_decoding(model, src_ids, limits.min_len)
    require(trace is None or isinstance(trace, BeamTrace), "trace", "a BeamTrace or None",
            type(trace).__name__)
    config = model.config
    strategy.check(config)
    k = strategy.width
    lengths = output_length_limits(src_ids, config.pad_id, limits.max_len_a, limits.max_len_b,
                                   config.max_len)
    longest = int(lengths.max())
    b, device = src_ids.shape[0], src_ids.device
    if trace is not None:
        trace.steps = [[] for _ in range(b)]
    # Step t's survivors: tokens[t, i, slot] extends hypothesis parents[t, i, slot] of step t-1.
    tokens = torch.zeros((longest + 1, b, k), dtype=torch.long, device=device)
    parents = torch.zeros_like(tokens)
    with evaluation_mode(model):
        memory = model.encode(src_ids)  # (B, S, d_model): one copy, shared by the K beams
        assert isinstance(memory, torch.Tensor), "encode without need_weights: a tensor"
        stepper = Stepper(model, src_ids, memory, cache, normalize=strategy.normalize,
                          max_length=longest + 1)
        dtype = torch.promote_types(memory.dtype, torch.float32)  # the stepper's scores
        search = _Search(
            live=torch.arange(b, device=device), scores=torch.zeros((b, 1), dtype=dtype,
                                                                    device=device),
            limits=lengths,
            bound_lp=strategy.length_penalty(lengths.to(dtype) + 1) if strategy.ranked else 1.0,
            count=torch.zeros(b, dtype=torch.long, device=device),
            best=torch.full((b,), -math.inf, dtype=dtype, device=device),
            at=torch.full((b,), -1, dtype=torch.long, device=device),
            token=torch.zeros(b, dtype=torch.long, device=device),
            parent=torch.zeros(b, dtype=torch.long, device=device))
        state = strategy.begin(device)
        fed = torch.full((b, 1), config.bos_id, dtype=torch.long, device=device)
        with unchecked():  # the inputs were checked above; the loop's own are right by design
            answers = _loop(model, stepper, strategy, limits, search, state, fed, tokens,
                            parents, trace, longest)
    return answers


def _loop(model: Transformer, stepper: Stepper, strategy: StepRule, limits: Limits,
          search: _Search, state: Any, fed: torch.Tensor, tokens: torch.Tensor,
          parents: torch.Tensor, trace: BeamTrace | None, longest: int) -> list[list[int]]:
    """:func:`generate`'s steps, until every sentence is done; the answers."""
    config = model.config
    eos, vocab = config.eos_id, config.vocab_size
    for t in range(longest + 1):
        rows_now, width = search.scores.shape
        logp = stepper.step(fed).view(rows_now, width, vocab)  # (B·W, V) -> (B, W, V)
        forced = (_restrict(logp, t, search.limits, limits.min_len, eos) if strategy.ranked
                  else _forbid_eos(logp, t, limits.min_len, eos))
        cand, ranked, origin = strategy.step(t, logp, search.scores, state)  # (B, C) each
        token, parent, keep, done = _advance(search, strategy, cand, ranked, origin, t,
                                             forced, eos)
        if trace is not None:
            _record(trace, search, strategy, cand, ranked, origin, keep, t, eos)
        tokens[t, search.live] = token
        parents[t, search.live] = parent
        if bool(done.all()):
            break
        fed = _follow(search, stepper, fed, token, parent, done, width)
    return _answers(search, tokens, parents, config)


def _advance(search: _Search, strategy: StepRule, cand: torch.Tensor, ranked: torch.Tensor,
             origin: torch.Tensor, t: int, forced: torch.Tensor, eos: int
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """One step's bookkeeping, the loop's rules (module docstring) on the candidates
    ``cand, ranked, origin (B, C)`` (scores, tokens, parents): hypotheses finish, the K
    survivors' scores go into ``search``; returns their tokens and parents ``(B, K)``, their
    places among the C (``None``: all of them, C = K) and which sentences are done."""
    k = strategy.width
    ends = (ranked[:, :k] == eos) & cand[:, :k].isfinite()  # (B, K): they finish
    done = forced
    if not strategy.ranked:  # the one hypothesis ended: the sentence is done
        if bool(ends.any()):
            rows = ends[:, 0].nonzero().squeeze(1)
            search.finish(rows, cand[rows, 0], t, ranked[rows, 0], origin[rows, 0])
            done = done | ends[:, 0]
    elif bool(ends.any()):
        score = finished_scores(strategy, cand, ends, t)  # (B, K)
        best, at = score.max(1)  # (B,): the first of equal ones
        rows = ends.any(1).nonzero().squeeze(1)
        search.finish(rows, best[rows], t, ranked[rows, at[rows]], origin[rows, at[rows]])
        search.count += ends.sum(1)
    keep = None if cand.shape[1] == k else _survivors(ranked, eos, k)  # (B, K)
    token, parent, scores = ranked, origin, cand
    if keep is not None:  # the K survivors, in rank order
        token, parent, scores = ranked.gather(1, keep), origin.gather(1, keep), \
            cand.gather(1, keep)
    search.scores = scores.masked_fill(token == eos, -math.inf)  # (B, K)
    if strategy.ranked:
        bound = search.scores.max(1).values / search.bound_lp
        done = done | strategy.done(search.best[search.live], bound, search.count)
    else:  # one hypothesis: its limit ends it, with no step that only forces <eos>
        ended = t + 1 >= search.limits
        if bool(ended.any()):
            rows = ended.nonzero().squeeze(1)
            search.finish(rows, search.scores[rows, 0], t, token[rows, 0], parent[rows, 0])
            done = done | ended
    return token, parent, keep, done


def finished_scores(strategy: StepRule, cand: torch.Tensor, ends: torch.Tensor, t: int
                    ) -> torch.Tensor:
    """The scores of the hypotheses ``ends (B, K)`` finishes at step ``t``: ``cand / lp(t +
    1)`` (``-inf`` where none finishes)."""
    k = ends.shape[1]
    return (cand[:, :k] / strategy.length_penalty(t + 1)).masked_fill(~ends, -math.inf)


def _survivors(token: torch.Tensor, eos: int, k: int) -> torch.Tensor:
    """The places of the K best candidates not ending in ``<eos>``, in rank order: ``(B, C)
    -> (B, K)``. Each live hypothesis has one ``<eos>`` extension, so a rule proposing 2K
    candidates always has K that do not end in it (an ``<eos>`` fills a place only when
    fewer do, and is then dead)."""
    c = token.shape[1]
    ended = (token == eos).long()
    return (ended * c + torch.arange(c, device=token.device)).argsort(dim=1)[:, :k]


def _forbid_eos(logp: torch.Tensor, t: int, min_len: int, eos_id: int) -> torch.Tensor:
    """In place on ``logp (B, W, V)``: no ``<eos>`` before ``min_len`` tokens (a rule of one
    hypothesis stops at its limit, so nothing is ever forced: ``forced`` is all False)."""
    if t < min_len:
        logp[:, :, eos_id] = -math.inf
    return torch.zeros(logp.shape[0], dtype=torch.bool, device=logp.device)


def _record(trace: BeamTrace, search: _Search, strategy: StepRule, cand: torch.Tensor,
            token: torch.Tensor, parent: torch.Tensor, keep: torch.Tensor | None, t: int,
            eos: int) -> None:
    """Append step ``t``'s ranked candidates ``(B, C)`` of each sentence still decoded to
    ``trace``: the survivors' places (``keep (B, K)``, ``None``: all) live on unless they
    end in ``<eos>``; an ``<eos>`` among the first K finishes; the rest is dropped."""
    k = strategy.width
    lp = strategy.length_penalty(t + 1)
    places = (torch.arange(cand.shape[1]).expand(cand.shape[0], -1) if keep is None
              else keep)
    for row, (values, tokens, parents, kept) in enumerate(zip(
            cand.tolist(), token.tolist(), parent.tolist(), places.tolist(), strict=True)):
        slots = {place: slot for slot, place in enumerate(kept) if tokens[place] != eos}
        step = []
        for place, (value, tok, origin) in enumerate(zip(values, tokens, parents,
                                                           strict=True)):
            if not math.isfinite(value):
                continue
            if place in slots:
                status, extra = "kept", {"slot": slots[place]}
            elif tok == eos and place < k:
                status, extra = "finished", {"score": value / float(lp)}
            else:
                status, extra = "dropped", {}
            step.append(BeamCandidate(origin, tok, value, status, **extra))
        trace.steps[int(search.live[row])].append(step)


def _follow(search: _Search, stepper: Stepper, fed: torch.Tensor, token: torch.Tensor,
            parent: torch.Tensor, done: torch.Tensor, width: int) -> torch.Tensor:
    """The next step's input: the survivors' tokens (the whole prefixes without a cache);
    done sentences leave the batch and the cache follows the survivors (one copy)."""
    rows_now = token.shape[0]
    k = token.shape[1]
    rows = parent + torch.arange(rows_now, device=token.device)[:, None] * width  # (B, K)
    if bool(done.any()):
        keep = (~done).nonzero().squeeze(1)  # (B',)
        rows, token = rows[keep], token[keep]
        stepper.select(keep, rows.view(-1))
        search.keep(keep)
    elif not (k == width == 1):  # one hypothesis a sentence: nothing moves
        stepper.reorder(rows.view(-1))
    if stepper.cache is not None:
        return token.reshape(-1, 1)  # (B'·K, 1): the cache holds the past
    return torch.cat([fed[rows.view(-1)], token.reshape(-1, 1)], dim=1)  # (B'·K, t + 2)


def _answers(search: _Search, tokens: torch.Tensor, parents: torch.Tensor,
             config: TransformerConfig) -> list[list[int]]:
    """Each sentence's best finished hypothesis, read back along its parents; without
    ``<eos>`` and padding."""
    at, last, parent = search.at.tolist(), search.token.tolist(), search.parent.tolist()
    steps, back = tokens.tolist(), parents.tolist()  # (T, B, K) each: one copy to the host
    out = []
    for i, (end, token, slot) in enumerate(zip(at, last, parent, strict=True)):
        hyp = [token] if end >= 0 else []  # every sentence finishes: end >= 0
        for t in range(end - 1, -1, -1):
            hyp.append(steps[t][i][slot])
            slot = back[t][i][slot]
        hyp.reverse()
        out.append([x for x in hyp if x not in (config.eos_id, config.pad_id)])
    return out

"""Decoding: greedy search, beam search with a length penalty, and incremental decoding with
a key/value cache (Vaswani et al., 2017, Section 6.1).

Section 6.1: "we used beam search with a beam size of 4 and length penalty α = 0.6 [Wu et
al., 2016] ... We set the maximum output length during inference to input length + 50, but
terminate early when possible."

The length penalty of Wu et al. (2016) is ``lp(Y) = ((5 + |Y|) / 6)^α`` and a hypothesis
scores ``log P(Y | X) / lp(Y)``; ``|Y|`` counts the generated tokens including the final
``<eos>``. With α = 0 the score is the plain log-probability.

KV cache: the decoder keeps each layer's self-attention keys and values and extends them by
one token per step, so step t costs O(t) instead of re-running the whole prefix (O(t²));
the cross-attention keys and values are projected from the encoder output once per sentence.
Beam search reorders the self-attention cache along the chosen beams with ``index_select``
(:meth:`~transformer_book.nn.layers.DecoderCache.reorder`); the K beams of a sentence share one
copy of its encoder memory and cross-attention keys and values, and the first step decodes
only ``<bos>``, once per sentence.

Outputs are lists of token ids without ``<bos>``, ``<eos>`` or padding. Lengths: the
``max_len`` generated tokens (``<eos>`` not counted) default to source length + 50 per
sentence, capped at ``config.max_len - 1`` (the positions the model has).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import require, require_positive_int, require_tensor

__all__ = ["STOPPING_RULES", "beam_search", "greedy_decode", "length_penalty", "score_hypothesis"]

# How beam search decides that a sentence is done (see beam_search's docstring).
STOPPING_RULES = ("exact", "k_finished")
# Block sizes _top may rank candidates by (the largest that divides the row is used).
TOP_BLOCKS = (64, 32, 16, 8)


def length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """Wu et al. (2016): ``lp(Y) = ((5 + |Y|) / 6)^α``."""
    return ((5 + length) / 6) ** alpha


@contextmanager
def _inference(model: Transformer):
    """Eval mode (no dropout) and no gradients; the model's mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _check(model: Transformer, src_ids: torch.Tensor, max_len: int | None, min_len: int,
           extra: int) -> torch.Tensor:
    """Validate the arguments; return each sentence's length limit, long ``(B,)``."""
    require(isinstance(model, Transformer), "model", "a transformer_book Transformer",
            type(model).__name__)
    model.check_ids(src_ids, "src_ids")
    require_positive_int(min_len, "min_len", minimum=0)
    cap = model.config.max_len - extra  # decoder inputs are <bos> + generated tokens
    require(cap >= 1, "model", f"config.max_len >= {extra + 1} to decode", model.config.max_len)
    if max_len is None:  # Section 6.1: input length + 50, within the model's positions
        src_len = (src_ids != model.config.pad_id).sum(1)  # (B,)
        return (src_len + 50).clamp(max=cap)
    require_positive_int(max_len, "max_len")
    require(max_len <= cap, "max_len", f"at most {cap} (config.max_len={model.config.max_len})",
            max_len)
    return torch.full((src_ids.shape[0],), max_len, device=src_ids.device)


def _stepper(model: Transformer, src_ids: torch.Tensor, memory: torch.Tensor, use_cache: bool,
             normalize: bool = True,
             ) -> tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], None],
                        Callable[[torch.Tensor, torch.Tensor], None]]:
    """``step(prefix (N, t)) -> log-probs (N, V)`` of the next token, ``reorder(rows)`` and
    ``select(sentences, rows)``. With ``normalize=False`` ``step`` returns the logits
    instead, which rank the tokens the same (greedy decoding needs only the best one).

    ``prefix`` holds G = N / B hypotheses for each of the B sentences of ``src_ids (B, S)``
    and ``memory (B, S, d_model)`` (rows ``i·G .. i·G + G - 1`` for sentence i). With the
    cache only the prefix's last token is fed; without, the whole prefix is. ``reorder``
    makes the cache follow ``rows`` (long ``(N',)``) of the previous step's hypotheses (beam
    search); ``select`` keeps only ``sentences`` (long ``(B',)``), source and memory
    included, so that finished sentences stop costing work, and makes the cache follow
    ``rows`` of theirs in the same copy.
    """
    cache = model.new_cache() if use_cache else None
    state = {"src": src_ids, "memory": memory}
    never = torch.tensor([model.config.pad_id, model.config.bos_id], device=src_ids.device)

    def step(prefix: torch.Tensor) -> torch.Tensor:
        new = prefix[:, -1:] if use_cache else prefix  # (N, 1) or (N, t)
        logits = model.decode(new, state["memory"], state["src"], cache=cache)
        logp = logits[:, -1].float().contiguous()  # (N, T, V) -> (N, V)
        if normalize:
            torch.log_softmax(logp, dim=-1, out=logp)  # in place: no second (N, V) tensor
        return logp.index_fill_(1, never, -math.inf)  # <pad> and <bos> are never generated

    def reorder(rows: torch.Tensor) -> None:
        if cache is not None:
            cache.reorder(rows)

    def select(sentences: torch.Tensor, rows: torch.Tensor) -> None:
        state["src"] = state["src"].index_select(0, sentences)  # (B, S) -> (B', S)
        state["memory"] = state["memory"].index_select(0, sentences)  # (B', S, d_model)
        if cache is not None and cache.batch_size is not None:
            cache.select(sentences, rows)

    return step, reorder, select


def greedy_decode(
    model: Transformer,
    src_ids: torch.Tensor,
    max_len: int | None = None,
    use_cache: bool = True,
    min_len: int = 0,
) -> list[list[int]]:
    """Pick the most probable next token until ``<eos>``, batched: ``src_ids (B, S)`` ->
    B lists of ids (no ``<bos>``/``<eos>``/pad).

    Each sentence stops at its own ``<eos>`` or after ``max_len`` tokens (default: its
    source length + 50, Section 6.1). ``<eos>`` is forbidden before ``min_len`` tokens
    (``min_len = max_len`` forces exactly ``max_len`` steps, e.g. to time decoding).
    ``use_cache=False`` re-runs the decoder on the whole prefix at every step (same output).
    """
    limits = _check(model, src_ids, max_len, min_len, extra=1)
    config = model.config
    b, device = src_ids.shape[0], src_ids.device
    tokens = torch.full((b, int(limits.max()) + 1), config.pad_id, dtype=torch.long,
                        device=device)  # (B, max + 1): column t + 1 holds step t's token
    with _inference(model):
        memory = model.encode(src_ids)  # (B, S, d_model)
        step, _, select = _stepper(model, src_ids, memory, use_cache, normalize=False)
        prefix = torch.full((b, 1), config.bos_id, dtype=torch.long, device=device)
        live = torch.arange(b, device=device)  # the sentences still being decoded
        for t in range(int(limits.max())):
            logits = step(prefix)  # (N, V) for the N live sentences
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
                select(keep, keep)
    return [_strip(row, config) for row in tokens[:, 1:].tolist()]


def _strip(ids: Sequence[int], config) -> list[int]:
    """Cut at the first ``<eos>``, drop padding."""
    out = []
    for i in ids:
        if i == config.eos_id:
            break
        if i != config.pad_id:
            out.append(i)
    return out


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
) -> list[list[int]]:
    """Beam search with the length penalty of Wu et al. (2016), batched over B sentences
    (``B · beam_size`` decoder rows): ``src_ids (B, S)`` -> B lists of ids.

    Each step extends every live hypothesis by every token, keeps the ``2 · beam_size``
    best by log-probability, moves those ending in ``<eos>`` (among the top ``beam_size``)
    to the sentence's finished list with score ``log P / lp`` and keeps the ``beam_size``
    best others alive. A sentence stops when no live hypothesis can still beat its best
    finished one (log-probabilities only fall, lp is at most lp(max length)) or at its
    maximum length ``max_len_a · source length + max_len_b`` (Section 6.1: a = 1, b = 50),
    where ``<eos>`` is forced. Returns the best finished hypothesis of each sentence.
    ``min_len`` forbids ``<eos>`` before that many tokens. With α = 0 and beam size 1
    this is greedy decoding.

    ``stop`` is the stopping rule. ``"exact"`` (the default) is the one above: the search
    stops as soon as its answer is known, never earlier. ``"k_finished"`` also stops a
    sentence once ``beam_size`` hypotheses have finished, as fairseq does: fewer steps, but
    a better translation that needed a few more tokens may be missed (with beam size 1 it
    is greedy decoding for every α).
    """
    require(stop in STOPPING_RULES, "stop", f"one of {STOPPING_RULES}", repr(stop))
    require_positive_int(beam_size, "beam_size")
    require(isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha >= 0,
            "alpha", "a number >= 0", repr(alpha))
    require(isinstance(max_len_a, (int, float)) and max_len_a >= 0, "max_len_a",
            "a number >= 0", repr(max_len_a))
    require_positive_int(max_len_b, "max_len_b", minimum=0)
    _check(model, src_ids, 1, min_len, extra=1)
    config, k, device = model.config, beam_size, src_ids.device
    src_len = (src_ids != config.pad_id).sum(1)  # (B,)
    limits = (max_len_a * src_len + max_len_b).long().clamp(1, config.max_len - 1)  # (B,)
    b, vocab = src_ids.shape[0], config.vocab_size
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    with _inference(model):
        memory = model.encode(src_ids)  # (B, S, d_model): one copy, shared by the K beams
        step, reorder, select = _stepper(model, src_ids, memory, use_cache)
        # Hypotheses of sentence i are rows i·W .. i·W + W - 1: W = 1 (<bos>) at the first
        # step, then W = K. scores (B, W) holds their log-probabilities.
        prefix = torch.full((b, 1), config.bos_id, dtype=torch.long, device=device)
        scores = torch.zeros((b, 1), device=device)
        best = torch.full((b,), -math.inf, device=device)  # best finished score / lp
        count = torch.zeros(b, dtype=torch.long, device=device)  # finished hypotheses
        done = torch.zeros(b, dtype=torch.bool, device=device)
        sentence = list(range(b))  # original index of each sentence still being decoded
        final_lp = length_penalty(limits + 1, alpha)  # (B,): the largest lp a sentence can get
        for t in range(int(limits.max()) + 1):
            width = scores.shape[1]
            logp = step(prefix).view(b, width, vocab)  # (B·W, V) -> (B, W, V)
            forced = t >= limits  # (B,): only <eos> may follow (beats min_len)
            if t < min_len:
                logp[~forced, :, config.eos_id] = -math.inf
            if bool(forced.any()):
                logp[forced] = logp[forced].index_fill(-1, _not(vocab, config.eos_id, device),
                                                       -math.inf)
            # (B, W, 1) + (B, W, V) -> (B, W·V): every extension of every live hypothesis
            totals = logp.add_(scores[:, :, None]).view(b, width * vocab)
            cand, idx = _top(totals, 2 * k)
            beam, token = idx // vocab, idx % vocab  # (B, 2K) each
            rows = beam + torch.arange(b, device=device)[:, None] * width  # (B, 2K) of prefix
            ends = (token == config.eos_id) & cand.isfinite()
            ends[:, k:] = False  # only <eos> among the top K finishes a hypothesis
            if bool(ends.any()):
                lp = length_penalty(t + 1, alpha)
                at, slot = ends.nonzero(as_tuple=True)
                ended = [score / lp for score in cand[at, slot].tolist()]
                for i, score, hyp in zip(at.tolist(), ended, prefix[rows[at, slot], 1:].tolist(),
                                         strict=True):
                    finished[sentence[i]].append((score, hyp))
                best.scatter_reduce_(0, at, torch.tensor(ended, dtype=best.dtype, device=device),
                                     reduce="amax")
                count += ends.sum(1)
            # The K best candidates not ending in <eos> live on: (B, 2K) -> (B, K).
            order = (ends.long() * 2 * k + torch.arange(2 * k, device=device)).argsort(dim=1)
            keep = order[:, :k]
            scores, token = cand.gather(1, keep), token.gather(1, keep)  # (B, K) each
            rows = rows.gather(1, keep)  # (B, K): the prefix row each survivor extends
            # Done when no live hypothesis can beat the best finished one any more.
            bound = scores.max(1).values / final_lp  # (B,)
            done |= (best >= bound) | forced
            if stop == "k_finished":
                done |= count >= k
            if bool(done.all()):
                break
            if bool(done.any()):  # finished sentences leave the batch: (B, ...) -> (B', ...)
                keep = (~done).nonzero().squeeze(1)  # (B',)
                rows, token = rows[keep], token[keep]  # (B', K)
                select(keep, rows.view(-1))  # one copy of the cache: drop and reorder at once
                scores, best, count, done = scores[keep], best[keep], count[keep], done[keep]
                limits, final_lp = limits[keep], final_lp[keep]
                sentence = [sentence[i] for i in keep.tolist()]
                b = len(sentence)
            else:
                reorder(rows.view(-1))
            prefix = torch.cat([prefix[rows.view(-1)], token.view(-1, 1)], dim=1)  # (B·K, t+2)
    return [max(hyps)[1] for hyps in finished]


def _top(candidates: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``n`` largest of each row, best first, ``(B, C) -> values, indices (B, n)``; a
    row with fewer than ``n`` candidates (a tiny vocabulary at the first step) is padded
    with ``-inf`` at index 0, a dead candidate like those of a row's own ``-inf`` entries.

    A row of C = K·V candidates is long and n = 2K is small, so the search goes by blocks:
    the n largest values lie in the n blocks with the largest maxima (a block holding one
    of them has a maximum at least as large), and only those n blocks are ranked in full.
    The values are those of ``topk`` over the whole row; among equal values the indices
    may differ.
    """
    b, c = candidates.shape
    block = next((size for size in TOP_BLOCKS if c % size == 0 and c >= 4 * n * size), 0)
    if block:
        maxima = candidates.view(b, c // block, block).amax(-1)  # (B, C / block)
        _, blocks = maxima.topk(n, dim=1)  # (B, n)
        # (B, n, 1) · block + (block,) -> (B, n·block): the candidates of those blocks
        idx = (blocks[:, :, None] * block + torch.arange(block, device=blocks.device)).view(b, -1)
        values, at = candidates.gather(1, idx).topk(n, dim=1)  # (B, n)
        return values, idx.gather(1, at)
    values, indices = candidates.topk(min(n, c), dim=1)
    missing = n - values.shape[1]
    if missing:
        values = F.pad(values, (0, missing), value=-math.inf)
        indices = F.pad(indices, (0, missing), value=0)
    return values, indices


def _not(vocab: int, token: int, device) -> torch.Tensor:
    """Every id except ``token``: long ``(V - 1,)``."""
    ids = torch.arange(vocab, device=device)
    return ids[ids != token]


def score_hypothesis(
    model: Transformer, src_ids: torch.Tensor, hyp: Sequence[int], alpha: float = 0.6
) -> float:
    """``log P(hyp <eos> | src) / lp`` with ``lp = ((5 + |hyp| + 1) / 6)^α``, the score
    :func:`beam_search` maximises. ``src_ids`` is one sentence, ``(S,)`` or ``(1, S)``."""
    require_tensor(src_ids, "src_ids", ndim=(1, 2))
    src = src_ids.view(1, -1) if src_ids.ndim == 1 else src_ids
    require(src.shape[0] == 1, "src_ids", "one sentence, (S,) or (1, S)", tuple(src_ids.shape))
    config = model.config
    ids = torch.tensor([config.bos_id, *hyp, config.eos_id], device=src.device)[None]  # (1, n+2)
    with _inference(model):
        logp = torch.log_softmax(model(src, ids[:, :-1]).float(), dim=-1)  # (1, n+1, V)
        total = logp.gather(-1, ids[:, 1:, None]).sum()  # log P of each next token, summed
    return float(total) / length_penalty(len(hyp) + 1, alpha)

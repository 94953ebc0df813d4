"""The package's beam search equals a slow, obviously correct one on random tiny models.

The reference below is written from the rules in ``beam_search``'s docstring alone: one
sentence at a time, no cache (the whole prefix is decoded again at every step), float64,
plain Python lists. Each step:

1. every live hypothesis is extended by every token but ``<pad>`` and ``<bos>``; before
   ``min_len`` tokens ``<eos>`` is forbidden, at the sentence's length limit only ``<eos>``
   is allowed;
2. the ``2K`` best extensions by log-probability are kept;
3. those among the top ``K`` that end in ``<eos>`` finish, scored ``log P / lp(t + 1)``;
4. the ``K`` best of the ``2K`` that do *not* end in ``<eos>`` live on (an ``<eos>``
   between ranks K and 2K is dropped, never extended past its end);
5. the sentence stops when the best finished score beats every live score divided by the
   largest length penalty still possible, at its length limit, or (``k_finished``) once
   ``K`` hypotheses have finished.

The answer is the best finished hypothesis. ``<eos>`` is made more or less likely by a bias
on its logit, so that hypotheses finish early, late and in between.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_book.inference.beam import BeamTrace, beam_search, length_penalty
from transformer_book.inference.lengths import output_length_limits
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import BookError

F64 = torch.float64
PAD, BOS, EOS = 0, 1, 2


def random_model(seed: int, vocab: int, eos_boost: float, sharpness: float = 8.0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(vocab_size=vocab, d_model=16, num_heads=2, num_encoder_layers=1,
                               num_decoder_layers=1, d_ff=24, dropout=0.0, max_len=32,
                               generator_bias=True)
    model = Transformer(config).to(F64).eval()
    with torch.no_grad():
        model.generator.weight.mul_(sharpness)  # peaked distributions: real choices, few ties
        model.generator.bias.zero_()
        model.generator.bias[EOS] = eos_boost
    return model


def next_log_probs(model: Transformer, src: torch.Tensor, hyp: list[int]) -> list[float]:
    """log P(next token | src, hyp) over the vocabulary: the whole prefix, no cache."""
    with torch.no_grad():
        logits = model(src[None], torch.tensor([[BOS, *hyp]]))[0, -1]
    return torch.log_softmax(logits.to(F64), dim=-1).tolist()


def reference_beam(model: Transformer, src: torch.Tensor, k: int, alpha: float, limit: int,
                   min_len: int, stop: str) -> tuple[list[int], float]:
    """The rules of the module docstring, one sentence: (best hypothesis, its score)."""
    live: list[tuple[float, list[int]]] = [(0.0, [])]
    finished: list[tuple[float, list[int]]] = []
    for t in range(limit + 1):
        candidates = []
        for score, hyp in live:
            for token, logp in enumerate(next_log_probs(model, src, hyp)):
                if (token in (PAD, BOS) or (token == EOS and t < min_len and t < limit)
                        or (token != EOS and t >= limit)):
                    logp = -math.inf
                candidates.append((score + logp, hyp, token))
        candidates.sort(key=lambda c: -c[0])
        top = candidates[: 2 * k]
        for score, hyp, token in top[:k]:
            if token == EOS and math.isfinite(score):
                finished.append((score / length_penalty(t + 1, alpha), hyp))
        live = [(score, [*hyp, token]) for score, hyp, token in top if token != EOS][:k]
        best = max((s for s, _ in finished), default=-math.inf)
        bound = max(s for s, _ in live) / length_penalty(limit + 1, alpha) if live else -math.inf
        if best >= bound or t >= limit or (stop == "k_finished" and len(finished) >= k):
            break
    score, hyp = max(finished, key=lambda f: f[0])
    return hyp, score


def reference_score(model: Transformer, src: torch.Tensor, hyp: list[int], alpha: float) -> float:
    """log P(hyp <eos> | src) / lp(|hyp| + 1) in float64, token by token."""
    total = sum(next_log_probs(model, src, hyp[:i])[token]
                for i, token in enumerate([*hyp, EOS]))
    return total / length_penalty(len(hyp) + 1, alpha)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), eos_boost=st.floats(-3.0, 5.0),
       k=st.sampled_from([1, 2, 3, 5]), alpha=st.sampled_from([0.0, 0.6, 1.0, 2.0]),
       stop=st.sampled_from(["exact", "k_finished"]), min_len=st.integers(0, 2),
       max_len_b=st.integers(1, 8), vocab=st.integers(8, 14),
       sharpness=st.sampled_from([2.0, 8.0]))
def test_beam_search_equals_the_slow_reference(seed: int, eos_boost: float, k: int,
                                               alpha: float, stop: str, min_len: int,
                                               max_len_b: int, vocab: int,
                                               sharpness: float) -> None:
    model = random_model(seed, vocab, eos_boost, sharpness)
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 7, (6,), generator=generator)
    src = torch.randint(3, vocab, (6, int(lengths.max())), generator=generator)
    src[torch.arange(src.shape[1]) >= lengths[:, None]] = PAD
    found = beam_search(model, src, beam_size=k, alpha=alpha, max_len_a=0.5,
                        max_len_b=max_len_b, min_len=min_len, stop=stop)
    limits = output_length_limits(src, PAD, 0.5, max_len_b, model.config.max_len).tolist()
    for i, (hyp, limit) in enumerate(zip(found, limits, strict=True)):
        assert EOS not in hyp and all(t != PAD and t != BOS for t in hyp)
        expected, expected_score = reference_beam(model, src[i], k, alpha, limit, min_len, stop)
        if hyp != expected:  # a tie: another hypothesis of the same score
            got = reference_score(model, src[i], hyp, alpha)
            assert math.isclose(got, expected_score, rel_tol=1e-9, abs_tol=1e-9), (i, hyp,
                                                                                   expected)


def test_an_eos_ranked_below_the_beam_is_dropped_not_extended() -> None:
    """The case the rule is for, found by search: at some step one hypothesis's <eos> is in
    the top K and another's ranks between K and 2K. Were the second kept alive, it would be
    extended past its <eos> and, with α = 2 favouring long outputs, win as
    ``[7, 7, 7, 7, 7, <eos>]``. Dropped, the answer is the reference's."""
    model = random_model(8, 10, eos_boost=1.0, sharpness=2.0)
    src = torch.tensor([[3, 4, 5, 6], [7, 8, 9, 0], [5, 5, 5, 5]])
    found = beam_search(model, src, beam_size=3, alpha=2.0, max_len_a=0.0, max_len_b=8)
    for i, hyp in enumerate(found):
        assert EOS not in hyp
        expected, _ = reference_beam(model, src[i], 3, 2.0, 8, 0, "exact")
        assert hyp == expected


def traced_hypothesis(steps: list, t: int, candidate) -> list[int]:
    """The ids of ``candidate`` (at step ``t``), read back through its parents' slots."""
    ids = [candidate.token]
    parent = candidate.parent
    for step in reversed(steps[:t]):
        (previous,) = [c for c in step if c.status == "kept" and c.slot == parent]
        ids.append(previous.token)
        parent = previous.parent
    return ids[::-1]


@pytest.mark.parametrize(("cache", "stop"), [
    ("growing", "exact"), ("static", "exact"), ("none", "k_finished"),
    ("growing", "k_finished")])
def test_a_traced_search_returns_the_same_ids_and_its_trace_rebuilds_them(
        cache: str, stop: str) -> None:
    """Tracing changes nothing: the same output with and without it (every cache
    alike). Every step keeps at most K hypotheses, each candidate extends a kept
    one of the step before, and the best finished candidate of the trace, read back
    through its parents, is the returned translation without its <eos>."""
    vocab = 256  # long enough rows (K·V) for fast_top_candidates' blocks
    model = random_model(3, vocab, eos_boost=2.0, sharpness=3.0)
    generator = torch.Generator().manual_seed(3)
    src = torch.randint(3, vocab, (4, 5), generator=generator)
    src[1, 3:] = PAD
    kwargs = dict(beam_size=3, alpha=0.6, max_len_a=0.5, max_len_b=6, cache=cache, stop=stop)
    plain = beam_search(model, src, **kwargs)
    trace = BeamTrace()
    assert beam_search(model, src, trace=trace, **kwargs) == plain
    assert len(trace.steps) == len(plain)
    for steps, hyp in zip(trace.steps, plain, strict=True):
        finished = []
        for t, step in enumerate(steps):
            kept = [c for c in step if c.status == "kept"]
            assert len(kept) <= 3 and (kept or t == len(steps) - 1), "K live, but at the end"
            assert sorted(c.slot for c in kept) == list(range(len(kept)))
            assert [c.log_prob for c in step] == sorted((c.log_prob for c in step),
                                                        reverse=True), "best first"
            width = 1 if t == 0 else len([c for c in steps[t - 1] if c.status == "kept"])
            assert all(0 <= c.parent < width for c in step)
            finished += [(c.score, traced_hypothesis(steps, t, c)) for c in step
                         if c.status == "finished"]
            assert all(c.token == EOS for c in step if c.status == "finished")
        best = max(finished, key=lambda pair: pair[0])
        assert best[1] == [*hyp, EOS]


def test_a_trace_must_be_a_beam_trace() -> None:
    model = random_model(0, 10, eos_boost=0.0)
    with pytest.raises(BookError, match="trace: expected a BeamTrace or None"):
        beam_search(model, torch.tensor([[3, 4]]), trace=[])

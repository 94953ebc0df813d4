"""Tests of transformer_book.inference's greedy, beam and lengths modules: KV cache = no cache,
beam 1 = greedy, beam search finds scores at least greedy's (and the optimum when the beam
holds every hypothesis), EOS and length handling, batch independence, bad arguments."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from transformer_book.data.toy import make_toy_task, toy_batches
from transformer_book.inference import beam
from transformer_book.inference.beam import (
    STOPPING_RULES,
    TOP_BLOCKS,
    beam_search,
    fast_top_candidates,
    length_penalty,
    score_hypothesis,
    top_candidates,
)
from transformer_book.inference.greedy import greedy_decode
from transformer_book.inference.lengths import output_length_limits
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.kv_cache import KV, DecoderCache
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import BookError

F64 = torch.float64
V = 16  # ids 0-3 are <pad> <bos> <eos> <unk>


def tiny(vocab: int = V, seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig.preset("tiny", vocab, **{"dropout": 0.0, "max_len": 64, **overrides})
    return Transformer(config).eval()


@pytest.fixture(scope="module")
def trained() -> Transformer:
    """A tiny model trained briefly on the copy task: confident but not perfect."""
    m = tiny()
    optimizer = torch.optim.Adam(m.parameters(), lr=3e-3, betas=(0.9, 0.98))
    m.train()
    for src, tgt in toy_batches(make_toy_task("copy", 32 * 40, 1, 6, V, seed=0), 32):
        loss = F.cross_entropy(m(src, tgt[:, :-1]).reshape(-1, V), tgt[:, 1:].reshape(-1),
                               ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return m.eval()


@pytest.fixture(scope="module")
def sources() -> torch.Tensor:
    src, _ = toy_batches(make_toy_task("copy", 6, 2, 7, V, seed=1), 6)[0]
    return src  # (6, S), right-padded


# ----------------------------------------------------------------------------- KV cache


@pytest.mark.parametrize("norm_first", [False, True])
def test_step_by_step_cached_logits_equal_full_logits(norm_first: bool) -> None:
    m = tiny(norm_first=norm_first).to(F64)
    src = torch.tensor([[5, 6, 7, 8, 0], [9, 10, 0, 0, 0]])
    tgt = torch.tensor([[1, 4, 9, 11, 2, 6], [1, 12, 3, 3, 5, 7]])
    with torch.no_grad():
        memory = m.encode(src)
        full = m.decode(tgt, memory, src)  # (B, T, V)
        cache = m.new_cache()
        steps = [m.decode(tgt[:, t : t + 1], memory, src, cache=cache) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-12, atol=1e-12)
    assert cache.length == 6 and len(cache.cross_kv) == 2
    assert cache.cross_kv[0].k.shape == (2, 4, 5, 16)  # (B, h, S, d_k), projected once


@pytest.mark.slow  # trains a tiny model (the trained fixture)
def test_greedy_with_cache_equals_without(trained: Transformer, sources: torch.Tensor) -> None:
    cached = greedy_decode(trained, sources, max_len_a=0.0, max_len_b=10)
    assert cached == greedy_decode(trained, sources, max_len_a=0.0, max_len_b=10, cache="none")


@pytest.mark.slow  # trains a tiny model (the trained fixture)
def test_beam_with_cache_equals_without(trained: Transformer, sources: torch.Tensor) -> None:
    args = dict(beam_size=3, max_len_a=1.0, max_len_b=3)
    assert beam_search(trained, sources, **args) == \
        beam_search(trained, sources, cache="none", **args)


def _same_top(fast: tuple[torch.Tensor, torch.Tensor], plain: tuple[torch.Tensor, torch.Tensor],
              x: torch.Tensor) -> None:
    """Equal rankings: the same values, best first; indices that point at them, none twice;
    the same indices for every value above the n-th (only ties at the end may differ)."""
    (values, indices), (top_values, top_indices) = fast, plain
    assert torch.equal(values, top_values), "the values of topk"
    assert torch.equal(x.gather(1, indices), values), "indices pointing at the values"
    assert all(len(set(row)) == len(row) for row in indices.tolist()), "no candidate twice"
    above = values > values[:, -1:]  # (B, n): the candidates no tie can displace
    for row, (ours, theirs) in enumerate(zip(indices, top_indices, strict=True)):
        assert set(ours[above[row]].tolist()) == set(theirs[above[row]].tolist()), row


def test_the_fast_path_ranks_candidates_as_topk() -> None:
    """fast_top_candidates ranks long rows by blocks; on fresh random rows (ties at the top,
    in the middle and across the n-th place, -inf entries, a row with two finite entries)
    it gives top_candidates' ranking."""
    generator = torch.Generator().manual_seed(0)
    shapes = [(5, 4 * 4000, 8), (3, 4000, 8), (4, 1024, 8), (2, 2048, 2), (3, 8 * 2048, 16)]
    for trial, (b, c, n) in enumerate(shapes * 4):
        x = torch.log_softmax(torch.randn(b, c, generator=generator) * 3, dim=1)
        x[:, torch.randperm(c, generator=generator)[: c // 7]] = -torch.inf  # masked tokens
        x[0, 100:110] = x[0].max()  # ties at the top
        x[1] = -torch.inf  # a row with nothing finite but two entries
        x[1, [3, 900]] = -1.0
        if trial % 2:  # coarse values: ties everywhere, across the n-th place too
            x = (x * 2).round() / 2
        assert any(c % size == 0 and c >= 4 * n * size for size in TOP_BLOCKS), "blocks used"
        _same_top(fast_top_candidates(x, n), top_candidates(x, n), x)
    short = torch.randn(2, 5, generator=generator)  # no block fits: padded as top_candidates
    assert torch.equal(fast_top_candidates(short, 8)[0], top_candidates(short, 8)[0])


def test_beam_search_is_the_same_with_topk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vocabulary large enough for fast_top_candidates' blocks, a random model: the same
    search with plain topk ranking the candidates."""
    model = tiny(vocab=256, seed=3)
    src = torch.randint(4, 256, (5, 9), generator=torch.Generator().manual_seed(1))
    src[2, 5:] = 0
    args = dict(beam_size=4, max_len_a=0.0, max_len_b=8)
    fast = beam_search(model, src, **args)
    monkeypatch.setattr(beam, "fast_top_candidates", top_candidates)
    assert fast == beam_search(model, src, **args)


# ----------------------------------------------------------------------------- search quality


@pytest.mark.slow  # trains a tiny model (the trained fixture)
def test_beam_of_one_without_length_penalty_is_greedy(trained: Transformer,
                                                      sources: torch.Tensor) -> None:
    greedy = greedy_decode(trained, sources, max_len_a=0.0, max_len_b=9)
    assert beam_search(trained, sources, beam_size=1, alpha=0.0, max_len_a=0.0,
                       max_len_b=9) == greedy
    random_model = tiny(seed=3)
    assert beam_search(random_model, sources, beam_size=1, alpha=0.0, max_len_a=0.0,
                       max_len_b=9) == greedy_decode(random_model, sources, 0.0, 9)


@pytest.mark.slow  # trains a tiny model (the trained fixture)
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_scores_at_least_as_well_as_greedy(trained: Transformer,
                                                       sources: torch.Tensor,
                                                       alpha: float) -> None:
    """Not a theorem for a beam of 4, but what beam search is for: checked on 12 sentences
    and two models (trained, random) under the same score log P / lp."""
    for m in (trained, tiny(seed=4)):
        greedy = greedy_decode(m, sources, max_len_a=0.0, max_len_b=12)
        beams = beam_search(m, sources, beam_size=4, alpha=alpha, max_len_a=0.0, max_len_b=12)
        for i, (g, b) in enumerate(zip(greedy, beams, strict=True)):
            s_beam = score_hypothesis(m, sources[i], b, alpha)
            s_greedy = score_hypothesis(m, sources[i], g, alpha)
            assert s_beam >= s_greedy - 1e-5, (i, b, g, s_beam, s_greedy)


@pytest.mark.slow  # trains a tiny model (the trained fixture)
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_stopping_at_the_first_finished_hypothesis_with_a_beam_of_one_is_greedy(
        trained: Transformer, sources: torch.Tensor, alpha: float) -> None:
    assert beam_search(trained, sources, beam_size=1, alpha=alpha,
                       stop="k_finished") == greedy_decode(trained, sources)


def _beam_and_rows(model: Transformer, sources: torch.Tensor, stop: str
                   ) -> tuple[list[list[int]], int]:
    """Beam 3's translations and the decoder rows it used (a forward pre-hook counts them)."""
    rows: list[int] = []
    hook = model.decoder.register_forward_pre_hook(
        lambda module, args: rows.append(args[0].shape[0]))  # args[0]: (N, T, d_model)
    try:
        found = beam_search(model, sources, beam_size=3, stop=stop)
        return found, sum(rows)
    finally:
        hook.remove()


@pytest.mark.slow  # trains a tiny model (the trained fixture)
def test_k_finished_stops_no_later_and_never_beats_the_exact_rule(trained: Transformer,
                                                                  sources: torch.Tensor) -> None:
    """Sentence by sentence, the fairseq-style rule runs a prefix of the exact search: never
    more decoder rows, and a best hypothesis that scores at most as high."""
    assert STOPPING_RULES == ("exact", "k_finished")
    exact, exact_rows = _beam_and_rows(trained, sources, "exact")
    early, early_rows = _beam_and_rows(trained, sources, "k_finished")
    assert early_rows <= exact_rows
    for i, (e, k) in enumerate(zip(exact, early, strict=True)):
        score_early = score_hypothesis(trained, sources[i], k)
        assert score_early <= score_hypothesis(trained, sources[i], e) + 1e-5


def test_a_beam_holding_every_hypothesis_finds_the_best_one() -> None:
    """Tokens {<eos>, 3, 4, 5} (the others can never be generated), at most 3 tokens: 40
    hypotheses, checked exhaustively. A beam of 36 (no wider than the vocabulary of 40)
    keeps every candidate at every step: 4, then 12, then 36, then 27 forced <eos>."""
    m = tiny(vocab=40, seed=5, generator_bias=True)  # a bias to steer with
    with torch.no_grad():
        m.generator.bias[6:] = -math.inf
    src = torch.tensor([[3, 4, 5, 4], [5, 5, 0, 0]])
    hyps = [list(h) for n in range(4) for h in itertools.product((3, 4, 5), repeat=n)]
    log_p = [{tuple(h): score_hypothesis(m, src[i], h, alpha=0.0) for h in hyps} for i in range(2)]
    for alpha in (0.0, 0.6, 2.0):
        found = beam_search(m, src, beam_size=36, alpha=alpha, max_len_a=0.0, max_len_b=3)
        for i in range(2):
            best = max(hyps, key=lambda h: log_p[i][tuple(h)] / length_penalty(len(h) + 1, alpha))
            assert found[i] == best, (alpha, i)


def test_length_penalty_is_wu_et_al() -> None:
    assert length_penalty(1, 0.6) == 1.0
    assert length_penalty(7, 0.6) == pytest.approx(2**0.6)
    assert length_penalty(30, 0.0) == 1.0


# ----------------------------------------------------------------------------- EOS and length


@pytest.mark.slow  # trains a tiny model (the trained fixture)
def test_eos_stops_each_sentence_and_is_never_returned(trained: Transformer,
                                                       sources: torch.Tensor) -> None:
    for out in (greedy_decode(trained, sources), beam_search(trained, sources)):
        assert len({len(o) for o in out}) > 1, "every sentence ran to the same length"
        assert all(t >= 3 for o in out for t in o), "a special token in the output"
        assert sum(len(o) < 20 for o in out) >= 4, "sentences did not stop at <eos>"


def test_immediate_eos_gives_empty_outputs_and_min_len_delays_it(
        sources: torch.Tensor) -> None:
    m = tiny(generator_bias=True)
    with torch.no_grad():
        m.generator.bias[m.config.eos_id] = 50.0  # <eos> always wins
    assert greedy_decode(m, sources) == [[]] * 6
    assert beam_search(m, sources) == [[]] * 6
    assert all(len(o) == 3 for o in greedy_decode(m, sources, min_len=3))
    assert all(len(o) == 3 for o in beam_search(m, sources, min_len=3))


def test_maximum_lengths_follow_section_6_1() -> None:
    m = tiny(generator_bias=True)
    with torch.no_grad():
        m.generator.bias[m.config.eos_id] = -50.0  # <eos> never wins
    src = torch.tensor([[5, 6, 7, 0, 0, 0, 0, 0, 0, 0], [5] * 10])
    assert [len(o) for o in greedy_decode(m, src)] == [53, 60]  # source length + 50
    assert [len(o) for o in greedy_decode(m, src, max_len_a=0.0, max_len_b=4)] == [4, 4]
    assert [len(o) for o in beam_search(m, src, max_len_a=1.0, max_len_b=2)] == [5, 12]
    short = tiny(max_len=20, generator_bias=True)
    with torch.no_grad():
        short.generator.bias[short.config.eos_id] = -50.0
    assert [len(o) for o in greedy_decode(short, src)] == [19, 19]  # capped by positions
    assert [len(o) for o in beam_search(short, src, beam_size=2)] == [19, 19]
    assert [len(o) for o in greedy_decode(short, src, max_len_a=0.0, max_len_b=65)] == [19, 19]


def test_output_length_limits_are_per_sentence_and_capped() -> None:
    src = torch.tensor([[5, 6, 7, 0, 0, 0], [5, 6, 7, 8, 9, 10], [5, 0, 0, 0, 0, 0]])
    limits = output_length_limits(src, 0, 1.0, 50, 64)
    assert limits.dtype == torch.long and limits.tolist() == [53, 56, 51]
    assert output_length_limits(src, 0, 1.5, 2, 64).tolist() == [6, 11, 3]  # rounded down
    assert output_length_limits(src, 0, 0.0, 7, 64).tolist() == [7, 7, 7]
    assert output_length_limits(src, 0, 1.0, 50, 20).tolist() == [19, 19, 19]  # <bos> + 19
    assert output_length_limits(src, 0, 0.0, 0, 20).tolist() == [1, 1, 1]  # at least one
    # A sentence's limit does not depend on the others in its batch (or their padding).
    assert output_length_limits(src[2:, :1], 0, 1.0, 50, 64).tolist() == [51]
    with pytest.raises(BookError, match="max_positions: expected an integer >= 2"):
        output_length_limits(src, 0, 1.0, 50, 1)
    with pytest.raises(BookError, match="max_len_a: expected a finite number >= 0"):
        output_length_limits(src, 0, "1", 50, 64)


def test_huge_length_budgets_mean_as_long_as_the_model_allows() -> None:
    """``a · |x|`` used to overflow float32 to inf, which ``.long()`` made -2**63, clamped
    to a single token; a huge ``b`` was an OverflowError."""
    src = torch.tensor([[5, 6, 7, 0], [0, 0, 0, 0]])  # the second row: no real token
    assert output_length_limits(src, 0, 1e300, 5, 64).tolist() == [63, 5]
    assert output_length_limits(src, 0, 1.0, 10**30, 64).tolist() == [63, 63]
    assert output_length_limits(src, 0, 1e300, 10**30, 64).tolist() == [63, 63]
    assert output_length_limits(src, 0, 2.0, 1, 64).tolist() == [7, 1]  # unchanged below


@pytest.mark.slow  # trains a tiny model (the trained fixture)
def test_decoding_is_batch_independent(trained: Transformer, sources: torch.Tensor) -> None:
    greedy = greedy_decode(trained, sources)
    beams = beam_search(trained, sources, beam_size=3)
    for i in range(sources.shape[0]):
        one = sources[i : i + 1, : int((sources[i] != 0).sum())]
        assert greedy_decode(trained, one) == [greedy[i]]
        assert beam_search(trained, one, beam_size=3) == [beams[i]]


def test_cache_reorder_and_select_follow_the_hypotheses() -> None:
    """Two reorders in a row compose, and select keeps sentences (cross-attention) and their
    hypotheses (self-attention): the next step's logits equal those of a cache indexed by
    hand."""
    torch.manual_seed(0)
    m = Transformer(TransformerConfig.preset("tiny", 23, dropout=0.0)).to(torch.float64).eval()
    src = torch.randint(3, 23, (2, 5))
    tgt = torch.randint(3, 23, (6, 4))  # 3 hypotheses per sentence
    first, second = torch.tensor([2, 2, 0, 4, 3, 5]), torch.tensor([1, 0, 2, 5, 5, 3])
    with torch.no_grad():
        memory = m.encode(src)
        cache, by_hand = m.new_cache(), m.new_cache()
        for c in (cache, by_hand):
            m.decode(tgt[:, :2], memory, src, cache=c)
        cache.reorder(first)
        cache.reorder(second)
        by_hand.self_kv = [KV.of(kv.k[first][second], kv.v[first][second])
                           for kv in by_hand.self_kv]
        out = m.decode(tgt[:, 2:3], memory, src, cache=cache)
        torch.testing.assert_close(out, m.decode(tgt[:, 2:3], memory, src, cache=by_hand))
        assert cache.length == 3 and cache.batch_size == 6
        cache.select(torch.tensor([1]), torch.tensor([4, 5, 3]))  # keep sentence 1 only
        assert cache.batch_size == 3 and cache.cross_kv[0].rows == 1
        out = m.decode(tgt[3:, 3:4], memory[1:], src[1:], cache=cache)
        by_hand.self_kv = [KV.of(kv.k[[4, 5, 3]], kv.v[[4, 5, 3]]) for kv in by_hand.self_kv]
        by_hand.cross_kv = [KV.of(kv.k[1:], kv.v[1:]) for kv in by_hand.cross_kv]
        torch.testing.assert_close(out, m.decode(tgt[3:, 3:4], memory[1:], src[1:], cache=by_hand))


def test_reorder_leaves_room_that_the_next_extend_fills_in_place() -> None:
    torch.manual_seed(0)
    k, v = torch.randn(3, 2, 4, 5), torch.randn(3, 2, 4, 5)  # (N, h, t, d_k)
    cache = DecoderCache()
    cache.extend(0, k, v)
    index = torch.tensor([2, 0, 0, 1])
    cache.reorder(index)
    assert cache.length == 4 and cache.batch_size == 4
    entry = cache.self_kv[0]
    assert entry.length == 4 and entry.k.shape == (4, 2, 5, 5), "room for one more position"
    torch.testing.assert_close(entry.cached()[0], k[index], rtol=0, atol=0)
    buffer = entry.k
    new_k, new_v = torch.randn(4, 2, 1, 5), torch.randn(4, 2, 1, 5)
    out_k, out_v = cache.extend(0, new_k, new_v)
    assert out_k.data_ptr() == buffer.data_ptr() and out_k.is_contiguous(), "written in place"
    torch.testing.assert_close(out_k, torch.cat([k[index], new_k], 2), rtol=0, atol=0)
    torch.testing.assert_close(out_v, torch.cat([v[index], new_v], 2), rtol=0, atol=0)
    out_k, _ = cache.extend(0, new_k, new_v)  # no room left: appended
    assert cache.length == 6 and out_k.shape == (4, 2, 6, 5)
    torch.testing.assert_close(out_k[:, :, 5:], new_k, rtol=0, atol=0)


@pytest.mark.slow  # trains a tiny model (the trained fixture)
@pytest.mark.parametrize("cache", ["growing", "none"])
def test_finished_sentences_leave_the_batch(trained: Transformer, sources: torch.Tensor,
                                            cache: str) -> None:
    """Sentences that are done cost no more decoder work: the rows fed to the decoder shrink
    as they finish, and every sentence still gets what it gets when decoded alone."""
    rows: list[int] = []
    decode = trained.decode

    def counting(tgt, *args, **kwargs):
        rows.append(tgt.shape[0])
        return decode(tgt, *args, **kwargs)

    trained.decode = counting  # instance attribute: shadows the method for this test only
    try:
        greedy = greedy_decode(trained, sources, cache=cache)
        greedy_rows, rows[:] = list(rows), []
        beams = beam_search(trained, sources, beam_size=3, cache=cache)
        beam_rows = list(rows)
    finally:
        del trained.decode
    b = sources.shape[0]
    lengths = sorted({len(g) for g in greedy})
    assert len(lengths) > 1, "the fixture must hold sentences that finish at different steps"
    assert greedy_rows[0] == b and greedy_rows[-1] < b and greedy_rows == sorted(greedy_rows)[::-1]
    # Beam search decodes <bos> once per sentence, then K = 3 hypotheses per sentence.
    assert beam_rows[0] == b and beam_rows[1] == 3 * b and beam_rows[-1] < 3 * b
    assert all(r % 3 == 0 for r in beam_rows[1:]) and beam_rows[1:] == sorted(beam_rows[1:])[::-1]
    for i in range(b):
        one = sources[i : i + 1, : int((sources[i] != 0).sum())]
        assert greedy_decode(trained, one, cache=cache) == [greedy[i]]
        assert beam_search(trained, one, beam_size=3, cache=cache) == [beams[i]]


def test_decoding_restores_training_mode_and_tracks_no_gradients(sources: torch.Tensor) -> None:
    m = tiny(dropout=0.5).train()
    assert greedy_decode(m, sources, max_len_b=5) == greedy_decode(m, sources, max_len_b=5)
    assert m.training
    assert beam_search(m, sources, max_len_b=3) == beam_search(m, sources, max_len_b=3)
    assert m.training


# ----------------------------------------------------------------------------- bad input


def _refused(argument: str, call) -> None:
    """``call()`` raises a BookError naming ``argument`` first (not pinned to its wording)."""
    with pytest.raises(BookError) as refused:
        call()
    assert str(refused.value).startswith(f"{argument}: expected"), str(refused.value)


def test_bad_arguments_raise_value_errors(sources: torch.Tensor) -> None:
    m = tiny()
    _refused("beam_size", lambda: beam_search(m, sources, beam_size=0))
    _refused("beam_size", lambda: beam_search(m, sources, beam_size=17))  # above the vocabulary
    _refused("alpha", lambda: beam_search(m, sources, alpha=-1))
    _refused("max_len_b", lambda: beam_search(m, sources, max_len_b=-2))
    _refused("stop", lambda: beam_search(m, sources, stop="early"))
    _refused("max_len_a", lambda: greedy_decode(m, sources, max_len_a=-1.0))
    _refused("max_len_b", lambda: greedy_decode(m, sources, max_len_b=2.5))
    _refused("min_len", lambda: greedy_decode(m, sources, min_len=-1))
    _refused("src_ids", lambda: greedy_decode(m, sources.float()))
    _refused("model", lambda: greedy_decode(torch.nn.Linear(2, 2), sources))
    _refused("src_ids", lambda: score_hypothesis(m, sources, [4, 5]))


@pytest.mark.parametrize("alpha", [math.inf, -math.inf, math.nan, 1000.0, 1e6, 10.5, -0.1,
                                   "0.6", None, True])
def test_a_length_penalty_exponent_outside_0_to_10_is_refused(sources: torch.Tensor,
                                                               alpha) -> None:
    """α = inf scored every hypothesis -0.0 (one-token translations), α = 1000 crashed with
    an OverflowError: every α outside [0, MAX_ALPHA] is refused where it enters."""
    m = tiny()
    expected = r"alpha: expected a finite number >= 0 and <= 10, received "
    with pytest.raises(BookError, match=expected):
        beam_search(m, sources, alpha=alpha, max_len_b=3)
    with pytest.raises(BookError, match=expected):
        score_hypothesis(m, sources[0], [4, 5], alpha=alpha)
    with pytest.raises(BookError, match=expected):
        length_penalty(200, alpha)


def test_the_largest_alpha_still_decodes_and_its_penalty_stays_finite(sources) -> None:
    assert beam.MAX_ALPHA == 10.0
    out = beam_search(tiny(), sources, alpha=10.0, max_len_b=3)
    assert len(out) == sources.shape[0]
    assert math.isfinite(length_penalty(63, 10.0))
    assert beam.check_alpha(10.0, max_len=64) == 10.0
    # A model with a million positions: lp(10^6 tokens)^10 ~ 1e52 is inf in float32.
    with pytest.raises(BookError, match="alpha: expected a length penalty that stays finite "
                                        "in float32 for 1000000 tokens, received 10"):
        beam.check_alpha(10.0, max_len=1_000_000)


@pytest.mark.parametrize("beam_size", [17, 100, 10**9])
def test_a_beam_wider_than_the_vocabulary_is_refused(sources: torch.Tensor, beam_size) -> None:
    """It used to hold dead hypotheses at the first step and return, silently, whatever
    (often the empty translation); now the beam is at most the vocabulary size."""
    m = tiny()
    with pytest.raises(BookError, match=rf"beam_size: expected an integer >= 1 and <= 16, "
                                        rf"received {beam_size}"):
        beam_search(m, sources, beam_size=beam_size)
    assert len(beam_search(m, sources, beam_size=V, max_len_b=2)) == sources.shape[0]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"max_len_b": -10}, r"max_len_b: expected an integer >= 0, received -10"),
    ({"max_len_b": 2.0}, r"max_len_b: expected an integer >= 0, received 2.0"),
    ({"max_len_a": math.inf}, r"max_len_a: expected a finite number >= 0, received inf"),
    ({"max_len_a": math.nan}, r"max_len_a: expected a finite number >= 0, received nan"),
    ({"min_len": 1.5}, r"min_len: expected an integer >= 0, received 1.5"),
])
def test_greedy_and_beam_refuse_bad_length_arguments(sources: torch.Tensor, kwargs,
                                                     match) -> None:
    m = tiny()
    for decode in (greedy_decode, beam_search):
        with pytest.raises(BookError, match=match):
            decode(m, sources, **kwargs)


def test_score_hypothesis_refuses_a_hypothesis_that_is_no_list_of_ids(sources) -> None:
    m = tiny()
    for hyp in ("45", [4, 5.0], [4, True], None):
        with pytest.raises(BookError, match="hyp: expected a list of integer token ids"):
            score_hypothesis(m, sources[0], hyp)


def test_cached_decoding_equals_uncached_in_float64_on_fresh_random_inputs() -> None:
    """New tokens fed in chunks of 3, 1, 2 and 1 through the cache, with a beam-style
    reorder between two chunks, give the logits of the whole (reordered) prefix decoded
    without a cache; greedy and beam search give the same outputs either way."""
    generator = torch.Generator().manual_seed(11)
    m = tiny(vocab=29, seed=7).to(F64)
    src = torch.randint(3, 29, (3, 6), generator=generator)
    src[1, 4:], src[2, 2:] = 0, 0  # padded sources
    tgt = torch.randint(3, 29, (3, 7), generator=generator)
    tgt[:, 0] = m.config.bos_id
    order = torch.tensor([2, 0, 0])  # hypotheses 0 and 1 both continue row 0 (one sentence)
    with torch.no_grad():
        memory = m.encode(src)
        cache = m.new_cache()
        before = [m.decode(tgt[:, :3], memory, src, cache=cache),
                  m.decode(tgt[:, 3:4], memory, src, cache=cache)]
        torch.testing.assert_close(torch.cat(before, 1), m.decode(tgt[:, :4], memory, src),
                                   rtol=1e-12, atol=1e-12)
        one = src[:1].expand(3, -1)  # the reorder is within one sentence: three hypotheses
        cache = m.new_cache()
        m.decode(tgt[:, :4], m.encode(one), one, cache=cache)
        cache.reorder(order)
        moved = torch.cat([tgt[order, :4], tgt[:, 4:]], dim=1)  # (3, 7): the reordered prefix
        after = [m.decode(moved[:, 4:6], m.encode(one), one, cache=cache),
                 m.decode(moved[:, 6:7], m.encode(one), one, cache=cache)]
        full = m.decode(moved, m.encode(one), one)[:, 4:]
        torch.testing.assert_close(torch.cat(after, 1), full, rtol=1e-12, atol=1e-12)
    assert greedy_decode(m, src, 0.0, 6) == greedy_decode(m, src, 0.0, 6, cache="none")
    assert beam_search(m, src, beam_size=3, max_len_a=0.0, max_len_b=6) == \
        beam_search(m, src, beam_size=3, max_len_a=0.0, max_len_b=6, cache="none")

"""nn/kv_cache.py's StaticDecoderCache and the searches' caches: equal, in float64 on
fresh random models with padded sources, to the growing DecoderCache and to no cache."""

from __future__ import annotations

import pytest
import torch

from transformer_book.inference.beam import beam_search
from transformer_book.inference.greedy import greedy_decode
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.kv_cache import DecoderCache, StaticDecoderCache
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import BookError

VOCAB = 40


def _model(seed: int, norm_first: bool = False) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig.preset("tiny", VOCAB, max_len=32, dropout=0.0,
                                      norm_first=norm_first, final_norm=norm_first)
    return Transformer(config).double().eval()


def _padded_sources(seed: int, b: int = 5, s: int = 9) -> torch.Tensor:
    """Right-padded source ids ``(b, s)`` of lengths between 2 and ``s``."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (b, s), generator=gen)
    lengths = torch.randint(2, s + 1, (b,), generator=gen)
    lengths[0] = s
    src[torch.arange(s)[None, :] >= lengths[:, None]] = 0  # pad_id = 0
    return src


def _stepwise_logits(model: Transformer, src: torch.Tensor, tgt: torch.Tensor,
                     cache: DecoderCache, chunks: list[int]) -> torch.Tensor:
    """Decode ``tgt (B, T)`` through ``cache`` in chunks of the given lengths: ``(B, T, V)``."""
    memory = model.encode(src)
    out, start = [], 0
    for size in chunks:
        out.append(model.decode(tgt[:, start:start + size], memory, src, cache=cache))
        start += size
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("norm_first", [False, True])
def test_static_cache_logits_equal_growing_cache_and_no_cache(seed: int,
                                                              norm_first: bool) -> None:
    model, src = _model(seed, norm_first), _padded_sources(seed)
    tgt = torch.randint(4, VOCAB, (src.shape[0], 10))
    with torch.no_grad():
        full = model.decode(tgt, model.encode(src), src)  # no cache: the whole prefix at once
        for chunks in ([1] * 10, [3, 1, 1, 4, 1], [10]):
            static = _stepwise_logits(model, src, tgt, StaticDecoderCache(max_length=10), chunks)
            growing = _stepwise_logits(model, src, tgt, DecoderCache(), chunks)
            torch.testing.assert_close(static, growing, rtol=0, atol=1e-12)
            torch.testing.assert_close(static, full, rtol=0, atol=1e-12)


def test_static_cache_writes_in_place_and_grows_past_capacity() -> None:
    model, src = _model(3), _padded_sources(3)
    tgt = torch.randint(4, VOCAB, (src.shape[0], 7))
    cache = StaticDecoderCache(max_length=5)
    with torch.no_grad():
        memory = model.encode(src)
        model.decode(tgt[:, :1], memory, src, cache=cache)
        entry = cache.self_kv[0]
        pointer, shape = entry.k.data_ptr(), tuple(entry.k.shape)
        assert shape[2] == 5
        for t in range(1, 5):
            model.decode(tgt[:, t:t + 1], memory, src, cache=cache)
            assert entry.k.data_ptr() == pointer and tuple(entry.k.shape) == shape
        assert cache.length == 5
        # Past max_length the buffers grow by torch.cat, as DecoderCache's do: same logits.
        last = model.decode(tgt[:, 5:7], memory, src, cache=cache)
        growing = _stepwise_logits(model, src, tgt, DecoderCache(), [5, 2])
    assert cache.length == 7
    torch.testing.assert_close(last, growing[:, 5:7], rtol=0, atol=1e-12)


def test_select_and_reorder_follow_the_growing_cache() -> None:
    """Dropping finished sentences (greedy search) and reordering hypotheses with repeats
    (beam search) give the same logits from both caches."""
    model, src = _model(4), _padded_sources(4)
    tgt = torch.randint(4, VOCAB, (src.shape[0], 6))
    keep, rows = torch.tensor([0, 2, 4]), torch.tensor([2, 2, 0])
    results = []
    with torch.no_grad():
        memory = model.encode(src)
        for cache in (StaticDecoderCache(max_length=6), DecoderCache()):
            model.decode(tgt[:, :3], memory, src, cache=cache)
            cache.select(keep)
            kept_src, kept_memory = src[keep], memory[keep]
            first = model.decode(tgt[keep, 3:4], kept_memory, kept_src, cache=cache)
            cache.reorder(rows)  # one sentence's hypotheses, repeated: rows within B'
            second = model.decode(tgt[keep, 4:6][rows], kept_memory, kept_src, cache=cache)
            results.append((first, second))
    (static_1, static_2), (growing_1, growing_2) = results
    torch.testing.assert_close(static_1, growing_1, rtol=0, atol=1e-12)
    torch.testing.assert_close(static_2, growing_2, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_every_cache_gives_the_same_tokens_to_every_search(seed: int) -> None:
    """On fresh float64 models with padded sources: the static cache, the growing cache
    and no cache decode the same tokens, greedy and beam (the static cache's buffers taking
    turns while beams reorder), with sentences stopping at their own length."""
    model, src = _model(seed), _padded_sources(seed, b=6)
    for kwargs in (dict(max_len_a=1.0, max_len_b=4), dict(max_len_a=0.0, max_len_b=12,
                                                             min_len=12)):
        static = greedy_decode(model, src, cache="static", **kwargs)
        assert static == greedy_decode(model, src, **kwargs)
        assert static == greedy_decode(model, src, cache="none", **kwargs)
        beams = [beam_search(model, src, beam_size=3, alpha=0.6, cache=cache, **kwargs)
                 for cache in ("static", "growing", "none")]
        assert beams[0] == beams[1] == beams[2]


def test_a_search_keeps_the_model_mode_and_refuses_an_unknown_cache() -> None:
    model, src = _model(8), _padded_sources(8)
    model.train()
    greedy_decode(model, src, max_len_b=3, cache="static")
    assert model.training
    with pytest.raises(BookError) as refused:
        greedy_decode(model, src, cache="fast")
    assert str(refused.value).startswith("cache:") and "'fast'" in str(refused.value)


@pytest.mark.slow
def test_the_compiled_step_gives_the_same_tokens_and_is_compiled() -> None:
    """``cache="compiled"``: the same tokens as the eager static cache in float64, greedy
    and beam, sentences leaving the batch down to one, and the step did run as compiled
    graphs (a fallback to eager would pass the equality alone)."""
    from torch._dynamo.utils import counters  # the compiler's own count of graphs

    model, src = _model(9), _padded_sources(9, b=6)
    torch.compiler.reset()  # graphs compiled earlier in this process would not count again
    graphs = counters["stats"]["unique_graphs"]
    for kwargs in (dict(max_len_a=1.0, max_len_b=4), dict(max_len_a=0.0, max_len_b=12,
                                                             min_len=12)):
        assert greedy_decode(model, src, cache="compiled", **kwargs) == \
            greedy_decode(model, src, cache="static", **kwargs)
    assert beam_search(model, src, beam_size=2, cache="compiled", max_len_b=4) == \
        beam_search(model, src, beam_size=2, cache="static", max_len_b=4)
    assert counters["stats"]["unique_graphs"] > graphs
    model.train()
    greedy_decode(model, src, max_len_b=3, cache="compiled")
    assert model.training

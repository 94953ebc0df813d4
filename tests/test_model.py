"""Tests of transformer_book.nn.transformer and transformer_book.nn.layers: equal to nn.Transformer,
causal masking, padding, batch independence, teaching path = fast path, a toy task learned."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.data.toy import make_toy_task, toy_batches
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.kv_cache import DecoderCache
from transformer_book.nn.layers import EncoderLayer, FeedForward
from transformer_book.nn.positional import sinusoidal_encoding
from transformer_book.nn.transformer import Transformer, count_parameters, cross_attention_weights
from transformer_book.util.validation import BookError

F64 = torch.float64
V = 23


def config(**overrides) -> TransformerConfig:
    return TransformerConfig.preset("tiny", V, **{"dropout": 0.0, "max_len": 32, **overrides})


def model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(config(**overrides)).to(F64).eval()


def ids(b: int, length: int, seed: int, lengths: list[int] | None = None) -> torch.Tensor:
    """Random real tokens (>= 3) right-padded with 0 to the given lengths."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(3, V, (b, length), generator=g)
    for row, n in enumerate(lengths or []):
        x[row, n:] = 0
    return x


# ----------------------------------------------------------------------------- parameters


def test_base_model_has_about_65_million_parameters_63082496() -> None:
    """Table 3: the base model has 65 × 10^6 parameters (shared 37000-token vocabulary);
    nn.Transformer's layout adds two final LayerNorms and a generator bias."""
    base = Transformer(TransformerConfig.preset("base", 37000))
    n = count_parameters(base)
    assert n == 63_082_496, n
    assert abs(n - 65e6) < 2e6, f"{n} parameters, paper says 65M"
    torch_layout = TransformerConfig.preset("base", 37000, final_norm=True, generator_bias=True)
    assert count_parameters(Transformer(torch_layout)) == n + 2 * 2 * 512 + 37000


def test_tied_embeddings_are_one_matrix_and_untied_are_three() -> None:
    tied = model()
    assert tied.src_embed.weight is tied.tgt_embed.weight is tied.generator.weight
    untied = model(tie_embeddings=False)
    ws = {id(untied.src_embed.weight), id(untied.tgt_embed.weight), id(untied.generator.weight)}
    assert len(ws) == 3
    d = tied.config.d_model
    assert count_parameters(untied) - count_parameters(tied) == 2 * V * d


def test_feed_forward_is_relu_between_two_linears() -> None:
    torch.manual_seed(0)
    ffn = FeedForward(8, 32).to(F64)
    x = torch.randn(2, 5, 8, dtype=F64)
    expected = torch.clamp(x @ ffn.linear1.weight.T + ffn.linear1.bias, min=0) \
        @ ffn.linear2.weight.T + ffn.linear2.bias  # max(0, xW1 + b1)W2 + b2
    torch.testing.assert_close(ffn(x), expected)


def test_post_ln_layer_output_is_normalised_and_pre_ln_is_not() -> None:
    torch.manual_seed(0)
    x = 3 * torch.randn(2, 6, 64, dtype=F64) + 1
    post = EncoderLayer(config()).to(F64).eval()
    out, weights = post(x)
    assert weights is None
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 6, dtype=F64), atol=1e-6, rtol=0)
    pre, _ = EncoderLayer(config(norm_first=True)).to(F64).eval()(x)
    assert pre.mean(-1).abs().max() > 0.1  # pre-LN: the residual stream keeps its mean


# ----------------------------------------------------------------------------- nn.Transformer


def reference(norm_first: bool, seed: int = 0):
    """nn.Transformer + shared embedding + tied generator (with bias), float64, dropout off:
    our model in nn.Transformer's layout (final norms, generator bias)."""
    cfg = config(norm_first=norm_first, final_norm=True, generator_bias=True)
    torch.manual_seed(seed)
    ref = nn.Transformer(cfg.d_model, cfg.num_heads, cfg.num_encoder_layers,
                         cfg.num_decoder_layers, cfg.d_ff, dropout=0.0, batch_first=True,
                         norm_first=norm_first).to(F64).eval()
    embedding = nn.Embedding(V, cfg.d_model).to(F64)
    generator = nn.Linear(cfg.d_model, V).to(F64)
    generator.weight = embedding.weight
    # Our sinusoidal table is stored in float32 (then cast); use the same rounding here.
    pe = sinusoidal_encoding(cfg.max_len, cfg.d_model).to(F64)

    def forward(src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        def embed(x: torch.Tensor) -> torch.Tensor:
            return embedding(x) * math.sqrt(cfg.d_model) + pe[: x.shape[1]]

        t = tgt.shape[1]
        with torch.no_grad():
            h = ref(embed(src), embed(tgt),
                    tgt_mask=torch.ones(t, t, dtype=torch.bool).triu(1),  # True = masked
                    src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt == 0,
                    memory_key_padding_mask=src == 0)
            return generator(h)

    return cfg, ref, embedding, generator, forward


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_equals_nn_transformer_on_padded_batches(norm_first: bool) -> None:
    cfg, ref, embedding, generator, forward = reference(norm_first)
    ours = Transformer.from_torch(ref, embedding, generator, cfg).eval()
    src = ids(4, 9, seed=1, lengths=[9, 4, 7, 1])
    tgt = ids(4, 7, seed=2, lengths=[7, 7, 3, 5])
    with torch.no_grad():
        got = ours(src, tgt)
    expected = forward(src, tgt)
    assert got.shape == (4, 7, V)
    real = tgt != 0  # padded query rows are don't-care (nn.Transformer's fast path differs)
    torch.testing.assert_close(got[real], expected[real], rtol=1e-10, atol=1e-10)


def test_from_torch_rejects_a_mismatched_config() -> None:
    cfg, ref, embedding, generator, _ = reference(norm_first=False)
    with pytest.raises(ValueError, match="norm_first=True"):
        Transformer.from_torch(ref, embedding, generator, cfg.replace(norm_first=True))
    with pytest.raises(ValueError, match="3 \\+ 2 layers"):
        Transformer.from_torch(ref, embedding, generator, cfg.replace(num_encoder_layers=3))
    untied = nn.Linear(cfg.d_model, V).to(F64)
    with pytest.raises(ValueError, match="generator: expected weights equal"):
        Transformer.from_torch(ref, embedding, untied, cfg)
    with pytest.raises(ValueError, match=r"transformer: expected an nn\.Transformer"):
        Transformer.from_torch(ref.encoder, embedding, generator, cfg)
    ours = Transformer.from_torch(ref, embedding, untied, cfg.replace(tie_embeddings=False))
    torch.testing.assert_close(ours.generator.weight, untied.weight)
    with pytest.raises(ValueError, match="config: expected final_norm=True"):
        Transformer.from_torch(ref, embedding, generator, cfg.replace(final_norm=False))
    with pytest.raises(ValueError, match="generator: expected no bias"):
        Transformer.from_torch(ref, embedding, generator, cfg.replace(generator_bias=False))


# ----------------------------------------------------------------------------- the paper's layout

def test_the_default_is_the_papers_layout() -> None:
    """Post-LN stacks end with their last layer's LayerNorm and the generator has no bias
    (Section 3.1, 3.4); nn.Transformer's layout adds 2 LayerNorms and a bias: 4·d + V."""
    paper = Transformer(config()).eval()
    assert isinstance(paper.encoder.norm, nn.Identity)
    assert isinstance(paper.decoder.norm, nn.Identity)
    assert paper.generator.bias is None
    torch_layout = Transformer(config(final_norm=True, generator_bias=True))
    d = paper.config.d_model
    assert count_parameters(torch_layout) - count_parameters(paper) == 4 * d + V
    assert config(norm_first=True).final_norm is True  # pre-LN needs its final norm
    with pytest.raises(ValueError, match="final_norm: expected True with norm_first=True"):
        config(norm_first=True, final_norm=False)


def test_a_config_saved_before_the_layout_fields_loads_as_it_was_trained() -> None:
    saved = config(final_norm=True, generator_bias=True).to_dict()
    del saved["final_norm"], saved["generator_bias"]
    old = TransformerConfig.from_dict(saved)
    assert (old.final_norm, old.generator_bias) == (True, True)
    new = config().to_dict()
    assert TransformerConfig.from_dict(new) == config()


# ----------------------------------------------------------------------------- invariants


def test_changing_future_target_tokens_leaves_earlier_logits_unchanged() -> None:
    m = model()
    src, tgt = ids(2, 6, seed=3), ids(2, 8, seed=4)
    changed = tgt.clone()
    changed[:, 5:] = ids(2, 3, seed=5)
    with torch.no_grad():
        a, b = m(src, tgt), m(src, changed)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


@pytest.mark.parametrize("norm_first", [False, True])
def test_appending_padding_does_not_change_real_positions(norm_first: bool) -> None:
    m = model(norm_first=norm_first)
    src, tgt = ids(3, 5, seed=6, lengths=[5, 3, 4]), ids(3, 6, seed=7, lengths=[6, 2, 4])
    padded_src = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    padded_tgt = torch.cat([tgt, torch.zeros(3, 2, dtype=torch.long)], dim=1)
    with torch.no_grad():
        a = m(src, tgt)
        b = m(padded_src, padded_tgt)
        memory = m.encode(padded_src)
    real = tgt != 0
    torch.testing.assert_close(a[real], b[:, :6][real])
    torch.testing.assert_close(memory[:, :5][src != 0], m.encode(src)[src != 0])


def test_each_sentence_is_independent_of_the_rest_of_the_batch() -> None:
    m = model()
    src, tgt = ids(4, 7, seed=8, lengths=[7, 2, 5, 6]), ids(4, 5, seed=9, lengths=[5, 4, 2, 5])
    with torch.no_grad():
        batched = m(src, tgt)
        for i in range(4):
            s, t = src[i : i + 1], tgt[i : i + 1]
            s, t = s[:, : int((s != 0).sum())], t[:, : int((t != 0).sum())]
            torch.testing.assert_close(batched[i, : t.shape[1]], m(s, t)[0])


def test_a_fully_padded_source_gives_finite_logits() -> None:
    m = model()
    src = torch.zeros(2, 4, dtype=torch.long)
    src[0, :2] = 5
    with torch.no_grad():
        assert torch.isfinite(m(src, ids(2, 3, seed=10))).all()


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_teaching_path_equals_fast_path_and_returns_weights(positional: str) -> None:
    m = model(positional=positional)
    src, tgt = ids(3, 6, seed=11, lengths=[6, 2, 4]), ids(3, 5, seed=12, lengths=[5, 3, 5])
    with torch.no_grad():
        fast = m.decode(tgt, m.encode(src), src)
        memory, enc_w = m.encode(src, need_weights=True)
        slow, dec_w = m.decode(tgt, memory, src, need_weights=True)
    torch.testing.assert_close(slow, fast)
    torch.testing.assert_close(m(src, tgt), fast)  # forward = decode(encode(src))
    assert len(enc_w) == 2 and enc_w[0].shape == (3, 4, 6, 6)
    assert dec_w["self"][0].shape == (3, 4, 5, 5) and dec_w["cross"][1].shape == (3, 4, 5, 6)
    assert torch.all(dec_w["self"][0].triu(1) == 0), "self-attention looked ahead"
    assert torch.all(enc_w[0][1, :, :, 2:] == 0), "attention to source padding"


def test_cross_attention_weights_for_plots() -> None:
    m = model()
    src, tgt = ids(2, 6, seed=13, lengths=[6, 3]), ids(2, 4, seed=14)
    maps = cross_attention_weights(m, src, tgt)
    assert maps.shape == (2, 2, 4, 4, 6)  # (layers, B, h, T, S)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 2, 4, 4, dtype=F64))
    assert torch.all(maps[:, 1, :, :, 3:] == 0)


def test_cached_decoding_accepts_chunks() -> None:
    m = model()
    src, tgt = ids(2, 5, seed=15, lengths=[5, 3]), ids(2, 7, seed=16)
    with torch.no_grad():
        memory = m.encode(src)
        full = m.decode(tgt, memory, src)
        cache = m.new_cache()
        parts = [m.decode(tgt[:, a:b], memory, src, cache=cache)
                 for a, b in ((0, 3), (3, 4), (4, 7))]
    assert isinstance(cache, DecoderCache) and cache.length == 7
    torch.testing.assert_close(torch.cat(parts, dim=1), full)


def test_hypotheses_sharing_a_sentence_memory_equal_repeated_memory() -> None:
    """Beam layout: G = 3 target rows per sentence attend to one copy of its memory and get
    what they get with the memory repeated per row, in full, step by step, and in the
    attention weights (padded sources, float64)."""
    m = model()
    src, tgt = ids(2, 6, seed=17, lengths=[6, 3]), ids(6, 5, seed=18)
    with torch.no_grad():
        memory = m.encode(src)
        repeated = m.decode(tgt, memory.repeat_interleave(3, 0), src.repeat_interleave(3, 0),
                            need_weights=True)
        shared = m.decode(tgt, memory, src, need_weights=True)
        cache = m.new_cache()
        steps = [m.decode(tgt[:, i : i + 1], memory, src, cache=cache) for i in range(5)]
    torch.testing.assert_close(shared[0], repeated[0])
    torch.testing.assert_close(torch.cat(steps, dim=1), repeated[0])
    for kind in ("self", "cross"):
        torch.testing.assert_close(shared[1][kind][1], repeated[1][kind][1])
    assert cache.batch_size == 6 and cache.cross_kv[0].rows == 2  # N = 6, B = 2
    assert torch.all(shared[1]["cross"][0][3:, :, :, 3:] == 0), "sentence 1's padding"


def test_dropout_is_active_in_training_mode_only() -> None:
    m = model(dropout=0.3)
    src, tgt = ids(2, 5, seed=17), ids(2, 5, seed=18)
    with torch.no_grad():
        torch.testing.assert_close(m(src, tgt), m(src, tgt))
        m.train()
        assert not torch.allclose(m(src, tgt), m(src, tgt))


# ----------------------------------------------------------------------------- bad input


def test_bad_ids_raise_value_errors_naming_the_argument() -> None:
    m = model()
    good = ids(2, 4, seed=19)
    memory = m.encode(good)
    with pytest.raises(BookError, match=r"src_ids: expected token ids in \[0, vocab_size=23\), "
                                        r"received id -1 at row 0, position 0"):
        m.check_ids(torch.tensor([[-1, 22]]), "src_ids")
    with pytest.raises(BookError, match=r"tgt_ids: .*received id 23 at row 0, position 1"):
        m.check_ids(torch.tensor([[3, 23], [4, 5]]), "tgt_ids")
    with pytest.raises(BookError, match="src_ids: expected at most max_len=32 positions"):
        m.check_ids(torch.full((1, 33), 4), "src_ids")
    m.check_ids(good, "src_ids")  # in range: nothing to say
    with pytest.raises(ValueError, match="src_ids: expected at most max_len=32 positions "
                                         r"\(an error, not truncation\), received length 33"):
        m(torch.full((1, 33), 4), good[:1])
    with pytest.raises(ValueError, match="tgt_ids: expected an integer tensor"):
        m(good, good.float())
    with pytest.raises(ValueError, match="src_ids: expected a 2-D tensor"):
        m(good[0], good)
    with pytest.raises(ValueError, match="tgt_ids: expected batch size 2"):
        m(good, good[:1])
    with pytest.raises(ValueError, match="memory: expected shape"):
        m.decode(good, memory[:, :3], good)
    cache = m.new_cache()
    m.decode(good[:, :1], memory, good, cache=cache)
    with pytest.raises(ValueError, match="cache: expected a cache of N=1 hypotheses"):
        m.decode(good[:1, :1], memory[:1], good[:1], cache=cache)
    with pytest.raises(ValueError, match="cache: expected cross-attention keys of B=1 sentences "
                                         r"\(as memory\), received keys of 2"):
        m.decode(good[:, 1:2], memory[:1], good[:1], cache=cache)
    with pytest.raises(ValueError, match="tgt_ids: expected batch size a multiple of 2"):
        m.decode(good[:1], memory, good)
    with pytest.raises(ValueError, match="received length 32 after 1 cached positions"):
        m.decode(torch.full((2, 32), 4), memory, good, cache=cache)
    with pytest.raises(ValueError, match="config: expected a TransformerConfig"):
        Transformer({"vocab_size": 10})


def test_forward_encode_and_decode_name_an_id_outside_the_vocabulary() -> None:
    """On the CPU every call checks the id values (one aminmax): a BookError naming the
    argument, the range and the id, never torch's IndexError from inside the embedding."""
    m = model()
    good = ids(2, 4, seed=19)
    memory = m.encode(good)
    too_big, negative = good.clone(), good.clone()
    too_big[1, 2] = V
    negative[0, 3] = -4
    vocab = r"expected token ids in \[0, vocab_size=23\), received "
    calls = {
        "forward src": (lambda: m(too_big, good), rf"src_ids: {vocab}id 23 at row 1, position 2"),
        "forward tgt": (lambda: m(good, negative), rf"tgt_ids: {vocab}id -4 at row 0, position 3"),
        "encode": (lambda: m.encode(negative), rf"src_ids: {vocab}id -4 at row 0, position 3"),
        "decode tgt": (lambda: m.decode(too_big, memory, good),
                       rf"tgt_ids: {vocab}id 23 at row 1, position 2"),
        "decode src": (lambda: m.decode(good, memory, negative),
                       rf"src_ids: {vocab}id -4 at row 0, position 3"),
        "decode, cached": (lambda: m.decode(too_big[:, 2:3], memory, good, cache=m.new_cache()),
                           rf"tgt_ids: {vocab}id 23 at row 1, position 0"),
    }
    for call, message in calls.values():
        with pytest.raises(BookError, match=message):
            call()
    with torch.no_grad():
        assert m(good, good).shape == (2, 4, V)  # ids in range: nothing to say


def test_on_a_gpu_the_model_checks_id_shapes_alone(monkeypatch) -> None:
    """Where reading values would make the host wait for the device, forward leaves the
    values to the entry points' check_ids (one read per batch, not one per step)."""
    from transformer_book.nn import transformer as module

    m = model()
    good = ids(2, 4, seed=19)
    checked = []
    monkeypatch.setattr(Transformer, "check_ids", lambda self, t, name, offset=0:
                        checked.append(name))
    m(good, good)
    assert checked == ["src_ids", "tgt_ids"]
    checked.clear()
    monkeypatch.setattr(module, "readable_without_sync", lambda t: False)
    m(good, good)
    assert checked == [], "no value read on a GPU"


# ----------------------------------------------------------------------------- learning


@pytest.mark.slow
def test_tiny_preset_learns_to_copy_short_sequences() -> None:
    """Loss on the copy task falls from ~log(V) to a small fraction of it in ~80 steps."""
    torch.manual_seed(0)
    m = Transformer(TransformerConfig.preset("tiny", 16, dropout=0.0))
    optimizer = torch.optim.Adam(m.parameters(), lr=3e-3, betas=(0.9, 0.98))
    losses = []
    for src, tgt in toy_batches(make_toy_task("copy", 48 * 80, 1, 6, 16, seed=0), 48):
        logits = m(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 16), tgt[:, 1:].reshape(-1), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.3 * first, f"loss {first:.2f} -> {last:.2f}"
    print(f"copy task: loss {first:.2f} -> {last:.2f}")

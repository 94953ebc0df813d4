"""The ablation runner: reduced key size equals a smaller d_k, runs are seeded and paired."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from transformer_book.analysis.ablation import (
    PAPER_TABLE3,
    KeySizeMask,
    evaluate_variant,
    relative_change,
    restrict_key_size,
    results_by_name,
    run_ablation,
    train_variant,
)
from transformer_book.data.batching import TokenBudgetSampler
from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.nn.attention import MultiHeadAttention
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer, count_parameters
from transformer_book.train.corpus import PreparedData, make_batch
from transformer_book.train.objective import label_smoothed_cross_entropy
from transformer_book.util.env import set_seed
from transformer_book.util.validation import BookError

WORDS = ["ein", "mann", "hund", "katze", "sitzt", "läuft", "auf", "dem"]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> PreparedData:
    """A made-up parallel corpus with a 300-token BPE: fast, no Multi30k needed."""
    rng = random.Random(0)
    pairs = []
    for _ in range(120):
        n = rng.randint(2, 5)
        src = " ".join(rng.choice(WORDS) for _ in range(n))
        pairs.append((src, src.replace("ein", "a").replace("mann", "man")))
    tok = BPETokenizer.train([s for s, _ in pairs] + [t for _, t in pairs], 300)
    src = tok.encode_batch([s for s, _ in pairs])
    tgt = tok.encode_batch([t for _, t in pairs])
    path = Path(tmp_path_factory.mktemp("bpe")) / "tokenizer.json"
    return PreparedData(tok, path, src[:100], tgt[:100], src[100:], tgt[100:],
                        [t for _, t in pairs[100:]], {})


def _config(data: PreparedData, **overrides) -> TransformerConfig:
    return TransformerConfig.preset("tiny", data.tokenizer.vocab_size, d_model=16, d_ff=32,
                                    num_heads=4, max_len=64, **overrides)


def test_restricted_key_size_equals_attention_with_smaller_keys():
    torch.manual_seed(0)
    d_model, h, d_k = 12, 3, 2
    m = MultiHeadAttention(d_model, h).double()
    torch.nn.init.normal_(m.in_proj.bias)
    w, b = m.in_proj.weight.detach().clone(), m.in_proj.bias.detach().clone()
    unused = restrict_key_size(m, d_k)
    x = torch.randn(2, 5, d_model, dtype=torch.float64)
    out, _ = m(x, x, x)
    # From scratch: project, keep d_k query/key dims per head, divide by sqrt(d_k).
    q, k, v = (x @ w.T + b).split(d_model, dim=-1)  # three (B, L, d_model)
    q, k, v = (t.view(2, 5, h, d_model // h).transpose(1, 2) for t in (q, k, v))  # (B, h, L, 4)
    scores = q[..., :d_k] @ k[..., :d_k].transpose(-2, -1) / math.sqrt(d_k)
    heads = torch.softmax(scores, dim=-1) @ v  # (B, h, L, d_v)
    expected = m.out_proj(heads.transpose(1, 2).reshape(2, 5, d_model))
    torch.testing.assert_close(out, expected)
    out_w, _ = m(x, x, x, need_weights=True)  # teaching path agrees too
    torch.testing.assert_close(out_w, expected)
    assert unused == 2 * h * (d_model // h - d_k) * (d_model + 1)


def test_full_key_size_is_the_identity_and_bad_sizes_are_refused():
    torch.manual_seed(1)
    m = MultiHeadAttention(8, 2).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    before, _ = m(x, x, x)
    assert restrict_key_size(m, 4) == 0
    torch.testing.assert_close(m(x, x, x)[0], before)
    with pytest.raises(BookError, match=r"d_k: expected an integer >= 1 and <= 4, received 5"):
        KeySizeMask(8, 2, 5)
    with pytest.raises(BookError, match="d_k"):
        KeySizeMask(8, 2, 0)
    with pytest.raises(ValueError, match="model"):
        restrict_key_size(torch.nn.Linear(2, 2), 1)


def test_restricted_model_counts_fewer_parameters(tiny_data):
    config = _config(tiny_data)
    model = Transformer(config)
    unused = restrict_key_size(model, 2)
    # 6 attention modules (2 encoder self, 2 decoder self, 2 cross), 2 dims dropped per head.
    assert unused == 6 * 2 * 4 * 2 * (16 + 1)
    assert count_parameters(model) - unused > 0


def test_relative_change():
    assert relative_change(4.0, 5.0) == pytest.approx(0.25)
    assert relative_change(25.8, 24.9) == pytest.approx(-0.9 / 25.8)
    with pytest.raises(ValueError, match="baseline"):
        relative_change(0.0, 1.0)
    with pytest.raises(ValueError, match="variant"):
        relative_change(1.0, float("nan"))


def test_paper_table3_holds_the_base_row():
    assert PAPER_TABLE3["base"] == (4.92, 25.8)
    assert all(ppl > 4 and 24 < bleu < 26 for ppl, bleu in PAPER_TABLE3.values())


@pytest.mark.slow
def test_train_variant_is_seeded_and_evaluates_plain_cross_entropy(tiny_data):
    config = _config(tiny_data, dropout=0.0)
    a = train_variant(config, tiny_data, steps=3, seed=0, max_tokens=64, warmup_steps=2,
                      bleu_sentences=4, device="cpu")
    b = train_variant(config, tiny_data, steps=3, seed=0, max_tokens=64, warmup_steps=2,
                      bleu_sentences=4, device="cpu")
    assert a.train_losses == b.train_losses and a.val_nll == b.val_nll
    assert len(a.train_losses) == 3 and a.val_ppl == pytest.approx(math.exp(a.val_nll))
    assert 0.0 <= a.bleu <= 100.0 and a.bleu_sentences == 4
    # The first logged loss is the label-smoothed loss of the fresh model (seeded weights) on
    # the first batch of the seeded sampler; the same run reports no BLEU when asked for none.
    for eps in (0.0, 0.3):
        run = train_variant(config.replace(label_smoothing=eps), tiny_data, steps=1, seed=0,
                            max_tokens=64, warmup_steps=2, bleu_sentences=0, device="cpu")
        set_seed(0)
        model = Transformer(config.replace(label_smoothing=eps))
        sampler = TokenBudgetSampler([len(s) for s in tiny_data.train_src], 64,
                                     [len(t) + 1 for t in tiny_data.train_tgt], shuffle=True,
                                     seed=0)
        src, tgt_in, tgt_out = make_batch(tiny_data.train_src, tiny_data.train_tgt,
                                          next(iter(sampler)), torch.device("cpu"))
        with torch.no_grad():
            expected = label_smoothed_cross_entropy(model(src, tgt_in), tgt_out, eps, 0)
        assert run.train_losses[0] == pytest.approx(float(expected), rel=1e-6)
        assert math.isnan(run.bleu) and run.bleu_sentences == 0


def test_evaluate_variant_matches_a_manual_loss(tiny_data):
    torch.manual_seed(0)
    model = Transformer(_config(tiny_data))
    nll, ppl, _ = evaluate_variant(model, tiny_data, bleu_sentences=0)
    total = tokens = 0.0
    model.eval()
    with torch.no_grad():
        for s, t in zip(tiny_data.val_src, tiny_data.val_tgt, strict=True):
            src = torch.tensor([s])
            tgt = torch.tensor([[1, *t, 2]])
            logits = model(src, tgt[:, :-1])
            total += float(label_smoothed_cross_entropy(logits, tgt[:, 1:], 0.0,
                                                        reduction="sum"))
            tokens += len(t) + 1
    assert nll == pytest.approx(total / tokens, rel=1e-5)
    assert ppl == pytest.approx(math.exp(nll))


@pytest.mark.slow
def test_run_ablation_applies_overrides_key_size_and_seed(tiny_data):
    variants = {"base": {}, "h=1": {"num_heads": 1}, "d_k=2": {"d_k": 2},
                "base seed 1": {"seed": 1}}
    results = run_ablation(variants, _config(tiny_data), tiny_data, steps=2, max_tokens=64,
                           warmup_steps=2, bleu_sentences=0, device="cpu")
    by = results_by_name(results)
    assert list(by) == list(variants)
    assert by["h=1"].num_parameters == by["base"].num_parameters  # (A): same size
    assert by["d_k=2"].num_parameters < by["base"].num_parameters  # (B): smaller
    assert by["d_k=2"].extra["d_k"] == 2 and by["base"].extra["d_k"] == 4
    assert by["base seed 1"].seed == 1
    assert by["base seed 1"].train_losses != by["base"].train_losses


def test_run_ablation_rejects_unknown_keys_and_empty_variants(tiny_data):
    with pytest.raises(ValueError, match="unknown keys"):
        run_ablation({"x": {"heads": 2}}, _config(tiny_data), tiny_data, steps=1)
    with pytest.raises(ValueError, match="variants"):
        run_ablation({}, _config(tiny_data), tiny_data, steps=1)
    with pytest.raises(ValueError, match="vocab_size"):
        train_variant(TransformerConfig.preset("tiny", 50), tiny_data, steps=1)

"""Offset and content heads: the measurements of transformer_book.analysis.head_roles."""

from __future__ import annotations

import pytest
import torch

from transformer_book.analysis.head_roles import (
    CONTROLS,
    allowed_keys,
    head_roles,
    offset_mass,
    self_attention_maps,
)
from transformer_book.data.batching import pad_sequences
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer, cross_attention_weights
from transformer_book.util.validation import BookError

F64 = torch.float64


def synthetic(batch: int = 40, size: int = 9, vocab: int = 12, seed: int = 0):
    """Two heads with known roles on random padded sentences: head 0 reads the previous
    token (the first token reads itself), head 1 reads every copy of token 5, which each
    sentence holds at least once, wherever it is."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, size + 1, (batch,), generator=generator)
    lists = [torch.randint(4, vocab, (int(n),), generator=generator).tolist() for n in lengths]
    for sentence in lists:
        sentence[int(torch.randint(len(sentence), (1,), generator=generator))] = 5
    ids = pad_sequences(lists, 0, size)
    allowed = allowed_keys(lengths, size)
    weights = torch.zeros(batch, 2, size, size, dtype=F64)
    for b, n in enumerate(lengths.tolist()):
        for i in range(n):
            weights[b, 0, i, max(i - 1, 0)] = 1.0
        hits = (ids[b, :n] == 5).double()
        weights[b, 1, :n, :n] = hits / hits.sum()
    assert torch.allclose(weights.sum(-1), allowed.any(-1)[:, None].double())
    return weights, ids, lengths, vocab


def test_offset_mass_counts_real_queries_only():
    weights, _, lengths, _ = synthetic()
    mass = offset_mass(weights, lengths, (-1, 0, 1))
    assert mass.shape == (2, 3)
    first_rows = len(lengths)  # row 0 of each sentence reads itself, at offset 0
    real_rows = int(lengths.sum())
    assert mass[0, 0] == pytest.approx(1.0), "every query with a previous token reads it"
    assert mass[0, 1] == pytest.approx(first_rows / real_rows), "only the first rows: offset 0"
    assert mass[0, 2] == 0.0


def test_head_roles_tell_an_offset_head_from_a_content_head():
    weights, ids, lengths, vocab = synthetic(batch=60, seed=1)
    roles = head_roles(weights, ids, lengths, vocab)
    # the offset table also holds the first rows' weight at offset 0, so it is not exact
    assert roles["offset_fit"][0] > 0.85 and roles["content_fit"][0] < 0.6
    assert roles["content_fit"][1] > 0.95 and roles["offset_fit"][1] < 0.7
    assert (roles["uniform_fit"] < 0.7).all(), "neither head is uniform"


def test_the_controls_catch_a_sink_and_a_self_reader():
    weights, ids, lengths, vocab = synthetic(batch=60, seed=3)
    sink, itself = torch.zeros_like(weights[:, :1]), torch.zeros_like(weights[:, :1])
    for b, n in enumerate(lengths.tolist()):
        sink[b, 0, :n, 0] = 1.0  # every query reads key 0 (a <bos> sink)
        itself[b, 0, :n, :n] = torch.eye(n, dtype=F64)
    roles = head_roles(torch.cat([weights, sink, itself], dim=1), ids, lengths, vocab)
    assert roles["first_key_fit"][2] == pytest.approx(1.0) and roles["self_fit"][3] == 1.0
    assert roles["position_fit"][2] == pytest.approx(1.0, abs=1e-5), "position explains a sink"
    assert roles["offset_fit"][3] > 0.99, "a self-reader is an offset-0 head"
    # the offset and content heads are explained by none of the controls
    for head, fit in ((0, "offset_fit"), (1, "content_fit")):
        assert all(roles[fit][head] > roles[c][head] + 0.2 for c in CONTROLS), (head, fit)
    assert set(CONTROLS) <= set(roles)


def test_uniform_rows_are_predicted_by_contents_and_baseline():
    _, ids, lengths, vocab = synthetic(seed=2)
    allowed = allowed_keys(lengths, ids.shape[1], causal=True)[:, None].double()  # (B, 1, L, L)
    weights = allowed / allowed.sum(-1, keepdim=True).clamp_min(1)
    roles = head_roles(weights, ids, lengths, vocab, causal=True)
    for name in ("content_fit", "uniform_fit"):  # every token draws a uniform row's weight
        assert roles[name][0] == pytest.approx(1.0, abs=1e-6), name
    # one offset profile for rows of every length: causal uniform rows are not flat in it
    assert 0.8 < roles["offset_fit"][0] < 1.0


def test_allowed_keys_and_bad_lengths():
    allowed = allowed_keys(torch.tensor([3, 1]), 4, causal=True)
    assert allowed.shape == (2, 4, 4)
    assert allowed[0, 2, :3].all() and not allowed[0, 1, 2] and not allowed[0, 3].any()
    assert allowed[1].sum() == 1
    with pytest.raises(BookError, match="lengths"):
        allowed_keys(torch.tensor([5]), 4)
    with pytest.raises(BookError, match="offsets"):
        offset_mass(torch.zeros(1, 1, 4, 4), torch.tensor([4]), (4,))


def test_maps_of_a_transformer_are_its_teaching_path_weights():
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=20, d_model=16, num_heads=2, num_encoder_layers=2,
                               num_decoder_layers=1, d_ff=24, dropout=0.0, max_len=32)
    model = Transformer(config).to(F64).eval()
    src = pad_sequences([[5, 6, 7, 8, 9], [5, 6, 7]], 0)
    tgt = pad_sequences([[1, 10, 11, 12], [1, 10, 11, 12]], 0)
    maps = self_attention_maps(model, src, tgt)
    assert [w.shape for w in maps["encoder"]] == [(2, 2, 5, 5)] * 2
    assert maps["decoder"][0].shape == (2, 2, 4, 4)
    assert torch.all(maps["decoder"][0].triu(1) == 0), "masked self-attention"
    assert torch.all(maps["encoder"][0][1, :, :, 3:] == 0), "no weight on padding"
    torch.testing.assert_close(torch.stack(maps["cross"]), cross_attention_weights(model, src, tgt))
    assert set(self_attention_maps(model, src)) == {"encoder"}
    with pytest.raises(BookError, match="model"):
        self_attention_maps(torch.nn.Linear(2, 2), src)

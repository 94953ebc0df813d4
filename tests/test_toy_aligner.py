"""The chapter-07 aligner: the real layers, shapes, masks, invariances, alignments and a short
training run."""

from __future__ import annotations

import pytest
import torch

from transformer_book.data.toy import make_toy_task
from transformer_book.nn.layers import DecoderLayer, EncoderLayer
from transformer_book.nn.positional import (
    LearnedPositionalEmbedding,
    NoPositions,
    SinusoidalPositionalEncoding,
    positional_encoding,
)
from transformer_book.toy.aligner import (
    Aligner,
    AlignerConfig,
    alignment_accuracy,
    expected_alignment,
    greedy_decode,
    sequence_accuracy,
    train_aligner,
)
from transformer_book.util.validation import BookError


def small_model(**overrides) -> Aligner:
    torch.manual_seed(0)
    return Aligner(AlignerConfig(**{"d_model": 16, "d_ff": 32, "num_heads": 2, **overrides})).eval()


def test_shapes_and_cross_weights():
    model = small_model(cross_heads=2, decoder_layers=2)
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    tgt = torch.tensor([[1, 8, 7], [1, 10, 9]])
    memory = model.encode(src)
    assert memory.shape == (2, 4, 16)
    logits, weights = model.decode(tgt, memory, src, need_weights=True)
    assert logits.shape == (2, 3, 16)
    assert len(weights) == 2 and weights[0].shape == (2, 2, 3, 4)
    for w in weights:
        assert torch.allclose(w.sum(-1), torch.ones(2, 2, 3)), "rows sum to one"
        assert torch.all(w[1, :, :, 2:] == 0), "padding of the memory gets no weight"
    assert torch.allclose(model(src, tgt), logits, atol=1e-6), "forward = decode(encode)"
    assert model.decode(tgt, memory, src)[1] == []


def test_built_from_the_transformers_layers():
    model = small_model(encoder_layers=2, decoder_layers=2)
    assert all(isinstance(layer, EncoderLayer) for layer in model.encoder)
    assert all(isinstance(layer, DecoderLayer) for layer in model.decoder)
    assert all(layer.cross_attn.num_heads == 1 for layer in model.decoder)
    assert all(layer.self_attn.num_heads == 2 for layer in model.decoder)


def test_cross_heads_split_the_same_initial_weights():
    one, two = small_model(cross_heads=1), small_model(cross_heads=2)
    for (name, a), (_, b) in zip(one.state_dict().items(), two.state_dict().items(), strict=True):
        assert torch.equal(a, b), f"{name}: a seed gives the same weights for any cross_heads"
    src, tgt = torch.tensor([[5, 6, 7]]), torch.tensor([[1, 7, 6]])
    weights = [m.decode(tgt, m.encode(src), src, need_weights=True)[1][0] for m in (one, two)]
    assert weights[0].shape == (1, 1, 3, 3) and weights[1].shape == (1, 2, 3, 3)
    assert not torch.allclose(one(src, tgt), two(src, tgt)), "the heads split them differently"


def test_padding_does_not_change_real_positions():
    model = small_model()
    alone = torch.tensor([[9, 10, 11]])
    padded = torch.tensor([[9, 10, 11, 0, 0]])
    tgt = torch.tensor([[1, 11, 10]])
    assert torch.allclose(model.encode(alone), model.encode(padded)[:, :3], atol=1e-6)
    assert torch.allclose(model(alone, tgt), model(padded, tgt), atol=1e-6)


def test_decoder_is_causal_and_batch_independent():
    model = small_model()
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    tgt = torch.tensor([[1, 8, 7, 6], [1, 12, 11, 10]])
    changed = tgt.clone()
    changed[:, 3] = 4
    assert torch.allclose(model(src, tgt)[:, :3], model(src, changed)[:, :3], atol=1e-6)
    assert torch.allclose(model(src[:1], tgt[:1]), model(src, tgt)[:1], atol=1e-6)


@pytest.mark.parametrize(("kind", "cls"), [("sinusoidal", SinusoidalPositionalEncoding),
                                           ("learned", LearnedPositionalEmbedding),
                                           ("none", NoPositions)])
def test_positional_encoding(kind, cls):
    layer = positional_encoding(kind, 8, 10)
    assert isinstance(layer, cls)
    x = torch.zeros(2, 10, 8)
    assert layer(x).shape == x.shape
    if kind == "none":
        assert torch.equal(layer(x), x)


def test_without_positions_the_encoder_is_permutation_equivariant():
    model = small_model(positions="none")
    src = torch.tensor([[5, 6, 7, 8, 9]])
    perm = torch.tensor([3, 0, 4, 1, 2])
    assert torch.allclose(model.encode(src)[:, perm], model.encode(src[:, perm]), atol=1e-6)


def test_expected_alignment_and_accuracy():
    assert expected_alignment("copy", [7, 8, 9]) == [[0], [1], [2]]
    assert expected_alignment("reverse", [7, 8, 9]) == [[2], [1], [0]]
    assert expected_alignment("sort", [9, 5, 9]) == [[1], [0, 2], [0, 2]]
    anti = torch.eye(3).flip(1)
    assert alignment_accuracy(anti, expected_alignment("reverse", [4, 5, 6])) == 1.0
    diagonal = alignment_accuracy(torch.eye(3), expected_alignment("reverse", [4, 5, 6]))
    assert diagonal == pytest.approx(1 / 3)


def test_greedy_decode_shapes():
    model = small_model()
    tokens, weights = greedy_decode(model, torch.tensor([[5, 6, 7], [8, 9, 0]]), 4)
    assert tokens.shape == (2, 4) and weights.shape == (2, 1, 4, 3)
    assert model.training is False


@pytest.mark.slow
def test_short_training_learns_something():
    torch.manual_seed(0)
    model = Aligner(AlignerConfig(d_model=16, d_ff=32, num_heads=2, encoder_layers=1))
    examples = make_toy_task("copy", 500, min_len=1, max_len=3, vocab_size=8, seed=0)
    losses = train_aligner(model, examples, steps=60, batch_size=32, lr=1e-2)
    assert len(losses) == 60 and losses[-1] < 0.5 * losses[0]
    assert 0.0 <= sequence_accuracy(model, examples[:50]) <= 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_model": 30, "num_heads": 4}, "num_heads: expected a divisor of d_model=30"),
        ({"cross_heads": 3}, "cross_heads: expected a divisor of d_model=32"),
        ({"positions": "alibi"}, "positions: expected one of"),
        ({"vocab_size": 4}, "vocab_size: expected an integer >= 5"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(BookError, match=match):
        AlignerConfig(**kwargs)


def test_bad_inputs():
    model = small_model(max_len=4)
    with pytest.raises(BookError, match="src: expected at most max_len=4"):
        model.encode(torch.ones(1, 5, dtype=torch.long))
    with pytest.raises(BookError, match="src: expected an integer tensor"):
        model.encode(torch.ones(1, 3))
    with pytest.raises(BookError, match="config: expected an AlignerConfig"):
        Aligner({"d_model": 8})
    with pytest.raises(BookError, match="memory: expected shape"):
        model.decode(torch.ones(1, 2, dtype=torch.long), torch.zeros(1, 3, 16),
                     torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(BookError, match="kind: expected one of"):
        positional_encoding("relative", 8, 4)
    with pytest.raises(BookError, match=r"positions: expected one of .*'sinusoidal'"):
        AlignerConfig(positions="relative")
    with pytest.raises(BookError, match="task: expected 'copy', 'reverse' or 'sort'"):
        expected_alignment("shift", [1, 2])
    with pytest.raises(BookError, match="expected: expected 2 lists"):
        alignment_accuracy(torch.rand(2, 3), [[0]])
    with pytest.raises(BookError, match="examples: expected a non-empty list"):
        train_aligner(model, [], steps=1)
    with pytest.raises(BookError, match=r"examples: expected ids in \[0, 16\), received ids"):
        train_aligner(model, [([5, 16], [16, 5])], steps=1)
    with pytest.raises(BookError, match="model: expected an Aligner"):
        train_aligner(torch.nn.Linear(2, 2), [([5], [5])], steps=1)
    with pytest.raises(BookError, match="lr: expected a finite number > 0"):
        train_aligner(model, [([5], [5])], steps=1, lr=float("nan"))

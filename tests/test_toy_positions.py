"""The chapter-08 position probe: the shift task, the model, its training and evaluation."""

from __future__ import annotations

import pytest
import torch

from transformer_book.nn.positional import LearnedPositionalEmbedding
from transformer_book.toy.positions import (
    EXTRAPOLATION,
    NO_LABEL,
    PositionProbe,
    ProbeConfig,
    accuracy_by_length,
    accuracy_by_position,
    make_shift_task,
    train_extrapolation_probe,
    train_probe,
)
from transformer_book.util.validation import BookError


def test_shift_task_labels_and_determinism():
    pairs = make_shift_task(50, 3, 9, shift=2, vocab_size=10, seed=3)
    assert pairs == make_shift_task(50, 3, 9, shift=2, vocab_size=10, seed=3)
    for tokens, labels in pairs:
        assert 3 <= len(tokens) <= 9 and len(labels) == len(tokens)
        assert all(4 <= t < 10 for t in tokens)
        assert labels[:2] == [NO_LABEL, NO_LABEL] and labels[2:] == tokens[:-2]


def small_probe(**overrides) -> PositionProbe:
    torch.manual_seed(0)
    config = ProbeConfig(**{"d_model": 16, "num_heads": 2, "d_ff": 32, "max_len": 12, **overrides})
    return PositionProbe(config).eval()


@pytest.mark.parametrize("kind", ["none", "learned", "sinusoidal"])
def test_shapes_weights_and_padding(kind):
    model = small_probe(positions=kind)
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    logits, weights = model(ids, need_weights=True)
    assert logits.shape == (2, 4, 16) and weights[0].shape == (2, 2, 4, 4)
    assert torch.all(weights[0][1, :, :, 2:] == 0), "padding is never attended to"
    assert torch.allclose(model(ids[1:, :2]), logits[1:, :2], atol=1e-6), "padding changes nothing"


def test_without_positions_the_probe_is_permutation_equivariant():
    model = small_probe(positions="none")
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    perm = torch.tensor([4, 2, 0, 1, 3])
    assert torch.allclose(model(ids)[:, perm], model(ids[:, perm]), atol=1e-6)
    assert not torch.allclose(small_probe(positions="sinusoidal")(ids)[:, perm],
                              small_probe(positions="sinusoidal")(ids[:, perm]), atol=1e-3)


@pytest.mark.slow
def test_learned_table_size_and_untrained_rows():
    model = small_probe(positions="learned")
    assert isinstance(model.positions, LearnedPositionalEmbedding)
    with pytest.raises(ValueError, match="offset \\+ length <= max_len=12"):
        model(torch.full((1, 13), 5))
    before = model.positions.embedding.weight.detach().clone()
    train_probe(model, make_shift_task(200, 3, 6, vocab_size=16), steps=5, batch_size=8)
    after = model.positions.embedding.weight.detach()
    assert torch.equal(after[6:], before[6:]) and not torch.equal(after[:6], before[:6])
    assert small_probe(positions="sinusoidal")(torch.full((1, 40), 5)).shape == (1, 40, 16)


@pytest.mark.slow
def test_training_learns_the_shift_and_accuracy_is_per_length():
    torch.manual_seed(0)
    model = PositionProbe(ProbeConfig(vocab_size=8, d_model=16, num_heads=1, d_ff=32,
                                      positions="learned", max_len=8))
    losses = train_probe(model, make_shift_task(2000, 3, 6, shift=1, vocab_size=8),
                         steps=150, batch_size=32, lr=1e-2)
    assert losses[-1] < 0.3 * losses[0]
    accuracy = accuracy_by_length(model, [3, 6], num_examples=50, shift=1)
    assert set(accuracy) == {3, 6} and min(accuracy.values()) > 0.8


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: make_shift_task(5, 2, 4, shift=2), "min_len: expected an integer >= 3"),
        (lambda: make_shift_task(5, 5, 4), "max_len: expected an integer >= 5"),
        (lambda: make_shift_task(5, 3, 4, vocab_size=5), "vocab_size: expected an integer >= 6"),
        (lambda: ProbeConfig(d_model=30, num_heads=4), "num_heads: expected a divisor"),
        (lambda: ProbeConfig(positions="alibi"), "positions: expected one of"),
        (lambda: PositionProbe({"d_model": 8}), "config: expected a ProbeConfig"),
        (lambda: small_probe()(torch.ones(1, 3)), "ids: expected an integer tensor"),
        (lambda: train_probe(small_probe(), [], steps=1), "examples: expected a non-empty list"),
        (lambda: accuracy_by_length(small_probe(), []), "lengths: expected a non-empty list"),
        (lambda: train_probe(small_probe(), [([4, 5, 6], [0, 0, 16])], steps=1),
         r"examples: expected ids in \[0, 16\), received ids in \[0, 16\]"),
        (lambda: train_probe(torch.nn.Linear(2, 2), [([4], [0])], steps=1),
         "model: expected a PositionProbe"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(BookError, match=match):
        call()


def test_accuracy_by_position_is_per_position_and_averages_to_the_length_accuracy():
    torch.manual_seed(0)
    model = small_probe(positions="sinusoidal")
    per_position = accuracy_by_position(model, 9, num_examples=30, shift=2, seed=4)
    assert per_position.shape == (9,) and per_position.dtype == torch.float64
    assert torch.isnan(per_position[:2]).all() and not torch.isnan(per_position[2:]).any()
    by_length = accuracy_by_length(model, [9], num_examples=30, shift=2, seed=4)[9]
    assert float(per_position[2:].mean()) == pytest.approx(by_length, abs=1e-12)
    # by hand, at position 5: the fraction of the 30 sequences whose token 3 is predicted there
    pairs = make_shift_task(30, 9, 9, shift=2, vocab_size=16, seed=4 + 9)
    tokens = torch.tensor([t for t, _ in pairs])
    with torch.no_grad():
        predicted = model(tokens).argmax(-1)[:, 5]
    assert float(per_position[5]) == pytest.approx(float((predicted == tokens[:, 3]).double()
                                                         .mean()))


def test_extrapolation_probe_follows_the_setting_and_the_seed(monkeypatch):
    monkeypatch.setitem(EXTRAPOLATION, "steps", 3)
    examples = make_shift_task(50, 3, 8, vocab_size=16)
    first, losses = train_extrapolation_probe("learned", 5, examples)
    again, _ = train_extrapolation_probe("learned", 5, examples)
    other, _ = train_extrapolation_probe("learned", 6, examples)
    assert len(losses) == 3 and first.config.max_len == EXTRAPOLATION["max_len"]
    assert first.config.positions == "learned" and first.config.num_heads == 1
    for a, b in zip(first.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(first.embedding.weight, other.embedding.weight)
    torch.manual_seed(5)  # the untrained rows of the table are those of a fresh model
    fresh = PositionProbe(first.config)
    assert torch.equal(first.positions.embedding.weight[8:], fresh.positions.embedding.weight[8:])


def test_accuracy_by_position_rejects_a_length_without_labels():
    with pytest.raises(BookError, match="length: expected an integer >= 3"):
        accuracy_by_position(small_probe(), 2, shift=2)

"""The neighbour task and the one-layer multi-head model of chapter 06."""

from __future__ import annotations

import pytest
import torch

from transformer_book.toy.heads import (
    IGNORE,
    NeighbourModel,
    attention_by_offset,
    neighbour_accuracy,
    neighbour_task,
    train_neighbour_model,
)
from transformer_book.util.validation import BookError


def test_targets_are_the_neighbours_with_edges_ignored():
    tokens, targets = neighbour_task(3, 6, 5, torch.Generator().manual_seed(0))
    assert tokens.shape == (3, 6) and targets.shape == (3, 6, 2)
    assert tokens.min() >= 0 and tokens.max() < 5
    assert torch.equal(targets[:, 1:, 0], tokens[:, :-1]), "previous token"
    assert torch.equal(targets[:, :-1, 1], tokens[:, 1:]), "next token"
    assert (targets[:, 0, 0] == IGNORE).all() and (targets[:, -1, 1] == IGNORE).all()


def test_batches_are_reproducible_from_the_generator():
    first = neighbour_task(2, 5, 7, torch.Generator().manual_seed(3))
    second = neighbour_task(2, 5, 7, torch.Generator().manual_seed(3))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_model_shapes_and_weights():
    torch.manual_seed(0)
    model = NeighbourModel(vocab_size=6, d_model=8, num_heads=2)
    tokens, targets = neighbour_task(4, 7, 6)
    logits, weights = model(tokens, need_weights=True)
    assert logits.shape == (4, 7, 2, 6)
    assert weights.shape == (4, 2, 7, 7)
    assert torch.allclose(weights.sum(-1), torch.ones(4, 2, 7))
    assert model(tokens)[1] is None, "weights only when asked"
    accuracy = neighbour_accuracy(model, tokens, targets)
    assert accuracy.shape == (2,) and ((accuracy >= 0) & (accuracy <= 1)).all()


@pytest.mark.slow
def test_two_heads_learn_both_neighbours_and_specialise():
    torch.manual_seed(0)
    model = NeighbourModel(vocab_size=8, d_model=16, num_heads=2)
    losses = train_neighbour_model(model, steps=300, batch_size=64, length=8, lr=2e-2, seed=1)
    assert len(losses) == 300 and losses[-1] < 0.5 * losses[0]
    tokens, targets = neighbour_task(200, 8, 8, torch.Generator().manual_seed(9))
    assert (neighbour_accuracy(model, tokens, targets) > 0.9).all()
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)
    by_offset = attention_by_offset(weights, (-1, 1))  # (h, 2)
    left, right = by_offset.argmax(dim=0)
    assert left != right, "one head looks left, the other right"


def test_attention_by_offset_reads_diagonals():
    length = 5
    shift = torch.zeros(1, 2, length, length)
    shift[0, 0] = torch.eye(length).roll(1, dims=0)  # head 0: query i attends to i - 1
    shift[0, 1] = torch.eye(length)  # head 1: attends to itself
    table = attention_by_offset(shift, (-1, 0, 1))
    assert torch.allclose(table, torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: neighbour_task(0, 5, 5), "batch_size: expected an integer >= 1"),
        (lambda: neighbour_task(2, 1, 5), "length: expected an integer >= 2"),
        (lambda: neighbour_task(2, 5, 1), "vocab_size: expected an integer >= 2"),
        (lambda: NeighbourModel(8, 10, 3), "num_heads: expected a divisor of d_model=10"),
        (lambda: NeighbourModel(8, 8, 2)(torch.zeros(2, 3)), "tokens: expected an integer"),
        (lambda: neighbour_accuracy(NeighbourModel(8, 8, 2), torch.full((2, 3), 8),
                                    torch.zeros(2, 3, 2, dtype=torch.long)),
         r"tokens: expected ids in \[0, 8\), received ids from 8 to 8"),
        (lambda: NeighbourModel(8, 8, 2)(torch.zeros(3, dtype=torch.long)),
         "tokens: expected a 2-D"),
        (lambda: train_neighbour_model(torch.nn.Linear(2, 2), steps=1),
         "model: expected a NeighbourModel"),
        (lambda: train_neighbour_model(NeighbourModel(8, 8, 2), steps=0),
         "steps: expected an integer"),
        (lambda: train_neighbour_model(NeighbourModel(8, 8, 2), steps=1, lr=0),
         "lr: expected a finite number > 0"),
        (lambda: train_neighbour_model(NeighbourModel(8, 8, 2), steps=1, seed=-1),
         "seed: expected an integer >= 0"),
        (lambda: neighbour_accuracy(NeighbourModel(8, 8, 2), torch.zeros(2, 3, dtype=torch.long),
                                    torch.zeros(2, 3, 3, dtype=torch.long)),
         r"targets: expected shape \(2, 3, 2\)"),
        (lambda: attention_by_offset(torch.zeros(1, 1, 3, 4), (0,)),
         r"weights: expected shape \(B, h, L, L\)"),
        (lambda: attention_by_offset(torch.zeros(1, 1, 3, 3), (3,)),
         "offsets: expected an integer >= -2 and <= 2, received 3"),
        (lambda: attention_by_offset(torch.zeros(1, 1, 3, 3), ()),
         "offsets: expected a non-empty list"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(BookError, match=message):
        call()


@pytest.mark.slow
def test_a_recorded_seed_is_the_chapters_run():
    """neighbour_seed_run(h, seed) is chapter 06's cells: weights from manual_seed(seed),
    batches from seed + 1, scored on the fixed test set."""
    from transformer_book.toy.heads import NEIGHBOUR_SETUP, neighbour_seed_run

    run = neighbour_seed_run(2, 0)
    torch.manual_seed(0)
    model = NeighbourModel(16, d_model=32, num_heads=2)
    losses = train_neighbour_model(model, steps=400, batch_size=64, length=12, lr=1e-2, seed=1)
    tokens, targets = neighbour_task(2000, 12, 16, torch.Generator().manual_seed(123))
    assert run["accuracy"] == neighbour_accuracy(model, tokens, targets).tolist()
    assert run["final_loss"] == pytest.approx(sum(losses[-20:]) / 20)
    assert len(run["by_offset"]) == 2 and len(run["by_offset"][0]) == 3
    assert NEIGHBOUR_SETUP["steps"] == 400
    with pytest.raises(BookError, match="seed"):
        neighbour_seed_run(2, -1)

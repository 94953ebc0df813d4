"""The one toy fit loop: steps, seeds, the schedule, teacher-forced batches and its checks."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_book.toy.fit import (
    fit,
    fit_teacher_forced,
    sample_examples,
    token_cross_entropy,
    warmup_then_decay,
)
from transformer_book.util.validation import BookError


def regression_loss(model: nn.Linear):
    def batch_loss(generator: torch.Generator) -> torch.Tensor:
        x = torch.randn(16, 3, generator=generator)
        return F.mse_loss(model(x), x.sum(-1, keepdim=True))
    return batch_loss


def test_fit_takes_one_adam_step_per_loss_and_leaves_eval_mode():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    losses = fit(model, regression_loss(model), steps=200, lr=0.05)
    assert len(losses) == 200 and losses[-1] < 0.01 * losses[0]
    assert not model.training


def test_the_seed_fixes_the_batches():
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        runs[name] = fit(model, regression_loss(model), steps=5, lr=0.01, seed=seed)
    assert runs["a"] == runs["b"] and runs["a"] != runs["c"]


def test_warmup_then_decay_scales_the_learning_rate():
    factor = warmup_then_decay(100)
    assert factor(0) == pytest.approx(0.1) and factor(9) == pytest.approx(1.0)
    assert factor(50) < factor(10) and factor(99) < 0.02
    model = nn.Linear(1, 1).double()
    biases = []

    def batch_loss(generator: torch.Generator) -> torch.Tensor:
        biases.append(model.bias.item())
        return model.bias.sum()  # gradient 1: each Adam step moves the bias by its learning rate

    fit(model, batch_loss, steps=100, lr=1.0, warmup=True)
    moves = [before - after for before, after in itertools.pairwise(biases)]
    assert moves == pytest.approx([factor(s) for s in range(99)], rel=1e-6)


def test_sample_examples_draws_with_replacement_from_the_generator():
    examples = [([i], [i]) for i in range(5)]
    first = sample_examples(examples, 20, torch.Generator().manual_seed(1))
    again = sample_examples(examples, 20, torch.Generator().manual_seed(1))
    assert first == again and len(first) == 20 and all(pair in examples for pair in first)
    assert len(set(map(str, first))) < 20, "with replacement: 20 draws from 5"


def test_token_cross_entropy_leaves_out_the_ignored_positions():
    logits = torch.randn(2, 3, 5)
    targets = torch.tensor([[1, 2, 0], [3, 0, 0]])
    kept = targets != 0
    expected = F.cross_entropy(logits[kept], targets[kept])
    torch.testing.assert_close(token_cross_entropy(logits, targets, 0), expected)


class Recorder(nn.Module):
    """An "encoder-decoder" that remembers its inputs and predicts from a bias only."""

    def __init__(self, vocab: int = 8) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.arange(vocab) / 4.0)
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        self.seen.append((src, tgt_in))
        return self.bias.expand(*tgt_in.shape, -1)  # (B, T, V)


def test_fit_teacher_forced_feeds_bos_y_and_predicts_y_eos():
    model = Recorder()
    initial = model.bias.detach().clone()
    examples = [([4, 5, 6], [6, 5, 4]), ([7], [7])]
    target_of = {4: [6, 5, 4], 7: [7]}  # by the first source token
    losses = fit_teacher_forced(model, examples, steps=1, batch_size=8, lr=0.1, seed=0)
    src, tgt_in = model.seen[0]
    targets = [target_of[row[0]] for row in src.tolist()]
    assert {len(t) for t in targets} == {1, 3}, "both examples drawn"
    assert tgt_in.tolist() == [[BOS_ID, *t] + [PAD_ID] * (3 - len(t)) for t in targets]
    predicted = torch.tensor([i for t in targets for i in (*t, EOS_ID)])  # pads left out
    expected = F.cross_entropy(initial.expand(len(predicted), -1), predicted)
    assert losses[0] == pytest.approx(expected.item())


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: fit(m, regression_loss(m), steps=0, lr=0.1), "steps: expected an integer >= 1"),
        (lambda m: fit(m, regression_loss(m), steps=1, lr="0.1"), "lr: expected a finite number"),
        (lambda m: fit(m, regression_loss(m), steps=1, lr=0.1, seed=-1),
         "seed: expected an integer >= 0"),
        (lambda m: fit(m, regression_loss(m), steps=1, lr=0.1, clip_norm=0),
         "clip_norm: expected a finite number > 0"),
        (lambda m: fit_teacher_forced(m, [], steps=1, batch_size=2, lr=0.1),
         "examples: expected a non-empty list"),
        (lambda m: fit_teacher_forced(m, [([4], [4])], steps=1, batch_size=0, lr=0.1),
         "batch_size: expected an integer >= 1"),
    ],
)
def test_bad_arguments(call, match):
    with pytest.raises(BookError, match=match):
        call(nn.Linear(3, 1))

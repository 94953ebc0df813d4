"""The GRU seq2seq: its additive attention against a naive loop, invariants, learning to reverse."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_book.baselines.seq2seq import Seq2SeqGRU, sequence_accuracy, token_accuracy
from transformer_book.toy.fit import train_seq2seq
from transformer_book.util.validation import BookError

VOCAB = 14  # 4 special ids + a 10-token alphabet (ids 4..13)


def reversal_pairs(count: int, lengths: tuple[int, ...] = (5,), seed: int = 0
                   ) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        src = [rng.randint(4, VOCAB - 1) for _ in range(rng.choice(lengths))]
        pairs.append((src, src[::-1]))
    return pairs


def naive_weights(model: Seq2SeqGRU, state: torch.Tensor, keys: torch.Tensor,
                  mask: torch.Tensor) -> torch.Tensor:
    """softmax_j of vᵀ tanh(W_q s + W_k h_j) over the real keys, one (b, j) pair at a time."""
    att = model.attention
    batch, src_len = keys.shape[:2]
    weights = torch.zeros(batch, src_len, dtype=state.dtype)
    for b in range(batch):
        scores = {}
        for j in range(src_len):
            if mask[b, j]:
                hidden = torch.tanh(att.w_q.weight @ state[b] + att.w_k.weight @ keys[b, j])
                scores[j] = (att.w_v.weight[0] @ hidden).item()
        top = max(scores.values())
        total = sum(torch.exp(torch.tensor(v - top, dtype=torch.float64)) for v in scores.values())
        for j, v in scores.items():
            weights[b, j] = torch.exp(torch.tensor(v - top, dtype=torch.float64)) / total
    return weights


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 3), src_len=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_attention_weights_equal_a_naive_loop_float64(batch: int, src_len: int,
                                                       seed: int) -> None:
    torch.manual_seed(seed)
    model = Seq2SeqGRU(VOCAB, 4, 6, attention=True).double()
    src = torch.randint(4, VOCAB, (batch, src_len))
    lengths = torch.randint(1, src_len + 1, (batch, 1))
    src = src.masked_fill(torch.arange(src_len) >= lengths, 0)  # right padded, >= 1 real token
    states, first_state, mask = model.encode(src)
    _, weights = model(src, torch.ones(batch, 1, dtype=torch.long), need_weights=True)
    expected = naive_weights(model, first_state, states, mask)
    torch.testing.assert_close(weights[:, 0], expected, rtol=1e-12, atol=1e-12)
    assert torch.all(weights[:, 0][~mask] == 0), "padded keys get exactly zero weight"


@pytest.mark.parametrize("attention", [False, True])
def test_forward_shapes_and_padding_independence(attention: bool) -> None:
    torch.manual_seed(0)
    model = Seq2SeqGRU(VOCAB, 8, 16, attention=attention).double().eval()
    short = torch.tensor([[5, 6, 7]])
    padded = torch.tensor([[5, 6, 7, 0, 0], [4, 5, 6, 7, 8]])
    tgt_in = torch.tensor([[1, 7, 6], [1, 8, 7]])
    logits, weights = model(padded, tgt_in, need_weights=True)
    assert logits.shape == (2, 3, VOCAB), "logits are (B, T, V)"
    alone = model(short, tgt_in[:1])
    torch.testing.assert_close(logits[:1], alone, rtol=1e-12, atol=1e-12)
    if attention:
        assert weights.shape == (2, 3, 5), "weights are (B, T, S)"
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, dtype=torch.float64))
        assert torch.all(weights[0, :, 3:] == 0), "padded source positions get zero weight"
    else:
        assert weights is None, "no attention, no weights"


def test_greedy_decode_stops_at_eos_and_pads_after() -> None:
    torch.manual_seed(0)
    model = Seq2SeqGRU(VOCAB, 8, 16, attention=True)
    with torch.no_grad():  # make <eos> the argmax at every step
        model.out.bias.fill_(-100.0)
        model.out.bias[2] = 100.0
    tokens, weights = model.greedy_decode(torch.tensor([[5, 6, 0], [4, 5, 6]]), max_len=7)
    assert tokens.tolist() == [[2], [2]], "stops as soon as every row has emitted <eos>"
    assert weights.shape == (2, 1, 3), "one row of weights per generated token"
    model.out.bias.data[2] = -100.0
    model.out.bias.data[9] = 100.0
    tokens, _ = model.greedy_decode(torch.tensor([[5, 6]]), max_len=4)
    assert tokens.tolist() == [[9, 9, 9, 9]], "never longer than max_len"


@pytest.mark.parametrize("attention", [False, True])
def test_teacher_forcing_agrees_with_greedy_decoding(attention: bool) -> None:
    torch.manual_seed(1)
    model = Seq2SeqGRU(VOCAB, 8, 16, attention=attention).double()
    src = torch.tensor([[5, 6, 7, 0], [4, 9, 8, 7]])
    tokens, weights = model.greedy_decode(src, max_len=6, eos_id=99)  # never stops early
    tgt_in = torch.cat([torch.ones(2, 1, dtype=torch.long), tokens[:, :-1]], dim=1)
    logits, forced_weights = model(src, tgt_in, need_weights=True)
    assert torch.equal(logits.argmax(-1), tokens), "the same model step by step and at once"
    if attention:
        torch.testing.assert_close(forced_weights, weights)


@pytest.fixture(scope="module")
def reversal_data() -> tuple[list, list]:
    return reversal_pairs(10_000, seed=0), reversal_pairs(300, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize(("attention", "steps", "lr"), [(False, 350, 5e-3), (True, 120, 1e-2)])
def test_learns_to_reverse(attention: bool, steps: int, lr: float,
                           reversal_data: tuple[list, list]) -> None:
    train, test = reversal_data
    torch.manual_seed(0)
    model = Seq2SeqGRU(VOCAB, 32, 64, attention=attention)
    losses = train_seq2seq(model, train, steps=steps, batch_size=64, lr=lr, seed=0)
    assert len(losses) == steps and losses[-1] < 0.25 * losses[0], "the loss falls"
    accuracy = token_accuracy(model, test)
    assert accuracy > 0.9, f"reverses length-5 sequences (token accuracy {accuracy:.3f})"
    per_length = sequence_accuracy(model, test + reversal_pairs(20, lengths=(3,), seed=2))
    assert set(per_length) == {3, 5}, "one exact-match accuracy per source length"
    assert all(0.0 <= a <= 1.0 for a in per_length.values()), "accuracies are fractions"


def test_bad_inputs_raise_book_errors() -> None:
    model = Seq2SeqGRU(VOCAB, 8, 16)
    with pytest.raises(BookError, match=r"src: expected ids in \[0, 14\), received ids in"):
        model.greedy_decode(torch.tensor([[5, 20]]), max_len=2)
    with pytest.raises(BookError, match="src: expected at least one non-pad token per row"):
        model.greedy_decode(torch.tensor([[5, 6], [0, 0]]), max_len=2)
    with pytest.raises(BookError, match=r"src: expected dtype torch\.int64 or torch\.int32"):
        model(torch.ones(1, 2), torch.tensor([[1]]))
    with pytest.raises(BookError, match="tgt_in: expected a sequence of length >= 1"):
        model(torch.tensor([[5]]), torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(BookError, match="tgt_in: expected batch size 1, received 2"):
        model(torch.tensor([[5]]), torch.tensor([[1], [1]]))
    with pytest.raises(BookError, match=r"pad_id: expected an integer >= 0 and <= 13"):
        Seq2SeqGRU(VOCAB, 8, 16, pad_id=14)
    with pytest.raises(BookError, match="attention: expected True or False, received 1"):
        Seq2SeqGRU(VOCAB, 8, 16, attention=1)
    with pytest.raises(BookError, match="examples: expected a non-empty list"):
        train_seq2seq(model, [], steps=1, batch_size=2)
    with pytest.raises(BookError, match=r"examples: expected ids in \[0, 14\), received ids"):
        train_seq2seq(model, [([5, 14], [14, 5])], steps=1, batch_size=2)
    with pytest.raises(BookError, match="steps: expected an integer >= 1, received 0"):
        train_seq2seq(model, reversal_pairs(2), steps=0, batch_size=2)
    with pytest.raises(BookError, match=r"lr: expected a finite number > 0, received -0\.1"):
        train_seq2seq(model, reversal_pairs(2), steps=1, batch_size=2, lr=-0.1)
    with pytest.raises(BookError, match="model: expected a Seq2SeqGRU"):
        train_seq2seq(torch.nn.Linear(2, 2), reversal_pairs(2), steps=1, batch_size=2)
    with pytest.raises(BookError, match="max_len: expected an integer >= 1, received 0"):
        model.greedy_decode(torch.tensor([[5]]), max_len=0)
    with pytest.raises(BookError, match=r"examples: expected ids in \[0, 14\)"):
        token_accuracy(model, [([5, 30], [30, 5])])

"""Additive attention against a naive loop, the GRU seq2seq's invariants, learning to reverse."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_book.baselines.seq2seq import (
    AdditiveAttention,
    Seq2SeqGRU,
    sequence_accuracy,
    token_accuracy,
    train_seq2seq,
)

VOCAB = 14  # 4 special ids + a 10-token alphabet (ids 4..13)


def reversal_pairs(count: int, lengths: tuple[int, ...] = (5,), seed: int = 0
                   ) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        src = [rng.randint(4, VOCAB - 1) for _ in range(rng.choice(lengths))]
        pairs.append((src, src[::-1]))
    return pairs


def naive_additive(att: AdditiveAttention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """score(q, k) = vᵀ tanh(W_q q + W_k k), one (b, j) pair at a time."""
    batch, src_len = k.shape[:2]
    weights = torch.zeros(batch, src_len, dtype=q.dtype)
    for b in range(batch):
        scores = []
        for j in range(src_len):
            hidden = torch.tanh(att.w_q.weight @ q[b] + att.w_k.weight @ k[b, j])
            scores.append((att.v.weight[0] @ hidden).item() if mask[b, j] else None)
        finite = torch.tensor([s for s in scores if s is not None], dtype=q.dtype)
        exp = torch.exp(finite - finite.max())
        probs = iter((exp / exp.sum()).tolist())
        for j in range(src_len):
            weights[b, j] = next(probs) if scores[j] is not None else 0.0
    context = torch.stack([(weights[b, :, None] * v[b]).sum(0) for b in range(batch)])
    return context, weights


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 3), src_len=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_additive_attention_equals_naive_loop_float64(batch: int, src_len: int,
                                                      seed: int) -> None:
    torch.manual_seed(seed)
    att = AdditiveAttention(3, 4, 5).double()
    q = torch.randn(batch, 3, dtype=torch.float64)
    k = torch.randn(batch, src_len, 4, dtype=torch.float64)
    v = torch.randn(batch, src_len, 2, dtype=torch.float64)
    mask = torch.rand(batch, src_len) < 0.7
    mask[:, 0] = True
    context, weights = att(q, k, v, mask=mask)
    ref_context, ref_weights = naive_additive(att, q, k, v, mask)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(context, ref_context, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights.sum(-1), torch.ones(batch, dtype=torch.float64))
    assert torch.all(weights[~mask] == 0), "masked keys get exactly zero weight"
    # several queries at once give the same rows as one query at a time
    many_q = torch.randn(batch, 2, 3, dtype=torch.float64)
    many_context, many_weights = att(many_q, k, v, mask=mask)
    assert many_weights.shape == (batch, 2, src_len), "weights are (B, T, S)"
    for t in range(2):
        one_context, one_weights = att(many_q[:, t], k, v, mask=mask)
        torch.testing.assert_close(many_weights[:, t], one_weights)
        torch.testing.assert_close(many_context[:, t], one_context)


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


def test_bad_inputs_raise_value_errors() -> None:
    att = AdditiveAttention(3, 4, 5)
    keys = torch.randn(2, 4, 4)
    with pytest.raises(ValueError, match="hidden_dim: expected an integer >= 1, received 0"):
        AdditiveAttention(3, 4, 0)
    with pytest.raises(ValueError, match=r"query: expected shape \(2, \[T,\] 3\)"):
        att(torch.randn(2, 5), keys)
    with pytest.raises(ValueError, match=r"keys: expected shape \(2, S >= 1, 4\)"):
        att(torch.randn(2, 3), torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match=r"mask: expected dtype torch\.bool"):
        att(torch.randn(2, 3), keys, mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="mask: expected at least one True"):
        att(torch.randn(2, 3), keys, mask=torch.tensor([[True] * 4, [False] * 4]))
    model = Seq2SeqGRU(VOCAB, 8, 16)
    with pytest.raises(ValueError, match=r"src: expected ids in \[0, 14\), received ids in"):
        model(torch.tensor([[5, 20]]), torch.tensor([[1]]))
    with pytest.raises(ValueError, match="src: expected at least one non-pad token per row"):
        model(torch.tensor([[0, 0]]), torch.tensor([[1]]))
    with pytest.raises(ValueError, match="tgt_in: expected a sequence of length >= 1"):
        model(torch.tensor([[5]]), torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="tgt_in: expected batch size 1, received 2"):
        model(torch.tensor([[5]]), torch.tensor([[1], [1]]))
    with pytest.raises(ValueError, match=r"pad_id: expected an id in \[0, 14\)"):
        Seq2SeqGRU(VOCAB, 8, 16, pad_id=14)
    with pytest.raises(ValueError, match="examples: expected a non-empty list"):
        train_seq2seq(model, [], steps=1, batch_size=2)
    with pytest.raises(ValueError, match="steps: expected an integer >= 1, received 0"):
        train_seq2seq(model, reversal_pairs(2), steps=0, batch_size=2)
    with pytest.raises(ValueError, match=r"lr: expected a positive number, received -0\.1"):
        train_seq2seq(model, reversal_pairs(2), steps=1, batch_size=2, lr=-0.1)
    with pytest.raises(ValueError, match="max_len: expected an integer >= 1, received 0"):
        model.greedy_decode(torch.tensor([[5]]), max_len=0)

"""Padding, masks, collation and the token-budget sampler (Section 5.1 batching)."""

from __future__ import annotations

import functools
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from transformer_book.data.batching import (
    TokenBudgetSampler,
    collate_pairs,
    pad_sequences,
    padding_fraction,
    token_mask,
)
from transformer_book.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_book.util.validation import BookError

lengths_strategy = st.lists(st.integers(1, 40), min_size=1, max_size=120)


def test_pad_sequences_and_mask() -> None:
    ids = pad_sequences([[5, 6, 7], [8], [9, 10]], pad_id=PAD_ID)
    assert ids.dtype == torch.long and ids.shape == (3, 3)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]
    mask = token_mask(ids, PAD_ID)
    assert mask.dtype == torch.bool
    assert mask.tolist() == [[True, True, True], [True, False, False], [True, True, False]]
    assert pad_sequences([[1], []], pad_id=-1, length=4).tolist() == [[1, -1, -1, -1], [-1] * 4]


def test_collate_pairs_wraps_targets() -> None:
    batch = [([5, 6, 7], [8]), ([9], [10, 11, 12])]
    src, tgt = collate_pairs(batch, PAD_ID)
    assert src.tolist() == [[5, 6, 7], [9, 0, 0]] and tgt.tolist() == [[8, 0, 0], [10, 11, 12]]
    src, tgt = collate_pairs(batch, PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID)
    assert src.shape == (2, 3) and tgt.shape == (2, 5)
    assert tgt.tolist() == [[1, 8, 2, 0, 0], [1, 10, 11, 12, 2]]


def test_sampler_with_dataloader() -> None:
    pairs = [([4] * n, [5] * (n + 1)) for n in (3, 9, 1, 4, 7, 2, 8)]
    sampler = TokenBudgetSampler([len(s) for s, _ in pairs], max_tokens=16,
                                 tgt_lengths=[len(t) for _, t in pairs])
    loader = DataLoader(pairs, batch_sampler=sampler,
                        collate_fn=functools.partial(collate_pairs, bos_id=BOS_ID, eos_id=EOS_ID))
    seen = 0
    for src, tgt in loader:
        assert src.numel() <= 16 and (tgt.shape[1] - 2) * tgt.shape[0] <= 16
        seen += src.shape[0]
    assert seen == len(pairs) and len(loader) == len(sampler)


def test_bucketing_is_sorted_and_short_first_without_shuffle() -> None:
    lengths = [5, 1, 3, 2, 4, 1, 5, 2]
    batches = list(TokenBudgetSampler(lengths, max_tokens=6, shuffle=False))
    assert batches == [[1, 5, 3], [7, 2], [4], [0], [6]]


def test_bucketing_pads_much_less_than_random_batches() -> None:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 60, (2000,), generator=generator).tolist()
    bucketed = TokenBudgetSampler(lengths, max_tokens=1000, seed=0)
    n_batches = len(bucketed)
    random_batches = list(BatchSampler(RandomSampler(lengths, generator=generator),
                                       batch_size=len(lengths) // n_batches, drop_last=False))
    assert bucketed.padding_fraction() < 0.05
    assert padding_fraction(random_batches, lengths) > 0.3


def test_padding_fraction_counts_both_sides() -> None:
    assert padding_fraction([[0, 1]], [2, 4]) == pytest.approx(0.25)
    assert padding_fraction([[0, 1]], [2, 4], [3, 3]) == pytest.approx(2 / 14)
    assert padding_fraction([[0], [1]], [2, 4]) == 0.0


def test_epochs_differ_but_replay() -> None:
    lengths = [3] * 50 + [7] * 50
    sampler = TokenBudgetSampler(lengths, max_tokens=21, seed=1)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    assert first != second
    sampler.set_epoch(0)
    assert list(sampler) == first
    assert len(sampler) == len(first) == len(second)


@settings(max_examples=40, deadline=None)
@given(lengths=lengths_strategy, slack=st.integers(0, 200), seed=st.integers(0, 2**31),
       epoch=st.integers(0, 5), shuffle=st.booleans())
def test_every_example_once_within_budget(lengths: list[int], slack: int, seed: int,
                                          epoch: int, shuffle: bool) -> None:
    max_tokens = max(lengths) + slack
    sampler = TokenBudgetSampler(lengths, max_tokens=max_tokens, shuffle=shuffle, seed=seed)
    sampler.set_epoch(epoch)
    batches = list(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    assert all(len(b) * max(lengths[i] for i in b) <= max_tokens for b in batches)
    assert len(batches) == len(sampler)
    again = TokenBudgetSampler(lengths, max_tokens=max_tokens, shuffle=shuffle, seed=seed)
    again.set_epoch(epoch)
    assert list(again) == batches  # deterministic for seed + epoch


@settings(max_examples=30, deadline=None)
@given(src=lengths_strategy, data=st.data(), seed=st.integers(0, 1000))
def test_pairs_budget_both_sides(src: list[int], data: st.DataObject, seed: int) -> None:
    tgt = data.draw(st.lists(st.integers(1, 40), min_size=len(src), max_size=len(src)))
    max_tokens = max(src + tgt) + data.draw(st.integers(0, 100))
    batches = list(TokenBudgetSampler(src, max_tokens, tgt_lengths=tgt, seed=seed))
    assert sorted(i for b in batches for i in b) == list(range(len(src)))
    for b in batches:
        assert len(b) * max(src[i] for i in b) <= max_tokens
        assert len(b) * max(tgt[i] for i in b) <= max_tokens


@settings(max_examples=30, deadline=None)
@given(lengths=lengths_strategy, replicas=st.integers(1, 4), drop_last=st.booleans(),
       seed=st.integers(0, 1000))
def test_sharding_across_ranks(lengths: list[int], replicas: int, drop_last: bool,
                               seed: int) -> None:
    max_tokens = max(lengths) * 3
    full = TokenBudgetSampler(lengths, max_tokens, seed=seed).batches()
    shards = [list(TokenBudgetSampler(lengths, max_tokens, seed=seed, num_replicas=replicas,
                                      rank=r, drop_last=drop_last)) for r in range(replicas)]
    sizes = {len(shard) for shard in shards}
    assert len(sizes) == 1  # every rank runs the same number of steps
    flat = [tuple(b) for shard in shards for b in shard]
    counts = Counter(i for shard in shards for b in shard for i in b)
    if drop_last:
        assert len(flat) == len(set(flat)) == len(full) - len(full) % replicas  # disjoint
        assert all(c == 1 for c in counts.values())
    else:
        assert set(flat) == {tuple(b) for b in full}  # everything seen, a few batches twice
        assert len(flat) == -(-len(full) // replicas) * replicas


def test_bad_input() -> None:
    with pytest.raises(BookError, match=r"max_tokens: expected at least the longest example "
                                         r"\(9 tokens\), received 8"):
        TokenBudgetSampler([3, 9, 2], max_tokens=8)
    with pytest.raises(BookError, match=r"max_tokens: expected at least the longest example "
                                         r"\(12 tokens\), received 10"):
        TokenBudgetSampler([3, 9], max_tokens=10, tgt_lengths=[12, 1])
    with pytest.raises(BookError, match=r"lengths\[1\]: expected an integer >= 1, received 0"):
        TokenBudgetSampler([3, 0, 2], max_tokens=8)
    with pytest.raises(BookError, match="lengths: expected a non-empty sequence of lengths"):
        TokenBudgetSampler([], max_tokens=8)
    with pytest.raises(BookError, match="tgt_lengths: expected 2 lengths, one per example"):
        TokenBudgetSampler([3, 4], max_tokens=8, tgt_lengths=[1])
    with pytest.raises(BookError, match=r"rank: expected an integer >= 0 and <= 1, received 2"):
        TokenBudgetSampler([3], max_tokens=8, num_replicas=2, rank=2)
    with pytest.raises(BookError, match="epoch: expected an integer >= 0, received -1"):
        TokenBudgetSampler([3], max_tokens=8).set_epoch(-1)
    with pytest.raises(BookError, match=r"length: expected at least the longest sequence \(3\)"):
        pad_sequences([[1, 2, 3]], length=2)
    with pytest.raises(BookError, match=r"sequences\[1\]: expected a list of integer token ids"):
        pad_sequences([[1], [2.5]])
    with pytest.raises(BookError, match="sequences: expected a non-empty list"):
        pad_sequences([])
    with pytest.raises(BookError, match="ids: expected a 2-D tensor, received shape"):
        token_mask(torch.zeros(3, dtype=torch.long))
    with pytest.raises(BookError, match="ids: expected dtype"):
        token_mask(torch.zeros(2, 3))
    with pytest.raises(BookError, match=r"batch\[0\]: expected a \(src_ids, tgt_ids\) pair"):
        collate_pairs([([1, 2],)])  # type: ignore[list-item]
    with pytest.raises(BookError, match="batches: expected at least one batch"):
        padding_fraction([], [1])

"""Padding, padding masks and token-budget batches bucketed by length.

Section 5.1 "Training Data and Batching": "Sentence pairs were batched together by
approximate sequence length. Each training batch contained a set of sentence pairs
containing approximately 25000 source tokens and 25000 target tokens."

Sentences in a batch are padded to the longest one, so a batch of mixed lengths spends
compute on ``<pad>``. Sorting by length first keeps the padding small; bounding
``batch_size x longest`` by a token budget keeps the memory per step about constant.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler

from transformer_book.data.tokenizer import PAD_ID
from transformer_book.util.validation import (
    bad_input,
    is_integer,
    require,
    require_int,
    require_positive_int,
    require_tensor,
)

__all__ = [
    "TokenBudgetSampler",
    "collate_pairs",
    "pad_sequences",
    "padding_fraction",
    "token_mask",
]


def _check_id_lists(sequences: Sequence[Sequence[int]], argument: str) -> None:
    require(isinstance(sequences, Sequence) and len(sequences) > 0, argument,
            "a non-empty list of token-id lists", repr(sequences)[:80])
    for i, seq in enumerate(sequences):
        ok = isinstance(seq, Sequence) and all(
            is_integer(t) for t in seq)
        require(ok, f"{argument}[{i}]", "a list of integer token ids", repr(seq)[:80])


def pad_sequences(
    sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID, length: int | None = None
) -> torch.Tensor:
    """Stack token-id lists into one ``(B, L)`` ``torch.long`` tensor, right-padded with ``pad_id``.

    Args:
        sequences: ``B`` lists of token ids.
        pad_id: the id written after each sequence's end (``<pad>`` = 0).
        length: ``L``; defaults to the longest sequence. Must be >= every length.

    Returns:
        ``(B, L)`` tensor; row ``b`` holds ``sequences[b]`` then ``L - len(sequences[b])`` pads.
    """
    _check_id_lists(sequences, "sequences")
    longest = max(len(seq) for seq in sequences)
    if length is None:
        length = longest
    require_int(length, "length", minimum=0)
    require(length >= longest, "length", f"at least the longest sequence ({longest})", length)
    out = torch.full((len(sequences), length), pad_id, dtype=torch.long)  # (B, L)
    for row, seq in enumerate(sequences):
        out[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return out


def token_mask(ids: torch.Tensor, pad_id: int = PAD_ID) -> torch.Tensor:
    """Boolean ``(B, L)`` mask, **True at real tokens** (True = may attend), False at padding.

    Section 3.2.3 masks illegal connections inside attention; padding positions are
    masked the same way. Unsqueeze to ``(B, 1, 1, L)`` to broadcast over heads and queries.
    """
    require_tensor(ids, "ids", ndim=2, dtype=(torch.long, torch.int32, torch.int64, torch.int16))
    return ids != pad_id


def collate_pairs(
    batch: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad_id: int = PAD_ID,
    *,
    bos_id: int | None = None,
    eos_id: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad a list of ``(src_ids, tgt_ids)`` pairs into ``src (B, S)`` and ``tgt (B, T)``.

    If ``bos_id`` / ``eos_id`` are given, each target is wrapped as ``<bos> y <eos>``
    before padding (sources are left as they are); the training loop then feeds
    ``tgt[:, :-1]`` to the decoder and predicts ``tgt[:, 1:]`` (Section 3.1: the
    decoder is "auto-regressive, consuming the previously generated symbols"). Leave
    them ``None`` when the ids already carry their specials. Use with ``DataLoader`` via
    ``functools.partial(collate_pairs, bos_id=BOS_ID, eos_id=EOS_ID)``.
    """
    require(isinstance(batch, Sequence) and len(batch) > 0, "batch",
            "a non-empty list of (src_ids, tgt_ids) pairs", repr(batch)[:80])
    for i, pair in enumerate(batch):
        require(isinstance(pair, Sequence) and len(pair) == 2, f"batch[{i}]",
                "a (src_ids, tgt_ids) pair", repr(pair)[:80])
    sources = [list(src) for src, _ in batch]
    head = [] if bos_id is None else [bos_id]
    tail = [] if eos_id is None else [eos_id]
    targets = [head + list(tgt) + tail for _, tgt in batch]
    return pad_sequences(sources, pad_id), pad_sequences(targets, pad_id)


def padding_fraction(
    batches: Sequence[Sequence[int]],
    lengths: Sequence[int],
    tgt_lengths: Sequence[int] | None = None,
) -> float:
    """Fraction of the padded ``(B, L)`` slots that hold ``<pad>``, over all ``batches``.

    ``batches`` lists example indices into ``lengths``; with ``tgt_lengths`` both sides
    are counted. Random batches of Multi30k waste far more than length-bucketed ones.
    """
    require(len(batches) > 0, "batches", "at least one batch of indices", "none")
    real = padded = 0
    for side in (lengths, tgt_lengths):
        if side is None:
            continue
        for batch in batches:
            require(len(batch) > 0, "batches", "non-empty batches", "an empty batch")
            sizes = [side[i] for i in batch]
            real += sum(sizes)
            padded += len(sizes) * max(sizes)
    return 1.0 - real / padded if padded else 0.0


def _check_lengths(lengths: Sequence[int], argument: str) -> list[int]:
    values = lengths.tolist() if hasattr(lengths, "tolist") else lengths  # tensor, ndarray
    require(isinstance(values, Sequence) and len(values) > 0, argument,
            "a non-empty sequence of lengths", repr(lengths)[:80])
    values = list(values)
    for i, n in enumerate(values):
        require_positive_int(n, f"{argument}[{i}]")
    return values


class TokenBudgetSampler(Sampler[list[int]]):
    """Length-bucketed batches of example indices, each within a padded-token budget.

    Section 5.1: "Sentence pairs were batched together by approximate sequence length.
    Each training batch contained ... approximately 25000 source tokens and 25000 target
    tokens."

    Each epoch: examples are sorted by length (ties broken at random when ``shuffle``),
    cut greedily into batches with ``len(batch) * max(length in batch) <= max_tokens``
    (for source *and* target when ``tgt_lengths`` is given), and the batch order is
    shuffled. The result depends only on ``seed`` and the epoch set by :meth:`set_epoch`
    (call it before each epoch, as with ``DistributedSampler``). Every example is in
    exactly one batch per epoch.

    Sharding for several processes (``num_replicas`` > 1): rank ``r`` takes batches
    ``r, r + num_replicas, ...`` of the epoch's shuffled list. All ranks must run the same
    number of steps, so when the batch count does not divide evenly:

    - ``drop_last=False`` (default): the list is padded by repeating its first batches,
      so a few examples are seen twice in that epoch;
    - ``drop_last=True``: the last ``len % num_replicas`` batches are dropped (which ones
      changes every epoch, since the order is shuffled first).

    Args:
        lengths: token count of each source (or of each example), all >= 1.
        max_tokens: budget on ``batch_size x longest`` per side (>= the longest example).
        tgt_lengths: token count of each target, if pairs are budgeted on both sides.
        shuffle: randomize tie order and batch order; ``False`` gives short batches first.
        seed: base seed, combined with the epoch.
        num_replicas, rank: process count and this process's index, for DDP.
        drop_last: sharding policy, see above.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        max_tokens: int,
        tgt_lengths: Sequence[int] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = False,
    ) -> None:
        self.lengths = _check_lengths(lengths, "lengths")
        self.tgt_lengths = None
        if tgt_lengths is not None:
            self.tgt_lengths = _check_lengths(tgt_lengths, "tgt_lengths")
            require(len(self.tgt_lengths) == len(self.lengths), "tgt_lengths",
                    f"{len(self.lengths)} lengths, one per example", len(self.tgt_lengths))
        require_positive_int(max_tokens, "max_tokens")
        longest = max(max(self.lengths), max(self.tgt_lengths or [0]))
        if max_tokens < longest:
            raise bad_input("max_tokens", f"at least the longest example ({longest} tokens)",
                       max_tokens)
        require_int(seed, "seed")
        require_positive_int(num_replicas, "num_replicas")
        require_int(rank, "rank", minimum=0, maximum=num_replicas - 1)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.epoch = 0
        self._num_batches: int | None = None

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose shuffle :meth:`__iter__` replays."""
        require_int(epoch, "epoch", minimum=0)
        self.epoch = epoch

    def _generator(self) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)

    def batches(self) -> list[list[int]]:
        """All batches of the current epoch, in shuffled order, before sharding."""
        n = len(self.lengths)
        generator = self._generator()
        order = torch.randperm(n, generator=generator).tolist() if self.shuffle else range(n)
        tgt = self.tgt_lengths or self.lengths
        # Stable sort by length: equal lengths keep the random order drawn above.
        order = sorted(order, key=lambda i: (self.lengths[i], tgt[i]))
        batches: list[list[int]] = []
        current: list[int] = []
        longest_src = longest_tgt = 0
        for i in order:
            src_max = max(longest_src, self.lengths[i])
            tgt_max = max(longest_tgt, tgt[i])
            if current and (len(current) + 1) * max(src_max, tgt_max) > self.max_tokens:
                batches.append(current)
                current, src_max, tgt_max = [], self.lengths[i], tgt[i]
            current.append(i)
            longest_src, longest_tgt = src_max, tgt_max
        batches.append(current)
        if self.shuffle:
            batches = [batches[j] for j in torch.randperm(len(batches), generator=generator)]
        return batches

    def _shard(self, batches: list[list[int]]) -> list[list[int]]:
        if self.num_replicas == 1:
            return batches
        if self.drop_last:
            batches = batches[: len(batches) - len(batches) % self.num_replicas]
        else:
            total = math.ceil(len(batches) / self.num_replicas) * self.num_replicas
            batches = [batches[j % len(batches)] for j in range(total)]
        return batches[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._shard(self.batches()))

    def __len__(self) -> int:
        """Batches this rank yields per epoch (the same every epoch)."""
        # The batch boundaries depend only on the sorted lengths, not on the epoch.
        if self._num_batches is None:
            self._num_batches = len(self.batches())
        count = self._num_batches
        if self.num_replicas == 1:
            return count
        if self.drop_last:
            return count // self.num_replicas
        return math.ceil(count / self.num_replicas)

    def padding_fraction(self) -> float:
        """Fraction of padded slots over the current epoch's batches (all ranks, both sides)."""
        return padding_fraction(self.batches(), self.lengths, self.tgt_lengths)

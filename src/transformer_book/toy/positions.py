"""A small attention encoder that compares positional schemes on a task about positions
(chapter 08).

Section 3.5: "We also experimented with using learned positional embeddings instead, and
found that the two versions produced nearly identical results (see Table 3 row (E)). We chose
the sinusoidal version because it may allow the model to extrapolate to sequence lengths
longer than the ones encountered during training."

The task, :func:`make_shift_task`, asks for every position ``t`` the token ``shift`` places
back: ``y_t = x_{t - shift}``. Contents alone cannot answer it (attention without positions
treats the input as a bag), and the answer depends only on the *relative* position, so it
is the kind of relation sinusoids were chosen for. :class:`PositionProbe` is an encoder of
:class:`~transformer_book.toy.aligner.EncoderBlock` layers with a classifier on top;
its positional layer is ``"sinusoidal"``, ``"learned"`` or ``"none"``.

Labels use ``0`` (``<pad>``) for "no answer": the first ``shift`` positions and padding,
both ignored by the loss and by :func:`accuracy_by_length`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.data.batching import pad_sequences
from transformer_book.data.tokenizer import PAD_ID
from transformer_book.data.toy import Example
from transformer_book.nn.attention import padding_mask
from transformer_book.toy.aligner import POSITION_KINDS, EncoderBlock, make_positions
from transformer_book.util.validation import require, require_positive_int, require_tensor

__all__ = [
    "NO_LABEL",
    "PositionProbe",
    "ProbeConfig",
    "accuracy_by_length",
    "make_shift_task",
    "train_probe",
]

#: The label of positions without an answer (the first ``shift`` ones and padding).
NO_LABEL = 0
FIRST_TOKEN_ID = 4


def make_shift_task(
    num_examples: int,
    min_len: int,
    max_len: int,
    shift: int = 2,
    vocab_size: int = 16,
    seed: int = 0,
) -> list[Example]:
    """Random ``(tokens, labels)`` pairs with ``labels[t] = tokens[t - shift]`` for ``t >=
    shift`` and :data:`NO_LABEL` before.

    Lengths are uniform in ``[min_len, max_len]``, tokens uniform in ``[4, vocab_size)``.
    ``min_len`` must exceed ``shift`` so that every example has something to predict.
    """
    require_positive_int(num_examples, "num_examples")
    require_positive_int(shift, "shift")
    require_positive_int(min_len, "min_len", minimum=shift + 1)
    require_positive_int(max_len, "max_len", minimum=min_len)
    require_positive_int(vocab_size, "vocab_size", minimum=FIRST_TOKEN_ID + 2)
    rng = random.Random(seed)
    examples: list[Example] = []
    for _ in range(num_examples):
        length = rng.randint(min_len, max_len)
        tokens = [rng.randrange(FIRST_TOKEN_ID, vocab_size) for _ in range(length)]
        examples.append((tokens, [NO_LABEL] * shift + tokens[:-shift]))
    return examples


@dataclass(frozen=True)
class ProbeConfig:
    """Sizes of a :class:`PositionProbe`.

    Attributes:
        vocab_size: ids including the four specials.
        d_model, num_heads, d_ff: widths of the encoder blocks.
        layers: how many encoder blocks.
        max_len: rows of a learned table (the sinusoidal table is computed for any length).
        positions: ``"sinusoidal"``, ``"learned"`` or ``"none"``.
    """

    vocab_size: int = 16
    d_model: int = 32
    num_heads: int = 4
    d_ff: int = 64
    layers: int = 1
    max_len: int = 64
    positions: str = "sinusoidal"

    def __post_init__(self) -> None:
        require_positive_int(self.vocab_size, "vocab_size", minimum=FIRST_TOKEN_ID + 2)
        require_positive_int(self.d_model, "d_model")
        require_positive_int(self.num_heads, "num_heads")
        require(self.d_model % self.num_heads == 0, "num_heads",
                f"a divisor of d_model={self.d_model}", self.num_heads)
        require_positive_int(self.d_ff, "d_ff")
        require_positive_int(self.layers, "layers")
        require_positive_int(self.max_len, "max_len")
        require(self.positions in POSITION_KINDS, "positions", f"one of {list(POSITION_KINDS)}",
                repr(self.positions))


class PositionProbe(nn.Module):
    """Embedding (× √d_model, Section 3.4) + positions (Section 3.5) + encoder blocks +
    a linear classifier: ``forward(ids (B, L)) -> logits (B, L, vocab)``.

    With ``positions="learned"`` the table has ``max_len`` rows and longer inputs raise a
    ``ValueError``; rows beyond the training lengths are never updated by training.
    """

    def __init__(self, config: ProbeConfig) -> None:
        super().__init__()
        require(isinstance(config, ProbeConfig), "config", "a ProbeConfig", type(config).__name__)
        self.config = config
        d = config.d_model
        self.embedding = nn.Embedding(config.vocab_size, d)
        nn.init.normal_(self.embedding.weight, std=d**-0.5)  # × √d_model: entries of size ~1
        max_len = config.max_len if config.positions == "learned" else max(config.max_len, 4096)
        self.positions = make_positions(config.positions, d, max_len)
        self.blocks = nn.ModuleList(
            EncoderBlock(d, config.num_heads, config.d_ff) for _ in range(config.layers)
        )
        self.classifier = nn.Linear(d, config.vocab_size)

    def forward(self, ids: torch.Tensor, need_weights: bool = False):
        """``ids (B, L)`` -> ``logits (B, L, vocab)``; with ``need_weights``, also the list of
        each block's attention weights ``(B, h, L, L)``."""
        require_tensor(ids, "ids", ndim=2)
        require(not ids.is_floating_point(), "ids", "an integer tensor of token ids", ids.dtype)
        x = self.embedding(ids) * math.sqrt(self.config.d_model)  # (B, L) -> (B, L, d_model)
        x = self.positions(x)
        mask = padding_mask(ids, PAD_ID)  # (B, 1, 1, L)
        weights = []
        for block in self.blocks:
            x, w = block(x, mask, need_weights)
            weights.append(w)
        logits = self.classifier(x)  # (B, L, d_model) -> (B, L, vocab)
        return (logits, weights) if need_weights else logits


def train_probe(
    model: PositionProbe,
    examples: Sequence[Example],
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Adam on the cross-entropy of the labelled positions; returns the loss of every step.

    The learning rate warms up linearly over the first 10% of the steps, then decays
    linearly to zero. Runs on the device of the model's parameters.
    """
    steps = require_positive_int(steps, "steps")
    batch_size = require_positive_int(batch_size, "batch_size")
    require(isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0, "lr",
            "a positive number", repr(lr))
    require(len(examples) > 0, "examples", "a non-empty list of (tokens, labels) pairs", "[]")
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / (steps - warmup + 1)))
    )
    model.train()
    losses = []
    for _ in range(steps):
        picks = torch.randint(len(examples), (batch_size,), generator=generator).tolist()
        tokens = pad_sequences([examples[i][0] for i in picks], PAD_ID).to(device)  # (B, L)
        # (B, L), 0 = no answer
        labels = pad_sequences([examples[i][1] for i in picks], PAD_ID).to(device)
        logits = model(tokens)  # (B, L, vocab)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=NO_LABEL)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def accuracy_by_length(
    model: PositionProbe,
    lengths: Sequence[int],
    num_examples: int = 200,
    shift: int = 2,
    seed: int = 1,
) -> dict[int, float]:
    """Fraction of labelled positions predicted right, for fresh sequences of each length.

    ``{length: accuracy}``; ``num_examples`` sequences of exactly that length each, from
    :func:`make_shift_task` with ``seed`` and tokens drawn from the model's whole vocabulary
    (``config.vocab_size``). A learned table shorter than a length raises the positional
    layer's ``ValueError``.
    """
    require(len(lengths) > 0, "lengths", "a non-empty list of lengths", "[]")
    device = next(model.parameters()).device
    model.eval()
    result = {}
    for length in lengths:
        pairs = make_shift_task(num_examples, length, length, shift=shift,
                                vocab_size=model.config.vocab_size, seed=seed + length)
        tokens = torch.tensor([t for t, _ in pairs], device=device)  # (N, L)
        labels = torch.tensor([y for _, y in pairs], device=device)  # (N, L)
        predicted = model(tokens).argmax(-1)  # (N, L)
        scored = labels != NO_LABEL
        result[length] = float((predicted == labels)[scored].double().mean())
    return result

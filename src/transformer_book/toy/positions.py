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
the Transformer's own :class:`~transformer_book.nn.layers.EncoderLayer` (post-LN, no
dropout) with a classifier on top; its positional layer is any kind of
:data:`~transformer_book.nn.positional.POSITIONAL_ENCODINGS` (``"sinusoidal"``,
``"learned"``, ``"fourier"``, ``"none"``).

Labels use ``0`` (``<pad>``) for "no answer": the first ``shift`` positions and padding,
both ignored by the loss and by :func:`accuracy_by_length`.

Extrapolation is measured per *position* (:func:`accuracy_by_position`): the accuracy of a
length-``n`` sequence averages its short positions, which lie inside the training lengths,
with its long ones, and so flatters every model. :data:`EXTRAPOLATION` is chapter 08's
setting and :func:`train_extrapolation_probe` trains one model of it; the recording script
``scripts/record_extrapolation.py`` runs several seeds, the chapter one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from transformer_book.data.batching import pad_sequences
from transformer_book.data.tokenizer import PAD_ID
from transformer_book.data.toy import FIRST_TOKEN_ID, Example, require_examples
from transformer_book.nn.attention import padding_mask
from transformer_book.nn.layers import EncoderLayer
from transformer_book.nn.positional import positional_encoding, require_positional_kind
from transformer_book.toy.aligner import layer_config, require_widths
from transformer_book.toy.fit import fit, sample_examples, token_cross_entropy
from transformer_book.util.validation import (
    require,
    require_int,
    require_positive_int,
    require_tensor,
)

__all__ = [
    "EXTRAPOLATION",
    "NO_LABEL",
    "PositionProbe",
    "ProbeConfig",
    "accuracy_by_length",
    "accuracy_by_position",
    "make_shift_task",
    "train_extrapolation_probe",
    "train_probe",
]

#: The label of positions without an answer (the first ``shift`` ones and padding).
NO_LABEL = PAD_ID


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
    require_int(min_len, "min_len", minimum=shift + 1)
    require_int(max_len, "max_len", minimum=min_len)
    require_int(vocab_size, "vocab_size", minimum=FIRST_TOKEN_ID + 2)
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
        max_len: rows of a learned table (a table without parameters, a fixed function of
            the position, is computed for at least 4096 positions).
        positions: a kind of :data:`~transformer_book.nn.positional.POSITIONAL_ENCODINGS`.
    """

    vocab_size: int = 16
    d_model: int = 32
    num_heads: int = 4
    d_ff: int = 64
    layers: int = 1
    max_len: int = 64
    positions: str = "sinusoidal"

    def __post_init__(self) -> None:
        require_int(self.vocab_size, "vocab_size", minimum=FIRST_TOKEN_ID + 2)
        require_widths(self.d_model, self.d_ff, num_heads=self.num_heads)
        require_positive_int(self.layers, "layers")
        require_positive_int(self.max_len, "max_len")
        require_positional_kind(self.positions, "positions")


class PositionProbe(nn.Module):
    """Embedding (× √d_model, Section 3.4) + positions (Section 3.5) + encoder layers +
    a linear classifier: ``forward(ids (B, L)) -> logits (B, L, vocab)``.

    A learned table (``positions="learned"``) has ``max_len`` rows and longer inputs raise a
    ``BookError``; rows beyond the training lengths are never updated by training. A fixed
    one (no parameters) covers at least 4096 positions, so that extrapolation can be
    measured.
    """

    def __init__(self, config: ProbeConfig) -> None:
        super().__init__()
        require(isinstance(config, ProbeConfig), "config", "a ProbeConfig", type(config).__name__)
        self.config = config
        d = config.d_model
        self.embedding = nn.Embedding(config.vocab_size, d)
        nn.init.normal_(self.embedding.weight, std=d**-0.5)  # × √d_model: entries of size ~1
        self.positions = positional_encoding(config.positions, d, config.max_len)
        if next(self.positions.parameters(), None) is None:  # fixed: a function of position
            # built again, longer (a fixed table draws no random numbers: same initial model)
            self.positions = positional_encoding(config.positions, d, max(config.max_len, 4096))
        layers = layer_config(config.vocab_size, d, config.num_heads, config.d_ff)
        self.blocks = nn.ModuleList(EncoderLayer(layers) for _ in range(config.layers))
        self.classifier = nn.Linear(d, config.vocab_size)

    def forward(self, ids: torch.Tensor, need_weights: bool = False):
        """``ids (B, L)`` -> ``logits (B, L, vocab)``; with ``need_weights``, also the list of
        each encoder layer's attention weights ``(B, h, L, L)``."""
        require_tensor(ids, "ids", ndim=2)
        require(not ids.is_floating_point(), "ids", "an integer tensor of token ids", ids.dtype)
        x = self.embedding(ids) * math.sqrt(self.config.d_model)  # (B, L) -> (B, L, d_model)
        x = self.positions(x)
        mask = padding_mask(ids, PAD_ID)  # (B, 1, 1, L)
        weights = []
        for layer in self.blocks:
            x, w = layer(x, mask, need_weights=need_weights)
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
    """Adam (β₂ = 0.98) on the cross-entropy of the labelled positions, gradients clipped to
    norm 1; returns the loss of every step (:func:`~transformer_book.toy.fit.fit`).

    The learning rate warms up linearly over the first 10% of the steps, then decays
    linearly to zero. Runs on the device of the model's parameters.
    """
    require(isinstance(model, PositionProbe), "model", "a PositionProbe", type(model).__name__)
    require_examples(examples, model.config.vocab_size)
    batch_size = require_positive_int(batch_size, "batch_size")
    device = next(model.parameters()).device

    def batch_loss(generator: torch.Generator) -> torch.Tensor:
        batch = sample_examples(examples, batch_size, generator)
        tokens = pad_sequences([t for t, _ in batch], PAD_ID).to(device)  # (B, L)
        labels = pad_sequences([y for _, y in batch], PAD_ID).to(device)  # (B, L), 0 = none
        return token_cross_entropy(model(tokens), labels, NO_LABEL)  # logits (B, L, vocab)

    return fit(model, batch_loss, steps, lr, seed=seed, betas=(0.9, 0.98), clip_norm=1.0,
               warmup=True)


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
    layer's ``BookError``.
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


@torch.no_grad()
def accuracy_by_position(
    model: PositionProbe,
    length: int,
    num_examples: int = 200,
    shift: int = 2,
    seed: int = 1,
) -> torch.Tensor:
    """Accuracy at each position ``t`` of ``num_examples`` fresh sequences of ``length``
    tokens: ``(length,)`` float64, NaN at the first ``shift`` positions (no label).

    The sequences are :func:`make_shift_task`'s with ``seed + length``, the same ones
    :func:`accuracy_by_length` scores at that length, so the mean of the non-NaN entries is
    its accuracy for ``length``.
    """
    require_int(length, "length", minimum=shift + 1)
    device = next(model.parameters()).device
    model.eval()
    pairs = make_shift_task(num_examples, length, length, shift=shift,
                            vocab_size=model.config.vocab_size, seed=seed + length)
    tokens = torch.tensor([t for t, _ in pairs], device=device)  # (N, L)
    labels = torch.tensor([y for _, y in pairs], device=device)  # (N, L)
    right = (model(tokens).argmax(-1) == labels).double().mean(0).cpu()  # (N, L) -> (L,)
    right[:shift] = float("nan")
    return right


#: Chapter 08's extrapolation setting: train on lengths 3 to 16, test at every position of
#: sequences of 64 tokens.
EXTRAPOLATION: dict = {
    "shift": 2, "train_examples": 20000, "train_min_len": 3, "train_max_len": 16,
    "data_seed": 0, "vocab_size": 16, "d_model": 32, "num_heads": 1, "d_ff": 64, "layers": 1,
    "max_len": 64, "steps": 600, "batch_size": 64, "lr": 5e-3, "eval_length": 64,
    "eval_examples": 200,
}


def train_extrapolation_probe(positions: str, seed: int, examples: Sequence[Example],
                              device: torch.device | str = "cpu",
                              ) -> tuple[PositionProbe, list[float]]:
    """A :class:`PositionProbe` of :data:`EXTRAPOLATION`'s sizes with ``positions``, built
    after ``torch.manual_seed(seed)`` and trained on ``examples`` with batches from ``seed``;
    returns the model and its losses."""
    e = EXTRAPOLATION
    config = ProbeConfig(vocab_size=e["vocab_size"], d_model=e["d_model"],
                         num_heads=e["num_heads"], d_ff=e["d_ff"], layers=e["layers"],
                         max_len=e["max_len"], positions=positions)
    torch.manual_seed(seed)
    model = PositionProbe(config).to(device)
    losses = train_probe(model, examples, steps=e["steps"], batch_size=e["batch_size"],
                         lr=e["lr"], seed=seed)
    return model, losses

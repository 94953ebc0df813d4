"""A one-layer attention model for a task that needs two relationships at once (chapter 06).

Section 3.2.2: "Multi-head attention allows the model to jointly attend to information from
different representation subspaces at different positions. With a single attention head,
averaging inhibits this."

The *neighbour task*: for every position of a random token sequence, predict two tokens,
the one just before it and the one just after it. Each output needs its own relationship
(look one step left, look one step right), and both retrieve the same kind of content, a
token, so one softmax that attends to both neighbours returns their average and loses which
was which. :class:`NeighbourModel` is as small as possible so that its heads can be read:
token embeddings plus sinusoidal positions (:mod:`transformer_book.nn.positional`), one
:class:`~transformer_book.nn.attention.MultiHeadAttention` layer, and a *linear* readout with
two outputs per position (previous token, next token).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from transformer_book.nn.attention import MultiHeadAttention
from transformer_book.nn.positional import SinusoidalPositionalEncoding
from transformer_book.toy.fit import fit, token_cross_entropy
from transformer_book.util.validation import (
    require,
    require_int,
    require_positive_int,
    require_tensor,
)

__all__ = [
    "IGNORE",
    "RELATIONS",
    "NeighbourModel",
    "attention_by_offset",
    "neighbour_accuracy",
    "neighbour_seed_run",
    "neighbour_task",
    "train_neighbour_model",
]

#: Target id of outputs that do not exist (no token before the first, none after the last);
#: ``F.cross_entropy(..., ignore_index=IGNORE)`` and :func:`neighbour_accuracy` skip them.
IGNORE = -100
#: The two outputs per position, in the order of the targets' last dimension.
RELATIONS: tuple[str, str] = ("previous token", "next token")
#: Chapter 06's experiment: the model's sizes, its training and its held-out test set.
NEIGHBOUR_SETUP = {"vocab_size": 16, "length": 12, "d_model": 32, "steps": 400,
                   "batch_size": 64, "lr": 1e-2, "test_size": 2000, "test_seed": 123}


def neighbour_task(
    batch_size: int,
    length: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of the neighbour task.

    Returns ``tokens (B, L)``, uniform random ids in ``[0, vocab_size)``, and ``targets
    (B, L, 2)``: ``targets[b, i, 0] = tokens[b, i - 1]`` (the previous token) and
    ``targets[b, i, 1] = tokens[b, i + 1]`` (the next token), with :data:`IGNORE` where that
    neighbour does not exist. ``generator`` (on the CPU) makes the batch reproducible.
    """
    require_positive_int(batch_size, "batch_size")
    require_int(length, "length", minimum=2)
    require_int(vocab_size, "vocab_size", minimum=2)
    tokens = torch.randint(0, vocab_size, (batch_size, length), generator=generator)
    previous = torch.full_like(tokens, IGNORE)
    following = torch.full_like(tokens, IGNORE)
    previous[:, 1:] = tokens[:, :-1]  # position i gets token i - 1
    following[:, :-1] = tokens[:, 1:]  # position i gets token i + 1
    targets = torch.stack((previous, following), dim=-1)  # 2 x (B, L) -> (B, L, 2)
    return tokens.to(device), targets.to(device)


class NeighbourModel(nn.Module):
    """Embeddings + sinusoidal positions -> one multi-head self-attention -> linear readout.

    ``forward(tokens (B, L), need_weights=False)`` returns ``logits (B, L, 2, vocab_size)``
    (index 0 of the third dimension predicts the previous token, 1 the next token, as in
    :data:`RELATIONS`) and the attention ``weights (B, h, L, L)`` when ``need_weights``, else
    None. There is no residual connection, no feed-forward network and no nonlinearity after
    the attention, so everything the readout knows has come through the heads. ``forward``
    checks shapes and dtypes only; :func:`neighbour_accuracy` checks the ids it is given.
    """

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, max_len: int = 64) -> None:
        super().__init__()
        self.vocab_size = require_int(vocab_size, "vocab_size", minimum=2)
        self.d_model = require_positive_int(d_model, "d_model")
        self.num_heads = require_positive_int(num_heads, "num_heads")
        require(d_model % num_heads == 0, "num_heads", f"a divisor of d_model={d_model}",
                num_heads)
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.positions = SinusoidalPositionalEncoding(d_model, max_len=max_len)
        self.attention = MultiHeadAttention(d_model, num_heads)
        self.readout = nn.Linear(d_model, 2 * vocab_size)

    def forward(
        self, tokens: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        require_tensor(tokens, "tokens", ndim=2)
        require(not tokens.is_floating_point(), "tokens", "an integer tensor of token ids",
                tokens.dtype)
        x = self.positions(self.embedding(tokens))  # (B, L) -> (B, L, d_model)
        out, weights = self.attention(x, x, x, need_weights=need_weights)  # (B, L, d_model)
        logits = self.readout(out)  # (B, L, 2·vocab)
        # (B, L, 2·vocab) -> (B, L, 2, vocab): one distribution per relation
        return logits.view(*tokens.shape, 2, self.vocab_size), weights


def train_neighbour_model(
    model: NeighbourModel,
    *,
    steps: int,
    batch_size: int = 64,
    length: int = 12,
    lr: float = 1e-2,
    seed: int = 0,
) -> list[float]:
    """Train ``model`` with Adam on fresh batches of :func:`neighbour_task`; return the loss
    of every step (:func:`~transformer_book.toy.fit.fit`).

    Batches come from a generator seeded with ``seed``, on the model's device; the loss is
    the cross-entropy of both outputs, averaged over the positions where they exist.
    """
    require(isinstance(model, NeighbourModel), "model", "a NeighbourModel", type(model).__name__)
    require_positive_int(batch_size, "batch_size")
    require_int(length, "length", minimum=2)
    device = next(model.parameters()).device

    def batch_loss(generator: torch.Generator) -> torch.Tensor:
        tokens, targets = neighbour_task(batch_size, length, model.vocab_size, generator, device)
        logits, _ = model(tokens)  # (B, L, 2, V) against targets (B, L, 2), edges ignored
        return token_cross_entropy(logits, targets, IGNORE)

    return fit(model, batch_loss, steps, lr, seed=seed)


@torch.no_grad()
def neighbour_accuracy(model: NeighbourModel, tokens: torch.Tensor,
                       targets: torch.Tensor) -> torch.Tensor:
    """Accuracy of each output over the positions where it exists: ``(2,)``, in the order of
    :data:`RELATIONS` (previous token, next token).

    ``tokens (B, L)`` and ``targets (B, L, 2)`` as returned by :func:`neighbour_task`.
    """
    require(isinstance(model, NeighbourModel), "model", "a NeighbourModel", type(model).__name__)
    require_tensor(targets, "targets", ndim=3)
    require(targets.shape == (*tokens.shape, 2), "targets",
            f"shape {(*tokens.shape, 2)} (tokens' shape, then 2)", f"shape {tuple(targets.shape)}")
    require_tensor(tokens, "tokens", ndim=2)
    low, high = (int(i) for i in torch.aminmax(tokens))
    require(low >= 0 and high < model.vocab_size, "tokens", f"ids in [0, {model.vocab_size})",
            f"ids from {low} to {high}")
    logits, _ = model(tokens)
    exists = targets != IGNORE  # (B, L, 2)
    correct = (logits.argmax(dim=-1) == targets) & exists  # (B, L, 2)
    return correct.sum(dim=(0, 1)).double() / exists.sum(dim=(0, 1)).double()


def attention_by_offset(weights: torch.Tensor, offsets: Sequence[int]) -> torch.Tensor:
    """How much each head attends at each relative position: ``(h, len(offsets))``.

    Entry ``[head, j]`` is the mean, over the batch and over the queries ``i`` for which
    ``i + offsets[j]`` is a position, of ``weights[:, head, i, i + offsets[j]]``. For
    ``offsets = (-1, 0, 1)`` it says how much weight a head gives the previous token, the
    token itself and the next token. ``weights`` is ``(B, h, L, L)``.
    """
    require_tensor(weights, "weights", ndim=4, floating=True)
    length = weights.shape[-1]
    require(weights.shape[-2] == length, "weights", "shape (B, h, L, L) (self-attention)",
            f"shape {tuple(weights.shape)}")
    offsets = list(offsets)
    require(len(offsets) > 0, "offsets", f"a non-empty list of offsets (|offset| < L={length})",
            offsets)
    for offset in offsets:
        require_int(offset, "offsets", minimum=1 - length, maximum=length - 1)
    columns = []
    for offset in offsets:
        # the diagonal weights[..., i, i + offset]: (B, h, L - |offset|) -> mean -> (h,)
        columns.append(weights.diagonal(offset=offset, dim1=-2, dim2=-1).mean(dim=(0, 2)))
    return torch.stack(columns, dim=-1)  # (h, len(offsets))


def neighbour_seed_run(num_heads: int, seed: int, device: torch.device | str | None = None
                       ) -> dict[str, object]:
    """One seed of chapter 06's experiment (:data:`NEIGHBOUR_SETUP`) with ``num_heads`` heads.

    The model's weights come from ``torch.manual_seed(seed)`` and its batches from
    ``seed + 1`` (seed 0 is the chapter's live run); it is scored on the fixed test set
    (``test_seed``). Returns ``{"heads", "seed", "accuracy": [previous, next],
    "final_loss": mean of the last 20 steps, "by_offset": (h, 3) weights at offsets -1, 0,
    +1 as nested lists}`` (:func:`neighbour_accuracy`, :func:`attention_by_offset`).
    """
    require_positive_int(num_heads, "num_heads")
    require_int(seed, "seed", minimum=0)
    setup = NEIGHBOUR_SETUP
    torch.manual_seed(seed)
    model = NeighbourModel(setup["vocab_size"], setup["d_model"], num_heads).to(device)
    losses = train_neighbour_model(model, steps=setup["steps"], batch_size=setup["batch_size"],
                                   length=setup["length"], lr=setup["lr"], seed=seed + 1)
    tokens, targets = neighbour_task(setup["test_size"], setup["length"], setup["vocab_size"],
                                     torch.Generator().manual_seed(setup["test_seed"]), device)
    accuracy = neighbour_accuracy(model, tokens, targets)
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)  # (N, h, L, L)
    return {"heads": num_heads, "seed": seed, "accuracy": accuracy.tolist(),
            "final_loss": sum(losses[-20:]) / 20,
            "by_offset": attention_by_offset(weights, (-1, 0, 1)).cpu().tolist()}

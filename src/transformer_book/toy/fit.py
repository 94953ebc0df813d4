"""One training loop for every toy model of Parts I and II: sample a batch, compute the
cross-entropy, take an Adam step (Kingma and Ba, 2015; Section 5.3 of the paper trains the
Transformer with Adam too).

:func:`fit` is the loop; a model's training function only says how one batch's loss is
computed. :func:`fit_teacher_forced` is that batch for an encoder-decoder
``model(src (B, S), tgt_in (B, T)) -> logits (B, T, V)`` on ``(source, target)`` id lists:
the decoder reads ``<bos> y`` and predicts ``y <eos>`` (Section 3.1: it is
"auto-regressive, consuming the previously generated symbols as additional input").

The toy models built from :mod:`transformer_book.nn` keep their training function beside
them (:func:`~transformer_book.toy.aligner.train_aligner`,
:func:`~transformer_book.toy.heads.train_neighbour_model`,
:func:`~transformer_book.toy.positions.train_probe`). The baselines sit on a lower floor and
cannot import this one, so their training functions on the toy tasks live here:
:func:`train_seq2seq` (chapters 02 and 04) and :func:`train_memory_network` (chapter 04).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.baselines.memory_network import MemoryNetwork
from transformer_book.baselines.seq2seq import Seq2SeqGRU
from transformer_book.data.batching import pad_sequences
from transformer_book.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_book.data.toy import Example, StoryTensors, require_examples
from transformer_book.util.validation import (
    require,
    require_int,
    require_positive_int,
    require_positive_number,
)

__all__ = [
    "fit",
    "fit_teacher_forced",
    "sample_examples",
    "token_cross_entropy",
    "train_memory_network",
    "train_seq2seq",
    "warmup_then_decay",
]

BatchLoss = Callable[[torch.Generator], torch.Tensor]


def warmup_then_decay(steps: int) -> Callable[[int], float]:
    """The learning-rate factor of step ``s`` (0-based): a linear warm-up over the first 10%
    of ``steps``, then a linear decay to zero (the toy cousin of Section 5.3's schedule)."""
    warmup = max(1, steps // 10)
    return lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / (steps - warmup + 1)))


def fit(
    model: nn.Module,
    batch_loss: BatchLoss,
    steps: int,
    lr: float,
    *,
    seed: int = 0,
    betas: tuple[float, float] = (0.9, 0.999),
    clip_norm: float | None = None,
    warmup: bool = False,
    on_step: Callable[[int], None] | None = None,
) -> list[float]:
    """Train ``model`` for ``steps`` Adam steps; return the loss of every step.

    Each step calls ``batch_loss(generator)``, which draws its batch from ``generator`` (a
    CPU ``torch.Generator`` seeded with ``seed``, so a seed fixes the batches) and returns the
    scalar loss. Gradients are clipped to norm ``clip_norm`` when it is given; ``warmup``
    scales the learning rate by :func:`warmup_then_decay`; ``on_step(n)``, when given, is
    called after the n-th update (chapter 02 scores one run after 300 and 3,000 steps with
    it). The model is in training mode
    during the loop and in evaluation mode after it. Reading each loss back is the loop's one
    host-device synchronisation per step.
    """
    steps = require_positive_int(steps, "steps")
    lr = require_positive_number(lr, "lr")
    require_int(seed, "seed", minimum=0)
    if clip_norm is not None:
        clip_norm = require_positive_number(clip_norm, "clip_norm")
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=betas)
    schedule = (torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_decay(steps))
                if warmup else None)
    model.train()
    losses = []
    for _ in range(steps):
        loss = batch_loss(generator)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        optimizer.step()
        if schedule is not None:
            schedule.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(len(losses))
    model.eval()
    return losses


def sample_examples(examples: Sequence[Example], batch_size: int,
                    generator: torch.Generator) -> list[Example]:
    """``batch_size`` examples drawn uniformly with replacement, by ``generator``."""
    picks = torch.randint(len(examples), (batch_size,), generator=generator).tolist()
    return [examples[i] for i in picks]


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor,
                        ignore_index: int) -> torch.Tensor:
    """Mean cross-entropy of ``logits (..., V)`` against ``targets (...)``, positions whose
    target is ``ignore_index`` left out."""
    # (..., V) -> (N, V) against (...) -> (N,): one row per position
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=ignore_index)


def fit_teacher_forced(
    model: nn.Module,
    examples: Sequence[Example],
    steps: int,
    batch_size: int,
    lr: float,
    *,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    **options,
) -> list[float]:
    """:func:`fit` an encoder-decoder ``model(src (B, S), tgt_in (B, T)) -> logits (B, T, V)``
    on ``(source, target)`` id lists with teacher forcing.

    Each step samples ``batch_size`` pairs (:func:`sample_examples`), feeds ``<bos> y`` to
    the decoder and minimises the cross-entropy of ``y <eos>`` over the non-pad positions;
    batches go to the device of the model's parameters. ``options`` are :func:`fit`'s.
    """
    require_examples(examples)
    batch_size = require_positive_int(batch_size, "batch_size")
    device = next(model.parameters()).device

    def batch_loss(generator: torch.Generator) -> torch.Tensor:
        batch = sample_examples(examples, batch_size, generator)
        src = pad_sequences([s for s, _ in batch], pad_id).to(device)  # (B, S)
        tgt_in = pad_sequences([[bos_id, *t] for _, t in batch], pad_id).to(device)  # (B, T)
        tgt_out = pad_sequences([[*t, eos_id] for _, t in batch], pad_id).to(device)  # (B, T)
        return token_cross_entropy(model(src, tgt_in), tgt_out, pad_id)  # logits (B, T, V)

    return fit(model, batch_loss, steps, lr, **options)


def train_seq2seq(model: Seq2SeqGRU, examples: Sequence[Example], steps: int, batch_size: int,
                  lr: float = 3e-3, seed: int = 0, bos_id: int = BOS_ID,
                  eos_id: int = EOS_ID, clip_norm: float = 1.0,
                  on_step: Callable[[int], None] | None = None) -> list[float]:
    """Train a :class:`~transformer_book.baselines.seq2seq.Seq2SeqGRU` with Adam and teacher
    forcing (:func:`fit_teacher_forced`); return the loss of every step.

    Gradients are clipped to ``clip_norm`` (Bahdanau et al., 2015, Appendix A.2.2 rescale
    gradients too). ``on_step`` is :func:`fit`'s. Runs on the device of the model's
    parameters.
    """
    require(isinstance(model, Seq2SeqGRU), "model", "a Seq2SeqGRU", type(model).__name__)
    require_examples(examples, model.vocab_size)
    return fit_teacher_forced(model, examples, steps, batch_size, lr, pad_id=model.pad_id,
                              bos_id=bos_id, eos_id=eos_id, seed=seed, clip_norm=clip_norm,
                              on_step=on_step)


def train_memory_network(network: MemoryNetwork, data: StoryTensors, steps: int,
                         batch_size: int = 64, lr: float = 1e-2, seed: int = 0,
                         clip_norm: float = 40.0) -> list[float]:
    """Train a :class:`~transformer_book.baselines.memory_network.MemoryNetwork` on encoded
    stories with Adam; return the loss of every step.

    Each step draws ``batch_size`` stories of ``data`` with replacement and minimises the
    cross-entropy of the answer word, ``logits (B, vocab)`` against ``answer (B,)``.
    Gradients are clipped to norm ``clip_norm``, 40 as in Sukhbaatar et al. (2015), Section
    4.2. Every id is checked once, before training (the network's ``forward`` does not).
    """
    require(isinstance(network, MemoryNetwork), "network", "a MemoryNetwork",
            type(network).__name__)
    require(isinstance(data, StoryTensors), "data", "a StoryTensors", type(data).__name__)
    batch_size = require_positive_int(batch_size, "batch_size")
    ids = torch.cat([data.memory.flatten(), data.question.flatten(), data.answer])
    low, high = (int(i) for i in torch.aminmax(ids))  # once, before training
    require(low >= 0 and high < network.vocab_size, "data", f"ids in [0, {network.vocab_size})",
            f"ids in [{low}, {high}]")
    device = next(network.parameters()).device
    count = data.answer.shape[0]

    def batch_loss(generator: torch.Generator) -> torch.Tensor:
        batch = torch.randint(count, (batch_size,), generator=generator)  # (B,) story indices
        logits, _ = network(data.memory[batch].to(device), data.question[batch].to(device))
        return F.cross_entropy(logits, data.answer[batch].to(device))  # (B, vocab) vs (B,)

    return fit(network, batch_loss, steps, lr, seed=seed, clip_norm=clip_norm)

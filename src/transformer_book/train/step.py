"""One optimizer step: Sections 5.3 and 5.4 of *Attention Is All You Need* (Vaswani et al., 2017).

Section 5.3: "We used the Adam optimizer ... We varied the learning rate over the course of
training" (eq. 3). Section 5.4: "During training, we employed label smoothing of value
ε_ls = 0.1".

:func:`train_step` is the one training step of the package: the training loop
(:mod:`transformer_book.train.loop`), the ablations (:mod:`transformer_book.analysis.ablation`)
and, through the loop, the course's cached chapter-10 model all call it. It reads the device
once per optimizer step (the loss, for the non-finite check and the log together); the token
counts that normalise the loss come from the id lists, on the host.

In fp16 the ``GradScaler`` skips the update of a step whose scaled gradients overflowed
(and halves its scale). Such a step is no optimizer step: ``Trainer.step`` and eq. 3's
schedule count updates only, so the learning rate always belongs to the step number, and
the skipped ones are counted apart (``Trainer.skipped_steps``).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from transformer_book.data.tokenizer import PAD_ID
from transformer_book.nn.transformer import Transformer
from transformer_book.train.corpus import StepBatch
from transformer_book.train.fused_loss import fused_label_smoothed_loss
from transformer_book.train.objective import label_smoothed_cross_entropy
from transformer_book.train.runtime import DistInfo, all_reduce, autocast, optimizer_step
from transformer_book.util.validation import require, require_bool

__all__ = ["NonFiniteLossError", "StepResult", "Trainer", "train_step"]

# The smallest fp16 loss scale training goes on with: below 1 the scaled gradients are
# smaller than the true ones and still overflow fp16, so skipping on would make no update.
_MIN_LOSS_SCALE = 1.0


class NonFiniteLossError(RuntimeError):
    """The training loss (or the weights) became NaN or infinite; the message says where and
    what to try. ``step`` is the optimizer step that broke (``None`` when unknown).

    Not a :class:`~transformer_book.util.validation.BookError`: nothing the caller passed
    was wrong, the run diverged (the CLI exits with status 1, not 2)."""

    def __init__(self, message: str, step: int | None = None) -> None:
        super().__init__(message)
        self.step = step


@dataclass
class Trainer:
    """What an optimizer step needs, and where the steps stand.

    ``model`` is the module called on the batches (the ``DistributedDataParallel`` wrapper
    under several processes); ``optimizer`` and ``scheduler`` come from
    :func:`~transformer_book.train.objective.make_optimizer` (Adam and eq. 3, Section 5.3);
    ``label_smoothing`` is ε_ls (Section 5.4); ``precision`` is "fp32", "bf16" or "fp16"
    (autocast; fp16 needs ``scaler``, a ``GradScaler``); ``clip_norm`` clips the gradient
    norm (not in the paper; ``None``: no clipping). ``step`` counts the optimizer updates
    made (the schedule has advanced as many times), ``last_finite`` is ``(step, loss)`` of
    the latest one, for the diagnostic of a loss that breaks, and ``skipped_steps`` counts
    the steps whose update the fp16 scaler skipped (overflowed gradients), none of them in
    ``step``. ``fused_loss`` takes the loss's fast path
    (:func:`~transformer_book.train.fused_loss.fused_label_smoothed_loss`: the generator and
    the loss in one pass, proven equal to the plain path); one process only.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    label_smoothing: float
    precision: str = "fp32"
    clip_norm: float | None = None
    scaler: torch.amp.GradScaler | None = None
    info: DistInfo = field(default_factory=DistInfo)
    step: int = 0
    last_finite: tuple[int, float] | None = None
    skipped_steps: int = 0
    fused_loss: bool = False

    def __post_init__(self) -> None:
        require_bool(self.fused_loss, "fused_loss")
        require(not (self.fused_loss and self.info.enabled), "fused_loss",
                "False under several processes (DistributedDataParallel calls forward)", True)


@dataclass(frozen=True)
class StepResult:
    """One optimizer step: its number, the label-smoothed loss per target token, the
    learning rate it was taken with and the source + target tokens of every process.
    ``updated`` is ``False`` for a step the fp16 scaler skipped: then no update was made,
    ``step`` is the number of the last update (unchanged) and ``lr`` the rate the update
    would have used (the next step's)."""

    step: int
    loss: float
    lr: float
    tokens: int
    updated: bool = True


def train_step(trainer: Trainer, batch: StepBatch) -> StepResult:
    """Take one optimizer step on ``batch`` (this process's micro-batches) and return it.

    Each micro-batch ``(src (B, S), tgt_in (B, T), tgt_out (B, T))`` is run forward under
    autocast; its summed label-smoothed loss (Section 5.4) times K / (target tokens of the
    step over all K processes and micro-batches) is backpropagated, so the gradient is the
    per-target-token mean over the whole step (gradient accumulation; under DDP only the
    last micro-batch all-reduces, and DDP's averaging over K is undone by the factor K).
    Then the gradient norm is clipped, Adam steps (through the ``GradScaler`` in fp16) and
    so does eq. 3's schedule (Section 5.3), and ``trainer.step`` counts the update. A step
    the scaler skips changes neither the weights, the schedule nor ``trainer.step``; it is
    counted in ``trainer.skipped_steps`` and returned with ``updated=False``.

    The loss is read from the device once, here; if it is NaN or infinite the gradients are
    dropped, nothing is updated and :class:`NonFiniteLossError` says where it happened. So
    it is when the scaler has backed its scale off below 1: the gradients overflow fp16
    even unscaled, and skipping on would make no update.
    """
    lr = trainer.optimizer.param_groups[0]["lr"]
    counts, scale = _global_counts(trainer, batch)
    loss_sum = _accumulate_gradients(trainer, batch, scale)
    if counts is None:  # one process: the counts are this batch's
        loss, target_tokens = float(loss_sum), batch.target_tokens  # the one synchronisation
        tokens = batch.target_tokens + batch.source_tokens
    else:  # (1,) loss summed over the processes, with the (2,) global counts: one read
        total = torch.cat([all_reduce(loss_sum.reshape(1), trainer.info), counts])  # (3,)
        loss, target_tokens, source_tokens = total.tolist()  # the one synchronisation
        tokens = int(target_tokens + source_tokens)
    value = loss / target_tokens  # per target token
    if not math.isfinite(value):
        trainer.optimizer.zero_grad(set_to_none=True)
        raise NonFiniteLossError(_nonfinite_message(trainer, value, lr, batch),
                                 step=trainer.step + 1)
    skipped = trainer.skipped_steps
    _update(trainer)
    if trainer.skipped_steps > skipped:
        _require_useful_scale(trainer, value, lr)
        return StepResult(step=trainer.step, loss=value, lr=lr, tokens=tokens, updated=False)
    trainer.step += 1
    trainer.last_finite = (trainer.step, value)
    return StepResult(step=trainer.step, loss=value, lr=lr, tokens=tokens)


def _global_counts(trainer: Trainer, batch: StepBatch) -> tuple[torch.Tensor | None, Any]:
    """The step's ``(target, source)`` token counts over all processes and the factor
    K / (global target tokens) that turns summed losses into the per-token mean.

    On one process the counts are known on the host (``None`` is returned for them) and
    the factor is a Python float. Under DDP the counts are summed on the device, a ``(2,)``
    tensor read together with the loss, and the factor is a 0-d tensor."""
    if not trainer.info.enabled:
        return None, 1.0 / batch.target_tokens
    local = [float(batch.target_tokens), float(batch.source_tokens)]
    counts = all_reduce(torch.tensor(local, device=batch.micro[0][0].device), trainer.info)
    return counts, trainer.info.world_size / counts[0]  # DDP averages gradients: x K


def _accumulate_gradients(trainer: Trainer, batch: StepBatch, scale: Any) -> torch.Tensor:
    """Forward and backward over the step's micro-batches; returns this process's summed
    label-smoothed loss, a 0-d tensor (no synchronisation)."""
    model, info, scaler = trainer.model, trainer.info, trainer.scaler
    device = batch.micro[0][0].device
    loss_sum = torch.zeros((), device=device)
    for j, (src, tgt_in, tgt_out) in enumerate(batch.micro):
        sync: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if info.enabled and j < len(batch.micro) - 1:
            assert isinstance(model, nn.parallel.DistributedDataParallel), \
                "several processes train the DistributedDataParallel wrapper"
            sync = model.no_sync()  # accumulate locally; all-reduce on the last one
        with sync:
            if trainer.fused_loss:  # the fast path: no (B, T, V) logits
                assert isinstance(model, Transformer), "one process: the model itself"
                with autocast(trainer.precision, device):
                    loss = fused_label_smoothed_loss(model.hidden(src, tgt_in), model.generator,
                                                     tgt_out, trainer.label_smoothing, PAD_ID)
            else:
                with autocast(trainer.precision, device):
                    logits = model(src, tgt_in)  # (B, S), (B, T) -> (B, T, V)
                # The ids were checked once, when the corpus was prepared: no check here.
                # The loss from float32 logits at least (bf16 cast up, float64 kept).
                logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
                loss = label_smoothed_cross_entropy(logits, tgt_out,
                                                    trainer.label_smoothing, PAD_ID,
                                                    reduction="sum", check=False)
            scaled = loss * scale
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_sum = loss_sum + loss.detach()
    return loss_sum


def _update(trainer: Trainer) -> None:
    """Unscale (fp16), clip the gradient norm, step Adam and the learning-rate schedule,
    clear the gradients; a step the fp16 scaler skipped (no update, so no step of the
    schedule either) is counted in ``trainer.skipped_steps``."""
    optimizer, scaler = trainer.optimizer, trainer.scaler
    if scaler is not None:
        scaler.unscale_(optimizer)
    if trainer.clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), trainer.clip_norm)
    if optimizer_step(optimizer, scaler):
        trainer.scheduler.step()
    else:  # fp16: a step the scaler skipped is no update, and eq. 3 counts updates
        trainer.skipped_steps += 1
    optimizer.zero_grad(set_to_none=True)


def _require_useful_scale(trainer: Trainer, value: float, lr: float) -> None:
    """After a skipped step: raise :class:`NonFiniteLossError` if the scaler's scale fell
    below 1 (the gradients overflow fp16 even unscaled: no update would be made)."""
    assert trainer.scaler is not None, "only the fp16 scaler skips steps"
    scale = trainer.scaler.get_scale()
    if scale >= _MIN_LOSS_SCALE:
        return
    raise NonFiniteLossError(
        f"fp16 gradients: expected finite gradients at a loss scale >= {_MIN_LOSS_SCALE:g}, "
        f"received inf/NaN at step {trainer.step + 1} (loss {value:.4f}, lr {lr:.3e}) until "
        f"the scale fell to {scale:.3g}; {trainer.skipped_steps} step(s) skipped in all. Try "
        "precision = \"bf16\" or \"fp32\", a lower learning rate ([train] lr_factor or a "
        "longer warmup_steps) or gradient clipping ([train] clip_norm).",
        step=trainer.step + 1)


def _nonfinite_message(trainer: Trainer, value: float, lr: float, batch: StepBatch) -> str:
    shapes = ", ".join(f"src {tuple(s.shape)} tgt {tuple(o.shape)}" for s, _, o in batch.micro)
    last = trainer.last_finite
    seen = (f"the last finite loss was {last[1]:.4f} at step {last[0]}" if last
            else "no finite loss was seen yet")
    return (f"training loss became {value} at step {trainer.step + 1} (lr {lr:.3e}, batch "
            f"shapes {shapes}); {seen}. Try a lower learning rate ([train] lr_factor or a "
            "longer warmup_steps), gradient clipping ([train] clip_norm), precision = "
            "\"fp32\", and check the data for empty or overlong sentences.")

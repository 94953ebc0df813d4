"""What training minimises and how fast: label-smoothed cross-entropy and the Noam schedule.

Section 5.4 (Label Smoothing): "During training, we employed label smoothing of value
ε_ls = 0.1 [Szegedy et al., 2016]. This hurts perplexity, as the model learns to be more
unsure, but improves accuracy and BLEU score."

Section 5.3 (Optimizer): "We used the Adam optimizer with β1 = 0.9, β2 = 0.98 and ε = 10^-9.
We varied the learning rate over the course of training, according to the formula
lrate = d_model^-0.5 · min(step_num^-0.5, step_num · warmup_steps^-1.5)" (eq. 3).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.util.validation import (
    bad_input,
    require,
    require_bool,
    require_int,
    require_number,
    require_one_of,
    require_positive_int,
    require_positive_number,
    require_tensor,
)

REDUCTIONS = ("mean", "sum", "none")
ADAM_BETAS = (0.9, 0.98)  # Section 5.3
# Adam's first step is lr / (1 - β1) in the parameters' float32: a larger rate cannot be
# represented (torch raises "value cannot be converted to type float without overflow").
MAX_LR = torch.finfo(torch.float32).max * (1.0 - ADAM_BETAS[0])


def _flatten(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Check and flatten ``(B, T, V)``/``(B, T)`` or ``(N, V)``/``(N,)`` to ``(N, V)``/``(N,)``."""
    require_tensor(logits, "logits", ndim=(2, 3), floating=True)
    require_tensor(targets, "targets", ndim=(1, 2), dtype=(torch.int64, torch.int32))
    require(targets.shape == logits.shape[:-1], "targets",
            f"shape {tuple(logits.shape[:-1])} (logits' shape without the vocabulary)",
            f"shape {tuple(targets.shape)}")
    vocab = logits.shape[-1]
    # (B, T, V) -> (N, V) with N = B·T;  (B, T) -> (N,)
    return logits.reshape(-1, vocab), targets.reshape(-1).long()


def label_smoothed_cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    smoothing: float = 0.1,
    ignore_index: int = 0,
    reduction: str = "mean",
    *,
    check: bool = True,
) -> torch.Tensor:
    """Cross-entropy against a smoothed target distribution, padding ignored (Section 5.4).

    Each target row puts 1 - ε on the true token and spreads ε uniformly over all V
    classes (ε/V each, the true token included -- PyTorch's convention), so per token

        loss = (1 - ε) · (-log p[y]) + ε · mean_v(-log p[v]).

    This equals ``F.cross_entropy(logits, targets, label_smoothing=ε, ignore_index=pad)``.

    Args:
        logits: ``(B, T, V)`` or ``(N, V)`` unnormalised scores.
        targets: ``(B, T)`` or ``(N,)`` token ids; positions equal to ``ignore_index``
            (the padding id) contribute nothing.
        smoothing: ε_ls in [0, 1]; the paper uses 0.1.
        ignore_index: the id to ignore, normally ``config.pad_id``.
        reduction: "mean" (over non-pad tokens), "sum" (divide by
            :func:`count_tokens` yourself, e.g. across accumulation steps or DDP ranks),
            or "none" (per-token losses with the targets' shape, 0 at padding).
        check: check the target values (ids in ``[0, V)`` outside padding; for "mean", at
            least one token to average over). This reads them back from the device (one
            synchronisation), so the training step, whose corpus was checked once when it
            was prepared, passes ``False``; shapes and dtypes are always checked.

    Returns:
        A scalar for "mean"/"sum"; a tensor shaped like ``targets`` for "none".
        The loss is computed in at least float32 even for half-precision logits.
    """
    flat_logits, flat_targets = _flatten(logits, targets)
    smoothing = require_number(smoothing, "smoothing", minimum=0.0, maximum=1.0)
    require_one_of(reduction, "reduction", REDUCTIONS)
    keep = flat_targets != ignore_index  # (N,)
    if require_bool(check, "check"):
        _check_targets(flat_targets, keep, flat_logits.shape[-1], ignore_index, reduction)

    compute_dtype = torch.promote_types(flat_logits.dtype, torch.float32)
    # The one (N, V) tensor built: no smoothed target rows, both terms read from log_probs.
    # Written with logsumexp instead (lse - (1 - ε)·x[y] - ε·mean_v x[v]), the forward
    # keeps no (N, V) tensor for the backward, but on the CPU it runs slower than this
    # form, forward and backward; tests/test_objective.py checks the two forms agree.
    log_probs = F.log_softmax(flat_logits.to(compute_dtype), dim=-1)  # (N, V)
    safe_targets = flat_targets.masked_fill(~keep, 0)  # (N,) padding -> any valid id
    nll = -log_probs.gather(-1, safe_targets.unsqueeze(-1)).squeeze(-1)  # (N, V) -> (N,)
    uniform = -log_probs.mean(dim=-1)  # (N,): cross-entropy against ε/V on every class
    per_token = ((1.0 - smoothing) * nll + smoothing * uniform) * keep  # (N,)

    if reduction == "none":
        return per_token.reshape(targets.shape)  # (N,) -> (B, T) or (N,)
    total = per_token.sum()
    if reduction == "sum":
        return total
    return total / keep.sum()


def _check_targets(flat_targets: torch.Tensor, keep: torch.Tensor, vocab: int,
                   ignore_index: int, reduction: str) -> None:
    """Refuse ids outside ``[0, vocab)`` (padding aside) and, for "mean", only padding."""
    out_of_range = keep & ((flat_targets < 0) | (flat_targets >= vocab))  # (N,)
    # One host-device sync for both checks.
    any_bad, any_kept = torch.stack([out_of_range.any(), keep.any()]).tolist()
    if any_bad:
        kept = flat_targets[keep]
        raise bad_input("targets", f"ids in [0, {vocab}) outside padding",
                   f"ids from {int(kept.min())} to {int(kept.max())}")
    if reduction == "mean" and not any_kept:
        raise bad_input("targets", f"at least one token other than ignore_index={ignore_index}",
                   "only padding")


def count_tokens(targets: torch.Tensor, ignore_index: int = 0) -> torch.Tensor:
    """Number of non-padding targets, ``(B, T)`` or ``(N,)`` -> scalar int64 tensor.

    The denominator that turns ``reduction="sum"`` losses into a per-token mean over
    several micro-batches or processes.
    """
    require_tensor(targets, "targets", ndim=(1, 2), dtype=(torch.int64, torch.int32))
    return (targets != ignore_index).sum()


def smoothed_target_distribution(
    targets: torch.Tensor, vocab_size: int, smoothing: float = 0.1, pad_id: int = 0
) -> torch.Tensor:
    """The distribution the model is trained towards, one row per target token (Section 5.4).

    Row ``i`` holds ``ε / V`` on every class and ``1 - ε + ε / V`` on ``targets[i]``: the
    convention of ``F.cross_entropy(label_smoothing=ε)``, which spreads ε over all V classes
    including the true one. (The Annotated Transformer and fairseq instead spread ε over
    the V - 1 or V - 2 other classes; the difference is O(ε / V).) Padding rows are all
    zero: they are not trained on. Non-pad rows sum to 1.

    Args:
        targets: ``(B, T)`` or ``(N,)`` token ids.
        vocab_size: V.
        smoothing: ε_ls in [0, 1].
        pad_id: the padding id.

    Returns:
        ``(N, V)`` float tensor with N = B·T.

    Cross-entropy against these rows, averaged over non-pad rows, is
    :func:`label_smoothed_cross_entropy`.
    """
    require_tensor(targets, "targets", ndim=(1, 2), dtype=(torch.int64, torch.int32))
    require_positive_int(vocab_size, "vocab_size")
    smoothing = require_number(smoothing, "smoothing", minimum=0.0, maximum=1.0)
    flat = targets.reshape(-1).long()  # (B, T) -> (N,)
    keep = flat != pad_id
    kept = flat[keep]
    if kept.numel():
        require(int(kept.min()) >= 0 and int(kept.max()) < vocab_size, "targets",
                f"ids in [0, {vocab_size})", f"ids from {int(kept.min())} to {int(kept.max())}")
    dist = torch.full((flat.numel(), vocab_size), smoothing / vocab_size)  # (N, V)
    dist.scatter_add_(1, flat.masked_fill(~keep, 0).unsqueeze(1),
                      torch.full((flat.numel(), 1), 1.0 - smoothing))
    dist[~keep] = 0.0
    return dist


def noam_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The learning rate of Section 5.3, eq. 3, at optimizer step ``step`` (counted from 1).

        lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)

    It rises linearly for ``warmup_steps`` steps, peaks at ``step == warmup_steps`` with
    ``factor · (d_model · warmup_steps)^-0.5``, then decays as step^-0.5. Step 0 (before
    any update) is treated as step 1, so the rate is never 0; a rate that is not a finite
    float (an argument too large for one) is refused.
    """
    require_int(step, "step", minimum=0)
    require_positive_int(d_model, "d_model")
    require_positive_int(warmup_steps, "warmup_steps")
    require_positive_number(factor, "factor")
    step = max(step, 1)
    try:
        rate = factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
    except OverflowError:  # an integer too large for a float
        rate = math.inf
    return require_number(rate, "noam_lr(step, d_model, warmup_steps, factor)")


def make_optimizer(
    model: nn.Module | Iterable[torch.nn.Parameter],
    d_model: int,
    warmup_steps: int,
    factor: float = 1.0,
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam(β1=0.9, β2=0.98, ε=1e-9) with the warmup-then-decay schedule (Section 5.3).

    The optimizer's base lr is 1 and the ``LambdaLR`` multiplier is the absolute rate:
    after ``k`` calls to ``scheduler.step()`` the optimizer's lr is ``noam_lr(k + 1, ...)``,
    the rate of the (k+1)-th update. Call ``optimizer.step()`` then ``scheduler.step()``.
    The schedule's peak, ``noam_lr(warmup_steps, ...)``, must be at most :data:`MAX_LR`
    (Adam's first step, lr / (1 - β1), has to be a float32 number), so no step of the
    schedule can overflow.

    Returns:
        ``(optimizer, scheduler)``.
    """
    noam_lr(1, d_model, warmup_steps, factor)  # validates the arguments
    peak = noam_lr(warmup_steps, d_model, warmup_steps, factor)
    require(peak <= MAX_LR, "factor", "a factor whose peak learning rate factor · (d_model · "
            f"warmup_steps)^-0.5 is at most {MAX_LR:.3g} (Adam's first step lr / (1 - β1) "
            "must be a float32 number)", f"{factor!r} (peak {peak:.3g})")
    params = model.parameters() if isinstance(model, nn.Module) else model
    params = [p for p in params if p.requires_grad]
    require(bool(params), "model", "at least one trainable parameter", "none")
    optimizer = torch.optim.Adam(params, lr=1.0, betas=ADAM_BETAS, eps=1e-9)

    def schedule(completed_steps: int) -> float:
        return noam_lr(completed_steps + 1, d_model, warmup_steps, factor)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    return optimizer, scheduler

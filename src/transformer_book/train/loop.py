"""The training loop: Section 5 of *Attention Is All You Need* (Vaswani et al., 2017).

Section 5.1: "Sentence pairs were batched together by approximate sequence length. Each
training batch contained a set of sentence pairs containing approximately 25000 source
tokens and 25000 target tokens." Section 5.3: Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 and
the warmup-then-inverse-square-root learning rate. Section 5.4: residual dropout and label
smoothing ε_ls = 0.1. Section 6.1: checkpoints are written regularly and the last few
averaged.

:func:`train` runs one configuration end to end: Multi30k -> joint BPE (cached in the run
folder) -> token-budget batches -> teacher-forced steps -> validation loss and greedy BLEU ->
checkpoints -> a JSON record in ``results/``.

Resuming is exact: a checkpoint holds the weights, Adam's moments, the schedule, the step,
the epoch, the position inside the epoch's batch order and every RNG state, so on a CPU an
interrupted and resumed run computes the same losses as an uninterrupted one.

Several processes (``torchrun --nproc_per_node=K -m transformer_book.cli train ...``):
each process takes every K-th batch of the epoch's shuffled list, so **the global batch
is K x ``max_tokens`` (x ``accumulation``) tokens per side** and an epoch has 1/K as many
steps; the learning-rate schedule is unchanged (set ``max_tokens`` per process so that
K x max_tokens is the batch you want). The loss is normalised by the number of target
tokens over all processes and micro-batches. Only rank 0 evaluates and writes checkpoints,
the record and the progress bar. Resuming under DDP restores everything but the
per-process dropout RNG, which is reseeded from (seed, rank, step).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from transformer_book.data.batching import TokenBudgetSampler
from transformer_book.data.tokenizer import PAD_ID
from transformer_book.run.checkpoint import (
    checkpoint_name,
    list_checkpoints,
    prune_checkpoints,
    save_checkpoint,
)
from transformer_book.run.config import RunConfig
from transformer_book.train.corpus import make_batch, prepare_data
from transformer_book.train.objective import label_smoothed_cross_entropy, make_optimizer
from transformer_book.train.resume import RunState, restore_run
from transformer_book.train.runtime import (
    DistInfo,
    all_reduce,
    autocast,
    resolve_precision,
    setup_distributed,
)
from transformer_book.train.validate import validate
from transformer_book.util.env import set_seed
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record
from transformer_book.util.rng import capture_rng_state
from transformer_book.util.validation import fail, require, require_positive_int

__all__ = ["NonFiniteLossError", "TrainingResult", "train"]

class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; the message says where and what to try."""


@dataclass
class TrainingResult:
    """What :func:`train` did.

    ``losses`` holds one ``{"step", "loss", "lr", "tokens"}`` per optimizer step of the
    whole run (resumed parts included); ``evals`` one dict per validation (``step``,
    ``epoch``, ``val_loss``, ``val_nll``, ``val_ppl``, ``bleu``, ``bleu_signature``,
    ``bleu_lowercase_intl``, ...). ``tokens_per_second`` counts source + target tokens of
    this session's training steps over all processes.
    """

    out_dir: Path
    step: int
    epoch: int
    stop_reason: str
    final_checkpoint: Path | None
    record_path: Path | None
    wall_seconds: float
    tokens_per_second: float
    seconds_per_step: float
    losses: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: Path | None = None
    rank: int = 0


def _epoch_chunks(sampler: TokenBudgetSampler, epoch: int, accumulation: int
                  ) -> list[list[list[int]]]:
    """This rank's batches for ``epoch``, grouped ``accumulation`` at a time (one step each)."""
    sampler.set_epoch(epoch)
    batches = list(sampler)
    return [batches[i:i + accumulation] for i in range(0, len(batches), accumulation)]


# ------------------------------------------------------------------------------- train


def _nonfinite_message(value: float, step: int, lr: float, shapes: list[str],
                       last_finite: tuple[int, float] | None) -> str:
    last = (f"the last finite loss was {last_finite[1]:.4f} at step {last_finite[0]}"
            if last_finite else "no finite loss was seen yet")
    return (f"training loss became {value} at step {step} (lr {lr:.3e}, batch shapes "
            f"{', '.join(shapes)}); {last}. Try a lower learning rate ([train] lr_factor or "
            "a longer warmup_steps), gradient clipping ([train] clip_norm), precision = "
            "\"fp32\", and check the data for empty or overlong sentences.")


def _backward(model: nn.Module, batches: list[tuple[torch.Tensor, ...]], scale: float,
              label_smoothing: float, precision: str, device: torch.device, info: DistInfo,
              scaler: torch.amp.GradScaler | None) -> torch.Tensor:
    """Forward and backward over one step's micro-batches (gradient accumulation): each
    ``(src, tgt_in, tgt_out)`` adds the gradient of its summed label-smoothed loss times
    ``scale``. Under DDP only the last micro-batch all-reduces. Returns this process's
    summed loss, a 0-d tensor (no device synchronisation)."""
    loss_sum = torch.zeros((), device=device)
    for j, (src, tgt_in, tgt_out) in enumerate(batches):
        sync = contextlib.nullcontext()
        if info.enabled and j < len(batches) - 1:
            sync = model.no_sync()  # accumulate locally; all-reduce on the last one
        with sync:
            with autocast(precision, device):
                logits = model(src, tgt_in)  # (B, T, V)
            loss = label_smoothed_cross_entropy(logits.float(), tgt_out, label_smoothing,
                                                PAD_ID, reduction="sum")
            scaled = loss * scale
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_sum = loss_sum + loss.detach()
    return loss_sum


def _update(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
            scaler: torch.amp.GradScaler | None, clip_norm: float | None) -> None:
    """One optimizer step: unscale (fp16), clip the gradient norm, step Adam and the
    learning-rate schedule, clear the gradients."""
    if scaler is not None:
        scaler.unscale_(optimizer)
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def train(
    run_config: RunConfig,
    out_dir: str | Path,
    *,
    resume: bool = True,
    progress: bool = True,
    device: torch.device | str | None = None,
    on_eval: Callable[[dict[str, Any]], None] | None = None,
    results_dir: str | Path | None = "results",
    name: str = "run",
    command: list[str] | None = None,
    bleu_sentences: int = 200,
    val_sentences: int | None = None,
) -> TrainingResult:
    """Train a Transformer on Multi30k as ``run_config`` says (Section 5).

    Each optimizer step consumes ``accumulation`` token-budget batches (Section 5.1); the
    decoder reads ``<bos> y`` and is trained to predict ``y <eos>`` (teacher forcing), with
    the label-smoothed loss (Section 5.4) averaged over all target tokens of the step; Adam
    and eq. 3's schedule via :func:`make_optimizer` (Section 5.3); optional gradient
    clipping (``[train] clip_norm``, not in the paper); bf16/fp16 autocast on CUDA.

    Training stops at ``max_steps`` or after ``max_minutes`` of wall time (counted over
    resumed sessions too). Validation loss and greedy BLEU on the first ``bleu_sentences``
    val sentences run every ``eval_every`` steps, at each epoch's end and at the end.
    Checkpoints go to ``out_dir/step_XXXXXXXX`` every ``checkpoint_every`` steps and at
    the end; only the last ``keep_last`` are kept.

    Args:
        run_config: the run (see ``configs/*.toml`` and :func:`load_run_config`).
        out_dir: run folder for the tokenizer and checkpoints.
        resume: continue from the newest checkpoint in ``out_dir`` (exactly); with
            ``False`` an ``out_dir`` that already holds checkpoints is refused.
        progress: show a tqdm bar (loss, lr, tokens/s) on rank 0.
        device: defaults to the best available (``get_device()``); torchrun picks
            ``cuda:LOCAL_RANK``.
        on_eval: called on rank 0 with each evaluation's dict (e.g. to plot live).
        results_dir: where the JSON record goes (``None``: no record).
        name: the config's name, used in the record's file name.
        command: the command line to record (default ``sys.argv``).
        bleu_sentences: how many val sentences greedy BLEU decodes (0: no BLEU).
        val_sentences: use only the first that many val pairs (default: all 1,014).

    Raises:
        NonFiniteLossError: the loss became NaN/inf (nothing is checkpointed from then on).
        ValueError: bad config, incompatible checkpoint, corrupted files.
    """
    require(isinstance(run_config, RunConfig), "run_config", "a RunConfig",
            type(run_config).__name__)
    require_positive_int(bleu_sentences, "bleu_sentences", minimum=0)
    if val_sentences is not None:
        require_positive_int(val_sentences, "val_sentences")
    started = time.perf_counter()
    out_dir = Path(out_dir)
    info, device = setup_distributed(device)
    try:
        return _train(run_config, out_dir, resume, progress, device, on_eval, results_dir,
                      name, command, bleu_sentences, val_sentences, info, started)
    finally:
        if info.enabled and dist.is_initialized():
            dist.destroy_process_group()


def _train(run_config: RunConfig, out_dir: Path, resume: bool, progress: bool,
           device: torch.device, on_eval: Callable[[dict[str, Any]], None] | None,
           results_dir: str | Path | None, name: str, command: list[str] | None,
           bleu_sentences: int, val_sentences: int | None, info: DistInfo, started: float
           ) -> TrainingResult:
    from tqdm.auto import tqdm

    from transformer_book.nn.transformer import Transformer

    t, d = run_config.train, run_config.data
    existing = list_checkpoints(out_dir)
    if existing and not resume:
        raise fail("resume", f"an out folder without checkpoints when not resuming ({out_dir} "
                   "holds some; resume, delete them or choose another folder)",
                   [p.name for p in existing])
    data = prepare_data(run_config, out_dir, is_main=info.is_main, barrier=info.barrier,
                        val_sentences=val_sentences)
    config = run_config.model_config(data.tokenizer.vocab_size)
    precision = resolve_precision(t.precision, device)
    set_seed(t.seed)
    raw_model = Transformer(config).to(device)
    optimizer, scheduler = make_optimizer(raw_model, config.d_model, t.warmup_steps, t.lr_factor)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    sampler = TokenBudgetSampler([len(s) for s in data.train_src], d.max_tokens,
                                 [len(y) + 1 for y in data.train_tgt], shuffle=True,
                                 seed=t.seed, num_replicas=info.world_size, rank=info.rank)
    state = (restore_run(existing[-1], raw_model, optimizer, scheduler, scaler, run_config,
                         config, info.world_size, device) if existing else RunState())
    step, epoch, position = state.step, state.epoch, state.position
    losses, evals, resumed_from = state.losses, state.evals, state.resumed_from
    previous_seconds = state.train_seconds
    if info.enabled:  # different dropout masks per process; same weights (DDP broadcasts)
        torch.manual_seed(t.seed * 1_000_003 + info.rank * 7_919 + step)
    model: nn.Module = raw_model
    if info.enabled:
        model = nn.parallel.DistributedDataParallel(
            raw_model, device_ids=[device.index] if device.type == "cuda" else None)
    model.train()

    def log(message: str) -> None:
        if info.is_main:
            tqdm.write(message) if progress else print(message, flush=True)

    def evaluate(reason: str) -> None:
        if not info.is_main:
            return
        result = {"step": step, "epoch": epoch, "reason": reason,
                  **validate(raw_model, data, run_config, config, device, precision,
                             bleu_sentences)}
        evals.append(result)
        log(f"step {step} ({reason}): val loss {result['val_loss']:.4f}, "
            f"ppl {result['val_ppl']:.2f}, greedy BLEU {result.get('bleu', float('nan')):.2f}")
        if on_eval is not None:
            on_eval(result)

    def checkpoint() -> Path | None:
        if not info.is_main:
            return None
        path = save_checkpoint(
            out_dir / checkpoint_name(step), raw_model,
            config={"model": config.to_dict(), "run": run_config.to_dict()}, step=step,
            tokenizer_path=data.tokenizer_path, optimizer=optimizer, scheduler=scheduler,
            rng_state=capture_rng_state(),
            extra={"epoch": epoch, "position": position, "losses": losses, "evals": evals,
                   "train_seconds": previous_seconds + time.perf_counter() - started,
                   "world_size": info.world_size,
                   "scaler": scaler.state_dict() if scaler is not None else None})
        prune_checkpoints(out_dir, t.keep_last)
        return path

    log(f"{name}: {sum(p.numel() for p in raw_model.parameters()):,} parameters, "
        f"{data.stats['train_kept']:,} training pairs, vocab {config.vocab_size}, {device} "
        f"{precision}, {info.world_size} process(es)"
        + (f", resuming from {resumed_from.name}" if resumed_from else ""))
    bar = tqdm(total=t.max_steps, initial=step, disable=not (progress and info.is_main),
               unit="step", dynamic_ncols=True)
    session_start, session_steps, session_tokens, train_seconds = step, 0, 0, 0.0
    last_finite = (losses[-1]["step"], losses[-1]["loss"]) if losses else None
    last_checkpoint = resumed_from
    last_eval_step = evals[-1]["step"] if evals else None
    stop_reason = "max_steps"

    def out_of_time() -> bool:
        if t.max_minutes is None:
            return False
        elapsed = previous_seconds + time.perf_counter() - started
        flag = torch.tensor([float(elapsed >= 60.0 * t.max_minutes)], device=device)
        return bool(all_reduce(flag, info, dist.ReduceOp.MAX if info.enabled else None) > 0)

    def budget_left() -> bool:
        nonlocal stop_reason
        if t.max_steps is not None and step >= t.max_steps:
            stop_reason = "max_steps"
            return False
        if out_of_time():
            stop_reason = "max_minutes"
            return False
        return True

    chunks = _epoch_chunks(sampler, epoch, t.accumulation)
    while budget_left():
        if position >= sum(len(c) for c in chunks):  # epoch finished (e.g. on resume)
            epoch, position = epoch + 1, 0
            chunks = _epoch_chunks(sampler, epoch, t.accumulation)
        chunk = next(c for i, c in _offsets(chunks) if i == position)
        tick = time.perf_counter()
        batches = [make_batch(data.train_src, data.train_tgt, idx, device) for idx in chunk]
        # Real (non-pad) tokens, counted from the id lists: no device synchronisation.
        local_tokens = sum(len(data.train_tgt[i]) + 1 for idx in chunk for i in idx)
        local_src = sum(len(data.train_src[i]) for idx in chunk for i in idx)
        global_tgt, global_src = float(local_tokens), float(local_src)
        if info.enabled:
            global_tgt, global_src = all_reduce(torch.tensor(
                [global_tgt, global_src], device=device), info).tolist()
        scale = info.world_size / global_tgt  # DDP averages grads: x K / global tokens
        lr = optimizer.param_groups[0]["lr"]
        loss_sum = _backward(model, batches, scale, config.label_smoothing, precision, device,
                             info, scaler)
        global_loss = all_reduce(loss_sum.reshape(1), info)
        value = float(global_loss[0]) / global_tgt  # per target token (one sync per step)
        if not math.isfinite(value):
            shapes = [f"src {tuple(s.shape)} tgt {tuple(o.shape)}" for s, _, o in batches]
            optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(_nonfinite_message(value, step + 1, lr, shapes,
                                                        last_finite))
        _update(raw_model, optimizer, scheduler, scaler, t.clip_norm)
        step += 1
        position += len(chunk)
        step_tokens = int(global_tgt + global_src)  # source + target, all processes
        elapsed = time.perf_counter() - tick
        train_seconds += elapsed
        session_steps += 1
        session_tokens += step_tokens
        losses.append({"step": step, "loss": value, "lr": lr, "tokens": step_tokens})
        last_finite = (step, value)
        bar.update(1)
        bar.set_postfix(loss=f"{value:.3f}", lr=f"{lr:.2e}",
                        tok_s=f"{session_tokens / max(train_seconds, 1e-9):,.0f}", ep=epoch)
        end_of_epoch = position >= sum(len(c) for c in chunks)
        if step % t.eval_every == 0 or end_of_epoch:
            evaluate("end of epoch" if end_of_epoch and step % t.eval_every else "eval_every")
            last_eval_step = step
        if end_of_epoch:
            epoch, position = epoch + 1, 0
            chunks = _epoch_chunks(sampler, epoch, t.accumulation)
        if step % t.checkpoint_every == 0:
            last_checkpoint = checkpoint()
    bar.close()
    if step != last_eval_step and step > 0:
        evaluate("end of training")
    if step > 0 and (last_checkpoint is None or last_checkpoint.name != checkpoint_name(step)):
        last_checkpoint = checkpoint()
    info.barrier()
    wall = time.perf_counter() - started
    tokens_per_second = session_tokens / train_seconds if train_seconds else 0.0
    seconds_per_step = train_seconds / session_steps if session_steps else 0.0
    log(f"stopped at step {step} ({stop_reason}); {session_steps} steps this session, "
        f"{tokens_per_second:,.0f} tokens/s, {seconds_per_step:.3f} s/step, wall {wall:.1f} s")
    record_path = None
    if info.is_main and results_dir is not None:
        record_path = write_record(results_dir, "train", name, {
            "kind": "train",
            "name": name,
            "command": command_line(command),
            "git": git_commit(),
            "hardware": hardware_info(device, info.world_size),
            "config": run_config.to_dict(),
            "model_config": config.to_dict(),
            "num_parameters": sum(p.numel() for p in raw_model.parameters()),
            "precision": precision,
            "world_size": info.world_size,
            "global_batch_tokens_per_side": d.max_tokens * info.world_size * t.accumulation,
            "data": data.stats,
            "out_dir": str(out_dir.resolve()),
            "resumed_from": str(resumed_from) if resumed_from else None,
            "steps": step,
            "session_steps": session_steps,
            "session_start_step": session_start,
            "epoch": epoch,
            "stop_reason": stop_reason,
            "wall_seconds": wall,
            "train_seconds": train_seconds,
            "tokens_per_second": tokens_per_second,
            "seconds_per_step": seconds_per_step,
            "loss_curve": losses,
            "evals": evals,
            "final_checkpoint": str(last_checkpoint) if last_checkpoint else None,
        })
        log(f"record: {record_path}")
    return TrainingResult(out_dir, step, epoch, stop_reason, last_checkpoint, record_path, wall,
                          tokens_per_second, seconds_per_step, losses, evals, resumed_from,
                          info.rank)


def _offsets(chunks: list[list[list[int]]]) -> Iterator[tuple[int, list[list[int]]]]:
    """``(micro-batches before it, chunk)`` for each step's chunk of the epoch."""
    seen = 0
    for chunk in chunks:
        yield seen, chunk
        seen += len(chunk)

"""The training loop: Section 5 of *Attention Is All You Need* (Vaswani et al., 2017).

Section 5.1: "Sentence pairs were batched together by approximate sequence length. Each
training batch contained a set of sentence pairs containing approximately 25000 source
tokens and 25000 target tokens." Section 5.3: Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 and
the warmup-then-inverse-square-root learning rate. Section 5.4: residual dropout and label
smoothing ε_ls = 0.1. Section 6.1: checkpoints are written regularly and the last few
averaged.

:func:`train` runs one configuration end to end: Multi30k -> joint BPE (cached in the run
folder) -> token-budget batches -> teacher-forced steps -> validation loss and greedy BLEU ->
checkpoints -> a JSON record in ``results/``. It is orchestration only: the session (data,
model, optimizer, restored state) is :func:`~transformer_book.train.session.open_session`'s,
each step is :func:`~transformer_book.train.step.train_step`, each evaluation
:func:`~transformer_book.train.validate.validate`.

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

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from transformer_book.run.checkpoint import checkpoint_name, list_checkpoints
from transformer_book.run.config import RunConfig
from transformer_book.train.corpus import epoch_steps, make_step_batch, resegment_train
from transformer_book.train.runtime import all_reduce, setup_distributed
from transformer_book.train.session import (
    Session,
    TrainOptions,
    make_sampler,
    open_session,
    save_session,
)
from transformer_book.train.step import NonFiniteLossError, train_step
from transformer_book.train.validate import validate
from transformer_book.util.env import require_device
from transformer_book.util.files import require_writable
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record
from transformer_book.util.timing import Stopwatch
from transformer_book.util.validation import require

__all__ = ["TrainingResult", "train"]


@dataclass
class TrainingResult:
    """What :func:`train` did.

    ``losses`` holds one ``{"step", "loss", "lr", "tokens"}`` per optimizer step of the
    whole run (resumed parts included); ``evals`` one dict per validation (``step``,
    ``epoch``, ``val_loss``, ``val_nll``, ``val_ppl``, ``bleu``, ``bleu_signature``,
    ``bleu_lowercase_intl``, ...).

    The times, one name each (the checkpoints and the JSON record use the same):
    ``wall_seconds`` is this session's wall-clock time in :func:`train`; ``train_seconds``
    the whole run's, every session of a resumed run included (what ``max_minutes``
    limits); ``step_seconds`` this session's time inside optimizer steps, from which
    ``seconds_per_step`` and ``tokens_per_second`` (source + target tokens of this
    session's steps over all processes) are computed.
    """

    out_dir: Path
    step: int
    epoch: int
    stop_reason: str
    final_checkpoint: Path | None
    record_path: Path | None
    wall_seconds: float
    train_seconds: float
    step_seconds: float
    tokens_per_second: float
    seconds_per_step: float
    losses: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: Path | None = None
    rank: int = 0


def _check_where(out_dir: str | Path, results_dir: str | Path | None) -> None:
    """Refuse folders the run could not write before any work, so nothing is learnt only to
    be lost at the end."""
    require_writable(out_dir, "out_dir")
    if results_dir is not None:
        require_writable(results_dir, "results_dir")


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
    clipping (``[train] clip_norm``, not in the paper); bf16/fp16 autocast on CUDA: each
    step is :func:`~transformer_book.train.step.train_step`.

    Training stops at ``max_steps`` or after ``max_minutes`` of wall time (over resumed
    sessions too). Validation loss and greedy BLEU on the first ``bleu_sentences`` val
    sentences run every ``eval_every`` steps, at each epoch's end and at the end; the
    checkpoints (``out_dir/step_XXXXXXXX``) every ``checkpoint_every`` steps and at the
    end; the last ``keep_last`` and the ``keep_best`` of lowest val loss are kept.

    Args:
        run_config: the run (see ``configs/*.toml`` and :func:`load_run_config`).
        out_dir: run folder for the tokenizer and checkpoints.
        resume: continue from the newest checkpoint in ``out_dir`` (exactly); with
            ``False`` an ``out_dir`` that already holds checkpoints is refused.
        progress: show a tqdm bar (loss, lr, tokens/s) on rank 0.
        device: default ``get_device()``; torchrun picks ``cuda:LOCAL_RANK``.
        on_eval: called on rank 0 with each evaluation's dict (e.g. to plot live).
        results_dir: where the JSON record goes (``None``: no record).
        name: the config's name, in the record's file name; ``command`` is the command
            line it records (default ``sys.argv``).
        bleu_sentences: val sentences greedy BLEU decodes (0: none); ``val_sentences``
            val pairs the loss uses (default: all 1,014).

    Raises:
        NonFiniteLossError: the loss or weights became NaN/inf; their checkpoint is renamed
            ``diverged-step_...``, the record says ``"status": "diverged"`` (``_diverged``).
        BookError: bad config, incompatible checkpoint, corrupted files.
    """
    watch = Stopwatch()  # wall_seconds and train_seconds count from here
    require(isinstance(run_config, RunConfig), "run_config", "a RunConfig",
            type(run_config).__name__)
    options = TrainOptions(resume, progress, on_eval, results_dir, name, command,
                           bleu_sentences, val_sentences)  # checks them
    _check_where(out_dir, results_dir)
    info, device = setup_distributed(None if device is None else require_device(device))
    try:
        return _train(open_session(run_config, Path(out_dir), options, info, device, watch))
    finally:
        if info.enabled and dist.is_initialized():
            dist.destroy_process_group()


def _train(run: Session) -> TrainingResult:
    """The loop: steps until the budget is spent, evaluating and checkpointing on the way."""
    from tqdm.auto import tqdm  # an optional display, imported when training starts

    t = run.run_config.train
    run.bar = tqdm(total=t.max_steps, initial=run.trainer.step, unit="step", dynamic_ncols=True,
                   disable=not (run.options.progress and run.info.is_main))
    # Two lines, each within the book's 88-character code column.
    _log(run, f"{run.options.name}: {run.num_parameters:,} parameters, "
              f"{run.data.stats['train_kept']:,} training pairs, vocab {run.config.vocab_size}")
    _log(run, f"  {run.device} {run.trainer.precision}, {run.info.world_size} process(es)"
              + (f", resuming from {run.resumed_from.name}" if run.resumed_from else ""))
    run.chunks = _epoch_chunks(run)
    try:
        while _budget_left(run):
            if run.position >= _micro_batches(run.chunks):  # epoch finished (e.g. on resume)
                _next_epoch(run)
            _step(run)
            _after_step(run)
        run.bar.close()
        return _finish(run)
    except NonFiniteLossError as error:
        run.bar.close()
        _diverged(run, error)
        raise


def _step(run: Session) -> None:
    """One optimizer step on the next chunk of the epoch, logged and timed."""
    tick = Stopwatch()
    chunk = next(c for i, c in _offsets(run.chunks) if i == run.position)
    batch = make_step_batch(run.data.train_src, run.data.train_tgt, chunk, run.device)
    result = train_step(run.trainer, batch)
    run.position += len(chunk)
    run.step_seconds += tick.seconds
    run.session_steps += 1
    run.session_tokens += result.tokens
    run.losses.append({"step": result.step, "loss": result.loss, "lr": result.lr,
                       "tokens": result.tokens})
    run.bar.update(1)
    run.bar.set_postfix(loss=f"{result.loss:.3f}", lr=f"{result.lr:.2e}",
                        tok_s=f"{run.session_tokens / max(run.step_seconds, 1e-9):,.0f}",
                        ep=run.epoch)


def _after_step(run: Session) -> None:
    """Evaluate every ``eval_every`` steps and at the epoch's end; checkpoint every
    ``checkpoint_every`` steps."""
    t, step = run.run_config.train, run.trainer.step
    end_of_epoch = run.position >= _micro_batches(run.chunks)
    if step % t.eval_every == 0 or end_of_epoch:
        _evaluate(run, "end of epoch" if end_of_epoch and step % t.eval_every else "eval_every")
        run.last_eval_step = step
    if end_of_epoch:
        _next_epoch(run)
    if step % t.checkpoint_every == 0:
        run.last_checkpoint = save_session(run)


def _finish(run: Session) -> TrainingResult:
    """The last evaluation and checkpoint (unless just done), then the result and record."""
    step = run.trainer.step
    evaluated = step > 0 and step != run.last_eval_step
    if evaluated:
        _evaluate(run, "end of training")
    # Saved again if this step's checkpoint came before its evaluation: the checkpoints
    # carry the evaluations that choosing by val (--select best-val) reads.
    if step > 0 and (evaluated or run.last_checkpoint is None
                     or run.last_checkpoint.name != checkpoint_name(step)):
        run.last_checkpoint = save_session(run)
    run.info.barrier()
    result = _result(run, run.last_checkpoint)
    _log(run, f"stopped at step {step} ({run.stop_reason}); {run.session_steps} steps this "
              "session")
    _log(run, f"  {result.tokens_per_second:,.0f} tokens/s, "
              f"{result.seconds_per_step:.3f} s/step, wall {result.wall_seconds:.1f} s")
    if run.info.is_main and run.options.results_dir is not None:
        result.record_path = _write_record(run, result, {"status": "finished"})
        _log(run, f"record: {result.record_path}")
    return result


def _result(run: Session, final_checkpoint: Path | None) -> TrainingResult:
    wall, seconds = run.watch.seconds, run.step_seconds
    return TrainingResult(
        run.out_dir, run.trainer.step, run.epoch, run.stop_reason, final_checkpoint, None,
        wall, run.previous_seconds + wall, seconds,
        run.session_tokens / seconds if seconds else 0.0,
        seconds / run.session_steps if run.session_steps else 0.0,
        run.losses, run.evals, run.resumed_from, run.info.rank)


def _diverged(run: Session, error: NonFiniteLossError) -> None:
    """The loss or the weights broke: the checkpoint holding the weights that broke (if one
    was written at the current step) is set aside, so that resume and translate pick the
    newest checkpoint before it, and the record is written with ``"status": "diverged"``."""
    run.stop_reason = "diverged"
    if not run.info.is_main:
        return
    set_aside = None
    newest = list_checkpoints(run.out_dir)
    if newest and newest[-1].name == checkpoint_name(run.trainer.step):
        set_aside = _set_aside(newest[-1])
        _log(run, f"{newest[-1].name} holds the weights that broke: moved to {set_aside}")
    if run.options.results_dir is None:
        return
    remaining = list_checkpoints(run.out_dir)
    result = _result(run, remaining[-1] if remaining else None)
    last = run.trainer.last_finite
    path = _write_record(run, result, {
        "status": "diverged", "diverged_at_step": error.step,
        "last_finite_loss": {"step": last[0], "loss": last[1]} if last else None,
        "error": str(error), "set_aside_checkpoint": str(set_aside) if set_aside else None})
    _log(run, f"record: {path}")


def _set_aside(checkpoint: Path) -> Path:
    """Rename ``checkpoint`` to ``diverged-<name>`` (``-2``, ``-3``... if taken) in its
    folder: kept for a look, no longer a ``step_*`` checkpoint of the run."""
    target, n = checkpoint.with_name(f"diverged-{checkpoint.name}"), 1
    while target.exists():
        n += 1
        target = checkpoint.with_name(f"diverged-{checkpoint.name}-{n}")
    os.replace(checkpoint, target)
    return target


def _budget_left(run: Session) -> bool:
    """Whether another step fits ``max_steps`` and ``max_minutes``; sets ``stop_reason``."""
    max_steps = run.run_config.train.max_steps
    if max_steps is not None and run.trainer.step >= max_steps:
        run.stop_reason = "max_steps"
        return False
    if _out_of_time(run):
        run.stop_reason = "max_minutes"
        return False
    return True


def _out_of_time(run: Session) -> bool:
    """``max_minutes`` spent (over every session)? Under DDP every process stops together:
    one all-reduce of the flag; on one process no device is involved."""
    minutes = run.run_config.train.max_minutes
    if minutes is None:
        return False
    spent = run.previous_seconds + run.watch.seconds >= 60.0 * minutes
    if not run.info.enabled:
        return spent
    flag = torch.tensor([float(spent)], device=run.device)
    return bool(all_reduce(flag, run.info, dist.ReduceOp.MAX) > 0)


def _next_epoch(run: Session) -> None:
    run.epoch, run.position = run.epoch + 1, 0
    run.chunks = _epoch_chunks(run)


def _epoch_chunks(run: Session) -> list[list[list[int]]]:
    """The epoch's optimizer steps; under BPE-dropout (``[data] bpe_dropout``), on a fresh
    segmentation of the training pairs, batched anew (their lengths changed)."""
    if run.run_config.data.bpe_dropout > 0:
        resegment_train(run.data, run.run_config.data.bpe_dropout)
        run.sampler = make_sampler(run.data, run.run_config, run.info)
    return epoch_steps(run.sampler, run.epoch, run.run_config.train.accumulation)


def _log(run: Session, message: str) -> None:
    if run.info.is_main:
        run.bar.write(message) if run.options.progress else print(message, flush=True)


def _evaluate(run: Session, reason: str) -> None:
    """Validation loss and greedy BLEU (rank 0 only), kept in ``evals`` and logged."""
    if not run.info.is_main:
        return
    result = {"step": run.trainer.step, "epoch": run.epoch, "reason": reason,
              **validate(run.raw_model, run.data, run.run_config, run.config, run.device,
                         run.trainer.precision, run.options.bleu_sentences)}
    run.evals.append(result)
    _log(run, f"step {run.trainer.step} ({reason}): val loss {result['val_loss']:.4f}, "
              f"ppl {result['val_ppl']:.2f}, "
              f"greedy BLEU {result.get('bleu', float('nan')):.2f}")
    if run.options.on_eval is not None:
        run.options.on_eval(result)


def _write_record(run: Session, result: TrainingResult, status: dict[str, Any]) -> Path:
    """The JSON record of this session in ``results_dir`` (Section 6's numbers, with what
    produced them); ``status`` says how it ended (``"finished"``, or ``"diverged"`` with
    where and why)."""
    d, t = run.run_config.data, run.run_config.train
    return write_record(run.options.results_dir, "train", run.options.name, {
        "kind": "train",
        "name": run.options.name,
        **status,
        "command": command_line(run.options.command),
        "git": git_commit(),
        "hardware": hardware_info(run.device, run.info.world_size),
        "config": run.run_config.to_dict(),
        "model_config": run.config.to_dict(),
        "num_parameters": run.num_parameters,
        "precision": run.trainer.precision,
        "world_size": run.info.world_size,
        "global_batch_tokens_per_side": d.max_tokens * run.info.world_size * t.accumulation,
        "data": run.data.stats,
        "out_dir": str(run.out_dir.resolve()),
        "resumed_from": str(run.resumed_from) if run.resumed_from else None,
        "steps": result.step,
        "session_steps": run.session_steps,
        "session_start_step": run.session_start,
        "epoch": result.epoch,
        "stop_reason": result.stop_reason,
        "wall_seconds": result.wall_seconds,
        "train_seconds": result.train_seconds,
        "step_seconds": result.step_seconds,
        "tokens_per_second": result.tokens_per_second,
        "seconds_per_step": result.seconds_per_step,
        "loss_curve": run.losses,
        "evals": run.evals,
        "final_checkpoint": str(result.final_checkpoint) if result.final_checkpoint else None,
    })


def _micro_batches(chunks: list[list[list[int]]]) -> int:
    return sum(len(c) for c in chunks)


def _offsets(chunks: list[list[list[int]]]) -> Iterator[tuple[int, list[list[int]]]]:
    """``(micro-batches before it, chunk)`` for each step's chunk of the epoch."""
    seen = 0
    for chunk in chunks:
        yield seen, chunk
        seen += len(chunk)

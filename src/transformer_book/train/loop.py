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
the epoch, the steps already taken in it and every RNG state, so on a CPU an
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
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from transformer_book.run.checkpoint import checkpoint_name, list_checkpoints
from transformer_book.run.config import RunConfig
from transformer_book.run.start import read_start_manifest, write_start_manifest
from transformer_book.train.corpus import epoch_steps, make_step_batch, resegment_train
from transformer_book.train.runtime import DistInfo, all_reduce, setup_distributed
from transformer_book.train.session import Session, TrainOptions, make_sampler, open_session
from transformer_book.train.step import NonFiniteLossError, train_step
from transformer_book.train.validate import validate
from transformer_book.util.env import require_device
from transformer_book.util.files import require_writable
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record
from transformer_book.util.timing import Stopwatch
from transformer_book.util.validation import bad_input, require

try:  # POSIX; elsewhere two trainings of one folder are not kept apart
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["TrainingResult", "train"]


@dataclass
class TrainingResult:
    """What :func:`train` did.

    ``losses`` holds one ``{"step", "loss", "lr", "tokens"}`` per optimizer update of the
    whole run (resumed parts included); ``evals`` one dict per validation (``step``,
    ``epoch``, ``val_loss``, ``val_nll``, ``val_ppl``, ``bleu``, ``bleu_signature``,
    ``bleu_lowercase_intl``, ...), each with a checkpoint of its step written after it;
    ``skipped_steps`` counts the run's steps whose update the fp16 scaler skipped (in no
    ``step``, ``losses`` or ``max_steps``).

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
    skipped_steps: int = 0


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
    fast: bool = False,
) -> TrainingResult:
    """Train a Transformer on Multi30k as ``run_config`` says (Section 5).

    Each optimizer step consumes ``accumulation`` token-budget batches (Section 5.1); the
    decoder reads ``<bos> y`` and is trained to predict ``y <eos>`` (teacher forcing), with
    the label-smoothed loss (Section 5.4) averaged over all target tokens of the step; Adam
    and eq. 3's schedule via :func:`make_optimizer` (Section 5.3); optional gradient
    clipping (``[train] clip_norm``, not in the paper); bf16/fp16 autocast on CUDA: each
    step is :func:`~transformer_book.train.step.train_step`.

    Training stops after ``max_steps`` optimizer updates (a step the fp16 scaler skips is
    none) or ``max_minutes`` of wall time (over resumed sessions too). Validation loss and
    greedy BLEU on the first ``bleu_sentences`` val sentences run every ``eval_every``
    steps, at each epoch's end and at the end; a checkpoint (``out_dir/step_XXXXXXXX``) is
    written every ``checkpoint_every`` steps and after every evaluation, so that each
    evaluation has the weights it measured; the last ``keep_last`` and the ``keep_best`` of
    lowest val loss are kept (of all the run's evaluations, since each had a checkpoint).

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
        fast: train on the fast paths, one process only: dropout's cheaper masks
            (:func:`~transformer_book.nn.dropout.use_fast_dropout`: the same dropout from
            other random bits, so not the same run as without) and the generator and loss in
            one pass (:mod:`~transformer_book.train.fused_loss`: the same loss). Recorded,
            and a resumed run must say the same.

    Raises:
        NonFiniteLossError: the loss or weights became NaN/inf; their checkpoint is renamed
            ``diverged-step_...``, the record says ``"status": "diverged"``.
        BookError: bad config, incompatible checkpoint, corrupted files.
    """
    watch = Stopwatch()  # wall_seconds and train_seconds count from here
    require(isinstance(run_config, RunConfig), "run_config", "a RunConfig",
            type(run_config).__name__)
    options = TrainOptions(resume=resume, progress=progress, on_eval=on_eval,
                           results_dir=results_dir, name=name, command=command,
                           bleu_sentences=bleu_sentences, val_sentences=val_sentences,
                           fast=fast)
    _check_where(out_dir, results_dir)
    info, device = setup_distributed(None if device is None else require_device(device))
    try:
        with _one_training(Path(out_dir), info):
            return _Loop(open_session(run_config, Path(out_dir), options, info, device,
                                      watch)).run()
    finally:
        if info.enabled and dist.is_initialized():
            dist.destroy_process_group()


@contextlib.contextmanager
def _one_training(out_dir: Path, info: DistInfo) -> Iterator[None]:
    """One training at a time writes a run folder: an exclusive lock on the folder itself
    (on rank 0), taken before its checkpoints are read and held to the end; a second
    training of the same folder is refused at once, where it would overwrite the first's
    checkpoints in silence. A folder made here and left empty (a refusal) is removed."""
    if not info.is_main or fcntl is None:
        yield
        return
    made = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(out_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held: another training writes it now
            raise bad_input("out_dir", "a run folder no other training is writing to",
                            f"{out_dir}, which another training is writing now") from None
        except OSError:  # a file system without locks: unguarded, as without fcntl
            pass
        yield
    finally:
        os.close(descriptor)
        if made:
            with contextlib.suppress(OSError):  # only if it stayed empty
                out_dir.rmdir()


class _Loop:
    """One session's loop over a :class:`Session`: its epochs' batches, the progress bar,
    the session's counters, and the steps, evaluations and checkpoints as methods."""

    def __init__(self, session: Session) -> None:
        from tqdm.auto import tqdm  # an optional display, imported when training starts

        self.session, self.state, self.trainer = session, session.state, session.trainer
        self.sampler = make_sampler(session.data, session.run_config, session.info)
        self.plan = self._epoch_plan()  # this epoch's optimizer steps, as micro-batches
        self.bar = tqdm(total=session.run_config.train.max_steps, initial=self.trainer.step,
                        unit="step", dynamic_ncols=True,
                        disable=not (session.options.progress and session.info.is_main))
        self.step_seconds, self.tokens = 0.0, 0  # this session's, inside optimizer steps
        self.last_checkpoint = session.resumed_from
        evals = self.state.evals
        self.last_eval_step: int | None = evals[-1]["step"] if evals else None
        self.stop_reason = "max_steps"
        self.start: dict[str, Any] | None = None  # the run's start manifest (run/start.py)

    def run(self) -> TrainingResult:
        """Steps until the budget is spent, evaluating and checkpointing on the way."""
        s = self.session
        if s.info.is_main and s.start_step == 0 and s.resumed_from is None:
            # before step 1, never rewritten: what started the run (run/start.py)
            self.start = write_start_manifest(s.out_dir, s.run_config.to_dict(),
                                              hardware_info(s.device, s.info.world_size),
                                              command_line(s.options.command))
        else:
            self.start = read_start_manifest(s.out_dir) if s.info.is_main else None
        # Two lines, each within the book's 88-character code column.
        self._log(f"{s.options.name}: {s.num_parameters:,} parameters, "
                  f"{s.data.stats['train_kept']:,} training pairs, vocab {s.config.vocab_size}")
        self._log(f"  {s.device} {self.trainer.precision}, {s.info.world_size} process(es)"
                  + (f", resuming from {s.resumed_from.name}" if s.resumed_from else ""))
        try:
            while self._budget_left():
                if self._epoch_done():  # e.g. resumed from the checkpoint at an epoch's end
                    self._next_epoch()
                self._after_step(self._step())
            self.bar.close()
            return self._finish()
        except NonFiniteLossError as error:
            self.bar.close()
            self._diverged(error)
            raise

    @property
    def session_steps(self) -> int:
        return self.trainer.step - self.session.start_step

    def _epoch_done(self) -> bool:
        return self.state.steps_into_epoch >= len(self.plan)

    def _step(self) -> bool:
        """One optimizer step on the epoch's next batch, logged and timed; whether it made
        an update (``False``: the fp16 scaler skipped it, the batch is spent all the same
        and its time and tokens count in the throughput)."""
        tick, data = Stopwatch(), self.session.data
        chunk = self.plan[self.state.steps_into_epoch]
        result = train_step(self.trainer, make_step_batch(data.train_src, data.train_tgt,
                                                          chunk, self.session.device))
        self.state.steps_into_epoch += 1
        self.step_seconds += tick.seconds
        self.tokens += result.tokens
        if result.updated:
            self.state.losses.append({"step": result.step, "loss": result.loss,
                                      "lr": result.lr, "tokens": result.tokens})
            self.bar.update(1)
        self.bar.set_postfix(loss=f"{result.loss:.3f}", lr=f"{result.lr:.2e}",
                             tok_s=f"{self.tokens / max(self.step_seconds, 1e-9):,.0f}",
                             ep=self.state.epoch)
        return result.updated

    def _after_step(self, updated: bool) -> None:
        """Evaluate every ``eval_every`` steps and at the epoch's end; checkpoint every
        ``checkpoint_every`` steps and after every evaluation (choosing by val, ``--select
        best-val``, can only pick an evaluated step that has its checkpoint). A skipped
        step (``updated`` false) left the step number, so nothing falls due on it but the
        epoch's end, and a step is evaluated once."""
        t, step = self.session.run_config.train, self.trainer.step
        end_of_epoch = self._epoch_done()
        scheduled = updated and step % t.eval_every == 0
        evaluate = (scheduled or end_of_epoch) and step > 0 and step != self.last_eval_step
        if evaluate:
            self._evaluate("eval_every" if scheduled else "end of epoch")
            self.last_eval_step = step
        if end_of_epoch:
            self._next_epoch()
        if evaluate or (updated and step % t.checkpoint_every == 0):
            self.last_checkpoint = self.session.save()

    def _finish(self) -> TrainingResult:
        """The last evaluation and checkpoint (unless just done), then the result and record."""
        s, step = self.session, self.trainer.step
        evaluated = step > 0 and step != self.last_eval_step
        if evaluated:
            self._evaluate("end of training")
        # Saved after the evaluation: every evaluation has its checkpoint, and the newest
        # carries the evaluations that choosing by val (--select best-val) reads.
        if step > 0 and (evaluated or self.last_checkpoint is None
                         or self.last_checkpoint.name != checkpoint_name(step)):
            self.last_checkpoint = s.save()
        s.info.barrier()
        result = self._result(self.last_checkpoint)
        self._log(f"stopped at step {step} ({self.stop_reason}); {self.session_steps} steps "
                  "this session")
        self._log(f"  {result.tokens_per_second:,.0f} tokens/s, "
                  f"{result.seconds_per_step:.3f} s/step, wall {result.wall_seconds:.1f} s")
        if s.info.is_main and s.options.results_dir is not None:
            result.record_path = self._write_record(result, {"status": "finished"})
            self._log(f"record: {result.record_path}")
        return result

    def _result(self, final_checkpoint: Path | None) -> TrainingResult:
        s, seconds, steps = self.session, self.step_seconds, self.session_steps
        wall = s.watch.seconds  # read once: train_seconds is the earlier sessions' + this
        return TrainingResult(
            out_dir=s.out_dir, step=self.trainer.step, epoch=self.state.epoch,
            stop_reason=self.stop_reason, final_checkpoint=final_checkpoint, record_path=None,
            wall_seconds=wall, train_seconds=s.state.train_seconds + wall, step_seconds=seconds,
            tokens_per_second=self.tokens / seconds if seconds else 0.0,
            seconds_per_step=seconds / steps if steps else 0.0, losses=self.state.losses,
            evals=self.state.evals, resumed_from=s.resumed_from, rank=s.info.rank,
            skipped_steps=self.trainer.skipped_steps)

    def _diverged(self, error: NonFiniteLossError) -> None:
        """The loss or the weights broke: the checkpoint holding the weights that broke (if
        one was written at the current step) is set aside, so that resume and translate pick
        the newest checkpoint before it, and the record is written with ``"status":
        "diverged"``."""
        s = self.session
        self.stop_reason = "diverged"
        if not s.info.is_main:
            return
        set_aside = None
        newest = list_checkpoints(s.out_dir)
        if newest and newest[-1].name == checkpoint_name(self.trainer.step):
            set_aside = _set_aside(newest[-1])
            self._log(f"{newest[-1].name} holds the weights that broke: moved to {set_aside}")
        if s.options.results_dir is None:
            return
        remaining = list_checkpoints(s.out_dir)
        result = self._result(remaining[-1] if remaining else None)
        last = self.trainer.last_finite
        path = self._write_record(result, {
            "status": "diverged", "diverged_at_step": error.step,
            "last_finite_loss": {"step": last[0], "loss": last[1]} if last else None,
            "error": str(error), "set_aside_checkpoint": str(set_aside) if set_aside else None})
        self._log(f"record: {path}")

    def _budget_left(self) -> bool:
        """Whether another step fits ``max_steps`` and ``max_minutes``; sets ``stop_reason``."""
        max_steps = self.session.run_config.train.max_steps
        if max_steps is not None and self.trainer.step >= max_steps:
            self.stop_reason = "max_steps"
            return False
        if self._out_of_time():
            self.stop_reason = "max_minutes"
            return False
        return True

    def _out_of_time(self) -> bool:
        """``max_minutes`` spent (over every session)? Under DDP every process stops
        together: one all-reduce of the flag; on one process no device is involved."""
        s = self.session
        minutes = s.run_config.train.max_minutes
        if minutes is None:
            return False
        spent = s.train_seconds >= 60.0 * minutes
        if not s.info.enabled:
            return spent
        flag = torch.tensor([float(spent)], device=s.device)
        return bool(all_reduce(flag, s.info, dist.ReduceOp.MAX) > 0)

    def _next_epoch(self) -> None:
        self.state.epoch, self.state.steps_into_epoch = self.state.epoch + 1, 0
        self.plan = self._epoch_plan()

    def _epoch_plan(self) -> list[list[list[int]]]:
        """The epoch's optimizer steps; under BPE-dropout (``[data] bpe_dropout``), on a
        fresh segmentation of the training pairs, batched anew (their lengths changed)."""
        s = self.session
        if s.run_config.data.bpe_dropout > 0:
            resegment_train(s.data, s.run_config.data.bpe_dropout)
            self.sampler = make_sampler(s.data, s.run_config, s.info)
        return epoch_steps(self.sampler, self.state.epoch, s.run_config.train.accumulation)

    def _log(self, message: str) -> None:
        if self.session.info.is_main:
            if self.session.options.progress:
                self.bar.write(message)
            else:
                print(message, flush=True)

    def _evaluate(self, reason: str) -> None:
        """Validation loss and greedy BLEU (rank 0 only), kept in ``evals`` and logged."""
        s, step = self.session, self.trainer.step
        if not s.info.is_main:
            return
        result = {"step": step, "epoch": self.state.epoch, "reason": reason,
                  **validate(s.raw_model, s.data, s.run_config, s.config, s.device,
                             self.trainer.precision, s.options.bleu_sentences)}
        self.state.evals.append(result)
        self._log(f"step {step} ({reason}): val loss {result['val_loss']:.4f}, "
                  f"ppl {result['val_ppl']:.2f}, "
                  f"greedy BLEU {result.get('bleu', float('nan')):.2f}")
        if s.options.on_eval is not None:
            s.options.on_eval(result)

    def _write_record(self, result: TrainingResult, status: dict[str, Any]) -> Path:
        """The JSON record of this session in ``results_dir`` (Section 6's numbers, with
        what produced them); ``status`` says how it ended (``"finished"``, or
        ``"diverged"`` with where and why)."""
        s = self.session
        d, t, world = s.run_config.data, s.run_config.train, s.info.world_size
        assert s.options.results_dir is not None, "records are written only with a results_dir"
        return write_record(s.options.results_dir, "train", s.options.name, {
            "kind": "train",
            "name": s.options.name,
            **status,
            "command": command_line(s.options.command),
            "start": self.start,  # the commit and time the run started from (run.json)
            "git": git_commit(),  # the code at this session's end
            "hardware": hardware_info(s.device, world),
            "config": s.run_config.to_dict(),
            "model_config": s.config.to_dict(),
            "num_parameters": s.num_parameters,
            "precision": self.trainer.precision,
            "precision_choice": s.precision_choice.as_record(),
            "fast": s.options.fast,
            "world_size": world,
            "global_batch_tokens_per_side": d.max_tokens * world * t.accumulation,
            "data": s.data.stats,
            "out_dir": str(s.out_dir.resolve()),
            "resumed_from": str(s.resumed_from) if s.resumed_from else None,
            "steps": result.step,
            "skipped_steps": result.skipped_steps,
            "session_steps": self.session_steps,
            "session_start_step": s.start_step,
            "epoch": result.epoch,
            "stop_reason": result.stop_reason,
            "wall_seconds": result.wall_seconds,
            "train_seconds": result.train_seconds,
            "step_seconds": result.step_seconds,
            "tokens_per_second": result.tokens_per_second,
            "seconds_per_step": result.seconds_per_step,
            "loss_curve": self.state.losses,
            "evals": self.state.evals,
            "final_checkpoint": str(result.final_checkpoint) if result.final_checkpoint else None,
        })


def _set_aside(checkpoint: Path) -> Path:
    """Rename ``checkpoint`` to ``diverged-<name>`` (``-2``, ``-3``... if taken) in its
    folder: kept for a look, no longer a ``step_*`` checkpoint of the run."""
    target, n = checkpoint.with_name(f"diverged-{checkpoint.name}"), 1
    while target.exists():
        n += 1
        target = checkpoint.with_name(f"diverged-{checkpoint.name}-{n}")
    os.replace(checkpoint, target)
    return target
